#![allow(unsafe_code)]

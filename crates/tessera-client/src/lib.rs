//! The client library of `tesserad`: plain Rust with no async runtime inside, so that C
//! programs (through a C ABI, next) and an LD_PRELOAD interposer can use it too.
//!
//! - [`proto`]: the control protocol (versioned, length-prefixed JSON frames over a
//!   Unix socket).
//! - [`region`]: the shared-memory data plane (lock-free rings, hybrid spinning).
//! - [`client`]: the [`Client`] API.
#![deny(unsafe_code)]

pub mod client;
pub mod proto;
pub mod region;

pub use client::{Client, ClientError, Completion, Outcome, TaskRequest, TenantOptions};

pub mod flexy;

//! The client library of `tesserad`: plain Rust with no async runtime inside, so that C
//! programs (through the C ABI in [`ffi`]) and, later, an LD_PRELOAD interposer can use
//! it too.
//!
//! - [`proto`]: the control protocol (versioned, length-prefixed JSON frames over a
//!   Unix socket).
//! - [`region`]: the shared-memory data plane (lock-free rings, hybrid spinning).
//! - [`client`]: the [`Client`] API.
//! - [`ffi`]: the C ABI (`include/tessera_client.h`).
#![deny(unsafe_code)]

pub mod client;
pub mod ffi;
pub mod proto;
pub mod region;

pub use client::{
    Client, ClientError, Completion, Outcome, Placement, StatusFilter, TaskRequest, TenantOptions,
};

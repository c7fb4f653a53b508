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
pub mod pod;
pub mod proto;
pub mod region;

/// The node daemon's socket: where the Debian package's tesserad listens (its
/// `/etc/tessera/tesserad.toml`, in systemd's runtime directory `/run/tessera`).
pub const NODE_SOCKET: &str = "/run/tessera/tesserad.sock";

/// A daemon's own socket when its configuration names none: `tesserad.sock` in
/// `runtime_dir` (the caller's `$XDG_RUNTIME_DIR`, private to the user), else in
/// `tessera-<uid>/` of the temporary directory — never in the world-writable temporary
/// directory itself, where another user could create the name first and pose as the
/// daemon. The daemon makes that directory private (0700) and refuses one another
/// user owns.
pub fn per_user_socket(runtime_dir: Option<std::path::PathBuf>) -> std::path::PathBuf {
    match runtime_dir {
        Some(dir) => dir.join("tesserad.sock"),
        None => std::env::temp_dir()
            .join(format!("tessera-{}", rustix::process::geteuid().as_raw()))
            .join("tesserad.sock"),
    }
}

/// Where a client looks for tesserad when not told: the node daemon's socket
/// ([`NODE_SOCKET`]) when one is there — on a node with the service installed every
/// program finds it without flags — else [`per_user_socket`].
pub fn default_socket(runtime_dir: Option<std::path::PathBuf>) -> std::path::PathBuf {
    let node = std::path::Path::new(NODE_SOCKET);
    if node.exists() { node.to_path_buf() } else { per_user_socket(runtime_dir) }
}

pub use client::{
    Client, ClientError, Completion, Outcome, Placement, StatusFilter, TaskRequest, TenantOptions,
};

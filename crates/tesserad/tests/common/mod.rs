//! What the daemon's test binaries share.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

static N: AtomicU32 = AtomicU32::new(0);

/// A daemon of 2 emulated GPUs at 10x under `policy`, with its own socket and ledger
/// in the test's temporary directory.
pub fn config(policy: PolicyName) -> DaemonConfig {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag = format!("{}-{n}", std::process::id());
    let ledger = dir.join(format!("ledger-{tag}"));
    let _ = std::fs::remove_file(&ledger);
    DaemonConfig {
        socket: dir.join(format!("d-{tag}.sock")),
        ledger,
        gpus: 2,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        policy,
        reserve: 1,
        ..DaemonConfig::default()
    }
}

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

/// What the host did besides the test over a stretch of it: the share of the time some
/// runnable task waited for a CPU (`/proc/pressure/cpu`), and the share of the
/// machine's CPU time the hypervisor took from it (`/proc/stat`'s steal), where the
/// kernel reports them. A test that times in real time reads it to tell a slow daemon
/// from a host that did not run it.
#[allow(dead_code)] // (the binaries that time nothing in real time leave it unused)
pub struct HostMeter {
    began: std::time::Instant,
    stall_us: Option<u64>,
    steal: Option<(u64, u64)>,
}

#[allow(dead_code)]
impl HostMeter {
    /// Above this share of the run stalled the host was busy with other work.
    pub const BUSY_STALL: f64 = 0.06;
    /// Above this share of the CPU time stolen the hypervisor did not run the machine
    /// (2026-12-06: 7-26% a second while the daemon's tests ran, 0-1% idle).
    pub const BUSY_STEAL: f64 = 0.05;

    pub fn start() -> HostMeter {
        HostMeter { began: std::time::Instant::now(), stall_us: stall_us(), steal: steal() }
    }

    /// Why the host was too busy for real-time bounds since `start`, if it was.
    pub fn busy(&self) -> Option<String> {
        let stalled = match (self.stall_us, stall_us()) {
            (Some(a), Some(b)) => Some((b - a) as f64 / self.began.elapsed().as_micros() as f64),
            _ => None,
        };
        let stolen = match (self.steal, steal()) {
            (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => {
                Some((s1 - s0) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        eprintln!("HOST: stalled {stalled:?}, stolen {stolen:?}");
        match (stalled, stolen) {
            (Some(s), _) if s > Self::BUSY_STALL => {
                Some(format!("runnable tasks waited for a CPU {:.0}% of the run", 100.0 * s))
            }
            (_, Some(s)) if s > Self::BUSY_STEAL => {
                Some(format!("the hypervisor took {:.0}% of the machine's CPU time", 100.0 * s))
            }
            _ => None,
        }
    }
}

/// Microseconds some runnable task has waited for a CPU since boot.
#[allow(dead_code)]
fn stall_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

/// The machine's stolen CPU time and its whole CPU time since boot, in clock ticks.
#[allow(dead_code)]
fn steal() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> =
        cpu.split_whitespace().skip(1).take(8).filter_map(|v| v.parse().ok()).collect();
    (f.len() == 8).then(|| (f[7], f.iter().sum()))
}

//! The tenant's settings, from the environment (set by `tessera run` or by hand).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TESSERA_SOCKET` | tesserad's socket | the node's `/run/tessera/tesserad.sock` when it exists, else `$XDG_RUNTIME_DIR/tesserad.sock`, else `tesserad.sock` in the temporary directory |
//! | `TESSERA_CLASS` | `user-facing` or `batch` | `batch` |
//! | `TESSERA_SLA_MS` | the user-facing SLA, ms | 200 |
//! | `TESSERA_WEIGHT` | weight for fair sharing | 1 |
//! | `TESSERA_PRIORITY` | priority (0-255) | 0 |
//! | `TESSERA_GPUS` | how many GPUs the daemon places the tenant on (the program sees only those) | 1 |
//! | `TESSERA_MEMORY` | the tenant's memory limit (`4GiB`, `512MiB`, bytes) | none: the GPU's |
//! | `TESSERA_MEMORY_WAIT` | when memory is short: `forever`, `none`, or a wait in ms | `forever` |
//! | `TESSERA_SLICE_MS` | the launch gate's slice: how long the GPU is the tenant's once the daemon's policy grants it | 30 (FairGV's slice for preemptive GPUs) |
//! | `TESSERA_ON_NO_DAEMON` | `fail` (cuInit errors) or `passthrough` (unmanaged, warned) | `fail` |
//! | `TESSERA_CUDA_DRIVER` | the real driver library | `libcuda.so.1` |
//! | `TESSERA_NVML` | the real NVML library | `libnvidia-ml.so.1` |
//! | `TESSERA_CUDA_LOG` | a file to log governed calls and look-ups to | none |
//! | `TESSERA_MIGRATION` | `1`: make the program movable between GPUs (DCUDA §3.4: device allocations become managed, contexts, PTX modules and functions get virtual handles) | off |
//! | `TESSERA_MIGRATE_AT` | `K:D`: move to real device D after K launches (the migration order, until the daemon gives it; implies `TESSERA_MIGRATION=1`) | none |
//! | `TESSERA_KERNEL_SLICING` | `1`: launches of PTX kernels above the threshold run as sub-kernels (FairGV §3.3.2; off until checked on a GPU, issue 58) | off |
//! | `TESSERA_KERNEL_SLICE_MIN_BLOCKS` | launches of more blocks than this are sliced | 360000 (600 × 600) |
//! | `TESSERA_KERNEL_SLICE_BLOCKS` | blocks per sub-kernel (instead of a number per multiprocessor) | none |
//! | `TESSERA_KERNEL_SLICE_BLOCKS_PER_SM` | blocks per sub-kernel per multiprocessor of the launch's GPU, rounded up | 62.5 (FairGV's 1,500 on its 24-SM TitanX; 3.1-3.3% slowdown on an H200, issue 58) |
//! | `TESSERA_SLURM_JOB` | the Slurm job to register under (exported by `tessera slurm task-prolog`): the daemon gives the tenant the job's GPUs, weight, class and memory | none |
//! | `TESSERA_TOKEN` | the Kubernetes allocation to register under (put in the container by `tessera k8s device-plugin`): the daemon gives the tenant the allocation's GPU, weight and memory, and refuses a token it did not give | none |

use std::path::PathBuf;
use std::time::Duration;

/// Blocks per sub-kernel per multiprocessor when nothing says otherwise
/// ([`tessera_ptx::BLOCKS_PER_SM`], with its reason).
pub const SLICE_BLOCKS_PER_SM: f64 = tessera_ptx::BLOCKS_PER_SM;

/// How big a sub-kernel is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SliceSize {
    /// This many blocks (`TESSERA_KERNEL_SLICE_BLOCKS`).
    Blocks(u32),
    /// This many blocks per multiprocessor of the GPU the launch runs on, rounded up
    /// (`TESSERA_KERNEL_SLICE_BLOCKS_PER_SM`).
    PerSm(f64),
}

impl SliceSize {
    /// Blocks per sub-kernel on a GPU of `sms` multiprocessors (at least 1).
    pub fn blocks(self, sms: u32) -> u32 {
        match self {
            SliceSize::Blocks(b) => b.max(1),
            SliceSize::PerSm(per) => tessera_ptx::blocks_per_sm(per, sms),
        }
    }
}

/// Kernel slicing's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelSlicing {
    /// Launches of more blocks than this are sliced (FairGV: 600 × 600).
    pub min_grid_blocks: u64,
    /// The sub-kernels' size.
    pub size: SliceSize,
}

impl KernelSlicing {
    /// The plan's settings on a GPU of `sms` multiprocessors.
    pub fn on(self, sms: u32) -> tessera_ptx::SliceConfig {
        tessera_ptx::SliceConfig {
            min_grid_blocks: self.min_grid_blocks,
            blocks_per_slice: self.size.blocks(sms),
        }
    }
}

/// A setting is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{variable}={value:?}: {expected}")]
pub struct ConfigError {
    /// The variable.
    pub variable: &'static str,
    /// What it held.
    pub value: String,
    /// What it should hold.
    pub expected: &'static str,
}

/// The tenant's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Latency-critical, with an SLA.
    UserFacing,
    /// Throughput.
    Batch,
}

/// How an allocation waits when the ledger has no room now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryWait {
    /// Until granted (schedGPU's behaviour: a neighbour's free lets it go on).
    Forever,
    /// Fail at once with `CUDA_ERROR_OUT_OF_MEMORY`.
    NoWait,
    /// Up to this long.
    Timeout(Duration),
}

/// Without a daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnNoDaemon {
    /// `cuInit` fails.
    Fail,
    /// Run unmanaged (no tenant, no ledger), with a warning.
    Passthrough,
}

/// Everything the environment says.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// tesserad's socket.
    pub socket: PathBuf,
    /// Class.
    pub class: Class,
    /// SLA (user-facing).
    pub sla: Duration,
    /// Weight.
    pub weight: u32,
    /// Priority.
    pub priority: u8,
    /// GPUs to be placed on.
    pub gpus: u32,
    /// Memory limit, bytes.
    pub memory: Option<u64>,
    /// How allocations wait.
    pub wait: MemoryWait,
    /// The launch gate's slice.
    pub slice: Duration,
    /// Without a daemon.
    pub on_no_daemon: OnNoDaemon,
    /// The real driver.
    pub driver: PathBuf,
    /// The real NVML (`TESSERA_NVML`).
    pub nvml: PathBuf,
    /// Log file.
    pub log: Option<PathBuf>,
    /// Movable between GPUs (`TESSERA_MIGRATION`).
    pub migration: bool,
    /// Move to real device `.1` after `.0` launches (`TESSERA_MIGRATE_AT`).
    pub migrate_at: Option<(u64, i32)>,
    /// Kernel slicing, when on (`TESSERA_KERNEL_SLICING` and its sizes).
    pub kernel_slicing: Option<KernelSlicing>,
    /// The Slurm job to register under (`TESSERA_SLURM_JOB`).
    pub slurm_job: Option<u64>,
    /// The Kubernetes allocation to register under (`TESSERA_TOKEN`).
    pub token: Option<tessera_client::pod::Token>,
}

/// Parse a byte size, in tessera's one size syntax (see `tessera_core::Bytes`).
pub fn parse_bytes(s: &str) -> Option<u64> {
    s.parse::<tessera_core::Bytes>().ok().map(|b| b.0)
}

impl Config {
    /// Read the settings with `get` (the environment, or a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        fn bad(variable: &'static str, value: &str, expected: &'static str) -> ConfigError {
            ConfigError { variable, value: value.into(), expected }
        }
        let class = match get("TESSERA_CLASS").as_deref() {
            None | Some("batch") => Class::Batch,
            Some("user-facing" | "user_facing") => Class::UserFacing,
            Some(v) => return Err(bad("TESSERA_CLASS", v, "user-facing or batch")),
        };
        let sla_ms = match get("TESSERA_SLA_MS") {
            None => 200,
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .ok_or_else(|| bad("TESSERA_SLA_MS", &v, "a positive number of ms"))?,
        };
        let weight = match get("TESSERA_WEIGHT") {
            None => 1,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|w| (1..=1000).contains(w))
                .ok_or_else(|| bad("TESSERA_WEIGHT", &v, "an integer from 1 to 1000"))?,
        };
        let priority = match get("TESSERA_PRIORITY") {
            None => 0,
            Some(v) => v.parse::<u8>().map_err(|_| bad("TESSERA_PRIORITY", &v, "0 to 255"))?,
        };
        let gpus = match get("TESSERA_GPUS") {
            None => 1,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| bad("TESSERA_GPUS", &v, "1 to 64"))?,
        };
        let memory = match get("TESSERA_MEMORY") {
            None => None,
            Some(v) => Some(
                parse_bytes(&v)
                    .filter(|b| *b > 0)
                    .ok_or_else(|| bad("TESSERA_MEMORY", &v, "a size such as 4GiB or 512MiB"))?,
            ),
        };
        let wait = match get("TESSERA_MEMORY_WAIT").as_deref() {
            None | Some("forever") => MemoryWait::Forever,
            Some("none") => MemoryWait::NoWait,
            Some(v) => MemoryWait::Timeout(Duration::from_millis(
                v.parse::<u64>()
                    .map_err(|_| bad("TESSERA_MEMORY_WAIT", v, "forever, none or a wait in ms"))?,
            )),
        };
        let slice_ms = match get("TESSERA_SLICE_MS") {
            None => 30,
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=10_000).contains(ms))
                .ok_or_else(|| bad("TESSERA_SLICE_MS", &v, "1 to 10000 ms"))?,
        };
        let on_no_daemon = match get("TESSERA_ON_NO_DAEMON").as_deref() {
            None | Some("fail") => OnNoDaemon::Fail,
            Some("passthrough") => OnNoDaemon::Passthrough,
            Some(v) => return Err(bad("TESSERA_ON_NO_DAEMON", v, "fail or passthrough")),
        };
        let kernel_slicing = match get("TESSERA_KERNEL_SLICING").as_deref() {
            None | Some("0") => None,
            Some("1") => {
                let defaults = tessera_ptx::SliceConfig::default();
                let min_grid_blocks = match get("TESSERA_KERNEL_SLICE_MIN_BLOCKS") {
                    None => defaults.min_grid_blocks,
                    Some(v) => v.parse::<u64>().map_err(|_| {
                        bad("TESSERA_KERNEL_SLICE_MIN_BLOCKS", &v, "a number of blocks")
                    })?,
                };
                let per_sm = get("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM");
                let size = match (get("TESSERA_KERNEL_SLICE_BLOCKS"), per_sm) {
                    (Some(_), Some(v)) => {
                        return Err(bad(
                            "TESSERA_KERNEL_SLICE_BLOCKS_PER_SM",
                            &v,
                            "unset when TESSERA_KERNEL_SLICE_BLOCKS is set (one size or the other)",
                        ));
                    }
                    (Some(v), None) => {
                        SliceSize::Blocks(v.parse::<u32>().ok().filter(|b| *b > 0).ok_or_else(
                            || bad("TESSERA_KERNEL_SLICE_BLOCKS", &v, "a positive number of blocks"),
                        )?)
                    }
                    (None, Some(v)) => SliceSize::PerSm(
                        v.parse::<f64>()
                            .ok()
                            .filter(|b| b.is_finite() && *b > 0.0 && *b <= 1e6)
                            .ok_or_else(|| {
                                bad(
                                    "TESSERA_KERNEL_SLICE_BLOCKS_PER_SM",
                                    &v,
                                    "a positive number of blocks per multiprocessor (up to a million)",
                                )
                            })?,
                    ),
                    (None, None) => SliceSize::PerSm(SLICE_BLOCKS_PER_SM),
                };
                Some(KernelSlicing { min_grid_blocks, size })
            }
            Some(v) => return Err(bad("TESSERA_KERNEL_SLICING", v, "1 (on) or 0 (off)")),
        };
        let slurm_job = match get("TESSERA_SLURM_JOB") {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad("TESSERA_SLURM_JOB", &v, "a Slurm job id"))?,
            ),
        };
        // the value is a secret: a bad one is not repeated in the message
        let token = match get("TESSERA_TOKEN") {
            None => None,
            Some(v) => Some(v.parse().map_err(|_| {
                bad("TESSERA_TOKEN", "(not shown)", "32 hex digits, as the device plugin gives")
            })?),
        };
        let migrate_at = match get("TESSERA_MIGRATE_AT") {
            None => None,
            Some(v) => {
                let parsed = v.split_once(':').and_then(|(k, d)| {
                    Some((k.trim().parse::<u64>().ok()?, d.trim().parse::<i32>().ok()?))
                });
                match parsed {
                    Some((k, d)) if d >= 0 => Some((k, d)),
                    _ => {
                        return Err(bad(
                            "TESSERA_MIGRATE_AT",
                            &v,
                            "LAUNCHES:DEVICE, e.g. 10:1 (a real device ordinal)",
                        ));
                    }
                }
            }
        };
        Ok(Config {
            socket: get("TESSERA_SOCKET").map_or_else(
                || tessera_client::default_socket(get("XDG_RUNTIME_DIR").map(PathBuf::from)),
                PathBuf::from,
            ),
            class,
            sla: Duration::from_millis(sla_ms),
            weight,
            priority,
            gpus,
            memory,
            wait,
            slice: Duration::from_millis(slice_ms),
            on_no_daemon,
            driver: get("TESSERA_CUDA_DRIVER")
                .map_or_else(|| PathBuf::from("libcuda.so.1"), PathBuf::from),
            nvml: get("TESSERA_NVML")
                .map_or_else(|| PathBuf::from("libnvidia-ml.so.1"), PathBuf::from),
            log: get("TESSERA_CUDA_LOG").map(PathBuf::from),
            migration: match get("TESSERA_MIGRATION").as_deref() {
                None | Some("0") => migrate_at.is_some(),
                Some("1") => true,
                Some(v) => return Err(bad("TESSERA_MIGRATION", v, "0 or 1")),
            },
            migrate_at,
            kernel_slicing,
            slurm_job,
            token,
        })
    }

    /// Read the settings from the process's environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_values_are_read_and_bad_values_named() {
        let c = with(&[]).unwrap();
        assert_eq!(
            (c.class, c.weight, c.memory, c.wait),
            (Class::Batch, 1, None, MemoryWait::Forever)
        );
        let c = with(&[
            ("TESSERA_CLASS", "user-facing"),
            ("TESSERA_SLA_MS", "50"),
            ("TESSERA_MEMORY", "512MiB"),
            ("TESSERA_MEMORY_WAIT", "250"),
        ])
        .unwrap();
        assert_eq!(c.class, Class::UserFacing);
        assert_eq!(c.memory, Some(512 << 20));
        assert_eq!(c.wait, MemoryWait::Timeout(Duration::from_millis(250)));
        let e = with(&[("TESSERA_MEMORY", "lots")]).unwrap_err();
        assert_eq!(e.variable, "TESSERA_MEMORY");
        assert!(with(&[("TESSERA_ON_NO_DAEMON", "maybe")]).is_err());
        assert!(with(&[("TESSERA_WEIGHT", "0")]).is_err());
        assert_eq!(parse_bytes("4GiB"), Some(4 << 30));
        assert_eq!(parse_bytes("18446744073709551615T"), None, "overflow is refused");
    }

    /// Slicing's size is per multiprocessor unless a number of blocks is given; both
    /// at once, or a size that is not a positive number, is refused by name.
    #[test]
    fn slicings_size_is_per_multiprocessor_unless_blocks_are_given() {
        let on = ("TESSERA_KERNEL_SLICING", "1");
        assert_eq!(with(&[]).unwrap().kernel_slicing, None, "off by default");
        let c = with(&[on]).unwrap().kernel_slicing.unwrap();
        assert_eq!(c.min_grid_blocks, 600 * 600);
        assert_eq!(c.size, SliceSize::PerSm(SLICE_BLOCKS_PER_SM));
        assert_eq!(c.on(24).blocks_per_slice, 1_500, "FairGV's on its TitanX");
        let c = with(&[on, ("TESSERA_KERNEL_SLICE_BLOCKS", "700")]).unwrap();
        assert_eq!(c.kernel_slicing.unwrap().size, SliceSize::Blocks(700));
        let c = with(&[on, ("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", "31.25")]).unwrap();
        assert_eq!(c.kernel_slicing.unwrap().on(132).blocks_per_slice, 4_125);
        let both = [
            on,
            ("TESSERA_KERNEL_SLICE_BLOCKS", "700"),
            ("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", "10"),
        ];
        assert_eq!(with(&both).unwrap_err().variable, "TESSERA_KERNEL_SLICE_BLOCKS_PER_SM");
        for bad in ["0", "-1", "NaN", "inf", "lots"] {
            let e = with(&[on, ("TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", bad)]).unwrap_err();
            assert_eq!(e.variable, "TESSERA_KERNEL_SLICE_BLOCKS_PER_SM", "{bad}");
        }
    }
}

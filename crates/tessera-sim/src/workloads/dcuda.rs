//! DCUDA §4.1's workload: its twenty benchmark applications (Table 1), submitted one
//! every few seconds in a random order, each a tenant running its work to the end.
//! The paper publishes only the names and "about 30 s alone"; the phase structure,
//! launch shape, registers, synchronisation granularity and memory of each are ours,
//! derived from the benchmark's source, and kept in one data file
//! (`data/dcuda/apps.csv`, whose header explains them).
//!
//! Each application is a program looping over CPU work and one kernel launch: a task
//! is the kernel (its launch shape and registers given, so that the block model places
//! its blocks), and the kernel's CPU phase is the rest of the loop. How the loop
//! divides between the two (its duty cycle) is not in the file: it follows from one
//! iteration of the benchmark's own main loop — the time the GPU waits for the host
//! (`host_us`) and the time its kernels run alone (`kernel_us`), each derived from the
//! source's sizes at stated rates (issue 57, item 7: before, the duty was solved
//! backwards from a demand we wanted each application to have). The demand the
//! monitor sees is not in the file: the launch's occupancy on a 1080 Ti
//! ([`tessera_gpu::occupancy`], what the interposer computes with
//! `cuOccupancyMaxActiveBlocksPerMultiprocessor`) rides on each task, and the monitor
//! weights it by the time the application's kernels run.

use crate::workload::{Job, Kernel, Submission, Workload};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use tessera_core::{Bytes, LaunchInfo, Nanos, PerMille, ServiceClass, TenantId, TenantSpec};
use tessera_gpu::occupancy::{Launch, SmLimits, occupancy};

/// The data file, compiled in so that the experiment runs from any directory.
pub const APPS_CSV: &str = include_str!("../../../../data/dcuda/apps.csv");

/// One application of Table 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct App {
    /// Table 1's number.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// CUDA Samples, SHOC or TensorFlow.
    pub suite: String,
    /// Run time alone, seconds.
    pub solo_s: f64,
    /// One iteration of its own main loop: the time the GPU waits for the host
    /// (synchronous copies, host work between dependent kernels, a framework's per-step
    /// overhead; 0 where the host launches ahead of the GPU), µs.
    pub host_us: f64,
    /// One iteration of its own main loop: its kernels' time alone on a 1080 Ti, µs.
    pub kernel_us: f64,
    /// Launch shape: blocks.
    pub grid: u64,
    /// Launch shape: threads per block.
    pub block: u32,
    /// Registers per thread.
    pub registers: u32,
    /// Work between two synchronisations, ms.
    pub chunk_ms: u64,
    /// Device memory, MiB.
    pub memory_mib: u64,
    /// Why these numbers.
    pub why: String,
}

/// A malformed data file.
#[derive(Debug, thiserror::Error)]
pub enum AppsError {
    /// A line has the wrong number of fields.
    #[error("line {line}: expected 12 comma-separated fields, found {found}")]
    Fields {
        /// 1-based line number.
        line: usize,
        /// How many.
        found: usize,
    },
    /// A field is not a number in range.
    #[error("line {line}: field `{field}` = {value:?} is not valid")]
    Field {
        /// 1-based line number.
        line: usize,
        /// Its name.
        field: &'static str,
        /// What was there.
        value: String,
    },
    /// The file holds no application.
    #[error("no applications")]
    Empty,
}

/// Parse the data file: `#` lines are comments; the last field (why) may hold commas.
pub fn parse_apps(text: &str) -> Result<Vec<App>, AppsError> {
    let mut apps = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let s = raw.trim();
        if s.is_empty() || s.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = s.splitn(12, ',').map(str::trim).collect();
        if f.len() != 12 {
            return Err(AppsError::Fields { line, found: f.len() });
        }
        let bad = |field: &'static str, value: &str| AppsError::Field {
            line,
            field,
            value: value.to_string(),
        };
        let solo_s: f64 = f[3].parse().map_err(|_| bad("solo_s", f[3]))?;
        let host_us: f64 = f[4].parse().map_err(|_| bad("host_us", f[4]))?;
        let kernel_us: f64 = f[5].parse().map_err(|_| bad("kernel_us", f[5]))?;
        let grid: u64 = f[6].parse().map_err(|_| bad("grid", f[6]))?;
        let block: u32 = f[7].parse().map_err(|_| bad("block", f[7]))?;
        let registers: u32 = f[8].parse().map_err(|_| bad("registers", f[8]))?;
        let chunk_ms: u64 = f[9].parse().map_err(|_| bad("chunk_ms", f[9]))?;
        if !(solo_s > 0.0 && solo_s.is_finite()) {
            return Err(bad("solo_s", f[3]));
        }
        if !(host_us >= 0.0 && host_us.is_finite()) {
            return Err(bad("host_us", f[4]));
        }
        // an application with no kernel time is not a GPU application
        if !(kernel_us > 0.0 && kernel_us.is_finite()) {
            return Err(bad("kernel_us", f[5]));
        }
        if chunk_ms == 0 {
            return Err(bad("chunk_ms", f[9]));
        }
        // a shape that cannot run on the GPU is refused here, not in the middle of a run
        if grid == 0 || occupancy(&launch(grid, block, registers), &GTX_1080_TI).blocks_per_sm == 0
        {
            return Err(bad("grid,block,registers", &f[6..9].join(",")));
        }
        apps.push(App {
            id: f[0].parse().map_err(|_| bad("id", f[0]))?,
            name: f[1].to_string(),
            suite: f[2].to_string(),
            solo_s,
            host_us,
            kernel_us,
            grid,
            block,
            registers,
            chunk_ms,
            memory_mib: f[10].parse().map_err(|_| bad("memory_mib", f[10]))?,
            why: f[11].to_string(),
        });
    }
    if apps.is_empty() {
        return Err(AppsError::Empty);
    }
    Ok(apps)
}

/// The paper's GPU (§4.1: GeForce GTX 1080 Ti).
pub const GTX_1080_TI: SmLimits = SmLimits::GTX_1080_TI;

fn launch(grid: u64, block: u32, registers: u32) -> Launch {
    Launch {
        grid_blocks: grid,
        threads_per_block: block,
        registers_per_thread: registers,
        shared_per_block: 0,
    }
}

impl App {
    /// Its kernel's occupancy demand on a 1080 Ti: the share of the block slots its
    /// grid fills (0..=1).
    pub fn kernel_demand(&self) -> f64 {
        occupancy(&launch(self.grid, self.block, self.registers), &GTX_1080_TI).demand
    }

    /// The share of its run time inside kernels (0..=1], from one iteration of its
    /// own loop: kernel time over kernel and host time.
    pub fn duty(&self) -> f64 {
        self.kernel_us / (self.kernel_us + self.host_us)
    }

    /// Its mean demand alone: kernel demand times the share of time in kernels.
    pub fn mean_demand(&self) -> f64 {
        self.kernel_demand() * self.duty()
    }

    /// One modelled loop iteration (a chunk of `chunk_ms`: the benchmark's own
    /// iterations taken together, the migration granularity): its kernel time and CPU
    /// time, in the proportion of one iteration of the benchmark's loop.
    fn iteration(&self) -> (Nanos, Nanos) {
        let chunk = Nanos::from_millis(self.chunk_ms);
        let gpu = Nanos((chunk.0 as f64 * self.duty()).round() as u64).max(Nanos(1));
        (gpu, chunk - gpu.min(chunk))
    }
}

/// The `k`-th random arrival order of `n` applications (seeded, reproducible).
pub fn arrival_order(n: usize, seed: u64, k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Pcg64::seed_from_u64(seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    order.shuffle(&mut rng);
    order
}

/// The workload: application `order[i]` arrives at `i * interval`; each is a tenant
/// (batch class, its memory declared) looping over CPU work and a kernel until its
/// solo run time is used up (the last iteration shortened). Kernel `j` is application
/// `j`'s.
pub fn workload(apps: &[App], order: &[usize], interval: Nanos) -> Workload {
    let kernels = apps
        .iter()
        .map(|a| (a, a.iteration()))
        .map(|(a, (gpu, cpu))| Kernel {
            name: a.name.clone(),
            mean: gpu,
            launch: Some(LaunchInfo {
                grid_blocks: a.grid,
                threads_per_block: a.block,
                demand: PerMille((a.kernel_demand() * 1000.0).round() as u16),
            }),
            registers_per_thread: a.registers,
            cpu_per_launch: cpu,
            host_per_task: Nanos::ZERO,
        })
        .collect();
    let jobs = order
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let app = &apps[a];
            let solo = Nanos((app.solo_s * 1e9).round() as u64);
            let chunk = Nanos::from_millis(app.chunk_ms);
            let (gpu, cpu) = app.iteration();
            let mut tasks = vec![gpu; (solo.0 / chunk.0) as usize];
            // the last iteration's CPU phase comes first, as every other's: what is
            // left of the solo time after it is its kernel
            let rest = (solo.0 % chunk.0).saturating_sub(cpu.0);
            if rest > 0 {
                tasks.push(Nanos(rest));
            }
            Job {
                arrival: Nanos(interval.0 * i as u64),
                tenant: TenantSpec {
                    memory: Bytes::mib(app.memory_mib),
                    ..TenantSpec::new(TenantId(i as u64 + 1), ServiceClass::Batch)
                },
                kernel: a as u32,
                tasks,
                window: 1,
                submission: Submission::Window,
                arrivals: Vec::new(),
                background: false,
            }
        })
        .collect();
    Workload { kernels, jobs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_file_parses_and_bad_lines_are_typed_errors() {
        let apps = parse_apps(APPS_CSV).unwrap();
        assert_eq!(apps.len(), 20);
        assert_eq!(apps[0].name, "MatrixMul");
        assert!(apps.iter().all(|a| (24.0..=36.0).contains(&a.solo_s)));
        assert!(matches!(parse_apps("1,a,b,30,500"), Err(AppsError::Fields { line: 1, .. })));
        assert!(matches!(
            parse_apps("1,a,b,30,10,0,1,32,32,50,1,why"),
            Err(AppsError::Field { field: "kernel_us", .. })
        ));
        assert!(matches!(
            parse_apps("1,a,b,30,-1,10,1,32,32,50,1,why"),
            Err(AppsError::Field { field: "host_us", .. })
        ));
        assert!(matches!(
            parse_apps("1,a,b,30,NaN,10,1,32,32,50,1,why"),
            Err(AppsError::Field { field: "host_us", .. })
        ));
        // 1024 threads of 255 registers fit on no SM
        assert!(matches!(
            parse_apps("1,a,b,30,0,500,1,1024,255,50,1,why"),
            Err(AppsError::Field { field: "grid,block,registers", .. })
        ));
        // a why with commas is one field
        let one = parse_apps("1,a,b,30,25,75,1,32,32,50,1,x, y, z").unwrap();
        assert_eq!(one[0].why, "x, y, z");
        assert_eq!(one[0].duty(), 0.75);
        assert!(matches!(parse_apps("# only a comment\n"), Err(AppsError::Empty)));
    }

    /// Issue 57, item 7: an application's duty cycle is not in the data file; it
    /// follows from one iteration of its own loop (host and kernel time), and the
    /// workload's kernels and CPU phases keep that proportion.
    #[test]
    fn each_apps_duty_follows_from_its_loops_host_and_kernel_time() {
        let apps = parse_apps(APPS_CSV).unwrap();
        let header = APPS_CSV.lines().rfind(|l| l.starts_with("# id,")).unwrap();
        assert!(!header.contains("duty"), "a duty column in the data file: {header}");
        let w = workload(&apps, &(0..apps.len()).collect::<Vec<_>>(), Nanos::from_secs(5));
        for (a, k) in apps.iter().zip(&w.kernels) {
            let want = a.kernel_us / (a.kernel_us + a.host_us);
            let got = k.mean.0 as f64 / (k.mean.0 + k.cpu_per_launch.0) as f64;
            assert!(
                (got - want).abs() < 1e-6,
                "{}: {got} of the loop in kernels, want {want}",
                a.name
            );
            assert_eq!(k.mean + k.cpu_per_launch, Nanos::from_millis(a.chunk_ms), "{}", a.name);
        }
    }

    #[test]
    fn the_workload_runs_each_app_for_its_solo_time() {
        let apps = parse_apps(APPS_CSV).unwrap();
        let order = arrival_order(apps.len(), 7, 3);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        let w = workload(&apps, &order, Nanos::from_secs(5));
        assert_eq!(w.jobs[3].arrival, Nanos::from_secs(15));
        for j in &w.jobs {
            // kernels plus one CPU phase before each: the solo time
            let app = &apps[j.kernel as usize];
            let cpu = w.kernels[j.kernel as usize].cpu_per_launch.0 * j.tasks.len() as u64;
            let total: u64 = j.tasks.iter().map(|t| t.0).sum::<u64>() + cpu;
            assert_eq!(total, (app.solo_s * 1e9).round() as u64, "{}", app.name);
        }
    }
}

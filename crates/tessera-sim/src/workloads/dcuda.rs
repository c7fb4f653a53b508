//! DCUDA §4.1's workload: its twenty benchmark applications (Table 1), submitted one
//! every few seconds in a random order, each a tenant running its work to the end.
//! The paper publishes only the names and "about 30 s alone"; the demand, launch shape,
//! synchronisation granularity and memory of each are ours, derived from what the
//! benchmark is, and kept in one data file (`data/dcuda/apps.csv`, whose header
//! explains them).

use crate::workload::{Job, Kernel, Submission, Workload};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use tessera_core::{Bytes, LaunchInfo, Nanos, PerMille, ServiceClass, TenantId, TenantSpec};

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
    /// Share of the GPU's cores its kernels occupy alone, per mille.
    pub demand: u16,
    /// Launch shape: blocks.
    pub grid: u64,
    /// Launch shape: threads per block.
    pub block: u32,
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
    #[error("line {line}: expected 10 comma-separated fields, found {found}")]
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
        let f: Vec<&str> = s.splitn(10, ',').map(str::trim).collect();
        if f.len() != 10 {
            return Err(AppsError::Fields { line, found: f.len() });
        }
        let bad = |field: &'static str, value: &str| AppsError::Field {
            line,
            field,
            value: value.to_string(),
        };
        let solo_s: f64 = f[3].parse().map_err(|_| bad("solo_s", f[3]))?;
        let demand: u16 = f[4].parse().map_err(|_| bad("demand", f[4]))?;
        let chunk_ms: u64 = f[7].parse().map_err(|_| bad("chunk_ms", f[7]))?;
        if !(solo_s > 0.0 && solo_s.is_finite()) {
            return Err(bad("solo_s", f[3]));
        }
        if demand == 0 || demand > 1000 {
            return Err(bad("demand", f[4]));
        }
        if chunk_ms == 0 {
            return Err(bad("chunk_ms", f[7]));
        }
        apps.push(App {
            id: f[0].parse().map_err(|_| bad("id", f[0]))?,
            name: f[1].to_string(),
            suite: f[2].to_string(),
            solo_s,
            demand,
            grid: f[5].parse().map_err(|_| bad("grid", f[5]))?,
            block: f[6].parse().map_err(|_| bad("block", f[6]))?,
            chunk_ms,
            memory_mib: f[8].parse().map_err(|_| bad("memory_mib", f[8]))?,
            why: f[9].to_string(),
        });
    }
    if apps.is_empty() {
        return Err(AppsError::Empty);
    }
    Ok(apps)
}

/// The `k`-th random arrival order of `n` applications (seeded, reproducible).
pub fn arrival_order(n: usize, seed: u64, k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Pcg64::seed_from_u64(seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    order.shuffle(&mut rng);
    order
}

/// The workload: application `order[i]` arrives at `i * interval`; each is a tenant
/// (batch class, its memory declared) running chunks of its work one after another
/// until its solo run time is used up. Kernel `j` is application `j`'s.
pub fn workload(apps: &[App], order: &[usize], interval: Nanos) -> Workload {
    let kernels = apps
        .iter()
        .map(|a| Kernel {
            name: a.name.clone(),
            mean: Nanos::from_millis(a.chunk_ms),
            launch: Some(LaunchInfo {
                grid_blocks: a.grid,
                threads_per_block: a.block,
                demand: PerMille(a.demand),
            }),
        })
        .collect();
    let jobs = order
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let app = &apps[a];
            let solo = Nanos((app.solo_s * 1e9).round() as u64);
            let chunk = Nanos::from_millis(app.chunk_ms);
            let mut tasks = vec![chunk; (solo.0 / chunk.0) as usize];
            let rest = solo.0 % chunk.0;
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
            parse_apps("1,a,b,30,0,1,1,50,1,why"),
            Err(AppsError::Field { field: "demand", .. })
        ));
        assert!(matches!(parse_apps("# only a comment\n"), Err(AppsError::Empty)));
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
            let total: u64 = j.tasks.iter().map(|t| t.0).sum();
            let app = &apps[j.kernel as usize];
            assert_eq!(total, (app.solo_s * 1e9).round() as u64);
        }
    }
}

//! `tessera sim flexy`: Flexy's evaluation (Figures 5, 6 and 7) in the simulator.
//!
//! For each Table II mix, each policy and each load factor f, `runs` workload
//! instances are simulated on a 4-GPU node; each run gives one record (SLA met,
//! utilization, resets, batch tasks and their longest wait, ...) and each
//! (mix, policy, SLA, load) point the mean over runs. Figure 5 compares the policies,
//! Figure 6 Flexy with K = 0..3, Figure 7 the reset policies at a 200 ms and a 1 s SLA.
//! The report puts each of the paper's claims, with its magnitude, beside ours and
//! judges it with a stated tolerance (`claims`, through the shared
//! [`crate::experiments::claims`]); `report` writes the Markdown, every number in it
//! from the run's data; `figures` draws the SVGs.
//!
//! Two readings of §III are run side by side (`Mode`): user-facing jobs keeping up to
//! 2N tasks outstanding, as §III says of jobs in general, or one at a time; and jobs
//! submitting as a sliding window or in bursts. The report says which the paper's
//! numbers imply, from the run's own data.

mod claims;
mod figures;
mod report;
mod runs;

pub use claims::read_by_claims;
pub use runs::RunCache;

pub use report::report;

use super::claims::{Sensitivity, Variation};
use super::{ExperimentError, Progress};
use crate::metrics::RunMetrics;
use crate::perf::FLEXY_RESET_LATENCY;
use crate::workload::Submission;
use crate::workloads::flexy::{Mix, UfOutstanding};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_core::policies::flexy::PoolOrder;
use tessera_core::policy::PidGains;
use tessera_core::{Nanos, PolicyConfig};

/// The policies of Figure 5, in the paper's order, and the PID variant.
pub(crate) const FIG5_POLICIES: [&str; 8] = [
    "RoundRobin",
    "P-MinRes0",
    "P-MinRes1",
    "P-Reset",
    "F-MinRes0",
    "F-MinRes1",
    "F-Reset",
    "F-PID",
];

/// Version tag of `results.json`; bump on any change to its shape.
pub const SCHEMA: &str = "tessera.sim.flexy/4";

/// From when a user-facing task's latency is measured (to its completion).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatencyFrom {
    /// Its submission.
    #[default]
    Submission,
    /// When it reached the head of its job's queue: the wait behind its own job's
    /// earlier tasks is not counted ([`RunMetrics::sla_met_from_head`]).
    HeadOfJob,
}

/// One reading of §III's workload: how jobs submit their outstanding tasks, how many a
/// user-facing job keeps outstanding, and from when latency is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mode {
    /// Window or burst.
    pub submission: Submission,
    /// Up to 2N, or one.
    pub uf_outstanding: UfOutstanding,
    /// Submission, or the head of the job's queue.
    #[serde(default)]
    pub latency: LatencyFrom,
}

impl Mode {
    /// The readings run by default. The first, the main one, is §III as written: every
    /// job, user-facing too, keeps up to 2N tasks outstanding, each completion
    /// submitting the next, and latency runs from submission.
    pub const DEFAULTS: [Mode; 4] = [
        Mode {
            submission: Submission::Window,
            uf_outstanding: UfOutstanding::UpTo2N,
            latency: LatencyFrom::Submission,
        },
        Mode {
            submission: Submission::Window,
            uf_outstanding: UfOutstanding::UpTo2N,
            latency: LatencyFrom::HeadOfJob,
        },
        Mode {
            submission: Submission::Window,
            uf_outstanding: UfOutstanding::One,
            latency: LatencyFrom::Submission,
        },
        Mode {
            submission: Submission::Burst,
            uf_outstanding: UfOutstanding::UpTo2N,
            latency: LatencyFrom::Submission,
        },
    ];

    /// `uf2n-window`, `uf2n-window-head`, `uf1-window`, `uf2n-burst`, ...
    pub fn label(self) -> String {
        let head = if self.latency == LatencyFrom::HeadOfJob { "-head" } else { "" };
        format!("{}-{}{head}", self.uf_outstanding.name(), self.submission.name())
    }

    /// The mode of a label.
    pub fn parse(label: &str) -> Option<Mode> {
        let (label, latency) = match label.strip_suffix("-head") {
            Some(rest) => (rest, LatencyFrom::HeadOfJob),
            None => (label, LatencyFrom::Submission),
        };
        let (uf, sub) = label.split_once('-')?;
        let uf_outstanding =
            [UfOutstanding::One, UfOutstanding::UpTo2N].into_iter().find(|u| u.name() == uf)?;
        let submission =
            [Submission::Window, Submission::Burst].into_iter().find(|s| s.name() == sub)?;
        Some(Mode { submission, uf_outstanding, latency })
    }
}

/// Everything the experiment is run with; recorded in `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlexyConfig {
    /// Mixes to run.
    pub mixes: Vec<Mix>,
    /// Load factors f.
    pub loads: Vec<f64>,
    /// Runs (workload instances) per point.
    pub runs: usize,
    /// Base seed.
    pub seed: u64,
    /// User-facing SLA for Figures 5 and 6, milliseconds.
    pub sla_ms: u64,
    /// The longer SLA of Figure 7, milliseconds.
    pub long_sla_ms: u64,
    /// GPUs in the node.
    pub gpus: usize,
    /// Reset latency, milliseconds.
    pub reset_ms: u64,
    /// k: user-facing task times averaged for le.
    pub history: usize,
    /// Pareto shape of job durations.
    pub pareto_shape: f64,
    /// Coefficient of variation of task times.
    pub task_cv: f64,
    /// Readings of the workload to run; the first is the main one, the others are
    /// reported beside it.
    pub modes: Vec<Mode>,
    /// §III's "always batch tasks present": a background batch job keeps one batch
    /// task outstanding from time 0 until at least the last arrival.
    #[serde(default)]
    pub background_batch: bool,
    /// Milliseconds of each task that are not kernel time (copies, driver calls), not
    /// counted busy by NVSMI's utilization (§III, §IV-B).
    #[serde(default)]
    pub host_ms: u64,
}

impl Default for FlexyConfig {
    fn default() -> Self {
        FlexyConfig {
            mixes: Mix::ALL.to_vec(),
            // the paper's range, 0.125 (heaviest) to 4 (lightest), doubling
            loads: vec![0.125, 0.25, 0.5, 1.0, 2.0, 4.0],
            runs: 10, // "each data point ... is the average of 10 runs" (§III)
            seed: 1,
            sla_ms: 200,
            long_sla_ms: 1000,
            gpus: 4,
            reset_ms: FLEXY_RESET_LATENCY.0 / 1_000_000,
            history: 10,
            pareto_shape: 2.5,
            task_cv: 0.05,
            modes: Mode::DEFAULTS.to_vec(),
            background_batch: true,
            host_ms: 10,
        }
    }
}

impl FlexyConfig {
    /// The same experiment reduced to run in seconds (`tessera sim flexy --quick`, and
    /// what the test suite runs): one instance per point, the heaviest and the
    /// lightest of the loads asked for, the main reading only. Every code path runs —
    /// each policy, the claims, the sensitivity re-runs, the figures — but its numbers
    /// are a smoke run's, not the paper's evaluation.
    pub fn quick(mut self) -> FlexyConfig {
        self.runs = 1;
        if self.loads.len() > 2 {
            let (lo, hi) =
                self.loads.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            self.loads = vec![hi, lo];
        }
        self.modes.truncate(1);
        self
    }
}

/// One run: one workload instance under one policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `w1`, `w2` or `w3`.
    pub workload: String,
    /// The reading of the workload ([`Mode::label`]).
    pub mode: String,
    /// Policy label.
    pub policy: String,
    /// SLA of this run, milliseconds.
    pub sla_ms: u64,
    /// Load factor f.
    pub load: f64,
    /// Run index (workload instance).
    pub run: usize,
    /// What was measured.
    #[serde(flatten)]
    pub metrics: RunMetrics,
    /// The reset policies' user-facing tasks per kernel (Table I's name): how many
    /// ended, and how many of those missed their SLA (late or dropped); empty for the
    /// others. Summed into [`FlexyResults::uf_by_kernel`], not kept per run.
    #[serde(skip)]
    pub uf_by_kernel: BTreeMap<String, (usize, usize)>,
}

/// The user-facing tasks of one kernel under one reset policy at one load of W1 (the
/// main reading, the main SLA), summed over the runs: where packing loses (issue 56).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelMisses {
    /// Policy label.
    pub policy: String,
    /// Load factor f.
    pub load: f64,
    /// Table I's kernel name.
    pub kernel: String,
    /// Tasks that ended (done or dropped).
    pub tasks: usize,
    /// Of those, the ones that missed the SLA (late or dropped).
    pub missed: usize,
}

/// [`FlexyResults::uf_by_kernel`] from the runs' records.
fn kernel_misses(cfg: &FlexyConfig, records: &[Record]) -> Vec<KernelMisses> {
    let main = cfg.modes.first().map(|m| m.label());
    let mut sums: BTreeMap<(String, u64, String), (f64, usize, usize)> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| Some(&r.mode) == main.as_ref() && r.workload == "w1" && r.sla_ms == cfg.sla_ms)
    {
        for (kernel, (tasks, missed)) in &r.uf_by_kernel {
            let e = sums
                .entry((r.policy.clone(), r.load.to_bits(), kernel.clone()))
                .or_insert((r.load, 0, 0));
            e.1 += tasks;
            e.2 += missed;
        }
    }
    sums.into_iter()
        .map(|((policy, _, kernel), (load, tasks, missed))| KernelMisses {
            policy,
            load,
            kernel,
            tasks,
            missed,
        })
        .collect()
}

/// The mean over runs of one (workload, policy, SLA, load).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// `w1`, `w2` or `w3`.
    pub workload: String,
    /// The reading of the workload ([`Mode::label`]).
    pub mode: String,
    /// Policy label.
    pub policy: String,
    /// SLA, milliseconds.
    pub sla_ms: u64,
    /// Load factor f.
    pub load: f64,
    /// Runs averaged.
    pub runs: usize,
    /// Mean fraction of user-facing tasks meeting the SLA.
    pub sla_met: f64,
    /// Mean utilization.
    pub utilization: f64,
    /// Mean resets per run.
    pub resets: f64,
    /// Mean batch tasks completed per run.
    pub batch_done: f64,
    /// Longest batch wait over the runs, seconds.
    pub batch_max_wait_s: f64,
    /// Mean time-weighted user-facing pool size.
    pub mean_user_pool: f64,
    /// Mean time-weighted K.
    pub mean_k: f64,
}

/// A latency distribution of user-facing tasks, pooled over loads and runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyCdf {
    /// Workload.
    pub workload: String,
    /// The reading of the workload ([`Mode::label`]).
    pub mode: String,
    /// Policy label.
    pub policy: String,
    /// SLA, milliseconds.
    pub sla_ms: u64,
    /// (latency in seconds, fraction of tasks at or below it), at log-spaced latencies.
    pub points: Vec<(f64, f64)>,
}

/// Everything the experiment produced; serialised as `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlexyResults {
    /// [`SCHEMA`].
    pub schema: String,
    /// The configuration.
    pub config: FlexyConfig,
    /// One per run.
    pub records: Vec<Record>,
    /// Means per point.
    pub points: Vec<Point>,
    /// Figure 7's distributions.
    pub latency_cdfs: Vec<LatencyCdf>,
    /// The paper's claims beside ours, with verdicts.
    pub claims: Vec<super::claims::Claim>,
    /// The claims in the schema every experiment shares.
    #[serde(default)]
    pub comparisons: Vec<super::claims::Comparison>,
    /// The main reading's claims judged again at a low and a high value of each
    /// constant of ours ([`sensitivity`]); empty when not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<Sensitivity>,
    /// The reset policies' user-facing tasks per kernel in W1 (main reading), per
    /// load: where packing loses (issue 56).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uf_by_kernel: Vec<KernelMisses>,
}

struct Trial {
    mode: Mode,
    mix: Mix,
    policy: PolicyConfig,
    sla: Nanos,
    load: f64,
    run: usize,
    keep_latencies: bool,
}

fn policies(cfg: &FlexyConfig, sla: Nanos) -> Vec<PolicyConfig> {
    let reset = Some(Nanos::from_millis(cfg.reset_ms));
    let flexy = |reserve, reset| PolicyConfig::Flexy {
        reserve,
        reset,
        sla,
        history: cfg.history,
        order: PoolOrder::Packing,
    };
    let mut list = vec![
        PolicyConfig::RoundRobin,
        PolicyConfig::Priority { reserve: 0, reset: None },
        PolicyConfig::Priority { reserve: 1, reset: None },
        PolicyConfig::Priority { reserve: 0, reset },
        flexy(0, None),
        flexy(1, None),
        flexy(0, reset),
        // Algorithm 1's sort as printed, which does not pack (what we ran before issue
        // 24), beside the packing reading
        PolicyConfig::Flexy {
            reserve: 0,
            reset,
            sla,
            history: cfg.history,
            order: PoolOrder::Completion,
        },
        PolicyConfig::FlexyPid { sla, history: cfg.history, gains: PidGains::default() },
    ];
    // Figure 6: K = 2 and 3 (K = 0 and 1 are above), where the node has room.
    list.extend((2..cfg.gpus.min(4)).map(|k| flexy(k, None)));
    list
}

fn is_reset_policy(label: &str) -> bool {
    label.contains("Reset")
}

/// Seed of workload instance `run` of `mix`: the same at every load and for every
/// policy (common random numbers).
fn instance_seed(base: u64, mix: Mix, run: usize) -> u64 {
    base.wrapping_mul(1_000_003).wrapping_add((mix as u64) << 32).wrapping_add(run as u64)
}

fn validate(cfg: &FlexyConfig) -> Result<(), ExperimentError> {
    let bad = |m: &str| Err(ExperimentError::Config(m.to_string()));
    if cfg.mixes.is_empty() {
        return bad("no workload selected");
    }
    if cfg.loads.is_empty() || cfg.loads.iter().any(|l| !(*l > 0.0 && l.is_finite())) {
        return bad("loads must be a non-empty list of positive numbers");
    }
    if cfg.runs == 0 {
        return bad("runs must be at least 1");
    }
    if cfg.gpus < 2 {
        return bad("Flexy's figures need at least 2 GPUs (K=1 reserves one)");
    }
    if cfg.sla_ms == 0 || cfg.long_sla_ms == 0 {
        return bad("SLAs must be positive");
    }
    if cfg.history == 0 {
        return bad("history k must be at least 1");
    }
    if cfg.modes.is_empty() || cfg.modes.iter().enumerate().any(|(i, m)| cfg.modes[..i].contains(m))
    {
        return bad("modes must be a non-empty list without repeats");
    }
    Ok(())
}

/// Run the whole experiment. `progress` is told of each finished run.
pub fn run(cfg: &FlexyConfig, progress: Progress<'_>) -> Result<FlexyResults, ExperimentError> {
    run_cached(cfg, progress, &RunCache::default())
}

/// [`run`], taking from `cache` the simulations it holds and leaving there those of the
/// main reading (what [`sensitivity`] asks for again). `progress` is told of each
/// simulation finished, of those not taken from `cache` or from another reading.
pub fn run_cached(
    cfg: &FlexyConfig,
    progress: Progress<'_>,
    cache: &RunCache,
) -> Result<FlexyResults, ExperimentError> {
    run_with(cfg, progress, cache, Some(cache), false)
}

/// [`run`], taking simulations from `from` and leaving the main reading's in `into`;
/// with `claims_only`, only the policies a claim reads ([`read_by_claims`]) are run,
/// which is all the sensitivity re-runs judge (issue 55: F-PID's and Algorithm 1's
/// printed sort's runs, K = 2 and 3 on W2 and W3, and at the longer SLA all but
/// F-Reset's, were 14 of every 42 simulations of them).
fn run_with(
    cfg: &FlexyConfig,
    progress: Progress<'_>,
    from: &RunCache,
    into: Option<&RunCache>,
    claims_only: bool,
) -> Result<FlexyResults, ExperimentError> {
    validate(cfg)?;
    let sla = Nanos::from_millis(cfg.sla_ms);
    let long_sla = Nanos::from_millis(cfg.long_sla_ms);
    let mut trials = Vec::new();
    for (&mode, &mix) in cfg.modes.iter().flat_map(|s| cfg.mixes.iter().map(move |m| (s, m))) {
        let mut sets = vec![(sla, policies(cfg, sla))];
        if long_sla != sla {
            let reset_only = policies(cfg, long_sla)
                .into_iter()
                .filter(|p| is_reset_policy(&p.label()))
                .collect();
            sets.push((long_sla, reset_only));
        }
        for (sla, list) in sets {
            for policy in list {
                if claims_only
                    && !read_by_claims(&policy.label(), mix.name(), sla.0 / 1_000_000, cfg)
                {
                    continue;
                }
                for &load in &cfg.loads {
                    for run in 0..cfg.runs {
                        let keep_latencies = is_reset_policy(&policy.label());
                        trials.push(Trial {
                            mode,
                            mix,
                            policy: policy.clone(),
                            sla,
                            load,
                            run,
                            keep_latencies,
                        });
                    }
                }
            }
        }
    }
    // each simulation once: a reading that differs only in where latency is measured
    // from reads the same simulation, and a run in `cache` is not simulated again
    let keys: Vec<String> = trials.iter().map(|t| runs::key(cfg, t)).collect();
    let mut known: HashMap<&str, Arc<runs::Simulated>> = HashMap::new();
    let mut todo: Vec<usize> = Vec::new();
    let mut pending: HashSet<&str> = HashSet::new();
    for (i, k) in keys.iter().enumerate() {
        if known.contains_key(k.as_str()) || pending.contains(k.as_str()) {
            continue;
        }
        match from.get(k) {
            Some(r) => {
                known.insert(k, r);
            }
            None => {
                pending.insert(k);
                todo.push(i);
            }
        }
    }
    from.count(trials.len(), todo.len());
    // the simulations to run, by workload: each workload generated once for all the
    // policies run on it (issue 55: generated per simulation, a twentieth of the run)
    let mut by_workload: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in &todo {
        let params = format!("{:?}", runs::workload_params(cfg, &trials[i]));
        by_workload.entry(params).or_default().push(i);
    }
    let groups: Vec<Vec<usize>> = by_workload.into_values().collect();
    let done = AtomicUsize::new(0);
    let total = todo.len();
    let simulated: Vec<Result<Vec<(usize, runs::Simulated)>, ExperimentError>> = groups
        .par_iter()
        .map(|group| {
            let workload = runs::workload(cfg, &trials[group[0]])?;
            group
                .iter()
                .map(|&i| {
                    let r = runs::simulate(cfg, &trials[i], &workload)?;
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                    Ok((i, r))
                })
                .collect()
        })
        .collect();
    for group in simulated {
        for (i, r) in group? {
            known.insert(&keys[i], Arc::new(r));
        }
    }
    if let Some(cache) = into {
        let main = cfg.modes.first().copied();
        for (t, k) in trials.iter().zip(&keys) {
            if Some(t.mode) == main {
                cache.insert(k.clone(), known[k.as_str()].clone());
            }
        }
    }
    let mut records: Vec<Record> = trials
        .iter()
        .zip(&keys)
        .map(|(t, k)| {
            let r = &known[k.as_str()];
            Record {
                workload: t.mix.name().into(),
                mode: t.mode.label(),
                policy: t.policy.label(),
                sla_ms: t.sla.0 / 1_000_000,
                load: t.load,
                run: t.run,
                metrics: r.read(t.mode.latency),
                uf_by_kernel: r.uf_by_kernel.clone(),
            }
        })
        .collect();
    let points = aggregate(&records);
    let latency_cdfs = cdfs(&records);
    let uf_by_kernel = kernel_misses(cfg, &records);
    for r in &mut records {
        r.metrics.uf_latencies_s.clear(); // summarised in the CDFs; too bulky per run
    }
    let mut results = FlexyResults {
        schema: SCHEMA.into(),
        config: cfg.clone(),
        records,
        points,
        latency_cdfs,
        claims: vec![],
        comparisons: vec![],
        sensitivity: vec![],
        uf_by_kernel,
    };
    rejudge(&mut results);
    Ok(results)
}

fn aggregate(records: &[Record]) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    // records are grouped: consecutive runs of one point are adjacent
    for chunk in records.chunk_by(|a, b| {
        a.mode == b.mode
            && a.workload == b.workload
            && a.policy == b.policy
            && a.sla_ms == b.sla_ms
            && a.load == b.load
    }) {
        let n = chunk.len() as f64;
        let mean =
            |f: &dyn Fn(&RunMetrics) -> f64| chunk.iter().map(|r| f(&r.metrics)).sum::<f64>() / n;
        let first = &chunk[0];
        points.push(Point {
            workload: first.workload.clone(),
            mode: first.mode.clone(),
            policy: first.policy.clone(),
            sla_ms: first.sla_ms,
            load: first.load,
            runs: chunk.len(),
            sla_met: mean(&|m| m.sla_met),
            utilization: mean(&|m| m.utilization),
            resets: mean(&|m| m.resets as f64),
            batch_done: mean(&|m| m.batch_done as f64),
            batch_max_wait_s: chunk.iter().map(|r| r.metrics.batch_max_wait_s).fold(0.0, f64::max),
            mean_user_pool: mean(&|m| m.mean_user_pool),
            mean_k: mean(&|m| m.mean_k),
        });
    }
    points
}

fn cdfs(records: &[Record]) -> Vec<LatencyCdf> {
    let mut out: Vec<LatencyCdf> = Vec::new();
    let mut sorted: Vec<&Record> =
        records.iter().filter(|r| !r.metrics.uf_latencies_s.is_empty()).collect();
    sorted.sort_by(|a, b| {
        (&a.mode, &a.workload, &a.policy, a.sla_ms).cmp(&(
            &b.mode,
            &b.workload,
            &b.policy,
            b.sla_ms,
        ))
    });
    for group in sorted.chunk_by(|a, b| {
        a.mode == b.mode && a.workload == b.workload && a.policy == b.policy && a.sla_ms == b.sla_ms
    }) {
        let mut lat: Vec<f64> =
            group.iter().flat_map(|r| r.metrics.uf_latencies_s.iter().copied()).collect();
        lat.sort_by(f64::total_cmp);
        // 10 ms .. 100 s, 10 points per decade
        let points = (0..=40)
            .map(|i| {
                let x = 10f64.powf(-2.0 + i as f64 / 10.0);
                let below = lat.partition_point(|l| *l <= x);
                (x, below as f64 / lat.len() as f64)
            })
            .collect();
        out.push(LatencyCdf {
            workload: group[0].workload.clone(),
            mode: group[0].mode.clone(),
            policy: group[0].policy.clone(),
            sla_ms: group[0].sla_ms,
            points,
        });
    }
    out
}

/// Points of one curve, lightest load first.
pub(crate) fn curve<'a>(
    r: &'a FlexyResults,
    mode: &str,
    workload: &str,
    policy: &str,
    sla_ms: u64,
) -> Vec<&'a Point> {
    let mut c: Vec<&Point> = r
        .points
        .iter()
        .filter(|p| {
            p.mode == mode && p.workload == workload && p.policy == policy && p.sla_ms == sla_ms
        })
        .collect();
    c.sort_by(|a, b| b.load.total_cmp(&a.load));
    c
}

/// SLA met at utilization `u`, interpolated linearly between the two load points
/// whose utilizations bracket it; `None` when the curve does not reach `u`.
pub(crate) fn sla_met_at_utilization(curve: &[&Point], u: f64) -> Option<f64> {
    crossings(curve, |p| p.utilization, |p| p.sla_met, u).next()
}

/// For each pair of neighbouring points whose `x` brackets `at`, `y` interpolated
/// linearly at `at`.
fn crossings<'a>(
    curve: &'a [&Point],
    x: impl Fn(&Point) -> f64 + 'a,
    y: impl Fn(&Point) -> f64 + 'a,
    at: f64,
) -> impl Iterator<Item = f64> + 'a {
    curve.windows(2).filter_map(move |w| {
        let (lo, hi) = if x(w[0]) <= x(w[1]) { (w[0], w[1]) } else { (w[1], w[0]) };
        (x(lo) <= at && at <= x(hi)).then(|| {
            let span = x(hi) - x(lo);
            let t = if span > 0.0 { (at - x(lo)) / span } else { 0.0 };
            y(lo) + t * (y(hi) - y(lo))
        })
    })
}

/// The utilization at which a curve meets `sla` of user-facing tasks, interpolated
/// between the bracketing load points (the highest such utilization); `None` if it
/// never crosses it.
pub(crate) fn utilization_at_sla_met(curve: &[&Point], sla: f64) -> Option<f64> {
    crossings(curve, |p| p.sla_met, |p| p.utilization, sla).reduce(f64::max)
}

/// Judge the paper's claims again from `results.points` and `results.records` (after
/// they were edited, say: the report's verdicts and prose follow the data).
pub fn rejudge(results: &mut FlexyResults) {
    results.claims = claims::claims(results);
    results.comparisons = super::claims::comparisons(&results.claims);
}

/// Write `results.json`, `fig5.svg`, `fig6.svg`, `fig7.svg` and `report.md` into `dir`.
pub fn write_outputs(results: &FlexyResults, dir: &Path) -> Result<(), ExperimentError> {
    super::write_results(dir, results, &report(results))?;
    for (i, mode) in results.config.modes.iter().enumerate() {
        let suffix = if i == 0 { String::new() } else { format!("-{}", mode.label()) };
        figures::draw(results, &mode.label(), &suffix, dir)?;
    }
    Ok(())
}

/// Every constant of ours in the workload and the policies (not the paper's), with the
/// range we think plausible (the reason in `what`).
fn variations() -> Vec<Variation<FlexyConfig>> {
    vec![
        Variation {
            name: "pareto_shape",
            what: "shape of the Pareto job durations (the paper names the distribution, not \
                   its shape); 1.5 is heavy-tailed, 4 nearly even",
            show: |c| format!("{}", c.pareto_shape),
            low: |c| c.pareto_shape = 1.5,
            high: |c| c.pareto_shape = 4.0,
        },
        Variation {
            name: "task_cv",
            what: "coefficient of variation of a kernel's task times around Table I's mean \
                   (the paper gives means only)",
            show: |c| format!("{}", c.task_cv),
            low: |c| c.task_cv = 0.01,
            high: |c| c.task_cv = 0.3,
        },
        Variation {
            name: "host_ms",
            what: "milliseconds of each task outside its kernel (copies, driver calls), which \
                   NVSMI does not count busy (the paper gives no figure)",
            show: |c| format!("{}", c.host_ms),
            low: |c| c.host_ms = 0,
            high: |c| c.host_ms = 50,
        },
        Variation {
            name: "history",
            what: "k, the user-facing task times averaged for le (§II-C1 names k, not its \
                   value)",
            show: |c| format!("{}", c.history),
            low: |c| c.history = 3,
            high: |c| c.history = 30,
        },
    ]
}

/// Each constant of ours at its low and high value, every other as `results` used, on
/// the main reading only: its claims judged again beside those of `results`. A
/// simulation that a constant does not reach (round robin's, for `history`) is taken
/// from `cache`, which [`run_cached`] filled.
pub fn sensitivity(
    results: &FlexyResults,
    progress: Progress<'_>,
    cache: &RunCache,
) -> Result<Vec<Sensitivity>, ExperimentError> {
    let cfg = &results.config;
    let Some(&main) = cfg.modes.first() else { return Ok(Vec::new()) };
    let main_only = FlexyConfig { modes: vec![main], ..cfg.clone() };
    let label = main.label();
    let done = AtomicUsize::new(0);
    let variations = variations();
    let runs = 2 * variations.len();
    super::claims::sensitivity(
        &main_only,
        &results.claims,
        &variations,
        |c| c.scope == label,
        |k| {
            let r = run_with(k, &|_, _| {}, cache, None, true)?;
            progress(done.fetch_add(1, Ordering::Relaxed) + 1, runs);
            Ok(r.claims)
        },
    )
}

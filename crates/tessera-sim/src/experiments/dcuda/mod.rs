//! DCUDA's evaluation (§4): twenty applications arriving one every 3, 5 or 7 s in 50
//! random orders on 4 GPUs, static least-loaded placement against DCUDA (least-loaded
//! placement, then balancing, compaction and fair slicing on the monitor's samples),
//! on the task engine's block model (kernels of co-running applications as thread
//! blocks on the SMs, [`SHARING`]), with migration pauses and the power model. Each
//! application is a program of CPU work and kernel launches
//! ([`crate::workloads::dcuda`]).
//!
//! Energy: the engine integrates each GPU's busy time and its co-located applications;
//! joules follow from the power model. Its idle draw is the paper's (441 J over a
//! ~30 s run: 14.7 W); its two steps (first application, each further one) are shown
//! only in the paper's Figure 1, whose values we do not have. We keep the further-app
//! step at a tenth of the first (Figure 1's shape: "only increases a little") and
//! calibrate the first so that least-loaded at medium load uses Table 2's 74,935 J:
//! that one number is fitted, not reproduced, and the report says so; the light and
//! heavy loads and every DCUDA figure are then predictions.
//!
//! Contention: past a GPU's capacity, co-running kernels slow each other beyond SM
//! sharing (bandwidth, caches) by one constant, fitted before the run on least-loaded's
//! QoS alone ([`fit_contention`], Figure 13(a)'s "fewer than 60%"), so that DCUDA's
//! numbers are predictions too. §2.2's setting is checked on its own: pairs of light
//! applications on one GPU ([`light_pairs`]).

mod figures;

use super::ExperimentError;
use super::claims::{self, Claim, Comparison, Sensitivity, Test, Unit, Variation};
use crate::engine::Sharing;
use crate::engine::{SimOptions, Simulation};
use crate::perf::PerfModel;
use crate::workloads::dcuda::{APPS_CSV, App, GTX_1080_TI, arrival_order, parse_apps, workload};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tessera_core::policies::dcuda::{Dcuda, DcudaParams, DcudaReport, InitialPlacement};
use tessera_core::{Bytes, GpuSpec, Nanos};
use tessera_gpu::concurrent::{Contention, Contexts};
use tessera_gpu::migration::MigrationCost;
use tessera_gpu::power::PowerModel;

/// Version tag of `results.json`.
pub const SCHEMA: &str = "tessera.sim.dcuda/3";

/// GPUs in the paper's server (§4.1: four 1080 Ti).
pub const GPUS: usize = 4;

/// A 1080 Ti's memory (the paper says 12 GB; the card has 11 GiB).
pub const GPU_MEMORY: Bytes = Bytes::gib(11);

/// Table 2: per load, least-loaded's and DCUDA's energy, J.
const TABLE_2: [(&str, f64, f64); 3] =
    [("light", 81_201.0, 70_449.0), ("medium", 74_935.0, 70_921.0), ("heavy", 70_611.0, 68_771.0)];

/// Table 2's energy of least-loaded at medium load, J: the one number the power model
/// is calibrated on.
pub const TABLE2_LL_MEDIUM_J: f64 = 74_935.0;

/// The paper's idle draw: 441 J over a ~30 s run.
pub const IDLE_W: f64 = 441.0 / 30.0;

/// The model's constants that are ours, not the paper's; the report judges the claims
/// again at a low and a high value of each.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constants {
    /// Each further co-located application's power step, as a share of the first's
    /// (Figure 1's shape: "only increases a little").
    pub further_app_step: f64,
    /// The block model's slowdown per unit of summed demand above the GPU (memory
    /// bandwidth and caches; 0: SMs only). Fitted on least-loaded's QoS when the
    /// configuration asks for it ([`DcudaConfig::fit_contention`]).
    pub contention: f64,
    /// Every application's loop iteration (CPU work and one kernel) as a multiple of
    /// the data file's.
    pub iteration_scale: f64,
    /// A migration's pause, ms (the paper: "less than 100 milliseconds", §4.2).
    pub migration_pause_ms: u64,
    /// How far a fairness group's demand may exceed the GPU (§3.3: groups whose demand
    /// may "slightly exceed" the capacity), as a share of it.
    #[serde(default = "paper_group_slack")]
    pub group_slack: f64,
}

fn paper_group_slack() -> f64 {
    DcudaParams::PAPER.group_slack
}

impl Constants {
    /// The values used.
    pub const USED: Constants = Constants {
        further_app_step: 0.1,
        contention: 0.0,
        iteration_scale: 1.0,
        migration_pause_ms: 100,
        group_slack: 0.1,
    };
}

impl Default for Constants {
    fn default() -> Self {
        Constants::USED
    }
}

/// Figure 13(a)'s least-loaded QoS, the one number [`Constants::contention`] is fitted
/// on: "fewer than 60% of applications" stay within 20% of their solo time; we take
/// the bound as the value.
pub const FIT_TARGET_QOS: f64 = 0.6;

/// The contention values tried by the fit.
pub const FIT_CANDIDATES: [f64; 13] =
    [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6];

/// How the contention constant was fitted, on least-loaded alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContentionFit {
    /// The QoS share aimed at ([`FIT_TARGET_QOS`]).
    pub target_qos: f64,
    /// Arrival orders per candidate (medium load, least-loaded only).
    pub orders: usize,
    /// Each candidate with least-loaded's mean QoS there.
    pub candidates: Vec<(f64, f64)>,
    /// The candidate whose QoS is nearest the target (the smaller on a tie).
    pub chosen: f64,
}

/// §2.2's check of the setting: two lightweight applications on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRun {
    /// The two applications (Table 1 order).
    pub apps: [usize; 2],
    /// Each one's run time beside the other over its run time alone, less one.
    pub slowdown: [f64; 2],
}

/// How many of the applications with the least mean demand make §2.2's pairs.
pub const LIGHT_APPS: usize = 4;

/// Arrival orders per load in the sensitivity runs (fewer than the paper's 50, so
/// that eight more runs of the experiment take a minute or two).
pub const SENSITIVITY_ORDERS: usize = 10;

/// DCUDA's migration: a pause of `pause_ms` (the paper: "less than 100 milliseconds",
/// §4.2), its data moved on demand while it runs (unified memory with background
/// prefetch, §3.4), so the copy is not charged as a pause. Its bandwidth cost to
/// co-runners is not modelled.
pub fn migration(pause_ms: u64) -> MigrationCost {
    MigrationCost { pause_ns: pause_ms * 1_000_000, bytes_per_s: f64::INFINITY }
}

/// How co-running applications share a GPU: DCUDA's "spatial multiplexing" (§1) —
/// kernels of every application co-run, their thread blocks placed on the 1080 Ti's
/// SMs in order, so a kernel with many blocks holds up a small one behind it (§2.3);
/// past the GPU's capacity, co-running kernels slow each other by `contention`
/// ([`Constants::contention`], fitted on least-loaded alone: [`fit_contention`]).
pub fn sharing(contention: f64) -> Sharing {
    Sharing::Blocks {
        limits: GTX_1080_TI,
        contexts: Contexts::Shared,
        contention: Contention { slowdown_per_excess: contention },
    }
}

/// One load level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// `light`, `medium` or `heavy`.
    pub name: String,
    /// Seconds between arrivals.
    pub interval_s: u64,
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcudaConfig {
    /// Seed of the arrival orders.
    pub seed: u64,
    /// Arrival orders per load (the paper: 50).
    pub orders: usize,
    /// Load levels (the paper: 7, 5 and 3 s).
    pub loads: Vec<Load>,
    /// The model's constants of ours.
    #[serde(default)]
    pub constants: Constants,
    /// Fit [`Constants::contention`] on least-loaded's QoS at medium load before the
    /// run ([`ContentionFit`]); otherwise run at the given value.
    #[serde(default)]
    pub fit_contention: bool,
}

impl DcudaConfig {
    /// The paper's setup.
    pub fn paper(seed: u64) -> DcudaConfig {
        DcudaConfig {
            seed,
            orders: 50,
            loads: vec![
                Load { name: "light".into(), interval_s: 7 },
                Load { name: "medium".into(), interval_s: 5 },
                Load { name: "heavy".into(), interval_s: 3 },
            ],
            constants: Constants::USED,
            fit_contention: true,
        }
    }

    /// The same experiment reduced to run in seconds (`tessera sim dcuda --quick`):
    /// two arrival orders per load instead of the paper's 50, the contention still
    /// fitted. Every part runs; the numbers are a smoke run's, not the evaluation.
    pub fn quick(self) -> DcudaConfig {
        DcudaConfig { orders: self.orders.min(2), ..self }
    }
}

/// One run's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `least-loaded` or `dcuda`.
    pub policy: String,
    /// The load's name.
    pub load: String,
    /// Which arrival order.
    pub order: usize,
    /// Until the last application ended, s.
    pub makespan_s: f64,
    /// Per GPU: share of the monitor's samples with the demand of the applications
    /// placed on it below 50%, 50-100%, above 100% of its capacity.
    pub bands: Vec<[f64; 3]>,
    /// Mean over GPUs and the monitor's samples of the utilization §4.3 defines: the
    /// summed demand of the applications placed on a GPU over its capacity, at most 1.
    pub utilization: f64,
    /// Mean over GPUs of the SM share actually in use over the run.
    pub cores_used: f64,
    /// Mean over GPUs of the overloaded share of the run.
    pub overloaded: f64,
    /// Each application's run time over its solo time, in Table 1 order.
    pub normalized: Vec<f64>,
    /// Mean of `normalized`.
    pub mean_normalized: f64,
    /// Share of applications within 20% of their solo time (Fig. 13a).
    pub qos: f64,
    /// Jain's index of the applications' speeds (solo / shared time) (Fig. 13b).
    pub jain: f64,
    /// Busy seconds per GPU (at least one application resident).
    pub busy_s: Vec<f64>,
    /// Co-located applications beyond the first, app-seconds, per GPU.
    pub extra_app_s: Vec<f64>,
    /// Migrations decided.
    pub migrations: u64,
    /// Share of the monitor's samples with one GPU overloaded and another under 50%.
    pub imbalanced: f64,
    /// Kernel configurations the monitor evaluated.
    pub occupancy_evaluations: u64,
    /// The most applications in a CPU phase at once (not serialized: summarized in
    /// [`DcudaResults::cpu_phases_at_most`]).
    #[serde(skip)]
    pub max_cpu_phases: usize,
}

impl RunResult {
    /// Joules under `power`.
    pub fn energy_j(&self, power: &PowerModel) -> f64 {
        let gpus = self.busy_s.len() as f64;
        power.idle_w * self.makespan_s * gpus
            + power.active_step_w * self.busy_s.iter().sum::<f64>()
            + power.per_colocated_w * self.extra_app_s.iter().sum::<f64>()
    }
}

/// Means over the orders of one policy at one load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Policy.
    pub policy: String,
    /// Load.
    pub load: String,
    /// Mean utilization (§4.3's, by demand).
    pub utilization: f64,
    /// Mean SM share in use.
    pub cores_used: f64,
    /// Mean share of the run a GPU has an application placed on it.
    pub busy: f64,
    /// Mean overloaded share.
    pub overloaded: f64,
    /// Mean of the mean normalized run time.
    pub mean_normalized: f64,
    /// Mean QoS share.
    pub qos: f64,
    /// Mean Jain index.
    pub jain: f64,
    /// Mean energy, J.
    pub energy_j: f64,
    /// Mean migrations per run.
    pub migrations: f64,
    /// Mean makespan, s.
    pub makespan_s: f64,
    /// Mean imbalanced share of samples.
    pub imbalanced: f64,
}

/// Everything the run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcudaResults {
    /// [`SCHEMA`].
    pub schema: String,
    /// What ran.
    pub config: DcudaConfig,
    /// The applications (the data file).
    pub apps: Vec<App>,
    /// The power model used (its first step calibrated).
    pub power: PowerModel,
    /// Every run.
    pub runs: Vec<RunResult>,
    /// Means per policy and load.
    pub summaries: Vec<Summary>,
    /// The claims, judged.
    pub claims: Vec<Claim>,
    /// The claims as (id, paper, ours, holds).
    pub comparisons: Vec<Comparison>,
    /// Each constant of ours at a low and a high value, the claims judged again there
    /// (on [`SENSITIVITY_ORDERS`] orders, the used value too).
    #[serde(default)]
    pub sensitivity: Vec<Sensitivity>,
    /// The contention fit, if the configuration asked for one.
    #[serde(default)]
    pub contention_fit: Option<ContentionFit>,
    /// §2.2's pairs of lightweight applications.
    #[serde(default)]
    pub pairs: Vec<PairRun>,
    /// Why the slicing step loses (issue 57 item 6): slicing's cost with and without
    /// the applications' CPU phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slicing_cause: Option<SlicingCause>,
    /// The most applications in a CPU phase at once over the main runs, each phase on
    /// a core of its own in the task engine (against the testbed's 16 cores: whether
    /// the modelled CPU would have made any of them wait).
    #[serde(default)]
    pub cpu_phases_at_most: usize,
}

/// The experiment that isolates why DCUDA's fair slicing turns a gain into a loss: the
/// same applications at medium load under DCUDA with and without the slicing step, once
/// as they are (each loop iteration a kernel and a CPU phase) and once with their CPU
/// phases removed (the same kernels, as many, back to back). If slicing stops one
/// application's CPU work from overlapping another's kernels — a sliced-out
/// application's GPU stands idle while the one whose slice it is computes on its CPU —
/// its cost goes with the CPU phases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlicingCause {
    /// Arrival orders each mean is over.
    pub orders: usize,
    /// Mean normalized run time (over solo) of DCUDA, and of DCUDA without slicing, with
    /// the CPU phases.
    pub with_cpu: [f64; 2],
    /// The same with the CPU phases removed.
    pub without_cpu: [f64; 2],
    /// GPU utilization (§4.3's) of DCUDA and DCUDA without slicing, with the CPU phases.
    pub utilization_with_cpu: [f64; 2],
}

impl SlicingCause {
    /// Slicing's cost: DCUDA's mean normalized time over DCUDA's without slicing, with
    /// and without the CPU phases.
    pub fn cost(&self) -> (f64, f64) {
        (self.with_cpu[0] / self.with_cpu[1], self.without_cpu[0] / self.without_cpu[1])
    }
}

/// Add [`SlicingCause`] to `r` (on [`SENSITIVITY_ORDERS`] of its orders, with its
/// applications and constants, the contention as fitted), and say so in the claims'
/// evidence.
pub fn add_slicing_cause(r: &mut DcudaResults, cache: &RunCache) -> Result<(), ExperimentError> {
    r.slicing_cause =
        slicing_cause(&r.apps, &r.config, r.config.orders.min(SENSITIVITY_ORDERS), cache)?;
    Ok(())
}

/// [`SlicingCause`] over `orders` arrival orders at `cfg`'s medium load.
pub fn slicing_cause(
    apps: &[App],
    cfg: &DcudaConfig,
    orders: usize,
    cache: &RunCache,
) -> Result<Option<SlicingCause>, ExperimentError> {
    let Some(medium) = cfg.loads.iter().find(|l| l.name == "medium") else { return Ok(None) };
    // the same kernels, as many, with no CPU phase between them
    let gpu_only: Vec<App> = apps
        .iter()
        .map(|a| {
            let share = f64::from(a.duty) / 1000.0;
            App {
                duty: 1000,
                chunk_ms: ((a.chunk_ms as f64 * share).round() as u64).max(1),
                solo_s: a.solo_s * share,
                ..a.clone()
            }
        })
        .collect();
    let means = |apps: &[App], policy: &str| -> Result<(f64, f64), ExperimentError> {
        let runs: Vec<RunResult> = (0..orders)
            .into_par_iter()
            .map(|o| cache.run_one(apps, policy, medium, o, cfg.seed, &cfg.constants))
            .collect::<Result<_, _>>()?;
        Ok((mean(runs.iter().map(|r| r.mean_normalized)), mean(runs.iter().map(|r| r.utilization))))
    };
    let (with_dc, with_dc_u) = means(apps, "dcuda")?;
    let (with_ns, with_ns_u) = means(apps, "dcuda-no-slicing")?;
    let (without_dc, _) = means(&gpu_only, "dcuda")?;
    let (without_ns, _) = means(&gpu_only, "dcuda-no-slicing")?;
    Ok(Some(SlicingCause {
        orders,
        with_cpu: [with_dc, with_ns],
        without_cpu: [without_dc, without_ns],
        utilization_with_cpu: [with_dc_u, with_ns_u],
    }))
}

impl DcudaResults {
    /// The summary of `policy` at `load`.
    pub fn summary(&self, policy: &str, load: &str) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.policy == policy && s.load == load)
    }

    /// The runs of `policy` at `load`, by order.
    pub fn runs_of<'a>(
        &'a self,
        policy: &'a str,
        load: &'a str,
    ) -> impl Iterator<Item = &'a RunResult> + 'a {
        self.runs.iter().filter(move |r| r.policy == policy && r.load == load)
    }
}

/// The policies compared: the baseline, DCUDA, and DCUDA without its fair slicing (a
/// diagnostic, not the paper's system: see the report).
pub const POLICIES: [&str; 3] = ["least-loaded", "dcuda", "dcuda-no-slicing"];

fn params(policy: &str, k: &Constants) -> DcudaParams {
    let paper = DcudaParams { group_slack: k.group_slack, ..DcudaParams::PAPER };
    match policy {
        "dcuda" => paper,
        "dcuda-no-slicing" => DcudaParams { fairness: false, ..paper },
        _ => DcudaParams::static_placement(InitialPlacement::LeastLoaded),
    }
}

/// The runs made within one experiment, by everything that decides a run: the same
/// run asked for again (the sensitivity's used values are the main run's first orders;
/// a constant that only the power model reads, or that a policy never consults, leaves
/// runs as they were) is taken from here instead of simulated again. Issue 55: about a
/// quarter of `tessera sim dcuda`'s runs were repeats. Scoped to one experiment, so that
/// a test running the experiment twice still simulates it twice.
#[derive(Debug, Default)]
pub struct RunCache {
    runs: Mutex<HashMap<String, RunResult>>,
    /// Runs asked for, and of them simulated.
    asked: AtomicUsize,
    simulated: AtomicUsize,
}

impl RunCache {
    /// [`run_one`], or its result if the same run was made before.
    pub fn run_one(
        &self,
        apps: &[App],
        policy: &str,
        load: &Load,
        order_index: usize,
        seed: u64,
        k: &Constants,
    ) -> Result<RunResult, ExperimentError> {
        let p = params(policy, k);
        // a policy that never migrates is not affected by a migration's pause
        let pause = (p.balance || p.energy).then_some(k.migration_pause_ms);
        let key = format!(
            "{apps:?}|{policy}|{p:?}|{load:?}|{order_index}|{seed}|{}|{pause:?}",
            k.contention.to_bits()
        );
        self.asked.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = self.runs.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(r);
        }
        self.simulated.fetch_add(1, Ordering::Relaxed);
        let r = run_one(apps, policy, load, order_index, seed, k)?;
        if pause.is_none() && r.migrations > 0 {
            return Err(ExperimentError::Config(format!(
                "{policy} migrated {} times with balancing and compaction off",
                r.migrations
            )));
        }
        if let Ok(mut m) = self.runs.lock() {
            m.insert(key, r.clone());
        }
        Ok(r)
    }

    /// Runs asked for so far, and how many of them were simulated (the rest repeats).
    pub fn counts(&self) -> (usize, usize) {
        (self.asked.load(Ordering::Relaxed), self.simulated.load(Ordering::Relaxed))
    }
}

/// Run one policy on one arrival order at one load.
pub fn run_one(
    apps: &[App],
    policy: &str,
    load: &Load,
    order_index: usize,
    seed: u64,
    k: &Constants,
) -> Result<RunResult, ExperimentError> {
    let order = arrival_order(apps.len(), seed, order_index);
    let w = workload(apps, &order, Nanos::from_secs(load.interval_s));
    let report = Arc::new(Mutex::new(DcudaReport::default()));
    let gpus = GpuSpec::uniform(GPUS, GPU_MEMORY);
    let p = Dcuda::new(&gpus, params(policy, k)).with_report(report.clone());
    let opts = SimOptions {
        gpus,
        perf: PerfModel { migration: migration(k.migration_pause_ms), ..PerfModel::default() },
        keep_latencies: false,
        event_budget: u64::MAX,
        sharing: sharing(k.contention),
        measure_gpus: true,
        sla_window: None,
    };
    let trial = format!("{policy}, {} load, order {order_index}", load.name);
    let m = Simulation::new(&w, Box::new(p), opts)
        .run()
        .map_err(|source| ExperimentError::Sim { trial: trial.clone(), source })?;
    let g = m.gpus.ok_or_else(|| ExperimentError::Config(format!("{trial}: no GPU measures")))?;
    let mut normalized = vec![f64::NAN; apps.len()];
    for (job, end) in g.job_end_s.iter().enumerate() {
        let app = order[job];
        let arrival = (load.interval_s * job as u64) as f64;
        let end =
            end.ok_or_else(|| ExperimentError::Config(format!("{trial}: job {job} did not end")))?;
        normalized[app] = (end - arrival) / apps[app].solo_s;
    }
    let n = normalized.len() as f64;
    let speeds: Vec<f64> = normalized.iter().map(|x| 1.0 / x).collect();
    let jain = speeds.iter().sum::<f64>().powi(2) / (n * speeds.iter().map(|s| s * s).sum::<f64>());
    let r = report.lock().map(|r| r.clone()).unwrap_or_default();
    let span = m.makespan_s;
    // the bands by the monitor's samples of the applications placed on each GPU, as
    // the paper defines utilization (§4.3), so that fair slicing, which holds some of a
    // GPU's applications back, does not count as removing its overload
    let bands: Vec<[f64; 3]> = r
        .bands
        .iter()
        .map(|b| {
            let n = b.iter().sum::<u64>().max(1) as f64;
            b.map(|x| x as f64 / n)
        })
        .collect();
    Ok(RunResult {
        policy: policy.into(),
        load: load.name.clone(),
        order: order_index,
        makespan_s: span,
        utilization: if r.samples == 0 {
            0.0
        } else {
            r.utilization_sum.iter().sum::<f64>()
                / (r.samples as f64 * r.utilization_sum.len().max(1) as f64)
        },
        cores_used: g.sm_weighted.iter().sum::<f64>() / g.sm_weighted.len() as f64,
        overloaded: bands.iter().map(|b| b[2]).sum::<f64>() / bands.len().max(1) as f64,
        bands,
        mean_normalized: normalized.iter().sum::<f64>() / n,
        qos: normalized.iter().filter(|x| **x <= 1.2 + 1e-9).count() as f64 / n,
        jain,
        normalized,
        busy_s: g.busy.iter().map(|b| b * span).collect(),
        extra_app_s: g.extra_app_s.clone(),
        migrations: r.migrations,
        imbalanced: if r.samples == 0 {
            0.0
        } else {
            r.imbalanced_samples as f64 / r.samples as f64
        },
        occupancy_evaluations: r.occupancy_evaluations,
        max_cpu_phases: g.max_cpu_phases,
    })
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

/// Fit [`Constants::contention`] on least-loaded alone: at each of [`FIT_CANDIDATES`],
/// least-loaded's QoS at medium load over `orders` orders; the candidate nearest
/// [`FIT_TARGET_QOS`] is chosen. DCUDA never runs here, so its numbers stay predictions.
pub fn fit_contention(
    apps: &[App],
    cfg: &DcudaConfig,
    orders: usize,
    cache: &RunCache,
) -> Result<ContentionFit, ExperimentError> {
    let medium = cfg.loads.iter().find(|l| l.name == "medium").ok_or_else(|| {
        ExperimentError::Config("the contention fit needs the medium load".into())
    })?;
    let trials: Vec<(f64, usize)> =
        FIT_CANDIDATES.iter().flat_map(|c| (0..orders).map(move |o| (*c, o))).collect();
    tracing::info!("dcuda: fitting the contention on least-loaded's QoS ({} runs)", trials.len());
    let runs: Vec<(f64, f64)> = trials
        .par_iter()
        .map(|(c, o)| {
            let k = Constants { contention: *c, ..cfg.constants };
            cache.run_one(apps, "least-loaded", medium, *o, cfg.seed, &k).map(|r| (*c, r.qos))
        })
        .collect::<Result<_, _>>()?;
    let candidates: Vec<(f64, f64)> = FIT_CANDIDATES
        .iter()
        .map(|c| (*c, mean(runs.iter().filter(|(x, _)| x == c).map(|(_, q)| *q))))
        .collect();
    let chosen = candidates
        .iter()
        .min_by(|a, b| {
            (a.1 - FIT_TARGET_QOS)
                .abs()
                .total_cmp(&(b.1 - FIT_TARGET_QOS).abs())
                .then(a.0.total_cmp(&b.0))
        })
        .map_or(0.0, |c| c.0);
    Ok(ContentionFit { target_qos: FIT_TARGET_QOS, orders, candidates, chosen })
}

/// §2.2: every pair of the [`LIGHT_APPS`] applications of least mean demand on one GPU
/// under least-loaded, the second started half an iteration of the first after it;
/// each one's slowdown over its time alone on the same engine (the paper's "running
/// two applications concurrently" starts two programs, whose kernels do not meet at one
/// instant). Started at the same instant the worst pair slowed 26.3% with no contention
/// (an independent fluid model: 2.0-3.4%; issue 57 read it as whole-wave blocking). It
/// was the engine: a kernel found finished by the other's start at the same instant was
/// collected a wave late, every iteration of a pair in step. Since that fix (2026-11-29)
/// the pair slows alike started together or apart (4.7% and 4.6%, no contention).
pub fn light_pairs(apps: &[App], k: &Constants) -> Result<Vec<PairRun>, ExperimentError> {
    light_pairs_started(apps, k, true)
}

/// [`light_pairs`], each pair's second application started half an iteration of the
/// first after it (`apart`) or at the same instant (the reading before issue 57).
pub fn light_pairs_started(
    apps: &[App],
    k: &Constants,
    apart: bool,
) -> Result<Vec<PairRun>, ExperimentError> {
    let mut light: Vec<usize> = (0..apps.len()).collect();
    light.sort_by(|a, b| apps[*a].mean_demand().total_cmp(&apps[*b].mean_demand()));
    light.truncate(LIGHT_APPS);
    // the second of a pair starts half the first's iteration later
    let stagger = |order: &[usize]| {
        if apart { Nanos(apps[order[0]].chunk_ms * 500_000) } else { Nanos::ZERO }
    };
    let end_s = |order: &[usize]| -> Result<Vec<f64>, ExperimentError> {
        let w = workload(apps, order, stagger(order));
        let gpus = GpuSpec::uniform(1, GPU_MEMORY);
        let p = Dcuda::new(&gpus, params("least-loaded", k));
        let opts = SimOptions {
            gpus,
            perf: PerfModel::default(),
            keep_latencies: false,
            event_budget: u64::MAX,
            sharing: sharing(k.contention),
            measure_gpus: true,
            sla_window: None,
        };
        let trial = format!("applications {order:?} together on one GPU");
        let m = Simulation::new(&w, Box::new(p), opts)
            .run()
            .map_err(|source| ExperimentError::Sim { trial: trial.clone(), source })?;
        let g = m.gpus.ok_or_else(|| ExperimentError::Config(format!("{trial}: no measures")))?;
        g.job_end_s
            .iter()
            .map(|e| e.ok_or_else(|| ExperimentError::Config(format!("{trial}: did not end"))))
            .collect()
    };
    let mut alone = std::collections::BTreeMap::new();
    for a in &light {
        alone.insert(*a, end_s(&[*a])?[0]);
    }
    let mut pairs = Vec::new();
    for (i, a) in light.iter().enumerate() {
        for b in &light[i + 1..] {
            let (a, b) = (*a.min(b), *a.max(b));
            let t = end_s(&[a, b])?;
            let later = stagger(&[a, b]).as_secs_f64();
            pairs.push(PairRun {
                apps: [a, b],
                slowdown: [t[0] / alone[&a] - 1.0, (t[1] - later) / alone[&b] - 1.0],
            });
        }
    }
    Ok(pairs)
}

/// Run the experiment (in parallel over runs), after fitting the contention on
/// least-loaded if the configuration asks for it.
pub fn run(cfg: &DcudaConfig) -> Result<DcudaResults, ExperimentError> {
    run_cached(cfg, &RunCache::default())
}

/// [`run`], its runs kept in (and taken from) `cache`.
pub fn run_cached(cfg: &DcudaConfig, cache: &RunCache) -> Result<DcudaResults, ExperimentError> {
    let mut apps = parse_apps(APPS_CSV).map_err(|e| ExperimentError::Config(e.to_string()))?;
    if cfg.orders == 0 || cfg.loads.is_empty() {
        return Err(ExperimentError::Config("at least one order and one load".into()));
    }
    let k = &cfg.constants;
    let in_range =
        |x: f64, least: f64, open: bool| x.is_finite() && if open { x > least } else { x >= least };
    if !(in_range(k.iteration_scale, 0.0, true)
        && in_range(k.contention, 0.0, false)
        && in_range(k.further_app_step, 0.0, false)
        && in_range(k.group_slack, 0.0, false))
    {
        return Err(ExperimentError::Config(format!("constants out of range: {k:?}")));
    }
    for a in &mut apps {
        a.chunk_ms = ((a.chunk_ms as f64 * k.iteration_scale).round() as u64).max(1);
    }
    let mut cfg = cfg.clone();
    let contention_fit = if cfg.fit_contention {
        let fit = fit_contention(&apps, &cfg, cfg.orders.min(SENSITIVITY_ORDERS), cache)?;
        tracing::info!("dcuda: contention fitted at {}", fit.chosen);
        cfg.constants.contention = fit.chosen;
        Some(fit)
    } else {
        None
    };
    let cfg = &cfg;
    let pairs = light_pairs(&apps, &cfg.constants)?;
    let trials: Vec<(&str, &Load, usize)> = cfg
        .loads
        .iter()
        .flat_map(|l| POLICIES.iter().flat_map(move |p| (0..cfg.orders).map(move |o| (*p, l, o))))
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let runs: Vec<RunResult> = trials
        .par_iter()
        .map(|(p, l, o)| {
            let r = cache.run_one(&apps, p, l, *o, cfg.seed, &cfg.constants);
            let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if k.is_multiple_of(50) || k == trials.len() {
                tracing::info!("dcuda: {k} of {} runs done", trials.len());
            }
            r
        })
        .collect::<Result<_, _>>()?;
    // calibrate the first power step on least-loaded at medium load (see the module docs)
    let step_share = cfg.constants.further_app_step;
    let calib: Vec<&RunResult> =
        runs.iter().filter(|r| r.policy == "least-loaded" && r.load == "medium").collect();
    let idle = mean(calib.iter().map(|r| IDLE_W * r.makespan_s * r.busy_s.len() as f64));
    let per_step =
        mean(calib.iter().map(|r| {
            r.busy_s.iter().sum::<f64>() + step_share * r.extra_app_s.iter().sum::<f64>()
        }));
    let step = if calib.is_empty() || per_step <= 0.0 {
        PowerModel::DCUDA_SHAPE.active_step_w
    } else {
        ((TABLE2_LL_MEDIUM_J - idle) / per_step).max(0.0)
    };
    let power = PowerModel {
        idle_w: IDLE_W,
        active_step_w: step,
        per_colocated_w: step_share * step,
        off_w: PowerModel::DCUDA_SHAPE.off_w,
    };
    let mut summaries = Vec::new();
    for l in &cfg.loads {
        for p in POLICIES {
            let rs: Vec<&RunResult> =
                runs.iter().filter(|r| r.policy == p && r.load == l.name).collect();
            summaries.push(Summary {
                policy: p.into(),
                load: l.name.clone(),
                utilization: mean(rs.iter().map(|r| r.utilization)),
                cores_used: mean(rs.iter().map(|r| r.cores_used)),
                busy: mean(rs.iter().map(|r| {
                    r.busy_s.iter().sum::<f64>() / (r.makespan_s * r.busy_s.len() as f64)
                })),
                overloaded: mean(rs.iter().map(|r| r.overloaded)),
                mean_normalized: mean(rs.iter().map(|r| r.mean_normalized)),
                qos: mean(rs.iter().map(|r| r.qos)),
                jain: mean(rs.iter().map(|r| r.jain)),
                energy_j: mean(rs.iter().map(|r| r.energy_j(&power))),
                migrations: mean(rs.iter().map(|r| r.migrations as f64)),
                makespan_s: mean(rs.iter().map(|r| r.makespan_s)),
                imbalanced: mean(rs.iter().map(|r| r.imbalanced)),
            });
        }
    }
    let cpu_phases_at_most = runs.iter().map(|r| r.max_cpu_phases).max().unwrap_or(0);
    let mut r = DcudaResults {
        schema: SCHEMA.into(),
        config: cfg.clone(),
        apps,
        power,
        runs,
        summaries,
        claims: Vec::new(),
        comparisons: Vec::new(),
        sensitivity: Vec::new(),
        contention_fit,
        pairs,
        slicing_cause: None,
        cpu_phases_at_most,
    };
    r.claims = judge(&r);
    r.comparisons = claims::comparisons(&r.claims);
    Ok(r)
}

/// Relative change `ours / base - 1`.
fn change(ours: f64, base: f64) -> f64 {
    ours / base - 1.0
}

/// Per order at `load`: (least-loaded, DCUDA) of `f`.
fn paired(r: &DcudaResults, load: &str, f: impl Fn(&RunResult) -> f64) -> Vec<(f64, f64)> {
    let ll: Vec<&RunResult> = r.runs_of("least-loaded", load).collect();
    let dc: Vec<&RunResult> = r.runs_of("dcuda", load).collect();
    ll.iter().filter_map(|a| dc.iter().find(|b| b.order == a.order).map(|b| (f(a), f(b)))).collect()
}

/// The paper's claims, judged on the results. Tolerances were fixed before reading our
/// numbers.
fn judge(r: &DcudaResults) -> Vec<Claim> {
    let medium = "medium";
    let (ll, dc) = match (r.summary("least-loaded", medium), r.summary("dcuda", medium)) {
        (Some(a), Some(b)) => (a.clone(), b.clone()),
        _ => return Vec::new(),
    };
    let scope = format!("{} orders, medium load (5 s), 4 GPUs", r.config.orders);
    let exec = paired(r, medium, |x| x.mean_normalized);
    let best_cut = exec.iter().map(|(a, b)| 1.0 - b / a).fold(f64::NEG_INFINITY, f64::max);
    let dc_exec: Vec<f64> = exec.iter().map(|x| x.1).collect();
    let spread = dc_exec.iter().copied().fold(0.0, f64::max)
        / dc_exec.iter().copied().fold(f64::INFINITY, f64::min)
        - 1.0;
    let order0 = r.runs_of("dcuda", medium).find(|x| x.order == 0);
    let ll0 = r.runs_of("least-loaded", medium).find(|x| x.order == 0);
    let worst_gpu =
        |x: Option<&RunResult>| x.map(|x| x.bands.iter().map(|b| b[2]).fold(0.0, f64::max));
    let cut_at = |load: &str| {
        let p = paired(r, load, |x| x.mean_normalized);
        mean(p.iter().map(|(a, b)| 1.0 - b / a))
    };
    let energy_saving =
        |load: &str| match (r.summary("least-loaded", load), r.summary("dcuda", load)) {
            (Some(a), Some(b)) => Some(1.0 - b.energy_j / a.energy_j),
            _ => None,
        };
    let (light, heavy) = (cut_at("light"), cut_at("heavy"));
    let mut c = vec![
        Claim::judge(
            "fig2-imbalance",
            &format!("least-loaded, {scope}"),
            "§2.3, Figure 2",
            "with least-loaded placement, one GPU is overloaded while another is under 50% for 41.7% of the time",
            Test::Near { paper: 0.417, tolerance: 0.15 },
            Unit::Percent,
            Some(ll.imbalanced),
            "share of the monitor's 100 ms samples, mean over orders".into(),
        ),
        Claim::judge(
            "fig10-dcuda-overload",
            "order 0, medium load, 4 GPUs",
            "§4.3, Figure 10(b)",
            "under DCUDA every GPU's overloaded time stays within 6% (least-loaded: 14.3% to 51.4%)",
            Test::AtMost { paper: 0.06, tolerance: 0.02 },
            Unit::Percent,
            worst_gpu(order0),
            format!(
                "the most overloaded GPU; least-loaded's most overloaded GPU {}",
                worst_gpu(ll0).map_or("not run".into(), |x| Unit::Percent.show(x))
            ),
        ),
        Claim::judge(
            "fig11-utilization",
            &scope,
            "§4.3, Figure 11(a)",
            "DCUDA improves GPU utilization by 14.6% over least-loaded on average",
            Test::AtLeast { paper: 0.146, tolerance: 0.07 },
            Unit::Percent,
            Some(change(dc.utilization, ll.utilization)),
            format!(
                "mean utilization by demand {} against {}; cores in use {} against {}, \
                 busy time {} against {}",
                Unit::Percent.show(dc.utilization),
                Unit::Percent.show(ll.utilization),
                Unit::Percent.show(dc.cores_used),
                Unit::Percent.show(ll.cores_used),
                Unit::Percent.show(dc.busy),
                Unit::Percent.show(ll.busy)
            ),
        ),
        Claim::judge(
            "fig11-overload",
            &scope,
            "§4.3, Figure 11(b)",
            "DCUDA reduces the overloaded time of GPUs by 78.3% on average",
            Test::AtLeast { paper: 0.783, tolerance: 0.1 },
            Unit::Percent,
            Some(1.0 - dc.overloaded / ll.overloaded),
            format!(
                "overloaded {} of the time against {}",
                Unit::Percent.show(dc.overloaded),
                Unit::Percent.show(ll.overloaded)
            ),
        ),
        Claim::judge(
            "fig12-exec",
            &scope,
            "§4.4, Figure 12",
            "DCUDA reduces the average execution time of applications by up to 42.1%",
            Test::AtLeast { paper: 0.421, tolerance: 0.15 },
            Unit::Percent,
            Some(best_cut),
            format!(
                "the largest cut over the orders; mean normalized time {:.2} against {:.2}",
                dc.mean_normalized, ll.mean_normalized
            ),
        ),
        Claim::judge(
            "fig12-stable",
            &scope,
            "§4.4",
            "under DCUDA the average execution time differs by at most 20% between orders",
            Test::AtMost { paper: 0.2, tolerance: 0.05 },
            Unit::Percent,
            Some(spread),
            "largest over smallest mean normalized time, less one".into(),
        ),
        Claim::judge(
            "fig13a-dcuda",
            &scope,
            "§4.5, Figure 13(a)",
            "more than 80% of applications stay within 20% of their solo time under DCUDA",
            Test::AtLeast { paper: 0.8, tolerance: 0.05 },
            Unit::Percent,
            Some(dc.qos),
            format!("least-loaded {}", Unit::Percent.show(ll.qos)),
        ),
        {
            let c = Claim::judge(
                "fig13a-least-loaded",
                &scope,
                "§4.5, Figure 13(a)",
                "fewer than 60% of applications stay within 20% of their solo time under least-loaded",
                Test::AtMost { paper: 0.6, tolerance: 0.05 },
                Unit::Percent,
                Some(ll.qos),
                "mean over orders".into(),
            );
            if r.contention_fit.is_some() {
                c.input("the contention constant is fitted on it")
            } else {
                c
            }
        },
        Claim::judge(
            "fig13b-fairness",
            &scope,
            "§4.5, Figure 13(b)",
            "DCUDA improves Jain's fairness index by 12.1% on average, to nearly 1",
            Test::AtLeast { paper: 0.121, tolerance: 0.06 },
            Unit::Percent,
            Some(change(dc.jain, ll.jain)),
            format!("index {:.3} against {:.3}", dc.jain, ll.jain),
        ),
        Claim::judge(
            "fig14-medium-best",
            &format!("{} orders per load", r.config.orders),
            "§4.6, Figure 14",
            "the cut in execution time is largest at medium load",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            Some(cut_at(medium) - light.max(heavy)),
            format!(
                "mean cut light {}, medium {}, heavy {} (ours: medium less the larger other)",
                Unit::Percent.show(light),
                Unit::Percent.show(cut_at(medium)),
                Unit::Percent.show(heavy)
            ),
        ),
    ];
    // §2.2: the setting's check; direction only ("< 2%"), judged with half a point
    let worst = r.pairs.iter().flat_map(|p| p.slowdown).fold(f64::NEG_INFINITY, f64::max);
    c.push(Claim::judge(
        "s2.2-light-pairs",
        &format!(
            "every pair of the {LIGHT_APPS} applications of least mean demand, started together \
             on one GPU"
        ),
        "§2.2",
        "lightweight applications running concurrently on one GPU slow by less than 2% \
         (direction only: a bound)",
        Test::AtMost { paper: 0.02, tolerance: 0.005 },
        Unit::Percent,
        (!r.pairs.is_empty()).then_some(worst),
        format!("the largest slowdown over {} pairs of {}", r.pairs.len(), light_names(r)),
    ));
    for (load, paper_ll, _) in TABLE_2 {
        // least-loaded's own energy: the medium load is what the first power step is
        // fitted on (an input); light and heavy check that fit out of sample
        let ll_energy = r.summary("least-loaded", load).map(|a| a.energy_j);
        let claim = Claim::judge(
            &format!("table2-{load}-least-loaded-energy"),
            &format!("{} orders, {load} load, least-loaded", r.config.orders),
            "§4.6, Table 2",
            &format!(
                "least-loaded uses {paper_ll:.0} J at {load} load (judged within 10% of it: the \
                 power model's first step is fitted at medium load, the other loads check the fit)"
            ),
            Test::Near { paper: paper_ll, tolerance: 0.1 * paper_ll },
            Unit::Count,
            ll_energy,
            String::new(),
        );
        c.push(if load == "medium" {
            claim.input("the power model's first step is calibrated on this number")
        } else {
            // issue 57: fitted, not evidence
            claim.input(
                "it rests on constants of ours fitted to Table 2: the power model's first \
                 step (calibrated at medium load) and the 10% tolerance, chosen after a \
                 -6.9% deviation was known",
            )
        });
    }
    for (load, paper_ll, paper_dc) in TABLE_2 {
        let paper = 1.0 - paper_dc / paper_ll;
        c.push(Claim::judge(
            &format!("table2-{load}"),
            &format!("{} orders, {load} load", r.config.orders),
            "§4.6, Table 2",
            &format!(
                "DCUDA saves {:.1}% of least-loaded's energy at {load} load ({paper_ll:.0} J to {paper_dc:.0} J)",
                100.0 * paper
            ),
            // relative to the paper's value: a saving of the wrong sign never holds
            Test::Near { paper, tolerance: 0.5 * paper },
            Unit::Percent,
            energy_saving(load),
            match (r.summary("least-loaded", load), r.summary("dcuda", load)) {
                (Some(a), Some(b)) => format!("{:.0} J to {:.0} J", a.energy_j, b.energy_j),
                _ => "not run".into(),
            },
        )
        .input(
            "it rests on constants of ours, fitted, not evidence (issue 57): the power step of \
             each further co-located application (Figure 1's values are not in the text) and \
             the band of half the paper's saving",
        ));
    }
    c
}

/// The names of the applications in §2.2's pairs.
fn light_names(r: &DcudaResults) -> String {
    let mut ids: Vec<usize> = r.pairs.iter().flat_map(|p| p.apps).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.iter()
        .filter_map(|i| r.apps.get(*i))
        .map(|a| a.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The report, every number from `r`.
pub fn report(r: &DcudaResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# DCUDA: reproduction\n");
    let _ = writeln!(
        s,
        "{} applications (DCUDA Table 1; their launch shapes, duty cycles and sizes are \
         ours, from `data/dcuda/apps.csv`), each a program looping over CPU work and one \
         kernel; {} random arrival orders per load, {} GPUs (1080 Ti: 28 SMs). Co-running \
         kernels share a GPU by spatial multiplexing as thread blocks on its SMs (the \
         engine's block model): a greedy in-order dispatcher places each kernel's blocks \
         where the occupancy arithmetic says they fit, so a kernel with many blocks holds \
         up a small one launched after it; past the GPU's capacity, co-running kernels \
         also slow each other by a contention factor {}. The monitor's \
         demand is each kernel's occupancy (from its launch shape) weighted by the time \
         the application's kernels run in each 100 ms sample. Least-loaded: each application placed on the GPU with \
         the least monitored load when it arrives, never moved. `dcuda`: the same \
         placement, then every 100 ms the monitor's sample, load balancing with hysteresis \
         (over 100%, under 90%), energy compaction (two GPUs merged when one can hold \
         both) and fair slicing of still-overloaded GPUs (100 ms slices, every \
         application of a group but its heaviest with its stream priority raised); migrations \
         between an application's tasks with a 100 ms pause, data moved on demand. `dcuda-no-slicing`: the same without the slicing \
         step (a diagnostic, not the paper's system; claims are judged on `dcuda`). \
         Overloaded time counts the monitor's samples in which the demand of the \
         applications placed on a GPU exceeds its capacity (§4.3's definition), so that \
         slicing, which holds some of them back, does not count as removing overload; \
         utilization is §4.3's too (that demand over the capacity, at most 100%), with \
         the cores actually in use and the busy time (an application placed) beside it. \
         Figures: `fig10.svg`, `fig11.svg`, `fig12.svg`, `fig13.svg`, `fig14.svg`.\n",
        r.apps.len(),
        r.config.orders,
        GPUS,
        match &r.contention_fit {
            Some(f) => format!(
                "(1 + {} per unit of summed demand above it), **fitted** on least-loaded alone \
                 (below)",
                f.chosen
            ),
            None => format!(
                "of 1 + {} per unit of summed demand above it",
                r.config.constants.contention
            ),
        },
    );
    let _ = writeln!(
        s,
        "Each application's CPU phase runs on a core of its own (the task engine's CPU \
         phases are delays, not work on a modelled CPU: issue 57's item 11): at most {} \
         applications were in a CPU phase at once over these runs, against the testbed's \
         16 cores (two 8-core Xeon E5-2620 v4, §4.1){}.\n",
        r.cpu_phases_at_most,
        if r.cpu_phases_at_most <= 16 {
            ", so a modelled CPU would have made none of them wait for a core"
        } else {
            ": more than the cores, so some CPU phases would have waited on the testbed \
             and this model runs them too soon"
        }
    );
    if let Some(f) = &r.contention_fit {
        let _ = writeln!(s, "## The contention fit (least-loaded only)\n");
        let _ = writeln!(
            s,
            "Least-loaded at medium load on {} arrival orders per value; the value whose \
             share of applications within 20% of solo is nearest {} (Figure 13(a): \
             least-loaded keeps \"fewer than 60%\" there; we take the bound as the value) is \
             used everywhere below. DCUDA never runs in the fit, so all of its numbers are \
             predictions; `fig13a-least-loaded` is the fit's input and is not counted.\n",
            f.orders,
            pct(f.target_qos)
        );
        if let (Some((_, at_zero)), Some((_, fitted))) = (
            f.candidates.iter().find(|(c, _)| *c == 0.0),
            f.candidates.iter().find(|(c, _)| *c == f.chosen),
        ) {
            let _ = writeln!(
                s,
                "With no contention least-loaded already keeps {} of applications within 20% of \
                 solo; the {} of the runs below is the fitted constant's: least-loaded's \
                 unfairness here, which DCUDA is judged against, comes from the fit, not from \
                 placement alone.\n",
                pct(*at_zero),
                pct(*fitted)
            );
        }
        let _ = writeln!(s, "| contention | least-loaded within 20% of solo |\n|---|---|");
        for (c, q) in &f.candidates {
            let mark = if *c == f.chosen { " (chosen)" } else { "" };
            let _ = writeln!(s, "| {c}{mark} | {} |", pct(*q));
        }
        let _ = writeln!(s);
    }
    if !r.pairs.is_empty() {
        let _ = writeln!(s, "## Two light applications on one GPU (§2.2)\n");
        let _ = writeln!(
            s,
            "The {} applications of least mean demand ({}), every pair on one GPU, the second \
             started half an iteration of the first after it (started at the same instant \
             they slow alike since a fix to the engine, 2026-11-29: issue 57's 26.3% at no \
             contention was a kernel's finish collected a wave late, not blocking); each \
             one's run time over its time alone, less one.\n",
            LIGHT_APPS,
            light_names(r)
        );
        let _ = writeln!(s, "| pair | slowdowns |\n|---|---|");
        for p in &r.pairs {
            let _ = writeln!(
                s,
                "| {} + {} | {} / {} |",
                r.apps[p.apps[0]].name,
                r.apps[p.apps[1]].name,
                pct(p.slowdown[0]),
                pct(p.slowdown[1])
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Means over the orders\n");
    let _ = writeln!(
        s,
        "| load | policy | utilization (§4.3) | cores in use | busy time | overloaded time | mean run time / solo | within 20% of solo | Jain index | energy (J) | migrations | makespan (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in &r.summaries {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {:.3} | {:.0} | {:.1} | {:.0} |",
            m.load,
            m.policy,
            pct(m.utilization),
            pct(m.cores_used),
            pct(m.busy),
            pct(m.overloaded),
            m.mean_normalized,
            pct(m.qos),
            m.jain,
            m.energy_j,
            m.migrations,
            m.makespan_s
        );
    }
    let _ = writeln!(
        s,
        "\nEnergy: idle {:.1} W (the paper's 441 J over ~30 s); the first application's step \
         {:.1} W is **calibrated** so that least-loaded at medium load uses Table 2's \
         {:.0} J, each further application adds {:.1} W (a tenth of it, our reading of \
         Figure 1's shape). Only the savings are judged below; the medium least-loaded \
         energy matches by construction.\n",
        r.power.idle_w, r.power.active_step_w, TABLE2_LL_MEDIUM_J, r.power.per_colocated_w
    );
    if let (Some(dc), Some(ll)) = (
        r.runs_of("dcuda", "medium").find(|x| x.order == 0),
        r.runs_of("least-loaded", "medium").find(|x| x.order == 0),
    ) {
        let _ = writeln!(s, "## One order, medium load (Figure 10)\n");
        let _ = writeln!(
            s,
            "| GPU | least-loaded: <50% / 50-100% / overloaded | DCUDA: <50% / 50-100% / overloaded |\n|---|---|---|"
        );
        for (g, (a, b)) in ll.bands.iter().zip(&dc.bands).enumerate() {
            let _ = writeln!(
                s,
                "| {g} | {} / {} / {} | {} / {} / {} |",
                pct(a[0]),
                pct(a[1]),
                pct(a[2]),
                pct(b[0]),
                pct(b[1]),
                pct(b[2])
            );
        }
        let _ = writeln!(
            s,
            "\nThe monitor evaluated {} kernel configurations in the DCUDA run (one per \
             application: each runs one launch shape), however many tasks ran.\n",
            dc.occupancy_evaluations
        );
    }
    s.push_str(&slicing_section(r));
    let _ = writeln!(s, "## Where we differ\n");
    let _ = writeln!(s, "{}\n", differences(r));
    let _ = writeln!(s, "## Claims\n");
    let _ = writeln!(s, "{}", claims::table(&r.claims));
    let (yes, no, unmeasured) = claims::tally(&r.claims);
    let _ = writeln!(s, "{yes} hold, {no} do not, {unmeasured} not measured.");
    if !r.sensitivity.is_empty() {
        let judged = format!(
            "every claim judged again, on {} arrival orders per load (the used values too, so \
             that the columns compare like with like; the claims above are on {})",
            r.config.orders.min(SENSITIVITY_ORDERS),
            r.config.orders,
        );
        let _ = writeln!(s, "\n{}", claims::sensitivity_section(&judged, &r.sensitivity));
    }
    s
}

/// Whether the run's isolating experiment found slicing's cost to go with the CPU
/// phases (its cost without them less than half of it with them).
fn slicing_explains(r: &DcudaResults) -> bool {
    r.slicing_cause.as_ref().is_some_and(|x| {
        let (with, without) = x.cost();
        with > 1.0 && (without - 1.0) < 0.5 * (with - 1.0)
    })
}

/// Issue 57 item 6: why the slicing step turns a gain into a loss, from the experiment
/// that isolates it.
fn slicing_section(r: &DcudaResults) -> String {
    let Some(x) = &r.slicing_cause else { return String::new() };
    let (with, without) = x.cost();
    format!(
        "## Why the slicing step loses (issue 57)\n\n\
         DCUDA with and without its fair slicing at medium load, {} arrival orders, the \
         applications as they are (each loop iteration a kernel and a CPU phase) and with \
         their CPU phases removed (the same kernels, as many, back to back; their demand \
         is then the kernel's, so the placement sees heavier applications):\n\n\
         | applications | DCUDA | DCUDA without slicing | slicing's cost |\n|---|---|---|---|\n\
         | with CPU phases | {:.3}x solo | {:.3}x solo | {:.3}x |\n\
         | CPU phases removed | {:.3}x solo | {:.3}x solo | {:.3}x |\n\n\
         With the CPU phases, §4.3's utilization is {} under DCUDA and {} without slicing. \
         {}\n\n",
        x.orders,
        x.with_cpu[0],
        x.with_cpu[1],
        with,
        x.without_cpu[0],
        x.without_cpu[1],
        without,
        pct(x.utilization_with_cpu[0]),
        pct(x.utilization_with_cpu[1]),
        if slicing_explains(r) {
            "Slicing's cost goes with the CPU phases: an application sliced out cannot run \
             its kernels while the one whose slice it is computes on its CPU, so the GPU \
             idles through that CPU work where, unsliced, another application's kernels fill \
             it. That is why DCUDA, whose other steps gain, loses overall in this model."
        } else {
            "Slicing's cost does not go with the CPU phases here: this experiment does not \
             identify the CPU phases as its cause."
        }
    )
}

/// The explanation of the differences, with numbers from the run.
fn differences(r: &DcudaResults) -> String {
    let get = |p: &str| r.summary(p, "medium");
    let (Some(ll), Some(dc), Some(ns)) =
        (get("least-loaded"), get("dcuda"), get("dcuda-no-slicing"))
    else {
        return "The medium load was not run.".into();
    };
    let k = &r.config.constants;
    let mean_demand = r.apps.iter().map(App::mean_demand).sum::<f64>() / r.apps.len() as f64;
    let per_gpu = r.apps.iter().map(|a| a.solo_s).sum::<f64>()
        / r.apps.len() as f64
        / r.config.loads.iter().find(|l| l.name == "medium").map_or(5.0, |l| l.interval_s as f64)
        / GPUS as f64;
    // beside each failing claim: the run's numbers that bear on it
    let beside = |c: &Claim| -> String {
        if c.id.starts_with("fig11") || c.id.starts_with("fig12") || c.id.starts_with("fig13") {
            let cause = r.slicing_cause.as_ref().map_or(String::new(), |x| {
                let (with, without) = x.cost();
                format!(
                    " Slicing costs {:.2}x in run time with the applications' CPU phases and \
                     {:.2}x without them (\"Why the slicing step loses\" above).",
                    with, without
                )
            });
            format!(
                "At medium load DCUDA without its slicing step (a diagnostic) runs {:.2}x solo \
                 (DCUDA {:.2}x, least-loaded {:.2}x), utilization {}, overloaded {}, {} within \
                 20% of solo, Jain {:.3}.{cause}",
                ns.mean_normalized,
                dc.mean_normalized,
                ll.mean_normalized,
                pct(ns.utilization),
                pct(ns.overloaded),
                pct(ns.qos),
                ns.jain
            )
        } else if c.id.starts_with("table2") {
            format!(
                "At medium load DCUDA migrates {:.1} times per run; its makespan is {:.0} s \
                 against least-loaded's {:.0} s.",
                dc.migrations, dc.makespan_s, ll.makespan_s
            )
        } else if c.id.starts_with("s2.2") {
            let worst = r.pairs.iter().max_by(|a, b| {
                a.slowdown[0].max(a.slowdown[1]).total_cmp(&b.slowdown[0].max(b.slowdown[1]))
            });
            worst.map_or(String::new(), |p| {
                let (a, b) = (&r.apps[p.apps[0]], &r.apps[p.apps[1]]);
                format!(
                    "The worst pair is {} + {}: light on average ({} and {} of a GPU), but \
                     each kernel fills {} and {} of the block slots, so when both kernels run \
                     they exceed the GPU (queued blocks, and the fitted contention).",
                    a.name,
                    b.name,
                    pct(a.mean_demand()),
                    pct(b.mean_demand()),
                    pct(a.kernel_demand()),
                    pct(b.kernel_demand())
                )
            })
        } else if c.id.starts_with("fig2") || c.id.starts_with("fig10") {
            format!(
                "Our applications' mean demand is {} of a GPU, about {per_gpu:.1} running per \
                 GPU at medium load.",
                pct(mean_demand)
            )
        } else {
            String::new()
        }
    };
    format!(
        "What the model is, not why it differs: our applications' launch shapes and duty \
         cycles are derived, not measured (`data/dcuda/apps.csv`); co-running kernels slow \
         each other through SMs{}; migration pauses are {} ms with data moved on demand at \
         no cost; the fairness groups may exceed the GPU by {:.0}%. Each claim that does not \
         hold, with the run's numbers beside it and the constants of ours that, at their \
         low or high value (on {} orders), make it hold:\n\n{}",
        if k.contention > 0.0 {
            format!(
                " and a contention slowdown of {} per unit of excess demand{}",
                k.contention,
                if r.contention_fit.is_some() { " (fitted on least-loaded)" } else { "" }
            )
        } else {
            " only".into()
        },
        k.migration_pause_ms,
        100.0 * k.group_slack,
        SENSITIVITY_ORDERS.min(r.config.orders),
        claims::differences_list_explained(&r.claims, &r.sensitivity, beside, |c| {
            slicing_explains(r)
                && (c.id.starts_with("fig11")
                    || c.id.starts_with("fig12")
                    || c.id.starts_with("fig13"))
        })
        .trim_end()
    )
}

/// Every constant of ours, with the range we think plausible (the reason in `what`).
fn variations() -> Vec<Variation<Constants>> {
    vec![
        Variation {
            name: "further_app_step",
            what: "each further co-located application's power step over the first's \
                   (Figure 1 shows only that it is small)",
            show: |k| format!("{}", k.further_app_step),
            low: |k| k.further_app_step = 0.03,
            high: |k| k.further_app_step = 0.3,
        },
        Variation {
            name: "contention",
            what: "slowdown per unit of summed demand above the GPU (bandwidth, caches), \
                   fitted on least-loaded's QoS; 0 is SM sharing alone, high twice the fit",
            show: |k| format!("{}", k.contention),
            low: |k| k.contention = 0.0,
            high: |k| k.contention *= 2.0,
        },
        Variation {
            name: "iteration_scale",
            what: "every application's loop iteration (CPU work and one kernel) over the \
                   data file's",
            show: |k| format!("x{}", k.iteration_scale),
            low: |k| k.iteration_scale = 0.4,
            high: |k| k.iteration_scale = 4.0,
        },
        Variation {
            name: "migration_pause_ms",
            what: "a migration's pause, ms (the paper bounds it by 100 ms; 200 ms is a slow one)",
            show: |k| format!("{} ms", k.migration_pause_ms),
            low: |k| k.migration_pause_ms = 10,
            high: |k| k.migration_pause_ms = 200,
        },
        Variation {
            name: "group_slack",
            what: "how far a fairness group's demand may exceed the GPU (§3.3: \"slightly \
                   exceed\"), as a share of it",
            show: |k| format!("{}", k.group_slack),
            low: |k| k.group_slack = 0.0,
            high: |k| k.group_slack = 0.5,
        },
    ]
}

/// Each constant of ours at its low and high value, on [`SENSITIVITY_ORDERS`] orders
/// (the used values again on as many, so that the three columns compare like with
/// like); every claim judged again.
pub fn sensitivity(
    cfg: &DcudaConfig,
    cache: &RunCache,
) -> Result<Vec<Sensitivity>, ExperimentError> {
    // the constants as used (a fitted contention included), not fitted again
    let small = DcudaConfig {
        orders: cfg.orders.min(SENSITIVITY_ORDERS),
        fit_contention: false,
        ..cfg.clone()
    };
    tracing::info!("dcuda: the constants of ours at low and high values, {} orders", small.orders);
    let base = run_cached(&small, cache)?.claims;
    claims::sensitivity(
        &cfg.constants,
        &base,
        &variations(),
        |_| true,
        |k| run_cached(&DcudaConfig { constants: *k, ..small.clone() }, cache).map(|r| r.claims),
    )
}

/// Run (with the sensitivity of the constants of ours) and write `results.json`,
/// `report.md` and the figures to `out`.
pub fn run_and_write(cfg: &DcudaConfig, out: &Path) -> Result<DcudaResults, ExperimentError> {
    let cache = RunCache::default();
    let mut r = run_cached(cfg, &cache)?;
    add_slicing_cause(&mut r, &cache)?;
    r.sensitivity = sensitivity(&r.config, &cache)?;
    let (asked, simulated) = cache.counts();
    tracing::info!("dcuda: {asked} runs, {simulated} simulated, the rest repeats");
    write(&r, out)?;
    Ok(r)
}

/// Write `r`'s `results.json`, `report.md` and figures to `out` (without the
/// sensitivity re-runs unless `r` has them: `tessera sim dcuda --quick` leaves them out).
pub fn write(r: &DcudaResults, out: &Path) -> Result<(), ExperimentError> {
    super::write_results(out, r, &report(r))?;
    figures::draw(r, out)
}

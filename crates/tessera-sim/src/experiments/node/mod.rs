//! The composed node policy beside each single policy it composes (issue 30): one
//! shared node, a mixed workload taken from Alibaba's GPU-sharing trace, and each
//! tenant class's own measure side by side.
//!
//! **The workload.** From the trace ([`crate::workloads::alibaba`]), the pods asking
//! for one GPU or a fraction of one, in creation order from `start_day`: the first
//! `services` latency-sensitive (LS) pods become inference services with an SLA, the
//! first `batch` best-effort (BE) pods batch tenants. The trace gives each pod's class,
//! its GPU request (`gpu_milli`), its arrival and its lifetime; what it does not give
//! (the node, the GPU memory, request sizes, work) is ours and stated here:
//! - arrivals keep the trace's spacing, compressed linearly into `arrival_span`;
//! - a service asks `gpu_milli / 1000 × service_load` of a GPU's time in Poisson
//!   requests of `request` each, from its arrival until the horizon (every LS pod of
//!   the window outlives it in the trace); it declares `gpu_milli / 1000 ×
//!   service_memory` of GPU memory;
//! - a batch tenant is backlogged with tasks of `batch_task` until its work is done;
//!   its work follows its lifetime on a log scale (the trace's lifetimes span five
//!   decades, which no linear compression keeps in a minute): `work_per_decade` per
//!   decade of seconds, at least `min_work`; it declares `gpu_milli / 1000 ×
//!   batch_memory` of GPU memory and weighs `gpu_milli / 10` (its share is what it
//!   asked for), as do the services.
//!
//! **The measures**, per class:
//! - user-facing: the fraction of requests answered within the SLA;
//! - batch: each tenant's received GPU time over its entitled share, and their max-min
//!   ratio (the least-served tenant's ratio over the best-served one's: 1 is exactly
//!   fair). Entitlement is weighted max-min water-filling per `slice` of the run: the
//!   node's GPU time less what the services received is divided among the batch
//!   tenants active then (arrived and not done) by weight, none more than one GPU (a
//!   tenant runs one task at a time). Received and entitled time count a task's own
//!   work, not the time it took, so that co-running (DCUDA) is not counted twice;
//! - memory crashes: an unmodified CUDA program keeps its context and allocations on
//!   every GPU it has run on until it exits (or is migrated). The observer keeps each
//!   tenant resident on every GPU a task of it was dispatched to, moved by a migration
//!   and freed when it leaves; a dispatch that makes a GPU's residents' declared memory
//!   exceed the GPU's is an out-of-memory failure on a real node. The engine is given
//!   unbounded memory so that such a run goes on (and is counted) instead of stopping;
//! - the node's GPU utilisation (busy over GPU time) and its energy.
//!
//! gpu-lets is not among the single policies: it serves registered models with
//! batching, and the trace's services are not registered models. Its part in the
//! composition is judged apart ([`super::node_inference`]): each window again with one
//! registered model added, the composed policy with gpu-lets and without. schedGPU's admission works on memory
//! requests, which this engine's tenants do not make (its programs engine does:
//! `tessera sim schedgpu`); its rule, "admit every allocation before it is used", is
//! the node policy's homing by declared memory.

mod judge;
mod observer;
mod report;

use judge::{best, judge};
use observer::{Observed, Observer};
pub use report::{draw, report};

use super::claims::{self, Claim, Test, Unit};
use super::node_inference::InferenceAblation;
pub use super::node_workload::{HELD_OUT_DAYS, NodeConfig, NodeWorkload, TenantRow, workload};
use super::node_workload::{flexy_params, node_params};
use super::{ExperimentError, Progress};
use crate::engine::{Sharing, SimOptions, Simulation};
use crate::metrics::RunMetrics;
use crate::perf::PerfModel;
use crate::plot::{Panel, Series, draw_panels};
use crate::workloads::alibaba::{self, Pod};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tessera_core::policies::dcuda::{Dcuda, DcudaParams};
use tessera_core::policies::node::NodeParams;
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Policy, PolicyConfig, TaskId, TenantId,
};

/// One out-of-memory failure a real node would have had.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Crash {
    /// When, seconds.
    pub at_s: f64,
    /// The tenant whose allocation failed.
    pub tenant: u64,
    /// On which GPU.
    pub gpu: u32,
    /// The residents' declared memory with it, GiB.
    pub resident_gib: f64,
}

/// One policy's run, measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyRow {
    /// The policy's label.
    pub policy: String,
    /// Whether it is the composed one.
    pub composed: bool,
    /// User-facing requests within the SLA (0-1).
    pub sla_met: f64,
    /// Batch: the least-served tenant's received/entitled over the best-served one's.
    pub max_min_ratio: f64,
    /// Batch: the least-served tenant's received/entitled.
    pub worst_share: f64,
    /// Per batch tenant: received/entitled, by tenant id.
    pub shares: BTreeMap<u64, f64>,
    /// Tenants that would have died of out-of-memory.
    pub crashed_tenants: usize,
    /// Each of those tenants' first out-of-memory failure.
    pub crashes: Vec<Crash>,
    /// Out-of-memory failures in all (dispatches that found no room).
    pub oom_failures: usize,
    /// GPU busy over GPU time (0-1).
    pub utilization: f64,
    /// The node's energy, J.
    pub energy_j: f64,
    /// First arrival to the last event, seconds.
    pub makespan_s: f64,
    /// Migrations.
    pub migrations: u64,
    /// Tasks that did not complete.
    pub not_completed: usize,
}

/// How the composed policy is judged against the best single policy on each measure
/// (fixed before any run: issue 30 asks for "a stated margin").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Margins {
    /// SLA attainment: at most this far below the best, points (0-1).
    pub sla: f64,
    /// Max-min ratio: at most this far below the best.
    pub fairness: f64,
    /// Memory crashes: at most this many (the issue: zero).
    pub crashes: usize,
    /// Utilisation: at most this far below the best, points (0-1).
    pub utilization: f64,
    /// Energy: at most this factor above the least.
    pub energy: f64,
}

impl Margins {
    /// The margins the report states.
    pub const STATED: Margins =
        Margins { sla: 0.02, fairness: 0.10, crashes: 0, utilization: 0.10, energy: 1.10 };
}

/// Everything one `tessera sim node` run produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeResults {
    /// What was run.
    pub config: NodeConfig,
    /// The margins judged.
    pub margins: Margins,
    /// The workload.
    pub tenants: Vec<TenantRow>,
    /// One row per policy, the composed one last.
    pub rows: Vec<PolicyRow>,
    /// The composed policy with one of its parts switched off at a time.
    #[serde(default)]
    pub ablations: Vec<PolicyRow>,
    /// Per measure, which policies are within its margin.
    pub within: Vec<(String, Vec<String>)>,
    /// The claims.
    pub claims: Vec<Claim>,
    /// The same comparison on the other seeds (not judged: shown).
    #[serde(default)]
    pub other_seeds: Vec<SeedRun>,
    /// The same comparison, judged, on the held-out windows of the trace.
    #[serde(default)]
    pub held_out: Vec<SeedRun>,
    /// gpu-lets inside the composed policy, with and without, on the development
    /// window and the held-out ones, each with one registered model added.
    #[serde(default)]
    pub inference: Option<InferenceAblation>,
}

/// The composed policy and the best single policies on one more seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedRun {
    /// The seed of the requests' arrivals.
    pub seed: u64,
    /// The window's start day, for a held-out window (`None`: the main window).
    #[serde(default)]
    pub start_day: Option<f64>,
    /// The composed policy's row.
    pub node: PolicyRow,
    /// Per measure, the best single policy's value.
    pub best_single: Vec<(String, f64)>,
    /// The claims' verdicts on this seed (`holds` per claim id).
    pub holds: Vec<(String, bool)>,
}

/// The policies compared: each single one (as its paper configures it for such a
/// node) and the composed one.
/// Builds a fresh policy for one run.
type MakePolicy = Box<dyn Fn() -> Box<dyn Policy> + Send + Sync>;

fn policies(cfg: &NodeConfig) -> Vec<(String, MakePolicy)> {
    let gpus = cfg.gpu_specs();
    let flexy = flexy_params(cfg);
    let build = |c: PolicyConfig| {
        let gpus = gpus.clone();
        move || c.build(&gpus).expect("a valid configuration")
    };
    let dcuda_gpus = gpus.clone();
    vec![
        ("time-slicing (RoundRobin)".into(), Box::new(build(PolicyConfig::RoundRobin))),
        (
            "priority (P-MinRes1)".into(),
            Box::new(build(PolicyConfig::Priority { reserve: 1, reset: None })),
        ),
        (
            "Flexy (F-MinRes1)".into(),
            Box::new(build(PolicyConfig::Flexy {
                reserve: flexy.reserve,
                reset: None,
                sla: flexy.sla,
                history: flexy.history,
                order: flexy.order,
            })),
        ),
        ("FairGV".into(), Box::new(build(PolicyConfig::Fair { spin: Nanos::from_millis(2) }))),
        ("least-loaded".into(), Box::new(build(PolicyConfig::LeastLoaded { per_gpu: 1 }))),
        // schedGPU's own: memory admission, FIFO notification (issue 56)
        (
            "schedGPU (MemSafe)".into(),
            Box::new(build(PolicyConfig::MemSafe { notification: Default::default() })),
        ),
        // DCUDA is not a `PolicyConfig`: the daemon runs it as a balancer over a placement
        (
            "DCUDA".into(),
            Box::new(move || {
                Box::new(Dcuda::new(&dcuda_gpus, DcudaParams::PAPER)) as Box<dyn Policy>
            }),
        ),
        (
            "Node (composed)".into(),
            Box::new(build(PolicyConfig::Node { params: node_params(cfg) })),
        ),
    ]
}

/// The composed policy with one part switched off at a time: what each part
/// contributes to each measure is the difference to the whole.
fn ablations(cfg: &NodeConfig) -> Vec<(String, MakePolicy)> {
    let gpus = cfg.gpu_specs();
    let whole = node_params(cfg);
    /// A part's name and how to switch it off.
    type Ablation = (&'static str, fn(&mut NodeParams));
    let variants: [Ablation; 10] = [
        ("without migrations (as on real GPUs)", |p| p.migrate = false),
        ("without the overflow of late requests", |p| p.overflow = false),
        ("without the steady pool", |p| p.steady_pool = false),
        ("without the fair pool order", |p| p.fair_pool = false),
        ("without freeing the reservation when no service is registered", |p| {
            p.reserve_only_with_services = false
        }),
        ("without the pool's minimum reservation (K = 0 instead of 1)", |p| p.flexy.reserve = 0),
        ("without DCUDA's balancer", |p| p.balance = false),
        ("without the share step", |p| p.even_shares = false),
        ("without making room", |p| p.make_room = false),
        ("without memory-safe homes", |p| p.memory_homes = false),
    ];
    variants
        .into_iter()
        .map(|(label, off)| {
            let mut params = whole;
            off(&mut params);
            let gpus = gpus.clone();
            let make: MakePolicy = Box::new(move || {
                PolicyConfig::Node { params }.build(&gpus).expect("a valid configuration")
            });
            (format!("Node {label}"), make)
        })
        .collect()
}

/// Weighted max-min water-filling: `capacity` among `(weight, cap)` claimants.
fn water_fill(capacity: f64, claims: &[(f64, f64)]) -> Vec<f64> {
    let mut given = vec![0.0; claims.len()];
    let mut open: Vec<usize> = (0..claims.len()).filter(|i| claims[*i].1 > 0.0).collect();
    let mut left = capacity.max(0.0);
    while !open.is_empty() && left > 1e-12 {
        let weights: f64 = open.iter().map(|i| claims[*i].0).sum();
        let per = left / weights;
        let (full, rest): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|i| given[**i] + claims[**i].0 * per >= claims[**i].1 - 1e-12);
        if full.is_empty() {
            for i in &open {
                given[*i] += claims[*i].0 * per;
            }
            break;
        }
        for i in full {
            left -= claims[i].1 - given[i];
            given[i] = claims[i].1;
        }
        open = rest;
    }
    given
}

/// Each batch tenant's received over entitled GPU time (see the module documentation).
fn shares(
    cfg: &NodeConfig,
    tenants: &[TenantRow],
    seen: &Observed,
    end: Nanos,
) -> BTreeMap<u64, f64> {
    let slice = Nanos::from_secs_f64(cfg.slice_s).0;
    let slices = end.0.div_ceil(slice) as usize;
    let got = |t: u64, s: usize| -> f64 {
        seen.service.get(&TenantId(t)).and_then(|v| v.get(s)).copied().unwrap_or(0) as f64
    };
    let batch: Vec<&TenantRow> = tenants.iter().filter(|t| t.class == "batch").collect();
    let mut entitled = vec![0.0; batch.len()];
    let mut received = vec![0.0; batch.len()];
    for s in 0..slices {
        let (from, to) = (s as u64 * slice, (s as u64 + 1) * slice);
        let services: f64 =
            tenants.iter().filter(|t| t.class == "service").map(|t| got(t.tenant, s)).sum();
        let capacity = (cfg.gpus as u64 * slice) as f64 - services;
        let claims: Vec<(f64, f64)> = batch
            .iter()
            .map(|t| {
                let id = TenantId(t.tenant);
                let active = match (seen.first.get(&id), seen.last.get(&id)) {
                    (Some(a), Some(b)) => b.0.min(to).saturating_sub(a.0.max(from)),
                    _ => 0,
                };
                (f64::from(t.weight), active as f64)
            })
            .collect();
        for (i, e) in water_fill(capacity, &claims).into_iter().enumerate() {
            entitled[i] += e;
            received[i] += got(batch[i].tenant, s);
        }
    }
    batch
        .iter()
        .enumerate()
        .filter(|(i, _)| entitled[*i] > 0.0)
        .map(|(i, t)| (t.tenant, received[i] / entitled[i]))
        .collect()
}

fn run_one(
    cfg: &NodeConfig,
    w: &NodeWorkload,
    label: &str,
    policy: Box<dyn Policy>,
) -> Result<PolicyRow, ExperimentError> {
    let seen = Arc::new(Mutex::new(Observed::default()));
    let slice = Nanos::from_secs_f64(cfg.slice_s).0;
    let observer = Observer {
        inner: policy,
        slice,
        capacity: cfg.gpu_specs().iter().map(|g| g.memory.0).collect(),
        work: w
            .workload
            .jobs
            .iter()
            .map(|j| (j.tenant.id, j.tasks.first().map_or(0, |t| t.0)))
            .collect(),
        memory: w.workload.jobs.iter().map(|j| (j.tenant.id, j.tenant.memory.0)).collect(),
        owner: BTreeMap::new(),
        resident: vec![Vec::new(); cfg.gpus],
        moving: BTreeMap::new(),
        seen: seen.clone(),
    };
    let options = SimOptions {
        // unbounded memory: an over-commit is counted by the observer, not fatal
        gpus: GpuSpec::uniform(cfg.gpus, Bytes(u64::MAX / 4)),
        perf: PerfModel::default(),
        keep_latencies: false,
        event_budget: 200_000_000,
        // co-running for DCUDA; every other policy runs one task per GPU at a time
        sharing: Sharing::Processor,
        measure_gpus: true,
        sla_window: None,
    };
    let m: RunMetrics = Simulation::new(&w.workload, Box::new(observer), options)
        .run()
        .map_err(|source| ExperimentError::Sim { trial: label.into(), source })?;
    let seen = seen.lock().map_err(|_| ExperimentError::Config("observer poisoned".into()))?;
    let end = seen.last.values().max().copied().unwrap_or(Nanos::ZERO);
    let shares = shares(cfg, &w.tenants, &seen, end);
    let (lo, hi) =
        shares.values().fold((f64::INFINITY, 0.0_f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let gpus = m.gpus.clone().ok_or_else(|| ExperimentError::Config("no GPU measures".into()))?;
    Ok(PolicyRow {
        policy: label.into(),
        composed: label.starts_with("Node"),
        sla_met: m.sla_met,
        max_min_ratio: if hi > 0.0 { lo / hi } else { 0.0 },
        worst_share: if lo.is_finite() { lo } else { 0.0 },
        shares,
        crashed_tenants: seen.crashes.len(),
        crashes: seen.crashes.clone(),
        oom_failures: seen.failures,
        utilization: m.utilization,
        energy_j: gpus.energy_j.iter().sum(),
        makespan_s: m.makespan_s,
        migrations: gpus.migrations,
        not_completed: m.not_completed,
    })
}

/// The five measures the composed policy is judged on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    Sla,
    Fairness,
    Crashes,
    Utilization,
    Energy,
}

impl Measure {
    const ALL: [Measure; 5] =
        [Measure::Sla, Measure::Fairness, Measure::Crashes, Measure::Utilization, Measure::Energy];

    fn name(self) -> &'static str {
        match self {
            Measure::Sla => "SLA attainment",
            Measure::Fairness => "batch max-min ratio",
            Measure::Crashes => "memory crashes (tenants)",
            Measure::Utilization => "GPU utilization",
            Measure::Energy => "energy",
        }
    }

    fn value(self, r: &PolicyRow) -> f64 {
        match self {
            Measure::Sla => r.sla_met,
            Measure::Fairness => r.max_min_ratio,
            Measure::Crashes => r.crashed_tenants as f64,
            Measure::Utilization => r.utilization,
            Measure::Energy => r.energy_j,
        }
    }

    /// A value of this measure as the report prints it.
    fn show(self, x: f64) -> String {
        match self {
            // two decimals: a miss by less than a tenth of a point must show
            Measure::Sla => format!("{:.2}%", 100.0 * x),
            Measure::Utilization => format!("{:.1}%", 100.0 * x),
            Measure::Fairness => format!("{x:.2}"),
            Measure::Crashes => format!("{x:.0} tenants"),
            Measure::Energy => format!("{x:.0} J"),
        }
    }

    /// The id of the claim that judges this measure.
    fn claim_id(self) -> &'static str {
        match self {
            Measure::Sla => "sla",
            Measure::Fairness => "fair-shares",
            Measure::Crashes => "no-oom",
            Measure::Utilization => "utilization",
            Measure::Energy => "energy",
        }
    }

    fn higher_is_better(self) -> bool {
        !matches!(self, Measure::Crashes | Measure::Energy)
    }

    /// Whether `x` is within the margin of `best`.
    fn within(self, margins: &Margins, best: f64, x: f64) -> bool {
        match self {
            Measure::Sla => x >= best - margins.sla,
            Measure::Fairness => x >= best - margins.fairness,
            Measure::Crashes => x <= margins.crashes as f64,
            Measure::Utilization => x >= best - margins.utilization,
            Measure::Energy => x <= best * margins.energy,
        }
    }
}

/// Run every policy on the standard workload.
pub fn run(cfg: &NodeConfig, progress: Progress<'_>) -> Result<NodeResults, ExperimentError> {
    let pods = alibaba::pods().map_err(|e| ExperimentError::Config(e.to_string()))?;
    let w = workload(cfg, &pods)?;
    let policies = policies(cfg);
    let singles = policies.len();
    let all: Vec<(String, MakePolicy)> = policies.into_iter().chain(ablations(cfg)).collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut rows: Vec<PolicyRow> = all
        .par_iter()
        .map(|(label, make)| {
            let r = run_one(cfg, &w, label, make());
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(n, all.len());
            r
        })
        .collect::<Result<_, _>>()?;
    let mut ablations = rows.split_off(singles);
    for a in &mut ablations {
        a.composed = false;
    }
    let margins = Margins::STATED;
    let (within, claims) = judge(&rows, &margins);
    let other_seeds = (1..=cfg.other_seeds)
        .map(|i| compare(&NodeConfig { seed: cfg.seed + i, ..cfg.clone() }, &pods, &margins, None))
        .collect::<Result<_, _>>()?;
    let held_out = cfg
        .held_out_days
        .iter()
        .map(|&d| compare(&NodeConfig { start_day: d, ..cfg.clone() }, &pods, &margins, Some(d)))
        .collect::<Result<_, _>>()?;
    let days: Vec<f64> = std::iter::once(cfg.start_day).chain(cfg.held_out_days.clone()).collect();
    let inference = Some(super::node_inference::run(cfg, &pods, &days)?);
    Ok(NodeResults {
        config: cfg.clone(),
        margins,
        tenants: w.tenants,
        rows,
        ablations,
        within,
        claims,
        other_seeds,
        held_out,
        inference,
    })
}

/// The single policies and the composed one as `cfg` says (another seed, another
/// window: `start_day`), judged as the main run is.
fn compare(
    cfg: &NodeConfig,
    pods: &[Pod],
    margins: &Margins,
    start_day: Option<f64>,
) -> Result<SeedRun, ExperimentError> {
    let w = workload(cfg, pods)?;
    let rows: Vec<PolicyRow> = policies(cfg)
        .par_iter()
        .map(|(label, make)| run_one(cfg, &w, label, make()))
        .collect::<Result<_, _>>()?;
    let node = rows
        .iter()
        .find(|x| x.composed)
        .cloned()
        .ok_or_else(|| ExperimentError::Config("no composed policy".into()))?;
    let singles: Vec<&PolicyRow> = rows.iter().filter(|x| !x.composed).collect();
    let best_single = Measure::ALL
        .iter()
        .filter_map(|m| best(*m, &singles).map(|(v, _)| (m.name().to_string(), v)))
        .collect();
    let (_, claims) = judge(&rows, margins);
    // counted claims only: one that does not separate the policies on this run is
    // structural here (see `judge`)
    let holds = claims
        .iter()
        .filter(|c| c.is_evidence())
        .map(|c| (c.id.clone(), c.verdict.holds() == Some(true)))
        .collect();
    Ok(SeedRun { seed: cfg.seed, start_day, node, best_single, holds })
}

/// Run, write `results.json`, `report.md` and `node.svg` into `out`.
pub fn run_and_write(
    cfg: &NodeConfig,
    out: &Path,
    progress: Progress<'_>,
) -> Result<NodeResults, ExperimentError> {
    let r = run(cfg, progress)?;
    super::write_results(out, &r, &report(&r))?;
    draw(&r, out)?;
    Ok(r)
}

#[cfg(test)]
mod tests;

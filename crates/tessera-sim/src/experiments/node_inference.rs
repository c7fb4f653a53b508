//! gpu-lets inside the composed node policy, where it is needed (issue 56 item 8): the
//! trace's windows hold services and batch pods but no inference model, so `sim node`
//! never exercised the composition's inference server. Here each window gains one
//! registered model (resnet50, measured on the V100 with MPS, at a fixed request rate
//! chosen before any run) and the composed policy runs twice: serving it on gpu-lets
//! (batches on a partition of one GPU, as the daemon does for a registered model), and
//! without, where its requests are user-facing tasks of Flexy's pool like any
//! service's, one request per task on a whole GPU.
//!
//! Both arms run in the same engine with the model's measured batch latencies (a batch
//! of n on a p% partition takes L(n, p); one request on a whole GPU L(1, 100%)), so
//! batching's gain is the profile's, not a parameter of ours. The scheduler plans with
//! the daemon's constants (its latency margin 1.1, period 20 s, EWMA 0.3).

use super::ExperimentError;
use super::gpulets::profiles::{Profiled, V100Model};
use super::gpulets::schedulability::SIZES;
use super::gpulets::serving::kernel_profile;
use super::node_workload::{NodeConfig, node_params, workload};
use crate::engine::{Sharing, SimOptions, Simulation};
use crate::metrics::RunMetrics;
use crate::perf::PerfModel;
use crate::workload::{Job, Kernel, Submission};
use crate::workloads::alibaba::Pod;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tessera_core::policies::gpulets::{
    AdaptiveGpulets, LatencyProfile, Model, NoInterference, Options, ServingPlan,
    elastic_partitioning,
};
use tessera_core::policies::node::NodePolicy;
use tessera_core::{Bytes, GpuSpec, Nanos, Policy, ServiceClass, TenantId, TenantSpec};
use tessera_gpu::partition::Profiles;

/// The model each window gains: its V100 profile's name.
pub const MODEL: &str = "resnet50";
/// Its request rate, req/s: fixed on 2026-11-29 before any run, from the profile alone
/// (one request on a whole V100 takes 2.46 ms, so 600 req/s keep 1.5 GPUs busy one
/// request at a time, while a batch of 32 on 80% takes 27 ms: 1,180 req/s on one GPU).
pub const RATE_RPS: f64 = 600.0;
/// The memory it declares, GiB (a service's at 1000 milli).
const MEMORY_GIB: u64 = 2;
/// The daemon's gpu-lets constants (`tesserad`'s `[gpulets]` defaults).
const LATENCY_MARGIN: f64 = 1.1;
const PERIOD_S: u64 = 20;
const EWMA_ALPHA: f64 = 0.3;
const IDLE_SHARE: f64 = 0.5;

/// One window with and without gpu-lets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferenceWindow {
    /// The window's start day in the trace.
    pub start_day: f64,
    /// With gpu-lets, then without.
    pub with: InferenceRow,
    /// Without: the model's requests are tasks of Flexy's pool.
    pub without: InferenceRow,
    /// Whether gpu-lets is needed here (see [`InferenceAblation::TEST`]).
    pub needed: bool,
}

/// What one run gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferenceRow {
    /// The model's requests that met its SLO (late and dropped ones did not).
    pub model_sla_met: f64,
    /// The model's requests.
    pub model_requests: usize,
    /// The other services' requests that met their SLA.
    pub services_sla_met: f64,
    /// When the last batch task ended, seconds: the batch tenants' throughput.
    pub makespan_s: f64,
    /// Batch tasks done of those submitted.
    pub batch_done: usize,
}

/// The ablation over the windows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferenceAblation {
    /// The model, its rate and its SLO, ms.
    pub model: String,
    pub rate_rps: f64,
    pub slo_ms: f64,
    /// The development window first, then held-out ones.
    pub windows: Vec<InferenceWindow>,
}

impl InferenceAblation {
    /// How "needed" is judged on a window: with gpu-lets the model's SLO is met at
    /// least 2 points more often, or the batch work ends at least 10% sooner, and
    /// neither is worse by more than that (nor the other services' SLA by more than 2
    /// points).
    pub const TEST: &'static str = "needed: model SLO met +2 points or batch makespan -10%, \
        neither (nor the services' SLA) worse by more";

    /// Whether every window needs gpu-lets.
    pub fn holds(&self) -> bool {
        !self.windows.is_empty() && self.windows.iter().all(|w| w.needed)
    }
}

fn needed(with: &InferenceRow, without: &InferenceRow) -> bool {
    let sla_gain = with.model_sla_met - without.model_sla_met;
    let time_gain = 1.0 - with.makespan_s / without.makespan_s.max(1e-9);
    let services_loss = without.services_sla_met - with.services_sla_met;
    (sla_gain >= 0.02 || time_gain >= 0.10)
        && sla_gain > -0.02
        && time_gain > -0.10
        && services_loss < 0.02
}

/// Run the ablation on `days` (the development window's day first).
pub fn run(
    cfg: &NodeConfig,
    pods: &[Pod],
    days: &[f64],
) -> Result<InferenceAblation, ExperimentError> {
    let profiles = Arc::new(
        Profiles::from_v100_jsonl(super::gpulets::V100)
            .map_err(|e| ExperimentError::Config(e.to_string()))?,
    );
    let profile = profiles
        .models
        .get(MODEL)
        .ok_or_else(|| ExperimentError::Config(format!("no V100 profile {MODEL}")))?;
    // the gpu-lets experiments' SLO rule: twice the whole GPU's latency at batch 32
    let slo_ms = 2.0
        * V100Model::new(profile)
            .latency_ms(32, 100)
            .ok_or_else(|| ExperimentError::Config(format!("{MODEL} has no batch-32 latency")))?;
    let windows = days
        .par_iter()
        .map(|&day| {
            let cfg = NodeConfig { start_day: day, ..cfg.clone() };
            let with = run_arm(&cfg, pods, &profiles, slo_ms, true)?;
            let without = run_arm(&cfg, pods, &profiles, slo_ms, false)?;
            Ok(InferenceWindow { start_day: day, needed: needed(&with, &without), with, without })
        })
        .collect::<Result<_, ExperimentError>>()?;
    Ok(InferenceAblation { model: MODEL.into(), rate_rps: RATE_RPS, slo_ms, windows })
}

fn run_arm(
    cfg: &NodeConfig,
    pods: &[Pod],
    profiles: &Arc<Profiles>,
    slo_ms: f64,
    gpulets: bool,
) -> Result<InferenceRow, ExperimentError> {
    let mut w = workload(cfg, pods)?.workload;
    let model = TenantId(w.jobs.len() as u64);
    let kernel = w.kernels.len() as u32;
    w.kernels.push(Kernel {
        name: MODEL.into(),
        mean: Nanos(1),
        launch: None,
        registers_per_thread: 0,
        cpu_per_launch: Nanos::ZERO,
        host_per_task: Nanos::ZERO,
    });
    let horizon = cfg.arrival_span_s + cfg.tail_s;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(cfg.seed ^ 0x6770_756c_6574);
    let gap = Exp::new(RATE_RPS).map_err(|e| ExperimentError::Config(e.to_string()))?;
    let mut arrivals = Vec::new();
    let mut t = gap.sample(&mut rng);
    while t < horizon {
        arrivals.push(Nanos::from_secs_f64(t));
        t += gap.sample(&mut rng);
    }
    let sla = Nanos::from_secs_f64(slo_ms / 1e3);
    w.jobs.push(Job {
        arrival: Nanos::ZERO,
        tenant: TenantSpec {
            memory: Bytes::gib(MEMORY_GIB),
            ..TenantSpec::new(model, ServiceClass::UserFacing { sla })
        },
        kernel,
        tasks: vec![Nanos(1); arrivals.len()],
        window: usize::MAX,
        submission: Submission::Open,
        arrivals,
        background: false,
    });
    let gpus = GpuSpec::uniform(cfg.gpus, Bytes::gib(cfg.gpu_memory_gib));
    let node = NodePolicy::new(&gpus, node_params(cfg));
    let policy: Box<dyn Policy> = if gpulets {
        let server = server(&gpus, profiles.clone(), slo_ms);
        Box::new(node.with_inference(server, Box::new(move |t| t == model)))
    } else {
        Box::new(node)
    };
    let profiled: &dyn Profiled = &V100Model::new(&profiles.models[MODEL]);
    let perf = PerfModel {
        profiles: [(kernel, kernel_profile(profiled))].into_iter().collect(),
        ..PerfModel::default()
    };
    let options = SimOptions {
        gpus: GpuSpec::uniform(cfg.gpus, Bytes(u64::MAX / 4)),
        perf,
        keep_latencies: false,
        event_budget: 200_000_000,
        sharing: Sharing::Processor,
        measure_gpus: false,
        sla_window: None,
    };
    let m: RunMetrics = Simulation::new(&w, policy, options)
        .run()
        .map_err(|source| ExperimentError::Sim { trial: format!("inference {gpulets}"), source })?;
    let met = |c: &crate::metrics::SlaCounts| (c.tasks - c.late - c.dropped, c.tasks);
    let (model_met, model_requests) = m.uf_by_tenant.get(&model).map_or((0, 0), met);
    let (others_met, others) = m
        .uf_by_tenant
        .iter()
        .filter(|(t, _)| **t != model)
        .map(|(_, c)| met(c))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let share = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    Ok(InferenceRow {
        model_sla_met: share(model_met, model_requests),
        model_requests,
        services_sla_met: share(others_met, others),
        makespan_s: m.makespan_s,
        batch_done: m.batch_done,
    })
}

/// The daemon's gpu-lets server for one model (`tesserad`'s `Inference::policy`, with
/// the sim's V100 profile set in place of its registry).
fn server(gpus: &[GpuSpec], profiles: Arc<Profiles>, slo_ms: f64) -> AdaptiveGpulets {
    let count = gpus.len();
    let opts = move || Options {
        sizes: SIZES.to_vec(),
        latency_margin: LATENCY_MARGIN,
        ..Options::paper(count)
    };
    let reschedule = Box::new(move |_: Nanos, tenants: &[TenantId], rates: &[f64]| {
        let profile = V100Model::new(profiles.models.get(MODEL)?);
        let models: Vec<Model<'_>> =
            rates.iter().map(|r| Model { rate: *r, slo_ms, profile: &profile }).collect();
        let schedule = elastic_partitioning(&models, &opts(), &NoInterference).ok()?;
        let plan = ServingPlan::new(count, &schedule, &models, tenants, &opts(), &NoInterference);
        Some((schedule, plan))
    });
    let empty = ServingPlan::new(count, &[], &[], &[], &Options::paper(count), &NoInterference);
    AdaptiveGpulets::new(
        gpus,
        (Vec::new(), empty),
        Vec::new(),
        Nanos::ZERO,
        Nanos::from_secs(PERIOD_S),
        Nanos::ZERO,
        EWMA_ALPHA,
        IDLE_SHARE,
        reschedule,
    )
}

/// The report's section.
pub fn report(a: &InferenceAblation) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Each window gains one registered model, {} (V100 profile) at {:.0} req/s with a {:.1} ms \
         SLO (twice its batch-32 latency), fixed before any run. The composed policy serves it on \
         gpu-lets (batches on a partition, the daemon's constants), or, without gpu-lets, as a \
         service of Flexy's pool (one request per task on a whole GPU). Judged: {}.\n",
        a.model,
        a.rate_rps,
        a.slo_ms,
        InferenceAblation::TEST
    );
    let _ = writeln!(
        s,
        "| window (day) | model SLO met with / without | services' SLA with / without | batch \
         makespan with / without (s) | needed |\n|---|---|---|---|---|"
    );
    for w in &a.windows {
        let _ = writeln!(
            s,
            "| {} | {:.1}% / {:.1}% | {:.1}% / {:.1}% | {:.1} / {:.1} | {} |",
            w.start_day,
            100.0 * w.with.model_sla_met,
            100.0 * w.without.model_sla_met,
            100.0 * w.with.services_sla_met,
            100.0 * w.without.services_sla_met,
            w.with.makespan_s,
            w.without.makespan_s,
            if w.needed { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        s,
        "\ngpu-lets is needed in {} of {} windows.",
        a.windows.iter().filter(|w| w.needed).count(),
        a.windows.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict moves with both measures and refuses a gain bought with a loss.
    #[test]
    fn needed_takes_a_gain_without_a_loss() {
        let row = |sla: f64, services: f64, makespan_s: f64| InferenceRow {
            model_sla_met: sla,
            model_requests: 100,
            services_sla_met: services,
            makespan_s,
            batch_done: 10,
        };
        let base = row(0.90, 0.95, 100.0);
        assert!(needed(&row(0.95, 0.95, 100.0), &base));
        assert!(needed(&row(0.90, 0.95, 85.0), &base));
        assert!(!needed(&row(0.91, 0.95, 95.0), &base), "too small a gain");
        assert!(!needed(&row(0.95, 0.95, 120.0), &base), "a slower batch");
        assert!(!needed(&row(0.80, 0.95, 50.0), &base), "a worse SLO");
        assert!(!needed(&row(0.95, 0.90, 80.0), &base), "worse services");
    }
}

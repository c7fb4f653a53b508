//! The composed node policy's workload (see [`super::node`]'s module documentation):
//! what a run is configured with, the tenants taken from the trace's window, and the
//! composed policy's parameters for the node. Its own module so that the node
//! experiment and its inference ablation ([`super::node_inference`]) both build on it.

use super::ExperimentError;
use crate::workload::{Job, Kernel, Submission, Workload};
use crate::workloads::alibaba::{Pod, Qos};
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};
use tessera_core::policies::flexy::{FlexyParams, PoolOrder};
use tessera_core::policies::node::NodeParams;
use tessera_core::{Bytes, GpuSpec, Nanos, ServiceClass, TenantId, TenantSpec};

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// GPUs in the node.
    pub gpus: usize,
    /// Each GPU's memory, GiB.
    pub gpu_memory_gib: u64,
    /// Where in the trace the window starts, days.
    pub start_day: f64,
    /// LS pods taken (services).
    pub services: usize,
    /// BE pods taken (batch tenants).
    pub batch: usize,
    /// The window's arrivals are compressed into this many seconds.
    pub arrival_span_s: f64,
    /// Services stop sending requests this long after the last arrival, seconds.
    pub tail_s: f64,
    /// The services' SLA, ms.
    pub sla_ms: u64,
    /// One inference request's work, ms.
    pub request_ms: u64,
    /// A 1000-milli service keeps this share of one GPU busy.
    pub service_load: f64,
    /// A 1000-milli service declares this much GPU memory, GiB.
    pub service_memory_gib: f64,
    /// One batch task's work, ms.
    pub batch_task_ms: u64,
    /// A 1000-milli batch tenant declares this much GPU memory, GiB.
    pub batch_memory_gib: f64,
    /// Batch work per decade of trace lifetime, seconds.
    pub work_per_decade_s: f64,
    /// Least batch work, seconds.
    pub min_work_s: f64,
    /// The fairness accounting's slice, seconds.
    pub slice_s: f64,
    /// Seed of the requests' arrival times.
    pub seed: u64,
    /// The single policies and the composed one are also run on this many further
    /// seeds (`seed + 1`, ...), to show how far the verdicts depend on the one run
    /// judged.
    #[serde(default)]
    pub other_seeds: u64,
    /// Further windows of the trace (start days) the same comparison is judged on,
    /// chosen before any run at them ([`HELD_OUT_DAYS`]).
    #[serde(default)]
    pub held_out_days: Vec<f64>,
}

/// The held-out windows (issue 56): start days fixed on 2026-11-28 before any run at
/// them. None is the development window (day 100), nor one a review ran (20, 50, 80,
/// 130); three lie where the trace is sparse (its first 110 days hold 22 pods) and
/// five where it is dense (over 2,000 pods in each later ten days).
pub const HELD_OUT_DAYS: [f64; 8] = [5.0, 35.0, 65.0, 112.0, 118.0, 124.0, 136.0, 142.0];

impl NodeConfig {
    /// The run the report is about.
    pub fn standard() -> NodeConfig {
        NodeConfig {
            gpus: 4,
            gpu_memory_gib: 16,
            start_day: 100.0,
            services: 3,
            batch: 10,
            arrival_span_s: 60.0,
            tail_s: 60.0,
            sla_ms: 100,
            request_ms: 20,
            service_load: 1.0,
            service_memory_gib: 2.0,
            // as long as the SLA (issue 56): a request queued behind a batch task on a
            // GPU without reservation misses it, so keeping the SLA takes a policy that
            // keeps GPUs for the services (with 20 ms tasks priority met 100% anyway)
            batch_task_ms: 100,
            batch_memory_gib: 8.0,
            work_per_decade_s: 10.0,
            min_work_s: 5.0,
            slice_s: 1.0,
            seed: 1,
            other_seeds: 4,
            held_out_days: HELD_OUT_DAYS.to_vec(),
        }
    }

    pub(crate) fn gpu_specs(&self) -> Vec<GpuSpec> {
        GpuSpec::uniform(self.gpus, Bytes::gib(self.gpu_memory_gib))
    }

    pub(crate) fn sla(&self) -> Nanos {
        Nanos::from_millis(self.sla_ms)
    }

    fn validate(&self) -> Result<(), ExperimentError> {
        let bad = |what: &str| Err(ExperimentError::Config(what.into()));
        if self.gpus < 2 {
            return bad("the node needs at least two GPUs (a pool and the rest)");
        }
        if self.services == 0 || self.batch < 2 {
            return bad("at least one service and two batch tenants");
        }
        let positive = [
            self.arrival_span_s,
            self.tail_s,
            self.service_load,
            self.work_per_decade_s,
            self.min_work_s,
            self.slice_s,
        ];
        if positive.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return bad("spans, loads, work and the slice must be positive");
        }
        if self.sla_ms == 0 || self.request_ms == 0 || self.batch_task_ms == 0 {
            return bad("the SLA, requests and batch tasks must take time");
        }
        Ok(())
    }
}

/// One tenant of the workload and the pod it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantRow {
    /// Its id in the run.
    pub tenant: u64,
    /// The trace's pod.
    pub pod: String,
    /// "service" or "batch".
    pub class: String,
    /// The pod's GPU request, thousandths.
    pub gpu_milli: u32,
    /// Its weight.
    pub weight: u32,
    /// Declared GPU memory, GiB.
    pub memory_gib: f64,
    /// Arrival in the run, seconds.
    pub arrival_s: f64,
    /// The pod's lifetime in the trace, seconds.
    pub trace_lifetime_s: u64,
    /// Batch: its work, seconds; a service: its requests' work.
    pub work_s: f64,
}

/// The workload and what each tenant is.
#[derive(Clone, Debug)]
pub struct NodeWorkload {
    /// For the engine.
    pub workload: Workload,
    /// Per tenant, in id order.
    pub tenants: Vec<TenantRow>,
}

/// Build the workload from the trace's pods (see the module documentation).
pub fn workload(cfg: &NodeConfig, pods: &[Pod]) -> Result<NodeWorkload, ExperimentError> {
    cfg.validate()?;
    let start = (cfg.start_day * 86_400.0) as u64;
    let mut eligible: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.num_gpu == 1 && p.gpu_milli > 0 && p.creation_s >= start)
        .collect();
    eligible.sort_by_key(|p| (p.creation_s, p.name.clone()));
    let take = |q: Qos, n: usize| -> Vec<&Pod> {
        eligible.iter().filter(|p| p.qos == q).take(n).copied().collect()
    };
    let (ls, be) = (take(Qos::LatencySensitive, cfg.services), take(Qos::BestEffort, cfg.batch));
    if ls.len() < cfg.services || be.len() < cfg.batch {
        return Err(ExperimentError::Config(format!(
            "the trace has {} LS and {} BE pods after day {}, fewer than asked",
            ls.len(),
            be.len(),
            cfg.start_day
        )));
    }
    let first = ls.iter().chain(&be).map(|p| p.creation_s).min().unwrap_or(0);
    let last = ls.iter().chain(&be).map(|p| p.creation_s).max().unwrap_or(0);
    let scale = cfg.arrival_span_s / (last - first).max(1) as f64;
    let arrival = |p: &Pod| Nanos::from_secs_f64((p.creation_s - first) as f64 * scale);
    let horizon = Nanos::from_secs_f64(cfg.arrival_span_s + cfg.tail_s);
    let mut rng = rand_pcg::Pcg64::seed_from_u64(cfg.seed);
    let request = Nanos::from_millis(cfg.request_ms);
    let gib = |x: f64| Bytes((x * (1u64 << 30) as f64) as u64);
    let mut jobs = Vec::new();
    let mut tenants = Vec::new();
    for (i, p) in ls.iter().enumerate() {
        let share = f64::from(p.gpu_milli) / 1000.0;
        let rate = share * cfg.service_load / request.as_secs_f64();
        let gap = Exp::new(rate).map_err(|e| ExperimentError::Config(e.to_string()))?;
        let mut t = arrival(p);
        let mut arrivals = Vec::new();
        while t < horizon {
            arrivals.push(t);
            t += Nanos::from_secs_f64(gap.sample(&mut rng));
        }
        let id = i as u64;
        let memory = share * cfg.service_memory_gib;
        let spec = TenantSpec {
            weight: p.gpu_milli.div_ceil(10),
            memory: gib(memory),
            ..TenantSpec::new(TenantId(id), ServiceClass::UserFacing { sla: cfg.sla() })
        };
        tenants.push(TenantRow {
            tenant: id,
            pod: p.name.clone(),
            class: "service".into(),
            gpu_milli: p.gpu_milli,
            weight: spec.weight,
            memory_gib: memory,
            arrival_s: arrival(p).as_secs_f64(),
            trace_lifetime_s: p.lifetime_s(),
            work_s: arrivals.len() as f64 * request.as_secs_f64(),
        });
        jobs.push(Job {
            arrival: arrival(p),
            tenant: spec,
            kernel: 0,
            tasks: vec![request; arrivals.len()],
            window: usize::MAX,
            submission: Submission::Open,
            arrivals,
            background: false,
        });
    }
    let task = Nanos::from_millis(cfg.batch_task_ms);
    for (i, p) in be.iter().enumerate() {
        let share = f64::from(p.gpu_milli) / 1000.0;
        let decades = (p.lifetime_s().max(1) as f64).log10();
        let work = (decades * cfg.work_per_decade_s).max(cfg.min_work_s);
        let n = (work / task.as_secs_f64()).round().max(1.0) as usize;
        let id = (cfg.services + i) as u64;
        let memory = share * cfg.batch_memory_gib;
        let spec = TenantSpec {
            weight: p.gpu_milli.div_ceil(10),
            memory: gib(memory),
            ..TenantSpec::new(TenantId(id), ServiceClass::Batch)
        };
        tenants.push(TenantRow {
            tenant: id,
            pod: p.name.clone(),
            class: "batch".into(),
            gpu_milli: p.gpu_milli,
            weight: spec.weight,
            memory_gib: memory,
            arrival_s: arrival(p).as_secs_f64(),
            trace_lifetime_s: p.lifetime_s(),
            work_s: n as f64 * task.as_secs_f64(),
        });
        jobs.push(Job {
            arrival: arrival(p),
            tenant: spec,
            kernel: 1,
            tasks: vec![task; n],
            window: 1,
            submission: Submission::Window,
            arrivals: Vec::new(),
            background: false,
        });
    }
    let kernel = |name: &str, mean: Nanos| Kernel {
        name: name.into(),
        mean,
        launch: None,
        registers_per_thread: 0,
        cpu_per_launch: Nanos::ZERO,
        host_per_task: Nanos::ZERO,
    };
    Ok(NodeWorkload {
        workload: Workload {
            kernels: vec![kernel("request", request), kernel("batch", task)],
            jobs,
        },
        tenants,
    })
}

/// The composed policy's parameters for this node: Flexy's pool as the single Flexy
/// run configures it, every other part at its default.
pub(crate) fn node_params(cfg: &NodeConfig) -> NodeParams {
    NodeParams::new(flexy_params(cfg))
}

pub(crate) fn flexy_params(cfg: &NodeConfig) -> FlexyParams {
    FlexyParams { reserve: 1, reset: None, sla: cfg.sla(), history: 10, order: PoolOrder::Packing }
}

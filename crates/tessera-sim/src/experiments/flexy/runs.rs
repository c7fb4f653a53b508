//! One simulation of the experiment, and the [`RunCache`] that keeps a simulation asked
//! for again from being run again.
//!
//! Two kinds of repeat (issue 55): the readings that differ only in where latency is
//! measured from (`uf2n-window` and `uf2n-window-head`) are one simulation read twice,
//! since the engine records both latencies; and a sensitivity re-run of a constant a
//! policy never reads (`history`, for round robin and priority) is the main run's
//! simulation again.

use super::{FlexyConfig, LatencyFrom, Trial};
use crate::engine::{SimOptions, Simulation};
use crate::experiments::ExperimentError;
use crate::metrics::RunMetrics;
use crate::perf::PerfModel;
use crate::workload::Workload;
use crate::workloads::flexy::{FlexyWorkloadParams, generate};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tessera_core::{Bytes, GpuSpec, Nanos};

/// What one simulation measured, before a reading picks its latencies.
#[derive(Debug)]
pub(super) struct Simulated {
    /// The engine's measurements, both latencies kept.
    pub metrics: RunMetrics,
    /// The reset policies' user-facing tasks per kernel: (ended, missed).
    pub uf_by_kernel: BTreeMap<String, (usize, usize)>,
}

impl Simulated {
    /// The metrics as `latency` reads them: its SLA fraction and its latencies, the
    /// other reading's dropped.
    pub fn read(&self, latency: LatencyFrom) -> RunMetrics {
        let mut m = self.metrics.clone();
        if latency == LatencyFrom::HeadOfJob {
            m.sla_met = m.sla_met_from_head;
            m.uf_latencies_s = std::mem::take(&mut m.uf_head_latencies_s);
        }
        m.uf_head_latencies_s.clear();
        m
    }
}

/// The simulations made within one `tessera sim flexy`, by everything that decides
/// one. Scoped to one experiment (a test that runs it twice simulates it twice), and
/// holding only the main reading's runs between [`super::run_cached`] calls, which are
/// all the sensitivity re-runs can ask for again (a few tens of megabytes of latencies
/// for the whole paper run, not every run's).
#[derive(Debug, Default)]
pub struct RunCache {
    runs: Mutex<HashMap<String, Arc<Simulated>>>,
    /// Simulations asked for, and of them simulated.
    asked: AtomicUsize,
    simulated: AtomicUsize,
}

impl RunCache {
    /// Simulations asked for so far, and how many of them were simulated (the rest
    /// repeats).
    pub fn counts(&self) -> (usize, usize) {
        (self.asked.load(Ordering::Relaxed), self.simulated.load(Ordering::Relaxed))
    }

    pub(super) fn get(&self, key: &str) -> Option<Arc<Simulated>> {
        self.runs.lock().ok().and_then(|m| m.get(key).cloned())
    }

    pub(super) fn insert(&self, key: String, run: Arc<Simulated>) {
        if let Ok(mut m) = self.runs.lock() {
            m.insert(key, run);
        }
    }

    pub(super) fn count(&self, asked: usize, simulated: usize) {
        self.asked.fetch_add(asked, Ordering::Relaxed);
        self.simulated.fetch_add(simulated, Ordering::Relaxed);
    }
}

/// The workload generator's parameters for `t`.
pub(super) fn workload_params(cfg: &FlexyConfig, t: &Trial) -> FlexyWorkloadParams {
    FlexyWorkloadParams {
        mix: t.mix,
        load: t.load,
        gpus: cfg.gpus,
        sla: t.sla,
        pareto_shape: cfg.pareto_shape,
        task_cv: cfg.task_cv,
        submission: t.mode.submission,
        uf_outstanding: t.mode.uf_outstanding,
        background_batch: cfg.background_batch,
        host_per_task: Nanos::from_millis(cfg.host_ms),
        seed: super::instance_seed(cfg.seed, t.mix, t.run),
    }
}

/// Everything that decides `t`'s simulation, as text: the workload's parameters (which
/// hold the reading's submission and outstanding tasks, not where latency is measured
/// from), the policy, the reset latency and whether latencies are kept. `Debug` prints
/// every float exactly.
pub(super) fn key(cfg: &FlexyConfig, t: &Trial) -> String {
    format!("{:?}|{:?}|{}|{}", workload_params(cfg, t), t.policy, cfg.reset_ms, t.keep_latencies)
}

/// The workload of `t` (the same for every policy run on it).
pub(super) fn workload(cfg: &FlexyConfig, t: &Trial) -> Result<Workload, ExperimentError> {
    Ok(generate(&workload_params(cfg, t))?)
}

/// Simulate `t` on its `workload` ([`workload`]'s).
pub(super) fn simulate(
    cfg: &FlexyConfig,
    t: &Trial,
    workload: &Workload,
) -> Result<Simulated, ExperimentError> {
    let gpus = GpuSpec::uniform(cfg.gpus, Bytes::gib(4)); // Quadro P1000: 4 GB
    let perf =
        PerfModel { reset_latency: Nanos::from_millis(cfg.reset_ms), ..PerfModel::default() };
    let policy = t.policy.build(&gpus)?;
    let opts = SimOptions {
        gpus,
        perf,
        keep_latencies: t.keep_latencies,
        event_budget: 50_000_000,
        sharing: crate::engine::Sharing::Exclusive,
        measure_gpus: false,
        sla_window: None,
    };
    let metrics =
        Simulation::new(workload, policy, opts).run().map_err(|source| ExperimentError::Sim {
            trial: format!("{} {} f={} run {}", t.mix.name(), t.policy.label(), t.load, t.run),
            source,
        })?;
    let mut uf_by_kernel = BTreeMap::new();
    if t.keep_latencies {
        for job in &workload.jobs {
            let (Some(c), Some(k)) = (
                metrics.uf_by_tenant.get(&job.tenant.id),
                workload.kernels.get(job.kernel as usize),
            ) else {
                continue;
            };
            let e: &mut (usize, usize) = uf_by_kernel.entry(k.name.clone()).or_default();
            e.0 += c.tasks;
            e.1 += c.late + c.dropped;
        }
    }
    Ok(Simulated { metrics, uf_by_kernel })
}

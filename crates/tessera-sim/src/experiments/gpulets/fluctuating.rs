//! Fluctuating rates (gpu-lets §6.2, Figure 14): the paper's five models (the `paper`
//! set, Table 4 SLOs) on 4 GPUs for 1,800 s, each model's Poisson rate following its own
//! trace — two waves, the first from 0 to 600 s, the second, higher, from 900 to 1,500 s
//! — served by [`AdaptiveGpulets`]: rates tracked by EWMA, checked every 20 s,
//! rescheduled by elastic partitioning with interference when at risk or idle, each new
//! schedule taking 15 s to get ready in the background (the top of the paper's 10-15 s)
//! while the old gpu-lets serve, then swapped in.
//!
//! The traces are ours (the paper's are not published): per model, a base rate
//! ([`super::Constants::base_rate`], 80 req/s as reported), the first wave peaking at 2.5x and the second at 4.5x, each model's peaks
//! scaled by a seeded factor in 0.8-1.2 and shifted by up to 60 s. The first layout is
//! made for the base rates and in place from the first request.

use super::profiles::{ProfileSet, paper};
use crate::engine::{Sharing, SimOptions, Simulation};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use tessera_core::policies::gpulets::{AdaptiveGpulets, ServingPlan, elastic_partitioning};
use tessera_core::{Bytes, GpuSpec, Nanos, TenantId};
use tessera_gpu::partition::{Interference, Profiles};

/// Length of the run, s.
pub const SECONDS: f64 = 1800.0;
/// The rescheduling period, s (the paper's 20 s).
pub const PERIOD_S: u64 = 20;
/// GPUs.
const GPUS: usize = 4;

/// One 20 s period of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Period {
    /// Its start, s.
    pub start_s: u64,
    /// Requests submitted per second in it, all models.
    pub offered_rps: f64,
    /// Share of its requests answered after their SLO.
    pub violation: f64,
    /// Sum of the gpu-let sizes of the schedule decided last by its start, % of a GPU.
    pub scheduled_size: u32,
}

/// What the run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fluctuating {
    /// Requests answered.
    pub requests: u64,
    /// Share answered after their SLO, over the whole run.
    pub violation: f64,
    /// Reorganizations decided.
    pub reorganizations: usize,
    /// Checks that wanted a new schedule and found the rates not schedulable.
    pub refused: u64,
    /// Per period.
    pub periods: Vec<Period>,
}

/// When a new schedule was made, and the sum of its gpu-let sizes (`None`: the rates
/// were not schedulable).
type Decision = (Nanos, Option<u32>);

/// Model `m`'s rate at `t` s, given its peak factors and shift.
fn rate_at(base: f64, t: f64, peaks: (f64, f64), shift: f64) -> f64 {
    let bump = |a: f64, b: f64| {
        let x = t - shift;
        if x <= a || x >= b {
            0.0
        } else {
            (std::f64::consts::PI * (x - a) / (b - a)).sin().powi(2)
        }
    };
    base * (1.0 + (peaks.0 - 1.0) * bump(0.0, 600.0) + (peaks.1 - 1.0) * bump(900.0, 1500.0))
}

/// Run it on the `paper` set with `seed`.
pub fn run(
    seed: u64,
    k: &super::Constants,
    scale: f64,
) -> Result<Fluctuating, super::ExperimentError> {
    // a shorter run replays the whole trace faster: its rates still rise and fall
    let seconds = SECONDS * scale;
    let bad = |e: String| super::ExperimentError::Config(e);
    // the policy's rescheduler owns what it uses: its own copy of the profiles, from
    // which it builds the set on each call
    let v100 = Profiles::from_v100_jsonl(super::V100).map_err(|e| bad(e.to_string()))?;
    let authors = Interference::from_csv(super::AUTHORS_2080TI).map_err(|e| bad(e.to_string()))?;
    let owned = Profiles::from_v100_jsonl(super::V100).map_err(|e| bad(e.to_string()))?;
    let set =
        paper(super::UTIL_2080TI, k.batching(), &v100, authors).map_err(|e| bad(e.to_string()))?;
    // served in the measured world (issue 57 item 1), planned with the profiles' means
    let world = super::world::measured(&set, &v100, super::V100, seed)?;
    let set = &set.with_world(world);
    let n = set.models.len();
    let mut rng = Pcg64::seed_from_u64(seed);
    let traces: Vec<((f64, f64), f64)> = (0..n)
        .map(|_| {
            let f = rng.random_range(0.8..1.2);
            ((2.5 * f, 4.5 * f), rng.random_range(-60.0..60.0))
        })
        .collect();
    let prep = Nanos::ZERO;
    let mut jobs = Vec::new();
    for (m, (peaks, shift)) in traces.iter().enumerate() {
        let top = k.base_rate * peaks.0.max(peaks.1);
        let exp = Exp::new(top).expect("a positive rate");
        let mut t = 0.0;
        let mut arrivals = Vec::new();
        loop {
            t += exp.sample(&mut rng);
            if t >= seconds {
                break;
            }
            // thinning: a Poisson process at the trace's rate
            if rng.random::<f64>() * top < rate_at(k.base_rate, t / scale, *peaks, *shift) {
                arrivals.push(prep + Nanos((t * 1e9) as u64));
            }
        }
        if arrivals.is_empty() {
            continue;
        }
        jobs.push(super::serving::request_job(m, m, set.slo_ms[m], arrivals));
    }
    let workload = super::serving::request_workload(n, jobs);
    let tenants: Vec<TenantId> = (0..n).map(|i| TenantId(i as u64)).collect();
    let specs = GpuSpec::uniform(GPUS, Bytes::gib(16));
    let plan_for = move |set: &ProfileSet<'_>, rates: &[f64], tenants: &[TenantId]| {
        let models = super::schedulability::set_models(set, rates);
        let opts = super::schedulability::paper_options(GPUS);
        let schedule = elastic_partitioning(&models, &opts, set).ok()?;
        let plan = ServingPlan::new(GPUS, &schedule, &models, tenants, &opts, set);
        Some((schedule, plan))
    };
    let first = plan_for(set, &vec![k.base_rate; n], &tenants)
        .ok_or_else(|| bad("the base rates are not schedulable".into()))?;
    let first_size: u32 = first.0.iter().map(|g| g.size).sum();
    let inner_tenants = tenants.clone();
    // (when, sum of gpu-let sizes) of each new schedule; None for a refused one
    let decided: Arc<Mutex<Vec<Decision>>> = Arc::default();
    let record = decided.clone();
    // models never come or go here, so the tenants are always `inner_tenants`
    let batching = k.batching();
    let reschedule = Box::new(move |now: Nanos, _: &[TenantId], rates: &[f64]| {
        let set = paper(super::UTIL_2080TI, batching, &owned, authors).ok()?;
        let out = plan_for(&set, rates, &inner_tenants);
        let size = out.as_ref().map(|(s, _)| s.iter().map(|g| g.size).sum());
        if let Ok(mut r) = record.lock() {
            r.push((now, size));
        }
        out
    });
    let policy = AdaptiveGpulets::new(
        &specs,
        first,
        tenants,
        prep,
        Nanos::from_secs(PERIOD_S),
        Nanos::from_secs(15),
        k.ewma_alpha,
        k.idle_share,
        reschedule,
    );
    // the swap itself takes no time; the 15 s of preparation are the policy's
    let perf = super::serving::serving_perf(set, super::serving::World::Measured);
    let opts = SimOptions {
        gpus: specs,
        perf,
        keep_latencies: false,
        event_budget: u64::MAX,
        sharing: Sharing::Processor,
        measure_gpus: false,
        sla_window: Some(Nanos::from_secs(PERIOD_S)),
    };
    let m = Simulation::new(&workload, Box::new(policy), opts)
        .run()
        .map_err(|source| super::ExperimentError::Sim { trial: "fluctuating".into(), source })?;
    let decided = decided.lock().map(|d| d.clone()).unwrap_or_default();
    let mut periods = Vec::new();
    for (i, (done, met)) in m.sla_windows.iter().enumerate() {
        let start = Nanos::from_secs(i as u64 * PERIOD_S);
        let scheduled_size = decided
            .iter()
            .rev()
            .find(|(t, s)| *t <= start && s.is_some())
            .and_then(|(_, s)| *s)
            .unwrap_or(first_size);
        periods.push(Period {
            start_s: i as u64 * PERIOD_S,
            offered_rps: *done as f64 / PERIOD_S as f64,
            violation: if *done == 0 { 0.0 } else { 1.0 - *met as f64 / *done as f64 },
            scheduled_size,
        });
    }
    let (done, met) = m.sla_windows.iter().fold((0, 0), |a, w| (a.0 + w.0, a.1 + w.1));
    Ok(Fluctuating {
        requests: done,
        violation: if done == 0 { 0.0 } else { 1.0 - met as f64 / done as f64 },
        reorganizations: decided.iter().filter(|d| d.1.is_some()).count(),
        refused: decided.iter().filter(|d| d.1.is_none()).count() as u64,
        periods,
    })
}

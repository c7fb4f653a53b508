//! Schedulability (gpu-lets §3.1 Figure 4, §5 Figure 15): every scenario of request
//! rates 0/200/400/600 req/s per model (all zero excepted) on 4 GPUs, judged
//! schedulable or not by squishy bin packing on whole GPUs, by squishy bin packing on
//! evenly split gpu-lets, by elastic partitioning without and with interference, and by
//! the ideal scheduler (with interference). Each scheduler's decision time per scenario
//! is measured too (wall clock on the machine that runs it, so not reproducible to the
//! byte).
//!
//! On either profile set ([`super::profiles`]): n models give 4^n - 1 scenarios (the
//! paper's five, 1,023; the four V100 models, 255).

use super::profiles::ProfileSet;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tessera_core::policies::gpulets::{
    Model, NoInterference, Options, elastic_partitioning, ideal_authors, squishy_bin_packing,
};

/// Partition sizes the schedulers may use (the paper's `Avail_Parts`).
pub const SIZES: [u32; 6] = [20, 40, 50, 60, 80, 100];
/// Batches the schedulers choose from and the profiles give (the authors' 1-32).
pub const BATCHES: std::ops::RangeInclusive<u32> = 1..=tessera_core::policies::gpulets::MAX_BATCH;
/// Per-model rates of the scenarios, req/s.
pub const RATES: [f64; 4] = [0.0, 200.0, 400.0, 600.0];

/// How many of the scenarios each scheduler finds schedulable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedulability {
    /// Models, in order.
    pub models: Vec<String>,
    /// Their SLOs, ms.
    pub slo_ms: Vec<f64>,
    /// Scenarios.
    pub scenarios: usize,
    /// Squishy bin packing on whole GPUs.
    pub sbp: usize,
    /// Squishy bin packing on two evenly split gpu-lets per GPU (Figure 4's right).
    pub sbp_split: usize,
    /// Elastic partitioning without interference.
    pub gpulet: usize,
    /// Elastic partitioning with the fitted interference model.
    pub gpulet_int: usize,
    /// The ideal scheduler, with the same interference model.
    pub ideal: usize,
    /// Scenarios the ideal scheduler schedules and gpulet+int does not.
    pub ideal_not_gpulet_int: usize,
    /// Scenarios gpulet+int schedules and the ideal scheduler does not (temporal
    /// sharing, which the ideal search leaves out).
    pub gpulet_int_not_ideal: usize,
    /// Models that squishy bin packing on evenly split gpu-lets cannot serve even alone at
    /// the lowest rate, with their latency at batch 1 on a 50% gpu-let (ms), when known:
    /// every scenario with one of them fails on split gpu-lets.
    pub split_unservable: Vec<(String, Option<f64>)>,
    /// Decision time per scenario, µs: squishy bin packing (whole GPUs).
    pub decision_us_sbp: DecisionTime,
    /// Decision time per scenario, µs: gpulet+int.
    pub decision_us_gpulet_int: DecisionTime,
    /// Decision time per scenario, µs: ideal.
    pub decision_us_ideal: DecisionTime,
}

/// A scheduler's decision times over the scenarios, µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DecisionTime {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// Largest.
    pub max: f64,
}

impl DecisionTime {
    fn of(mut times: Vec<Duration>) -> Self {
        times.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let n = times.len().max(1) as f64;
        DecisionTime {
            mean: times.iter().copied().map(us).sum::<f64>() / n,
            p50: times.get(times.len() / 2).copied().map_or(0.0, us),
            max: times.last().copied().map_or(0.0, us),
        }
    }
}

/// Run `f`, returning its result and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// Scenario `code` (1 ..= 4^n - 1) of `n` models: model i's rate is digit i of `code`
/// in base 4, mapped through [`RATES`].
pub fn scenario(code: usize, n: usize) -> Vec<f64> {
    let mut c = code;
    (0..n)
        .map(|_| {
            let r = RATES[c % RATES.len()];
            c /= RATES.len();
            r
        })
        .collect()
}

/// The schedulers' options on `gpus` GPUs: the authors' ([`Options::paper`]).
pub fn paper_options(gpus: usize) -> Options {
    Options::paper(gpus)
}

/// Run every scenario of `set` on `gpus` GPUs.
pub fn run(set: &ProfileSet<'_>, gpus: usize, stride: usize) -> Schedulability {
    let opts = paper_options(gpus);
    let n = set.models.len();
    let mut out = Schedulability {
        models: set.models.clone(),
        slo_ms: set.slo_ms.clone(),
        scenarios: 0,
        sbp: 0,
        sbp_split: 0,
        gpulet: 0,
        gpulet_int: 0,
        ideal: 0,
        ideal_not_gpulet_int: 0,
        gpulet_int_not_ideal: 0,
        split_unservable: Vec::new(),
        decision_us_sbp: DecisionTime::default(),
        decision_us_gpulet_int: DecisionTime::default(),
        decision_us_ideal: DecisionTime::default(),
    };
    let (mut t_sbp, mut t_int, mut t_ideal) = (Vec::new(), Vec::new(), Vec::new());
    // every `stride`-th scenario (1: all of them)
    for code in (1..RATES.len().pow(n as u32)).step_by(stride.max(1)) {
        let rates = scenario(code, n);
        let models = set_models(set, &rates);
        out.scenarios += 1;
        let (sbp, t) = timed(|| squishy_bin_packing(&models, &opts, 100, gpus).is_ok());
        t_sbp.push(t);
        out.sbp += usize::from(sbp);
        out.sbp_split += usize::from(squishy_bin_packing(&models, &opts, 50, 2 * gpus).is_ok());
        out.gpulet += usize::from(elastic_partitioning(&models, &opts, &NoInterference).is_ok());
        let (with_int, t) = timed(|| elastic_partitioning(&models, &opts, set).is_ok());
        t_int.push(t);
        // the authors' ideal: the scheduler on every fixed partitioning (issue 57)
        let (best, t) = timed(|| ideal_authors(&models, &opts, set).is_some());
        t_ideal.push(t);
        out.gpulet_int += usize::from(with_int);
        out.ideal += usize::from(best);
        out.ideal_not_gpulet_int += usize::from(best && !with_int);
        out.gpulet_int_not_ideal += usize::from(with_int && !best);
    }
    for m in 0..n {
        let mut alone = vec![0.0; n];
        alone[m] = RATES[1];
        if squishy_bin_packing(&set_models(set, &alone), &opts, 50, 2 * gpus).is_err() {
            out.split_unservable.push((set.models[m].clone(), set.profiles[m].latency_ms(1, 50)));
        }
    }
    out.decision_us_sbp = DecisionTime::of(t_sbp);
    out.decision_us_gpulet_int = DecisionTime::of(t_int);
    out.decision_us_ideal = DecisionTime::of(t_ideal);
    out
}

/// The set's models at these rates, as the scheduler takes them.
pub fn set_models<'a>(set: &'a ProfileSet<'_>, rates: &[f64]) -> Vec<Model<'a>> {
    set.profiles
        .iter()
        .zip(&set.slo_ms)
        .zip(rates)
        .map(|((p, slo), rate)| Model { rate: *rate, slo_ms: *slo, profile: p.as_ref() })
        .collect()
}

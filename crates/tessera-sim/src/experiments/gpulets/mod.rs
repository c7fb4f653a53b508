//! gpu-lets (spatially partitioned inference serving), reproduced piece by piece.
//!
//! Built so far: §4.4's interference model, fitted by least squares on the measured V100
//! co-locations (`data/profiles/v100-igniter/`) with the paper's 70/30 split and judged
//! beside Figure 9's error CDF ([`interference`]); on two profile sets ([`profiles`]:
//! the paper's five models, derived from the authors' 2080 Ti table and input-batching
//! costs, and the measured V100 models), the schedulability of every rate scenario under
//! squishy bin packing, elastic partitioning and the ideal scheduler, with decision times
//! (Figures 4 and 15, [`schedulability`]); the heaviest schedulable scenarios served on
//! the engine (Figure 13's measure, [`serving`]); the maximum schedulable throughput of
//! the applications and Table 5's mixes under every scheduler, served at that rate
//! (Figures 12, 13 and 16, [`throughput`]); the 1,800 s fluctuating-rate run with
//! rescheduling every 20 s (Figure 14, [`fluctuating`]). The daemon's inference mode is
//! not built; the report says so.

pub mod authors;
mod figures;
pub mod fluctuating;
pub mod interference;
mod judge;
mod parts;
pub mod profiles;
mod report;
pub mod schedulability;
pub mod serving;
pub mod throughput;
pub mod world;

use judge::{set_claims, throughput_claims};
use parts::Parts;
pub use report::report;

use super::ExperimentError;
use super::claims::{self, Claim, Comparison, Sensitivity, Test, Unit, Variation};
use profiles::ProfileSet;
use serde::{Deserialize, Serialize};
use serving::World;
use std::path::Path;
use tessera_core::policies::gpulets::{Gpulet, NoInterference, elastic_partitioning};
use tessera_gpu::partition::{Interference, Profiles, colocations_from_v100_jsonl};

/// The measured V100 profiles and co-locations (copied from `../shared/data`, cited in
/// `data/README.md`), built into the binary so the experiment runs anywhere.
pub(crate) const V100: &str =
    include_str!("../../../../../data/profiles/v100-igniter/gpulet.config.jsonl");
/// The gpu-lets authors' fitted coefficients for their RTX 2080 Ti.
const AUTHORS_2080TI: &str =
    include_str!("../../../../../data/profiles/gpulets-2080ti/INT_MODEL_CONSTANT.CSV");
/// The gpu-lets authors' per-model, per-batch table for their RTX 2080 Ti.
const UTIL_2080TI: &str = include_str!("../../../../../data/profiles/gpulets-2080ti/UTIL.CSV");
/// The gpu-lets authors' input-batching costs per input shape.
const BATCHING_2080TI: profiles::BatchingCosts<'static> = profiles::BatchingCosts {
    mnist: include_str!("../../../../../data/profiles/gpulets-2080ti/1_28_28.txt"),
    imagenet: include_str!("../../../../../data/profiles/gpulets-2080ti/3_224_224.txt"),
    camera: include_str!("../../../../../data/profiles/gpulets-2080ti/3_300_300.txt"),
    charged: Constants::USED.batching_charged,
    authors_overhead: false,
};

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuletsConfig {
    /// Seed of the 70/30 split and of the served requests.
    pub seed: u64,
    /// The constants of ours.
    #[serde(default)]
    pub constants: Constants,
    /// The simulated durations as a share of the paper's (Figure 14's 1,800 s, whose
    /// rate trace is compressed to fit, the 10 s runs of the rate searches, the 30 s
    /// runs at the maximum rates): 1 for the experiment; the tests run a tenth, which
    /// takes every code path in a fraction of the time.
    #[serde(default = "full_scale", skip_serializing_if = "is_full_scale")]
    pub scale: f64,
}

fn full_scale() -> f64 {
    1.0
}

/// The experiment's own scale is not written out, so its results read as before.
fn is_full_scale(scale: &f64) -> bool {
    *scale == 1.0
}

impl GpuletsConfig {
    /// The experiment as `tessera sim gpulets` runs it, with `seed`.
    pub fn paper(seed: u64) -> GpuletsConfig {
        GpuletsConfig { seed, constants: Constants::default(), scale: 1.0 }
    }

    /// The same experiment reduced to run in seconds (`tessera sim gpulets --quick`):
    /// a tenth of the simulated durations ([`GpuletsConfig::scale`]), which takes every
    /// code path; the numbers are a smoke run's, not the evaluation.
    pub fn quick(self) -> GpuletsConfig {
        GpuletsConfig { scale: QUICK_SCALE, ..self }
    }
}

/// [`GpuletsConfig::quick`]'s scale.
pub const QUICK_SCALE: f64 = 0.1;

/// The constants of the experiment that are ours, not the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constants {
    /// The share of the artifact's input-batching cost charged to each batch's run on
    /// its gpu-let ([`profiles::BatchingCosts::charged`]).
    pub batching_charged: f64,
    /// Figure 14's traces: each model's base rate, req/s (the paper's traces are not
    /// published).
    pub base_rate: f64,
    /// Figure 14's rate tracking: the EWMA weight of each 1 s window (the paper names no
    /// tracker).
    pub ewma_alpha: f64,
    /// Figure 14's check: the share of a schedule's resources below which they count
    /// as idle and the node is rescheduled smaller.
    pub idle_share: f64,
}

impl Constants {
    /// The values the experiment is reported with.
    pub const USED: Constants =
        Constants { batching_charged: 1.0, base_rate: 80.0, ewma_alpha: 0.3, idle_share: 0.5 };

    /// The artifact's batching costs, charged as these constants say.
    fn batching(&self) -> profiles::BatchingCosts<'static> {
        profiles::BatchingCosts { charged: self.batching_charged, ..BATCHING_2080TI }
    }
}

impl Default for Constants {
    fn default() -> Self {
        Constants::USED
    }
}

/// Error quantiles of predicted latency (relative error), on the validation share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorQuantiles {
    /// 50th percentile.
    pub p50: f64,
    /// 75th.
    pub p75: f64,
    /// 90th (Figure 9: 10.26%).
    pub p90: f64,
    /// 95th (Figure 9: 13.98%).
    pub p95: f64,
    /// 99th.
    pub p99: f64,
    /// The error at each percentile from 1 to 100 (the CDF of Figure 9).
    pub cdf: Vec<f64>,
}

/// One scenario served with each scheduler's schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServingRow {
    /// Rates, req/s, by model.
    pub rates: Vec<f64>,
    /// gpulet's schedule served: SLO violation (0-1), if it scheduled the scenario.
    pub gpulet: Option<f64>,
    /// gpulet+int's, likewise.
    pub gpulet_int: Option<f64>,
    /// Of gpulet+int's requests, the share dropped (0-1): waited past the point of
    /// meeting their SLO (counted in its violations).
    pub gpulet_int_dropped: f64,
    /// Requests served in the gpulet+int run.
    pub requests: usize,
    /// The model with the largest part of gpulet+int's violations, when any.
    pub most_missed: Option<MissedModel>,
    /// gpulet+int's violation served in the planner's own model (the profiles' means,
    /// the fitted interference): the labelled reference for `gpulet_int`, which is
    /// served in the measured world (issue 57 item 1).
    #[serde(default)]
    pub gpulet_int_planner_world: Option<f64>,
}

/// The model that missed most in a served scenario, and how it was scheduled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MissedModel {
    /// Its name.
    pub model: String,
    /// Its requests late or dropped, as a fraction of all the scenario's requests.
    pub part: f64,
    /// Its gpu-lets: size %, batch, rate req/s, profiled run ms at that batch and size
    /// (no interference), and load (rate × run / batch: the busy fraction it asks).
    pub gpulets: Vec<(u32, u32, f64, f64, f64)>,
}

impl MissedModel {
    /// The worst of `by_model` (parts of all requests) in `schedule` of models with
    /// profiles `kinds` in `set`, if any missed.
    fn of(
        set: &ProfileSet<'_>,
        kinds: &[usize],
        by_model: &[f64],
        schedule: &[Gpulet],
    ) -> Option<MissedModel> {
        let (k, part) = by_model
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, x)| *x > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        let gpulets = schedule
            .iter()
            .flat_map(|g| g.served.iter().filter(|s| s.model == k).map(move |s| (g.size, s)))
            .map(|(size, s)| {
                let run = set.profiles[kinds[k]].latency_ms(s.batch, size).unwrap_or(f64::NAN);
                (size, s.batch, s.rate, run, s.rate * run / f64::from(s.batch) / 1000.0)
            })
            .collect();
        let name = &set.models[kinds[k]];
        let model = if kinds.iter().filter(|x| **x == kinds[k]).count() > 1 {
            format!("{name} (model {})", k + 1)
        } else {
            name.clone()
        };
        Some(MissedModel { model, part, gpulets })
    }

    /// `lenet 3.32 points: batch 1 at 400 req/s on 50% (run 2.21 ms, load 0.88)`.
    fn describe(&self) -> String {
        let lets: Vec<String> = self
            .gpulets
            .iter()
            .map(|(size, b, rate, run, load)| {
                format!("batch {b} at {rate:.0} req/s on {size}% (run {run:.2} ms, load {load:.2})")
            })
            .collect();
        format!("{} {:.2} points: {}", self.model, 100.0 * self.part, lets.join("; "))
    }
}

/// A workload served at a scheduler's maximum schedulable rate (Figure 13).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtMaxRate {
    /// The workload.
    pub mix: String,
    /// gpulet's maximum total rate, req/s, and its schedule's SLO violation there (0-1).
    pub gpulet: (f64, Option<f64>),
    /// gpulet+int's, likewise.
    pub gpulet_int: (f64, Option<f64>),
    /// gpulet+int's violation at its maximum in the planner's own model (the reference;
    /// the judged runs are served in the measured world).
    #[serde(default)]
    pub gpulet_int_planner_world: Option<f64>,
    /// Requests served in the gpulet+int run.
    pub requests: usize,
    /// The model with the largest part of gpulet+int's violations, when any.
    pub most_missed: Option<MissedModel>,
    /// gpulet+int served below its maximum, at each share of it in [`RAMP`]: the share
    /// and the violation there (`None`: not schedulable there). Figure 13's "every rate
    /// it calls schedulable" (issue 57: only the maximum was served before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ramp: Vec<(f64, Option<f64>)>,
}

/// The shares of gpulet+int's maximum rate Figure 13's ramp is served at, below the
/// maximum itself (the paper raised its rates step by step until neither scheduler
/// called them schedulable).
pub const RAMP: [f64; 4] = [0.2, 0.4, 0.6, 0.8];

/// Schedulability and serving on one profile set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetResults {
    /// `paper` or `v100`.
    pub set: String,
    /// Schedulability of the rate scenarios (Figures 4 and 15).
    pub schedulability: schedulability::Schedulability,
    /// Serving the heaviest schedulable scenarios (Figure 13's measure).
    pub serving: Vec<ServingRow>,
    /// Every scenario gpulet+int calls schedulable, served (Figure 13's "every rate it
    /// calls schedulable", issue 57 item 4).
    #[serde(default)]
    pub every: EveryScenario,
}

/// Every scenario gpulet+int schedules, each served on its schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EveryScenario {
    /// Simulated seconds each scenario is served.
    pub seconds: f64,
    /// Scenarios served (those gpulet+int schedules, of those judged).
    pub served: usize,
    /// Requests answered over all of them.
    pub requests: usize,
    /// Scenarios whose violations exceed 1%.
    pub over_1pct: usize,
    /// The mean of the scenarios' violations.
    pub mean: f64,
    /// The worst scenario's violation and rates.
    pub worst: f64,
    pub worst_rates: Vec<f64>,
    /// The scenarios over 1% served again in the planner's own model (the reference,
    /// issue 57 item 1): how many stay over 1% there (the rest miss because the world
    /// is not the planner's), and the worst there.
    #[serde(default)]
    pub reference_over_1pct: usize,
    #[serde(default)]
    pub reference_worst: f64,
}

/// Everything the run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuletsResults {
    /// `tessera.sim.gpulets/2`.
    pub schema: String,
    /// The configuration.
    pub config: GpuletsConfig,
    /// Co-location rows in the data.
    pub rows: usize,
    /// Models in the V100 profiles.
    pub models: usize,
    /// Samples (both sides of each row whose profile points exist).
    pub samples: usize,
    /// Training and validation sizes.
    pub split: (usize, usize),
    /// Our fitted c1..c5.
    pub fitted: [f64; 5],
    /// Our fit's errors on the validation share.
    pub fitted_errors: ErrorQuantiles,
    /// The authors' 2080 Ti coefficients.
    pub authors_2080ti: [f64; 5],
    /// Their errors on the same (V100) validation share.
    pub authors_errors: ErrorQuantiles,
    /// Per profile set: `paper` first, then `v100`.
    pub sets: Vec<SetResults>,
    /// Maximum schedulable throughput per workload and scheduler, `paper` set
    /// (Figures 12 and 16).
    pub throughput: Vec<throughput::MixThroughput>,
    /// The workloads served at gpulet's and gpulet+int's maximum rates, 30 s each.
    pub at_max_rate: Vec<AtMaxRate>,
    /// The 1,800 s run with fluctuating rates and rescheduling every 20 s (Figure 14).
    pub fluctuating: fluctuating::Fluctuating,
    /// The claims, judged.
    pub claims: Vec<Claim>,
    /// The claims as (id, paper, ours, holds).
    pub comparisons: Vec<Comparison>,
    /// The measured world the serving runs take place in (issue 57 item 1): each
    /// `v100` model's latency spread (coefficient of variation) and the co-location
    /// points its interference is taken from.
    #[serde(default)]
    pub world_cv: Vec<(String, f64)>,
    #[serde(default)]
    pub world_points: usize,
    /// The authors' code's departures from Algorithm 1 as named variants (issue 57).
    #[serde(default)]
    pub authors_variants: Option<authors::AuthorsVariants>,
    /// The claims judged again at a low and a high value of each constant of ours
    /// ([`sensitivity`]); empty when not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<Sensitivity>,
}

fn quantiles(errors: &[f64]) -> ErrorQuantiles {
    let q = |p| interference::quantile(errors, p).unwrap_or(f64::NAN);
    let cdf = (1..=100).map(|p| q(f64::from(p) / 100.0)).collect();
    ErrorQuantiles { p50: q(0.5), p75: q(0.75), p90: q(0.9), p95: q(0.95), p99: q(0.99), cdf }
}

/// Schedulability and serving on `set`, 4 GPUs.
fn on_set(set: &ProfileSet<'_>, seed: u64, scale: f64) -> Result<SetResults, ExperimentError> {
    Ok(SetResults {
        set: set.name.into(),
        // a shorter run judges every `1 / scale`-th scenario
        schedulability: schedulability::run(set, 4, (1.0 / scale).round().max(1.0) as usize),
        serving: serve_heaviest(set, seed)?,
        every: serve_every(set, seed, scale)?,
    })
}

/// Simulated seconds each of [`serve_every`]'s scenarios is served (at scale 1): 5 s, so
/// that the 1,528 servings of the run and its sensitivity re-runs (646 of the `paper` set
/// twice, 236 of the `v100` set) stay within issue 55's minute (10 s took the run from 32 to
/// 67 s of CPU).
pub const EVERY_SECONDS: f64 = 5.0;

/// Serve every scenario gpulet+int schedules (every `1 / scale`-th, as the
/// schedulability count judges them) for [`EVERY_SECONDS`] times `scale`, in parallel
/// (each scenario's arrivals seeded alike, so the result does not depend on the
/// threads).
fn serve_every(
    set: &ProfileSet<'_>,
    seed: u64,
    scale: f64,
) -> Result<EveryScenario, ExperimentError> {
    use rayon::prelude::*;
    let n = set.models.len();
    let opts = schedulability::paper_options(4);
    let kinds: Vec<usize> = (0..n).collect();
    let node =
        serving::Node { set, models: &kinds, slo_ms: &set.slo_ms, world: World::Measured, gpus: 4 };
    let stride = (1.0 / scale).round().max(1.0) as usize;
    let seconds = EVERY_SECONDS * scale;
    let codes: Vec<usize> =
        (1..schedulability::RATES.len().pow(n as u32)).step_by(stride).collect();
    let planner = serving::Node { world: World::Planner, ..node };
    // each scheduled scenario served in the measured world, and, where it misses over
    // 1% there, again in the planner's own model (the reference)
    let served: Vec<(Vec<f64>, serving::Served, Option<f64>)> = codes
        .par_iter()
        .map(|&code| {
            let rates = schedulability::scenario(code, n);
            let models = schedulability::set_models(set, &rates);
            let Ok(schedule) = elastic_partitioning(&models, &opts, set) else { return Ok(None) };
            let fail =
                |source| ExperimentError::Sim { trial: format!("serving {rates:?}"), source };
            let served = serving::serve(&node, &rates, &schedule, seconds, seed).map_err(fail)?;
            let reference = if served.violation > 0.01 {
                Some(
                    serving::serve(&planner, &rates, &schedule, seconds, seed)
                        .map_err(fail)?
                        .violation,
                )
            } else {
                None
            };
            Ok(Some((rates, served, reference)))
        })
        .collect::<Result<Vec<_>, ExperimentError>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut every = EveryScenario { seconds, served: served.len(), ..EveryScenario::default() };
    for (rates, s, reference) in &served {
        if let Some(v) = *reference {
            every.reference_over_1pct += usize::from(v > 0.01);
            every.reference_worst = every.reference_worst.max(v);
        }
        every.requests += s.requests;
        every.over_1pct += usize::from(s.violation > 0.01);
        every.mean += s.violation / served.len() as f64;
        if s.violation > every.worst || every.worst_rates.is_empty() {
            every.worst = s.violation;
            every.worst_rates = rates.clone();
        }
    }
    Ok(every)
}

/// Build the `paper` profile set (with the authors' interference coefficients) and hand
/// it to `f`.
pub fn with_paper_set<T>(f: impl FnOnce(&ProfileSet<'_>) -> T) -> Result<T, ExperimentError> {
    let bad = |e: tessera_gpu::partition::PartitionError| ExperimentError::Config(e.to_string());
    let profiles = Profiles::from_v100_jsonl(V100).map_err(bad)?;
    let authors = Interference::from_csv(AUTHORS_2080TI).map_err(bad)?;
    let paper = profiles::paper(UTIL_2080TI, BATCHING_2080TI, &profiles, authors)
        .map_err(|e| ExperimentError::Config(e.to_string()))?;
    Ok(f(&paper))
}

/// Run the experiment.
pub fn run(cfg: &GpuletsConfig) -> Result<GpuletsResults, ExperimentError> {
    measure(cfg, true, &Parts::default())
}

/// Run it; the authors' variants only `with_variants` (they judge no claim, so the
/// sensitivity re-runs leave them out).
fn measure(
    cfg: &GpuletsConfig,
    with_variants: bool,
    parts: &Parts,
) -> Result<GpuletsResults, ExperimentError> {
    if !(cfg.scale > 0.0 && cfg.scale <= 1.0) {
        return Err(ExperimentError::Config(format!("scale must be in (0, 1], got {}", cfg.scale)));
    }
    let bad = |e: tessera_gpu::partition::PartitionError| ExperimentError::Config(e.to_string());
    let profiles = Profiles::from_v100_jsonl(V100).map_err(bad)?;
    let rows = colocations_from_v100_jsonl(V100).map_err(bad)?;
    let authors = Interference::from_csv(AUTHORS_2080TI).map_err(bad)?;
    let samples = interference::samples(&profiles, &rows);
    let (training, validation) = interference::split(&samples, cfg.seed);
    let fitted = fit_on(&training)?;
    let fitted_errors = quantiles(&interference::errors(&fitted, &validation));
    let authors_errors = quantiles(&interference::errors(&authors, &validation));
    let v100 = profiles::v100(&profiles, fitted);
    // the judged serving runs take place in the measured world, not the planner's
    let v100_world = world::measured(&v100, &profiles, V100, cfg.seed)?;
    let world_cv: Vec<(String, f64)> = v100
        .models
        .iter()
        .enumerate()
        .filter_map(|(k, m)| Some((m.clone(), *v100_world.cv.get(&(k as u32))?)))
        .collect();
    let world_points = v100_world.colocated.values().map(Vec::len).sum();
    let v100 = v100.with_world(v100_world);
    // each part computed once for what decides it (a sensitivity re-run asks again for
    // what its constant does not reach)
    let (paper_set, throughput, at_max_rate) = parts.paper(cfg, || {
        let paper = profiles::paper(UTIL_2080TI, cfg.constants.batching(), &profiles, authors)
            .map_err(|e| ExperimentError::Config(e.to_string()))?;
        let paper_world = world::measured(&paper, &profiles, V100, cfg.seed)?;
        let paper = paper.with_world(paper_world);
        let set = on_set(&paper, cfg.seed, cfg.scale)?;
        let throughput = throughput::run(&paper, cfg.seed, cfg.scale).map_err(|source| {
            ExperimentError::Sim { trial: "maximum served rates".into(), source }
        })?;
        let at_max_rate = serve_at_max(&paper, &throughput, cfg.seed, cfg.scale)?;
        Ok((set, throughput, at_max_rate))
    })?;
    let sets = vec![paper_set, parts.v100(cfg, || on_set(&v100, cfg.seed, cfg.scale))?];
    let fluctuating =
        parts.fluctuating(cfg, || fluctuating::run(cfg.seed, &cfg.constants, cfg.scale))?;
    // every scenario in the full run, every tenth in a quick one
    let stride = if cfg.scale < 1.0 { 10 } else { 1 };
    let authors_variants = if with_variants {
        Some(authors::run(&profiles, authors, fitted, cfg.constants.batching(), stride)?)
    } else {
        None
    };
    // tolerances fixed before reading our numbers: 5 points of error on each quantile
    let mut claims = vec![
        Claim::judge(
            "fig9-90",
            "V100, 30% validation",
            "§4.4, Figure 9",
            "90% of interference predictions are within 10.26% error",
            // two-sided (issue 57): an error far below the paper's is another fit's
            Test::Near { paper: 0.1026, tolerance: 0.05 },
            Unit::Percent,
            Some(fitted_errors.p90),
            format!("our 90th-percentile error over {} validation samples", validation.len()),
        ),
        Claim::judge(
            "fig9-95",
            "V100, 30% validation",
            "§4.4, Figure 9",
            "95% of interference predictions are within 13.98% error",
            // two-sided (issue 57): an error far below the paper's is another fit's
            Test::Near { paper: 0.1398, tolerance: 0.05 },
            Unit::Percent,
            Some(fitted_errors.p95),
            format!("our 95th-percentile error over {} validation samples", validation.len()),
        ),
    ];
    claims.extend(sets.iter().flat_map(set_claims));
    claims.extend(throughput_claims(&throughput, &at_max_rate));
    claims.push(Claim::judge(
        "fig14",
        "paper models, 4 GPUs, 1,800 s of fluctuating Poisson rates, rescheduled every 20 s",
        "§6.2, Figure 14",
        "with rates rising and falling, only 0.14% of requests violate their SLO (judged within a \
         factor 2: ±1 point, before 2026-12-04, reached below zero and was one-sided in effect)",
        Test::RatioNear { paper: 0.0014, factor: 2.0 },
        Unit::Percent,
        Some(fluctuating.violation),
        format!(
            "{} requests, {} reorganizations, {} reschedules refused as not schedulable",
            fluctuating.requests, fluctuating.reorganizations, fluctuating.refused
        ),
    ));
    let comparisons = claims::comparisons(&claims);
    Ok(GpuletsResults {
        schema: "tessera.sim.gpulets/2".into(),
        config: cfg.clone(),
        rows: rows.len(),
        models: profiles.models.len(),
        samples: samples.len(),
        split: (training.len(), validation.len()),
        fitted: fitted.c,
        fitted_errors,
        authors_2080ti: authors.c,
        authors_errors,
        sets,
        throughput,
        at_max_rate,
        fluctuating,
        claims,
        comparisons,
        world_cv,
        world_points,
        authors_variants,
        sensitivity: Vec::new(),
    })
}

fn fit_on(training: &[interference::Sample]) -> Result<Interference, ExperimentError> {
    interference::fit(training)
        .ok_or_else(|| ExperimentError::Config("the interference fit is degenerate".into()))
}

/// The interference model's c1..c5 fitted on `seed`'s 70% training split of the V100
/// co-locations: what [`run`] fits, without the rest of the experiment.
pub fn interference_fit(seed: u64) -> Result<[f64; 5], ExperimentError> {
    let bad = |e: tessera_gpu::partition::PartitionError| ExperimentError::Config(e.to_string());
    let profiles = Profiles::from_v100_jsonl(V100).map_err(bad)?;
    let rows = colocations_from_v100_jsonl(V100).map_err(bad)?;
    let samples = interference::samples(&profiles, &rows);
    Ok(fit_on(&interference::split(&samples, seed).0)?.c)
}

/// Every constant of ours, with the range we think plausible (the reason in `what`).
fn variations() -> Vec<Variation<Constants>> {
    vec![
        Variation {
            name: "batching_charged",
            what: "share of the input-batching cost charged to the batch on its gpu-let \
                   (the paper does not say whether its frontend overlaps it)",
            show: |k| k.batching_charged.to_string(),
            low: |k| k.batching_charged = 0.0,
            high: |k| k.batching_charged = 1.0,
        },
        Variation {
            name: "base_rate",
            what: "Figure 14's base rate per model, req/s (its traces are not published)",
            show: |k| k.base_rate.to_string(),
            low: |k| k.base_rate = 40.0,
            high: |k| k.base_rate = 120.0,
        },
        Variation {
            name: "ewma_alpha",
            what: "Figure 14's rate tracking, the weight of each 1 s window",
            show: |k| k.ewma_alpha.to_string(),
            low: |k| k.ewma_alpha = 0.1,
            high: |k| k.ewma_alpha = 0.7,
        },
        Variation {
            name: "idle_share",
            what: "Figure 14's check, the used share of a schedule below which it is idle",
            show: |k| k.idle_share.to_string(),
            low: |k| k.idle_share = 0.3,
            high: |k| k.idle_share = 0.7,
        },
    ]
}

/// Each constant of ours at its low and high value, every other as used: every claim
/// judged again beside those of `results`.
pub fn sensitivity(results: &GpuletsResults) -> Result<Vec<Sensitivity>, ExperimentError> {
    sensitivity_with(results, &Parts::default())
}

/// [`sensitivity`], taking from `parts` what a constant does not reach.
fn sensitivity_with(
    results: &GpuletsResults,
    parts: &Parts,
) -> Result<Vec<Sensitivity>, ExperimentError> {
    let cfg = &results.config;
    claims::sensitivity(
        &cfg.constants,
        &results.claims,
        &variations(),
        |_| true,
        |k| {
            measure(&GpuletsConfig { constants: *k, ..cfg.clone() }, false, parts).map(|r| r.claims)
        },
    )
}

impl GpuletsResults {
    /// The results with the schedulers' decision times zeroed: what two runs of the same
    /// configuration agree on to the bit.
    pub fn without_timings(mut self) -> Self {
        for set in &mut self.sets {
            let s = &mut set.schedulability;
            for t in
                [&mut s.decision_us_sbp, &mut s.decision_us_gpulet_int, &mut s.decision_us_ideal]
            {
                *t = schedulability::DecisionTime::default();
            }
        }
        self
    }
}

/// Serve each workload for 30 s at gpulet's and at gpulet+int's maximum rate, each with
/// its own schedule.
fn serve_at_max(
    set: &ProfileSet<'_>,
    found: &[throughput::MixThroughput],
    seed: u64,
    scale: f64,
) -> Result<Vec<AtMaxRate>, ExperimentError> {
    use throughput::Scheduler;
    found
        .iter()
        .map(|t| {
            let per_unit = t.mix.counted_per_unit();
            // `s`'s schedule at `share` of its maximum total rate, served for 30 s
            let serve_in = |world: World, s: Scheduler, share: f64| {
                let total = t.of(s);
                let units = total * share / per_unit;
                throughput::serve_at(set, &t.mix, s, units, 30.0 * scale, seed, world).map_err(
                    |source| ExperimentError::Sim {
                        trial: format!("{} at {share} of {total:.0}", t.mix.name),
                        source,
                    },
                )
            };
            let serve = |s: Scheduler, share: f64| serve_in(World::Measured, s, share);
            let mut requests = 0;
            let mut most_missed = None;
            let mut at = |s: Scheduler| -> Result<(f64, Option<f64>), ExperimentError> {
                let total = t.of(s);
                if total <= 0.0 {
                    return Ok((total, None));
                }
                let Some((schedule, served)) = serve(s, 1.0)? else { return Ok((total, None)) };
                if s == Scheduler::GpuletInt {
                    requests = served.requests;
                    most_missed = MissedModel::of(set, &t.mix.models, &served.by_model, &schedule);
                }
                Ok((total, Some(served.violation)))
            };
            let gpulet = at(Scheduler::Gpulet)?;
            let gpulet_int = at(Scheduler::GpuletInt)?;
            let gpulet_int_planner_world = if gpulet_int.0 > 0.0 {
                serve_in(World::Planner, Scheduler::GpuletInt, 1.0)?.map(|(_, x)| x.violation)
            } else {
                None
            };
            let mut ramp = Vec::new();
            if gpulet_int.0 > 0.0 {
                for share in RAMP {
                    let served = serve(Scheduler::GpuletInt, share)?;
                    ramp.push((share, served.map(|(_, x)| x.violation)));
                }
            }
            Ok(AtMaxRate {
                mix: t.mix.name.clone(),
                gpulet,
                gpulet_int,
                gpulet_int_planner_world,
                requests,
                most_missed,
                ramp,
            })
        })
        .collect()
}

/// The mean over workloads of `f`, where it is finite.
fn mean_over(
    found: &[throughput::MixThroughput],
    f: impl Fn(&throughput::MixThroughput) -> f64,
) -> Option<f64> {
    let v: Vec<f64> = found.iter().map(f).filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Serve, for 30 s each, the five scenarios with the highest total rate that
/// gpulet+int schedules, with gpulet's schedule beside where it has one.
fn serve_heaviest(set: &ProfileSet<'_>, seed: u64) -> Result<Vec<ServingRow>, ExperimentError> {
    let n = set.models.len();
    let opts = schedulability::paper_options(4);
    let kinds: Vec<usize> = (0..n).collect();
    let node =
        serving::Node { set, models: &kinds, slo_ms: &set.slo_ms, world: World::Measured, gpus: 4 };
    let mut candidates: Vec<Vec<f64>> = (1..schedulability::RATES.len().pow(n as u32))
        .map(|c| schedulability::scenario(c, n))
        .collect();
    candidates.sort_by(|a, b| b.iter().sum::<f64>().total_cmp(&a.iter().sum::<f64>()));
    let mut rows = Vec::new();
    for rates in candidates {
        if rows.len() == 5 {
            break;
        }
        let models = schedulability::set_models(set, &rates);
        let Ok(with_int) = elastic_partitioning(&models, &opts, set) else { continue };
        let run_in = |node: &serving::Node<'_>, schedule: &[Gpulet]| {
            serving::serve(node, &rates, schedule, 30.0, seed).map_err(|source| {
                ExperimentError::Sim { trial: format!("serving {rates:?}"), source }
            })
        };
        let run = |schedule: &[Gpulet]| run_in(&node, schedule);
        let served = run(&with_int)?;
        let planner = serving::Node { world: World::Planner, ..node };
        let in_planner_world = run_in(&planner, &with_int)?.violation;
        let without = match elastic_partitioning(&models, &opts, &NoInterference) {
            Ok(s) => Some(run(&s)?.violation),
            Err(_) => None,
        };
        rows.push(ServingRow {
            rates,
            gpulet: without,
            gpulet_int: Some(served.violation),
            gpulet_int_dropped: served.dropped,
            requests: served.requests,
            most_missed: MissedModel::of(set, &kinds, &served.by_model, &with_int),
            gpulet_int_planner_world: Some(in_planner_world),
        });
    }
    Ok(rows)
}

fn pct(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

/// Run and write `results.json` and `report.md` into `out`.
pub fn run_and_write(cfg: &GpuletsConfig, out: &Path) -> Result<GpuletsResults, ExperimentError> {
    let parts = Parts::default();
    let mut r = measure(cfg, true, &parts)?;
    r.sensitivity = sensitivity_with(&r, &parts)?;
    let (paper, v100, fluctuating) = parts.computed();
    tracing::info!(
        "gpulets: computed the paper set's parts {paper} times, the v100 set's {v100}, Figure 14 {fluctuating} (9 measures)"
    );
    write(&r, out)?;
    Ok(r)
}

/// Write `r`'s `results.json`, `report.md` and figures to `out` (without the
/// sensitivity re-runs unless `r` has them: `tessera sim gpulets --quick` leaves them out).
pub fn write(r: &GpuletsResults, out: &Path) -> Result<(), ExperimentError> {
    super::write_results(out, r, &report(r))?;
    figures::draw(r, out)
}

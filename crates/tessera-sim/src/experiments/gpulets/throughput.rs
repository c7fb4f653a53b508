//! Maximum schedulable throughput (gpu-lets §6.2, Figures 12 and 16, Table 5) on the
//! `paper` profile set, 4 GPUs: for the two multi-model applications (`game`: six LeNet
//! and one ResNet-50 inference per frame, 95 ms; `traffic`: SSD-MobileNet, then
//! GoogLeNet and VGG-16 on what it found, 136 ms) and Table 5's three request mixes
//! (`equal`, `long-only`, `short-skew`), the largest multiple of the mix each scheduler
//! calls schedulable, as the total of its models' request rates.
//!
//! The paper raises rates "until SLO violation happens" on its prototype; we raise them
//! until the scheduler says not schedulable (doubling, then bisection to 1 req/s of the
//! total), and serve gpulet+int's schedule at that rate separately (Figure 13's
//! measure), so that throughput and violations are reported side by side rather than
//! one hidden in the other. Schedulability need not be monotone in the rate for a
//! greedy scheduler; the search reports the first boundary it finds.
//!
//! The applications' per-model SLOs are our reading: `game`'s models run in parallel, so
//! each has the application's 95 ms; `traffic`'s two phases run in sequence, so its
//! 136 ms is split between them in proportion to their Table 4 SLOs (SSD 136 ms, the
//! second phase's longest, VGG-16, 130 ms).

use super::profiles::{PAPER_MODELS, ProfileSet};
use super::serving::{Node, Served, World, serve};
use crate::engine::SimError;
use serde::{Deserialize, Serialize};
use tessera_core::policies::gpulets::{
    Gpulet, Model, NoInterference, Options, elastic_partitioning, guided_self_tuning,
    ideal_authors, squishy_bin_packing,
};

/// GPUs of the server.
pub const GPUS: usize = 4;

/// One workload: its models, their rates for one unit of it, and their SLOs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// `game`, `traffic`, `equal`, `long-only` or `short-skew`.
    pub name: String,
    /// Each model served, as its profile in [`PAPER_MODELS`] order: `game`'s six LeNets
    /// are six models with one profile (the authors' configuration: lenet1-lenet6).
    pub models: Vec<usize>,
    /// Requests per second of each model per unit.
    pub per_unit: Vec<f64>,
    /// Each model's SLO here, ms.
    pub slo_ms: Vec<f64>,
    /// Whether a unit is one application request (`game`, `traffic`: throughput is
    /// counted in application requests, as we read Figure 12) rather than a set of model
    /// requests (Table 5's mixes: throughput is the total of the models' rates).
    pub application: bool,
}

impl Mix {
    /// Requests counted as throughput per unit.
    pub fn counted_per_unit(&self) -> f64 {
        if self.application { 1.0 } else { self.per_unit.iter().sum() }
    }
}

/// The five workloads of Figure 12.
pub fn mixes() -> Vec<Mix> {
    let table4: Vec<f64> = PAPER_MODELS.iter().map(|m| m.1).collect();
    let slo = |name: &str| PAPER_MODELS.iter().find(|m| m.0 == name).map_or(f64::NAN, |m| m.1);
    // order: googlenet, lenet, resnet50, ssd-mobilenetv1, vgg16
    let phase1 = 136.0 * slo("ssd-mobilenetv1") / (slo("ssd-mobilenetv1") + slo("vgg16"));
    let phase2 = 136.0 - phase1;
    vec![
        // six distinct LeNets (each its own queue and batches) and one ResNet-50
        Mix {
            name: "game".into(),
            models: vec![1, 1, 1, 1, 1, 1, 2],
            per_unit: vec![1.0; 7],
            slo_ms: vec![95.0; 7],
            application: true,
        },
        Mix {
            name: "traffic".into(),
            models: vec![0, 3, 4],
            per_unit: vec![1.0, 1.0, 1.0],
            slo_ms: vec![phase2, phase1, phase2],
            application: true,
        },
        // Table 5, as rates of 50 req/s per unit
        Mix {
            name: "equal".into(),
            models: (0..5).collect(),
            per_unit: vec![1.0; 5],
            slo_ms: table4.clone(),
            application: false,
        },
        Mix {
            name: "long-only".into(),
            models: (0..5).collect(),
            per_unit: vec![0.0, 0.0, 2.0, 2.0, 2.0],
            slo_ms: table4.clone(),
            application: false,
        },
        Mix {
            name: "short-skew".into(),
            models: (0..5).collect(),
            per_unit: vec![2.0, 2.0, 2.0, 1.0, 1.0],
            slo_ms: table4,
            application: false,
        },
    ]
}

/// The schedulers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// Squishy bin packing on whole GPUs.
    Sbp,
    /// Guided self-tuning.
    GuidedSelfTuning,
    /// Elastic partitioning without interference.
    Gpulet,
    /// Elastic partitioning with interference.
    GpuletInt,
    /// The ideal scheduler, with interference.
    Ideal,
}

impl Scheduler {
    /// All of them, in the report's order.
    pub const ALL: [Scheduler; 5] = [
        Scheduler::Sbp,
        Scheduler::GuidedSelfTuning,
        Scheduler::Gpulet,
        Scheduler::GpuletInt,
        Scheduler::Ideal,
    ];

    /// Its name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Scheduler::Sbp => "SBP",
            Scheduler::GuidedSelfTuning => "guided self-tuning",
            Scheduler::Gpulet => "gpulet",
            Scheduler::GpuletInt => "gpulet+int",
            Scheduler::Ideal => "ideal",
        }
    }

    /// Its schedule for `models`, or `None` when it calls them not schedulable.
    pub fn schedule(
        self,
        set: &ProfileSet<'_>,
        kinds: &[usize],
        models: &[Model<'_>],
    ) -> Option<Vec<Gpulet>> {
        self.schedule_with(set, kinds, models, &super::schedulability::paper_options(GPUS))
    }

    /// [`Scheduler::schedule`] with `opts` (the authors' variants, issue 57).
    pub fn schedule_with(
        self,
        set: &ProfileSet<'_>,
        kinds: &[usize],
        models: &[Model<'_>],
        opts: &Options,
    ) -> Option<Vec<Gpulet>> {
        let opts = opts.clone();
        let set = &set.of_models(kinds);
        match self {
            Scheduler::Sbp => squishy_bin_packing(models, &opts, 100, GPUS).ok(),
            Scheduler::GuidedSelfTuning => guided_self_tuning(models, &opts).ok(),
            Scheduler::Gpulet => elastic_partitioning(models, &opts, &NoInterference).ok(),
            Scheduler::GpuletInt => elastic_partitioning(models, &opts, set).ok(),
            // the authors' ideal: the scheduler on every fixed partitioning (issue 57)
            Scheduler::Ideal => ideal_authors(models, &opts, set).map(|(_, s)| s),
        }
    }
}

/// The models of `mix` at `units` of it, profiles from `set`.
pub fn models_at<'a>(set: &'a ProfileSet<'_>, mix: &Mix, units: f64) -> Vec<Model<'a>> {
    mix.models
        .iter()
        .zip(&mix.slo_ms)
        .zip(&mix.per_unit)
        .map(|((k, slo), r)| Model {
            rate: r * units,
            slo_ms: *slo,
            profile: set.profiles[*k].as_ref(),
        })
        .collect()
}

/// The largest number of units of `mix` that `scheduler` calls schedulable: doubling from
/// one unit until it says no, then bisection until the bracket is under 1 req/s of
/// counted throughput (0 when even one unit is not schedulable).
pub fn max_units(set: &ProfileSet<'_>, mix: &Mix, scheduler: Scheduler) -> f64 {
    max_units_with(set, mix, scheduler, &super::schedulability::paper_options(GPUS))
}

/// [`max_units`] with `opts`.
pub fn max_units_with(
    set: &ProfileSet<'_>,
    mix: &Mix,
    scheduler: Scheduler,
    opts: &Options,
) -> f64 {
    let ok = |units: f64| {
        scheduler.schedule_with(set, &mix.models, &models_at(set, mix, units), opts).is_some()
    };
    let per_unit = mix.counted_per_unit();
    let (mut lo, mut hi) = (0.0, 1.0);
    while ok(hi) {
        lo = hi;
        hi *= 2.0;
        if hi > 1e6 {
            return lo;
        }
    }
    while (hi - lo) * per_unit > 1.0 {
        let mid = (lo + hi) / 2.0;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Violations at most this share of requests count as served within the SLOs (the
/// paper's Figure 13 bound).
pub const VIOLATION_TARGET: f64 = 0.01;

/// How long each step of the served search serves, s.
pub const SEARCH_SECONDS: f64 = 10.0;

/// The served search's step down, as a share of the schedulable maximum.
pub const SEARCH_STEP: f64 = 0.02;

/// One workload's maximum throughput under each scheduler, req/s (application
/// requests for an application), in [`Scheduler::ALL`] order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixThroughput {
    /// The workload.
    pub mix: Mix,
    /// Counted request rate at each scheduler's largest schedulable multiple.
    pub throughput: Vec<f64>,
    /// Counted request rate at each scheduler's largest multiple that is schedulable and
    /// whose schedule, served for [`SEARCH_SECONDS`], keeps violations within
    /// [`VIOLATION_TARGET`] (Figure 12's measure: the paper raised rates on its
    /// prototype until SLO violations appeared); 0 when none is.
    pub served: Vec<f64>,
    /// The violations measured there (`None`: no rate served within the target).
    pub served_violation: Vec<Option<f64>>,
}

impl MixThroughput {
    /// The schedulable throughput under `s`.
    pub fn of(&self, s: Scheduler) -> f64 {
        Self::pick(&self.throughput, s)
    }

    /// The served throughput under `s`.
    pub fn served_of(&self, s: Scheduler) -> f64 {
        Self::pick(&self.served, s)
    }

    fn pick(v: &[f64], s: Scheduler) -> f64 {
        Scheduler::ALL
            .iter()
            .position(|x| *x == s)
            .and_then(|i| v.get(i).copied())
            .unwrap_or(f64::NAN)
    }
}

/// Serve `scheduler`'s schedule of `mix` at `units` for `seconds` on the engine in
/// `world`; `None` when it does not schedule them.
pub fn serve_at(
    set: &ProfileSet<'_>,
    mix: &Mix,
    scheduler: Scheduler,
    units: f64,
    seconds: f64,
    seed: u64,
    world: World,
) -> Result<Option<(Vec<Gpulet>, Served)>, SimError> {
    let models = models_at(set, mix, units);
    let Some(schedule) = scheduler.schedule(set, &mix.models, &models) else { return Ok(None) };
    let rates: Vec<f64> = models.iter().map(|m| m.rate).collect();
    let node = Node { set, models: &mix.models, slo_ms: &mix.slo_ms, world, gpus: GPUS };
    let served = serve(&node, &rates, &schedule, seconds, seed)?;
    Ok(Some((schedule, served)))
}

/// The largest multiple of `mix`, at most `schedulable` units, that `scheduler` schedules
/// and serves within [`VIOLATION_TARGET`]: from `schedulable` down in steps of
/// [`SEARCH_STEP`] of it. Returns the units (0 when none) and the violations there.
pub fn max_served_units(
    set: &ProfileSet<'_>,
    mix: &Mix,
    scheduler: Scheduler,
    schedulable: f64,
    seed: u64,
    scale: f64,
) -> Result<(f64, Option<f64>), SimError> {
    let steps = (1.0 / SEARCH_STEP).round() as u32;
    for k in 0..steps {
        let units = schedulable * (1.0 - f64::from(k) * SEARCH_STEP);
        if units <= 0.0 {
            break;
        }
        if let Some((_, served)) =
            serve_at(set, mix, scheduler, units, SEARCH_SECONDS * scale, seed, World::Measured)?
            && served.violation <= VIOLATION_TARGET
        {
            return Ok((units, Some(served.violation)));
        }
    }
    Ok((0.0, None))
}

/// Every workload under every scheduler: schedulable, then served.
pub fn run(set: &ProfileSet<'_>, seed: u64, scale: f64) -> Result<Vec<MixThroughput>, SimError> {
    mixes()
        .into_iter()
        .map(|mix| {
            let per_unit = mix.counted_per_unit();
            let mut throughput = Vec::new();
            let mut served = Vec::new();
            let mut served_violation = Vec::new();
            for s in Scheduler::ALL {
                let units = max_units(set, &mix, s);
                let (at, violation) = max_served_units(set, &mix, s, units, seed, scale)?;
                tracing::debug!(mix = %mix.name, scheduler = s.label(), units, at, "maximum rates");
                throughput.push(units * per_unit);
                served.push(at * per_unit);
                served_violation.push(violation);
            }
            Ok(MixThroughput { mix, throughput, served, served_violation })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search finds the boundary of a schedulability that is monotone: a model that
    /// serves exactly `cap` req/s per GPU.
    #[test]
    fn the_search_brackets_the_boundary_within_one_request_per_second() {
        use tessera_gpu::partition::{Interference, Profiles};
        let profiles = Profiles::from_v100_jsonl(super::super::V100).unwrap();
        let set = super::super::profiles::paper(
            super::super::UTIL_2080TI,
            super::super::BATCHING_2080TI,
            &profiles,
            Interference { c: [0.0, 0.0, 0.0, 0.0, 1.0] },
        )
        .unwrap();
        let mix = &mixes()[3]; // long-only
        let per_unit = mix.counted_per_unit();
        let units = max_units(&set, mix, Scheduler::Sbp);
        assert!(units > 0.0);
        let at =
            |u: f64| Scheduler::Sbp.schedule(&set, &mix.models, &models_at(&set, mix, u)).is_some();
        assert!(at(units), "the answer is schedulable");
        assert!(!at(units + 1.0 / per_unit), "1 req/s more is not");
    }
}

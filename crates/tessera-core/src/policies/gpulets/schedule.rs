//! ELASTICPARTITIONING with FINDBESTFIT (Algorithm 1), the SLO check with
//! interference, duty-cycle batches, and squishy bin packing (Nexus, the baseline).

use super::batch::*;

/// A model to serve: its request rate, SLO and profile.
#[derive(Clone, Copy)]
pub struct Model<'a> {
    /// Requests per second.
    pub rate: f64,
    /// Latency target, ms.
    pub slo_ms: f64,
    /// L(batch, partition).
    pub profile: &'a dyn LatencyProfile,
}

impl std::fmt::Debug for Model<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("rate", &self.rate).field("slo_ms", &self.slo_ms).finish()
    }
}

/// gpu-lets §4.4's interference: the factor (>= 1) by which a model's latency grows
/// beside a co-running partition.
pub trait InterferenceModel {
    /// Factor for `own` = (model, batch, size %) beside `other`; at least 1 (a
    /// neighbour never speeds a model up — [`super::ideal::ideal`]'s pruning relies on it).
    fn factor(&self, own: (usize, u32, u32), other: (usize, u32, u32)) -> f64;
}

/// No interference (the `gpulet` variant of the paper, against `gpulet+int`).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoInterference;

impl InterferenceModel for NoInterference {
    fn factor(&self, _: (usize, u32, u32), _: (usize, u32, u32)) -> f64 {
        1.0
    }
}

/// A model's share of a gpu-let.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Served {
    /// Index into the models given.
    pub model: usize,
    /// Its batch size there.
    pub batch: u32,
    /// The rate it serves there, req/s.
    pub rate: f64,
}

/// A gpu-let: a partition of a GPU and the models it serves (several when they share
/// it in time).
#[derive(Clone, Debug, PartialEq)]
pub struct Gpulet {
    /// The GPU.
    pub gpu: usize,
    /// Its size, percent of the GPU.
    pub size: u32,
    /// What it serves (empty while free).
    pub served: Vec<Served>,
}

/// Why no schedule was found.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// A model's rate cannot be covered with the GPUs given.
    #[error("model {model} is not schedulable: {unassigned:.1} req/s left without a gpu-let")]
    NotSchedulable {
        /// The model.
        model: usize,
        /// Its rate still unassigned.
        unassigned: f64,
    },
}

/// Algorithm 1, ELASTICPARTITIONING: models by rate descending; for each, gpu-lets of
/// the ideal size (the smaller of the knee and the size its remaining rate needs) found
/// by best fit, split from a whole GPU when needed, merged into an allocated gpu-let
/// when they can share it in time (reverting the split), until its rate is covered. A
/// gpu-let placed beside another may lower the other's batch (its interference is
/// predicted); the rate the other then loses is placed again, after the models still
/// waiting — the authors' retry of the pass.
pub fn elastic_partitioning(
    models: &[Model<'_>],
    opts: &Options,
    interference: &dyn InterferenceModel,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let whole = (0..opts.gpus).map(|gpu| Gpulet { gpu, size: 100, served: Vec::new() }).collect();
    elastic_partitioning_from(models, opts, interference, whole, true)
}

/// Algorithm 1 from the gpu-lets in `remain`, splitting a whole GPU when `split`.
pub(super) fn elastic_partitioning_from(
    models: &[Model<'_>],
    opts: &Options,
    interference: &dyn InterferenceModel,
    mut remain: Vec<Gpulet>,
    split: bool,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let mut alloc: Vec<Gpulet> = Vec::new();
    let mut order: Vec<usize> = (0..models.len()).collect();
    if opts.authors.order_rate_slo {
        let key = |m: usize| models[m].rate * models[m].slo_ms;
        order.sort_by(|a, b| key(*a).total_cmp(&key(*b)).then(a.cmp(b)));
    } else {
        order.sort_by(|a, b| models[*b].rate.total_cmp(&models[*a].rate).then(a.cmp(b)));
    }
    let mut work: std::collections::VecDeque<(usize, f64)> =
        order.into_iter().map(|m| (m, models[m].rate)).filter(|(_, r)| *r > 1e-9).collect();
    // what interference may take from each model without being placed again
    let mut forgiven: Vec<f64> =
        models.iter().map(|m| m.rate * opts.authors.interference_loss).collect();
    let slack = opts.authors.residue_slack.max(1e-9);
    // every step places some rate or fails; lost rate shrinks as batches do, so the
    // passes end — the bound guards it
    let mut steps = 64 * (models.len() + opts.gpus + 1);
    while let Some((m, mut left)) = work.pop_front() {
        let model = &models[m];
        while left > slack {
            steps = steps.saturating_sub(1);
            let p_eff = match opts.authors.size_per_percent {
                Some(threshold) => {
                    size_per_percent(model.profile, opts, model.slo_ms, threshold).unwrap_or(100)
                }
                None => max_efficient_partition(model.profile, opts, model.slo_ms).unwrap_or(100),
            };
            let p_req =
                min_required_partition(model.profile, opts, left, model.slo_ms).unwrap_or(100);
            let found = (steps > 0)
                .then(|| {
                    find_best_fit(
                        m,
                        models,
                        left,
                        p_eff.min(p_req),
                        opts,
                        interference,
                        &mut remain,
                        &mut alloc,
                        split,
                    )
                })
                .flatten();
            let Some((served, lost)) = found else {
                return Err(ScheduleError::NotSchedulable { model: m, unassigned: left });
            };
            left -= served;
            for (lm, r) in lost {
                let kept = r.min(forgiven[lm]);
                forgiven[lm] -= kept;
                if r - kept > 1e-9 {
                    work.push_back((lm, r - kept));
                }
            }
        }
    }
    alloc.retain(|g| !g.served.is_empty());
    alloc.sort_by_key(|g| (g.gpu, std::cmp::Reverse(g.size)));
    Ok(alloc)
}

/// The interference factor on `own` = (model, batch, size) from the gpu-lets `beside`
/// it on its GPU: the largest over every model they serve (the authors'), 1 alone.
pub(super) fn factor_beside(
    interference: &dyn InterferenceModel,
    own: (usize, u32, u32),
    beside: &[&Gpulet],
) -> f64 {
    beside
        .iter()
        .flat_map(|g| g.served.iter().map(move |s| (s.model, s.batch, g.size)))
        .map(|other| interference.factor(own, other))
        .fold(1.0, f64::max)
}

/// Whether every model `g` serves meets its SLO beside the gpu-lets `beside`, at the
/// batches and rates it has: [`batch_meets_slo`] for a model alone, the duty cycle for
/// models sharing it in time.
pub fn gpulet_meets_slos(
    g: &Gpulet,
    beside: &[&Gpulet],
    models: &[Model<'_>],
    opts: &Options,
    interference: &dyn InterferenceModel,
) -> bool {
    match g.served.as_slice() {
        [] => true,
        [s] => {
            let m = &models[s.model];
            let f = |b| factor_beside(interference, (s.model, b, g.size), beside);
            scheduled_ms(m.profile, opts, s.batch, g.size, &f)
                .is_some_and(|l| batch_meets_slo(s.batch, l, s.rate, m.slo_ms))
        }
        many => {
            let f = |model, b| factor_beside(interference, (model, b, g.size), beside);
            duty_cycle_batches(many, models, g.size, opts, &f).is_some()
        }
    }
}

/// Re-fit the models `g` serves beside `beside` (after a gpu-let was placed there): a
/// model alone keeps its batch while it still meets its SLO, else takes the batch and
/// rate [`fit_batch`] gives under the new interference, the rate it loses pushed to
/// `lost`; models sharing in time take the duty cycle's batches. `false` when some
/// model meets its SLO at no batch.
pub(super) fn refit(
    g: &mut Gpulet,
    beside: &[&Gpulet],
    models: &[Model<'_>],
    opts: &Options,
    interference: &dyn InterferenceModel,
    lost: &mut Vec<(usize, f64)>,
) -> bool {
    if gpulet_meets_slos(g, beside, models, opts, interference) {
        return true;
    }
    let size = g.size;
    match g.served.as_mut_slice() {
        [] => true,
        [s] => {
            let m = &models[s.model];
            let f = |b| factor_beside(interference, (s.model, b, size), beside);
            let Some(fit) = fit_batch(m.profile, opts, size, m.slo_ms, s.rate, &f) else {
                return false;
            };
            if s.rate - fit.rate > 1e-9 {
                lost.push((s.model, s.rate - fit.rate));
            }
            *s = Served { model: s.model, batch: fit.batch, rate: fit.rate };
            true
        }
        many => {
            let f = |model, b| factor_beside(interference, (model, b, size), beside);
            let Some(batches) = duty_cycle_batches(many, models, size, opts, &f) else {
                return false;
            };
            for (s, b) in many.iter_mut().zip(batches) {
                s.batch = b;
            }
            true
        }
    }
}

/// FINDBESTFIT (lines 20-40): the rate it assigned to model `m` and the rate neighbours
/// lost to its interference, or `None` when no gpu-let can take it. A free gpu-let is
/// taken when the model meets its SLO there at some batch with the interference of what
/// already runs on the GPU, and each neighbour still meets its own at its batch or a
/// lower one (the neighbour then serves less, and the rest of its rate is placed again).
#[allow(clippy::too_many_arguments)]
fn find_best_fit(
    m: usize,
    models: &[Model<'_>],
    left: f64,
    p_ideal: u32,
    opts: &Options,
    interference: &dyn InterferenceModel,
    remain: &mut Vec<Gpulet>,
    alloc: &mut Vec<Gpulet>,
    split: bool,
) -> Option<(f64, Vec<(usize, f64)>)> {
    let model = &models[m];
    remain.sort_by_key(|g| (g.size, g.gpu));
    // (index in remain, gpu-let placed, split remainder, allocation with neighbours re-fitted, lost)
    let mut chosen = None;
    for (i, g) in remain.iter().enumerate() {
        if g.size < p_ideal {
            continue;
        }
        let (mut placed, remainder) = if split && g.size == 100 && p_ideal < 100 {
            (
                Gpulet { gpu: g.gpu, size: p_ideal, served: Vec::new() },
                Some(Gpulet { gpu: g.gpu, size: 100 - p_ideal, served: Vec::new() }),
            )
        } else {
            (g.clone(), None)
        };
        let beside: Vec<usize> = (0..alloc.len()).filter(|&j| alloc[j].gpu == placed.gpu).collect();
        let fit = {
            let near: Vec<&Gpulet> = beside.iter().map(|&j| &alloc[j]).collect();
            let f = |b| factor_beside(interference, (m, b, placed.size), &near);
            fit_batch(model.profile, opts, placed.size, model.slo_ms, left, &f)
        };
        let Some(fit) = fit else { continue };
        placed.served.push(Served { model: m, batch: fit.batch, rate: fit.rate });
        let mut trial = alloc.clone();
        let mut lost = Vec::new();
        let neighbours_fit = beside
            .iter()
            .all(|&j| refit(&mut trial[j], &[&placed], models, opts, interference, &mut lost));
        let near: Vec<&Gpulet> = beside.iter().map(|&j| &trial[j]).collect();
        // and this one beside the neighbours' new batches
        if neighbours_fit && gpulet_meets_slos(&placed, &near, models, opts, interference) {
            chosen = Some((i, placed, remainder, trial, lost));
            break;
        }
    }
    // lines 33-39: share an allocated gpu-let in time when the duty cycle allows (with
    // the interference beside it, and its neighbours still meeting their SLOs), and give
    // the new one back (reverting its split, and the neighbours' re-fit with it) — not
    // into a gpu-let already serving this model: two turns of one model in a duty cycle
    // are one model's batching, which the batch size already decided
    for a in 0..alloc.len() {
        let target = &alloc[a];
        if target.served.len() >= opts.max_models || target.served.iter().any(|s| s.model == m) {
            continue;
        }
        let mut merged = target.clone();
        merged.served.push(Served { model: m, batch: 1, rate: left });
        let others: Vec<&Gpulet> = alloc
            .iter()
            .enumerate()
            .filter(|(j, g)| *j != a && g.gpu == merged.gpu)
            .map(|(_, g)| g)
            .collect();
        let f = |model, b| factor_beside(interference, (model, b, merged.size), &others);
        let Some(batches) = duty_cycle_batches(&merged.served, models, merged.size, opts, &f)
        else {
            continue;
        };
        for (s, b) in merged.served.iter_mut().zip(batches) {
            s.batch = b;
        }
        let still =
            others.iter().all(|o| gpulet_meets_slos(o, &[&merged], models, opts, interference));
        if still {
            alloc[a] = merged;
            return Some((left, Vec::new()));
        }
    }
    let (i, placed, remainder, trial, lost) = chosen?;
    remain.remove(i);
    if let Some(r) = remainder {
        remain.push(r);
    }
    *alloc = trial;
    let rate = placed.served[0].rate;
    alloc.push(placed);
    Some((rate, lost))
}

/// Temporal sharing of a gpu-let of `size` by `served` (Nexus's duty cycle, which
/// gpu-lets reuses): a cycle of `d` ms in which each model runs one batch of the
/// requests that arrived in the cycle; feasible when the batches' scheduled latencies
/// (profiled, times the margin and `factor(model, batch)`, the interference) fit in the
/// cycle and each request's wait plus its batch's run meets its SLO. At most
/// `opts.max_models` models. Returns each model's batch for the longest feasible cycle,
/// or `None`. Cycles are tried from the tightest SLO down in steps of 1 ms, or of a
/// hundredth of that SLO when it is under 100 ms: whole milliseconds alone miss every
/// feasible cycle of a 5 ms SLO (lenet's) whose batch takes over 2 ms, since the window
/// d ≥ L, d + L ≤ SLO is then under 1 ms wide.
pub fn duty_cycle_batches(
    served: &[Served],
    models: &[Model<'_>],
    size: u32,
    opts: &Options,
    factor: &dyn Fn(usize, u32) -> f64,
) -> Option<Vec<u32>> {
    if served.is_empty() || served.len() > opts.max_models {
        return None;
    }
    let min_slo = served.iter().map(|s| models[s.model].slo_ms).fold(f64::INFINITY, f64::min);
    let step = (min_slo / 100.0).min(1.0);
    // Each model's batch and scheduled latency at the last cycle tried: the batch moves
    // only when the cycle crosses a batch boundary, and the latency (a profile lookup
    // and the interference beside, a walk of the neighbours) is a function of the
    // batch, so it is computed once per batch, not once per cycle tried (up to a
    // hundred cycles: a quarter of `sim gpulets --quick`, issue 55). `None`: not yet.
    let mut known: Vec<Option<(u32, Option<f64>)>> = vec![None; served.len()];
    let mut d = min_slo;
    'cycles: while d >= step {
        let mut busy = 0.0;
        let mut slo_ok = true;
        for (i, s) in served.iter().enumerate() {
            let need = (s.rate * d / 1000.0).ceil().max(1.0) as u32;
            let Some(&b) = opts.batches.iter().find(|&&b| b >= need) else {
                d -= step;
                continue 'cycles;
            };
            let l = match known[i] {
                Some((kb, l)) if kb == b => l,
                _ => {
                    let m = &models[s.model];
                    let l = scheduled_ms(m.profile, opts, b, size, &|b| factor(s.model, b));
                    known[i] = Some((b, l));
                    l
                }
            };
            let Some(l) = l else {
                d -= step;
                continue 'cycles;
            };
            busy += l;
            slo_ok &= d + l <= models[s.model].slo_ms;
        }
        if busy <= d && slo_ok {
            return Some(known.iter().map(|k| k.map_or(0, |(b, _)| b)).collect());
        }
        d -= step;
    }
    None
}

/// Nexus's squishy bin packing (gpu-lets §3.1's baseline) over `bins` bins of `size`
/// percent each (whole GPUs, or fixed gpu-lets), with the same batch rule as every
/// scheduler here: each model runs at its [`saturated`] batch (the run, doubled, within
/// the SLO); a model whose rate fills bins at that batch gets whole bins, and the
/// residues are packed first-fit, largest occupancy first, into bins whose duty cycle
/// still fits.
pub fn squishy_bin_packing(
    models: &[Model<'_>],
    opts: &Options,
    size: u32,
    bins: usize,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let alone = |_: usize, _: u32| 1.0;
    let mut out: Vec<Gpulet> = Vec::new();
    let mut residues: Vec<(f64, Served)> = Vec::new();
    for (m, model) in models.iter().enumerate() {
        if model.rate <= 0.0 {
            continue;
        }
        let Some(sat) = saturated(model.profile, opts, size, model.slo_ms, &|_| 1.0) else {
            return Err(ScheduleError::NotSchedulable { model: m, unassigned: model.rate });
        };
        let (b, full) = (sat.batch, sat.rate);
        let whole = (model.rate / full).floor() as usize;
        for _ in 0..whole {
            out.push(Gpulet {
                gpu: out.len(),
                size,
                served: vec![Served { model: m, batch: b, rate: full }],
            });
        }
        let residue = model.rate - whole as f64 * full;
        if residue > 1e-9 {
            residues.push((residue / full, Served { model: m, batch: b, rate: residue }));
        }
    }
    if out.len() > bins {
        let m = out.last().map_or(0, |g| g.served[0].model);
        return Err(ScheduleError::NotSchedulable { model: m, unassigned: 0.0 });
    }
    residues.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.model.cmp(&b.1.model)));
    for (_, r) in residues {
        let fits = out
            .iter()
            .enumerate()
            .filter(|(_, g)| g.served.iter().all(|s| s.model != r.model))
            .find_map(|(i, g)| {
                let mut trial = g.served.clone();
                trial.push(r);
                duty_cycle_batches(&trial, models, size, opts, &alone).map(|bs| (i, bs))
            });
        match fits {
            Some((i, bs)) => {
                let g = &mut out[i];
                g.served.push(r);
                for (s, b) in g.served.iter_mut().zip(bs) {
                    s.batch = b;
                }
            }
            None if out.len() < bins => {
                let batch = duty_cycle_batches(&[r], models, size, opts, &alone)
                    .and_then(|b| b.first().copied())
                    .ok_or(ScheduleError::NotSchedulable { model: r.model, unassigned: r.rate })?;
                out.push(Gpulet { gpu: out.len(), size, served: vec![Served { batch, ..r }] });
            }
            None => {
                return Err(ScheduleError::NotSchedulable { model: r.model, unassigned: r.rate });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod properties {
    use super::*;
    // the whole of gpu-lets' scheduler, as the tests use it
    #[allow(unused_imports)]
    use crate::policies::gpulets::*;
    use proptest::prelude::*;

    struct Linear {
        base: f64,
        per: f64,
        saturate: u32,
    }
    impl LatencyProfile for Linear {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            Some((self.base + self.per * f64::from(b)) * 100.0 / f64::from(p.min(self.saturate)))
        }
    }

    /// A factor growing with the neighbour's size and batch: more of the GPU next door,
    /// more contention.
    struct BySize;
    impl InterferenceModel for BySize {
        fn factor(&self, _: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
            1.0 + f64::from(other.2) / 500.0 + f64::from(other.1) / 200.0
        }
    }

    /// The duty-cycle search as it was written before each model's latency was kept
    /// per batch (issue 55): every cycle tried asks every model's latency again.
    fn duty_cycle_batches_as_written(
        served: &[Served],
        models: &[Model<'_>],
        size: u32,
        opts: &Options,
        factor: &dyn Fn(usize, u32) -> f64,
    ) -> Option<Vec<u32>> {
        if served.is_empty() || served.len() > opts.max_models {
            return None;
        }
        let min_slo = served.iter().map(|s| models[s.model].slo_ms).fold(f64::INFINITY, f64::min);
        let step = (min_slo / 100.0).min(1.0);
        let mut d = min_slo;
        while d >= step {
            let plan: Option<Vec<(u32, f64)>> = served
                .iter()
                .map(|s| {
                    let need = (s.rate * d / 1000.0).ceil().max(1.0) as u32;
                    let b = *opts.batches.iter().find(|&&b| b >= need)?;
                    let m = &models[s.model];
                    let l = scheduled_ms(m.profile, opts, b, size, &|b| factor(s.model, b))?;
                    Some((b, l))
                })
                .collect();
            if let Some(plan) = plan {
                let busy: f64 = plan.iter().map(|(_, l)| l).sum();
                let slo_ok =
                    served.iter().zip(&plan).all(|(s, (_, l))| d + l <= models[s.model].slo_ms);
                if busy <= d && slo_ok {
                    return Some(plan.into_iter().map(|(b, _)| b).collect());
                }
            }
            d -= step;
        }
        None
    }

    /// A linear profile with no point above `largest` (a model whose profile ends).
    struct Capped {
        base: f64,
        per: f64,
        largest: u32,
    }
    impl LatencyProfile for Capped {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            (b <= self.largest)
                .then(|| (self.base + self.per * f64::from(b)) * 100.0 / f64::from(p))
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// The duty-cycle search gives exactly what the search as written gives, for
        /// models whose profiles end, interference that varies with model and batch,
        /// and rates from a trickle to more than a cycle holds.
        #[test]
        fn duty_cycle_batches_is_the_search_as_written(
            specs in prop::collection::vec(
                (0.1f64..4.0, 0.01f64..1.0, 1u32..=32, 4.0f64..200.0, 1.0f64..3000.0), 1..5),
            size in prop::sample::select(vec![10u32, 20, 30, 40, 50, 60, 70, 80, 90, 100]),
            bend in 0.0f64..0.05,
        ) {
            let profiles: Vec<Capped> = specs
                .iter()
                .map(|(base, per, largest, _, _)| Capped { base: *base, per: *per, largest: *largest })
                .collect();
            let models: Vec<Model<'_>> = specs
                .iter()
                .zip(&profiles)
                .map(|((_, _, _, slo, rate), p)| Model { rate: *rate, slo_ms: *slo, profile: p })
                .collect();
            let served: Vec<Served> = models
                .iter()
                .enumerate()
                .map(|(model, m)| Served { model, batch: 1, rate: m.rate / 4.0 })
                .collect();
            let opts = Options::paper(1);
            let f = |model: usize, b: u32| 1.0 + bend * (model as f64 + f64::from(b).sqrt());
            prop_assert_eq!(
                duty_cycle_batches(&served, &models, size, &opts, &f),
                duty_cycle_batches_as_written(&served, &models, size, &opts, &f)
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever schedule is returned never gives a GPU more than 100%, covers every
        /// model's rate, and meets every SLO by its own prediction, computed here from
        /// the profile: for a model alone, its latency times the margin and the largest
        /// factor of what runs beside it, within the SLO with the batch's fill time and
        /// fast enough for its rate; for models sharing, a feasible duty cycle of at most
        /// three.
        #[test]
        fn schedules_fit_the_gpus_and_meet_the_slos(
            specs in prop::collection::vec((0.5f64..5.0, 0.1f64..3.0, 20u32..=100, 20.0f64..150.0, 1.0f64..800.0), 1..6),
            gpus in 1usize..5,
            with_interference in any::<bool>(),
        ) {
            let profiles: Vec<Linear> =
                specs.iter().map(|(base, per, sat, _, _)| Linear { base: *base, per: *per, saturate: *sat }).collect();
            let models: Vec<Model<'_>> = specs
                .iter()
                .zip(&profiles)
                .map(|((_, _, _, slo, rate), p)| Model { rate: *rate, slo_ms: *slo, profile: p })
                .collect();
            let opts = Options::paper(gpus);
            let intf: &dyn InterferenceModel = if with_interference { &BySize } else { &NoInterference };
            let Ok(schedule) = elastic_partitioning(&models, &opts, intf) else { return Ok(()) };
            for g in 0..gpus {
                let used: u32 = schedule.iter().filter(|x| x.gpu == g).map(|x| x.size).sum();
                prop_assert!(used <= 100, "GPU {} at {}%: {:?}", g, used, schedule);
            }
            for (i, m) in models.iter().enumerate() {
                let served: f64 = schedule.iter().flat_map(|g| &g.served).filter(|s| s.model == i).map(|s| s.rate).sum();
                prop_assert!((served - m.rate).abs() < 1e-6, "model {} served {} of {}", i, served, m.rate);
            }
            for (k, g) in schedule.iter().enumerate() {
                let beside: Vec<(usize, u32, u32)> = schedule
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| *j != k && o.gpu == g.gpu)
                    .flat_map(|(_, o)| o.served.iter().map(move |s| (s.model, s.batch, o.size)))
                    .collect();
                match g.served.as_slice() {
                    [one] => {
                        let l = models[one.model].profile.latency_ms(one.batch, g.size).unwrap();
                        let f = beside.iter().map(|n| intf.factor((one.model, one.batch, g.size), *n)).fold(1.0, f64::max);
                        let l = l * 1.1 * f;
                        let fill = f64::from(one.batch) * 1000.0 / one.rate;
                        let wait = if one.batch == 1 { l } else { fill };
                        prop_assert!(l <= fill * (1.0 + 1e-9), "model {} cannot keep up: {:?}", one.model, schedule);
                        prop_assert!(l + wait <= models[one.model].slo_ms * (1.0 + 1e-9),
                            "model {} at {} ms + {} ms wait over its SLO {}: {:?}", one.model, l, wait, models[one.model].slo_ms, schedule);
                    }
                    many => {
                        prop_assert!(many.len() <= 3);
                        let f = |model, b| beside.iter().map(|n| intf.factor((model, b, g.size), *n)).fold(1.0, f64::max);
                        prop_assert!(duty_cycle_batches(many, &models, g.size, &opts, &f).is_some());
                    }
                }
            }
        }
    }
}

//! gpu-lets' elastic partitioning (Choi et al., "Serving Heterogeneous Machine Learning
//! Models on Multi-GPU Servers with Spatio-Temporal Sharing", §4.3, Algorithm 1): the
//! sizing steps, as pure functions of a model's latency profile L(batch, partition).
//!
//! Built so far: the largest batch meeting an SLO (line 27), the rate a gpu-let of a
//! size can serve, MINREQUIREDPARTITION (line 10), MAXEFFICIENTPARTITION (line 9: the
//! knee of rate against partition size, by maximum curvature), and the whole of
//! ELASTICPARTITIONING with FINDBESTFIT (best fit over free gpu-lets ascending, split
//! of a whole GPU into ideal + remainder, the SLO check with interference, merge into
//! an allocated gpu-let by temporal sharing with the split reverted). One reading is
//! ours: the interference check is made both ways (see [`elastic_partitioning`]).
//! Also: squishy bin packing (Nexus, the baseline), [`GpuletServing`] (serving a fixed
//! schedule: partitions, duty-cycle batching), and rate tracking by EWMA with the
//! reschedule trigger ([`RateTracker`], [`needs_reschedule`]), and the ideal scheduler
//! ([`ideal`], a pruned search of every partitioning and assignment, and
//! [`ideal_gpulets`] to serve its answer), and guided self-tuning (GSLICE's, the other
//! baseline: [`guided_self_tuning`]). A policy that reschedules every period comes next.

/// A model's profiled latency: L(batch, partition %) in ms, `None` where not profiled.
pub trait LatencyProfile {
    /// Latency of one batch of `batch` requests in a gpu-let of `percent` of a GPU.
    fn latency_ms(&self, batch: u32, percent: u32) -> Option<f64>;
}

/// Line 27: the largest profiled batch (of `batches`, ascending) whose latency in a
/// gpu-let of `percent` fits `budget_ms`, with its latency.
pub fn max_batch(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    percent: u32,
    budget_ms: f64,
) -> Option<(u32, f64)> {
    batches
        .iter()
        .filter_map(|&b| profile.latency_ms(b, percent).map(|l| (b, l)))
        .filter(|(_, l)| *l <= budget_ms)
        .max_by_key(|(b, _)| *b)
}

/// The request rate (per second) a gpu-let of `percent` serves within `budget_ms`:
/// its largest fitting batch, once per batch latency.
pub fn max_rate(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    percent: u32,
    budget_ms: f64,
) -> f64 {
    max_batch(profile, batches, percent, budget_ms).map_or(0.0, |(b, l)| f64::from(b) * 1000.0 / l)
}

/// Line 10, MINREQUIREDPARTITION: the smallest size (of `sizes`, ascending) whose
/// gpu-let serves `rate` within `budget_ms`; `None` if none does (the model then needs
/// several gpu-lets).
pub fn min_required_partition(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    sizes: &[u32],
    rate: f64,
    budget_ms: f64,
) -> Option<u32> {
    sizes.iter().copied().find(|&p| max_rate(profile, batches, p, budget_ms) >= rate)
}

/// Line 9, MAXEFFICIENTPARTITION: the knee of the rate a gpu-let serves against its
/// size — the profiled size where the curve's curvature is largest (Figure 8), with
/// both axes scaled to 0..1 so that the knee does not depend on units. Sizes that serve
/// nothing within the budget are left out; with fewer than three points there is no
/// interior to bend, and the largest size is the answer.
pub fn max_efficient_partition(
    profile: &dyn LatencyProfile,
    batches: &[u32],
    sizes: &[u32],
    budget_ms: f64,
) -> Option<u32> {
    let curve: Vec<(f64, f64)> = sizes
        .iter()
        .map(|&p| (f64::from(p), max_rate(profile, batches, p, budget_ms)))
        .filter(|(_, r)| *r > 0.0)
        .collect();
    knee(&curve).map(|x| x.round() as u32)
}

/// The x of the point of maximum curvature of a curve given by points (x ascending),
/// from finite differences on non-uniform spacing, both axes scaled to 0..1.
pub fn knee(points: &[(f64, f64)]) -> Option<f64> {
    let last = points.last()?;
    if points.len() < 3 {
        return Some(last.0);
    }
    let (x0, x1) = (points[0].0, last.0);
    let (ylo, yhi) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let sx = (x1 - x0).max(f64::MIN_POSITIVE);
    let sy = (yhi - ylo).max(f64::MIN_POSITIVE);
    let s: Vec<(f64, f64)> = points.iter().map(|(x, y)| ((x - x0) / sx, (y - ylo) / sy)).collect();
    s.windows(3)
        .enumerate()
        .map(|(i, w)| {
            let ((xa, ya), (xb, yb), (xc, yc)) = (w[0], w[1], w[2]);
            let (h1, h2) = (xb - xa, xc - xb);
            // first and second derivatives at the middle point, non-uniform spacing
            let d1 = (ya * -h2 / (h1 * (h1 + h2)))
                + (yb * (h2 - h1) / (h1 * h2))
                + (yc * h1 / (h2 * (h1 + h2)));
            let d2 = 2.0 * (ya / (h1 * (h1 + h2)) - yb / (h1 * h2) + yc / (h2 * (h1 + h2)));
            (i + 1, d2.abs() / (1.0 + d1 * d1).powf(1.5))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| points[i].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile from a closure.
    struct Table<F: Fn(u32, u32) -> Option<f64>>(F);
    impl<F: Fn(u32, u32) -> Option<f64>> LatencyProfile for Table<F> {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            (self.0)(b, p)
        }
    }

    const BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];
    const SIZES: [u32; 6] = [20, 40, 50, 60, 80, 100];

    /// latency = (1 + b) * 100 / p ms: twice the share, half the time.
    fn linear() -> Table<impl Fn(u32, u32) -> Option<f64>> {
        Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p)))
    }

    #[test]
    fn the_largest_batch_within_the_budget_and_its_rate() {
        let t = linear();
        // at 100%: b=8 takes 9 ms, b=16 takes 17 ms
        for (budget, want) in
            [(9.0, Some((8, 9.0))), (16.9, Some((8, 9.0))), (17.0, Some((16, 17.0))), (1.9, None)]
        {
            assert_eq!(max_batch(&t, &BATCHES, 100, budget), want, "budget {budget}");
        }
        // at 50% the same batch takes twice as long: 8 requests per 18 ms
        assert!((max_rate(&t, &BATCHES, 50, 18.0) - 8.0 * 1000.0 / 18.0).abs() < 1e-9);
        assert_eq!(max_rate(&t, &BATCHES, 20, 1.0), 0.0);
    }

    #[test]
    fn the_min_required_partition_is_the_smallest_that_serves_the_rate() {
        let t = linear();
        // budget 30 ms: at 60% b=16 takes 28.3 ms -> 565 req/s; at 50% b=8 takes 18 ms ->
        // 444 req/s (b=16 takes 34 ms, over); at 40% b=8 22.5 ms -> 356 req/s
        let cases = [(300.0, Some(40)), (400.0, Some(50)), (500.0, Some(60)), (5000.0, None)];
        for (rate, want) in cases {
            assert_eq!(min_required_partition(&t, &BATCHES, &SIZES, rate, 30.0), want, "{rate}");
        }
    }

    #[test]
    fn the_knee_is_where_the_curve_bends_most() {
        // rises steeply to x=40 then flattens: the knee is 40
        let pts = [
            (20.0, 100.0),
            (40.0, 190.0),
            (50.0, 195.0),
            (60.0, 198.0),
            (80.0, 200.0),
            (100.0, 201.0),
        ];
        assert_eq!(knee(&pts), Some(40.0));
        // a straight line has no bend: every point ties at zero curvature, and the
        // first interior point is taken
        let line = [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)];
        assert_eq!(knee(&line), Some(1.0));
        assert_eq!(knee(&[(20.0, 1.0), (40.0, 2.0)]), Some(40.0), "too few points");
        assert_eq!(knee(&[]), None);
    }

    fn opts(gpus: usize) -> Options {
        Options {
            gpus,
            sizes: SIZES.to_vec(),
            batches: BATCHES.to_vec(),
            batch_budget: 1.0,
            max_load: 1.0,
        }
    }

    /// Guided self-tuning on hand-computed cases. With latency (1+b)·100/p and a 34 ms
    /// SLO a gpu-let serves: 20% 160 req/s (b=4), 40% 355.6 (b=8), 50% 470.6 (b=16),
    /// 60% 564.7 (b=16), 80% 752.9 (b=16), 100% 969.7 (b=32).
    #[test]
    fn guided_self_tuning_gives_each_model_its_own_smallest_sufficient_gpulets() {
        let t = linear();
        let at = |rates: &[f64], gpus| {
            let models: Vec<Model<'_>> =
                rates.iter().map(|&rate| Model { rate, slo_ms: 34.0, profile: &t }).collect();
            guided_self_tuning(&models, &opts(gpus)).map(|g| {
                g.iter()
                    .map(|x| {
                        let s = &x.served[0];
                        (x.gpu, x.size, s.model, s.batch, (s.rate * 10.0).round() / 10.0)
                    })
                    .collect::<Vec<_>>()
            })
        };
        // the smallest size that serves 500 req/s
        assert_eq!(at(&[500.0], 1), Ok(vec![(0, 60, 0, 16, 500.0)]));
        // two models fill one GPU, largest rate first
        assert_eq!(at(&[300.0, 500.0], 1), Ok(vec![(0, 60, 1, 16, 500.0), (0, 40, 0, 8, 300.0)]));
        // a third 40% gpu-let has room nowhere (two per GPU), and no sharing in time
        assert_eq!(
            at(&[300.0, 300.0, 300.0], 1),
            Err(ScheduleError::NotSchedulable { model: 2, unassigned: 300.0 })
        );
        // above a whole GPU: a whole one, then the smallest for the rest (530.3 -> 60%)
        assert_eq!(at(&[1500.0], 2), Ok(vec![(0, 100, 0, 32, 969.7), (1, 60, 0, 16, 530.3)]));
    }

    /// One model at a modest rate gets one gpu-let of its ideal size, split from GPU 0;
    /// the rest of GPU 0 stays free for others.
    #[test]
    fn one_model_gets_its_ideal_gpulet_split_from_a_gpu() {
        // saturating at 50%: the knee is 50; 300 req/s within 40 ms needs 40%
        // (at 40%: b=8 in 22.5 ms -> 355 req/s), so the ideal size is min(50, 40) = 40
        let t = Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p.min(50))));
        let models = [Model { rate: 300.0, slo_ms: 40.0, profile: &t }];
        let s = elastic_partitioning(&models, &opts(2), &NoInterference).unwrap();
        assert_eq!(
            s,
            vec![Gpulet {
                gpu: 0,
                size: 40,
                served: vec![Served { model: 0, batch: 8, rate: 300.0 }]
            }]
        );
    }

    /// A second small model shares the first's gpu-let in time (a duty cycle fits both),
    /// and the split made for it is reverted: one gpu-let serves both.
    #[test]
    fn a_small_second_model_is_merged_by_temporal_sharing() {
        let t = linear();
        let models = [
            Model { rate: 100.0, slo_ms: 100.0, profile: &t },
            Model { rate: 50.0, slo_ms: 100.0, profile: &t },
        ];
        let s = elastic_partitioning(&models, &opts(2), &NoInterference).unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].served.iter().map(|x| x.model).collect::<Vec<_>>(), vec![0, 1]);
        let total: f64 = s[0].served.iter().map(|x| x.rate).sum();
        assert!((total - 150.0).abs() < 1e-9);
    }

    /// A rate no number of the GPUs given can serve is reported, with what is left.
    #[test]
    fn an_impossible_rate_is_not_schedulable() {
        let t = linear();
        // a whole GPU serves at most 941 req/s within 33 ms (b=32 takes 33 ms)
        let models = [Model { rate: 2500.0, slo_ms: 33.0, profile: &t }];
        let err = elastic_partitioning(&models, &opts(2), &NoInterference).unwrap_err();
        assert!(matches!(err, ScheduleError::NotSchedulable { model: 0, .. }), "{err}");
        assert!(elastic_partitioning(&models, &opts(3), &NoInterference).is_ok());
    }

    /// Squishy bin packing: a model filling more than a GPU gets whole GPUs at its
    /// batch, its residue shares a GPU with another's by a duty cycle; too many whole
    /// GPUs are not schedulable.
    #[test]
    fn squishy_bin_packing_fills_whole_gpus_then_packs_residues() {
        let t = linear();
        // SLO 66 ms: largest b with L(b) <= 33 ms at 100% is 32 (33 ms): 969.7 req/s a GPU
        let big = Model { rate: 1500.0, slo_ms: 66.0, profile: &t };
        let small = Model { rate: 50.0, slo_ms: 66.0, profile: &t };
        let s = squishy_bin_packing(&[big, small], &BATCHES, 100, 3).unwrap();
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!((s[0].served.len(), s[0].served[0].batch), (1, 32));
        assert_eq!(s[1].served.iter().map(|x| x.model).collect::<Vec<_>>(), vec![0, 1]);
        let served: f64 =
            s.iter().flat_map(|g| &g.served).filter(|x| x.model == 0).map(|x| x.rate).sum();
        assert!((served - 1500.0).abs() < 1e-6);
        assert!(squishy_bin_packing(&[Model { rate: 3000.0, ..big }], &BATCHES, 100, 3).is_err());
    }

    /// A tight SLO: lenet's 5 ms with a 2.14 ms batch of 1 leaves feasible duty cycles
    /// only in [2.14, 2.86] ms, which whole milliseconds miss; a 1.5 ms batch fits one.
    #[test]
    fn a_duty_cycle_is_found_under_a_tight_slo() {
        let t = Table(|_, _| Some(2.14));
        let m = [Model { rate: 200.0, slo_ms: 5.0, profile: &t }];
        let alone = [Served { model: 0, batch: 1, rate: 200.0 }];
        assert_eq!(duty_cycle_batches(&alone, &m, 50, &BATCHES), Some(vec![1]));
        assert!(squishy_bin_packing(&m, &BATCHES, 50, 1).is_ok());
        // a batch of 3.0 ms: d >= 3 and d + 3 <= 5 cannot both hold
        let slow = Table(|_, _| Some(3.0));
        let m = [Model { rate: 200.0, slo_ms: 5.0, profile: &slow }];
        assert_eq!(duty_cycle_batches(&alone, &m, 50, &BATCHES), None);
    }

    #[test]
    fn the_max_efficient_partition_of_a_saturating_model() {
        // a model that stops speeding up past 50% of the GPU (memory bound): the knee
        let t = Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p.min(50))));
        assert_eq!(max_efficient_partition(&t, &BATCHES, &SIZES, 40.0), Some(50));
    }
}

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
    /// neighbour never speeds a model up — [`ideal`]'s pruning relies on it).
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

/// The sizes and batches the scheduler may use.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// GPUs of the server.
    pub gpus: usize,
    /// Partition sizes, percent, ascending (the paper: 20, 40, 50, 60, 80, 100).
    pub sizes: Vec<u32>,
    /// Profiled batch sizes, ascending.
    pub batches: Vec<u32>,
    /// The share of a model's SLO a batch's latency may take (Algorithm 1 line 27 as
    /// written: 1, the whole SLO). Below 1 leaves room for waiting on the batch in
    /// progress — an experiment's diagnostic, not the paper's algorithm.
    pub batch_budget: f64,
    /// The share of a gpu-let's throughput (batch over latency) a model may be given
    /// (Algorithm 1 as written: 1, all of it). Below 1 leaves headroom for bursts of
    /// random arrivals — an experiment's diagnostic, not the paper's algorithm.
    pub max_load: f64,
}

impl Options {
    /// The latency a batch may take under `slo_ms`.
    pub fn budget(&self, slo_ms: f64) -> f64 {
        slo_ms * self.batch_budget
    }
}

/// Algorithm 1, ELASTICPARTITIONING: models by rate descending; for each, gpu-lets of
/// the ideal size (the smaller of the knee and the size its remaining rate needs) found
/// by best fit, split from a whole GPU when needed, merged into an allocated gpu-let
/// when they can share it in time (reverting the split), until its rate is covered.
pub fn elastic_partitioning(
    models: &[Model<'_>],
    opts: &Options,
    interference: &dyn InterferenceModel,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let mut remain: Vec<Gpulet> =
        (0..opts.gpus).map(|gpu| Gpulet { gpu, size: 100, served: Vec::new() }).collect();
    let mut alloc: Vec<Gpulet> = Vec::new();
    let mut order: Vec<usize> = (0..models.len()).collect();
    order.sort_by(|a, b| models[*b].rate.total_cmp(&models[*a].rate).then(a.cmp(b)));
    for m in order {
        let model = &models[m];
        let mut assigned = 0.0;
        // every gpu-let found serves some rate, so the loop ends; the bound guards it
        for _ in 0..(opts.gpus * 2 + 2) {
            let left = model.rate - assigned;
            if left <= 1e-9 {
                break;
            }
            let p_eff = max_efficient_partition(
                model.profile,
                &opts.batches,
                &opts.sizes,
                opts.budget(model.slo_ms),
            )
            .unwrap_or(100);
            let p_req = min_required_partition(
                model.profile,
                &opts.batches,
                &opts.sizes,
                left,
                opts.budget(model.slo_ms),
            )
            .unwrap_or(100);
            let p_ideal = p_eff.min(p_req);
            let Some(served) = find_best_fit(
                m,
                models,
                left,
                p_ideal,
                opts,
                interference,
                &mut remain,
                &mut alloc,
            ) else {
                break;
            };
            assigned += served;
        }
        if model.rate - assigned > 1e-9 {
            return Err(ScheduleError::NotSchedulable {
                model: m,
                unassigned: model.rate - assigned,
            });
        }
    }
    alloc.sort_by_key(|g| (g.gpu, std::cmp::Reverse(g.size)));
    Ok(alloc)
}

/// The allocated gpu-let sharing a GPU with `gpu`'s gpu-let of `size`, as a neighbour
/// for the interference factor (its first model, batch and size).
fn neighbour(alloc: &[Gpulet], gpu: usize, size: u32) -> Option<(usize, u32, u32)> {
    alloc
        .iter()
        .find(|g| g.gpu == gpu && g.size + size <= 100 && !g.served.is_empty())
        .map(|g| (g.served[0].model, g.served[0].batch, g.size))
}

/// FINDBESTFIT (lines 20-40): returns the rate it assigned to model `m`, or `None` when
/// no gpu-let can take it.
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
) -> Option<f64> {
    let model = &models[m];
    remain.sort_by_key(|g| (g.size, g.gpu));
    let mut chosen: Option<(Gpulet, Option<Gpulet>, u32, f64)> = None; // (gpulet, split remainder, batch, rate)
    for i in 0..remain.len() {
        if remain[i].size < p_ideal {
            continue;
        }
        let (candidate, remainder) = if remain[i].size == 100 && p_ideal < 100 {
            let g = &remain[i];
            (
                Gpulet { gpu: g.gpu, size: p_ideal, served: Vec::new() },
                Some(Gpulet { gpu: g.gpu, size: 100 - p_ideal, served: Vec::new() }),
            )
        } else {
            (remain[i].clone(), None)
        };
        let Some((b, l)) =
            max_batch(model.profile, &opts.batches, candidate.size, opts.budget(model.slo_ms))
        else {
            continue;
        };
        let f = neighbour(alloc, candidate.gpu, candidate.size)
            .map_or(1.0, |n| interference.factor((m, b, candidate.size), n));
        // "check with interference" both ways: the neighbour's models must still meet
        // their SLOs beside this one (Algorithm 1 states only the new side; checking one
        // side lets a later placement break an earlier model's SLO)
        let neighbour_ok = alloc
            .iter()
            .filter(|g| g.gpu == candidate.gpu && g.size + candidate.size <= 100)
            .flat_map(|g| g.served.iter().map(move |s| (g.size, s)))
            .all(|(size, s)| {
                let own = &models[s.model];
                own.profile.latency_ms(s.batch, size).is_some_and(|ln| {
                    ln * interference.factor((s.model, s.batch, size), (m, b, candidate.size))
                        <= opts.budget(own.slo_ms)
                })
            });
        if l * f <= opts.budget(model.slo_ms) && neighbour_ok {
            let rate = (f64::from(b) * 1000.0 / (l * f) * opts.max_load).min(left);
            remain.remove(i);
            chosen = Some((candidate, remainder, b, rate));
            break;
        }
    }
    let (mut gpulet, remainder, batch, rate) = chosen?;
    // lines 33-39: share an allocated gpu-let in time when the duty cycle allows, and
    // give the new one back (reverting its split)
    // (not into a gpu-let already serving this model: two turns of one model in a duty
    // cycle are one model's batching, which the batch size already decided; and the
    // trial asks for the rate with the load headroom, as a gpu-let of its own would get)
    for a in alloc.iter_mut().filter(|a| a.served.iter().all(|s| s.model != m)) {
        let mut trial: Vec<Served> =
            a.served.iter().map(|s| Served { rate: s.rate / opts.max_load, ..*s }).collect();
        trial.push(Served { model: m, batch, rate: left / opts.max_load });
        if let Some(batches) = duty_cycle_batches(&trial, models, a.size, &opts.batches) {
            for (s, b) in a.served.iter_mut().zip(&batches) {
                s.batch = *b;
            }
            a.served.push(Served { model: m, batch: *batches.last()?, rate: left });
            remain.push(match remainder {
                Some(_) => Gpulet { gpu: gpulet.gpu, size: 100, served: Vec::new() },
                None => gpulet,
            });
            return Some(left);
        }
    }
    if let Some(r) = remainder {
        remain.push(r);
    }
    gpulet.served.push(Served { model: m, batch, rate });
    alloc.push(gpulet);
    Some(rate)
}

/// Temporal sharing of a gpu-let of `size` by `served` (Nexus's duty cycle, which
/// gpu-lets reuses): a cycle of `d` ms in which each model runs one batch of the
/// requests that arrived in the cycle; feasible when the batches fit in the cycle and
/// each request's wait plus its batch's run meets its SLO. Returns each model's batch
/// for the longest feasible cycle, or `None`. Cycles are tried from the tightest SLO
/// down in steps of 1 ms, or of a hundredth of that SLO when it is under 100 ms: whole
/// milliseconds alone miss every feasible cycle of a 5 ms SLO (lenet's) whose batch
/// takes over 2 ms, since the window d ≥ L, d + L ≤ SLO is then under 1 ms wide.
pub fn duty_cycle_batches(
    served: &[Served],
    models: &[Model<'_>],
    size: u32,
    batches: &[u32],
) -> Option<Vec<u32>> {
    let min_slo = served.iter().map(|s| models[s.model].slo_ms).fold(f64::INFINITY, f64::min);
    let step = (min_slo / 100.0).min(1.0);
    let mut d = min_slo;
    while d >= step {
        let plan: Option<Vec<(u32, f64)>> = served
            .iter()
            .map(|s| {
                let need = (s.rate * d / 1000.0).ceil().max(1.0) as u32;
                let b = *batches.iter().find(|&&b| b >= need)?;
                Some((b, models[s.model].profile.latency_ms(b, size)?))
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

#[cfg(test)]
mod properties {
    use super::*;
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

    /// A factor growing with the neighbour's size: more of the GPU next door, more
    /// contention.
    struct BySize;
    impl InterferenceModel for BySize {
        fn factor(&self, _: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
            1.0 + f64::from(other.2) / 500.0
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Whatever schedule is returned never gives a GPU more than 100%, covers every
        /// model's rate, and meets every SLO by its own prediction — interference
        /// included for gpu-lets a model has alone, the duty cycle for shared ones.
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
            let opts = Options { gpus, sizes: vec![20, 40, 50, 60, 80, 100], batches: vec![1, 2, 4, 8, 16, 32], batch_budget: 1.0, max_load: 1.0 };
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
            for g in &schedule {
                match g.served.as_slice() {
                    [one] => {
                        let l = models[one.model].profile.latency_ms(one.batch, g.size).unwrap();
                        let f = neighbour(&schedule, g.gpu, g.size)
                            .filter(|n| !(n.2 == g.size && n.0 == one.model))
                            .map_or(1.0, |n| intf.factor((one.model, one.batch, g.size), n));
                        prop_assert!(l * f <= models[one.model].slo_ms + 1e-9,
                            "model {} at {} ms x {} over its SLO {}: {:?}", one.model, l, f, models[one.model].slo_ms, schedule);
                        // its rate is within what its batch serves
                        prop_assert!(one.rate <= f64::from(one.batch) * 1000.0 / l + 1e-6);
                    }
                    many => {
                        prop_assert!(duty_cycle_batches(many, &models, g.size, &opts.batches).is_some());
                    }
                }
            }
        }
    }
}

/// Nexus's squishy bin packing (gpu-lets §3.1's baseline) over `bins` bins of `size`
/// percent each (whole GPUs, or fixed gpu-lets): each model runs at the largest batch
/// whose run, doubled (a request may wait for the batch before its own), fits its SLO;
/// a model whose rate fills bins at that batch gets whole bins, and the residues are
/// packed first-fit, largest occupancy first, into bins whose duty cycle still fits.
pub fn squishy_bin_packing(
    models: &[Model<'_>],
    batches: &[u32],
    size: u32,
    bins: usize,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let mut out: Vec<Gpulet> = Vec::new();
    let mut residues: Vec<(f64, Served)> = Vec::new();
    for (m, model) in models.iter().enumerate() {
        if model.rate <= 0.0 {
            continue;
        }
        let Some((b, l)) = max_batch(model.profile, batches, size, model.slo_ms / 2.0) else {
            return Err(ScheduleError::NotSchedulable { model: m, unassigned: model.rate });
        };
        let full = f64::from(b) * 1000.0 / l;
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
                duty_cycle_batches(&trial, models, size, batches).map(|bs| (i, bs))
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
                let batch = duty_cycle_batches(&[r], models, size, batches)
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

use crate::action::Action;
use crate::board::Board;
use crate::event::Event;
use crate::ids::{GpuId, PartitionId, TenantId};
use crate::model::{GpuSpec, Placement};
use crate::units::{Nanos, PerMille};

/// One gpu-let being served.
#[derive(Clone, Debug)]
struct ServingLet {
    placement: Placement,
    /// (tenant, batch, longest a request may wait for its batch to fill) of each model
    /// it serves, taking turns.
    models: Vec<(TenantId, u32, Nanos)>,
    next: usize,
}

/// What serving a schedule means on each GPU: its partition layout (`None`: whole,
/// unpartitioned) and the gpu-lets to serve on it, with each model's batch and longest
/// wait. Built from a schedule by [`ServingPlan::new`].
#[derive(Clone, Debug, Default)]
pub struct ServingPlan {
    gpus: Vec<GpuPlan>,
}

/// One GPU's part of a plan: its layout (`None`: whole) and its gpu-lets.
type GpuPlan = (Option<Vec<PerMille>>, Vec<ServingLet>);

/// A GPU's part of a plan waiting for its repartition, and whether it was asked for.
type Waiting = (Option<Vec<PerMille>>, Vec<ServingLet>, bool);

impl ServingPlan {
    /// The plan for `schedule` of `models` on `gpus` GPUs; model `i` is `tenants[i]`.
    pub fn new(
        gpus: usize,
        schedule: &[Gpulet],
        models: &[Model<'_>],
        tenants: &[TenantId],
    ) -> ServingPlan {
        let mut out = Vec::new();
        for g in 0..gpus {
            let mut here: Vec<&Gpulet> = schedule.iter().filter(|x| x.gpu == g).collect();
            here.sort_by_key(|x| std::cmp::Reverse(x.size));
            let whole = here.is_empty() || matches!(here.as_slice(), [one] if one.size == 100);
            let layout = (!whole)
                .then(|| here.iter().map(|x| PerMille((x.size * 10) as u16)).collect::<Vec<_>>());
            let mut lets = Vec::new();
            for (i, x) in here.iter().enumerate() {
                let placement = if whole {
                    Placement::whole(GpuId(g as u32))
                } else {
                    Placement { gpu: GpuId(g as u32), partition: Some(PartitionId(i as u32)) }
                };
                let served = x
                    .served
                    .iter()
                    .filter_map(|s| {
                        let m = models.get(s.model)?;
                        let run = m.profile.latency_ms(s.batch, x.size)?;
                        let wait = ((m.slo_ms - run).max(0.0) * 1e6) as u64;
                        Some((*tenants.get(s.model)?, s.batch, Nanos(wait)))
                    })
                    .collect();
                lets.push(ServingLet { placement, models: served, next: 0 });
            }
            out.push((layout, lets));
        }
        ServingPlan { gpus: out }
    }

    /// The same plan with every batch sent `guard` before its oldest request's last
    /// moment: the slack a real-time executor needs (ticks, thread wake-ups), so that a
    /// batch dispatched on time is not late by the time it runs.
    pub fn with_guard(mut self, guard: Nanos) -> ServingPlan {
        for (_, lets) in &mut self.gpus {
            for l in lets {
                for m in &mut l.models {
                    m.2 = Nanos(m.2.0.saturating_sub(guard.0));
                }
            }
        }
        self
    }
}

/// Serves a gpu-lets schedule: partitions each GPU as the schedule lays it out (a GPU
/// with one whole gpu-let stays unpartitioned), then, whenever a gpu-let is free,
/// dispatches its next model's batch (models sharing a gpu-let in time take turns) once
/// the batch is full — the scheduled size — or its oldest request has waited as long as
/// it can and still meet its SLO after the batch runs (the batch then goes with what has
/// arrived). Requests are the tenants' tasks. A new plan ([`GpuletServing::replan`])
/// takes over GPU by GPU: at once where the layout is unchanged; where it changes, the
/// old gpu-lets keep serving until the repartition is done (the reorganization happens
/// in the background, as gpu-lets' does), then the new ones take over.
#[derive(Debug)]
pub struct GpuletServing {
    board: Board,
    /// Per GPU: the layout in force (`None`: whole) and the gpu-lets served now.
    current: Vec<GpuPlan>,
    /// Per GPU: a layout and gpu-lets waiting for its repartition, and whether the
    /// repartition has been asked for.
    waiting: Vec<Option<Waiting>>,
    /// A plan not yet applied (applied on the next event).
    plan: Option<ServingPlan>,
}

impl GpuletServing {
    /// Serve `schedule` of `models` on `gpus`.
    pub fn new(
        gpus: &[GpuSpec],
        schedule: &[Gpulet],
        models: &[Model<'_>],
        tenants: &[TenantId],
    ) -> GpuletServing {
        GpuletServing {
            board: Board::new(gpus),
            current: vec![(None, Vec::new()); gpus.len()],
            waiting: vec![None; gpus.len()],
            plan: Some(ServingPlan::new(gpus.len(), schedule, models, tenants)),
        }
    }

    /// Serve `plan` from the next event on, GPU by GPU as described above.
    pub fn replan(&mut self, plan: ServingPlan) {
        self.plan = Some(plan);
    }

    /// The gpu-lets in force: (GPU, size %, (model, batch) of each model served).
    pub fn layout(&self) -> Vec<GpuletInForce> {
        self.current
            .iter()
            .enumerate()
            .flat_map(|(g, (layout, lets))| {
                lets.iter().enumerate().map(move |(i, l)| {
                    let size =
                        layout.as_ref().and_then(|s| s.get(i)).map_or(100, |p| u32::from(p.0) / 10);
                    (GpuId(g as u32), size, l.models.iter().map(|m| (m.0, m.1)).collect())
                })
            })
            .collect()
    }

    /// Apply a pending plan and ask for the repartitions still to ask. A plan waits
    /// while a repartition is in flight, so that every GPU's layout in force is known.
    fn take_plan(&mut self, actions: &mut Vec<Action>) {
        let in_flight = self.waiting.iter().any(|w| matches!(w, Some((_, _, true))));
        if !in_flight && let Some(plan) = self.plan.take() {
            for (g, (layout, lets)) in plan.gpus.into_iter().enumerate() {
                let Some(cur) = self.current.get_mut(g) else { continue };
                if cur.0 == layout {
                    cur.1 = lets;
                    self.waiting[g] = None;
                } else {
                    self.waiting[g] = Some((layout, lets, false));
                }
            }
        }
        for (g, w) in self.waiting.iter_mut().enumerate() {
            if let Some((layout, _, asked @ false)) = w {
                let shares = layout.clone().unwrap_or_default();
                *asked = self.board.repartition(GpuId(g as u32), shares, actions);
            }
        }
    }
}

impl crate::policy::Policy for GpuletServing {
    fn label(&self) -> String {
        "gpulet-serving".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        // a batch whose oldest request can wait no longer goes at the next tick
        Some(Nanos::from_millis(1))
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.board.observe(now, event, actions);
        if let Event::RepartitionDone { gpu } = event
            && let Some(slot) = self.waiting.get_mut(gpu.0 as usize)
            && matches!(slot, Some((_, _, true)))
            && let Some((layout, lets, _)) = slot.take()
        {
            self.current[gpu.0 as usize] = (layout, lets);
        }
        self.take_plan(actions);
        for l in self.current.iter_mut().flat_map(|(_, lets)| lets.iter_mut()) {
            if !self.board.has_room(l.placement) {
                continue;
            }
            let n = l.models.len();
            for k in 0..n {
                let (tenant, batch, max_wait) = l.models[(l.next + k) % n];
                let (queued, oldest) = self.board.queue_of(tenant);
                let due = oldest.is_some_and(|t| now - t >= max_wait);
                if (queued >= batch as usize || due)
                    && self.board.dispatch_batch(now, l.placement, tenant, batch as usize, actions)
                        > 0
                {
                    l.next = (l.next + k + 1) % n;
                    break;
                }
            }
        }
    }
}

/// Makes a new schedule, at a time, for models (tenants, in the order the schedule's
/// model indices follow) at tracked rates (req/s), or `None` when they are not
/// schedulable; returns the schedule and the plan to serve it.
pub type Rescheduler =
    Box<dyn FnMut(Nanos, &[TenantId], &[f64]) -> Option<(Vec<Gpulet>, ServingPlan)> + Send>;

/// What an adaptive gpu-lets policy last decided, for status reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServingReport {
    /// Each model's tracked rate at the last check, req/s.
    pub rates: Vec<(TenantId, f64)>,
    /// The gpu-lets in force.
    pub gpulets: Vec<GpuletInForce>,
    /// New schedules made so far.
    pub reorganizations: u64,
    /// Checks that wanted a new schedule and found the rates not schedulable.
    pub refused: u64,
}

/// A gpu-let in force: its GPU, size %, and (model, batch) of each model it serves.
pub type GpuletInForce = (GpuId, u32, Vec<(TenantId, u32)>);

/// gpu-lets with rate tracking and periodic rescheduling (§4.3, Algorithm 1 line 1):
/// every request's arrival is counted by a [`RateTracker`]; every `period` the tracked
/// rates are checked with [`needs_reschedule`] against what the schedule in force gives
/// each model, and when it is at risk or idle, `reschedule` makes a new schedule, which
/// [`GpuletServing`] takes over in the background. Rates that are not schedulable are
/// counted in [`AdaptiveGpulets::refused`], and the schedule made for the largest share
/// of them that is (found by bisection) serves instead — the best the GPUs can do. Models may come and go: a user-facing tenant that
/// registers becomes a model (checked every second until the schedule serves it, so
/// that a new model does not wait a whole period), and one that leaves is dropped and
/// rescheduled for at once.
pub struct AdaptiveGpulets {
    serving: GpuletServing,
    schedule: Vec<Gpulet>,
    tracker: RateTracker,
    tenants: Vec<TenantId>,
    period: Nanos,
    prepare: Nanos,
    /// A new plan getting ready, and when it is.
    staged: Option<(Nanos, ServingPlan)>,
    next_check: Nanos,
    idle: f64,
    reschedule: Rescheduler,
    /// A model the schedule does not serve yet: check every second.
    unserved: bool,
    last_quick: Nanos,
    /// The rates of the last check, by model.
    last_rates: Vec<f64>,
    /// Where status reports read what was decided.
    report: Option<std::sync::Arc<std::sync::Mutex<ServingReport>>>,
    /// (when, sum of gpu-let sizes of the new schedule, %) of every reorganization.
    pub reorganizations: Vec<(Nanos, u32)>,
    /// Checks that wanted a new schedule and could not make one.
    pub refused: u64,
}

impl std::fmt::Debug for AdaptiveGpulets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveGpulets")
            .field("schedule", &self.schedule)
            .field("period", &self.period)
            .field("reorganizations", &self.reorganizations.len())
            .finish_non_exhaustive()
    }
}

impl AdaptiveGpulets {
    /// Serve `first` (made for the rates expected at the start) on `gpus`, then track the
    /// rates of models `tenants[i]` (EWMA with `alpha` over 1 s windows) and check every
    /// `period` from `start` on (the first check at `start + period`); `idle` is
    /// [`needs_reschedule`]'s share below which resources count as idle. A new schedule
    /// takes `prepare` to get ready in the background (gpu-lets' 10-15 s of loading
    /// models into the new gpu-lets' processes) while the old one serves; then it is
    /// put in force.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpus: &[GpuSpec],
        first: (Vec<Gpulet>, ServingPlan),
        tenants: Vec<TenantId>,
        start: Nanos,
        period: Nanos,
        prepare: Nanos,
        alpha: f64,
        idle: f64,
        reschedule: Rescheduler,
    ) -> AdaptiveGpulets {
        let (schedule, plan) = first;
        let mut serving = GpuletServing {
            board: Board::new(gpus),
            current: vec![(None, Vec::new()); gpus.len()],
            waiting: vec![None; gpus.len()],
            plan: None,
        };
        serving.replan(plan);
        AdaptiveGpulets {
            serving,
            schedule,
            tracker: RateTracker::new(tenants.len(), alpha, Nanos::from_secs(1)),
            tenants,
            period,
            prepare,
            staged: None,
            next_check: start + period,
            idle,
            reschedule,
            unserved: false,
            last_quick: Nanos::ZERO,
            last_rates: Vec::new(),
            report: None,
            reorganizations: Vec::new(),
            refused: 0,
        }
    }

    /// Publish what is decided into `report` (the daemon's status reads it).
    pub fn with_report(mut self, report: std::sync::Arc<std::sync::Mutex<ServingReport>>) -> Self {
        self.report = Some(report);
        self
    }

    /// A model arrived or left: follow the tenant set.
    fn follow_tenants(&mut self, now: Nanos, event: &Event) {
        match event {
            Event::TenantRegistered(spec)
                if matches!(spec.class, crate::ServiceClass::UserFacing { .. })
                    && !self.tenants.contains(&spec.id) =>
            {
                self.tenants.push(spec.id);
                self.tracker.add_model();
                self.unserved = true;
            }
            Event::TenantLeft { tenant } => {
                if let Some(i) = self.tenants.iter().position(|t| t == tenant) {
                    self.tenants.remove(i);
                    self.tracker.remove_model(i);
                    // the schedule's model indices are stale: make a new one now
                    for g in &mut self.schedule {
                        g.served.clear();
                    }
                    self.next_check = now;
                }
            }
            _ => {}
        }
    }

    /// Publish the rates of the last check and the gpu-lets in force now.
    fn publish(&self) {
        let Some(report) = &self.report else { return };
        if let Ok(mut r) = report.lock() {
            r.rates = self.tenants.iter().copied().zip(self.last_rates.iter().copied()).collect();
            r.gpulets = self.serving.layout();
            r.reorganizations = self.reorganizations.len() as u64;
            r.refused = self.refused;
        }
    }

    /// The schedule in force (or being put in force).
    pub fn schedule(&self) -> &[Gpulet] {
        &self.schedule
    }
}

impl crate::policy::Policy for AdaptiveGpulets {
    fn label(&self) -> String {
        "gpulets-adaptive".into()
    }

    fn tick_interval(&self) -> Option<Nanos> {
        Some(Nanos::from_millis(1))
    }

    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        self.follow_tenants(now, event);
        if let Event::TaskSubmitted(t) = event
            && let Some(m) = self.tenants.iter().position(|x| *x == t.tenant)
        {
            self.tracker.arrival(m, now);
        }
        let quick = self.unserved && now >= self.last_quick + Nanos::from_secs(1);
        if now >= self.next_check || quick {
            if quick {
                self.last_quick = now;
            } else {
                self.next_check = now + self.period;
            }
            let rates = self.tracker.rates(now);
            if needs_reschedule(&self.schedule, &rates, self.idle) {
                let made = (self.reschedule)(now, &self.tenants, &rates).or_else(|| {
                    // not schedulable: count it, and serve the largest share of the
                    // rates that is (bisection to 1/64), rather than keep a schedule made
                    // for rates long past
                    self.refused += 1;
                    let (mut lo, mut hi, mut best) = (0.0, 1.0, None);
                    for _ in 0..6 {
                        let mid = (lo + hi) / 2.0;
                        let scaled: Vec<f64> = rates.iter().map(|r| r * mid).collect();
                        match (self.reschedule)(now, &self.tenants, &scaled) {
                            Some(made) => {
                                lo = mid;
                                best = Some(made);
                            }
                            None => hi = mid,
                        }
                    }
                    best
                });
                if let Some((schedule, plan)) = made {
                    let size = schedule.iter().map(|g| g.size).sum();
                    self.reorganizations.push((now, size));
                    // served once every model with requests has a gpu-let
                    self.unserved = rates.iter().enumerate().any(|(m, r)| {
                        *r > 0.0 && !schedule.iter().any(|g| g.served.iter().any(|s| s.model == m))
                    });
                    self.schedule = schedule;
                    self.staged = Some((now + self.prepare, plan));
                }
            }
            self.last_rates = rates;
            self.publish();
        }
        let mut changed = matches!(event, Event::RepartitionDone { .. });
        if self.staged.as_ref().is_some_and(|(ready, _)| now >= *ready)
            && let Some((_, plan)) = self.staged.take()
        {
            self.serving.replan(plan);
            changed = true;
        }
        crate::policy::Policy::on_event(&mut self.serving, now, event, actions);
        if changed {
            self.publish();
        }
    }
}

/// Request-rate tracking by exponentially weighted moving average (gpu-lets §4.3: "The
/// incoming request rates of each model are tracked with an exponentially-weighted
/// moving average"): arrivals are counted per window, and each window's rate is folded
/// in with weight `alpha`.
#[derive(Clone, Debug)]
pub struct RateTracker {
    alpha: f64,
    window: Nanos,
    window_start: Nanos,
    counts: Vec<u64>,
    rates: Vec<Option<f64>>,
}

impl RateTracker {
    /// Track `models` rates over windows of `window`, folding each in with `alpha`.
    pub fn new(models: usize, alpha: f64, window: Nanos) -> RateTracker {
        RateTracker {
            alpha: alpha.clamp(0.0, 1.0),
            window: window.max(Nanos(1)),
            window_start: Nanos::ZERO,
            counts: vec![0; models],
            rates: vec![None; models],
        }
    }

    /// Close every window that ended by `now`, folding its rate into the averages (an
    /// empty window counts as a rate of 0).
    fn roll(&mut self, now: Nanos) {
        while now >= self.window_start + self.window {
            let secs = self.window.as_secs_f64();
            for (count, rate) in self.counts.iter_mut().zip(&mut self.rates) {
                let seen = *count as f64 / secs;
                *rate = Some(match *rate {
                    None => seen,
                    Some(r) => self.alpha * seen + (1.0 - self.alpha) * r,
                });
                *count = 0;
            }
            self.window_start += self.window;
        }
    }

    /// Track one more model (last in order), from no rate.
    pub fn add_model(&mut self) {
        self.counts.push(0);
        self.rates.push(None);
    }

    /// Stop tracking model `i` (later models move up one).
    pub fn remove_model(&mut self, i: usize) {
        if i < self.counts.len() {
            self.counts.remove(i);
            self.rates.remove(i);
        }
    }

    /// A request of `model` arrived at `now`.
    pub fn arrival(&mut self, model: usize, now: Nanos) {
        self.roll(now);
        if let Some(c) = self.counts.get_mut(model) {
            *c += 1;
        }
    }

    /// The tracked rates (req/s) as of `now`; 0 for a model with no closed window yet.
    pub fn rates(&mut self, now: Nanos) -> Vec<f64> {
        self.roll(now);
        self.rates.iter().map(|r| r.unwrap_or(0.0)).collect()
    }
}

/// Whether a schedule should be reorganized at the tracked `rates` (gpu-lets §4.3:
/// rescheduling "if the current schedules produce SLO violations or the assigned
/// resource is being underutilized"): a model's rate is above what the schedule gives
/// it (SLO at risk), or every model's rate is below `idle` times what it is given and
/// the schedule uses more than it needs (resources idle).
pub fn needs_reschedule(schedule: &[Gpulet], rates: &[f64], idle: f64) -> bool {
    let given = |m: usize| -> f64 {
        schedule.iter().flat_map(|g| &g.served).filter(|s| s.model == m).map(|s| s.rate).sum()
    };
    let at_risk = rates.iter().enumerate().any(|(m, r)| *r > given(m) * (1.0 + 1e-9));
    let idle_everywhere =
        !schedule.is_empty() && rates.iter().enumerate().all(|(m, r)| *r < idle * given(m));
    at_risk || idle_everywhere
}

#[cfg(test)]
mod tracking_tests {
    use super::*;

    /// The adaptive policy reschedules when the tracked rate passes what the schedule
    /// gives, and the new layout is asked for as a repartition; at a rate within the
    /// schedule it does nothing.
    #[test]
    fn the_adaptive_policy_reschedules_when_the_rate_outgrows_the_schedule() {
        use crate::model::TaskSpec;
        use crate::policy::Policy;
        use crate::units::Bytes;
        use std::sync::{Arc, Mutex};
        let gpus = GpuSpec::uniform(1, crate::Bytes::gib(16));
        let tenant = TenantId(7);
        let gpulet =
            |size, rate| Gpulet { gpu: 0, size, served: vec![Served { model: 0, batch: 8, rate }] };
        let plan = move |g: &[Gpulet]| {
            struct Flat;
            impl LatencyProfile for Flat {
                fn latency_ms(&self, _: u32, _: u32) -> Option<f64> {
                    Some(10.0)
                }
            }
            let models = [Model { rate: 0.0, slo_ms: 50.0, profile: &Flat }];
            ServingPlan::new(1, g, &models, &[tenant])
        };
        let asked = Arc::new(Mutex::new(Vec::<f64>::new()));
        let seen = asked.clone();
        let first = vec![gpulet(100, 100.0)];
        let mut p = AdaptiveGpulets::new(
            &gpus,
            (first.clone(), plan(&first)),
            vec![tenant],
            Nanos::ZERO,
            Nanos::from_secs(20),
            Nanos::ZERO,
            1.0,
            0.0,
            Box::new(move |_, _: &[TenantId], rates: &[f64]| {
                seen.lock().unwrap().push(rates[0]);
                if rates[0] >= 200.0 {
                    return None; // more than the GPU can serve
                }
                let next = vec![gpulet(50, rates[0]), Gpulet { gpu: 0, size: 50, served: vec![] }];
                let planned = plan(&next);
                Some((next, planned))
            }),
        );
        let mut actions = Vec::new();
        let mut id = 0;
        let mut submit_for = |p: &mut AdaptiveGpulets, from: u64, secs: u64, per_s: u64| {
            for k in 0..secs * per_s {
                id += 1;
                let spec = TaskSpec {
                    id: crate::TaskId(id),
                    tenant,
                    kernel: 0,
                    memory: Bytes(0),
                    launch: None,
                    batch: 1,
                };
                let at = Nanos::from_secs(from) + Nanos(k * 1_000_000_000 / per_s);
                p.on_event(at, &Event::TaskSubmitted(spec), &mut Vec::new());
            }
        };
        // 80 req/s for 20 s: within the 100 the schedule gives
        submit_for(&mut p, 0, 20, 80);
        p.on_event(Nanos::from_secs(20), &Event::Tick, &mut actions);
        assert!(asked.lock().unwrap().is_empty(), "no reschedule at a rate within the schedule");
        assert!(p.reorganizations.is_empty());
        // 150 req/s for the next 20 s: above it
        submit_for(&mut p, 20, 20, 150);
        actions.clear();
        p.on_event(Nanos::from_secs(40), &Event::Tick, &mut actions);
        assert_eq!(asked.lock().unwrap().as_slice(), &[150.0]);
        assert_eq!(p.reorganizations, vec![(Nanos::from_secs(40), 100)]);
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Repartition { shares, .. } if shares.len() == 2)),
            "{actions:?}"
        );
        assert_eq!(p.schedule()[0].size, 50);
        // 300 req/s: not schedulable, so counted, and the largest schedulable share of
        // it (bisection: 1/2, 3/4, 5/8, 11/16, 21/32, 43/64 of 300) serves instead
        submit_for(&mut p, 40, 20, 300);
        asked.lock().unwrap().clear();
        p.on_event(Nanos::from_secs(60), &Event::Tick, &mut actions);
        assert_eq!(p.refused, 1);
        assert_eq!(
            asked.lock().unwrap().as_slice(),
            &[300.0, 150.0, 225.0, 187.5, 206.25, 196.875, 201.5625]
        );
        assert_eq!(p.schedule()[0].served[0].rate, 196.875);
    }

    /// Table-driven: a steady rate is learnt at once, a change is followed by the EWMA,
    /// and an empty window pulls the average down.
    #[test]
    fn the_ewma_follows_the_arrivals() {
        let mut t = RateTracker::new(2, 0.5, Nanos::from_secs(1));
        // 10 arrivals of model 0 in the first second
        for i in 0..10 {
            t.arrival(0, Nanos::from_millis(i * 100));
        }
        assert_eq!(t.rates(Nanos::from_millis(999)), vec![0.0, 0.0], "no window closed yet");
        assert_eq!(t.rates(Nanos::from_secs(1)), vec![10.0, 0.0]);
        // 30 in the second: 0.5 * 30 + 0.5 * 10 = 20
        for i in 0..30 {
            t.arrival(0, Nanos::from_secs(1) + Nanos::from_millis(i * 30));
        }
        assert_eq!(t.rates(Nanos::from_secs(2)), vec![20.0, 0.0]);
        // an empty third second: 10
        assert_eq!(t.rates(Nanos::from_secs(3)), vec![10.0, 0.0]);
    }

    #[test]
    fn rescheduling_is_asked_for_at_risk_or_idle() {
        let schedule = vec![Gpulet {
            gpu: 0,
            size: 50,
            served: vec![
                Served { model: 0, batch: 8, rate: 100.0 },
                Served { model: 1, batch: 4, rate: 50.0 },
            ],
        }];
        for (rates, idle, want) in [
            (vec![100.0, 50.0], 0.5, false), // exactly as scheduled
            (vec![120.0, 50.0], 0.5, true),  // model 0 above what it is given
            (vec![40.0, 20.0], 0.5, true),   // both below half of what they are given
            (vec![40.0, 40.0], 0.5, false),  // model 1 still uses most of its share
        ] {
            assert_eq!(needs_reschedule(&schedule, &rates, idle), want, "{rates:?}");
        }
        assert!(!needs_reschedule(&[], &[0.0], 0.5));
    }
}

/// The partitionings a GPU may take in the ideal scheduler's search (gpu-lets §5: "4
/// GPUs which can be partitioned into 4 cases"): whole, or two gpu-lets.
pub const GPU_LAYOUTS: [&[u32]; 4] = [&[100], &[50, 50], &[40, 60], &[20, 80]];

/// What a gpu-let of `size` serves of `model` beside `neighbour` (model, size), req/s:
/// its largest batch whose latency, times the interference of the neighbour running
/// its own largest batch, fits the SLO.
fn capacity(
    models: &[Model<'_>],
    batches: &[u32],
    interference: &dyn InterferenceModel,
    model: usize,
    size: u32,
    neighbour: Option<(usize, u32)>,
) -> f64 {
    best_batch(models, batches, interference, model, size, neighbour).map_or(0.0, |(_, r)| r)
}

/// The batch behind [`capacity`] and the rate it serves, or `None` if none fits.
fn best_batch(
    models: &[Model<'_>],
    batches: &[u32],
    interference: &dyn InterferenceModel,
    model: usize,
    size: u32,
    neighbour: Option<(usize, u32)>,
) -> Option<(u32, f64)> {
    let m = &models[model];
    let other = neighbour.and_then(|(n, s)| {
        max_batch(models[n].profile, batches, s, models[n].slo_ms).map(|(b, _)| (n, b, s))
    });
    batches
        .iter()
        .filter_map(|&b| {
            let l = m.profile.latency_ms(b, size)?;
            let f = other.map_or(1.0, |o| interference.factor((model, b, size), o));
            (l * f <= m.slo_ms).then(|| (b, f64::from(b) * 1000.0 / (l * f)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The ideal scheduler's answer as gpu-lets, to serve like any other schedule: each
/// owned gpu-let at its best batch beside its neighbour, given as much of its model's
/// rate as it serves until the rate is covered (a gpu-let left nothing to serve stays
/// allocated, empty).
pub fn ideal_gpulets(
    models: &[Model<'_>],
    batches: &[u32],
    interference: &dyn InterferenceModel,
    layout: &[usize],
    owners: &[Option<usize>],
) -> Vec<Gpulet> {
    let mut left: Vec<f64> = models.iter().map(|m| m.rate).collect();
    let mut out = Vec::new();
    let mut k = 0;
    for (gpu, &l) in layout.iter().enumerate() {
        let sizes = GPU_LAYOUTS[l];
        for (i, &size) in sizes.iter().enumerate() {
            let mut gpulet = Gpulet { gpu, size, served: Vec::new() };
            if let Some(m) = owners[k + i] {
                let neighbour = (sizes.len() == 2)
                    .then(|| owners[k + 1 - i].map(|n| (n, sizes[1 - i])))
                    .flatten();
                if let Some((batch, rate)) =
                    best_batch(models, batches, interference, m, size, neighbour)
                {
                    let rate = rate.min(left[m]);
                    if rate > 0.0 {
                        left[m] -= rate;
                        gpulet.served.push(Served { model: m, batch, rate });
                    }
                }
            }
            out.push(gpulet);
        }
        k += sizes.len();
    }
    out
}

/// Guided self-tuning (GSLICE's, given what the paper gave it, §6.1: the profiled batch
/// latencies and each model's partition computed ahead): every model in gpu-lets of its
/// own — no temporal sharing, no interference check — each the smallest size of
/// `opts.sizes` that serves the rate still uncovered within the SLO (a whole GPU when
/// none does), at its largest batch within the SLO; models by rate descending, each
/// gpu-let placed first-fit on a GPU with room and fewer than two gpu-lets.
pub fn guided_self_tuning(
    models: &[Model<'_>],
    opts: &Options,
) -> Result<Vec<Gpulet>, ScheduleError> {
    let mut out: Vec<Gpulet> = Vec::new();
    let mut order: Vec<usize> = (0..models.len()).collect();
    order.sort_by(|a, b| models[*b].rate.total_cmp(&models[*a].rate).then(a.cmp(b)));
    for m in order {
        let model = &models[m];
        let budget = opts.budget(model.slo_ms);
        let mut left = model.rate;
        while left > 1e-9 {
            let size =
                min_required_partition(model.profile, &opts.batches, &opts.sizes, left, budget)
                    .unwrap_or(100);
            let placed = (0..opts.gpus).find(|g| {
                let on: Vec<&Gpulet> = out.iter().filter(|x| x.gpu == *g).collect();
                on.len() < 2 && on.iter().map(|x| x.size).sum::<u32>() + size <= 100
            });
            let (Some(gpu), Some((batch, latency))) =
                (placed, max_batch(model.profile, &opts.batches, size, budget))
            else {
                return Err(ScheduleError::NotSchedulable { model: m, unassigned: left });
            };
            let rate = (f64::from(batch) * 1000.0 / latency * opts.max_load).min(left);
            left -= rate;
            out.push(Gpulet { gpu, size, served: vec![Served { model: m, batch, rate }] });
        }
    }
    out.sort_by_key(|g| (g.gpu, std::cmp::Reverse(g.size)));
    Ok(out)
}

/// Whether owners (one model or none per gpu-let) cover every rate on `layout` (one
/// partitioning index per GPU): the check the ideal scheduler's tests judge it by.
#[cfg(test)]
fn covers(
    models: &[Model<'_>],
    batches: &[u32],
    interference: &dyn InterferenceModel,
    layout: &[usize],
    owners: &[Option<usize>],
) -> bool {
    let mut served = vec![0.0; models.len()];
    let mut k = 0;
    for &l in layout {
        let sizes = GPU_LAYOUTS[l];
        for (i, &size) in sizes.iter().enumerate() {
            if let Some(m) = owners[k + i] {
                let neighbour = (sizes.len() == 2)
                    .then(|| owners[k + 1 - i].map(|n| (n, sizes[1 - i])))
                    .flatten();
                served[m] += capacity(models, batches, interference, m, size, neighbour);
            }
        }
        k += sizes.len();
    }
    models.iter().zip(&served).all(|(m, s)| *s + 1e-9 >= m.rate)
}

/// The ideal scheduler's answer: a partitioning index ([`GPU_LAYOUTS`]) per GPU, and the
/// model owning each gpu-let in order (none for an idle one).
pub type IdealAnswer = (Vec<usize>, Vec<Option<usize>>);

/// The ideal scheduler of gpu-lets §5 as we read it: every combination of GPU
/// partitionings ([`GPU_LAYOUTS`]) and every assignment of one model or none to each
/// gpu-let, searched depth-first a GPU at a time until one covers every rate with
/// interference. Temporal sharing of a gpu-let is not searched. Returns the layout (one
/// index per GPU) and the owners, or `None`.
///
/// Exhaustive in what it finds, not in what it visits: GPUs are identical, so each
/// multiset of partitionings is tried once and GPUs of the same partitioning take
/// assignments in non-decreasing order; a branch is cut when the gpu-lets left could not
/// make up the rates still uncovered even if each served its model at the best any
/// gpu-let can (valid because interference factors are at least 1). The property test
/// checks it against unpruned brute force.
pub fn ideal(
    models: &[Model<'_>],
    gpus: usize,
    batches: &[u32],
    interference: &dyn InterferenceModel,
) -> Option<IdealAnswer> {
    fn layouts(gpus: usize, from: usize, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if prefix.len() == gpus {
            out.push(prefix.clone());
            return;
        }
        for l in from..GPU_LAYOUTS.len() {
            prefix.push(l);
            layouts(gpus, l, prefix, out);
            prefix.pop();
        }
    }
    let n = models.len();
    // what each (partitioning, gpu-let, owner, neighbour) serves, computed once
    let mut table = vec![0.0; GPU_LAYOUTS.len() * 2 * n * (n + 1)];
    for (l, sizes) in GPU_LAYOUTS.iter().enumerate() {
        for (i, &size) in sizes.iter().enumerate() {
            for m in 0..n {
                for nb in 0..=n {
                    let neighbour = (sizes.len() == 2 && nb < n).then(|| (nb, sizes[1 - i]));
                    table[Search::index(n, l, i, m, nb)] =
                        capacity(models, batches, interference, m, size, neighbour);
                }
            }
        }
    }
    let best: Vec<f64> = (0..n)
        .map(|m| {
            (0..GPU_LAYOUTS.len())
                .flat_map(|l| (0..GPU_LAYOUTS[l].len()).map(move |i| (l, i)))
                .map(|(l, i)| table[Search::index(n, l, i, m, n)])
                .fold(0.0, f64::max)
        })
        .collect();
    // a model with no rate never gets a gpu-let; an unowned gpu-let is tried last
    let choices: Vec<Option<usize>> =
        (0..n).filter(|m| models[*m].rate > 0.0).map(Some).chain([None]).collect();
    let mut all = Vec::new();
    layouts(gpus, 0, &mut Vec::new(), &mut all);
    all.into_iter().find_map(|layout| {
        let slots: usize = layout.iter().map(|l| GPU_LAYOUTS[*l].len()).sum();
        let mut owners = vec![None; slots];
        let mut served = vec![0.0; n];
        let search =
            Search { models, layout: &layout, table: &table, best: &best, choices: &choices };
        search.gpu(0, 0, 0, &mut owners, &mut served).then_some((layout, owners))
    })
}

/// The ideal scheduler's depth-first search over one layout, a GPU at a time.
struct Search<'a, 'm> {
    models: &'a [Model<'m>],
    layout: &'a [usize],
    /// What a gpu-let serves, by [`Search::index`].
    table: &'a [f64],
    /// The most any gpu-let serves of each model.
    best: &'a [f64],
    /// What a gpu-let may be given.
    choices: &'a [Option<usize>],
}

impl Search<'_, '_> {
    /// Where the table holds what gpu-let `i` of partitioning `l` serves of model `m`
    /// beside model `nb` (`n` for none).
    fn index(n: usize, l: usize, i: usize, m: usize, nb: usize) -> usize {
        ((l * 2 + i) * n + m) * (n + 1) + nb
    }

    /// Assign owners to GPU `g`'s gpu-lets (starting at slot `at`; `from` is the first
    /// assignment it may take), then the rest.
    fn gpu(
        &self,
        g: usize,
        at: usize,
        from: usize,
        owners: &mut [Option<usize>],
        served: &mut [f64],
    ) -> bool {
        let n = self.models.len();
        // the gpu-lets still needed, at best, to cover what is uncovered
        let needed: f64 = self
            .models
            .iter()
            .zip(served.iter())
            .zip(self.best)
            .map(|((m, s), b)| {
                let deficit = m.rate - s;
                if deficit <= 1e-9 {
                    0.0
                } else if *b <= 0.0 {
                    f64::INFINITY
                } else {
                    deficit / b
                }
            })
            .sum();
        if needed > (owners.len() - at) as f64 + 1e-9 {
            return false;
        }
        if g == self.layout.len() {
            return true;
        }
        let l = self.layout[g];
        let width = GPU_LAYOUTS[l].len();
        let k = self.choices.len();
        for c in from..k.pow(width as u32) {
            let pick = [self.choices[c % k], (width == 2).then(|| self.choices[c / k]).flatten()];
            let mut gains = [(0, 0.0); 2];
            for i in 0..width {
                if let Some(m) = pick[i] {
                    let nb = if width == 2 { pick[1 - i].unwrap_or(n) } else { n };
                    gains[i] = (m, self.table[Self::index(n, l, i, m, nb)]);
                    served[m] += gains[i].1;
                }
            }
            owners[at..at + width].copy_from_slice(&pick[..width]);
            // the next GPU, if partitioned alike, takes only assignments from this one on
            let next_from = match self.layout.get(g + 1) {
                Some(&next) if next == l => c,
                _ => 0,
            };
            if self.gpu(g + 1, at + width, next_from, owners, served) {
                return true;
            }
            // (an unowned gpu-let's gain is 0 for model 0: subtracting it changes nothing)
            for (m, gain) in &gains {
                served[*m] -= gain;
            }
        }
        false
    }
}

#[cfg(test)]
mod ideal_tests {
    use super::*;
    use proptest::prelude::*;

    struct Linear(f64, f64, u32);
    impl LatencyProfile for Linear {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            Some((self.0 + self.1 * f64::from(b)) * 100.0 / f64::from(p.min(self.2)))
        }
    }

    /// Small gpu-lets much slower than their share: latency grows with the square of
    /// the GPU's inverse share.
    struct Convex;
    impl LatencyProfile for Convex {
        fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
            Some(f64::from(1 + b) * (100.0 / f64::from(p)).powi(2))
        }
    }

    #[test]
    fn hand_computed_cases() {
        let batches = [1, 2, 4, 8, 16, 32];
        // whole GPU, SLO 40 ms: b=32 takes 33 ms, 969.7 req/s; a 50% gpu-let: b=8 takes
        // 36 ms, 222.2 req/s; 60%: b=8, 25 ms, 320; 80%: b=16, 26.6 ms, 602.4
        let (p, slo) = (Convex, 40.0);
        let whole = max_rate(&p, &batches, 100, slo);
        assert!((whole - 32_000.0 / 33.0).abs() < 1e-9);
        let cases: [(f64, usize, Option<IdealAnswer>); 4] = [
            // a whole GPU's worth, on one GPU: whole (the first layout tried)
            (900.0, 1, Some((vec![0], vec![Some(0)]))),
            // nearly two: only two whole GPUs, both the model's (the same assignment on
            // two alike GPUs, which symmetry breaking must still allow)
            (1900.0, 2, Some((vec![0, 0], vec![Some(0), Some(0)]))),
            // more than two GPUs serve
            (1950.0, 2, None),
            // above one GPU's worth: split, it serves less (20/80: 602.4 + nothing, as b=1
            // takes 50 ms at 20%; 40/60: 128 + 320; 50/50: 2 x 222.2)
            (1000.0, 1, None),
        ];
        for (rate, gpus, want) in cases {
            let models = [Model { rate, slo_ms: slo, profile: &p }];
            assert_eq!(ideal(&models, gpus, &batches, &NoInterference), want, "rate {rate}");
        }
    }

    /// The ideal answer as gpu-lets covers each rate exactly, within each gpu-let's
    /// capacity: two whole GPUs for 1,900 req/s of the convex model give 969.7 + 930.3.
    #[test]
    fn the_ideal_answer_as_gpulets_covers_the_rates() {
        let batches = [1, 2, 4, 8, 16, 32];
        let models = [Model { rate: 1900.0, slo_ms: 40.0, profile: &Convex }];
        let (layout, owners) = ideal(&models, 2, &batches, &NoInterference).unwrap();
        let g = ideal_gpulets(&models, &batches, &NoInterference, &layout, &owners);
        let rates: Vec<(usize, u32, u32, f64)> = g
            .iter()
            .map(|x| (x.gpu, x.size, x.served[0].batch, (x.served[0].rate * 10.0).round() / 10.0))
            .collect();
        assert_eq!(rates, vec![(0, 100, 32, 969.7), (1, 100, 32, 930.3)]);
    }

    /// Interference growing with the neighbour's size and batch.
    struct Neighbourly;
    impl InterferenceModel for Neighbourly {
        fn factor(&self, _: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
            1.0 + f64::from(other.2) / 400.0 + f64::from(other.1) / 100.0
        }
    }

    /// Brute force: every ordered combination of GPU partitionings and every owner of
    /// every gpu-let, no pruning and no symmetry.
    fn brute_force(
        models: &[Model<'_>],
        gpus: usize,
        batches: &[u32],
        interference: &dyn InterferenceModel,
    ) -> bool {
        let layouts = GPU_LAYOUTS.len().pow(gpus as u32);
        (0..layouts).any(|code| {
            let layout: Vec<usize> = (0..gpus)
                .map(|g| code / GPU_LAYOUTS.len().pow(g as u32) % GPU_LAYOUTS.len())
                .collect();
            let slots: usize = layout.iter().map(|l| GPU_LAYOUTS[*l].len()).sum();
            let choices = models.len() + 1;
            (0..choices.pow(slots as u32)).any(|c| {
                let owners: Vec<Option<usize>> = (0..slots)
                    .map(|k| {
                        let o = c / choices.pow(k as u32) % choices;
                        (o < models.len()).then_some(o)
                    })
                    .collect();
                covers(models, batches, interference, &layout, &owners)
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// On small cases (1-2 GPUs, 1-3 models) the ideal scheduler's pruned search
        /// finds a schedule exactly when brute force does.
        #[test]
        fn the_ideal_scheduler_agrees_with_brute_force(
            specs in prop::collection::vec((0.5f64..4.0, 0.1f64..2.0, 20u32..=100, 10.0f64..80.0, 0.0f64..1.2), 1..4),
            gpus in 1usize..3,
        ) {
            let batches = [1, 2, 4, 8, 16, 32];
            let profiles: Vec<Linear> = specs.iter().map(|s| Linear(s.0, s.1, s.2)).collect();
            // rates as a share of what the model's GPUs could serve it alone, so that
            // cases sit near the edge of schedulability, where pruning can go wrong
            let models: Vec<Model<'_>> = specs
                .iter()
                .zip(&profiles)
                .map(|(s, p)| {
                    let whole = max_rate(p, &batches, 100, s.3);
                    Model { rate: s.4 * whole * gpus as f64 / specs.len() as f64, slo_ms: s.3, profile: p }
                })
                .collect();
            let interferences: [&dyn InterferenceModel; 2] = [&NoInterference, &Neighbourly];
            for interference in interferences {
                let found = ideal(&models, gpus, &batches, interference);
                if let Some((layout, owners)) = &found {
                    prop_assert!(covers(&models, &batches, interference, layout, owners));
                }
                prop_assert_eq!(found.is_some(), brute_force(&models, gpus, &batches, interference));
            }
        }
    }
}

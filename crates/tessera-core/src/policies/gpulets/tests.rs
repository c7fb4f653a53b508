//! The batch rule, the sizing steps and Algorithm 1 (elastic partitioning, best fit,
//! temporal sharing, interference), and squishy bin packing.

use super::schedule::refit;
use super::*;

/// A profile from a closure.
struct Table<F: Fn(u32, u32) -> Option<f64>>(F);
impl<F: Fn(u32, u32) -> Option<f64>> LatencyProfile for Table<F> {
    fn latency_ms(&self, b: u32, p: u32) -> Option<f64> {
        (self.0)(b, p)
    }
}

/// latency = (1 + b) * 100 / p ms: twice the share, half the time.
fn linear() -> Table<impl Fn(u32, u32) -> Option<f64>> {
    Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p)))
}

/// Every batch 1-32 and no margin: the hand computations below stay short.
fn exact(gpus: usize) -> Options {
    Options { latency_margin: 1.0, ..Options::paper(gpus) }
}

fn alone(_: u32) -> f64 {
    1.0
}

/// The authors' rule for a gpu-let given its whole throughput: the run doubled
/// within the SLO. Linear, SLO 34 ms, whole GPU: 2(1+b) <= 34 gives b = 16 (17 ms,
/// 941.2 req/s) — the whole SLO would have allowed b = 32 in 33 ms, a request then
/// waiting up to 33 ms for its batch to form and 33 ms more for it to run. With the
/// authors' 1.1 margin: 2.2(1+b) <= 34 gives b = 14 (16.5 ms, 848.5 req/s).
#[test]
fn a_saturated_gpulet_leaves_its_batch_room_to_form() {
    let t = linear();
    let f = saturated(&t, &exact(1), 100, 34.0, &alone).unwrap();
    assert_eq!((f.batch, f.latency_ms), (16, 17.0));
    assert!((f.rate - 16_000.0 / 17.0).abs() < 1e-9);
    let f = saturated(&t, &Options::paper(1), 100, 34.0, &alone).unwrap();
    assert_eq!(f.batch, 14);
    assert!((f.latency_ms - 16.5).abs() < 1e-9 && (f.rate - 14_000.0 / 16.5).abs() < 1e-9);
    // at 50% the same batches take twice as long: 4(1+b) <= 34, b = 7
    assert_eq!(saturated(&t, &exact(1), 50, 34.0, &alone).map(|f| f.batch), Some(7));
    // no batch runs twice within 3 ms (b = 1 takes 2 ms)
    assert_eq!(saturated(&t, &exact(1), 100, 3.0, &alone), None);
    assert_eq!(max_rate(&t, &exact(1), 100, 3.0), 0.0);
}

/// A gpu-let given less than its throughput fills each batch at its rate: fill time
/// plus run within the SLO. Linear, whole GPU, SLO 34 ms, 200 req/s: (1+b) + 5b <= 34
/// gives b = 5 (6 ms run, 25 ms to fill); at 10 req/s even b = 2 takes 200 ms to
/// fill, and a batch of one (2 ms, waiting at most for the one ahead) serves.
#[test]
fn a_partly_loaded_gpulet_fills_its_batch_at_its_rate() {
    let t = linear();
    let f = fit_batch(&t, &exact(1), 100, 34.0, 200.0, &alone).unwrap();
    assert_eq!((f.batch, f.latency_ms, f.rate), (5, 6.0, 200.0));
    let f = fit_batch(&t, &exact(1), 100, 34.0, 10.0, &alone).unwrap();
    assert_eq!((f.batch, f.rate), (1, 10.0));
    // above the gpu-let's throughput it is given its throughput, saturated
    let f = fit_batch(&t, &exact(1), 100, 34.0, 5000.0, &alone).unwrap();
    assert_eq!(f.batch, 16);
    // the rule itself: b = 5 at 200 req/s meets 34 ms (6 + 25), b = 6 does not (7 + 30)
    assert!(batch_meets_slo(5, 6.0, 200.0, 34.0));
    assert!(!batch_meets_slo(6, 7.0, 200.0, 34.0));
    // and a batch that cannot keep up with its rate never meets it
    assert!(!batch_meets_slo(2, 30.0, 1000.0, 1000.0));
}

/// SLO 60 ms, no margin: a gpu-let of p% serves at 2(1+b)100/p <= 60, so 1+b <=
/// 0.3p: 20% b=5 (166.7 req/s), 40% b=11 (366.7), 50% b=14 (466.7), 60% b=17 (566.7).
#[test]
fn the_min_required_partition_is_the_smallest_that_serves_the_rate() {
    let t = linear();
    let cases = [(300.0, Some(40)), (400.0, Some(50)), (500.0, Some(60)), (5000.0, None)];
    for (rate, want) in cases {
        assert_eq!(min_required_partition(&t, &exact(1), rate, 60.0), want, "{rate}");
    }
}

#[test]
fn the_knee_is_where_the_curve_bends_most() {
    // rises steeply to x=40 then flattens: the knee is 40
    let pts =
        [(20.0, 100.0), (40.0, 190.0), (50.0, 195.0), (60.0, 198.0), (80.0, 200.0), (100.0, 201.0)];
    assert_eq!(knee(&pts), Some(40.0));
    // a straight line has no bend: every point ties at zero curvature, and the
    // first interior point is taken
    let line = [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)];
    assert_eq!(knee(&line), Some(1.0));
    assert_eq!(knee(&[(20.0, 1.0), (40.0, 2.0)]), Some(40.0), "too few points");
    assert_eq!(knee(&[]), None);
}

/// Guided self-tuning under the authors' rule (margin 1.1, every batch). Linear,
/// SLO 34 ms: a gpu-let serves 2.2(1+b)100/p <= 34: 60% b=8 (16.5 ms, 484.8 req/s),
/// 80% b=11 (666.7), 100% b=14 (848.5). 500 req/s needs 80%, partly loaded there:
/// 1.375(1+b) + 2b <= 34 gives b = 9. (Under the whole SLO it took 60% at b=16.)
#[test]
fn guided_self_tuning_gives_each_model_its_own_smallest_sufficient_gpulets() {
    let t = linear();
    let at = |rates: &[f64], gpus| {
        let models: Vec<Model<'_>> =
            rates.iter().map(|&rate| Model { rate, slo_ms: 34.0, profile: &t }).collect();
        guided_self_tuning(&models, &Options::paper(gpus)).map(|g| {
            g.iter()
                .map(|x| {
                    let s = &x.served[0];
                    (x.gpu, x.size, s.model, s.batch, (s.rate * 10.0).round() / 10.0)
                })
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(at(&[500.0], 1), Ok(vec![(0, 80, 0, 9, 500.0)]));
    // a second 80% gpu-let has room nowhere on one GPU, and no sharing in time
    assert_eq!(
        at(&[500.0, 500.0], 1),
        Err(ScheduleError::NotSchedulable { model: 1, unassigned: 500.0 })
    );
    // above a whole GPU: a whole one at b=14, then the smallest for the rest (651.5
    // -> 80%)
    assert_eq!(at(&[1500.0], 2), Ok(vec![(0, 100, 0, 14, 848.5), (1, 80, 0, 11, 651.5)]));
}

/// One model at a modest rate gets one gpu-let of its ideal size, split from GPU 0;
/// the rest of GPU 0 stays free for others.
#[test]
fn one_model_gets_its_ideal_gpulet_split_from_a_gpu() {
    // saturating at 50%: the knee is 50; 150 req/s within 60 ms needs 20%... no:
    // at 20% 1+b <= 6 (b = 5, 30 ms, 166.7 req/s) serves it, so the ideal size is 20
    let t = Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p.min(50))));
    let models = [Model { rate: 150.0, slo_ms: 60.0, profile: &t }];
    let s = elastic_partitioning(&models, &exact(2), &NoInterference).unwrap();
    // partly loaded at 150 req/s: 5(1+b) + 1000b/150 <= 60 gives b = 4
    assert_eq!(
        s,
        vec![Gpulet { gpu: 0, size: 20, served: vec![Served { model: 0, batch: 4, rate: 150.0 }] }]
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
    // model 0 takes 20% (b=6); a 60 ms cycle of b=6 and b=3 takes 5(7 + 4) = 55 ms,
    // and 60 + 35 <= 100
    let s = elastic_partitioning(&models, &exact(2), &NoInterference).unwrap();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].served.iter().map(|x| x.model).collect::<Vec<_>>(), vec![0, 1]);
    let total: f64 = s[0].served.iter().map(|x| x.rate).sum();
    assert!((total - 150.0).abs() < 1e-9);
}

/// At most three models share a gpu-let in time (the authors' "max model").
#[test]
fn no_more_than_three_models_share_a_gpulet() {
    let t = linear();
    let served: Vec<Served> = (0..4).map(|model| Served { model, batch: 1, rate: 1.0 }).collect();
    let models: Vec<Model<'_>> =
        (0..4).map(|_| Model { rate: 1.0, slo_ms: 1000.0, profile: &t }).collect();
    let any = |_: usize, _: u32| 1.0;
    assert!(duty_cycle_batches(&served[..3], &models, 100, &exact(1), &any).is_some());
    assert_eq!(duty_cycle_batches(&served, &models, 100, &exact(1), &any), None);
}

/// A rate no number of the GPUs given can serve is reported, with what is left.
#[test]
fn an_impossible_rate_is_not_schedulable() {
    let t = linear();
    // a whole GPU serves at most 941 req/s within 34 ms (b=16 takes 17 ms)
    let models = [Model { rate: 2500.0, slo_ms: 34.0, profile: &t }];
    let err = elastic_partitioning(&models, &exact(2), &NoInterference).unwrap_err();
    assert!(matches!(err, ScheduleError::NotSchedulable { model: 0, .. }), "{err}");
    assert!(elastic_partitioning(&models, &exact(3), &NoInterference).is_ok());
}

/// Interference from a gpu-let placed beside lowers the neighbour's batch instead of
/// refusing the placement. Neighbour: 50%, SLO 68 ms, saturated at b=16 (4(1+b) =
/// 68: 34 ms, 470.6 req/s). Beside it a batch of 8 slows it by 1 + 8/40 = 1.2: b=16
/// then takes 40.8 ms, doubled over the SLO; 4.8(1+b) <= 68 gives b = 13 (33.6 ms,
/// 386.9 req/s), and the 83.7 req/s it no longer serves are placed again.
#[test]
fn interference_lowers_the_neighbours_batch_before_refusing() {
    struct ByBatch;
    impl InterferenceModel for ByBatch {
        fn factor(&self, _: (usize, u32, u32), other: (usize, u32, u32)) -> f64 {
            1.0 + f64::from(other.1) / 40.0
        }
    }
    let t = linear();
    let models = [
        Model { rate: 470.0, slo_ms: 68.0, profile: &t },
        Model { rate: 100.0, slo_ms: 68.0, profile: &t },
    ];
    let full = 16_000.0 / 34.0;
    let mut neighbour =
        Gpulet { gpu: 0, size: 50, served: vec![Served { model: 0, batch: 16, rate: full }] };
    let placed =
        Gpulet { gpu: 0, size: 50, served: vec![Served { model: 1, batch: 8, rate: 100.0 }] };
    assert!(!gpulet_meets_slos(&neighbour, &[&placed], &models, &exact(1), &ByBatch));
    let mut lost = Vec::new();
    assert!(refit(&mut neighbour, &[&placed], &models, &exact(1), &ByBatch, &mut lost));
    let s = neighbour.served[0];
    assert_eq!(s.batch, 13);
    assert!((s.rate - 13_000.0 / 33.6).abs() < 1e-9, "{s:?}");
    assert_eq!(lost.len(), 1);
    assert!((lost[0].1 - (full - 13_000.0 / 33.6)).abs() < 1e-9, "{lost:?}");
    // a neighbour that meets its SLO at no batch is refused: 1 + 320/40 = 9 times slower
    let heavy =
        Gpulet { gpu: 0, size: 50, served: vec![Served { model: 1, batch: 320, rate: 1.0 }] };
    assert!(!refit(&mut neighbour, &[&heavy], &models, &exact(1), &ByBatch, &mut lost));
}

/// Two of the authors' departures (issue 57 item 3) doing what they say: a residue
/// up to the slack is left unplaced, and the size rule takes the size serving the
/// most per percent (the largest within the threshold of it).
#[test]
fn the_authors_slack_and_size_rule_do_what_they_say() {
    let t = linear();
    let models = [Model { rate: 10.0, slo_ms: 68.0, profile: &t }];
    assert_eq!(elastic_partitioning(&models, &exact(1), &NoInterference).unwrap().len(), 1);
    let authors = AuthorsCode { residue_slack: 15.0, ..AuthorsCode::default() };
    let slack = Options { authors, ..exact(1) };
    assert!(elastic_partitioning(&models, &slack, &NoInterference).unwrap().is_empty());
    // latency 100/p: the same rate per percent at every size, so the largest
    assert_eq!(size_per_percent(&t, &exact(1), 68.0, 1.05), Some(100));
    // half a GPU as fast as a whole one, less serves nothing: 50% serves the most per
    // percent, 60% only 5/6 of it
    let half = Table(|b, p| (p >= 50).then(|| f64::from(1 + b)));
    assert_eq!(size_per_percent(&half, &exact(1), 68.0, 1.05), Some(50));
    assert_eq!(size_per_percent(&half, &exact(1), 68.0, 1.25), Some(60));
}

/// Squishy bin packing under the same rule: a model filling more than a GPU gets
/// whole GPUs at its saturated batch (b=16 within 34 ms, no margin), its residue
/// shares a GPU with another's by a duty cycle; too many whole GPUs are not
/// schedulable.
#[test]
fn squishy_bin_packing_fills_whole_gpus_then_packs_residues() {
    let t = linear();
    let big = Model { rate: 1500.0, slo_ms: 34.0, profile: &t };
    let small = Model { rate: 50.0, slo_ms: 34.0, profile: &t };
    let s = squishy_bin_packing(&[big, small], &exact(3), 100, 3).unwrap();
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!((s[0].served.len(), s[0].served[0].batch), (1, 16));
    assert_eq!(s[1].served.iter().map(|x| x.model).collect::<Vec<_>>(), vec![0, 1]);
    let served: f64 =
        s.iter().flat_map(|g| &g.served).filter(|x| x.model == 0).map(|x| x.rate).sum();
    assert!((served - 1500.0).abs() < 1e-6);
    assert!(squishy_bin_packing(&[Model { rate: 3000.0, ..big }], &exact(3), 100, 3).is_err());
    // with the authors' margin the whole GPU's batch is 14
    let s = squishy_bin_packing(&[big], &Options::paper(3), 100, 3).unwrap();
    assert_eq!(s[0].served[0].batch, 14);
}

/// A tight SLO: lenet's 5 ms with a 2.14 ms batch of 1 leaves feasible duty cycles
/// only in [2.14, 2.86] ms, which whole milliseconds miss; a 1.5 ms batch fits one.
#[test]
fn a_duty_cycle_is_found_under_a_tight_slo() {
    let t = Table(|_, _| Some(2.14));
    let m = [Model { rate: 200.0, slo_ms: 5.0, profile: &t }];
    let one = [Served { model: 0, batch: 1, rate: 200.0 }];
    let any = |_: usize, _: u32| 1.0;
    assert_eq!(duty_cycle_batches(&one, &m, 50, &exact(1), &any), Some(vec![1]));
    assert!(squishy_bin_packing(&m, &exact(1), 50, 1).is_ok());
    // a batch of 3.0 ms: d >= 3 and d + 3 <= 5 cannot both hold
    let slow = Table(|_, _| Some(3.0));
    let m = [Model { rate: 200.0, slo_ms: 5.0, profile: &slow }];
    assert_eq!(duty_cycle_batches(&one, &m, 50, &exact(1), &any), None);
}

#[test]
fn the_max_efficient_partition_of_a_saturating_model() {
    // a model that stops speeding up past 50% of the GPU (memory bound): the knee
    let t = Table(|b, p| Some(f64::from(1 + b) * 100.0 / f64::from(p.min(50))));
    assert_eq!(max_efficient_partition(&t, &exact(1), 80.0), Some(50));
}

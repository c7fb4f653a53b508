//! Serving, rate tracking and rescheduling.

use super::*;
// the whole of gpu-lets' scheduler, as the tests use it
#[allow(unused_imports)]
use crate::policies::gpulets::*;

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
        ServingPlan::new(1, g, &models, &[tenant], &Options::paper(1), &NoInterference)
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

/// A flat 10 ms batch at every size and batch.
struct Flat10;
impl LatencyProfile for Flat10 {
    fn latency_ms(&self, _: u32, _: u32) -> Option<f64> {
        Some(10.0)
    }
}

/// A neighbour slows every model by half again.
struct HalfAgain;
impl InterferenceModel for HalfAgain {
    fn factor(&self, _: (usize, u32, u32), _: (usize, u32, u32)) -> f64 {
        1.5
    }
}

fn request(id: u64, tenant: TenantId) -> Event {
    Event::TaskSubmitted(crate::model::TaskSpec {
        id: crate::TaskId(id),
        tenant,
        kernel: 0,
        memory: crate::units::Bytes(0),
        launch: None,
        batch: 1,
    })
}

fn dispatched(actions: &[Action]) -> Vec<Vec<crate::TaskId>> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DispatchBatch { tasks, .. } => Some(tasks.clone()),
            _ => None,
        })
        .collect()
}

/// Serving `schedule` of `models` (model `i` is `served[i]`) on one GPU, with
/// `registered` tenants registered, each with a 50 ms SLO.
fn serving_one_gpu(
    schedule: &[Gpulet],
    models: &[Model<'_>],
    served: &[TenantId],
    registered: &[TenantId],
) -> (GpuletServing, Vec<Action>) {
    use crate::policy::Policy;
    let gpus = GpuSpec::uniform(1, crate::Bytes::gib(16));
    let plan = ServingPlan::new(1, schedule, models, served, &Options::paper(1), &NoInterference);
    let mut p = GpuletServing::new(&gpus, plan);
    let mut out = Vec::new();
    for &t in registered {
        let spec = crate::TenantSpec::new(
            t,
            crate::ServiceClass::UserFacing { sla: Nanos::from_millis(50) },
        );
        p.on_event(Nanos::ZERO, &Event::TenantRegistered(spec), &mut out);
    }
    (p, out)
}

/// Hand-computed from the scheduler's own reckoning: a batch is sent when its oldest
/// request has waited SLO − scheduled run (profile × 1.1 × the neighbours'
/// interference). Alone, 50 − 10 × 1.1 = 39 ms; beside a gpu-let that slows it by
/// 1.5, 50 − 16.5 = 33.5 ms (it waited 40 ms before, whatever the interference, and
/// its batch then ran 15 ms: 55 ms, late).
#[test]
fn a_batch_is_sent_in_time_for_its_scheduled_run_under_interference() {
    let models = [Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 }];
    let let_of =
        |size| Gpulet { gpu: 0, size, served: vec![Served { model: 0, batch: 4, rate: 100.0 }] };
    let opts = Options::paper(1);
    let wait = |plan: &ServingPlan| plan.gpus[0].1[0].models[0].max_wait;
    let alone = ServingPlan::new(1, &[let_of(100)], &models, &[TenantId(1)], &opts, &HalfAgain);
    assert_eq!(wait(&alone), Nanos(39_000_000));
    let idle = Gpulet { gpu: 0, size: 50, served: vec![Served { model: 0, batch: 1, rate: 1.0 }] };
    let beside =
        ServingPlan::new(1, &[let_of(50), idle], &models, &[TenantId(1)], &opts, &HalfAgain);
    assert_eq!(wait(&beside), Nanos(33_500_000));
    // a batch of one can still meet the SLO until 50 - 10 x 1.5 = 35 ms: dropped after
    assert_eq!(beside.gpus[0].1[0].models[0].drop_after, Nanos(35_000_000));
}

/// Two models sharing a gpu-let in time (each batch 10 ms, 11 scheduled): model A's
/// request must go by 50 − 11 − 11 = 28 ms, so that a batch of B started just before
/// cannot make it late; and an overdue batch goes before a full one. Before, A
/// waited 40 ms: B's request at 39 ms went first, A ran at 49-59 ms, 9 ms late.
#[test]
fn a_model_sharing_a_gpulet_in_time_leaves_room_for_its_neighbours_batch() {
    use crate::policy::Policy;
    let (a, b) = (TenantId(1), TenantId(2));
    let models = [
        Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 },
        Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 },
    ];
    let schedule = [Gpulet {
        gpu: 0,
        size: 100,
        served: vec![
            Served { model: 0, batch: 4, rate: 10.0 },
            Served { model: 1, batch: 1, rate: 10.0 },
        ],
    }];
    let (mut p, mut out) = serving_one_gpu(&schedule, &models, &[a, b], &[a, b]);
    p.on_event(Nanos::ZERO, &request(10, a), &mut out);
    p.on_event(Nanos::from_millis(27), &Event::Tick, &mut out);
    assert!(dispatched(&out).is_empty(), "A is not due before 28 ms: {out:?}");
    // B's request arrives: B's batch of one is full, but A falls due at the same
    // moment and goes first
    p.on_event(Nanos::from_millis(28), &request(20, b), &mut out);
    assert_eq!(dispatched(&out), vec![vec![crate::TaskId(10)]]);
}

/// A finish reported on the whole GPU (as the daemon reports every finish) gives
/// the partition its batch ran in its next batch at once. Before, the server looked
/// only at a gpu-let on exactly the finish's placement, found none, and the full
/// batch waited for a tick past its due time (the daemon's inference test: 97.6% of
/// one model's requests in time against 99%).
#[test]
fn a_finish_reported_on_the_whole_gpu_frees_its_partition() {
    use crate::policy::Policy;
    let (a, b) = (TenantId(1), TenantId(2));
    let models = [
        Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 },
        Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 },
    ];
    let half =
        |model| Gpulet { gpu: 0, size: 50, served: vec![Served { model, batch: 2, rate: 10.0 }] };
    let (mut p, mut out) = serving_one_gpu(&[half(0), half(1)], &models, &[a, b], &[a, b]);
    p.on_event(Nanos::ZERO, &Event::RepartitionDone { gpu: GpuId(0) }, &mut out);
    let ms = Nanos::from_millis;
    p.on_event(ms(1), &request(10, a), &mut out);
    p.on_event(ms(1), &request(11, a), &mut out);
    assert_eq!(dispatched(&out), vec![vec![crate::TaskId(10), crate::TaskId(11)]]);
    p.on_event(ms(2), &request(12, a), &mut out);
    p.on_event(ms(2), &request(13, a), &mut out);
    assert_eq!(dispatched(&out).len(), 1, "no room until the first batch ends");
    for task in [10, 11] {
        let finished = Event::TaskFinished {
            task: crate::TaskId(task),
            placement: Placement::whole(GpuId(0)),
            ran_for: ms(10),
            measured: true,
            result: Ok(()),
        };
        p.on_event(ms(12), &finished, &mut out);
    }
    assert_eq!(
        dispatched(&out).last(),
        Some(&vec![crate::TaskId(12), crate::TaskId(13)]),
        "the second batch goes as the first ends: {out:?}"
    );
}

/// A model the schedule gives no gpu-let (the ideal search can leave one out) never
/// gets a batch: its requests are dropped once past their SLO, so that every request
/// ends. Before, they waited for ever and a simulation of them never finished.
#[test]
fn requests_of_a_model_no_gpulet_serves_are_dropped_past_their_slo() {
    use crate::policy::Policy;
    let (a, b) = (TenantId(1), TenantId(2));
    let models = [Model { rate: 0.0, slo_ms: 50.0, profile: &Flat10 }];
    let schedule =
        [Gpulet { gpu: 0, size: 100, served: vec![Served { model: 0, batch: 4, rate: 10.0 }] }];
    let (mut p, mut out) = serving_one_gpu(&schedule, &models, &[a], &[a, b]);
    p.on_event(Nanos::ZERO, &request(20, b), &mut out);
    p.on_event(Nanos::from_millis(50), &Event::Tick, &mut out);
    assert!(out.iter().all(|a| !matches!(a, Action::EndTask { .. })), "not before: {out:?}");
    p.on_event(Nanos::from_millis(51), &Event::Tick, &mut out);
    assert!(
        out.iter().any(|a| matches!(
            a,
            Action::EndTask {
                task: crate::TaskId(20),
                reason: crate::action::TaskEndReason::Dropped
            }
        )),
        "{out:?}"
    );
}

/// Hand-computed: L(b) = 2 + 0.1 (b - 1) ms, SLO 5 ms, x1.1. Saturated, batch 3
/// (2 x 2.42 <= 5; batch 4: 2 x 2.53 > 5) serves 1,240 req/s; at 600 req/s no batch
/// both keeps up and fills in time (1: 2.2 > 1.67 ms between requests; 2: 3.33 +
/// 2.31 > 5; 3: 5 + 2.42 > 5). The ideal answer still serves the 600 at batch 3
/// (it left the gpu-let empty before, and the model's requests waited for ever).
#[test]
fn the_ideal_answer_serves_a_rate_below_saturation_that_no_batch_fills_in_time() {
    struct Small;
    impl LatencyProfile for Small {
        fn latency_ms(&self, b: u32, _: u32) -> Option<f64> {
            Some(2.0 + 0.1 * f64::from(b - 1))
        }
    }
    let models = [Model { rate: 600.0, slo_ms: 5.0, profile: &Small }];
    let opts = Options::paper(1);
    assert!(fit_batch(&Small, &opts, 100, 5.0, 600.0, &|_| 1.0).is_none());
    let out = ideal_gpulets(&models, &opts, &NoInterference, &[0], &[Some(0)]);
    assert_eq!(out[0].served, vec![Served { model: 0, batch: 3, rate: 600.0 }]);
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

//! DCUDA's steps and monitor, rule by rule.

use super::*;
use crate::ids::TaskId;
use crate::model::LaunchInfo;
use crate::model::TaskSpec;
use crate::units::{Bytes, PerMille};

fn t(i: u64) -> TenantId {
    TenantId(i)
}

#[test]
fn the_hysteresis_band_classifies() {
    for (u, want) in [
        (0.0, LoadState::Underloaded),
        (0.899, LoadState::Underloaded),
        (0.9, LoadState::Normal),
        (1.0, LoadState::Normal),
        (1.001, LoadState::Overloaded),
    ] {
        assert_eq!(classify(u, 1.0, 0.9), want, "{u}");
    }
}

/// Hand-computed: GPU 0 at 160% (0.7, 0.5, 0.4), GPU 1 at 30%, GPU 2 at 95% (normal).
/// 0.7 fits GPU 1 (0.3 + 0.7 = 1.0, not above 100%): it moves, and GPU 0 is at 90%,
/// no longer overloaded. GPU 2, normal, takes nothing.
#[test]
fn balancing_moves_the_heaviest_feasible_application() {
    let mut loads =
        vec![vec![(t(1), 0.7), (t(2), 0.5), (t(3), 0.4)], vec![(t(4), 0.3)], vec![(t(5), 0.95)]];
    let moves = balance(&mut loads, 1.0, 0.9);
    assert_eq!(
        moves,
        vec![Move { tenant: t(1), from: GpuId(0), to: GpuId(1), reason: MoveReason::Balance }]
    );
    // a source that stays overloaded: 0.8 does not fit the target's 0.3 of room, the
    // next heaviest (0.3) does, then nothing else fits
    let mut loads = vec![vec![(t(1), 0.8), (t(2), 0.3), (t(3), 0.2)], vec![(t(4), 0.7)]];
    let moves = balance(&mut loads, 1.0, 0.9);
    assert_eq!(moves.iter().map(|m| m.tenant).collect::<Vec<_>>(), vec![t(2)]);
    assert!((utilization(&loads[0]) - 1.0).abs() < 1e-9);
}

/// Two light GPUs (20% and 30%) merge; a third at 60% cannot join them (110%).
#[test]
fn compaction_merges_the_two_least_loaded_while_one_can_hold_both() {
    let mut loads = vec![vec![(t(1), 0.3)], vec![(t(2), 0.2)], vec![(t(3), 0.6)], vec![]];
    let moves = compact(&mut loads, 1.0);
    assert_eq!(
        moves,
        vec![Move { tenant: t(2), from: GpuId(1), to: GpuId(0), reason: MoveReason::Energy }]
    );
    assert!(loads[1].is_empty());
    // 50% and 60% now: 110% does not fit, so it stops
    assert_eq!(compact(&mut loads, 1.0), vec![]);
}

/// §3.3's example: a 100% and a 5% application make one group, not two.
#[test]
fn fairness_groups_fill_to_the_capacity_and_slightly_beyond() {
    assert_eq!(fairness_groups(&[(t(1), 1.0), (t(2), 0.05)], 1.0, 0.1), vec![vec![t(1), t(2)]]);
    // first fit, heaviest first, up to 110%: 0.6 + 0.5 = 1.1, then 0.6 + 0.3
    let g = fairness_groups(&[(t(1), 0.6), (t(2), 0.6), (t(3), 0.5), (t(4), 0.3)], 1.0, 0.1);
    assert_eq!(g, vec![vec![t(1), t(3)], vec![t(2), t(4)]]);
}

/// §3.3's priorities: in each group every application but the heaviest is raised;
/// a group of one raises nothing; equal demands resolve to the greater id as the
/// heaviest.
#[test]
fn raised_in_groups_raises_all_but_each_groups_heaviest() {
    let demand = |t: TenantId| [0.0, 0.9, 0.05, 0.15, 0.6, 0.6][t.0 as usize];
    let groups = vec![vec![t(1), t(2), t(3)], vec![t(4), t(5)], vec![t(3)]];
    let raised = raised_in_groups(&groups, demand);
    assert_eq!(raised, [t(2), t(3), t(4)].into_iter().collect());
}

/// The policy raises and restores by difference (nothing while nothing changes),
/// and stops asking once the driver refused a stream priority.
#[test]
fn stream_priorities_follow_the_groups_until_the_driver_refuses() {
    let gpus = GpuSpec::uniform(1, Bytes::gib(1));
    let mut p = Dcuda::new(&gpus, DcudaParams::PAPER);
    let slice = DcudaParams::PAPER.slice;
    let groups = vec![vec![t(1), t(2)], vec![t(3)]];
    p.rotations.insert(GpuId(0), SliceRotation::new(groups.clone(), Nanos(0), slice));
    let mut a = Vec::new();
    p.set_priorities(&mut a);
    // no demand measured: equal, so t(2) counts as the heavier
    assert_eq!(a, vec![Action::SetStreamPriority { tenant: t(1), raised: true }]);
    a.clear();
    p.set_priorities(&mut a);
    assert!(a.is_empty(), "{a:?}");
    p.rotations.clear();
    p.set_priorities(&mut a);
    assert_eq!(a, vec![Action::SetStreamPriority { tenant: t(1), raised: false }]);
    let refusal = Event::ActionRefused {
        action: Box::new(Action::SetStreamPriority { tenant: t(1), raised: true }),
        reason: "no stream priorities here".into(),
    };
    p.on_event(Nanos(1), &refusal, &mut Vec::new());
    p.rotations.insert(GpuId(0), SliceRotation::new(groups, Nanos(1), slice));
    a.clear();
    p.set_priorities(&mut a);
    assert!(a.is_empty(), "asked again after a refusal: {a:?}");
}

/// A group that overshoots its 100 ms slice by 30 ms gets 70 ms next time; one that
/// owes more than a slice is skipped once.
#[test]
fn an_overshooting_group_is_charged_in_its_next_slice() {
    let ms = Nanos::from_millis;
    let mut r = SliceRotation::new(vec![vec![t(1)], vec![t(2)]], Nanos::ZERO, ms(100));
    assert!(r.admits(t(1)) && !r.admits(t(2)));
    r.advance(ms(100), ms(100));
    assert!(r.admits(t(2)));
    r.drained(ms(130)); // group 0's last kernel ended 30 ms late
    assert_eq!(r.owed(), &[ms(30), Nanos::ZERO]);
    r.advance(ms(200), ms(100));
    assert!(r.admits(t(1)));
    assert_eq!(r.slice_ends(), ms(270));
    r.drained(ms(200));
    // group 0 overshoots by 250 ms: skipped on its next turn, 50 ms still owed
    r.advance(ms(270), ms(100));
    r.drained(ms(520));
    r.advance(ms(620), ms(100));
    assert!(r.admits(t(2)), "group 0 skipped");
    assert_eq!(r.owed()[0], ms(150));
}

fn task(id: u64, tenant: u64, kernel: u32, grid: u64, demand: u16) -> TaskSpec {
    TaskSpec {
        id: TaskId(id),
        tenant: t(tenant),
        kernel,
        memory: Bytes(0),
        launch: Some(LaunchInfo {
            grid_blocks: grid,
            threads_per_block: 256,
            demand: PerMille(demand),
        }),
        batch: 1,
    }
}

/// Demand is evaluated once per kernel configuration, and weighted by running time:
/// a 40% kernel running half of a 100 ms interval is 20%; held time is not idle time.
#[test]
fn the_monitor_caches_per_configuration_and_weights_by_time() {
    let ms = Nanos::from_millis;
    let mut m = Monitor::default();
    m.started(&task(1, 1, 0, 80, 400), ms(0));
    m.stopped(TaskId(1), ms(50));
    m.started(&task(2, 1, 0, 80, 400), ms(60));
    m.stopped(TaskId(2), ms(60));
    m.started(&task(3, 2, 0, 160, 800), ms(0));
    m.sample(ms(100));
    assert_eq!(m.evaluations(), 2, "two configurations of kernel 0");
    assert!((m.demand(t(1)).unwrap() - 0.2).abs() < 1e-9);
    assert!((m.demand(t(2)).unwrap() - 0.8).abs() < 1e-9);
    // tenant 1 runs 40 ms, then is held for 50: its demand is 0.4 * 40 / 50
    m.started(&task(4, 1, 0, 80, 400), ms(100));
    m.stopped(TaskId(4), ms(140));
    m.hold(t(1), ms(150));
    m.sample(ms(200));
    assert!((m.demand(t(1)).unwrap() - 0.4 * 40.0 / 50.0).abs() < 1e-9);
    assert_eq!(m.evaluations(), 2);
    // the next interval: tenant 2, held throughout, keeps its demand; tenant 1,
    // released and idle, demanded nothing; tenant 5, new, is learnt
    m.release(t(1), ms(200));
    m.stopped(TaskId(3), ms(200));
    m.hold(t(2), ms(200));
    m.started(&task(5, 5, 0, 80, 400), ms(250));
    m.sample(ms(300));
    assert!((m.demand(t(2)).unwrap() - 0.8).abs() < 1e-9);
    assert_eq!(m.demand(t(1)), Some(0.0));
    assert!((m.demand(t(5)).unwrap() - 0.4 * 50.0 / 100.0).abs() < 1e-9);
}

/// A task stopped by its tenant (the policies' path, [`Monitor::stopped_of`]) or by a
/// walk ([`Monitor::stopped`], after a reset) is accounted alike; a wrong tenant stops
/// nothing; a refused dispatch and a departed tenant leave no running task behind.
#[test]
fn the_monitor_stops_a_task_by_its_tenant_or_by_a_walk_alike() {
    let ms = Nanos::from_millis;
    let (mut walked, mut told) = (Monitor::default(), Monitor::default());
    for m in [&mut walked, &mut told] {
        // tenant 1 runs two tasks at once, started out of id order
        m.started(&task(2, 1, 0, 80, 400), ms(0));
        m.started(&task(1, 1, 0, 160, 800), ms(10));
        m.started(&task(3, 2, 0, 80, 400), ms(0));
    }
    assert_eq!(walked.stopped(TaskId(2), ms(30)), Some(t(1)));
    assert!(!told.stopped_of(TaskId(2), t(2), ms(30)), "stopped as another tenant's");
    assert!(told.stopped_of(TaskId(2), t(1), ms(30)));
    assert!(!told.stopped_of(TaskId(2), t(1), ms(31)), "stopped twice");
    assert_eq!(walked.stopped(TaskId(9), ms(30)), None);
    for m in [&mut walked, &mut told] {
        assert_eq!(m.running_tasks().collect::<Vec<_>>(), vec![TaskId(1), TaskId(3)]);
        m.sample(ms(100));
    }
    for tenant in [t(1), t(2)] {
        assert_eq!(walked.demand(tenant), told.demand(tenant), "{tenant}");
    }
    // 0.4 for 30 ms and 0.8 for 90 ms of 100
    assert!((told.demand(t(1)).unwrap() - (0.4 * 30.0 + 0.8 * 90.0) / 100.0).abs() < 1e-9);
    told.cancelled(TaskId(1));
    told.forget(t(2));
    assert_eq!(told.running_tasks().count(), 0);
}

/// The hysteresis band against ping-pong. GPU 0 holds a (50%), b (43% or 49%) and a
/// small s (6%); GPU 1 holds c, whose demand swings against b's (86% or 96%). When
/// b is high GPU 0 is overloaded (105%) and s moves to GPU 1; when c is high GPU 1
/// is overloaded (102%) and GPU 0 is at 93%. With DCUDA's band that 93% is normal, so
/// s stays: one migration in 100 rounds. With one threshold (under = over = 100%) it
/// is underloaded, so s goes back, every round.
#[test]
fn the_band_prevents_ping_pong() {
    let run = |under: f64| {
        let mut loads: Loads =
            vec![vec![(t(1), 0.5), (t(2), 0.45), (t(3), 0.06)], vec![(t(4), 0.88)]];
        let mut moves = 0;
        for round in 0..100 {
            let high = round % 2 == 0;
            for apps in loads.iter_mut() {
                for (tenant, d) in apps.iter_mut() {
                    match tenant.0 {
                        2 => *d = if high { 0.49 } else { 0.43 },
                        4 => *d = if high { 0.86 } else { 0.96 },
                        _ => {}
                    }
                }
            }
            moves += balance(&mut loads, 1.0, under).len();
        }
        moves
    };
    assert_eq!(run(0.9), 1);
    assert_eq!(run(1.0), 100);
}

/// The daemon's compaction limit: two applications whose demands wander around a
/// sum of 100% (0.47 or 0.51 each) are merged whenever the sum is at most 100% and
/// pulled apart by balancing when it is over — every other round with the paper's
/// limit; merging only below 90% leaves them apart.
#[test]
fn compacting_below_the_band_stops_merge_and_split_cycles() {
    let run = |compact_to: f64| {
        let mut loads: Loads = vec![vec![(t(1), 0.47)], vec![(t(2), 0.47)]];
        let mut moves = 0;
        for round in 0..100 {
            let d = if round % 2 == 0 { 0.47 } else { 0.51 };
            for apps in loads.iter_mut() {
                for (_, x) in apps.iter_mut() {
                    *x = d;
                }
            }
            moves += balance(&mut loads, 1.0, 0.9).len();
            moves += compact(&mut loads, compact_to).len();
        }
        moves
    };
    assert!(run(1.0) >= 50, "{}", run(1.0));
    assert_eq!(run(0.9), 0);
}

/// The overloaded GPU-samples taken apart (issue 57 item 6): a sample whose summed
/// demand is over the node's GPUs counts as such and its overloaded GPUs not as "with
/// room"; an overload is new when its GPU was not overloaded at the sample before, and
/// relieved when the sample's moves bring it within capacity.
#[test]
fn overloaded_samples_are_taken_apart() {
    let mut o = OverloadSources::default();
    // the first sample: GPU 0 over, the node within its 2 GPUs (1.3 + 0.5 = 1.8)
    o.count(&[], &[1.3, 0.5], &[0.9, 0.9]);
    assert_eq!(
        o,
        OverloadSources {
            overloaded: 1,
            new: 1,
            relieved: 1,
            node_over: 0,
            overloaded_with_room: 1
        }
    );
    // both over and the node over its GPUs (2.4 > 2); GPU 0 was over before
    o.count(&[1.3, 0.5], &[1.2, 1.2], &[1.2, 1.2]);
    assert_eq!(
        o,
        OverloadSources {
            overloaded: 3,
            new: 2,
            relieved: 1,
            node_over: 1,
            overloaded_with_room: 1
        }
    );
    // nothing over
    o.count(&[1.2, 1.2], &[0.5, 0.5], &[0.5, 0.5]);
    assert_eq!((o.overloaded, o.node_over), (3, 1));
}

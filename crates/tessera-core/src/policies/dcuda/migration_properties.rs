//! Properties of DCUDA's balancing over random applications.

use super::*;
use crate::event::MemoryWait;
use crate::ids::MemRequestId;
use crate::ids::TaskId;
use crate::model::TaskSpec;
use crate::model::{LaunchInfo, ServiceClass, TenantSpec};
use crate::units::{Bytes, PerMille};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

#[derive(Clone, Debug)]
struct App {
    arrival_ms: u64,
    demand: u16,
    memory_mib: u64,
    tasks: Vec<u64>,
}

fn app() -> impl Strategy<Value = App> {
    (0u64..3_000, 50u16..=1000, 0u64..3_000, prop::collection::vec(10u64..200, 1..25)).prop_map(
        |(arrival_ms, demand, memory_mib, tasks)| App { arrival_ms, demand, memory_mib, tasks },
    )
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Arrive(usize),
    Finish(u64),
    Moved(u64, u32),
    Tick,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Driven by a fake driver (tasks take their own time, a migration 50 ms), DCUDA
    /// with every step on never loses, duplicates or reorders a tenant's tasks, runs
    /// one of them at a time (an application's stream), never
    /// dispatches a tenant's task while it moves, and its memory is on exactly one
    /// GPU at every moment (the board's per-GPU books equal the sum of what each
    /// tenant holds where the test last saw it go).
    #[test]
    fn migration_keeps_every_task_once_in_order_and_memory_in_one_place(
        gpus in 2usize..5,
        apps in prop::collection::vec(app(), 2..9),
    ) {
        let specs = GpuSpec::uniform(gpus, Bytes::gib(16));
        let params = DcudaParams { interval: Nanos::from_millis(50), slice: Nanos::from_millis(50), ..DcudaParams::PAPER };
        let mut p = Dcuda::new(&specs, params);
        let mut queue: BinaryHeap<Reverse<(Nanos, u64, Due)>> = BinaryHeap::new();
        let mut seq = 0u64;
        let mut push = |q: &mut BinaryHeap<Reverse<(Nanos, u64, Due)>>, at: Nanos, d: Due| {
            seq += 1;
            q.push(Reverse((at, seq, d)));
        };
        for (i, a) in apps.iter().enumerate() {
            push(&mut queue, Nanos::from_millis(a.arrival_ms), Due::Arrive(i));
        }
        push(&mut queue, Nanos::from_millis(50), Due::Tick);
        let mut durations: BTreeMap<u64, (usize, u64)> = BTreeMap::new(); // task -> (app, ms)
        let mut dispatched: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut placements: BTreeMap<u64, crate::model::Placement> = BTreeMap::new();
        let mut finished = 0usize;
        let total: usize = apps.iter().map(|a| a.tasks.len()).sum();
        let mut memory_at: BTreeMap<usize, (GpuId, u64)> = BTreeMap::new();
        let mut moving: BTreeSet<usize> = BTreeSet::new();
        let mut running: BTreeSet<usize> = BTreeSet::new();
        let mut next_task = 0u64;
        let mut migrations = 0;
        while let Some(Reverse((now, _, due))) = queue.pop() {
            let mut actions = Vec::new();
            match due {
                Due::Arrive(i) => {
                    let tenant = TenantId(i as u64);
                    let spec = TenantSpec { memory: Bytes::mib(apps[i].memory_mib), ..TenantSpec::new(tenant, ServiceClass::Batch) };
                    p.on_event(now, &Event::TenantRegistered(spec), &mut actions);
                    let home = p.home(tenant).unwrap();
                    p.on_event(now, &Event::MemoryRequested {
                        request: MemRequestId(i as u64), tenant, gpu: home,
                        bytes: Bytes::mib(apps[i].memory_mib), wait: MemoryWait::NoWait,
                    }, &mut actions);
                    if actions.iter().any(|a| matches!(a, Action::GrantMemory { .. })) {
                        memory_at.insert(i, (home, apps[i].memory_mib));
                    }
                    for (k, ms) in apps[i].tasks.iter().enumerate() {
                        let id = next_task;
                        next_task += 1;
                        durations.insert(id, (i, *ms));
                        let launch = LaunchInfo { grid_blocks: 64, threads_per_block: 256, demand: PerMille(apps[i].demand) };
                        let spec = TaskSpec { id: TaskId(id), tenant, kernel: k as u32 % 2, memory: Bytes(0), launch: Some(launch), batch: 1 };
                        p.on_event(now, &Event::TaskSubmitted(spec), &mut actions);
                    }
                }
                Due::Finish(task) => {
                    let placement = placements[&task];
                    p.on_event(now, &Event::TaskFinished { task: TaskId(task), placement, ran_for: Nanos(1), measured: true, result: Ok(()) }, &mut actions);
                    finished += 1;
                    running.remove(&durations[&task].0);
                }
                Due::Moved(tenant, to) => {
                    moving.remove(&(tenant as usize));
                    p.on_event(now, &Event::MigrationDone { tenant: TenantId(tenant), to: GpuId(to) }, &mut actions);
                }
                Due::Tick => {
                    p.on_event(now, &Event::Tick, &mut actions);
                    // every task is done well within 100 s of simulated time;
                    // past that the run has stalled, which the checks below catch
                    if finished < total && now < Nanos::from_secs(100) {
                        push(&mut queue, now + Nanos::from_millis(50), Due::Tick);
                    }
                }
            }
            for a in actions {
                match a {
                    Action::Dispatch { task, placement } => {
                        placements.insert(task.0, placement);
                        let (app, ms) = durations[&task.0];
                        prop_assert!(!moving.contains(&app), "dispatched while moving");
                        prop_assert!(running.insert(app), "two tasks of one application at once");
                        let seen = dispatched.entry(app).or_default();
                        prop_assert!(seen.last().is_none_or(|l| *l < task.0), "out of order: {task} after {seen:?}");
                        seen.push(task.0);
                        push(&mut queue, now + Nanos::from_millis(ms), Due::Finish(task.0));
                    }
                    Action::Migrate { tenant, from, to } => {
                        let app = tenant.0 as usize;
                        prop_assert!(p.board().tenant_gpus(tenant).next().is_none() || p.board().is_migrating(tenant));
                        if let Some((at, mib)) = memory_at.get(&app).copied() {
                            prop_assert_eq!(at, from);
                            memory_at.insert(app, (to, mib));
                        }
                        moving.insert(app);
                        migrations += 1;
                        push(&mut queue, now + Nanos::from_millis(50), Due::Moved(tenant.0, to.0));
                    }
                    Action::SetStreamPriority { tenant, .. } => {
                        prop_assert!(p.home(tenant).is_some(), "priority of a departed {tenant}");
                    }
                    Action::GrantMemory { .. } | Action::DenyMemory { .. } => {}
                    other => prop_assert!(false, "unexpected action {other:?}"),
                }
            }
            for g in 0..gpus {
                let expected: u64 = memory_at.values().filter(|(at, _)| at.0 as usize == g).map(|(_, m)| *m).sum();
                prop_assert_eq!(p.board().memory_used(GpuId(g as u32)), Bytes::mib(expected));
            }
        }
        prop_assert_eq!(finished, total, "every task ran once");
        let ran: usize = dispatched.values().map(Vec::len).sum();
        prop_assert_eq!(ran, total);
        let _ = migrations; // most cases migrate (4 in the median case when checked by hand)
    }
}

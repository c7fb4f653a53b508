//! The board's unit tests.

use super::*;
use crate::ids::MemRequestId;

fn board(gpus: usize, per_placement: usize) -> Board {
    Board::with_colocation(&GpuSpec::uniform(gpus, Bytes::gib(1)), per_placement)
}

fn tenant(b: &mut Board, id: u64) {
    let spec = TenantSpec::new(TenantId(id), ServiceClass::Batch);
    b.observe(Nanos::ZERO, &Event::TenantRegistered(spec), &mut Vec::new());
}

fn submit(b: &mut Board, id: u64, tenant: u64) {
    let spec = TaskSpec {
        id: TaskId(id),
        tenant: TenantId(tenant),
        kernel: 0,
        memory: Bytes(0),
        launch: None,
        batch: 1,
    };
    b.observe(Nanos::ZERO, &Event::TaskSubmitted(spec), &mut Vec::new());
}

fn finish(b: &mut Board, task: u64, gpu: u32) -> Option<FinishedTask> {
    let e = Event::TaskFinished {
        task: TaskId(task),
        placement: Placement::whole(GpuId(gpu)),
        ran_for: Nanos(5),
        measured: true,
        result: Ok(()),
    };
    b.observe(Nanos(10), &e, &mut Vec::new())
}

#[test]
fn a_gpu_takes_as_many_tasks_as_the_colocation_allows() {
    let mut b = board(1, 2);
    tenant(&mut b, 1);
    for t in 0..3 {
        submit(&mut b, t, 1);
    }
    let mut out = Vec::new();
    for _ in 0..3 {
        b.dispatch(Nanos::ZERO, GpuId(0), TenantId(1), &mut out);
    }
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(!b.has_room(Placement::whole(GpuId(0))));
    assert_eq!(b.running(Classes::All), 2);
    assert_eq!(b.state(GpuId(0)).demand(), 2000);
    assert!(finish(&mut b, 1, 0).is_some());
    assert!(finish(&mut b, 1, 0).is_none(), "a second finish of one task is stale");
    assert!(b.has_room(Placement::whole(GpuId(0))));
    assert!(b.idle_gpus().is_empty(), "one task still runs");
}

#[test]
fn a_reset_kills_every_co_running_task_and_requeues_them_in_order() {
    let mut b = board(1, 4);
    tenant(&mut b, 1);
    tenant(&mut b, 2);
    submit(&mut b, 10, 1);
    submit(&mut b, 11, 2);
    submit(&mut b, 12, 1);
    let mut out = Vec::new();
    b.dispatch(Nanos::ZERO, GpuId(0), TenantId(1), &mut out);
    b.dispatch(Nanos::ZERO, GpuId(0), TenantId(2), &mut out);
    b.dispatch(Nanos::ZERO, GpuId(0), TenantId(1), &mut out);
    out.clear();
    b.reset(Nanos(1), GpuId(0), Nanos(100), &mut out);
    assert_eq!(
        out,
        vec![Action::ResetGpu { gpu: GpuId(0), killed: vec![TaskId(10), TaskId(11), TaskId(12)] }]
    );
    assert_eq!(b.queued(Classes::All), 3);
    assert_eq!(b.oldest_head(Classes::All), Some(TenantId(1)));
    assert!(!b.state(GpuId(0)).is_available());
    b.observe(Nanos(101), &Event::GpuResetDone { gpu: GpuId(0) }, &mut out);
    out.clear();
    b.dispatch(Nanos(101), GpuId(0), TenantId(1), &mut out);
    assert!(
        matches!(out[0], Action::Dispatch { task: TaskId(10), .. }),
        "the oldest first: {out:?}"
    );
}

#[test]
fn a_migration_moves_tasks_and_memory_and_a_failure_moves_them_back() {
    let mut b = board(2, 4);
    tenant(&mut b, 1);
    submit(&mut b, 1, 1);
    let mut out = Vec::new();
    let ask = Event::MemoryRequested {
        request: MemRequestId(1),
        tenant: TenantId(1),
        gpu: GpuId(0),
        bytes: Bytes::mib(100),
        wait: crate::event::MemoryWait::NoWait,
    };
    b.observe(Nanos::ZERO, &ask, &mut out);
    b.dispatch(Nanos::ZERO, GpuId(0), TenantId(1), &mut out);
    out.clear();
    assert!(b.migrate(TenantId(1), GpuId(0), GpuId(1), &mut out));
    assert!(!b.migrate(TenantId(1), GpuId(0), GpuId(1), &mut out), "one move at a time");
    assert_eq!(out, vec![Action::Migrate { tenant: TenantId(1), from: GpuId(0), to: GpuId(1) }]);
    assert_eq!(b.tenant_gpus(TenantId(1)).collect::<Vec<_>>(), vec![GpuId(1)]);
    assert_eq!((b.memory_used(GpuId(0)), b.memory_used(GpuId(1))), (Bytes(0), Bytes::mib(100)));
    let failed = Event::MigrationFailed { tenant: TenantId(1), reason: "no".into() };
    b.observe(Nanos(1), &failed, &mut out);
    assert_eq!(b.tenant_gpus(TenantId(1)).collect::<Vec<_>>(), vec![GpuId(0)]);
    assert_eq!(b.memory_used(GpuId(0)), Bytes::mib(100));
    // a refusal of the action undoes it the same way
    out.clear();
    assert!(b.migrate(TenantId(1), GpuId(0), GpuId(1), &mut out));
    let refused = Event::ActionRefused { action: Box::new(out[0].clone()), reason: "no".into() };
    b.observe(Nanos(2), &refused, &mut out);
    assert_eq!(b.tenant_gpus(TenantId(1)).collect::<Vec<_>>(), vec![GpuId(0)]);
    assert!(!b.is_migrating(TenantId(1)));
    // and a completed one stays; the task then finishes on its new GPU
    assert!(b.migrate(TenantId(1), GpuId(0), GpuId(1), &mut out));
    b.observe(Nanos(3), &Event::MigrationDone { tenant: TenantId(1), to: GpuId(1) }, &mut out);
    assert!(finish(&mut b, 1, 0).is_none(), "not on its old GPU any more");
    assert!(finish(&mut b, 1, 1).is_some());
}

#[test]
fn a_batch_counts_once_and_a_refused_dispatch_goes_back_to_the_queue() {
    let mut b = board(1, 1);
    tenant(&mut b, 1);
    for t in 0..3 {
        submit(&mut b, t, 1);
    }
    let mut out = Vec::new();
    let at = Placement::whole(GpuId(0));
    assert_eq!(b.dispatch_batch(Nanos::ZERO, at, TenantId(1), 2, &mut out), 2);
    assert_eq!(
        out,
        vec![Action::DispatchBatch { tasks: vec![TaskId(0), TaskId(1)], placement: at }]
    );
    assert_eq!(b.state(GpuId(0)).running_at(at), 1, "one execution");
    assert!(!b.has_room(at));
    assert_eq!((b.running(Classes::All), b.queued(Classes::All)), (2, 1));
    // the driver refuses it: both requests are queued again, ahead of the third
    let refused = Event::ActionRefused { action: Box::new(out[0].clone()), reason: "no".into() };
    out.clear();
    b.observe(Nanos(1), &refused, &mut out);
    assert_eq!((b.running(Classes::All), b.queued(Classes::All)), (0, 3));
    b.dispatch(Nanos(1), GpuId(0), TenantId(1), &mut out);
    assert!(matches!(out[0], Action::Dispatch { task: TaskId(0), .. }), "{out:?}");
}

#[test]
fn partitions_and_power_follow_their_acknowledgements() {
    let mut b = board(2, 1);
    let mut out = Vec::new();
    assert!(!b.repartition(GpuId(0), vec![PerMille(600), PerMille(500)], &mut out));
    assert!(!b.repartition(GpuId(0), vec![PerMille(0)], &mut out));
    assert!(b.repartition(GpuId(0), vec![PerMille(300), PerMille(700)], &mut out));
    assert!(b.state(GpuId(0)).partitions().is_empty(), "not before it is done");
    let first = Placement { gpu: GpuId(0), partition: Some(crate::ids::PartitionId(0)) };
    assert!(!b.has_room(first));
    b.observe(Nanos(1), &Event::RepartitionDone { gpu: GpuId(0) }, &mut out);
    assert_eq!(b.state(GpuId(0)).partitions(), &[PerMille(300), PerMille(700)]);
    assert!(b.has_room(first));
    assert!(!b.has_room(Placement::whole(GpuId(0))), "a partitioned GPU is not whole");
    // power: down at once, up once acknowledged
    assert!(b.set_powered(GpuId(1), false, &mut out));
    assert!(!b.state(GpuId(1)).is_powered());
    assert!(!b.idle_gpus().contains(&GpuId(1)));
    let down = Event::GpuPowerChanged { gpu: GpuId(1), powered: false };
    b.observe(Nanos(2), &down, &mut out);
    assert!(b.set_powered(GpuId(1), true, &mut out));
    assert!(!b.state(GpuId(1)).is_available(), "not until acknowledged");
    let up = Event::GpuPowerChanged { gpu: GpuId(1), powered: true };
    b.observe(Nanos(3), &up, &mut out);
    assert!(b.idle_gpus().contains(&GpuId(1)));
}

/// A board indexing the user-facing heads only (the node policy's) answers every
/// question of the oldest head as a walk of the queues does, for either class and
/// both, through dispatches that change each class's heads.
#[test]
fn a_head_index_of_one_class_answers_for_every_class() {
    let gpus = GpuSpec::uniform(2, Bytes::gib(1));
    let mut b = Board::new(&gpus).with_head_index_of(Classes::UserFacing);
    for id in 0..6u64 {
        let class = if id % 2 == 0 {
            ServiceClass::UserFacing { sla: Nanos::from_millis(10) }
        } else {
            ServiceClass::Batch
        };
        let spec = TenantSpec::new(TenantId(id), class);
        b.observe(Nanos::ZERO, &Event::TenantRegistered(spec), &mut Vec::new());
    }
    // submissions interleaved over the classes, the oldest heads batch and user-facing
    for (task, tenant) in [(0, 3), (1, 2), (2, 1), (3, 4), (4, 3), (5, 0), (6, 5), (7, 2)] {
        submit(&mut b, task, tenant);
    }
    let mut out = Vec::new();
    for round in 0..4 {
        for classes in [Classes::All, Classes::UserFacing, Classes::Batch] {
            assert_eq!(
                b.oldest_head(classes),
                b.oldest_head_where(classes, |_| true),
                "round {round}, {classes:?}"
            );
        }
        // the oldest head of all runs, then finishes
        let Some(tenant) = b.oldest_head(Classes::All) else { break };
        let task = b.dispatch(Nanos::ZERO, GpuId(0), tenant, &mut out).expect("dispatched");
        finish(&mut b, task.0, 0).expect("it ran");
    }
    // tasks 0 to 3 ran: the batch heads left are tasks 4 (tenant 3) and 6 (tenant 5)
    assert_eq!(b.oldest_head(Classes::Batch), Some(TenantId(3)));
}

/// A selection's mask holds the bits of its class indices, and no other.
#[test]
fn a_selections_mask_is_its_classes() {
    for classes in [Classes::All, Classes::UserFacing, Classes::Batch] {
        let bits = classes.indices().iter().fold(0u8, |m, c| m | 1 << c);
        assert_eq!(classes.mask(), bits, "{classes:?}");
    }
}

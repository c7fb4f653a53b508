//! Policy behaviour against hand-worked scenarios: events in, actions out.

use tessera_core::action::TaskEndReason;
use tessera_core::policy::PidGains;
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Placement, Policy, PolicyConfig, PolicyError,
    ServiceClass, TaskId, TaskSpec, TenantId, TenantSpec,
};

const SLA: Nanos = Nanos::from_millis(200);
const BATCH_KERNEL: u32 = 0;
const UF_KERNEL: u32 = 1;

fn gpus(n: usize) -> Vec<GpuSpec> {
    GpuSpec::uniform(n, Bytes::gib(4))
}

fn ms(v: u64) -> Nanos {
    Nanos::from_millis(v)
}

/// Drives a policy and keeps every action it emitted.
struct Harness {
    policy: Box<dyn Policy>,
    next_task: u64,
    log: Vec<Action>,
}

impl Harness {
    fn new(cfg: PolicyConfig, n: usize) -> Harness {
        Harness { policy: cfg.build(&gpus(n)).unwrap(), next_task: 0, log: Vec::new() }
    }

    fn send(&mut self, now: Nanos, e: Event) -> Vec<Action> {
        let mut out = Vec::new();
        self.policy.on_event(now, &e, &mut out);
        self.log.extend(out.iter().cloned());
        out
    }

    fn tenant(&mut self, now: Nanos, id: u64, class: ServiceClass) {
        self.send(now, Event::TenantRegistered(TenantSpec::new(TenantId(id), class)));
    }

    fn submit(&mut self, now: Nanos, tenant: u64, kernel: u32) -> (TaskId, Vec<Action>) {
        let id = TaskId(self.next_task);
        self.next_task += 1;
        let out = self.send(
            now,
            Event::TaskSubmitted(TaskSpec {
                launch: None,
                batch: 1,
                id,
                tenant: TenantId(tenant),
                kernel,
                memory: Bytes(0),
            }),
        );
        (id, out)
    }

    fn finish(&mut self, now: Nanos, task: TaskId, gpu: u32, ran_for: Nanos) -> Vec<Action> {
        self.send(
            now,
            Event::TaskFinished {
                task,
                placement: Placement::whole(GpuId(gpu)),
                ran_for,
                measured: true,
                result: Ok(()),
            },
        )
    }
}

fn dispatches(actions: &[Action]) -> Vec<(TaskId, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dispatch { task, placement } => Some((*task, placement.gpu.0)),
            _ => None,
        })
        .collect()
}

fn pools(actions: &[Action]) -> Option<Vec<u32>> {
    actions.iter().rev().find_map(|a| match a {
        Action::SetPools { user_facing, .. } => Some(user_facing.iter().map(|g| g.0).collect()),
        _ => None,
    })
}

fn resets(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ResetGpu { gpu, .. } => Some(gpu.0),
            _ => None,
        })
        .collect()
}

fn uf() -> ServiceClass {
    ServiceClass::UserFacing { sla: SLA }
}

fn flexy(reserve: usize, reset: Option<Nanos>) -> PolicyConfig {
    PolicyConfig::Flexy { reserve, reset, sla: SLA, history: 10, order: Default::default() }
}

#[test]
fn round_robin_alternates_tenants_regardless_of_class() {
    let mut h = Harness::new(PolicyConfig::RoundRobin, 1);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    let (b0, a) = h.submit(ms(0), 1, BATCH_KERNEL);
    assert_eq!(dispatches(&a), vec![(b0, 0)]);
    let (_b1, _) = h.submit(ms(1), 1, BATCH_KERNEL);
    let (u0, _) = h.submit(ms(2), 2, UF_KERNEL);
    // tenant 1 went last, so tenant 2 is next even though tenant 1 queued first
    let a = h.finish(ms(10), b0, 0, ms(10));
    assert_eq!(dispatches(&a), vec![(u0, 0)]);
}

#[test]
fn priority_serves_user_facing_first_and_keeps_reserved_gpus_for_it() {
    let mut h = Harness::new(PolicyConfig::Priority { reserve: 1, reset: None }, 2);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    let (b0, a) = h.submit(ms(0), 1, BATCH_KERNEL);
    // GPU 0 is reserved: the batch task goes to GPU 1
    assert_eq!(dispatches(&a), vec![(b0, 1)]);
    assert_eq!(pools(&h.log), Some(vec![0]));
    let (b1, a) = h.submit(ms(1), 1, BATCH_KERNEL);
    assert!(dispatches(&a).is_empty(), "a batch task never runs on the reserved GPU");
    let (u0, a) = h.submit(ms(2), 2, UF_KERNEL);
    assert_eq!(dispatches(&a), vec![(u0, 0)]);
    let (u1, _) = h.submit(ms(3), 2, UF_KERNEL);
    // GPU 1 frees: the waiting user-facing task goes before the older batch task
    let a = h.finish(ms(50), b0, 1, ms(50));
    assert_eq!(dispatches(&a), vec![(u1, 1)]);
    let a = h.finish(ms(60), u1, 1, ms(10));
    assert_eq!(dispatches(&a), vec![(b1, 1)]);
}

#[test]
fn priority_reset_fires_only_when_every_gpu_runs_batch_work() {
    let mut h = Harness::new(PolicyConfig::Priority { reserve: 0, reset: Some(ms(1000)) }, 3);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    let batch: Vec<TaskId> = (0..3).map(|_| h.submit(ms(0), 1, BATCH_KERNEL).0).collect();
    // every GPU runs batch work: the waiting user-facing task costs one reset, the
    // batch task expected to run longest (all unknown here: GPU id order) first
    let (_, a) = h.submit(ms(100), 2, UF_KERNEL);
    assert_eq!(
        a.iter().find(|x| matches!(x, Action::ResetGpu { .. })),
        Some(&Action::ResetGpu { gpu: GpuId(0), killed: vec![batch[0]] })
    );
    // GPU 0 is resetting, so not every GPU runs batch work: §IV-A's P-Reset waits
    // (the rule before issue 24 reset GPU 1 and GPU 2 here, one per waiting task)
    let (_, a) = h.submit(ms(101), 2, UF_KERNEL);
    assert_eq!(resets(&a), Vec::<u32>::new());
    let (_, a) = h.submit(ms(102), 2, UF_KERNEL);
    assert_eq!(resets(&a), Vec::<u32>::new());
    // the reset GPU takes user-facing work first; the killed batch task waits
    let a = h.send(ms(1100), Event::GpuResetDone { gpu: GpuId(0) });
    assert_eq!(dispatches(&a).len(), 1);
    assert_ne!(dispatches(&a)[0].0, batch[0], "user-facing first");
}

#[test]
fn priority_reset_waits_while_a_gpu_runs_user_facing_work() {
    let mut h = Harness::new(PolicyConfig::Priority { reserve: 0, reset: Some(ms(1000)) }, 3);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    h.tenant(ms(0), 3, uf());
    // GPU 0 runs user-facing work, GPUs 1 and 2 batch work
    let (u0, _) = h.submit(ms(0), 2, UF_KERNEL);
    let _batch: Vec<TaskId> = (0..3).map(|_| h.submit(ms(0), 1, BATCH_KERNEL).0).collect();
    // two user-facing tasks wait, but GPU 0 runs user-facing work: no reset (the rule
    // before issue 24 reset one GPU, for the task GPU 0 would not cover)
    let (_, a) = h.submit(ms(10), 3, UF_KERNEL);
    let (_, b) = h.submit(ms(10), 3, UF_KERNEL);
    assert!(resets(&a).is_empty() && resets(&b).is_empty());
    // GPU 0's task ends: it takes the next user-facing task, still no reset
    let a = h.finish(ms(50), u0, 0, ms(50));
    assert_eq!(dispatches(&a).len(), 1);
    assert!(resets(&a).is_empty());
}

#[test]
fn flexy_reset_packs_user_facing_tasks_and_resets_once() {
    let mut h = Harness::new(flexy(0, Some(ms(1000))), 3);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    // learn le = 20 ms from one user-facing task
    let (u0, a) = h.submit(ms(0), 2, UF_KERNEL);
    assert_eq!(dispatches(&a), vec![(u0, 0)]);
    h.finish(ms(20), u0, 0, ms(20));
    assert_eq!(pools(&h.log), Some(vec![]), "q = 0 and K = 0: no user-facing pool");
    for _ in 0..3 {
        h.submit(ms(30), 1, BATCH_KERNEL);
    }
    // three user-facing tasks: q x le = 60 ms fits one GPU under a 200 ms SLA, so U = 1
    // and Flexy resets one GPU where priority would reset three
    let mut all_resets = Vec::new();
    for t in 0..3 {
        let (_, a) = h.submit(ms(100 + t), 2, UF_KERNEL);
        all_resets.extend(resets(&a));
    }
    assert_eq!(all_resets, vec![0]);
    assert_eq!(pools(&h.log), Some(vec![0]));
}

/// Algorithm 1 end to end: U from le and q, GPUs sorted by estimated completion.
#[test]
fn flexy_pool_takes_the_gpus_that_free_first() {
    let mut h = Harness::new(flexy(0, None), 4);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    h.tenant(ms(0), 2, uf());
    // batch tasks start at 0, 100, 200, 300 ms; learn that they take 1000 ms
    let mut batch = Vec::new();
    for t in 0..4 {
        batch.push(h.submit(ms(100 * t), 1, BATCH_KERNEL).0);
    }
    h.submit(ms(350), 1, BATCH_KERNEL);
    h.finish(ms(1000), batch[0], 0, ms(1000)); // GPU 0 takes the fifth: ends ~2000
    // GPUs expected free at: 0 -> 2000, 1 -> 1100, 2 -> 1200, 3 -> 1300.
    // Two user-facing tasks with le = SLA (nothing learnt): U = ceil(200*1/200) = 1
    h.submit(ms(1010), 2, UF_KERNEL);
    assert_eq!(pools(&h.log), Some(vec![1]));
    h.submit(ms(1020), 2, UF_KERNEL); // q = 2: U = 2 -> GPUs 1 and 2
    assert_eq!(pools(&h.log), Some(vec![1, 2]));
    // GPU 1 frees: it is in the pool and takes a user-facing task, not batch work
    let a = h.finish(ms(1100), batch[1], 1, ms(1000));
    assert_eq!(dispatches(&a), vec![(TaskId(5), 1)]);
}

#[test]
fn flexy_minimum_reservation_holds_gpus_for_user_facing_work() {
    let mut h = Harness::new(flexy(2, None), 4);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    let placed: Vec<u32> = (0..4)
        .flat_map(|_| dispatches(&h.submit(ms(0), 1, BATCH_KERNEL).1))
        .map(|(_, g)| g)
        .collect();
    assert_eq!(placed.len(), 2, "two GPUs are reserved even with no user-facing work");
    assert_eq!(pools(&h.log).map(|p| p.len()), Some(2));
}

#[test]
fn pid_variant_raises_k_under_load_and_drops_it_to_zero_when_quiet() {
    let gains = PidGains::default();
    let mut h = Harness::new(PolicyConfig::FlexyPid { sla: SLA, history: 10, gains }, 4);
    h.tenant(ms(0), 2, uf());
    h.tenant(ms(0), 1, ServiceClass::Batch);
    assert_eq!(h.policy.min_reservation(), 0);
    // a burst that cannot be served in time: 40 tasks of 150 ms on 4 GPUs
    let mut running: Vec<(TaskId, u32)> = Vec::new();
    for _ in 0..40 {
        running.extend(dispatches(&h.submit(ms(0), 2, UF_KERNEL).1));
    }
    let mut now = ms(0);
    let mut peak = 0;
    while now < ms(3000) {
        now += ms(150);
        let done: Vec<_> = std::mem::take(&mut running);
        for (task, gpu) in done {
            running.extend(dispatches(&h.finish(now, task, gpu, ms(150))));
        }
        if now.0 % 1_000_000_000 < 150_000_000 {
            h.send(now, Event::Tick);
            peak = peak.max(h.policy.min_reservation());
        }
    }
    assert!(peak >= 1, "K rose during the burst (peak {peak})");
    // quiet: nothing outstanding for a minute of ticks
    for (task, gpu) in std::mem::take(&mut running) {
        h.finish(now, task, gpu, ms(150));
    }
    for s in 0..60 {
        h.send(now + Nanos::from_secs(s), Event::Tick);
    }
    assert_eq!(h.policy.min_reservation(), 0, "K drains to 0 when the node is quiet");
}

#[test]
fn unknown_tenants_and_departed_tenants_end_tasks_with_reasons() {
    let mut h = Harness::new(flexy(0, None), 1);
    let (t, a) = h.submit(ms(0), 9, UF_KERNEL);
    assert!(a.contains(&Action::EndTask { task: t, reason: TaskEndReason::UnknownTenant }));
    assert!(dispatches(&a).is_empty());
    h.tenant(ms(0), 1, ServiceClass::Batch);
    let (running, _) = h.submit(ms(0), 1, BATCH_KERNEL);
    let (queued, _) = h.submit(ms(0), 1, BATCH_KERNEL);
    let a = h.send(ms(1), Event::TenantLeft { tenant: TenantId(1) });
    assert_eq!(a.iter().filter(|x| matches!(x, Action::EndTask { .. })).count(), 1);
    assert!(a.contains(&Action::EndTask { task: queued, reason: TaskEndReason::TenantLeft }));
    // the running task finishes normally and nothing else is dispatched
    let a = h.finish(ms(5), running, 0, ms(5));
    assert!(dispatches(&a).is_empty());
}

#[test]
fn client_cancellation_ends_a_queued_task_only() {
    let mut h = Harness::new(PolicyConfig::Priority { reserve: 0, reset: None }, 1);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    let (running, _) = h.submit(ms(0), 1, BATCH_KERNEL);
    let (queued, _) = h.submit(ms(0), 1, BATCH_KERNEL);
    let a = h.send(ms(1), Event::TaskCancelRequested { task: running });
    assert!(
        a.iter().all(|x| !matches!(x, Action::EndTask { .. })),
        "a running task is not cancelled"
    );
    let a = h.send(ms(1), Event::TaskCancelRequested { task: queued });
    assert!(
        a.contains(&Action::EndTask { task: queued, reason: TaskEndReason::CancelledByClient })
    );
}

#[test]
fn memory_is_never_granted_beyond_capacity_and_over_free_is_harmless() {
    use tessera_core::MemRequestId;
    use tessera_core::event::MemoryWait;
    let mut h = Harness::new(PolicyConfig::RoundRobin, 1);
    h.tenant(ms(0), 1, ServiceClass::Batch);
    let ask = |id, gib| Event::MemoryRequested {
        request: MemRequestId(id),
        tenant: TenantId(1),
        gpu: GpuId(0),
        bytes: Bytes::gib(gib),
        wait: MemoryWait::NoWait,
    };
    assert_eq!(h.send(ms(0), ask(1, 3)), vec![Action::GrantMemory { request: MemRequestId(1) }]);
    assert!(matches!(h.send(ms(0), ask(2, 2))[0], Action::DenyMemory { .. }));
    assert!(matches!(h.send(ms(0), ask(3, 5))[0], Action::DenyMemory { .. }));
    h.send(
        ms(0),
        Event::MemoryFreed { tenant: TenantId(1), gpu: GpuId(0), bytes: Bytes::gib(100) },
    );
    assert_eq!(h.send(ms(0), ask(4, 4)), vec![Action::GrantMemory { request: MemRequestId(4) }]);
    let out_of_range = Event::MemoryRequested {
        request: MemRequestId(5),
        tenant: TenantId(1),
        gpu: GpuId(7),
        bytes: Bytes(1),
        wait: MemoryWait::NoWait,
    };
    assert!(matches!(h.send(ms(0), out_of_range)[0], Action::DenyMemory { .. }));
}

#[test]
fn invalid_configurations_are_typed_errors() {
    let err = |c: PolicyConfig, n| c.build(&gpus(n)).unwrap_err();
    assert_eq!(err(flexy(4, None), 4), PolicyError::ReservationTooLarge { k: 4, gpus: 4 });
    assert_eq!(
        err(PolicyConfig::Priority { reserve: 1, reset: None }, 1),
        PolicyError::ReservationTooLarge { k: 1, gpus: 1 }
    );
    assert_eq!(err(PolicyConfig::RoundRobin, 0), PolicyError::NoGpus);
    assert_eq!(
        err(
            PolicyConfig::Flexy {
                reserve: 0,
                reset: None,
                sla: Nanos::ZERO,
                history: 1,
                order: Default::default()
            },
            2
        ),
        PolicyError::ZeroSla
    );
}

/// A tenant that leaves while its move is under way has no memory anywhere: the move's
/// completion, arriving after, must not home it again. (Under the node policy such a
/// ghost let a GPU be over-committed: 7 tenants lost out of memory in `sim node`'s
/// held-out window at day 142.)
#[test]
fn a_move_completing_after_its_tenant_left_homes_nobody() {
    use tessera_core::policies::dcuda::{Dcuda, DcudaParams};
    use tessera_core::policies::flexy::FlexyParams;
    use tessera_core::policies::node::NodeParams;
    let flexy =
        FlexyParams { reserve: 1, reset: None, sla: SLA, history: 10, order: Default::default() };
    let policies: Vec<Box<dyn Policy>> = vec![
        PolicyConfig::Node { params: NodeParams::new(flexy) }.build(&gpus(4)).unwrap(),
        Box::new(Dcuda::new(&gpus(4), DcudaParams::PAPER)),
    ];
    for mut p in policies {
        let mut out = Vec::new();
        let t = TenantId(7);
        let spec = TenantSpec { memory: Bytes::gib(1), ..TenantSpec::new(t, ServiceClass::Batch) };
        p.on_event(ms(0), &Event::TenantRegistered(spec), &mut out);
        let home = p.home(t).expect("a batch tenant is homed at registration");
        let other = GpuId((home.0 + 1) % 4);
        p.on_event(ms(10), &Event::TenantLeft { tenant: t }, &mut out);
        assert_eq!(p.home(t), None, "{}: left", p.label());
        p.on_event(ms(20), &Event::MigrationDone { tenant: t, to: other }, &mut out);
        assert_eq!(p.home(t), None, "{}: homed again after it left", p.label());
    }
}

/// A driver that repeats a tenant's registration (the board keeps the first and ignores
/// the repeat) must not leave the node policy counting the tenant's memory twice: after
/// the tenant leaves, the node has room again for two newcomers that fill both GPUs.
/// Before, the repeat homed it a second time on the other GPU, and its first GPU kept
/// its memory for good.
#[test]
fn a_repeated_registration_homes_a_tenant_once() {
    use tessera_core::policies::flexy::FlexyParams;
    use tessera_core::policies::node::NodeParams;
    let flexy =
        FlexyParams { reserve: 1, reset: None, sla: SLA, history: 10, order: Default::default() };
    // two GPUs of 4 GiB, the pool's reservation lent to batch tenants (no service)
    let mut p = PolicyConfig::Node { params: NodeParams::new(flexy) }.build(&gpus(2)).unwrap();
    let mut out = Vec::new();
    let spec =
        |t, gib| TenantSpec { memory: Bytes::gib(gib), ..TenantSpec::new(t, ServiceClass::Batch) };
    let a = TenantId(1);
    p.on_event(ms(0), &Event::TenantRegistered(spec(a, 2)), &mut out);
    let home = p.home(a).expect("homed");
    p.on_event(ms(1), &Event::TenantRegistered(spec(a, 2)), &mut out);
    assert_eq!(p.home(a), Some(home), "a repeated registration moved the tenant");
    p.on_event(ms(2), &Event::TenantLeft { tenant: a }, &mut out);
    assert_eq!(p.home(a), None);
    for (i, t) in [TenantId(2), TenantId(3)].into_iter().enumerate() {
        p.on_event(ms(3 + i as u64), &Event::TenantRegistered(spec(t, 4)), &mut out);
        assert!(p.home(t).is_some(), "{t}: no room, the leaver's memory still counted");
    }
}

/// DCUDA, likewise: a repeated registration leaves the tenant where it lives (before,
/// it was placed anew, its home moved without a migration).
#[test]
fn a_repeated_registration_leaves_a_dcuda_tenant_where_it_lives() {
    use tessera_core::policies::dcuda::{Dcuda, DcudaParams};
    let mut p = Dcuda::new(&gpus(4), DcudaParams::PAPER);
    let mut out = Vec::new();
    let t = TenantId(1);
    let spec = TenantSpec { memory: Bytes::gib(1), ..TenantSpec::new(t, ServiceClass::Batch) };
    p.on_event(ms(0), &Event::TenantRegistered(spec.clone()), &mut out);
    let home = Policy::home(&p, t).expect("homed");
    for i in 1..4 {
        p.on_event(ms(i), &Event::TenantRegistered(spec.clone()), &mut out);
        assert_eq!(Policy::home(&p, t), Some(home), "moved by repeat {i}");
    }
}

/// Every policy, a tenant registered again while its task runs: the repeat changes
/// nothing (the board keeps the first registration), so the task's end is heard and
/// the tenant's next task runs, with every debug check of the policies' indices
/// holding. Before, fair queuing forgot the running quantum (and Credit the running
/// account) of a repeated tenant.
#[test]
fn a_repeated_registration_while_a_task_runs_changes_nothing() {
    use tessera_core::policies::flexy::FlexyParams;
    use tessera_core::policies::memsafe::NotificationPolicy;
    use tessera_core::policies::node::NodeParams;
    let params =
        FlexyParams { reserve: 1, reset: None, sla: SLA, history: 10, order: Default::default() };
    let configs = [
        PolicyConfig::RoundRobin,
        PolicyConfig::Priority { reserve: 1, reset: None },
        flexy(1, None),
        PolicyConfig::MemSafe { notification: NotificationPolicy::Fifo },
        PolicyConfig::LeastLoaded { per_gpu: 1 },
        PolicyConfig::Credit,
        PolicyConfig::Strict,
        PolicyConfig::Fair { spin: ms(2) },
        PolicyConfig::Node { params: NodeParams::new(params) },
    ];
    for cfg in configs {
        let label = cfg.label();
        let mut h = Harness::new(cfg, 2);
        h.tenant(ms(0), 1, ServiceClass::Batch);
        let (a, out) = h.submit(ms(1), 1, 0);
        let ran = dispatches(&out);
        assert_eq!(ran.len(), 1, "{label}: the first task runs");
        h.tenant(ms(2), 1, ServiceClass::Batch);
        h.finish(ms(3), a, ran[0].1, ms(2));
        let (b, out) = h.submit(ms(4), 1, 0);
        assert_eq!(dispatches(&out).first().map(|d| d.0), Some(b), "{label}: the next task runs");
    }
}

/// Credit runs one quantum per tenant at a time: a repeated registration while the
/// tenant's quantum runs does not let its next task start beside it. Before, the
/// repeat replaced the account and forgot the running quantum, and the next task took
/// the second GPU at once.
#[test]
fn a_repeated_registration_does_not_give_a_credit_tenant_a_second_quantum() {
    for cfg in [PolicyConfig::Credit, PolicyConfig::Strict, PolicyConfig::Fair { spin: ms(2) }] {
        let label = cfg.label();
        let mut h = Harness::new(cfg, 2);
        h.tenant(ms(0), 1, ServiceClass::Batch);
        let (_, out) = h.submit(ms(1), 1, 0);
        assert_eq!(dispatches(&out).len(), 1, "{label}");
        h.tenant(ms(2), 1, ServiceClass::Batch);
        let (_, out) = h.submit(ms(3), 1, 0);
        assert_eq!(dispatches(&out), [], "{label}: a second quantum beside the first");
    }
}

/// The node policy on `n` GPUs with no user-facing pool reserved (every GPU lent to
/// batch tenants), for the tests that read its report.
fn node_without_pool(n: usize) -> tessera_core::policies::node::NodePolicy {
    use tessera_core::policies::flexy::FlexyParams;
    use tessera_core::policies::node::{NodeParams, NodePolicy};
    let flexy =
        FlexyParams { reserve: 0, reset: None, sla: SLA, history: 10, order: Default::default() };
    NodePolicy::new(&gpus(n), NodeParams::new(flexy))
}

/// Deliver `e` at `at` ms; the actions answered.
fn send_to(p: &mut impl Policy, at: u64, e: Event) -> Vec<Action> {
    let mut out = Vec::new();
    p.on_event(ms(at), &e, &mut out);
    out
}

/// A batch tenant declaring 1 GiB.
fn batch_gib(t: u64) -> TenantSpec {
    TenantSpec { memory: Bytes::gib(1), ..TenantSpec::new(TenantId(t), ServiceClass::Batch) }
}

/// Task `id` of `tenant`, of `kernel`.
fn task_of(id: u64, tenant: u64, kernel: u32) -> TaskSpec {
    TaskSpec {
        launch: None,
        batch: 1,
        id: TaskId(id),
        tenant: TenantId(tenant),
        kernel,
        memory: Bytes(0),
    }
}

/// The node policy, a batch tenant waiting behind another whose queued task is
/// cancelled: it waits no more from that moment, and its demand at the next sample
/// is learnt from the rest of the interval (it ran nothing: 0). Before, its hold was
/// left as it was until the next sample's walk of every home, so it counted as held
/// for the whole interval and kept its last demand (4/9, from the first interval: the
/// GPU's load read 1.44).
#[test]
fn a_cancelled_wait_is_no_longer_held() {
    use tessera_core::policies::node::NodePolicy;
    let mut p = node_without_pool(1);
    let send = |p: &mut NodePolicy, at, e| dispatches(&send_to(p, at, e));
    let task = |id, tenant| Event::TaskSubmitted(task_of(id, tenant, BATCH_KERNEL));
    let done = |id: u64, ran: u64| Event::TaskFinished {
        task: TaskId(id),
        placement: Placement::whole(GpuId(0)),
        ran_for: ms(ran),
        measured: true,
        result: Ok(()),
    };
    let (a, b) = (1, 2);
    for t in [a, b] {
        send(&mut p, 0, Event::TenantRegistered(batch_gib(t)));
    }
    // the first interval: b runs 40 ms of 100
    assert_eq!(send(&mut p, 5, task(1, b)), vec![(TaskId(1), 0)]);
    send(&mut p, 45, done(1, 40));
    // a's long task, then b's, which waits behind it
    assert_eq!(send(&mut p, 50, task(2, a)), vec![(TaskId(2), 0)]);
    assert_eq!(send(&mut p, 90, task(3, b)), vec![]);
    // the first sample: b's demand 40/90 (held for the last 10 ms)
    send(&mut p, 100, Event::Tick);
    let load_first = p.report().load[0];
    send(&mut p, 150, Event::TaskCancelRequested { task: TaskId(3) });
    // the second sample: a ran the whole interval (1), b ran nothing and waited for
    // half of it
    send(&mut p, 200, Event::Tick);
    let load = p.report().load[0];
    assert!(load_first > 0.0, "the first sample learnt nothing: {load_first}");
    assert!(
        (load - 1.0).abs() < 1e-9,
        "the GPU's load {load}: b's demand should be 0 (it ran nothing and waited half \
         the interval), not its last one (4/9, the whole interval counted as held)"
    );
}

/// The node policy homes a registering tenant where the batch load is least as the
/// last sample measured it, also when the tenant before it registered before that
/// sample. Here tenant a runs a long task on GPU 0, c idles on GPU 1, and b registers
/// after the sample that learnt a's demand (GPU 0 loaded, GPU 1 not): b goes to GPU 1.
/// (A load kept from one placement to the next, tried for issue 55 and not kept,
/// failed this when a sample did not drop it: b went to GPU 0, beside the busy one.)
#[test]
fn a_newcomer_is_homed_by_the_load_the_last_sample_measured() {
    let mut p = node_without_pool(2);
    let (a, b, c) = (1, 2, 3);
    send_to(&mut p, 0, Event::TenantRegistered(batch_gib(a)));
    assert_eq!(p.home(TenantId(a)), Some(GpuId(0)));
    let long = Event::TaskSubmitted(task_of(1, a, BATCH_KERNEL));
    assert_eq!(dispatches(&send_to(&mut p, 1, long)), vec![(TaskId(1), 0)]);
    send_to(&mut p, 2, Event::TenantRegistered(batch_gib(c)));
    assert_eq!(p.home(TenantId(c)), Some(GpuId(1)));
    // the first sample: a ran 99 ms of 100
    send_to(&mut p, 100, Event::Tick);
    send_to(&mut p, 101, Event::TenantRegistered(batch_gib(b)));
    assert_eq!(p.home(TenantId(b)), Some(GpuId(1)), "homed beside the busy tenant");
}

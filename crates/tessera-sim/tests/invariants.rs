//! Property tests: under random workloads, every policy keeps the core's invariants.
//! The engine checks them on every action (a GPU runs one task at a time, a task is
//! dispatched at most once at a time, pools partition the GPUs, a task ends once, no
//! task is lost); the last tests show that those checks do catch a broken policy.

use proptest::prelude::*;
use tessera_core::action::TaskEndReason;
use tessera_core::policies::flexy::PoolOrder;
use tessera_core::policies::memsafe::NotificationPolicy;
use tessera_core::policy::PidGains;
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Placement, Policy, PolicyConfig, ServiceClass,
    TenantId, TenantSpec,
};
use tessera_sim::engine::{SimError, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Kernel, Submission, Workload};

const SLA: Nanos = Nanos::from_millis(200);

fn job_strategy() -> impl Strategy<Value = (u64, bool, u32, Vec<u64>, usize, bool)> {
    (
        0u64..5_000,
        any::<bool>(),
        0u32..4,
        prop::collection::vec(1u64..600, 0..8),
        1usize..6,
        any::<bool>(),
    )
}

fn policy_strategy(gpus: usize) -> impl Strategy<Value = PolicyConfig> {
    let k = 0..gpus;
    (0usize..8, k, 0u64..2_000, 1usize..12).prop_map(|(which, k, reset_ms, history)| {
        let reset = Some(Nanos::from_millis(reset_ms));
        // both of Flexy's orders (the index is checked against a full sort in debug)
        let order = if reset_ms % 2 == 0 { PoolOrder::Packing } else { PoolOrder::Completion };
        match which {
            0 => PolicyConfig::RoundRobin,
            1 => PolicyConfig::Priority { reserve: k, reset: None },
            2 => PolicyConfig::Priority { reserve: 0, reset },
            3 => PolicyConfig::Flexy { reserve: k, reset: None, sla: SLA, history, order },
            4 => PolicyConfig::Flexy { reserve: 0, reset, sla: SLA, history, order },
            5 => PolicyConfig::FlexyPid { sla: SLA, history, gains: PidGains::default() },
            6 => PolicyConfig::MemSafe { notification: NotificationPolicy::ALL[history % 4] },
            // one task per GPU: the exclusive engine must accept it
            _ => PolicyConfig::LeastLoaded { per_gpu: 1 },
        }
    })
}

fn workload(jobs: Vec<(u64, bool, u32, Vec<u64>, usize, bool)>) -> Workload {
    let kernels = (0..4)
        .map(|k| Kernel {
            name: format!("k{k}"),
            mean: Nanos::from_millis(50 * (k + 1)),
            launch: None,
            registers_per_thread: 0,
            cpu_per_launch: Nanos::ZERO,
            host_per_task: Nanos::ZERO,
        })
        .collect();
    let mut jobs: Vec<Job> = jobs
        .into_iter()
        .enumerate()
        .map(|(i, (arrival, uf, kernel, tasks, window, burst))| Job {
            arrival: Nanos::from_millis(arrival),
            tenant: TenantSpec::new(
                TenantId(i as u64),
                if uf { ServiceClass::UserFacing { sla: SLA } } else { ServiceClass::Batch },
            ),
            kernel,
            tasks: tasks.into_iter().map(Nanos::from_millis).collect(),
            window,
            submission: if burst { Submission::Burst } else { Submission::Window },
            arrivals: Vec::new(),
            background: false,
        })
        .collect();
    jobs.sort_by_key(|j| j.arrival);
    Workload { kernels, jobs }
}

fn options(gpus: usize, reset_ms: u64) -> SimOptions {
    SimOptions {
        gpus: GpuSpec::uniform(gpus, Bytes::gib(4)),
        perf: PerfModel { reset_latency: Nanos::from_millis(reset_ms), ..PerfModel::default() },
        measure_gpus: false,
        sla_window: None,
        keep_latencies: false,
        event_budget: 10_000_000,
        sharing: tessera_sim::engine::Sharing::Exclusive,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_keeps_the_invariants(
        (gpus, policy) in (1usize..5).prop_flat_map(|g| (Just(g), policy_strategy(g))),
        jobs in prop::collection::vec(job_strategy(), 0..10),
        reset_ms in 0u64..1500,
    ) {
        let w = workload(jobs);
        let opts = options(gpus, reset_ms);
        let built = policy.build(&opts.gpus).expect("strategy builds valid configs");
        let m = Simulation::new(&w, built, opts).run();
        let m = match m {
            Ok(m) => m,
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        // every submitted task ended exactly once: completed or ended with a reason
        prop_assert_eq!(m.uf_tasks + m.batch_done + m.not_completed, w.task_count());
        prop_assert_eq!(m.not_completed, 0, "no task of a live tenant is cancelled");
        prop_assert!(m.utilization <= 1.0 + 1e-9);
        prop_assert!(m.mean_user_pool <= gpus as f64 + 1e-9);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Flexy on a node large enough for the board's index of busy GPUs by expected
    /// freeing (more than `board::FREE_ORDER_ABOVE` GPUs; a smaller node sorts them):
    /// with jobs enough to keep most GPUs busy, every event's pool is checked against
    /// a full sort of the node in debug builds, and the invariants hold.
    #[test]
    fn flexy_on_a_large_node_keeps_the_invariants(
        gpus in (tessera_core::board::FREE_ORDER_ABOVE + 1)..40,
        jobs in prop::collection::vec(job_strategy(), 20..60),
        reset_ms in 0u64..1500,
        reserve in 0usize..4,
        history in 1usize..12,
    ) {
        let w = workload(jobs);
        let opts = options(gpus, reset_ms);
        let order = if reset_ms % 2 == 0 { PoolOrder::Packing } else { PoolOrder::Completion };
        let reset = (reset_ms % 3 == 0).then(|| Nanos::from_millis(reset_ms));
        let policy = PolicyConfig::Flexy { reserve, reset, sla: SLA, history, order };
        let built = policy.build(&opts.gpus).expect("a valid Flexy");
        let m = Simulation::new(&w, built, opts).run().map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(m.uf_tasks + m.batch_done + m.not_completed, w.task_count());
        prop_assert_eq!(m.not_completed, 0);
    }
}

fn one_job_workload(tasks: usize, window: usize) -> Workload {
    workload(vec![(0, false, 0, vec![100; tasks], window, false)])
}

/// Dispatches every submitted task to GPU 0, busy or not.
#[derive(Debug)]
struct EverythingOnGpu0;
impl Policy for EverythingOnGpu0 {
    fn label(&self) -> String {
        "broken".into()
    }
    fn on_event(&mut self, _: Nanos, e: &Event, out: &mut Vec<Action>) {
        if let Event::TaskSubmitted(t) = e {
            out.push(Action::Dispatch { task: t.id, placement: Placement::whole(GpuId(0)) });
        }
    }
}

/// Ignores every task.
#[derive(Debug)]
struct Forgetful;
impl Policy for Forgetful {
    fn label(&self) -> String {
        "forgetful".into()
    }
    fn on_event(&mut self, _: Nanos, _: &Event, _: &mut Vec<Action>) {}
}

/// Announces a user-facing pool that names a GPU twice.
#[derive(Debug)]
struct BadPools;
impl Policy for BadPools {
    fn label(&self) -> String {
        "bad-pools".into()
    }
    fn on_event(&mut self, _: Nanos, _: &Event, out: &mut Vec<Action>) {
        out.push(Action::SetPools { user_facing: vec![GpuId(0), GpuId(0)] });
    }
}

/// Ends every task twice.
#[derive(Debug)]
struct EndsTwice;
impl Policy for EndsTwice {
    fn label(&self) -> String {
        "ends-twice".into()
    }
    fn on_event(&mut self, _: Nanos, e: &Event, out: &mut Vec<Action>) {
        if let Event::TaskSubmitted(t) = e {
            for _ in 0..2 {
                out.push(Action::EndTask { task: t.id, reason: TaskEndReason::Shutdown });
            }
        }
    }
}

/// Grants memory for each task (which this engine does not model: the phase engine
/// admits memory), and ends the task with a reason once the refusal arrives.
#[derive(Debug, Default)]
struct WantsMemory {
    pending: Vec<tessera_core::TaskId>,
}
impl Policy for WantsMemory {
    fn label(&self) -> String {
        "wants-memory".into()
    }
    fn on_event(&mut self, _: Nanos, e: &Event, out: &mut Vec<Action>) {
        match e {
            Event::TaskSubmitted(t) => {
                self.pending.push(t.id);
                out.push(Action::GrantMemory { request: tessera_core::MemRequestId(t.id.0) });
            }
            Event::ActionRefused { action, .. }
                if matches!(**action, Action::GrantMemory { .. }) =>
            {
                for task in self.pending.drain(..) {
                    out.push(Action::EndTask { task, reason: TaskEndReason::Shutdown });
                }
            }
            _ => {}
        }
    }
}

fn run_with(
    policy: Box<dyn Policy>,
    w: &Workload,
    gpus: usize,
) -> Result<tessera_sim::RunMetrics, SimError> {
    Simulation::new(w, policy, options(gpus, 1000)).run()
}

#[test]
fn the_engine_catches_two_tasks_on_one_gpu() {
    let err = run_with(Box::new(EverythingOnGpu0), &one_job_workload(3, 2), 2).unwrap_err();
    assert!(matches!(err, SimError::PolicyViolation { .. }), "{err}");
}

#[test]
fn the_engine_catches_lost_tasks() {
    let err = run_with(Box::new(Forgetful), &one_job_workload(3, 2), 1).unwrap_err();
    assert_eq!(err, SimError::Stalled { policy: "forgetful".into(), unfinished: 3 });
}

#[test]
fn the_engine_catches_a_pool_that_is_not_a_set_of_its_gpus() {
    let err = run_with(Box::new(BadPools), &one_job_workload(1, 1), 2).unwrap_err();
    assert!(matches!(err, SimError::PolicyViolation { .. }), "{err}");
}

#[test]
fn the_engine_catches_a_task_ended_twice() {
    let err = run_with(Box::new(EndsTwice), &one_job_workload(1, 1), 1).unwrap_err();
    assert!(
        matches!(err, SimError::PolicyViolation { ref what, .. } if what.contains("twice")),
        "{err}"
    );
}

#[test]
fn a_single_gpu_runs_tasks_back_to_back() {
    // 3 tasks of 100 ms, one GPU, window 3: busy 300 ms of a 300 ms span
    let w = one_job_workload(3, 3);
    let m = run_with(
        PolicyConfig::RoundRobin.build(&GpuSpec::uniform(1, Bytes::gib(1))).unwrap(),
        &w,
        1,
    )
    .unwrap();
    assert_eq!(m.batch_done, 3);
    assert!((m.utilization - 1.0).abs() < 1e-9);
    assert!((m.makespan_s - 0.3).abs() < 1e-9);
    assert!((m.batch_max_wait_s - 0.2).abs() < 1e-9);
}

/// An action the engine does not model is refused with an event the policy hears,
/// not dropped and not a crash: here every task ends (cancelled) on the refusal.
#[test]
fn an_unsupported_action_is_refused_to_the_policy() {
    let m = run_with(Box::new(WantsMemory::default()), &one_job_workload(3, 3), 1).unwrap();
    assert_eq!(m.not_completed, 3, "the policy heard each refusal and ended its task");
}

/// Under processor sharing, tasks dispatched to a busy GPU co-run and their finishes
/// move as others start and end: three tasks of 100 ms started together on one GPU,
/// each asking for the whole of it, all end at 300 ms; a fourth arriving later is
/// slowed only while it overlaps.
#[test]
fn shared_gpus_co_run_tasks_as_the_model_says() {
    let shared = |w: &Workload| {
        let opts =
            SimOptions { sharing: tessera_sim::engine::Sharing::Processor, ..options(1, 1000) };
        Simulation::new(w, Box::new(EverythingOnGpu0), opts).run().unwrap()
    };
    let m = shared(&one_job_workload(3, 3));
    assert_eq!(m.not_completed, 0);
    assert!((m.makespan_s - 0.3).abs() < 1e-9, "{}", m.makespan_s);
    assert!((m.utilization - 1.0).abs() < 1e-9, "busy all along: {}", m.utilization);
    // a second job's 100 ms task arrives at 250 ms and shares the GPU from then on;
    // work is conserved: 400 ms of work on one GPU that is never idle ends at 400 ms
    let w =
        workload(vec![(0, false, 0, vec![100; 3], 3, false), (250, false, 0, vec![100], 1, false)]);
    let m = shared(&w);
    assert_eq!(m.not_completed, 0);
    assert!((m.makespan_s - 0.4).abs() < 1e-9, "{}", m.makespan_s);
    // and the same dispatches on an exclusive GPU are a policy violation
    let err = run_with(Box::new(EverythingOnGpu0), &one_job_workload(3, 3), 1).unwrap_err();
    assert!(matches!(err, SimError::PolicyViolation { .. }), "{err}");
}

/// NVSMI's utilization counts kernel time only (Flexy §III, §IV-B): a task's host part
/// (copies, driver calls) holds the GPU but is not busy time. Two 100 ms tasks with a
/// 10 ms host part each on one GPU: 200 ms on the GPU, 180 ms busy.
#[test]
fn nvsmi_utilization_leaves_out_each_tasks_host_part() {
    let mut w = workload(vec![(0, false, 1, vec![100, 100], 1, false)]);
    let whole = Simulation::new(
        &w,
        PolicyConfig::RoundRobin.build(&options(1, 0).gpus).unwrap(),
        options(1, 0),
    )
    .run()
    .unwrap();
    assert_eq!(whole.utilization, 1.0);
    w.kernels[1].host_per_task = Nanos::from_millis(10);
    let m = Simulation::new(
        &w,
        PolicyConfig::RoundRobin.build(&options(1, 0).gpus).unwrap(),
        options(1, 0),
    )
    .run()
    .unwrap();
    assert_eq!(m.makespan_s, 0.2, "the host part still holds the GPU");
    assert!((m.utilization - 0.9).abs() < 1e-12, "{}", m.utilization);
    assert_eq!(m.killed_work_s, 0.0);
}

/// A background job (Flexy §III's ever-present batch work) submits only while other
/// jobs have tasks left: the run ends with the foreground, every task it submitted
/// ends, and the rest of its tasks are never submitted.
#[test]
fn a_background_job_stops_with_the_foreground() {
    let mut w = workload(vec![(0, true, 1, vec![100, 100], 1, false)]);
    let mut bg = w.jobs[0].clone();
    bg.tenant = TenantSpec::new(TenantId(1), ServiceClass::Batch);
    bg.kernel = 0;
    bg.tasks = vec![Nanos::from_millis(50); 1000];
    bg.background = true;
    w.jobs.insert(0, bg);
    for policy in [PolicyConfig::RoundRobin, PolicyConfig::Priority { reserve: 0, reset: None }] {
        let opts = options(2, 0);
        let m = Simulation::new(&w, policy.build(&opts.gpus).unwrap(), opts).run().unwrap();
        assert_eq!(m.uf_tasks, 2);
        assert!(m.makespan_s <= 0.25 + 1e-9, "{}", m.makespan_s);
        assert!((4..=6).contains(&m.batch_tasks), "{} background tasks submitted", m.batch_tasks);
        assert_eq!(m.batch_done, m.batch_tasks);
        assert_eq!(m.not_completed, 0);
    }
}

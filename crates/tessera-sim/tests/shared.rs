//! The engine on shared GPUs: co-location, migration, repartitioning and power states
//! carried out with their modelled costs, the invariants that guard them, and the
//! per-GPU measurements (two utilizations, energy).

use proptest::prelude::*;
use tessera_core::action::TaskEndReason;
use tessera_core::board::Board;
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, PartitionId, PerMille, Placement, Policy,
    PolicyConfig, ServiceClass, TenantId, TenantSpec,
};
use tessera_gpu::migration::MigrationCost;
use tessera_gpu::power::PowerModel;
use tessera_sim::RunMetrics;
use tessera_sim::engine::{SimError, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Kernel, Submission, Workload};

const MS: u64 = 1_000_000;

/// Jobs of (arrival ms, task works ms, window, declared memory MiB).
fn workload(jobs: &[(u64, Vec<u64>, usize, u64)]) -> Workload {
    let jobs = jobs
        .iter()
        .enumerate()
        .map(|(i, (arrival, tasks, window, mib))| Job {
            arrival: Nanos::from_millis(*arrival),
            tenant: TenantSpec {
                memory: Bytes::mib(*mib),
                ..TenantSpec::new(TenantId(i as u64), ServiceClass::Batch)
            },
            kernel: 0,
            tasks: tasks.iter().map(|t| Nanos::from_millis(*t)).collect(),
            window: *window,
            submission: Submission::Window,
            arrivals: Vec::new(),
            background: false,
        })
        .collect();
    Workload {
        kernels: vec![Kernel {
            name: "k".into(),
            mean: Nanos::from_millis(10),
            launch: None,
            registers_per_thread: 0,
            cpu_per_launch: Nanos::ZERO,
            host_per_task: Nanos::ZERO,
        }],
        jobs,
    }
}

fn options(gpus: usize) -> SimOptions {
    SimOptions {
        gpus: GpuSpec::uniform(gpus, Bytes::gib(1)),
        perf: PerfModel {
            migration: MigrationCost { pause_ns: 20 * MS, bytes_per_s: 1e9 },
            power: PowerModel {
                idle_w: 10.0,
                active_step_w: 40.0,
                per_colocated_w: 5.0,
                off_w: 1.0,
            },
            repartition_latency: Nanos::from_millis(50),
            ..PerfModel::default()
        },
        keep_latencies: false,
        event_budget: 10_000_000,
        sharing: tessera_sim::engine::Sharing::Processor,
        measure_gpus: true,
        sla_window: None,
    }
}

fn run(w: &Workload, policy: Box<dyn Policy>, opts: SimOptions) -> Result<RunMetrics, SimError> {
    Simulation::new(w, policy, opts).run()
}

/// A scripted policy on the board: dispatches to GPU 0 (or its partitions), and does
/// one extra thing on a trigger.
#[derive(Debug)]
struct Scripted {
    board: Board,
    script: Script,
    done: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Script {
    /// Once the first task runs on GPU 0, migrate its tenant to GPU 1.
    MigrateFirst,
    /// Split GPU 0 into these shares first; dispatch into the partitions round-robin.
    Partition(Vec<u16>),
    /// Power GPU 1 down at once; run everything on GPU 0.
    PowerDownOther,
    /// Power GPU 1 down, then dispatch there anyway (a broken policy).
    DispatchToPoweredDown,
}

impl Scripted {
    fn new(gpus: usize, script: Script) -> Box<Scripted> {
        let specs = GpuSpec::uniform(gpus, Bytes::gib(1));
        Box::new(Scripted { board: Board::with_colocation(&specs, 8), script, done: false })
    }
}

impl Policy for Scripted {
    fn label(&self) -> String {
        format!("scripted {:?}", self.script)
    }

    fn on_event(&mut self, now: Nanos, event: &Event, out: &mut Vec<Action>) {
        self.board.observe(now, event, out);
        let gpu0 = GpuId(0);
        match self.script.clone() {
            Script::Partition(shares) => {
                if !self.done {
                    self.done = true;
                    let shares = shares.into_iter().map(PerMille).collect();
                    assert!(self.board.repartition(gpu0, shares, out));
                }
                let n = self.board.state(gpu0).partitions().len();
                for p in 0..n {
                    let at = Placement { gpu: gpu0, partition: Some(PartitionId(p as u32)) };
                    if let Some(t) = self.board.oldest_head(tessera_core::board::Classes::All) {
                        self.board.dispatch_at(now, at, t, out);
                    }
                }
                return;
            }
            Script::PowerDownOther | Script::DispatchToPoweredDown if !self.done => {
                self.done = true;
                assert!(self.board.set_powered(GpuId(1), false, out));
            }
            _ => {}
        }
        if self.script == Script::DispatchToPoweredDown {
            // bypass the board, as a broken policy would
            if let Event::TaskSubmitted(t) = event {
                out.push(Action::Dispatch { task: t.id, placement: Placement::whole(GpuId(1)) });
            }
            return;
        }
        while let Some(t) = self.board.oldest_head(tessera_core::board::Classes::All) {
            let before = out.len();
            self.board.dispatch(now, gpu0, t, out);
            if out.len() == before {
                break;
            }
        }
        if self.script == Script::MigrateFirst && !self.done {
            let running = self.board.state(gpu0).running().first().map(|r| r.spec.tenant);
            if let Some(tenant) = running {
                self.done = true;
                assert!(self.board.migrate(tenant, gpu0, GpuId(1), out));
            }
        }
    }
}

/// A migrating task stops for the pause plus its tenant's memory over the link, then
/// finishes its remaining work on the target: 100 ms of work, 64 MiB at 1 GB/s
/// (67.1 ms) plus a 20 ms pause ends at 187.1 ms, reported on GPU 1.
#[test]
fn a_migration_costs_its_pause_and_copy_and_loses_no_work() {
    let w = workload(&[(0, vec![100], 1, 64)]);
    let m = run(&w, Scripted::new(2, Script::MigrateFirst), options(2)).unwrap();
    let copy = (64u64 << 20) as f64 / 1e9 * 1e9;
    let expected = (100 * MS + 20 * MS) as f64 + copy.ceil();
    assert!((m.makespan_s * 1e9 - expected).abs() < 2.0, "{} vs {expected}", m.makespan_s * 1e9);
    let g = m.gpus.unwrap();
    assert_eq!((g.migrations, g.migrations_failed), (1, 0));
    // neither GPU was busy during the move: busy time is the work, split 0 / 100 ms
    let busy: f64 = g.busy.iter().sum::<f64>() * m.makespan_s;
    assert!((busy - 0.1).abs() < 1e-6, "busy {busy} s");
}

/// Tenant 0 on GPU 0, tenant 1 on GPU 1; once tenant 1 runs, tenant 0 is moved to
/// GPU 1.
#[derive(Debug)]
struct TwoGpus {
    board: Board,
    migrated: bool,
    failed: bool,
    /// The move must fail at once (no room).
    expect_failure: bool,
}

impl Policy for TwoGpus {
    fn label(&self) -> String {
        "two-gpus".into()
    }
    fn on_event(&mut self, now: Nanos, e: &Event, out: &mut Vec<Action>) {
        self.board.observe(now, e, out);
        if matches!(e, Event::MigrationFailed { .. }) {
            self.failed = true;
        }
        for (tenant, gpu) in [(TenantId(0), GpuId(0)), (TenantId(1), GpuId(1))] {
            self.board.dispatch(now, gpu, tenant, out);
        }
        if !self.migrated && self.board.state(GpuId(1)).running().len() == 1 {
            self.migrated = true;
            // the board has no memory book entries (nothing was requested), so it
            // lets the move through; the engine knows the declared memory
            assert!(self.board.migrate(TenantId(0), GpuId(0), GpuId(1), out));
        }
        if self.expect_failure && now > Nanos::ZERO {
            assert!(self.failed, "the policy heard the failure at once");
        }
    }
}

/// A migrated task keeps its demand: tenant 0's kernel (10% of a GPU) moves at 0 onto
/// GPU 1 beside tenant 1's (95%), arriving after the 20 ms pause; from then the two
/// demand 105% and both run at 1/1.05, so tenant 1's 100 ms task ends at
/// 20 + 80 × 1.05 = 104 ms. (The engine used to restart a migrated task at demand 1:
/// 195%, and 176 ms.)
#[test]
fn a_migrated_task_keeps_its_demand() {
    let mut w = workload(&[(0, vec![100], 1, 0), (0, vec![100], 1, 0)]);
    let with_demand = |d: u16| Kernel {
        launch: Some(tessera_core::LaunchInfo {
            grid_blocks: 1,
            threads_per_block: 1,
            demand: PerMille(d),
        }),
        ..w.kernels[0].clone()
    };
    w.kernels = vec![with_demand(100), with_demand(950)];
    w.jobs[1].kernel = 1;
    let specs = GpuSpec::uniform(2, Bytes::gib(1));
    let policy = Box::new(TwoGpus {
        board: Board::with_colocation(&specs, 4),
        migrated: false,
        failed: false,
        expect_failure: false,
    });
    let m = run(&w, policy, options(2)).unwrap();
    let g = m.gpus.unwrap();
    assert_eq!((g.migrations, g.migrations_failed), (1, 0));
    let end = g.job_end_s[1].unwrap() * 1e3;
    assert!((end - 104.0).abs() < 0.01, "tenant 1 ends at {end} ms");
}

/// A tenant whose declared memory does not fit on the target is not moved: the
/// policy hears MigrationFailed and the task finishes where it was, on time.
#[test]
fn a_migration_without_room_fails_and_the_tenant_stays() {
    // tenant 0 (700 MiB) runs on GPU 0, tenant 1 (300 MiB) on GPU 1, which has 900 MiB
    let w = workload(&[(0, vec![100], 1, 700), (0, vec![100], 1, 300)]);
    let specs = GpuSpec::uniform(2, Bytes::gib(1));
    let policy = Box::new(TwoGpus {
        board: Board::with_colocation(&specs, 4),
        migrated: false,
        failed: false,
        expect_failure: true,
    });
    let mut opts = options(2);
    opts.gpus[1].memory = Bytes::mib(900);
    let m = run(&w, policy, opts).unwrap();
    let g = m.gpus.unwrap();
    assert_eq!((g.migrations, g.migrations_failed), (0, 1));
    assert!((m.makespan_s - 0.1).abs() < 1e-9, "nobody was slowed: {}", m.makespan_s);
}

/// Partitions take the repartition latency to appear, run at their share of the GPU,
/// and report where each task ran: two 100 ms whole-GPU tasks in halves of GPU 0 run
/// at half speed, ending 50 ms (the repartition) + 200 ms after the start.
#[test]
fn partitions_run_at_their_share_after_the_repartition_latency() {
    let w = workload(&[(0, vec![100], 1, 0), (0, vec![100], 1, 0)]);
    let m = run(&w, Scripted::new(1, Script::Partition(vec![500, 500])), options(1)).unwrap();
    assert!((m.makespan_s - 0.25).abs() < 1e-9, "{}", m.makespan_s);
    let g = m.gpus.unwrap();
    assert_eq!(g.repartitions, 1);
    // NVSMI busy for 200 ms of 250; SM-weighted: two halves full for 200 ms
    assert!((g.busy[0] - 0.8).abs() < 1e-6, "{:?}", g.busy);
    assert!((g.sm_weighted[0] - 0.8).abs() < 1e-6, "{:?}", g.sm_weighted);
}

/// Shares above the whole GPU are a policy violation, caught by the engine even when
/// the board is bypassed.
#[test]
fn partitions_over_the_whole_gpu_are_caught() {
    #[derive(Debug)]
    struct Greedy;
    impl Policy for Greedy {
        fn label(&self) -> String {
            "greedy".into()
        }
        fn on_event(&mut self, _: Nanos, e: &Event, out: &mut Vec<Action>) {
            if let Event::TaskSubmitted(t) = e {
                out.push(Action::Repartition {
                    gpu: GpuId(0),
                    shares: vec![PerMille(600), PerMille(600)],
                });
                out.push(Action::EndTask { task: t.id, reason: TaskEndReason::Shutdown });
            }
        }
    }
    let w = workload(&[(0, vec![100], 1, 0)]);
    let err = run(&w, Box::new(Greedy), options(1)).unwrap_err();
    assert!(err.to_string().contains("sum to 1200"), "{err}");
}

/// A powered-down GPU draws its off power and takes no work; energy follows the
/// states: GPU 0 one task for 100 ms (10 + 40 W), GPU 1 off all along (1 W).
#[test]
fn power_states_set_energy_and_a_powered_down_gpu_takes_nothing() {
    let w = workload(&[(0, vec![100], 1, 0)]);
    let m = run(&w, Scripted::new(2, Script::PowerDownOther), options(2)).unwrap();
    let g = m.gpus.unwrap();
    assert_eq!(g.power_changes, 1);
    assert!((g.energy_j[0] - 50.0 * 0.1).abs() < 1e-9, "{:?}", g.energy_j);
    assert!((g.energy_j[1] - 1.0 * 0.1).abs() < 1e-9, "{:?}", g.energy_j);
    let err = run(&w, Scripted::new(2, Script::DispatchToPoweredDown), options(2)).unwrap_err();
    assert!(err.to_string().contains("powered-down"), "{err}");
}

/// With tasks that each demand the whole GPU the two utilizations agree, exclusive or
/// shared (they part only for tasks that occupy part of a GPU, which the workloads do
/// not declare yet), and the run's utilization is NVSMI's.
#[test]
fn the_two_utilizations_agree_for_whole_gpu_tasks() {
    let w = workload(&[(0, vec![100, 100], 1, 0), (50, vec![100], 1, 0)]);
    for sharing in
        [tessera_sim::engine::Sharing::Exclusive, tessera_sim::engine::Sharing::Processor]
    {
        let opts = SimOptions { sharing, ..options(2) };
        let gpus = opts.gpus.clone();
        let policy = PolicyConfig::LeastLoaded { per_gpu: 1 }.build(&gpus).unwrap();
        let m = run(&w, policy, opts).unwrap();
        let g = m.gpus.unwrap();
        for i in 0..2 {
            assert!((g.busy[i] - g.sm_weighted[i]).abs() < 1e-9, "{sharing:?}: {g:?}");
        }
        assert!((m.utilization - (g.busy[0] + g.busy[1]) / 2.0).abs() < 1e-9);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Random workloads on co-located GPUs (1-8 tasks per GPU, processor sharing):
    /// every task ends once, and work is conserved — with every task demanding the
    /// whole GPU, a GPU does one unit of work per unit of busy time, so the summed
    /// work equals the summed busy time (to a nanosecond per task).
    #[test]
    fn co_located_runs_conserve_work(
        gpus in 1usize..4,
        per_gpu in 1usize..9,
        jobs in prop::collection::vec((0u64..300, prop::collection::vec(1u64..200, 1..6), 1usize..5), 1..8),
    ) {
        let jobs: Vec<_> = jobs.into_iter().map(|(a, t, win)| (a, t, win, 0)).collect();
        let w = workload(&jobs);
        let opts = options(gpus);
        let policy = PolicyConfig::LeastLoaded { per_gpu }.build(&opts.gpus).unwrap();
        let m = run(&w, policy, opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(m.batch_done, w.task_count());
        let work_ns: u64 = w.jobs.iter().flat_map(|j| &j.tasks).map(|t| t.0).sum();
        let g = m.gpus.unwrap();
        let busy_ns: f64 = g.busy.iter().sum::<f64>() * m.makespan_s * 1e9;
        prop_assert!((busy_ns - work_ns as f64).abs() <= w.task_count() as f64 + 1.0,
            "busy {} ns, work {} ns", busy_ns, work_ns);
        for i in 0..gpus {
            prop_assert!(g.sm_weighted[i] <= g.busy[i] + 1e-9);
            prop_assert!(g.mean_running[i] <= per_gpu as f64 + 1e-9);
        }
    }
}

/// One workload, three ways of sharing: exclusive use (one task per GPU), MPS-style
/// processor sharing and time-sliced contexts (four per GPU). With tasks that each
/// want the whole GPU, processor sharing does the same work in the same time as
/// exclusive use; time slicing pays a context switch per turn, so it ends later by
/// about (slice + switch) / slice while contexts overlap — and never earlier.
#[test]
fn exclusive_mps_and_time_slicing_compare_on_one_workload() {
    let w = tessera_sim::workloads::colocated::generate(
        &tessera_sim::workloads::colocated::ColocatedParams {
            gpus: 2,
            per_gpu: 4,
            tasks_per_job: 50,
            mean: Nanos::from_millis(20),
            seed: 7,
        },
    );
    let run_as = |sharing, per_gpu| {
        let opts = SimOptions { sharing, ..options(2) };
        let policy = PolicyConfig::LeastLoaded { per_gpu }.build(&opts.gpus).unwrap();
        run(&w, policy, opts).unwrap()
    };
    use tessera_sim::engine::Sharing;
    let exclusive = run_as(Sharing::Exclusive, 1);
    let mps = run_as(Sharing::Processor, 4);
    let sliced = run_as(Sharing::TimeSliced { slice: 2 * MS, switch: MS / 5 }, 4);
    for m in [&exclusive, &mps, &sliced] {
        assert_eq!(m.batch_done, w.task_count());
    }
    // the same total work: GPU busy time is the same whichever way it is shared
    let busy = |m: &RunMetrics| m.gpus.as_ref().unwrap().busy.iter().sum::<f64>() * m.makespan_s;
    assert!((busy(&exclusive) - busy(&mps)).abs() < 1e-6, "{} {}", busy(&exclusive), busy(&mps));
    let ratio = sliced.makespan_s / mps.makespan_s;
    assert!(ratio > 1.0 && ratio <= 1.1 + 1e-9, "time slicing / MPS makespan {ratio}");
    assert!(ratio > 1.05, "switches cost about 10% while contexts overlap: {ratio}");
}

/// Requests of one tenant dispatched as one batched execution: it counts once against
/// the placement (an exclusive GPU takes it), costs the sum of its requests' work
/// without a latency profile, and every request completes with it.
#[test]
fn a_batch_runs_as_one_execution_and_all_its_requests_complete_together() {
    #[derive(Debug)]
    struct Batcher {
        board: Board,
    }
    impl Policy for Batcher {
        fn label(&self) -> String {
            "batcher".into()
        }
        fn on_event(&mut self, now: Nanos, e: &Event, out: &mut Vec<Action>) {
            self.board.observe(now, e, out);
            // wait until all four requests are queued, then batch them
            if self.board.queued(tessera_core::board::Classes::All) == 4 {
                let n =
                    self.board.dispatch_batch(now, Placement::whole(GpuId(0)), TenantId(0), 8, out);
                assert_eq!(n, 4);
            }
        }
    }
    let w = workload(&[(0, vec![10, 20, 30, 40], 4, 0)]);
    let specs = GpuSpec::uniform(1, Bytes::gib(1));
    let opts = SimOptions { sharing: tessera_sim::engine::Sharing::Exclusive, ..options(1) };
    let m = run(&w, Box::new(Batcher { board: Board::new(&specs) }), opts).unwrap();
    assert_eq!(m.batch_done, 4);
    assert!((m.makespan_s - 0.1).abs() < 1e-9, "{}", m.makespan_s);
    let g = m.gpus.unwrap();
    assert!((g.busy[0] - 1.0).abs() < 1e-9);
    assert!((g.mean_running[0] - 1.0).abs() < 1e-9, "one execution: {:?}", g.mean_running);
}

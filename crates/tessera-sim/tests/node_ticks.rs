//! The composed node policy's quiet ticks (issue 55): the engine passes over every tick
//! before the policy's `quiet_until`, so each such tick must be one that changes
//! nothing and asks for nothing. Checked two ways: every tick delivered, and each one
//! the policy called quiet leaves its whole state (its `Debug` form) and the actions as
//! they were; and the run with ticks passed over is the run with every tick delivered,
//! to the last latency. On three workloads: the bench's co-location workload; a node
//! with a service in bursts, a Slurm job's two members, CPU phases that let queues run
//! dry past the spin budget and tenants whose memory makes the node move them (both
//! pool orders, and F-Reset: a 100 ms reset, longer than the tasks, never fires; a 5 ms
//! one kills them); and a service alone under Algorithm 1's order as printed, where a
//! busy pool GPU gives way to an idle one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_core::policies::flexy::{FlexyParams, PoolOrder};
use tessera_core::policies::node::{NodeParams, NodePolicy};
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Policy, ServiceClass, TenantId, TenantSpec,
};
use tessera_sim::RunMetrics;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Kernel, Submission, Workload};
use tessera_sim::workloads::colocated::{ColocatedParams, generate};

const SLA: Nanos = Nanos(100_000_000);

/// The node policy, either with its quiet ticks passed over (`check: false`: it tells
/// the engine its `quiet_until`) or with every tick delivered and each one it called
/// quiet checked to change nothing (`check: true`).
#[derive(Debug)]
struct Ticks {
    inner: NodePolicy,
    check: bool,
    /// The policy's `quiet_until` after the last event delivered.
    quiet: Nanos,
    delivered: Arc<AtomicU64>,
    checked: Arc<AtomicU64>,
}

impl Policy for Ticks {
    fn label(&self) -> String {
        self.inner.label()
    }
    fn tick_interval(&self) -> Option<Nanos> {
        self.inner.tick_interval()
    }
    fn quiet_until(&self) -> Nanos {
        if self.check { Nanos::ZERO } else { self.inner.quiet_until() }
    }
    fn min_reservation(&self) -> usize {
        self.inner.min_reservation()
    }
    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.inner.home(tenant)
    }
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        let tick = matches!(event, Event::Tick);
        if tick {
            self.delivered.fetch_add(1, Ordering::Relaxed);
        }
        if self.check && tick && now < self.quiet {
            let before = format!("{:?}", self.inner);
            let asked = actions.len();
            self.inner.on_event(now, event, actions);
            assert_eq!(
                &actions[asked..],
                &[] as &[Action],
                "a tick at {now:?} before its quiet_until {:?} asked for something",
                self.quiet
            );
            let after = format!("{:?}", self.inner);
            if before != after {
                let at = before.bytes().zip(after.bytes()).take_while(|(a, b)| a == b).count();
                let from = at.saturating_sub(300);
                panic!(
                    "a tick at {now:?} before its quiet_until {:?} changed the policy: \
                     ...{} became ...{}",
                    self.quiet,
                    &before[from..(at + 200).min(before.len())],
                    &after[from..(at + 200).min(after.len())],
                );
            }
            self.checked.fetch_add(1, Ordering::Relaxed);
        } else {
            self.inner.on_event(now, event, actions);
        }
        self.quiet = self.inner.quiet_until();
    }
}

/// Run `workload` on `gpus` under the node policy of `params`: its metrics, the ticks
/// delivered and (checking) those checked.
fn run(
    workload: &Workload,
    gpus: &[GpuSpec],
    params: NodeParams,
    check: bool,
) -> (RunMetrics, u64, u64) {
    let delivered = Arc::new(AtomicU64::new(0));
    let checked = Arc::new(AtomicU64::new(0));
    let policy = Ticks {
        inner: NodePolicy::new(gpus, params),
        check,
        quiet: Nanos::ZERO,
        delivered: delivered.clone(),
        checked: checked.clone(),
    };
    let opts = SimOptions {
        gpus: gpus.to_vec(),
        perf: PerfModel::default(),
        keep_latencies: true,
        event_budget: 50_000_000,
        sharing: Sharing::Exclusive,
        measure_gpus: true,
        sla_window: None,
    };
    let metrics = Simulation::new(workload, Box::new(policy), opts).run().expect("the run ends");
    (metrics, delivered.load(Ordering::Relaxed), checked.load(Ordering::Relaxed))
}

/// Both checks on one workload; returns (ticks in all, ticks delivered when passing
/// over the quiet ones) and the run's metrics.
fn both_ways(workload: &Workload, gpus: &[GpuSpec], params: NodeParams) -> (u64, u64, RunMetrics) {
    let (every, all, checked) = run(workload, gpus, params, true);
    let (skipping, delivered, _) = run(workload, gpus, params, false);
    assert_eq!(skipping, every, "passing over the quiet ticks changed the run");
    assert!(checked > 0, "no tick was called quiet ({all} ticks)");
    assert!(
        checked <= all && delivered <= all,
        "{checked} checked, {delivered} delivered of {all}"
    );
    (all, delivered, skipping)
}

#[test]
fn the_bench_workloads_quiet_ticks_change_nothing_and_most_pass() {
    let gpus = GpuSpec::uniform(4, Bytes::gib(4));
    // the bench's node policy (`tessera bench sim`): a reservation of one GPU, which
    // holds only while a service is registered (none here)
    let params = NodeParams::new(FlexyParams {
        reserve: 1,
        reset: None,
        sla: Nanos::from_millis(200),
        history: 10,
        order: PoolOrder::default(),
    });
    for seed in [0, 7] {
        let workload = generate(&ColocatedParams {
            gpus: 4,
            per_gpu: 8,
            tasks_per_job: 20,
            mean: Nanos::from_millis(50),
            seed,
        });
        let (all, delivered, _) = both_ways(&workload, &gpus, params);
        // a tick every 2 ms (the spin budget) over tasks of 50 ms on average
        assert!(delivered * 2 < all, "seed {seed}: {delivered} of {all} ticks delivered");
    }
}

/// A kernel of 10 ms whose program computes `cpu_ms` before each launch.
fn kernel(name: &str, cpu_ms: u64) -> Kernel {
    Kernel {
        name: name.into(),
        mean: Nanos::from_millis(10),
        launch: None,
        registers_per_thread: 0,
        cpu_per_launch: Nanos::from_millis(cpu_ms),
        host_per_task: Nanos::ZERO,
    }
}

/// The service of `tenant`: requests of `task_ms` at `arrivals_ms`.
fn service(tenant: TenantSpec, arrivals_ms: impl Iterator<Item = u64>, task_ms: u64) -> Job {
    let arrivals: Vec<Nanos> = arrivals_ms.map(Nanos::from_millis).collect();
    Job {
        arrival: arrivals.first().copied().unwrap_or(Nanos::ZERO),
        tasks: vec![Nanos::from_millis(task_ms); arrivals.len()],
        arrivals,
        tenant,
        kernel: 0,
        window: usize::MAX,
        submission: Submission::Open,
        background: false,
    }
}

#[test]
fn quiet_ticks_change_nothing_beside_a_service_a_slurm_job_and_moves() {
    // both pool orders, and F-Reset's resets
    for (order, reset) in [
        (PoolOrder::Packing, None),
        (PoolOrder::Completion, None),
        (PoolOrder::Packing, Some(Nanos::from_millis(100))),
        // shorter than the batch tasks: resets kill them (tests/node_resets.rs)
        (PoolOrder::Packing, Some(Nanos::from_millis(5))),
    ] {
        let params =
            NodeParams::new(FlexyParams { reserve: 1, reset, sla: SLA, history: 10, order });
        let (all, delivered, m) =
            both_ways(&mixed_node(), &GpuSpec::uniform(3, Bytes::gib(1)), params);
        assert!(delivered < all, "{order:?}, {reset:?}: {delivered} of {all} ticks delivered");
        // the 10 ms tasks outlast a 5 ms reset only: resets happen then alone
        let short = reset.is_some_and(|r| r < Nanos::from_millis(10));
        assert_eq!(m.resets > 0, short, "{order:?}, {reset:?}: {} resets", m.resets);
    }
}

/// The reviewer's case (issue 55): under Algorithm 1's order as printed, a pool GPU
/// busy with a request gives way to an idle GPU at the next look at the pool, though
/// nothing waits and no GPU's freeing is read; a tick then moves the pool, so none is
/// quiet while the pool's GPU is busy.
#[test]
fn a_busy_pool_gpu_leaves_no_tick_quiet_under_the_completion_order() {
    let gpus = GpuSpec::uniform(2, Bytes::gib(1));
    let tenant = TenantSpec::new(TenantId(0), ServiceClass::UserFacing { sla: SLA });
    // one 50 ms request every 200 ms; nothing else, so the other GPU stays idle
    let workload = Workload {
        kernels: vec![kernel("k", 0)],
        jobs: vec![service(tenant, (0..30).map(|i| 200 * i), 50)],
    };
    let params = NodeParams::new(FlexyParams {
        reserve: 1,
        reset: None,
        sla: SLA,
        history: 10,
        order: PoolOrder::Completion,
    });
    let (all, delivered, _) = both_ways(&workload, &gpus, params);
    assert!(delivered < all, "{delivered} of {all} ticks delivered");
}

/// Three 1 GiB GPUs: a service in bursts that declares memory, a Slurm job's two
/// members pinned to GPU 1 (one thinking 3 ms between tasks: past the 2 ms spin budget,
/// so its queue runs dry and its turn lapses), and batch tenants whose memory makes the
/// node move them and leaves a GPU without room for the service.
fn mixed_node() -> Workload {
    // (the node tests' tenants and jobs, with their kernel)
    use super::node::{job as on_kernel_0, tenant};
    let job = |arrival_ms, kernel, tenant, tasks, task_ms| Job {
        kernel,
        ..on_kernel_0(arrival_ms, tenant, tasks, task_ms)
    };
    // bursts of ten requests 5 ms apart every 400 ms: the pool grows and shrinks
    let arrivals = (0..300).map(|i| i / 10 * 400 + i % 10 * 5);
    let member = |id, weight_in_group| TenantSpec {
        weight: 2,
        group: Some(1),
        weight_in_group,
        gpus: vec![GpuId(1)],
        ..tenant(id, ServiceClass::Batch, 100)
    };
    Workload {
        kernels: vec![kernel("k", 0), kernel("thinks", 3)],
        jobs: vec![
            service(tenant(0, ServiceClass::UserFacing { sla: SLA }, 200), arrivals, 20),
            job(0, 0, member(1, 1), 600, 10),
            job(0, 1, member(2, 3), 600, 10),
            job(0, 1, tenant(3, ServiceClass::Batch, 700), 500, 10),
            // does not fit beside tenant 3: the node homes it elsewhere and moves it
            job(2_000, 0, tenant(4, ServiceClass::Batch, 600), 400, 10),
            job(3_000, 1, tenant(5, ServiceClass::Batch, 200), 300, 5),
        ],
    }
}

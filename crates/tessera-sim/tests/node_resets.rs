//! F-Reset inside the composed node policy: a batch task a reset kills goes back to
//! its tenant's queue, and fair queuing must serve that tenant again. It did not: fair
//! queuing still counted the killed task as the tenant's quantum running, so the tenant
//! was never eligible again and its work stalled for good (the run below hit its event
//! budget with hundreds of tasks never submitted; found while checking the node's
//! quiet ticks under resets shorter than the tasks, issue 55).

use std::sync::Arc;
use tessera_core::policies::flexy::{FlexyParams, PoolOrder};
use tessera_core::policies::node::{NodeParams, NodePolicy};
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Policy, ServiceClass, TenantId, TenantSpec,
};
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Submission, Workload};

use super::node::{job, tenant};

const SLA: Nanos = Nanos(100_000_000);

/// Two 1 GiB GPUs, one of them the user-facing pool's (K = 1): a service whose bursts
/// of requests grow the pool onto the batch tenants' GPU, and two batch tenants with
/// 50 ms tasks, longer than the 5 ms reset, so F-Reset kills them to make room.
fn bursts_beside_long_batch_tasks() -> Workload {
    // bursts of six 20 ms requests 2 ms apart, every 300 ms
    let arrivals = (0..120).map(|i: u64| Nanos::from_millis(i / 6 * 300 + i % 6 * 2)).collect();
    let service = Job {
        arrivals,
        submission: Submission::Open,
        window: usize::MAX,
        ..job(0, tenant(0, ServiceClass::UserFacing { sla: SLA }, 0), 120, 20)
    };
    let mut workload = super::node::scenario();
    workload.jobs = vec![
        service,
        job(0, tenant(1, ServiceClass::Batch, 100), 60, 50),
        job(0, tenant(2, ServiceClass::Batch, 100), 60, 50),
    ];
    workload
}

/// The engine's options on `gpus`, its resets lasting `reset` as the policy plans.
fn options(gpus: &[GpuSpec], reset: Nanos) -> SimOptions {
    SimOptions {
        gpus: gpus.to_vec(),
        perf: PerfModel { reset_latency: reset, ..PerfModel::default() },
        keep_latencies: false,
        // the runs need about ten thousand; the stall spent any budget on ticks
        event_budget: 2_000_000,
        sharing: Sharing::Exclusive,
        measure_gpus: true,
        sla_window: None,
    }
}

#[test]
fn a_batch_task_killed_by_a_reset_runs_again_and_every_task_ends() {
    let reset = Nanos::from_millis(5);
    let gpus = GpuSpec::uniform(2, Bytes::gib(1));
    let params = NodeParams::new(FlexyParams {
        reserve: 1,
        reset: Some(reset),
        sla: SLA,
        history: 10,
        order: PoolOrder::Packing,
    });
    let opts = options(&gpus, reset);
    let policy = NodePolicy::new(&gpus, params);
    let m = Simulation::new(&bursts_beside_long_batch_tasks(), Box::new(policy), opts)
        .run()
        .expect("the run ends");
    // the case at all: resets killed batch work
    assert!(m.resets > 0 && m.killed_work_s > 0.0, "{} resets", m.resets);
    // and every task ended, completed: the killed ones ran again
    assert_eq!(m.not_completed, 0);
    assert_eq!(m.batch_tasks, 120);
    assert_eq!(m.batch_done, m.batch_tasks);
    assert_eq!(m.uf_tasks, 120);
}

/// The node policy wrapped to count the GPU resets it asks for, per GPU.
#[derive(Debug)]
struct Resets {
    inner: NodePolicy,
    per_gpu: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<GpuId, u64>>>,
}

impl Policy for Resets {
    fn label(&self) -> String {
        self.inner.label()
    }
    fn tick_interval(&self) -> Option<Nanos> {
        self.inner.tick_interval()
    }
    fn quiet_until(&self) -> Nanos {
        self.inner.quiet_until()
    }
    fn min_reservation(&self) -> usize {
        self.inner.min_reservation()
    }
    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.inner.home(tenant)
    }
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        let before = actions.len();
        self.inner.on_event(now, event, actions);
        for a in &actions[before..] {
            if let Action::ResetGpu { gpu, .. } = a {
                *self.per_gpu.lock().unwrap().entry(*gpu).or_default() += 1;
            }
        }
    }
}

/// A pool GPU whose batch homes leave room for no waiting service's context runs their
/// work meanwhile (issue 56); F-Reset must not reset it for the waiting requests, which
/// cannot run there: each reset freed it for none, its batch work was dispatched there
/// again in the same event and killed at once, at every reset's end, while requests
/// waited (found by a review of the fix above). Two 1 GiB GPUs: 700 MiB of batch homes
/// pinned to GPU 0, 100 MiB to GPU 1; two services of 400 MiB, which fit on GPU 1 only.
#[test]
fn no_reset_frees_a_pool_gpu_where_no_waiting_service_fits() {
    let reset = Nanos::from_millis(5);
    let pinned = |id, memory, gpu| TenantSpec {
        gpus: vec![GpuId(gpu)],
        ..tenant(id, ServiceClass::Batch, memory)
    };
    let service = |id| Job {
        arrivals: (0..100).map(|i| Nanos::from_millis(1_000 + 25 * i)).collect(),
        submission: Submission::Open,
        window: usize::MAX,
        ..job(1_000, tenant(id, ServiceClass::UserFacing { sla: SLA }, 400), 100, 20)
    };
    let mut workload = super::node::scenario();
    workload.jobs = vec![
        job(0, pinned(1, 400, 0), 200, 50),
        job(0, pinned(2, 300, 0), 200, 50),
        job(0, pinned(3, 100, 1), 200, 50),
        service(8),
        service(9),
    ];
    let gpus = GpuSpec::uniform(2, Bytes::gib(1));
    let params = NodeParams::new(FlexyParams {
        reserve: 0,
        reset: Some(reset),
        sla: SLA,
        history: 10,
        order: PoolOrder::Packing,
    });
    let per_gpu = std::sync::Arc::default();
    let policy = Resets { inner: NodePolicy::new(&gpus, params), per_gpu: Arc::clone(&per_gpu) };
    let opts = options(&gpus, reset);
    let m = Simulation::new(&workload, Box::new(policy), opts).run().expect("the run ends");
    assert_eq!(m.not_completed, 0);
    assert_eq!(m.batch_tasks, 600);
    let per_gpu = per_gpu.lock().unwrap().clone();
    assert_eq!(per_gpu.get(&GpuId(0)), None, "resets per GPU: {per_gpu:?}");
}

//! F-Reset inside the composed node policy: a batch task a reset kills goes back to
//! its tenant's queue, and fair queuing must serve that tenant again. It did not: fair
//! queuing still counted the killed task as the tenant's quantum running, so the tenant
//! was never eligible again and its work stalled for good (the run below hit its event
//! budget with hundreds of tasks never submitted; found while checking the node's
//! quiet ticks under resets shorter than the tasks, issue 55).

use tessera_core::policies::flexy::{FlexyParams, PoolOrder};
use tessera_core::policies::node::{NodeParams, NodePolicy};
use tessera_core::{Bytes, GpuSpec, Nanos, ServiceClass};
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
    let opts = SimOptions {
        gpus: gpus.clone(),
        perf: PerfModel { reset_latency: reset, ..PerfModel::default() },
        keep_latencies: false,
        // the run needs about ten thousand; the stall spent any budget on ticks
        event_budget: 2_000_000,
        sharing: Sharing::Exclusive,
        measure_gpus: true,
        sla_window: None,
    };
    let policy = NodePolicy::new(&gpus, params);
    let m = Simulation::new(&bursts_beside_long_batch_tasks(), Box::new(policy), opts)
        .run()
        .expect("the run ends");
    // the case at all: resets killed batch work
    assert!(m.resets > 0 && m.killed_work_s > 0.0, "{} resets", m.resets);
    // and every task ended, completed: the killed ones ran again
    assert_eq!(m.not_completed, 0);
    assert_eq!(m.batch_done, m.batch_tasks);
    assert_eq!(m.uf_tasks, 120);
}

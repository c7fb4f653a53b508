//! The composed node policy on the engine, beside the single policies it composes:
//! where each mechanism must make a difference, it does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tessera_core::policies::dcuda::MoveReason;
use tessera_core::policies::flexy::{FlexyParams, PoolOrder};
use tessera_core::policies::node::{NodeParams, NodePolicy, NodeReport};
use tessera_core::{
    Action, Bytes, Event, GpuId, GpuSpec, Nanos, Policy, PolicyConfig, ServiceClass, TaskId,
    TenantId, TenantSpec,
};
use tessera_sim::RunMetrics;
use tessera_sim::engine::{SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Kernel, Submission, Workload};

const SLA: Nanos = Nanos(100_000_000);

/// A policy wrapped to tally each tenant's GPU time from its finished tasks, up to a
/// time (while every batch tenant of the scenario is still backlogged).
#[derive(Debug)]
struct Tally {
    inner: Box<dyn Policy>,
    until: Nanos,
    owner: BTreeMap<TaskId, TenantId>,
    service: Arc<Mutex<BTreeMap<TenantId, u64>>>,
}

impl Policy for Tally {
    fn label(&self) -> String {
        self.inner.label()
    }
    fn tick_interval(&self) -> Option<Nanos> {
        self.inner.tick_interval()
    }
    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.inner.home(tenant)
    }
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        match event {
            Event::TaskSubmitted(spec) => {
                self.owner.insert(spec.id, spec.tenant);
            }
            Event::TaskFinished { task, ran_for, .. } if now <= self.until => {
                if let Some(t) = self.owner.get(task) {
                    *self.service.lock().unwrap().entry(*t).or_default() += ran_for.0;
                }
            }
            _ => {}
        }
        self.inner.on_event(now, event, actions);
    }
}

fn tenant(id: u64, class: ServiceClass, memory_mib: u64) -> TenantSpec {
    TenantSpec { memory: Bytes::mib(memory_mib), ..TenantSpec::new(TenantId(id), class) }
}

fn job(arrival_ms: u64, tenant: TenantSpec, tasks: usize, task_ms: u64) -> Job {
    Job {
        arrival: Nanos::from_millis(arrival_ms),
        tenant,
        kernel: 0,
        tasks: vec![Nanos::from_millis(task_ms); tasks],
        window: 1,
        submission: Submission::Window,
        arrivals: Vec::new(),
        background: false,
    }
}

/// Three 1 GiB GPUs:
/// - tenant 0, user-facing (SLA 100 ms): 20 ms requests, 25 per second for 20 s;
/// - tenants 1 and 2, one Slurm job (weight 2) on GPU 1, weighted 1 : 3 within it,
///   100 MiB each, always backlogged (10 ms tasks, more than the run needs);
/// - tenant 3, batch, 700 MiB, 8 s of 10 ms tasks from the start;
/// - tenant 4, batch, 600 MiB, arrives at 2 s with 10 s of work: it does not fit
///   beside tenant 3, so it starts on GPU 1 with the job, overloading it, until tenant
///   3 leaves and frees GPU 2.
fn scenario() -> Workload {
    let uf = Job {
        arrivals: (0..500).map(|i| Nanos::from_millis(40 * i)).collect(),
        submission: Submission::Open,
        window: usize::MAX,
        ..job(0, tenant(0, ServiceClass::UserFacing { sla: SLA }, 0), 500, 20)
    };
    let member = |id, weight_in_group| TenantSpec {
        weight: 2,
        group: Some(1),
        weight_in_group,
        gpus: vec![GpuId(1)],
        ..tenant(id, ServiceClass::Batch, 100)
    };
    Workload {
        kernels: vec![Kernel {
            name: "k".into(),
            mean: Nanos::from_millis(10),
            launch: None,
            registers_per_thread: 0,
            cpu_per_launch: Nanos::ZERO,
            host_per_task: Nanos::ZERO,
        }],
        jobs: vec![
            uf,
            job(0, member(1, 1), 2_000, 10),
            job(0, member(2, 3), 4_000, 10),
            job(0, tenant(3, ServiceClass::Batch, 700), 800, 10),
            job(2_000, tenant(4, ServiceClass::Batch, 600), 1_000, 10),
        ],
    }
}

fn options() -> SimOptions {
    SimOptions {
        gpus: GpuSpec::uniform(3, Bytes::gib(1)),
        perf: PerfModel::default(),
        keep_latencies: false,
        event_budget: 50_000_000,
        sharing: tessera_sim::engine::Sharing::Exclusive,
        measure_gpus: true,
        sla_window: None,
    }
}

fn flexy_params() -> FlexyParams {
    FlexyParams { reserve: 1, reset: None, sla: SLA, history: 10, order: PoolOrder::Packing }
}

/// Run `policy` on the scenario; its metrics and each tenant's GPU time in the first
/// 15 s.
fn run(policy: Box<dyn Policy>) -> (RunMetrics, BTreeMap<TenantId, u64>) {
    let service = Arc::new(Mutex::new(BTreeMap::new()));
    let tally = Tally {
        inner: policy,
        until: Nanos::from_secs(15),
        owner: BTreeMap::new(),
        service: service.clone(),
    };
    let metrics =
        Simulation::new(&scenario(), Box::new(tally), options()).run().expect("the run ends");
    let service = service.lock().unwrap().clone();
    (metrics, service)
}

fn ratio(service: &BTreeMap<TenantId, u64>, a: u64, b: u64) -> f64 {
    let get = |t| service.get(&TenantId(t)).copied().unwrap_or(0) as f64;
    get(a) / get(b)
}

#[test]
fn the_node_policy_keeps_the_sla_shares_by_weight_and_moves_the_newcomer() {
    let report = Arc::new(Mutex::new(NodeReport::default()));
    let node = NodePolicy::new(&options().gpus, NodeParams::new(flexy_params()))
        .with_report(report.clone());
    let (m, service) = run(Box::new(node));
    // every task ends, completed
    assert_eq!(m.not_completed, 0);
    assert_eq!(m.batch_done, m.batch_tasks);
    // the SLA tenant keeps its SLA in Flexy's pool
    assert!(m.sla_met >= 0.99, "SLA met {:.4}", m.sla_met);
    // the job's tenants share its GPU 1 : 3 (within 10%)
    let within = ratio(&service, 1, 2);
    assert!((within - 1.0 / 3.0).abs() < 0.1 / 3.0, "tenant 1 : tenant 2 = {within:.3}");
    // the newcomer started on the job's GPU and was moved to GPU 2 once tenant 3 left
    let report = report.lock().unwrap().clone();
    let moved: Vec<_> = report
        .recent
        .iter()
        .filter(|r| r.decided.tenant == TenantId(4) && r.decided.reason == MoveReason::Balance)
        .collect();
    assert!(
        moved.iter().any(|r| r.decided.from == GpuId(1) && r.decided.to == GpuId(2)),
        "the newcomer's moves: {moved:?}"
    );
    assert!(
        moved.iter().all(|r| r.at >= Nanos::from_secs(8)),
        "moved before GPU 2 was free: {moved:?}"
    );
    let gpus = m.gpus.expect("measured");
    assert!(gpus.migrations >= 1);
}

/// The same scenario under Flexy alone: it keeps the SLA, but knows no weights — the
/// job's tenants get about 1 : 1, where the node policy gives 1 : 3.
#[test]
fn flexy_alone_keeps_the_sla_but_not_the_weights() {
    let gpus = options().gpus;
    let flexy = PolicyConfig::Flexy {
        reserve: 1,
        reset: None,
        sla: SLA,
        history: 10,
        order: PoolOrder::Packing,
    }
    .build(&gpus)
    .unwrap();
    let (m, service) = run(flexy);
    assert!(m.sla_met >= 0.99, "SLA met {:.4}", m.sla_met);
    let within = ratio(&service, 1, 2);
    assert!(within > 0.8, "tenant 1 : tenant 2 = {within:.3}: Flexy has no weights");
}

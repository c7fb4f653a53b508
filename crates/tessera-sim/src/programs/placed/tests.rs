use super::*;
use std::sync::{Arc, Mutex};

fn us(n: u64) -> Nanos {
    Nanos(n * 1_000)
}

/// Two GPUs placed by the policy, a core per tenant, moving a tenant costs 1 ms plus
/// its memory at 12 GB/s.
fn placed_node(cores: usize) -> NodeModel {
    NodeModel {
        cpu: CpuModel {
            cores,
            switch: Nanos::ZERO,
            wakeup_granularity: us(1_000),
            wake_lag: us(3_000),
            tick: us(1_000),
        },
        wait: WaitMode::Hybrid { spin: Nanos::ZERO },
        device: Device::Blocks(BlocksDevice {
            gpus: 2,
            limits: tessera_gpu::occupancy::SmLimits::V100,
            contexts: tessera_gpu::concurrent::Contexts::Shared,
            contention: tessera_gpu::concurrent::Contention::default(),
            placing: Placing::Policy {
                migration: MigrationCost { pause_ns: 1_000_000, bytes_per_s: 12e9 },
            },
        }),
        coscheduling: Coscheduling::None,
        admission: Admission::Pinned,
        gpu_memory: Bytes::gib(16),
        slicing: None,
    }
}

fn tenant(phases: Vec<Phase>) -> ProgramTenant {
    ProgramTenant {
        weight: 1,
        core: 0,
        priority: 0,
        arrive: Nanos::ZERO,
        gpu: 0,
        declares: Bytes::mib(12),
        program: Program::once(phases),
    }
}

fn kernel(alone: Nanos) -> Phase {
    Phase::Shaped {
        alone,
        launch: Launch {
            grid_blocks: 16,
            threads_per_block: 1_024,
            registers_per_thread: 32,
            shared_per_block: 0,
        },
    }
}

/// A policy that answers each submitted kernel with `answer` and writes down what it
/// hears.
struct Scripted<F> {
    answer: F,
    heard: Arc<Mutex<Vec<(Nanos, Event)>>>,
}

impl<F> std::fmt::Debug for Scripted<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl<F: FnMut(&TaskSpec) -> Vec<Action> + Send> Policy for Scripted<F> {
    fn label(&self) -> String {
        "scripted".into()
    }
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        if let Ok(mut h) = self.heard.lock() {
            h.push((now, event.clone()));
        }
        if let Event::TaskSubmitted(spec) = event {
            actions.extend((self.answer)(spec));
        }
    }
}

type Heard = Arc<Mutex<Vec<(Nanos, Event)>>>;

fn run(
    tenants: &[ProgramTenant],
    answer: impl FnMut(&TaskSpec) -> Vec<Action> + Send + 'static,
) -> (Result<ProgramOutcome, SimError>, Heard) {
    let heard: Heard = Arc::default();
    let policy = Scripted { answer, heard: heard.clone() };
    let out = ProgramSim::new(tenants, placed_node(tenants.len()), Box::new(policy))
        .and_then(ProgramSim::run_to_end);
    (out, heard)
}

/// A kernel is a task the policy is told of with its launch shape, runs where the
/// dispatch says, and its end is reported with its time there; moved at its start, it
/// stops, and resumes on the target with all its work once the tenant's 12 MiB are
/// copied (1 ms + 1.048576 ms), where it runs its 100 µs.
#[test]
fn kernels_run_where_the_policy_places_them_and_move_when_it_migrates() {
    let one = tenant(vec![kernel(us(100)), Phase::Sync, kernel(us(50)), Phase::Sync]);
    let mut first = true;
    let (out, heard) = run(std::slice::from_ref(&one), move |spec| {
        let dispatch = Action::Dispatch { task: spec.id, placement: Placement::whole(GpuId(0)) };
        if !std::mem::take(&mut first) {
            return vec![Action::Dispatch { task: spec.id, placement: Placement::whole(GpuId(1)) }];
        }
        vec![dispatch, Action::Migrate { tenant: spec.tenant, from: GpuId(0), to: GpuId(1) }]
    });
    let out = out.unwrap();
    let heard = heard.lock().unwrap().clone();
    let submitted: Vec<&TaskSpec> = heard
        .iter()
        .filter_map(|(_, e)| match e {
            Event::TaskSubmitted(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(submitted.len(), 2);
    let launch = submitted[0].launch.expect("a kernel's launch shape");
    assert_eq!((launch.grid_blocks, launch.threads_per_block), (16, 1_024));
    // 1,024 threads of 32 registers: two blocks of a V100 SM's 2,048 threads, 16
    // blocks of 160 slots
    assert_eq!(launch.demand, PerMille(100));
    let moved = 1_000_000 + 1_048_576;
    let finished: Vec<(Nanos, Placement, Nanos)> = heard
        .iter()
        .filter_map(|(at, e)| match e {
            Event::TaskFinished { placement, ran_for, .. } => Some((*at, *placement, *ran_for)),
            _ => None,
        })
        .collect();
    assert_eq!(finished[0], (Nanos(moved + 100_000), Placement::whole(GpuId(1)), us(100)));
    assert!(heard.iter().any(
        |(at, e)| *at == Nanos(moved) && matches!(e, Event::MigrationDone { to: GpuId(1), .. })
    ));
    assert_eq!(finished[1].1, Placement::whole(GpuId(1)));
    assert_eq!(finished[1].2, us(50));
    // GPU 0 ran nothing (the kernel left it at once); GPU 1 ran both kernels
    let span = out.duration_ns as f64;
    assert_eq!(out.placed_gpus[0].busy, 0.0);
    assert!(((out.placed_gpus[1].busy * span) - 150_000.0).abs() < 1.0, "{out:?}");
}

/// What the policy cannot ask is a violation, never a silent drop: a GPU the device
/// does not have, a kernel dispatched twice.
#[test]
fn impossible_placements_are_violations() {
    let one = || tenant(vec![kernel(us(100)), Phase::Sync]);
    let (out, _) = run(&[one()], |spec| {
        vec![Action::Dispatch { task: spec.id, placement: Placement::whole(GpuId(2)) }]
    });
    assert!(format!("{:?}", out.err()).contains("2 whole GPUs"));
    let (out, _) = run(&[one()], |spec| {
        let d = Action::Dispatch { task: spec.id, placement: Placement::whole(GpuId(0)) };
        vec![d.clone(), d]
    });
    assert!(format!("{:?}", out.err()).contains("dispatched while Running"));
    // a policy that never dispatches leaves the program waiting: a stall, not an end
    let (out, _) = run(&[one()], |_| Vec::new());
    assert!(matches!(out, Err(SimError::Stalled { .. })), "{out:?}");
}

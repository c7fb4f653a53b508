//! The task engine on the block model (`Sharing::Blocks`): kernels at their own rates,
//! placed block by block on SMs, beside the fluid model that runs every piece at one
//! rate; programs with a CPU phase before each launch; migrated tasks keep what they
//! demand.

use tessera_core::{
    Bytes, GpuSpec, LaunchInfo, Nanos, PerMille, PolicyConfig, ServiceClass, TenantId, TenantSpec,
};
use tessera_gpu::concurrent::{Contention, Contexts};
use tessera_gpu::occupancy::{Launch, occupancy};
use tessera_sim::RunMetrics;
use tessera_sim::engine::{Sharing, SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Job, Kernel, Submission, Workload};
use tessera_sim::workloads::dcuda::GTX_1080_TI;

const BLOCKS: Sharing = Sharing::Blocks {
    limits: GTX_1080_TI,
    contexts: Contexts::Shared,
    contention: Contention { slowdown_per_excess: 0.0 },
};

/// A kernel of `grid` blocks of 256 threads (32 registers), its occupancy demand on a
/// 1080 Ti declared as the fluid model needs it, `cpu_ms` of CPU before each launch.
fn kernel(name: &str, grid: u64, cpu_ms: u64) -> Kernel {
    let l = Launch {
        grid_blocks: grid,
        threads_per_block: 256,
        registers_per_thread: 32,
        shared_per_block: 0,
    };
    let demand = occupancy(&l, &GTX_1080_TI).demand;
    Kernel {
        name: name.into(),
        mean: Nanos::from_millis(10),
        launch: Some(LaunchInfo {
            grid_blocks: grid,
            threads_per_block: 256,
            demand: PerMille((demand * 1000.0).round() as u16),
        }),
        registers_per_thread: 32,
        cpu_per_launch: Nanos::from_millis(cpu_ms),
        host_per_task: Nanos::ZERO,
    }
}

/// Jobs of (arrival ms, kernel, task works ms, priority).
fn workload(kernels: Vec<Kernel>, jobs: &[(u64, u32, Vec<u64>, u8)]) -> Workload {
    let jobs = jobs
        .iter()
        .enumerate()
        .map(|(i, (arrival, kernel, tasks, priority))| Job {
            arrival: Nanos::from_millis(*arrival),
            tenant: TenantSpec {
                priority: *priority,
                ..TenantSpec::new(TenantId(i as u64 + 1), ServiceClass::Batch)
            },
            kernel: *kernel,
            tasks: tasks.iter().map(|t| Nanos::from_millis(*t)).collect(),
            window: 1,
            submission: Submission::Window,
            arrivals: Vec::new(),
            background: false,
        })
        .collect();
    Workload { kernels, jobs }
}

fn run(w: &Workload, sharing: Sharing, gpus: usize) -> RunMetrics {
    let gpus = GpuSpec::uniform(gpus, Bytes::gib(11));
    let opts = SimOptions {
        gpus: gpus.clone(),
        perf: PerfModel::default(),
        keep_latencies: false,
        event_budget: 1_000_000,
        sharing,
        measure_gpus: true,
        sla_window: None,
    };
    let policy = PolicyConfig::LeastLoaded { per_gpu: 8 }.build(&gpus).unwrap();
    Simulation::new(w, policy, opts).run().unwrap()
}

fn job_end_ms(m: &RunMetrics, job: usize) -> f64 {
    m.gpus.as_ref().unwrap().job_end_s[job].unwrap() * 1e3
}

/// A 100 ms kernel of 8192 blocks fills the 1080 Ti's 224 block slots for 37 waves of
/// 2.70 ms; a 10 ms kernel of 16 blocks launched 1 ms later:
/// - fluid: co-runs at once, both slowed by their summed demand 1 + 16/224, so it ends
///   at 1 + 10 × 1.0714 = 11.7 ms;
/// - blocks: waits behind every wave of the big kernel (which started first and is
///   dispatched first), gets the 96 slots its last wave of 128 leaves at
///   36 × 2.70 = 97.3 ms, and ends at 107.3 ms;
/// - blocks, its stream at a higher priority: placed when the first wave's blocks end
///   at 2.70 ms, ends at 12.7 ms.
#[test]
fn a_many_block_kernel_holds_up_a_small_one_only_under_the_block_model() {
    let kernels = vec![kernel("big", 8192, 0), kernel("small", 16, 0)];
    let w = workload(kernels.clone(), &[(0, 0, vec![100], 0), (1, 1, vec![10], 0)]);
    let fluid = job_end_ms(&run(&w, Sharing::Processor, 1), 1);
    let blocks = job_end_ms(&run(&w, BLOCKS, 1), 1);
    let wave = 100.0 / 37.0;
    assert!((fluid - (1.0 + 10.0 * (1.0 + 16.0 / 224.0))).abs() < 0.01, "fluid {fluid}");
    assert!((blocks - (36.0 * wave + 10.0)).abs() < 0.01, "blocks {blocks}");
    let urgent = workload(kernels, &[(0, 0, vec![100], 0), (1, 1, vec![10], 1)]);
    let prioritised = job_end_ms(&run(&urgent, BLOCKS, 1), 1);
    assert!((prioritised - (wave + 10.0)).abs() < 0.01, "prioritised {prioritised}");
    // the big kernel ends when its work is done in every case: SMs are never left idle
    // while it has blocks to place
    for (m, name) in [(run(&w, BLOCKS, 1), "blocks"), (run(&urgent, BLOCKS, 1), "prioritised")] {
        let big = job_end_ms(&m, 0);
        assert!((100.0 - 1e-6..=110.0 + 1e-6).contains(&big), "{name}: big ends at {big}");
    }
}

/// A kernel that ends at the instant another job's kernel starts on its GPU ends then:
/// the start (an arrival queued before the end's event) advances the block model past
/// the end, and the engine collected such a finish only at the model's next change
/// (here the new kernel's end, 5 ms late).
#[test]
fn a_kernel_ending_as_another_starts_ends_on_time() {
    // 224 blocks: one wave on the 1080 Ti's 224 slots, 10 ms; the second job's 224-block
    // kernel of 5 ms arrives at 10 ms exactly
    let kernels = vec![kernel("a", 224, 0), kernel("b", 224, 0)];
    let w = workload(kernels, &[(0, 0, vec![10], 0), (10, 1, vec![5], 0)]);
    let m = run(&w, BLOCKS, 1);
    assert!((job_end_ms(&m, 0) - 10.0).abs() < 1e-6, "the first ends at {}", job_end_ms(&m, 0));
    assert!((job_end_ms(&m, 1) - 15.0).abs() < 1e-6, "the second ends at {}", job_end_ms(&m, 1));
}

/// A program with 30 ms of CPU before each 20 ms kernel: three iterations end at
/// 3 × 50 = 150 ms, alone, in either model; two such programs on one GPU overlap one's
/// CPU with the other's kernel and both still end at 150 ms (their kernels, 20 ms at a
/// time, never meet).
#[test]
fn a_cpu_phase_runs_before_each_launch() {
    let kernels = vec![kernel("k", 8192, 30)];
    for sharing in [Sharing::Processor, BLOCKS] {
        let one = workload(kernels.clone(), &[(0, 0, vec![20, 20, 20], 0)]);
        assert!((job_end_ms(&run(&one, sharing, 1), 0) - 150.0).abs() < 0.01);
        // the second arrives 25 ms later: its kernels run at 55-75, 105-125, 155-175 ms;
        // the first's at 30-50, 80-100, 130-150 ms
        let two =
            workload(kernels.clone(), &[(0, 0, vec![20, 20, 20], 0), (25, 0, vec![20, 20, 20], 0)]);
        let m = run(&two, sharing, 1);
        assert!((job_end_ms(&m, 0) - 150.0).abs() < 0.01, "{sharing:?}");
        assert!((job_end_ms(&m, 1) - 175.0).abs() < 0.01, "{sharing:?}");
    }
}

/// The block model's usage: a kernel filling every SM for its whole run counts as
/// fully SM-busy, a 16-block kernel alone as 16/224 of the threads but every SM it
/// touches (16 of 28).
#[test]
fn the_block_model_reports_the_sms_in_use() {
    let w = workload(vec![kernel("big", 8192, 0)], &[(0, 0, vec![100], 0)]);
    let m = run(&w, BLOCKS, 1);
    let g = m.gpus.unwrap();
    assert!((g.sm_weighted[0] - 1.0).abs() < 1e-3, "{:?}", g.sm_weighted);
    let w = workload(vec![kernel("small", 16, 0)], &[(0, 0, vec![100], 0)]);
    let g = run(&w, BLOCKS, 1).gpus.unwrap();
    assert!((g.sm_weighted[0] - 16.0 / 28.0).abs() < 1e-3, "{:?}", g.sm_weighted);
}

/// DCUDA §3.3: on an overloaded GPU the fairness step groups a heavy application with a
/// light one (1.00 + 0.07 within the 10% slack) and a second heavy one alone; inside
/// the group the light one's stream is raised, so its 16 blocks are placed when the
/// heavy kernel's first wave ends instead of behind all 37 waves. Without the boost
/// (the same policy, `priority_boost: false`) it waits; the heavy one barely notices.
#[test]
fn dcuda_raises_the_light_application_in_its_group_and_that_is_what_speeds_it() {
    use tessera_core::policies::dcuda::{Dcuda, DcudaParams};
    let kernels = vec![kernel("heavy", 8192, 0), kernel("light", 16, 0)];
    // two heavy programs of 30 kernels of 100 ms, one light of 60 kernels of 10 ms
    let w = workload(
        kernels,
        &[(0, 0, vec![100; 30], 0), (0, 0, vec![100; 30], 0), (0, 1, vec![10; 60], 0)],
    );
    let at = |priority_boost: bool| {
        let gpus = GpuSpec::uniform(1, Bytes::gib(11));
        let opts = SimOptions {
            gpus: gpus.clone(),
            perf: PerfModel::default(),
            keep_latencies: false,
            event_budget: 10_000_000,
            sharing: BLOCKS,
            measure_gpus: true,
            sla_window: None,
        };
        let policy = Dcuda::new(&gpus, DcudaParams { priority_boost, ..DcudaParams::PAPER });
        let m = Simulation::new(&w, Box::new(policy), opts).run().unwrap();
        (job_end_ms(&m, 0).max(job_end_ms(&m, 1)), job_end_ms(&m, 2))
    };
    let (heavy_plain, light_plain) = at(false);
    let (heavy_boosted, light_boosted) = at(true);
    assert!(
        light_boosted < 0.7 * light_plain,
        "light: {light_boosted} ms boosted against {light_plain} ms"
    );
    assert!(
        heavy_boosted < 1.1 * heavy_plain,
        "heavy: {heavy_boosted} ms boosted against {heavy_plain} ms"
    );
}

//! DCUDA's applications as programs on the program engine (issue 57 item 11): each
//! iteration of an application's loop its CPU work on a core of the modelled CPU
//! (CFS-like, [`crate::programs`]), its kernel with its launch shape on the block
//! device (the block model the task engine runs DCUDA's GPUs on), and a synchronise.
//!
//! The experiment itself runs on the task engine, whose CPU phases are delays: a core
//! of its own for every phase. This is the check of that choice on one GPU: the same
//! applications, the same kernels and the same arrivals on the program engine give
//! each application's end (the `ended_ns` of its program) beside the task engine's, on
//! a CPU of the testbed's 16 cores and on fewer. Multi-GPU placement and migration are
//! the task engine's alone: the program engine has one device.

use super::*;
use crate::programs::{
    Admission, BlocksDevice, Coscheduling, CpuModel, Device, NodeModel, Phase, Program, ProgramSim,
    ProgramTenant, WaitMode,
};
use crate::workload::Workload;
use tessera_core::PolicyConfig;
use tessera_gpu::occupancy::Launch;

/// The testbed's cores (§4.1: two 8-core Xeons).
pub const TESTBED_CORES: usize = 16;

/// The workload's jobs as programs, in job order: per task its kernel's CPU work, the
/// kernel (the task's time alone, the kernel's launch shape) and a synchronise — the
/// task engine's order (a job's next task is submitted its CPU work after the last
/// one ended, the first its CPU work after it arrives). Job `j` is pinned to core
/// `j % cores` and arrives when the job does.
pub fn as_programs(w: &Workload, cores: usize) -> Result<Vec<ProgramTenant>, ExperimentError> {
    w.jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let k = w.kernels.get(job.kernel as usize).ok_or_else(|| {
                ExperimentError::Config(format!("job {j}: no kernel {}", job.kernel))
            })?;
            let l = k
                .launch
                .ok_or_else(|| ExperimentError::Config(format!("{}: no launch shape", k.name)))?;
            let launch = Launch {
                grid_blocks: l.grid_blocks,
                threads_per_block: l.threads_per_block,
                registers_per_thread: k.registers_per_thread,
                shared_per_block: 0,
            };
            let phases = job
                .tasks
                .iter()
                .flat_map(|alone| {
                    [
                        Phase::Cpu(k.cpu_per_launch),
                        Phase::Shaped { alone: *alone, launch },
                        Phase::Sync,
                    ]
                })
                .collect();
            Ok(ProgramTenant {
                weight: 1,
                core: j % cores.max(1),
                priority: 0,
                arrive: job.arrival,
                program: Program::once(phases),
            })
        })
        .collect()
}

/// One GPU of DCUDA's testbed under the program engine: `cores` cores with no switch
/// cost (the task engine charges none), waits that block at once, the block device at
/// `contention`.
pub fn node(cores: usize, contention: f64) -> NodeModel {
    let Sharing::Blocks { limits, contexts, contention } = sharing(contention) else {
        unreachable!("DCUDA's GPUs run the block model")
    };
    NodeModel {
        cpu: CpuModel {
            cores,
            switch: Nanos::ZERO,
            wakeup_granularity: Nanos::from_millis(1),
            wake_lag: Nanos::from_millis(3),
            tick: Nanos::from_millis(1),
        },
        wait: WaitMode::Hybrid { spin: Nanos::ZERO },
        device: Device::Blocks(BlocksDevice { limits, contexts, contention }),
        coscheduling: Coscheduling::None,
        admission: Admission::Pinned,
        gpu_memory: GPU_MEMORY,
        slicing: None,
    }
}

/// Each application's end on one GPU, s: `apps` arriving every `interval_s` in Table
/// 1's order, on the task engine (least-loaded: every application on the one GPU) and
/// on the program engine with `cores` cores. In job order.
pub fn one_gpu_ends(
    apps: &[App],
    interval: Nanos,
    contention: f64,
    cores: usize,
) -> Result<(Vec<f64>, Vec<f64>), ExperimentError> {
    let order: Vec<usize> = (0..apps.len()).collect();
    let w = workload(apps, &order, interval);
    let gpus = GpuSpec::uniform(1, GPU_MEMORY);
    let params = DcudaParams::static_placement(InitialPlacement::LeastLoaded);
    let opts = SimOptions {
        gpus: gpus.clone(),
        perf: PerfModel::default(),
        keep_latencies: false,
        event_budget: u64::MAX,
        sharing: sharing(contention),
        measure_gpus: true,
        sla_window: None,
    };
    let m = Simulation::new(&w, Box::new(Dcuda::new(&gpus, params)), opts)
        .run()
        .map_err(|source| ExperimentError::Sim { trial: "one GPU, task engine".into(), source })?;
    let g = m.gpus.ok_or_else(|| ExperimentError::Config("no GPU measures".into()))?;
    let tasks: Vec<f64> = g
        .job_end_s
        .iter()
        .map(|e| e.ok_or_else(|| ExperimentError::Config("a job did not end".into())))
        .collect::<Result<_, _>>()?;
    let policy = PolicyConfig::MemSafe { notification: Default::default() }
        .build(&gpus)
        .map_err(|e| ExperimentError::Config(e.to_string()))?;
    let trial = || format!("one GPU, program engine, {cores} cores");
    let out = ProgramSim::new(&as_programs(&w, cores)?, node(cores, contention), policy)
        .and_then(ProgramSim::run_to_end)
        .map_err(|source| ExperimentError::Sim { trial: trial(), source })?;
    let programs: Vec<f64> = out
        .ended_ns
        .iter()
        .map(|e| e.map(|ns| ns as f64 / 1e9))
        .collect::<Option<_>>()
        .ok_or_else(|| ExperimentError::Config(format!("{}: a program did not end", trial())))?;
    Ok((tasks, programs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval that puts no arrival at the instant a kernel ends: kernels started
    /// at one instant are placed in id order, and the engines number them differently
    /// (the task engine by submission, the program engine by program), so a tie at an
    /// arrival would be broken differently (seen: ends 0.1-1% apart at 5 s exactly).
    const INTERVAL: Nanos = Nanos(5_001_234_567);

    /// On the testbed's 16 cores, a core for each application, the program engine ends
    /// each of six applications on one GPU at the nanosecond the task engine does: CPU
    /// phases as delays are what CFS gives a thread alone on its core, and both engines
    /// run the kernels on the same block model, contention included.
    #[test]
    fn dcuda_applications_as_programs_end_where_the_task_engine_ends_them() {
        let apps: Vec<App> = parse_apps(APPS_CSV).unwrap().into_iter().take(6).collect();
        let (tasks, programs) = one_gpu_ends(&apps, INTERVAL, 0.6, TESTBED_CORES).unwrap();
        assert_eq!(tasks.len(), 6);
        assert_eq!(tasks, programs);
    }

    /// Two copies of `transpose`, whose loop is about half CPU work, on one core: their
    /// CPU phases together ask for more than the core, so each waits for the other's and
    /// both end later than the task engine (a core for every phase) ends them; on two
    /// cores they end where it does.
    #[test]
    fn applications_sharing_a_core_wait_for_each_others_cpu_work() {
        let all = parse_apps(APPS_CSV).unwrap();
        let transpose = all.iter().find(|a| a.name == "transpose").unwrap().clone();
        assert!(transpose.duty() < 0.55, "{}", transpose.duty());
        let apps = vec![transpose.clone(), transpose];
        let (tasks, two) = one_gpu_ends(&apps, INTERVAL, 0.6, 2).unwrap();
        assert_eq!(tasks, two);
        let (_, one) = one_gpu_ends(&apps, INTERVAL, 0.6, 1).unwrap();
        for (t, o) in tasks.iter().zip(&one) {
            assert!(*o > 1.02 * t, "one core: {one:?}, a core each: {tasks:?}");
        }
    }
}

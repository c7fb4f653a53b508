//! The case kernel slicing exists for (FairGV §3.3.2; issue 58 items 3 and 5): one VM
//! launching 10 s kernels of 900 × 900 blocks beside one whose ring is always full of
//! 1 ms kernels, weights 1:1, FairGV's scheduler on the non-preemptive queue device
//! ([`Scheduler::FairGv`]'s node and policy, the experiment's constants). A quantum
//! cannot end inside a kernel, so a 10 s kernel holds the GPU for 10 s whatever the
//! fair share; issued as the interposer issues it — sub-kernels of 1,500 blocks by the
//! interposer's own plan (`tessera_ptx::plan`, through [`Phase::LaunchGrid`]) — each
//! quantum ends at a sub-kernel's end. Measured over 8 s, shorter than one long kernel:
//! the GPU time each VM received, whole and sliced.
//!
//! Not modelled: a sub-kernel's own cost (Table 4's part-empty waves, [`super::slicing`]:
//! under 5% at 1,500 blocks); the sub-kernels here take their blocks' share of the
//! kernel's time exactly.

use super::setting::{Constants, Scheduler};
use crate::experiments::ExperimentError;
use crate::programs::{Phase, Program, ProgramSim, ProgramTenant};
use serde::{Deserialize, Serialize};
use tessera_core::{Bytes, GpuSpec, Nanos};
use tessera_ptx::SliceConfig;

/// The long kernel's run time alone, s.
pub const KERNEL_S: u64 = 10;
/// Its grid (FairGV's larger Table 4 grid).
pub const GRID: [u32; 3] = [900, 900, 1];
/// The short VM's kernels, µs.
pub const SHORT_KERNEL_US: u64 = 1_000;
/// Simulated time per run, s (shorter than one long kernel).
pub const SECONDS: u64 = 8;

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LongKernelRun {
    /// Whether the long kernel was sliced.
    pub sliced: bool,
    /// The short VM's share of the GPU time both received.
    pub short_share: f64,
    /// The GPU's busy share of the run.
    pub gpu_busy: f64,
    /// Quanta each VM was given (long, short).
    pub quanta: [u64; 2],
}

/// Both runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LongKernel {
    /// Sub-kernels the long kernel is issued as when sliced.
    pub sub_kernels: usize,
    /// Whole, then sliced.
    pub runs: Vec<LongKernelRun>,
}

/// Run it whole and sliced.
pub fn run(k: &Constants) -> Result<LongKernel, ExperimentError> {
    let long = ProgramTenant {
        weight: 1,
        core: 0,
        priority: 0,
        arrive: Nanos::ZERO,
        gpu: 0,
        declares: tessera_core::Bytes(0),
        program: Program::looping(vec![
            Phase::LaunchGrid { alone: Nanos::from_secs(KERNEL_S), grid: GRID },
            Phase::Sync,
        ]),
    };
    let short = ProgramTenant {
        weight: 1,
        core: 1,
        priority: 0,
        arrive: Nanos::ZERO,
        gpu: 0,
        declares: tessera_core::Bytes(0),
        program: Program::looping(vec![
            Phase::Cpu(Nanos(20_000)),
            Phase::Launch(Nanos(SHORT_KERNEL_US * 1_000)),
        ]),
    };
    let config = SliceConfig::default();
    let sub_kernels = tessera_ptx::plan(GRID, config).map_or(1, |s| s.len());
    let gpus = GpuSpec::uniform(1, Bytes::gib(16));
    let mut runs = Vec::new();
    for sliced in [false, true] {
        let trial = format!("a long kernel beside short ones, sliced: {sliced}");
        let sim_error = |source| ExperimentError::Sim { trial: trial.clone(), source };
        let node = Scheduler::FairGv.node(k, 2);
        let node = crate::programs::NodeModel { slicing: sliced.then_some(config), ..node };
        let policy = Scheduler::FairGv
            .policy(k)
            .build(&gpus)
            .map_err(|e| ExperimentError::Config(format!("{trial}: {e}")))?;
        let out = ProgramSim::new(&[long.clone(), short.clone()], node, policy)
            .and_then(|s| s.run(Nanos::from_secs(SECONDS)))
            .map_err(sim_error)?;
        let total = (out.gpu_ns[0] + out.gpu_ns[1]).max(1) as f64;
        runs.push(LongKernelRun {
            sliced,
            short_share: out.gpu_ns[1] as f64 / total,
            gpu_busy: out.gpu_busy,
            quanta: [out.picks[0], out.picks[1]],
        });
    }
    Ok(LongKernel { sub_kernels, runs })
}

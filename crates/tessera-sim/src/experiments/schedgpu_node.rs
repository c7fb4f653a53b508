//! schedGPU's node on the program engine: each application a program run once —
//! its CPU phases as CPU work, each GPU phase as an allocation of its memory, a kernel
//! of the phase's length and intensity on the processor-shared GPU, a wait for it, and
//! the memory's release — on a host of `cores` cores taking one job per core in order
//! as cores free up (schedGPU §6). The memory decisions are the core's `MemSafe`,
//! through the events and actions the daemon uses; the program engine checks that
//! granted memory never exceeds the GPU's.

use crate::engine::SimError;
use crate::programs::Sample;
use crate::programs::{
    self, Admission, Coscheduling, CpuModel, Device, NodeModel, Program, ProgramSim, ProgramTenant,
    WaitMode,
};
use crate::workloads::schedgpu::{AppProfile, Phase};
use serde::{Deserialize, Serialize};
use tessera_core::{Bytes, Nanos, Policy};

/// One job: an application instance with its priority.
#[derive(Clone, Debug)]
pub struct AppJob {
    /// Its profile.
    pub profile: AppProfile,
    /// Priority for the priority notification policies.
    pub priority: u8,
}

/// What one job experienced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// Application name.
    pub app: String,
    /// From its start on a core to its end, seconds.
    pub run_s: f64,
    /// Time spent waiting for GPU memory, seconds.
    pub waited_s: f64,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    /// First start to last end, seconds.
    pub makespan_s: f64,
    /// Average GPU utilisation over the makespan (0-1).
    pub gpu_util: f64,
    /// Average fraction of GPU memory in use over the makespan (0-1).
    pub memory_util: f64,
    /// Per job, in job order.
    pub jobs: Vec<JobOutcome>,
    /// The node's state over time.
    pub samples: Vec<Sample>,
}

/// The application as a program run once. Memory is pre-allocated when a GPU phase
/// needs more than is held and post-freed when it needs less (or a CPU phase or the end
/// comes), so a phase at lower memory gives the difference back while the job runs on.
fn program(profile: &AppProfile) -> Program {
    let mut phases = Vec::new();
    let mut held = Bytes(0);
    for phase in &profile.phases {
        match *phase {
            Phase::Cpu(t) => {
                hold(&mut phases, &mut held, Bytes(0));
                phases.push(programs::Phase::Cpu(t));
            }
            Phase::Held { cpu, memory } => {
                hold(&mut phases, &mut held, memory);
                phases.push(programs::Phase::Cpu(cpu));
            }
            Phase::Gpu { alone, intensity, memory } => {
                hold(&mut phases, &mut held, memory);
                phases
                    .extend([programs::Phase::Kernel { alone, intensity }, programs::Phase::Drain]);
            }
        }
    }
    hold(&mut phases, &mut held, Bytes(0));
    Program::once(phases)
}

/// Allocate or free the difference between what is `held` and `memory`.
fn hold(phases: &mut Vec<programs::Phase>, held: &mut Bytes, memory: Bytes) {
    if memory.0 > held.0 {
        phases.push(programs::Phase::Alloc(Bytes(memory.0 - held.0)));
    } else if memory.0 < held.0 {
        phases.push(programs::Phase::Free(Bytes(held.0 - memory.0)));
    }
    *held = memory;
}

/// The host: `cores` cores, one job each, so the CPU scheduler never has two threads
/// to choose between and its costs (all zero here) never apply; a job waiting for its
/// kernel blocks.
fn node(cores: usize, gpu_memory: Bytes) -> NodeModel {
    NodeModel {
        cpu: CpuModel {
            cores,
            switch: Nanos::ZERO,
            wakeup_granularity: Nanos::ZERO,
            wake_lag: Nanos::ZERO,
            tick: Nanos::ZERO,
        },
        wait: WaitMode::Hybrid { spin: Nanos::ZERO },
        device: Device::Shared,
        coscheduling: Coscheduling::None,
        admission: Admission::OnePerCore,
        gpu_memory,
        slicing: None,
    }
}

/// Run `jobs` on a host with `cores` cores and one GPU of `gpu_memory`, memory admitted
/// by `policy`. Jobs start in order as cores free up.
pub fn run(
    jobs: &[AppJob],
    cores: usize,
    gpu_memory: Bytes,
    policy: Box<dyn Policy>,
) -> Result<NodeRun, SimError> {
    let tenants: Vec<ProgramTenant> = jobs
        .iter()
        .map(|j| ProgramTenant {
            weight: 1,
            core: 0,
            priority: j.priority,
            arrive: Nanos::ZERO,
            gpu: 0,
            declares: tessera_core::Bytes(0),
            program: program(&j.profile),
        })
        .collect();
    let out = ProgramSim::new(&tenants, node(cores, gpu_memory), policy)?.sampled().run_to_end()?;
    let secs = |ns: u64| Nanos(ns).as_secs_f64();
    Ok(NodeRun {
        makespan_s: secs(out.duration_ns),
        gpu_util: out.gpu_busy,
        memory_util: out.memory_busy,
        jobs: jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobOutcome {
                app: j.profile.name.clone(),
                run_s: secs(out.ended_ns[i].unwrap_or(out.duration_ns) - out.started_ns[i]),
                waited_s: secs(out.memory_wait_ns[i]),
            })
            .collect(),
        samples: out.samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::schedgpu::{Constants, GPU_MEMORY, ara, blast, mummer};
    use tessera_core::Policy;
    use tessera_core::policies::memsafe::NotificationPolicy;
    use tessera_core::{GpuSpec, PolicyConfig};

    fn memsafe(n: NotificationPolicy) -> Box<dyn Policy> {
        PolicyConfig::MemSafe { notification: n }.build(&GpuSpec::uniform(1, GPU_MEMORY)).unwrap()
    }

    #[test]
    fn one_core_runs_jobs_back_to_back_at_their_alone_times() {
        let jobs: Vec<AppJob> =
            [ara(&Constants::USED), mummer(&Constants::USED), blast(&Constants::USED)]
                .into_iter()
                .map(|profile| AppJob { profile, priority: 0 })
                .collect();
        let r = run(&jobs, 1, GPU_MEMORY, memsafe(NotificationPolicy::Fifo)).unwrap();
        let alone: f64 = jobs.iter().map(|j| j.profile.alone().as_secs_f64()).sum();
        assert!((r.makespan_s - alone).abs() < 1e-6, "{} vs {}", r.makespan_s, alone);
        assert!(r.jobs.iter().all(|j| j.waited_s == 0.0));
        // the GPU was busy exactly the GPU phases' time
        let gpu: f64 = jobs
            .iter()
            .flat_map(|j| &j.profile.phases)
            .map(|p| match p {
                Phase::Gpu { alone, intensity, .. } => alone.as_secs_f64() * intensity,
                Phase::Cpu(_) | Phase::Held { .. } => 0.0,
            })
            .sum();
        assert!((r.gpu_util * r.makespan_s - gpu).abs() < 1e-6, "{} vs {gpu}", r.gpu_util);
    }

    #[test]
    fn memory_is_never_overcommitted_and_big_jobs_wait() {
        // 4 GPU-BLAST at 36% each at their peak: two fit at once, the others wait
        let jobs: Vec<AppJob> =
            (0..4).map(|_| AppJob { profile: blast(&Constants::USED), priority: 0 }).collect();
        let r = run(&jobs, 12, GPU_MEMORY, memsafe(NotificationPolicy::Fifo)).unwrap();
        assert!(r.samples.iter().all(|s| s.memory <= 1.0));
        assert_eq!(r.jobs.iter().filter(|j| j.waited_s > 0.0).count(), 2);
    }

    /// §6: GPU-BLAST's memory falls "below 30% towards the end". When the first two
    /// instances reach their tails (30% each), what they free lets a third start at its
    /// 36% peak before either ends: three hold memory at once, 96% of the GPU (the old
    /// profile held 36% to the end: never more than two).
    #[test]
    fn blasts_falling_memory_lets_a_third_instance_in_before_the_first_two_end() {
        let k = Constants::USED;
        let jobs: Vec<AppJob> =
            (0..3).map(|_| AppJob { profile: blast(&k), priority: 0 }).collect();
        let r = run(&jobs, 12, GPU_MEMORY, memsafe(NotificationPolicy::Fifo)).unwrap();
        let peak = r.samples.iter().map(|s| s.memory).fold(0.0, f64::max);
        assert!(peak > 0.36 + 2.0 * k.blast_tail_memory - 0.01 && peak <= 1.0, "{peak}");
        let first_end = r.jobs[..2].iter().map(|j| j.run_s).fold(f64::MAX, f64::min);
        // it holds memory from its start: it gets it when its wait ends
        assert!(matches!(blast(&k).phases[0], Phase::Held { .. }));
        let third_starts_gpu = r.jobs[2].waited_s;
        assert!(third_starts_gpu < first_end, "{third_starts_gpu} vs {first_end}");
    }

    /// A phase at lower memory frees the difference and the end frees the rest: the
    /// ledger is back at zero when the job ends, and the GPU is never held beyond it.
    #[test]
    fn a_profiles_memory_steps_are_freed_exactly() {
        let p = blast(&Constants::USED);
        let prog = program(&p);
        let (mut held, mut peak) = (0i128, 0i128);
        for phase in &prog.phases {
            match phase {
                programs::Phase::Alloc(b) => held += i128::from(b.0),
                programs::Phase::Free(b) => held -= i128::from(b.0),
                _ => {}
            }
            assert!(held >= 0);
            peak = peak.max(held);
        }
        assert_eq!(held, 0);
        assert_eq!(peak, i128::from(p.peak_memory().0));
    }

    #[test]
    fn processor_sharing_slows_co_running_gpu_phases() {
        // two identical GPU-only jobs at intensity 1: together they take twice as long
        let profile = AppProfile {
            name: "x".into(),
            phases: vec![Phase::Gpu {
                alone: Nanos::from_secs(10),
                intensity: 1.0,
                memory: Bytes::mib(10),
            }],
        };
        let jobs =
            vec![AppJob { profile: profile.clone(), priority: 0 }, AppJob { profile, priority: 0 }];
        let r = run(&jobs, 2, GPU_MEMORY, memsafe(NotificationPolicy::Mmu)).unwrap();
        assert!((r.makespan_s - 20.0).abs() < 1e-6);
        assert!((r.gpu_util - 1.0).abs() < 1e-9);
    }
}

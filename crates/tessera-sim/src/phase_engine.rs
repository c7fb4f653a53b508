//! A second engine, for schedGPU's experiments: whole applications that alternate CPU
//! and GPU phases on a host with a fixed number of cores and one GPU. A job takes a
//! core; before each GPU phase it asks the policy for its memory (waiting, core idle,
//! until granted) and returns it at the phase's end. Jobs in GPU phases share the GPU
//! by processor sharing: each keeps it busy `intensity` of the time when alone, and when
//! the intensities sum above 1 every one of them slows down by that sum. The GPU is
//! `tessera-gpu`'s shared model ([`SharedGpu`], processor sharing), the one the task
//! engine and the daemon's emulated GPUs run; time is in whole nanoseconds, event by
//! event (no step).
//!
//! The memory decisions come from a core policy (`MemSafe`) through the same events and
//! actions the daemon will use; the engine checks that granted memory never exceeds
//! the GPU's capacity.

use crate::engine::SimError;
use crate::workloads::schedgpu::{AppProfile, Phase};
use serde::{Deserialize, Serialize};
use tessera_core::event::MemoryWait;
use tessera_core::{
    Action, Bytes, Event, GpuId, MemRequestId, Nanos, Policy, ServiceClass, TenantId, TenantSpec,
};
use tessera_gpu::sharing::{SharedGpu, Sharing};

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

/// A sample of the node's state, taken at every change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Time, seconds.
    pub t: f64,
    /// GPU utilisation (0-1).
    pub gpu: f64,
    /// GPU memory in use (0-1).
    pub memory: f64,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseRun {
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

#[derive(Clone, Debug)]
enum State {
    Pending,
    Cpu {
        until: Nanos,
    },
    Waiting {
        since: Nanos,
    },
    /// Its GPU phase runs on the model as piece `j`.
    Gpu,
    Done,
}

struct Job<'a> {
    spec: &'a AppJob,
    phase: usize,
    state: State,
    started: Nanos,
    waited: Nanos,
    ended: Nanos,
}

/// Run `jobs` on a host with `cores` cores and one GPU of `gpu_memory`, memory admitted
/// by `policy`. Jobs start in order as cores free up.
pub fn run(
    jobs: &[AppJob],
    cores: usize,
    gpu_memory: Bytes,
    mut policy: Box<dyn Policy>,
) -> Result<PhaseRun, SimError> {
    let label = policy.label();
    let violation = |at: Nanos, what: String| SimError::PolicyViolation {
        policy: label.clone(),
        at_ns: at.0,
        what,
    };
    let mut js: Vec<Job> = jobs
        .iter()
        .map(|spec| Job {
            spec,
            phase: 0,
            state: State::Pending,
            started: Nanos::ZERO,
            waited: Nanos::ZERO,
            ended: Nanos::ZERO,
        })
        .collect();
    let mut now = Nanos::ZERO;
    let mut used = Bytes(0);
    let mut model = SharedGpu::new(Sharing::Processor);
    // memory-ns in use
    let mut mem_integral = 0u128;
    let mut samples = Vec::new();
    let mut actions = Vec::new();
    let mut next_request = 0u64;
    let mut requests: Vec<(MemRequestId, usize)> = Vec::new();
    let gpu = GpuId(0);

    // Deliver an event and apply the memory decisions it produces.
    macro_rules! deliver {
        ($event:expr) => {{
            actions.clear();
            policy.on_event(now, &$event, &mut actions);
            for a in actions.drain(..) {
                match a {
                    Action::GrantMemory { request } => {
                        let Some(pos) = requests.iter().position(|(r, _)| *r == request) else {
                            return Err(violation(
                                now,
                                format!("grant of unknown request {request}"),
                            ));
                        };
                        let (_, j) = requests.swap_remove(pos);
                        used.0 += js[j].spec.profile.memory.0;
                        if used > gpu_memory {
                            return Err(violation(
                                now,
                                format!("granted {} of {} bytes", used.0, gpu_memory.0),
                            ));
                        }
                        let Phase::Gpu { alone, intensity } =
                            js[j].spec.profile.phases[js[j].phase]
                        else {
                            return Err(violation(now, "grant outside a GPU phase".into()));
                        };
                        if let State::Waiting { since } = js[j].state {
                            js[j].waited += now - since;
                        }
                        if let Err(e) = model.start(now.0, j as u64, alone.0, intensity) {
                            return Err(violation(now, format!("job {j}'s GPU phase: {e}")));
                        }
                        js[j].state = State::Gpu;
                    }
                    Action::DenyMemory { request, reason } => {
                        return Err(violation(
                            now,
                            format!(
                                "request {request} denied ({reason:?}) though it waits forever"
                            ),
                        ));
                    }
                    _ => {}
                }
            }
        }};
    }

    // Start the phase `js[j].phase` of job j (or finish the job).
    macro_rules! begin_phase {
        ($j:expr) => {{
            let j = $j;
            match js[j].spec.profile.phases.get(js[j].phase).copied() {
                None => {
                    js[j].state = State::Done;
                    js[j].ended = now;
                    deliver!(Event::TenantLeft { tenant: TenantId(j as u64) });
                }
                Some(Phase::Cpu(t)) => js[j].state = State::Cpu { until: now + t },
                Some(Phase::Gpu { .. }) => {
                    let request = MemRequestId(next_request);
                    next_request += 1;
                    requests.push((request, j));
                    js[j].state = State::Waiting { since: now };
                    let bytes = js[j].spec.profile.memory;
                    deliver!(Event::MemoryRequested {
                        request,
                        tenant: TenantId(j as u64),
                        gpu,
                        bytes,
                        wait: MemoryWait::Forever
                    });
                }
            }
        }};
    }

    macro_rules! fill_cores {
        () => {{
            let busy =
                js.iter().filter(|j| !matches!(j.state, State::Pending | State::Done)).count();
            let free = cores.saturating_sub(busy);
            let starting: Vec<usize> = (0..js.len())
                .filter(|&j| matches!(js[j].state, State::Pending))
                .take(free)
                .collect();
            for j in starting {
                js[j].started = now;
                let mut spec = TenantSpec::new(TenantId(j as u64), ServiceClass::Batch);
                spec.priority = js[j].spec.priority;
                spec.memory = js[j].spec.profile.memory;
                deliver!(Event::TenantRegistered(spec));
                begin_phase!(j);
            }
        }};
    }

    fill_cores!();
    loop {
        let share: f64 = model.shares().map(|(_, x)| x).sum();
        samples.push(Sample {
            t: now.as_secs_f64(),
            gpu: share.min(1.0),
            memory: used.0 as f64 / gpu_memory.0 as f64,
        });
        // the next change: a CPU phase's end or the model's next finish
        let cpu_next = js
            .iter()
            .filter_map(|j| match j.state {
                State::Cpu { until } => Some(until),
                _ => None,
            })
            .min();
        let gpu_next = model.next_finish().map(|(at, _)| Nanos(at));
        let Some(next) = cpu_next.into_iter().chain(gpu_next).min() else { break };
        mem_integral += u128::from(used.0) * u128::from((next - now).0);
        now = next;
        // phase ends at this instant, in job order
        let mut ending: Vec<usize> = (0..js.len())
            .filter(|&j| matches!(js[j].state, State::Cpu { until } if until <= now))
            .collect();
        loop {
            match model.pop_finished(now.0) {
                Ok(Some(j)) => ending.push(j as usize),
                Ok(None) => break,
                Err(e) => return Err(violation(now, format!("the GPU model: {e}"))),
            }
        }
        ending.sort_unstable();
        for j in ending {
            if let State::Gpu = js[j].state {
                used.0 -= js[j].spec.profile.memory.0;
                js[j].state = State::Cpu { until: now }; // placeholder until the next phase begins
                deliver!(Event::MemoryFreed {
                    tenant: TenantId(j as u64),
                    gpu,
                    bytes: js[j].spec.profile.memory
                });
            }
            js[j].phase += 1;
            begin_phase!(j);
        }
        fill_cores!();
    }
    let stuck = js.iter().filter(|j| !matches!(j.state, State::Done)).count();
    if stuck > 0 {
        return Err(SimError::Stalled { policy: label, unfinished: stuck });
    }
    let makespan = now.as_secs_f64();
    let span = now.0.max(1) as f64;
    Ok(PhaseRun {
        makespan_s: makespan,
        gpu_util: if now.0 > 0 { model.usage().sm_busy_ns / span } else { 0.0 },
        memory_util: if now.0 > 0 { mem_integral as f64 / gpu_memory.0 as f64 / span } else { 0.0 },
        jobs: js
            .iter()
            .map(|j| JobOutcome {
                app: j.spec.profile.name.clone(),
                run_s: (j.ended - j.started).as_secs_f64(),
                waited_s: j.waited.as_secs_f64(),
            })
            .collect(),
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::schedgpu::{Constants, GPU_MEMORY, ara, blast, mummer};
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
                Phase::Gpu { alone, intensity } => alone.as_secs_f64() * intensity,
                Phase::Cpu(_) => 0.0,
            })
            .sum();
        assert!((r.gpu_util * r.makespan_s - gpu).abs() < 1e-6, "{} vs {gpu}", r.gpu_util);
    }

    #[test]
    fn memory_is_never_overcommitted_and_big_jobs_wait() {
        // 4 GPU-BLAST at 36% each: at most two fit at once
        let jobs: Vec<AppJob> =
            (0..4).map(|_| AppJob { profile: blast(&Constants::USED), priority: 0 }).collect();
        let r = run(&jobs, 12, GPU_MEMORY, memsafe(NotificationPolicy::Fifo)).unwrap();
        assert!(r.samples.iter().all(|s| s.memory <= 1.0));
        assert!(r.samples.iter().map(|s| s.memory).fold(0.0, f64::max) <= 0.72 + 1e-9);
        assert_eq!(r.jobs.iter().filter(|j| j.waited_s > 0.0).count(), 2);
    }

    #[test]
    fn processor_sharing_slows_co_running_gpu_phases() {
        // two identical GPU-only jobs at intensity 1: together they take twice as long
        let profile = AppProfile {
            name: "x".into(),
            memory: Bytes::mib(10),
            phases: vec![Phase::Gpu { alone: Nanos::from_secs(10), intensity: 1.0 }],
        };
        let jobs =
            vec![AppJob { profile: profile.clone(), priority: 0 }, AppJob { profile, priority: 0 }];
        let r = run(&jobs, 2, GPU_MEMORY, memsafe(NotificationPolicy::Mmu)).unwrap();
        assert!((r.makespan_s - 20.0).abs() < 1e-6);
        assert!((r.gpu_util - 1.0).abs() < 1e-9);
    }
}

//! The block device with kernels placed by the policy ([`Placing::Policy`]), as the
//! task engine runs them: each launch a task submitted to the policy, run on the GPU
//! its dispatch names, its end reported; a migration stops a tenant's running kernels
//! and resumes them on the target with the blocks they have left, after the copy of
//! its declared memory (DCUDA's policy, its applications as programs).

use super::*;
use crate::gpu_meter::GpuMeter;
use crate::slot_model::{Piece, RAISED_STREAM};
use tessera_core::{LaunchInfo, PerMille};
use tessera_gpu::migration::MigrationCost;

/// A kernel the policy places: a task of its, by id (its id is its place in launch
/// order, which is also its piece's id on the block model).
#[derive(Debug)]
pub(super) struct PlacedKernel {
    thread: usize,
    alone: Nanos,
    launch: Launch,
    at: KernelAt,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum KernelAt {
    /// Submitted, not dispatched.
    Waiting,
    Running {
        gpu: usize,
        since: Nanos,
    },
    /// On its way to another GPU.
    Moving,
    Done,
}

/// A tenant's running kernels on their way to `to`: each with what is left of it.
#[derive(Debug)]
pub(super) struct Moving {
    thread: usize,
    to: usize,
    kernels: Vec<(TaskId, Piece)>,
}

/// One placed GPU's measures at the end of a run of `span` (`now`, the end), with
/// `sm_busy_ns` from the block model: the task engine's, from the meter both keep.
pub(super) fn measures(m: &mut GpuMeter, now: Nanos, span: Nanos, sm_busy_ns: f64) -> PlacedGpu {
    let span_ns = span.0.max(1) as f64;
    let busy = m.busy_until(now);
    m.settle(now);
    PlacedGpu {
        busy: busy.0 as f64 / span_ns,
        sm_weighted: sm_busy_ns / span_ns,
        extra_app_s: m.extra_app_ns() as f64 / 1e9,
    }
}

/// A kernel of thread `who` started on a GPU.
fn kernel_started(m: &mut GpuMeter, now: Nanos, who: usize) {
    m.started(now);
    m.joined(now, who);
}

/// A kernel of thread `who` stopped on a GPU.
fn kernel_stopped(m: &mut GpuMeter, now: Nanos, who: usize) {
    m.stopped(now);
    m.left(now, who);
}

impl ProgramSim {
    /// How moving a tenant costs, when the policy places the block device's kernels.
    pub(super) fn policy_places(&self) -> Option<MigrationCost> {
        match self.model.device {
            Device::Blocks(BlocksDevice { placing: Placing::Policy { migration }, .. }) => {
                Some(migration)
            }
            _ => None,
        }
    }

    /// Thread `i` launched a kernel: a task the policy is told of, with its launch
    /// shape and the share of a GPU its occupancy gives (the task engine's `LaunchInfo`
    /// for DCUDA's kernels), and that its next synchronise waits for.
    pub(super) fn submit_kernel(
        &mut self,
        i: usize,
        alone: Nanos,
        launch: Launch,
    ) -> Result<(), SimError> {
        let Some(shapes) = self.shapes.as_mut() else {
            return Err(self.violation("a placed kernel off the block device".into()));
        };
        let demand = shapes.occupancy(&launch).demand;
        let id = TaskId(self.piece_owner.len() as u64);
        self.piece_owner.push(i);
        self.placed.push(PlacedKernel { thread: i, alone, launch, at: KernelAt::Waiting });
        self.open_kernels[i].push(id);
        let t = &mut self.threads[i];
        t.in_device += 1;
        t.launched += 1;
        t.gpu_ns += alone.0;
        self.changed = true;
        self.deliver(Event::TaskSubmitted(TaskSpec {
            id,
            tenant: TenantId(i as u64),
            // each program runs one kernel: its own id (the policy caches per kernel,
            // grid and block)
            kernel: i as u32,
            memory: Bytes(0),
            launch: Some(LaunchInfo {
                grid_blocks: launch.grid_blocks,
                threads_per_block: launch.threads_per_block,
                demand: PerMille((demand * 1000.0).round() as u16),
            }),
            batch: 1,
        }))
    }

    /// The policy dispatched `task` to `placement`: it starts there now, its stream's
    /// priority the tenant's (raised if the policy raised it).
    pub(super) fn place_kernel(
        &mut self,
        task: TaskId,
        placement: Placement,
    ) -> Result<(), SimError> {
        let gpus = self.shared.len();
        let Some(k) = self.placed.get(task.0 as usize) else {
            return Err(self.violation(format!("dispatch of unknown {task}")));
        };
        if k.at != KernelAt::Waiting {
            return Err(self.violation(format!("{task} dispatched while {:?}", k.at)));
        }
        let gpu = placement.gpu.0 as usize;
        if gpu >= gpus || placement.partition.is_some() {
            return Err(self.violation(format!(
                "{task} dispatched to {placement:?}: the device has {gpus} whole GPUs"
            )));
        }
        let i = k.thread;
        let raised = if self.raised[i] { RAISED_STREAM } else { 0 };
        let piece = Piece {
            work: k.alone.0,
            demand: 1.0,
            launch: Some(KernelLaunch {
                context: i as u32,
                launch: k.launch,
                alone_ns: k.alone.0,
                priority: i32::from(self.threads[i].priority) + raised,
            }),
        };
        if let Err(e) = self.shared[gpu].start(self.now.0, task.0, piece) {
            return Err(self.violation(format!("{task} on GPU {gpu}: {e}")));
        }
        self.placed[task.0 as usize].at = KernelAt::Running { gpu, since: self.now };
        kernel_started(&mut self.meters[gpu], self.now, i);
        self.changed = true;
        self.rearm_shared(gpu);
        Ok(())
    }

    /// Placed kernel `piece` finished on `gpu`: the policy hears of it first (as the
    /// task engine reports a task's end before its job goes on).
    pub(super) fn placed_finished(&mut self, gpu: usize, piece: u64) -> Result<(), SimError> {
        let Some(k) = self.placed.get(piece as usize) else {
            return Err(self.violation(format!("GPU {gpu} finished unknown kernel {piece}")));
        };
        let KernelAt::Running { gpu: on, since } = k.at else {
            return Err(self.violation(format!("kernel {piece} finished while {:?}", k.at)));
        };
        if on != gpu {
            return Err(self.violation(format!("kernel {piece} of GPU {on} finished on {gpu}")));
        }
        let thread = k.thread;
        self.placed[piece as usize].at = KernelAt::Done;
        kernel_stopped(&mut self.meters[gpu], self.now, thread);
        self.open_kernels[thread].retain(|t| t.0 != piece);
        self.deliver(Event::TaskFinished {
            task: TaskId(piece),
            placement: Placement::whole(GpuId(gpu as u32)),
            ran_for: self.now - since,
            measured: true,
            result: Ok(()),
        })
    }

    /// Move `tenant`'s running kernels from `from` to `to`: each stops now and resumes
    /// there with the blocks it has left (its remaining work carried over exactly, as
    /// the task engine does) once the tenant's declared memory is copied.
    pub(super) fn migrate(
        &mut self,
        tenant: TenantId,
        from: GpuId,
        to: GpuId,
        cost: MigrationCost,
    ) -> Result<(), SimError> {
        let (f, t, i) = (from.0 as usize, to.0 as usize, tenant.0 as usize);
        let gpus = self.shared.len();
        if f >= gpus || t >= gpus || f == t {
            return Err(self.violation(format!("migration of {tenant} from {from} to {to}")));
        }
        if i >= self.threads.len() {
            return Err(self.violation(format!("migration of unknown {tenant}")));
        }
        let mut kernels = Vec::new();
        for id in self.open_kernels[i].clone() {
            let k = &self.placed[id.0 as usize];
            let KernelAt::Running { gpu, .. } = k.at else { continue };
            if gpu != f {
                continue;
            }
            let (alone, launch) = (k.alone, k.launch);
            let left = match self.shared[f].remove(self.now.0, id.0) {
                Ok(left) => left,
                Err(e) => return Err(self.violation(format!("{id} leaving GPU {f}: {e}"))),
            };
            // the blocks it has left, in proportion to its work left
            let share = left as f64 / alone.0.max(1) as f64;
            let grid_blocks = ((launch.grid_blocks as f64 * share).ceil() as u64).max(1);
            let raised = if self.raised[i] { RAISED_STREAM } else { 0 };
            let piece = Piece {
                work: left.max(1),
                demand: 1.0,
                launch: Some(KernelLaunch {
                    context: i as u32,
                    launch: Launch { grid_blocks, ..launch },
                    alone_ns: left.max(1),
                    priority: i32::from(self.threads[i].priority) + raised,
                }),
            };
            self.placed[id.0 as usize].at = KernelAt::Moving;
            kernel_stopped(&mut self.meters[f], self.now, i);
            kernels.push((id, piece));
        }
        self.rearm_shared(f);
        self.changed = true;
        let bytes = self.declared[i].0;
        let arrive = self.now + Nanos(cost.duration(bytes));
        self.moving.push(Some(Moving { thread: i, to: t, kernels }));
        self.schedule(arrive, Ev::MigrationArrives(self.moving.len() - 1));
        Ok(())
    }

    /// Migration `m` arrives: its kernels resume on the target (their time there
    /// counted from now), and the policy hears it is done.
    pub(super) fn migration_arrives(&mut self, m: usize) -> Result<(), SimError> {
        let Some(Moving { thread, to, kernels }) = self.moving.get_mut(m).and_then(Option::take)
        else {
            return Ok(());
        };
        for (id, piece) in kernels {
            if let Err(e) = self.shared[to].start(self.now.0, id.0, piece) {
                return Err(self.violation(format!("{id} arriving on GPU {to}: {e}")));
            }
            self.placed[id.0 as usize].at = KernelAt::Running { gpu: to, since: self.now };
            kernel_started(&mut self.meters[to], self.now, thread);
        }
        self.changed = true;
        self.rearm_shared(to);
        self.deliver(Event::MigrationDone { tenant: TenantId(thread as u64), to: GpuId(to as u32) })
    }
}

#[cfg(test)]
mod tests;

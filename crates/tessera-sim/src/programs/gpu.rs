//! The program engine's GPU side: rings, the device's queue or the shared device, and
//! the client side of a quantum (the launch gate's rule, `tessera_core::gate`), with
//! coscheduling at a quantum's start and end (see the module above).

use super::*;
use tessera_core::gate::{Holder, Step};

impl ProgramSim {
    /// Thread `i`'s ring gained a kernel: ask for a quantum, or submit it if online.
    pub(super) fn ring_grew(&mut self, i: usize) -> Result<(), SimError> {
        self.request_quantum(i)?;
        if self.online.as_ref().is_some_and(|o| o.thread == i) {
            self.pump()?;
            self.start_front();
        }
        Ok(())
    }

    /// Kernels a ring holds (the shared device has no rings: a launch goes straight
    /// to the device).
    pub(super) fn ring_cap(&self) -> usize {
        match self.model.device {
            Device::Queue(q) => q.ring,
            Device::Shared | Device::Blocks(_) => usize::MAX,
        }
    }

    /// The queue device's launch gate (the shared device hands out no quanta).
    pub(super) fn gate(&self) -> Option<Gate> {
        match self.model.device {
            Device::Queue(q) => Some(q.gate),
            Device::Shared | Device::Blocks(_) => None,
        }
    }

    pub(super) fn work_conserving(&self) -> bool {
        !matches!(self.gate(), Some(Gate::Collaborative { work_conserving: false, .. }))
    }

    /// Ask the policy for a quantum for thread `i` if it has work (or, not work
    /// conserving, always) and has none asked for.
    pub(super) fn request_quantum(&mut self, i: usize) -> Result<(), SimError> {
        let t = &self.threads[i];
        if t.quantum.is_some() || (t.ring.is_empty() && self.work_conserving()) {
            return Ok(());
        }
        let id = TaskId(self.task_owner.len() as u64);
        self.task_owner.push(i);
        self.threads[i].quantum = Some(id);
        self.deliver(Event::TaskSubmitted(TaskSpec {
            id,
            tenant: TenantId(i as u64),
            kernel: 0,
            memory: tessera_core::Bytes(0),
            launch: None,
            batch: 1,
        }))
    }

    /// The online thread submits what its gate allows into the device's queue.
    pub(super) fn pump(&mut self) -> Result<(), SimError> {
        let Device::Queue(queue) = self.model.device else { return Ok(()) };
        let Some(o) = &self.online else { return Ok(()) };
        let i = o.thread;
        let room = queue.depth.saturating_sub(self.device.len());
        // how many it may submit, and whether they come out of the slice's budget
        let (allowed, budgeted) = match queue.gate {
            Gate::TimeShare { .. } => (room, false),
            Gate::Collaborative { .. } if o.draining => (0, false),
            Gate::Collaborative { rule, .. } if rule.measures(o.launches) => {
                // measured one by one: the next waits for the last one's synchronisation
                (usize::from(self.threads[i].in_device == 0 && !self.syncing), false)
            }
            // the last measured kernel's synchronisation gives the mean
            Gate::Collaborative { .. } if o.measuring.is_some() => (0, false),
            Gate::Collaborative { slice, rule, .. } => {
                let left = SliceRule::launches_left(o.used, slice, rule.mean(o.measured));
                (usize::try_from(left).unwrap_or(usize::MAX), true)
            }
        };
        let mut moved = 0;
        for _ in 0..allowed.min(room) {
            let Some(kernel) = self.threads[i].ring.pop_front() else { break };
            self.device.push_back((i, kernel));
            self.threads[i].in_device += 1;
            moved += 1;
        }
        if moved > 0 {
            if let (Some(o), Gate::Collaborative { rule, work_conserving, .. }) =
                (&mut self.online, queue.gate)
            {
                o.launches += moved as u64;
                o.idle_since = None;
                o.last_launch = self.now;
                if budgeted {
                    o.used += Nanos(rule.mean(o.measured).0 * moved as u64);
                    o.unsynced_since.get_or_insert(self.now);
                    if work_conserving {
                        let at = self.now + rule.idle_hold;
                        let generation = o.generation;
                        self.schedule(at, Ev::QuietUp(generation));
                    }
                } else {
                    o.measuring = Some(self.now);
                }
            }
            // room on its ring: a thread waiting to launch may go on
            self.wait_may_be_over(i)?;
        }
        Ok(())
    }

    /// Start the device's front kernel if the device is idle.
    pub(super) fn start_front(&mut self) {
        if self.front_since.is_some() || self.syncing {
            return;
        }
        if let Some(&(_, kernel)) = self.device.front() {
            self.front_since = Some(self.now);
            self.schedule(self.now + kernel, Ev::KernelEnds(self.device_generation));
        }
    }

    /// Start a kernel of thread `i` on the direct device: `intensity` for the fluid
    /// model, `launch` (its shape) for the block model, where thread `i` is context `i`.
    pub(super) fn start_shared(
        &mut self,
        i: usize,
        alone: Nanos,
        intensity: f64,
        launch: Option<Launch>,
    ) -> Result<(), SimError> {
        // The fluid model takes pieces finishing at one instant in id order: ids in
        // thread order make that the tenants' order, whatever order they launched in.
        // The block model dispatches kernels started at one instant in id order: ids
        // in launch order make that the order they reached the GPU, as a driver's
        // submissions do and as the task engine numbers its tasks (a thread order
        // there moved DCUDA's heavy load by up to 1.8% against the task engine).
        let piece = if launch.is_some() {
            self.piece_owner.push(i);
            (self.piece_owner.len() - 1) as u64
        } else {
            ((i as u64) << 32) | self.threads[i].launched
        };
        self.threads[i].launched += 1;
        let launch = launch.map(|launch| KernelLaunch {
            context: i as u32,
            launch,
            alone_ns: alone.0,
            priority: 0,
        });
        let start = Piece { work: alone.0, demand: intensity, launch };
        let gpu = self.threads[i].gpu;
        if let Err(e) = self.shared[gpu].start(self.now.0, piece, start) {
            return Err(self.violation(format!("thread {i}'s kernel: {e}")));
        }
        let t = &mut self.threads[i];
        t.in_device += 1;
        t.gpu_ns += tessera_gpu::rounding::round_u64(alone.0 as f64 * intensity);
        self.changed = true;
        self.rearm_shared(gpu);
        Ok(())
    }

    /// Schedule `gpu`'s next wake (superseding any earlier one): a finish, or on the
    /// block model a change of its own.
    pub(super) fn rearm_shared(&mut self, gpu: usize) {
        self.shared_generation[gpu] += 1;
        let generation = self.shared_generation[gpu];
        // (the block model's next change may end no kernel: its event then finds
        // nothing finished and asks again)
        if let Some((at, _)) = self.shared[gpu].next_wake() {
            self.schedule(Nanos(at), Ev::SharedFinish { gpu: gpu as u32, generation });
        }
    }

    /// `gpu`'s kernels finished by now: their calls are done.
    pub(super) fn shared_finishes(&mut self, gpu: usize) -> Result<(), SimError> {
        loop {
            let piece = match self.shared[gpu].pop_finished(self.now.0) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(self.violation(format!("GPU {gpu}: {e}"))),
            };
            let owner = match self.model.device {
                Device::Blocks(_) => self.piece_owner.get(piece as usize).copied(),
                Device::Shared | Device::Queue(_) => Some((piece >> 32) as usize),
            };
            let Some(owner) = owner else {
                return Err(
                    self.violation(format!("GPU {gpu} finished kernel {piece}, not one launched"))
                );
            };
            if self.policy_places().is_some() {
                self.placed_finished(gpu, piece)?;
            }
            let t = &mut self.threads[owner];
            t.in_device -= 1;
            t.calls += 1;
            self.wait_may_be_over(owner)?;
        }
        self.run_ahead(gpu)?;
        self.rearm_shared(gpu);
        Ok(())
    }

    /// The event is handled: nothing touches `gpu` before the next queued event, so
    /// its block model's changes before then that finish no kernel run here rather
    /// than as events of their own, as the task engine's do (issue 55: in a heavy
    /// least-loaded DCUDA run, 89% of the model's changes were a cohort of a kernel
    /// with no blocks left ending, each an event that finished nothing). Not in a
    /// sampled run, whose samples read the GPUs' busy share at later events (a model
    /// run ahead would show them its future), nor once every program has ended (the
    /// run stops at this instant and the models are read at it).
    fn run_ahead(&mut self, gpu: usize) -> Result<(), SimError> {
        if self.samples.is_some() || self.unfinished == 0 {
            return Ok(());
        }
        let Some(&Queued { at: next, .. }) = self.queue.peek() else { return Ok(()) };
        // a run for a duration reads the models at its end
        let horizon = self.until.map_or(next, |d| next.min(d + Nanos(1)));
        match self.shared[gpu].run_until_a_finish(horizon.0) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.violation(format!("GPU {gpu}: {e}"))),
        }
    }

    pub(super) fn kernel_ends(&mut self) -> Result<(), SimError> {
        let Some((owner, kernel)) = self.device.pop_front() else {
            return Err(self.violation("a kernel ended on an empty device".into()));
        };
        self.front_since = None;
        self.device_generation += 1;
        self.busy_ns += kernel.0;
        let t = &mut self.threads[owner];
        t.in_device -= 1;
        t.calls += 1;
        t.gpu_ns += kernel.0;
        if let Some(Gate::Collaborative { slice, .. }) = self.gate()
            && let Some(o) = self.online.as_mut().filter(|o| o.thread == owner)
        {
            if o.measuring.is_some() {
                // a measured kernel: its synchronisation follows at once
                self.start_sync();
            } else if SliceRule::used_up(o.used, slice) && self.threads[owner].in_device == 0 {
                // the slice's last kernel ran: synchronise after it, then give it back
                o.draining = true;
                self.start_settling();
            } else if o.settle_wanted && self.threads[owner].in_device == 0 {
                // the watcher's wait for what was launched ends: measured
                o.settle_wanted = false;
                self.start_settling();
            }
        }
        self.wait_may_be_over(owner)?;
        self.pump()?;
        self.start_front();
        self.maybe_release()
    }

    /// The online quantum's slice time is up, or the policy asked to end it: time
    /// sharing ends it now; collaborative scheduling submits nothing more and ends it
    /// once what it submitted has run.
    pub(super) fn end_quantum(&mut self) -> Result<(), SimError> {
        match self.gate() {
            Some(Gate::TimeShare { .. }) => self.release(),
            Some(Gate::Collaborative { .. }) => {
                if let Some(o) = &mut self.online {
                    o.draining = true;
                }
                self.maybe_release()
            }
            None => Ok(()),
        }
    }

    /// End the online quantum if its gate says it is over: drained, or — work
    /// conserving — idle for the rule's hold. Kernels counted at the mean are
    /// synchronised (measured) first. The decision is the gate's
    /// ([`SliceRule::step`](tessera_core::gate::SliceRule::step)), as in the interposer.
    pub(super) fn maybe_release(&mut self) -> Result<(), SimError> {
        let Some(o) = &self.online else { return Ok(()) };
        let Some(Gate::Collaborative { work_conserving, rule, .. }) = self.gate() else {
            return Ok(());
        };
        let t = &self.threads[o.thread];
        if t.in_device > 0 || self.syncing {
            return Ok(());
        }
        let unmeasured = o.unsynced_since.is_some();
        // quiet since it last had anything in flight: only a work-conserving holder with
        // nothing to launch; unmeasured kernels' quiet runs from the last launch and is
        // looked at when it may be up (`quiet`), as the interposer's watcher does
        let quiet_for = (work_conserving && t.ring.is_empty() && !unmeasured)
            .then(|| self.now - o.idle_since.unwrap_or(self.now));
        let holder = Holder { ended: o.draining, unmeasured, quiet_for };
        match rule.step(holder) {
            Step::Measure => {
                if let Some(o) = self.online.as_mut() {
                    o.draining = true;
                }
                self.start_settling();
                Ok(())
            }
            Step::GiveBack => self.release(),
            Step::Keep => {
                if quiet_for.is_some() {
                    // kept for the hold, then given back
                    let generation = o.generation;
                    let since = o.idle_since.unwrap_or(self.now);
                    if o.idle_since.is_none() {
                        self.schedule(since + rule.idle_hold, Ev::IdleUp(generation));
                    }
                    if let Some(o) = self.online.as_mut() {
                        o.idle_since = Some(since);
                    }
                }
                Ok(())
            }
        }
    }

    /// The interposer's watcher found no launch for the hold while kernels counted at the
    /// mean are unmeasured: it waits for them (a synchronisation once they have run,
    /// measuring them), and the hold before the slice is given back starts after it.
    pub(super) fn quiet(&mut self) -> Result<(), SimError> {
        let Some(Gate::Collaborative { rule, .. }) = self.gate() else { return Ok(()) };
        let now = self.now;
        let Some(o) = self.online.as_mut() else { return Ok(()) };
        if o.draining || o.unsynced_since.is_none() || o.settling {
            return Ok(());
        }
        let holder =
            Holder { ended: false, unmeasured: true, quiet_for: Some(now - o.last_launch) };
        if rule.step(holder) != Step::Measure {
            return Ok(());
        }
        if self.threads[o.thread].in_device == 0 && !self.syncing {
            self.start_settling();
        } else {
            o.settle_wanted = true;
        }
        Ok(())
    }

    /// Start a synchronisation on the device (idle GPU for the gate's `sync`).
    pub(super) fn start_sync(&mut self) {
        let Some(Gate::Collaborative { sync, .. }) = self.gate() else { return };
        self.syncing = true;
        self.schedule(self.now + sync, Ev::SyncEnds(self.device_generation));
    }

    /// Synchronise after kernels counted at the mean, measuring them.
    pub(super) fn start_settling(&mut self) {
        if let Some(o) = self.online.as_mut() {
            o.settling = true;
        }
        self.start_sync();
    }

    /// A synchronisation ended: account what it measured (the gate's rule).
    pub(super) fn synchronised(&mut self) {
        let Some(Gate::Collaborative { slice, .. }) = self.gate() else { return };
        let now = self.now;
        let Some(o) = self.online.as_mut() else { return };
        if let Some(at) = o.measuring.take() {
            o.measured += now - at;
            o.used += now - at;
        }
        if std::mem::take(&mut o.settling)
            && let Some(at) = o.unsynced_since.take()
        {
            // the count at the mean replaced by the time measured (idle gaps included,
            // as the interposer's wait measures them)
            o.settled += now - at;
            o.used = o.measured + o.settled;
            // an idle hold starts after the wait
            o.idle_since = None;
            o.settle_wanted = false;
        }
        if SliceRule::used_up(o.used, slice) {
            o.draining = true;
        }
    }

    /// End the online quantum: it is charged the time it held the GPU. A ring still
    /// holding kernels is backlogged: its next request is queued before the end is
    /// reported, as a vGPU's ring stays in the scheduler's run queue (the daemon's
    /// interposer asks only after; FairQueuing's spin covers that gap). A ring that
    /// emptied asks when its thread next launches.
    pub(super) fn release(&mut self) -> Result<(), SimError> {
        let Some(o) = self.online.take() else { return Ok(()) };
        self.threads[o.thread].quantum = None;
        self.unboost(o.thread);
        self.request_quantum(o.thread)?;
        let held = self.now - o.since;
        let ran_for = match self.gate() {
            Some(Gate::Collaborative { work_conserving: true, .. }) => {
                SliceRule::charge(o.used, held)
            }
            _ => held,
        };
        self.deliver(Event::TaskFinished {
            task: o.task,
            placement: Placement::whole(GpuId(0)),
            ran_for,
            measured: true,
            result: Ok(()),
        })
    }

    /// Thread `i`'s quantum ended: a coscheduling boost ends with it.
    pub(super) fn unboost(&mut self, i: usize) {
        if self.threads[i].boost != 1.0 {
            self.settle(self.threads[i].core);
            self.threads[i].boost = 1.0;
            self.retick(self.threads[i].core);
        }
    }

    /// The policy gave `task` the GPU.
    pub(super) fn dispatched(
        &mut self,
        task: TaskId,
        placement: Placement,
    ) -> Result<(), SimError> {
        let Some(&i) = self.task_owner.get(task.0 as usize) else {
            return Err(self.violation(format!("dispatch of unknown {task}")));
        };
        if placement != Placement::whole(GpuId(0)) {
            return Err(self.violation(format!("{task} dispatched to {placement:?}: one GPU")));
        }
        if self.threads[i].quantum != Some(task) {
            return Err(self.violation(format!("{task} dispatched after it ended")));
        }
        if self.online.is_some() {
            return Err(self.violation(format!("{task} dispatched to a busy GPU")));
        }
        let Some(gate) = self.gate() else {
            return Err(
                self.violation(format!("{task} dispatched: the shared device has no quanta"))
            );
        };
        self.online_generation += 1;
        let generation = self.online_generation;
        self.online = Some(Online {
            thread: i,
            task,
            since: self.now,
            launches: 0,
            measuring: None,
            measured: Nanos::ZERO,
            settled: Nanos::ZERO,
            used: Nanos::ZERO,
            unsynced_since: None,
            settling: false,
            idle_since: None,
            last_launch: self.now,
            settle_wanted: false,
            draining: false,
            generation,
        });
        self.threads[i].picks += 1;
        self.schedule(self.now + gate.slice(), Ev::SliceUp(generation));
        // GPU-centric coscheduling: an interactive tenant's thread runs now
        let clock = Nanos(self.threads[i].gpu_ns);
        if self.interactivity.is_interactive(TenantId(i as u64), clock) {
            match self.model.coscheduling {
                Coscheduling::GpuCentric => self.wake(i)?,
                Coscheduling::Boost => {
                    // its run time so far counted at its own weight
                    self.settle(self.threads[i].core);
                    self.threads[i].boost = tessera_core::interactive::boost_factor();
                    self.retick(self.threads[i].core);
                }
                Coscheduling::None | Coscheduling::CpuCentric => {}
            }
        }
        self.pump()?;
        self.start_front();
        self.maybe_release()
    }
}

//! The program engine's CPU: threads on cores by a weighted fair scheduler in the
//! manner of CFS, their phases stepped, waits and wake-ups (see the module above).

use super::*;

impl ProgramSim {
    /// Account the core's current thread up to now: core time, `vruntime`, and the
    /// progress of its CPU work or spin (after any switch still being paid).
    pub(super) fn settle(&mut self, core: usize) {
        let now = self.now;
        let c = &mut self.cores[core];
        let Some(i) = c.current else {
            c.since = now;
            return;
        };
        let elapsed = now.saturating_sub(c.since);
        let ran = now.saturating_sub(c.since.max(c.switch_until));
        c.since = now;
        let t = &mut self.threads[i];
        t.cpu_ns += elapsed.0;
        t.vruntime += elapsed.0 as f64 / (t.weight * t.boost);
        if t.wait.is_some() {
            t.spin_left = t.spin_left.saturating_sub(ran);
        } else if t.in_cpu {
            t.cpu_left = t.cpu_left.saturating_sub(ran);
        }
    }

    /// The runnable thread of `core` with the least `vruntime` (lowest index on ties).
    pub(super) fn pick(&self, core: usize) -> Option<usize> {
        self.on_core[core].iter().copied().filter(|i| !self.threads[*i].blocked).min_by(|a, b| {
            self.threads[*a].vruntime.total_cmp(&self.threads[*b].vruntime).then(a.cmp(b))
        })
    }

    /// Re-pick the thread of `core` and switch to it if it is another.
    pub(super) fn repick(&mut self, core: usize) -> Result<(), SimError> {
        self.settle(core);
        let pick = self.pick(core);
        if pick != self.cores[core].current {
            self.switch_to(core, pick)?;
        }
        Ok(())
    }

    pub(super) fn switch_to(&mut self, core: usize, thread: Option<usize>) -> Result<(), SimError> {
        self.settle(core);
        let now = self.now;
        let c = &mut self.cores[core];
        c.current = thread;
        c.generation += 1;
        // also for the callers that block the core's thread just before (its tick flag
        // follows both changes here)
        self.retick(core);
        let Some(i) = thread else { return Ok(()) };
        self.cores[core].switch_until = now + self.model.cpu.switch;
        self.switches += 1;
        if self.model.coscheduling == Coscheduling::CpuCentric && !self.threads[i].ring.is_empty() {
            self.deliver(Event::CoscheduleRequested { tenant: TenantId(i as u64) })?;
        }
        self.step(core)
    }

    /// Carry the core's current thread forward from now: finish what is done, start
    /// its next phases, and schedule the end of what it does next.
    pub(super) fn step(&mut self, core: usize) -> Result<(), SimError> {
        let ring_cap = self.ring_cap();
        loop {
            let Some(i) = self.cores[core].current else { return Ok(()) };
            let c = &self.cores[core];
            if c.switch_until > self.now {
                let at = c.switch_until;
                self.arm(core, at);
                return Ok(());
            }
            // a call below that re-enters this core's stepping (a wake-up, a switch)
            // bumps its generation: then that call has carried the core on
            let generation = c.generation;
            let t = &mut self.threads[i];
            if let Some(w) = t.wait {
                if t.wait_over(ring_cap) {
                    t.wait = None;
                    match w {
                        Wait::Drained { call: true } => t.calls += 1,
                        Wait::Drained { call: false } | Wait::Memory { .. } => {}
                        Wait::Room(kernel) => t.ring.push_back(kernel),
                    }
                    t.pc += 1;
                    if matches!(w, Wait::Room(_)) {
                        self.ring_grew(i)?;
                        if self.cores[core].generation != generation {
                            return Ok(());
                        }
                    }
                    continue;
                }
                if matches!(w, Wait::Memory { .. }) {
                    // an allocation the policy holds back blocks its thread
                    t.blocked = true;
                    return self.switch_to(core, self.pick(core));
                }
                match self.model.wait {
                    WaitMode::Poll => return Ok(()),
                    WaitMode::Hybrid { .. } if t.spin_left == Nanos::ZERO => {
                        t.blocked = true;
                        return self.switch_to(core, self.pick(core));
                    }
                    WaitMode::Hybrid { .. } => {
                        let at = self.now + t.spin_left;
                        self.arm(core, at);
                        return Ok(());
                    }
                }
            }
            if t.pc >= t.phases.len() {
                if let Some(left) = &mut t.rounds_left {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        return self.end_program(i);
                    }
                }
                t.pc = 0;
                t.round_start = self.now;
            }
            match t.phases[t.pc] {
                Phase::Cpu(work) => {
                    if !t.in_cpu {
                        t.in_cpu = true;
                        self.in_cpu.0 += 1;
                        self.in_cpu.1 = self.in_cpu.1.max(self.in_cpu.0);
                        t.cpu_left = work;
                    }
                    if t.cpu_left > Nanos::ZERO {
                        let at = self.now + t.cpu_left;
                        self.arm(core, at);
                        return Ok(());
                    }
                    t.in_cpu = false;
                    self.in_cpu.0 -= 1;
                    t.pc += 1;
                }
                // each was issued as launches when the thread was made (`issued`)
                Phase::LaunchGrid { .. } => {
                    return Err(self.violation(format!("thread {i}: a grid launch not issued")));
                }
                Phase::Launch(alone) if self.model.device == Device::Shared => {
                    t.pc += 1;
                    self.start_shared(i, alone, 1.0, None)?;
                }
                Phase::Kernel { alone, intensity } if self.model.device == Device::Shared => {
                    t.pc += 1;
                    self.start_shared(i, alone, intensity, None)?;
                }
                Phase::Shaped { alone, launch }
                    if matches!(self.model.device, Device::Blocks(_)) =>
                {
                    t.pc += 1;
                    if self.policy_places().is_some() {
                        self.submit_kernel(i, alone, launch)?;
                        if self.cores[core].generation != generation {
                            return Ok(());
                        }
                    } else {
                        self.start_shared(i, alone, 1.0, Some(launch))?;
                    }
                }
                Phase::Shaped { .. } => {
                    return Err(
                        self.violation("a kernel with a launch shape off the block device".into())
                    );
                }
                Phase::Kernel { .. } => {
                    return Err(
                        self.violation("a kernel with an intensity on the queue device".into())
                    );
                }
                Phase::Alloc(bytes) => {
                    let request = MemRequestId(self.request_owner.len() as u64);
                    self.request_owner.push(i);
                    t.wait_since = self.now;
                    self.start_wait(i, Wait::Memory { request, granted: false });
                    self.deliver(Event::MemoryRequested {
                        request,
                        tenant: TenantId(i as u64),
                        gpu: GpuId(0),
                        bytes,
                        wait: MemoryWait::Forever,
                    })?;
                    if self.cores[core].generation != generation {
                        return Ok(());
                    }
                }
                Phase::Free(bytes) => {
                    let freed = Bytes(bytes.0.min(t.held.0));
                    t.held.0 -= freed.0;
                    t.pc += 1;
                    self.memory_used.0 -= freed.0;
                    self.changed = true;
                    self.deliver(Event::MemoryFreed {
                        tenant: TenantId(i as u64),
                        gpu: GpuId(0),
                        bytes: freed,
                    })?;
                    if self.cores[core].generation != generation {
                        return Ok(());
                    }
                }
                Phase::Launch(kernel) => {
                    if t.ring.len() >= ring_cap {
                        self.start_wait(i, Wait::Room(kernel));
                    } else {
                        t.ring.push_back(kernel);
                        t.pc += 1;
                        self.ring_grew(i)?;
                        if self.cores[core].generation != generation {
                            return Ok(());
                        }
                    }
                }
                Phase::Sync => {
                    let clock = Nanos(t.gpu_ns);
                    self.interactivity.sync_call(TenantId(i as u64), clock);
                    self.start_wait(i, Wait::Drained { call: true });
                }
                Phase::Drain => self.start_wait(i, Wait::Drained { call: false }),
                Phase::SleepShare(share) => {
                    let share = share.clamp(0.0, 0.95);
                    let active = (self.now - t.round_start).0 as f64;
                    let until = self.now + Nanos((active * share / (1.0 - share)).round() as u64);
                    t.pc += 1;
                    t.blocked = true;
                    t.sleeping_until = Some(until);
                    t.round_start = until;
                    self.schedule(until, Ev::SleepEnds(i));
                    return self.switch_to(core, self.pick(core));
                }
            }
        }
    }

    /// Schedule the end of the core's current activity at `at`; any earlier one is
    /// superseded.
    pub(super) fn arm(&mut self, core: usize, at: Nanos) {
        self.cores[core].generation += 1;
        let generation = self.cores[core].generation;
        self.schedule(at, Ev::Segment { core, generation });
    }

    pub(super) fn start_wait(&mut self, i: usize, wait: Wait) {
        let t = &mut self.threads[i];
        t.wait = Some(wait);
        t.spin_left = match self.model.wait {
            WaitMode::Poll => Nanos::ZERO,
            WaitMode::Hybrid { spin } => spin,
        };
    }

    /// What thread `i` waits for may have come: carry it on if it holds its core, wake
    /// it if it blocked (a sleeper wakes when its sleep ends).
    pub(super) fn wait_may_be_over(&mut self, i: usize) -> Result<(), SimError> {
        let t = &self.threads[i];
        if t.wait.is_none() || !t.wait_over(self.ring_cap()) {
            return Ok(());
        }
        if t.blocked {
            if t.sleeping_until.is_none() {
                self.wake(i)?;
            }
            return Ok(());
        }
        let core = t.core;
        if self.cores[core].current == Some(i) {
            self.settle(core);
            self.cores[core].generation += 1;
            self.step(core)?;
        }
        Ok(())
    }

    /// Wake thread `i` as CFS does (see the module's notes).
    pub(super) fn wake(&mut self, i: usize) -> Result<(), SimError> {
        if !self.threads[i].blocked || self.threads[i].sleeping_until.is_some() {
            return Ok(());
        }
        self.move_to_an_idle_core(i);
        let core = self.threads[i].core;
        self.settle(core);
        let floor = self.least_vruntime(core, i);
        let lag = self.model.cpu.wake_lag.0 as f64;
        let spin = match self.model.wait {
            WaitMode::Poll => Nanos::ZERO,
            WaitMode::Hybrid { spin } => spin,
        };
        let t = &mut self.threads[i];
        t.blocked = false;
        // woken before its reply (coscheduled), it spins afresh rather than blocking
        t.spin_left = spin;
        if floor.is_finite() {
            t.vruntime = t.vruntime.max(floor - lag);
        }
        self.retick(core);
        self.maybe_preempt(core, i)
    }

    /// With [`Admission::Floating`], thread `i` (not runnable yet) moves to the lowest
    /// core with no runnable thread if its own has one.
    pub(super) fn move_to_an_idle_core(&mut self, i: usize) {
        if self.model.admission != Admission::Floating {
            return;
        }
        let idle = |c: usize, s: &ProgramSim| {
            s.on_core[c].iter().all(|j| *j == i || s.threads[*j].blocked)
        };
        let own = self.threads[i].core;
        if idle(own, self) {
            return;
        }
        let Some(to) = (0..self.cores.len()).find(|c| idle(*c, self)) else { return };
        self.on_core[own].retain(|j| *j != i);
        let here = &mut self.on_core[to];
        let at = here.partition_point(|j| *j < i);
        here.insert(at, i);
        self.threads[i].core = to;
        self.retick(own);
        self.retick(to);
    }

    /// Whether a CPU tick can change anything: a core with two runnable threads, or a
    /// runnable thread not on its core, or one whose run time is weighted (splitting
    /// its accounting at the tick rounds differently). Otherwise every re-pick keeps
    /// the running thread, and its run time — whole nanoseconds at weight 1 — sums
    /// exactly however it is split, so the tick is passed over (issue 55).
    pub(super) fn tick_matters(&self) -> bool {
        debug_assert!(
            (0..self.cores.len()).all(|c| self.tick_cores[c] == self.core_tick_matters(c)),
            "a core's tick flag was not kept"
        );
        self.ticking > 0
    }

    /// Whether a CPU tick can change anything on core `c` (see [`Self::tick_matters`]).
    fn core_tick_matters(&self, c: usize) -> bool {
        let Some(on) = self.on_core.get(c) else { return false };
        let mut runnable = on.iter().filter(|j| !self.threads[**j].blocked);
        match (runnable.next(), runnable.next()) {
            (None, _) => false,
            (Some(_), Some(_)) => true,
            (Some(&j), None) => {
                let t = &self.threads[j];
                self.cores[c].current != Some(j) || t.weight * t.boost != 1.0
            }
        }
    }

    /// Core `c`'s threads, their blocking, its current thread or a weight changed:
    /// its tick flag again.
    pub(super) fn retick(&mut self, c: usize) {
        let matters = self.core_tick_matters(c);
        if let Some(flag) = self.tick_cores.get_mut(c)
            && *flag != matters
        {
            *flag = matters;
            if matters {
                self.ticking += 1;
            } else {
                self.ticking -= 1;
            }
        }
    }

    /// The least `vruntime` of `core`'s runnable threads other than `i` (infinite if
    /// none).
    pub(super) fn least_vruntime(&self, core: usize, i: usize) -> f64 {
        self.on_core[core]
            .iter()
            .copied()
            .filter(|j| *j != i && !self.threads[*j].blocked)
            .map(|j| self.threads[j].vruntime)
            .fold(f64::INFINITY, f64::min)
    }

    /// Thread `i`, just made runnable on `core`, takes it if the core is idle or the
    /// running thread is ahead of it by more than the wake-up granularity.
    pub(super) fn maybe_preempt(&mut self, core: usize, i: usize) -> Result<(), SimError> {
        // Linux scales the granularity by the woken thread's weight: a boosted thread
        // preempts sooner
        let gran = self.model.cpu.wakeup_granularity.0 as f64 / self.threads[i].boost;
        let preempt = match self.cores[core].current {
            Some(c) => c != i && self.threads[i].vruntime + gran < self.threads[c].vruntime,
            None => true,
        };
        if preempt { self.switch_to(core, Some(i)) } else { Ok(()) }
    }
}

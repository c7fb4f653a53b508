//! The engine carrying out a policy's actions: dispatching tasks as pieces on a GPU's
//! slots (with their kernels' launch shapes and neighbours' interference), resets,
//! migrations, repartitioning and power.

use super::*;

impl Simulation<'_> {
    /// Carry out one action. A dispatch, nearly every action, goes straight to
    /// [`Self::dispatch`]; the rest through a function of their own, whose frame a
    /// dispatch no longer pays for (issue 55).
    #[inline]
    pub(super) fn apply(&mut self, action: Action) -> Fallible {
        // (a dispatch holds no heap data: not dropped, where its drop was a call that
        // matched the variant again, once per task, issue 55)
        let action = std::mem::ManuallyDrop::new(action);
        match *action {
            Action::Dispatch { task, placement } => self.dispatch_one(task, placement),
            _ => self.apply_other(std::mem::ManuallyDrop::into_inner(action)),
        }
    }

    #[inline(never)]
    fn apply_other(&mut self, action: Action) -> Fallible {
        match action {
            // (routed by `apply`; carried out here too, so that this match is whole)
            Action::Dispatch { task, placement } => self.dispatch_one(task, placement)?,
            Action::DispatchBatch { tasks, placement } => self.dispatch(&tasks, placement)?,
            Action::EndTask { task, reason } => {
                if matches!(
                    self.tasks.get(task.0 as usize).map(|t| t.location),
                    Some(Location::Running | Location::Migrating)
                ) {
                    return Err(self.violation(format!("{task} ended while running")));
                }
                let end = match reason {
                    TaskEndReason::Unschedulable(_) => TaskEnd::Failed,
                    TaskEndReason::Dropped => TaskEnd::Dropped,
                    _ => TaskEnd::Cancelled,
                };
                tracing::debug!(%task, ?reason, "task ended by the policy");
                self.end_task(task, end)?;
                let job = self.tasks[task.0 as usize].record.job();
                self.maybe_job_done(job)?;
            }
            Action::ResetGpu { gpu, killed } => self.reset(gpu, killed)?,
            Action::SetPools { user_facing } => {
                let gpus = self.opts.gpus.len();
                if user_facing.windows(2).any(|w| w[0] >= w[1])
                    || user_facing.last().is_some_and(|g| g.0 as usize >= gpus)
                {
                    return Err(self.violation(format!(
                        "user-facing pool {user_facing:?} is not a set of this node's GPUs in order"
                    )));
                }
                self.pool_user_facing = user_facing.len();
            }
            Action::Migrate { tenant, from, to } => self.migrate(tenant, from, to)?,
            Action::Repartition { gpu, shares } => self.repartition(gpu, shares)?,
            Action::SetGpuPowered { gpu, powered } => self.set_powered(gpu, powered)?,
            Action::SetStreamPriority { tenant, raised }
                if matches!(self.opts.sharing, Sharing::Blocks { .. }) =>
            {
                let Some(job) = self.workload.jobs.iter().position(|j| j.tenant.id == tenant)
                else {
                    return Err(self.violation(format!("stream priority of unknown {tenant}")));
                };
                // kernels already launched keep theirs, as streams re-created in CUDA do
                self.jobs[job].stream_raised = raised;
            }
            // a typed refusal the policy hears about, never a silent drop: memory is
            // admitted by the phase engine
            other => {
                let refusal = Event::ActionRefused {
                    action: Box::new(other),
                    reason: "not modelled by this engine (memory is admitted by the phase engine, \
                             stream priorities exist in the block model only)"
                        .into(),
                };
                self.deliver(&refusal)?;
            }
        }
        Ok(())
    }

    /// Start one execution at `placement`: a task alone, or a batch of requests
    /// (`tasks[0]` names the execution; all must be one tenant's).
    fn dispatch(&mut self, tasks: &[TaskId], placement: Placement) -> Fallible {
        let gpu = placement.gpu;
        let Some(&task) = tasks.first() else {
            return Err(self.violation(format!("an empty batch dispatched to {gpu}")));
        };
        let slot = self.dispatch_slot(task, placement)?;
        let (job, demand) = match self.tasks.get(task.0 as usize) {
            Some(s) => (s.record.job(), s.demand),
            None => return Err(self.violation(format!("dispatch of unknown {task}"))),
        };
        let mut work = Nanos::ZERO;
        for (i, t) in tasks.iter().enumerate() {
            match self.tasks.get(t.0 as usize).map(|s| s.location) {
                None => return Err(self.violation(format!("dispatch of unknown {t}"))),
                Some(Location::Ended) => {
                    return Err(self.violation(format!("{t} dispatched after it ended")));
                }
                Some(Location::Running | Location::Migrating) => {
                    return Err(self.violation(format!("{t} dispatched while running")));
                }
                Some(Location::Waiting) if tasks[..i].contains(t) => {
                    return Err(self.violation(format!("{t} twice in one batch")));
                }
                Some(Location::Waiting) => {}
            }
            let record = &self.tasks[t.0 as usize].record;
            if record.job() != job {
                return Err(self.violation(format!("a batch on {gpu} mixes tenants' requests")));
            }
            work += record.work;
        }
        self.check_residency(task, gpu, job)?;
        let piece = self.piece(task, tasks.len(), slot, job, work, demand, placement)?;
        let now = self.now;
        let s = &mut self.slots[slot];
        if let Err(e) = s.model.start(now.0, task.0, piece) {
            return Err(self.violation(format!("{task} on {gpu}: {e}")));
        }
        s.running.push((task, now));
        if tasks.len() > 1 {
            self.batches.insert(task, tasks.to_vec());
        }
        for t in tasks {
            self.tasks[t.0 as usize].record.started(now);
            self.joined_gpu(gpu, *t);
        }
        self.predict_next(slot);
        Ok(())
    }

    /// [`Self::dispatch`] of one task, nearly every dispatch: the same checks in the
    /// same order, without a batch's walks (issue 55).
    fn dispatch_one(&mut self, task: TaskId, placement: Placement) -> Fallible {
        let gpu = placement.gpu;
        let slot = self.dispatch_slot(task, placement)?;
        let (job, work, demand, location) = match self.tasks.get(task.0 as usize) {
            Some(s) => (s.record.job(), s.record.work, s.demand, s.location),
            None => return Err(self.violation(format!("dispatch of unknown {task}"))),
        };
        match location {
            Location::Ended => {
                return Err(self.violation(format!("{task} dispatched after it ended")));
            }
            Location::Running | Location::Migrating => {
                return Err(self.violation(format!("{task} dispatched while running")));
            }
            Location::Waiting => {}
        }
        self.check_residency(task, gpu, job)?;
        let piece = self.piece(task, 1, slot, job, work, demand, placement)?;
        let now = self.now;
        let s = &mut self.slots[slot];
        if let Err(e) = s.model.start(now.0, task.0, piece) {
            return Err(self.violation(format!("{task} on {gpu}: {e}")));
        }
        s.running.push((task, now));
        self.tasks[task.0 as usize].record.started(now);
        self.joined_gpu(gpu, task);
        self.predict_next(slot);
        Ok(())
    }

    /// The declared memory of the tenants resident on `gpu` with `job`'s must fit it.
    #[inline(always)]
    fn check_residency(&self, task: TaskId, gpu: GpuId, job: usize) -> Fallible {
        if !self.track_residency {
            return Ok(());
        }
        let resident = self.resident_memory(gpu, job);
        if resident > self.opts.gpus[gpu.0 as usize].memory.0 {
            return Err(self.violation(format!(
                "{task} on {gpu}: resident tenants would declare {resident} bytes, above its memory"
            )));
        }
        Ok(())
    }

    /// The slot a dispatch of `task` to `placement` starts on, if its GPU takes work
    /// there now.
    #[inline(always)]
    fn dispatch_slot(&self, task: TaskId, placement: Placement) -> Fallible<usize> {
        let gpu = placement.gpu;
        let g = self.gpu(gpu, "dispatch")?;
        if g.resetting {
            return Err(self.violation(format!("{task} dispatched to busy {gpu}")));
        }
        if !g.powered || g.power_pending {
            return Err(self.violation(format!("{task} dispatched to powered-down {gpu}")));
        }
        let slot = match placement.partition {
            None if g.partitions.is_empty() => g.whole,
            None => {
                return Err(
                    self.violation(format!("{task} dispatched to the whole of partitioned {gpu}"))
                );
            }
            Some(p) => *g.partitions.get(p.0 as usize).ok_or_else(|| {
                self.violation(format!("{task} dispatched to missing partition {p} of {gpu}"))
            })?,
        };
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        if exclusive && !self.slots[slot].running.is_empty() {
            return Err(self.violation(format!("{task} dispatched to busy {gpu}")));
        }
        Ok(slot)
    }

    /// How the execution `lead` of `count` requests of `job` with `work` in all runs in
    /// `slot`: its time alone there, its demand and (block model) its launch.
    /// `demand` is its job's kernel's ([`TaskState::demand`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn piece(
        &self,
        lead: TaskId,
        count: usize,
        slot: usize,
        job: usize,
        work: Nanos,
        demand: f64,
        placement: Placement,
    ) -> Fallible<Piece> {
        // (its job read only where a kernel is profiled: issue 55)
        let profiled = self.any_profiled && self.jobs[job].profiled;
        if !profiled && !matches!(self.opts.sharing, Sharing::Blocks { .. }) {
            // nearly every piece: its time alone, its kernel's demand, no launch
            let exec = self.opts.perf.exec_time(work, placement);
            return Ok(Piece { work: exec.0, demand, launch: None });
        }
        let gpu = placement.gpu;
        let kernel = self.workload.jobs[job].kernel;
        let profile = if profiled { self.opts.perf.profiles.get(&kernel) } else { None };
        let (exec, demand) = match profile {
            // a profiled kernel: its measured latency at the partition's size, times the
            // interference of what runs beside it; it fills its partition
            Some(profile) => {
                let capacity = self.slots[slot].model.capacity();
                let percent = (capacity * 100.0).round() as u32;
                let Some((batch, latency)) = profile.batch_latency(count as u32, percent) else {
                    return Err(self.violation(format!(
                        "no profile of kernel {kernel} for a batch of {} at {percent}%",
                        count
                    )));
                };
                let factor = self.neighbour_factor(gpu, slot, kernel, profile, batch, percent);
                let spread =
                    self.opts.perf.world.as_ref().map_or(1.0, |w| w.spread(kernel, lead.0));
                let ns = tessera_gpu::rounding::round_u64(
                    latency.0 as f64 * factor * spread / self.opts.perf.speed,
                );
                (Nanos(ns.max(1)), capacity)
            }
            // a batch costs the sum of its requests' work; workloads rarely carry a
            // launch shape, so each task asks for the whole GPU unless its kernel declares a
            // demand (DCUDA's applications), and co-running tasks share it
            None => (self.opts.perf.exec_time(work, placement), demand),
        };
        let launch = if matches!(self.opts.sharing, Sharing::Blocks { .. }) {
            self.kernel_launch(job)
        } else {
            None
        };
        Ok(Piece { work: exec.0, demand, launch })
    }

    /// The launch of `job`'s kernel for the block model: its grid, block and
    /// registers, the job as its context, the tenant's priority as its stream's (above
    /// every tenant's own when the policy raised it).
    fn kernel_launch(&self, job: usize) -> Option<KernelLaunch> {
        let j = &self.workload.jobs[job];
        let k = self.workload.kernels.get(j.kernel as usize)?;
        let l = k.launch?;
        Some(KernelLaunch {
            context: job as u32,
            launch: Launch {
                grid_blocks: l.grid_blocks,
                threads_per_block: l.threads_per_block,
                registers_per_thread: k.registers_per_thread,
                shared_per_block: 0,
            },
            alone_ns: 0,
            priority: i32::from(j.tenant.priority)
                + if self.jobs[job].stream_raised { RAISED_STREAM } else { 0 },
        })
    }

    /// The interference factor for a batch of a profiled kernel starting in `slot` of
    /// `gpu`, from what runs in the GPU's other slots (gpu-lets §4.4; 1 without
    /// coefficients or neighbours).
    fn neighbour_factor(
        &self,
        gpu: GpuId,
        slot: usize,
        kernel: u32,
        profile: &crate::perf::KernelProfile,
        batch: u32,
        percent: u32,
    ) -> f64 {
        let (fit, world) = (self.opts.perf.interference, self.opts.perf.world.as_deref());
        if fit.is_none() && world.is_none() {
            return 1.0;
        }
        let own = profile.utilization.get(&(batch, percent)).copied();
        self.gpu_slots(gpu)
            .into_iter()
            .filter(|s| *s != slot)
            .filter_map(|s| {
                let (lead, _) = self.slots[s].running.first()?;
                let job = self.tasks[lead.0 as usize].record.job();
                let other_kernel = self.workload.jobs[job].kernel;
                let other = self.opts.perf.profiles.get(&other_kernel)?;
                let p = (self.slots[s].model.capacity() * 100.0).round() as u32;
                let b = self.members(*lead).len() as u32;
                let (ob, _) = other.batch_latency(b, p)?;
                // the measured slowdown where the pair was measured, else the fit's
                if let Some(f) =
                    world.and_then(|w| w.factor(kernel, batch, percent, other_kernel, ob))
                {
                    return Some(f);
                }
                Some(fit?.factor(own?, other.utilization.get(&(ob, p)).copied()?))
            })
            .fold(1.0, f64::max)
    }

    /// The tasks of the execution `lead` names: itself alone, or its batch.
    fn members(&self, lead: TaskId) -> Vec<TaskId> {
        self.batches.get(&lead).cloned().unwrap_or_else(|| vec![lead])
    }

    /// The slots of `gpu` that may run work: its whole slot, partitions and retiring ones.
    fn gpu_slots(&self, gpu: GpuId) -> Vec<usize> {
        let g = &self.gpus[gpu.0 as usize];
        let mut slots: Vec<usize> = std::iter::once(g.whole)
            .chain(g.partitions.iter().copied())
            .chain(g.retiring.iter().copied())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    fn reset(&mut self, gpu: GpuId, mut killed: Vec<TaskId>) -> Fallible {
        let now = self.now;
        let reset_latency = self.opts.perf.reset_latency;
        let g = self.gpu(gpu, "reset")?;
        if g.resetting {
            return Err(self.violation(format!("{gpu} reset while resetting")));
        }
        if g.incoming > 0 || !g.powered || g.power_pending || g.repartitioning {
            return Err(self.violation(format!(
                "{gpu} reset while migrating in, powered down or repartitioning"
            )));
        }
        // a reset kills everything on the GPU; the policy must name all of it
        let slots = self.gpu_slots(gpu);
        let mut running: Vec<TaskId> = slots
            .iter()
            .flat_map(|s| self.slots[*s].running.iter().flat_map(|(t, _)| self.members(*t)))
            .collect();
        running.sort_unstable();
        killed.sort_unstable();
        if running != killed {
            return Err(
                self.violation(format!("{gpu} reset killing {killed:?} but {running:?} ran"))
            );
        }
        for slot in slots {
            let runs = std::mem::take(&mut self.slots[slot].running);
            for (lead, started) in runs {
                // the killed execution's remaining work is dropped (it is re-issued whole)
                let _ = self.slots[slot].model.remove(now.0, lead.0);
                // NVSMI counts the killed task's run as busy time, as the paper measured.
                let kernel_time = self.kernel_time(lead, now - started);
                self.gpus[gpu.0 as usize].busy += kernel_time;
                for task in self.members(lead) {
                    self.left_gpu(gpu, task);
                }
                self.batches.remove(&lead);
            }
            self.slots[slot].generation = self.slots[slot].generation.wrapping_add(1);
        }
        self.gpus[gpu.0 as usize].resetting = true;
        self.counts.resets += 1;
        self.schedule(now + reset_latency, SimEvent::ResetEnds(gpu));
        Ok(())
    }

    /// Move a tenant's running tasks from `from` to `to`: they stop progressing, their
    /// remaining work is carried over exactly, and they resume on `to` after the
    /// migration's pause and the copy of the tenant's declared memory.
    fn migrate(&mut self, tenant: TenantId, from: GpuId, to: GpuId) -> Fallible {
        let now = self.now;
        self.gpu(from, "migration")?;
        let target = self.gpu(to, "migration")?;
        if from == to || target.resetting || !target.powered || target.power_pending {
            return Err(self.violation(format!("migration of {tenant} to unavailable {to}")));
        }
        if !target.partitions.is_empty() || target.repartitioning {
            return Err(self.violation(format!("migration of {tenant} to partitioned {to}")));
        }
        let Some(job) = self.workload.jobs.iter().position(|j| j.tenant.id == tenant) else {
            return Err(self.violation(format!("migration of unknown {tenant}")));
        };
        if self.resident_memory(to, job) > self.opts.gpus[to.0 as usize].memory.0 {
            self.counts.migrations_failed += 1;
            return self.deliver(&Event::MigrationFailed {
                tenant,
                reason: format!("{to} has no room for the tenant's declared memory"),
            });
        }
        let mut moving = Vec::new();
        for slot in self.gpu_slots(from) {
            let ids: Vec<(TaskId, Nanos)> = self.slots[slot]
                .running
                .iter()
                .filter(|(t, _)| self.tasks[t.0 as usize].record.job() == job)
                .copied()
                .collect();
            if ids.is_empty() {
                continue;
            }
            for (task, started) in ids {
                let members = self.members(task);
                let work = members
                    .iter()
                    .fold(Nanos::ZERO, |w, m| w + self.tasks[m.0 as usize].record.work);
                let (demand, placement) = (self.jobs[job].demand(), self.slots[slot].placement);
                let whole = self.piece(task, members.len(), slot, job, work, demand, placement)?;
                let left = self.slots[slot]
                    .model
                    .remove(now.0, task.0)
                    .map_err(|e| self.violation(format!("{task} leaving {from}: {e}")))?;
                // it keeps its demand; under the block model, the blocks it has left
                let launch = whole.launch.map(|mut l| {
                    let share = left as f64 / whole.work.max(1) as f64;
                    l.launch.grid_blocks =
                        ((l.launch.grid_blocks as f64 * share).ceil() as u64).max(1);
                    l
                });
                let left = Piece { work: left.max(1), demand: whole.demand, launch };
                self.slots[slot].running.retain(|(t, _)| *t != task);
                let kernel_time = self.kernel_time(task, now - started);
                self.gpus[from.0 as usize].busy += kernel_time;
                for member in self.members(task) {
                    self.left_gpu(from, member);
                    self.tasks[member.0 as usize].location = Location::Migrating;
                }
                moving.push((task, left, started));
            }
            self.predict_next(slot);
        }
        let bytes = self.workload.jobs[job].tenant.memory.0;
        let arrive = now + Nanos(self.opts.perf.migration.duration(bytes));
        self.gpus[to.0 as usize].incoming += 1;
        self.counts.migrations += 1;
        self.migrations.push(Some(MigrationSim { job, to, tasks: moving }));
        self.schedule(arrive, SimEvent::MigrationArrives((self.migrations.len() - 1) as u32));
        Ok(())
    }

    pub(super) fn migration_arrives(&mut self, i: usize) -> Fallible {
        let Some(m) = self.migrations[i].take() else { return Ok(()) };
        let now = self.now;
        let to = m.to;
        self.gpus[to.0 as usize].incoming -= 1;
        let slot = self.gpus[to.0 as usize].whole;
        let exclusive = self.opts.sharing == Sharing::Exclusive;
        for (task, piece, _) in m.tasks {
            if exclusive && !self.slots[slot].running.is_empty() {
                return Err(self.violation(format!("{task} migrated onto busy {to}")));
            }
            self.slots[slot]
                .model
                .start(now.0, task.0, piece)
                .map_err(|e| self.violation(format!("{task} arriving on {to}: {e}")))?;
            // its time on the GPU counts from its arrival (`ran_for` is the run here)
            self.slots[slot].running.push((task, now));
            for member in self.members(task) {
                self.joined_gpu(to, member);
            }
        }
        self.predict_next(slot);
        let tenant = self.workload.jobs[m.job].tenant.id;
        self.deliver(&Event::MigrationDone { tenant, to })
    }

    fn repartition(&mut self, gpu: GpuId, shares: Vec<PerMille>) -> Fallible {
        let g = self.gpu(gpu, "repartition")?;
        let sum: u32 = shares.iter().map(|s| u32::from(s.0)).sum();
        if sum > 1000 || shares.iter().any(|s| s.0 == 0) {
            return Err(
                self.violation(format!("{gpu} partitions {shares:?} sum to {sum} per mille"))
            );
        }
        if g.repartitioning || g.resetting || !g.powered || g.power_pending || g.incoming > 0 {
            return Err(
                self.violation(format!("{gpu} repartitioned while busy with another change"))
            );
        }
        self.gpus[gpu.0 as usize].repartitioning = true;
        self.counts.repartitions += 1;
        let at = self.now + self.opts.perf.repartition_latency;
        self.pending_shares.push((gpu, shares));
        self.schedule(at, SimEvent::RepartitionEnds(gpu));
        Ok(())
    }

    pub(super) fn repartition_ends(&mut self, gpu: GpuId) -> Fallible {
        let Some(i) = self.pending_shares.iter().position(|(g, _)| *g == gpu) else {
            return Ok(());
        };
        let (_, shares) = self.pending_shares.swap_remove(i);
        let sharing = self.opts.sharing;
        let g = &mut self.gpus[gpu.0 as usize];
        g.repartitioning = false;
        // the old partitions (or the whole GPU) finish what they run, and take nothing new
        let old: Vec<usize> =
            if g.partitions.is_empty() { vec![g.whole] } else { std::mem::take(&mut g.partitions) };
        g.retiring.retain(|s| !old.contains(s));
        g.retiring.extend(old);
        if shares.is_empty() {
            let whole = g.whole;
            g.retiring.retain(|s| *s != whole);
        }
        for (p, share) in shares.iter().enumerate() {
            let placement = Placement { gpu, partition: Some(PartitionId(p as u32)) };
            let measured = self.opts.measure_gpus;
            self.slots.push(Slot::new(placement, sharing, f64::from(share.0) / 1000.0, measured));
            let id = self.slots.len() - 1;
            self.gpus[gpu.0 as usize].partitions.push(id);
        }
        let slots = &self.slots;
        self.gpus[gpu.0 as usize].retiring.retain(|s| !slots[*s].running.is_empty());
        self.deliver(&Event::RepartitionDone { gpu })
    }

    fn set_powered(&mut self, gpu: GpuId, powered: bool) -> Fallible {
        let now = self.now;
        let g = self.gpu(gpu, "power change")?;
        if g.power_pending || g.powered == powered {
            return Err(self.violation(format!(
                "{gpu} power change to {powered} while already so or changing"
            )));
        }
        if !powered && (g.meter.active() > 0 || g.resetting || g.incoming > 0 || g.repartitioning) {
            return Err(self.violation(format!("{gpu} powered down while in use")));
        }
        let g = &mut self.gpus[gpu.0 as usize];
        g.power_pending = true;
        if !powered {
            // it stops drawing at once; powering up draws from the acknowledgement
            g.powered = false;
            g.energy.set(now.0, false, 0);
        }
        self.counts.power_changes += 1;
        self.schedule(now + self.opts.perf.power_latency, SimEvent::PowerChanged { gpu, powered });
        Ok(())
    }
}

//! Placing and moving tasks: dispatching a tenant's head-of-line task (alone, at a
//! placement, or as a batch), resetting a GPU, migrating a tenant, repartitioning and
//! powering GPUs, and announcing the pools — each emitting its actions.

use super::*;

impl Board {
    /// Dispatch `tenant`'s head-of-line task to the whole of `gpu`. Does nothing if the
    /// GPU has no room or the queue is empty (callers choose both from the board, so
    /// neither happens; the check keeps the invariant local).
    pub fn dispatch(
        &mut self,
        now: Nanos,
        gpu: GpuId,
        tenant: TenantId,
        out: &mut Vec<Action>,
    ) -> Option<TaskId> {
        self.dispatch_at(now, Placement::whole(gpu), tenant, out)
    }

    /// Dispatch `tenant`'s head-of-line task to `placement` (a whole GPU, or one of its
    /// partitions), if it has room.
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub fn dispatch_at(
        &mut self,
        now: Nanos,
        placement: Placement,
        tenant: TenantId,
        out: &mut Vec<Action>,
    ) -> Option<TaskId> {
        if !self.has_room(placement) || !self.may_run_on(tenant, placement.gpu) {
            return None;
        }
        let t = self.tenants.get_mut(tenant.0)?;
        let q = t.queue.pop_front()?;
        let task = q.spec.id;
        t.running += 1;
        let class = t.class();
        self.queued_count[class_index(class)] -= 1;
        self.running_count[class_index(class)] += 1;
        self.reindex(tenant);
        out.push(Action::Dispatch { task: q.spec.id, placement });
        self.gpus[placement.gpu.0 as usize].1.push_running(RunningTask {
            spec: q.spec,
            class,
            submitted: q.submitted,
            started: now,
            placement,
            batch_lead: None,
            seq: q.seq,
        });
        self.sync_gpu(placement.gpu.0 as usize);
        Some(task)
    }

    /// For a `TaskFinished` event, before [`Board::observe`] forgets the task: whose it
    /// was and how long it ran.
    pub fn finishing(&self, event: &Event) -> Option<(TenantId, Nanos)> {
        match event {
            Event::TaskFinished { task, placement, ran_for, .. } => {
                self.running_task(placement.gpu, *task).map(|r| (r.spec.tenant, *ran_for))
            }
            _ => None,
        }
    }

    /// The task `task` running on `gpu`, if it runs there.
    pub fn running_task(&self, gpu: GpuId, task: TaskId) -> Option<&RunningTask> {
        self.gpus.get(gpu.0 as usize)?.1.running().iter().find(|r| r.spec.id == task)
    }

    /// Dispatch up to `max` of `tenant`'s queued requests, head first, as one batched
    /// execution at `placement` (gpu-lets' and Nexus's batching: one tenant serves one
    /// model). Returns how many were batched (0 if the placement has no room or the
    /// queue is empty).
    pub fn dispatch_batch(
        &mut self,
        now: Nanos,
        placement: Placement,
        tenant: TenantId,
        max: usize,
        out: &mut Vec<Action>,
    ) -> usize {
        if max == 0 || !self.has_room(placement) {
            return 0;
        }
        let Some(t) = self.tenants.get_mut(tenant.0) else { return 0 };
        // (at most u32::MAX: a tenant's running count is 32 bits)
        let n = max.min(t.queue.len()).min(u32::MAX as usize);
        if n == 0 {
            return 0;
        }
        let batch: Vec<QueuedTask> = t.queue.take_front(n);
        t.running += n as u32;
        let class = t.class();
        self.queued_count[class_index(class)] -= n;
        self.running_count[class_index(class)] += n;
        self.reindex(tenant);
        let lead = batch[0].spec.id;
        out.push(Action::DispatchBatch {
            tasks: batch.iter().map(|q| q.spec.id).collect(),
            placement,
        });
        let state = &mut self.gpus[placement.gpu.0 as usize].1;
        for q in batch {
            state.push_running(RunningTask {
                spec: q.spec,
                class,
                submitted: q.submitted,
                started: now,
                placement,
                batch_lead: Some(lead),
                seq: q.seq,
            });
        }
        self.sync_gpu(placement.gpu.0 as usize);
        n
    }

    /// Reset `gpu`: its running tasks go back to the heads of their tenants' queues,
    /// keeping their submission times and order, and the GPU is unavailable until
    /// [`Event::GpuResetDone`] (expected after `latency`).
    pub fn reset(&mut self, now: Nanos, gpu: GpuId, latency: Nanos, out: &mut Vec<Action>) {
        let state = &mut self.gpus[gpu.0 as usize].1;
        let mut killed_tasks = state.take_running();
        state.resetting_until = Some(now + latency);
        state.refresh();
        self.sync_gpu(gpu.0 as usize);
        killed_tasks.sort_by_key(|r| r.seq);
        let killed: Vec<TaskId> = killed_tasks.iter().map(|r| r.spec.id).collect();
        out.push(Action::ResetGpu { gpu, killed });
        self.requeue(killed_tasks, out);
    }

    /// Put tasks that stopped running without completing back at the heads of their
    /// tenants' queues (`stopped` sorted oldest first), keeping their submission times
    /// and order; those of departed tenants end instead.
    fn requeue(&mut self, stopped: Vec<RunningTask>, out: &mut Vec<Action>) {
        // newest first, so that pushing each to the front leaves them in submission order
        for r in stopped.into_iter().rev() {
            let id = r.spec.id;
            let tenant_id = r.spec.tenant;
            self.running_count[class_index(r.class)] -= 1;
            self.note_changed(tenant_id);
            let Some(t) = self.tenants.get_mut(tenant_id.0) else { continue };
            t.running -= 1;
            if t.leaving {
                // Its tenant is gone: the killed task cannot be re-issued.
                out.push(Action::EndTask { task: id, reason: TaskEndReason::TenantLeft });
                if t.running == 0 {
                    self.tenants.remove(tenant_id.0);
                }
                continue;
            }
            t.queue.push_front(QueuedTask { spec: r.spec, submitted: r.submitted, seq: r.seq });
            self.queued_count[class_index(t.class())] += 1;
            self.reindex(tenant_id);
        }
    }

    /// Move `tenant` from `from` to `to` (DCUDA's migration): its running tasks there
    /// continue on `to` (the driver pauses them while the context and memory move) and
    /// its memory reservations on `from` move with it. Refused (returns false, emits
    /// nothing) when the tenant is already moving, `to` is not available or is
    /// partitioned, or its memory would not fit there.
    pub fn migrate(
        &mut self,
        tenant: TenantId,
        from: GpuId,
        to: GpuId,
        out: &mut Vec<Action>,
    ) -> bool {
        let (Some((_, _)), Some((to_spec, to_state))) =
            (self.gpus.get(from.0 as usize), self.gpus.get(to.0 as usize))
        else {
            return false;
        };
        let held = self.memory_held.get(&(tenant, from)).copied().unwrap_or(Bytes(0));
        if from == to
            || self.migrating.contains_key(&tenant)
            || !to_state.is_available()
            || !to_state.partitions.is_empty()
            || self.memory_used[to.0 as usize].0 + held.0 > to_spec.memory.0
        {
            return false;
        }
        self.move_tenant(tenant, from, to);
        self.migrating.insert(tenant, (from, to));
        out.push(Action::Migrate { tenant, from, to });
        true
    }

    fn move_tenant(&mut self, tenant: TenantId, from: GpuId, to: GpuId) {
        let moving = self.gpus[from.0 as usize].1.split_running(|r| r.spec.tenant == tenant);
        let target = &mut self.gpus[to.0 as usize].1;
        for mut r in moving {
            r.placement = Placement::whole(to);
            target.push_running(r);
        }
        self.sync_gpu(from.0 as usize);
        self.sync_gpu(to.0 as usize);
        if let Some(bytes) = self.memory_held.remove(&(tenant, from)) {
            self.memory_used[from.0 as usize].0 -= bytes.0;
            self.memory_used[to.0 as usize].0 += bytes.0;
            self.memory_held.entry((tenant, to)).or_default().0 += bytes.0;
        }
    }

    pub(super) fn migration_undone(&mut self, tenant: TenantId) {
        if let Some((from, to)) = self.migrating.remove(&tenant) {
            self.move_tenant(tenant, to, from);
        }
    }

    /// Ask for `gpu` to be split into partitions of these shares (gpu-lets); the new
    /// partitions are usable after [`Event::RepartitionDone`], the old ones serve
    /// meanwhile. Refused (returns false) when the shares sum above 1000, one is zero,
    /// or a repartition is already under way.
    pub fn repartition(
        &mut self,
        gpu: GpuId,
        shares: Vec<PerMille>,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) else { return false };
        let sum: u32 = shares.iter().map(|s| u32::from(s.0)).sum();
        if sum > 1000 || shares.iter().any(|s| s.0 == 0) || state.pending_partitions.is_some() {
            return false;
        }
        state.pending_partitions = Some(shares.clone());
        out.push(Action::Repartition { gpu, shares });
        true
    }

    /// Power `gpu` down (only when it runs nothing) or up (DCUDA's energy compaction).
    /// It takes no work from the moment a power-down is asked until a power-up is
    /// acknowledged. Returns false when refused.
    pub fn set_powered(&mut self, gpu: GpuId, powered: bool, out: &mut Vec<Action>) -> bool {
        let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) else { return false };
        if state.power_change.is_some()
            || state.powered == powered
            || (!powered && !state.running().is_empty())
        {
            return false;
        }
        state.power_change = Some(if powered { PowerChange::Up } else { PowerChange::Down });
        state.refresh();
        self.sync_gpu(gpu.0 as usize);
        out.push(Action::SetGpuPowered { gpu, powered });
        true
    }

    /// Undo the books of an action the driver refused.
    pub(super) fn refused(&mut self, action: &Action, out: &mut Vec<Action>) {
        match action {
            Action::Migrate { tenant, .. } => self.migration_undone(*tenant),
            Action::Repartition { gpu, .. } => {
                if let Some((_, s)) = self.gpus.get_mut(gpu.0 as usize) {
                    s.pending_partitions = None;
                }
            }
            Action::SetGpuPowered { gpu, .. } => {
                if let Some((_, s)) = self.gpus.get_mut(gpu.0 as usize) {
                    s.power_change = None;
                    s.refresh();
                }
                self.sync_gpu(gpu.0 as usize);
            }
            Action::Dispatch { task, placement } => {
                self.undo_dispatch(placement.gpu, std::slice::from_ref(task), out)
            }
            Action::DispatchBatch { tasks, placement } => {
                self.undo_dispatch(placement.gpu, tasks, out)
            }
            _ => {}
        }
    }

    /// A dispatch the driver refused: the tasks never ran; back to their queues.
    fn undo_dispatch(&mut self, gpu: GpuId, tasks: &[TaskId], out: &mut Vec<Action>) {
        let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) else { return };
        let mut stopped = state.split_running(|r| tasks.contains(&r.spec.id));
        self.sync_gpu(gpu.0 as usize);
        stopped.sort_by_key(|r| r.seq);
        self.requeue(stopped, out);
    }

    /// Emit [`Action::SetPools`] if the user-facing pool differs from the last one
    /// announced. `user_facing` is in ascending order (a copy is made only when it
    /// changed); the batch pool is every other GPU.
    pub fn announce_pools(&mut self, user_facing: &[GpuId], out: &mut Vec<Action>) {
        debug_assert!(user_facing.windows(2).all(|w| w[0] < w[1]), "a pool in ascending order");
        if self.announced_pools.as_deref() == Some(user_facing) {
            return;
        }
        out.push(Action::SetPools { user_facing: user_facing.to_vec() });
        self.announced_pools = Some(user_facing.to_vec());
    }
}

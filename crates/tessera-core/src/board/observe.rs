//! [`Board::observe`]: each event applied to the books — tasks submitted, started,
//! finished or preempted, tenants arriving and leaving, memory asked for and freed —
//! with the actions that follow from bookkeeping alone.

use super::*;

impl Board {
    /// Apply an event to the books. Emits the actions that follow from bookkeeping
    /// alone (ending a leaving tenant's queued tasks, answering memory requests) and
    /// returns the finished task, if the event finished one, for the policy's estimators.
    #[inline]
    pub fn observe(
        &mut self,
        now: Nanos,
        event: &Event,
        out: &mut Vec<Action>,
    ) -> Option<FinishedTask> {
        // the two events of every task, each in a function of its own; the rest in one
        // whose large frame they no longer pay for (a prologue and an epilogue that
        // saved every register, twice per task: issue 55)
        match event {
            Event::TaskSubmitted(spec) => {
                self.submit(now, spec, out);
                None
            }
            Event::TaskFinished { task, placement, ran_for, result, .. } => {
                self.finished(now, *task, *placement, *ran_for, result.is_ok())
            }
            // (nothing to book: a call of the function below for nothing, on every tick
            // of the policies that ask for them, more ticks than tasks for Credit)
            Event::Tick => None,
            _ => self.observe_other(now, event, out),
        }
    }

    #[inline(never)]
    fn observe_other(
        &mut self,
        now: Nanos,
        event: &Event,
        out: &mut Vec<Action>,
    ) -> Option<FinishedTask> {
        match event {
            Event::TenantRegistered(spec) => {
                self.tenants.get_or_insert_with(spec.id.0, || TenantQueue::new(spec));
            }
            Event::TenantLeft { tenant } => self.tenant_left(*tenant, out),
            // (a submission and a finish are routed by `observe`; handled here too, so
            // that this match is whole)
            Event::TaskSubmitted(spec) => self.submit(now, spec, out),
            Event::TaskCancelRequested { task } => self.cancel(*task, out),
            Event::TaskFinished { task, placement, ran_for, result, .. } => {
                return self.finished(now, *task, *placement, *ran_for, result.is_ok());
            }
            Event::GpuResetDone { gpu } => {
                if let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) {
                    state.resetting_until = None;
                    state.refresh();
                }
                self.sync_gpu(gpu.0 as usize);
            }
            Event::MigrationDone { tenant, .. } => {
                self.migrating.remove(tenant);
            }
            Event::MigrationFailed { tenant, .. } => self.migration_undone(*tenant),
            Event::RepartitionDone { gpu } => {
                if let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize)
                    && let Some(shares) = state.pending_partitions.take()
                {
                    state.partitions = shares;
                }
                self.sync_gpu(gpu.0 as usize);
            }
            Event::RepartitionFailed { gpu, .. } => {
                if let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) {
                    state.pending_partitions = None;
                }
            }
            Event::GpuPowerChanged { gpu, powered } => {
                if let Some((_, state)) = self.gpus.get_mut(gpu.0 as usize) {
                    state.powered = *powered;
                    state.power_change = None;
                    state.refresh();
                }
                self.sync_gpu(gpu.0 as usize);
            }
            Event::ActionRefused { action, .. } => self.refused(action, out),
            Event::MemoryRequested { request, tenant, gpu, bytes, wait: _ } => {
                // Time-sharing policies admit memory first-come first-served without a
                // wait queue: grant if it fits now, else refuse. The schedGPU policies
                // replace this with queued, ordered admission.
                let reason = match self.gpus.get(gpu.0 as usize) {
                    None => Some(MemoryDenial::ExceedsCapacity),
                    Some((spec, _)) if *bytes > spec.memory => Some(MemoryDenial::ExceedsCapacity),
                    Some((spec, _))
                        if self.memory_used[gpu.0 as usize].0 + bytes.0 > spec.memory.0 =>
                    {
                        Some(MemoryDenial::NotAvailableNow)
                    }
                    Some(_) => None,
                };
                match reason {
                    Some(reason) => out.push(Action::DenyMemory { request: *request, reason }),
                    None => {
                        self.memory_used[gpu.0 as usize].0 += bytes.0;
                        self.memory_held.entry((*tenant, *gpu)).or_default().0 += bytes.0;
                        out.push(Action::GrantMemory { request: *request });
                    }
                }
            }
            Event::MemoryFreed { tenant, gpu, bytes } => {
                // Freeing more than is held releases what is held and nothing more: the
                // books never go negative whatever a client claims.
                if let Some(held) = self.memory_held.get_mut(&(*tenant, *gpu)) {
                    let freed = held.0.min(bytes.0);
                    held.0 -= freed;
                    self.memory_used[gpu.0 as usize].0 -= freed;
                }
            }
            Event::DemandSampled { .. }
            | Event::MemorySampled { .. }
            | Event::TenantWeightChanged { .. }
            | Event::TenantCharged { .. }
            | Event::CoscheduleRequested { .. }
            | Event::Tick => {}
        }
        None
    }

    fn submit(&mut self, now: Nanos, spec: &TaskSpec, out: &mut Vec<Action>) {
        let Some(tenant) = self.tenants.get_mut(spec.tenant.0).filter(|t| !t.leaving) else {
            out.push(Action::EndTask { task: spec.id, reason: TaskEndReason::UnknownTenant });
            return;
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        tenant.queue.push_back(QueuedTask { spec: spec.clone(), submitted: now, seq });
        let first = tenant.queue.len() == 1;
        self.queued_count[class_index(tenant.class())] += 1;
        if first {
            self.reindex(spec.tenant);
        }
    }

    fn cancel(&mut self, task: TaskId, out: &mut Vec<Action>) {
        // Cancellations are rare: a walk of the queues costs less overall than an index
        // of every task kept up to date on every submission and completion.
        let found = self.backlogged.iter().find_map(|id| {
            let pos = self.tenants.get(id)?.queue.iter().position(|q| q.spec.id == task)?;
            Some((TenantId(id), pos))
        });
        let Some((tenant_id, pos)) = found else { return };
        let Some(tenant) = self.tenants.get_mut(tenant_id.0) else { return };
        tenant.queue.remove(pos);
        self.queued_count[class_index(tenant.class())] -= 1;
        if pos == 0 {
            self.reindex(tenant_id);
        }
        out.push(Action::EndTask { task, reason: TaskEndReason::CancelledByClient });
    }

    fn tenant_left(&mut self, tenant_id: TenantId, out: &mut Vec<Action>) {
        let Some(tenant) = self.tenants.get_mut(tenant_id.0) else { return };
        self.queued_count[class_index(tenant.class())] -= tenant.queue.len();
        let drained: Vec<QueuedTask> = tenant.queue.take_front(usize::MAX);
        self.reindex(tenant_id);
        let Some(tenant) = self.tenants.get_mut(tenant_id.0) else { return };
        for queued in drained {
            out.push(Action::EndTask { task: queued.spec.id, reason: TaskEndReason::TenantLeft });
        }
        if tenant.running == 0 {
            self.tenants.remove(tenant_id.0);
        } else {
            tenant.leaving = true;
        }
        let held: Vec<_> = self
            .memory_held
            .range((tenant_id, GpuId(0))..=(tenant_id, GpuId(u32::MAX)))
            .map(|(k, v)| (*k, *v))
            .collect();
        for ((_, gpu), bytes) in held {
            self.memory_used[gpu.0 as usize].0 -= bytes.0;
            self.memory_held.remove(&(tenant_id, gpu));
        }
    }

    fn finished(
        &mut self,
        now: Nanos,
        task: TaskId,
        placement: Placement,
        ran_for: Nanos,
        completed: bool,
    ) -> Option<FinishedTask> {
        let (_, state) = self.gpus.get_mut(placement.gpu.0 as usize)?;
        // A finish for a task that does not run there is stale (its GPU was reset under
        // it); the reset already re-queued the task.
        let i = state.position(task)?;
        // what is needed of it read in place, and the task dropped there: a move of the
        // whole record out was a twentieth of a task's board work (issue 55)
        let (class, kernel, tenant_id, submitted) = {
            let r = &state.running()[i];
            (r.class, r.spec.kernel, r.spec.tenant, r.submitted)
        };
        state.remove_running(i);
        self.sync_gpu(placement.gpu.0 as usize);
        self.running_count[class_index(class)] -= 1;
        if completed && self.estimates {
            self.kernel_time
                .get_or_insert_with(u64::from(kernel), || WindowMean::new(KERNEL_HISTORY))
                .push(ran_for);
            self.class_time[class_index(class)].push(ran_for);
        }
        self.note_changed(tenant_id);
        if let Some(tenant) = self.tenants.get_mut(tenant_id.0) {
            tenant.running -= 1;
            if tenant.leaving && tenant.running == 0 {
                self.tenants.remove(tenant_id.0);
            }
        }
        Some(FinishedTask { class, ran_for, latency: now - submitted, completed })
    }
}

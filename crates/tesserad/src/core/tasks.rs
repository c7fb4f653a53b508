//! Tasks on GPUs: dispatching (whole GPUs and inference batches), the launch gate's slices, ending, cancelling and the bookkeeping every end shares.

use super::*;

/// A task that waited this long in the queue is logged (`task_waited`), with where it
/// then ran: the line an operator looks for when asked why a job waited.
const LONG_WAIT: Nanos = Nanos(1_000_000_000);

impl Core {
    pub(super) fn dispatch(&mut self, task: TaskId, gpu: GpuId) {
        self.dispatch_as(task, gpu, None);
    }

    /// Run a batch of one model's requests in a partition: each request is sent as its
    /// own task with the batch's run time and an equal part of the partition's share, so
    /// that they finish together when the model says the batch does.
    pub(super) fn dispatch_batch(&mut self, tasks: &[TaskId], placement: Placement) {
        let Some(inf) = &self.inference else { return };
        let Some(lead) = tasks.first().and_then(|t| self.tasks.get(t)) else { return };
        let tenant = lead.tenant;
        let gpu = placement.gpu;
        let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
        let now = self.clock.now();
        g.batches.retain(|b| b.ends > now);
        let partition = placement.partition.map(|p| p.0);
        let share =
            partition.and_then(|p| g.partitions.get(p as usize)).map_or(1000, |s| u32::from(s.0));
        let neighbour = g
            .batches
            .iter()
            .find(|b| b.partition != partition)
            .map(|b| (b.tenant, b.requests, b.share_permille));
        let n = tasks.len() as u32;
        let Some(run) = inf.batch_time(tenant, n, share, neighbour) else {
            // a model whose profile lacks this point: the requests fail with the reason
            for &task in tasks {
                self.dispatch_as(task, gpu, Some((Nanos::ZERO, 0.0)));
            }
            return;
        };
        g.batches.push(RunningBatch {
            partition,
            tenant,
            requests: n,
            share_permille: share,
            ends: now + run,
        });
        let demand = f64::from(share) / 1000.0 / f64::from(n.max(1));
        for &task in tasks {
            self.dispatch_as(task, gpu, Some((run, demand)));
        }
    }

    /// Dispatch `task` to `gpu`, with its declared work and the whole GPU, or with
    /// `batch`'s (work, demand).
    pub(super) fn dispatch_as(&mut self, task: TaskId, gpu: GpuId, batch: Option<(Nanos, f64)>) {
        let Some(info) = self.tasks.get_mut(&task) else {
            // cannot happen with today's policies; if it did, the policy would keep the
            // GPU busy forever, so tell it the task failed at once
            tracing::error!(%task, %gpu, "policy dispatched a task the daemon does not know");
            self.internal.push_back(Event::TaskFinished {
                task,
                placement: Placement::whole(gpu),
                ran_for: Nanos::ZERO,
                measured: true,
                result: Err(ExecutionFailure { reason: "unknown task".into() }),
            });
            return;
        };
        // memory for the task is admitted through the ledger, which other processes on
        // the node share (off the core thread); if it is not free the task fails with
        // a reason
        if info.memory > 0 {
            let memory = info.memory;
            return self.admit(task, gpu, memory, batch);
        }
        self.start_on(task, gpu, batch);
    }

    /// `task`'s memory was not free on `gpu`: it fails with the ledger's reason.
    pub(super) fn refuse_memory(&mut self, task: TaskId, gpu: GpuId, why: String) {
        let Some(info) = self.tasks.remove(&task) else { return };
        self.log(
            Some(info.uid),
            crate::events::NodeEvent::TaskMemoryRefused {
                tenant: info.tenant.0,
                gpu: gpu.0,
                reason: why.clone(),
            },
        );
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.queued = t.queued.saturating_sub(1);
        }
        // the policy counts the task as running there; tell it the task failed at once
        self.finish_bookkeeping(gpu, task, &info, false, reason::NO_MEMORY, 0);
        self.internal.push_back(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for: Nanos::ZERO,
            measured: true,
            result: Err(ExecutionFailure { reason: why }),
        });
    }

    /// Start `task` on `gpu` (its memory, if any, admitted): with its declared work
    /// and the whole GPU, or with `batch`'s (work, demand).
    pub(super) fn start_on(&mut self, task: TaskId, gpu: GpuId, batch: Option<(Nanos, f64)>) {
        let Some(info) = self.tasks.get_mut(&task) else { return };
        info.started = Some((gpu, self.clock.now()));
        let waited = self.clock.now().saturating_sub(info.submitted);
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.queued = t.queued.saturating_sub(1);
            t.waiting += waited;
            if let (Some(m), Some(l)) = (&self.metrics, &t.labels) {
                m.tenant_queue_wait.get_or_create(l).observe(waited.0 as f64 / 1e9);
                if info.slice {
                    m.tenant_gate_slices.get_or_create(l).inc();
                }
            }
        }
        if waited >= LONG_WAIT {
            let g = &self.gpus[gpu.0 as usize];
            self.events.record(
                Some(info.uid),
                crate::events::NodeEvent::TaskWaited {
                    tenant: info.tenant.0,
                    gpu: gpu.0,
                    waited_ms: waited.0 as f64 / 1e6,
                    pool: g.pool,
                    beside: g.running.iter().filter(|t| **t != task).count(),
                },
            );
        }
        let (tenant, slice) = (info.tenant, info.slice);
        let others = slice && self.others_share(gpu, tenant);
        let Some(info) = self.tasks.get(&task) else { return };
        let conn = self.conns.get(&info.conn).filter(|c| c.alive);
        let data = conn.map(|c| (c.region.clone(), info.seq, info.in_len, info.out_len));
        let hold = info.slice;
        if hold && let Some(c) = conn {
            // the launch gate opens: the client's own kernels may run on this GPU
            c.region.set_gpu_shared(others);
            // GPU-centric coscheduling (FairGV §3.2.3): an interactive tenant's threads
            // are raised before the grant wakes its waiting one
            if tessera_core::interactive::interactive_span(c.region.sync_span().map(Nanos)) {
                self.cosched.borrow_mut().boost(c.pid, c.uid, info.conn);
            }
            c.region.set_grant(Some(gpu.0));
        }
        let g = &mut self.gpus[gpu.0 as usize];
        if !g.running.contains(&task) {
            g.running.push(task);
        }
        g.busy_since.get_or_insert_with(Instant::now);
        let (mut work, demand) = batch.unwrap_or((info.work, 1.0));
        // the first task after a migration waits on its data as it comes over PCIe (a
        // slice's program moves its own data through the driver)
        if !hold && let Some(extra) = self.transfer.remove(&info.tenant) {
            work += extra;
        }
        self.exec.send(gpu, Command::Run { task, work, data, memory: info.memory, hold, demand });
    }

    /// Whether a tenant other than `holder` shares `gpu`: is open and placed there (or
    /// anywhere), waiting for it or not. A slice is renewed only on a GPU its holder
    /// has to itself — beside others, each slice's end is where the policy decides
    /// (whose turn it is, or, balancing, whom to move: DCUDA §3.4 moves a tenant
    /// between its tasks). A scan of the tenants, made when a slice is granted or its
    /// time is up (once a slice per GPU), not per launch.
    pub(super) fn others_share(&self, gpu: GpuId, holder: TenantId) -> bool {
        self.tenants.iter().any(|(id, t)| {
            *id != holder && t.open && (t.placed.is_empty() || t.placed.contains(&gpu.0))
        })
    }

    /// A slice's time is up (`ran_for` since it started or was last renewed): when its
    /// holder still holds it, is alive and open, and has the GPU to itself,
    /// it goes on for another slice — charged now what its gate accounted since the
    /// last charge (as a late charge, which moves its start tag and the virtual time
    /// with it, so a tenant that had the GPU alone owes nothing once others come) — and
    /// its gate stays open: no drain, no new request. Whether it was renewed.
    pub(super) fn renew_slice(&mut self, gpu: GpuId, task: TaskId, ran_for: Nanos) -> bool {
        let Some(info) = self.tasks.get(&task) else { return false };
        if !info.slice || self.draining || self.overrunning.iter().any(|(t, _, _)| *t == task) {
            return false;
        }
        let (tenant, conn) = (info.tenant, info.conn);
        let Some(c) = self.conns.get(&conn).filter(|c| c.alive) else { return false };
        // not a slice its holder is giving back (it drops its grant first), nor one on a
        // GPU the holder is not placed on (its program's kernels run elsewhere: that
        // slice ends, so that the next may be granted where they run)
        if c.region.granted() != Some(gpu.0)
            || !self
                .tenants
                .get(&tenant)
                .is_some_and(|t| t.open && (t.placed.is_empty() || t.placed.contains(&gpu.0)))
            || self.others_share(gpu, tenant)
        {
            return false;
        }
        let region = c.region.clone();
        let (used, _) = region.slice_used();
        // never more than the leg held; what the gate accounted beyond it (launches
        // queued ahead of the GPU, counted at the mean) is charged with later legs
        let held = Nanos(self.clock.wall(ran_for).as_nanos() as u64);
        let take =
            tessera_core::gate::SliceRule::charge(Nanos(used.saturating_sub(info.charged)), held).0;
        let leg = self.clock.emulated(Duration::from_nanos(take));
        let now = self.clock.now();
        if let Some(info) = self.tasks.get_mut(&task) {
            info.charged += take;
            info.slack += ran_for.saturating_sub(leg);
            info.started = Some((gpu, now));
        }
        region.set_gpu_shared(false);
        // alone and renewed, it waits for no grant: a coscheduling boost ends here (a
        // client that claimed to be interactive keeps no raised priority for as long as
        // it has the GPU to itself)
        self.cosched.borrow_mut().restore(c.pid, conn);
        if leg > Nanos::ZERO {
            self.charge_late(tenant, Some(gpu), leg);
        }
        let Some(info) = self.tasks.get(&task) else { return true };
        let data = Some((region, info.seq, info.in_len, info.out_len));
        tracing::trace!(%gpu, %task, leg_ns = leg.0, "slice renewed: its holder has the GPU to itself");
        self.exec.send(
            gpu,
            Command::Run {
                task,
                work: info.work,
                data,
                memory: info.memory,
                hold: true,
                demand: 1.0,
            },
        );
        true
    }

    /// A slice that stopped being dispatched closes its client's launch gate.
    pub(super) fn close_gate(&self, info: &TaskInfo) {
        if info.slice
            && let Some(c) = self.conns.get(&info.conn)
        {
            c.region.set_grant(None);
            self.cosched.borrow_mut().restore(c.pid, info.conn);
        }
    }

    pub(super) fn forget(&mut self, info: &TaskInfo) {
        self.by_seq.remove(&(info.conn, info.seq));
        if let Some(u) = self.uid_use.get_mut(&info.uid) {
            u.tasks = u.tasks.saturating_sub(1);
            u.gpu = Nanos(u.gpu.0.saturating_sub(info.work.0));
        }
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.tasks = t.tasks.saturating_sub(1);
        }
        if let Some(c) = self.conns.get_mut(&info.conn) {
            c.tasks = c.tasks.saturating_sub(1);
        }
        self.gc_conn(info.conn);
    }

    pub(super) fn gc_conn(&mut self, conn: ConnId) {
        if self.conns.get(&conn).is_some_and(|c| !c.alive && c.tasks == 0) {
            self.conns.remove(&conn);
        }
    }

    /// Stats, client answer and ledger release for a task that stopped on `gpu`.
    pub(super) fn finish_bookkeeping(
        &mut self,
        gpu: GpuId,
        task: TaskId,
        info: &TaskInfo,
        ok: bool,
        why: u32,
        out_len: u32,
    ) {
        self.left_gpu(gpu, task);
        self.close_gate(info);
        let now = self.clock.now();
        let (started_at, ran) = info.started.map_or((now, Nanos::ZERO), |(_, s)| (s, now - s));
        if ok {
            self.return_task_memory(task, gpu, info.memory);
        }
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            let metrics = self.metrics.as_ref().zip(t.labels.as_ref());
            if ok {
                t.done += 1;
                if let Some((m, l)) = metrics {
                    m.tenant_latency
                        .get_or_create(l)
                        .observe((now - info.submitted).0 as f64 / 1e9);
                }
                match t.class {
                    ServiceClass::UserFacing { sla } => {
                        self.totals.uf_done += 1;
                        let met = now - info.submitted <= sla;
                        if met {
                            t.met += 1;
                            self.totals.uf_met += 1;
                        }
                        if let Some((m, l)) = metrics {
                            let counter =
                                if met { &m.tenant_sla_met } else { &m.tenant_sla_missed };
                            counter.get_or_create(l).inc();
                        }
                    }
                    ServiceClass::Batch => self.totals.batch_done += 1,
                }
            } else {
                t.not_done += 1;
                self.totals.failed += 1;
            }
        }
        self.respond(
            info.conn,
            ResponseDesc {
                seq: info.seq,
                status: if ok { status::DONE } else { status::FAILED },
                reason: why,
                queued_ns: (started_at - info.submitted).0,
                ran_ns: ran.0,
                gpu: gpu.0,
                out_len,
                ..Default::default()
            },
        );
        if info.slice
            && let Some(c) = self.conns.get(&info.conn)
        {
            // a gate thread that woke on the slice's end before its completion was
            // answered asks again now, instead of sleeping out its wait
            c.region.wake_grant_waiters();
        }
        self.forget(info);
        self.gc_tenant(info.tenant);
    }

    /// `task` no longer runs on `gpu`; the GPU's busy time stops when nothing does.
    pub(super) fn left_gpu(&mut self, gpu: GpuId, task: TaskId) {
        let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
        g.running.retain(|t| *t != task);
        if g.running.is_empty()
            && let Some(since) = g.busy_since.take()
        {
            g.busy_total += since.elapsed();
        }
    }

    /// A running slice ends before its time (its program gave it back, or exited while
    /// holding it): done, charged `used` as the program's launch gate accounted it
    /// (`measured`, or partly inferred), never more than it held. Nothing runs for a
    /// slice, so nothing is reset. Whether `task` was such a slice.
    pub(super) fn end_slice_early(&mut self, task: TaskId, used: Duration, measured: bool) -> bool {
        let Some(info) = self.tasks.get(&task) else { return false };
        let Some((gpu, started)) = info.started else { return false };
        if !info.slice || !self.runs_on(gpu, task) {
            return false;
        }
        self.exec.send(gpu, Command::Cancel { task });
        let Some(info) = self.tasks.remove(&task) else { return false };
        self.finish_bookkeeping(gpu, task, &info, true, reason::NONE, 0);
        // what renewals charged already is not charged again; what their legs held
        // and did not charge may be
        let held = self.clock.now() - started + info.slack;
        let used = used.saturating_sub(Duration::from_nanos(info.charged));
        // the gate's rule (`tessera_core::gate`): what it accounted, never more than held
        let used = tessera_core::gate::SliceRule::charge(self.clock.emulated(used), held);
        self.charge(info.tenant, Some(gpu), used);
        self.deliver(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for: used,
            measured,
            result: Ok(()),
        });
        // what ran on after its time was up (the gate measured it)
        self.charge_owed(info.tenant, info.conn);
        true
    }

    /// Slices past their time (see `Core::overrunning`): one whose holder stopped
    /// waiting without giving it back, or that ran past the task limit, ends now as it
    /// would have (charged what the gate accounted); one given back meanwhile is gone.
    pub(super) fn overrun_slices(&mut self) -> bool {
        if self.overrunning.is_empty() {
            return false;
        }
        let now = self.clock.now();
        let mut ended = Vec::new();
        self.overrunning.retain(|(task, gpu, ran)| {
            let Some(info) = self.tasks.get(task) else { return false };
            let busy = self.conns.get(&info.conn).is_some_and(|c| c.alive && c.region.gate_busy());
            let within = info.started.is_some_and(|(_, at)| now - at < self.limits.max_task);
            if busy && within {
                return true;
            }
            ended.push((*gpu, *task, *ran));
            false
        });
        let any = !ended.is_empty();
        for (gpu, task, ran) in ended {
            // as if it had just finished (the holder's report, if it came, ended it)
            if self.runs_on(gpu, task) {
                self.handle(Msg::Finished { gpu, task, ran_for: ran, out_len: 0 });
            }
        }
        any
    }

    /// Charge `tenant` GPU time it used outside a task's end — after its slice ended
    /// (FairGV §3.3.2: a kernel that runs past its slice moves its start tag past the
    /// whole kernel), or in a leg of a renewed slice — on `gpu` when known.
    pub(super) fn charge_late(&mut self, tenant: TenantId, gpu: Option<GpuId>, ran: Nanos) {
        self.charge(tenant, gpu, ran);
        self.deliver(Event::TenantCharged { tenant, ran });
    }

    /// Charge `tenant` what the gate of its connection `conn` measured after its slices
    /// ended and has not been charged yet (within the task limit).
    pub(super) fn charge_owed(&mut self, tenant: TenantId, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        let owed = c.region.take_owed().min(self.limits.max_task.0);
        if owed > 0 {
            self.charge_late(tenant, None, self.clock.emulated(Duration::from_nanos(owed)));
        }
    }

    pub(super) fn runs_on(&self, gpu: GpuId, task: TaskId) -> bool {
        self.gpus.get(gpu.0 as usize).is_some_and(|g| g.running.contains(&task))
    }

    /// End a running task whose client is gone and tell the policy it failed, so that
    /// its place is scheduled again. Alone on its GPU it is abandoned by a reset (the
    /// only way to stop a running kernel); beside co-located tasks, which a reset would
    /// kill too, the executor drops it alone.
    /// Stop a running task and end it as cancelled; whether it was running.
    pub(super) fn cancel_running(&mut self, task: TaskId) -> bool {
        if self.tasks.get(&task).is_none_or(|t| t.started.is_none()) {
            return false;
        }
        let Some(info) = self.tasks.remove(&task) else { return false };
        let Some((gpu, started)) = info.started else { return false };
        self.close_gate(&info);
        if self.is_admitting(task) {
            // nothing runs for it yet: it only leaves its place
            self.left_gpu(gpu, task);
        } else if self.runs_on(gpu, task) {
            let alone = self.gpus[gpu.0 as usize].running.len() == 1;
            self.left_gpu(gpu, task);
            if alone {
                self.gpus[gpu.0 as usize].resetting = true;
                self.totals.resets += 1;
                self.exec.send(gpu, Command::Reset);
            } else {
                self.exec.send(gpu, Command::Cancel { task });
            }
        }
        self.return_task_memory(task, gpu, info.memory);
        self.totals.cancelled += 1;
        if let Some(t) = self.tenants.get_mut(&info.tenant) {
            t.not_done += 1;
        }
        tracing::info!(%task, %gpu, "cancelled the running task of a departed client");
        self.forget(&info);
        self.gc_tenant(info.tenant);
        let ran_for = self.clock.now() - started;
        self.deliver(Event::TaskFinished {
            task,
            placement: Placement::whole(gpu),
            ran_for,
            measured: true,
            result: Err(ExecutionFailure { reason: "its client left: cancelled".into() }),
        });
        true
    }
}

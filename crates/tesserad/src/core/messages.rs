//! The core's mailbox: what connections, executors, the ledger worker, the metrics
//! scrape and a shutdown tell the core loop, each handled on the loop's thread.

use super::*;

impl Core {
    pub(super) fn handle(&mut self, m: Msg) {
        match m {
            Msg::Connected { conn, region, bell, pid, uid } => {
                // active from the start (its daemon-sleeping flag is clear)
                self.active.push((conn, region.clone(), Instant::now()));
                listen(&self.epoll, &bell, conn, true);
                self.conns.insert(
                    conn,
                    Conn {
                        region,
                        bell,
                        spurious: 0,
                        window: Instant::now(),
                        muted_until: None,
                        kicked: std::cell::Cell::new(false),
                        pid,
                        uid,
                        alive: true,
                        tenants: BTreeSet::new(),
                        tasks: 0,
                    },
                );
            }
            Msg::Control {
                conn,
                request: tessera_client::proto::Request::RunTask { tenant, cost_ns },
                reply,
                ..
            } => self.run_task_over_socket(conn, tenant, cost_ns, reply),
            Msg::Control { conn, pid, uid, request, reply } => {
                if let Some(job) = self.must_wait(conn, uid, &request) {
                    let waiting = self.parked_for(job);
                    if waiting >= MAX_PARKED_PER_JOB {
                        let message = format!(
                            "Slurm job {job} already has {waiting} registrations waiting for \
                             its memory"
                        );
                        self.refused(uid, pid, request.kind(), ErrorCode::NoCapacity, &message);
                        reply.send(Reply::Error { code: ErrorCode::NoCapacity, message });
                        return;
                    }
                    self.log(Some(uid), crate::events::NodeEvent::RegistrationWaits { job, pid });
                    self.parked.push(Parked { job, conn, pid, uid, request, reply });
                } else {
                    let kind = request.kind();
                    let answer = self.control(conn, pid, uid, request);
                    if let Reply::Error { code, message } = &answer {
                        self.refused(uid, pid, kind, *code, message);
                    }
                    reply.send(answer);
                }
            }
            Msg::Disconnected { conn } => {
                let tenants: Vec<TenantId> = self
                    .conns
                    .get(&conn)
                    .map(|c| c.tenants.iter().copied().collect())
                    .unwrap_or_default();
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.alive = false;
                    // the client may keep the eventfd open; stop listening to it
                    let _ = rustix::event::epoll::delete(&self.epoll, c.bell.as_fd());
                }
                self.active.retain(|(id, _, _)| *id != conn);
                self.parked.retain(|p| p.conn != conn);
                // a program that exits while holding a slice of the launch gate is not
                // a failure: its slice ends as done, charged what its gate accounted
                let slices: Vec<TaskId> = self
                    .tasks
                    .iter()
                    .filter(|(_, t)| t.conn == conn && t.slice && t.started.is_some())
                    .map(|(id, _)| *id)
                    .collect();
                if !slices.is_empty()
                    && let Some(c) = self.conns.get(&conn)
                {
                    let (used, inferred) = c.region.slice_used();
                    for task in slices {
                        self.end_slice_early(task, Duration::from_nanos(used), !inferred);
                    }
                }
                for t in tenants {
                    self.close_tenant(t);
                }
                if self.limits.departed_running == crate::config::Departed::Cancel {
                    let running: Vec<TaskId> = self
                        .tasks
                        .iter()
                        .filter(|(_, t)| t.conn == conn && t.started.is_some())
                        .map(|(id, _)| *id)
                        .collect();
                    for task in running {
                        self.cancel_running(task);
                    }
                }
                self.gc_conn(conn);
            }
            Msg::Finished { gpu, task, ran_for, out_len } => {
                if !self.runs_on(gpu, task) {
                    return; // stale: the GPU was reset under it
                }
                // a slice of a GPU its holder has to itself goes on (work conserving):
                // the holder keeps its queue, and is charged what it used so far
                if self.renew_slice(gpu, task, ran_for) {
                    return;
                }
                // a slice whose holder still waits for its launch keeps the GPU (a
                // non-preemptive GPU runs the kernel on anyway): it ends when the
                // holder reports, charged what it measured (FairGV §3.3.2)
                if let Some(info) = self.tasks.get(&task)
                    && info.slice
                    && info
                        .started
                        .is_some_and(|(_, at)| self.clock.now() - at < self.limits.max_task)
                    && self.conns.get(&info.conn).is_some_and(|c| c.alive && c.region.gate_busy())
                {
                    // its time is up: no more launches, only what runs is waited for
                    self.close_gate(info);
                    self.overrunning.push((task, gpu, ran_for));
                    return;
                }
                let Some(info) = self.tasks.remove(&task) else { return };
                // a slice is charged what the client's launch gate accounted (measured,
                // or partly inferred) since its last renewal, never more than it held
                let (ran_for, measured) = match self.conns.get(&info.conn) {
                    Some(c) if info.slice => {
                        let (used, inferred) = c.region.slice_used();
                        let used = used.saturating_sub(info.charged);
                        let held = ran_for + info.slack;
                        let used = self.clock.emulated(Duration::from_nanos(used));
                        (tessera_core::gate::SliceRule::charge(used, held), !inferred)
                    }
                    _ => (ran_for, true),
                };
                self.finish_bookkeeping(gpu, task, &info, true, reason::NONE, out_len);
                self.charge(info.tenant, Some(gpu), ran_for);
                self.deliver(Event::TaskFinished {
                    task,
                    placement: Placement::whole(gpu),
                    ran_for,
                    measured,
                    result: Ok(()),
                });
                if info.slice {
                    self.charge_owed(info.tenant, info.conn);
                }
            }
            Msg::Failed { gpu, task, ran_for, reason: why } => {
                if !self.runs_on(gpu, task) {
                    return;
                }
                let Some(info) = self.tasks.remove(&task) else { return };
                self.return_task_memory(task, gpu, info.memory);
                self.finish_bookkeeping(gpu, task, &info, false, reason::EXECUTOR, 0);
                self.deliver(Event::TaskFinished {
                    task,
                    placement: Placement::whole(gpu),
                    ran_for,
                    measured: true,
                    result: Err(ExecutionFailure { reason: why }),
                });
            }
            Msg::ResetDone { gpu } => {
                if let Some(g) = self.gpus.get_mut(gpu.0 as usize) {
                    g.resetting = false;
                }
                self.log(None, crate::events::NodeEvent::ResetDone { gpu: gpu.0 });
                self.deliver(Event::GpuResetDone { gpu });
            }
            Msg::Admitted { task, ticket, gpu, bytes, refused } => {
                self.admitted(task, ticket, gpu, bytes, refused);
            }
            Msg::Scrape { done } => {
                self.refresh_metrics();
                let _ = done.send(());
            }
            Msg::Shutdown => {
                tracing::info!(
                    "draining: admitting nothing new, cancelling queued tasks, finishing running ones"
                );
                self.draining = true;
                // registrations waiting for a job's memory are refused: no more come
                self.retry_parked();
                self.drain_started = Some(Instant::now());
                let open: Vec<TenantId> =
                    self.tenants.iter().filter(|(_, t)| t.open).map(|(id, _)| *id).collect();
                for t in open {
                    self.close_tenant(t);
                }
            }
        }
    }
}

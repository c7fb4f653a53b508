//! Carrying out the policy's actions: dispatches, task ends, resets, migrations,
//! repartitions and what this daemon's executors cannot do (refused back to the policy).

use super::*;

impl Core {
    pub(super) fn apply(&mut self, a: Action) {
        match a {
            Action::Dispatch { task, placement } => self.dispatch(task, placement.gpu),
            Action::EndTask { task, reason: why } => {
                let Some(info) = self.tasks.remove(&task) else { return };
                self.forget(&info);
                let (st, code) = match why {
                    _ if self.draining => (status::CANCELLED, reason::SHUTDOWN),
                    TaskEndReason::TenantLeft => (status::CANCELLED, reason::TENANT_CLOSED),
                    TaskEndReason::CancelledByClient => {
                        (status::CANCELLED, reason::CANCELLED_BY_CLIENT)
                    }
                    TaskEndReason::Shutdown => (status::CANCELLED, reason::SHUTDOWN),
                    TaskEndReason::UnknownTenant => (status::FAILED, reason::UNKNOWN_TENANT),
                    TaskEndReason::Unschedulable(_) => (status::FAILED, reason::UNSCHEDULABLE),
                    TaskEndReason::Dropped => (status::FAILED, reason::DROPPED),
                };
                if st == status::CANCELLED {
                    self.totals.cancelled += 1;
                } else {
                    self.totals.failed += 1;
                }
                if let Some(t) = self.tenants.get_mut(&info.tenant) {
                    t.not_done += 1;
                    t.queued = t.queued.saturating_sub(1);
                }
                self.respond(
                    info.conn,
                    ResponseDesc {
                        seq: info.seq,
                        status: st,
                        reason: code,
                        gpu: u32::MAX,
                        ..Default::default()
                    },
                );
                self.gc_tenant(info.tenant);
            }
            Action::ResetGpu { gpu, killed } => {
                let Some(g) = self.gpus.get_mut(gpu.0 as usize) else { return };
                if let Some(since) = g.busy_since.take() {
                    g.busy_total += since.elapsed();
                }
                g.running.clear();
                g.resetting = true;
                self.totals.resets += 1;
                self.log(
                    None,
                    crate::events::NodeEvent::Reset { gpu: gpu.0, killed: killed.len() },
                );
                // the policy re-queued the killed tasks (or ended those of departed
                // tenants, answered through EndTask)
                for task in killed {
                    if let Some(info) = self.tasks.get(&task) {
                        self.close_gate(info);
                    }
                    let Some(info) = self.tasks.get_mut(&task) else { continue };
                    info.started = None;
                    let memory = info.memory;
                    if let Some(t) = self.tenants.get_mut(&info.tenant) {
                        t.queued += 1;
                    }
                    self.return_task_memory(task, gpu, memory);
                }
                self.exec.send(gpu, Command::Reset);
            }
            Action::SetPools { user_facing } => {
                let before: Vec<&str> = self.gpus.iter().map(|g| g.pool).collect();
                // every GPU not named serves batch work
                for rt in &mut self.gpus {
                    rt.pool = "batch";
                }
                for g in &user_facing {
                    if let Some(rt) = self.gpus.get_mut(g.0 as usize) {
                        rt.pool = "user_facing";
                    }
                }
                if self.gpus.iter().map(|g| g.pool).ne(before) {
                    let user_facing = user_facing.iter().map(|g| g.0).collect();
                    self.log(None, crate::events::NodeEvent::Pool { user_facing });
                }
            }
            Action::Repartition { gpu, shares } if self.inference.is_some() => {
                // emulated partitions: a share of the GPU's demand, ready at once (see
                // `inference`); batches already running finish where they are
                if let Some(g) = self.gpus.get_mut(gpu.0 as usize) {
                    g.partitions = shares;
                    let partitions = g.partitions.iter().map(|p| u32::from(p.0) / 10).collect();
                    self.internal.push_back(Event::RepartitionDone { gpu });
                    self.log(
                        None,
                        crate::events::NodeEvent::Repartition { gpu: gpu.0, partitions },
                    );
                }
            }
            Action::Migrate { tenant, from, to } if self.balance.is_some() => {
                // DCUDA §3.4: the policy moves a tenant only between its tasks, so
                // nothing of it runs on `from` and, its reservations being per task, it
                // holds no memory there; the context moves in the pause, and its data
                // would follow on demand while it runs on `to`
                let pause = self.balance.as_ref().map_or(Nanos::ZERO, |(_, p)| *p);
                self.totals.migrations += 1;
                // the program's reservations follow it there
                if let Some(desk) = &self.desk {
                    desk.allow(tenant.0, to.0);
                }
                let uid = self.tenants.get(&tenant).map(|t| t.uid);
                self.log(
                    uid,
                    crate::events::NodeEvent::Migration {
                        tenant: tenant.0,
                        from: from.0,
                        to: to.0,
                        pause_ms: self.clock.wall(pause).as_secs_f64() * 1e3,
                    },
                );
                self.arriving.push((self.clock.now() + pause, tenant, to));
                let bytes = self.tenants.get(&tenant).map_or(0, |t| t.declared);
                if bytes > 0 && self.pcie_bytes_per_s > 0.0 {
                    let ns = (bytes as f64 / self.pcie_bytes_per_s * 1e9).ceil() as u64;
                    self.transfer.insert(tenant, Nanos(ns));
                }
            }
            Action::DispatchBatch { tasks, placement } if self.inference.is_some() => {
                self.dispatch_batch(&tasks, placement);
            }
            other => {
                tracing::warn!(?other, "action not supported by this daemon's executors; refused");
                // the policy hears of it (queued behind the actions being applied)
                self.internal.push_back(Event::ActionRefused {
                    action: Box::new(other),
                    reason: "not supported by this daemon's executors".into(),
                });
            }
        }
    }
}

//! The status report: GPUs, tenants, jobs, serving and balancing, as a viewer may see them.

use super::*;

impl Core {
    /// The node's state as `viewer` may see it: root and the daemon's own user see
    /// every tenant; others only their own uid's (and GPUs busy with others' tasks as
    /// just "busy"). One page of the tenants `q` selects.
    pub(super) fn status(&self, viewer: u32, q: StatusQuery) -> StatusReport {
        let sees_all = viewer == 0 || viewer == self.daemon_uid;
        let uid_of = |t: &TenantInfo| self.conns.get(&t.conn).map_or(u32::MAX, |c| c.uid);
        let visible = |t: &TenantInfo| sees_all || uid_of(t) == viewer;
        // the tenants with a task running on the GPU asked about
        let on_gpu: BTreeSet<TenantId> = self
            .gpus
            .iter()
            .flat_map(|g| g.running.iter().filter_map(|t| self.tasks.get(t)))
            .filter(|info| info.started.is_some_and(|(gpu, _)| Some(gpu.0) == q.gpu))
            .map(|info| info.tenant)
            .collect();
        let selected = self.tenants.iter().filter(|(id, t)| {
            t.open
                && visible(t)
                && q.tenant.is_none_or(|x| x == id.0)
                && q.uid.is_none_or(|u| u == uid_of(t))
                && (q.gpu.is_none() || on_gpu.contains(id))
        });
        let total = selected.clone().count() as u64;
        let limit = match q.limit {
            0 => STATUS_PAGE,
            n => n.min(STATUS_PAGE),
        };
        let uptime = self.started.elapsed();
        let Shares { held, entitled, received, mut busy, ledger: used } = self.shares();
        let balance: Option<DcudaReport> =
            self.balance.as_ref().and_then(|(r, _)| r.lock().ok().map(|r| r.clone()));
        let state_name = |s: LoadState| match s {
            LoadState::Underloaded => "underloaded",
            LoadState::Normal => "normal",
            LoadState::Overloaded => "overloaded",
        };
        // at most a page of jobs (a status reply must fit one frame); `jobs_total` says
        // how many there are
        let visible_jobs = || self.jobs.values().filter(|j| sees_all || j.grant.uid == viewer);
        let jobs_total = visible_jobs().count() as u64;
        let jobs = visible_jobs()
            .take(JOBS_IN_STATUS)
            .map(|j| {
                let waiting = self.parked_for(j.grant.job) as u32;
                j.report(self.job_declared(j.grant.job), waiting)
            })
            .collect();
        StatusReport {
            jobs,
            jobs_total,
            slurm_shards_per_gpu: self.limits.slurm.shards_per_gpu,
            policy: self.policy_name.clone(),
            ledger: self.ledger_path.clone(),
            executor: self.executor_name.clone(),
            uptime_s: uptime.as_secs_f64(),
            gpus: self
                .gpus
                .iter()
                .enumerate()
                .filter(|(i, _)| q.gpu.is_none_or(|g| g as usize == *i))
                .map(|(i, g)| {
                    let busy = g.busy();
                    let shares = self.exec.shares(GpuId(i as u32));
                    let running: Vec<RunningReport> = g
                        .running
                        .iter()
                        .filter_map(|t| self.tasks.get(t).map(|info| (t, info)))
                        .map(|(t, info)| RunningReport {
                            // another uid's tenant is shown only as "busy" work
                            tenant: self
                                .tenants
                                .get(&info.tenant)
                                .is_some_and(visible)
                                .then_some(info.tenant.0),
                            share: shares
                                .as_ref()
                                .and_then(|s| s.iter().find(|(id, _)| id == t))
                                .map(|(_, share)| *share),
                        })
                        .collect();
                    GpuReport {
                        gpu: i as u32,
                        pool: g.pool.into(),
                        busy: if g.resetting {
                            "resetting".into()
                        } else {
                            match running.as_slice() {
                                [] => "idle".into(),
                                [RunningReport { tenant: Some(t), .. }] => format!("tenant {t}"),
                                [_] => "busy".into(),
                                many => format!("{} tasks", many.len()),
                            }
                        },
                        running,
                        memory_used: used
                            .as_ref()
                            .and_then(|s| s.gpus.get(i))
                            .map_or(0, |s| s.used),
                        memory_total: g.memory,
                        utilization: if uptime.is_zero() {
                            0.0
                        } else {
                            busy.as_secs_f64() / uptime.as_secs_f64()
                        },
                        partitions: g.partitions.iter().map(|p| u32::from(p.0) / 10).collect(),
                        load: balance.as_ref().and_then(|b| {
                            let u = b.utilization.get(i)?;
                            let st = (*b.states.get(i)?)?;
                            Some((*u, state_name(st).to_string()))
                        }),
                    }
                })
                .collect(),
            tenants: selected
                .skip(usize::try_from(q.offset).unwrap_or(usize::MAX))
                .take(limit as usize)
                .map(|(id, t)| {
                    let c = self.conns.get(&t.conn);
                    TenantReport {
                        tenant: id.0,
                        pid: c.map_or(0, |c| c.pid),
                        uid: c.map_or(0, |c| c.uid),
                        class: if t.class.is_user_facing() {
                            TenantClass::UserFacing
                        } else {
                            TenantClass::Batch
                        },
                        sla_ms: match t.class {
                            ServiceClass::UserFacing { sla } => sla.0 / 1_000_000,
                            ServiceClass::Batch => 0,
                        },
                        queued: t.queued,
                        done: t.done,
                        not_done: t.not_done,
                        sla_met: (t.class.is_user_facing() && t.done > 0)
                            .then(|| t.met as f64 / t.done as f64),
                        memory_held: held.get(id).copied().unwrap_or(0),
                        gpus: t.placed.clone(),
                        gpu_busy: busy.remove(id).unwrap_or_default(),
                        demand: t.demand,
                        gpu_ms: t.gpu_time.as_secs_f64() * 1e3,
                        weight: t.weight,
                        entitled_share: entitled.get(id).copied(),
                        received_share: received
                            .as_ref()
                            .map(|r| r.get(id).copied().unwrap_or(0.0)),
                        waiting_ms: t.waiting.0 as f64 / 1e6,
                        job: t.job,
                        model: self.inference.as_ref().and_then(|inf| inf.model_of(*id)).map(|m| {
                            ModelReport {
                                name: m.model.name,
                                profile: m.model.profile,
                                rate: m.rate,
                                gpulets: m.gpulets,
                            }
                        }),
                    }
                })
                .collect(),
            tenants_total: total,
            serving: self.inference.as_ref().map(|i| {
                let (reorganizations, refused) = i.decisions();
                ServingSummary { reorganizations, refused }
            }),
            balance: balance.map(|b| BalanceSummary {
                migrations: b.migrations,
                recent: b
                    .recent
                    .iter()
                    .map(|m| MigrationReport {
                        at_s: m.at.0 as f64 / 1e9 / self.clock.speedup(),
                        tenant: self
                            .tenants
                            .get(&m.decided.tenant)
                            .is_some_and(visible)
                            .then_some(m.decided.tenant.0),
                        from: m.decided.from.0,
                        to: m.decided.to.0,
                        reason: match m.decided.reason {
                            MoveReason::Balance => "balance".into(),
                            MoveReason::Energy => "energy".into(),
                            MoveReason::Shares => "shares".into(),
                            MoveReason::Room => "room".into(),
                        },
                    })
                    .collect(),
            }),
            totals: Totals { coscheduled: self.cosched.borrow().boosts(), ..self.totals.clone() },
            events: self
                .events
                .recent(q.events.min(STATUS_EVENTS) as usize, |e| sees_all || e.uid == Some(viewer))
                .into_iter()
                .map(|e| EventReport {
                    at_s: e.uptime_s,
                    kind: e.event.kind().to_string(),
                    text: e.event.to_string(),
                })
                .collect(),
        }
    }

    /// Each open tenant's memory held, entitled share and received share, and the
    /// ledger's state, as `status` and the metrics report them.
    fn shares(&self) -> Shares {
        // memory of the running tasks, and who has work running (fair sharing)
        let mut held: BTreeMap<TenantId, u64> = BTreeMap::new();
        let mut on_any: BTreeSet<TenantId> = BTreeSet::new();
        for info in
            self.gpus.iter().flat_map(|g| g.running.iter().filter_map(|t| self.tasks.get(t)))
        {
            *held.entry(info.tenant).or_default() += info.memory;
            on_any.insert(info.tenant);
        }
        let ledger = self.ledger.as_ref().and_then(|w| w.snapshot());
        // what programs reserved through the daemon, as the ledger holds it
        if let (Some(desk), Some(ledger)) = (&self.desk, &ledger) {
            for (tenant, client) in desk.ledger_clients() {
                let bytes: u64 =
                    ledger.holdings.iter().filter(|h| h.client == client).map(|h| h.bytes).sum();
                *held.entry(TenantId(tenant)).or_default() += bytes;
            }
        }
        // a Slurm job's tenants share the job's one weight: each active job counts
        // once, its entitlement split among its active tenants
        let mut active: BTreeMap<Result<u64, TenantId>, (u32, u32)> = BTreeMap::new();
        for (id, t) in &self.tenants {
            if t.open && (t.queued > 0 || on_any.contains(id)) {
                let e = active.entry(t.job.ok_or(*id)).or_insert((t.weight, 0));
                e.1 += 1;
            }
        }
        let active_weight: u32 = active.values().map(|(w, _)| *w).sum();
        let entitled = self
            .tenants
            .iter()
            .filter_map(|(id, t)| {
                let (w, n) = active.get(&t.job.ok_or(*id))?;
                let share =
                    f64::from(*w) / f64::from(active_weight.max(1)) / f64::from((*n).max(1));
                Some((*id, share))
            })
            .collect();
        let now = self.clock.now();
        let mut charged: BTreeMap<TenantId, u64> = BTreeMap::new();
        // per tenant and GPU, the charged time that falls in the busy window (a charge
        // ran up to when it was made)
        let busy_window = BUSY_WINDOW_MS * 1_000_000;
        let window_start = now.0.saturating_sub(busy_window);
        let mut recent: BTreeMap<(TenantId, u32), u64> = BTreeMap::new();
        for c in &self.charges {
            if now.saturating_sub(c.at) <= SHARE_WINDOW {
                *charged.entry(c.tenant).or_default() += c.ran.0;
            }
            if let Some(gpu) = c.gpu
                && c.at.0 > window_start
            {
                *recent.entry((c.tenant, gpu)).or_default() += c.ran.0.min(c.at.0 - window_start);
            }
        }
        let mut busy: BTreeMap<TenantId, Vec<GpuBusy>> = BTreeMap::new();
        for ((tenant, gpu), ns) in recent {
            let fraction = (ns as f64 / busy_window as f64).min(1.0);
            busy.entry(tenant).or_default().push(GpuBusy { gpu, busy: fraction });
        }
        let charged_total: u64 = charged.values().sum();
        let received = (charged_total > 0).then(|| {
            charged.into_iter().map(|(id, n)| (id, n as f64 / charged_total as f64)).collect()
        });
        Shares { held, entitled, received, busy, ledger }
    }

    /// Bring the metrics up to date (a scrape): set the gauges from the node's state
    /// and raise the counters to the core's totals.
    pub(super) fn refresh_metrics(&self) {
        use crate::metrics::{GpuLabel, NodeMetrics, advance, advance_f};
        let Some(m) = &self.metrics else { return };
        let Shares { held, entitled, received, ledger, .. } = self.shares();
        let busy: Vec<f64> = self.gpus.iter().map(|g| g.busy().as_secs_f64()).collect();
        let ratios = m.busy_ratios(&busy);
        let waited = self.desk.as_ref().map(|d| d.waiting_bytes()).unwrap_or_default();
        for (i, g) in self.gpus.iter().enumerate() {
            let l = GpuLabel { gpu: i as u32 };
            advance_f(&m.gpu_busy_seconds.get_or_create(&l), busy[i]);
            m.gpu_busy_ratio.get_or_create(&l).set(ratios[i]);
            let sm = match self.exec.shares(GpuId(i as u32)) {
                Some(shares) => shares.iter().fold(0.0, |sum, (_, s)| sum + s).min(1.0),
                None => f64::from(u8::from(!g.running.is_empty())),
            };
            m.gpu_sm_utilization.get_or_create(&l).set(sm);
            m.gpu_memory_capacity.get_or_create(&l).set(g.memory as i64);
            let lg = ledger.as_ref().and_then(|s| s.gpus.get(i));
            m.gpu_memory_granted.get_or_create(&l).set(lg.map_or(0, |s| s.used) as i64);
            m.gpu_memory_waited
                .get_or_create(&l)
                .set(waited.get(&(i as u32)).copied().unwrap_or(0) as i64);
            m.gpu_running_tasks.get_or_create(&l).set(g.running.len() as i64);
            let slices = g.running.iter().filter(|t| self.tasks.get(t).is_some_and(|x| x.slice));
            m.gpu_slices.get_or_create(&l).set(slices.count() as i64);
            m.gpu_partitions.get_or_create(&l).set(g.partitions.len() as i64);
            m.gpu_pool_member.get_or_create(&l).set(i64::from(g.pool == "user_facing"));
            m.gpu_resetting.get_or_create(&l).set(i64::from(g.resetting));
            m.gpu_powered
                .get_or_create(&l)
                .set(i64::from(g.placed > 0 || !g.running.is_empty() || g.resetting));
            m.ledger_waiters.get_or_create(&l).set(lg.map_or(0, |s| s.waiting) as i64);
            let holders = ledger.as_ref().map_or(0, |s| {
                s.holdings.iter().filter(|h| h.gpu == i as u32 && h.bytes > 0).count()
            });
            m.ledger_holders.get_or_create(&l).set(holders as i64);
        }
        // tenants: the gauges are set afresh (those beyond max_tenants summed)
        m.clear_tenant_gauges();
        let mut open = [0i64; 2];
        let mut aggregated = 0;
        for (id, t) in self.tenants.iter().filter(|(_, t)| t.open) {
            open[usize::from(t.class.is_user_facing())] += 1;
            let Some(labels) = &t.labels else { continue };
            let other = labels.tenant == "other";
            aggregated += i64::from(other);
            let l = NodeMetrics::with_gpus(labels, if other { &[] } else { &t.placed });
            let add =
                |f: &prometheus_client::metrics::family::Family<_, crate::metrics::GaugeF>,
                 v: f64| {
                    f.get_or_create(&l).inc_by(v);
                };
            add(&m.tenant_weight, f64::from(t.weight));
            add(&m.tenant_entitled_share, entitled.get(id).copied().unwrap_or(0.0));
            add(
                &m.tenant_received_share,
                received.as_ref().and_then(|r| r.get(id)).copied().unwrap_or(0.0),
            );
            add(&m.tenant_memory_held, held.get(id).copied().unwrap_or(0) as f64);
            add(&m.tenant_queued, t.queued as f64);
        }
        m.tenants_open.get_or_create(&crate::metrics::class("batch")).set(open[0]);
        m.tenants_open.get_or_create(&crate::metrics::class("user_facing")).set(open[1]);
        m.tenants_aggregated.set(aggregated);
        // the policy's decisions
        m.pool_gpus.set(self.gpus.iter().filter(|g| g.pool == "user_facing").count() as i64);
        advance(&m.resets, self.totals.resets);
        advance(&m.migrations, self.totals.migrations);
        if let Some(inf) = &self.inference {
            advance(&m.repartitions, inf.decisions().0);
        }
        let done = self.totals.uf_done + self.totals.batch_done;
        advance(&m.tasks.get_or_create(&crate::metrics::outcome("done")), done);
        advance(&m.tasks.get_or_create(&crate::metrics::outcome("failed")), self.totals.failed);
        advance(
            &m.tasks.get_or_create(&crate::metrics::outcome("cancelled")),
            self.totals.cancelled,
        );
        // the daemon itself
        m.connections.set(self.connections.count() as i64);
        m.rings_open.set(self.conns.values().filter(|c| c.alive).count() as i64);
        m.rings_active.set(self.active.len() as i64);
    }
}

/// What `Core::shares` computes.
struct Shares {
    held: BTreeMap<TenantId, u64>,
    entitled: BTreeMap<TenantId, f64>,
    /// `None` while nothing was charged in the window.
    received: Option<BTreeMap<TenantId, f64>>,
    /// The GPUs each tenant was charged time on in the busy window, and how busy.
    busy: BTreeMap<TenantId, Vec<GpuBusy>>,
    ledger: Option<tessera_ledger::LedgerStatus>,
}

/// What a status request selects.
#[derive(Clone, Copy, Debug)]
pub(super) struct StatusQuery {
    pub(super) tenant: Option<u64>,
    pub(super) uid: Option<u32>,
    pub(super) gpu: Option<u32>,
    pub(super) offset: u64,
    pub(super) limit: u32,
    pub(super) events: u32,
}

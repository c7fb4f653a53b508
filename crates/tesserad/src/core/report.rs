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
        // per-tenant memory and GPUs in one pass over the running tasks
        let mut held: BTreeMap<TenantId, u64> = BTreeMap::new();
        let mut on_gpu: BTreeSet<TenantId> = BTreeSet::new();
        for g in &self.gpus {
            for info in g.running.iter().filter_map(|t| self.tasks.get(t)) {
                *held.entry(info.tenant).or_default() += info.memory;
                if info.started.is_some_and(|(gpu, _)| Some(gpu.0) == q.gpu) {
                    on_gpu.insert(info.tenant);
                }
            }
        }
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
        let used = self.ledger.as_ref().and_then(|w| w.snapshot());
        // what programs reserved through the daemon, as the ledger holds it
        if let (Some(desk), Some(ledger)) = (&self.desk, &used) {
            for (tenant, client) in desk.ledger_clients() {
                let bytes: u64 =
                    ledger.holdings.iter().filter(|h| h.client == client).map(|h| h.bytes).sum();
                *held.entry(TenantId(tenant)).or_default() += bytes;
            }
        }
        // fair sharing: who has work now, and who was charged GPU time lately
        let on_any: BTreeSet<TenantId> = self
            .gpus
            .iter()
            .flat_map(|g| g.running.iter().filter_map(|t| self.tasks.get(t).map(|i| i.tenant)))
            .collect();
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
        let entitled = |id: &TenantId, t: &TenantInfo| {
            let (w, n) = active.get(&t.job.ok_or(*id))?;
            Some(f64::from(*w) / f64::from(active_weight.max(1)) / f64::from((*n).max(1)))
        };
        let now = self.clock.now();
        let mut charged: BTreeMap<TenantId, u64> = BTreeMap::new();
        for (at, tenant, ran) in &self.charges {
            if now.saturating_sub(*at) <= SHARE_WINDOW {
                *charged.entry(*tenant).or_default() += ran.0;
            }
        }
        let charged_total: u64 = charged.values().sum();
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
            executor: self.executor_name.clone(),
            uptime_s: uptime.as_secs_f64(),
            gpus: self
                .gpus
                .iter()
                .enumerate()
                .filter(|(i, _)| q.gpu.is_none_or(|g| g as usize == *i))
                .map(|(i, g)| {
                    let busy = g.busy_total + g.busy_since.map_or(Duration::ZERO, |s| s.elapsed());
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
                        demand: t.demand,
                        gpu_ms: t.gpu_time.as_secs_f64() * 1e3,
                        weight: t.weight,
                        entitled_share: entitled(id, t),
                        received_share: (charged_total > 0).then(|| {
                            charged.get(id).map_or(0, |n| *n) as f64 / charged_total as f64
                        }),
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
                        },
                    })
                    .collect(),
            }),
            totals: self.totals.clone(),
        }
    }
}

/// What a status request selects.
#[derive(Clone, Copy, Debug)]
pub(super) struct StatusQuery {
    pub(super) tenant: Option<u64>,
    pub(super) uid: Option<u32>,
    pub(super) gpu: Option<u32>,
    pub(super) offset: u64,
    pub(super) limit: u32,
}

//! Dispatching on the node: each GPU's next task by the pools' and fair queuing's
//! order, batch work overflowing onto idle GPUs, and the inference server's GPUs.

use super::*;

impl NodePolicy {
    pub(super) fn dispatch(&mut self, now: Nanos, actions: &mut Vec<Action>) {
        // the inference server's GPUs are its own
        let (mut pool, mut rest) =
            (std::mem::take(&mut self.idle_pool), std::mem::take(&mut self.idle_rest));
        pool.clear();
        rest.clear();
        for g in self.board.idle_ids() {
            if self.serves_models(g) {
                continue;
            }
            if self.pool.contains(g) { pool.push(g) } else { rest.push(g) }
        }
        for &gpu in &pool {
            match self.oldest_service_for(gpu) {
                Some(tenant) => self.serve(now, gpu, tenant, actions),
                // a pool GPU whose batch tenants leave room for no waiting request's
                // context runs their work meanwhile, rather than idle (issue 56: day 139
                // of the trace, where such a GPU sat idle in the pool for 70 s while
                // the services' queue grew without bound and its tenants starved)
                None if self.overcommitted(gpu) && self.board.queued(Classes::UserFacing) > 0 => {
                    let at = rest.partition_point(|g| *g < gpu);
                    rest.insert(at, gpu);
                }
                None => {}
            }
        }
        if self.params.overflow {
            self.overflow(now, &mut rest, actions);
        }
        let homes = &self.homes;
        let moving = &self.moving;
        // a migrating tenant is among those moving until its move is done
        let may_run = |t: TenantId, g: GpuId| homes.get(&t) == Some(&g) && !moving.contains_key(&t);
        let before = actions.len();
        self.batch.dispatch(&mut self.board, now, &rest, &may_run, actions);
        for a in &actions[before..] {
            if let Action::Dispatch { task, placement } = a
                && let Some(r) = self.board.running_task(placement.gpu, *task)
            {
                self.monitor.started_exclusive(*task, r.spec.tenant, now);
            }
        }
        // (emptied: scratch, which a later look at the policy would take for state)
        pool.clear();
        rest.clear();
        (self.idle_pool, self.idle_rest) = (pool, rest);
    }

    /// The registered services changed: their memory, kept free on every GPU, and
    /// Flexy's minimum reservation. The reservation keeps GPUs ready for user-facing
    /// requests; with no service registered it would keep them idle for none, so with
    /// [`NodeParams::reserve_only_with_services`] batch tenants get them until one
    /// registers (the pool then takes one back at once).
    pub(super) fn services_changed(&mut self) {
        self.services_memory = self.services.values().map(|m| m.0).sum();
        self.ranks_all_stale = true;
        if self.params.reserve_only_with_services {
            let k = if self.services.is_empty() { 0 } else { self.params.flexy.reserve };
            self.pool.set_reserve(k);
        }
    }

    /// A user-facing request still queued when only two task times are left before its
    /// SLA would miss it waiting for the pool: it takes an idle GPU outside the pool
    /// where the services' memory fits, before batch work (batch GPUs free at every
    /// task's end, so one is never far).
    pub(super) fn overflow(
        &mut self,
        now: Nanos,
        idle: &mut Vec<GpuId>,
        actions: &mut Vec<Action>,
    ) {
        let le = self.pool.estimate();
        // a request that would be late by the time the next GPU outside the pool frees
        // cannot wait for it: with batch tasks as long as the SLA, waiting for a late
        // request's last moment left it behind a fresh batch task (issue 56: 92.5% of
        // requests in time where priority keeps 100%). Looked up only when a request
        // waits beside an idle GPU (a walk of the node), which is first asked before any
        // idle GPU is taken below
        let mut next_free: Option<Nanos> = None;
        while !idle.is_empty() {
            let Some(tenant) = self.board.oldest_head(Classes::UserFacing) else { return };
            let (Some(spec), (_, Some(since))) =
                (self.board.tenant_spec(tenant), self.board.queue_of(tenant))
            else {
                return;
            };
            let ServiceClass::UserFacing { sla } = spec.class else { return };
            let latest_start = since + sla.saturating_sub(le + le);
            let wait = *next_free.get_or_insert_with(|| {
                self.board
                    .gpu_ids()
                    .filter(|g| {
                        !self.pool.contains(*g) && !idle.contains(g) && !self.serves_models(*g)
                    })
                    .map(|g| self.board.expected_free_at(g, now))
                    .min()
                    .map_or(Nanos::ZERO, |at| at.saturating_sub(now))
            });
            if now + wait < latest_start {
                return;
            }
            // only where its context fits beside the batch tenants homed there
            let Some(i) = idle.iter().position(|g| self.service_fits(*g, tenant)) else {
                return;
            };
            let gpu = idle.remove(i);
            self.serve(now, gpu, tenant, actions);
        }
    }

    /// Whether user-facing `tenant`'s context fits on `gpu`: it lives there already,
    /// or it fits beside the batch tenants homed (or moving) there and the services
    /// that live there. Where the homes leave room for every service (the rule for
    /// homing), every service fits.
    pub(super) fn service_fits(&self, gpu: GpuId, tenant: TenantId) -> bool {
        if !self.overcommitted(gpu) {
            return true;
        }
        let on = &self.service_on[gpu.0 as usize];
        if on.contains(&tenant) {
            return true;
        }
        let batch = self.committed(gpu) - self.services_memory;
        let living: u64 = on.iter().map(|t| self.services.get(t).map_or(0, |b| b.0)).sum();
        let own = self.services.get(&tenant).map_or(0, |b| b.0);
        batch + living + own <= self.board.gpu_memory(gpu).0
    }

    /// The user-facing tenant whose request `gpu` serves next: the oldest head, or on a
    /// GPU whose homes leave no room for every service, the oldest among those whose
    /// context fits there (a walk of the waiting tenants, on that rare GPU only).
    pub(super) fn oldest_service_for(&self, gpu: GpuId) -> Option<TenantId> {
        if !self.overcommitted(gpu) {
            return self.board.oldest_head(Classes::UserFacing);
        }
        self.board.oldest_head_where(Classes::UserFacing, |t| self.service_fits(gpu, t))
    }

    /// Dispatch user-facing `tenant`'s head to `gpu`, where its context lives from now.
    pub(super) fn serve(
        &mut self,
        now: Nanos,
        gpu: GpuId,
        tenant: TenantId,
        actions: &mut Vec<Action>,
    ) {
        if self.board.dispatch(now, gpu, tenant, actions).is_some() {
            let on = &mut self.service_on[gpu.0 as usize];
            if !on.contains(&tenant) {
                on.push(tenant);
            }
        }
    }

    /// F-Reset's resets among `actions[from..]` killed batch tasks, which the board put
    /// back at the heads of their tenants' queues: fair queuing and the monitor hear
    /// that those tenants run nothing now (else they counted as running for good and
    /// fair queuing never served them again), and the idle GPUs are looked at again,
    /// since a killed tenant may take one at once, as the next event, a tick included,
    /// would have it do.
    pub(super) fn after_resets(&mut self, now: Nanos, from: usize, actions: &mut Vec<Action>) {
        let killed: Vec<TaskId> = actions[from..]
            .iter()
            .filter_map(|a| match a {
                Action::ResetGpu { killed, .. } => Some(killed),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        if killed.is_empty() {
            return;
        }
        self.batch.stopped_unfinished(&self.board, &killed);
        // (the killed ones ran until now: their time counts in their tenants' demand)
        let mut touched: Vec<TenantId> =
            killed.iter().filter_map(|t| self.monitor.stopped(*t, now)).collect();
        let first = actions.len();
        self.dispatch(now, actions);
        self.dispatched_tenants(&actions[first..], &mut touched);
        self.hold_waiting(now, &touched);
    }

    /// The tenants of the dispatches among `actions` that run now, onto `touched`.
    pub(super) fn dispatched_tenants(&self, actions: &[Action], touched: &mut Vec<TenantId>) {
        for a in actions {
            if let Action::Dispatch { task, placement } = a
                && let Some(r) = self.board.running_task(placement.gpu, *task)
            {
                touched.push(r.spec.tenant);
            }
        }
    }

    /// Whether `tenant` waits: work queued and nothing running (the board's running
    /// count, not a walk of the node (`tenant_gpus`): a third of the policy's time at
    /// 100x its node, issue 55).
    pub(super) fn waits(&self, tenant: TenantId) -> bool {
        self.board.waits(tenant)
    }

    /// Time a batch tenant waits with work queued is held (its turn, a move), not idle:
    /// `tenants`' holds follow their state now (a tenant's state changes only with an
    /// event of its own or a dispatch; the rare events that name no tenant look at
    /// every home, and a sample at those placed since the last one:
    /// [`NodePolicy::placed_since_sample`]).
    pub(super) fn hold_waiting(&mut self, now: Nanos, tenants: &[TenantId]) {
        for &tenant in tenants {
            if !self.homes.contains_key(&tenant) {
                continue;
            }
            if self.waits(tenant) {
                self.monitor.hold(tenant, now);
            } else {
                self.monitor.release(tenant, now);
            }
        }
    }
}

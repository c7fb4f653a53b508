//! The observer a run's policy is wrapped in: what each tenant received per slice,
//! the time to a share, and what the policy was asked and answered.

use super::*;

/// What the observer saw of one run.
#[derive(Debug, Default)]
pub(super) struct Observed {
    /// Work received per tenant per slice, ns.
    pub(super) service: BTreeMap<TenantId, Vec<u64>>,
    /// First submission and last completion per tenant.
    pub(super) first: BTreeMap<TenantId, Nanos>,
    pub(super) last: BTreeMap<TenantId, Nanos>,
    /// Each tenant's first out-of-memory failure.
    pub(super) crashes: Vec<Crash>,
    /// Out-of-memory failures in all (a tenant that did not fit fails again at each
    /// dispatch there).
    pub(super) failures: usize,
}

/// A policy wrapped to observe what a run gives each tenant and where each tenant's
/// memory lives (see the module documentation); it changes no decision.
#[derive(Debug)]
pub(super) struct Observer {
    pub(super) inner: Box<dyn Policy>,
    pub(super) slice: u64,
    pub(super) capacity: Vec<u64>,
    pub(super) work: BTreeMap<TenantId, u64>,
    pub(super) memory: BTreeMap<TenantId, u64>,
    pub(super) owner: BTreeMap<TaskId, TenantId>,
    pub(super) resident: Vec<Vec<TenantId>>,
    pub(super) moving: BTreeMap<TenantId, GpuId>,
    pub(super) seen: Arc<Mutex<Observed>>,
}

impl Observer {
    fn resident_bytes(&self, gpu: usize) -> u64 {
        self.resident[gpu].iter().map(|t| self.memory.get(t).copied().unwrap_or(0)).sum()
    }

    /// `tenant` uses `gpu`: resident there from now on, unless its memory does not fit,
    /// which is a crash (its allocation fails; it is not resident).
    pub(super) fn arrive(&mut self, now: Nanos, tenant: TenantId, gpu: GpuId) {
        let g = gpu.0 as usize;
        if g >= self.resident.len() || self.resident[g].contains(&tenant) {
            return;
        }
        let need = self.memory.get(&tenant).copied().unwrap_or(0);
        let with = self.resident_bytes(g) + need;
        if with > self.capacity[g] {
            if let Ok(mut seen) = self.seen.lock() {
                seen.failures += 1;
                if seen.crashes.iter().any(|c| c.tenant == tenant.0) {
                    return;
                }
                seen.crashes.push(Crash {
                    at_s: now.as_secs_f64(),
                    tenant: tenant.0,
                    gpu: gpu.0,
                    resident_gib: with as f64 / (1u64 << 30) as f64,
                });
            }
            return;
        }
        self.resident[g].push(tenant);
    }

    pub(super) fn leave(&mut self, tenant: TenantId, gpu: Option<GpuId>) {
        for (g, r) in self.resident.iter_mut().enumerate() {
            if gpu.is_none_or(|x| x.0 as usize == g) {
                r.retain(|t| *t != tenant);
            }
        }
    }

    /// Spread `work` over the slices of [end - ran_for, end].
    fn credit(&self, tenant: TenantId, end: Nanos, ran_for: Nanos, work: u64) {
        let Ok(mut seen) = self.seen.lock() else { return };
        let start = end.0.saturating_sub(ran_for.0.max(1));
        let span = (end.0 - start) as f64;
        let slices = seen.service.entry(tenant).or_default();
        let (mut t, last) = (start, end.0);
        while t < last {
            let s = (t / self.slice) as usize;
            let until = ((s as u64 + 1) * self.slice).min(last);
            if slices.len() <= s {
                slices.resize(s + 1, 0);
            }
            slices[s] += (work as f64 * (until - t) as f64 / span).round() as u64;
            t = until;
        }
    }
}

impl Policy for Observer {
    fn label(&self) -> String {
        self.inner.label()
    }
    fn tick_interval(&self) -> Option<Nanos> {
        self.inner.tick_interval()
    }
    // (a tick the policy would not act on records nothing here either)
    fn quiet_until(&self) -> Nanos {
        self.inner.quiet_until()
    }
    fn min_reservation(&self) -> usize {
        self.inner.min_reservation()
    }
    fn home(&self, tenant: TenantId) -> Option<GpuId> {
        self.inner.home(tenant)
    }
    fn on_event(&mut self, now: Nanos, event: &Event, actions: &mut Vec<Action>) {
        match event {
            Event::TaskSubmitted(spec) => {
                self.owner.insert(spec.id, spec.tenant);
                if let Ok(mut seen) = self.seen.lock() {
                    seen.first.entry(spec.tenant).or_insert(now);
                }
            }
            Event::TaskFinished { task, ran_for, result: Ok(()), .. } => {
                if let Some(t) = self.owner.get(task).copied() {
                    let work = self.work.get(&t).copied().unwrap_or(0);
                    self.credit(t, now, *ran_for, work);
                    if let Ok(mut seen) = self.seen.lock() {
                        seen.last.insert(t, now);
                    }
                }
            }
            // a tenant that left during its move has no memory left to bring
            Event::MigrationDone { tenant, to } if self.memory.contains_key(tenant) => {
                let from = self.moving.remove(tenant);
                self.leave(*tenant, from);
                self.arrive(now, *tenant, *to);
            }
            Event::MigrationDone { tenant, .. } => {
                self.moving.remove(tenant);
            }
            Event::MigrationFailed { tenant, .. } => {
                self.moving.remove(tenant);
            }
            Event::TenantLeft { tenant } => {
                self.leave(*tenant, None);
                self.memory.remove(tenant);
            }
            _ => {}
        }
        let before = actions.len();
        self.inner.on_event(now, event, actions);
        for action in &actions[before..] {
            match action {
                Action::Dispatch { task, placement } => {
                    if let Some(t) = self.owner.get(task).copied() {
                        self.arrive(now, t, placement.gpu);
                    }
                }
                Action::DispatchBatch { tasks, placement } => {
                    if let Some(t) = tasks.first().and_then(|x| self.owner.get(x)).copied() {
                        self.arrive(now, t, placement.gpu);
                    }
                }
                Action::Migrate { tenant, from, .. } => {
                    self.moving.insert(*tenant, *from);
                }
                _ => {}
            }
        }
    }
}

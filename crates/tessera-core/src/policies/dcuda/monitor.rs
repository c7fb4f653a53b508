//! DCUDA's monitor (§3.2): each running kernel's demand from its occupancy, cached
//! per configuration, weighted by the time the tenant's kernels run (or the GPU is
//! held for it) over each sampling interval.

use crate::id_table::IdTable;
use crate::ids::{TaskId, TenantId};
use crate::model::TaskSpec;
use crate::units::Nanos;
use std::collections::HashMap;

/// DCUDA's monitor (§3.2).
#[derive(Debug, Default)]
pub struct Monitor {
    /// Occupancy-derived demand per kernel configuration (kernel, grid, block).
    cache: HashMap<(u32, u64, u32), f64>,
    /// How many times a configuration was evaluated (once each, by the cache).
    evaluations: u64,
    /// What it knows of each tenant, in one record: a sample walks them once, and a
    /// task's end looks its tenant up once (issue 55: five tables by tenant, each
    /// walked or looked up at every sample, made a sample cost nearly three times
    /// this one).
    tenants: IdTable<Watched>,
    /// Start of the current interval.
    since: Nanos,
}

/// What the monitor knows of one tenant.
#[derive(Debug, Default)]
struct Watched {
    /// Its running tasks as (task, when the current interval's accounting of it
    /// starts, demand), in task order, so that its sum adds in the same order on every
    /// run. (Not one map of every task: a hash map's look-up at both ends of every task
    /// was a tenth of the composed node policy's time, a B-tree map's nearly a
    /// twentieth (issue 55). A tenant runs a task or a few at a time.)
    running: Vec<(u64, Nanos, f64)>,
    /// Demand-weighted running time in the current interval, ns, if it ran.
    accrued: Option<f64>,
    /// Held time in the current interval, ns, if it was held.
    held: Option<f64>,
    /// Since when it is held, if it is now.
    held_since: Option<Nanos>,
    /// Its demand in the last complete interval it was sampled in (fraction of a GPU).
    demand: Option<f64>,
}

impl Monitor {
    /// The demand of a task's kernel: its occupancy, from its launch shape, cached per
    /// configuration. Without a launch shape the task counts as the whole GPU.
    pub fn kernel_demand(&mut self, task: &TaskSpec) -> f64 {
        let Some(launch) = task.launch else { return 1.0 };
        let key = (task.kernel, launch.grid_blocks, launch.threads_per_block);
        if let Some(d) = self.cache.get(&key) {
            return *d;
        }
        self.evaluations += 1;
        let d = (f64::from(launch.demand.0) / 1000.0).clamp(0.0, 1.0);
        self.cache.insert(key, d);
        d
    }

    /// Evaluations of distinct kernel configurations so far.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// A task started at `now`.
    pub fn started(&mut self, task: &TaskSpec, now: Nanos) {
        let d = self.kernel_demand(task);
        self.run(task.id, task.tenant, now, d);
    }

    fn run(&mut self, task: TaskId, tenant: TenantId, now: Nanos, demand: f64) {
        let list = &mut self.tenants.get_or_insert_with(tenant.0, Watched::default).running;
        // (nearly always the newest: tasks start in about the order they were made)
        let at = list.partition_point(|(id, _, _)| *id < task.0);
        if list.get(at).is_some_and(|(id, _, _)| *id == task.0) {
            list[at] = (task.0, now, demand);
        } else {
            list.insert(at, (task.0, now, demand));
        }
    }

    /// A task started at `now` that has its GPU to itself (exclusive time sharing):
    /// while it runs it takes the whole GPU's time, whatever its occupancy, so an
    /// application's demand is the share of the GPU's time it would use alone.
    pub fn started_exclusive(&mut self, task: TaskId, tenant: TenantId, now: Nanos) {
        self.run(task, tenant, now, 1.0);
    }

    /// A task stopped at `now` (finished, or killed by a reset: it ran until then):
    /// its tenant, if it was known to run. A walk of the running tasks: for a caller
    /// that knows the task's tenant, [`Monitor::stopped_of`].
    pub fn stopped(&mut self, task: TaskId, now: Nanos) -> Option<TenantId> {
        let tenant = self.tenant_running(task)?;
        self.stopped_of(task, tenant, now).then_some(tenant)
    }

    /// [`Monitor::stopped`] of `tenant`'s `task`: whether it was known to run.
    pub fn stopped_of(&mut self, task: TaskId, tenant: TenantId, now: Nanos) -> bool {
        let Some(w) = self.tenants.get_mut(tenant.0) else { return false };
        let Some(i) = w.running.iter().position(|(id, _, _)| *id == task.0) else {
            return false;
        };
        let (_, from, d) = w.running.remove(i);
        *w.accrued.get_or_insert(0.0) += d * (now - from).0 as f64;
        true
    }

    /// The tenant whose running task `task` is, if it is known to run (a walk).
    fn tenant_running(&self, task: TaskId) -> Option<TenantId> {
        self.tenants
            .iter()
            .find(|(_, w)| w.running.iter().any(|(id, _, _)| *id == task.0))
            .map(|(tenant, _)| TenantId(tenant))
    }

    /// A task whose dispatch the driver refused never ran: it leaves the running ones
    /// without a demand (kept, it would count as the whole GPU at every sample for as
    /// long as its tenant stays).
    pub fn cancelled(&mut self, task: TaskId) {
        if let Some(tenant) = self.tenant_running(task)
            && let Some(w) = self.tenants.get_mut(tenant.0)
        {
            w.running.retain(|(id, _, _)| *id != task.0);
        }
    }

    /// The tasks it counts as running, each tenant's in id order (for checks against
    /// the board).
    pub fn running_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tenants.iter().flat_map(|(_, w)| w.running.iter().map(|(id, _, _)| TaskId(*id)))
    }

    /// The scheduler holds `tenant`'s waiting work from `now` (a fairness slice of
    /// another group, a migration): held time does not count as demanding nothing.
    pub fn hold(&mut self, tenant: TenantId, now: Nanos) {
        self.tenants.get_or_insert_with(tenant.0, Watched::default).held_since.get_or_insert(now);
    }

    /// Whether `tenant` is held now.
    pub fn is_held(&self, tenant: TenantId) -> bool {
        self.tenants.get(tenant.0).is_some_and(|w| w.held_since.is_some())
    }

    /// The tenants held now, in id order.
    pub fn held_tenants(&self) -> impl Iterator<Item = TenantId> + '_ {
        self.tenants.iter().filter(|(_, w)| w.held_since.is_some()).map(|(id, _)| TenantId(id))
    }

    /// The scheduler lets `tenant` dispatch again from `now`.
    pub fn release(&mut self, tenant: TenantId, now: Nanos) {
        let since = self.since;
        if let Some(w) = self.tenants.get_mut(tenant.0)
            && let Some(from) = w.held_since.take()
        {
            *w.held.get_or_insert(0.0) += (now - from.max(since)).0 as f64;
        }
    }

    /// Close the interval at `now`: each tenant's demand is its demand-weighted running
    /// time over the part of the interval it was not held by the scheduler. A tenant
    /// held for the whole interval keeps its last demand; one that ran nothing and was
    /// not held demanded nothing.
    pub fn sample(&mut self, now: Nanos) {
        let len = (now - self.since).0 as f64;
        if len <= 0.0 {
            return;
        }
        let since = self.since;
        // each tenant on its own: its running tasks' time so far, its hold's, then its
        // demand from the two (as before, when each was a walk of a table of its own:
        // the same operations on each tenant's values, in the same order)
        for (_, w) in self.tenants.iter_mut() {
            for (_, from, d) in w.running.iter_mut() {
                *w.accrued.get_or_insert(0.0) += *d * (now - *from).0 as f64;
                *from = now;
            }
            if let Some(from) = &mut w.held_since {
                *w.held.get_or_insert(0.0) += (now - (*from).max(since)).0 as f64;
                *from = now;
            }
            // a tenant known before, or new this interval (it ran)
            if w.demand.is_some() || w.accrued.is_some() {
                let open = len - w.held.unwrap_or(0.0);
                // held throughout: nothing learnt
                if open > len * 1e-3 {
                    w.demand = Some((w.accrued.unwrap_or(0.0) / open).min(1.0));
                }
            }
            w.accrued = None;
            w.held = None;
        }
        self.since = now;
    }

    /// A tenant's demand in the last interval, if sampled.
    pub fn demand(&self, tenant: TenantId) -> Option<f64> {
        self.tenants.get(tenant.0).and_then(|w| w.demand)
    }

    /// Forget a tenant.
    pub fn forget(&mut self, tenant: TenantId) {
        self.tenants.remove(tenant.0);
    }
}

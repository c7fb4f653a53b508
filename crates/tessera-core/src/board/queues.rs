//! What the queues hold, as the policies ask it: counts by class, the oldest
//! head-of-line task, one tenant's queue, the round-robin turn; and the dropping of
//! requests too old to meet their target.

use super::*;

impl Board {
    /// Whether any tenant has a queued task: a walk of the idle GPUs that dispatches
    /// queued tasks stops once none is left (issue 55: at 400 GPUs, most of them idle
    /// at a moment with nothing queued, the walk went on to the last).
    #[inline]
    pub fn any_queued(&self) -> bool {
        self.queued_count.iter().any(|&n| n > 0)
    }

    /// Number of queued (not running) tasks of tenants in `classes`.
    pub fn queued(&self, classes: Classes) -> usize {
        classes.indices().iter().map(|&c| self.queued_count[c]).sum()
    }

    /// Number of running tasks of tenants in `classes`.
    pub fn running(&self, classes: Classes) -> usize {
        classes.indices().iter().map(|&c| self.running_count[c]).sum()
    }

    /// Submission time of the oldest queued task of tenants in `classes` (the head with
    /// the lowest submission order: orders and times rise together, and a task re-queued
    /// after a reset keeps both).
    pub fn oldest_queued_since(&self, classes: Classes) -> Option<Nanos> {
        let tenant = self.oldest_head(classes)?;
        self.tenants.get(tenant.0)?.queue.front().map(|q| q.submitted)
    }

    /// The tenant whose head-of-line task was submitted first, among tenants in
    /// `classes` with a non-empty queue (first-come first-served across tenants).
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub fn oldest_head(&self, classes: Classes) -> Option<TenantId> {
        self.debug_check();
        let Some(heads) = &self.heads else {
            // no index asked for: a walk of the backlogged tenants
            return self.oldest_head_where(classes, |_| true);
        };
        // (one mask test: a walk of the classes here cost the policies that ask on
        // every dispatch, LeastLoaded's and schedGPU's, 50 to 75 instructions a task)
        let wanted = classes.mask();
        if self.head_classes & wanted != wanted {
            return self.oldest_head_where(classes, |_| true);
        }
        classes.indices().iter().filter_map(|&c| heads[c].first()).min().map(|(_, id)| id)
    }

    /// The oldest head-of-line task's tenant among tenants in `classes` for which
    /// `wanted` holds: a walk of the backlogged tenants, for the rare question that
    /// filters them ([`Board::oldest_head`] is the index's answer).
    pub fn oldest_head_where(
        &self,
        classes: Classes,
        wanted: impl Fn(TenantId) -> bool,
    ) -> Option<TenantId> {
        self.backlogged
            .iter()
            .filter_map(|id| {
                let t = self.tenants.get(id)?;
                let class_ok = classes.indices().contains(&class_index(t.class()));
                (class_ok && wanted(TenantId(id))).then_some((t.head()?, TenantId(id)))
            })
            .min()
            .map(|(_, id)| id)
    }

    /// How many of `tenant`'s tasks are queued ([`Board::queue_of`] without the
    /// oldest's submission, which is a read of the queue's buffer).
    #[inline]
    pub fn queue_len(&self, tenant: TenantId) -> usize {
        self.tenants.get(tenant.0).map_or(0, |t| t.queue.len())
    }

    /// Whether `tenant` has any task queued ([`Board::queue_len`] above zero, asked
    /// for by the fair-queuing and Credit policies for every tenant they visit: the
    /// queue's first task is held in place, and a count adds its remainder's).
    #[inline]
    pub fn has_queued(&self, tenant: TenantId) -> bool {
        self.tenants.get(tenant.0).is_some_and(|t| !t.queue.is_empty())
    }

    /// How many tasks `tenant` has queued, and when its oldest was submitted.
    pub fn queue_of(&self, tenant: TenantId) -> (usize, Option<Nanos>) {
        self.tenants
            .get(tenant.0)
            .map_or((0, None), |t| (t.queue.len(), t.queue.front().map(|q| q.submitted)))
    }

    /// End `tenant`'s queued tasks submitted before `since` ([`TaskEndReason::Dropped`]):
    /// requests that can no longer meet their latency target. Returns how many.
    pub fn drop_waiting_since(
        &mut self,
        tenant: TenantId,
        since: Nanos,
        out: &mut Vec<Action>,
    ) -> usize {
        let Some(t) = self.tenants.get_mut(tenant.0) else { return 0 };
        // the actions straight out, no list of the dropped first: gpu-lets' server asks
        // this of every model it looks at on every event, and mostly nothing is due
        let mut dropped = 0;
        while t.queue.front().is_some_and(|q| q.submitted < since) {
            if let Some(q) = t.queue.pop_front() {
                out.push(Action::EndTask { task: q.spec.id, reason: TaskEndReason::Dropped });
                dropped += 1;
            }
        }
        if dropped == 0 {
            return 0;
        }
        let class = t.class();
        self.queued_count[class_index(class)] -= dropped;
        self.reindex(tenant);
        dropped
    }

    /// The next tenant after the round-robin cursor with a non-empty queue (Flexy
    /// §II-A) that may run on `gpu`, and advance the cursor to it.
    // (on every task's path: inlined, issue 55)
    #[inline]
    pub fn next_round_robin_on(&mut self, gpu: GpuId) -> Option<TenantId> {
        // from past the cursor to the end, then from the start up to it: the first
        // that may run here
        // (a loop over the bitset, not an iterator chain: this runs on every dispatch)
        let after = self.rr_cursor.map_or(Some(0), |c| c.0.checked_add(1));
        let mut next = None;
        let mut at = after.and_then(|a| self.backlogged.first_from(a));
        while let Some(id) = at {
            if self.may_run_on(TenantId(id), gpu) {
                next = Some(TenantId(id));
                break;
            }
            at = self.backlogged.first_after(id);
        }
        if next.is_none() {
            let mut at = self.backlogged.first_from(0);
            while let Some(id) = at.filter(|id| after.is_none_or(|a| *id < a)) {
                if self.may_run_on(TenantId(id), gpu) {
                    next = Some(TenantId(id));
                    break;
                }
                at = self.backlogged.first_after(id);
            }
        }
        if next.is_some() {
            self.rr_cursor = next;
        }
        next
    }
}

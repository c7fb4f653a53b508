//! Preempting and resuming blocks: a context's slice ending, a paused GPU, and blocks
//! placed at an instant taken back to be placed again with a later call at it.

use super::*;

impl ConcurrentGpu {
    /// Preempt the resident blocks of `context` (all contexts: `None`), keeping the
    /// time each still needs.
    pub(super) fn freeze(&mut self, context: Option<u32>) {
        self.walk_freed = false;
        // blocks placed at this instant have run nothing: they wait again, to be
        // placed in order with whatever else waits when their context runs
        self.unplace_fresh(context);
        for i in 0..self.cohorts.len() {
            let c = &self.cohorts[i];
            if !c.live || c.frozen {
                continue;
            }
            let Some(k) = self.kernels.get(c.slot) else { continue };
            if context.is_some_and(|ctx| ctx != k.context) {
                continue;
            }
            let ran = u128::from(self.now - c.since) * u128::from(c.count);
            let left = c.finish - self.now;
            let slot = c.slot;
            self.release_sms(i);
            if let Some(k) = self.kernels.get_mut(slot) {
                k.ran_ps += ran;
            }
            let c = &mut self.cohorts[i];
            c.frozen = true;
            c.frozen_left = left;
            self.ends.remove(i);
        }
    }

    /// Take back the blocks placed at this instant (of `context`; all: `None`): they
    /// wait again.
    pub(super) fn unplace_fresh(&mut self, context: Option<u32>) {
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.retain(|&i| {
            let c = &self.cohorts[i];
            if !c.live || c.frozen {
                return false;
            }
            let slot = c.slot;
            if context.is_some_and(|ctx| self.kernels.get(slot).is_some_and(|k| k.context != ctx)) {
                return true;
            }
            let count = c.count;
            // its kernel has room again where it was: every SM is looked at
            self.walk_freed = false;
            self.retire_cohort(i);
            if let Some(k) = self.kernels.get_mut(slot) {
                if k.pending == 0 {
                    self.waiting.insert(k.wait_key(), slot);
                }
                k.pending += count;
            }
            false
        });
        self.fresh = fresh;
    }

    /// Resume the preempted blocks of `context` (all: `None`) where they were.
    pub(super) fn thaw(&mut self, context: Option<u32>) {
        for i in 0..self.cohorts.len() {
            let c = &self.cohorts[i];
            if !c.live || !c.frozen {
                continue;
            }
            let Some(k) = self.kernels.get(c.slot) else { continue };
            if context.is_some_and(|ctx| ctx != k.context) {
                continue;
            }
            let cost = k.cost;
            self.occupy_sms(i, &cost);
            let now = self.now;
            let c = &mut self.cohorts[i];
            c.frozen = false;
            c.since = now;
            c.finish = now + c.frozen_left;
            self.ends.set(i, c.finish);
        }
    }
}

//! Each class's oldest head-of-line task, for the policies that ask for it on every
//! event (first-come first-served across tenants), with lazy deletion: an entry is
//! current while its tenant's head still has that submission order; a head that
//! changes leaves its entry behind, stale, and pushes a new one. The board drops stale
//! entries from the front after every change, so the first entry is always current
//! and the query is a read. A B-tree set paid a removal and an insertion of hundreds of
//! instructions each on nearly every event (issue 55).
//!
//! Submission orders only grow, so a head that becomes a tenant's head on submission
//! (its queue was empty) is the newest of all: such heads are appended to a queue kept
//! in order, whose front is its least — a push and a pop of a few instructions, where
//! a binary heap sifted each pop through its levels (most heads of a closed loop, one
//! task queued per tenant, are of this kind: issue 55). A head older than the queue's
//! newest (the next task of a tenant with several queued, or one re-queued after a
//! reset) goes to a binary heap beside it; the oldest head is the lesser of their two
//! fronts. Stale entries below the fronts are dropped when they surface, and both are
//! rebuilt from the tenants if stale entries ever outnumber the current ones: a tenant
//! whose head cannot be served for a long time (pinned to a GPU that is down) must not
//! make them grow without bound.

use crate::ids::TenantId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Stale entries tolerated beyond the current ones before a rebuild.
const SLACK: usize = 64;

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(super) struct HeadIndex {
    /// Heads in ascending (submission order, tenant), each newer than the one before.
    in_order: VecDeque<(u64, TenantId)>,
    /// Heads that came older than the queue's newest.
    older: BinaryHeap<Reverse<(u64, TenantId)>>,
}

impl HeadIndex {
    /// `tenant`'s head is now the task of submission order `seq`.
    #[inline]
    pub(super) fn push(&mut self, seq: u64, tenant: TenantId) {
        if self.in_order.back().is_none_or(|last| *last < (seq, tenant)) {
            self.in_order.push_back((seq, tenant));
        } else {
            self.older.push(Reverse((seq, tenant)));
        }
    }

    /// Drop stale entries from the fronts (`current(seq, tenant)`: whether the tenant's
    /// head still has that order), and rebuild from `heads` (every current head) when
    /// stale entries pile up beyond `backlogged` current ones.
    #[inline]
    pub(super) fn settle(
        &mut self,
        backlogged: usize,
        current: impl Fn(u64, TenantId) -> bool,
        heads: impl FnOnce() -> Vec<(u64, TenantId)>,
    ) {
        while let Some(&(seq, tenant)) = self.in_order.front() {
            if current(seq, tenant) {
                break;
            }
            self.in_order.pop_front();
        }
        while let Some(Reverse((seq, tenant))) = self.older.peek() {
            if current(*seq, *tenant) {
                break;
            }
            self.older.pop();
        }
        if self.in_order.len() + self.older.len() > 2 * backlogged + SLACK {
            self.rebuild(heads());
        }
    }

    /// The heap of `heads` alone (rare: out of the per-task path; a heap's
    /// construction is linear, where sorting them into the queue cost the node policy
    /// at 400 GPUs, whose batch heads are not served in order, more than it saved).
    #[cold]
    fn rebuild(&mut self, heads: Vec<(u64, TenantId)>) {
        self.in_order.clear();
        self.older = heads.into_iter().map(Reverse).collect();
    }

    /// The oldest current head.
    #[inline]
    pub(super) fn first(&self) -> Option<(u64, TenantId)> {
        let queued = self.in_order.front().copied();
        match self.older.peek() {
            Some(Reverse(older)) => Some(queued.map_or(*older, |q| q.min(*older))),
            None => queued,
        }
    }

    /// Whether an entry for (seq, tenant) is held (debug checks).
    pub(super) fn holds(&self, seq: u64, tenant: TenantId) -> bool {
        self.in_order.contains(&(seq, tenant))
            || self.older.iter().any(|Reverse(e)| *e == (seq, tenant))
    }

    /// Entries held, stale ones included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.in_order.len() + self.older.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Tenants' heads change (newer ones mostly, older ones sometimes, as a
        /// tenant's next queued task or a re-queued one) and go: once settled, the
        /// first entry is the least current (order, tenant), as a sorted set of the
        /// current heads says, and the entries stay bounded.
        #[test]
        fn answers_as_a_sorted_set_of_the_current_heads(
            ops in proptest::collection::vec((0u8..4, 0u64..12, 0u64..40), 0..400)
        ) {
            let mut index = HeadIndex::default();
            let mut heads: BTreeMap<u64, u64> = BTreeMap::new();
            let mut next = 100u64;
            for (op, tenant, back) in ops {
                match op {
                    // a head newer than any (a submission to an empty queue)
                    0 | 1 => {
                        next += 1;
                        heads.insert(tenant, next);
                        index.push(next, TenantId(tenant));
                    }
                    // an older one
                    2 => {
                        let seq = next.saturating_sub(back);
                        heads.insert(tenant, seq);
                        index.push(seq, TenantId(tenant));
                    }
                    _ => {
                        heads.remove(&tenant);
                    }
                }
                let current = |s: u64, t: TenantId| heads.get(&t.0) == Some(&s);
                let all = || heads.iter().map(|(t, s)| (*s, TenantId(*t))).collect();
                index.settle(heads.len(), current, all);
                let least = heads.iter().map(|(t, s)| (*s, TenantId(*t))).min();
                prop_assert_eq!(index.first(), least);
                prop_assert!(index.len() <= 2 * heads.len() + SLACK + 1);
                for (t, s) in &heads {
                    prop_assert!(index.holds(*s, TenantId(*t)));
                }
            }
        }
    }

    /// A tenant whose head is never served (tenant 0) stays on top while another's
    /// head changes ten thousand times: the stale entries below it are rebuilt away,
    /// and the answer stays the oldest current head.
    #[test]
    fn stale_entries_under_an_unserved_head_stay_bounded() {
        let mut index = HeadIndex::default();
        index.push(0, TenantId(0));
        for seq in 1..10_000u64 {
            index.push(seq, TenantId(1));
            let current = |s: u64, t: TenantId| t == TenantId(0) && s == 0 || s == seq;
            let heads = || vec![(0, TenantId(0)), (seq, TenantId(1))];
            index.settle(2, current, heads);
            assert_eq!(index.first(), Some((0, TenantId(0))));
            assert!(index.len() <= 2 * 2 + SLACK + 1, "{} entries", index.len());
        }
    }
}

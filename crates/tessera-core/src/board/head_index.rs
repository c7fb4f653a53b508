//! Each class's oldest head-of-line task, for the policies that ask for it on every
//! event (first-come first-served across tenants): a binary heap of (submission order,
//! tenant) with lazy deletion, where a B-tree set paid a removal and an insertion of
//! hundreds of instructions each on nearly every event (issue 55).
//!
//! An entry is current while its tenant's head still has that submission order; a
//! head that changes leaves its entry behind, stale, and pushes a new one. The board
//! drops stale entries from the top after every change, so the top is always current
//! and the query is a read. Stale entries below the top are dropped when they surface
//! (submission orders only grow, so they do), and the heap is rebuilt from the tenants
//! if they ever outnumber the current ones: a tenant whose head cannot be served for a
//! long time (pinned to a GPU that is down) must not make the heap grow without bound.

use crate::ids::TenantId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Stale entries tolerated beyond the current ones before a rebuild.
const SLACK: usize = 64;

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(super) struct HeadIndex {
    heap: BinaryHeap<Reverse<(u64, TenantId)>>,
}

impl HeadIndex {
    /// `tenant`'s head is now the task of submission order `seq`.
    pub(super) fn push(&mut self, seq: u64, tenant: TenantId) {
        self.heap.push(Reverse((seq, tenant)));
    }

    /// Drop stale entries from the top (`current(seq, tenant)`: whether the tenant's
    /// head still has that order), and rebuild from `heads` (every current head) when
    /// stale entries pile up beyond `backlogged` current ones.
    #[inline]
    pub(super) fn settle(
        &mut self,
        backlogged: usize,
        current: impl Fn(u64, TenantId) -> bool,
        heads: impl FnOnce() -> Vec<(u64, TenantId)>,
    ) {
        while let Some(Reverse((seq, tenant))) = self.heap.peek() {
            if current(*seq, *tenant) {
                break;
            }
            self.heap.pop();
        }
        if self.heap.len() > 2 * backlogged + SLACK {
            self.rebuild(heads());
        }
    }

    /// The heap of `heads` alone (rare: out of the per-task path).
    #[cold]
    fn rebuild(&mut self, heads: Vec<(u64, TenantId)>) {
        self.heap = heads.into_iter().map(Reverse).collect();
    }

    /// The oldest current head.
    pub(super) fn first(&self) -> Option<(u64, TenantId)> {
        self.heap.peek().map(|Reverse(e)| *e)
    }

    /// Whether an entry for (seq, tenant) is held (debug checks).
    pub(super) fn holds(&self, seq: u64, tenant: TenantId) -> bool {
        self.heap.iter().any(|Reverse(e)| *e == (seq, tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(index.heap.len() <= 2 * 2 + SLACK + 1, "{} entries", index.heap.len());
        }
    }
}

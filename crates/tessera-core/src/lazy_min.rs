//! The least of a changing set of keys, as a binary heap with lazy deletion: fair
//! queuing's virtual time is the smallest start tag of the active tenants, which
//! change on nearly every event; a B-tree set paid a removal and an insertion of
//! hundreds of instructions each (issue 55), where a heap push costs a few
//! comparisons and the query is a read.
//!
//! The owner says which entries are current (`current(key)`); a key whose value
//! changed leaves its old entry behind, stale. [`LazyMin::settle`] drops stale entries
//! from the top, so that after it the top is current, and rebuilds the heap from the
//! current keys if stale ones ever outnumber them (a key that stays current for a
//! long time under many that change must not make the heap grow without bound).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Stale entries tolerated beyond twice the current ones before a rebuild.
const SLACK: usize = 64;

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct LazyMin<K> {
    heap: BinaryHeap<Reverse<K>>,
}

impl<K: Ord + Copy> Default for LazyMin<K> {
    fn default() -> Self {
        LazyMin { heap: BinaryHeap::new() }
    }
}

impl<K: Ord + Copy> LazyMin<K> {
    /// `key` is current from now on (pushing a current key again is harmless).
    pub(crate) fn push(&mut self, key: K) {
        self.heap.push(Reverse(key));
    }

    /// Drop stale entries from the top; rebuild from `all` (every current key) when
    /// the heap holds more than twice `current_count` entries plus a slack.
    pub(crate) fn settle(
        &mut self,
        current: impl Fn(&K) -> bool,
        current_count: usize,
        all: impl FnOnce() -> Vec<K>,
    ) {
        while let Some(Reverse(k)) = self.heap.peek() {
            if current(k) {
                break;
            }
            self.heap.pop();
        }
        if self.heap.len() > 2 * current_count + SLACK {
            self.heap = all().into_iter().map(Reverse).collect();
        }
    }

    /// Entries held, stale ones included.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The least entry: the least current key once [`LazyMin::settle`]d.
    pub(crate) fn first(&self) -> Option<K> {
        self.heap.peek().map(|Reverse(k)| *k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Keys whose values change, appear and go: once settled, the least entry is
        /// the least current (value, key), as a sorted set of them says, and the heap
        /// stays bounded.
        #[test]
        fn answers_as_a_sorted_set(ops in proptest::collection::vec((0u8..3, 0u32..8, 0u64..1000), 0..400)) {
            let mut values: BTreeMap<u32, u64> = BTreeMap::new();
            let mut min = LazyMin::default();
            for (op, key, value) in ops {
                match op {
                    0 | 1 => {
                        values.insert(key, value);
                        min.push((value, key));
                    }
                    _ => {
                        values.remove(&key);
                    }
                }
                let current = |&(v, k): &(u64, u32)| values.get(&k) == Some(&v);
                let all = || values.iter().map(|(k, v)| (*v, *k)).collect();
                min.settle(current, values.len(), all);
                let expected = values.iter().map(|(k, v)| (*v, *k)).min();
                prop_assert_eq!(min.first(), expected);
                prop_assert!(min.heap.len() <= 2 * values.len() + SLACK + 1);
            }
        }
    }
}

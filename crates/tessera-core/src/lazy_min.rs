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
//!
//! [`LazyMin::walk`] goes further than the least: the current keys in order, for fair
//! queuing's eligible list, which a dispatch walks until a key suits its GPU (nearly
//! always the first).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Stale entries tolerated beyond twice the current ones before a rebuild.
const SLACK: usize = 64;

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct LazyMin<K> {
    heap: BinaryHeap<Reverse<K>>,
    /// Scratch: the current entries a [`Walk`] passed, pushed back when it ends.
    passed: Vec<K>,
}

impl<K: Ord + Copy> Default for LazyMin<K> {
    fn default() -> Self {
        LazyMin { heap: BinaryHeap::new(), passed: Vec::new() }
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

    /// Replace every entry by `current` (every current key), in place: for an owner
    /// whose stale entries piled up, without [`LazyMin::settle`]'s pops of those on top
    /// one at a time (a heap's making is linear).
    pub(crate) fn rebuild(&mut self, current: impl Iterator<Item = K>) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.clear();
        entries.extend(current.map(Reverse));
        self.heap = BinaryHeap::from(entries);
    }

    /// The current keys in order, least first, by `current` (as [`LazyMin::settle`]'s).
    /// The walk peeks at the least and pops an entry only to go past it: stale entries
    /// it meets are dropped, current ones it passed are pushed back when it is
    /// dropped. A walk that stops at its first key costs the stale entries above it.
    /// (A key pushed twice under one value while current is met twice.)
    pub(crate) fn walk<F: Fn(&K) -> bool>(&mut self, current: F) -> Walk<'_, K, F> {
        Walk { min: self, current, started: false }
    }

    /// Forget every entry.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
    }

    /// Every entry held, stale ones included, in no order (for debug checks).
    pub(crate) fn entries(&self) -> impl Iterator<Item = K> + '_ {
        self.heap.iter().map(|Reverse(k)| *k)
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

/// A walk of a [`LazyMin`]'s current keys in order ([`LazyMin::walk`]).
pub(crate) struct Walk<'a, K: Ord + Copy, F: Fn(&K) -> bool> {
    min: &'a mut LazyMin<K>,
    current: F,
    /// Whether a key was yielded: it is the top, popped when the walk goes on.
    started: bool,
}

impl<K: Ord + Copy, F: Fn(&K) -> bool> Iterator for Walk<'_, K, F> {
    type Item = K;

    fn next(&mut self) -> Option<K> {
        let heap = &mut self.min.heap;
        if self.started
            && let Some(Reverse(k)) = heap.pop()
        {
            self.min.passed.push(k);
        }
        self.started = true;
        while let Some(Reverse(k)) = heap.peek() {
            if (self.current)(k) {
                return Some(*k);
            }
            heap.pop();
        }
        None
    }
}

impl<K: Ord + Copy, F: Fn(&K) -> bool> Drop for Walk<'_, K, F> {
    fn drop(&mut self) {
        let LazyMin { heap, passed } = &mut *self.min;
        heap.extend(passed.drain(..).map(Reverse));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// One step of the property tests: `key` set to `value` (ops 0 and 1, its old
    /// entry left stale) or gone (others), in the model `values` and the heap.
    fn apply(
        values: &mut BTreeMap<u32, u64>,
        min: &mut LazyMin<(u64, u32)>,
        op: u8,
        key: u32,
        value: u64,
    ) {
        if op <= 1 {
            values.insert(key, value);
            min.push((value, key));
        } else {
            values.remove(&key);
        }
    }

    proptest! {
        /// Keys whose values change, appear and go: once settled, the least entry is
        /// the least current (value, key), as a sorted set of them says, and the heap
        /// stays bounded.
        #[test]
        fn answers_as_a_sorted_set(ops in proptest::collection::vec((0u8..3, 0u32..8, 0u64..1000), 0..400)) {
            let mut values: BTreeMap<u32, u64> = BTreeMap::new();
            let mut min = LazyMin::default();
            for (op, key, value) in ops {
                apply(&mut values, &mut min, op, key, value);
                let current = |&(v, k): &(u64, u32)| values.get(&k) == Some(&v);
                let all = || values.iter().map(|(k, v)| (*v, *k)).collect();
                if op == 1 && key % 4 == 0 {
                    min.rebuild(values.iter().map(|(k, v)| (*v, *k)));
                    prop_assert_eq!(min.heap.len(), values.len());
                }
                min.settle(current, values.len(), all);
                let expected = values.iter().map(|(k, v)| (*v, *k)).min();
                prop_assert_eq!(min.first(), expected);
                prop_assert!(min.heap.len() <= 2 * values.len() + SLACK + 1);
            }
        }

        /// A walk yields the current keys in order (each at least once, none stale),
        /// however far it goes, and leaves every current key behind for the next.
        #[test]
        fn walks_as_a_sorted_set(
            ops in proptest::collection::vec((0u8..3, 0u32..8, 0u64..50), 0..300),
            stops in proptest::collection::vec(0usize..10, 0..300),
        ) {
            let mut values: BTreeMap<u32, u64> = BTreeMap::new();
            let mut min = LazyMin::default();
            for (i, (op, key, value)) in ops.into_iter().enumerate() {
                apply(&mut values, &mut min, op, key, value);
                let mut expected: Vec<(u64, u32)> = values.iter().map(|(k, v)| (*v, *k)).collect();
                expected.sort_unstable();
                let stop = stops.get(i).copied().unwrap_or(usize::MAX);
                let walked: Vec<(u64, u32)> = {
                    let current = |&(v, k): &(u64, u32)| values.get(&k) == Some(&v);
                    min.walk(current).take(stop).collect()
                };
                let mut distinct = walked.clone();
                distinct.dedup();
                let n = distinct.len();
                prop_assert_eq!(&distinct[..], &expected[..n]);
                prop_assert!(walked.len() <= stop);
                // a full walk afterwards still finds every current key
                let all: Vec<(u64, u32)> = {
                    let current = |&(v, k): &(u64, u32)| values.get(&k) == Some(&v);
                    let mut all: Vec<_> = min.walk(current).collect();
                    all.dedup();
                    all
                };
                prop_assert_eq!(all, expected);
                let current = |&(v, k): &(u64, u32)| values.get(&k) == Some(&v);
                let all = || values.iter().map(|(k, v)| (*v, *k)).collect();
                min.settle(current, values.len(), all);
            }
        }
    }
}

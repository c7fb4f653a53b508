//! A binary min-heap of small `Copy` entries with the classic sifts: the event queue of
//! the task engine, and the floor `tessera bench sim` measures it against (the same
//! structure, so that the floor is the least this engine's queue does).
//!
//! The standard library's heap is a max-heap over `Ord` (reversed for earliest-first):
//! it sifts a pop down to the bottom and back up, and compiled each comparison through
//! `Ordering` values: 116 instructions a pop on the 4-GPU bench's queue of five, where
//! this heap's is 46 (issue 55). The order is the same for totally ordered keys.

use tessera_core::Nanos;

/// An entry with a key to order by: [`Keyed::before`] must be a strict total order.
pub trait Keyed: Copy {
    /// Whether `self` comes out before `other`.
    fn before(&self, other: &Self) -> bool;
}

/// What an event queue holds: `what` happens at `at`, scheduled as the `seq`th event.
/// Ordered by (time, sequence number) alone: sequence numbers are distinct, so what it
/// carries never decides (the engines' queues, the bench's floor).
#[derive(Clone, Copy, Debug)]
pub struct Timed<E> {
    /// When.
    pub at: Nanos,
    /// The sequence number it was scheduled with (ties at one time go by it).
    pub seq: u64,
    /// What happens.
    pub what: E,
}

impl<E: Copy> Keyed for Timed<E> {
    #[inline(always)]
    fn before(&self, other: &Timed<E>) -> bool {
        // (time, sequence number) as one 128-bit key: a comparison without a branch
        // (issue 55: at 100x the bench's node the queue holds thousands of entries, and
        // the short-circuit's branches, taken at random, were a quarter of the run's
        // mispredicted branches)
        let key = |t: &Timed<E>| (u128::from(t.at.0) << 64) | u128::from(t.seq);
        key(self) < key(other)
    }
}

/// The heap.
#[derive(Clone, Debug)]
pub struct MinHeap<T> {
    data: Vec<T>,
}

impl<T> Default for MinHeap<T> {
    fn default() -> MinHeap<T> {
        MinHeap { data: Vec::new() }
    }
}

impl<T: Keyed> MinHeap<T> {
    /// Entries held.
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether it holds nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The first entry, if any.
    #[inline]
    pub fn peek(&self) -> Option<&T> {
        self.data.first()
    }

    /// Add `entry`.
    #[inline]
    pub fn push(&mut self, entry: T) {
        let data = &mut self.data;
        let mut i = data.len();
        data.push(entry);
        while i > 0 {
            let parent = (i - 1) / 2;
            if !entry.before(&data[parent]) {
                break;
            }
            data[i] = data[parent];
            i = parent;
        }
        data[i] = entry;
    }

    /// Take the first entry.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub fn pop(&mut self) -> Option<T> {
        let data = &mut self.data;
        let last = data.pop()?;
        let Some(&top) = data.first() else { return Some(last) };
        // the last entry takes the root's place and sinks below every child before it
        let n = data.len();
        let mut i = 0;
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            // (the smaller child chosen without a branch: which one it is is a coin toss)
            let child = left + usize::from(right < n && data[right].before(&data[left]));
            if !data[child].before(&last) {
                break;
            }
            data[i] = data[child];
            i = child;
        }
        data[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest! {
        /// Any pushes and pops: every pop and peek is the standard library's heap's
        /// (reversed), and so is the length.
        #[test]
        fn pops_as_the_standard_heap_does(
            ops in proptest::collection::vec(proptest::option::of(0u64..100), 0..500),
        ) {
            let mut heap = MinHeap::default();
            let mut model = BinaryHeap::new();
            for (seq, op) in ops.into_iter().enumerate() {
                match op {
                    Some(key) => {
                        heap.push(Timed { at: Nanos(key), seq: seq as u64, what: () });
                        model.push(Reverse((key, seq as u64)));
                    }
                    None => prop_assert_eq!(
                        heap.pop().map(|t| (t.at.0, t.seq)),
                        model.pop().map(|Reverse(e)| e)
                    ),
                }
                prop_assert_eq!(heap.peek().map(|t| (t.at.0, t.seq)), model.peek().map(|Reverse(e)| *e));
                prop_assert_eq!(heap.len(), model.len());
            }
            while let Some(Reverse(e)) = model.pop() {
                prop_assert_eq!(heap.pop().map(|t| (t.at.0, t.seq)), Some(e));
            }
            prop_assert!(heap.is_empty());
        }
    }
}

//! A tenant's queue: a double-ended queue whose first entry is held in place, the rest
//! in a `VecDeque`. A tenant with one task at a time (a closed-loop client, most of
//! them) never uses the allocation: its task is read where the tenant's own entry is.
//! At 100x the bench's node a tenant is visited once a round of 3,200, and the queue's
//! buffer, an allocation of its own, was a cache miss at every dispatch (callgrind's
//! cache simulation of FairGV's 100x row: 1.0 of its 8.1 L2 misses per task, issue 55).

use std::collections::VecDeque;

/// See the module docs. Invariant: `head` is empty only when `rest` is.
#[derive(Clone, Debug)]
pub(super) struct HeadDeque<T> {
    head: Option<T>,
    rest: VecDeque<T>,
}

impl<T> Default for HeadDeque<T> {
    fn default() -> Self {
        HeadDeque { head: None, rest: VecDeque::new() }
    }
}

impl<T> HeadDeque<T> {
    #[inline]
    pub(super) fn len(&self) -> usize {
        // (the remainder's count read only behind a first task)
        if self.head.is_none() { 0 } else { 1 + self.rest.len() }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&T> {
        self.head.as_ref()
    }

    #[inline]
    pub(super) fn push_back(&mut self, entry: T) {
        if self.head.is_none() {
            self.head = Some(entry);
        } else {
            self.rest.push_back(entry);
        }
    }

    pub(super) fn push_front(&mut self, entry: T) {
        if let Some(old) = self.head.replace(entry) {
            self.rest.push_front(old);
        }
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let first = self.head.take()?;
        // (a queue of one: no look at the allocation)
        if !self.rest.is_empty() {
            self.head = self.rest.pop_front();
        }
        Some(first)
    }

    /// The entry at `index` taken out, the rest keeping their order.
    pub(super) fn remove(&mut self, index: usize) -> Option<T> {
        if index == 0 { self.pop_front() } else { self.rest.remove(index - 1) }
    }

    /// The first `n` entries (all if fewer), in order.
    pub(super) fn take_front(&mut self, n: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(n.min(self.len()));
        while out.len() < n {
            let Some(entry) = self.pop_front() else { break };
            out.push(entry);
        }
        out
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.head.iter().chain(self.rest.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the operations, the queue answers as a `VecDeque` does and lists
        /// its entries in the same order.
        #[test]
        fn behaves_as_a_vec_deque(ops in proptest::collection::vec((0u8..6, 0u32..100, 0usize..5), 0..200)) {
            let mut q = HeadDeque::default();
            let mut model = VecDeque::new();
            for (op, value, n) in ops {
                match op {
                    0 | 1 => {
                        q.push_back(value);
                        model.push_back(value);
                    }
                    2 => {
                        q.push_front(value);
                        model.push_front(value);
                    }
                    3 => prop_assert_eq!(q.pop_front(), model.pop_front()),
                    4 => prop_assert_eq!(q.remove(n), model.remove(n)),
                    _ => {
                        let k = n.min(model.len());
                        let expected: Vec<u32> = model.drain(..k).collect();
                        prop_assert_eq!(q.take_front(n), expected);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
                prop_assert_eq!(q.front(), model.front());
                prop_assert!(q.iter().eq(model.iter()));
            }
        }
    }
}

//! The live cohorts' ends, earliest first: a binary heap that knows where each cohort's
//! entry is, so that a cohort's end is moved or taken out in place (issue 55: with a
//! heap of (end, cohort, generation) entries, every wave run ahead and every retired
//! cohort left an entry behind, and two pops in three in `sim dcuda` were of such stale
//! entries).
//!
//! Entries are ordered by (end, cohort), as the stale-entry heap's valid ones were, so
//! cohorts ending at one instant come out in the same order.

use super::Ps;

/// No entry for this cohort.
const ABSENT: u32 = u32::MAX;

/// At most one end per cohort (its index in the cohort table), the earliest first.
#[derive(Clone, Debug, Default)]
pub(super) struct Ends {
    /// (end, cohort), a binary min-heap.
    heap: Vec<(Ps, u32)>,
    /// Per cohort, its entry's place in `heap`, or [`ABSENT`].
    place: Vec<u32>,
}

impl Ends {
    /// The earliest end and its cohort.
    #[inline]
    pub(super) fn peek(&self) -> Option<(Ps, usize)> {
        self.heap.first().map(|&(t, i)| (t, i as usize))
    }

    /// Take out the earliest end. The hole it leaves goes down to a leaf along the
    /// lesser child, and the last entry fills it from there, moved up (one comparison a
    /// level instead of two, and it seldom moves up: issue 55, this pop is one per
    /// cohort end).
    pub(super) fn pop(&mut self) -> Option<(Ps, usize)> {
        let top = self.peek()?;
        self.place[top.1] = ABSENT;
        let last = self.heap.pop()?;
        if !self.heap.is_empty() {
            let mut p = 0;
            while let Some(child) = self.lesser_child(p) {
                self.put(p, self.heap[child]);
                p = child;
            }
            self.up(p, last);
        }
        Some(top)
    }

    /// Cohort `i` ends at `at` (its entry added, or moved if it had one).
    pub(super) fn set(&mut self, i: usize, at: Ps) {
        let entry = (at, i as u32);
        match self.place_of(i) {
            ABSENT => {
                self.heap.push(entry);
                self.up(self.heap.len() - 1, entry);
            }
            p => self.reseat(p as usize, entry),
        }
    }

    /// Cohort `i` has no end any more (retired or preempted); nothing if it had none.
    pub(super) fn remove(&mut self, i: usize) {
        let Some(&p) = self.place.get(i) else { return };
        if p == ABSENT {
            return;
        }
        self.place[i] = ABSENT;
        let p = p as usize;
        let Some(last) = self.heap.pop() else { return };
        if p < self.heap.len() {
            // the last entry fills the hole, moved up or down from there
            self.reseat(p, last);
        }
    }

    /// Move the ends of several cohorts at once, `count` of them, each to its new end
    /// (its entry added if it had none): the heap's order is made again once, over
    /// all of them, when that is cheaper than moving each one (a chain of waves moves
    /// most of a GPU's cohorts: issue 55, a move each was 3% of `sim dcuda --quick`).
    pub(super) fn set_many(&mut self, count: usize, moves: impl Iterator<Item = (usize, Ps)>) {
        if count * 4 < self.heap.len() {
            for (i, at) in moves {
                self.set(i, at);
            }
            return;
        }
        for (i, at) in moves {
            match self.place_of(i) {
                ABSENT => {
                    self.place[i] = self.heap.len() as u32;
                    self.heap.push((at, i as u32));
                }
                p => self.heap[p as usize].0 = at,
            }
        }
        // Floyd's: each parent moved down into place, the last first
        for p in (0..self.heap.len() / 2).rev() {
            self.down(p, self.heap[p]);
        }
    }

    /// Every entry, in no order: the live cohorts not frozen, each with its end (the
    /// chain's search walks them rather than the whole cohort table, most of whose
    /// entries are retired ones waiting for reuse).
    pub(super) fn entries(&self) -> impl Iterator<Item = (Ps, usize)> + '_ {
        self.heap.iter().map(|&(t, i)| (t, i as usize))
    }

    /// Cohort `i`'s place in the heap ([`ABSENT`] if none), its slot made if new.
    fn place_of(&mut self, i: usize) -> u32 {
        if i >= self.place.len() {
            self.place.resize(i + 1, ABSENT);
        }
        self.place[i]
    }

    /// `entry` at `p`, its place recorded.
    fn put(&mut self, p: usize, entry: (Ps, u32)) {
        self.heap[p] = entry;
        self.place[entry.1 as usize] = p as u32;
    }

    /// The lesser of `p`'s children, if it has any.
    fn lesser_child(&self, p: usize) -> Option<usize> {
        let (left, right) = (2 * p + 1, 2 * p + 2);
        match self.heap.get(right) {
            Some(r) if *r < self.heap[left] => Some(right),
            _ => (left < self.heap.len()).then_some(left),
        }
    }

    /// Put `entry` in place of the one at `p`, moved up or down from there.
    fn reseat(&mut self, p: usize, entry: (Ps, u32)) {
        if entry < self.heap[p] {
            self.up(p, entry);
        } else {
            self.down(p, entry);
        }
    }

    /// Put `entry` at `p` or above it, moving larger parents down.
    fn up(&mut self, mut p: usize, entry: (Ps, u32)) {
        while p > 0 {
            let parent = (p - 1) / 2;
            let above = self.heap[parent];
            if above <= entry {
                break;
            }
            self.put(p, above);
            p = parent;
        }
        self.put(p, entry);
    }

    /// Put `entry` at `p` or below it, moving smaller children up.
    fn down(&mut self, mut p: usize, entry: (Ps, u32)) {
        while let Some(child) = self.lesser_child(p) {
            let below = self.heap[child];
            if below >= entry {
                break;
            }
            self.put(p, below);
            p = child;
        }
        self.put(p, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Set(usize, Ps),
        SetMany(Vec<(usize, Ps)>),
        Remove(usize),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        // few cohorts and few instants, so that ties and moves are common
        prop_oneof![
            4 => (0..12usize, 0..20u64).prop_map(|(i, t)| Op::Set(i, t)),
            1 => prop::collection::vec((0..12usize, 0..20u64), 0..12).prop_map(Op::SetMany),
            2 => (0..12usize).prop_map(Op::Remove),
            1 => Just(Op::Pop),
        ]
    }

    proptest! {
        /// Against a map from cohort to end: the same earliest (end, cohort) after every
        /// operation, the same entries, and each entry where its place says.
        #[test]
        fn ends_are_a_map_from_cohort_to_end_read_earliest_first(
            ops in prop::collection::vec(op(), 0..200)
        ) {
            let mut ends = Ends::default();
            let mut model: BTreeMap<usize, Ps> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(i, t) => {
                        ends.set(i, t);
                        model.insert(i, t);
                    }
                    Op::SetMany(moves) => {
                        // one move per cohort, as a chain makes them
                        let mut once = BTreeMap::new();
                        once.extend(moves.iter().copied());
                        ends.set_many(once.len(), once.iter().map(|(i, t)| (*i, *t)));
                        model.extend(once);
                    }
                    Op::Remove(i) => {
                        ends.remove(i);
                        model.remove(&i);
                    }
                    Op::Pop => {
                        let first = model.iter().map(|(i, t)| (*t, *i)).min();
                        prop_assert_eq!(ends.pop(), first);
                        if let Some((_, i)) = first {
                            model.remove(&i);
                        }
                    }
                }
                let first = model.iter().map(|(i, t)| (*t, *i)).min();
                prop_assert_eq!(ends.peek(), first);
                let mut got: Vec<_> = ends.entries().collect();
                got.sort_unstable();
                let mut want: Vec<_> = model.iter().map(|(i, t)| (*t, *i)).collect();
                want.sort_unstable();
                prop_assert_eq!(got, want);
                for (p, &(_, i)) in ends.heap.iter().enumerate() {
                    prop_assert_eq!(ends.place[i as usize] as usize, p);
                }
                for (p, e) in ends.heap.iter().enumerate().skip(1) {
                    prop_assert!(ends.heap[(p - 1) / 2] <= *e, "heap order broken at {}", p);
                }
            }
        }
    }
}

//! A sorted set of ids handed out in increasing order (tenants), as a bitset over the
//! window of live ids: the board's backlog (tenants with queued tasks) changes on
//! nearly every event, and a B-tree insert or remove there cost hundreds of
//! instructions where a bit costs a few (issue 55). Like [`crate::id_table::IdTable`],
//! an id far outside the window goes to a sorted side set, so that an odd id costs a
//! tree operation, never a bitset of its size.

use std::collections::BTreeSet;

/// The most empty words an insertion may add to the window (4096 × 64 ids).
const MAX_GAP_WORDS: u64 = 4096;

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdSet {
    /// The word of `words[0]` (id / 64).
    base: u64,
    /// A plain vector, not a deque: indexing it is what every query does, and the
    /// window slides (a shift of a few words) only when its first word empties.
    words: Vec<u64>,
    /// Ids that did not fit the window; never also in it.
    sparse: BTreeSet<u64>,
}

impl IdSet {
    /// Whether `id` is in the set.
    pub(crate) fn contains(&self, id: u64) -> bool {
        match self.word_index(id) {
            Some(w) => self.words[w] & (1 << (id % 64)) != 0,
            None => !self.sparse.is_empty() && self.sparse.contains(&id),
        }
    }

    #[inline]
    fn word_index(&self, id: u64) -> Option<usize> {
        let w = (id / 64).checked_sub(self.base)?;
        (w < self.words.len() as u64).then_some(w as usize)
    }

    /// Add `id`; false if it was there. The common case (inside the window: one bit)
    /// inlined into its callers, the rest out of line: the board's sets change on
    /// nearly every event, and the calls were a twentieth of a task's instructions
    /// (issue 55).
    #[inline]
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        if let Some(w) = self.word_index(id) {
            let bit = 1 << (id % 64);
            let was = self.words[w] & bit != 0;
            self.words[w] |= bit;
            return !was;
        }
        self.insert_outside(id)
    }

    #[inline(never)]
    fn insert_outside(&mut self, id: u64) -> bool {
        // (a window of several words never starts with an empty one: `remove` trims)
        if self.sparse.is_empty()
            && self.words.len() <= 1
            && self.words.first().is_none_or(|w| *w == 0)
        {
            // empty: the window moves to the id (its one word, if kept, is reused)
            self.words.truncate(1);
            self.base = id / 64;
        }
        let word = id / 64;
        let end = self.base + self.words.len() as u64;
        if word < self.base && self.base - word <= MAX_GAP_WORDS {
            self.grow_down_to(word);
        }
        if word < self.base || word >= end.saturating_add(MAX_GAP_WORDS) {
            return self.sparse.insert(id);
        }
        let w = (word - self.base) as usize;
        if w >= self.words.len() {
            self.grow_to(w + 1);
        }
        let bit = 1 << (id % 64);
        let was = self.words[w] & bit != 0;
        self.words[w] |= bit;
        !was
    }

    /// Grow the window to `len` words, moving into it the side set's ids it now covers.
    fn grow_to(&mut self, len: usize) {
        let old_end = (self.base + self.words.len() as u64).saturating_mul(64);
        self.words.resize(len, 0);
        if self.sparse.is_empty() {
            return;
        }
        let new_end = (self.base + len as u64).saturating_mul(64);
        let mut covered = self.sparse.split_off(&old_end);
        let mut beyond = covered.split_off(&new_end);
        self.sparse.append(&mut beyond);
        for id in covered {
            let w = (id / 64 - self.base) as usize;
            self.words[w] |= 1 << (id % 64);
        }
    }

    /// Extend the window down to start at `word`, moving into it the side set's ids it
    /// now covers (an id below the window, inserted after the window slid past it:
    /// GPU 0 idle again after GPUs 0-63 were all busy).
    fn grow_down_to(&mut self, word: u64) {
        let old_start = self.base * 64;
        let add = (self.base - word) as usize;
        self.words.splice(0..0, std::iter::repeat_n(0, add));
        self.base = word;
        if self.sparse.is_empty() {
            return;
        }
        let mut above = self.sparse.split_off(&(word * 64));
        let mut rest = above.split_off(&old_start);
        self.sparse.append(&mut rest);
        for id in above {
            let w = (id / 64 - self.base) as usize;
            self.words[w] |= 1 << (id % 64);
        }
    }

    /// Remove `id`; false if it was not there. The window slides past leading empty
    /// words.
    // (on every task's path: inlined, issue 55)
    #[inline(always)]
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let Some(w) = self.word_index(id) else { return self.remove_outside(id) };
        let bit = 1 << (id % 64);
        let was = self.words[w] & bit != 0;
        self.words[w] &= !bit;
        // the last word stays, so that a set that empties and fills again (the idle
        // GPUs of a small node, on every event) does not free and grow its window
        if w == 0 && self.words[0] == 0 && self.words.len() > 1 {
            self.slide();
        }
        was
    }

    #[inline(never)]
    fn remove_outside(&mut self, id: u64) -> bool {
        self.sparse.remove(&id)
    }

    /// Move the window past its leading empty words (never its last one).
    #[inline(never)]
    fn slide(&mut self) {
        let empty = self.words.iter().take(self.words.len() - 1).take_while(|w| **w == 0).count();
        self.words.drain(..empty);
        self.base += empty as u64;
    }

    /// The smallest id at or after `from`.
    #[inline]
    pub(crate) fn first_from(&self, from: u64) -> Option<u64> {
        let dense = self.dense_from(from);
        if self.sparse.is_empty() {
            return dense;
        }
        self.first_from_with_sparse(from, dense)
    }

    #[inline(never)]
    fn first_from_with_sparse(&self, from: u64, dense: Option<u64>) -> Option<u64> {
        let sparse = self.sparse.range(from..).next().copied();
        match (dense, sparse) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The smallest id after `id`.
    pub(crate) fn first_after(&self, id: u64) -> Option<u64> {
        self.first_from(id.checked_add(1)?)
    }

    /// The smallest id in the window at or after `from`.
    #[inline]
    fn dense_from(&self, from: u64) -> Option<u64> {
        let start = self.base * 64;
        if let [word] = self.words[..] {
            // one word (a small node's GPUs, a few dozen tenants): no loop
            let mask = match from.checked_sub(start) {
                None | Some(0) => u64::MAX,
                Some(rel) if rel < 64 => u64::MAX << rel,
                Some(_) => return None,
            };
            let bits = word & mask;
            return (bits != 0).then(|| start + u64::from(bits.trailing_zeros()));
        }
        let (mut w, mut mask) = if from <= start {
            (0, u64::MAX)
        } else {
            let rel = from - start;
            (usize::try_from(rel / 64).ok()?, u64::MAX << (rel % 64))
        };
        while w < self.words.len() {
            let bits = self.words[w] & mask;
            if bits != 0 {
                return Some(start + w as u64 * 64 + u64::from(bits.trailing_zeros()));
            }
            w += 1;
            mask = u64::MAX;
        }
        None
    }

    /// Every id, ascending.
    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// Every id at or after `from`, ascending.
    #[inline]
    pub(crate) fn iter_from(&self, from: u64) -> Iter<'_> {
        // without a side set, the window's bits one word at a time (a search from each
        // id for the next, a call each, was most of a walk of Credit's running
        // quanta, issue 55); with one, merged by those searches
        if !self.sparse.is_empty() {
            return Iter::Merged { set: self, next: self.first_from(from) };
        }
        let start = self.base * 64;
        let (w, mask) = match from.checked_sub(start) {
            None => (0, u64::MAX),
            Some(rel) => (rel / 64, u64::MAX << (rel % 64)),
        };
        let w = usize::try_from(w).unwrap_or(usize::MAX);
        let bits = self.words.get(w).map_or(0, |word| word & mask);
        Iter::Dense { words: &self.words, start, w, bits }
    }
}

/// An [`IdSet`]'s ids from one on, ascending.
pub(crate) enum Iter<'a> {
    /// A window of words without a side set: each word's bits taken lowest first.
    Dense {
        words: &'a [u64],
        /// The first id of the window.
        start: u64,
        /// The word being taken.
        w: usize,
        /// Its bits not taken yet.
        bits: u64,
    },
    /// With a side set: the next id found by a search from the last.
    Merged { set: &'a IdSet, next: Option<u64> },
}

impl Iterator for Iter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        match self {
            Iter::Dense { words, start, w, bits } => {
                while *bits == 0 {
                    *w = w.checked_add(1)?;
                    *bits = *words.get(*w)?;
                }
                let bit = bits.trailing_zeros();
                *bits &= *bits - 1;
                Some(*start + *w as u64 * 64 + u64::from(bit))
            }
            Iter::Merged { set, next } => {
                let id = (*next)?;
                *next = set.first_after(id);
                Some(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::ops::Bound::{Excluded, Unbounded};

    proptest! {
        /// Whatever the ids and their order, the set answers as a sorted set does.
        #[test]
        fn behaves_as_a_sorted_set(ops in proptest::collection::vec(
            (any::<bool>(), prop_oneof![0u64..200, 0u64..1_000_000, any::<u64>()]), 0..300)
        ) {
            let mut set = IdSet::default();
            let mut model = BTreeSet::new();
            for (insert, id) in ops {
                if insert {
                    prop_assert_eq!(set.insert(id), model.insert(id));
                } else {
                    prop_assert_eq!(set.remove(id), model.remove(&id));
                }
                prop_assert_eq!(set.contains(id), model.contains(&id));
                prop_assert_eq!(set.first_after(id), model.range((Excluded(id), Unbounded)).next().copied());
                prop_assert_eq!(set.first_from(id), model.range(id..).next().copied());
                // a walk from any id, with and without a side set (its own path)
                let from = id.wrapping_mul(7) % 1_200_000;
                for from in [id, from, id.saturating_sub(65)] {
                    prop_assert_eq!(
                        set.iter_from(from).take(70).collect::<Vec<_>>(),
                        model.range(from..).take(70).copied().collect::<Vec<_>>()
                    );
                }
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        }
    }

    /// Ids leaving in order slide the window: it holds only the live ones' words.
    #[test]
    fn the_window_slides_as_the_oldest_ids_leave() {
        let mut s = IdSet::default();
        for id in 0..10_000u64 {
            s.insert(id);
            if id >= 10 {
                s.remove(id - 10);
            }
        }
        assert!(s.words.len() <= 2, "{} words", s.words.len());
        assert!(s.sparse.is_empty());
        assert_eq!(s.iter().collect::<Vec<_>>(), (9990..10_000).collect::<Vec<_>>());
    }
}

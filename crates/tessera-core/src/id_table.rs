//! A map from ids that are handed out in increasing order (tenants: the daemon and the
//! simulator number them from 0 and never reuse one) to values, with O(1) look-ups:
//! the live ids lie in a window `[base, base + len)` held as a dense array, which slides
//! forward as the oldest ids leave. The policies look a tenant up on every event; a tree
//! costs a walk of pointers there, and at thousands of tenants a cache miss per level.
//!
//! An id far outside the window (more than [`MAX_GAP`] slots beyond it, or below it)
//! goes to a sorted side map instead, so that an odd id costs a tree look-up, never an
//! array of its size.

use std::collections::{BTreeMap, VecDeque};

/// The most empty slots an insertion may add to the dense window.
const MAX_GAP: u64 = 4096;

/// Values by id, dense over the window of live ids.
#[derive(Clone, Debug)]
pub(crate) struct IdTable<V> {
    /// The id of `dense[0]`.
    base: u64,
    dense: VecDeque<Option<V>>,
    /// Live values in `dense`.
    dense_len: usize,
    /// Ids that did not fit the window.
    sparse: BTreeMap<u64, V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable { base: 0, dense: VecDeque::new(), dense_len: 0, sparse: BTreeMap::new() }
    }
}

impl<V> IdTable<V> {
    /// The index of `id` in `dense`, if it lies in the window.
    fn index(&self, id: u64) -> Option<usize> {
        let i = id.checked_sub(self.base)?;
        (i < self.dense.len() as u64).then_some(i as usize)
    }

    /// The value of `id`.
    #[inline]
    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        // one bounds check, the deque's own (an id below the window wraps to an index
        // far beyond it): the window's test and then the deque's were two on the
        // policies' commonest look-up (issue 55)
        match usize::try_from(id.wrapping_sub(self.base)).ok().and_then(|i| self.dense.get(i)) {
            Some(slot) => slot.as_ref(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&id),
        }
    }

    /// The value of `id`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        match usize::try_from(id.wrapping_sub(self.base)).ok().and_then(|i| self.dense.get_mut(i)) {
            Some(slot) => slot.as_mut(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&id),
        }
    }

    /// The value of `id`, inserted by `make` if absent.
    pub(crate) fn get_or_insert_with(&mut self, id: u64, make: impl FnOnce() -> V) -> &mut V {
        // an id in the window of a table holding something: its slot, as the general
        // path below would find it, without that path's checks (a look-up of this kind
        // runs several times per event in the composed node policy's monitor, issue 55)
        if self.dense_len > 0
            && let Some(i) = self.index(id)
        {
            let slot = &mut self.dense[i];
            if slot.is_none() {
                self.dense_len += 1;
            }
            return slot.get_or_insert_with(make);
        }
        self.get_or_insert_outside(id, make)
    }

    /// [`IdTable::get_or_insert_with`] for an id outside the window, or in an empty
    /// table (which moves the window to it).
    #[inline(never)]
    fn get_or_insert_outside(&mut self, id: u64, make: impl FnOnce() -> V) -> &mut V {
        if self.dense_len == 0 && self.sparse.is_empty() {
            self.dense.clear();
            self.base = id;
        }
        // The commonest cases, one slot next to the window (an id just past its end:
        // the next task, or a tenant back; just before its start: a tenant held again
        // after the window slid past it), without the general path's resizing: a
        // tenth of DCUDA's monitor's work in the node policy (issue 55). An id next
        // to the window may be in the side map only if the side map holds anything.
        if self.sparse.is_empty() {
            if self.base.checked_add(self.dense.len() as u64) == Some(id) {
                self.dense.push_back(Some(make()));
                self.dense_len += 1;
                return self.dense.back_mut().and_then(Option::as_mut).expect("just pushed");
            }
            if id.wrapping_add(1) == self.base && id != u64::MAX {
                self.dense.push_front(Some(make()));
                self.dense_len += 1;
                self.base = id;
                return self.dense.front_mut().and_then(Option::as_mut).expect("just pushed");
            }
        }
        if id < self.base && self.base - id <= MAX_GAP {
            // an id a little below the window (a table refilled after a clear in the
            // order its ids come, not theirs: DCUDA's monitor, issue 55) widens it at
            // the front rather than going to the side map
            self.grow_front_to(id);
        }
        let end = self.base.saturating_add(self.dense.len() as u64);
        if id >= self.base && id < end.saturating_add(MAX_GAP) {
            let i = (id - self.base) as usize;
            if i >= self.dense.len() {
                self.grow_to(i + 1);
            }
            let slot = &mut self.dense[i];
            if slot.is_none() {
                self.dense_len += 1;
            }
            return slot.get_or_insert_with(make);
        }
        self.sparse.entry(id).or_insert_with(make)
    }

    /// Set `id`'s value, returning the one it replaces.
    pub(crate) fn insert(&mut self, id: u64, value: V) -> Option<V> {
        let mut value = Some(value);
        let slot = self.get_or_insert_with(id, || value.take().expect("taken once"));
        value.map(|v| std::mem::replace(slot, v))
    }

    /// Every (id, value) mutably, in no particular order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut V)> {
        let base = self.base;
        self.dense
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, v)| v.as_mut().map(|v| (base + i as u64, v)))
            .chain(self.sparse.iter_mut().map(|(k, v)| (*k, v)))
    }

    /// Grow the window to `len` slots, moving into it the side map's ids it now covers
    /// (an id lives in the window or in the side map, never both).
    fn grow_to(&mut self, len: usize) {
        let old_end = self.base.saturating_add(self.dense.len() as u64);
        self.dense.resize_with(len, || None);
        self.adopt_side_ids(old_end, self.base.saturating_add(len as u64));
    }

    /// Move the side map's ids in `[from, to)`, now inside the window, into it.
    fn adopt_side_ids(&mut self, from: u64, to: u64) {
        if self.sparse.is_empty() {
            return;
        }
        let mut covered = self.sparse.split_off(&from);
        let mut beyond = covered.split_off(&to);
        self.sparse.append(&mut beyond);
        for (id, v) in covered {
            self.dense[(id - self.base) as usize] = Some(v);
            self.dense_len += 1;
        }
    }

    /// Widen the window down to `base`, moving into it the side map's ids it now
    /// covers (as [`Self::grow_to`] does at the back).
    fn grow_front_to(&mut self, base: u64) {
        let old_base = self.base;
        for _ in base..old_base {
            self.dense.push_front(None);
        }
        self.base = base;
        self.adopt_side_ids(base, old_base);
    }

    /// Remove `id`'s value; the window slides past leading empty slots.
    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        let Some(i) = self.index(id) else { return self.sparse.remove(&id) };
        let v = self.dense[i].take();
        if v.is_some() {
            self.dense_len -= 1;
        }
        while let Some(None) = self.dense.front() {
            self.dense.pop_front();
            // (wraps only once the window is empty, when `base` means nothing)
            self.base = self.base.wrapping_add(1);
        }
        v
    }

    /// Remove every value, keeping the window's memory for the next ones.
    pub(crate) fn clear(&mut self) {
        self.dense.clear();
        self.dense_len = 0;
        self.sparse.clear();
    }

    /// Every (id, value), in id order.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        Iter {
            base: self.base,
            dense: self.dense.iter().enumerate(),
            next_dense: None,
            merge: !self.sparse.is_empty(),
            sparse: self.sparse.iter().peekable(),
        }
    }
}

/// [`IdTable::iter`]: the window's live slots, merged in id order with the side map's
/// ids where it has any. Most tables have none, and walk the window alone: a merge
/// that peeked at both sides for every id was a twentieth of the node policy's work,
/// which walks its tenants several times per sample (issue 55).
pub(crate) struct Iter<'a, V> {
    base: u64,
    dense: std::iter::Enumerate<std::collections::vec_deque::Iter<'a, Option<V>>>,
    /// The window's next live entry, taken from `dense` and not yet yielded (merging).
    next_dense: Option<(u64, &'a V)>,
    merge: bool,
    sparse: std::iter::Peekable<std::collections::btree_map::Iter<'a, u64, V>>,
}

impl<'a, V> Iter<'a, V> {
    fn next_in_window(&mut self) -> Option<(u64, &'a V)> {
        let base = self.base;
        self.dense.find_map(|(i, v)| v.as_ref().map(|v| (base + i as u64, v)))
    }
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (u64, &'a V);

    #[inline]
    fn next(&mut self) -> Option<(u64, &'a V)> {
        if !self.merge {
            return self.next_in_window();
        }
        if self.next_dense.is_none() {
            self.next_dense = self.next_in_window();
        }
        match (self.next_dense, self.sparse.peek()) {
            (Some((d, _)), Some((s, _))) if **s < d => self.sparse.next().map(|(k, v)| (*k, v)),
            (Some(d), _) => {
                self.next_dense = None;
                Some(d)
            }
            (None, _) => self.sparse.next().map(|(k, v)| (*k, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the ids and their order, the table answers as a sorted map does.
        #[test]
        fn behaves_as_a_sorted_map(ops in proptest::collection::vec(
            (any::<bool>(), prop_oneof![0u64..64, 0u64..10_000, any::<u64>()]), 0..300)
        ) {
            let mut table = IdTable::default();
            let mut model = BTreeMap::new();
            for (insert, id) in ops {
                if insert && id % 3 == 0 {
                    prop_assert_eq!(table.insert(id, 7), model.insert(id, 7));
                } else if insert {
                    *table.get_or_insert_with(id, || 0u64) += 1;
                    *model.entry(id).or_insert(0u64) += 1;
                } else {
                    prop_assert_eq!(table.remove(id), model.remove(&id));
                }
                prop_assert_eq!(table.get(id), model.get(&id));
            }
            for (_, v) in table.iter_mut() {
                *v += 1;
            }
            let mut cleared = table.clone();
            cleared.clear();
            prop_assert_eq!(cleared.iter().count(), 0);
            prop_assert_eq!(cleared.insert(5, 1), None);
            prop_assert_eq!(cleared.iter().map(|(k, v)| (k, *v)).collect::<Vec<_>>(), vec![(5, 1)]);
            for v in model.values_mut() {
                *v += 1;
            }
            let all: Vec<_> = table.iter().map(|(k, v)| (k, *v)).collect();
            let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(all, expected);
        }
    }

    /// An id put in the side map, then covered by the window as it grows, is one entry:
    /// the window takes it over (it was found twice, once on each side).
    #[test]
    fn a_side_map_id_the_window_grows_over_moves_into_it() {
        let mut t = IdTable::default();
        for id in [0, 6647, 1296, 2551] {
            *t.get_or_insert_with(id, || 0u64) += 1;
        }
        *t.get_or_insert_with(6647, || 0u64) += 1;
        assert_eq!(t.get(6647), Some(&2));
        assert!(t.sparse.is_empty());
        assert_eq!(t.iter().count(), 4);
        assert_eq!(t.remove(6647), Some(2));
        assert_eq!(t.get(6647), None);
    }

    /// An id just past the window's end or just before its start joins the window
    /// (the append and prepend paths), and none wraps around the ids' range: after
    /// the largest id, the smallest is far off, not next to it.
    #[test]
    fn ids_next_to_the_window_join_it_and_none_wraps() {
        let mut t = IdTable::default();
        for id in [10u64, 11, 9, 12, 8] {
            *t.get_or_insert_with(id, || 0u64) += id;
        }
        assert!(t.sparse.is_empty());
        assert_eq!((t.base, t.dense.len()), (8, 5));
        assert_eq!(
            t.iter().map(|(k, v)| (k, *v)).collect::<Vec<_>>(),
            [8, 9, 10, 11, 12].map(|i| (i, i))
        );
        let mut top = IdTable::default();
        *top.get_or_insert_with(u64::MAX, || 1u64) += 0;
        *top.get_or_insert_with(0, || 2u64) += 0;
        *top.get_or_insert_with(u64::MAX - 1, || 3u64) += 0;
        assert_eq!(top.get(u64::MAX), Some(&1));
        assert_eq!(top.get(0), Some(&2));
        assert_eq!(top.get(u64::MAX - 1), Some(&3));
        assert_eq!(top.iter().map(|(k, _)| k).collect::<Vec<_>>(), [0, u64::MAX - 1, u64::MAX]);
    }

    /// Ids coming in any order near each other, after a clear, stay in the window:
    /// one below the first widens it at the front (it went to the side map before, a
    /// tree insertion per id in DCUDA's monitor).
    #[test]
    fn ids_a_little_below_the_window_widen_it() {
        let mut t = IdTable::default();
        for round in 0..3u64 {
            t.clear();
            for id in [40, 12, 33, 7, 41, 0, 25] {
                *t.get_or_insert_with(id + round, || 0u64) += 1;
            }
            assert!(t.sparse.is_empty(), "round {round}");
            let ids: Vec<u64> = t.iter().map(|(k, _)| k).collect();
            assert_eq!(ids, [0, 7, 12, 25, 33, 40, 41].map(|i| i + round));
        }
    }

    /// Ids leaving in order slide the window: it holds only the live ones.
    #[test]
    fn the_window_slides_as_the_oldest_ids_leave() {
        let mut t = IdTable::default();
        for id in 0..1000u64 {
            t.get_or_insert_with(id, || id);
            if id >= 10 {
                t.remove(id - 10);
            }
        }
        assert_eq!(t.dense.len(), 10);
        assert_eq!(t.base, 990);
        assert!(t.sparse.is_empty());
    }
}

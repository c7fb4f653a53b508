//! A map from ids that are handed out in increasing order (tenants: the daemon and the
//! simulator number them from 0 and never reuse one) to values, with O(1) look-ups:
//! the live ids lie in a window `[base, base + len)` held as a dense array, which slides
//! forward as the oldest ids leave. The policies look a tenant up on every event; a tree
//! costs a walk of pointers there, and at thousands of tenants a cache miss per level.
//!
//! The array is a plain vector whose first slots, left empty as the window slid past
//! them, are dropped in one move once they are half of it: a ring buffer's index
//! arithmetic (a wrap test on every look-up) was a twentieth of the composed node
//! policy's instructions, which looks tenants up a dozen times per event (issue 55).
//!
//! An id far outside the window (more than [`MAX_GAP`] slots beyond it, or below it)
//! goes to a sorted side map instead, so that an odd id costs a tree look-up, never an
//! array of its size.

use std::collections::BTreeMap;

/// The most empty slots an insertion may add to the dense window.
const MAX_GAP: u64 = 4096;

/// Empty slots at the front of the array that are always kept: fewer are not worth a
/// move of the rest.
const MIN_DROP: usize = 16;

/// Values by id, dense over the window of live ids.
///
/// Invariants: `dense[..front]` are empty; an id lives in `dense` or in `sparse`,
/// never both, and no id of `sparse` lies in `[origin, origin + dense.len())` (a
/// look-up there reads the array alone).
#[derive(Clone, Debug)]
pub(crate) struct IdTable<V> {
    /// The id of `dense[0]`.
    origin: u64,
    dense: Vec<Option<V>>,
    /// The window's first slot: those before it are empty, left behind as it slid.
    front: usize,
    /// Live values in `dense`.
    dense_len: usize,
    /// Ids that did not fit the window.
    sparse: BTreeMap<u64, V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable { origin: 0, dense: Vec::new(), front: 0, dense_len: 0, sparse: BTreeMap::new() }
    }
}

impl<V> IdTable<V> {
    /// The id of the window's first slot.
    fn base(&self) -> u64 {
        self.origin.wrapping_add(self.front as u64)
    }

    /// The index of `id` in `dense`, if the array covers it (in the window, or in an
    /// empty slot before it).
    #[inline]
    fn index(&self, id: u64) -> Option<usize> {
        // one bounds check: an id below the array wraps to an index far beyond it
        let i = usize::try_from(id.wrapping_sub(self.origin)).ok()?;
        (i < self.dense.len()).then_some(i)
    }

    /// The value of `id`.
    #[inline]
    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        match self.index(id) {
            Some(i) => self.dense[i].as_ref(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&id),
        }
    }

    /// The value of `id`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        match self.index(id) {
            Some(i) => self.dense[i].as_mut(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&id),
        }
    }

    /// The value of `id`, inserted by `make` if absent.
    pub(crate) fn get_or_insert_with(&mut self, id: u64, make: impl FnOnce() -> V) -> &mut V {
        // an id the array covers: its slot, as the general path below would find it,
        // without that path's checks (a look-up of this kind runs several times per
        // event in the composed node policy's monitor, issue 55); a slot before the
        // window's start widens the window. (A table emptied by removals has no array.)
        if let Some(i) = self.index(id) {
            if self.dense[i].is_none() {
                self.filled(i);
            }
            return self.dense[i].get_or_insert_with(make);
        }
        self.get_or_insert_outside(id, make)
    }

    /// [`IdTable::get_or_insert_with`] for an id the array does not cover (in an empty
    /// table, the window moves to it).
    #[inline(never)]
    fn get_or_insert_outside(&mut self, id: u64, make: impl FnOnce() -> V) -> &mut V {
        if self.dense_len == 0 && self.sparse.is_empty() {
            // the window moves to the id, with room below it for half as many ids as
            // the array held before: a table refilled in no particular order widens at
            // the front once, not by a move of the array at each id below the first
            let room = (self.dense.capacity() as u64 / 2).min(id).min(MAX_GAP);
            self.dense.clear();
            self.dense.resize_with(room as usize, || None);
            self.origin = id - room;
            self.front = 0;
        }
        // The commonest case, an id just past the array's end (the next task, or a
        // tenant back), without the general path's resizing (issue 55). An id next to
        // the array may be in the side map only if the side map holds anything.
        if self.sparse.is_empty() && self.origin.checked_add(self.dense.len() as u64) == Some(id) {
            self.dense.push(None);
            self.filled(self.dense.len() - 1);
            let slot = self.dense.last_mut().expect("just pushed");
            return slot.insert(make());
        }
        if id < self.origin && self.origin - id <= MAX_GAP {
            // an id a little below the array (a table refilled in the order its ids
            // come, not theirs: DCUDA's monitor, issue 55) widens it at the front
            // rather than going to the side map
            self.grow_front_to(id);
        }
        let end = self.origin.saturating_add(self.dense.len() as u64);
        if id >= self.origin && id < end.saturating_add(MAX_GAP) {
            let i = (id - self.origin) as usize;
            if i >= self.dense.len() {
                self.grow_to(i + 1);
            }
            if self.dense[i].is_none() {
                self.filled(i);
            }
            return self.dense[i].get_or_insert_with(make);
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
        let base = self.base();
        self.dense[self.front..]
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, v)| v.as_mut().map(|v| (base + i as u64, v)))
            .chain(self.sparse.iter_mut().map(|(k, v)| (*k, v)))
    }

    /// Grow the array to `len` slots, moving into it the side map's ids it now covers
    /// (an id lives in the array or in the side map, never both).
    fn grow_to(&mut self, len: usize) {
        let old_end = self.origin.saturating_add(self.dense.len() as u64);
        self.dense.resize_with(len, || None);
        self.adopt_side_ids(old_end, self.origin.saturating_add(len as u64));
    }

    /// Move the side map's ids in `[from, to)`, now covered by the array, into it.
    fn adopt_side_ids(&mut self, from: u64, to: u64) {
        if self.sparse.is_empty() {
            return;
        }
        let mut covered = self.sparse.split_off(&from);
        let mut beyond = covered.split_off(&to);
        self.sparse.append(&mut beyond);
        for (id, v) in covered {
            let i = (id - self.origin) as usize;
            self.dense[i] = Some(v);
            self.filled(i);
        }
    }

    /// Extend the array down to `id` (below its first slot), with as many empty slots
    /// again below that as it holds (at most down to id 0), so that ids coming in
    /// descending order widen it by a move of the array now and then, not one each;
    /// the side map's ids it now covers move into it.
    fn grow_front_to(&mut self, id: u64) {
        let old_origin = self.origin;
        let extra = (self.dense.len() as u64).min(id);
        let origin = id - extra;
        let added = (old_origin - origin) as usize;
        self.dense.splice(0..0, std::iter::repeat_with(|| None).take(added));
        self.origin = origin;
        // the window starts at the first live slot, as before (the new slots are empty)
        self.front += added;
        self.adopt_side_ids(origin, old_origin);
    }

    /// Slot `i`, empty, was just given a value: the window starts there if it is the
    /// first (so that, holding anything, the window's first slot is live).
    #[inline]
    fn filled(&mut self, i: usize) {
        self.front = if self.dense_len == 0 { i } else { self.front.min(i) };
        self.dense_len += 1;
    }

    /// Remove `id`'s value; the window slides past leading empty slots.
    pub(crate) fn remove(&mut self, id: u64) -> Option<V> {
        let Some(i) = self.index(id) else { return self.sparse.remove(&id) };
        let v = self.dense[i].take();
        if v.is_some() {
            self.dense_len -= 1;
            if i == self.front {
                self.slide();
            }
        }
        v
    }

    /// Move the window's start past its leading empty slots, and drop the array's
    /// empty front once it is half of the array.
    fn slide(&mut self) {
        if self.dense_len == 0 {
            // (the next insertion moves the window to its id)
            self.dense.clear();
            self.front = 0;
            return;
        }
        while self.dense[self.front].is_none() {
            self.front += 1;
        }
        if self.front >= MIN_DROP && 2 * self.front >= self.dense.len() {
            self.dense.drain(..self.front);
            self.origin += self.front as u64;
            self.front = 0;
        }
    }

    /// Every (id, value), in id order.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        Iter {
            base: self.base(),
            dense: self.dense[self.front..].iter().enumerate(),
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
    dense: std::iter::Enumerate<std::slice::Iter<'a, Option<V>>>,
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

    impl<V> IdTable<V> {
        /// The invariants [`IdTable`] states, and that the window's first slot is live.
        fn check(&self) {
            assert!(self.dense[..self.front.min(self.dense.len())].iter().all(Option::is_none));
            assert_eq!(self.dense_len, self.dense.iter().filter(|v| v.is_some()).count());
            if self.dense_len > 0 {
                assert!(self.dense[self.front].is_some(), "the window starts at an empty slot");
            }
            let end = self.origin.saturating_add(self.dense.len() as u64);
            assert!(
                self.sparse.keys().all(|k| *k < self.origin || *k >= end),
                "a side map id the array covers"
            );
        }
    }

    proptest! {
        /// Whatever the ids and their order, the table answers as a sorted map does.
        #[test]
        fn behaves_as_a_sorted_map(ops in proptest::collection::vec(
            (any::<bool>(), prop_oneof![0u64..64, 0u64..10_000, any::<u64>()]), 0..300)
        ) {
            let mut table = IdTable::default();
            let mut model = BTreeMap::new();
            for (insert, id) in ops {
                if !insert && id % 29 == 0 {
                    // emptied, and filled again
                    for k in model.keys() {
                        table.remove(*k);
                    }
                    model.clear();
                } else if insert && id % 3 == 0 {
                    prop_assert_eq!(table.insert(id, 7), model.insert(id, 7));
                } else if insert {
                    *table.get_or_insert_with(id, || 0u64) += 1;
                    *model.entry(id).or_insert(0u64) += 1;
                } else {
                    prop_assert_eq!(table.remove(id), model.remove(&id));
                }
                prop_assert_eq!(table.get(id), model.get(&id));
                table.check();
            }
            for (_, v) in table.iter_mut() {
                *v += 1;
            }
            for v in model.values_mut() {
                *v += 1;
            }
            let all: Vec<_> = table.iter().map(|(k, v)| (k, *v)).collect();
            let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(all, expected);
        }
    }

    proptest! {
        /// Ids handed out in increasing order and leaving in any order near the oldest
        /// (tenants, tasks), some coming back, slide the window and drop its empty
        /// front: the table answers as a sorted map does, and its array stays within
        /// a bound of the live ids' span.
        #[test]
        fn a_sliding_window_answers_as_a_sorted_map(
            ops in proptest::collection::vec((0u8..5, 0u64..24), 0..600)
        ) {
            let mut table = IdTable::default();
            let mut model = BTreeMap::new();
            let mut next = 0u64;
            for (op, back) in ops {
                match op {
                    0 | 1 => {
                        table.insert(next, next);
                        model.insert(next, next);
                        next += 1;
                    }
                    2 => {
                        // the oldest, or one a little after it
                        let id = model.keys().nth(back as usize % 3).copied().unwrap_or(0);
                        prop_assert_eq!(table.remove(id), model.remove(&id));
                    }
                    3 => {
                        let id = next.saturating_sub(back + 1);
                        prop_assert_eq!(table.remove(id), model.remove(&id));
                    }
                    _ => {
                        let id = next.saturating_sub(back + 1);
                        prop_assert_eq!(
                            *table.get_or_insert_with(id, || id),
                            *model.entry(id).or_insert(id)
                        );
                    }
                }
                table.check();
                let all: Vec<_> = table.iter().map(|(k, v)| (k, *v)).collect();
                let expected: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(all, expected);
                if let (Some(lo), Some(hi)) = (model.keys().next(), model.keys().last()) {
                    let span = (hi - lo + 1) as usize;
                    prop_assert!(
                        table.dense.len() <= 2 * span + 2 * MIN_DROP + 24,
                        "{} slots for a span of {}", table.dense.len(), span
                    );
                }
            }
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
        assert_eq!((t.base(), t.dense.len() - t.front), (8, 5));
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

    /// Ids coming in any order near each other, in a table emptied and filled again,
    /// stay in the window: one below the first widens it at the front (it went to the
    /// side map before, a tree insertion per id in DCUDA's monitor); ids far from the
    /// last ones move it, and widen it again.
    #[test]
    fn ids_a_little_below_the_window_widen_it() {
        let mut t = IdTable::default();
        for round in [0u64, 1, 2, 10_000, 10_001, 3] {
            let held: Vec<u64> = t.iter().map(|(k, _)| k).collect();
            for id in held {
                t.remove(id);
            }
            for id in [40, 12, 33, 7, 41, 0, 25] {
                *t.get_or_insert_with(id + round, || 0u64) += 1;
            }
            assert!(t.sparse.is_empty(), "round {round}");
            t.check();
            let ids: Vec<u64> = t.iter().map(|(k, _)| k).collect();
            assert_eq!(ids, [0, 7, 12, 25, 33, 40, 41].map(|i| i + round));
            // the array spans the ids about as they were, not every id it ever held
            assert!(t.dense.len() <= 2 * 42 + MIN_DROP, "round {round}: {} slots", t.dense.len());
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
        assert_eq!(t.dense.len() - t.front, 10);
        assert_eq!(t.base(), 990);
        // the empty slots the window left behind are dropped as they pile up
        assert!(t.dense.len() <= 2 * (10 + MIN_DROP), "{} slots for 10 ids", t.dense.len());
        assert!(t.sparse.is_empty());
    }
}

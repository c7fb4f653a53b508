//! A small sorted map as a vector of pairs: a fair-queuing group's members (one for a
//! tenant on its own, a Slurm job's few processes otherwise), the budgets lingering
//! now (put in and taken out around nearly every quantum, a few at a time). A B-tree map of one
//! entry cost an allocation to create and a node walk on each of the several look-ups
//! fair queuing makes per event (issue 55); a binary search over a few pairs costs a
//! comparison or two.

/// Keys in ascending order, each once; iterated in that order, as the B-tree map it
/// replaces was.
#[derive(Clone, Debug)]
pub(crate) struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap { entries: Vec::new() }
    }
}

impl<K: Ord + Copy, V> VecMap<K, V> {
    fn find(&self, key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.cmp(key))
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    /// Set `key`'s value, returning the one it replaces.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// [`VecMap::insert`] for a key that belongs near the end: its place found by a
    /// walk from the end, not a binary search. Fair queuing's eligible tenants per GPU
    /// by start tag (a tenant comes back with the largest start tag, or near it), whose
    /// keys' comparisons made the binary searches a fortieth of the node policy's
    /// instructions per task (issue 55).
    pub(crate) fn insert_near_end(&mut self, key: K, value: V) -> Option<V> {
        let i = self.entries.iter().rposition(|(k, _)| *k <= key).map_or(0, |i| i + 1);
        if i > 0 && self.entries[i - 1].0 == key {
            return Some(std::mem::replace(&mut self.entries[i - 1].1, value));
        }
        self.entries.insert(i, (key, value));
        None
    }

    /// [`VecMap::remove`] for a key that is likely near the start: found by a walk from
    /// the start (equality tests, no ordering: the one dispatched is the first).
    pub(crate) fn remove_near_start(&mut self, key: &K) -> Option<V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// The least key.
    pub(crate) fn first_key(&self) -> Option<&K> {
        self.entries.first().map(|(k, _)| k)
    }

    /// Take the entry of the least key.
    pub(crate) fn pop_first(&mut self) -> Option<(K, V)> {
        (!self.entries.is_empty()).then(|| self.entries.remove(0))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Whatever the operations, the map answers as a B-tree map does and lists its
        /// entries in the same order.
        #[test]
        fn behaves_as_a_btree_map(ops in proptest::collection::vec((0u8..3, 0u64..16, any::<u32>()), 0..200)) {
            let mut map = VecMap::default();
            let mut model = BTreeMap::new();
            for (op, k, v) in ops {
                match op {
                    0 if v % 2 == 0 => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                    0 => prop_assert_eq!(map.insert_near_end(k, v), model.insert(k, v)),
                    1 if v % 2 == 0 => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                    1 => prop_assert_eq!(map.remove_near_start(&k), model.remove(&k)),
                    _ => {
                        if let (Some(a), Some(b)) = (map.get_mut(&k), model.get_mut(&k)) {
                            *a = a.wrapping_add(v);
                            *b = b.wrapping_add(v);
                        }
                    }
                }
                prop_assert_eq!(map.get(&k), model.get(&k));
                prop_assert_eq!(map.is_empty(), model.is_empty());
                prop_assert_eq!(map.len(), model.len());
                prop_assert_eq!(map.contains_key(&k), model.contains_key(&k));
                prop_assert_eq!(map.first_key(), model.keys().next());
                if op == 2 && k % 4 == 0 {
                    prop_assert_eq!(map.pop_first(), model.pop_first());
                }
            }
            prop_assert!(map.iter().eq(model.iter()));
            prop_assert!(map.keys().eq(model.keys()));
            prop_assert!(map.values().eq(model.values()));
        }
    }
}

//! Who fair queuing queues ([`Queued`]: a tenant or a group) and a map keyed by it.
//! Fair queuing looks its tags, members and listings up several times per event; in
//! B-tree maps those walks were a third of FairGV's instructions per task (issue 55).
//! Tenants are numbered densely, so their entries live in an [`IdTable`]; groups
//! (Slurm job ids, sparse and few) in a sorted map.

use std::collections::BTreeMap;

use crate::id_table::IdTable;
use crate::ids::TenantId;

/// Who is queued fairly: a tenant, or a group of tenants that share one weight (a
/// Slurm job's processes: the job's shards are the job's, however many processes it
/// runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Queued {
    /// A tenant on its own.
    Tenant(TenantId),
    /// A group (its id, e.g. the Slurm job's).
    Group(u64),
}

/// Values by [`Queued`], iterated in `Queued`'s order (tenants by id, then groups by
/// id), as the sorted map it replaces was.
#[derive(Clone, Debug)]
pub(crate) struct QueuedMap<V> {
    tenants: IdTable<V>,
    groups: BTreeMap<u64, V>,
}

impl<V> Default for QueuedMap<V> {
    fn default() -> Self {
        QueuedMap { tenants: IdTable::default(), groups: BTreeMap::new() }
    }
}

impl<V> QueuedMap<V> {
    #[inline]
    pub(crate) fn get(&self, key: &Queued) -> Option<&V> {
        match key {
            Queued::Tenant(t) => self.tenants.get(t.0),
            Queued::Group(g) => self.groups.get(g),
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: &Queued) -> Option<&mut V> {
        match key {
            Queued::Tenant(t) => self.tenants.get_mut(t.0),
            Queued::Group(g) => self.groups.get_mut(g),
        }
    }

    #[inline]
    pub(crate) fn contains_key(&self, key: &Queued) -> bool {
        self.get(key).is_some()
    }

    /// Set `key`'s value, returning the one it replaces (the property test's; fair
    /// queuing sets values in place through [`QueuedMap::get_or_insert_with`]).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, key: Queued, value: V) -> Option<V> {
        match key {
            Queued::Tenant(t) => self.tenants.insert(t.0, value),
            Queued::Group(g) => self.groups.insert(g, value),
        }
    }

    pub(crate) fn remove(&mut self, key: &Queued) -> Option<V> {
        match key {
            Queued::Tenant(t) => self.tenants.remove(t.0),
            Queued::Group(g) => self.groups.remove(g),
        }
    }

    /// `key`'s value, inserted by `make` if absent.
    pub(crate) fn get_or_insert_with(&mut self, key: Queued, make: impl FnOnce() -> V) -> &mut V {
        match key {
            Queued::Tenant(t) => self.tenants.get_or_insert_with(t.0, make),
            Queued::Group(g) => self.groups.entry(g).or_insert_with(make),
        }
    }

    /// Every key, in `Queued`'s order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Queued> + '_ {
        self.tenants
            .iter()
            .map(|(t, _)| Queued::Tenant(TenantId(t)))
            .chain(self.groups.keys().map(|g| Queued::Group(*g)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(group: bool, id: u64) -> Queued {
        if group { Queued::Group(id) } else { Queued::Tenant(TenantId(id)) }
    }

    proptest! {
        /// Whatever the keys and their order, the map answers as a sorted map does,
        /// and lists its keys in the same order.
        #[test]
        fn behaves_as_a_sorted_map(ops in proptest::collection::vec(
            (0u8..3, any::<bool>(), prop_oneof![0u64..64, any::<u64>()]), 0..300)
        ) {
            let mut map = QueuedMap::default();
            let mut model = BTreeMap::new();
            for (op, group, id) in ops {
                let k = key(group, id);
                match op {
                    0 => prop_assert_eq!(map.insert(k, id), model.insert(k, id)),
                    1 => {
                        *map.get_or_insert_with(k, || 0) += 1;
                        *model.entry(k).or_insert(0) += 1;
                    }
                    _ => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                }
                prop_assert_eq!(map.get(&k), model.get(&k));
                prop_assert_eq!(map.contains_key(&k), model.contains_key(&k));
            }
            let keys: Vec<Queued> = map.keys().collect();
            let expected: Vec<Queued> = model.keys().copied().collect();
            prop_assert_eq!(keys, expected);
        }
    }
}

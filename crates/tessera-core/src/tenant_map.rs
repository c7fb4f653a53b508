//! A map from tenants to values with a B-tree map's interface (look-ups by `&TenantId`,
//! walks in id order yielding `(&TenantId, &V)`) over an [`IdTable`]: the composed node
//! policy looks its tenants' homes up several times per event, and a tree's walk of
//! pointers there was a tenth of its work (issue 55).

use crate::id_table::IdTable;
use crate::ids::TenantId;

/// Values by tenant, iterated in id order as the sorted map it replaces was.
#[derive(Clone, Debug)]
pub(crate) struct TenantMap<V> {
    /// Each value beside its key, so that a walk lends both as a tree's does.
    table: IdTable<(TenantId, V)>,
}

impl<V> Default for TenantMap<V> {
    fn default() -> Self {
        TenantMap { table: IdTable::default() }
    }
}

impl<V> TenantMap<V> {
    pub(crate) fn get(&self, tenant: &TenantId) -> Option<&V> {
        self.table.get(tenant.0).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, tenant: &TenantId) -> bool {
        self.table.get(tenant.0).is_some()
    }

    /// Set `tenant`'s value, returning the one it replaces.
    pub(crate) fn insert(&mut self, tenant: TenantId, value: V) -> Option<V> {
        self.table.insert(tenant.0, (tenant, value)).map(|(_, v)| v)
    }

    pub(crate) fn remove(&mut self, tenant: &TenantId) -> Option<V> {
        self.table.remove(tenant.0).map(|(_, v)| v)
    }

    /// Every (tenant, value), in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&TenantId, &V)> {
        self.table.iter().map(|(_, (t, v))| (t, v))
    }

    /// Every tenant, in id order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &TenantId> {
        self.iter().map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Whatever the tenants and the order of changes, the map answers as a sorted
        /// map does: each look-up, and its walk in id order.
        #[test]
        fn answers_as_a_sorted_map(ops in prop::collection::vec((0u64..64, 0u8..3, 0u32..100), 0..200)) {
            let mut ours = TenantMap::default();
            let mut tree = BTreeMap::new();
            for (id, op, v) in ops {
                // ids mostly near each other, a few far off (the table's side map)
                let t = TenantId(if id % 16 == 15 { id * 1_000_000 } else { id });
                match op {
                    0 => prop_assert_eq!(ours.insert(t, v), tree.insert(t, v)),
                    1 => prop_assert_eq!(ours.remove(&t), tree.remove(&t)),
                    _ => prop_assert_eq!(ours.get(&t), tree.get(&t)),
                }
                prop_assert_eq!(ours.contains_key(&t), tree.contains_key(&t));
                prop_assert!(ours.iter().eq(tree.iter()));
                prop_assert!(ours.keys().eq(tree.keys()));
            }
        }
    }
}

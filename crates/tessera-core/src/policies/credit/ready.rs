//! Credit's ready lists: the tenants ready for a quantum (not running, tasks queued),
//! UNDER (credit left) and OVER, each in round-robin order (by turn). A dispatch takes
//! the first of a list that may run on its GPU, nearly always the very first.
//!
//! Each list is a heap with lazy deletion ([`LazyMin`]): an entry (turn, tenant) is
//! current while the tenant's account says it is listed there under that turn, and a
//! tenant leaving a list leaves its entry behind, stale. A B-tree set's insertion and
//! removal, one each per quantum, cost hundreds of instructions each (issue 55), where
//! a heap's push is a few comparisons and a dispatch's walk that stops at its first
//! key is a peek.

use super::Account;
use crate::id_table::IdTable;
use crate::ids::TenantId;
use crate::lazy_min::LazyMin;

/// Stale entries a list holds beyond twice its current ones before it is rebuilt.
const SLACK: usize = 64;

/// The two lists (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Ready {
    lists: [LazyMin<(u64, TenantId)>; 2],
    /// The tenants listed on each.
    len: [usize; 2],
}

/// The index of the list of a tenant with credit left (`under`) or without.
fn index(under: bool) -> usize {
    usize::from(!under)
}

/// Whether `(turn, tenant)` is a current entry of the list `under` names.
#[inline]
fn current(accounts: &IdTable<Account>, under: bool, turn: u64, tenant: TenantId) -> bool {
    accounts.get(tenant.0).is_some_and(|a| a.listed == Some(under) && a.turn == turn)
}

impl Ready {
    /// `tenant` is listed on `under`'s list under `turn` from now on (its account says
    /// so by the next walk).
    #[inline]
    pub(super) fn insert(&mut self, under: bool, turn: u64, tenant: TenantId) {
        self.lists[index(under)].push((turn, tenant));
        self.len[index(under)] += 1;
    }

    /// A tenant left `under`'s list: its account no longer says it is listed there (or
    /// is gone), so its entry is stale.
    #[inline]
    pub(super) fn remove(&mut self, under: bool) {
        self.len[index(under)] -= 1;
    }

    /// Whether `under`'s list is empty.
    pub(super) fn is_empty(&self, under: bool) -> bool {
        self.len[index(under)] == 0
    }

    /// `under`'s list in round-robin order (a tenant listed twice under one turn may
    /// come twice, one after the other).
    pub(super) fn walk<'a>(
        &'a mut self,
        under: bool,
        accounts: &'a IdTable<Account>,
    ) -> impl Iterator<Item = TenantId> + 'a {
        self.lists[index(under)]
            .walk(move |&(turn, tenant)| current(accounts, under, turn, tenant))
            .map(|(_, tenant)| tenant)
    }

    /// Rebuild a list whose stale entries outnumber its current ones (a tenant listed
    /// long while others come and go must not make it grow without bound).
    pub(super) fn settle(&mut self, accounts: &IdTable<Account>) {
        for under in [true, false] {
            let i = index(under);
            if self.lists[i].len() > 2 * self.len[i] + SLACK {
                self.lists[i].settle(
                    |&(turn, tenant)| current(accounts, under, turn, tenant),
                    self.len[i],
                    || {
                        (accounts.iter())
                            .filter(|(_, a)| a.listed == Some(under))
                            .map(|(t, a)| (a.turn, TenantId(t)))
                            .collect()
                    },
                );
            }
        }
    }

    /// Whether each list's current entries are the tenants the accounts say are on it,
    /// and its count theirs (for debug checks).
    pub(super) fn agrees_with(&self, accounts: &IdTable<Account>) -> bool {
        [true, false].into_iter().all(|under| {
            let i = index(under);
            let mut listed: Vec<(u64, TenantId)> = (self.lists[i].entries())
                .filter(|&(turn, tenant)| current(accounts, under, turn, tenant))
                .collect();
            listed.sort_unstable();
            listed.dedup();
            let mut expected: Vec<(u64, TenantId)> = (accounts.iter())
                .filter(|(_, a)| a.listed == Some(under))
                .map(|(t, a)| (a.turn, TenantId(t)))
                .collect();
            expected.sort_unstable();
            listed == expected && self.len[i] == expected.len()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TenantId;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Tenants listed, moved between the lists under the same turn, sent to the
        /// tail with a new turn, unlisted, gone and back: each list's walk, however far
        /// it goes (a dispatch's stops at its first), is its tenants in round-robin
        /// order, as a sorted set of (turn, tenant) says, its entries agree with the
        /// accounts, and the lists stay bounded.
        #[test]
        fn walks_as_sorted_sets(
            ops in proptest::collection::vec((0u8..5, 0u64..8, 0usize..4), 0..300),
        ) {
            let mut accounts: IdTable<Account> = IdTable::default();
            let mut ready = Ready::default();
            let mut model: [BTreeSet<(u64, TenantId)>; 2] = [BTreeSet::new(), BTreeSet::new()];
            let mut next_turn = 0u64;
            for (op, id, stop) in ops {
                let tenant = TenantId(id);
                // take it off its list, as Credit does before any change of its state
                let unlist = |a: &mut Account, ready: &mut Ready, model: &mut [BTreeSet<(u64, TenantId)>; 2]| {
                    if let Some(under) = a.listed.take() {
                        ready.remove(under);
                        model[index(under)].remove(&(a.turn, tenant));
                    }
                };
                match op {
                    // listed on UNDER (0) or OVER (1), its turn kept
                    0 | 1 => {
                        let a = accounts.get_or_insert_with(id, || {
                            next_turn += 1;
                            Account::new(1, next_turn)
                        });
                        unlist(a, &mut ready, &mut model);
                        let under = op == 0;
                        ready.insert(under, a.turn, tenant);
                        model[index(under)].insert((a.turn, tenant));
                        a.listed = Some(under);
                    }
                    // unlisted (it runs), to the tail of the order
                    2 => {
                        if let Some(a) = accounts.get_mut(id) {
                            unlist(a, &mut ready, &mut model);
                            next_turn += 1;
                            a.turn = next_turn;
                        }
                    }
                    // unlisted, its turn kept
                    3 => {
                        if let Some(a) = accounts.get_mut(id) {
                            unlist(a, &mut ready, &mut model);
                        }
                    }
                    // gone
                    _ => {
                        if let Some(a) = accounts.remove(id)
                            && let Some(under) = a.listed
                        {
                            ready.remove(under);
                            model[index(under)].remove(&(a.turn, tenant));
                        }
                    }
                }
                ready.settle(&accounts);
                prop_assert!(ready.agrees_with(&accounts));
                for under in [true, false] {
                    let mut walked: Vec<TenantId> = ready.walk(under, &accounts).take(stop).collect();
                    walked.dedup();
                    let expected: Vec<TenantId> = model[index(under)].iter().map(|(_, t)| *t).collect();
                    prop_assert_eq!(&walked[..], &expected[..walked.len()]);
                    prop_assert!(ready.agrees_with(&accounts));
                    prop_assert_eq!(ready.is_empty(under), model[index(under)].is_empty());
                    prop_assert!(ready.lists[index(under)].len() <= 2 * ready.len[index(under)] + SLACK + 1);
                }
            }
        }
    }
}

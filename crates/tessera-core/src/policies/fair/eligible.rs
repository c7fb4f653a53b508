//! Fair queuing's eligible lists: which active tenants (or groups) may take a GPU now,
//! by start tag, node-wide without homes and per home GPU with them, each brought up
//! to date for the keys an event touched ([`FairQueue::relist`]), with the debug
//! checks that compare them with a recomputation.

use super::{FairQueue, Queued, Tags};
use crate::board::Board;
use crate::ids::{GpuId, TenantId};
use crate::vec_map::VecMap;

impl FairQueue {
    /// `tenant` lives on `gpu` from now on (`None`: nowhere): its tasks may run only
    /// there, and [`FairQueue::dispatch`]'s `may_run` must say so. Once a home is set, a
    /// dispatch for a GPU looks only at the tenants that live there, so that its cost
    /// does not grow with the node's eligible tenants; the choice is the one a walk of
    /// them all would make, since `may_run` refuses every other GPU.
    pub fn set_home(&mut self, board: &Board, tenant: TenantId, gpu: Option<GpuId>) {
        if !self.by_home {
            // from now on dispatches walk the lists per GPU; a key listed until now
            // has no home (every home is set here, and relisted below), so it belongs
            // in none of them
            self.by_home = true;
            self.eligible.clear();
            self.eligible_count = 0;
        }
        match gpu {
            Some(g) => {
                self.homes.insert(tenant.0, g);
                if self.eligible_on.len() <= g.0 as usize {
                    self.eligible_on.resize_with(g.0 as usize + 1, VecMap::default);
                }
            }
            None => {
                self.homes.remove(tenant.0);
            }
        }
        if let Some(key) = self.key_of(tenant) {
            self.homes_may_change(key);
            self.relist(board, key);
        }
    }

    /// `key`'s members' homes may have changed (see `homes_stale`).
    pub(super) fn homes_may_change(&mut self, key: Queued) {
        if !self.homes_stale.contains_key(&key) {
            self.homes_stale.get_or_insert_with(key, || ());
            self.homes_stale_count += 1;
        }
    }

    /// The GPUs where a member of `key` lives.
    fn homes_of(&self, key: Queued) -> Vec<GpuId> {
        let mut gpus = Vec::new();
        self.homes_into(key, &mut gpus);
        gpus
    }

    /// [`FairQueue::homes_of`] into `gpus` (emptied first): relisting asks on every
    /// event, and a vector made for each answer was a tenth of the node policy's
    /// instructions (issue 55).
    fn homes_into(&self, key: Queued, gpus: &mut Vec<GpuId>) {
        gpus.clear();
        // (a loop of pushes, not an extension from a chain of adapters, and no sort
        // for a tenant on its own: relisting asks this on every event, issue 55)
        let Some(members) = self.members.get(&key) else { return };
        for t in members.keys() {
            if let Some(g) = self.homes.get(t.0) {
                gpus.push(*g);
            }
        }
        if gpus.len() > 1 {
            gpus.sort_unstable();
            gpus.dedup();
        }
    }

    /// Whether `key` may take a GPU now (see `eligible`); pinning and a lingering
    /// one's budget are checked per GPU by the dispatch.
    fn is_eligible(&self, board: &Board, key: Queued) -> bool {
        self.tags.get(&key).is_some_and(|t| self.eligible_under(board, key, t))
    }

    /// [`FairQueue::is_eligible`] for `key`, whose tags `t` are already at hand.
    fn eligible_under(&self, board: &Board, key: Queued, t: &Tags) -> bool {
        if !t.active {
            return false;
        }
        if t.running == 0 && t.lingering_until.is_some() {
            return true;
        }
        self.members.get(&key).is_some_and(|m| {
            m.keys().any(|id| {
                self.tenants.get(id.0).is_some_and(|(_, r)| r.is_none()) && board.has_queued(*id)
            })
        })
    }

    /// Bring `key`'s place among the eligible up to date.
    pub(super) fn relist(&mut self, board: &Board, key: Queued) {
        // each of the key's records looked up once (issue 55: the look-ups, several
        // of each, were most of what relisting cost, and it runs for every event)
        let tags = self.tags.get(&key);
        let want = tags.filter(|t| self.eligible_under(board, key, t)).map(|t| t.start);
        // `None`: the key has no slot (never listed, or departed and dropped)
        let listed = self.listed.get(&key).copied();
        let was = listed.flatten();
        // (a departed key's slot goes even when it was unlisted already: kept, it would
        // hold the table's window open for every tenant after it)
        let departed = tags.is_none() && listed.is_some();
        // its homes as they were listed unless a member's changed since (`homes_stale`);
        // an unlisted key is listed under none
        let stale = self.homes_stale_count > 0 && self.homes_stale.remove(&key).is_some();
        if stale {
            self.homes_stale_count -= 1;
        }
        if want == was && !departed && (want.is_none() || !stale) {
            return;
        }
        // With homes, most calls find the listing as it was (same start tag, same GPUs):
        // those cost the look-ups, not a remove and an insert in every GPU's index
        // (issue 55: the node policy relists on every event).
        // (without homes, both sides of the second test are empty)
        let has_homes = self.by_home && want.is_some();
        let mut homes = std::mem::take(&mut self.homes_scratch);
        if has_homes {
            self.homes_into(key, &mut homes);
        } else {
            homes.clear();
        }
        let same_homes = self.listed_on.get(&key).map_or(&[][..], Vec::as_slice) == homes;
        if want == was && same_homes && !departed {
            homes.clear();
            self.homes_scratch = homes;
            return;
        }
        if let Some(at) = was {
            // (its entry in `eligible` is stale from here on: `listed` changes below)
            if !self.by_home {
                self.eligible_count -= 1;
            }
            let eligible_on = &mut self.eligible_on;
            if let Some(on) = self.listed_on.get_mut(&key) {
                for g in on.drain(..) {
                    eligible_on[g.0 as usize].remove_near_start(&(at, key));
                }
            }
        }
        // a known key keeps its slots while unlisted (a tenant's eligibility flips with
        // every quantum: a removal and an insertion would slide the tables' windows, and
        // its list of GPUs would be made again each time)
        if departed {
            self.listed.remove(&key);
            self.listed_on.remove(&key);
        } else if want.is_none()
            && let Some(l) = self.listed.get_mut(&key)
        {
            *l = None;
        }
        if let Some(start) = want {
            if !self.by_home {
                self.eligible.push((start, key));
                self.eligible_count += 1;
            }
            *self.listed.get_or_insert_with(key, || None) = Some(start);
            if has_homes {
                for g in &homes {
                    self.eligible_on[g.0 as usize].insert_near_end((start, key), ());
                }
                let on = self.listed_on.get_or_insert_with(key, Vec::new);
                on.clear();
                on.extend_from_slice(&homes);
            }
        }
        if !self.by_home && self.eligible.len() > 2 * self.eligible_count + 64 {
            self.settle_eligible();
        }
        homes.clear();
        self.homes_scratch = homes;
    }

    /// Drop `eligible`'s stale entries, rebuilding it from `listed` when they outnumber
    /// the current ones (a key listed long under many that change must not make it
    /// grow without bound).
    fn settle_eligible(&mut self) {
        let listed = &self.listed;
        self.eligible.settle(
            |(s, k)| listed.get(k) == Some(&Some(*s)),
            self.eligible_count,
            || listed.keys().filter_map(|k| Some(((*listed.get(&k)?)?, k))).collect(),
        );
    }

    /// Every key whose eligibility may have changed (`touched`), listed again.
    /// (Inlined into both callers: called from two places, it was no longer inlined
    /// into `observe`, which every event runs, and that cost FairGV 47 instructions
    /// per task, issue 55.)
    #[inline(always)]
    pub(super) fn relist_touched(&mut self, board: &Board) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for key in touched.drain(..) {
            self.relist(board, key);
        }
        self.touched = touched;
        debug_assert!(
            self.tags.keys().filter(|k| self.tags.get(k).is_some_and(|t| t.active)).all(|k| {
                self.is_eligible(board, k) == self.listed.get(&k).is_some_and(Option::is_some)
            }) && self.listed.keys().all(|k| {
                self.listed.get(&k).is_some_and(Option::is_none) || self.is_eligible(board, k)
            }) && self.listed.keys().all(|k| self.tags.contains_key(&k)),
            "the eligible list drifted"
        );
        if cfg!(debug_assertions) && !self.by_home {
            let mut current: Vec<_> = (self.eligible.entries())
                .filter(|(s, k)| self.listed.get(k) == Some(&Some(*s)))
                .collect();
            current.sort_unstable();
            current.dedup();
            let mut all: Vec<_> =
                self.listed.keys().filter_map(|k| Some(((*self.listed.get(&k)?)?, k))).collect();
            all.sort_unstable();
            debug_assert!(current == all, "the eligible list drifted from the listed start tags");
            debug_assert_eq!(self.eligible_count, all.len(), "the eligible keys' count drifted");
        }
        debug_assert!(
            !self.by_home
                || self.eligible_on.iter().enumerate().all(|(g, on)| {
                    let gpu = GpuId(g as u32);
                    on.keys().copied().eq({
                        let mut here: Vec<_> = (self.listed.keys())
                            .filter_map(|k| Some(((*self.listed.get(&k)?)?, k)))
                            .filter(|(_, k)| self.homes_of(*k).contains(&gpu))
                            .collect();
                        here.sort_unstable();
                        here
                    })
                }),
            "the eligible lists per GPU drifted"
        );
        debug_assert!(
            self.tenants.iter().all(|(_, (_, r))| r
                .is_none_or(|task| board.gpu_ids().any(|g| board.running_task(g, task).is_some()))),
            "a tenant's quantum is a task the board does not run"
        );
        debug_assert!(
            self.tags.keys().all(|k| self.tags.get(&k).is_some_and(|t| t.running as usize
                == self.tenants.iter().filter(|(_, (q, r))| *q == k && r.is_some()).count())),
            "a key's running quanta drifted from its members'"
        );
    }
}

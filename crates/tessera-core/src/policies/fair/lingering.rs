//! Fair queuing's spin budgets (FairGV §3.2.2's work conservation with a wait): keys
//! and group members lingering after a quantum that left them with nothing queued,
//! their expiry, the moment the queue's choices may next change by time alone
//! ([`FairQueue::quiet_until`]), and keys left idle by a cancellation or a departure.

use super::{FairQueue, Queued, VirtualTime};
use crate::board::Board;
use crate::units::Nanos;

impl FairQueue {
    /// Until when the queue's choices cannot change by time alone, as of the last event
    /// it observed: the first moment a tenant's, group's or group member's spin budget
    /// may run out (a stale entry of the groups' only brings it earlier), leaving out
    /// the budgets of tenants back with work (`FairQueue::wake`). Before it, an
    /// expiry finds nothing due and a dispatch chooses as it did (`Nanos::MAX`: nobody
    /// lingers).
    pub fn quiet_until(&self) -> Nanos {
        let groups = self.lingering.first_key().map_or(Nanos::MAX, |(at, _)| *at);
        let members = self.members_lingering.first_key().map_or(Nanos::MAX, |(at, _)| *at);
        groups.min(members)
    }

    /// A cancellation (its task gone from the board's queue already) may have emptied a
    /// queue: each key active with nothing queued and nothing running goes on as at its
    /// last quantum's end, lingering for what remains of its spin budget (its moment
    /// back in the index, the expiry below takes it once due), else inactive. Before, a
    /// key left so stayed active with nothing to run, holding the virtual time at its
    /// start tag, and listed as eligible (debug builds: "the eligible list drifted").
    /// A walk of the keys: cancellations are rare.
    pub(super) fn after_cancel(&mut self, board: &Board) {
        let idle: Vec<Queued> =
            self.tags.keys().filter(|k| self.idle_while_active(board, *k)).collect();
        for key in idle {
            self.left_idle(key);
        }
    }

    /// Whether `key` is active with nothing queued and nothing running.
    pub(super) fn idle_while_active(&self, board: &Board, key: Queued) -> bool {
        self.tags.get(&key).is_some_and(|t| t.active && t.running == 0)
            && !self.backlogged(board, key)
    }

    /// `key`, active, was left with nothing queued and nothing running (a cancellation,
    /// a member's departure): it lingers for what remains of its spin budget, else goes
    /// inactive, as at a quantum's end.
    pub(super) fn left_idle(&mut self, key: Queued) {
        self.touched.push(key);
        let Some(t) = self.tags.get_mut(&key) else { return };
        if let Some(until) = t.lingering_until {
            self.lingering.insert((until, key), ());
            return;
        }
        // the virtual time as it stood, this key's start tag, if it is the last: a
        // key woken at max(V, F) and never served since starts above its finish,
        // and the finish would take the virtual time back
        let idle_at = self.idle_v.max(t.start);
        self.yield_key(key, idle_at);
    }

    /// `key`, active, goes inactive; the virtual time while none is active is `idle_at`
    /// if it was the last.
    pub(super) fn yield_key(&mut self, key: Queued, idle_at: VirtualTime) {
        if let Some(t) = self.tags.get_mut(&key) {
            t.active = false;
        }
        self.active -= 1;
        if self.active == 0 {
            self.idle_v = idle_at;
        }
    }

    /// Those whose spin budget ran out without a request yield: inactive.
    pub(super) fn expire(&mut self, board: &Board, now: Nanos) {
        // most events: no budget due (the scratch list's round trip, its sort and the
        // two indices' walks below cost more than the answer, issue 55)
        if self.quiet_until() > now {
            self.check_lingering(now);
            return;
        }
        let mut expired = std::mem::take(&mut self.expired);
        expired.clear();
        while let Some(&(until, key)) = self.lingering.first_key() {
            if until > now {
                break;
            }
            self.lingering.pop_first();
            if self.tags.get(&key).is_some_and(|t| t.lingering_until.is_some_and(|u| now >= u)) {
                expired.push(key);
            }
        }
        // a member's budget run out changes nothing but the choices after it
        while self.members_lingering.first_key().is_some_and(|(until, _)| *until <= now) {
            self.members_lingering.pop_first();
        }
        // in key order, as the tags are kept (the last one leaving sets the idle time)
        expired.sort_unstable();
        expired.dedup();
        self.touched.extend_from_slice(&expired);
        for &key in &expired {
            let backlogged = self.backlogged(board, key);
            let Some(t) = self.tags.get_mut(&key) else { continue };
            t.lingering_until = None;
            if backlogged || t.running > 0 {
                continue;
            }
            let finish = t.finish;
            self.yield_key(key, finish);
        }
        expired.clear();
        self.expired = expired;
        self.check_lingering(now);
    }

    /// (Debug builds) every group member's spin budget not run out by `now` is in the
    /// index of lingering members, and every entry there is its member's budget.
    pub(super) fn check_lingering(&self, now: Nanos) {
        debug_assert!(
            self.members.keys().all(|k| self.members.get(&k).is_some_and(|m| m.iter().all(
                |(t, m)| m
                    .lingering_until
                    .is_none_or(|u| u <= now || self.members_lingering.contains_key(&(u, *t)))
            ))) && self.members_lingering.keys().all(|(u, t)| self
                .key_of(*t)
                .and_then(|k| self.members.get(&k))
                .and_then(|m| m.get(t))
                .is_some_and(|m| m.lingering_until == Some(*u))),
            "the lingering members drifted from their tags"
        );
    }
}

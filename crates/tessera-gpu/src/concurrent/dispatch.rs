//! The block dispatcher: the waiting kernels in order, each one's blocks placed
//! breadth-first on the SMs where they fit (see the module documentation).

use super::*;

impl ConcurrentGpu {
    /// Place up to `pending` blocks costing `cost` breadth-first — a block on each SM
    /// in turn, round after round, while any fits — listing (SM, blocks) of each SM
    /// that took any in `scratch`; returns how many, and the least use of each resource
    /// on any SM afterwards (see `dispatch`; computed in the same walk of the SMs). Each block placed on an SM lowers its room by exactly one
    /// (every resource's floor((left - each) / each) is one less), so SM s receives
    /// min(room, K) blocks after K whole rounds, and the rest of the blocks go one
    /// each to the SMs still with room, in SM order: computed so, not round by round
    /// (a kernel of thousands of blocks was a walk of the SMs per round).
    ///
    /// The bound is computed only if `bound_needed` (a kernel waits after this one);
    /// else the returned bound is a full SM's use, which bounds nothing.
    ///
    /// `walk`: the SMs to look at, in order (every SM, or those freed since the last
    /// dispatch when no other SM can have room: see `dispatch`).
    pub(super) fn place_breadth_first(
        &mut self,
        cost: &BlockCost,
        pending: u64,
        bound_needed: bool,
        walk: &[u32],
    ) -> (u64, SmUse) {
        #[cfg(test)]
        {
            self.placement_walks += 1;
        }
        let mut total = 0u64;
        let mut most = 0u32;
        // breadth-first placement leaves runs of SMs in the same state: an SM like the
        // one before it has its room (three divisions each, the block model's hottest
        // line, issue 55)
        let mut last: Option<(SmUse, u32)> = None;
        self.rooms.resize(walk.len(), 0);
        for (&sm, room) in walk.iter().zip(self.rooms.iter_mut()) {
            let used = self.sms[sm as usize];
            *room = match last {
                Some((u, r)) if u == used => r,
                _ => {
                    let r = used.room_for(cost, &self.limits);
                    last = Some((used, r));
                    r
                }
            };
            total += u64::from(*room);
            most = most.max(*room);
        }
        if total == 0 {
            // nothing changed: no new bound (a full SM bounds nothing)
            return (0, SmUse::full(&self.limits));
        }
        let rooms = std::mem::take(&mut self.rooms);
        // K: the most whole rounds the blocks fill — all of them when everything fits
        // (the usual case: a kernel of more blocks than the room). Round k + 1 places
        // one block on each SM with room above k, so from a count of the SMs by room
        // the blocks after each round follow without a walk.
        let (rounds, filled) = if pending >= total {
            (most, total)
        } else {
            let mut by_room = std::mem::take(&mut self.by_room);
            by_room.clear();
            by_room.resize(most as usize + 1, 0);
            // counted a run of equal rooms at a time (breadth-first placement leaves
            // long runs): an increment per SM of the same count waited on the last
            // one's store, the dispatcher's hottest instruction (issue 55)
            let (mut run_of, mut run) = (rooms[0], 0u32);
            for &r in &rooms {
                if r != run_of {
                    by_room[run_of as usize] += run;
                    (run_of, run) = (r, 0);
                }
                run += 1;
            }
            by_room[run_of as usize] += run;
            let (mut rounds, mut filled) = (0u32, 0u64);
            let mut above = rooms.len() as u64 - u64::from(by_room[0]);
            while rounds < most && filled + above <= pending {
                filled += above;
                rounds += 1;
                above -= u64::from(by_room[rounds as usize]);
            }
            self.by_room = by_room;
            (rounds, filled)
        };
        let mut rest = pending - filled;
        let (mut placed, mut woken) = (0u64, 0u32);
        let mut bound = SmUse::full(&self.limits);
        self.scratch.clear();
        for (&sm, room) in walk.iter().zip(rooms.iter()) {
            let mut n = (*room).min(rounds);
            if *room > rounds && rest > 0 {
                n += 1;
                rest -= 1;
            }
            let used = &mut self.sms[sm as usize];
            if n > 0 {
                // the books (SMs and threads in use) kept once for the placement, below
                woken += u32::from(used.blocks == 0);
                used.take(cost, n);
                self.scratch.push((sm, n));
                placed += u64::from(n);
            }
            if bound_needed {
                bound = bound.least(used);
            }
        }
        self.sms_in_use += woken;
        self.threads_in_use += placed * u64::from(cost.threads);
        self.rooms = rooms;
        (placed, bound)
    }

    /// [`Self::place_breadth_first`] of at least as many blocks as the SMs of `walk`
    /// have room for: each takes all its room, found in the same walk (no list of
    /// rooms, no second walk: issue 55, the placement's two walks were the largest
    /// part of a dispatch). The same result, SM by SM, as the rounds would give. Its
    /// books are kept as the rounds' second walk keeps them, written out in both: a
    /// helper for the two cost heavy runs 0.3-0.6% more instructions.
    fn fill_walk(&mut self, cost: &BlockCost, bound_needed: bool, walk: &[u32]) -> (u64, SmUse) {
        #[cfg(test)]
        {
            self.placement_walks += 1;
        }
        let (mut placed, mut woken) = (0u64, 0u32);
        let mut bound = SmUse::full(&self.limits);
        self.scratch.clear();
        // an SM in the state of the one before it (before its placement) has its room
        let mut last: Option<(SmUse, u32)> = None;
        for &sm in walk {
            let used = &mut self.sms[sm as usize];
            let n = match last {
                Some((u, r)) if u == *used => r,
                _ => {
                    let r = used.room_for(cost, &self.limits);
                    last = Some((*used, r));
                    r
                }
            };
            if n > 0 {
                woken += u32::from(used.blocks == 0);
                used.take(cost, n);
                self.scratch.push((sm, n));
                placed += u64::from(n);
            }
            if bound_needed {
                bound = bound.least(used);
            }
        }
        if placed == 0 {
            return (0, SmUse::full(&self.limits));
        }
        self.sms_in_use += woken;
        self.threads_in_use += placed * u64::from(cost.threads);
        (placed, bound)
    }

    pub(super) fn dispatch(&mut self) {
        self.dirty = false;
        self.chain = None;
        if self.paused || (self.switching.is_some() && self.chosen_at != Some(self.now)) {
            return;
        }
        // placements made at this instant are made again, with every kernel started
        // at it in the queue
        self.unplace_fresh(None);
        if let Contexts::TimeSliced { switch, slice } = self.contexts {
            if self.chosen_at == Some(self.now) {
                if self.switching.is_some() {
                    self.renew_slice(slice);
                }
                // chosen at this instant: chosen again among every context present
                match self.switching {
                    // the active context has kernels again and its slice is not over:
                    // it keeps the GPU, as if the switch had never been chosen
                    Some(_)
                        if self.slice_end > self.now
                            && self.active.is_some_and(|a| self.per_context.contains_key(&a)) =>
                    {
                        self.switching = None;
                        self.chosen_at = None;
                        self.thaw(self.active);
                    }
                    Some((until, _)) => {
                        let next = self.next_context();
                        self.switching = Some((until, next));
                        return;
                    }
                    None => {
                        self.freeze(self.active);
                        self.active = None;
                    }
                }
            }
            if self.switching.is_some() {
                return;
            }
            match self.active {
                None => match self.per_context.keys().next() {
                    Some(c) => {
                        let c = *c;
                        self.begin_turn(c);
                        self.chosen_at = Some(self.now);
                        self.dirty = false;
                    }
                    None => return,
                },
                Some(a) if !self.per_context.contains_key(&a) => {
                    if self.per_context.is_empty() {
                        return;
                    }
                    // the active context has nothing left: the next one's turn, after
                    // a switch
                    let next = self.next_context();
                    self.switching = Some((self.now + switch * PS_PER_NS, next));
                    self.chosen_at = Some(self.now);
                    return;
                }
                Some(_) => {}
            }
        }
        let active = match self.contexts {
            Contexts::Shared => None,
            Contexts::TimeSliced { .. } => self.active,
        };
        let shared = self.contexts == Contexts::Shared;
        if shared && self.waiting.is_empty() {
            // nothing to place (issue 55: one dispatch in seven in DCUDA's runs); the
            // stretch is computed when a kernel waits again, which needs a start and so
            // a dispatch before any block is placed or a wave repeated
            self.freed.clear();
            self.walk_freed = true;
            return;
        }
        // the kernels present (of the active context) decide the contention's stretch:
        // summed again only when they changed (a start, an end, a removal; for time
        // slicing also a turn), in id order as always, so that its bits do not move
        let stretch_of = |kernels: &Kernels| {
            let demand: f64 = kernels
                .in_id_order()
                .filter(|k| active.is_none_or(|a| a == k.context))
                .map(|k| k.demand)
                .sum();
            1.0 + self.contention.slowdown_per_excess * (demand - 1.0).max(0.0)
        };
        if self.stretch_stale || !shared {
            self.stretch = stretch_of(&self.kernels);
            self.stretch_stale = false;
        }
        #[cfg(test)]
        assert_eq!(self.stretch.to_bits(), stretch_of(&self.kernels).to_bits(), "a stale stretch");
        let stretch = self.stretch;
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(self.waiting.iter().map(|(_, slot)| slot));
        // The most of each resource any one SM has left, as the use of an SM that had
        // just that: its room bounds every SM's, so a kernel none of whose blocks fits
        // anywhere (a full GPU with many kernels waiting) is passed over without a walk
        // of the SMs. Placing only takes resources, so the bound holds through the loop.
        let lim = self.limits;
        let mut bound = self.room_bound;
        #[cfg(test)]
        {
            let least = least_used(&self.sms, &lim);
            assert_eq!(bound.least(&least), bound, "the room bound is above an SM's use");
        }
        // After a dispatch every kernel still waiting fits on no SM (each was placed
        // until it did not; later ones only took room). If since then only cohorts
        // ended, only the SMs they freed can have room for any of them: the walks of
        // the placements are of those SMs (issue 55: a cohort frees 12 of a 1080 Ti's
        // 28 SMs on average in DCUDA's runs). Their bound after a placement would not
        // bound the other SMs: the one before it, which placing keeps valid, is kept.
        let restricted = std::mem::take(&mut self.walk_freed) && self.contexts == Contexts::Shared;
        // What the loop's kernels can reach: every SM's room under `bound`, or in a
        // restricted dispatch, once a placement walked the freed SMs, theirs alone
        // (the kernels waiting fit nowhere else), so that a kernel after one that
        // filled them is passed over without a walk (issue 55: two placements in five
        // in heavy least-loaded runs found no room, most after another's).
        let mut reach = bound;
        let mut walk = std::mem::take(&mut self.walk);
        walk.clear();
        if restricted {
            walk.extend_from_slice(&self.freed);
            // one cohort's SMs (the usual case) are in order already, each once
            if !walk.windows(2).all(|w| w[0] < w[1]) {
                walk.sort_unstable();
                walk.dedup();
            }
        } else {
            walk.extend(0..lim.sms);
        }
        #[cfg(test)]
        if restricted {
            for slot in &order {
                let cost = self.kernels.get(*slot).map(|k| k.cost).expect("a waiting kernel");
                for (sm, used) in self.sms.iter().enumerate() {
                    if walk.binary_search(&(sm as u32)).is_err() {
                        assert_eq!(used.room_for(&cost, &lim), 0, "slot {slot} fits on SM {sm}");
                    }
                }
            }
        }
        // The costs of the kernels that found no room in this dispatch: a block costing
        // as much or more of every resource fits nowhere either (each SM's room only
        // falls as its cost rises, and placing only takes), so its kernel is passed
        // over without a walk (issue 55: a third of the walks that found no room in
        // heavy least-loaded runs, half in DCUDA's, were of such a kernel).
        let mut no_room = std::mem::take(&mut self.no_room);
        no_room.clear();
        for (at, slot) in order.iter().copied().enumerate() {
            let Some(k) = self.kernels.get(slot) else { continue };
            if active.is_some_and(|a| a != k.context) {
                continue;
            }
            let (cost, mut pending, block_ps) = (k.cost, k.pending, k.block_ps);
            if pending == 0 {
                continue;
            }
            // no SM the loop can reach has room for more than this many of its blocks
            let at_most = reach.room_for(&cost, &lim);
            if at_most == 0 {
                #[cfg(test)]
                assert!(
                    walk.iter().all(|sm| self.sms[*sm as usize].room_for(&cost, &lim) == 0),
                    "slot {slot} passed over by the reach with room"
                );
                continue;
            }
            if no_room.iter().any(|f| cost.takes_at_least(f)) {
                #[cfg(test)]
                assert!(
                    walk.iter().all(|sm| self.sms[*sm as usize].room_for(&cost, &lim) == 0),
                    "slot {slot} passed over with room"
                );
                continue;
            }
            // the bound after the placement only matters to a kernel after this one
            let needed = at + 1 < order.len();
            let fill = pending >= u64::from(at_most) * walk.len() as u64;
            #[cfg(test)]
            let reference = fill.then(|| {
                let mut r = self.clone();
                let out = r.place_breadth_first(&cost, pending, needed, &walk);
                (r, out)
            });
            let (placed, after) = if fill {
                self.fill_walk(&cost, needed, &walk)
            } else {
                self.place_breadth_first(&cost, pending, needed, &walk)
            };
            #[cfg(test)]
            if let Some((r, out)) = reference {
                assert_eq!((placed, after), out, "filling the walk is not placing its rounds");
                let books = |g: &Self| (g.sms.clone(), g.sms_in_use, g.threads_in_use);
                assert_eq!(books(self), books(&r), "filling the walk is not placing its rounds");
                if placed > 0 {
                    assert_eq!(
                        self.scratch, r.scratch,
                        "filling the walk is not placing its rounds"
                    );
                }
            }
            pending -= placed;
            if placed == 0 {
                no_room.push(cost);
                continue;
            }
            // tighter after a placement (which often fills the GPU); without one the
            // bound before it still holds, as placing only takes
            if needed {
                reach = after;
                if !restricted {
                    bound = after;
                }
            }
            let i = self.free_cohorts.pop().unwrap_or_else(|| {
                self.cohorts.push(Cohort::default());
                self.cohorts.len() - 1
            });
            let now = self.now;
            let c = &mut self.cohorts[i];
            std::mem::swap(&mut c.on, &mut self.scratch);
            c.slot = slot;
            c.count = placed;
            c.since = now;
            c.stretch = stretch;
            c.finish = now + crate::rounding::round_u64(block_ps as f64 * stretch);
            c.live = true;
            c.frozen = false;
            self.ends.set(i, c.finish);
            self.fresh.push(i);
            if let Some(k) = self.kernels.get_mut(slot) {
                k.pending = pending;
                k.placed += placed;
                if pending == 0 {
                    self.waiting.remove(&k.wait_key());
                }
            }
        }
        #[cfg(test)]
        {
            if !self.fresh.is_empty() {
                self.placing_dispatches += 1;
            }
            // the books kept per placement and release, against the SMs
            let in_use = self.sms.iter().filter(|u| u.blocks > 0).count() as u32;
            let threads: u64 = self.sms.iter().map(|u| u64::from(u.threads)).sum();
            assert_eq!((self.sms_in_use, self.threads_in_use), (in_use, threads));
        }
        self.order = order;
        self.no_room = no_room;
        self.room_bound = bound;
        self.walk = walk;
        self.freed.clear();
        self.walk_freed = true;
    }
}

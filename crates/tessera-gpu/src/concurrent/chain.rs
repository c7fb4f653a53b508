//! Chains of repeated waves (issue 55): a kernel's waves that run again on the SMs its
//! last ones left, with nothing else changing, found ahead and run in closed form when
//! the model is advanced past them, instead of a step (and a simulator event) each.

use super::*;

impl ConcurrentGpu {
    /// The repeated waves ahead, looked for once per change of the model (see
    /// [`Chain`]); `None` while there are none (or the GPU is not a shared one, is
    /// paused, or has changed since its last dispatch).
    #[inline]
    pub(super) fn chain_ahead(&mut self) -> Option<Chain> {
        #[cfg(test)]
        if self.no_chains {
            return None;
        }
        if self.paused || self.dirty || self.contexts != Contexts::Shared {
            return None;
        }
        match self.chain {
            Some(c) => (c.first < c.next).then_some(c),
            None => self.find_chain(),
        }
    }

    /// [`Self::chain_ahead`] when not looked for since the last change: apart, so that
    /// the answer looked for already, asked ten times as often, costs a call of a
    /// small function (issue 55: the search's frame, set up and torn down on every
    /// call, was 2% of `sim dcuda --quick`'s instructions).
    #[inline(never)]
    fn find_chain(&mut self) -> Option<Chain> {
        let (first, top) = self.first_cohort()?;
        self.chain = Some(Chain { first, next: first });
        // the cheap conditions first: most first ends are not a repeat
        let (slot, count) = (self.cohorts[top].slot, self.cohorts[top].count);
        if count == 0
            || self.kernels.get(slot).is_none_or(|k| k.pending < count)
            || !(self.leads(slot) || self.first_to_fit(top))
        {
            return None;
        }
        // the cohorts on the SMs of kernels with blocks to place; a kernel with none
        // left repeats nothing, so its first end stops the chain (what `kernel_repeats`
        // says of it)
        let mut next = Ps::MAX;
        let mut all = std::mem::take(&mut self.chain_cohorts);
        all.clear();
        // (the ends' heap holds exactly the live cohorts not frozen, each with its
        // finish: walked rather than the cohort table, whose retired entries wait
        // there for reuse. Its order is no cohort order, and none is needed: only a
        // repeating kernel's group is read in order, sorted by end first, and the
        // rest takes minima)
        // (whether every cohort collected is of the first end's kernel: the usual case,
        // one kernel with blocks to place, whose group is then `all` itself)
        let mut own_only = true;
        for (end, i) in self.ends.entries() {
            let c = &self.cohorts[i];
            debug_assert!(c.live && !c.frozen);
            debug_assert_eq!(c.finish, end);
            if self.kernels.get(c.slot).is_some_and(|k| k.pending > 0) {
                own_only &= c.slot == slot;
                // (a cohort is at most an SM's blocks on each SM: one beyond 32 bits,
                // on limits no GPU has, is stepped wave by wave instead)
                let Ok(count) = u32::try_from(c.count) else {
                    self.chain_cohorts = all;
                    return None;
                };
                all.push(Repeating { cohort: i, kernel: c.slot, count, end, duration: 0 });
            } else {
                next = next.min(end);
            }
        }
        // `first` is the earliest end: a stop there leaves no chain
        if next <= first {
            self.chain_cohorts = all;
            return None;
        }
        if own_only {
            // one kernel: no grouping, no meetings of two kernels' ends (issue 55: most
            // full searches in heavy least-loaded runs, a kernel of 31 cohorts on average)
            let stop = self.kernel_repeats(&mut all);
            next = next.min(stop);
            self.chain_cohorts = all;
            if next <= first {
                return None;
            }
            let chain = Chain { first, next };
            self.chain = Some(chain);
            return Some(chain);
        }
        // by kernel (a counting sort on the slot), each kernel's sorted by end only if
        // it may repeat (issue 55: sorting all the cohorts, twice, by tuples, was a
        // tenth of a heavy least-loaded run). The order of equal ends decides
        // nothing: a kernel's cohorts ending together stop its chain, and two kernels'
        // cohorts ending together meet at once whichever comes first.
        let mut scratch = std::mem::take(&mut self.chain_scratch);
        scratch.group_by_kernel(&all, self.kernels.slot_count());
        // the first end's kernel first: the chain is empty once any kernel stops at the
        // first end, and then the others' checks (their sorts and room walks) are not
        // made (issue 55: a quarter of the searches in heavy least-loaded runs found no
        // chain, most at the first end's own kernel)
        let own = slot as usize;
        let mut repeating = 0;
        // then the others by their first end: once one's first end is at or after the
        // chain's end so far, it and every later one take no part in the chain, whether
        // they repeat or not, and are not asked (their cohorts are left out of it,
        // ending after it)
        let mut others = std::mem::take(&mut scratch.firsts);
        others.clear();
        for s in (0..scratch.durations.len()).filter(|s| *s != own) {
            let group = &scratch.by_kernel[scratch.starts[s]..scratch.starts[s + 1]];
            if let Some(lo) = group.iter().map(|r| r.end).min() {
                others.push((lo, s as u32));
            }
        }
        others.sort_unstable();
        for (lo, slot) in std::iter::once((first, slot)).chain(others.iter().copied()) {
            if lo >= next {
                break;
            }
            let slot = slot as usize;
            let (from, to) = (scratch.starts[slot], scratch.starts[slot + 1]);
            let stop = self.kernel_repeats(&mut scratch.by_kernel[from..to]);
            next = next.min(stop);
            if next <= first {
                scratch.firsts = others;
                self.chain_scratch = scratch;
                self.chain_cohorts = all;
                return None;
            }
            scratch.durations[slot] = scratch.by_kernel[from].duration;
            repeating += usize::from(scratch.durations[slot] > 0);
        }
        scratch.firsts = others;
        for r in &mut all {
            r.duration = scratch.durations[r.kernel as usize];
        }
        all.retain(|r| r.duration > 0);
        // two ends at one instant are not repeats: the first such instant ends the chain
        if repeating > 1 && first < next {
            #[cfg(test)]
            let before = next;
            next = match scratch.first_meeting_merged(next) {
                Some(t) => t,
                None => {
                    all.sort_unstable_by_key(|r| r.end);
                    first_meeting_pairwise(&all, next)
                }
            };
            #[cfg(test)]
            {
                all.sort_unstable_by_key(|r| r.end);
                assert_eq!(
                    next,
                    first_meeting_pairwise(&all, before),
                    "the merged walk is not the pairs'"
                );
            }
        }
        self.chain_scratch = scratch;
        self.chain_cohorts = all;
        let chain = Chain { first, next };
        self.chain = Some(chain);
        (first < next).then_some(chain)
    }

    /// For one kernel's cohorts, the first of their ends that is not a repeat (its
    /// first end when the kernel does not repeat); when it does, marks each with its
    /// wave's time and leaves them sorted by end.
    fn kernel_repeats(&self, mine: &mut [Repeating]) -> Ps {
        let (first, last) =
            mine.iter().fold((Ps::MAX, 0), |(lo, hi), r| (lo.min(r.end), hi.max(r.end)));
        let Some(k) = self.kernels.get(mine[0].kernel) else { return first };
        let duration = crate::rounding::round_u64(k.block_ps as f64 * self.stretch);
        // two of its cohorts ending together are not a repeat, and rounds keep their
        // order only if all end within one wave's time
        if k.pending == 0 || duration == 0 || last - first >= duration {
            return first;
        }
        // the first kernel waiting is the first to fit wherever its cohorts end: asked
        // only when another kernel waits ahead of it (issue 55: a call and a walk of
        // the waiting kernels per cohort, 807,000 calls in one heavy least-loaded run)
        if !self.leads(mine[0].kernel) && !self.all_first_to_fit(mine, &k.cost) {
            return first;
        }
        #[cfg(test)]
        assert!(
            mine.iter().all(|r| self.first_to_fit(r.cohort)),
            "a cohort that is not the first to fit passed"
        );
        mine.sort_unstable_by_key(|r| r.end);
        if mine.windows(2).any(|w| w[0].end == w[1].end) {
            return first;
        }
        // the ends in order: round r, cohort j at mine[j].end + r × duration; each
        // repeat needs the blocks of the cohort ending
        let m = mine.len() as u64;
        let round: u64 = mine.iter().map(|r| u64::from(r.count)).sum();
        let full = k.pending / round;
        let mut left = k.pending - full * round;
        let mut repeats = full * m;
        for r in mine.iter() {
            let c = u64::from(r.count);
            if left < c {
                break;
            }
            left -= c;
            repeats += 1;
        }
        for r in mine.iter_mut() {
            r.duration = duration;
        }
        // the end after the last repeat (not a repeat itself)
        mine[(repeats % m) as usize].end.saturating_add((repeats / m).saturating_mul(duration))
    }

    /// Run the chain's repeats that end by `until`, leaving the model as [`Self::step`]
    /// would, wave by wave (tests compare the two). Nothing the usage integrates
    /// changes between the waves, and the integrals are exact, so one term covers them.
    pub(super) fn run_chain(&mut self, chain: Chain, until: Ps) {
        let until = until.min(chain.next - 1);
        let all = std::mem::take(&mut self.chain_cohorts);
        // the last end run: where the model stops, its cohort the one placed then
        // (found in the loop below; in tests first, for the reference to step to)
        let mut last = (0, 0);
        #[cfg(test)]
        let reference = {
            let mut last = (0, 0);
            for r in &all {
                if until >= r.end {
                    last = last.max((r.end + (until - r.end) / r.duration * r.duration, r.cohort));
                }
            }
            let mut reference = self.clone();
            reference.no_chains = true;
            reference.advance_ps(last.0);
            (reference, last)
        };
        let mut moved = 0;
        for r in &all {
            if until < r.end {
                continue;
            }
            moved += 1;
            // one division per cohort, not two (a chain runs every cohort of a GPU's
            // repeating kernels, and a 64-bit division costs tens of cycles)
            let times = (until - r.end) / r.duration + 1;
            let at = r.end + (times - 1) * r.duration;
            last = last.max((at, r.cohort));
            let c = &mut self.cohorts[r.cohort];
            let count = c.count;
            let ran = u128::from(r.end - c.since) * u128::from(count)
                + u128::from(times - 1) * u128::from(r.duration) * u128::from(count);
            c.since = at;
            c.stretch = self.stretch;
            c.finish = at + r.duration;
            if let Some(k) = self.kernels.get_mut(r.kernel) {
                k.ran_ps += ran;
                k.pending -= times * count;
                if k.pending == 0 {
                    self.waiting.remove(&k.wait_key());
                }
            }
        }
        let cohorts = &self.cohorts;
        let moves =
            all.iter().filter(|r| until >= r.end).map(|r| (r.cohort, cohorts[r.cohort].finish));
        self.ends.set_many(moved, moves);
        self.account(last.0);
        self.now = last.0;
        self.fresh.clear();
        self.fresh.push(last.1);
        // the rest of the chain still holds (nothing else changed): its cohorts' next
        // ends are where the waves run left them
        let mut all = all;
        let mut first = chain.next;
        for r in &mut all {
            r.end = self.cohorts[r.cohort].finish;
            first = first.min(r.end);
        }
        self.chain = Some(Chain { first, next: chain.next });
        self.chain_cohorts = all;
        #[cfg(test)]
        {
            let (reference, reference_last) = reference;
            assert_eq!(last, reference_last, "the chain's last end");
            assert_eq!(self.state(), reference.state(), "a chain of waves is not the steps'");
            assert_eq!(self.usage, reference.usage, "a chain's usage is not the steps'");
        }
    }

    /// Cohort `i`, the only one ending now with nothing else changed since the last
    /// dispatch, runs its kernel's next wave on the same SMs, if that is what the
    /// dispatcher would do; returns whether it did. Issue 55: a kernel's waves were a
    /// dispatch each, most of DCUDA's run, and this is most of those dispatches.
    ///
    /// Why it is the dispatcher's result (shared contexts, not paused): after a
    /// dispatch every kernel still waiting fits on no SM (each was placed until it did
    /// not, and later placements only took room). Freeing the cohort gives its kernel
    /// back exactly its blocks' room on the cohort's SMs (on each, the resource that
    /// stopped it has less than one block left beside them) and nothing elsewhere. So
    /// when the kernels ahead of it in the waiting order fit on none of the cohort's
    /// SMs once freed ([`Self::first_to_fit`]), and it has at least the cohort's blocks
    /// to place, breadth-first placement puts exactly the cohort's blocks on the same SMs,
    /// which leaves every SM as it was and every later kernel still without room; the
    /// kernels present, and so the contention's stretch, are those of the last dispatch.
    /// The cohort's slot and end move as retiring and placing would move them.
    pub(super) fn repeat_wave(&mut self, i: usize) -> bool {
        if self.paused || self.contexts != Contexts::Shared || !self.fresh.is_empty() {
            return false;
        }
        let (slot, count, since) = {
            let c = &self.cohorts[i];
            (c.slot, c.count, c.since)
        };
        if self.kernels.get(slot).is_none_or(|k| k.pending < count)
            || !(self.leads(slot) || self.first_to_fit(i))
        {
            return false;
        }
        #[cfg(test)]
        let reference = {
            let mut r = self.clone();
            r.end_cohort(i);
            r.dispatch();
            r
        };
        let Some(k) = self.kernels.get_mut(slot) else { return false };
        let now = self.now;
        k.ran_ps += u128::from(now - since) * u128::from(count);
        k.pending -= count;
        if k.pending == 0 {
            self.waiting.remove(&k.wait_key());
        }
        let duration = crate::rounding::round_u64(k.block_ps as f64 * self.stretch);
        let c = &mut self.cohorts[i];
        c.since = now;
        c.stretch = self.stretch;
        c.finish = now + duration;
        self.ends.set(i, c.finish);
        self.fresh.push(i);
        #[cfg(test)]
        assert_eq!(self.state(), reference.state(), "a repeated wave is not the dispatcher's");
        true
    }

    /// Whether the kernel in `slot` is the first waiting: then it is the first to fit
    /// wherever its cohorts end ([`Self::first_to_fit`] without its call and walk).
    #[inline]
    fn leads(&self, slot: u32) -> bool {
        self.waiting.iter().next().is_some_and(|(_, first)| first == slot)
    }

    /// Whether every cohort of `mine` (one kernel's, not the first waiting, each block
    /// costing `cost`) is the first to fit on its SMs ([`Self::first_to_fit`] of
    /// each): no kernel waiting ahead of theirs fits on any SM they would free. One
    /// walk of the waiting order for all of them, not one per cohort, and SMs in one
    /// state (with as many of the kernel's blocks) asked once in a row across cohorts.
    /// With two kernels or more ahead, one bound is asked first: the least use of each
    /// resource on those SMs once freed, whose room is at least each SM's. Issue 55:
    /// the cohorts asked one by one were a twelfth of a heavy DCUDA run; the bound
    /// alone cost a heavy least-loaded run 9% more, one kernel ahead and the bound
    /// too loose to answer.
    fn all_first_to_fit(&self, mine: &[Repeating], cost: &BlockCost) -> bool {
        let own = mine[0].kernel;
        let ahead = || self.waiting.iter().map(|(_, slot)| slot).take_while(|s| *s != own);
        let cost_of = |slot: u32| self.kernels.get(slot).map(|k| k.cost);
        if ahead().nth(1).is_some() {
            let mut bound = SmUse::full(&self.limits);
            for r in mine {
                for &(sm, n) in &self.cohorts[r.cohort].on {
                    let mut freed = self.sms[sm as usize];
                    freed.give_back(cost, n);
                    bound = bound.least(&freed);
                }
            }
            if ahead().all(|a| cost_of(a).is_some_and(|c| bound.room_for(&c, &self.limits) == 0)) {
                return true;
            }
        }
        for a in ahead() {
            let Some(theirs) = cost_of(a) else { return false };
            let mut last = None;
            if mine
                .iter()
                .any(|r| self.room_once_freed(&self.cohorts[r.cohort].on, cost, &theirs, &mut last))
            {
                return false;
            }
        }
        // (own waits: the search asks only of a kernel with blocks to place)
        self.waiting.iter().any(|(_, slot)| slot == own)
    }

    /// Whether cohort `i`'s kernel is the first waiting kernel with room on the SMs
    /// the cohort would free: every kernel ahead of it in the waiting order (all with
    /// blocks to place) fits on none of them without the cohort's blocks. Usually it
    /// is the first waiting; when two kernels' waves interleave, the second's cohorts
    /// end on SMs the first cannot use, which frees the second's own room alone
    /// (issue 55: most of what a chain did not cover).
    fn first_to_fit(&self, i: usize) -> bool {
        let c = &self.cohorts[i];
        let Some(cost) = self.kernels.get(c.slot).map(|k| k.cost) else { return false };
        for (_, ahead) in self.waiting.iter() {
            if ahead == c.slot {
                return true;
            }
            let Some(theirs) = self.kernels.get(ahead).map(|k| k.cost) else { return false };
            if self.room_once_freed(&c.on, &cost, &theirs, &mut None) {
                return false;
            }
        }
        false
    }

    /// Whether a block costing `theirs` fits on any SM of `on` once its blocks there
    /// (costing `cost`) go. SMs in one state, with as many blocks going, have one
    /// answer: `last` carries the one before across calls for one `theirs`.
    #[inline]
    fn room_once_freed(
        &self,
        on: &[(u32, u32)],
        cost: &BlockCost,
        theirs: &BlockCost,
        last: &mut Option<(SmUse, u32)>,
    ) -> bool {
        for &(sm, n) in on {
            let used = self.sms[sm as usize];
            if last.is_some_and(|(u, m)| u == used && m == n) {
                continue;
            }
            *last = Some((used, n));
            let mut freed = used;
            freed.give_back(cost, n);
            if freed.room_for(theirs, &self.limits) > 0 {
                return true;
            }
        }
        false
    }

    /// Everything a dispatch decides, for comparing two models (tests).
    #[cfg(test)]
    pub(super) fn state(&self) -> String {
        // one end for each live cohort not frozen, its own
        let mut ends: Vec<_> = self.ends.entries().collect();
        ends.sort_unstable();
        for &(t, i) in &ends {
            let c = &self.cohorts[i];
            assert!(c.live && !c.frozen && c.finish == t, "cohort {i}'s end {t} is not its own");
        }
        let resident = self.cohorts.iter().filter(|c| c.live && !c.frozen).count();
        assert_eq!(ends.len(), resident, "a resident cohort without its end");
        format!(
            "{:?}",
            (
                &self.sms,
                self.kernels.in_id_order().collect::<Vec<_>>(),
                &self.waiting,
                &self.cohorts,
                &self.free_cohorts,
                ends,
                &self.fresh,
                &self.finished,
                self.sms_in_use,
                self.threads_in_use,
            )
        )
    }
}

/// Above this many ends before the chain's end, the pairs of cohorts are solved one by
/// one (by the Chinese remainder theorem when long) instead of walked all together.
const MERGED_WALK_ENDS: u64 = 1024;

/// Scratch of the chain's search, kept between searches (no allocation per search).
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    /// The cohorts grouped by kernel slot (a repeating kernel's in end order).
    by_kernel: Vec<Repeating>,
    /// Where each slot's group starts in `by_kernel` (one more entry than slots).
    starts: Vec<usize>,
    /// Each slot's wave time when it repeats, else 0.
    durations: Vec<Ps>,
    /// The merged walk's heads: (next end, slot, rounds walked, cohort in the round).
    heads: Vec<(Ps, u32, u64, u32)>,
    /// The kernels other than the first end's, by their first end: (end, slot).
    firsts: Vec<(Ps, u32)>,
}

impl Scratch {
    /// Group `all` by kernel slot (keeping its order within each group): a counting
    /// sort, slots being few and dense.
    fn group_by_kernel(&mut self, all: &[Repeating], slots: usize) {
        self.starts.clear();
        self.starts.resize(slots + 1, 0);
        for r in all {
            self.starts[r.kernel as usize + 1] += 1;
        }
        for s in 0..slots {
            self.starts[s + 1] += self.starts[s];
        }
        self.durations.clear();
        self.durations.resize(slots, 0);
        self.by_kernel.clear();
        self.by_kernel.extend_from_slice(all);
        // `durations` doubles as each group's fill cursor, reset below
        for r in all {
            let s = r.kernel as usize;
            self.by_kernel[self.starts[s] + self.durations[s] as usize] = *r;
            self.durations[s] += 1;
        }
        self.durations.fill(0);
    }

    /// The first instant before `below` at which cohorts of two repeating kernels end
    /// together, by one walk of every repeating kernel's ends in time order (a
    /// kernel's cohorts end within one wave's time, so round after round they end in
    /// the same order): `Some(below)` when there is none. `None` when more than
    /// [`MERGED_WALK_ENDS`] ends come before `below`, left to the pairs' solution.
    /// Issue 55: cohorts of one kernel were walked pair by pair against every cohort
    /// of the others, a tenth of a heavy least-loaded run, and pairs met 164 times in
    /// 1.35 million.
    fn first_meeting_merged(&mut self, below: Ps) -> Option<Ps> {
        self.heads.clear();
        let mut ends = 0u64;
        for (slot, &d) in self.durations.iter().enumerate() {
            if d == 0 {
                continue;
            }
            let group = &self.by_kernel[self.starts[slot]..self.starts[slot + 1]];
            let first = group[0].end;
            if first < below {
                let m = group.len() as u64;
                ends = ends.saturating_add(m.saturating_mul((below - first) / d + 1));
                self.heads.push((first, slot as u32, 0, 0));
            }
        }
        if ends > MERGED_WALK_ENDS {
            return None;
        }
        if self.heads.is_empty() {
            return Some(below);
        }
        loop {
            // the earliest head (the first of equals), and whether another is as early:
            // one look at each head per end walked, not two (issue 55)
            let (mut at, mut t, mut tie) = (0, self.heads[0].0, false);
            for (i, h) in self.heads.iter().enumerate().skip(1) {
                if h.0 < t {
                    (at, t, tie) = (i, h.0, false);
                } else if h.0 == t {
                    tie = true;
                }
            }
            if t >= below {
                return Some(below);
            }
            if tie {
                return Some(t);
            }
            // that kernel's next end: its next cohort this round, or the first next round
            // (counted as round and cohort, not divided out of the ends walked: the
            // division was a fifth of this walk's time)
            let (_, slot, round, j) = self.heads[at];
            let from = self.starts[slot as usize];
            let m = self.starts[slot as usize + 1] - from;
            let (round, j) = if j + 1 == m as u32 { (round + 1, 0) } else { (round, j + 1) };
            let d = self.durations[slot as usize];
            let end = self.by_kernel[from + j as usize].end.saturating_add(round.saturating_mul(d));
            self.heads[at] = (end, slot, round, j);
        }
    }
}

/// The first instant before `below` at which two cohorts of different kernels in `all`
/// (in end order, each with its wave's time) end together, pair by pair; `below` when
/// none do.
fn first_meeting_pairwise(all: &[Repeating], below: Ps) -> Ps {
    // Two cohorts meet no earlier than the later of their first ends, so with the
    // cohorts by first end, the walk stops at the first one ending at or after the
    // chain's end found so far (most pairs, when the chain is short: issue 55)
    let mut next = below;
    for (a, ra) in all.iter().enumerate() {
        if ra.end >= next {
            break;
        }
        for rb in &all[a + 1..] {
            if rb.end >= next {
                break;
            }
            if ra.kernel != rb.kernel
                && let Some(t) = first_meeting((ra.end, ra.duration), (rb.end, rb.duration), next)
            {
                next = t;
            }
        }
    }
    next
}

/// The first instant, before `below`, at which two cohorts that end at `a.0`, `b.0` and
/// then every `a.1`, `b.1` end together: the least t ≥ both starts with t ≡ a.0
/// (mod a.1) and t ≡ b.0 (mod b.1): a walk of both when they have few ends before
/// `below`, else by the Chinese remainder theorem.
pub(super) fn first_meeting(a: (Ps, Ps), b: (Ps, Ps), below: Ps) -> Option<Ps> {
    // a chain is usually a few waves: walking the ends costs less than the divisions
    let ends = |(f, d): (Ps, Ps)| below.saturating_sub(f) / d.max(1);
    if ends(a).saturating_add(ends(b)) <= 64 {
        let (mut ta, mut tb) = (a.0, b.0);
        while ta < below && tb < below {
            if ta == tb {
                return Some(ta);
            }
            if ta < tb {
                ta += a.1;
            } else {
                tb += b.1;
            }
        }
        return None;
    }
    let (fa, da) = (i128::from(a.0), i128::from(a.1));
    let (fb, db) = (i128::from(b.0), i128::from(b.1));
    // p × da + q × db = g
    let (g, p) = {
        let (mut r0, mut r1, mut p0, mut p1) = (da, db, 1i128, 0i128);
        while r1 != 0 {
            let q = r0 / r1;
            (r0, r1) = (r1, r0 - q * r1);
            (p0, p1) = (p1, p0 - q * p1);
        }
        (r0, p0)
    };
    let diff = fb - fa;
    if g == 0 || diff % g != 0 {
        return None;
    }
    // t = fa + da × x with da × x ≡ diff (mod db): x ≡ (diff / g) × p (mod db / g)
    let m = db / g;
    let x = ((diff / g) % m * (p % m) % m + m) % m;
    let period = da * m;
    let mut t = fa + da * x;
    let low = fa.max(fb);
    if t < low {
        t += (low - t + period - 1) / period * period;
    }
    (t < i128::from(below)).then_some(t as Ps)
}

//! Chains of repeated waves (issue 55): a kernel's waves that run again on the SMs its
//! last ones left, with nothing else changing, found ahead and run in closed form when
//! the model is advanced past them, instead of a step (and a simulator event) each.

use super::*;

impl ConcurrentGpu {
    /// The repeated waves ahead, looked for once per change of the model (see
    /// [`Chain`]); `None` while there are none (or the GPU is not a shared one, is
    /// paused, or has changed since its last dispatch).
    pub(super) fn chain_ahead(&mut self) -> Option<Chain> {
        #[cfg(test)]
        if self.no_chains {
            return None;
        }
        if self.paused || self.dirty || self.contexts != Contexts::Shared {
            return None;
        }
        if let Some(c) = self.chain {
            return (c.repeats > 0).then_some(c);
        }
        let (first, top, _) = self.first_cohort()?;
        let none = Chain { kernel: 0, first, duration: 0, repeats: 0, next: None };
        self.chain = Some(none);
        // the cheap conditions first: most cohorts ending beside others are not a
        // repeat (another kernel is first in the waiting order)
        let (id, count) = (self.cohorts[top].kernel, self.cohorts[top].count);
        let (pending, duration) = match self.kernels.get(&id) {
            Some(k) if count > 0 && self.waiting.first().is_some_and(|(_, _, w)| *w == id) => {
                (k.pending, (k.block_ps as f64 * self.stretch).round() as Ps)
            }
            _ => return None,
        };
        if pending < count || duration == 0 {
            return None;
        }
        // the kernel's cohorts in the order they end, and the first other end
        let mut mine = std::mem::take(&mut self.chain_cohorts);
        mine.clear();
        let mut other: Option<Ps> = None;
        for (i, c) in self.cohorts.iter().enumerate() {
            if !c.live || c.frozen {
                continue;
            }
            if c.kernel == id {
                mine.push((i, c.finish));
            } else {
                other = Some(other.map_or(c.finish, |o| o.min(c.finish)));
            }
        }
        mine.sort_unstable_by_key(|(i, f)| (*f, *i));
        let last = mine.last().map_or(first, |(_, f)| *f);
        // two of its cohorts ending together are not a repeat, and rounds keep their
        // order only if all end within one wave's time
        let distinct = mine.windows(2).all(|w| w[0].1 < w[1].1);
        if !distinct || last - first >= duration {
            self.chain_cohorts = mine;
            return None;
        }
        // the ends in order: round r, cohort j at mine[j].1 + r × duration. Each
        // repeat needs the blocks of the cohort ending, and to come before any other
        // kernel's cohort ends (a prefix of the ends, as they are in time order)
        let m = mine.len() as u64;
        let round: u64 = mine.iter().map(|(i, _)| self.cohorts[*i].count).sum();
        let full = pending / round;
        let mut left = pending - full * round;
        let mut by_blocks = full * m;
        for (i, _) in &mine {
            let c = self.cohorts[*i].count;
            if left < c {
                break;
            }
            left -= c;
            by_blocks += 1;
        }
        let by_time = match other {
            Some(o) => {
                mine.iter().map(|(_, f)| if o > *f { (o - f).div_ceil(duration) } else { 0 }).sum()
            }
            None => u64::MAX,
        };
        let repeats = by_blocks.min(by_time);
        // the end after the last repeat (not a repeat itself), or another kernel's
        let after =
            mine[(repeats % m) as usize].1.saturating_add((repeats / m).saturating_mul(duration));
        let next = Some(other.map_or(after, |o| o.min(after)));
        self.chain_cohorts = mine;
        let chain = Chain { kernel: id, first, duration, repeats, next };
        self.chain = Some(chain);
        (repeats > 0).then_some(chain)
    }

    /// Run the chain's repeats that end by `until`, leaving the model as [`Self::step`]
    /// would, wave by wave (tests compare the two). Nothing the usage integrates
    /// changes between the waves, and the integrals are exact, so one term covers them.
    pub(super) fn run_chain(&mut self, chain: Chain, until: Ps) {
        let mine = std::mem::take(&mut self.chain_cohorts);
        let m = mine.len() as u64;
        // the ends by `until`: a prefix, as they are in time order
        let by_until: u64 = mine
            .iter()
            .map(|(_, f)| if until >= *f { (until - f) / chain.duration + 1 } else { 0 })
            .sum();
        let n = chain.repeats.min(by_until);
        #[cfg(test)]
        let reference = {
            let (j, r) = (((n - 1) % m) as usize, (n - 1) / m);
            let mut reference = self.clone();
            reference.no_chains = true;
            reference.advance_ps(mine[j].1 + r * chain.duration);
            reference
        };
        let (full, part) = (n / m, n % m);
        let mut blocks = 0u64;
        let mut ran = 0u128;
        let mut last = (0, 0);
        for (j, &(i, f)) in mine.iter().enumerate() {
            // this cohort's repeats: one per full round, one more in the part round
            let times = full + u64::from((j as u64) < part);
            if times == 0 {
                continue;
            }
            let at = f + (times - 1) * chain.duration;
            let c = &mut self.cohorts[i];
            ran += u128::from(f - c.since) * u128::from(c.count)
                + u128::from(times - 1) * u128::from(chain.duration) * u128::from(c.count);
            blocks += times * c.count;
            c.since = at;
            c.stretch = self.stretch;
            c.finish = at + chain.duration;
            c.generation += 2 * times;
            self.heap.push(Reverse((c.finish, i, c.generation)));
            last = last.max((at, i));
        }
        self.account(last.0);
        self.now = last.0;
        if let Some(k) = self.kernels.get_mut(&chain.kernel) {
            k.ran_ps += ran;
            k.pending -= blocks;
            if k.pending == 0 {
                self.waiting.remove(&(Reverse(k.priority), k.started, chain.kernel));
            }
        }
        self.fresh.clear();
        self.fresh.push(last.1);
        self.chain = None;
        self.chain_cohorts = mine;
        #[cfg(test)]
        {
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
    /// The cohort's slot and generations move as retiring and placing would move them.
    pub(super) fn repeat_wave(&mut self, i: usize) -> bool {
        if self.paused || self.contexts != Contexts::Shared || !self.fresh.is_empty() {
            return false;
        }
        let (id, count, since) = {
            let c = &self.cohorts[i];
            (c.kernel, c.count, c.since)
        };
        if self.kernels.get(&id).is_none_or(|k| k.pending < count) || !self.first_to_fit(i) {
            return false;
        }
        #[cfg(test)]
        let reference = {
            let mut r = self.clone();
            r.end_cohort(i);
            r.dispatch();
            r
        };
        let Some(k) = self.kernels.get_mut(&id) else { return false };
        let now = self.now;
        k.ran_ps += u128::from(now - since) * u128::from(count);
        k.pending -= count;
        if k.pending == 0 {
            self.waiting.remove(&(Reverse(k.priority), k.started, id));
        }
        let duration = (k.block_ps as f64 * self.stretch).round() as Ps;
        let c = &mut self.cohorts[i];
        c.since = now;
        c.stretch = self.stretch;
        c.finish = now + duration;
        c.generation += 2;
        self.heap.push(Reverse((c.finish, i, c.generation)));
        self.fresh.push(i);
        #[cfg(test)]
        assert_eq!(self.state(), reference.state(), "a repeated wave is not the dispatcher's");
        true
    }

    /// Whether cohort `i`'s kernel is the first waiting kernel with room on the SMs
    /// the cohort would free: every kernel ahead of it in the waiting order (all with
    /// blocks to place) fits on none of them without the cohort's blocks. Usually it
    /// is the first waiting; when two kernels' waves interleave, the second's cohorts
    /// end on SMs the first cannot use, which frees the second's own room alone
    /// (issue 55: most of what a chain did not cover).
    fn first_to_fit(&self, i: usize) -> bool {
        let c = &self.cohorts[i];
        let Some(cost) = self.kernels.get(&c.kernel).map(|k| k.cost) else { return false };
        for (_, _, ahead) in &self.waiting {
            if *ahead == c.kernel {
                return true;
            }
            let Some(theirs) = self.kernels.get(ahead).map(|k| k.cost) else { return false };
            // SMs in one state after the cohort's blocks go: one room to compute
            let mut last: Option<(SmUse, u32)> = None;
            for &(sm, n) in &c.on {
                let used = self.sms[sm as usize];
                if last.is_some_and(|(u, m)| u == used && m == n) {
                    continue;
                }
                last = Some((used, n));
                let mut freed = used;
                freed.add(&cost, -i64::from(n));
                if freed.room_for(&theirs, &self.limits) > 0 {
                    return false;
                }
            }
        }
        false
    }

    /// Everything a dispatch decides, for comparing two models (tests).
    #[cfg(test)]
    pub(super) fn state(&self) -> String {
        let mut heap: Vec<_> = self
            .heap
            .iter()
            .filter(|Reverse((_, i, g))| {
                let c = &self.cohorts[*i];
                c.live && !c.frozen && c.generation == *g
            })
            .collect();
        heap.sort();
        format!(
            "{:?}",
            (
                &self.sms,
                &self.kernels,
                &self.waiting,
                &self.cohorts,
                &self.free_cohorts,
                heap,
                &self.fresh,
                &self.finished,
                self.sms_in_use,
                self.threads_in_use,
            )
        )
    }
}

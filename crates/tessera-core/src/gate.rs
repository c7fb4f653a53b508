//! The launch gate's rule: how the client side of a granted slice accounts the GPU time
//! its launches use, when it gives the slice back, and what the slice's end charges
//! (FairGV's collaborative scheduling, §3.3.2, and the vGPU's spin before it releases
//! an idle GPU, §3.2.2). One rule in one place: the interposer's launch gate
//! (`tessera-cuda`'s `gate.rs`, on a program's real launches) and the simulator's
//! program engine (`Gate::Collaborative`) both call it, so what the FairGV experiment
//! judges is what the daemon's tenants do (issue 57).
//!
//! The rule: the first [`SliceRule::measured`] launches of a slice are measured one by
//! one (synchronised after each); every later launch is counted at their mean, and the
//! holder keeps launching until what it accounted reaches the slice
//! ([`SliceRule::used_up`]) — so the last launch may end past the slice, never short of
//! it. Then it waits for its last launches (measuring them, which replaces their count
//! at the mean) and gives the slice back. A holder that launches nothing for
//! [`SliceRule::idle_hold`] gives its slice back too (work conserving), in two steps
//! as the interposer's watcher can see them: launches counted at the mean are first
//! waited for (measured), and the hold starts again after that wait; with nothing in
//! flight, it gives the slice back once the hold has passed. The slice is charged what
//! was accounted, never more than it was held ([`SliceRule::charge`]): a measured span
//! runs from the first launch counted at the mean to the wait's end, idle gaps within
//! it included; the hold after the last measurement is not charged.

use crate::units::Nanos;
use serde::{Deserialize, Serialize};

/// The gate's constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceRule {
    /// Launches of a slice measured one by one (FairGV §3.3: "only for the first 5
    /// requests of a slice"); the rest are counted at their mean.
    pub measured: u32,
    /// How long a holder may have nothing in flight and launch nothing before its slice
    /// is given back (FairGV §3.2.2's spin budget, on the client side).
    pub idle_hold: Nanos,
}

// The small rules below are `#[inline]`: the interposer's launch hook, which every
// kernel launch of every tenant runs, calls them across the crate boundary (9
// instructions a launch, scripts/interposer-instructions.sh).
impl SliceRule {
    /// What the interposer runs: FairGV's five measured launches, and a 2 ms hold —
    /// long enough that a program's CPU work between launches (a copy's preparation,
    /// a Python loop's step) does not cost it a round trip to the daemon per launch.
    pub const DEFAULT: SliceRule = SliceRule { measured: 5, idle_hold: Nanos(2_000_000) };

    /// Whether the slice's launch number `n` (from 0) is measured.
    #[inline]
    pub fn measures(&self, n: u64) -> bool {
        n < u64::from(self.measured)
    }

    /// What a later launch is counted at: the mean of the measured launches' times
    /// (`measured`, their sum), at least 1 ns so that a count always moves.
    #[inline]
    pub fn mean(&self, measured: Nanos) -> Nanos {
        Nanos(measured.0 / u64::from(self.measured.max(1))).max(Nanos(1))
    }

    /// Whether a slice of length `slice` is used once `used` is accounted: the holder
    /// launches no more, waits for what it launched and gives the slice back.
    #[inline]
    pub fn used_up(used: Nanos, slice: Nanos) -> bool {
        used >= slice
    }

    /// How many launches counted at `mean` a slice with `used` accounted still takes
    /// before it is used up (the last of them reaching or passing the slice).
    #[inline]
    pub fn launches_left(used: Nanos, slice: Nanos, mean: Nanos) -> u64 {
        slice.0.saturating_sub(used.0).div_ceil(mean.0.max(1))
    }

    /// Whether a slice whose holder has had nothing in flight and launched nothing for
    /// `idle_for` is given back.
    #[inline]
    pub fn gives_back_idle(&self, idle_for: Nanos) -> bool {
        idle_for >= self.idle_hold
    }

    /// What a slice's end charges its holder: what its gate accounted (`used`), never
    /// more than the time it held the GPU (`held`).
    #[inline]
    pub fn charge(used: Nanos, held: Nanos) -> Nanos {
        used.min(held)
    }
}

/// A slice's holder as its gate sees it at one look, with nothing of it under way on the
/// CPU side (no launch being issued, no measurement running).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The slice is over: its accounting is used up, or the scheduler ended it.
    pub ended: bool,
    /// Launches counted at the mean have not been measured yet.
    pub unmeasured: bool,
    /// How long the holder has been quiet: since its last launch while launches are
    /// unmeasured; since it last had anything in flight (or its measurement ended)
    /// otherwise. `None` for a holder that is not quiet (it has work to launch, or its
    /// gate does not give an idle slice back).
    pub quiet_for: Option<Nanos>,
}

/// What the gate does next ([`SliceRule::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet: the slice is kept.
    Keep,
    /// Wait for the launches counted at the mean, measuring them (a synchronisation);
    /// an ended slice is given back after it, a live one held again from its end.
    Measure,
    /// Give the slice back now.
    GiveBack,
}

impl SliceRule {
    /// The gate's state machine, one look at a time: both the interposer's watcher and
    /// the simulator's program engine take their decisions here. An ended slice is
    /// given back once its launches are measured; a live one whose holder is quiet for
    /// the hold first has its launches measured (the hold starts again), then — quiet
    /// for the hold with nothing unmeasured — is given back (work conserving).
    pub fn step(&self, h: Holder) -> Step {
        match (h.ended, h.unmeasured) {
            (true, true) => Step::Measure,
            (true, false) => Step::GiveBack,
            (false, true) if h.quiet_for.is_some_and(|q| self.gives_back_idle(q)) => Step::Measure,
            (false, false) if h.quiet_for.is_some_and(|q| self.gives_back_idle(q)) => {
                Step::GiveBack
            }
            (false, _) => Step::Keep,
        }
    }
}

impl Default for SliceRule {
    fn default() -> Self {
        SliceRule::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_five_launches_are_measured_and_the_rest_counted_at_their_mean() {
        let r = SliceRule::DEFAULT;
        assert!((0..5).all(|n| r.measures(n)));
        assert!(!r.measures(5));
        assert_eq!(r.mean(Nanos(1_000)), Nanos(200));
        // a mean of nothing still counts
        assert_eq!(r.mean(Nanos(3)), Nanos(1));
    }

    #[test]
    fn a_slice_takes_launches_until_its_accounting_reaches_it() {
        // 6 ms slice, 1 ms measured, mean 0.3 ms: 5 ms left is 16.7 launches, so 17
        // (the last ends past the slice), never 16 (which would leave it unused)
        let (slice, used, mean) = (Nanos(6_000_000), Nanos(1_000_000), Nanos(300_000));
        let n = SliceRule::launches_left(used, slice, mean);
        assert_eq!(n, 17);
        assert!(!SliceRule::used_up(used + Nanos(mean.0 * (n - 1)), slice));
        assert!(SliceRule::used_up(used + Nanos(mean.0 * n), slice));
        assert_eq!(SliceRule::launches_left(slice, slice, mean), 0);
        assert_eq!(SliceRule::launches_left(Nanos(0), Nanos(600), Nanos(200)), 3);
    }

    #[test]
    fn the_gates_steps_measure_before_they_give_back() {
        let r = SliceRule::DEFAULT;
        let h = |ended, unmeasured, quiet_ms: u64| Holder {
            ended,
            unmeasured,
            quiet_for: Some(Nanos(quiet_ms * 1_000_000)),
        };
        // an ended slice: measured first if it must be, then given back at once
        assert_eq!(r.step(h(true, true, 0)), Step::Measure);
        assert_eq!(r.step(h(true, false, 0)), Step::GiveBack);
        // a live one: kept until quiet for the hold, then measured, then given back
        assert_eq!(r.step(h(false, true, 1)), Step::Keep);
        assert_eq!(r.step(h(false, true, 2)), Step::Measure);
        assert_eq!(r.step(h(false, false, 1)), Step::Keep);
        assert_eq!(r.step(h(false, false, 2)), Step::GiveBack);
        // a holder with work to launch is not quiet, even under a hold of nothing
        let at_once = SliceRule { idle_hold: Nanos::ZERO, ..r };
        assert_eq!(at_once.step(h(false, false, 0)), Step::GiveBack);
        let busy = Holder { quiet_for: None, ..h(false, false, 0) };
        assert_eq!(at_once.step(busy), Step::Keep);
        assert_eq!(at_once.step(Holder { unmeasured: true, ..busy }), Step::Keep);
        assert_eq!(at_once.step(Holder { ended: true, ..busy }), Step::GiveBack);
    }

    #[test]
    fn an_idle_slice_is_kept_for_the_hold_and_charged_what_was_used() {
        let r = SliceRule::DEFAULT;
        assert!(!r.gives_back_idle(Nanos(1_999_999)));
        assert!(r.gives_back_idle(Nanos(2_000_000)));
        let now = SliceRule { idle_hold: Nanos::ZERO, ..r };
        assert!(now.gives_back_idle(Nanos::ZERO));
        assert_eq!(SliceRule::charge(Nanos(5), Nanos(9)), Nanos(5));
        assert_eq!(SliceRule::charge(Nanos(9), Nanos(5)), Nanos(5));
    }
}

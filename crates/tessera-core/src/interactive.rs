//! FairGV's classification of CPU-GPU interactive tenants (§3.2.3): a tenant that makes
//! more than [`THRESHOLD`] synchronous calls (a copy to or from the host, a stream, event
//! or context synchronisation) within [`WINDOW`] waits for the GPU at every step, so its GPU slice
//! is worth little unless its thread runs as the slice starts (GPU-centric
//! coscheduling). One rule, in one place, judged on the tenant's own clock — one that
//! stands still while it waits for its slice, so that a tenant is judged by what it
//! does when it runs, not by its silence while it waits (a wall clock made every
//! interactive program look idle by the time its slice came, after 20-40 ms behind a
//! batch tenant's kernels: 9 of its slices coscheduled in 6 s). The simulator's program
//! engine classifies with [`Interactivity`] at the tenant's GPU-time clock; the
//! interposer keeps a [`CallWindow`] of its program's calls on its [`OwnClock`] and
//! publishes [`CallWindow::span`] after each call and [`CallWindow::span_until`] its own
//! clock's time as it starts to wait for a slice (so that a program that stopped making
//! synchronous calls is seen to have stopped), which the daemon judges with
//! [`interactive_span`].

use crate::ids::TenantId;
use crate::units::Nanos;
use std::collections::BTreeMap;

/// FairGV's window.
pub const WINDOW: Nanos = Nanos(10_000_000);
/// More than this many synchronous calls in a window: interactive.
pub const THRESHOLD: usize = 10;

/// The times of a tenant's latest `THRESHOLD + 1` synchronous calls: enough to judge
/// the rule at any later moment (more than `THRESHOLD` calls in the window is the
/// same as the `THRESHOLD + 1`-th latest call being in it).
#[derive(Clone, Copy, Debug, Default)]
pub struct CallWindow {
    at: [Nanos; THRESHOLD + 1],
    /// Where the next call goes (the oldest kept, once full).
    next: usize,
    kept: usize,
}

impl CallWindow {
    /// A synchronous call at `now` (times in any clock that does not go backwards).
    pub fn record(&mut self, now: Nanos) {
        self.at[self.next] = now;
        self.next = (self.next + 1) % self.at.len();
        self.kept = (self.kept + 1).min(self.at.len());
    }

    /// The `THRESHOLD + 1`-th latest call's time; `None` while fewer were made.
    pub fn oldest(&self) -> Option<Nanos> {
        (self.kept == self.at.len()).then(|| self.at[self.next])
    }

    /// The latest call's time, if any.
    pub fn newest(&self) -> Option<Nanos> {
        (self.kept > 0).then(|| self.at[(self.next + self.at.len() - 1) % self.at.len()])
    }

    /// The time from the `THRESHOLD + 1`-th latest call to the latest; `None` while
    /// fewer were made.
    pub fn span(&self) -> Option<Nanos> {
        Some(self.newest()?.saturating_sub(self.oldest()?))
    }

    /// Whether the calls so far make the tenant interactive at `now`.
    pub fn is_interactive(&self, now: Nanos) -> bool {
        interactive(self.oldest(), now)
    }

    /// The time from the `THRESHOLD + 1`-th latest call to `now` (at least
    /// [`CallWindow::span`]): what a tenant that stopped making synchronous calls
    /// publishes as it waits for its next slice, so that the daemon, judging the span,
    /// follows it into a batch phase. `None` while fewer calls were made.
    pub fn span_until(&self, now: Nanos) -> Option<Nanos> {
        Some(now.max(self.newest()?).saturating_sub(self.oldest()?))
    }
}

/// A tenant's own clock: a monotonic clock less the time the tenant waited for its
/// slices, never going back (two threads' waits that overlap are subtracted twice, and
/// the clock then stands still until the wall catches up). Calls are judged on it, so
/// that a tenant is judged by what it does while it runs: its wait behind another
/// tenant's slice neither makes it look idle nor counts as its own time.
#[derive(Debug, Default)]
pub struct OwnClock {
    waited: std::sync::atomic::AtomicU64,
    last: std::sync::atomic::AtomicU64,
}

impl OwnClock {
    /// The own clock's time when the monotonic clock reads `wall`.
    pub fn now(&self, wall: Nanos) -> Nanos {
        use std::sync::atomic::Ordering::Relaxed;
        let t = wall.0.saturating_sub(self.waited.load(Relaxed));
        Nanos(self.last.fetch_max(t, Relaxed).max(t))
    }

    /// The tenant waited `d` for a slice.
    pub fn waited(&self, d: Nanos) {
        self.waited.fetch_add(d.0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The rule: interactive at `now` when the `THRESHOLD + 1`-th latest synchronous call
/// (`oldest`, [`CallWindow::oldest`]) was within the last [`WINDOW`].
pub fn interactive(oldest: Option<Nanos>, now: Nanos) -> bool {
    oldest.is_some_and(|t| now.saturating_sub(t) < WINDOW)
}

/// The rule on the calls' own spacing: interactive when its latest `THRESHOLD + 1`
/// synchronous calls (`span`, [`CallWindow::span`]) were made within less than
/// [`WINDOW`] — the same as [`interactive`] at the latest call's time.
pub fn interactive_span(span: Option<Nanos>) -> bool {
    span.is_some_and(|s| s < WINDOW)
}

/// Nice levels an interactive tenant's threads are raised by from its slice's grant
/// until the slice ends: GPU-centric coscheduling as a daemon outside the kernel does
/// it (FairGV asks KVM to wake the vCPU; tessera raises the threads' priority). The
/// daemon's `cosched.rs` sets it with `setpriority`; the simulator's program engine
/// (`Coscheduling::Boost`) weighs the thread as CFS weighs that nice value.
pub const BOOST_NICE: i32 = 10;

/// CFS's weight of a thread at `nice` (Linux's table `sched_prio_to_weight`: 1,024 at
/// nice 0, each level about 1.25 times the next; clamped to -20..=19).
pub fn nice_weight(nice: i32) -> u32 {
    const WEIGHTS: [u32; 40] = [
        88_761, 71_755, 56_483, 46_273, 36_291, 29_154, 23_254, 18_705, 14_949, 11_916, 9_548,
        7_620, 6_100, 4_904, 3_906, 3_121, 2_501, 1_991, 1_586, 1_277, 1_024, 820, 655, 526, 423,
        335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
    ];
    WEIGHTS[(nice.clamp(-20, 19) + 20) as usize]
}

/// How many times heavier a thread at nice 0 weighs once raised by [`BOOST_NICE`]
/// (9,548 / 1,024: about 9.3).
pub fn boost_factor() -> f64 {
    f64::from(nice_weight(-BOOST_NICE)) / f64::from(nice_weight(0))
}

/// Every tenant's [`CallWindow`], re-evaluated at every query, so that a tenant
/// changing phase changes class.
#[derive(Clone, Debug, Default)]
pub struct Interactivity {
    calls: BTreeMap<TenantId, CallWindow>,
}

impl Interactivity {
    /// FairGV's window ([`WINDOW`]).
    pub const WINDOW: Nanos = WINDOW;
    /// [`THRESHOLD`].
    pub const THRESHOLD: usize = THRESHOLD;

    /// `tenant` made a synchronous call at `now`.
    pub fn sync_call(&mut self, tenant: TenantId, now: Nanos) {
        self.calls.entry(tenant).or_default().record(now);
    }

    /// Whether `tenant` is CPU-GPU interactive at `now`.
    pub fn is_interactive(&self, tenant: TenantId, now: Nanos) -> bool {
        self.calls.get(&tenant).is_some_and(|w| w.is_interactive(now))
    }

    /// Forget a tenant.
    pub fn forget(&mut self, tenant: TenantId) {
        self.calls.remove(&tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A program that stops making synchronous calls is judged batch once 10 ms of its
    /// own time pass without them — its span, as published at its next slice wait —
    /// while a wait behind another tenant's slice, however long, does not age it.
    /// Judged by the span of its calls alone (what the interposer published before),
    /// it stayed interactive for ever (issue 58 item 4: "so phases are followed").
    #[test]
    fn a_program_that_stops_its_synchronous_calls_is_seen_to_stop() {
        let ms = |x: u64| Nanos(x * 1_000_000);
        let clock = OwnClock::default();
        let mut w = CallWindow::default();
        // the interactive phase: a call every 0.5 ms
        for i in 0..=THRESHOLD as u64 {
            w.record(clock.now(Nanos(i * 500_000)));
        }
        assert!(interactive_span(w.span()));
        // it waits 50 ms behind another tenant's slice: still interactive when granted
        clock.waited(ms(50));
        assert!(interactive_span(w.span_until(clock.now(ms(55)))));
        // then runs 20 ms of its own time launching without a synchronous call, and
        // waits for its next slice: batch
        let own = clock.now(ms(75));
        assert_eq!(own, ms(25));
        assert!(!interactive_span(w.span_until(own)));
        // judged by its calls' spacing alone it would still be interactive
        assert!(interactive_span(w.span()));
        // and a new interactive phase makes it interactive again
        for i in 0..=THRESHOLD as u64 {
            w.record(clock.now(ms(80) + Nanos(i * 100_000)));
        }
        assert!(interactive_span(w.span_until(clock.now(ms(82)))));
    }

    /// The own clock never goes back, even when two threads' waits overlap.
    #[test]
    fn the_own_clock_never_goes_back() {
        let clock = OwnClock::default();
        assert_eq!(clock.now(Nanos(100)), Nanos(100));
        clock.waited(Nanos(80));
        clock.waited(Nanos(80));
        assert_eq!(clock.now(Nanos(120)), Nanos(100));
        assert_eq!(clock.now(Nanos(300)), Nanos(140));
    }
    use std::collections::VecDeque;

    /// Linux's table at its ends and around nice 0; the boost raises a nice-0 thread to
    /// nice -10's weight.
    #[test]
    fn the_boost_weighs_as_cfs_weighs_nice_minus_10() {
        assert_eq!((nice_weight(-20), nice_weight(0), nice_weight(19)), (88_761, 1_024, 15));
        assert_eq!((nice_weight(-30), nice_weight(40)), (88_761, 15));
        assert_eq!(nice_weight(-1), 1_277);
        assert!((boost_factor() - 9_548.0 / 1_024.0).abs() < 1e-12);
    }

    /// Table-driven: 11 calls within 10 ms is interactive, 10 is not; calls age out
    /// of the window, so a tenant that calls less changes class.
    #[test]
    fn interactivity_follows_the_call_rate() {
        let us = |n: u64| Nanos(n * 1_000);
        let t = TenantId(1);
        for (calls, every_us, want) in
            [(10, 900, false), (11, 900, true), (30, 1_000, false), (30, 800, true)]
        {
            let mut c = Interactivity::default();
            for k in 0..calls {
                c.sync_call(t, us(k * every_us));
            }
            let last = us((calls - 1) * every_us);
            assert_eq!(c.is_interactive(t, last), want, "{calls} calls every {every_us} us");
        }
        let mut c = Interactivity::default();
        for k in 0..20 {
            c.sync_call(t, us(k * 100));
        }
        assert!(c.is_interactive(t, us(2_000)));
        assert!(!c.is_interactive(t, us(12_000)), "10 ms later the calls have aged out");
    }

    proptest! {
        /// The window of the last calls judges as a list of every call in the last
        /// 10 ms does (the rule as FairGV states it), at any moment after the calls.
        #[test]
        fn the_window_judges_as_every_call_would(
            gaps in prop::collection::vec(0u64..3_000_000, 0..60),
            later in 0u64..20_000_000,
        ) {
            let mut w = CallWindow::default();
            let mut all: VecDeque<Nanos> = VecDeque::new();
            let mut now = Nanos(1_000_000);
            for g in gaps {
                now = Nanos(now.0 + g);
                w.record(now);
                all.push_back(now);
            }
            let at = Nanos(now.0 + later);
            let in_window = all.iter().filter(|t| at.saturating_sub(**t) < WINDOW).count();
            prop_assert_eq!(w.is_interactive(at), in_window > THRESHOLD);
            // judged on the spacing: as at the latest call
            let at_latest = all.iter().filter(|t| now.saturating_sub(**t) < WINDOW).count();
            prop_assert_eq!(interactive_span(w.span()), at_latest > THRESHOLD);
        }
    }
}

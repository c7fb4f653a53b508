//! Whether this host's CPUs are oversubscribed (issue 59): then spinning, on either
//! side of a ring, burns the time slice its peer needs, and a yield puts the yielder
//! behind every runnable thread for a whole scheduling period (measured: 24 us p50 and
//! 8 ms p99 for the ring echo beside 4 CPU-bound threads per core, against the
//! socket's 4.7 us and 5.2 us). A blocked thread that is woken is run promptly instead,
//! so on a busy host the core blocks as soon as it is idle and tells every client to
//! ring and to block too (their `daemon_sleeping` flag stays set).
//!
//! Busy: more threads runnable than one beyond the CPUs, at two looks in a row
//! (`/proc/loadavg`'s fourth field, looked at every 10 ms; it counts the core and a
//! client spinning for its answer too), or the core's own spin was descheduled (a gap
//! of over 200 us between two of its passes). Quiet again only after 100 ms without
//! either. Spinning on a host that is even slightly oversubscribed also costs later:
//! a thread that spun has used more than its share, and the kernel's fair scheduler
//! (EEVDF) then lets it preempt CPU-bound threads later when it is woken.

use std::time::{Duration, Instant};

/// How often `/proc/loadavg` is read.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// How long the host stays busy after the last sign of it.
const HOLD: Duration = Duration::from_millis(100);
/// A gap between two idle passes of the core this long means it was descheduled.
const DESCHEDULED: Duration = Duration::from_micros(200);

/// The core's view of the host's load.
#[derive(Debug)]
pub(super) struct HostLoad {
    cpus: usize,
    looked: Option<Instant>,
    busy_until: Option<Instant>,
    last_pass: Option<Instant>,
    /// Whether the last look at `/proc/loadavg` found more runnable threads than it
    /// allows.
    over_before: bool,
}

/// The number of runnable threads in `/proc/loadavg`'s text (`1.00 0.5 0.2 3/412 77`).
pub(super) fn runnable(loadavg: &str) -> Option<usize> {
    loadavg.split_whitespace().nth(3)?.split_once('/')?.0.parse().ok()
}

impl HostLoad {
    pub(super) fn new() -> HostLoad {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        HostLoad { cpus, looked: None, busy_until: None, last_pass: None, over_before: false }
    }

    /// Whether the host is busy now; `idle_pass`: the core is spinning without work
    /// (a long gap since its previous idle pass means it was descheduled).
    pub(super) fn busy(&mut self, now: Instant, idle_pass: bool) -> bool {
        if idle_pass {
            if self.last_pass.is_some_and(|p| now.saturating_duration_since(p) > DESCHEDULED) {
                self.busy_until = Some(now + HOLD);
            }
            self.last_pass = Some(now);
        } else {
            self.last_pass = None;
        }
        if self.looked.is_none_or(|t| now.saturating_duration_since(t) >= LOOK_EVERY) {
            self.looked = Some(now);
            let n = std::fs::read_to_string("/proc/loadavg").ok().as_deref().and_then(runnable);
            // the count includes the core itself and a client spinning for its answer:
            // more than one beyond the CPUs, twice in a row (a passing thread is not a
            // busy host), means threads wait for a CPU
            let over = n.is_some_and(|n| n > self.cpus + 1);
            if over && self.over_before {
                self.busy_until = Some(now + HOLD);
            }
            self.over_before = over;
        }
        self.busy_until.is_some_and(|t| now < t)
    }

    /// The core worked or slept: its next idle pass starts a new spin.
    pub(super) fn reset(&mut self) {
        self.last_pass = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_read_from_loadavg() {
        assert_eq!(runnable("0.52 0.58 0.59 3/412 12345\n"), Some(3));
        assert_eq!(runnable("0.52 0.58 0.59"), None);
        assert_eq!(runnable(""), None);
    }

    #[test]
    fn a_descheduled_spin_makes_the_host_busy_for_a_while() {
        let mut h = HostLoad {
            cpus: usize::MAX - 1,
            looked: None,
            busy_until: None,
            last_pass: None,
            over_before: false,
        };
        let t = Instant::now();
        assert!(!h.busy(t, true));
        assert!(!h.busy(t + Duration::from_micros(50), true));
        assert!(h.busy(t + Duration::from_millis(1), true), "a 1 ms gap between passes");
        assert!(h.busy(t + Duration::from_millis(50), false));
        assert!(!h.busy(t + Duration::from_millis(200), false), "quiet again");
    }
}

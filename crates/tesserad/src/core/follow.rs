//! On a busy host the core waits for its next request on the CPU its latest client
//! asked from (issue 59). A thread woken on another CPU than its waker's queues there
//! behind CPU-bound threads: on 2 cores beside 8 CPU-bound processes a futex ping-pong
//! between two threads took 22 us p50 and 8 ms p99 across the two CPUs, and 5.4 us p50
//! and 5.9 us p99 on one (`scripts/wake-latency.c`, pinned either way; unpinned, a run
//! drew one state or the other at random, which is what made the rings' echo bimodal).
//! On one CPU the waker blocks right after its wake-up, and the woken thread, which has
//! not run for a while, is picked before the CPU-bound ones. So while the host is busy
//! the core, before it blocks, pins itself to the CPU its latest client said it asks
//! from (`Region::client_cpu`, a hint the client writes when it rings), and takes back
//! its whole CPU mask once the host is quiet. The executor's GPU threads move with it:
//! a task's start and end are wake-ups between the core and one of them, and across
//! CPUs each costs the same queueing (the empty task's p99 over the rings was 4-8 ms
//! beside 8 per core with only the core pinned). Clients asking from several CPUs at once
//! (64 clients on 2 cores): the core waits on any CPU, as without this, since
//! following each in turn costs a migration per request (measured: rings 11,951
//! tasks/s against 20,000-32,000 unpinned); and it changes its mask at most every
//! [`SETTLE`], so that clients that alternate do not move it back and forth.

use rustix::thread::{CpuSet, Pid, sched_getaffinity, sched_setaffinity};
use std::time::{Duration, Instant};

/// The least time between two changes of the core's mask while the host is busy.
const SETTLE: Duration = Duration::from_millis(1);

/// Whom the core served while it was awake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Serving {
    /// No client said its CPU.
    #[default]
    Unknown,
    /// Every client served asks from this CPU.
    One(usize),
    /// Clients on several CPUs.
    Several,
}

impl Serving {
    /// With one more client served, which asks from `cpu`.
    pub(super) fn and(self, cpu: Option<usize>) -> Serving {
        match (self, cpu) {
            (s, None) => s,
            (Serving::Unknown, Some(c)) => Serving::One(c),
            (Serving::One(a), Some(c)) if a == c => Serving::One(a),
            _ => Serving::Several,
        }
    }
}

/// The core's CPU pinning.
#[derive(Debug, Default)]
pub(super) struct Follow {
    /// The core thread's CPU mask before it first pinned itself.
    all: Option<CpuSet>,
    /// The CPU it is pinned to now.
    pinned: Option<usize>,
    /// Whom the core served since it last slept.
    pub(super) serving: Serving,
    /// When it last changed its mask while the host was busy.
    changed: Option<Instant>,
    /// Threads that move with the core (the executor's GPU threads), and their masks
    /// before they first moved.
    companions: Vec<(Pid, Option<CpuSet>)>,
}

impl Follow {
    /// Pinning the calling thread (the core), with `companions` moved alongside.
    pub(super) fn new(companions: &[Pid]) -> Follow {
        Follow { companions: companions.iter().map(|&p| (p, None)).collect(), ..Follow::default() }
    }

    /// Before the core blocks: on a busy host, wait on the latest client's CPU (when
    /// this thread may run there); on a quiet one, on any CPU again (also called on
    /// every pass over the rings while the host is quiet: no system call unless
    /// pinned).
    pub(super) fn before_sleep(&mut self, busy: bool) {
        if !busy {
            self.serving = Serving::Unknown;
            self.unpin();
            return;
        }
        let now = Instant::now();
        if self.changed.is_some_and(|t| now.saturating_duration_since(t) < SETTLE) {
            return;
        }
        let cpu = match std::mem::take(&mut self.serving) {
            Serving::Unknown => return,
            Serving::Several => {
                if self.unpin() {
                    self.changed = Some(now);
                }
                return;
            }
            Serving::One(c) if c < CpuSet::MAX_CPU => c,
            Serving::One(_) => return,
        };
        if self.pinned == Some(cpu) {
            return;
        }
        if self.pinned.is_none() {
            // not pinned, so these are the threads' own masks
            self.all = sched_getaffinity(None).ok();
            for (pid, mask) in &mut self.companions {
                *mask = sched_getaffinity(Some(*pid)).ok();
            }
        }
        // a client in another cpuset names a CPU this thread may not use
        if !self.all.as_ref().is_some_and(|a| a.is_set(cpu)) {
            return;
        }
        let mut one = CpuSet::new();
        one.set(cpu);
        if sched_setaffinity(None, &one).is_ok() {
            self.pinned = Some(cpu);
            self.changed = Some(now);
            for (pid, mask) in &self.companions {
                if mask.as_ref().is_some_and(|m| m.is_set(cpu)) {
                    let _ = sched_setaffinity(Some(*pid), &one);
                }
            }
        }
    }

    /// Take back the whole mask; whether it was pinned.
    fn unpin(&mut self) -> bool {
        let Some(_) = self.pinned.take() else { return false };
        if let Some(all) = &self.all {
            let _ = sched_setaffinity(None, all);
        }
        for (pid, mask) in &self.companions {
            if let Some(m) = mask {
                let _ = sched_setaffinity(Some(*pid), m);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask() -> Vec<usize> {
        let m = sched_getaffinity(None).unwrap();
        (0..CpuSet::MAX_CPU).filter(|&c| m.is_set(c)).collect()
    }

    /// Busy: the core waits on the CPU its client asks from; quiet: on all its CPUs
    /// again; a CPU outside its mask (or a nonsense one) changes nothing; clients on
    /// several CPUs unpin it; and it moves at most every SETTLE.
    #[test]
    fn the_core_follows_its_client_only_while_the_host_is_busy() {
        // on a thread of its own: the mask is per thread
        std::thread::spawn(|| {
            let all = mask();
            let last = *all.last().unwrap();
            let mut f = Follow::default();
            f.before_sleep(true);
            assert_eq!(mask(), all, "no client said its CPU yet");
            f.serving = Serving::default().and(None).and(Some(last)).and(Some(last));
            assert_eq!(f.serving, Serving::One(last));
            f.before_sleep(false);
            assert_eq!(mask(), all, "a quiet host pins nothing");
            f.serving = Serving::One(last);
            f.before_sleep(true);
            assert_eq!(mask(), vec![last]);
            std::thread::sleep(SETTLE);
            f.serving = Serving::One(CpuSet::MAX_CPU + 5);
            f.before_sleep(true);
            assert_eq!(mask(), vec![last], "a nonsense CPU is ignored");
            if let Some(outside) = (0..CpuSet::MAX_CPU).find(|c| !all.contains(c)) {
                f.serving = Serving::One(outside);
                f.before_sleep(true);
                assert_eq!(mask(), vec![last], "a CPU outside the mask is ignored");
            }
            f.serving = Serving::One(last).and(Some(last + 1));
            assert_eq!(f.serving, Serving::Several);
            f.before_sleep(true);
            assert_eq!(mask(), all, "clients on several CPUs: any CPU");
            f.serving = Serving::One(last);
            f.before_sleep(true);
            assert_eq!(mask(), all, "not again within SETTLE");
            std::thread::sleep(SETTLE);
            f.serving = Serving::One(last);
            f.before_sleep(true);
            assert_eq!(mask(), vec![last]);
            f.before_sleep(false);
            assert_eq!(mask(), all);
        })
        .join()
        .unwrap();
    }

    /// A companion thread (an executor's GPU thread) is moved with the core and given
    /// its own mask back.
    #[test]
    fn companions_move_with_the_core() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let companion = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid()).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let of = |pid| {
            let m = sched_getaffinity(Some(pid)).unwrap();
            (0..CpuSet::MAX_CPU).filter(|&c| m.is_set(c)).collect::<Vec<_>>()
        };
        std::thread::spawn(move || {
            let all = mask();
            let first = all[0];
            let mut f = Follow::new(&[tid]);
            f.serving = Serving::One(first);
            f.before_sleep(true);
            assert_eq!((mask(), of(tid)), (vec![first], vec![first]));
            f.before_sleep(false);
            assert_eq!((mask(), of(tid)), (all.clone(), all));
        })
        .join()
        .unwrap();
        stop_tx.send(()).unwrap();
        companion.join().unwrap();
    }
}

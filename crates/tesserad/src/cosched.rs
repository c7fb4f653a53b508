//! GPU-centric coscheduling (FairGV §3.2.3): when a CPU-GPU interactive tenant's slice
//! of a GPU starts, its threads should run at once — a program that waits for the GPU
//! at every step gets little from a slice whose first milliseconds its woken thread
//! spends in a run queue behind CPU-bound processes. FairGV asks KVM's scheduler to
//! wake the vCPU and reschedule its core; a daemon outside the kernel has the nearest
//! equivalent in the threads' nice value: each thread of the tenant's process is
//! raised by [`BOOST`] before the grant's wake-up and put back when the slice ends.
//! Measured beside two CPU-bound processes on the woken thread's CPU (`scripts/
//! cosched-wake.c`, 2 cores): from grant to running, p90 3.6 ms at its own nice, 14 us
//! raised by 10; an interactive program beside a batch one and three CPU-bound
//! processes makes 1.95x the iterations per second with it (tessera-cuda's
//! `coscheduling` test).
//!
//! The waiting thread blocks on the grant word at once, never spinning first: FairGV's
//! hybrid spinning (spin briefly, then block) made the same test's gain 1.08-1.40x
//! instead of 1.95x (three runs, 50 us of spin) — a thread that spins before it sleeps
//! has used CPU time the kernel's scheduler then holds against it when it is woken,
//! which is FairGV's own reason for blocking (§3.2.3: a blocked vCPU has the lowest
//! virtual time when it is unblocked).
//!
//! Only for interactive tenants (`tessera_core::interactive`), only while their slice
//! lasts, and only where the daemon may raise priorities (`CAP_SYS_NICE`, as root):
//! elsewhere the first refusal is logged and coscheduling stops. Fairness on the GPU is
//! the fair queue's, untouched: the boost changes when a thread runs inside the slice it
//! was granted, not which tenant is granted one.

use rustix::process::{Pid, getpriority_process, setpriority_process};
use std::collections::BTreeMap;

/// Nice levels a boosted thread is raised by.
pub const BOOST: i32 = 10;

/// The boosts in force, by process.
#[derive(Debug, Default)]
pub struct Coscheduler {
    enabled: bool,
    /// Per boosted process (pid, as the daemon sees it): each thread and its nice
    /// before the boost.
    boosted: BTreeMap<u32, Vec<(i32, i32)>>,
    /// Boosts made, for the status and the tests.
    boosts: u64,
}

impl Coscheduler {
    /// Coscheduling on (`coscheduling = true` in the configuration) or off.
    pub fn new(enabled: bool) -> Coscheduler {
        Coscheduler { enabled, ..Default::default() }
    }

    /// Whether it is on (it turns itself off where priorities cannot be raised).
    #[cfg(test)]
    fn enabled(&self) -> bool {
        self.enabled
    }

    /// Boosts made so far.
    pub fn boosts(&self) -> u64 {
        self.boosts
    }

    /// Raise every thread of process `pid` (its slice starts); nothing if it is
    /// raised already or coscheduling is off.
    pub fn boost(&mut self, pid: u32) {
        if !self.enabled || self.boosted.contains_key(&pid) {
            return;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let mut done = Vec::new();
        for tid in tasks.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
            let Some(p) = Pid::from_raw(tid) else { continue };
            let Ok(before) = getpriority_process(Some(p)) else { continue };
            match setpriority_process(Some(p), (before - BOOST).max(-20)) {
                Ok(()) => done.push((tid, before)),
                Err(rustix::io::Errno::SRCH) => {}
                Err(e) => {
                    tracing::warn!(
                        pid,
                        error = %e,
                        "coscheduling off: the daemon may not raise a thread's priority \
                         (it needs CAP_SYS_NICE, as root)"
                    );
                    self.enabled = false;
                    put_back(&done);
                    return;
                }
            }
        }
        tracing::trace!(pid, threads = done.len(), "coscheduled: its slice starts");
        self.boosts += 1;
        self.boosted.insert(pid, done);
    }

    /// Put process `pid`'s threads back (its slice ended, or it went away).
    pub fn restore(&mut self, pid: u32) {
        if let Some(threads) = self.boosted.remove(&pid) {
            put_back(&threads);
        }
    }
}

/// Set each thread's nice back; a thread that ended meanwhile is passed over.
fn put_back(threads: &[(i32, i32)]) {
    for &(tid, before) in threads {
        if let Some(p) = Pid::from_raw(tid) {
            let _ = setpriority_process(Some(p), before);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, nothing is touched; on, a process's threads are raised by [`BOOST`] and
    /// put back (where the test may raise priorities: as root).
    #[test]
    fn a_boost_raises_every_thread_and_is_put_back() {
        let mut off = Coscheduler::new(false);
        off.boost(std::process::id());
        assert_eq!(off.boosts(), 0);
        // a child whose nice the test may change (its own, not the test runner's)
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let nice = || getpriority_process(Pid::from_raw(pid as i32)).unwrap();
        let before = nice();
        let mut on = Coscheduler::new(true);
        on.boost(pid);
        if !on.enabled() {
            eprintln!("SKIPPED: the test may not raise priorities (not root)");
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        assert_eq!(nice(), (before - BOOST).max(-20));
        on.boost(pid);
        assert_eq!(on.boosts(), 1, "a boosted process is not boosted twice");
        on.restore(pid);
        assert_eq!(nice(), before);
        let _ = child.kill();
        let _ = child.wait();
    }
}

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
//! Only for interactive tenants (`tessera_core::interactive`), only from a slice's
//! grant until it ends or is renewed (a holder alone on its GPU waits for no grant), only
//! for a process that is still the connection's user's (a pid reused by another user's
//! process is left alone), and only where the daemon may raise priorities
//! (`CAP_SYS_NICE`, as root): elsewhere the first refusal is logged and coscheduling
//! stops. A thread is put back only if it is still its process's and still raised (a
//! thread id reused after the process ended is left alone); the daemon's core puts every
//! boost back when it stops, and a daemon killed outright cannot, so the interposer puts
//! its program's raised threads back itself once it finds its daemon gone (within 100
//! ms: tessera's `a_coscheduling_boost_ends_when_its_daemon_is_killed`). A client may claim to be interactive (the span is its
//! own): it gains CPU priority for its own threads for the first slice it waited for
//! each time, never a larger GPU share. Fairness on the GPU is
//! the fair queue's, untouched: the boost changes when a thread runs inside the slice it
//! was granted, not which tenant is granted one.

use rustix::process::{Pid, getpriority_process, setpriority_process};
use std::collections::{BTreeMap, BTreeSet};

/// Nice levels a boosted thread is raised by (the core's, which the simulator's program
/// engine weighs its boosted threads by).
pub const BOOST: i32 = tessera_core::interactive::BOOST_NICE;

/// One boosted process: its threads with their nice before the boost, and the
/// connections whose slices hold the boost (a process may have several).
#[derive(Debug)]
struct Boosted {
    threads: Vec<(i32, i32)>,
    holders: BTreeSet<u64>,
}

/// The boosts in force, by process.
#[derive(Debug, Default)]
pub struct Coscheduler {
    enabled: bool,
    /// Per boosted process (pid, as the daemon sees it).
    boosted: BTreeMap<u32, Boosted>,
    /// Boosts made, for the status and the tests.
    boosts: u64,
}

impl Coscheduler {
    /// Coscheduling on (`coscheduling = true` in the configuration) or off.
    pub fn new(enabled: bool) -> Coscheduler {
        Coscheduler { enabled, boosted: BTreeMap::new(), boosts: 0 }
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

    /// Connection `holder`'s slice starts: raise every thread of its process `pid`,
    /// owned by `uid` (the connection's peer credentials) — unless the process by that
    /// pid now is another user's (the pid was reused after the connection's process
    /// ended), it is raised already (another connection of it holds a slice), or
    /// coscheduling is off.
    pub fn boost(&mut self, pid: u32, uid: u32, holder: u64) {
        if !self.enabled {
            return;
        }
        if let Some(b) = self.boosted.get_mut(&pid) {
            b.holders.insert(holder);
            return;
        }
        if owner(pid) != Some(uid) {
            return;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let mut done = Vec::new();
        for tid in tasks.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
            let Some(p) = Pid::from_raw(tid) else { continue };
            let Ok(before) = getpriority_process(Some(p)) else { continue };
            match setpriority_process(Some(p), raised(before)) {
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
                    put_back(pid, &done);
                    return;
                }
            }
        }
        tracing::trace!(pid, threads = done.len(), "coscheduled: its slice starts");
        self.boosts += 1;
        self.boosted.insert(pid, Boosted { threads: done, holders: BTreeSet::from([holder]) });
    }

    /// Connection `holder`'s slice ended (or goes on alone, renewed: it waits for no
    /// grant then): process `pid`'s threads are put back once no slice of it holds the
    /// boost.
    pub fn restore(&mut self, pid: u32, holder: u64) {
        let Some(b) = self.boosted.get_mut(&pid) else { return };
        b.holders.remove(&holder);
        if b.holders.is_empty()
            && let Some(b) = self.boosted.remove(&pid)
        {
            put_back(pid, &b.threads);
        }
    }
}

impl Drop for Coscheduler {
    /// The daemon stops (or its core ends): nothing stays raised.
    fn drop(&mut self) {
        for (pid, b) in std::mem::take(&mut self.boosted) {
            put_back(pid, &b.threads);
        }
    }
}

/// A thread's nice raised by [`BOOST`], within the kernel's range.
fn raised(nice: i32) -> i32 {
    (nice - BOOST).max(-20)
}

/// The real uid of process `pid`, from `/proc/PID/status`.
fn owner(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Set each of process `pid`'s boosted threads back to its nice before the boost —
/// only a thread that is still that process's and still at the raised nice: a thread
/// id reused by another process after this one ended is left alone.
fn put_back(pid: u32, threads: &[(i32, i32)]) {
    for &(tid, before) in threads {
        let Some(p) = Pid::from_raw(tid) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
            || getpriority_process(Some(p)).ok() != Some(raised(before))
        {
            continue;
        }
        let _ = setpriority_process(Some(p), before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, nothing is touched; on, a process's threads are raised by [`BOOST`] and
    /// put back once no connection's slice holds them, or when the coscheduler is
    /// dropped; another user's process is not raised (where the test may raise
    /// priorities: as root).
    #[test]
    fn a_boost_raises_every_thread_and_is_put_back() {
        let uid = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines().find(|l| l.starts_with("Uid:"))?.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap();
        let mut off = Coscheduler::new(false);
        off.boost(std::process::id(), uid, 1);
        assert_eq!(off.boosts(), 0);
        // a child whose nice the test may change (its own, not the test runner's)
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let nice = || getpriority_process(Pid::from_raw(pid as i32)).unwrap();
        let before = nice();
        let mut on = Coscheduler::new(true);
        // another user's process (the pid reused): untouched
        on.boost(pid, uid + 1, 1);
        assert_eq!((on.boosts(), nice()), (0, before));
        on.boost(pid, uid, 1);
        if !on.enabled() {
            eprintln!("SKIPPED: the test may not raise priorities (not root)");
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        assert_eq!(nice(), (before - BOOST).max(-20));
        // a second connection of the process: one boost, held until both slices end
        on.boost(pid, uid, 2);
        assert_eq!(on.boosts(), 1, "a boosted process is not boosted twice");
        on.restore(pid, 1);
        assert_eq!(nice(), (before - BOOST).max(-20), "put back while a slice holds it");
        on.restore(pid, 2);
        assert_eq!(nice(), before);
        // dropped with a boost in force: put back
        on.boost(pid, uid, 3);
        drop(on);
        assert_eq!(nice(), before);
        let _ = child.kill();
        let _ = child.wait();
    }
}

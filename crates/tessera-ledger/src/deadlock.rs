//! Deadlock detection for waiting pre-allocations (schedGPU avoids deadlock only by a
//! timeout or an immediate error, footnote 7; tessera's default wait is unbounded, so
//! the ledger must find the cycles itself).
//!
//! The question asked when a request is about to wait: if every client that is not
//! waiting went on to free everything it holds, could every waiting client eventually
//! be granted? This is the classic detection algorithm for resources with many units
//! (Holt 1972; Coffman et al.): start from each GPU's free memory, let every client
//! that is not waiting "finish" (its holdings become free), then repeatedly let any
//! waiting client whose requests all fit "finish" too. Clients left over are
//! deadlocked: each waits for memory that only the others, themselves waiting, hold.
//!
//! A deadlock can only appear when a request starts to wait (a grant made at once
//! goes to a client that is not waiting, whose holdings the algorithm already counts
//! as returnable), so the ledger runs the check there and refuses the newest request
//! of the cycle instead of queueing it.
//!
//! Only waits without a deadline can deadlock: a timed wait ends by itself, and its
//! client runs on (and may free) after it, so a client whose waits are all timed counts
//! as running, and a timed request is never refused by this check (the ledger asks it
//! only for untimed ones).
//!
//! A client with a waiting request counts as blocked as a whole. A process with another
//! thread still running could free memory and break the cycle; the check cannot see
//! that and refuses the request anyway — the waiting call fails with an out-of-memory
//! error the program already handles, which is better than a hang.

use crate::layout::{State, WAIT_TIMED};
use std::collections::{BTreeMap, BTreeSet};

/// Would queueing `bytes` on `gpu` for `client` leave it (with others) waiting for
/// ever? `Some(holders)`: yes, and these are the other clients of the cycle (their
/// pids as they registered them, for the message); `None`: no.
pub(crate) fn would_deadlock(state: &State, client: u64, gpu: u32, bytes: u64) -> Option<Vec<u32>> {
    let mut free: Vec<u64> = state.gpus.iter().map(|g| g.total.saturating_sub(g.used)).collect();
    // what each waiting client asks for, per GPU (its requests must all fit at once:
    // they are in flight together), and the new request among them
    let mut wants: BTreeMap<u64, BTreeMap<u32, u64>> = BTreeMap::new();
    for w in state.waiters.iter().filter(|w| w.granted == 0 && w.flags & WAIT_TIMED == 0) {
        *wants.entry(w.client).or_default().entry(w.gpu).or_default() += w.bytes;
    }
    *wants.entry(client).or_default().entry(gpu).or_default() += bytes;
    let holds = |c: u64| state.holders.iter().filter(move |h| h.client == c);
    // clients that are not waiting can run on and free what they hold
    let holders: BTreeSet<u64> = state.holders.iter().map(|h| h.client).collect();
    for c in holders.iter().filter(|c| !wants.contains_key(c)) {
        for h in holds(*c) {
            if let Some(f) = free.get_mut(h.gpu as usize) {
                *f = f.saturating_add(h.bytes);
            }
        }
    }
    loop {
        let able = wants.iter().find_map(|(c, asks)| {
            asks.iter().all(|(g, b)| free.get(*g as usize).is_some_and(|f| f >= b)).then_some(*c)
        });
        let Some(c) = able else { break };
        wants.remove(&c);
        if c == client {
            return None;
        }
        for h in holds(c) {
            if let Some(f) = free.get_mut(h.gpu as usize) {
                *f = f.saturating_add(h.bytes);
            }
        }
    }
    // `client` is stuck. It is a deadlock only if someone else in the stuck set holds
    // memory on a GPU it waits for — otherwise it waits for no one (its request needs
    // memory nobody holds, or holders that run on), which is not a cycle.
    let stuck: BTreeSet<u64> = wants.keys().copied().filter(|c| *c != client).collect();
    let mut pids: Vec<u32> = state
        .holders
        .iter()
        .filter(|h| stuck.contains(&h.client) && h.gpu == gpu)
        .map(|h| h.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    (!pids.is_empty()).then_some(pids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{GpuRow, HolderRow, WaiterRow};

    const MIB: u64 = 1 << 20;

    fn one_gpu(total: u64) -> State {
        State::fresh(&[total], 0, 16, 16)
    }

    fn hold(s: &mut State, client: u64, gpu: u32, bytes: u64) {
        s.holders.push(HolderRow { client, gpu, pid: client as u32 * 100, bytes });
        s.gpus[gpu as usize].used += bytes;
    }

    fn wait(s: &mut State, client: u64, gpu: u32, bytes: u64) {
        let seq = s.next_seq;
        s.next_seq += 1;
        s.waiters.push(WaiterRow {
            client,
            gpu,
            pid: client as u32 * 100,
            bytes,
            seq,
            priority: 0,
            flags: 0,
            granted: 0,
        });
    }

    #[test]
    fn the_issues_two_process_cycle_is_found() {
        // 1 GiB GPU: A holds 600 MiB and waits for 300 more; B holds 300 MiB and asks 200
        let mut s = one_gpu(1024 * MIB);
        hold(&mut s, 1, 0, 600 * MIB);
        hold(&mut s, 2, 0, 300 * MIB);
        wait(&mut s, 1, 0, 300 * MIB);
        assert_eq!(would_deadlock(&s, 2, 0, 200 * MIB), Some(vec![100]));
    }

    #[test]
    fn a_wait_for_a_running_holder_is_no_deadlock() {
        let mut s = one_gpu(1024 * MIB);
        hold(&mut s, 1, 0, 600 * MIB);
        hold(&mut s, 2, 0, 300 * MIB);
        // A is not waiting: B's wait ends when A frees
        assert_eq!(would_deadlock(&s, 2, 0, 200 * MIB), None);
    }

    #[test]
    fn a_wait_another_waiter_can_end_is_no_deadlock() {
        // A waits for 100 MiB, which fits once C (running) frees; B then gets A's
        let mut s = one_gpu(1024 * MIB);
        hold(&mut s, 1, 0, 500 * MIB);
        hold(&mut s, 2, 0, 300 * MIB);
        hold(&mut s, 3, 0, 200 * MIB);
        wait(&mut s, 1, 0, 150 * MIB);
        assert_eq!(would_deadlock(&s, 2, 0, 400 * MIB), None);
    }

    #[test]
    fn a_timed_waiter_is_no_party_to_a_deadlock() {
        // the issue's cycle, but A's wait has a deadline: when it gives up A runs on
        let mut s = one_gpu(1024 * MIB);
        hold(&mut s, 1, 0, 600 * MIB);
        hold(&mut s, 2, 0, 300 * MIB);
        wait(&mut s, 1, 0, 300 * MIB);
        s.waiters[0].flags = WAIT_TIMED;
        assert_eq!(would_deadlock(&s, 2, 0, 200 * MIB), None);
    }

    #[test]
    fn a_cycle_across_two_gpus_is_found() {
        let mut s = one_gpu(1024 * MIB);
        s.gpus.push(GpuRow { total: 1024 * MIB, used: 0 });
        hold(&mut s, 1, 0, 1000 * MIB);
        hold(&mut s, 2, 1, 1000 * MIB);
        wait(&mut s, 1, 1, 100 * MIB);
        assert_eq!(would_deadlock(&s, 2, 0, 100 * MIB), Some(vec![100]));
        // a third client holding nothing waits for client 2, which is running
        assert_eq!(would_deadlock(&s, 3, 1, 100 * MIB), None);
    }
}

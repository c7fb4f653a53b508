//! The core never waits on the ledger's lock (ARCHITECTURE: "the daemon never blocks
//! on anything a client can touch"): any process of the node can hold the ledger's
//! `flock` — a program stopped inside an allocation holds it for as long as it is
//! stopped — and while it does, tasks that need no memory run and `status` answers;
//! only a task that needs memory waits for it.

use std::time::Duration;
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::PolicyName;

use crate::common;

fn task(memory: u64) -> TaskRequest {
    TaskRequest { kernel: 1, cost: Duration::from_millis(20), memory, input: vec![], output_len: 0 }
}

/// Holds the ledger file's `flock` as a stopped client would, until dropped.
struct HeldLock(#[allow(dead_code)] std::fs::File);

fn hold(path: &std::path::Path) -> HeldLock {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    HeldLock(f)
}

/// Before, every task's dispatch and every status request took the ledger's lock on
/// the core thread: with the lock held, nothing completed and status did not answer
/// until it was released.
#[test]
fn a_held_ledger_lock_delays_only_tasks_that_need_memory() {
    let cfg = common::config(PolicyName::RoundRobin);
    let d = Daemon::start(&cfg).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(TenantOptions::batch()).unwrap();
    // once with the lock free: memory is admitted and returned
    let h = c.submit(t, &task(1 << 20)).unwrap();
    assert_eq!(c.wait(h, Duration::from_secs(10)).unwrap().outcome, Outcome::Done);

    let held = hold(&cfg.ledger);
    let needs_memory = c.submit(t, &task(1 << 20)).unwrap();
    let free: Vec<u64> = (0..5).map(|_| c.submit(t, &task(0)).unwrap()).collect();
    // each of these would not come while the lock is held if the core waited on it
    for h in free {
        let done = c.wait(h, Duration::from_secs(10)).unwrap();
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
    }
    // status answers while the lock is held (asked on a thread, so that a daemon that
    // waits for the lock fails the test instead of hanging it)
    let socket = d.socket().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Client::connect_control(&socket).and_then(|mut c| c.status()));
    });
    let status = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("status did not answer while the ledger's lock was held")
        .unwrap();
    assert_eq!(status.totals.batch_done, 6, "{:?}", status.totals);
    // the task that needs memory is still waiting for the ledger
    assert!(
        matches!(
            c.wait(needs_memory, Duration::from_millis(300)),
            Err(tessera_client::ClientError::TimedOut)
        ),
        "a task needing memory ran while the ledger was locked"
    );
    drop(held);
    let done = c.wait(needs_memory, Duration::from_secs(10)).unwrap();
    assert_eq!(done.outcome, Outcome::Done, "{done:?}");
    d.shutdown();
}

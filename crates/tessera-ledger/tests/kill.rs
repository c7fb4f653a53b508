//! Real processes sharing one ledger, killed with SIGKILL at random points — while
//! waiting, while holding memory, while holding the file lock. Whatever the interleaving,
//! granted memory never exceeds capacity, and once a live client has looked nothing
//! stays reserved for a dead process.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;
use tessera_core::Bytes;
use tessera_ledger::{GpuSource, Ledger, LedgerConfig, NotificationPolicy, Wait};

const CHILD_ENV: &str = "TESSERA_LEDGER_KILL_TEST_CHILD";
const WAITER_ENV: &str = "TESSERA_LEDGER_KILL_TEST_WAITER";
const CAPS: [u64; 2] = [1000, 600];

/// A child must never outlive the test that spawned it (a failing assertion in the
/// parent would otherwise leave it spinning): it exits when its parent is gone or after
/// a minute, whichever comes first.
fn exit_with_parent() {
    let parent = rustix::process::getppid();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            if rustix::process::getppid() != parent || start.elapsed() > Duration::from_secs(60) {
                std::process::exit(0);
            }
        }
    });
}

use crate::common::Reaper;

fn config(path: PathBuf) -> LedgerConfig {
    LedgerConfig {
        policy: NotificationPolicy::Mmu,
        ..LedgerConfig::new(path, GpuSource::Explicit(CAPS.iter().map(|b| Bytes(*b)).collect()))
    }
}

/// Not a test on its own: the body of each child process (does nothing unless the
/// parent test started this binary as a child).
#[test]
fn child_process_loop() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    exit_with_parent();
    let ledger = Ledger::open(&config(PathBuf::from(path))).expect("child opens the ledger");
    let mut x = u64::from(std::process::id()) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    loop {
        let gpu = (next() % 2) as u32;
        let bytes = 1 + next() % (CAPS[gpu as usize] / 2);
        let wait = match next() % 3 {
            0 => Wait::NoWait,
            1 => Wait::Timeout(Duration::from_micros(next() % 3000)),
            _ => Wait::Forever,
        };
        if ledger.pre_alloc(gpu, bytes, wait).is_ok() {
            if next() % 4 == 0 {
                std::thread::sleep(Duration::from_micros(next() % 500));
            }
            ledger.post_free(gpu, bytes).expect("frees what it holds");
        }
    }
}

fn spawn_child(path: &PathBuf) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .arg(crate::common::harness_name(module_path!(), "child_process_loop"))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child")
}

#[test]
fn clients_killed_at_random_points_leave_a_sound_ledger() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ledger-kill-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let observer = Ledger::open(&config(path.clone())).unwrap();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut reaper = Reaper((0..6).map(|_| spawn_child(&path)).collect());
    let children = &mut reaper.0;
    let mut kills = 0;
    for _round in 0..40 {
        std::thread::sleep(Duration::from_millis(2 + rand(25)));
        for _ in 0..1 + rand(3) {
            let i = rand(children.len() as u64) as usize;
            let mut victim = children.swap_remove(i);
            victim.kill().unwrap(); // SIGKILL
            // killed in its loop, not a process that had already ended (one that ran no
            // test at all, say, exits 0 at once and would leave this test nothing to check)
            let status = victim.wait().unwrap();
            assert_eq!(status.signal(), Some(9), "the child was running its loop: {status}");
            kills += 1;
            children.push(spawn_child(&path));
        }
        let s = observer.status().unwrap();
        for (g, gpu) in s.gpus.iter().enumerate() {
            assert!(gpu.used <= gpu.total, "GPU {g}: {} granted of {}", gpu.used, gpu.total);
            let itemised: u64 =
                s.holdings.iter().filter(|h| h.gpu as usize == g).map(|h| h.bytes).sum();
            assert_eq!(itemised, gpu.used, "the books add up");
        }
        let live: Vec<u32> = children.iter().map(Child::id).chain([std::process::id()]).collect();
        for h in &s.holdings {
            assert!(
                live.contains(&h.pid),
                "a dead process still holds memory after a live client looked: {h:?}"
            );
        }
    }
    for mut c in std::mem::take(children) {
        c.kill().unwrap();
        c.wait().unwrap();
        kills += 1;
    }
    let s = observer.status().unwrap();
    assert!(s.holdings.is_empty(), "all clients are dead: {:?}", s.holdings);
    assert!(s.gpus.iter().all(|g| g.used == 0 && g.waiting == 0), "{s:?}");
    assert!(kills >= 46);
    // and the ledger still works
    observer.pre_alloc(0, CAPS[0], Wait::NoWait).unwrap();
}

/// Not a test on its own: a child that waits forever for memory.
#[test]
fn child_waiter() {
    let Ok(path) = std::env::var(WAITER_ENV) else { return };
    exit_with_parent();
    let cfg = LedgerConfig { policy: NotificationPolicy::Fifo, ..config(PathBuf::from(path)) };
    let ledger = Ledger::open(&cfg).expect("child opens the ledger");
    let _ = ledger.pre_alloc(0, 200, Wait::Forever);
    std::thread::sleep(Duration::from_secs(3600));
}

/// A waiter killed while queued must not keep blocking requests that fit (FIFO lets
/// nobody pass a waiter, so a dead one left in the queue would block everyone).
#[test]
fn a_dead_waiter_does_not_block_the_queue() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ledger-dead-waiter-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = LedgerConfig { policy: NotificationPolicy::Fifo, ..config(path.clone()) };
    let holder = Ledger::open(&cfg).unwrap();
    holder.pre_alloc(0, 900, Wait::NoWait).unwrap();
    let mut reaper = Reaper(Vec::new());
    let waiter = Command::new(std::env::current_exe().unwrap())
        .arg(crate::common::harness_name(module_path!(), "child_waiter"))
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .env(WAITER_ENV, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    reaper.0.push(waiter);
    let t = std::time::Instant::now();
    while holder.status().unwrap().gpus[0].waiting == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the child never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let other = Ledger::open(&cfg).unwrap();
    assert!(other.pre_alloc(0, 50, Wait::NoWait).is_err(), "FIFO: a live waiter is not passed");
    let mut waiter = reaper.0.pop().unwrap();
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    other.pre_alloc(0, 50, Wait::NoWait).expect("the dead waiter was swept and no longer blocks");
    assert_eq!(holder.status().unwrap().gpus[0].waiting, 0);
}

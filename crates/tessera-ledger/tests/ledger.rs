//! The ledger's life cycle, in one process (several handles act as several clients).

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;
use tessera_core::Bytes;
use tessera_ledger::{GpuSource, Ledger, LedgerConfig, LedgerError, NotificationPolicy, Wait};

static N: AtomicU32 = AtomicU32::new(0);

fn fresh_path(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let p = dir.join(format!(
        "ledger-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

fn config(path: &Path, gpus: &[u64], policy: NotificationPolicy) -> LedgerConfig {
    LedgerConfig {
        policy,
        ..LedgerConfig::new(path, GpuSource::Explicit(gpus.iter().map(|b| Bytes(*b)).collect()))
    }
}

fn open(path: &Path, policy: NotificationPolicy) -> Ledger {
    Ledger::open(&config(path, &[1000, 500], policy)).unwrap()
}

fn wait_until_waiting(l: &Ledger, gpu: usize, n: usize) {
    for _ in 0..2000 {
        if l.status().unwrap().gpus[gpu].waiting == n {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    panic!("never saw {n} waiting");
}

#[test]
fn life_cycle_with_typed_errors() {
    let path = fresh_path("life");
    let a = open(&path, NotificationPolicy::Fifo);
    a.pre_alloc(0, 600, Wait::NoWait).unwrap();
    assert!(matches!(
        a.pre_alloc(0, 1001, Wait::Forever),
        Err(LedgerError::ExceedsCapacity { capacity: 1000, .. })
    ));
    assert!(matches!(
        a.pre_alloc(7, 1, Wait::NoWait),
        Err(LedgerError::NoSuchGpu { gpu: 7, count: 2 })
    ));
    assert!(matches!(a.pre_alloc(0, 500, Wait::NoWait), Err(LedgerError::NotAvailableNow { .. })));
    // only this client holds memory: a wait for more than it leaves could never end
    assert!(matches!(
        a.pre_alloc(0, 500, Wait::Timeout(Duration::from_secs(60))),
        Err(LedgerError::NeverFits { held: 600, capacity: 1000, .. })
    ));
    assert!(matches!(
        a.post_free(0, 601),
        Err(LedgerError::OverFree { held: 600, freed: 601, .. })
    ));
    assert!(matches!(a.post_free(1, 1), Err(LedgerError::OverFree { held: 0, .. })));
    let s = a.status().unwrap();
    assert_eq!((s.gpus[0].used, s.gpus[0].total, s.gpus[1].used), (600, 1000, 0));
    assert_eq!(s.holdings.len(), 1);
    a.post_free(0, 600).unwrap();
    a.pre_alloc(0, 1000, Wait::NoWait).unwrap();
    a.shutdown().unwrap();
    let b = open(&path, NotificationPolicy::Fifo);
    assert_eq!(b.status().unwrap().gpus[0].used, 0, "shutdown released everything");
}

/// Issue 51, item 1: a request that cannot be met even if every other client released
/// everything fails at once, whatever the wait — here a forever wait that used to
/// hang — and the program that frees some of its own memory and retries gets it.
#[test]
fn outgrowing_memory_only_this_client_holds_fails_at_once_and_a_retry_after_a_free_succeeds() {
    let path = fresh_path("self");
    let gib = 1u64 << 30;
    let mib = 1u64 << 20;
    let l = Ledger::open(&config(&path, &[gib], NotificationPolicy::Fifo)).unwrap();
    l.pre_alloc(0, 900 * mib, Wait::NoWait).unwrap();
    let l = std::sync::Arc::new(l);
    let (tx, rx) = std::sync::mpsc::channel();
    // on its own thread, so that a wait that never ends fails the test instead of
    // hanging it
    thread::spawn({
        let l = l.clone();
        move || tx.send(l.pre_alloc(0, 200 * mib, Wait::Forever)).unwrap()
    });
    match rx.recv_timeout(Duration::from_secs(2)).expect("the request must fail at once, not wait")
    {
        Err(LedgerError::NeverFits { held, capacity, .. }) => {
            assert_eq!((held, capacity), (900 * mib, gib));
        }
        other => panic!("expected NeverFits, got {other:?}"),
    }
    l.post_free(0, 300 * mib).unwrap();
    l.pre_alloc(0, 200 * mib, Wait::Forever).unwrap();
    assert_eq!(l.status().unwrap().gpus[0].used, 800 * mib);
}

/// Issue 51, item 6b: timed waits end by themselves, so a storm of them is never
/// refused as a deadlock (each times out, none is told it would deadlock).
#[test]
fn a_storm_of_timed_waits_gets_no_false_deadlock() {
    let path = fresh_path("storm");
    let gib = 1u64 << 30;
    let mib = 1u64 << 20;
    let handles: Vec<Ledger> = (0..8)
        .map(|_| Ledger::open(&config(&path, &[gib], NotificationPolicy::Fifo)).unwrap())
        .collect();
    for h in &handles {
        h.pre_alloc(0, 120 * mib, Wait::NoWait).unwrap();
    }
    let deadlocks = AtomicU32::new(0);
    thread::scope(|s| {
        for h in &handles {
            let deadlocks = &deadlocks;
            s.spawn(move || {
                for _ in 0..40 {
                    match h.pre_alloc(0, 200 * mib, Wait::Timeout(Duration::from_millis(3))) {
                        Err(LedgerError::WouldDeadlock { .. }) => {
                            deadlocks.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(()) => h.post_free(0, 200 * mib).unwrap(),
                        Err(_) => {}
                    }
                }
            });
        }
    });
    assert_eq!(deadlocks.load(Ordering::Relaxed), 0, "timed waits refused as deadlocks");
}

/// A daemon's handle for a program names the program's pid in its rows.
#[test]
fn a_handle_opened_for_a_program_names_its_pid() {
    let path = fresh_path("owner");
    let l = Ledger::open_for(&config(&path, &[1000], NotificationPolicy::Fifo), 4242).unwrap();
    l.pre_alloc(0, 10, Wait::NoWait).unwrap();
    let s = l.status().unwrap();
    assert_eq!(s.holdings[0].pid, 4242);
}

/// A live client's record is adopted only by its owner's pid, and the adopter takes
/// over its holdings (what a restarted daemon does for a program its predecessor held
/// memory for); a dead client's record cannot be adopted.
#[test]
fn a_live_record_is_adopted_by_its_owner_only() {
    let path = fresh_path("adopt");
    let cfg = config(&path, &[1000], NotificationPolicy::Fifo);
    let first = Ledger::open_for(&cfg, 4242).unwrap();
    first.pre_alloc(0, 600, Wait::NoWait).unwrap();
    let client = first.client_id();
    assert!(matches!(
        Ledger::adopt(&cfg, client, 4243),
        Err(LedgerError::NotAdoptable { reason, .. }) if reason.contains("pid 4242")
    ));
    let second = Ledger::adopt(&cfg, client, 4242).unwrap();
    assert_eq!(second.client_id(), client);
    assert_eq!(second.held().unwrap(), vec![(0, 600)]);
    second.post_free(0, 100).unwrap();
    assert_eq!(first.held().unwrap(), vec![(0, 500)], "one client, two handles");
    // the record outlives the handle that made it while a descriptor of it is open
    let fd = first.record_descriptor().unwrap();
    std::mem::forget(first); // as a daemon killed by SIGKILL: nothing released
    drop(fd);
    drop(second);
    let other = Ledger::open(&cfg).unwrap();
    assert_eq!(other.status().unwrap().gpus[0].used, 0, "the adopter's drop released it");
    assert!(matches!(
        Ledger::adopt(&cfg, 99, 4242),
        Err(LedgerError::NotAdoptable { client: 99, .. })
    ));
}

#[test]
fn a_second_client_sees_the_first_clients_configuration() {
    let path = fresh_path("config");
    let a = open(&path, NotificationPolicy::Mmu);
    let b = Ledger::open(&config(&path, &[1], NotificationPolicy::Fifo)).unwrap();
    let s = b.status().unwrap();
    assert_eq!(s.policy, NotificationPolicy::Mmu);
    assert_eq!(s.gpus.len(), 2);
    drop(a);
}

#[test]
fn a_blocked_waiter_is_woken_by_a_free() {
    let path = fresh_path("wake");
    let a = open(&path, NotificationPolicy::Fifo);
    a.pre_alloc(0, 900, Wait::NoWait).unwrap();
    let p2 = path.clone();
    let waiter = thread::spawn(move || {
        let b = open(&p2, NotificationPolicy::Fifo);
        let r = b.pre_alloc(0, 500, Wait::Forever);
        (r.is_ok(), b.status().unwrap().gpus[0].used)
    });
    wait_until_waiting(&a, 0, 1);
    a.post_free(0, 900).unwrap();
    let (ok, used) = waiter.join().unwrap();
    assert!(ok);
    assert_eq!(used, 500);
}

#[test]
fn a_waiter_times_out_and_leaves_the_queue() {
    let path = fresh_path("timeout");
    let a = open(&path, NotificationPolicy::Fifo);
    a.pre_alloc(0, 900, Wait::NoWait).unwrap();
    let b = open(&path, NotificationPolicy::Fifo);
    assert!(matches!(
        b.pre_alloc(0, 500, Wait::Timeout(Duration::from_millis(30))),
        Err(LedgerError::TimedOut { .. })
    ));
    assert_eq!(a.status().unwrap().gpus[0].waiting, 0);
}

/// FIFO lets nobody pass a waiting head that does not fit; MMU serves whoever fits.
#[test]
fn fifo_blocks_behind_its_head_and_mmu_does_not() {
    for (policy, small_granted) in
        [(NotificationPolicy::Fifo, false), (NotificationPolicy::Mmu, true)]
    {
        let path = fresh_path("order");
        let a = open(&path, policy);
        a.pre_alloc(0, 900, Wait::NoWait).unwrap();
        let p2 = path.clone();
        let big = thread::spawn(move || {
            open(&p2, policy).pre_alloc(0, 500, Wait::Timeout(Duration::from_secs(5))).is_ok()
        });
        wait_until_waiting(&a, 0, 1);
        a.post_free(0, 100).unwrap(); // 200 free: the 500 head still does not fit
        let c = open(&path, policy);
        let small = c.pre_alloc(0, 50, Wait::Timeout(Duration::from_millis(50)));
        assert_eq!(small.is_ok(), small_granted, "{policy:?}: {small:?}");
        a.post_free(0, 800).unwrap();
        assert!(big.join().unwrap(), "{policy:?}: the big request is served once memory frees");
    }
}

#[test]
fn priority_waiters_are_served_first() {
    let path = fresh_path("prio");
    let a = open(&path, NotificationPolicy::PriorityFifo);
    a.pre_alloc(0, 1000, Wait::NoWait).unwrap();
    let spawn = |priority: u8, delay: u64| {
        let p = path.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(delay));
            let l = Ledger::open(&LedgerConfig {
                priority,
                ..config(&p, &[1000, 500], NotificationPolicy::PriorityFifo)
            })
            .unwrap();
            let ok = l.pre_alloc(0, 600, Wait::Timeout(Duration::from_millis(400))).is_ok();
            (ok, l) // keep the handle (and what it holds) until both have answered
        })
    };
    let low = spawn(0, 0);
    wait_until_waiting(&a, 0, 1);
    let high = spawn(5, 0);
    wait_until_waiting(&a, 0, 2);
    a.post_free(0, 1000).unwrap(); // room for one: the later, higher-priority one gets it
    let (high_ok, _h) = high.join().unwrap();
    let (low_ok, _l) = low.join().unwrap();
    assert!(high_ok);
    assert!(!low_ok);
}

#[test]
fn many_threads_never_overcommit() {
    let path = fresh_path("threads");
    let _keep = open(&path, NotificationPolicy::Mmu);
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let p = path.clone();
            thread::spawn(move || {
                let l = open(&p, NotificationPolicy::Mmu);
                for k in 0..200u64 {
                    let bytes = 50 + (k * 37 + i * 11) % 300;
                    if l.pre_alloc(0, bytes, Wait::Timeout(Duration::from_millis(20))).is_ok() {
                        let s = l.status().unwrap();
                        assert!(s.gpus[0].used <= s.gpus[0].total);
                        l.post_free(0, bytes).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(_keep.status().unwrap().gpus[0].used, 0);
}

#[test]
fn a_corrupted_file_is_recovered_from_the_clients_records() {
    let path = fresh_path("corrupt");
    let a = open(&path, NotificationPolicy::Fifo);
    a.pre_alloc(0, 300, Wait::NoWait).unwrap();
    a.pre_alloc(1, 200, Wait::NoWait).unwrap();
    // scribble over the whole file, both copies and their checksums
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let garbage: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
    std::fs::write(&path, garbage).unwrap();
    let b = open(&path, NotificationPolicy::Fifo); // the integrity check on open
    let s = b.status().unwrap();
    assert_eq!(
        (s.gpus[0].total, s.gpus[0].used, s.gpus[1].used),
        (1000, 300, 200),
        "rebuilt from a's record"
    );
    // and the ledger works on: a frees what it held
    a.post_free(0, 300).unwrap();
    assert_eq!(b.status().unwrap().gpus[0].used, 0);
}

#[test]
fn an_incompatible_version_is_refused_not_overwritten() {
    let path = fresh_path("version");
    drop(open(&path, NotificationPolicy::Fifo));
    let good = std::fs::read(&path).unwrap();
    // the header says version 99
    let mut bytes = good.clone();
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = Ledger::open(&config(&path, &[1000], NotificationPolicy::Fifo)).unwrap_err();
    assert!(matches!(err, LedgerError::Incompatible { found: 99, .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the library left it alone");

    // a sound header whose state (checksum fixed) says a newer version: an older client
    // must not rewrite it
    let mut bytes = good.clone();
    let base = tessera_ledger::layout::COPIES as usize;
    {
        let len = u32::from_le_bytes(bytes[base + 4..base + 8].try_into().unwrap()) as usize;
        bytes[base + 8..base + 12].copy_from_slice(&99u32.to_le_bytes());
        let crc = crc32fast_hash(&bytes[base + 8..base + 8 + len]);
        bytes[base..base + 4].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Ledger::open(&config(&path, &[1000], NotificationPolicy::Fifo)).unwrap_err();
    assert!(matches!(err, LedgerError::Incompatible { found: 99, .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the library left it alone");
}

fn crc32fast_hash(b: &[u8]) -> u32 {
    // same CRC-32 (IEEE) as the library
    let mut crc = !0u32;
    for &byte in b {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { client: usize, gpu: u32, bytes: u64, wait_ms: u64 },
    Free { client: usize, gpu: u32, bytes: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0u32..3, 0u64..1200, 0u64..3)
            .prop_map(|(client, gpu, bytes, wait_ms)| Op::Alloc { client, gpu, bytes, wait_ms }),
        (0usize..3, 0u32..3, 0u64..700).prop_map(|(client, gpu, bytes)| Op::Free {
            client,
            gpu,
            bytes
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Against a model of who holds what: granted memory never exceeds capacity, every
    /// error leaves the ledger unchanged, and the ledger's books match the model.
    #[test]
    fn random_operations_keep_the_books(ops in prop::collection::vec(op(), 1..60), policy in 0usize..4) {
        let policy = NotificationPolicy::ALL[policy];
        let path = fresh_path("prop");
        let clients: Vec<Ledger> = (0..3).map(|_| open(&path, policy)).collect();
        let caps = [1000u64, 500];
        let mut held = [[0u64; 2]; 3];
        for op in ops {
            match op {
                Op::Alloc { client, gpu, bytes, wait_ms } => {
                    let wait = if wait_ms == 0 { Wait::NoWait } else { Wait::Timeout(Duration::from_millis(wait_ms)) };
                    let r = clients[client].pre_alloc(gpu, bytes, wait);
                    let used: u64 = (0..3).map(|c| if (gpu as usize) < 2 { held[c][gpu as usize] } else { 0 }).sum();
                    match r {
                        Ok(()) => {
                            prop_assert!((gpu as usize) < 2);
                            prop_assert!(used + bytes <= caps[gpu as usize]);
                            held[client][gpu as usize] += bytes;
                        }
                        Err(LedgerError::NoSuchGpu { .. }) => prop_assert!(gpu >= 2),
                        Err(LedgerError::ExceedsCapacity { .. }) => prop_assert!(bytes > caps[gpu as usize]),
                        Err(LedgerError::NeverFits { held: h, .. }) => {
                            prop_assert!(wait != Wait::NoWait);
                            prop_assert_eq!(h, held[client][gpu as usize]);
                            prop_assert!(h + bytes > caps[gpu as usize]);
                        }
                        Err(LedgerError::NotAvailableNow { .. } | LedgerError::TimedOut { .. }) => {
                            prop_assert!(used + bytes > caps[gpu as usize] || policy == NotificationPolicy::Fifo || policy == NotificationPolicy::PriorityFifo || policy == NotificationPolicy::PriorityMmu);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Free { client, gpu, bytes } => {
                    let r = clients[client].post_free(gpu, bytes);
                    if (gpu as usize) < 2 && bytes <= held[client][gpu as usize] {
                        prop_assert!(r.is_ok(), "{r:?}");
                        held[client][gpu as usize] -= bytes;
                    } else {
                        prop_assert!(r.is_err());
                    }
                }
            }
            let s = clients[0].status().unwrap();
            for (g, gpu) in s.gpus.iter().enumerate().take(2) {
                let model: u64 = held.iter().map(|c| c[g]).sum();
                prop_assert_eq!(gpu.used, model);
                prop_assert!(gpu.used <= gpu.total);
                prop_assert_eq!(gpu.waiting, 0);
            }
        }
    }
}

#[test]
fn a_file_of_another_layout_version_is_refused_whatever_its_size() {
    // layout 1 (magic at byte 16, version at 24) and a future layout (magic first)
    for (magic_at, version) in [(16usize, 1u32), (0, 3)] {
        let path = fresh_path("other-layout");
        let mut bytes = vec![0u8; 100_000];
        bytes[magic_at..magic_at + 8].copy_from_slice(&tessera_ledger::layout::MAGIC);
        bytes[magic_at + 8..magic_at + 12].copy_from_slice(&version.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = Ledger::open(&config(&path, &[1000], NotificationPolicy::Fifo)).unwrap_err();
        assert!(
            matches!(err, LedgerError::Incompatible { found, .. } if found == version),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "left untouched");
    }
}

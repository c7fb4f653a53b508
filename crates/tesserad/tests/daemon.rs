//! The daemon with real clients (threads, each its own connection) in one process; see
//! `crates/tessera/tests/daemon_processes.rs` for separate processes.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tessera_client::proto::{ErrorCode, TenantClass};
use tessera_client::region::reason;
use tessera_client::{Client, ClientError, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, Departed, ExecutorKind, PolicyName};

use crate::common::config;

fn uf() -> TenantOptions {
    TenantOptions::user_facing(Duration::from_millis(200))
}

fn batch() -> TenantOptions {
    TenantOptions { class: TenantClass::Batch, ..uf() }
}

fn task(ms: u64) -> TaskRequest {
    TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(ms),
        memory: 1 << 20,
        input: b"abc".to_vec(),
        output_len: 7,
    }
}

const LONG: Duration = Duration::from_secs(20);

#[test]
fn both_classes_complete_and_outputs_come_back() {
    let d = Daemon::start(&config(PolicyName::Flexy)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let u = c.register(uf()).unwrap();
    let b = c.register(batch()).unwrap();
    let hb = c.submit(b, &task(300)).unwrap();
    let hu: Vec<u64> = (0..5).map(|_| c.submit(u, &task(20)).unwrap()).collect();
    for h in hu.into_iter().chain([hb]) {
        let done = c.wait(h, LONG).unwrap();
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        assert_eq!(done.output, b"abcabca", "the emulated kernel echoes its input");
        assert!(done.gpu.is_some());
    }
    let s = c.status().unwrap();
    assert_eq!(s.totals.uf_done, 5);
    assert_eq!(s.totals.batch_done, 1);
    assert_eq!(s.tenants.len(), 2);
    assert!(s.gpus.iter().all(|g| g.memory_used == 0), "task memory returned to the ledger");
}

#[test]
fn a_client_cannot_touch_another_clients_tenant() {
    let d = Daemon::start(&config(PolicyName::Priority)).unwrap();
    let mut a = Client::connect(d.socket()).unwrap();
    let mut b = Client::connect(d.socket()).unwrap();
    let ta = a.register(batch()).unwrap();
    let h = b.submit(ta, &task(10)).unwrap();
    let r = b.wait(h, LONG).unwrap();
    assert_eq!(r.outcome, Outcome::Failed(reason::UNKNOWN_TENANT));
    assert!(matches!(
        b.close(ta),
        Err(ClientError::Refused { code: ErrorCode::UnknownTenant, .. })
    ));
    // a's tenant is unharmed
    let h = a.submit(ta, &task(10)).unwrap();
    assert_eq!(a.wait(h, LONG).unwrap().outcome, Outcome::Done);
}

/// Issue 59: a task over the socket (the rings' baseline in the transport bench) runs
/// as a ring's does and is answered when it ends; another connection's tenant is not
/// this one's; a connection without rings is told to say hello; the rings' tasks of
/// the same connection are unaffected.
#[test]
fn a_task_runs_over_the_socket_as_over_the_rings() {
    use tessera_client::region::status;
    let d = Daemon::start(&config(PolicyName::Fair)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(batch()).unwrap();
    let h = c.submit(t, &task(30)).unwrap();
    assert_eq!(c.run_task_over_socket(t, Duration::from_millis(20)).unwrap(), status::DONE);
    assert_eq!(c.wait(h, LONG).unwrap().outcome, Outcome::Done, "the ring's task too");
    let mut other = Client::connect(d.socket()).unwrap();
    assert_eq!(other.run_task_over_socket(t, Duration::ZERO).unwrap(), status::FAILED);
    let mut bare = Client::connect_control(d.socket()).unwrap();
    let e = bare.run_task_over_socket(t, Duration::ZERO).unwrap_err();
    assert!(e.to_string().contains("send hello"), "{e}");
    assert_eq!(c.status().unwrap().totals.batch_done, 2);
}

#[test]
fn closing_a_tenant_cancels_its_queued_tasks() {
    let d = Daemon::start(&config(PolicyName::RoundRobin)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(batch()).unwrap();
    let handles: Vec<u64> = (0..6).map(|_| c.submit(t, &task(500)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(20));
    c.close(t).unwrap();
    let mut done = 0;
    let mut cancelled = 0;
    for h in handles {
        match c.wait(h, LONG).unwrap().outcome {
            Outcome::Done => done += 1,
            Outcome::Cancelled(r) => {
                assert_eq!(r, reason::TENANT_CLOSED);
                cancelled += 1
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(done, 2, "the two running tasks finish (two GPUs)");
    assert_eq!(cancelled, 4);
}

#[test]
fn bad_messages_are_refused_and_others_are_still_served() {
    let d = Daemon::start(&config(PolicyName::Flexy)).unwrap();
    let mut good = Client::connect(d.socket()).unwrap();
    let t = good.register(uf()).unwrap();
    let attacks: Vec<Vec<u8>> = vec![
        b"\x05\x00\x00\x00garbage-that-is-not-json".to_vec(),
        b"\x10\x00\x00\x00{\"type\":\"he".to_vec(), // truncated, then EOF
        (u32::MAX).to_le_bytes().to_vec(),          // oversized
        b"\x0b\x00\x00\x00{\"type\":42}".to_vec(),
        vec![0xff; 3], // not even a length
    ];
    for bytes in attacks {
        let mut s = UnixStream::connect(d.socket()).unwrap();
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut reply = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut reply);
    }
    let h = good.submit(t, &task(10)).unwrap();
    assert_eq!(good.wait(h, LONG).unwrap().outcome, Outcome::Done);
    // a registration before hello is refused, typed
    let mut control = Client::connect_control(d.socket()).unwrap();
    assert!(matches!(
        control.register(batch()),
        Err(ClientError::Refused { code: ErrorCode::BadRequest, .. })
    ));
    // an impossible memory request is refused, typed
    assert!(matches!(
        good.register(TenantOptions { memory: u64::MAX, ..batch() }),
        Err(ClientError::Refused { code: ErrorCode::NoCapacity, .. })
    ));
}

#[test]
fn a_second_daemon_on_the_same_socket_refuses_to_start() {
    let cfg = config(PolicyName::Flexy);
    let _d = Daemon::start(&cfg).unwrap();
    let err = Daemon::start(&cfg).unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");
}

#[test]
fn many_concurrent_clients_are_served() {
    let d = Daemon::start(&DaemonConfig {
        gpus: 4,
        executor: ExecutorKind::Emulated { speedup: 50.0 },
        ..config(PolicyName::Flexy)
    })
    .unwrap();
    let socket = d.socket().to_path_buf();
    let clients: Vec<_> = (0..256)
        .map(|i| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket).unwrap();
                let t = c.register(if i % 2 == 0 { uf() } else { batch() }).unwrap();
                let hs: Vec<u64> = (0..2).map(|_| c.submit(t, &task(5)).unwrap()).collect();
                hs.into_iter().all(|h| {
                    c.wait(h, Duration::from_secs(60))
                        .map(|x| x.outcome == Outcome::Done)
                        .unwrap_or(false)
                })
            })
        })
        .collect();
    let ok = clients.into_iter().map(|c| c.join().unwrap_or(false)).filter(|ok| *ok).count();
    assert_eq!(ok, 256);
    let mut c = Client::connect_control(&socket).unwrap();
    assert_eq!(c.status().unwrap().totals.uf_done + c.status().unwrap().totals.batch_done, 512);
}

#[test]
fn a_disconnected_client_leaves_nothing_behind() {
    for departed in [Departed::Cancel, Departed::Finish] {
        leaves_nothing_behind(departed);
    }
}

fn leaves_nothing_behind(departed: Departed) {
    let d =
        Daemon::start(&DaemonConfig { departed_running: departed, ..config(PolicyName::Priority) })
            .unwrap();
    {
        let mut c = Client::connect(d.socket()).unwrap();
        let t = c.register(batch()).unwrap();
        // 300 ms of wall time each (at 10x), the client gone after 100: the first has
        // started and none has ended, with room for a host that runs the daemon late
        // (2026-12-06's clean-clone run, tasks of 30 ms and 20 ms before leaving, saw
        // the running one finish: 7 cancelled, not 8)
        for _ in 0..8 {
            c.submit(t, &task(3000)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    } // dropped: the connection closes with tasks queued and running
    let mut c = Client::connect_control(d.socket()).unwrap();
    let mut s = c.status().unwrap();
    for _ in 0..200 {
        if s.gpus.iter().all(|g| g.busy == "idle") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        s = c.status().unwrap();
    }
    assert!(s.tenants.is_empty(), "{:?}", s.tenants);
    // priority with K = 1 of 2 GPUs: one batch task ran, seven were queued
    match departed {
        Departed::Cancel => {
            assert_eq!(s.totals.cancelled, 8, "queued and running tasks cancelled");
            assert_eq!((s.totals.batch_done, s.totals.resets), (0, 1), "its GPU was reset");
        }
        Departed::Finish => {
            assert_eq!(s.totals.cancelled, 7, "queued tasks cancelled");
            assert_eq!(s.totals.batch_done, 1, "the running task finished");
        }
    }
    assert!(s.gpus.iter().all(|g| g.memory_used == 0));
}

#[test]
fn shutdown_drains_cancels_queued_work_and_removes_the_socket() {
    let d = Daemon::start(&config(PolicyName::RoundRobin)).unwrap();
    let socket = d.socket().to_path_buf();
    let mut c = Client::connect(&socket).unwrap();
    let t = c.register(batch()).unwrap();
    let hs: Vec<u64> = (0..5).map(|_| c.submit(t, &task(200)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(10));
    let stopper = std::thread::spawn(move || d.shutdown());
    let outcomes: Vec<Outcome> = hs.into_iter().map(|h| c.wait(h, LONG).unwrap().outcome).collect();
    stopper.join().unwrap();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Done).count(), 2);
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Cancelled(reason::SHUTDOWN)).count(), 3);
    assert!(!socket.exists());
}

#[test]
fn shutdown_completes_even_if_the_socket_file_was_removed() {
    let d = Daemon::start(&config(PolicyName::Flexy)).unwrap();
    std::fs::remove_file(d.socket()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        d.shutdown();
        let _ = tx.send(());
    });
    assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok(), "shutdown hung");
}

#[test]
fn a_long_task_keeps_its_data_slot_while_shorter_ones_come_and_go() {
    let d =
        Daemon::start(&DaemonConfig { ring_slots: 4, ..config(PolicyName::RoundRobin) }).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(batch()).unwrap();
    let io = |tag: &str, ms: u64| TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(ms),
        memory: 0,
        input: tag.as_bytes().to_vec(),
        output_len: 4,
    };
    let long = c.submit(t, &io("LONG", 400)).unwrap();
    for round in 0..3 {
        let hs: Vec<u64> =
            (0..3).map(|i| c.submit(t, &io(&format!("s{round}{i}_"), 5)).unwrap()).collect();
        for h in hs {
            assert_eq!(c.wait(h, LONG).unwrap().outcome, Outcome::Done);
        }
    }
    let done = c.wait(long, LONG).unwrap();
    assert_eq!(done.output, b"LONG", "its slot was not reused by later tasks");
}

#[test]
fn limits_on_what_a_client_may_ask_are_enforced() {
    let d =
        Daemon::start(&DaemonConfig { max_task_ms: 1000, ..config(PolicyName::Flexy) }).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(batch()).unwrap();
    let h = c.submit(t, &task(5000)).unwrap();
    assert_eq!(
        c.wait(h, LONG).unwrap().outcome,
        Outcome::Failed(reason::BAD_REQUEST),
        "a task longer than max_task_ms"
    );
    let huge_sla = TenantOptions { sla: Duration::from_secs(u64::MAX / 2000), ..uf() };
    assert!(matches!(
        c.register(huge_sla),
        Err(ClientError::Refused { code: ErrorCode::BadRequest, .. })
    ));
}

#[test]
fn a_drain_does_not_wait_forever_for_a_long_task() {
    let d = Daemon::start(&DaemonConfig {
        drain_timeout_ms: 200,
        max_task_ms: 3_600_000,
        executor: ExecutorKind::Emulated { speedup: 1.0 },
        ..config(PolicyName::RoundRobin)
    })
    .unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(batch()).unwrap();
    let h = c.submit(t, &task(600_000)).unwrap(); // ten minutes
    std::thread::sleep(Duration::from_millis(50));
    let started = std::time::Instant::now();
    d.shutdown();
    assert!(started.elapsed() < Duration::from_secs(10), "drain honoured its timeout");
    assert_eq!(c.wait(h, LONG).unwrap().outcome, Outcome::Cancelled(reason::SHUTDOWN));
    // the daemon is gone: a wait now fails at once instead of hanging
    let h2 = c.submit(t, &task(1));
    if let Ok(h2) = h2 {
        let r = c.wait(h2, Duration::from_secs(30));
        assert!(matches!(r, Err(ClientError::DaemonGone)), "{r:?}");
    }
}

/// Two tenants co-located on one emulated GPU (least-loaded, two tasks per GPU) share
/// it as the shared-GPU model says: a 600 ms task and a 200 ms task started close
/// together, each wanting the whole GPU, run at half speed while both run, so the
/// short one runs 400 ms and the long one 800 ms — the prediction of the same model
/// run directly. `status` meanwhile shows both on the GPU with half of it each.
#[test]
fn two_co_located_tenants_finish_when_the_model_says() {
    use tessera_gpu::sharing::{SharedGpu, Sharing};
    // 2x, not the usual 10x: a loaded machine's scheduling jitter stays small in
    // emulated time, and B surely starts while A runs
    let cfg = DaemonConfig {
        gpus: 1,
        tasks_per_gpu: 2,
        executor: ExecutorKind::Emulated { speedup: 2.0 },
        ..config(PolicyName::LeastLoaded)
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut a = Client::connect(d.socket()).unwrap();
    let mut b = Client::connect(d.socket()).unwrap();
    let ta = a.register(batch()).unwrap();
    let tb = b.register(batch()).unwrap();
    let ha = a.submit(ta, &task(600)).unwrap();
    std::thread::sleep(Duration::from_millis(10)); // 20 ms of emulated time
    let hb = b.submit(tb, &task(200)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let g = loop {
        let g = a.status().unwrap().gpus.remove(0);
        // the core's books and the GPU thread's model meet a moment apart: wait for both
        let both = g.running.len() == 2 && g.running.iter().all(|r| r.share.is_some());
        if both || std::time::Instant::now() > deadline {
            break g;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(g.running.len(), 2, "{g:?}");
    assert_eq!(g.busy, "2 tasks");
    for r in &g.running {
        let share = r.share.expect("the emulated executor models shares");
        assert!((share - 0.5).abs() < 1e-9, "{g:?}");
    }
    let ra = a.wait(ha, LONG).unwrap();
    let rb = b.wait(hb, LONG).unwrap();
    assert_eq!((ra.outcome, rb.outcome), (Outcome::Done, Outcome::Done));
    // the model's prediction for the same workload, with B starting 20 ms after A
    let ms = 1_000_000u64;
    let mut model = SharedGpu::new(Sharing::Processor);
    model.start(0, 1, 600 * ms, 1.0).unwrap();
    model.start(20 * ms, 2, 200 * ms, 1.0).unwrap();
    let finish: std::collections::BTreeMap<u64, u64> =
        model.drain(u64::MAX).unwrap().into_iter().collect();
    let (want_a, want_b) = (finish[&1], finish[&2] - 20 * ms);
    assert_eq!((want_a, want_b), (800 * ms, 400 * ms));
    // emulated at 2x: a millisecond of wall-clock jitter is 2 ms here; the start gap
    // is not exactly 20 ms, which moves neither prediction while B ends first
    for (what, got, want) in [("A", ra.ran, want_a), ("B", rb.ran, want_b)] {
        let got = got.as_nanos() as u64;
        assert!(got.abs_diff(want) < 40 * ms, "{what} ran {got} ns, the model says {want} ns");
    }
}

/// A client that leaves while its task co-runs with another tenant's: its task is
/// dropped alone (no reset, which would kill the neighbour too), and the neighbour's
/// task completes.
#[test]
fn a_departing_co_located_tenant_does_not_take_its_neighbour_down() {
    let cfg = DaemonConfig {
        gpus: 1,
        tasks_per_gpu: 2,
        executor: ExecutorKind::Emulated { speedup: 2.0 },
        ..config(PolicyName::LeastLoaded)
    };
    let d = Daemon::start(&cfg).unwrap();
    let mut a = Client::connect(d.socket()).unwrap();
    let ta = a.register(batch()).unwrap();
    let ha = a.submit(ta, &task(400)).unwrap();
    {
        let mut b = Client::connect(d.socket()).unwrap();
        let tb = b.register(batch()).unwrap();
        b.submit(tb, &task(400)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    } // b's connection closes with its task running
    let r = a.wait(ha, LONG).unwrap();
    assert_eq!(r.outcome, Outcome::Done, "{r:?}");
    let s = a.status().unwrap();
    assert_eq!(s.totals.resets, 0, "nothing was reset");
    assert_eq!(s.totals.cancelled, 1, "b's task was cancelled");
}

/// A crowd costs nothing: while one client keeps the core busy, the rings of clients
/// that asked nothing for a while are no longer polled — their daemon-sleeping flag is
/// set, so each rings its doorbell with its next request — and such a request is
/// answered. Before, the core polled every ring on every pass (and set and cleared
/// every ring's flag on every sleep and wake-up), so an echo beside 1,000 idle clients
/// cost several times the echo alone.
#[test]
fn idle_rings_are_not_polled_and_still_answered() {
    let d = Daemon::start(&config(PolicyName::RoundRobin)).unwrap();
    let mut idle: Vec<Client> = (0..50).map(|_| Client::connect(d.socket()).unwrap()).collect();
    for c in &mut idle {
        c.echo().unwrap();
    }
    let socket = d.socket().to_path_buf();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let echoes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let busy = {
        let (stop, echoes) = (stop.clone(), echoes.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.echo().unwrap();
                echoes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let count = || echoes.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while count() < 1000 {
        assert!(std::time::Instant::now() < deadline, "the busy client is not answered");
        std::thread::sleep(Duration::from_millis(1));
    }
    // each idle client asks once more while the core is awake, so its ring is polled
    // again; then, while the busy client keeps the core awake (its echoes go on between
    // two looks), the quiet rings leave the polled list: their flags stay set
    for c in &mut idle {
        c.echo().unwrap();
    }
    let mut seen_awake = 0;
    while seen_awake < 20 {
        assert!(std::time::Instant::now() < deadline, "idle rings are still polled");
        let before = count();
        let all_quiet = idle.iter().all(|c| c.region().is_some_and(|r| r.daemon_sleeping()));
        std::thread::sleep(Duration::from_millis(2));
        if count() > before + 10 {
            seen_awake = if all_quiet { seen_awake + 1 } else { 0 };
        }
    }
    // and an idle client's next request is answered all the same
    for c in idle.iter_mut().step_by(7) {
        c.echo().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
}

/// A daemon that stops removes its ledger when no program uses it — also when its
/// threads are slow to run (a loaded node). Before, the thread holding the daemon's
/// ledger handle was left to wind down on its own, and the daemon looked whether the
/// ledger was in use before that thread had let go of it: under load, it kept the
/// ledger (seen in a clean-clone run of the suite). Stopped 20 times beside a spinning
/// thread per core.
#[test]
fn a_stopped_daemon_leaves_no_ledger_even_on_a_loaded_node() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinners: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut kept = 0;
    for _ in 0..20 {
        let cfg = config(PolicyName::Fair);
        let ledger = cfg.ledger.clone();
        let d = Daemon::start(&cfg).unwrap();
        let mut c = Client::connect(d.socket()).unwrap();
        let t = c.register(TenantOptions { memory: 1 << 20, ..batch() }).unwrap();
        let h = c.submit(t, &TaskRequest { memory: 1 << 20, ..Default::default() }).unwrap();
        c.wait(h, LONG).unwrap();
        drop(c);
        drop(d);
        kept += usize::from(ledger.exists());
        let _ = std::fs::remove_file(&ledger);
    }
    stop.store(true, Ordering::Relaxed);
    spinners.into_iter().for_each(|s| s.join().unwrap());
    assert_eq!(kept, 0, "stopped daemons kept their ledger {kept} times in 20");
}

/// Flexy's Algorithm 1 as written (issue 56): user-facing work runs only in the
/// user-facing pool, U = ceil(le x q / SLA) GPUs (at least K = 1 here), le the mean of
/// the last user-facing task times; a GPU outside it is not lent, even when it idles
/// with no batch work. Once le has learnt short tasks, two outstanding tasks make
/// U = 1, so a short task waits behind a long one on the pool's GPU while the other GPU
/// idles (the 196 ms wait). Before anything is learnt le is the SLA and U = q:
/// the same pair then takes both GPUs. (`round-robin` and `fair` are work conserving;
/// docs/policies/flexy.md says so.)
#[test]
fn flexys_user_facing_task_waits_for_the_pool_while_a_gpu_outside_it_idles() {
    let d = Daemon::start(&config(PolicyName::Flexy)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(uf()).unwrap();
    // le learns 10 ms tasks
    for _ in 0..10 {
        let h = c.submit(t, &TaskRequest { cost: Duration::from_millis(10), ..task(0) }).unwrap();
        assert_eq!(c.wait(h, LONG).unwrap().outcome, Outcome::Done);
    }
    // 2 s and 0.1 s of emulated time (200 ms and 10 ms at 10x)
    let long = c.submit(t, &TaskRequest { cost: Duration::from_secs(2), ..task(0) }).unwrap();
    let short = c.submit(t, &TaskRequest { cost: Duration::from_millis(100), ..task(0) }).unwrap();
    let mut done = Vec::new();
    for _ in 0..2 {
        let x = c.wait_any(LONG).unwrap();
        assert_eq!(x.outcome, Outcome::Done);
        done.push((x.handle, x.gpu));
    }
    let gpu_of = |h| done.iter().find(|(x, _)| *x == h).and_then(|(_, g)| *g);
    assert_eq!(
        done.iter().map(|(h, _)| *h).collect::<Vec<_>>(),
        vec![long, short],
        "the short task finished after the long one: it waited for the pool's GPU: {done:?}"
    );
    assert_eq!(gpu_of(long), gpu_of(short), "both ran on the pool's one GPU: {done:?}");
    // nothing learnt yet: le is the SLA, U = q = 2, and the short task takes the other GPU
    let d = Daemon::start(&config(PolicyName::Flexy)).unwrap();
    let mut c = Client::connect(d.socket()).unwrap();
    let t = c.register(uf()).unwrap();
    let long = c.submit(t, &TaskRequest { cost: Duration::from_secs(2), ..task(0) }).unwrap();
    let short = c.submit(t, &TaskRequest { cost: Duration::from_millis(100), ..task(0) }).unwrap();
    let first = c.wait_any(LONG).unwrap();
    let second = c.wait_any(LONG).unwrap();
    assert_eq!((first.handle, second.handle), (short, long), "the short task did not wait");
    assert_ne!(first.gpu, second.gpu);
}

//! The daemon against clients that do what the protocol does not expect: tamper with
//! their doorbell, flood, vanish, register thousands of tenants, ask for huge status
//! replies; and clients whose daemon dies under them.

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tessera_client::proto::{self, PROTOCOL, Request, TenantClass};
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

static N: AtomicU32 = AtomicU32::new(0);

fn config() -> DaemonConfig {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag = format!("hostile-{}-{n}", std::process::id());
    let ledger = dir.join(format!("ledger-{tag}"));
    let _ = std::fs::remove_file(&ledger);
    DaemonConfig {
        socket: dir.join(format!("d-{tag}.sock")),
        ledger,
        gpus: 2,
        executor: ExecutorKind::Emulated { speedup: 10.0 },
        policy: PolicyName::Flexy,
        ..DaemonConfig::default()
    }
}

fn batch() -> TenantOptions {
    TenantOptions {
        class: TenantClass::Batch,
        ..TenantOptions::user_facing(Duration::from_millis(200))
    }
}

fn task(ms: u64) -> TaskRequest {
    TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(ms),
        memory: 0,
        input: vec![],
        output_len: 0,
    }
}

const LONG: Duration = Duration::from_secs(20);

/// Say hello on a raw connection and take the two descriptors (region, doorbell).
fn raw_hello(socket: &std::path::Path) -> (UnixStream, Vec<OwnedFd>) {
    let mut s = UnixStream::connect(socket).unwrap();
    proto::write_frame(&mut s, &Request::Hello { protocol: PROTOCOL }).unwrap();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let mut buf = vec![0u8; 4096];
    rustix::net::recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut buf)],
        &mut cmsg,
        rustix::net::RecvFlags::empty(),
    )
    .unwrap();
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(r) = m {
            fds.extend(r);
        }
    }
    assert_eq!(fds.len(), 2, "welcome carries the region and the doorbell");
    (s, fds)
}

/// A client that makes its doorbell blocking and drains it in a loop used to freeze
/// the core (it read the shared eventfd) and eat everyone's wake-ups: another client's
/// 1 ms tasks took seconds.
#[test]
fn a_client_that_tampers_with_its_doorbell_cannot_freeze_the_core() {
    let d = Daemon::start(&config()).unwrap();
    let (_attacker, fds) = raw_hello(d.socket());
    let bell = fds.into_iter().nth(1).unwrap();
    rustix::fs::fcntl_setfl(&bell, rustix::fs::OFlags::empty()).unwrap(); // blocking
    std::thread::spawn(move || {
        let mut b = [0u8; 8];
        while rustix::io::read(&bell, &mut b).is_ok() {}
    });
    let mut victim = Client::connect(d.socket()).unwrap();
    let t = victim.register(batch()).unwrap();
    for _ in 0..20 {
        // let the core fall asleep between tasks, so every task needs a wake-up
        std::thread::sleep(Duration::from_millis(5));
        let h = victim.submit(t, &task(1)).unwrap();
        let done = victim.wait(h, Duration::from_secs(5)).expect("served despite the attacker");
        assert_eq!(done.outcome, Outcome::Done);
    }
    // and a registration is not blocked either
    let mut late = Client::connect(d.socket()).unwrap();
    late.register(batch()).unwrap();
}

/// A client ringing its doorbell in a loop is muted and everyone is still served.
#[test]
fn a_client_ringing_in_a_loop_does_not_stop_others() {
    let d = Daemon::start(&config()).unwrap();
    let (_attacker, fds) = raw_hello(d.socket());
    let bell = fds.into_iter().nth(1).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let ringer = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            let _ = rustix::io::write(&bell, &1u64.to_ne_bytes());
        }
    });
    let mut victim = Client::connect(d.socket()).unwrap();
    let t = victim.register(batch()).unwrap();
    for _ in 0..20 {
        let h = victim.submit(t, &task(1)).unwrap();
        assert_eq!(victim.wait(h, LONG).unwrap().outcome, Outcome::Done);
    }
    stop.store(true, Ordering::Relaxed);
    ringer.join().unwrap();
}

//! The shared region's unit tests: its rings, wake-ups and validation.

use super::*;

fn memfd(name: &str) -> File {
    File::from(rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).unwrap())
}

#[test]
fn rings_carry_descriptors_in_order_and_refuse_when_full() {
    let f = memfd("ring-test");
    let a = Region::create(&f, 4, 128).unwrap();
    let b = Region::map(&f).unwrap();
    for seq in 0..4 {
        assert!(a.push_request(&RequestDesc { seq, ..Default::default() }));
    }
    assert!(!a.push_request(&RequestDesc { seq: 4, ..Default::default() }), "full");
    for seq in 0..4 {
        assert_eq!(b.pop_request().unwrap().seq, seq);
    }
    assert!(b.pop_request().is_none());
    a.write_data(6, b"hello");
    assert_eq!(b.read_data(6, 5), b"hello");
    assert_eq!(b.read_data(2, 5), b"hello", "slot 6 % 4 = 2");
}

#[test]
fn a_sleeping_consumer_is_woken_across_threads() {
    let f = memfd("ring-wake");
    let a = Region::create(&f, 8, 64).unwrap();
    let b = Region::map(&f).unwrap();
    let t = std::thread::spawn(move || {
        b.wait_response(10, Duration::from_secs(10), &|| false).map(|r| r.seq)
    });
    std::thread::sleep(Duration::from_millis(20));
    assert!(a.push_response(&ResponseDesc { seq: 42, ..Default::default() }));
    assert_eq!(t.join().unwrap(), Some(42));
}

/// Issue 59: when the daemon says the host is busy, a client waiting for an answer
/// blocks (its `client_sleeping` flag set) at once instead of spinning its budget
/// out — here a budget the old code would have spun for seconds.
#[test]
fn a_client_blocks_at_once_on_a_busy_host() {
    let f = memfd("ring-busy");
    let a = Region::create(&f, 8, 64).unwrap();
    let b = Region::map(&f).unwrap();
    a.set_daemon_state(daemon_state::BUSY);
    assert!(b.host_busy() && b.daemon_sleeping(), "a busy host: ring, and block");
    let t = std::thread::spawn(move || {
        b.wait_response(u32::MAX, Duration::from_secs(30), &|| false).map(|r| r.seq)
    });
    let start = std::time::Instant::now();
    while a.header().client_sleeping.value.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(2), "the client never blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(a.push_response(&ResponseDesc { seq: 7, ..Default::default() }));
    assert_eq!(t.join().unwrap(), Some(7));
    a.set_daemon_sleeping(false);
    assert!(!a.daemon_sleeping() && !a.host_busy());
}

#[test]
fn foreign_files_are_rejected() {
    let f = memfd("junk");
    f.set_len(4096).unwrap();
    assert!(matches!(Region::map(&f), Err(RegionError::Invalid(_))));
}

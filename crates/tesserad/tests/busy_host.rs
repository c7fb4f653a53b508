//! Issue 59: on an oversubscribed host the daemon's core waits for a ring's requests on
//! the CPU its client asks from, so that their wake-ups do not queue behind CPU-bound
//! threads on another CPU (measured with `scripts/wake-latency.c`: 5.4 us p50 and 5.9 us
//! p99 on one CPU beside 8 CPU-bound processes on 2 cores, 22 us and 8 ms across two;
//! the timing itself is `tessera bench transport`'s, never asserted here).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_client::Client;
use tesserad::Daemon;
use tesserad::config::PolicyName;

use crate::common::config;

/// The CPUs a thread may run on, from `/proc/self/task/TID/status`.
fn cpus_of(tid: i32) -> Vec<usize> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned();
    list.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().unwrap()..=b.parse().unwrap()).collect::<Vec<_>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

fn pin_to(cpu: usize) {
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    rustix::thread::sched_setaffinity(None, &one).unwrap();
}

#[test]
fn on_a_busy_host_the_core_waits_on_its_clients_cpu_and_on_any_once_quiet() {
    let mine = cpus_of(rustix::thread::gettid().as_raw_nonzero().get());
    if mine.len() < 2 {
        eprintln!("SKIPPED: one CPU: nothing to follow");
        return;
    }
    let d = Daemon::start(&config(PolicyName::RoundRobin)).unwrap();
    let core = d.core_thread().expect("the core's thread id");
    let all = cpus_of(core);
    let target = *mine.last().unwrap();
    // 4 CPU-bound threads per CPU: more runnable than the host has CPUs, as the core
    // sees it in /proc/loadavg
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..4 * mine.len())
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
        })
        .collect();
    let socket = d.socket().to_path_buf();
    let followed = std::thread::spawn(move || {
        pin_to(target);
        let mut c = Client::connect(&socket).unwrap();
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(20) {
            for _ in 0..50 {
                c.echo().unwrap();
            }
            if cpus_of(core) == vec![target] {
                return true;
            }
        }
        false
    })
    .join()
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(
        followed,
        "the core's CPUs stayed {:?} while its client asked from CPU {target}",
        cpus_of(core)
    );
    // quiet again (the host is busy for 100 ms after its last sign): the core's whole
    // mask comes back, with its next pass over the rings or its next sleep
    let mut c = Client::connect(d.socket()).unwrap();
    let began = Instant::now();
    while cpus_of(core) != all && began.elapsed() < Duration::from_secs(20) {
        c.echo().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cpus_of(core), all, "the core stayed pinned on a quiet host");
}

//! The event log answers an operator's questions from the log alone: why a program
//! waited (a memory wait, its length, what was free), why one was refused, who came
//! and went; and `status` shows a viewer only its own uid's events.

use crate::common;

use std::time::{Duration, Instant};
use tessera_client::{Client, StatusFilter, TenantOptions};
use tesserad::Daemon;
use tesserad::config::PolicyName;

const MIB: u64 = 1 << 20;

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn why_a_program_waited_is_in_the_event_log() {
    let mut cfg = common::config(PolicyName::Fair);
    let file = cfg.socket.with_extension("events.jsonl");
    let _ = std::fs::remove_file(&file);
    cfg.events = Some(file.clone());
    cfg.gpu_memory_mib = 1024;
    let daemon = Daemon::start(&cfg).unwrap();
    let mut a = Client::connect(&cfg.socket).unwrap();
    let ta = a.register(TenantOptions::batch()).unwrap();
    let mut b = Client::connect(&cfg.socket).unwrap();
    let tb = b.register(TenantOptions::batch()).unwrap();
    // A holds 900 MiB; B asks for 300 and waits until A gives 600 back, 1.5 s later
    a.reserve(ta, 0, 900 * MIB, Some(Duration::ZERO), false).unwrap();
    let waiter = std::thread::spawn(move || {
        let began = Instant::now();
        b.reserve(tb, 0, 300 * MIB, None, false).unwrap();
        (b, began.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    a.unreserve(ta, 0, 600 * MIB).unwrap();
    let (mut b, waited) = waiter.join().unwrap();
    // a refusal, with its reason: B asks beyond the GPU's memory without waiting
    assert!(b.reserve(tb, 0, 2048 * MIB, Some(Duration::ZERO), false).is_err());
    a.close(ta).unwrap();
    // what a viewer of another uid may see is filtered; root sees the node's events
    let mut control = Client::connect_control(&cfg.socket).unwrap();
    let status = control.status_where(StatusFilter { events: 8, ..Default::default() }).unwrap();
    assert!(!status.events.is_empty() && status.events.len() <= 8);
    assert!(status.events.iter().any(|e| e.kind == "memory_wait_ended"), "{:?}", status.events);
    drop(daemon);

    let log = lines(&file);
    let _ = std::fs::remove_file(&file);
    let find = |kind: &str, tenant: u64| {
        log.iter()
            .find(|e| e["event"] == kind && e["tenant"] == tenant)
            .unwrap_or_else(|| panic!("no {kind} of tenant {tenant} in {log:#?}"))
            .clone()
    };
    find("admitted", ta);
    let wait = find("memory_wait", tb);
    assert_eq!(wait["gpu"], 0);
    assert_eq!(wait["bytes"], 300 * MIB);
    assert_eq!(wait["free"], 124 * MIB, "what was free when it began to wait");
    let ended = find("memory_wait_ended", tb);
    assert_eq!(ended["granted"], true);
    let logged = ended["waited_ms"].as_f64().unwrap();
    // the log's wait is the wait the program saw (the reply's trip aside)
    assert!(
        logged >= 1400.0 && logged <= waited.as_secs_f64() * 1e3 + 1.0,
        "logged {logged} ms, the program waited {waited:?}"
    );
    let refused = log
        .iter()
        .find(|e| e["event"] == "refused" && e["request"] == "reserve")
        .unwrap_or_else(|| panic!("no refusal in {log:#?}"));
    assert_eq!(refused["code"], "no_memory");
    assert!(refused["reason"].as_str().unwrap().len() > 10, "{refused}");
    find("departed", ta);
    // every line is stamped
    assert!(log.iter().all(|e| e["unix_ms"].as_u64().is_some() && e["uptime_s"].is_number()));
}

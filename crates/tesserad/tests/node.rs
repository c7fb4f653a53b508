//! The composed node policy through the daemon (`policy = "node"`), on three emulated
//! 1 GiB GPUs, each tenant a client of its own on a thread: a user-facing tenant keeps
//! its SLA in the pool; a Slurm job's two tenants weighted 1 : 3 share its GPU 1 : 3;
//! a newcomer that fits only beside the job is moved off the job's overloaded GPU
//! once the GPU that could not hold its memory is free.

mod common;

use std::time::{Duration, Instant};
use tessera_client::proto::{JobGrant, TenantClass};
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

const MIB: u64 = 1 << 20;
const SPEEDUP: f64 = 4.0;

fn task(ms: u64) -> TaskRequest {
    TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(ms),
        memory: 0,
        input: vec![],
        output_len: 0,
    }
}

/// Keep two tasks of `tenant` in flight until `until`; the GPU each ran on, in order.
fn keep_busy(c: &mut Client, tenant: u64, until: Instant) -> Vec<Option<u32>> {
    let mut gpus = Vec::new();
    let mut inflight = 0;
    while Instant::now() < until {
        while inflight < 2 {
            c.submit(tenant, &task(20)).unwrap();
            inflight += 1;
        }
        let done = c.wait_any(Duration::from_secs(30)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        gpus.push(done.gpu);
        inflight -= 1;
    }
    while inflight > 0 {
        let done = c.wait_any(Duration::from_secs(30)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        gpus.push(done.gpu);
        inflight -= 1;
    }
    gpus
}

#[test]
fn an_sla_tenant_keeps_its_sla_weights_hold_and_a_newcomer_is_moved() {
    let cfg = DaemonConfig {
        gpus: 3,
        gpu_memory_mib: 1024,
        sla_ms: 200,
        executor: ExecutorKind::Emulated { speedup: SPEEDUP },
        ring_slots: 64,
        ..common::config(PolicyName::Node)
    };
    let d = Daemon::start(&cfg).unwrap();
    let socket = d.socket().to_path_buf();
    let me = rustix::process::geteuid().as_raw();
    let mut admin = Client::connect(&socket).unwrap();
    admin
        .job_start(JobGrant {
            job: 31,
            uid: me,
            gpus: vec![1],
            shards: 4,
            partition: "batch".into(),
            qos: String::new(),
            comment: String::new(),
        })
        .unwrap();
    let start = Instant::now();
    let end = start + Duration::from_secs(4);
    // the 700 MiB tenant: busy for the first second, then gone
    let big = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let t =
                c.register(TenantOptions { memory: 700 * MIB, ..TenantOptions::batch() }).unwrap();
            keep_busy(&mut c, t, start + Duration::from_secs(1));
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    // the job's two tenants, weighted 1 : 3 within it
    let member = |weight: u32| {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let options = TenantOptions {
                job: Some(31),
                weight,
                memory: 100 * MIB,
                ..TenantOptions::batch()
            };
            let t = c.register(options).unwrap();
            let gpus = keep_busy(&mut c, t, end);
            assert!(gpus.iter().all(|g| *g == Some(1)), "a job's tenant runs on its GPU");
            let st = c.status().unwrap();
            st.tenants.iter().find(|x| x.tenant == t).map_or(0.0, |x| x.gpu_ms)
        })
    };
    let light = member(1);
    let heavy = member(3);
    std::thread::sleep(Duration::from_millis(200));
    // the newcomer: 600 MiB fits only beside the job until the 700 MiB tenant leaves
    let newcomer = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let t =
                c.register(TenantOptions { memory: 600 * MIB, ..TenantOptions::batch() }).unwrap();
            let gpus = keep_busy(&mut c, t, end);
            // the status names a tenant to its own uid while it is open
            (t, gpus, c.status().unwrap().balance)
        })
    };
    // the SLA tenant: one 20 ms request at a time, every 50 ms of emulated time
    let mut c = Client::connect(&socket).unwrap();
    let sla = Duration::from_millis(200);
    let uf = c
        .register(TenantOptions { class: TenantClass::UserFacing, sla, ..TenantOptions::batch() })
        .unwrap();
    let (mut met, mut total) = (0, 0);
    while Instant::now() < end {
        let sent = Instant::now();
        let h = c.submit(uf, &task(20)).unwrap();
        let done = c.wait(h, Duration::from_secs(30)).unwrap();
        assert_eq!(done.outcome, Outcome::Done);
        let latency = sent.elapsed().mul_f64(SPEEDUP);
        total += 1;
        met += usize::from(latency <= sla);
        std::thread::sleep(Duration::from_millis(50).div_f64(SPEEDUP));
    }
    big.join().unwrap();
    let (light_ms, heavy_ms) = (light.join().unwrap(), heavy.join().unwrap());
    let (moved_tenant, gpus, balance) = newcomer.join().unwrap();
    let attained = met as f64 / total as f64;
    eprintln!(
        "SLA met by {met} of {total}; job's tenants {light_ms:.0} : {heavy_ms:.0} ms; newcomer on {:?} then {:?}",
        gpus.first(),
        gpus.last()
    );
    assert!(attained >= 0.95, "SLA met by {met} of {total} requests");
    let ratio = light_ms / heavy_ms;
    assert!(
        (0.25..=0.42).contains(&ratio),
        "weights 1 : 3 received {light_ms:.0} : {heavy_ms:.0} ms"
    );
    // the newcomer started on the job's GPU and ended on the freed one
    assert_eq!(gpus.first().copied().flatten(), Some(1), "{gpus:?}");
    assert_eq!(gpus.last().copied().flatten(), Some(2), "{gpus:?}");
    let b = balance.expect("the node policy reports its balancer");
    assert!(
        b.recent.iter().any(|m| m.from == 1
            && m.to == 2
            && m.reason == "balance"
            && m.tenant == Some(moved_tenant)),
        "{b:?}"
    );
}

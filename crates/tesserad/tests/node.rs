//! The composed node policy through the daemon (`policy = "node"`), on three emulated
//! 1 GiB GPUs, each tenant a client of its own on a thread: a user-facing tenant keeps
//! its SLA in the pool; a Slurm job's two tenants weighted 1 : 3 share its GPU 1 : 3;
//! a newcomer that fits only beside the job is moved off the job's overloaded GPU
//! once the GPU that could not hold its memory is free. And with F-Reset's resets
//! (`reset_ms`), batch tasks a reset kills run again to the end.

use crate::common;

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

/// Keep two tasks of `tenant` in flight until `until`; when each ended and the GPU it
/// ran on, in order.
fn keep_busy(c: &mut Client, tenant: u64, until: Instant) -> Vec<(Instant, Option<u32>)> {
    let mut gpus = Vec::new();
    let mut inflight = 0;
    while Instant::now() < until {
        while inflight < 2 {
            c.submit(tenant, &task(20)).unwrap();
            inflight += 1;
        }
        let done = c.wait_any(Duration::from_secs(30)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        gpus.push((Instant::now(), done.gpu));
        inflight -= 1;
    }
    while inflight > 0 {
        let done = c.wait_any(Duration::from_secs(30)).expect("every task ends");
        assert_eq!(done.outcome, Outcome::Done, "{done:?}");
        gpus.push((Instant::now(), done.gpu));
        inflight -= 1;
    }
    gpus
}

/// A batch tenant of `memory_mib` on a thread of its own, kept busy until `until`.
fn busy_batch_tenant(
    socket: &std::path::Path,
    memory_mib: u64,
    until: Instant,
) -> std::thread::JoinHandle<Vec<(Instant, Option<u32>)>> {
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        let mut c = Client::connect(&socket).unwrap();
        let options = TenantOptions { memory: memory_mib * MIB, ..TenantOptions::batch() };
        let t = c.register(options).unwrap();
        keep_busy(&mut c, t, until)
    })
}

/// A user-facing tenant with a 200 ms SLA sending one 20 ms request at a time, one
/// every `gap` of emulated time until `until`, on a daemon running at `speedup`: its
/// requests within the SLA, and all of them. It says on `registered` once registered.
fn sla_tenant(
    socket: &std::path::Path,
    until: Instant,
    gap: Duration,
    speedup: f64,
    registered: Option<std::sync::mpsc::Sender<()>>,
) -> (usize, usize) {
    let mut c = Client::connect(socket).unwrap();
    let sla = Duration::from_millis(200);
    let uf = c
        .register(TenantOptions { class: TenantClass::UserFacing, sla, ..TenantOptions::batch() })
        .unwrap();
    if let Some(tx) = registered {
        tx.send(()).unwrap();
    }
    let (mut met, mut total) = (0, 0);
    while Instant::now() < until {
        let sent = Instant::now();
        let h = c.submit(uf, &task(20)).unwrap();
        let done = c.wait(h, Duration::from_secs(30)).unwrap();
        assert_eq!(done.outcome, Outcome::Done);
        total += 1;
        met += usize::from(sent.elapsed().mul_f64(speedup) <= sla);
        std::thread::sleep(gap.div_f64(speedup));
    }
    (met, total)
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
    // the SLA tenant first (the pool's reservation holds only once a service is
    // registered, and the story is of batch tenants arriving beside a service): one
    // 20 ms request at a time, every 50 ms of emulated time
    let (registered, sla_up) = std::sync::mpsc::channel();
    let sla = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            sla_tenant(&socket, end, Duration::from_millis(50), SPEEDUP, Some(registered))
        })
    };
    sla_up.recv().unwrap();
    // the 700 MiB tenant: busy for the first second, then gone
    let big = busy_batch_tenant(&socket, 700, start + Duration::from_secs(1));
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
            let ran = keep_busy(&mut c, t, end);
            assert!(ran.iter().all(|(_, g)| *g == Some(1)), "a job's tenant runs on its GPU");
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
            let gpus: Vec<Option<u32>> =
                keep_busy(&mut c, t, end).into_iter().map(|r| r.1).collect();
            // the status names a tenant to its own uid while it is open
            (t, gpus, c.status().unwrap().balance)
        })
    };
    let (met, total) = sla.join().unwrap();
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

/// Registered models inside the node: under `policy = "node"`, a tenant that registers
/// a model (resnet50, the measured V100 profile) is served by gpu-lets' server on a
/// partition, beside a plain SLA tenant in Flexy's pool and a backlogged batch tenant.
/// The model meets its SLO, the SLA tenant its SLA, and the batch tenant keeps off the
/// model's GPU while it serves. (The gpulets policy refuses tenants without a model;
/// the node policy serves them beside the models.)
#[test]
fn a_registered_model_is_served_on_gpulets_beside_sla_and_batch_tenants() {
    let gpulets = tesserad::config::GpuletsConfig { period_s: 4, ..Default::default() };
    let cfg = DaemonConfig {
        gpus: 3,
        gpu_memory_mib: 1024,
        sla_ms: 200,
        executor: ExecutorKind::Emulated { speedup: 1.0 },
        ring_slots: 1024,
        gpulets: gpulets.clone(),
        ..common::config(PolicyName::Node)
    };
    let inference = tesserad::inference::Inference::new(&gpulets).unwrap();
    let slo_ms = (2.0 * inference.whole_gpu_latency_ms("resnet50", 32).unwrap()).floor();
    // a third of what one GPU's gpu-lets can serve
    let (mut lo, mut hi) = (1.0, 4000.0);
    while hi - lo > 1.0 {
        let mid = f64::midpoint(lo, hi);
        if inference.schedulable(&[("resnet50", slo_ms, mid)], 1, &gpulets) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let rate = lo / 3.0;
    let d = Daemon::start(&cfg).unwrap();
    let socket = d.socket().to_path_buf();
    let start = Instant::now();
    let (wall, warm_up) = (Duration::from_secs(10), Duration::from_secs(4));
    let model = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let slo = Duration::from_millis(slo_ms as u64);
            let t = c.register_model("classifier", "resnet50", slo).unwrap();
            // evenly spaced requests; those sent after the warm-up are measured
            let gap = Duration::from_secs_f64(1.0 / rate);
            let (mut sent, mut met, mut measured, mut inflight) = (0u64, 0u64, 0u64, 0u64);
            let mut next = Instant::now();
            let request = TaskRequest {
                kernel: 0,
                cost: Duration::from_millis(1),
                memory: 0,
                input: vec![],
                output_len: 0,
            };
            let mut counted = std::collections::BTreeSet::new();
            while start.elapsed() < wall {
                if Instant::now() >= next {
                    let h = c.submit(t, &request).unwrap();
                    inflight += 1;
                    sent += 1;
                    if start.elapsed() >= warm_up {
                        counted.insert(h);
                    }
                    next += gap;
                }
                let left = next.saturating_duration_since(Instant::now());
                if let Ok(done) = c.wait_any(left.min(Duration::from_millis(2))) {
                    inflight -= 1;
                    if counted.remove(&done.handle) {
                        measured += 1;
                        met += u64::from(
                            done.outcome == Outcome::Done && done.queued + done.ran <= slo,
                        );
                    }
                }
            }
            while inflight > 0 {
                let done = c.wait_any(Duration::from_secs(30)).expect("every request ends");
                inflight -= 1;
                if counted.remove(&done.handle) {
                    measured += 1;
                    met +=
                        u64::from(done.outcome == Outcome::Done && done.queued + done.ran <= slo);
                }
            }
            let st = c.status().unwrap();
            let lets = st.tenants.iter().find(|x| x.tenant == t).and_then(|x| x.model.clone());
            (sent, measured, met, lets)
        })
    };
    // the batch tenant: two 20 ms tasks in flight
    let batch = busy_batch_tenant(&socket, 100, start + wall);
    // the plain SLA tenant: one 20 ms request every 100 ms
    let (met, total) = sla_tenant(&socket, start + wall, Duration::from_millis(100), 1.0, None);
    let (sent, measured, model_met, lets) = model.join().unwrap();
    let ran = batch.join().unwrap();
    let lets = lets.expect("the status shows the tenant's model");
    let model_gpus: Vec<u32> = lets.gpulets.iter().map(|(g, _, _)| *g).collect();
    eprintln!(
        "model: {rate:.0} req/s, SLO {slo_ms} ms, {sent} sent, {model_met} of {measured} \
         measured within the SLO, gpu-lets {:?}; SLA tenant {met} of {total}; batch ran on {:?}",
        lets.gpulets,
        ran.iter()
            .filter(|(at, _)| *at >= start + warm_up)
            .map(|(_, g)| *g)
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(!model_gpus.is_empty(), "the model has gpu-lets: {lets:?}");
    assert!(measured as f64 > 0.8 * rate * (wall - warm_up).as_secs_f64(), "{measured}");
    assert!(model_met as f64 >= 0.95 * measured as f64, "{model_met} of {measured} within the SLO");
    assert!(met as f64 >= 0.95 * total as f64, "SLA met by {met} of {total}");
    let beside: Vec<_> = ran
        .iter()
        .filter(|(at, g)| *at >= start + warm_up && g.is_some_and(|g| model_gpus.contains(&g)))
        .take(3)
        .collect();
    assert!(beside.is_empty(), "batch tasks on the model's GPU {model_gpus:?}: {beside:?}");
}

/// F-Reset inside the node policy through the daemon (`reset_ms`): a service's bursts
/// grow the pool onto the batch tenants' GPU, whose 50 ms tasks, longer than the 5 ms
/// reset, are killed and run again; every task of every tenant ends done. Before the
/// fix fair queuing still counted a killed task as its tenant's quantum running, never
/// served that tenant again, and its next wait timed out.
#[test]
fn a_batch_task_killed_by_a_reset_runs_again_through_the_daemon() {
    let cfg = DaemonConfig {
        gpus: 2,
        gpu_memory_mib: 1024,
        sla_ms: 200,
        reset_ms: 5,
        executor: ExecutorKind::Emulated { speedup: SPEEDUP },
        ..common::config(PolicyName::Node)
    };
    let d = Daemon::start(&cfg).unwrap();
    let socket = d.socket().to_path_buf();
    let end = Instant::now() + Duration::from_secs(3);
    // the service: bursts of twelve 20 ms requests every 300 ms of emulated time (the
    // pool, planned for twelve at once, takes both GPUs)
    let service = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let options = TenantOptions {
                class: TenantClass::UserFacing,
                sla: Duration::from_millis(200),
                ..TenantOptions::batch()
            };
            let uf = c.register(options).unwrap();
            let mut done = 0;
            while Instant::now() < end {
                let handles: Vec<_> = (0..12).map(|_| c.submit(uf, &task(20)).unwrap()).collect();
                for h in handles {
                    let r = c.wait(h, Duration::from_secs(10)).expect("every request ends");
                    assert_eq!(r.outcome, Outcome::Done, "{r:?}");
                    done += 1;
                }
                std::thread::sleep(Duration::from_millis(300).div_f64(SPEEDUP));
            }
            done
        })
    };
    // two batch tenants, each with two 50 ms tasks in flight until the end
    let batch: Vec<_> = (0..2)
        .map(|_| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket).unwrap();
                let t = c.register(TenantOptions::batch()).unwrap();
                let (mut inflight, mut done) = (0, 0);
                while Instant::now() < end || inflight > 0 {
                    while inflight < 2 && Instant::now() < end {
                        c.submit(t, &task(50)).unwrap();
                        inflight += 1;
                    }
                    let r = c.wait_any(Duration::from_secs(10)).expect("every batch task ends");
                    assert_eq!(r.outcome, Outcome::Done, "{r:?}");
                    inflight -= 1;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let requests = service.join().unwrap();
    let batch_done: Vec<u64> = batch.into_iter().map(|b| b.join().unwrap()).collect();
    let totals = Client::connect(&socket).unwrap().status().unwrap().totals;
    eprintln!("{requests} requests; batch tasks {batch_done:?}; {totals:?}");
    // the case at all: resets killed batch work, and it ran again to the end
    assert!(totals.resets > 0, "{totals:?}");
    assert!(batch_done.iter().all(|n| *n > 0), "{batch_done:?}");
    assert_eq!(totals.batch_done, batch_done.iter().sum::<u64>(), "{totals:?}");
    assert_eq!(totals.failed + totals.cancelled, 0, "{totals:?}");
}

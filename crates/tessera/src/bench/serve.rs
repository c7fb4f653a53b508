//! `tessera bench serve`: a client of a model served by the daemon (`policy =
//! "gpulets"`), as an application runs one: it registers the model, sends Poisson
//! requests, and times each from its own side, from the instant the request was due
//! (its Poisson arrival) to its completion — the SLO a user sees, not the daemon's
//! queue-plus-run time, and not shortened by a client late to send. A request the client could not send
//! (its window of requests in flight full) counts against the SLO, as a request the
//! server dropped does (issue 57: the daemon's test timed requests by the daemon's
//! clock and left turned-away ones out).

use anyhow::{Context, Result};
use clap::Args;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_client::{Client, ClientError, Outcome, TaskRequest};

#[derive(Debug, Args)]
pub struct ServeBenchArgs {
    /// The daemon's socket (default: $TESSERA_SOCKET, else the node's or the user's).
    #[arg(long, env = "TESSERA_SOCKET")]
    socket: Option<PathBuf>,
    /// The model's name for this tenant.
    #[arg(long, default_value = "model")]
    name: String,
    /// The latency profile the daemon serves it with (e.g. resnet50, ssd).
    #[arg(long)]
    profile: String,
    /// Its SLO, milliseconds.
    #[arg(long)]
    slo_ms: f64,
    /// Requests per second (Poisson).
    #[arg(long)]
    rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seconds at the start not counted (the daemon learns the rate, then schedules).
    #[arg(long, default_value_t = 0.0)]
    warm_up: f64,
    /// Seed of the arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// What the client measured, over the requests after the warm-up.
#[derive(Debug, Default, serde::Serialize)]
struct Measured {
    /// Requests sent and answered done.
    done: u64,
    /// Of those, answered within the SLO by this client's clock.
    met: u64,
    /// Dropped by the server as unable to meet the SLO.
    dropped: u64,
    /// Ended otherwise (failed, cancelled).
    other: u64,
    /// Not sent: the client's window of requests in flight was full.
    shed: u64,
    /// Share of the requests (done, dropped, other and shed) that met the SLO.
    met_share: f64,
    /// Latency percentiles of the done requests, ms, by this client's clock.
    p50_ms: f64,
    p99_ms: f64,
    /// Of the done requests, those the daemon's own account (queued plus run) puts
    /// within the SLO: the rest of a miss is the client's (late to send, late to read).
    server_met: u64,
    /// The 99th percentile of how late the client sent a request after it was due, ms.
    send_late_p99_ms: f64,
}

pub fn run(a: ServeBenchArgs) -> Result<()> {
    anyhow::ensure!(a.rate > 0.0 && a.rate.is_finite(), "--rate must be a positive number");
    anyhow::ensure!(a.seconds > 0.0 && a.slo_ms > 0.0, "--seconds and --slo-ms must be positive");
    anyhow::ensure!(a.warm_up >= 0.0 && a.warm_up < a.seconds, "--warm-up must be under --seconds");
    let socket = a.socket.clone().unwrap_or_else(crate::default_socket);
    let mut client = Client::connect(&socket)
        .with_context(|| format!("connecting to the daemon at {}", socket.display()))?;
    let slo = Duration::from_secs_f64(a.slo_ms / 1e3);
    let tenant = client
        .register_model(&a.name, &a.profile, slo)
        .with_context(|| format!("registering model {} ({})", a.name, a.profile))?;
    let request = TaskRequest {
        kernel: 0,
        cost: Duration::from_millis(1),
        memory: 0,
        input: Vec::new(),
        output_len: 0,
    };
    let mut rng = Pcg64::seed_from_u64(a.seed);
    let gap = Exp::new(a.rate).context("--rate")?;
    let (wall, warm_up) = (Duration::from_secs_f64(a.seconds), Duration::from_secs_f64(a.warm_up));
    let start = Instant::now();
    let mut next = start;
    // the measured requests in flight and when each was due: latency is timed from the
    // Poisson arrival, not from the send, so that a client late to send (its process
    // not running, a burst of arrivals) counts its lateness against the SLO as a user
    // would (issue 57 item 5; coordinated omission otherwise hides it)
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut in_flight = 0usize;
    let mut out = Measured::default();
    let mut latencies = Vec::new();
    let mut send_late = Vec::new();
    let mut record = |c: tessera_client::Completion, sent: &mut HashMap<u64, Instant>| {
        let Some(at) = sent.remove(&c.handle) else { return };
        match c.outcome {
            Outcome::Done => {
                let took = at.elapsed();
                out.done += 1;
                out.met += u64::from(took <= slo);
                out.server_met += u64::from(c.queued + c.ran <= slo);
                latencies.push(took.as_nanos() as u64);
            }
            Outcome::Failed(tessera_client::region::reason::DROPPED) => out.dropped += 1,
            _ => out.other += 1,
        }
    };
    while start.elapsed() < wall {
        if Instant::now() >= next {
            let measured = start.elapsed() >= warm_up;
            let at = next;
            match client.submit(tenant, &request) {
                Ok(h) => {
                    in_flight += 1;
                    if measured {
                        sent.insert(h, at);
                        send_late.push(at.elapsed().as_nanos() as u64);
                    }
                }
                Err(ClientError::TooManyInFlight(_)) if measured => out.shed += 1,
                Err(ClientError::TooManyInFlight(_)) => {}
                Err(e) => return Err(e).context("submitting a request"),
            }
            next += Duration::from_secs_f64(gap.sample(&mut rng));
        }
        let left = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(2));
        match client.wait_any(left) {
            Ok(c) => {
                in_flight -= 1;
                record(c, &mut sent);
            }
            Err(ClientError::TimedOut) => {}
            Err(e) => return Err(e).context("waiting for a completion"),
        }
    }
    while in_flight > 0 {
        let c = client.wait_any(Duration::from_secs(30)).context("every request ends")?;
        in_flight -= 1;
        record(c, &mut sent);
    }
    let all = out.done + out.dropped + out.other + out.shed;
    out.met_share = if all == 0 { 0.0 } else { out.met as f64 / all as f64 };
    let (p50, p99) = super::percentiles(&mut latencies);
    (out.p50_ms, out.p99_ms) = (p50 as f64 / 1e6, p99 as f64 / 1e6);
    out.send_late_p99_ms = super::percentiles(&mut send_late).1 as f64 / 1e6;
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!(
            "{} ({}): {} done, {} dropped, {} other, {} not sent; {:.2}% within {} ms by this \
             client's clock (p50 {:.2} ms, p99 {:.2} ms); {} within it by the daemon's account; \
             sent up to {:.2} ms late (p99)",
            a.name,
            a.profile,
            out.done,
            out.dropped,
            out.other,
            out.shed,
            100.0 * out.met_share,
            a.slo_ms,
            out.p50_ms,
            out.p99_ms,
            out.server_met,
            out.send_late_p99_ms
        );
    }
    Ok(())
}

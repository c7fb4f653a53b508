//! `tessera bench transport`: the data plane against its alternatives, in one run so
//! that the ratios hold on a noisy machine.

use super::percentiles;
use anyhow::Result;
use clap::Args;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tessera_client::{Client, TaskRequest, TenantOptions};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

#[derive(Debug, Args)]
pub struct TransportBenchArgs {
    /// Round trips per measurement.
    #[arg(long, default_value_t = 20_000)]
    iterations: usize,
    /// Clients in the throughput measurement.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Seconds of the throughput measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// One JSON object per measurement.
    #[arg(long)]
    json: bool,
}

#[inline(never)]
fn echo_inproc(x: u64) -> u64 {
    black_box(x)
}

fn time(n: usize, mut f: impl FnMut() -> Result<()>) -> Result<(u64, u64)> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_nanos() as u64);
    }
    Ok(percentiles(&mut samples))
}

pub fn run(a: TransportBenchArgs) -> Result<()> {
    let dir = std::env::temp_dir();
    let tag = std::process::id();
    let cfg = DaemonConfig {
        socket: dir.join(format!("tessera-bench-{tag}.sock")),
        ledger: dir.join(format!("tessera-bench-ledger-{tag}")),
        gpus: 4,
        executor: ExecutorKind::Emulated { speedup: 1.0 },
        policy: PolicyName::RoundRobin,
        ..DaemonConfig::default()
    };
    let daemon = Daemon::start(&cfg)?;
    let mut rows: Vec<(&str, u64, u64)> = Vec::new();
    eprintln!("transport bench: {} round trips each ...", a.iterations);
    let mut x = 0u64;
    rows.push((
        "inproc",
        time(a.iterations, || {
            x = echo_inproc(x + 1);
            Ok(())
        })?
        .0,
        0,
    ));
    let (p50, p99) = time(a.iterations, || {
        x = echo_inproc(x + 1);
        Ok(())
    })?;
    rows[0] = ("inproc", p50, p99);
    let mut c = Client::connect(&cfg.socket)?;
    for _ in 0..1000 {
        c.echo()?; // warm up
    }
    let (p50, p99) = time(a.iterations, || Ok(c.echo()?))?;
    rows.push(("shm", p50, p99));
    let (p50, p99) = time(a.iterations, || Ok(c.ping()?))?;
    rows.push(("socket", p50, p99));
    let tenant = c.register(TenantOptions::batch())?;
    let empty = TaskRequest::default();
    let (p50, p99) = time(a.iterations.min(5_000), || {
        let h = c.submit(tenant, &empty)?;
        c.wait(h, Duration::from_secs(10))?;
        Ok(())
    })?;
    rows.push(("task", p50, p99));

    eprintln!(
        "transport bench: {} clients submitting empty tasks for {} s ...",
        a.clients, a.seconds
    );
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let workers: Vec<_> = (0..a.clients)
        .map(|_| {
            let socket = cfg.socket.clone();
            std::thread::spawn(move || -> Result<u64> {
                let mut c = Client::connect(&socket)?;
                let t = c.register(TenantOptions::batch())?;
                let mut done = 0;
                while Instant::now() < deadline {
                    let h = c.submit(t, &TaskRequest::default())?;
                    c.wait(h, Duration::from_secs(30))?;
                    done += 1;
                }
                Ok(done)
            })
        })
        .collect();
    let start = Instant::now();
    let mut total = 0;
    for w in workers {
        total += w.join().map_err(|_| anyhow::anyhow!("client thread panicked"))??;
    }
    let per_s = total as f64 / start.elapsed().as_secs_f64();
    drop(c);
    daemon.shutdown();
    let _ = std::fs::remove_file(&cfg.ledger);
    let _ = std::fs::remove_dir_all(dir.join(format!("tessera-bench-ledger-{tag}.clients")));

    let mut out = std::io::stdout().lock();
    use std::io::Write;
    if a.json {
        for (t, p50, p99) in &rows {
            writeln!(out, "{}", serde_json::json!({"transport": t, "p50_ns": p50, "p99_ns": p99}))?;
        }
        writeln!(
            out,
            "{}",
            serde_json::json!({"transport": "task", "clients": a.clients, "tasks_per_s": per_s})
        )?;
        return Ok(());
    }
    let get = |name: &str| rows.iter().find(|r| r.0 == name).map_or(1, |r| r.1.max(1));
    writeln!(out, "round trips (p50 / p99), empty message or empty task")?;
    for (t, p50, p99) in &rows {
        writeln!(
            out,
            "{t:<8} {:>10.2} us {:>10.2} us",
            *p50 as f64 / 1000.0,
            *p99 as f64 / 1000.0
        )?;
    }
    writeln!(
        out,
        "\nsocket / shm echo: {:.1}x   task / shm echo: {:.1}x   shm echo / in-process call: {:.0}x",
        get("socket") as f64 / get("shm") as f64,
        get("task") as f64 / get("shm") as f64,
        get("shm") as f64 / get("inproc") as f64
    )?;
    writeln!(out, "{} clients, empty tasks, closed loop: {:.0} tasks/s", a.clients, per_s)?;
    Ok(())
}

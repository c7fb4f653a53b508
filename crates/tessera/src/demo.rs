//! `tessera demo`: the main job on a machine without GPUs. A daemon on an emulated
//! 4-GPU node, real client processes replaying a seeded Flexy-style mix (user-facing
//! jobs with a 200 ms SLA beside batch jobs with long tasks), a live summary, and a
//! table per policy — beside the simulator's numbers for the same workload.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_client::proto::TenantClass;
use tessera_client::{Client, Outcome, TaskRequest, TenantOptions};
use tessera_core::{Bytes, GpuSpec, Nanos};
use tessera_sim::engine::{SimOptions, Simulation};
use tessera_sim::perf::PerfModel;
use tessera_sim::workload::{Submission, Workload};
use tessera_sim::workloads::flexy::{FlexyWorkloadParams, Mix, generate};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Emulated time runs this many times faster than the wall clock.
    #[arg(long, env = "TESSERA_DEMO_SPEEDUP", default_value_t = 5.0)]
    speedup: f64,
    /// Jobs (client processes) per policy, from Flexy's W1 mix.
    #[arg(long, env = "TESSERA_DEMO_JOBS", default_value_t = 60)]
    jobs: usize,
    /// Load factor f of the job arrivals (0.25 fills four GPUs).
    #[arg(long, default_value_t = 0.3)]
    load: f64,
    /// Workload seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Directory for the run's files (socket, ledger, workload).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Significance level of the comparison of latency distributions (the two-sample
    /// Kolmogorov-Smirnov test): daemon and simulator agree when the distance between
    /// their user-facing latency distributions is below what sampling alone would give
    /// with this probability.
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
}

#[derive(Debug, Args)]
pub struct DemoClientArgs {
    #[arg(long)]
    socket: PathBuf,
    #[arg(long)]
    workload: PathBuf,
    #[arg(long)]
    job: usize,
    #[arg(long)]
    speedup: f64,
    /// Wall-clock start of the run, ms since the Unix epoch.
    #[arg(long)]
    epoch_ms: u64,
    /// Where to write each user-facing task's latency (emulated seconds, one per line),
    /// measured from the client's submit to its completion.
    #[arg(long)]
    latencies: Option<PathBuf>,
}

const GPUS: usize = 4;
const SLA_MS: u64 = 200;
const POLICIES: [(PolicyName, &str); 3] = [
    // the labels of `tessera sim flexy`: priority and Flexy each with one GPU reserved
    (PolicyName::RoundRobin, "RoundRobin"),
    (PolicyName::Priority, "P-MinRes1"),
    (PolicyName::Flexy, "F-MinRes1"),
];

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The body of one client process: replay one job of the workload.
pub fn run_client(a: DemoClientArgs) -> Result<()> {
    let w: Workload = serde_json::from_slice(&std::fs::read(&a.workload)?)?;
    let job = w.jobs.get(a.job).context("no such job")?;
    let arrive = Duration::from_nanos((job.arrival.0 as f64 / a.speedup) as u64);
    let start = UNIX_EPOCH + Duration::from_millis(a.epoch_ms) + arrive;
    if let Ok(wait) = start.duration_since(SystemTime::now()) {
        std::thread::sleep(wait);
    }
    let mut c = Client::connect(&a.socket)?;
    let class = if job.tenant.class.is_user_facing() {
        TenantClass::UserFacing
    } else {
        TenantClass::Batch
    };
    let t = c.register(TenantOptions {
        class,
        sla: Duration::from_millis(SLA_MS),
        weight: job.tenant.weight,
        priority: 0,
        memory: 0,
        job: None,
        token: None,
    })?;
    let mut next = 0;
    let mut outstanding = 0;
    let mut failed = 0;
    let mut submitted_at = std::collections::HashMap::new();
    let mut latencies = Vec::new();
    while next < job.tasks.len() || outstanding > 0 {
        while outstanding < job.window.max(1) && next < job.tasks.len() {
            let h = c.submit(
                t,
                &TaskRequest {
                    kernel: job.kernel,
                    cost: job.tasks[next].to_duration(),
                    memory: 64 << 20,
                    input: vec![],
                    output_len: 0,
                },
            )?;
            submitted_at.insert(h, Instant::now());
            next += 1;
            outstanding += 1;
        }
        let done = c.wait_any(Duration::from_secs(600))?;
        outstanding -= 1;
        if done.outcome != Outcome::Done {
            failed += 1;
        } else if let Some(t) = submitted_at.remove(&done.handle) {
            // the whole path a user sees: ring, core, queue, GPU, response, wake-up
            latencies.push(t.elapsed().as_secs_f64() * a.speedup);
        }
    }
    if let Some(path) = &a.latencies
        && class == TenantClass::UserFacing
    {
        let text: String = latencies.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(path, text)?;
    }
    if failed > 0 {
        bail!("{failed} tasks of job {} did not complete", a.job);
    }
    Ok(())
}

struct Row {
    policy: &'static str,
    sla_met: f64,
    utilization: f64,
    batch_per_min: f64,
    /// User-facing latencies measured by the clients, emulated seconds, sorted.
    latencies: Vec<f64>,
    wall_s: f64,
    /// How late a 1 ms timer fired on this host during the run, p99, wall ms.
    lag_ms: f64,
}

/// A thread that measures how far behind real time this host runs timers: it sleeps
/// 1 ms at a time and keeps how late each wake-up was. The daemon's emulated GPUs and
/// the clients run on the same timers, so a loaded host delays them as much: a delay
/// that is a fair part of the latencies compared makes the verdict the host's.
struct LagProbe {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<f64>>>,
}

impl LagProbe {
    fn start() -> LagProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut late = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                late.push((t.elapsed().as_secs_f64() - 1e-3).max(0.0) * 1e3);
            }
            late
        });
        LagProbe { stop, thread: Some(thread) }
    }

    /// The p99 lateness, ms.
    fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let mut late = self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default();
        late.sort_by(f64::total_cmp);
        quantile(&late, 0.99)
    }
}

/// The two-sample Kolmogorov-Smirnov statistic: the largest distance between the two
/// empirical CDFs. Both slices sorted.
fn ks_distance(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut d) = (0usize, 0usize, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

/// The distance two samples of these sizes from one distribution stay below with
/// probability 1 - alpha (the asymptotic KS critical value).
fn ks_critical(alpha: f64, n: usize, m: usize) -> f64 {
    let c = (-(alpha / 2.0).ln() / 2.0).sqrt();
    c * ((n + m) as f64 / (n.max(1) * m.max(1)) as f64).sqrt()
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn spawn_client(
    socket: &Path,
    workload: &Path,
    job: usize,
    speedup: f64,
    epoch_ms: u64,
    latencies: &Path,
) -> Result<Child> {
    Command::new(std::env::current_exe()?)
        .arg("demo-client")
        .arg("--socket")
        .arg(socket)
        .arg("--workload")
        .arg(workload)
        .args([
            "--job",
            &job.to_string(),
            "--speedup",
            &speedup.to_string(),
            "--epoch-ms",
            &epoch_ms.to_string(),
        ])
        .arg("--latencies")
        .arg(latencies)
        .stdout(Stdio::null())
        .spawn()
        .context("spawning a client process")
}

/// The demo's directory, removed when the demo ends however it ends (`made`: only if
/// the demo created it).
struct Scratch {
    made: Option<PathBuf>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(dir) = &self.made {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The demo's client processes, killed if the demo stops before they finish.
struct Clients(Vec<Child>);

impl Drop for Clients {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn run(a: DemoArgs) -> Result<()> {
    if a.speedup.is_nan() || a.speedup <= 0.0 || a.jobs == 0 {
        bail!("--speedup must be positive and --jobs at least 1");
    }
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        bail!("--alpha must be in (0, 1)");
    }
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tessera-demo-{}", std::process::id()))
    });
    // removed however the demo ends (an error, Ctrl-C), if the demo made it
    let _scratch = Scratch { made: (!dir.exists()).then(|| dir.clone()) };
    std::fs::create_dir_all(&dir)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())?;
    }
    let live_line = std::io::stderr().is_terminal();
    let sla = Nanos::from_millis(SLA_MS);
    let mut w = generate(&FlexyWorkloadParams {
        mix: Mix::W1,
        load: a.load,
        gpus: GPUS,
        sla,
        pareto_shape: 2.5,
        task_cv: 0.05,
        submission: Submission::Window,
        uf_outstanding: Default::default(),
        background_batch: true,
        // the daemon's utilization counts whole tasks: no NVSMI reading to compare with
        host_per_task: Nanos::ZERO,
        seed: a.seed,
    })?;
    // §III's background batch job is generated last; keep it beside the first
    // `jobs` jobs as an ordinary job with enough tasks to last until the last of those
    // arrives: the daemon's clients replay a fixed list of tasks, and the simulator
    // must run the same list
    let mut background = w.jobs.pop().context("the generator made no jobs")?;
    w.jobs.truncate(a.jobs);
    let last_arrival = w.jobs.last().map_or(Nanos::ZERO, |j| j.arrival);
    let mean = w.kernels[background.kernel as usize].mean;
    background.tasks.truncate((last_arrival.0.div_ceil(mean.0.max(1)) as usize).max(1));
    background.background = false;
    w.jobs.push(background);
    let first = w.jobs.first().map_or(Nanos::ZERO, |j| j.arrival);
    for j in &mut w.jobs {
        j.arrival = j.arrival - first;
    }
    let workload_path = dir.join("workload.json");
    std::fs::write(&workload_path, serde_json::to_vec(&w)?)?;
    let uf_jobs = w.jobs.iter().filter(|j| j.tenant.class.is_user_facing()).count();
    println!(
        "tessera demo: {} jobs ({} user-facing with a {SLA_MS} ms SLA, {} batch, one of them §III's background batch job; {} tasks) from Flexy's W1 mix at f={}, read as `tessera sim flexy`'s main reading uf2n-window (every job keeps up to 8 tasks outstanding, latency from submission), on 4 emulated GPUs at {}x speed",
        w.jobs.len(),
        uf_jobs,
        w.jobs.len() - uf_jobs,
        w.task_count(),
        a.load,
        a.speedup
    );

    let mut rows = Vec::new();
    for (policy, label) in POLICIES {
        let cfg = DaemonConfig {
            socket: dir.join("tesserad.sock"),
            ledger: dir.join(format!("ledger-{}", label.replace(' ', "_"))),
            gpus: GPUS,
            executor: ExecutorKind::Emulated { speedup: a.speedup },
            policy,
            reserve: 1,
            sla_ms: SLA_MS,
            ..DaemonConfig::default()
        };
        let _ = std::fs::remove_file(&cfg.ledger);
        let daemon = Daemon::start(&cfg)?;
        let probe = LagProbe::start();
        let wall_start = Instant::now();
        let epoch = now_ms() + 200;
        let lat_path = |j: usize| dir.join(format!("latencies-{}-{j}.txt", rows.len()));
        let mut children = Clients(Vec::new());
        for j in 0..w.jobs.len() {
            children.0.push(spawn_client(
                &cfg.socket,
                &workload_path,
                j,
                a.speedup,
                epoch,
                &lat_path(j),
            )?);
        }
        let mut control = Client::connect_control(&cfg.socket)?;
        let mut failures = 0;
        let mut last_print = Instant::now();
        loop {
            // keep the clients still running; count those that exited with an error
            if interrupted.load(Ordering::Relaxed) {
                // the clients are killed, the daemon stopped and the files removed as
                // their guards go
                eprintln!();
                bail!("interrupted: stopped the demo's clients and daemon and removed its files");
            }
            children.0.retain_mut(|c| match c.try_wait() {
                Ok(None) => true,
                Ok(Some(st)) => {
                    failures += usize::from(!st.success());
                    false
                }
                Err(_) => {
                    failures += 1;
                    false
                }
            });
            let alive = children.0.len();
            if last_print.elapsed() > Duration::from_millis(500) || alive == 0 {
                let s = control.status()?;
                let t = &s.totals;
                let sla =
                    if t.uf_done > 0 { 100.0 * t.uf_met as f64 / t.uf_done as f64 } else { 100.0 };
                let util = s.gpus.iter().map(|g| g.utilization).sum::<f64>() / s.gpus.len() as f64;
                let pools: String = s
                    .gpus
                    .iter()
                    .map(|g| {
                        if g.pool == "user_facing" {
                            'U'
                        } else if g.pool == "batch" {
                            'B'
                        } else {
                            '.'
                        }
                    })
                    .collect();
                let line = format!(
                    "  {label:<12} {:>5.1} s  clients {alive:>3}  user-facing {:>5} done, {sla:>5.1}% in SLA  batch {:>4}  util {:>4.1}%  pools [{pools}]",
                    wall_start.elapsed().as_secs_f64(),
                    t.uf_done,
                    t.batch_done,
                    100.0 * util
                );
                // rewritten in place for a person at a terminal; a line per update
                // into a log
                if live_line {
                    eprint!("\r{line}   ");
                } else {
                    eprintln!("{line}");
                }
                last_print = Instant::now();
            }
            if alive == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if live_line {
            eprintln!();
        }
        let s = control.status()?;
        let lag_ms = probe.finish();
        drop(control);
        daemon.shutdown();
        if failures > 0 {
            bail!("{failures} client processes failed under {label}");
        }
        let t = &s.totals;
        // the run's span in emulated time: from the first arrival (200 ms after the
        // daemon started) to now
        let span_s = (s.uptime_s - 0.2) * a.speedup;
        let busy_s: f64 = s.gpus.iter().map(|g| g.utilization * s.uptime_s * a.speedup).sum();
        let mut latencies = Vec::new();
        for j in 0..w.jobs.len() {
            if let Ok(text) = std::fs::read_to_string(lat_path(j)) {
                latencies.extend(text.lines().filter_map(|l| l.parse::<f64>().ok()));
            }
        }
        latencies.sort_by(f64::total_cmp);
        let sla_s = SLA_MS as f64 / 1000.0;
        rows.push(Row {
            policy: label,
            // measured where the user is: from the client's submit to its completion
            sla_met: if latencies.is_empty() {
                1.0
            } else {
                latencies.iter().filter(|&&l| l <= sla_s).count() as f64 / latencies.len() as f64
            },
            utilization: busy_s / (GPUS as f64 * span_s),
            batch_per_min: t.batch_done as f64 / (span_s / 60.0),
            latencies,
            wall_s: wall_start.elapsed().as_secs_f64(),
            lag_ms,
        });
    }
    // every policy's simulation of the same workload, to compare each daemon run with
    // its own policy's and with the others'
    let sims: Vec<(tessera_sim::RunMetrics, Vec<f64>)> = POLICIES
        .iter()
        .map(|(policy, _)| {
            let cfg = DaemonConfig {
                policy: *policy,
                reserve: 1,
                sla_ms: SLA_MS,
                ..DaemonConfig::default()
            };
            let mut m = simulate(&w, &cfg)?;
            let mut lat = std::mem::take(&mut m.uf_latencies_s);
            lat.sort_by(f64::total_cmp);
            Ok((m, lat))
        })
        .collect::<Result<_>>()?;

    println!(
        "\n{:<13} {:>20} {:>16} {:>16} {:>16} {:>20}",
        "policy",
        "SLA met (daemon/sim)",
        "p50 ms (d/s)",
        "p95 ms (d/s)",
        "GPU util (d/s)",
        "batch/min (d/s)"
    );
    for (r, (sim, lat)) in rows.iter().zip(&sims) {
        println!(
            "{:<13} {:>11.1}% /{:>5.1}% {:>8.0} /{:>5.0} {:>8.0} /{:>5.0} {:>8.1}% /{:>4.1}% {:>11.1} /{:>6.1}",
            r.policy,
            100.0 * r.sla_met,
            100.0 * sim.sla_met,
            1000.0 * quantile(&r.latencies, 0.5),
            1000.0 * quantile(lat, 0.5),
            1000.0 * quantile(&r.latencies, 0.95),
            1000.0 * quantile(lat, 0.95),
            100.0 * r.utilization,
            100.0 * sim.utilization,
            r.batch_per_min,
            sim.batch_done as f64 / (sim.makespan_s / 60.0),
        );
    }
    println!(
        "(emulated time; latency from the client's submit to its completion; each policy took {:.0} s of wall time)",
        rows.iter().map(|r| r.wall_s).fold(0.0, f64::max)
    );
    // the verdicts: each daemon run's user-facing latency distribution against every
    // policy's simulated one; "agrees" when the KS distance is below the distance that
    // sampling alone stays under with probability 1 - alpha
    println!(
        "\nKS distance of user-facing latency distributions, daemon (rows) vs simulator (columns); agree = below the alpha={} critical value",
        a.alpha
    );
    print!("{:<13}", "daemon \\ sim");
    for (_, label) in POLICIES {
        print!(" {label:>22}");
    }
    println!(" {:>10}", "nearest");
    let (mut own_agree, mut wrong_agree) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        print!("{:<13}", r.policy);
        let mut nearest = (f64::INFINITY, 0);
        for (j, (_, lat)) in sims.iter().enumerate() {
            let d = ks_distance(&r.latencies, lat);
            let crit = ks_critical(a.alpha, r.latencies.len(), lat.len());
            let agree = d <= crit;
            if i == j {
                own_agree += usize::from(agree);
            } else {
                wrong_agree += usize::from(agree);
            }
            // a tie with its own policy's simulation counts as its own
            if d < nearest.0 || (d == nearest.0 && j == i) {
                nearest = (d, j);
            }
            print!(" {:>9.3} (<={:.3}) {:>3}", d, crit, if agree { "yes" } else { "NO" });
        }
        let right = nearest.1 == i;
        println!(" {:>10}", if right { "own" } else { POLICIES[nearest.1].1 });
    }
    println!(
        "daemon agrees with its own policy's simulation for {own_agree} of {} policies; with another policy's simulation in {wrong_agree} of {} comparisons (each of those a comparison that cannot tell the two policies apart on this workload)",
        rows.len(),
        rows.len() * (rows.len() - 1)
    );
    // how far behind real time the host ran, in emulated time: latencies that differ
    // by that much differ because of the host, not the policy
    let worst = rows.iter().map(|r| r.lag_ms).fold(0.0, f64::max);
    let emulated_ms = worst * a.speedup;
    let bound_ms = LAG_TRUST * SLA_MS as f64;
    println!(
        "host lag: a 1 ms timer fired up to {worst:.1} ms late (p99 over each run; {emulated_ms:.0} ms of emulated time at {}x)",
        a.speedup
    );
    if emulated_ms > bound_ms {
        println!(
            "NOT TO BE TRUSTED: the host ran the emulation up to {emulated_ms:.0} ms (emulated) behind real time, more than {bound_ms:.0} ms ({}% of the {SLA_MS} ms SLA): the verdict above measures the host's load as much as the policies; run on an idle machine or with a lower --speedup",
            (LAG_TRUST * 100.0) as u32
        );
    }
    Ok(())
}

/// The host lag (emulated) beyond which the verdict is not to be trusted, as a fraction
/// of the SLA. A task's path waits on several timers (the client's, the core's, the
/// emulated GPU's), so its latency grows by a few lags; with user-facing latencies
/// around 150 ms, a shift of 10 ms (a twentieth of the 200 ms SLA) moves about as
/// much of their distribution as the KS test's critical distance at these sample
/// sizes (~0.09). Measured on this 2-core machine, idle but for the demo: timers 3.3
/// ms late at p99 (16 ms emulated at 5x), the daemon's p50 20-25 ms above the
/// simulator's, and two of three verdicts "NO".
const LAG_TRUST: f64 = 0.05;

fn simulate(w: &Workload, cfg: &DaemonConfig) -> Result<tessera_sim::RunMetrics> {
    let gpus = GpuSpec::uniform(GPUS, Bytes::mib(cfg.gpu_memory_mib));
    let policy = cfg
        .policy_config(GPUS)
        .ok_or_else(|| anyhow::anyhow!("the demo does not run the gpulets policy"))?
        .build(&gpus)?;
    let opts = SimOptions {
        gpus,
        perf: PerfModel {
            reset_latency: Nanos::from_millis(cfg.reset_ms.max(1)),
            ..PerfModel::default()
        },
        keep_latencies: true,
        event_budget: 50_000_000,
        // the daemon's emulated GPUs co-run what a co-locating policy places together
        sharing: if cfg.policy == tesserad::config::PolicyName::LeastLoaded {
            tessera_sim::engine::Sharing::Processor
        } else {
            tessera_sim::engine::Sharing::Exclusive
        },
        measure_gpus: false,
        sla_window: None,
    };
    Ok(Simulation::new(w, policy, opts).run()?)
}

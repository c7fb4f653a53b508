//! `tessera demo`: the main job on a machine without GPUs. A daemon on an emulated
//! 4-GPU node, real client processes replaying a seeded Flexy-style mix (user-facing
//! jobs with a 200 ms SLA beside batch jobs with long tasks), a live summary, and a
//! table per policy — beside the simulator's numbers for the same workload.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
    #[arg(long, default_value_t = 5.0)]
    speedup: f64,
    /// Jobs (client processes) per policy, from Flexy's W1 mix.
    #[arg(long, default_value_t = 60)]
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
    /// Largest difference, in percentage points, for daemon and simulator to agree.
    #[arg(long, default_value_t = 5.0)]
    tolerance: f64,
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
}

const GPUS: usize = 4;
const SLA_MS: u64 = 200;
const POLICIES: [(PolicyName, &str); 3] = [
    (PolicyName::RoundRobin, "round-robin"),
    (PolicyName::Priority, "priority"),
    (PolicyName::Flexy, "flexy (K=1)"),
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
        weight: 1,
        priority: 0,
        memory: 0,
    })?;
    let mut next = 0;
    let mut outstanding = 0;
    let mut failed = 0;
    while next < job.tasks.len() || outstanding > 0 {
        while outstanding < job.window.max(1) && next < job.tasks.len() {
            c.submit(
                t,
                &TaskRequest {
                    kernel: job.kernel,
                    cost: job.tasks[next].to_duration(),
                    memory: 64 << 20,
                    input: vec![],
                    output_len: 0,
                },
            )?;
            next += 1;
            outstanding += 1;
        }
        let done = c.wait_any(Duration::from_secs(600))?;
        outstanding -= 1;
        if done.outcome != Outcome::Done {
            failed += 1;
        }
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
    sim_sla_met: f64,
    sim_utilization: f64,
    sim_batch_per_min: f64,
    wall_s: f64,
}

fn spawn_client(
    socket: &Path,
    workload: &Path,
    job: usize,
    speedup: f64,
    epoch_ms: u64,
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
        .stdout(Stdio::null())
        .spawn()
        .context("spawning a client process")
}

pub fn run(a: DemoArgs) -> Result<()> {
    if a.speedup.is_nan() || a.speedup <= 0.0 || a.jobs == 0 {
        bail!("--speedup must be positive and --jobs at least 1");
    }
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tessera-demo-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir)?;
    let sla = Nanos::from_millis(SLA_MS);
    let mut w = generate(&FlexyWorkloadParams {
        mix: Mix::W1,
        load: a.load,
        gpus: GPUS,
        sla,
        pareto_shape: 2.5,
        task_cv: 0.05,
        submission: Submission::Window,
        seed: a.seed,
    })?;
    w.jobs.truncate(a.jobs);
    let first = w.jobs.first().map_or(Nanos::ZERO, |j| j.arrival);
    for j in &mut w.jobs {
        j.arrival = j.arrival - first;
    }
    let workload_path = dir.join("workload.json");
    std::fs::write(&workload_path, serde_json::to_vec(&w)?)?;
    let uf_jobs = w.jobs.iter().filter(|j| j.tenant.class.is_user_facing()).count();
    println!(
        "tessera demo: {} jobs ({} user-facing with a {SLA_MS} ms SLA, {} batch; {} tasks) from Flexy's W1 mix at f={}, on 4 emulated GPUs at {}x speed",
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
        let wall_start = Instant::now();
        let epoch = now_ms() + 200;
        let mut children: Vec<Child> = (0..w.jobs.len())
            .map(|j| spawn_client(&cfg.socket, &workload_path, j, a.speedup, epoch))
            .collect::<Result<_>>()?;
        let mut control = Client::connect_control(&cfg.socket)?;
        let mut failures = 0;
        let mut last_print = Instant::now();
        loop {
            // keep the clients still running; count those that exited with an error
            children.retain_mut(|c| match c.try_wait() {
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
            let alive = children.len();
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
                eprint!(
                    "\r  {label:<12} {:>5.1} s  clients {alive:>3}  user-facing {:>5} done, {sla:>5.1}% in SLA  batch {:>4}  util {:>4.1}%  pools [{pools}]   ",
                    wall_start.elapsed().as_secs_f64(),
                    t.uf_done,
                    t.batch_done,
                    100.0 * util
                );
                last_print = Instant::now();
            }
            if alive == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!();
        let s = control.status()?;
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
        let sim = simulate(&w, &cfg)?;
        rows.push(Row {
            policy: label,
            sla_met: if t.uf_done > 0 { t.uf_met as f64 / t.uf_done as f64 } else { 1.0 },
            utilization: busy_s / (GPUS as f64 * span_s),
            batch_per_min: t.batch_done as f64 / (span_s / 60.0),
            sim_sla_met: sim.sla_met,
            sim_utilization: sim.utilization,
            sim_batch_per_min: sim.batch_done as f64 / (sim.makespan_s / 60.0),
            wall_s: wall_start.elapsed().as_secs_f64(),
        });
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "\n{:<13} {:>18} {:>18} {:>22} {:>8}",
        "policy", "SLA met (daemon/sim)", "GPU util (d/s)", "batch tasks/min (d/s)", "agree"
    );
    let mut disagreements = 0;
    for r in &rows {
        let agree = (100.0 * (r.sla_met - r.sim_sla_met)).abs() <= a.tolerance
            && (100.0 * (r.utilization - r.sim_utilization)).abs() <= a.tolerance;
        disagreements += usize::from(!agree);
        println!(
            "{:<13} {:>9.1}% /{:>5.1}% {:>9.1}% /{:>5.1}% {:>13.1} /{:>6.1} {:>8}",
            r.policy,
            100.0 * r.sla_met,
            100.0 * r.sim_sla_met,
            100.0 * r.utilization,
            100.0 * r.sim_utilization,
            r.batch_per_min,
            r.sim_batch_per_min,
            if agree { "yes" } else { "NO" }
        );
    }
    println!(
        "(emulated time; each policy took {:.0} s of wall time)",
        rows.iter().map(|r| r.wall_s).fold(0.0, f64::max)
    );
    if disagreements == 0 {
        println!("daemon and simulator agree within {} points on every policy", a.tolerance);
    } else {
        println!(
            "daemon and simulator DO NOT agree within {} points for {disagreements} polic{}: the daemon pays real scheduling, wake-up and process start-up delays that the simulator does not model",
            a.tolerance,
            if disagreements == 1 { "y" } else { "ies" }
        );
    }
    Ok(())
}

fn simulate(w: &Workload, cfg: &DaemonConfig) -> Result<tessera_sim::RunMetrics> {
    let gpus = GpuSpec::uniform(GPUS, Bytes::mib(cfg.gpu_memory_mib));
    let policy = cfg.policy_config().build(&gpus)?;
    let opts = SimOptions {
        gpus,
        perf: PerfModel { reset_latency: Nanos::from_millis(cfg.reset_ms.max(1)), speed: 1.0 },
        keep_latencies: false,
        event_budget: 50_000_000,
    };
    Ok(Simulation::new(w, policy, opts).run()?)
}

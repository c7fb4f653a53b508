//! `tessera daemon` and `tessera status`.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use tessera_client::Client;
use tesserad::Daemon;
use tesserad::config::{BalanceName, DaemonConfig, ExecutorKind, PolicyName};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    RoundRobin,
    Priority,
    Flexy,
    FlexyPid,
    LeastLoaded,
    /// Inference serving on gpu-lets (see `[gpulets]` in docs/operators.md).
    Gpulets,
    /// FairGV's fair queuing: GPU time in proportion to tenant weights.
    Fair,
    /// Xen's credit scheduler on GPUs (FairGV's baseline).
    Credit,
    /// The composed node policy: Flexy's pool for user-facing tenants, gpu-lets for
    /// registered models, fair queuing by weight for batch tenants and Slurm jobs,
    /// DCUDA's balancer, memory-safe homes (on real GPUs: no migrations, no models).
    Node,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BalanceArg {
    /// Tenants stay where the policy placed them.
    None,
    /// DCUDA: migrate tenants between their tasks to balance the GPUs (see `[dcuda]`).
    Dcuda,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// TOML configuration file; the flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Control socket.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// GPU memory ledger file (also TESSERA_LEDGER, where the ledger's clients look).
    #[arg(long, env = "TESSERA_LEDGER")]
    ledger: Option<PathBuf>,
    /// GPUs: how many to emulate, or (with real GPUs) how many the driver must report.
    #[arg(long)]
    gpus: Option<usize>,
    /// Memory per emulated GPU, MiB.
    #[arg(long)]
    gpu_memory_mib: Option<u64>,
    /// Use emulated GPUs (the simulator's performance model in real time). Without
    /// `--emulate` or `--cuda` the daemon uses the CUDA driver, and refuses to start
    /// where none loads.
    #[arg(long, conflicts_with = "cuda")]
    emulate: bool,
    /// Use real GPUs through the CUDA driver (never yet run on one: see docs/operators.md).
    #[arg(long)]
    cuda: bool,
    /// The CUDA driver library to load (default: libcuda.so.1 from the loader's path).
    #[arg(long, requires = "cuda")]
    cuda_library: Option<PathBuf>,
    /// Emulated time runs this many times faster than the wall clock.
    #[arg(long)]
    speedup: Option<f64>,
    /// Scheduling policy (default: the configuration file's `policy`, else node).
    #[arg(long, value_enum)]
    policy: Option<PolicyArg>,
    /// Minimum reservation K.
    #[arg(long)]
    reserve: Option<usize>,
    /// Tasks that may co-run on one GPU (least-loaded).
    #[arg(long)]
    tasks_per_gpu: Option<usize>,
    /// GPU reset latency in ms (0: no resets).
    #[arg(long)]
    reset_ms: Option<u64>,
    /// User-facing SLA the policy plans for, ms.
    #[arg(long)]
    sla_ms: Option<u64>,
    /// Balance tenants across GPUs after placing them (with `--policy least-loaded` or
    /// `round-robin`, emulated GPUs).
    #[arg(long, value_enum)]
    balance: Option<BalanceArg>,
    /// Serve Prometheus metrics at GET /metrics on this `host:port` (say
    /// 127.0.0.1:9400) or Unix socket path (`[metrics] listen`).
    #[arg(long, value_name = "ADDRESS")]
    metrics_listen: Option<String>,
    /// Append every decision that changes a tenant's fate to FILE, one JSON object per
    /// line (`events`).
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
}

impl DaemonArgs {
    /// The configuration, and whether the executor was chosen (by a flag or the file)
    /// rather than left to the driver's presence.
    fn config(&self) -> Result<(DaemonConfig, bool)> {
        let mut c = match &self.config {
            Some(p) => DaemonConfig::from_file(p)?,
            None => DaemonConfig::default(),
        };
        let chosen = self.cuda
            || self.emulate
            || self.speedup.is_some()
            || match &self.config {
                Some(p) => DaemonConfig::file_chooses_executor(p)?,
                None => false,
            };
        if let Some(v) = &self.socket {
            c.socket = v.clone();
        }
        if let Some(v) = &self.ledger {
            c.ledger = v.clone();
        }
        if let Some(v) = self.gpus {
            c.gpus = v;
        }
        if let Some(v) = self.gpu_memory_mib {
            c.gpu_memory_mib = v;
        }
        if self.cuda || !chosen {
            c.executor = ExecutorKind::Cuda { library: self.cuda_library.clone(), gpus: self.gpus };
        } else if let ExecutorKind::Cuda { gpus, .. } = &mut c.executor
            && self.gpus.is_some()
        {
            *gpus = self.gpus;
        } else if self.emulate || self.speedup.is_some() {
            let current = match c.executor {
                ExecutorKind::Emulated { speedup } => speedup,
                ExecutorKind::Cuda { .. } => 1.0,
            };
            c.executor = ExecutorKind::Emulated { speedup: self.speedup.unwrap_or(current) };
        }
        if let Some(p) = self.policy {
            c.policy = match p {
                PolicyArg::RoundRobin => PolicyName::RoundRobin,
                PolicyArg::Priority => PolicyName::Priority,
                PolicyArg::Flexy => PolicyName::Flexy,
                PolicyArg::FlexyPid => PolicyName::FlexyPid,
                PolicyArg::LeastLoaded => PolicyName::LeastLoaded,
                PolicyArg::Gpulets => PolicyName::Gpulets,
                PolicyArg::Fair => PolicyName::Fair,
                PolicyArg::Credit => PolicyName::Credit,
                PolicyArg::Node => PolicyName::Node,
            };
        }
        if let Some(v) = self.tasks_per_gpu {
            c.tasks_per_gpu = v;
        }
        if let Some(b) = self.balance {
            c.balance = match b {
                BalanceArg::None => BalanceName::None,
                BalanceArg::Dcuda => BalanceName::Dcuda,
            };
        }
        if let Some(v) = self.reserve {
            c.reserve = v;
        }
        if let Some(v) = self.reset_ms {
            c.reset_ms = v;
        }
        if let Some(v) = self.sla_ms {
            c.sla_ms = v;
        }
        if let Some(v) = &self.metrics_listen {
            c.metrics.listen = Some(v.clone());
        }
        if let Some(v) = &self.events {
            c.events = Some(v.clone());
        }
        c.validate()?;
        Ok((c, chosen))
    }
}

pub fn run_daemon(a: DaemonArgs) -> Result<()> {
    let (cfg, chosen) = a.config()?;
    // before the banner: a SIGTERM sent as soon as the daemon says it listens drains it
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("installing signal handlers")?;
    let daemon = match Daemon::start(&cfg) {
        Ok(d) => d,
        Err(tesserad::DaemonError::Cuda(why)) if !chosen => anyhow::bail!(
            "no usable CUDA driver ({why}); to run on emulated GPUs instead, pass --emulate \
             (tesserad never falls back to them by itself)"
        ),
        Err(e) => return Err(e.into()),
    };
    eprintln!(
        "tesserad listening on {}: policy {}, {}; SIGTERM or Ctrl-C drains and stops",
        cfg.socket.display(),
        cfg.policy.name(),
        daemon.description()
    );
    if let Some(address) = daemon.metrics_address() {
        eprintln!("metrics: http://{address}/metrics");
    }
    if let Some(sig) = signals.forever().next() {
        eprintln!("signal {sig}: draining");
    }
    daemon.shutdown();
    Ok(())
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Control socket (default: $TESSERA_SOCKET, else the node's /run/tessera/tesserad.sock when it exists, else the per-user $XDG_RUNTIME_DIR/tesserad.sock).
    #[arg(long, env = "TESSERA_SOCKET")]
    socket: Option<PathBuf>,
    /// Refresh every SECONDS (default 2) until interrupted, in place on a terminal.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
    /// Print the raw JSON report.
    #[arg(long)]
    json: bool,
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<u64>,
    /// Only tenants of this uid.
    #[arg(long)]
    uid: Option<u32>,
    /// Only this GPU, and the tenants running on it.
    #[arg(long)]
    gpu: Option<u32>,
    /// Also show the daemon's N latest decisions (at most 32) that this user may see.
    #[arg(long, value_name = "N", default_value = "0")]
    events: u32,
}

/// A tenant's (or job's) class for a status table: `uf 200ms` or `batch`.
fn class_label(class: tessera_client::proto::TenantClass, sla_ms: u64) -> String {
    match class {
        tessera_client::proto::TenantClass::UserFacing => format!("uf {sla_ms}ms"),
        tessera_client::proto::TenantClass::Batch => "batch".into(),
    }
}

fn mib(b: u64) -> String {
    format!("{}MiB", b >> 20)
}

pub fn run_status(a: StatusArgs) -> Result<()> {
    use std::io::IsTerminal;
    let socket = a.socket.clone().unwrap_or_else(crate::default_socket);
    let mut client = Client::connect_control(&socket)
        .with_context(|| format!("no tesserad at {}", socket.display()))?;
    let Some(every) = a.watch else { return print_status(&a, &mut client) };
    if !(every > 0.0 && every.is_finite()) {
        anyhow::bail!("--watch needs a positive number of seconds, got {every}");
    }
    let in_place = std::io::stdout().is_terminal();
    loop {
        let mut page = Vec::new();
        print_status_to(&a, &mut client, &mut page)?;
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if in_place {
            // home and clear, then the page: refreshed where it stands
            write!(out, "\x1b[H\x1b[2J")?;
        } else {
            writeln!(out)?;
        }
        out.write_all(&page)?;
        out.flush()?;
        drop(out);
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
    }
}

fn print_status(a: &StatusArgs, client: &mut Client) -> Result<()> {
    print_status_to(a, client, &mut std::io::stdout().lock())
}

fn print_status_to(
    a: &StatusArgs,
    client: &mut Client,
    out: &mut impl std::io::Write,
) -> Result<()> {
    let s = client.status_where(tessera_client::StatusFilter {
        tenant: a.tenant,
        uid: a.uid,
        gpu: a.gpu,
        events: a.events,
    })?;
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&s)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "tesserad: policy {}, executor {}, up {:.0} s, {} tasks queued",
        s.policy,
        s.executor,
        s.uptime_s,
        s.tenants.iter().map(|t| t.queued).sum::<u64>()
    )?;
    writeln!(
        out,
        "{:<4} {:<12} {:<14} {:>20} {:>6}",
        "GPU", "pool", "busy", "memory used/total", "util"
    )?;
    for g in &s.gpus {
        writeln!(
            out,
            "{:<4} {:<12} {:<14} {:>20} {:>5.0}%",
            g.gpu,
            g.pool,
            g.busy,
            format!("{} / {}", mib(g.memory_used), mib(g.memory_total)),
            (100.0 * g.utilization).max(0.0) + 0.0
        )?;
        if let Some((u, state)) = &g.load {
            writeln!(out, "     placed demand {} of the GPU: {state}", percent(*u))?;
        }
        if !g.partitions.is_empty() {
            let sizes: Vec<String> = g.partitions.iter().map(|p| format!("{p}%")).collect();
            writeln!(out, "     partitions: {}", sizes.join(" + "))?;
        }
        // co-running tasks and the share of the GPU each holds now
        if g.running.len() > 1 {
            let shares: Vec<String> = g
                .running
                .iter()
                .map(|r| {
                    let who = r.tenant.map_or("busy".to_string(), |t| format!("tenant {t}"));
                    r.share.map_or(who.clone(), |x| format!("{who} {:.0}%", 100.0 * x))
                })
                .collect();
            writeln!(out, "     sharing: {}", shares.join(", "))?;
        }
    }
    writeln!(out, "\n{} tenants (those this user may see; root sees all)", s.tenants.len())?;
    writeln!(
        out,
        "{:<7} {:<7} {:<7} {:<12} {:>6} {:<6} {:>7} {:>7} {:>8} {:>8} {:>10} {:>10} {:>7}",
        "tenant",
        "pid",
        "uid",
        "class",
        "weight",
        "GPUs",
        "queued",
        "done",
        "failed",
        "SLA met",
        "memory",
        "GPU time",
        "demand"
    )?;
    for t in &s.tenants {
        let class = class_label(t.class, t.sla_ms);
        let gpus: Vec<String> = t.gpus.iter().map(u32::to_string).collect();
        writeln!(
            out,
            "{:<7} {:<7} {:<7} {:<12} {:>6} {:<6} {:>7} {:>7} {:>8} {:>8} {:>10} {:>10} {:>7}",
            t.tenant,
            t.pid,
            t.uid,
            class,
            t.weight,
            if gpus.is_empty() { "any".into() } else { gpus.join(",") },
            t.queued,
            t.done,
            t.not_done,
            t.sla_met.map_or("-".into(), |m| format!("{:.1}%", 100.0 * m)),
            mib(t.memory_held),
            format!("{:.1} s", t.gpu_ms / 1e3),
            // the latest kernel's share of the GPU, for programs under the interposer
            t.demand.map_or("-".into(), percent)
        )?;
    }
    if (s.policy == "fair" || s.policy == "credit") && !s.tenants.is_empty() {
        writeln!(
            out,
            "\nfair sharing (received: share of the GPU time charged over the last 10 s)"
        )?;
        writeln!(
            out,
            "{:<7} {:>6} {:>9} {:>9} {:>12}",
            "tenant", "weight", "entitled", "received", "waited (ms)"
        )?;
        let share = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.1}%", 100.0 * v));
        for t in &s.tenants {
            writeln!(
                out,
                "{:<7} {:>6} {:>9} {:>9} {:>12.0}",
                t.tenant,
                t.weight,
                share(t.entitled_share),
                share(t.received_share),
                t.waiting_ms
            )?;
        }
    }
    let models: Vec<_> =
        s.tenants.iter().filter_map(|t| t.model.as_ref().map(|m| (t, m))).collect();
    if let Some(sv) = &s.serving {
        writeln!(
            out,
            "\ninference serving: {} schedules made, {} checks found the rates not schedulable (the schedule in force kept serving)",
            sv.reorganizations, sv.refused
        )?;
    }
    if !models.is_empty() {
        writeln!(out, "inference models")?;
        writeln!(
            out,
            "{:<7} {:<16} {:<10} {:>8} {:>10} {:>8}  gpu-lets (GPU:size%/batch)",
            "tenant", "model", "profile", "SLO", "rate", "SLO met"
        )?;
        for (t, m) in models {
            let lets: Vec<String> =
                m.gpulets.iter().map(|(g, size, b)| format!("{g}:{size}%/{b}")).collect();
            writeln!(
                out,
                "{:<7} {:<16} {:<10} {:>6}ms {:>10} {:>8}  {}",
                t.tenant,
                m.name,
                m.profile,
                t.sla_ms,
                m.rate.map_or("-".into(), |r| format!("{r:.1}/s")),
                t.sla_met.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x)),
                if lets.is_empty() { "none yet".into() } else { lets.join(" ") }
            )?;
        }
    }
    if !s.jobs.is_empty() {
        writeln!(
            out,
            "\nSlurm jobs ({} of {}; {} shards per GPU)",
            s.jobs.len(),
            s.jobs_total,
            s.slurm_shards_per_gpu
        )?;
        writeln!(
            out,
            "{:<9} {:<7} {:<8} {:>6} {:<12} {:>10} {:>10}  tenants (waiting)",
            "job", "uid", "GPUs", "shards", "class", "entitled", "declared"
        )?;
        for j in &s.jobs {
            let class = class_label(j.class, j.sla_ms);
            let gpus: Vec<String> = j.gpus.iter().map(u32::to_string).collect();
            let tenants: Vec<String> = j.tenants.iter().map(u64::to_string).collect();
            writeln!(
                out,
                "{:<9} {:<7} {:<8} {:>6} {:<12} {:>10} {:>10}  {} ({})",
                j.job,
                j.uid,
                gpus.join(","),
                j.shards,
                class,
                mib(j.memory_entitled),
                mib(j.memory_declared),
                if tenants.is_empty() { "-".into() } else { tenants.join(",") },
                j.waiting
            )?;
        }
    }
    if let Some(b) = &s.balance {
        writeln!(out, "\nbalancer (DCUDA): {} migrations decided; recent:", b.migrations)?;
        for m in &b.recent {
            let who =
                m.tenant.map_or("another uid's tenant".to_string(), |t| format!("tenant {t}"));
            writeln!(
                out,
                "  {:>8.1} s  {who}: GPU {} -> GPU {} ({})",
                m.at_s, m.from, m.to, m.reason
            )?;
        }
    }
    let t = &s.totals;
    writeln!(
        out,
        "\nsince start: {} user-facing done ({} within SLA), {} batch done, {} failed, {} cancelled, {} resets, {} migrations",
        t.uf_done, t.uf_met, t.batch_done, t.failed, t.cancelled, t.resets, t.migrations
    )?;
    if !s.events.is_empty() {
        writeln!(out, "\nrecent events:")?;
        for e in &s.events {
            writeln!(out, "  {:>8.1} s  {:<18} {}", e.at_s, e.kind, e.text)?;
        }
    }
    Ok(())
}

/// A fraction as a whole percentage, never "-0%" (a float a hair below zero, or
/// negative zero, prints with its sign).
fn percent(fraction: f64) -> String {
    // `+ 0.0` turns negative zero into zero
    format!("{:.0}%", (100.0 * fraction).max(0.0) + 0.0)
}

#[cfg(test)]
mod percent_tests {
    #[test]
    fn no_negative_zero_percent() {
        assert_eq!(super::percent(-0.0), "0%");
        assert_eq!(super::percent(-1e-9), "0%");
        assert_eq!(super::percent(0.456), "46%");
    }
}

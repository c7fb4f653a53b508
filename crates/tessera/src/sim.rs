//! `tessera sim ...`

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use tessera_sim::experiments::claims::Verdict;
use tessera_sim::experiments::flexy::{self, FlexyConfig, Mode};
use tessera_sim::experiments::schedgpu;
use tessera_sim::workloads::flexy::Mix;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Flexy (SLA-aware elastic GPU pools): Figures 5, 6 and 7.
    Flexy(FlexyArgs),
    /// schedGPU (memory-safe co-scheduling): Table 3, Figure 11, Table 2.
    Schedgpu(SchedGpuArgs),
    /// gpu-lets (partitioned inference serving): Figures 4, 9 and 12-16.
    Gpulets(GpuletsArgs),
    /// DCUDA (load balancing with live migration): Figures 2 and 10-14, Table 2.
    Dcuda(DcudaArgs),
    /// FairGV (weighted fair sharing): Figures 8 and 9 so far.
    Fairgv(FairgvArgs),
    /// The composed node policy beside each single policy, on a mixed workload from
    /// Alibaba's GPU-sharing trace: SLA, fair shares, memory crashes, utilization, energy.
    Node(NodeArgs),
}

/// `--quick`: the experiment reduced to seconds. The docs' test runs every documented
/// `tessera sim` line verbatim with `TESSERA_SIM_QUICK=1`, so the flag also reads it.
#[derive(Debug, Args)]
pub struct Quick {
    /// Run a reduced configuration that takes every code path in seconds (also
    /// TESSERA_SIM_QUICK=1): a smoke run, whose numbers are not the paper's evaluation.
    #[arg(long, env = "TESSERA_SIM_QUICK", value_parser = clap::builder::BoolishValueParser::new())]
    quick: bool,
}

impl Quick {
    /// Says so on stderr when the run is reduced.
    fn announce(&self, what: &str) -> bool {
        if self.quick {
            eprintln!("tessera: --quick: {what} (a smoke run; its numbers are not the evaluation)");
        }
        self.quick
    }

    /// For an experiment that runs whole in seconds: says so when asked for less.
    fn whole_anyway(&self, takes: &str) {
        if self.quick {
            eprintln!("tessera: --quick: the whole evaluation runs, since it takes {takes}");
        }
    }
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Directory for results.json, report.md and node.svg.
    #[arg(long, default_value = "results/node")]
    out: PathBuf,
    /// Seed of the services' request arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where in the trace the window of pods starts, days (0 to 149).
    #[arg(long, default_value_t = 100.0)]
    start_day: f64,
    /// A development run: skip the held-out windows, so that a change to the policy is
    /// looked at on the development window only, never on the windows that judge it.
    #[arg(long)]
    development: bool,
    #[command(flatten)]
    quick: Quick,
}

#[derive(Debug, Args)]
pub struct FairgvArgs {
    /// Directory for results.json and report.md.
    #[arg(long, default_value = "results/fairgv")]
    out: PathBuf,
    #[command(flatten)]
    quick: Quick,
}

#[derive(Debug, Args)]
pub struct DcudaArgs {
    /// Directory for results.json, report.md and the figures.
    #[arg(long, default_value = "results/dcuda")]
    out: PathBuf,
    /// Seed of the random arrival orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Arrival orders per load (the paper: 50).
    #[arg(long, default_value_t = 50)]
    orders: usize,
    #[command(flatten)]
    quick: Quick,
}

#[derive(Debug, Args)]
pub struct GpuletsArgs {
    /// Directory for results.json and report.md.
    #[arg(long, default_value = "results/gpulets")]
    out: PathBuf,
    /// Seed of the 70/30 train/validation split.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    quick: Quick,
}

#[derive(Debug, Args)]
pub struct SchedGpuArgs {
    /// Directory for results.json, report.md and timeline.svg.
    #[arg(long, default_value = "results/schedgpu")]
    out: PathBuf,
    #[command(flatten)]
    quick: Quick,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WorkloadArg {
    W1,
    W2,
    W3,
    All,
}

#[derive(Debug, Args)]
pub struct FlexyArgs {
    /// Table II mix to run.
    #[arg(long, value_enum, default_value = "all")]
    workload: WorkloadArg,
    /// Workload instances per point (the paper averages 10).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Base seed; the same seed gives byte-identical output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// User-facing SLA for Figures 5 and 6, in milliseconds.
    #[arg(long, default_value_t = 200)]
    sla_ms: u64,
    /// The longer SLA at which Figure 7 also runs the reset policies, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    long_sla_ms: u64,
    /// Load factors f, comma-separated (0.125 heaviest .. 4 lightest).
    #[arg(long, value_delimiter = ',', default_values_t = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0])]
    loads: Vec<f64>,
    /// GPUs in the node.
    #[arg(long, default_value_t = 4)]
    gpus: usize,
    /// GPU reset latency in milliseconds (the paper measured ~1 s).
    #[arg(long, default_value_t = 1000)]
    reset_ms: u64,
    /// k: recent user-facing task times averaged into Flexy's estimate le.
    #[arg(long, default_value_t = 10)]
    history: usize,
    /// Pareto shape of job durations (assumed; the paper does not say).
    #[arg(long, default_value_t = 2.5)]
    pareto_shape: f64,
    /// Coefficient of variation of task times around Table I's means (assumed).
    #[arg(long, default_value_t = 0.05)]
    task_cv: f64,
    /// Readings of the workload, comma-separated; the first drives the main tables and
    /// figures. `uf1` / `uf2n`: user-facing jobs keep one / up to 2N tasks outstanding;
    /// `window` / `burst`: jobs submit as a sliding window / in bursts; a `-head`
    /// suffix measures latency from when a task reaches the head of its job's queue
    /// instead of from its submission.
    #[arg(long, value_delimiter = ',', default_values = ["uf2n-window", "uf2n-window-head", "uf1-window", "uf2n-burst"])]
    modes: Vec<String>,
    /// Leave out §III's background batch job ("there are always batch tasks present in
    /// the system"), which keeps one batch task outstanding until the last arrival.
    #[arg(long)]
    no_background_batch: bool,
    /// Milliseconds of each task outside its kernel (copies, driver calls), which
    /// NVSMI's utilization does not count (assumed; the paper gives no figure).
    #[arg(long, default_value_t = 10)]
    host_ms: u64,
    /// Directory for results.json, fig5/6/7.svg and report.md.
    #[arg(long, default_value = "results/flexy")]
    out: PathBuf,
    #[command(flatten)]
    quick: Quick,
}

pub fn run(cmd: SimCommand) -> Result<()> {
    match cmd {
        SimCommand::Flexy(args) => run_flexy(args),
        SimCommand::Schedgpu(args) => run_schedgpu(args),
        SimCommand::Gpulets(args) => run_gpulets(args),
        SimCommand::Dcuda(args) => run_dcuda(args),
        SimCommand::Fairgv(args) => run_fairgv(args),
        SimCommand::Node(args) => run_node(args),
    }
}

fn run_node(a: NodeArgs) -> Result<()> {
    use tessera_sim::experiments::node;
    let standard = node::NodeConfig::standard();
    let held_out_days = if a.development { Vec::new() } else { standard.held_out_days.clone() };
    let cfg = node::NodeConfig { seed: a.seed, start_day: a.start_day, held_out_days, ..standard };
    // the whole evaluation takes about 2 s of CPU: --quick is accepted (every
    // experiment takes it) and runs it whole
    a.quick.whole_anyway("about 2 s of CPU");
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} policies, {elapsed} elapsed")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    bar.set_message("simulating");
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let r = node::run_and_write(&cfg, &a.out, &progress)?;
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "wrote results.json, report.md and node.svg to {}", a.out.display())?;
    for x in &r.rows {
        writeln!(
            out,
            "  {:<26} SLA {:>5.1}%  max-min {:.2}  OOM tenants {}  utilization {:>5.1}%  energy {:>6.0} J",
            x.policy,
            100.0 * x.sla_met,
            x.max_min_ratio,
            x.crashed_tenants,
            100.0 * x.utilization,
            x.energy_j
        )?;
    }
    write_verdicts(&mut out, &r.claims, 12)?;
    Ok(())
}

fn run_fairgv(a: FairgvArgs) -> Result<()> {
    use tessera_sim::experiments::fairgv;
    let seconds = if a.quick.announce(&format!(
        "{} s of simulated time per run instead of {}",
        fairgv::QUICK_SECONDS,
        fairgv::SECONDS
    )) {
        fairgv::QUICK_SECONDS
    } else {
        fairgv::SECONDS
    };
    let r = fairgv::run_for_and_write(seconds, &a.out)?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "wrote results.json and report.md to {}", a.out.display())?;
    for x in &r.rows {
        writeln!(
            out,
            "  {:<14} {:<5} {:<12} MMR {:.3}  overhead {:.3}",
            x.setup, x.benchmark, x.scheduler, x.mmr, x.overhead
        )?;
    }
    write_verdicts(&mut out, &r.claims, 22)?;
    Ok(())
}

fn run_dcuda(a: DcudaArgs) -> Result<()> {
    use tessera_sim::experiments::dcuda;
    if a.orders == 0 {
        bail!("--orders must be at least 1");
    }
    let cfg = dcuda::DcudaConfig { orders: a.orders, ..dcuda::DcudaConfig::paper(a.seed) };
    let r = if a.quick.announce("2 arrival orders per load, no sensitivity re-runs") {
        let cache = dcuda::RunCache::default();
        let mut r = dcuda::run_cached(&cfg.quick(), &cache)?;
        dcuda::add_slicing_cause(&mut r, &cache)?;
        dcuda::write(&r, &a.out)?;
        r
    } else {
        dcuda::run_and_write(&cfg, &a.out)?
    };
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "wrote results.json, report.md and fig10-14.svg to {}", a.out.display())?;
    for m in &r.summaries {
        writeln!(
            out,
            "  {:<7} {:<13} utilization {:>5.1}%  overloaded {:>5.1}%  time/solo {:.2}  energy {:>6.0} J  migrations {:.1}",
            m.load,
            m.policy,
            100.0 * m.utilization,
            100.0 * m.overloaded,
            m.mean_normalized,
            m.energy_j,
            m.migrations
        )?;
    }
    write_verdicts(&mut out, &r.claims, 22)?;
    Ok(())
}

fn run_gpulets(a: GpuletsArgs) -> Result<()> {
    use tessera_sim::experiments::gpulets;
    let cfg = gpulets::GpuletsConfig::paper(a.seed);
    let r = if a.quick.announce(&format!(
        "{} of the simulated durations, no sensitivity re-runs",
        gpulets::QUICK_SCALE
    )) {
        let r = gpulets::run(&cfg.quick())?;
        gpulets::write(&r, &a.out)?;
        r
    } else {
        gpulets::run_and_write(&cfg, &a.out)?
    };
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "wrote results.json and report.md to {}", a.out.display())?;
    writeln!(
        out,
        "interference model on {} V100 samples ({} train / {} validation): 90% within {:.2}% (paper 10.26%), 95% within {:.2}% (paper 13.98%)",
        r.samples,
        r.split.0,
        r.split.1,
        100.0 * r.fitted_errors.p90,
        100.0 * r.fitted_errors.p95
    )?;
    write_verdicts(&mut out, &r.claims, 10)?;
    Ok(())
}

fn run_schedgpu(a: SchedGpuArgs) -> Result<()> {
    // the whole evaluation takes well under a second: --quick is accepted (every
    // experiment takes it) and runs it whole
    a.quick.whole_anyway("under a second");
    let (mut results, series) = schedgpu::run()?;
    results.sensitivity = schedgpu::sensitivity(&results)?;
    schedgpu::write_outputs(&results, &series, &a.out)?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "wrote results.json, report.md and timeline.svg to {}\n", a.out.display())?;
    writeln!(
        out,
        "{:<20} {:<14} {:>11} {:>9} {:>9} {:>9}",
        "scenario", "configuration", "makespan s", "paper s", "GPU util", "memory"
    )?;
    for s in &results.scenarios {
        writeln!(
            out,
            "{:<20} {:<14} {:>11.1} {:>9} {:>8.1}% {:>8.1}%",
            s.scenario,
            s.configuration,
            s.makespan_s,
            s.paper_makespan_s.map_or("-".into(), |v| format!("{v:.1}")),
            100.0 * s.gpu_util,
            100.0 * s.memory_util
        )?;
    }
    Ok(())
}

fn run_flexy(a: FlexyArgs) -> Result<()> {
    let mixes = match a.workload {
        WorkloadArg::W1 => vec![Mix::W1],
        WorkloadArg::W2 => vec![Mix::W2],
        WorkloadArg::W3 => vec![Mix::W3],
        WorkloadArg::All => Mix::ALL.to_vec(),
    };
    if a.pareto_shape <= 1.0 {
        bail!(
            "--pareto-shape must be greater than 1 (the mean job duration is infinite otherwise)"
        );
    }
    let cfg = FlexyConfig {
        mixes,
        loads: a.loads,
        runs: a.runs,
        seed: a.seed,
        sla_ms: a.sla_ms,
        long_sla_ms: a.long_sla_ms,
        gpus: a.gpus,
        reset_ms: a.reset_ms,
        history: a.history,
        pareto_shape: a.pareto_shape,
        task_cv: a.task_cv,
        modes: a
            .modes
            .iter()
            .map(|m| {
                Mode::parse(m).with_context(|| {
                    format!(
                        "unknown mode {m:?}: use uf1-window, uf1-burst, uf2n-window or uf2n-burst, \
                         each optionally with -head"
                    )
                })
            })
            .collect::<Result<_>>()?,
        background_batch: !a.no_background_batch,
        host_ms: a.host_ms,
    };
    let cfg =
        if a.quick.announce("1 run per point, the heaviest and lightest loads, the main reading") {
            cfg.quick()
        } else {
            cfg
        };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} runs, {elapsed} elapsed, ~{eta} left",
        )
        .context("progress bar template")?
        .progress_chars("=> "),
    );
    bar.set_message("simulating");
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let cache = flexy::RunCache::default();
    let mut results = flexy::run_cached(&cfg, &progress, &cache)?;
    bar.set_message("constants of ours at low and high values");
    bar.set_position(0);
    results.sensitivity = flexy::sensitivity(&results, &progress, &cache)?;
    let (asked, simulated) = cache.counts();
    tracing::info!("flexy: {asked} runs, {simulated} simulated, the rest repeats");
    bar.finish_and_clear();
    flexy::write_outputs(&results, &a.out)?;

    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(
        out,
        "{} runs simulated; wrote results.json, report.md and fig5/6/7 SVGs to {}",
        results.records.len(),
        a.out.display()
    )?;
    let main = results.config.modes[0].label();
    writeln!(out, "\nclaims under the main reading ({main}); report.md has every reading:")?;
    for c in results.claims.iter().filter(|c| c.scope == main) {
        let verdict = match c.verdict {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "DOES NOT HOLD",
            Verdict::NotMeasured => "not measured",
        };
        let ours = c.ours.map_or("-".into(), |x| c.unit.show(x));
        writeln!(out, "  [{verdict:>13}] {}: ours {ours} — {}", c.id, c.paper)?;
    }
    Ok(())
}

/// Each claim's id and verdict, one per line, ids padded to `width`.
fn write_verdicts(
    out: &mut impl std::io::Write,
    claims: &[tessera_sim::experiments::claims::Claim],
    width: usize,
) -> std::io::Result<()> {
    for c in claims {
        writeln!(out, "  {:<width$} {}", c.id, c.verdict.label())?;
    }
    Ok(())
}

//! `tessera selftest`: what a user with a GPU node runs after installing, needing
//! nothing but the driver. It uses the daemon at `--socket` (or the node's, when one
//! answers) or starts its own on the node's GPUs (fair queuing), runs its own programs
//! as tenants (`tessera selftest-worker`, under `tessera run`; their kernels are PTX
//! the driver compiles), and prints a table of checks, each PASS, FAIL or SKIPPED with
//! what it measured (`--json`: the same as one object). On the fake driver (a GPU named
//! "Fake GPU …") the same checks run as a stand-in, and say so.
//!
//! Every number is measured by the programs themselves or by the driver and NVML, not
//! taken from tessera's own accounting: fair shares from the kernels' own `%globaltimer`
//! stamps, memory from `cuMemGetInfo`, NVML and allocation results.

mod checks;
mod tenants;
pub(crate) mod worker;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use tenants::Tenants;

#[derive(Debug, Args)]
pub struct SelftestArgs {
    /// A running daemon to test through; without it, the node's daemon when one
    /// answers at the default socket, else a daemon of the self-test's own on this
    /// node's GPUs (policy fair), stopped at the end.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// How long each fair-share check runs, seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// The memory limit of the tenants that test memory, MiB.
    #[arg(long, default_value_t = 1024)]
    memory_mib: u64,
    /// Launches timed on each side of the launch-path check.
    #[arg(long, default_value_t = 20000)]
    launches: usize,
    /// Rounds of the launch-path check: each runs a program directly and one through
    /// tessera back to back (the launches split among them). Each program times its
    /// own `cuLaunchKernel` beside the driver's in alternating blocks; the verdict is
    /// the median over the rounds of that in-process difference.
    #[arg(long, default_value_t = 7)]
    launch_rounds: usize,
    /// Only these checks (comma-separated: share, memory, kill, launch, fair-weights,
    /// fair-kernels).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The CUDA driver library (default: libcuda.so.1 from the loader's path).
    #[arg(long)]
    driver: Option<PathBuf>,
    /// The interposer (default: libtessera_cuda.so beside tessera, or the installed one).
    #[arg(long)]
    preload: Option<PathBuf>,
    /// The CPU the launch check's programs run on (the last this process may use),
    /// which a daemon the self-test starts is kept off.
    #[arg(skip)]
    launch_cpu: Option<usize>,
}

/// A check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Verdict {
    Pass,
    Fail,
    Skipped,
}

/// One line of the table.
#[derive(Debug, Serialize)]
pub(crate) struct Check {
    pub name: &'static str,
    pub result: Verdict,
    /// What was measured, in words and numbers.
    pub measured: String,
    /// What passes.
    pub expected: String,
    /// The numbers, for `--json` readers.
    pub numbers: serde_json::Value,
}

impl Check {
    fn judged(name: &'static str, pass: bool, measured: String, expected: &str) -> Check {
        let result = if pass { Verdict::Pass } else { Verdict::Fail };
        Check {
            name,
            result,
            measured,
            expected: expected.into(),
            numbers: serde_json::Value::Null,
        }
    }
    fn skipped(name: &'static str, why: String, expected: &str) -> Check {
        Check {
            name,
            result: Verdict::Skipped,
            measured: why,
            expected: expected.into(),
            numbers: serde_json::Value::Null,
        }
    }
    fn failed(name: &'static str, why: String, expected: &str) -> Check {
        Check {
            name,
            result: Verdict::Fail,
            measured: why,
            expected: expected.into(),
            numbers: serde_json::Value::Null,
        }
    }
    fn with(mut self, numbers: serde_json::Value) -> Check {
        self.numbers = numbers;
        self
    }
}

/// The whole report.
#[derive(Debug, Serialize)]
struct Report {
    /// The GPU the tenants ran on, as the driver names it.
    device: String,
    /// The driver's CUDA version (`13.0`).
    cuda: String,
    /// True on the fake driver: the checks ran against a stand-in, not a GPU.
    stand_in: bool,
    /// Which daemon: its own, or the socket of the running one.
    daemon: String,
    checks: Vec<Check>,
}

const ALL: [&str; 6] = ["share", "memory", "kill", "launch", "fair-weights", "fair-kernels"];

pub fn run(mut args: SelftestArgs) -> Result<()> {
    for name in &args.only {
        if !ALL.contains(&name.as_str()) {
            bail!("no check named {name:?}: the checks are {}", ALL.join(", "));
        }
    }
    if !args.seconds.is_finite()
        || args.seconds <= 0.0
        || args.memory_mib < 16
        || args.launches < 100
    {
        bail!("--seconds must be positive, --memory-mib at least 16, --launches at least 100");
    }
    let driver = tessera_driver::probe::probe_driver(args.driver.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}: the self-test needs NVIDIA's driver"))?;
    args.launch_cpu = checks::launch_cpu();
    let env = Tenants::new(&args).context("setting up the self-test")?;
    let view = env.unmanaged_view().context("a program without tessera could not use device 0")?;
    let stand_in = view.name.starts_with("Fake GPU");
    let report = Report {
        device: view.name.clone(),
        cuda: driver.cuda_version_text(),
        stand_in,
        daemon: env.daemon_text(),
        checks: ALL
            .iter()
            .filter(|c| args.only.is_empty() || args.only.iter().any(|o| o == *c))
            .map(|c| {
                tracing::info!(check = c, "selftest");
                eprintln!("selftest: {c} …");
                checks::run(c, &env, &args, &view)
            })
            .collect(),
    };
    let failed = report.checks.iter().filter(|c| c.result == Verdict::Fail).count();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    drop(env);
    if failed > 0 {
        bail!("{failed} of {} checks failed", report.checks.len());
    }
    Ok(())
}

fn print_table(r: &Report) {
    let stand_in = if r.stand_in { " — a STAND-IN: the fake driver, not a GPU" } else { "" };
    println!("tessera selftest on {} (CUDA {}){stand_in}", r.device, r.cuda);
    println!("daemon: {}", r.daemon);
    let width = r.checks.iter().map(|c| c.name.len()).max().unwrap_or(5).max(5);
    println!("{:width$}  {:7}  MEASURED (EXPECTED)", "CHECK", "RESULT");
    for c in &r.checks {
        let verdict = match c.result {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skipped => "SKIPPED",
        };
        println!("{:width$}  {verdict:7}  {} ({})", c.name, c.measured, c.expected);
    }
}

//! The `tessera` command line. Thin: parses arguments, calls the library crates,
//! prints. Everything it computes lives in the library crates.

#![forbid(unsafe_code)]
// A command line prints its results; the workspace lint is meant for the libraries.
#![allow(clippy::print_stdout)]

mod bench;
mod daemon;
mod demo;
mod doctor;
mod k8s;
mod ledger;
mod ptx;
mod run;
mod selftest;
mod sim;
mod slurm;
mod top;

use clap::{Parser, Subcommand};

/// tessera: share a multi-GPU server among latency-critical and batch tenants.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The log's format on stderr: `text` for a person, `json` (one object per line)
    /// for a log collector; the level comes from RUST_LOG (default `warn`, and
    /// `tessera::event=info` for the daemon's decisions).
    #[arg(long, value_enum, global = true, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reproduce a paper's evaluation in the discrete-event simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Measure tessera's own speed.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The main job without GPUs: a daemon on 4 emulated GPUs, real client processes, a
    /// table per policy beside the simulator's numbers for the same workload.
    Demo(demo::DemoArgs),
    /// Internal: one client process of the demo.
    #[command(hide = true)]
    DemoClient(demo::DemoClientArgs),
    /// Run the daemon that shares this node's GPUs among client processes.
    Daemon(daemon::DaemonArgs),
    /// Like nvidia-smi for the shared node: GPUs, pools, tenants.
    Status(daemon::StatusArgs),
    /// A live view of the node: GPUs and their tenants' shares, entitled against
    /// received shares, SLAs, memory, recent decisions (`q` quits).
    Top(top::TopArgs),
    /// Inspect the GPU memory ledger shared by co-located processes.
    #[command(subcommand)]
    Ledger(ledger::LedgerCommand),
    /// Start an unmodified CUDA program as a tenant (its memory admitted by the
    /// ledger, placed by the daemon): `tessera run --memory 4GiB -- ./app args`.
    Run(run::RunArgs),
    /// Slurm integration: the node's Prolog, Epilog and TaskProlog, gres.conf, a smoke
    /// check (see docs/slurm.md).
    #[command(subcommand)]
    Slurm(slurm::SlurmCommand),
    /// Kubernetes: the device plugin that gives pods shares of GPU memory (see
    /// docs/kubernetes.md).
    #[command(subcommand)]
    K8s(k8s::K8sCommand),
    /// Check tessera on this node's GPUs: a tenant's share, memory limits, a killed
    /// program's memory, the launch path's cost, fair shares; a table of PASS/FAIL with
    /// what was measured (`--json`). Needs only the driver.
    Selftest(selftest::SelftestArgs),
    /// Internal: one program of the self-test.
    #[command(hide = true)]
    SelftestWorker(selftest::worker::WorkerArgs),
    /// Kernel slicing: what the interposer makes of a PTX file's kernels.
    #[command(subcommand)]
    Ptx(ptx::PtxCommand),
    /// Check this node: driver and NVML, daemon, socket, ledger, interposer, Slurm's
    /// gres.conf; one line each, with the fix; exit status 1 when a check fails.
    Doctor(doctor::DoctorArgs),
}

/// Where the commands that talk to a daemon look for it without `--socket` or
/// `TESSERA_SOCKET`: the node's daemon when there is one, else the user's own.
fn default_socket() -> std::path::PathBuf {
    tessera_client::default_socket(std::env::var_os("XDG_RUNTIME_DIR").map(Into::into))
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    let cli = Cli::parse();
    // the docs' test (tests/doc_commands.rs) checks that every documented command still
    // parses: with this set, a command line that parses does nothing
    if std::env::var_os("TESSERA_ONLY_PARSE_ARGS").is_some() {
        return std::process::ExitCode::SUCCESS;
    }
    // the daemon's decisions are logged by default; other commands say only warnings
    let default = match cli.command {
        Command::Daemon(_) => "warn,tessera::event=info",
        Command::K8s(_) => "warn,tessera_k8s=info",
        _ => "warn",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.log_format {
        // colour codes only for a person at a terminal, never into a log file
        LogFormat::Text => log.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => log.json().flatten_event(true).init(),
    }
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
        Command::Bench(cmd) => bench::run(cmd),
        Command::Ledger(cmd) => ledger::run(cmd),
        Command::Daemon(a) => daemon::run_daemon(a),
        Command::Demo(a) => demo::run(a),
        Command::DemoClient(a) => demo::run_client(a),
        Command::Status(a) => daemon::run_status(a),
        Command::Top(a) => top::run(a),
        Command::Run(a) => run::run(a),
        Command::Slurm(cmd) => slurm::run(cmd),
        Command::K8s(cmd) => k8s::run(cmd),
        Command::Doctor(a) => doctor::run(a),
        Command::Ptx(cmd) => ptx::run(cmd),
        Command::Selftest(a) => selftest::run(a),
        Command::SelftestWorker(a) => selftest::worker::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // one line with its causes, never a backtrace (whatever RUST_BACKTRACE
            // says): these are errors for the person who ran the command
            eprintln!("tessera: {}", one_line(&e));
            if let Some(fix) = fix_for(&e) {
                eprintln!("  fix: {fix}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and its causes on one line, each cause once: many errors already say their
/// source in their own message ("cannot reach tesserad: No such file …"), and the
/// chain would say it again.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}

/// The one-line fix `tessera doctor` would give for `e`, for the errors a user meets
/// first: no daemon where the command looked, a socket or ledger this user may not
/// open. Recognised by the error's kind and what it was doing, not by its wording.
fn fix_for(e: &anyhow::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    let text = e.to_string();
    let kind =
        e.chain().find_map(|c| c.downcast_ref::<std::io::Error>().map(std::io::Error::kind))?;
    let about_daemon =
        text.contains("tesserad") || text.contains("daemon") || text.contains(".sock");
    let about_ledger = text.contains("ledger");
    match kind {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused if about_daemon => Some(
            "start the daemon (`systemctl start tesserad`, or `tessera daemon`), or name its socket with --socket or TESSERA_SOCKET; `tessera doctor` checks the node",
        ),
        ErrorKind::PermissionDenied if about_ledger => Some(
            "this user may not open the node's ledger: ask for membership of its group (`tessera doctor` names it and its mode), or use a ledger of your own with --path",
        ),
        ErrorKind::PermissionDenied if about_daemon => Some(
            "the daemon's socket keeps this user out: its operator sets socket_mode = 0o666 in the daemon's configuration (each request is still checked by uid); `tessera doctor` shows the mode",
        ),
        _ => None,
    }
}

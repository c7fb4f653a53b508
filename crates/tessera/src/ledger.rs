//! `tessera ledger ...`: look at a memory ledger from the shell.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use tessera_ledger::{GpuSource, Ledger, LedgerConfig};

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Per GPU: memory used, total and waiting requests; then who holds what. Runs the
    /// sanity check first, so memory of dead processes is released.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The ledger file.
    #[arg(long, env = "TESSERA_LEDGER", default_value = tessera_ledger::ledger::DEFAULT_PATH)]
    path: PathBuf,
}

pub fn run(cmd: LedgerCommand) -> Result<()> {
    match cmd {
        LedgerCommand::Status(a) => status(a),
    }
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

fn status(a: StatusArgs) -> Result<()> {
    if !a.path.is_file() {
        bail!("no ledger at {} (it is created by the first client's init)", a.path.display());
    }
    let cfg = LedgerConfig {
        path: a.path.clone(),
        gpus: GpuSource::Explicit(vec![]),
        policy: Default::default(),
        priority: 0,
    };
    let ledger = Ledger::open(&cfg)?;
    let s = ledger.status()?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(out, "ledger {} (notification policy {})", a.path.display(), s.policy.label())?;
    writeln!(out, "{:<5} {:>12} {:>12} {:>8}", "GPU", "used", "total", "waiting")?;
    for (g, gpu) in s.gpus.iter().enumerate() {
        writeln!(out, "{g:<5} {:>12} {:>12} {:>8}", mib(gpu.used), mib(gpu.total), gpu.waiting)?;
    }
    let others: Vec<_> = s.holdings.iter().filter(|h| h.process != ledger.process()).collect();
    if !others.is_empty() {
        writeln!(out, "\n{:<10} {:<7} {:<5} {:>12}", "pid", "handle", "GPU", "held")?;
        for h in others {
            writeln!(
                out,
                "{:<10} {:<7} {:<5} {:>12}",
                h.process.pid,
                h.handle,
                h.gpu,
                mib(h.bytes)
            )?;
        }
    }
    Ok(())
}

//! `tessera ledger ...`: look at a memory ledger from the shell.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use tessera_ledger::access::{Access, resolve_group};
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
    /// The group a shared ledger belongs to (name or gid); without it the ledger must
    /// be private to this user.
    #[arg(long, env = "TESSERA_LEDGER_GROUP")]
    group: Option<String>,
}

impl StatusArgs {
    fn access(&self) -> Result<Access> {
        Ok(match &self.group {
            None => Access::Owner,
            Some(g) => Access::Group(
                resolve_group(g).ok_or_else(|| anyhow::anyhow!("no group named {g}"))?,
            ),
        })
    }
}

pub fn run(cmd: LedgerCommand) -> Result<()> {
    match cmd {
        LedgerCommand::Status(a) => status(a),
    }
}

/// Bytes with their exact count: rounding would hide a small leak.
fn size(b: u64) -> String {
    format!("{:.3} MiB ({b} B)", b as f64 / (1u64 << 20) as f64)
}

fn status(a: StatusArgs) -> Result<()> {
    // only a path that is not there is "no ledger": one this user may not reach (a
    // directory on the way it may not enter) is opened below, which says so and how
    // to get access (`is_file` read both as absent)
    match std::fs::metadata(&a.path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no ledger at {} (it is created by the first client's init)", a.path.display())
        }
        Ok(m) if !m.is_file() => bail!("{} is not a ledger: not a file", a.path.display()),
        _ => {}
    }
    let cfg = LedgerConfig {
        access: a.access()?,
        ..LedgerConfig::new(&a.path, GpuSource::Explicit(vec![]))
    };
    let ledger = Ledger::open(&cfg)?;
    let s = ledger.status()?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    writeln!(
        out,
        "ledger {} (notification policy {}; tables: {} holders, {} waiters)",
        a.path.display(),
        s.policy.label(),
        s.max_holders,
        s.max_waiters
    )?;
    writeln!(out, "{:<5} {:>28} {:>28} {:>8}", "GPU", "used", "total", "waiting")?;
    for (g, gpu) in s.gpus.iter().enumerate() {
        writeln!(out, "{g:<5} {:>28} {:>28} {:>8}", size(gpu.used), size(gpu.total), gpu.waiting)?;
    }
    let others: Vec<_> = s.holdings.iter().filter(|h| h.client != ledger.client_id()).collect();
    if !others.is_empty() {
        writeln!(out, "\n{:<20} {:<10} {:<5} {:>28}", "client", "pid (own ns)", "GPU", "held")?;
        for h in others {
            writeln!(out, "{:<20} {:<10} {:<5} {:>28}", h.client, h.pid, h.gpu, size(h.bytes))?;
        }
    }
    Ok(())
}

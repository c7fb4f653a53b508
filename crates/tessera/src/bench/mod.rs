//! `tessera bench ...`: speed measured as ratios against a baseline run in the same
//! command, so that the figures mean something on a shared, noisy machine.

mod interposer;
mod ledger;
mod serve;
mod sim;
mod transport;

use anyhow::Result;
use clap::{Args, Subcommand};

/// `--quick`: a bench reduced to a few seconds, to see that it runs (the docs' test runs
/// every documented `tessera bench` line verbatim with `TESSERA_BENCH_QUICK=1`).
#[derive(Debug, Args)]
pub struct Quick {
    /// A few iterations of each measurement (also TESSERA_BENCH_QUICK=1): shows that
    /// the bench runs; its figures are too few to mean anything.
    #[arg(long, env = "TESSERA_BENCH_QUICK", value_parser = clap::builder::BoolishValueParser::new())]
    quick: bool,
}

impl Quick {
    /// Whether the run is reduced; says so on stderr when it is.
    fn on(&self) -> bool {
        if self.quick {
            eprintln!(
                "tessera: --quick: a few iterations of each measurement; the figures mean nothing"
            );
        }
        self.quick
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Simulator speed in events per second, against the bare event-queue floor.
    Sim(sim::SimBenchArgs),
    /// The memory ledger's life-cycle stages, uncontended and with contending processes.
    Ledger(ledger::LedgerBenchArgs),
    /// The daemon's data plane: shared-memory rings against a Unix socket and a direct
    /// call, the full path of an empty task, and throughput with many clients.
    Transport(transport::TransportBenchArgs),
    /// The CUDA interposer's cost: a governed launch inside its slice against a direct
    /// call, allocations through the ledger, a launch waiting for a slice switch.
    Interposer(interposer::InterposerBenchArgs),
    /// A client of a model served by the daemon (`policy = "gpulets"`): Poisson
    /// requests, each timed from this side, requests it could not send counted against
    /// the SLO.
    Serve(serve::ServeBenchArgs),
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Sim(a) => sim::run(a),
        BenchCommand::Ledger(a) => ledger::run(a),
        BenchCommand::Transport(a) => transport::run(a),
        BenchCommand::Interposer(a) => interposer::run(a),
        BenchCommand::Serve(a) => serve::run(a),
    }
}

/// p50 and p99 of `samples` (sorted in place), in nanoseconds.
pub(crate) fn percentiles(samples: &mut [u64]) -> (u64, u64) {
    if samples.is_empty() {
        return (0, 0);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

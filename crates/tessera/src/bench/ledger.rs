//! `tessera bench ledger`: each stage of the ledger's life cycle (schedGPU Figure 9),
//! uncontended and with contending processes hammering the same ledger.

use super::percentiles;
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tessera_core::Bytes;
use tessera_ledger::{GpuSource, Ledger, LedgerConfig, Wait};

#[derive(Debug, Args)]
pub struct LedgerBenchArgs {
    /// Iterations of pre-allocation and post-free per configuration.
    #[arg(long, default_value_t = 20_000)]
    iterations: usize,
    /// Iterations of init, shutdown and waiter notification.
    #[arg(long, default_value_t = 500)]
    slow_iterations: usize,
    /// Contending processes in the contended run.
    #[arg(long, default_value_t = 8)]
    contenders: usize,
    /// Print one JSON object per stage and configuration.
    #[arg(long)]
    json: bool,
    /// Live holder processes beside which the pre-allocation + post-free pair is timed
    /// (each holds 1 MiB; 0 = the pair alone, the baseline of the ratios).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 1, 16, 128])]
    holders: Vec<usize>,
    /// Internal: run as a contender on this ledger until killed.
    #[arg(long, hide = true)]
    contend_on: Option<PathBuf>,
    /// Internal: hold 1 MiB on this ledger until killed.
    #[arg(long, hide = true)]
    hold_on: Option<PathBuf>,
    #[command(flatten)]
    quick: super::Quick,
}

/// schedGPU Figure 9, shared memory with file lock, in microseconds; the other
/// stages' values cannot be read reliably from the paper's text.
const PAPER_US: [(&str, f64); 2] = [("pre_allocation", 14.9), ("total", 584.9)];

fn config(path: &Path) -> LedgerConfig {
    LedgerConfig::new(path, GpuSource::Explicit(vec![Bytes::mib(4799)]))
}

/// Never outlive the benchmark that started us, even if it crashed.
fn exit_with_parent() {
    let parent = rustix::process::getppid();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if rustix::process::getppid() != parent {
                std::process::exit(0);
            }
        }
    });
}

fn contend(path: &Path) -> Result<()> {
    exit_with_parent();
    let l = Ledger::open(&config(path))?;
    loop {
        if l.pre_alloc(0, 1 << 20, Wait::NoWait).is_ok() {
            l.post_free(0, 1 << 20)?;
        }
    }
}

fn hold(path: &Path) -> Result<()> {
    exit_with_parent();
    let l = Ledger::open(&config(path))?;
    l.pre_alloc(0, 1 << 20, Wait::NoWait)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "held")?;
    out.flush()?;
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

struct Row {
    stage: &'static str,
    contenders: usize,
    holders: usize,
    p50: u64,
    p99: u64,
}

fn time_stages(
    path: &Path,
    a: &LedgerBenchArgs,
    contenders: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let mut push = |stage, mut samples: Vec<u64>| {
        let (p50, p99) = percentiles(&mut samples);
        rows.push(Row { stage, contenders, holders: 0, p50, p99 });
    };
    // init and shutdown of a client of an existing ledger
    let (mut init, mut shut) = (Vec::new(), Vec::new());
    for _ in 0..a.slow_iterations {
        let t = Instant::now();
        let l = Ledger::open(&config(path))?;
        init.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        l.shutdown()?;
        shut.push(t.elapsed().as_nanos() as u64);
    }
    // pre-allocation and post-free that fit at once
    let l = Ledger::open(&config(path))?;
    let (mut pre, mut post) = (Vec::with_capacity(a.iterations), Vec::with_capacity(a.iterations));
    for _ in 0..a.iterations {
        let t = Instant::now();
        l.pre_alloc(0, 1 << 20, Wait::Forever)?;
        pre.push(t.elapsed().as_nanos() as u64);
        let t = Instant::now();
        l.post_free(0, 1 << 20)?;
        post.push(t.elapsed().as_nanos() as u64);
    }
    // notification: a waiter blocked for memory, woken by another client's post-free;
    // measured from the start of the post-free to the waiter's return
    let mut notify = Vec::with_capacity(a.slow_iterations);
    let holder = Arc::new(l);
    let gpu_total = 4799u64 << 20;
    for _ in 0..a.slow_iterations {
        holder.pre_alloc(0, gpu_total - (64 << 20), Wait::Forever)?;
        let barrier = Arc::new(Barrier::new(2));
        let (b2, p) = (barrier.clone(), path.to_path_buf());
        let waiter = std::thread::spawn(move || -> Result<Instant> {
            let w = Ledger::open(&config(&p))?;
            b2.wait();
            w.pre_alloc(0, 128 << 20, Wait::Forever)?;
            let done = Instant::now();
            w.shutdown()?;
            Ok(done)
        });
        barrier.wait();
        // let the waiter queue (it finds 64 MiB free and must wait for 128)
        while holder.status()?.gpus[0].waiting == 0 {
            std::thread::yield_now();
        }
        let t = Instant::now();
        holder.post_free(0, gpu_total - (64 << 20))?;
        let woke = waiter.join().map_err(|_| anyhow::anyhow!("waiter panicked"))??;
        notify.push(woke.saturating_duration_since(t).as_nanos() as u64);
    }
    let total: Vec<u64> =
        (0..init.len().min(pre.len())).map(|i| init[i] + pre[i] + post[i] + shut[i]).collect();
    push("init", init);
    push("pre_allocation", pre);
    push("notification", notify);
    push("post_free", post);
    push("shutdown", shut);
    push("total", total);
    Ok(())
}

fn spawn_holder(path: &Path) -> Result<Child> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["bench", "ledger", "--hold-on"])
        .arg(path)
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning a holder")?;
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().context("holder stdout")?).read_line(&mut line)?;
    anyhow::ensure!(line.trim() == "held", "a holder failed to hold: {:?}", child.wait());
    Ok(child)
}

/// The pre-allocation + post-free pair, timed as one operation, beside each number of
/// live holder processes (which the pair never checks: the sanity check runs only when
/// memory is short).
fn time_pair_by_holders(path: &Path, a: &LedgerBenchArgs, rows: &mut Vec<Row>) -> Result<()> {
    let mut counts = a.holders.clone();
    counts.sort_unstable();
    counts.dedup();
    let mut holders: Vec<Child> = Vec::new();
    let timed = (|| -> Result<()> {
        let l = Ledger::open(&config(path))?;
        for &n in &counts {
            while holders.len() < n {
                holders.push(spawn_holder(path)?);
            }
            eprintln!("ledger bench: pre-allocation + post-free beside {n} holders ...");
            let mut pair = Vec::with_capacity(a.iterations);
            for _ in 0..a.iterations {
                let t = Instant::now();
                l.pre_alloc(0, 1 << 20, Wait::Forever)?;
                l.post_free(0, 1 << 20)?;
                pair.push(t.elapsed().as_nanos() as u64);
            }
            let (p50, p99) = percentiles(&mut pair);
            rows.push(Row { stage: "pair", contenders: 0, holders: n, p50, p99 });
        }
        l.shutdown()?;
        Ok(())
    })();
    for c in &mut holders {
        let _ = c.kill();
        let _ = c.wait();
    }
    timed
}

fn spawn_contender(path: &Path) -> Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["bench", "ledger", "--contend-on"])
        .arg(path)
        .stdout(Stdio::null())
        .spawn()
        .context("spawning a contender")
}

pub fn run(mut a: LedgerBenchArgs) -> Result<()> {
    if a.contend_on.is_none() && a.hold_on.is_none() && a.quick.on() {
        a.iterations = a.iterations.min(500);
        a.slow_iterations = a.slow_iterations.min(20);
        a.contenders = a.contenders.min(2);
        a.holders.retain(|&h| h <= 1);
    }
    if let Some(path) = &a.contend_on {
        return contend(path);
    }
    if let Some(path) = &a.hold_on {
        return hold(path);
    }
    let dir = std::env::temp_dir();
    let path = dir.join(format!("tessera-bench-ledger-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let creator = Ledger::open(&config(&path))?; // creates it; kept open throughout
    let mut rows = Vec::new();
    eprintln!("ledger bench: {} iterations uncontended ...", a.iterations);
    time_stages(&path, &a, 0, &mut rows)?;
    if a.contenders > 0 {
        eprintln!("ledger bench: again with {} contending processes ...", a.contenders);
        let mut children: Vec<Child> =
            (0..a.contenders).map(|_| spawn_contender(&path)).collect::<Result<_>>()?;
        std::thread::sleep(Duration::from_millis(200));
        let timed = time_stages(&path, &a, a.contenders, &mut rows);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        timed?;
    }
    time_pair_by_holders(&path, &a, &mut rows)?;
    creator.shutdown()?;
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(
        dir.join(format!("tessera-bench-ledger-{}.clients", std::process::id())),
    );

    let mut out = std::io::stdout().lock();
    use std::io::Write;
    if a.json {
        for r in &rows {
            writeln!(
                out,
                "{}",
                serde_json::json!({"stage": r.stage, "contenders": r.contenders, "holders": r.holders, "p50_ns": r.p50, "p99_ns": r.p99})
            )?;
        }
        return Ok(());
    }
    writeln!(out, "ledger life cycle (shared memory + flock), microseconds")?;
    writeln!(
        out,
        "{:<16} {:>11} {:>11} {:>14} {:>14} {:>10}",
        "stage", "p50", "p99", "p50 contended", "p99 contended", "paper"
    )?;
    for r in rows.iter().filter(|r| r.contenders == 0 && r.stage != "pair") {
        let c = rows.iter().find(|x| x.stage == r.stage && x.contenders > 0);
        let paper = PAPER_US
            .iter()
            .find(|(s, _)| *s == r.stage)
            .map_or("-".into(), |(_, v)| format!("{v}"));
        let us = |ns: u64| format!("{:.1}", ns as f64 / 1000.0);
        writeln!(
            out,
            "{:<16} {:>11} {:>11} {:>14} {:>14} {:>10}",
            r.stage,
            us(r.p50),
            us(r.p99),
            c.map_or("-".into(), |c| us(c.p50)),
            c.map_or("-".into(), |c| us(c.p99)),
            paper
        )?;
    }
    let pairs: Vec<&Row> = rows.iter().filter(|r| r.stage == "pair").collect();
    if let Some(alone) = pairs.iter().find(|r| r.holders == 0) {
        writeln!(
            out,
            "\npre-allocation + post-free pair (one timed operation) by live holder processes"
        )?;
        writeln!(out, "{:<10} {:>11} {:>11} {:>16}", "holders", "p50 us", "p99 us", "p50 / alone")?;
        for r in &pairs {
            writeln!(
                out,
                "{:<10} {:>11.1} {:>11.1} {:>16.2}",
                r.holders,
                r.p50 as f64 / 1000.0,
                r.p99 as f64 / 1000.0,
                r.p50 as f64 / alone.p50.max(1) as f64
            )?;
        }
    }
    if let (Some(pre), Some(total)) = (
        rows.iter().find(|r| r.stage == "pre_allocation" && r.contenders == 0),
        rows.iter().find(|r| r.stage == "total" && r.contenders == 0),
    ) {
        writeln!(
            out,
            "\nuncontended pre-allocation p50 is {:.2}x the paper's 14.9 us; the total {:.2}x its 584.9 us (different machines: read as orders of magnitude)",
            pre.p50 as f64 / 14_900.0,
            total.p50 as f64 / 584_900.0
        )?;
    }
    Ok(())
}

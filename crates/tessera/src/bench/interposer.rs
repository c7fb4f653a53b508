//! `tessera bench interposer`: what the interposer adds to a CUDA program's calls,
//! measured inside one program (`tessera-cuda/bench/interposer_bench.c`) on the fake
//! driver, with and without `LD_PRELOAD=libtessera_cuda.so`, beside an in-process
//! daemon: a direct `cuLaunchKernel` against the same call inside a granted slice, an
//! allocation pair through the interposer (from its lease) against a direct one, and a launch that must wait
//! for the other tenant's slice to end. The fake driver's calls cost nanoseconds, so
//! the difference is the interposer's own cost; a real driver's launch costs microseconds.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tesserad::Daemon;
use tesserad::config::{DaemonConfig, ExecutorKind, PolicyName};

#[derive(Debug, Args)]
pub struct InterposerBenchArgs {
    /// Batches of 64 calls measured per call type.
    #[arg(long, default_value_t = 2000)]
    batches: u32,
    /// Launches measured across a slice switch.
    #[arg(long, default_value_t = 100)]
    switches: u32,
    /// Print one JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
    /// The interposer library (default: libtessera_cuda.so beside this program).
    #[arg(long)]
    preload: Option<PathBuf>,
    #[command(flatten)]
    quick: super::Quick,
}

struct Bench {
    dir: PathBuf,
    program: PathBuf,
    preload: PathBuf,
    socket: PathBuf,
    ledger: PathBuf,
}

impl Bench {
    fn command(&self, args: &[&str], preload: bool, slice_ms: u32) -> Command {
        let mut c = Command::new(&self.program);
        c.args(args)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("TESSERA_SOCKET", &self.socket)
            .env("TESSERA_LEDGER", &self.ledger)
            .env("TESSERA_SLICE_MS", slice_ms.to_string())
            // the fake's books file would cost more than the calls measured
            .env("FAKE_CUDA_STATS", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if preload {
            c.env("LD_PRELOAD", &self.preload);
        } else {
            c.env_remove("LD_PRELOAD");
        }
        c
    }

    fn measure(&self, args: &[&str], preload: bool, slice_ms: u32) -> Result<serde_json::Value> {
        let out = self.command(args, preload, slice_ms).output()?;
        if !out.status.success() {
            bail!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let line = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(line.trim()).with_context(|| format!("bench output {line:?}"))
    }
}

/// What preloading the interposer costs a program that never touches CUDA — every
/// process of a tenant (shells, Python's helpers) pays it: `/bin/true` started 200
/// times each way, alternating, its whole run (fork, exec, loading, exit) timed.
fn start_times(preload: &Path) -> Result<Vec<serde_json::Value>> {
    let size = std::fs::metadata(preload)?.len();
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..400 {
        let with = i % 2 == 1;
        let mut c = Command::new("true");
        if with {
            c.env("LD_PRELOAD", preload);
        } else {
            c.env_remove("LD_PRELOAD");
        }
        let t = std::time::Instant::now();
        let st = c.status().context("running true")?;
        let ns = t.elapsed().as_nanos() as f64;
        if !st.success() {
            bail!("true failed{}", if with { " with the interposer preloaded" } else { "" });
        }
        times[usize::from(with)].push(ns);
    }
    let row = |label: &str, v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        serde_json::json!({
            "call": label,
            "p50_ns": v[v.len() / 2],
            "p99_ns": v[v.len() * 99 / 100],
            "interposer_bytes": size,
        })
    };
    let [mut direct, mut preloaded] = times;
    Ok(vec![
        row("program start and exit (true), direct", &mut direct),
        row("the same with libtessera_cuda.so preloaded", &mut preloaded),
    ])
}

fn build(artifacts: &Path, dir: &Path) -> Result<PathBuf> {
    tessera_driver::testing::build_fake_driver(artifacts, &dir.join("libcuda.so.1"))
        .map_err(anyhow::Error::msg)?;
    let program = dir.join("interposer_bench");
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tessera-cuda/bench/interposer_bench.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-std=c11", "-I"])
        .arg(artifacts.join("include"))
        .arg("-o")
        .arg(&program)
        .arg(&src)
        .arg("-ldl")
        .output()
        .with_context(|| format!("running {cc}"))?;
    if !out.status.success() {
        bail!("building {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(program)
}

pub fn run(mut a: InterposerBenchArgs) -> Result<()> {
    if a.quick.on() {
        (a.batches, a.switches) = (a.batches.min(50), a.switches.min(5));
    }
    let preload = a
        .preload
        .clone()
        .or_else(crate::run::default_preload)
        .context("libtessera_cuda.so not found beside tessera: build it with `cargo build --release -p tessera-cuda`, or give --preload")?;
    let artifacts = tessera_driver::testing::nvidia_artifacts().map_err(anyhow::Error::msg)?;
    let dir = std::env::temp_dir().join(format!("tessera-bench-interposer-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = (|| {
        let program = build(&artifacts, &dir)?;
        let b = Bench {
            socket: dir.join("d.sock"),
            ledger: dir.join("ledger"),
            program,
            preload: std::fs::canonicalize(&preload)?,
            dir: dir.clone(),
        };
        let daemon = Daemon::start(&DaemonConfig {
            socket: b.socket.clone(),
            ledger: b.ledger.clone(),
            gpus: 1,
            gpu_memory_mib: 1024,
            executor: ExecutorKind::Emulated { speedup: 1.0 },
            policy: PolicyName::RoundRobin,
            ..DaemonConfig::default()
        })?;
        let batches = a.batches.to_string();
        // a slice far longer than the run, so that every measured launch is inside it
        let calls = [
            ("launch", "direct cuLaunchKernel", false),
            ("launch", "cuLaunchKernel in a granted slice", true),
            ("alloc", "direct cuMemAlloc+cuMemFree", false),
            ("alloc", "cuMemAlloc+cuMemFree through the interposer (lease)", true),
        ];
        let mut rows = calls
            .iter()
            .map(|(mode, label, preload)| b.measure(&[mode, label, &batches], *preload, 10_000))
            .collect::<Result<Vec<_>>>()?;
        // another tenant keeps asking for 5 ms slices; each measured launch comes after
        // its own 5 ms slice has ended, so it waits for the other's to end
        let mut rival = b.command(&["spin", "2"], true, 5).spawn()?;
        let switched = b.measure(
            &[
                "switch",
                "cuLaunchKernel across a slice switch (5 ms slices)",
                &a.switches.to_string(),
                "12",
            ],
            true,
            5,
        );
        let _ = rival.kill();
        let _ = rival.wait();
        rows.push(switched?);
        rows.extend(start_times(&b.preload)?);
        daemon.shutdown();
        Ok::<_, anyhow::Error>(rows)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let rows = result?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    let p50 = |r: &serde_json::Value| r["p50_ns"].as_f64().unwrap_or(f64::NAN);
    // the allocation pair against the direct one, measured in this same run
    let alloc_ratio = p50(&rows[3]) / p50(&rows[2]);
    if a.json {
        for r in &rows {
            writeln!(out, "{r}")?;
        }
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "call": "allocation pair through the interposer over direct (p50 ratio)",
                "ratio": alloc_ratio,
                "target": 3.0,
            })
        )?;
    } else {
        writeln!(
            out,
            "interposer costs on the fake driver (per call; batches of 64 for the first four)"
        )?;
        writeln!(out, "{:<55} {:>12} {:>12}", "call", "p50 ns", "p99 ns")?;
        for r in &rows {
            writeln!(
                out,
                "{:<55} {:>12.1} {:>12.1}",
                r["call"].as_str().unwrap_or("?"),
                p50(r),
                r["p99_ns"].as_f64().unwrap_or(f64::NAN)
            )?;
        }
        writeln!(
            out,
            "governed launch inside its slice adds {:.1} ns at p50 over the direct call (target: <= 100 ns)",
            p50(&rows[1]) - p50(&rows[0])
        )?;
        writeln!(
            out,
            "an allocation pair through the interposer costs {alloc_ratio:.2}x the direct one at p50 (target: <= 3x)"
        )?;
        writeln!(
            out,
            "the interposer ({:.1} MB) adds {:.2} ms to a program's start at p50",
            rows[5]["interposer_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            (p50(&rows[6]) - p50(&rows[5])) / 1e6
        )?;
    }
    Ok(())
}

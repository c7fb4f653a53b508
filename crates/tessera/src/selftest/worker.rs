//! The programs `tessera selftest` runs as tenants (`tessera selftest-worker ROLE`,
//! under `tessera run`, or directly for the launch path's baseline): each opens device
//! 0 through the driver, as an unmodified CUDA program does, does one thing, and
//! reports on stdout as JSON lines.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_driver::{Gpu, status};

/// The kernels, compiled by the driver at load.
pub(super) const PTX: &str = include_str!("kernels.ptx");

const MIB: u64 = 1 << 20;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// What the tenant is shown: devices, cuMemGetInfo, NVML's memory.
    Share,
    /// Allocate 60% of MIB, then 60% more (refused: past the limit), free the first
    /// and retry.
    Memory {
        #[arg(long)]
        mib: u64,
    },
    /// Hold MIB, say so, then for each stdin line `more N` allocate N MiB more; exit at
    /// the end of stdin.
    Hold {
        #[arg(long)]
        mib: u64,
    },
    /// Launch kernels of NS nanoseconds one after another for SECONDS, writing each
    /// one's start and end (the GPU's clock) to OUT.
    Spin {
        #[arg(long)]
        ns: u64,
        #[arg(long)]
        seconds: f64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Launch COUNT empty kernels through the program's `cuLaunchKernel` and COUNT
    /// through the driver's own, in alternating blocks, timing each launch call;
    /// pinned to CPU, when given, before the driver starts (its threads inherit the
    /// mask).
    Launch {
        #[arg(long)]
        count: usize,
        #[arg(long)]
        cpu: Option<usize>,
    },
    /// No CUDA context: for each stdin line `below BYTES`, poll NVML until device 0
    /// uses at most BYTES (at most 10 s), and say how long that took.
    NvmlWatch,
}

fn say(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The result code of an allocation: 0, or the driver's error.
fn code_of<T>(r: &Result<T, tessera_driver::ContextError>) -> u32 {
    match r {
        Ok(_) => status::SUCCESS,
        Err(e) => e.code().unwrap_or(u32::MAX),
    }
}

pub fn run(args: WorkerArgs) -> Result<()> {
    if let Role::NvmlWatch = args.role {
        return nvml_watch();
    }
    if let Role::Launch { cpu: Some(cpu), .. } = args.role {
        // both sides of the launch check on the same CPU: which core, and whose
        // neighbour, a process lands on moved the p50 by hundreds of ns on the H200
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set)
            .with_context(|| format!("pinning the launch worker to CPU {cpu}"))?;
    }
    let gpu = Gpu::open(None, 0).context("opening device 0")?;
    match args.role {
        Role::NvmlWatch => unreachable!("answered above"),
        Role::Share => {
            let (free, total) = gpu.mem_info()?;
            let nvml = match tessera_driver::probe::nvml_memory(None) {
                Ok(m) => json!(m.first().map(|(t, u)| json!({"total": t, "used": u}))),
                Err(e) => json!({"error": e}),
            };
            say(json!({
                "devices": gpu.device_count()?, "name": gpu.name()?,
                "free": free, "total": total, "nvml": nvml,
            }));
        }
        Role::Memory { mib } => {
            let part = mib * MIB * 6 / 10;
            let first = gpu.alloc(part);
            let began = Instant::now();
            let over = gpu.alloc(part);
            let over_ms = began.elapsed().as_secs_f64() * 1e3;
            if let Ok(p) = first {
                gpu.free(p)?;
            }
            if let Ok(p) = over {
                gpu.free(p)?;
            }
            let began = Instant::now();
            let retry = gpu.alloc(part);
            let retry_ms = began.elapsed().as_secs_f64() * 1e3;
            if let Ok(p) = retry {
                gpu.free(p)?;
            }
            say(json!({
                "first": code_of(&first), "over": code_of(&over), "over_ms": over_ms,
                "retry": code_of(&retry), "retry_ms": retry_ms,
            }));
        }
        Role::Hold { mib } => {
            let _held = gpu.alloc(mib * MIB)?;
            say(json!({"held": mib}));
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if let Some(n) =
                    line.strip_prefix("more ").and_then(|n| n.trim().parse::<u64>().ok())
                {
                    let more = gpu.alloc(n * MIB);
                    say(json!({"more": n, "code": code_of(&more)}));
                }
            }
        }
        Role::Spin { ns, seconds, out } => {
            let kernel = gpu.kernel(PTX, "tessera_spin_stamped")?;
            // room for every kernel the time allows (and a margin), at most 1M
            let slots = ((seconds * 1e9 / ns.max(1) as f64) as u64 + 64).min(1 << 20);
            let stamps = gpu.alloc(slots * 16)?;
            let began = Instant::now();
            let mut launched = 0;
            while launched < slots && began.elapsed() < Duration::from_secs_f64(seconds) {
                gpu.launch(kernel, 1, &[ns, stamps + launched * 16])?;
                // one kernel at a time, as a program waiting on each result does
                gpu.synchronize()?;
                launched += 1;
            }
            let mut bytes = vec![0u8; (launched * 16) as usize];
            gpu.copy_out(stamps, &mut bytes)?;
            let mut text = String::new();
            for pair in bytes.chunks_exact(16) {
                let start = u64::from_le_bytes(pair[..8].try_into().expect("8 bytes"));
                let end = u64::from_le_bytes(pair[8..].try_into().expect("8 bytes"));
                text.push_str(&format!("{start} {end}\n"));
            }
            std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
            say(json!({"kernels": launched}));
        }
        Role::Launch { count, .. } => {
            let kernel = gpu.kernel(PTX, "tessera_noop")?;
            for _ in 0..100 {
                gpu.launch(kernel, 1, &[])?;
                gpu.launch_unhooked(kernel, 1, &[])?;
            }
            gpu.synchronize()?;
            // blocks of the program's entry point (the hook, under `tessera run`) and of
            // the driver's own, alternating, so that both see the same process, the
            // same driver state and the same drift; in a program run directly both
            // are the driver's, which shows what the comparison reads when no hook is
            // there (a control)
            const BLOCK: usize = 256;
            let (mut hooked, mut own) = (Vec::with_capacity(count), Vec::with_capacity(count));
            let began = Instant::now();
            let mut hooked_s = 0.0;
            for block in 0..count.div_ceil(BLOCK) {
                let n = BLOCK.min(count - block * BLOCK);
                for through_hook in [block % 2 == 0, block % 2 != 0] {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        let t = Instant::now();
                        if through_hook {
                            gpu.launch(kernel, 1, &[])?;
                        } else {
                            gpu.launch_unhooked(kernel, 1, &[])?;
                        }
                        let ns = t.elapsed().as_nanos() as u64;
                        if through_hook { hooked.push(ns) } else { own.push(ns) }
                    }
                    // the queue kept short, as a program's is
                    gpu.synchronize()?;
                    if through_hook {
                        hooked_s += t0.elapsed().as_secs_f64();
                    }
                }
            }
            let wall = began.elapsed().as_secs_f64();
            hooked.sort_unstable();
            own.sort_unstable();
            say(json!({
                "launches": count, "per_second": count as f64 / hooked_s,
                "p50_ns": hooked[count / 2], "p90_ns": hooked[count * 9 / 10],
                "own_p50_ns": own[count / 2], "own_p90_ns": own[count * 9 / 10],
                "wall_s": wall, "interposed": gpu.launch_is_interposed(),
            }));
        }
    }
    Ok(())
}

fn nvml_watch() -> Result<()> {
    let used = || -> Result<u64> {
        let m = tessera_driver::probe::nvml_memory(None).map_err(|e| anyhow::anyhow!(e))?;
        m.first().map(|(_, used)| *used).context("NVML shows no device")
    };
    say(json!({"used": used()?}));
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let Some(bytes) = line.strip_prefix("below ").and_then(|b| b.trim().parse::<u64>().ok())
        else {
            continue;
        };
        let began = Instant::now();
        let mut now = used()?;
        while now > bytes && began.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
            now = used()?;
        }
        say(json!({"used": now, "ms": began.elapsed().as_secs_f64() * 1e3, "below": now <= bytes}));
    }
    Ok(())
}

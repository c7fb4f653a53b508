//! FairGV's evaluation (§5.4), first part: the non-congested setup (three VMs on one
//! core, weights 1:2:3, each of MM, HS, BS and SRD1: Figure 8) and the congested one
//! (six VMs on three cores, two per core, weights 1:2:2:3:3:4, BS and SRD1: Figure 9),
//! under Credit-poll, Credit-hs, Strict coscheduling and FairGV, on the model of
//! program engine ([`setting`]). Metrics as the paper defines them (§5.4.1): x_i =
//! T_i / O_i, a VM's measured throughput over its ideal fair throughput (its weight's
//! share of the ideal aggregated throughput: the calls of the same program run alone,
//! natively — one VM on its own core, polling, never gated — since every VM runs the
//! same benchmark); MMR = min x_i / max x_i; aggregated overhead = ideal aggregated
//! throughput / measured (below 1 where VMs on several cores overlap their CPU work).
//!
//! Also: work conservation (Figure 10: BS beside an MM that sleeps 50-80% of its
//! time, FairGV with and without its work-conserving policy, total GPU utilization),
//! collaborative scheduling (Figure 11: MM or HS beside a background MM whose kernels
//! last 21-1,605 µs, Credit-poll against FairGV, the foreground's run time over its
//! run time alone) and kernel slicing's cost (Table 4, on the wave model of
//! [`slicing`]). SVG figures in [`figures`].

mod figures;
mod judge;
pub mod long_kernel;
mod report;
pub mod setting;
pub mod slicing;

use super::ExperimentError;
use super::claims::{self, Claim, Comparison, Sensitivity, Test, Unit, Variation};
use serde::{Deserialize, Serialize};
use setting::{Benchmark, Constants, Scheduler, VmSetup, VmSpec};
use std::fmt::Write as _;
use std::path::Path;
use tessera_core::Nanos;

pub use judge::judge;
pub use report::report;

/// Version tag of `results.json`.
pub const SCHEMA: &str = "tessera.sim.fairgv/3";

/// Table 3, as the paper measured it.
pub const TABLE3: &str = include_str!("../../../../../data/fairgv/table3.csv");

/// Simulated seconds per run.
pub const SECONDS: f64 = 4.0;

/// Simulated seconds per run of `tessera sim fairgv --quick` (and the tests): every
/// part runs, the numbers are a smoke run's.
pub const QUICK_SECONDS: f64 = 0.5;

/// One benchmark of Table 3 by its short name.
pub fn benchmark(short: &str) -> Result<Benchmark, ExperimentError> {
    for line in TABLE3.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 9 {
            return Err(ExperimentError::Config(format!("table3.csv: bad line {line:?}")));
        }
        if f[1] == short {
            let num = |i: usize| {
                f[i].parse::<f64>().map_err(|_| {
                    ExperimentError::Config(format!("table3.csv: bad number in {line:?}"))
                })
            };
            return Ok(Benchmark {
                name: short.into(),
                kernel_us: num(4)?,
                async_per_10ms: num(6)?,
                sync_per_10ms: num(7)?,
                run_s: num(8)?,
            });
        }
    }
    Err(ExperimentError::Config(format!("no benchmark {short} in table3.csv")))
}

/// One setup under one scheduler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `non-congested` or `congested`.
    pub setup: String,
    /// The benchmark.
    pub benchmark: String,
    /// The scheduler.
    pub scheduler: String,
    /// Each VM's weight.
    pub weights: Vec<u32>,
    /// Each VM's normalized throughput x_i = T_i / O_i.
    pub normalized: Vec<f64>,
    /// Each VM's completion time, s: Table 3's run time alone, scaled by the model's
    /// rate for the VM alone (same scheduler) over the VM's measured rate.
    pub completion_s: Vec<f64>,
    /// min x / max x.
    pub mmr: f64,
    /// Ideal aggregated throughput / measured.
    pub overhead: f64,
    /// GPU busy share.
    pub gpu_busy: f64,
    /// vCPU switches per simulated second.
    pub switches_per_s: f64,
    /// The program alone under this scheduler (one VM, one core), its run time over
    /// the native run's (Figure 7 / §5.2's standalone overhead; 1.0 under Credit-poll,
    /// which is the native run).
    #[serde(default)]
    pub standalone: f64,
}

/// Figure 10: one sleep ratio under one scheduler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkConservingRow {
    /// MM's share of its time asleep.
    pub sleep_ratio: f64,
    /// `FairGV` or `FairGV non-WC`.
    pub scheduler: String,
    /// Total GPU busy share.
    pub gpu_busy: f64,
    /// BS's GPU share.
    pub bs_gpu: f64,
    /// MM's GPU share.
    pub mm_gpu: f64,
}

/// Figure 11: one foreground beside one background kernel size under one scheduler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollaborativeRow {
    /// `MM` or `HS`.
    pub foreground: String,
    /// The background MM's kernel, µs.
    pub background_kernel_us: f64,
    /// `Credit-poll` or `FairGV`.
    pub scheduler: String,
    /// The foreground's run time beside the background over its run time alone (its
    /// calls alone over its calls beside, in equal simulated time).
    pub normalized_run_time: f64,
    /// The foreground's share of the GPU's busy time.
    pub foreground_gpu_share: f64,
    /// The share of the run the GPU was busy (both VMs' kernels).
    #[serde(default)]
    pub gpu_busy: f64,
}

/// Figure 10's sleep ratios.
pub const SLEEP_RATIOS: [f64; 4] = [0.5, 0.6, 0.7, 0.8];

/// Figure 11's background kernel sizes, µs: the paper's two ends and sizes between
/// (ours: the paper names only the range), including the foregrounds' own 133 and 207.
pub const BACKGROUND_KERNELS_US: [f64; 8] =
    [21.0, 50.0, 133.0, 207.0, 400.0, 800.0, 1_200.0, 1_605.0];

/// Everything the run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FairgvResults {
    /// [`SCHEMA`].
    pub schema: String,
    /// The model's constants.
    pub constants: Constants,
    /// Simulated seconds per run.
    pub seconds: f64,
    /// Every row.
    pub rows: Vec<Row>,
    /// Figure 10.
    pub work_conserving: Vec<WorkConservingRow>,
    /// Figure 11.
    pub collaborative: Vec<CollaborativeRow>,
    /// Table 4.
    pub slicing: slicing::SlicingResults,
    /// A long kernel beside short ones, whole and sliced ([`long_kernel`]).
    #[serde(default)]
    pub long_kernel: Option<long_kernel::LongKernel>,
    /// The claims, judged.
    pub claims: Vec<Claim>,
    /// The claims as (id, paper, ours, holds).
    pub comparisons: Vec<Comparison>,
    /// Each constant of ours at a low and a high value, and the claims' verdicts there.
    pub sensitivity: Vec<Sensitivity>,
}

fn setups() -> Vec<(&'static str, Vec<&'static str>, Vec<VmSetup>, usize)> {
    let non = (1..=3).map(|w| VmSetup { weight: w, core: 0 }).collect();
    let congested = [1, 2, 2, 3, 3, 4]
        .iter()
        .enumerate()
        .map(|(i, w)| VmSetup { weight: *w, core: i / 2 })
        .collect();
    vec![
        ("non-congested", vec!["MM", "HS", "BS", "SRD1"], non, 1),
        ("congested", vec!["BS", "SRD1"], congested, 3),
    ]
}

/// Run the experiment ([`SECONDS`] per run).
pub fn run() -> Result<FairgvResults, ExperimentError> {
    run_for(SECONDS)
}

/// Run the experiment with `seconds` of simulated time per run: every figure at the
/// constants used, then again at a low and a high value of each constant of ours.
pub fn run_for(seconds: f64) -> Result<FairgvResults, ExperimentError> {
    if !(seconds > 0.0 && seconds <= 600.0) {
        return Err(ExperimentError::Config(format!("seconds must be in (0, 600], got {seconds}")));
    }
    let mut r = measure(seconds, Constants::DEFAULT)?;
    // (once, at the constants used: no claim rests on it, so the sensitivity's re-runs
    // leave it out)
    r.long_kernel = Some(long_kernel::run(&Constants::DEFAULT)?);
    r.sensitivity = sensitivity(seconds, &r.claims)?;
    Ok(r)
}

fn us(n: Nanos) -> String {
    format!("{} µs", n.0 / 1_000)
}

/// Every constant of the setting that is ours, not the paper's, with the range we
/// think plausible (the reason in `what`).
fn variations() -> Vec<Variation<Constants>> {
    vec![
        Variation {
            name: "switch",
            what: "a vCPU switch (KVM halt, wake and switch: a few to tens of µs)",
            show: |k| us(k.switch),
            low: |k| k.switch = Nanos(5_000),
            high: |k| k.switch = Nanos(50_000),
        },
        Variation {
            name: "spin",
            what: "hybrid spinning's spin, VM side (the paper: 100K iterations, no time; \
                   tens to hundreds of µs)",
            show: |k| us(k.spin),
            low: |k| k.spin = Nanos(20_000),
            high: |k| k.spin = Nanos(200_000),
        },
        Variation {
            name: "turn_wait",
            what: "how long the GPU waits for the tenant whose turn it is (the daemon's \
                   TURN_WAIT; the daemon ran 2 ms before issue 57)",
            show: |k| us(k.turn_wait),
            low: |k| k.turn_wait = Nanos(20_000),
            high: |k| k.turn_wait = Nanos::from_millis(2),
        },
        Variation {
            name: "idle_hold",
            what: "how long a vGPU with nothing to run keeps its slice (the interposer's \
                   launch gate, tessera_core::gate; the experiment's gate gave it back at \
                   once before issue 57's item 11)",
            show: |k| us(k.idle_hold),
            low: |k| k.idle_hold = Nanos::ZERO,
            high: |k| k.idle_hold = Nanos::from_millis(5),
        },
        Variation {
            name: "coscheduling",
            what: "GPU-centric coscheduling of an interactive VM: the daemon's boost (what \
                   ships), the paper's KVM wake-up (low), none (high)",
            show: |k| format!("{:?}", k.coscheduling).to_lowercase(),
            low: |k| k.coscheduling = setting::FairgvCosched::Paper,
            high: |k| k.coscheduling = setting::FairgvCosched::Off,
        },
        Variation {
            name: "ring",
            what: "requests a vGPU's ring holds",
            show: |k| k.ring.to_string(),
            low: |k| k.ring = 64,
            high: |k| k.ring = 1_024,
        },
        Variation {
            name: "device_depth",
            what: "kernels the driver's queue holds, all vGPUs together",
            show: |k| k.device_depth.to_string(),
            low: |k| k.device_depth = 128,
            high: |k| k.device_depth = 4_096,
        },
        Variation {
            name: "sync",
            what: "idle GPU time of one synchronisation in collaborative scheduling",
            show: |k| us(k.sync),
            low: |k| k.sync = Nanos(2_000),
            high: |k| k.sync = Nanos(50_000),
        },
        Variation {
            name: "wakeup_granularity",
            what: "CFS's wake-up granularity (Linux's default is 1 ms, scaled by CPUs)",
            show: |k| us(k.wakeup_granularity),
            low: |k| k.wakeup_granularity = Nanos(25_000),
            high: |k| k.wakeup_granularity = Nanos(1_000_000),
        },
        Variation {
            name: "wake_lag",
            what: "how far behind a woken vCPU is placed (half of CFS's latency)",
            show: |k| us(k.wake_lag),
            low: |k| k.wake_lag = Nanos(750_000),
            high: |k| k.wake_lag = Nanos(6_000_000),
        },
        Variation {
            name: "cpu_tick",
            what: "how often a core re-picks its vCPU (HZ=2000 to HZ=250)",
            show: |k| us(k.cpu_tick),
            low: |k| k.cpu_tick = Nanos(500_000),
            high: |k| k.cpu_tick = Nanos(4_000_000),
        },
        Variation {
            name: "min_call_cpu",
            what: "the least CPU time of one call",
            show: |k| us(k.min_call_cpu),
            low: |k| k.min_call_cpu = Nanos(2_000),
            high: |k| k.min_call_cpu = Nanos(20_000),
        },
    ]
}

/// Each constant of ours at its low and high value: every claim that depends on the
/// setting (Table 4's do not) judged again.
fn sensitivity(seconds: f64, base: &[Claim]) -> Result<Vec<Sensitivity>, ExperimentError> {
    claims::sensitivity(
        &Constants::DEFAULT,
        base,
        &variations(),
        |c| !c.id.starts_with("table4"),
        |k| measure(seconds, *k).map(|r| r.claims),
    )
}

/// The experiment at constants `k`, claims judged.
fn measure(seconds: f64, k: Constants) -> Result<FairgvResults, ExperimentError> {
    let duration = Nanos((seconds * 1e9) as u64);
    let sim = sim_error;
    let mut rows = Vec::new();
    for (setup, benches, vms, cores) in setups() {
        for b in benches {
            let bench = benchmark(b)?;
            // the ideal aggregated throughput (§5.4.1): the same program alone, run
            // natively — one VM on its own core, polling, never gated — shared by weight
            let native = [VmSetup { weight: 1, core: 0 }];
            let native_calls =
                setting::run(&bench, &native, 1, Scheduler::CreditPoll, duration, &k)
                    .map_err(sim)?
                    .calls[0];
            let best = native_calls as f64;
            let total_w: f64 = vms.iter().map(|v| f64::from(v.weight)).sum();
            for sched in Scheduler::ALL {
                let out = setting::run(&bench, &vms, cores, sched, duration, &k).map_err(sim)?;
                // the VM alone under the same scheduler: Table 3's run time is its own
                // (under Credit-poll that is the native run above)
                let alone_calls = if sched == Scheduler::CreditPoll {
                    native_calls
                } else {
                    setting::run(&bench, &native, 1, sched, duration, &k).map_err(sim)?.calls[0]
                };
                let alone = alone_calls as f64 / seconds;
                let ideal: Vec<f64> =
                    vms.iter().map(|v| best * f64::from(v.weight) / total_w).collect();
                let normalized: Vec<f64> =
                    out.calls.iter().zip(&ideal).map(|(t, o)| *t as f64 / o.max(1e-9)).collect();
                let max = normalized.iter().copied().fold(0.0, f64::max);
                let min = normalized.iter().copied().fold(f64::INFINITY, f64::min);
                let measured: f64 = out.calls.iter().map(|c| *c as f64).sum();
                let completion_s = out
                    .calls
                    .iter()
                    .map(|c| bench.run_s * alone * seconds / (*c as f64).max(1.0))
                    .collect();
                rows.push(Row {
                    completion_s,
                    setup: setup.into(),
                    benchmark: b.into(),
                    scheduler: sched.label().into(),
                    weights: vms.iter().map(|v| v.weight).collect(),
                    normalized,
                    mmr: if max > 0.0 { min / max } else { 0.0 },
                    overhead: ideal.iter().sum::<f64>() / measured.max(1e-9),
                    gpu_busy: out.gpu_busy,
                    switches_per_s: out.switches as f64 / seconds,
                    standalone: native_calls as f64 / (alone_calls as f64).max(1.0),
                });
            }
        }
    }
    let mut r = FairgvResults {
        schema: SCHEMA.into(),
        constants: k,
        seconds,
        rows,
        work_conserving: work_conserving(duration, &k)?,
        collaborative: collaborative(duration, &k)?,
        slicing: slicing::run()?,
        long_kernel: None,
        claims: Vec::new(),
        comparisons: Vec::new(),
        sensitivity: Vec::new(),
    };
    r.claims = judge(&r);
    r.comparisons = claims::comparisons(&r.claims);
    Ok(r)
}

/// Figure 10: BS and a sleeping MM, weights 1:1, each VM on its own core (ours: the
/// paper gives neither).
fn work_conserving(
    duration: Nanos,
    k: &Constants,
) -> Result<Vec<WorkConservingRow>, ExperimentError> {
    let (bs, mm) = (benchmark("BS")?, benchmark("MM")?);
    let mut out = Vec::new();
    for ratio in SLEEP_RATIOS {
        let vms = [
            VmSpec { setup: VmSetup { weight: 1, core: 0 }, bench: bs.clone(), sleep_ratio: 0.0 },
            VmSpec { setup: VmSetup { weight: 1, core: 1 }, bench: mm.clone(), sleep_ratio: ratio },
        ];
        for sched in [Scheduler::FairGvNonWorkConserving, Scheduler::FairGv] {
            let o = setting::run_mixed(&vms, 2, sched, duration, k).map_err(sim_error)?;
            let share = |i: usize| o.gpu_ns[i] as f64 / duration.0.max(1) as f64;
            out.push(WorkConservingRow {
                sleep_ratio: ratio,
                scheduler: sched.label().into(),
                gpu_busy: o.gpu_busy,
                bs_gpu: share(0),
                mm_gpu: share(1),
            });
        }
    }
    Ok(out)
}

/// Figure 11: MM or HS beside a background MM of each kernel size, weights 1:1, each
/// VM on its own core (ours).
fn collaborative(duration: Nanos, k: &Constants) -> Result<Vec<CollaborativeRow>, ExperimentError> {
    let mm = benchmark("MM")?;
    let mut out = Vec::new();
    for fg in ["MM", "HS"] {
        let fore = benchmark(fg)?;
        let alone_spec = [VmSpec {
            setup: VmSetup { weight: 1, core: 0 },
            bench: fore.clone(),
            sleep_ratio: 0.0,
        }];
        for sched in [Scheduler::CreditPoll, Scheduler::FairGv] {
            let alone = setting::run_mixed(&alone_spec, 1, sched, duration, k)
                .map_err(sim_error)?
                .calls[0] as f64;
            for kernel_us in BACKGROUND_KERNELS_US {
                let back =
                    Benchmark { name: format!("MM {kernel_us} µs"), kernel_us, ..mm.clone() };
                let vms = [
                    alone_spec[0].clone(),
                    VmSpec { setup: VmSetup { weight: 1, core: 1 }, bench: back, sleep_ratio: 0.0 },
                ];
                let o = setting::run_mixed(&vms, 2, sched, duration, k).map_err(sim_error)?;
                let busy: u64 = o.gpu_ns.iter().sum();
                out.push(CollaborativeRow {
                    foreground: fg.into(),
                    background_kernel_us: kernel_us,
                    scheduler: sched.label().into(),
                    normalized_run_time: alone / (o.calls[0] as f64).max(1.0),
                    foreground_gpu_share: o.gpu_ns[0] as f64 / busy.max(1) as f64,
                    gpu_busy: busy as f64 / duration.0.max(1) as f64,
                });
            }
        }
    }
    Ok(out)
}

fn sim_error(e: crate::engine::SimError) -> ExperimentError {
    ExperimentError::Config(format!("FairGV's setting: {e}"))
}

fn row<'a>(r: &'a FairgvResults, setup: &str, bench: &str, sched: &str) -> Option<&'a Row> {
    r.rows.iter().find(|x| x.setup == setup && x.benchmark == bench && x.scheduler == sched)
}

/// Run and write `results.json` and `report.md` to `out`.
pub fn run_and_write(out: &Path) -> Result<FairgvResults, ExperimentError> {
    run_for_and_write(SECONDS, out)
}

/// [`run_for`] `seconds`, and write its outputs to `out`.
pub fn run_for_and_write(seconds: f64, out: &Path) -> Result<FairgvResults, ExperimentError> {
    let r = run_for(seconds)?;
    write(&r, out)?;
    Ok(r)
}

/// Write `r`'s `results.json`, `report.md` and figures to `out`.
pub fn write(r: &FairgvResults, out: &Path) -> Result<(), ExperimentError> {
    super::write_results(out, r, &report(r))?;
    figures::draw(r, out)
}

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
pub mod long_kernel;
pub mod setting;
pub mod slicing;

use super::ExperimentError;
use super::claims::{self, Claim, Comparison, Sensitivity, Test, Unit, Variation};
use serde::{Deserialize, Serialize};
use setting::{Benchmark, Constants, Scheduler, VmSetup, VmSpec};
use std::fmt::Write as _;
use std::path::Path;
use tessera_core::Nanos;

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

/// The paper's claims judged on `r`'s numbers (public so that a test can judge
/// numbers it changed).
pub fn judge(r: &FairgvResults) -> Vec<Claim> {
    let worst = |setup: &str, sched: &str, f: fn(&Row) -> f64, pick_max: bool| {
        let v = r.rows.iter().filter(|x| x.setup == setup && x.scheduler == sched).map(f);
        if pick_max { v.reduce(f64::max) } else { v.reduce(f64::min) }
    };
    let busy = |ratio: f64, sched: &str| {
        r.work_conserving
            .iter()
            .find(|x| x.sleep_ratio == ratio && x.scheduler == sched)
            .map(|x| x.gpu_busy)
    };
    let wc_gain = SLEEP_RATIOS
        .iter()
        .map(|q| Some(busy(*q, "FairGV")? - busy(*q, "FairGV non-WC")?))
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::min));
    let non_wc_fall = (|| Some(busy(0.5, "FairGV non-WC")? - busy(0.8, "FairGV non-WC")?))();
    let norm = |sched: &str, kernel: f64, pick: fn(f64, f64) -> f64| {
        r.collaborative
            .iter()
            .filter(|x| x.scheduler == sched && x.background_kernel_us == kernel)
            .map(|x| x.normalized_run_time)
            .reduce(pick)
    };
    let (small, large) =
        (BACKGROUND_KERNELS_US[0], BACKGROUND_KERNELS_US[BACKGROUND_KERNELS_US.len() - 1]);
    let rule_ok = r
        .slicing
        .rows
        .iter()
        .filter(|x| x.blocks_per_sub_kernel >= 1_500)
        .map(|x| x.ours_pct)
        .reduce(f64::max);
    let bigger_cheaper = {
        let of = |grid: u64, n: u64| {
            r.slicing
                .rows
                .iter()
                .find(|x| x.grid_blocks == grid && x.sub_kernels == n)
                .map(|x| x.ours_pct)
        };
        let pairs: Vec<(f64, f64)> = r
            .slicing
            .rows
            .iter()
            .filter(|x| x.grid_blocks == slicing::FIT_GRID && x.sub_kernels > 1)
            .filter_map(|x| Some((x.ours_pct, of(810_000, x.sub_kernels)?)))
            .collect();
        (!pairs.is_empty()).then(|| {
            pairs.iter().filter(|(small, big)| big <= small).count() as f64 / pairs.len() as f64
        })
    };
    let hs_srd1 = row(r, "non-congested", "SRD1", "Credit-hs").map(|x| x.overhead);
    let fg_srd1 = row(r, "non-congested", "SRD1", "FairGV").map(|x| x.overhead);
    // over the given benchmarks and schedulers of one setup: the extreme of `f`
    let over = |setup: &str, benches: &[&str], scheds: &[&str], f: fn(&Row) -> f64, max: bool| {
        let v = benches
            .iter()
            .flat_map(|b| scheds.iter().map(move |s| (*b, *s)))
            .map(|(b, s)| row(r, setup, b, s).map(f));
        let v: Option<Vec<f64>> = v.collect();
        v.and_then(|v| v.into_iter().reduce(if max { f64::max } else { f64::min }))
    };
    let credits = ["Credit-poll", "Credit-hs"];
    let interactive_gain = ["BS", "SRD1"]
        .iter()
        .map(|b| {
            let of = |s: &str| row(r, "non-congested", b, s).map(|x| x.mmr);
            of("Strict").zip(of("Credit-poll")).map(|(a, c)| a / c.max(1e-9))
        })
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::min));
    let fairgv_least = {
        let benches = ["MM", "HS", "BS", "SRD1"];
        let least = |b: &str| {
            let fg = row(r, "non-congested", b, "FairGV")?.overhead;
            let others = ["Credit-poll", "Credit-hs", "Strict"]
                .iter()
                .map(|s| row(r, "non-congested", b, s).map(|x| x.overhead))
                .collect::<Option<Vec<f64>>>()?;
            Some(others.iter().all(|o| fg <= *o))
        };
        benches
            .iter()
            .map(|b| least(b))
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().filter(|x| **x).count() as f64)
    };
    let congested_srd1 = |s: &str| row(r, "congested", "SRD1", s).map(|x| x.overhead);
    // two-sided (issue 57): the value furthest from `centre` over `values`
    let furthest = |values: Vec<f64>, centre: f64| {
        values
            .into_iter()
            .reduce(|a, b| if (b - centre).abs() > (a - centre).abs() { b } else { a })
    };
    let fairgv_furthest = furthest(
        r.collaborative
            .iter()
            .filter(|x| x.scheduler == "FairGV")
            .map(|x| x.normalized_run_time)
            .collect(),
        2.0,
    );
    let congested_overhead = furthest(
        r.rows
            .iter()
            .filter(|x| x.setup == "congested" && x.scheduler == "FairGV")
            .map(|x| x.overhead)
            .collect(),
        1.01,
    );
    let switches = |setup: &str| {
        let of = |s: &str| row(r, setup, "SRD1", s).map(|x| x.switches_per_s);
        of("Credit-hs").zip(of("FairGV")).map(|(a, b)| a / b.max(1e-9))
    };
    // Figure 11 whole: Credit-poll's foreground slows as the background's kernels grow,
    // for both programs: the drops between consecutive sizes (more than 1%)
    let credit_drops = {
        let mut drops = 0usize;
        let mut seen = false;
        for fg in ["MM", "HS"] {
            let curve: Vec<f64> = BACKGROUND_KERNELS_US
                .iter()
                .filter_map(|k| {
                    r.collaborative
                        .iter()
                        .find(|x| {
                            x.scheduler == "Credit-poll"
                                && x.foreground == fg
                                && x.background_kernel_us == *k
                        })
                        .map(|x| x.normalized_run_time)
                })
                .collect();
            seen |= curve.len() == BACKGROUND_KERNELS_US.len();
            drops += curve.windows(2).filter(|w| w[1] < w[0] * 0.99).count();
        }
        seen.then_some(drops as f64)
    };
    // §5.4.4: under Strict, of two VMs on one core the higher-weight one does better
    // (its x, throughput over its fair share, is the higher), BS and SRD1
    let strict_favours_heavy = {
        let pairs: Vec<bool> = ["BS", "SRD1"]
            .iter()
            .filter_map(|b| row(r, "congested", b, "Strict"))
            .flat_map(|x| {
                x.normalized
                    .chunks(2)
                    .zip(x.weights.chunks(2))
                    .filter(|(_, w)| w.len() == 2 && w[0] != w[1])
                    .map(|(n, w)| if w[1] > w[0] { n[1] > n[0] } else { n[0] > n[1] })
                    .collect::<Vec<_>>()
            })
            .collect();
        (!pairs.is_empty())
            .then(|| pairs.iter().filter(|x| **x).count() as f64 / pairs.len() as f64)
    };
    let mut added = vec![
        Claim::judge(
            "fig8-credit-non-interactive-fair",
            "3 VMs on one core, weights 1:2:3, MM and HS, Credit-poll and Credit-hs",
            "§5.4.3, Figure 8",
            "for the non-interactive MM and HS, Credit-poll and Credit-hs achieve high fairness (>= 0.9 MMR)",
            Test::AtLeast { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            over("non-congested", &["MM", "HS"], &credits, |x| x.mmr, false),
            "the lowest MMR of the four".into(),
        ),
        Claim::judge(
            "fig8-credit-non-interactive-overhead",
            "3 VMs on one core, weights 1:2:3, MM and HS, Credit-poll and Credit-hs",
            "§5.4.3, Figure 8",
            "for MM and HS, Credit-poll and Credit-hs run with low overhead (<= 1)",
            Test::AtMost { paper: 1.0, tolerance: 0.03 },
            Unit::Ratio,
            over("non-congested", &["MM", "HS"], &credits, |x| x.overhead, true),
            "the highest overhead of the four".into(),
        )
        .structural(
            "MM and HS make almost no synchronous calls, so their VMs never wait on the GPU in \
             the model: the overhead is 1 whatever the scheduler",
        ),
        Claim::judge(
            "fig8-strict-unfair-non-interactive",
            "3 VMs on one core, weights 1:2:3, MM and HS, Strict",
            "§5.4.3, Figure 8",
            "Strict coscheduling fails to achieve reasonable fairness on the non-interactive MM and HS \
             (judged: below the 0.9 MMR the paper calls high fairness, on both)",
            Test::AtMost { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            over("non-congested", &["MM", "HS"], &["Strict"], |x| x.mmr, true),
            "Strict's higher MMR of MM and HS".into(),
        ),
        Claim::judge(
            "fig8-strict-interactive",
            "3 VMs on one core, weights 1:2:3, BS and SRD1, Strict and Credit-poll",
            "§5.4.3, Figure 8",
            "on the interactive BS and SRD1, Strict coscheduling dramatically improves fairness over \
             Credit-poll (direction only; judged: Strict's MMR at least 1.5x Credit-poll's on both)",
            Test::AtLeast { paper: 1.5, tolerance: 0.0 },
            Unit::Ratio,
            interactive_gain,
            "the smaller of BS's and SRD1's Strict MMR over Credit-poll's".into(),
        ),
        Claim::judge(
            "fig8-fairgv-least-overhead",
            "3 VMs on one core, weights 1:2:3, MM, HS, BS, SRD1",
            "§5.4.3, Figure 8",
            "FairGV runs with the least overhead among all schedulers (judged: on each of the 4 benchmarks)",
            Test::Near { paper: 4.0, tolerance: 0.0 },
            Unit::Count,
            fairgv_least,
            "benchmarks on which FairGV's overhead is at most every other scheduler's".into(),
        ),
        Claim::judge(
            "fig9-credit-hs-bs",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS, Credit-hs",
            "§5.4.4, Figure 9",
            "Credit-hs exhibits high fairness in the case of BS (judged: >= 0.9 MMR)",
            Test::AtLeast { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            row(r, "congested", "BS", "Credit-hs").map(|x| x.mmr),
            String::new(),
        ),
        Claim::judge(
            "fig9-credit-hs-srd1",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, SRD1, Credit-hs and FairGV",
            "§5.4.4, Figure 9",
            "Credit-hs's performance is not high in SRD1, which spends its time in vCPU context \
             switching (direction only; judged: overhead above FairGV's by at least 5%)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            congested_srd1("Credit-hs").zip(congested_srd1("FairGV")).map(|(a, b)| a / b),
            "Credit-hs's overhead over FairGV's".into(),
        ),
        // the mechanism the paper names for both Credit-hs claims (issue 57)
        Claim::judge(
            "fig8-credit-hs-srd1-switches",
            "3 VMs on one core, SRD1, Credit-hs and FairGV",
            "§5.4.3, Figure 8",
            "the mechanism of Credit-hs's overhead on SRD1: frequent synchronous calls cause excessive \
             vCPU context switching (judged: Credit-hs switches vCPUs at least 1.05x as often as FairGV)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            switches("non-congested"),
            "Credit-hs's vCPU switches per second over FairGV's".into(),
        ),
        Claim::judge(
            "fig9-credit-hs-srd1-switches",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, SRD1, Credit-hs and FairGV",
            "§5.4.4, Figure 9",
            "the mechanism of Credit-hs's low performance on SRD1: its yields turn into vCPU \
             context switches (judged: Credit-hs switches vCPUs at least 1.05x as often as FairGV)",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            switches("congested"),
            "Credit-hs's vCPU switches per second over FairGV's".into(),
        ),
        Claim::judge(
            "fig9-strict-favours-heavy",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1, Strict",
            "§5.4.4, Figure 9",
            "under Strict, of two VMs on one core the one with the higher weight achieves better \
             performance (its coscheduling requests follow its vCPU weight)",
            Test::AtLeast { paper: 1.0, tolerance: 0.0 },
            Unit::Percent,
            strict_favours_heavy,
            "share of same-core pairs, BS and SRD1, where the heavier VM's x is the higher".into(),
        ),
        Claim::judge(
            "fig11-credit-rises",
            "MM or HS beside a background MM of 21-1,605 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "under Credit-poll the foreground's normalized run time grows with the background's \
             kernel size (judged over the whole figure: no drop of more than 1% from one size to \
             the next, for either program)",
            Test::AtMost { paper: 0.0, tolerance: 0.0 },
            Unit::Count,
            credit_drops,
            "drops from one background size to the next, MM and HS".into(),
        ),
    ];
    // Table 4's 900 × 900 rows one by one: the wave model's predictions (those rows are
    // not fitted); the one-sub-kernel row is no slicing at all
    for x in r.slicing.rows.iter().filter(|x| !x.fitted && x.sub_kernels > 1) {
        let paper = x.paper_pct / 100.0;
        added.push(Claim::judge(
            &format!("table4-{}-{}", x.grid_blocks, x.sub_kernels),
            &format!("MM of {} blocks in {} sub-kernels", x.grid_blocks, x.sub_kernels),
            "§5.5.2, Table 4",
            &format!(
                "slicing into {} sub-kernels of {} blocks slows MM by {:.1}% (the wave model \
                 fitted on the 600 × 600 rows predicts it; within 2 points or a quarter of \
                 the paper's value)",
                x.sub_kernels, x.blocks_per_sub_kernel, x.paper_pct
            ),
            Test::Near { paper, tolerance: (0.25 * paper).max(0.02) },
            Unit::Percent,
            Some(x.ours_pct / 100.0),
            String::new(),
        ));
    }
    let mut earlier = vec![
        Claim::judge(
            "fig8-mmr",
            "3 VMs on one core, weights 1:2:3, MM, HS, BS, SRD1",
            "§5.4.3, Figure 8",
            "FairGV achieves nearly ideal weighted fair sharing, MMR >= 0.99, on every benchmark",
            // the paper's bound as it states it (issue 57: 2 points of tolerance let
            // 97.8% pass)
            Test::AtLeast { paper: 0.99, tolerance: 0.0 },
            Unit::Percent,
            worst("non-congested", "FairGV", |x| x.mmr, false),
            "the lowest MMR over the four benchmarks".into(),
        ),
        Claim::judge(
            "fig9-mmr",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "FairGV keeps MMR >= 0.97 under congestion",
            Test::AtLeast { paper: 0.97, tolerance: 0.02 },
            Unit::Percent,
            worst("congested", "FairGV", |x| x.mmr, false),
            "the lower MMR of BS and SRD1".into(),
        ),
        Claim::judge(
            "fig9-overhead",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "FairGV's aggregated overhead stays <= 1.02 under congestion, and no lower than the \
             ideal 1.0 (judged two-sided: 1.01 +- 0.04)",
            Test::Near { paper: 1.01, tolerance: 0.04 },
            Unit::Ratio,
            congested_overhead,
            "the overhead of BS and SRD1 furthest from 1.01".into(),
        ),
        Claim::judge(
            "fig9-strict-unfair",
            "6 VMs on 3 cores, weights 1:2:2:3:3:4, BS and SRD1",
            "§5.4.4, Figure 9",
            "Strict coscheduling cannot achieve fairness under congestion (MMR well below FairGV's 0.97)",
            Test::AtMost { paper: 0.9, tolerance: 0.0 },
            Unit::Percent,
            worst("congested", "Strict", |x| x.mmr, false),
            "Strict's lower MMR of BS and SRD1".into(),
        ),
        Claim::judge(
            "fig8-credit-hs-srd1",
            "3 VMs on one core, SRD1",
            "§5.4.3, Figure 8",
            "Credit-hs has high overhead on SRD1 (644 synchronous calls per 10 ms): more than FairGV's",
            Test::RatioAtLeast { paper: 1.05, factor: 1.0 },
            Unit::Ratio,
            match (hs_srd1, fg_srd1) {
                (Some(a), Some(b)) => Some(a / b),
                _ => None,
            },
            "Credit-hs's overhead over FairGV's".into(),
        ),
        Claim::judge(
            "fig10-wc-gain",
            "BS beside an MM sleeping 50-80% of its time, FairGV with and without work conservation",
            "§5.4.5, Figure 10",
            "work conservation raises the GPU's total utilization at every sleep ratio \
             (the figure's values are not in the text: judged as any gain)",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            wc_gain,
            "the smallest gain in utilization over the four sleep ratios".into(),
        )
        .structural("without work conservation the GPU idles while BS waits, by construction"),
        Claim::judge(
            "fig10-non-wc-falls",
            "BS beside an MM sleeping 50-80% of its time, FairGV without work conservation",
            "§5.4.5, Figure 10",
            "without work conservation utilization falls as the sleep ratio rises",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Percent,
            non_wc_fall,
            "utilization at 50% sleep less at 80%".into(),
        )
        .structural("a program that sleeps more asks the GPU for less, by construction"),
        Claim::judge(
            "fig11-credit-small",
            "MM or HS beside a background MM of 21 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "with background kernels shorter than the foreground's, the foreground's normalized run time stays under 2.0",
            Test::AtMost { paper: 2.0, tolerance: 0.0 },
            Unit::Ratio,
            norm("Credit-poll", small, f64::max),
            "the larger of MM's and HS's normalized run time".into(),
        ),
        Claim::judge(
            "fig11-credit-large",
            "MM or HS beside a background MM of 1,605 µs kernels, Credit-poll",
            "§5.5.1, Figure 11",
            "with longer background kernels the foreground's run time grows well past 2.0 (judged: at least 2.5)",
            Test::AtLeast { paper: 2.5, tolerance: 0.0 },
            Unit::Ratio,
            norm("Credit-poll", large, f64::min),
            "the smaller of MM's and HS's normalized run time".into(),
        ),
        Claim::judge(
            "fig11-fairgv-robust",
            "MM or HS beside a background MM of 21-1,605 µs kernels, FairGV",
            "§5.5.1, Figure 11",
            "FairGV keeps fairness whatever the background's kernel size: about 2.0, an equal share \
             (judged two-sided: 2.0 +- 0.2; a foreground well under 2.0 takes more than its share)",
            Test::Near { paper: 2.0, tolerance: 0.2 },
            Unit::Ratio,
            fairgv_furthest,
            "the normalized run time furthest from 2.0 over every size and both programs".into(),
        ),
        Claim::judge(
            "table4-1500-blocks",
            "MM sliced into sub-kernels, grids 600 × 600 and 900 × 900",
            "§5.5.2, Table 4",
            "with at least about 1,500 thread blocks per sub-kernel the slowdown stays under 5%",
            Test::AtMost { paper: 0.05, tolerance: 0.0 },
            Unit::Percent,
            rule_ok.map(|pct| pct / 100.0),
            "the model's largest slowdown over rows of at least 1,500 blocks".into(),
        ),
        Claim::judge(
            "table4-larger-cheaper",
            "MM sliced into 64-4,096 sub-kernels, both grids",
            "§5.5.2, Table 4",
            "a larger kernel generally costs less to slice into the same number of sub-kernels",
            Test::AtLeast { paper: 1.0, tolerance: 0.0 },
            Unit::Percent,
            bigger_cheaper,
            "share of sub-kernel counts where the 900 × 900 slowdown is at most the 600 × 600 one"
                .into(),
        )
        .structural(
            "in the wave model a larger kernel leaves a smaller share of part-empty waves, by \
             construction",
        ),
    ];
    earlier.append(&mut added);
    earlier
}

/// The GPU's turn wait beside the headline: what ships, its history, and the claims it
/// moves at its low and high value (issue 57).
fn turn_wait_note(r: &FairgvResults) -> String {
    let mut s = format!(
        "\n**The GPU's turn wait** (FairGV's spin budget, GPU side) is {} µs, the daemon's own \
         (`tessera_core::policies::fair::TURN_WAIT`). Its history: the first FairGV model \
         (fa0be56) waited 200 µs; the program engine's setting (c5eceb5) 50 µs, a change not \
         mentioned then, with one constant for this wait and the VMs' hybrid spin; the \
         daemon 2 ms from its first `--policy fair` (3e160ad) until issue 57, which split the \
         two constants and made the daemon run what is judged here.",
        r.constants.turn_wait.0 / 1_000
    );
    s.push_str(&sensitivity_note(r, "turn_wait"));
    s
}

/// The gate's idle hold beside the headline: what ships, its history, and the claims
/// it moves at its low and high value (issue 57 item 11).
fn idle_hold_note(r: &FairgvResults) -> String {
    let mut s = format!(
        "\n**The gate's idle hold** (FairGV's spin budget, VM side: how long a vGPU with \
         nothing in its ring or the GPU keeps its slice) is {} µs, the interposer's launch \
         gate's (`tessera_core::gate::SliceRule::DEFAULT`, the rule both call since issue \
         57's item 11). Its history: every FairGV model before item 11 gave the slice back \
         at once, while the interposer has held an idle slice 2 ms since its launch gate \
         was built; item 11 put the gate's rule in one place and the experiment runs it. \
         The same change made the experiment's gate count kernels at the mean until the \
         count reaches the slice (it stopped one short) and charge a slice what its gate \
         measured, never more than it held (it charged the time held), as the daemon does.",
        r.constants.idle_hold.0 / 1_000
    );
    s.push_str(&sensitivity_note(r, "idle_hold"));
    s
}

/// Coscheduling beside the headline: the daemon's form, its history, and the claims the
/// paper's form and none move (issue 58 item 5).
fn cosched_note(r: &FairgvResults) -> String {
    let mut s = format!(
        "\n**Coscheduling** of an interactive VM is the daemon's ({:?}: its thread weighs \
         as one raised {} nice levels, about {:.1} times, for as long as its quantum \
         lasts; `Coscheduling::Boost`, by `tessera_core::interactive::BOOST_NICE`, what \
         tesserad's `cosched.rs` sets). Its history: until issue 58's item 5 the \
         experiment ran the paper's KVM wake-up of the vCPU at the quantum's start, which \
         a daemon outside the kernel cannot do. At this setting's wake-up granularity (100 \
         µs, ours) a woken thread preempts a CPU-bound one anyway, so the boost has little \
         to do; at Linux's own (a few ms) it runs an interactive program's thread at once \
         (`programs::tests::the_daemons_boost_runs_an_interactive_program_sooner`: more \
         than 1.5x the iterations at 3 ms, less than 1.2x at 100 µs).",
        r.constants.coscheduling,
        tessera_core::interactive::BOOST_NICE,
        tessera_core::interactive::boost_factor()
    );
    s.push_str(&sensitivity_note(r, "coscheduling"));
    s
}

/// The claims a constant of ours moves at its low and high value, beside the headline.
fn sensitivity_note(r: &FairgvResults, constant: &str) -> String {
    let mut s = String::new();
    match r.sensitivity.iter().find(|x| x.constant == constant) {
        Some(v) if !v.claims.is_empty() => {
            let _ = write!(
                s,
                " At {} / {} / {}, the headline claims and those whose verdict changes:",
                v.values[0], v.values[1], v.values[2]
            );
            let headline = |id: &str| id == "fig8-mmr" || id == "fig9-mmr";
            let changes = |c: &&claims::ClaimAtValues| c.holds.iter().any(|h| *h != c.holds[1]);
            for c in v.claims.iter().filter(|c| headline(&c.id) || changes(c)) {
                let show = |i: usize| match (c.ours[i], c.holds[i]) {
                    (Some(x), Some(true)) => format!("{x:.3} (holds)"),
                    (Some(x), _) => format!("{x:.3} (**no**)"),
                    (None, _) => "not measured".to_string(),
                };
                let _ = write!(s, " `{}` {} / {} / {};", c.id, show(0), show(1), show(2));
            }
            s.pop();
            s.push('.');
        }
        Some(_) => s.push_str(" No claim changes at its low or high value."),
        None => s.push_str(" (Its sensitivity was not run.)"),
    }
    s.push('\n');
    s
}

/// The report's section on [`long_kernel`].
fn long_kernel_section(lk: &long_kernel::LongKernel) -> String {
    let mut s = format!(
        "\n## A long kernel beside short ones: kernel slicing on the program engine\n\n\
         One VM launching {} s kernels of {} × {} blocks beside one whose ring is always \
         full of {} ms kernels, weights 1:1, FairGV's scheduler on the non-preemptive \
         device, {} s (shorter than one long kernel). Sliced, the long kernel is issued as \
         the interposer issues it: {} sub-kernels by the interposer's own plan \
         (`tessera_ptx::plan`), each quantum ending at a sub-kernel's end; the \
         sub-kernels' own cost (Table 4's part-empty waves) is not added. Test: \
         `programs::tests::slicing_shares_the_gpu_with_a_long_kernel` (0.5 ± 0.1 sliced, \
         under 0.05 whole).\n\n\
         | long kernel | short VM's share of the GPU time | GPU busy | quanta (long, short) |\n\
         |---|---|---|---|\n",
        long_kernel::KERNEL_S,
        long_kernel::GRID[0],
        long_kernel::GRID[1],
        long_kernel::SHORT_KERNEL_US / 1_000,
        long_kernel::SECONDS,
        lk.sub_kernels,
    );
    for run in &lk.runs {
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} | {}, {} |",
            if run.sliced { "sliced" } else { "whole" },
            run.short_share,
            run.gpu_busy,
            run.quanta[0],
            run.quanta[1]
        );
    }
    s
}

/// The report.
pub fn report(r: &FairgvResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# FairGV: reproduction\n");
    let _ = writeln!(
        s,
        "§5.4-5.5 on the program engine (`tessera-sim`'s `programs/`; the setting in \
         `experiments/fairgv/setting.rs`), {} simulated s per run, event-driven: VMs of one \
         vCPU pinned to cores under a CFS-like CPU scheduler, one non-preemptive GPU with a \
         device queue of {} kernels, programs built from Table 3's call rates and kernel \
         sizes (`data/fairgv/table3.csv`). The GPU's quanta are handed out by the core's own \
         policies — `FairQueuing` (FairGV), `Credit` (Credit-poll, Credit-hs) and Credit's \
         Strict form (Pegasus's Algorithm 2), the code the daemon runs. Ours, not the \
         paper's: the CPU work between calls (what the kernels leave of 10 ms, over the \
         calls, at least {} µs), a vCPU switch costing {} µs, a CPU tick of {} ms, a wake-up \
         granularity of {} µs, a ring of {} requests, a synchronisation costing {} µs of idle \
         GPU, hybrid spinning for {} µs (the paper gives 100K iterations, no time); the \
         paper's: slices of {} and {} ms, {} sampled requests. \
         x = measured over ideal fair throughput (the weight's \
         share of what the bottleneck — the cores or the GPU — completes with every \
         resource busy); MMR = min x / max x; overhead = ideal aggregated throughput / \
         measured. Figures: `fig8.svg`, `fig9.svg`, `fig10.svg`, `fig11.svg`, \
         `table4.svg`.\n",
        r.seconds,
        r.constants.device_depth,
        r.constants.min_call_cpu.0 / 1_000,
        r.constants.switch.0 / 1_000,
        r.constants.cpu_tick.0 / 1_000_000,
        r.constants.wakeup_granularity.0 / 1_000,
        r.constants.ring,
        r.constants.sync.0 / 1_000,
        r.constants.spin.0 / 1_000,
        r.constants.fairgv_slice.0 / 1_000_000,
        r.constants.credit_slice.0 / 1_000_000,
        r.constants.samples,
    );
    let _ = writeln!(
        s,
        "## Figures 8 and 9: fairness and overhead\n\n\
         Completion time: Table 3's run time alone, scaled by the model's rate for the VM \
         alone (same scheduler) over its rate here — at the rates measured while every VM runs (in the paper a \
         VM that finishes leaves the others more).\n\n\
         | setup | benchmark | scheduler | x per VM | completion s per VM | MMR | overhead | GPU busy | vCPU switches/s |\n|---|---|---|---|---|---|---|---|---|"
    );
    for x in &r.rows {
        let xs: Vec<String> = x.normalized.iter().map(|v| format!("{v:.2}")).collect();
        let cs: Vec<String> = x.completion_s.iter().map(|v| format!("{v:.1}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.1}% | {:.0} |",
            x.setup,
            x.benchmark,
            x.scheduler,
            xs.join(" "),
            cs.join(" "),
            x.mmr,
            x.overhead,
            100.0 * x.gpu_busy,
            x.switches_per_s
        );
    }
    let _ = writeln!(
        s,
        "\n## Figure 10: work conservation\n\nBS and an MM that sleeps after each 10 ms \
         round of calls, weights 1:1, each VM on its own core (ours: the paper gives neither). \
         Paper: without work conservation utilization is low and falls as the sleep ratio \
         rises; its values are in the figure only.\n\n\
         | MM asleep | scheduler | GPU busy | BS's GPU | MM's GPU |\n|---|---|---|---|---|"
    );
    for x in &r.work_conserving {
        let _ = writeln!(
            s,
            "| {:.0}% | {} | {:.1}% | {:.1}% | {:.1}% |",
            100.0 * x.sleep_ratio,
            x.scheduler,
            100.0 * x.gpu_busy,
            100.0 * x.bs_gpu,
            100.0 * x.mm_gpu
        );
    }
    let _ = writeln!(
        s,
        "\n## Figure 11: collaborative scheduling\n\nMM (207 µs kernels) or HS (133 µs) beside \
         a background MM whose kernels last 21-1,605 µs, weights 1:1, each VM on its own core \
         (ours). Normalized run time = the foreground's run time beside the background over \
         its run time alone under the same scheduler; an equal share of a GPU both saturate \
         gives 2.0. Paper: under Credit-poll it stays under 2.0 while the background's \
         kernels are shorter than the foreground's and grows past it when they are longer; \
         FairGV's stays level.\n\n\
         | foreground | background kernel | scheduler | normalized run time | foreground's GPU share |\n|---|---|---|---|---|"
    );
    for x in &r.collaborative {
        let _ = writeln!(
            s,
            "| {} | {:.0} µs | {} | {:.2} | {:.1}% |",
            x.foreground,
            x.background_kernel_us,
            x.scheduler,
            x.normalized_run_time,
            100.0 * x.foreground_gpu_share
        );
    }
    let sl = &r.slicing;
    let _ = writeln!(
        s,
        "\n## Table 4: kernel slicing\n\nThe wave model of `experiments/fairgv/slicing.rs`: \
         its one parameter, the blocks the GPU runs at once, is fitted to the 600 × 600 rows \
         ({} blocks, root mean square error {:.1} points) and predicts the 900 × 900 rows \
         (error {:.1} points). Beside it, not fitted, the same waves at the paper's GPU's \
         occupancy by the block model's arithmetic (a TITAN X's 24 SMs, two of the CUDA \
         sample's 1,024-thread matrixMul blocks each: {} blocks; error {:.1} points over \
         every row): part-empty waves on the real GPU's SMs explain only part of Table 4, \
         so the fitted count describes the table, not the GPU.\n\n\
         | grid (blocks) | sub-kernels | blocks each | paper | model (fitted) | at the GPU's occupancy |\n|---|---|---|---|---|---|",
        sl.concurrent,
        sl.fit_rmse_pct,
        sl.predict_rmse_pct,
        sl.occupancy_concurrent,
        sl.occupancy_rmse_pct
    );
    for x in &sl.rows {
        let _ = writeln!(
            s,
            "| {}{} | {} | {} | {:.1}% | {:.1}% | {:.1}% |",
            x.grid_blocks,
            if x.fitted { " (fit)" } else { "" },
            x.sub_kernels,
            x.blocks_per_sub_kernel,
            x.paper_pct,
            x.ours_pct,
            x.occupancy_pct
        );
    }
    for x in &sl.rule {
        let _ = writeln!(
            s,
            "\ntessera's rule (`tessera_ptx::plan`, what the interposer issues: kernels over \
             600 × 600 blocks as sub-kernels of 1,500, the last of fewer) on {} blocks: {} \
             sub-kernel(s) of at least {} blocks, model slowdown \
             {:.1}%, the longest sub-kernel {:.0} ms of the paper's {:.0} ms kernel.",
            x.grid_blocks,
            x.sub_kernels,
            x.min_blocks,
            x.ours_pct,
            x.longest_ms,
            sl.rows
                .iter()
                .find(|y| y.grid_blocks == x.grid_blocks)
                .map_or(f64::NAN, |y| y.kernel_ms)
        );
    }
    if let Some(lk) = &r.long_kernel {
        s.push_str(&long_kernel_section(lk));
    }
    let _ = writeln!(s, "\n## Claims\n\n{}", claims::table(&r.claims));
    let (yes, no, unmeasured) = claims::tally(&r.claims);
    let _ = writeln!(s, "{yes} hold, {no} do not, {unmeasured} not measured.");
    s.push_str(&turn_wait_note(r));
    s.push_str(&idle_hold_note(r));
    s.push_str(&cosched_note(r));
    let judged = "every claim that depends on the setting judged again";
    let _ = writeln!(s, "\n{}", claims::sensitivity_section(judged, &r.sensitivity));
    let spin_share = r
        .collaborative
        .iter()
        .find(|x| x.scheduler == "FairGV" && x.background_kernel_us == BACKGROUND_KERNELS_US[0])
        .map_or(f64::NAN, |x| x.foreground_gpu_share);
    // beside a failing claim of Figures 8 and 9: the rows it is judged on, with the
    // vCPU switches that Credit-hs's cost on SRD1 is said to come from
    let beside = |c: &Claim| {
        let setup = if c.id.starts_with("fig8") {
            "non-congested"
        } else if c.id.starts_with("fig9") {
            "congested"
        } else {
            return String::new();
        };
        let cells: Vec<String> = r
            .rows
            .iter()
            .filter(|x| x.setup == setup && c.scope.contains(x.benchmark.as_str()))
            .filter(|x| c.scope.contains(x.scheduler.as_str()) || !c.scope.contains("Credit"))
            .map(|x| {
                format!(
                    "{} {} MMR {:.3}, overhead {:.2}, {:.0} vCPU switches/s",
                    x.benchmark, x.scheduler, x.mmr, x.overhead, x.switches_per_s
                )
            })
            .collect();
        let mut out = if cells.is_empty() {
            String::new()
        } else {
            format!("This run: {}.", cells.join("; "))
        };
        // §5.4.3 puts Credit-hs's cost on SRD1 in vCPU switches: say whether the model's
        // waits can yield on every synchronous call
        if c.id.contains("credit-hs-srd1")
            && let Ok(b) = benchmark("SRD1")
        {
            let spin_us = r.constants.spin.0 as f64 / 1e3;
            let _ = write!(
                out,
                " SRD1's kernels take {:.0} µs, {} the {spin_us:.0} µs spin: {}",
                b.kernel_us,
                if b.kernel_us < spin_us { "under" } else { "over" },
                if b.kernel_us < spin_us {
                    "a synchronous call whose vGPU is online is answered before the VM gives up \
                     its core, so in the model Credit-hs yields only while its vGPU is offline \
                     and its switch count stays low."
                } else {
                    "a synchronous call outlasts the spin, so the VM yields its core on it."
                }
            );
        }
        out
    };
    let _ = writeln!(
        s,
        "\n## Where we differ\n\n\
         The model is ours throughout: no hypervisor, virtio or guest-kernel costs beyond a \
         fixed vCPU switch; CPU work per call derived from Table 3 (what the kernels leave of \
         each 10 ms); a CFS-like CPU scheduler. Overheads are against the same program run \
         alone natively (one VM on its own core, polling, never gated), as §5.4.1 defines \
         them. Each claim that does not hold, with the rows it is judged on and the \
         constants of ours that, at their low or high value, make it hold:\n\n{}\n\
         Figure 11's mechanism in this run: with 21 µs background kernels the foreground \
         gets {:.0}% of the GPU's busy time under FairGV. Table 4 is fitted, not predicted, \
         for the 600 × 600 grid; the 900 × 900 rows are a prediction of the wave model, \
         which ignores launch costs and the paper's two printed block counts at 4,096 \
         sub-kernels that do not divide the grids (74 and 166; the even split gives 88 and \
         198).",
        claims::differences_list(&r.claims, &r.sensitivity, beside).trim_end(),
        100.0 * spin_share,
    );
    s
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

//! `tessera sim schedgpu`: schedGPU's use-case evaluation (§7.3) in the simulator.
//!
//! Scenarios, on one 4,799 MiB GPU and 12 cores:
//! - `sequential`: the mixed workload (4 ARA, 4 MUMmerGPU, 4 GPU-BLAST) one job at a
//!   time — what Slurm does with one GPU (Table 3, "Without schedGPU");
//! - `12 x <app>`: twelve concurrent instances of one application under schedGPU
//!   (FIFO), beside the same twelve run sequentially (Figure 11, Table 2);
//! - `mixed`: the mixed workload, all twelve at once, under each notification policy,
//!   MUMmerGPU instances at high priority for the priority policies (§7.3.2, Table 3).
//!
//! The application profiles and every number they rest on are in
//! `workloads/schedgpu.rs`.

use super::ExperimentError;
use super::claims::{self, Claim, Comparison, Sensitivity, Test, Unit, Variation};
use super::schedgpu_node::{self, AppJob, NodeRun};
use crate::plot::{Panel, Series, draw_panels};
use crate::workloads::schedgpu::{AppProfile, CORES, Constants, GPU_MEMORY, ara, blast, mummer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use tessera_core::policies::memsafe::NotificationPolicy;
use tessera_core::{GpuSpec, PolicyConfig};

/// Version tag of `results.json`.
pub const SCHEMA: &str = "tessera.sim.schedgpu/4";

/// One scenario's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Scenario name.
    pub scenario: String,
    /// `sequential` or the notification policy.
    pub configuration: String,
    /// Makespan, seconds.
    pub makespan_s: f64,
    /// Average GPU utilisation (0-1).
    pub gpu_util: f64,
    /// Average GPU memory in use (0-1).
    pub memory_util: f64,
    /// Mean run time of one job, seconds.
    pub mean_job_s: f64,
    /// Mean time a job waited for memory, seconds.
    pub mean_wait_s: f64,
    /// The same, per application.
    #[serde(default)]
    pub mean_wait_by_app_s: BTreeMap<String, f64>,
    /// The paper's makespan for this configuration, where it gives one.
    pub paper_makespan_s: Option<f64>,
    /// The paper's average GPU utilisation (0-1), where given.
    pub paper_gpu_util: Option<f64>,
    /// The paper's average GPU memory used (0-1), where given.
    pub paper_memory_util: Option<f64>,
}

/// Everything `tessera sim schedgpu` produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedGpuResults {
    /// [`SCHEMA`].
    pub schema: String,
    /// The constants of ours the profiles were built with.
    #[serde(default)]
    pub constants: Constants,
    /// The application profiles used.
    pub apps: Vec<AppProfile>,
    /// One per scenario and configuration.
    pub scenarios: Vec<ScenarioResult>,
    /// The paper's claims beside ours, with verdicts.
    pub claims: Vec<Claim>,
    /// The claims in the schema every experiment shares.
    pub comparisons: Vec<Comparison>,
    /// The claims judged again at a low and a high value of each constant of ours
    /// ([`sensitivity`]); empty when not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<Sensitivity>,
}

/// The tolerances, fixed before the run that judges them, each for a reason of the
/// paper's measurement or of the model, not of our numbers:
/// - a makespan within 10% of Table 3's: the paper reports one run per configuration
///   on a shared host, and our model has no host contention (every concurrent figure
///   is expected on the short side);
/// - a utilisation within 5 points: Table 3's are NVSMI averages over runs of 500 s
///   and more, sampled once a second;
/// - a speed-up within 20% of Figure 11's: the paper gives two of three only roughly
///   ("about 9x", "about 1.5x");
/// - the order of the four notification policies by makespan exactly as Table 3's.
const MAKESPAN: f64 = 0.10;
/// The priority policies' gain over MMU, seconds either way of the paper's 14.7 s
/// (half of it: a gain of 7-22 s reads as the paper's "15 seconds").
const PRIORITY_GAIN_S: f64 = 7.5;
/// MMU's gain over FIFO, either way of the paper's 2.8% (half of it: "nearly 3%" read
/// as 1.4-4.2%).
const MMU_GAIN: f64 = 0.014;
const UTILISATION: f64 = 0.05;
/// Below a quarter of the GPU the utilisation tolerance is relative, as the speed-ups'
/// (issue 56: 5 points on Table 1's 0.9% let 2.9% "hold").
const UTILISATION_RELATIVE: f64 = 0.20;

/// A utilisation's tolerance: 5 points, or a fifth of the paper's value where that is
/// less.
fn utilisation_tolerance(paper: f64) -> f64 {
    UTILISATION.min(UTILISATION_RELATIVE * paper)
}

const ARA_MEMORY_INPUT: &str = "ARA's GPU phase is as long as Table 1's average memory (0.37%) \
     over the share it holds (16%, §6), so its average memory alone is built in";
const SPEED_UP: f64 = 0.20;

/// Figure 11's speed-ups of twelve instances run concurrently over sequentially.
const FIGURE_11: [(&str, f64); 3] = [("ARA", 10.0), ("MUMmerGPU", 9.0), ("GPU-BLAST", 1.5)];

/// Table 1: per application, (GPU %, memory %) for one instance alone, for the most
/// instances that fit without schedGPU (run together, "manually packed"), and for
/// twelve under schedGPU; and how many fit (§6: 6, 6 and 2).
/// (application, the three columns' (GPU %, memory %), instances that fit).
type Table1Row = (&'static str, [(f64, f64); 3], usize);

const TABLE_1: [Table1Row; 3] = [
    ("ARA", [(0.51, 0.37), (2.74, 0.90), (5.26, 2.02)], 6),
    ("MUMmerGPU", [(2.46, 4.04), (12.73, 26.13), (20.96, 41.59)], 6),
    ("GPU-BLAST", [(69.48, 33.73), (86.28, 63.71), (90.24, 70.09)], 2),
];

/// Table 2: per application, one instance alone and the mean instance of twelve under
/// schedGPU, seconds.
const TABLE_2: [(&str, f64, f64); 3] =
    [("ARA", 226.847, 260.108), ("MUMmerGPU", 322.799, 370.169), ("GPU-BLAST", 69.144, 184.751)];

/// Why a claim is an input rather than a result.
const PROFILE_INPUT: &str = "each profile's length and GPU share are built from the single \
                             instance's time (Table 2) and utilisations (Table 1)";

/// The run of `scenario` under `configuration`.
fn find_scenario<'a>(
    scenarios: &'a [ScenarioResult],
    scenario: &str,
    configuration: &str,
) -> Option<&'a ScenarioResult> {
    scenarios.iter().find(|x| x.scenario == scenario && x.configuration == configuration)
}

/// The paper's claims, judged on `scenarios`.
fn claims(scenarios: &[ScenarioResult]) -> Vec<Claim> {
    let mut out = Vec::new();
    let mixed = |configuration: &str| {
        scenarios.iter().find(|x| {
            x.configuration == configuration
                && (x.scenario == "mixed" || x.scenario == "mixed-sequential")
        })
    };
    for (configuration, paper_s, paper_gpu, paper_memory) in TABLE_3 {
        let ours = mixed(configuration);
        let slug = configuration.to_lowercase().replace(' ', "-");
        let measures = [
            (
                "makespan",
                format!("the mixed workload takes {paper_s:.2} s"),
                Test::Near { paper: paper_s, tolerance: MAKESPAN * paper_s },
                Unit::Seconds,
                ours.map(|x| x.makespan_s),
            ),
            (
                "gpu-util",
                format!("average GPU utilisation {paper_gpu:.2}%"),
                Test::Near {
                    paper: paper_gpu / 100.0,
                    tolerance: utilisation_tolerance(paper_gpu / 100.0),
                },
                Unit::Percent,
                ours.map(|x| x.gpu_util),
            ),
            (
                "memory",
                format!("average GPU memory utilisation {paper_memory:.2}%"),
                Test::Near {
                    paper: paper_memory / 100.0,
                    tolerance: utilisation_tolerance(paper_memory / 100.0),
                },
                Unit::Percent,
                ours.map(|x| x.memory_util),
            ),
        ];
        for (measure, paper, test, unit, value) in measures {
            let claim = Claim::judge(
                &format!("table3-{measure}-{slug}"),
                "mixed workload",
                "Table 3",
                &format!("{configuration}: {paper}"),
                test,
                unit,
                value,
                String::new(),
            );
            // one application at a time: its time and GPU use are the sum of the single
            // instances the profiles are built from (its memory is a result)
            let input = configuration == "sequential" && measure != "memory";
            out.push(if input { claim.input(PROFILE_INPUT) } else { claim });
        }
    }
    // the paper's order: FIFO slowest, then MMU, Priority FIFO, Priority MMU
    let order = ["FIFO", "MMU", "Priority FIFO", "Priority MMU"];
    let makespans: Option<Vec<f64>> =
        order.iter().map(|c| mixed(c).map(|x| x.makespan_s)).collect();
    // strictly: a tie is not the paper's order (issue 56: three policies tied at 459.5 s
    // and "held" by `>=`)
    let in_order = makespans.as_ref().map(|m| m.windows(2).filter(|w| w[0] > w[1]).count() as f64);
    out.push(Claim::judge(
        "table3-policy-order",
        "mixed workload",
        "Table 3",
        "the notification policies order by makespan FIFO > MMU > Priority FIFO > Priority MMU, strictly (3 of 3 neighbouring pairs)",
        Test::Near { paper: 3.0, tolerance: 0.0 },
        Unit::Count,
        in_order,
        makespans.map_or(String::new(), |m| {
            format!("{:.1} / {:.1} / {:.1} / {:.1} s", m[0], m[1], m[2], m[3])
        }),
    ));
    // §7.3.2's two statements, each two-sided (the paper's values from Table 3)
    let span = |c: &str| mixed(c).map(|x| x.makespan_s);
    let (fifo, mmu) = (span("FIFO"), span("MMU"));
    let best_priority = span("Priority FIFO").zip(span("Priority MMU")).map(|(a, b)| a.min(b));
    out.push(Claim::judge(
        "table3-priority-faster-than-mmu",
        "mixed workload",
        "§7.3.2, Table 3",
        "the priority policies reduce the total execution time by 15 seconds over the best non-priority policy (MMU): 527.22 - 512.53 s",
        Test::Near { paper: 527.22 - 512.53, tolerance: PRIORITY_GAIN_S },
        Unit::Seconds,
        mmu.zip(best_priority).map(|(m, p)| m - p),
        String::new(),
    ));
    out.push(Claim::judge(
        "table3-mmu-faster-than-fifo",
        "mixed workload",
        "§7.3.2, Table 3",
        "the MMU policy results in a reduction of nearly 3% in the execution time of the workload over the FIFO policy: (542.51 - 527.22) / 542.51",
        Test::Near { paper: (542.51 - 527.22) / 542.51, tolerance: MMU_GAIN },
        Unit::Percent,
        fifo.zip(mmu).map(|(f, m)| (f - m) / f),
        String::new(),
    ));
    for (app, paper) in FIGURE_11 {
        let name = format!("12 x {app}");
        let time = |configuration: &str| {
            find_scenario(scenarios, &name, configuration).map(|x| x.makespan_s)
        };
        let speed_up = time("sequential").zip(time("FIFO")).map(|(s, c)| s / c);
        out.push(Claim::judge(
            &format!("fig11-speed-up-{}", app.to_lowercase()),
            "twelve instances",
            "Figure 11",
            &format!(
                "twelve {app} instances run {paper}x faster concurrently than one after another"
            ),
            Test::Near { paper, tolerance: SPEED_UP * paper },
            Unit::Ratio,
            speed_up,
            String::new(),
        ));
    }
    let find =
        |scenario: &str, configuration: &str| find_scenario(scenarios, scenario, configuration);
    // Table 1: the single instance is an input; the packed and schedGPU columns results
    for (app, columns, fit) in TABLE_1 {
        let id = app.to_lowercase();
        let runs = [
            (find(&format!("1 x {app}"), "alone"), "1-instance", "one instance alone".to_string()),
            (
                find(&format!("12 x {app}"), "manual packing"),
                "max-concurrent",
                format!("{fit} instances at once without schedGPU"),
            ),
            (find(&format!("12 x {app}"), "FIFO"), "12-schedgpu", "12 under schedGPU".into()),
        ];
        for (i, (run, column, what)) in runs.into_iter().enumerate() {
            let (gpu, memory) = columns[i];
            for (measure, paper, ours) in [
                ("gpu", gpu, run.map(|x| x.gpu_util)),
                ("memory", memory, run.map(|x| x.memory_util)),
            ] {
                let claim = Claim::judge(
                    &format!("table1-{id}-{measure}-{column}"),
                    "single application",
                    "Table 1",
                    &format!(
                        "{app}, {what}: average GPU {} {paper:.2}%",
                        if measure == "gpu" { "utilisation" } else { "memory utilisation" }
                    ),
                    Test::Near {
                        paper: paper / 100.0,
                        tolerance: utilisation_tolerance(paper / 100.0),
                    },
                    Unit::Percent,
                    ours,
                    String::new(),
                );
                // the GPU shares are built from the single instance's utilisation; the
                // memory from §6's maxima, so Table 1's average memory is a result, except
                // ARA's alone: its GPU phase's length is that average over its share held
                // (0.37% / 16%, workloads::schedgpu)
                let input = i == 0 && (measure == "gpu" || app == "ARA");
                out.push(if input {
                    claim.input(if measure == "gpu" { PROFILE_INPUT } else { ARA_MEMORY_INPUT })
                } else {
                    claim
                });
            }
        }
    }
    // Table 2: one instance alone (an input) and the mean instance of twelve
    for (app, alone, twelve) in TABLE_2 {
        let id = app.to_lowercase();
        out.push(
            Claim::judge(
                &format!("table2-{id}-alone"),
                "single application",
                "Table 2",
                &format!("{app}: one instance alone takes {alone} s"),
                Test::Near { paper: alone, tolerance: MAKESPAN * alone },
                Unit::Seconds,
                find(&format!("1 x {app}"), "alone").map(|x| x.mean_job_s),
                String::new(),
            )
            .input(PROFILE_INPUT),
        );
        out.push(Claim::judge(
            &format!("table2-{id}-mean-of-12"),
            "single application",
            "Table 2",
            &format!("{app}: an instance among twelve under schedGPU takes {twelve} s on average"),
            Test::Near { paper: twelve, tolerance: MAKESPAN * twelve },
            Unit::Seconds,
            find(&format!("12 x {app}"), "FIFO").map(|x| x.mean_job_s),
            String::new(),
        ));
    }
    // Figure 11 against manual packing: "the speed-up is approximately doubled when
    // running 12 concurrent instances of ARA and MUMmerGPU" (§7.3.1)
    for app in ["ARA", "MUMmerGPU"] {
        let name = format!("12 x {app}");
        let (packed, sched) = (find(&name, "manual packing"), find(&name, "FIFO"));
        let ratio = packed.zip(sched).map(|(p, c)| p.makespan_s / c.makespan_s);
        out.push(Claim::judge(
            &format!("fig11-{}-over-manual-packing", app.to_lowercase()),
            "single application",
            "§7.3.1, Figure 11",
            &format!(
                "twelve {app} instances: schedGPU's speed-up approximately doubles that of manually packing as many as fit"
            ),
            Test::Near { paper: 2.0, tolerance: SPEED_UP * 2.0 },
            Unit::Ratio,
            ratio,
            packed.zip(sched).map_or(String::new(), |(p, c)| {
                format!("packed {:.1} s, schedGPU {:.1} s", p.makespan_s, c.makespan_s)
            }),
        ));
    }
    // Figure 11's curve for GPU-BLAST: "4 concurrent instances achieving maximum
    // speed-up" (§7.3.1)
    // one instance is its own sequential run: speed-up 1
    let best = std::iter::once((1usize, 1.0))
        .chain((2..=12usize).filter_map(|n| {
            let name = format!("{n} x GPU-BLAST");
            Some((n, find(&name, "sequential")?.makespan_s / find(&name, "FIFO")?.makespan_s))
        }))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    out.push(Claim::judge(
        "fig11-gpu-blast-peak-at-4",
        "single application",
        "§7.3.1, Figure 11",
        "GPU-BLAST reaches its largest speed-up with 4 concurrent instances",
        Test::Near { paper: 4.0, tolerance: 1.0 },
        Unit::Count,
        best.map(|b| b.0 as f64),
        best.map_or(String::new(), |(n, x)| format!("largest speed-up {x:.2}x at {n} instances")),
    ));
    // not reproduced: what the simulator cannot measure, with the reason
    out.push(Claim::judge(
        "fig9-life-cycle-below-1-ms",
        "overheads",
        "§7.1, Figure 9",
        "every stage of the life cycle (initialisation, pre-allocation, post-free, shutdown) takes less than one millisecond (judged in ms)",
        Test::AtMost { paper: 1.0, tolerance: 0.0 },
        Unit::Count,
        None,
        "not measured here: the simulator has no implementation overhead; tessera's ledger is real code, timed by its own tests, not by this experiment".into(),
    ));
    for (id, paper, value) in [
        (
            "fig10-over-sequential",
            "12 instances of 10 Rodinia and 8 Parboil benchmarks run over 2x faster under schedGPU than one after another",
            2.0,
        ),
        (
            "fig10-against-manual-packing",
            "the same take 40% longer under schedGPU than manually packed",
            1.4,
        ),
    ] {
        out.push(Claim::judge(
            id,
            "benchmarks",
            "§7.2, Figure 10",
            paper,
            Test::Near { paper: value, tolerance: SPEED_UP * value },
            Unit::Ratio,
            None,
            "not measured here: the paper gives none of the 18 benchmarks' CPU and GPU phases or memory, so there is nothing to build their profiles from".into(),
        ));
    }
    out
}

/// Table 3 of the paper: (configuration, time s, GPU util %, memory used %).
const TABLE_3: [(&str, f64, f64, f64); 5] = [
    ("sequential", 2485.20, 9.24, 3.79),
    ("FIFO", 542.51, 43.09, 42.65),
    ("MMU", 527.22, 43.74, 43.25),
    ("Priority FIFO", 515.57, 45.59, 46.59),
    ("Priority MMU", 512.53, 45.75, 47.15),
];

fn memsafe(n: NotificationPolicy) -> Result<Box<dyn tessera_core::Policy>, ExperimentError> {
    Ok(PolicyConfig::MemSafe { notification: n }.build(&GpuSpec::uniform(1, GPU_MEMORY))?)
}

fn run_one(
    jobs: &[AppJob],
    cores: usize,
    n: NotificationPolicy,
    what: &str,
) -> Result<NodeRun, ExperimentError> {
    schedgpu_node::run(jobs, cores, GPU_MEMORY, memsafe(n)?)
        .map_err(|source| ExperimentError::Sim { trial: what.into(), source })
}

fn result(scenario: &str, configuration: &str, r: &NodeRun) -> ScenarioResult {
    let n = r.jobs.len().max(1) as f64;
    let mut waits: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for j in &r.jobs {
        let w = waits.entry(j.app.clone()).or_default();
        *w = (w.0 + j.waited_s, w.1 + 1.0);
    }
    let paper = TABLE_3.iter().find(|(c, ..)| {
        scenario == "mixed" && *c == configuration
            || scenario == "mixed-sequential" && *c == "sequential"
    });
    ScenarioResult {
        scenario: scenario.into(),
        configuration: configuration.into(),
        makespan_s: r.makespan_s,
        gpu_util: r.gpu_util,
        memory_util: r.memory_util,
        mean_job_s: r.jobs.iter().map(|j| j.run_s).sum::<f64>() / n,
        mean_wait_s: r.jobs.iter().map(|j| j.waited_s).sum::<f64>() / n,
        mean_wait_by_app_s: waits.into_iter().map(|(app, (w, k))| (app, w / k)).collect(),
        paper_makespan_s: paper.map(|p| p.1),
        paper_gpu_util: paper.map(|p| p.2 / 100.0),
        paper_memory_util: paper.map(|p| p.3 / 100.0),
    }
}

/// The profiles as they run when instances run concurrently: CPU phases stretched by
/// the host contention of `k` (none in the model as used).
fn concurrent(profile: &AppProfile, k: &Constants) -> AppProfile {
    profile.with_cpu_slowdown(1.0 + k.host_contention)
}

fn mixed_jobs(k: &Constants, priority_mummer: bool, together: bool) -> Vec<AppJob> {
    mixed_jobs_first(k, priority_mummer.then_some("MUMmerGPU"), together)
}

/// The mixed workload with application `first`'s instances (if any) at high priority.
fn mixed_jobs_first(k: &Constants, first: Option<&str>, together: bool) -> Vec<AppJob> {
    let mut jobs = Vec::new();
    for profile in [ara(k), mummer(k), blast(k)] {
        let priority = u8::from(first == Some(profile.name.as_str()));
        let profile = if together { concurrent(&profile, k) } else { profile };
        for _ in 0..4 {
            jobs.push(AppJob { profile: profile.clone(), priority });
        }
    }
    jobs
}

/// The scenario that checks what priority does in the model: the mixed workload under
/// Priority FIFO with GPU-BLAST's instances first instead of MUMmerGPU's (the paper
/// gives MUMmerGPU priority; under MMU its small requests are granted first anyway).
pub const PRIORITY_CHECK: &str = "priority-check";
/// Its configuration's name.
pub const BLAST_FIRST: &str = "Priority FIFO, GPU-BLAST first";

/// Run every scenario with the constants used, and return the results with the mixed
/// workload's time series.
pub fn run() -> Result<(SchedGpuResults, Vec<(String, NodeRun)>), ExperimentError> {
    run_with(&Constants::USED)
}

/// Run every scenario on profiles built with `k`.
pub fn run_with(
    k: &Constants,
) -> Result<(SchedGpuResults, Vec<(String, NodeRun)>), ExperimentError> {
    let mut scenarios = Vec::new();
    let mut series = Vec::new();
    let seq =
        run_one(&mixed_jobs(k, false, false), 1, NotificationPolicy::Fifo, "mixed sequential")?;
    scenarios.push(result("mixed-sequential", "sequential", &seq));
    for n in NotificationPolicy::ALL {
        let prio = matches!(n, NotificationPolicy::PriorityFifo | NotificationPolicy::PriorityMmu);
        let r = run_one(&mixed_jobs(k, prio, true), CORES, n, &format!("mixed {}", n.label()))?;
        scenarios.push(result("mixed", n.label(), &r));
        series.push((n.label().to_string(), r));
    }
    let r = run_one(
        &mixed_jobs_first(k, Some("GPU-BLAST"), true),
        CORES,
        NotificationPolicy::PriorityFifo,
        BLAST_FIRST,
    )?;
    scenarios.push(result(PRIORITY_CHECK, BLAST_FIRST, &r));
    for profile in [ara(k), mummer(k), blast(k)] {
        let one = vec![AppJob { profile: profile.clone(), priority: 0 }];
        let name = format!("1 x {}", profile.name);
        scenarios.push(result(&name, "alone", &run_one(&one, 1, NotificationPolicy::Fifo, &name)?));
        // Figure 11's curve: n instances one after another and under schedGPU
        for n in 2..=12 {
            let instances = |p: &AppProfile| -> Vec<AppJob> {
                (0..n).map(|_| AppJob { profile: p.clone(), priority: 0 }).collect()
            };
            let together = instances(&concurrent(&profile, k));
            let name = format!("{n} x {}", profile.name);
            let s = run_one(&instances(&profile), 1, NotificationPolicy::Fifo, &name)?;
            scenarios.push(result(&name, "sequential", &s));
            let c = run_one(&together, CORES, NotificationPolicy::Fifo, &name)?;
            scenarios.push(result(&name, "FIFO", &c));
            if n == 12 {
                // §7.2's second scenario: as many at once as fit without schedGPU (§6),
                // the next when one ends
                let fit = TABLE_1.iter().find(|t| t.0 == profile.name).map_or(1, |t| t.2);
                let m = run_one(&together, fit, NotificationPolicy::Fifo, &name)?;
                scenarios.push(result(&name, "manual packing", &m));
            }
        }
    }
    let claims = claims(&scenarios);
    let comparisons = crate::experiments::claims::comparisons(&claims);
    Ok((
        SchedGpuResults {
            schema: SCHEMA.into(),
            constants: *k,
            apps: vec![ara(k), mummer(k), blast(k)],
            scenarios,
            claims,
            comparisons,
            sensitivity: Vec::new(),
        },
        series,
    ))
}

/// Every constant of ours in the profiles, with the range we think plausible (the
/// reason in `what`).
fn variations() -> Vec<Variation<Constants>> {
    vec![
        Variation {
            name: "mummer_cycles",
            what: "MUMmerGPU's alternations of CPU and GPU phases (§6: \"at regular intervals\", \
                   no count)",
            show: |k| k.mummer_cycles.to_string(),
            low: |k| k.mummer_cycles = 3,
            high: |k| k.mummer_cycles = 30,
        },
        Variation {
            name: "mummer_gpu_share",
            what: "MUMmerGPU's share of its run on the GPU: Table 1's average memory implies \
                   0.27, §6 says about half",
            show: |k| k.mummer_gpu_share.to_string(),
            low: |k| k.mummer_gpu_share = 0.27,
            high: |k| k.mummer_gpu_share = 0.6,
        },
        Variation {
            name: "memory_over",
            what: "added to the memory shares §6 gives as lower bounds (ARA \"over 16%\", \
                   GPU-BLAST \"over 36%\"); 0 is the bound itself",
            show: |k| format!("{:.0} points", 100.0 * k.memory_over),
            low: |k| k.memory_over = 0.0,
            high: |k| k.memory_over = 0.03,
        },
        Variation {
            name: "blast_tail_share",
            what: "GPU-BLAST's share of its run in the tail where its memory has fallen (§6: \
                   \"towards the end\")",
            show: |k| k.blast_tail_share.to_string(),
            low: |k| k.blast_tail_share = 0.1,
            high: |k| k.blast_tail_share = 0.3,
        },
        Variation {
            name: "blast_tail_memory",
            what: "GPU-BLAST's memory in its tail, share of the GPU (§6: \"below 30%\"); 0.3 is \
                   the bound itself",
            show: |k| k.blast_tail_memory.to_string(),
            low: |k| k.blast_tail_memory = 0.25,
            high: |k| k.blast_tail_memory = 0.3,
        },
        Variation {
            name: "host_contention",
            what: "how much longer CPU phases take when instances run concurrently; none in the \
                   model, high = Table 2's ARA (97.7% CPU work) among twelve, 260.108 / 226.847 \
                   - 1 (so table2-ara-mean-of-12 at high is not evidence)",
            show: |k| format!("{:.3}", k.host_contention),
            low: |k| k.host_contention = 0.0,
            high: |k| k.host_contention = 260.108 / 226.847 - 1.0,
        },
    ]
}

/// Each constant of ours at its low and high value, every other as `results` used:
/// every claim judged again beside those of `results`.
pub fn sensitivity(results: &SchedGpuResults) -> Result<Vec<Sensitivity>, ExperimentError> {
    claims::sensitivity(
        &results.constants,
        &results.claims,
        &variations(),
        |_| true,
        |k| run_with(k).map(|(r, _)| r.claims),
    )
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn diff(ours: f64, paper: Option<f64>) -> String {
    paper.map_or("-".into(), |p| format!("{:+.1}%", 100.0 * (ours - p) / p))
}

/// The Markdown report.
pub fn report(r: &SchedGpuResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# schedGPU in the simulator: Tables 1-3, Figure 11\n");
    let _ = writeln!(
        s,
        "Generated by `tessera sim schedgpu` (deterministic: no random numbers). One Tesla K20m (4,799 MiB), 12 cores.\n"
    );
    let _ = writeln!(s, "## Mixed workload (4 ARA + 4 MUMmerGPU + 4 GPU-BLAST), beside Table 3\n");
    let _ = writeln!(
        s,
        "| configuration | makespan s | paper s | diff | GPU util | paper | memory used | paper | mean wait for memory s |\n|---|---|---|---|---|---|---|---|---|"
    );
    for x in r.scenarios.iter().filter(|x| x.scenario.starts_with("mixed")) {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} |",
            x.configuration,
            x.makespan_s,
            x.paper_makespan_s.map_or("-".into(), |v| format!("{v:.2}")),
            diff(x.makespan_s, x.paper_makespan_s),
            pct(x.gpu_util),
            x.paper_gpu_util.map_or("-".into(), pct),
            pct(x.memory_util),
            x.paper_memory_util.map_or("-".into(), pct),
            x.mean_wait_s
        );
    }
    let _ = writeln!(s, "\n### Who priority serves first\n");
    let _ = writeln!(
        s,
        "Mean wait for memory by application, s. The paper gives MUMmerGPU's instances priority; \
         under MMU their requests (755 MB, the smallest) are already granted first whenever they \
         fit, so where the runs are identical to MMU's, priority found no grant to reorder. The \
         last row gives GPU-BLAST's instances (1,812 MB) priority instead, which MMU does not \
         favour: it shows what priority does in the model.\n"
    );
    let _ = writeln!(
        s,
        "| configuration | ARA | MUMmerGPU | GPU-BLAST | makespan s |\n|---|---|---|---|---|"
    );
    let checked = r.scenarios.iter().filter(|x| {
        (x.scenario == "mixed" && x.configuration != "FIFO") || x.scenario == PRIORITY_CHECK
    });
    for x in checked {
        let w = |app: &str| x.mean_wait_by_app_s.get(app).map_or("-".into(), |v| format!("{v:.1}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} |",
            x.configuration,
            w("ARA"),
            w("MUMmerGPU"),
            w("GPU-BLAST"),
            x.makespan_s
        );
    }
    let _ = writeln!(s, "\n## Twelve instances of one application (Figure 11, Table 2)\n");
    let _ = writeln!(
        s,
        "| application | sequential s | schedGPU s | speed-up | paper speed-up | mean instance time s | paper (Table 2) |\n|---|---|---|---|---|---|---|"
    );
    let paper_speedup = [("ARA", "10x"), ("MUMmerGPU", "~9x"), ("GPU-BLAST", "~1.5x")];
    for ((app, sp), (_, _, t2)) in paper_speedup.into_iter().zip(TABLE_2) {
        let name = format!("12 x {app}");
        let seq = find_scenario(&r.scenarios, &name, "sequential");
        let con = find_scenario(&r.scenarios, &name, "FIFO");
        if let (Some(a), Some(b)) = (seq, con) {
            let _ = writeln!(
                s,
                "| {app} | {:.1} | {:.1} | {:.1}x | {sp} | {:.1} | {t2} |",
                a.makespan_s,
                b.makespan_s,
                a.makespan_s / b.makespan_s,
                b.mean_job_s
            );
        }
    }
    let _ = writeln!(
        s,
        "\n### Figure 11: speed-up of n instances under schedGPU over one after another\n\n| n | {} |\n|---|---|---|---|",
        r.apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(" | ")
    );
    for n in 2..=12 {
        let cells: Vec<String> = r
            .apps
            .iter()
            .map(|a| {
                let name = format!("{n} x {}", a.name);
                let t = |c: &str| find_scenario(&r.scenarios, &name, c).map(|x| x.makespan_s);
                t("sequential").zip(t("FIFO")).map_or("-".into(), |(q, c)| format!("{:.2}x", q / c))
            })
            .collect();
        let _ = writeln!(s, "| {n} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        s,
        "\nManual packing (§7.2's second scenario: as many instances at once as fit without schedGPU, the next when one ends), twelve instances:\n\n| application | at once | packed s | schedGPU s |\n|---|---|---|---|"
    );
    for (app, _, fit) in TABLE_1 {
        let name = format!("12 x {app}");
        let t = |c: &str| find_scenario(&r.scenarios, &name, c).map(|x| x.makespan_s);
        if let (Some(p), Some(c)) = (t("manual packing"), t("FIFO")) {
            let _ = writeln!(s, "| {app} | {fit} | {p:.1} | {c:.1} |");
        }
    }
    let (holds, fails, unmeasured) = crate::experiments::claims::tally(&r.claims);
    let inputs = r.claims.iter().filter(|c| !c.is_evidence()).count();
    let _ = writeln!(
        s,
        "\n## The paper's claims\n\nEach judged by a tolerance fixed in the code before this run (makespans within {:.0}%, utilisations within {:.0} points or {:.0}% of the paper's value where that is less, speed-ups within {:.0}%, the policies' order strictly, the two gains of §7.3.2 within half the paper's): {holds} hold, {fails} do not, {unmeasured} not measured. {inputs} more compare numbers the model was built from (inputs, shown and not counted).\n",
        100.0 * MAKESPAN,
        100.0 * UTILISATION,
        100.0 * UTILISATION_RELATIVE,
        100.0 * SPEED_UP
    );
    let _ = writeln!(s, "{}", crate::experiments::claims::table(&r.claims));
    let _ = writeln!(s, "\n{}", differences(r));
    if !r.sensitivity.is_empty() {
        let judged = "every claim judged again";
        let _ = writeln!(s, "{}\n", claims::sensitivity_section(judged, &r.sensitivity));
    }
    let _ = writeln!(s, "## Application profiles (every number assumed)\n");
    let _ = writeln!(s, "| application | peak memory MiB | alone s | phases |\n|---|---|---|---|");
    for a in &r.apps {
        let phases: Vec<String> = a
            .phases
            .iter()
            .map(|p| match p {
                crate::workloads::schedgpu::Phase::Cpu(t) => format!("CPU {:.1}s", t.as_secs_f64()),
                crate::workloads::schedgpu::Phase::Held { cpu, memory } => format!(
                    "CPU {:.1}s holding {:.0}%",
                    cpu.as_secs_f64(),
                    100.0 * memory.0 as f64 / GPU_MEMORY.0 as f64
                ),
                crate::workloads::schedgpu::Phase::Gpu { alone, intensity, memory } => format!(
                    "GPU {:.1}s@{:.0}% holding {:.0}%",
                    alone.as_secs_f64(),
                    intensity * 100.0,
                    100.0 * memory.0 as f64 / GPU_MEMORY.0 as f64
                ),
            })
            .collect();
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.1} | {} |",
            a.name,
            a.peak_memory().0 as f64 / (1 << 20) as f64,
            a.alone().as_secs_f64(),
            phases.join(", ")
        );
    }
    let _ = writeln!(s, "\n![memory and GPU use over time](timeline.svg)");
    s
}

/// Where we differ from the paper: every claim that does not hold, with what this run
/// measured beside it and which constants of ours, varied in this run, make it hold.
/// Nothing here is a fixed explanation: where no run of this report points at a cause,
/// it says so.
fn differences(r: &SchedGpuResults) -> String {
    let mut s = String::from("## Where we differ\n\n");
    let find =
        |scenario: &str, configuration: &str| find_scenario(&r.scenarios, scenario, configuration);
    let _ = writeln!(
        s,
        "Each claim that does not hold, with what this run measured beside it{}.\n",
        if r.sensitivity.is_empty() {
            " (the constants of ours were not varied in this run: `--sensitivity`)"
        } else {
            " and the constants of ours that, at their low or high value, make it hold"
        }
    );
    let waits = |x: &ScenarioResult| {
        x.mean_wait_by_app_s
            .iter()
            .map(|(app, w)| format!("{app} {w:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let beside = |c: &Claim| {
        let mut line = String::new();
        let table2 = TABLE_2
            .iter()
            .find(|(app, ..)| c.id == format!("table2-{}-mean-of-12", app.to_lowercase()));
        let table3 = TABLE_3.iter().find(|(conf, ..)| {
            let slug = conf.to_lowercase().replace(' ', "-");
            ["makespan", "gpu-util", "memory"].iter().any(|m| c.id == format!("table3-{m}-{slug}"))
        });
        if let Some((app, alone, twelve)) = table2
            && let Some(x) = find(&format!("12 x {app}"), "FIFO")
        {
            let _ = write!(
                line,
                "Here an instance waits {:.1} s for memory on average; without that wait it takes \
                 {:.1} s, {:.2}x its time alone ({alone} s).",
                x.mean_wait_s,
                x.mean_job_s - x.mean_wait_s,
                (x.mean_job_s - x.mean_wait_s) / alone
            );
            // the instances alive on average: 12 x the mean instance time / makespan,
            // the paper's makespan from its single instance and Figure 11's speed-up
            if let Some(sp) = FIGURE_11.iter().find(|f| f.0 == *app).map(|f| f.1) {
                let paper_makespan = 12.0 * alone / sp;
                let _ = write!(
                    line,
                    " The paper's numbers have {:.1} instances alive on average (12 x its mean \
                     instance time / its makespan, {paper_makespan:.0} s from Figure 11's \
                     speed-up); ours {:.1} (all twelve launched at once, each timed from its \
                     launch).",
                    12.0 * twelve / paper_makespan,
                    12.0 * x.mean_job_s / x.makespan_s
                );
            }
        } else if ["table3-policy-order", "table3-priority-faster-than-mmu"]
            .contains(&c.id.as_str())
            && let (Some(m), Some(pf), Some(pm), Some(b)) = (
                find("mixed", "MMU"),
                find("mixed", "Priority FIFO"),
                find("mixed", "Priority MMU"),
                find(PRIORITY_CHECK, BLAST_FIRST),
            )
        {
            let same = |x: &ScenarioResult| {
                x.makespan_s == m.makespan_s && x.mean_wait_by_app_s == m.mean_wait_by_app_s
            };
            let _ = write!(
                line,
                "Priority FIFO and Priority MMU {} MMU's run ({:.1} s; waits for memory: {}). \
                 MUMmerGPU's requests (755 MB) are the smallest of the three applications', so \
                 under MMU they are granted first whenever they fit, and putting them first \
                 reorders no grant. Priority itself works in the model: with GPU-BLAST's \
                 instances first instead, GPU-BLAST waits {:.1} s on average against {:.1} s \
                 under MMU, and the run takes {:.1} s. What made MUMmerGPU's priority worth \
                 15 s on the paper's node (requests that arrive while a larger one waits and \
                 fits first, launch order, host effects) is not in the model.",
                if same(pf) && same(pm) { "repeat, event for event," } else { "differ from" },
                m.makespan_s,
                waits(m),
                b.mean_wait_by_app_s.get("GPU-BLAST").copied().unwrap_or(f64::NAN),
                m.mean_wait_by_app_s.get("GPU-BLAST").copied().unwrap_or(f64::NAN),
                b.makespan_s
            );
        } else if c.id == "table3-mmu-faster-than-fifo"
            && let (Some(f), Some(m)) = (find("mixed", "FIFO"), find("mixed", "MMU"))
        {
            let _ = write!(
                line,
                "FIFO {:.1} s (waits: {}), MMU {:.1} s (waits: {}): under FIFO MUMmerGPU's \
                 requests queue behind GPU-BLAST's larger ones, which rarely fit.",
                f.makespan_s,
                waits(f),
                m.makespan_s,
                waits(m)
            );
        } else if let Some((conf, ..)) = table3
            && let Some(x) = find("mixed", conf)
        {
            let _ = write!(line, "Mean wait for memory by application under {conf}: {}.", waits(x));
        }
        line
    };
    s.push_str(&claims::differences_list(&r.claims, &r.sensitivity, beside));
    s
}

/// Write `results.json`, `report.md` and `timeline.svg` into `dir`.
pub fn write_outputs(
    results: &SchedGpuResults,
    series: &[(String, NodeRun)],
    dir: &Path,
) -> Result<(), ExperimentError> {
    super::write_results(dir, results, &report(results))?;
    let horizon = series.iter().map(|(_, r)| r.makespan_s).fold(0.0, f64::max);
    let step = |values: &[(f64, f64)]| -> Vec<(f64, f64)> {
        let mut out = Vec::with_capacity(values.len() * 2);
        for w in values.windows(2) {
            out.push(w[0]);
            out.push((w[1].0, w[0].1));
        }
        out.extend(values.last());
        out
    };
    let panels: Vec<Panel> = series
        .iter()
        .map(|(name, r)| Panel {
            title: format!("mixed workload, {name}"),
            x_label: "time (s)".into(),
            y_label: "% of the GPU".into(),
            x_range: (0.0, horizon),
            y_range: (0.0, 100.0),
            log_x: false,
            x_markers: vec![],
            dots: false,
            x_categories: vec![],
            bars: false,
            series: vec![
                Series {
                    paper: false,
                    name: "memory used".into(),
                    points: step(
                        &r.samples.iter().map(|s| (s.t, 100.0 * s.memory)).collect::<Vec<_>>(),
                    ),
                },
                Series {
                    paper: false,
                    name: "GPU busy".into(),
                    points: step(
                        &r.samples.iter().map(|s| (s.t, 100.0 * s.gpu)).collect::<Vec<_>>(),
                    ),
                },
            ],
        })
        .collect();
    draw_panels(&dir.join("timeline.svg"), &panels)?;
    Ok(())
}

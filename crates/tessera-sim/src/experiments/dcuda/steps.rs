//! Issue 57 item 6: what each of DCUDA's steps gives over least-loaded, one added at a
//! time at medium load — the experiment that says which mechanism carries DCUDA's gain
//! in this model and how much of the paper's there is to carry (least-loaded's own
//! overload and utilization, beside the paper's).

use super::*;

/// The variants, cumulative, with the paper's constants: least-loaded placement; with
/// step 1 (migrate from overloaded GPUs); with step 2 (compact two light GPUs); with
/// step 3's slicing; and DCUDA whole as the paper evaluates it (step 3's priority
/// reordering too); and beside them DCUDA with the daemon's constants
/// ([`DcudaParams::DAEMON`]), which the claims judge.
pub const STEPS: [(&str, &str); 6] = [
    ("least-loaded", "least-loaded placement (static)"),
    ("dcuda-balance", "+ step 1: migration from overloaded GPUs"),
    ("dcuda-balance-energy", "+ step 2: compaction"),
    ("dcuda-no-priority", "+ step 3: fair slicing"),
    ("dcuda-paper", "+ step 3's priority reordering (DCUDA as the paper evaluates it)"),
    (
        "dcuda",
        "DCUDA as tesserad runs it (compaction below 90%, 1 s stay, no priorities): the claims' DCUDA",
    ),
];

/// One variant's means over the orders.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    /// The policy's label (one of [`STEPS`]).
    pub policy: String,
    /// Mean normalized run time (over solo).
    pub mean_normalized: f64,
    /// §4.3's utilization.
    pub utilization: f64,
    /// Share of GPU time overloaded.
    pub overloaded: f64,
    /// Share of applications within 20% of solo.
    pub qos: f64,
    /// Jain's index.
    pub jain: f64,
    /// Migrations per run.
    pub migrations: f64,
}

/// [`STEPS`] at `cfg`'s medium load, over `orders` arrival orders.
pub fn steps(
    apps: &[App],
    cfg: &DcudaConfig,
    orders: usize,
    cache: &RunCache,
) -> Result<Vec<StepRow>, ExperimentError> {
    let Some(medium) = cfg.loads.iter().find(|l| l.name == "medium") else { return Ok(vec![]) };
    STEPS
        .iter()
        .map(|(policy, _)| {
            let runs: Vec<RunResult> = (0..orders)
                .into_par_iter()
                .map(|o| cache.run_one(apps, policy, medium, o, cfg.seed, &cfg.constants))
                .collect::<Result<_, _>>()?;
            let m = |f: fn(&RunResult) -> f64| mean(runs.iter().map(f));
            Ok(StepRow {
                policy: (*policy).into(),
                mean_normalized: m(|r| r.mean_normalized),
                utilization: m(|r| r.utilization),
                overloaded: m(|r| r.overloaded),
                qos: m(|r| r.qos),
                jain: m(|r| r.jain),
                migrations: m(|r| r.migrations as f64),
            })
        })
        .collect()
}

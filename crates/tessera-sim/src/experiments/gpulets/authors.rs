//! The authors' code as named variants (issue 57 item 3), and where squishy bin packing
//! beats gpu-lets, from the data.
//!
//! A review of the authors' scheduler found five departures from Algorithm 1 as the
//! paper writes it ([`AuthorsCode`], and the batching overhead their scheduler charges).
//! Each is run alone and all together, judged on what they move: how many of the rate
//! scenarios gpulet+int schedules (Figures 4 and 15) and its schedulable throughput
//! over squishy bin packing's on Figure 12's workloads. Schedulable, not served: the
//! serving runs of the main experiment are what the claims judge; these show which
//! departure could close which gap.

use super::profiles::{self, ProfileSet};
use super::schedulability::{RATES, paper_options, scenario, set_models};
use super::throughput::{GPUS, Scheduler, max_units_with, mixes};
use super::{ExperimentError, pct};
use serde::{Deserialize, Serialize};
use tessera_core::policies::gpulets::{
    AuthorsCode, Options, elastic_partitioning, max_rate, squishy_bin_packing,
};
use tessera_gpu::partition::{Interference, Profiles};

/// One variant's numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Its name.
    pub name: String,
    /// Scenarios gpulet+int schedules on the `paper` set, and SBP.
    pub paper_gpulet_int: usize,
    pub paper_sbp: usize,
    /// The same on the `v100` set.
    pub v100_gpulet_int: usize,
    pub v100_sbp: usize,
    /// Per Figure 12 workload, gpulet+int's schedulable throughput over SBP's.
    pub over_sbp: Vec<(String, f64)>,
}

impl Variant {
    /// The mean of `over_sbp`.
    pub fn mean_over_sbp(&self) -> f64 {
        self.over_sbp.iter().map(|(_, x)| x).sum::<f64>() / self.over_sbp.len().max(1) as f64
    }
}

/// One `paper` model's rate on one GPU: whole, and split in two gpu-lets both serving
/// it (the best split), req/s, at its Table 4 SLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitGain {
    pub model: String,
    pub slo_ms: f64,
    /// The workloads that serve it at this SLO.
    pub workloads: Vec<String>,
    pub whole: f64,
    pub best_split: f64,
    pub split: (u32, u32),
}

/// What the variants and the split gains show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuthorsVariants {
    pub scenarios: (usize, usize),
    pub variants: Vec<Variant>,
    pub splits: Vec<SplitGain>,
}

/// The variants: (name, departures, authors' batching overhead).
fn variants() -> Vec<(&'static str, AuthorsCode, bool)> {
    let none = AuthorsCode::default();
    vec![
        ("Algorithm 1 as the paper writes it (ours)", none, false),
        ("the authors' batching overhead (1.9x ImageNet, 2.5x SSD, 0.4 ms LeNet)", none, true),
        ("85% rate acceptance", AuthorsCode { interference_loss: 0.15, ..none }, false),
        ("residues up to 15 req/s unplaced", AuthorsCode { residue_slack: 15.0, ..none }, false),
        ("models by rate x SLO ascending", AuthorsCode { order_rate_slo: true, ..none }, false),
        (
            "size by rate per percent (1.05)",
            AuthorsCode { size_per_percent: Some(1.05), ..none },
            false,
        ),
        ("all of the authors' code", AuthorsCode::ALL, true),
    ]
}

/// Scenarios of `set` (every `stride`-th) gpulet+int and SBP schedule under `opts`.
fn schedulable(set: &ProfileSet<'_>, opts: &Options, stride: usize) -> (usize, usize, usize) {
    let n = set.models.len();
    let (mut total, mut int, mut sbp) = (0, 0, 0);
    for code in (1..RATES.len().pow(n as u32)).step_by(stride.max(1)) {
        let models = set_models(set, &scenario(code, n));
        total += 1;
        int += usize::from(elastic_partitioning(&models, opts, set).is_ok());
        sbp += usize::from(squishy_bin_packing(&models, opts, 100, opts.gpus).is_ok());
    }
    (total, int, sbp)
}

/// Run every variant (every `stride`-th scenario: 1 for all).
pub fn run(
    profiles: &Profiles,
    authors_2080ti: Interference,
    v100_fit: Interference,
    batching: profiles::BatchingCosts<'static>,
    stride: usize,
) -> Result<AuthorsVariants, ExperimentError> {
    let bad = |e: profiles::UtilError| ExperimentError::Config(e.to_string());
    let plain =
        profiles::paper(super::UTIL_2080TI, batching, profiles, authors_2080ti).map_err(bad)?;
    let overhead = profiles::paper(
        super::UTIL_2080TI,
        profiles::BatchingCosts { authors_overhead: true, ..batching },
        profiles,
        authors_2080ti,
    )
    .map_err(bad)?;
    let v100 = profiles::v100(profiles, v100_fit);
    let mut scenarios = (0, 0);
    let mut out = Vec::new();
    for (name, code, with_overhead) in variants() {
        let paper = if with_overhead { &overhead } else { &plain };
        let opts = |gpus| Options { authors: code, ..paper_options(gpus) };
        let (n_paper, paper_int, paper_sbp) = schedulable(paper, &opts(4), stride);
        // the V100 profiles carry no input-batching cost: the overhead does not apply
        let (n_v100, v100_int, v100_sbp) = schedulable(&v100, &opts(4), stride);
        scenarios = (n_paper, n_v100);
        let over_sbp = mixes()
            .into_iter()
            .map(|mix| {
                let int = max_units_with(paper, &mix, Scheduler::GpuletInt, &opts(GPUS));
                let sbp = max_units_with(paper, &mix, Scheduler::Sbp, &opts(GPUS));
                (mix.name.clone(), if sbp > 0.0 { int / sbp } else { f64::NAN })
            })
            .collect();
        out.push(Variant {
            name: name.into(),
            paper_gpulet_int: paper_int,
            paper_sbp,
            v100_gpulet_int: v100_int,
            v100_sbp,
            over_sbp,
        });
    }
    // every (model, SLO) a workload serves, with the workloads that do
    let opts = paper_options(1);
    let mut splits: Vec<SplitGain> = Vec::new();
    for mix in mixes() {
        for ((k, slo), r) in mix.models.iter().zip(&mix.slo_ms).zip(&mix.per_unit) {
            if *r <= 0.0 {
                continue;
            }
            let name = &plain.models[*k];
            if let Some(g) = splits.iter_mut().find(|g| &g.model == name && g.slo_ms == *slo) {
                if !g.workloads.contains(&mix.name) {
                    g.workloads.push(mix.name.clone());
                }
                continue;
            }
            let rate = |size| max_rate(plain.profiles[*k].as_ref(), &opts, size, *slo);
            let (split, best_split) = [(20, 80), (40, 60), (50, 50)]
                .into_iter()
                .map(|(a, b)| ((a, b), rate(a) + rate(b)))
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .unwrap_or(((50, 50), 0.0));
            splits.push(SplitGain {
                model: name.clone(),
                slo_ms: *slo,
                workloads: vec![mix.name.clone()],
                whole: rate(100),
                best_split,
                split,
            });
        }
    }
    Ok(AuthorsVariants { scenarios, variants: out, splits })
}

/// The report's section: the variants, then where SBP's lead comes from, from the
/// main run's throughput (`found`) and its runs at the maximum rates (`at_max`).
pub fn section(
    a: &AuthorsVariants,
    found: &[super::throughput::MixThroughput],
    at_max: &[super::AtMaxRate],
) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "## The authors' code as variants (issue 57)\n\n\
         Each departure of the authors' scheduler from Algorithm 1 as written, alone and all \
         together: scenarios gpulet+int schedules (SBP beside, on the same profiles) and its \
         schedulable throughput over SBP's on Figure 12's workloads (`paper` set). The \
         batching overhead changes the `paper` profiles only (the V100 ones carry no \
         input-batching cost). The size rule is our reading of the review's one line.\n\n",
    );
    let names: Vec<String> = a
        .variants
        .first()
        .map_or(Vec::new(), |v| v.over_sbp.iter().map(|(m, _)| m.clone()).collect());
    let _ = writeln!(
        s,
        "| variant | `paper`: gpulet+int / SBP of {} | `v100`: gpulet+int / SBP of {} | {} | mean |",
        a.scenarios.0,
        a.scenarios.1,
        names.iter().map(|m| format!("{m}: over SBP")).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(s, "|---|---|---|{}---|", "---|".repeat(names.len()));
    for v in &a.variants {
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} / {} | {} | {:.2}x |",
            v.name,
            v.paper_gpulet_int,
            v.paper_sbp,
            v.v100_gpulet_int,
            v.v100_sbp,
            v.over_sbp.iter().map(|(_, x)| format!("{x:.2}x")).collect::<Vec<_>>().join(" | "),
            v.mean_over_sbp()
        );
    }
    let _ = writeln!(
        s,
        "\n### Where SBP leads (Figure 12), from the data\n\n\
         Per workload, the main run's schedulable and served throughput (req/s) of SBP and \
         gpulet+int, and the model that missed most when gpulet+int's schedule was served \
         at its maximum:\n\n\
         | workload | schedulable: SBP / gpulet / gpulet+int | served within 1%: SBP / gpulet+int | gpulet+int over SBP, schedulable / served | gpulet+int served of its schedulable | most missed at gpulet+int's maximum | what decides it |\n\
         |---|---|---|---|---|---|---|"
    );
    for t in found {
        let (sbp, int) = (t.of(Scheduler::Sbp), t.of(Scheduler::GpuletInt));
        let (sbp_s, int_s) = (t.served_of(Scheduler::Sbp), t.served_of(Scheduler::GpuletInt));
        let gpulet = t.of(Scheduler::Gpulet);
        let missed = at_max
            .iter()
            .find(|m| m.mix == t.mix.name)
            .and_then(|m| m.most_missed.as_ref())
            .map_or("none".into(), |m| m.model.clone());
        // the mix's models for which splitting a GPU loses, at the mix's SLO
        let losing: Vec<String> = a
            .splits
            .iter()
            .filter(|g| g.workloads.contains(&t.mix.name) && g.best_split < g.whole)
            .map(|g| format!("{} at {:.1} ms ({})", g.model, g.slo_ms, pct(g.best_split / g.whole)))
            .collect();
        let splitting = format!("splitting loses for {}", losing.join(", "));
        let also = if losing.is_empty() { String::new() } else { format!("; {splitting}") };
        let cause = if int >= sbp && int_s >= sbp_s {
            "gpulet+int leads".to_string()
        } else if int >= sbp {
            format!(
                "served, not scheduled: gpulet+int's schedules miss over 1% near its maximum ({missed} most){also}"
            )
        } else if gpulet >= sbp {
            format!(
                "the interference check: without it elastic partitioning schedules {gpulet:.0}{also}"
            )
        } else if !losing.is_empty() {
            splitting
        } else {
            "not identified by these measures".to_string()
        };
        let _ = writeln!(
            s,
            "| {} | {sbp:.0} / {gpulet:.0} / {int:.0} | {sbp_s:.0} / {int_s:.0} | {:.2}x / {:.2}x | {} | {missed} | {cause} |",
            t.mix.name,
            int / sbp.max(1e-9),
            int_s / sbp_s.max(1e-9),
            pct(int_s / int.max(1e-9)),
        );
    }
    let _ = writeln!(
        s,
        "\nOne GPU serving one model, whole against split in two gpu-lets both serving it \
         (the best split), req/s, at each SLO a workload gives the model: what SBP, which \
         never splits a GPU, keeps where splitting loses.\n\n\
         | model | SLO (ms) | workloads | whole GPU | best split | split over whole |\n|---|---|---|---|---|---|"
    );
    for g in &a.splits {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {:.0} | {:.0} ({}% + {}%) | {} |",
            g.model,
            g.slo_ms,
            g.workloads.join(", "),
            g.whole,
            g.best_split,
            g.split.0,
            g.split.1,
            pct(g.best_split / g.whole.max(1e-9))
        );
    }
    s
}

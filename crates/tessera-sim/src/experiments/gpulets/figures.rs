//! Figures 9, 4/15, 12/16 and 14 as SVG, from the results (never from fixed numbers).

use super::GpuletsResults;
use super::throughput::Scheduler;
use crate::experiments::ExperimentError;
use crate::plot::{Panel, Series, draw_panels};
use std::path::Path;

/// Figure 9's two reference points (90% within 10.26%, 95% within 13.98%).
const PAPER_FIG9: [(f64, f64); 2] = [(10.26, 90.0), (13.98, 95.0)];

/// Upper end of an axis holding `values`, with a little room.
fn top(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|v| v.is_finite()).fold(0.0, f64::max).max(1.0) * 1.1
}

/// `interference_cdf.svg`, `schedulability.svg`, `throughput.svg`, `fluctuating.svg`.
pub(super) fn draw(r: &GpuletsResults, dir: &Path) -> Result<(), ExperimentError> {
    // Figure 9: the validation error's CDF, ours and the authors' coefficients
    let cdf = |name: &str, errors: &[f64]| Series {
        paper: false,
        name: name.into(),
        points: errors
            .iter()
            .enumerate()
            .map(|(i, e)| (100.0 * e, (i + 1) as f64 * 100.0 / errors.len() as f64))
            .collect(),
    };
    // wide enough for the paper's points, and for most of both CDFs
    let x_max = top(r.fitted_errors.cdf.iter().map(|e| 100.0 * e)).clamp(16.0, 60.0);
    let mut fig9 = Panel::new(
        "Fig. 9: interference model error (validation)",
        "|predicted - measured| / measured (%)",
        "cases at or below (%)",
        (0.0, x_max),
        (0.0, 100.0),
    );
    fig9.dots = false;
    fig9.series = vec![
        cdf("ours (V100 fit)", &r.fitted_errors.cdf),
        cdf("authors' 2080 Ti coefficients", &r.authors_errors.cdf),
        Series { paper: true, name: "paper (Fig. 9)".into(), points: PAPER_FIG9.to_vec() },
    ];
    draw_panels(&dir.join("interference_cdf.svg"), &[fig9])?;

    // Figures 4 and 15: schedulable scenarios per scheduler, one line per set
    let labels = ["SBP", "SBP 50/50", "gpulet", "gpulet+int", "ideal"];
    let mut sched = Panel::new(
        "Figs. 4, 15: schedulable scenarios",
        "scheduler",
        "scenarios schedulable",
        (-0.6, labels.len() as f64 - 0.4),
        (0.0, 1.5 * top(r.sets.iter().map(|s| s.schedulability.scenarios as f64))),
    );
    sched.x_categories = labels.iter().map(|l| (*l).to_string()).collect();
    sched.bars = true;
    sched.series = r
        .sets
        .iter()
        .map(|s| {
            let c = &s.schedulability;
            let counts = [c.sbp, c.sbp_split, c.gpulet, c.gpulet_int, c.ideal];
            Series {
                paper: false,
                name: format!("{} set, of {}", s.set, c.scenarios),
                points: counts.iter().enumerate().map(|(i, n)| (i as f64, *n as f64)).collect(),
            }
        })
        .collect();
    draw_panels(&dir.join("schedulability.svg"), &[sched])?;

    // Figures 12 and 16: maximum throughput per workload, and as a share of ideal
    let mixes: Vec<String> = r.throughput.iter().map(|m| m.mix.name.clone()).collect();
    let x = (-0.6, mixes.len() as f64 - 0.4);
    let mut fig12 = Panel::new(
        "Fig. 12: max. rate served within 1% SLO violations",
        "workload",
        "req/s (game, traffic: application requests)",
        x,
        (0.0, 1.6 * top(r.throughput.iter().flat_map(|m| m.served.iter().copied()))),
    );
    fig12.x_categories = mixes.clone();
    fig12.bars = true;
    fig12.series = Scheduler::ALL
        .iter()
        .map(|s| Series {
            paper: false,
            name: s.label().into(),
            points: r
                .throughput
                .iter()
                .enumerate()
                .map(|(i, m)| (i as f64, m.served_of(*s)))
                .collect(),
        })
        .collect();
    let mut fig16 = Panel::new(
        "Fig. 16: max. schedulable rate, % of ideal's",
        "workload",
        "% of ideal",
        x,
        (
            0.0,
            1.6 * top(r.throughput.iter().flat_map(|m| {
                Scheduler::ALL.iter().map(move |s| 100.0 * m.of(*s) / m.of(Scheduler::Ideal))
            })),
        ),
    );
    fig16.x_categories = mixes;
    fig16.bars = true;
    fig16.series = Scheduler::ALL
        .iter()
        .filter(|s| **s != Scheduler::Ideal)
        .map(|s| Series {
            paper: false,
            name: s.label().into(),
            points: r
                .throughput
                .iter()
                .enumerate()
                .filter(|(_, m)| m.of(Scheduler::Ideal) > 0.0)
                .map(|(i, m)| (i as f64, 100.0 * m.of(*s) / m.of(Scheduler::Ideal)))
                .collect(),
        })
        .collect();
    // the paper's values (§6.3): the average over the workloads, and traffic's
    let last = (r.throughput.len() as f64 - 1.0).max(0.0);
    fig16.series.push(Series {
        paper: true,
        name: "paper: gpulet+int 92.3% on average".into(),
        points: vec![(0.0, 92.3), (last, 92.3)],
    });
    if let Some(i) = r.throughput.iter().position(|m| m.mix.name == "traffic") {
        fig16.series.push(Series {
            paper: true,
            name: "paper: gpulet+int 87.7% on traffic".into(),
            points: vec![(i as f64, 87.7), (i as f64, 87.7)],
        });
    }
    // Figure 12's claims are ratios: ours per workload, beside the paper's averages
    let ratio = |over: Scheduler| -> Vec<(f64, f64)> {
        r.throughput
            .iter()
            .enumerate()
            .filter(|(_, m)| m.served_of(over) > 0.0)
            .map(|(i, m)| (i as f64, m.served_of(Scheduler::GpuletInt) / m.served_of(over)))
            .collect()
    };
    let (vs_sbp, vs_gst) = (ratio(Scheduler::Sbp), ratio(Scheduler::GuidedSelfTuning));
    let highest = vs_sbp.iter().chain(&vs_gst).map(|p| p.1).fold(2.1, f64::max);
    let mut ratios = Panel::new(
        "Fig. 12: gpulet+int's rate over the baselines'",
        "workload",
        "gpulet+int / baseline (served within 1%)",
        x,
        (0.0, highest * 1.1),
    );
    ratios.x_categories = fig16.x_categories.clone();
    ratios.bars = true;
    ratios.series = vec![
        Series { paper: false, name: "over SBP".into(), points: vs_sbp },
        Series { paper: false, name: "over guided self-tuning".into(), points: vs_gst },
        Series {
            paper: true,
            name: "paper: 2.026x over SBP on average".into(),
            points: vec![(0.0, 2.026), (last, 2.026)],
        },
        Series {
            paper: true,
            name: "paper: 1.748x over guided self-tuning on average".into(),
            points: vec![(0.0, 1.748), (last, 1.748)],
        },
    ];
    draw_panels(&dir.join("throughput.svg"), &[fig12, ratios, fig16])?;

    // Figure 14: offered rate and scheduled size per period; violations per period
    let f = &r.fluctuating;
    let end = f.periods.last().map_or(1.0, |p| p.start_s as f64 + 20.0);
    let mut load = Panel::new(
        "Fig. 14: offered rate and scheduled gpu-lets",
        "time (s)",
        "req/s; summed gpu-let size (% of a GPU)",
        (0.0, end),
        (0.0, top(f.periods.iter().flat_map(|p| [p.offered_rps, f64::from(p.scheduled_size)]))),
    );
    load.dots = false;
    load.series = vec![
        Series {
            paper: false,
            name: "offered req/s".into(),
            points: f.periods.iter().map(|p| (p.start_s as f64, p.offered_rps)).collect(),
        },
        Series {
            paper: false,
            name: "scheduled size".into(),
            points: f
                .periods
                .iter()
                .map(|p| (p.start_s as f64, f64::from(p.scheduled_size)))
                .collect(),
        },
    ];
    let mut late = Panel::new(
        format!(
            "Fig. 14: SLO violations per period (paper 0.14% overall, ours {:.2}%)",
            100.0 * f.violation
        ),
        "time (s)",
        "requests late (%)",
        (0.0, end),
        (0.0, 100.0),
    );
    late.dots = false;
    late.series = vec![Series {
        paper: false,
        name: "gpulet+int, 20 s periods".into(),
        points: f.periods.iter().map(|p| (p.start_s as f64, 100.0 * p.violation)).collect(),
    }];
    draw_panels(&dir.join("fluctuating.svg"), &[load, late])?;
    Ok(())
}

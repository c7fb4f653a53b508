//! Figures 10-14 as SVG, drawn from the results.

use super::{DcudaResults, POLICIES, paired};
use crate::experiments::ExperimentError;
use crate::plot::{Panel, Series, draw_panels};
use std::path::Path;

/// Per order at medium load, one series per policy of `f` (scaled by `scale`).
fn per_order(r: &DcudaResults, f: fn(&super::RunResult) -> f64, scale: f64) -> Vec<Series> {
    POLICIES
        .iter()
        .map(|p| {
            let mut points: Vec<(f64, f64)> =
                r.runs_of(p, "medium").map(|x| (x.order as f64, scale * f(x))).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { paper: false, name: (*p).into(), points }
        })
        .collect()
}

/// A horizontal line of the paper's value across `x`, named for the legend.
fn paper_line(name: &str, y: f64, x: (f64, f64)) -> Series {
    Series { paper: true, name: format!("paper: {name}"), points: vec![(x.0, y), (x.1, y)] }
}

/// The mean over orders of `f` for `policy` at medium load.
fn medium_mean(r: &DcudaResults, policy: &str, f: fn(&super::RunResult) -> f64) -> f64 {
    let v: Vec<f64> = r.runs_of(policy, "medium").map(f).collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn top(series: &[Series]) -> f64 {
    series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9) * 1.15
}

pub(super) fn draw(r: &DcudaResults, dir: &Path) -> Result<(), ExperimentError> {
    // arrival orders stay on a numeric axis joined by lines: 50 orders of grouped bars
    // are too dense to read (looked at); the paper's values span them
    let orders = (-1.0, r.config.orders as f64);
    let span = (0.0, r.config.orders.saturating_sub(1) as f64);
    // Figure 10: one order, each GPU's share of time per band
    let bands = |policy: &str| -> Panel {
        let run = r.runs_of(policy, "medium").find(|x| x.order == 0);
        let mut p = Panel::new(
            format!("Fig. 10: {policy}, order 0, medium load"),
            "GPU",
            "% of the run",
            (-0.5, super::GPUS as f64 - 0.5),
            (0.0, 100.0),
        );
        p.x_categories = (0..super::GPUS).map(|g| format!("GPU {g}")).collect();
        p.bars = true;
        let names = ["0-50%", "50-100%", "overloaded"];
        p.series = (0..3)
            .map(|b| Series {
                paper: false,
                name: names[b].into(),
                points: run
                    .map(|x| {
                        x.bands.iter().enumerate().map(|(g, v)| (g as f64, 100.0 * v[b])).collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let x = (0.0, super::GPUS as f64 - 1.0);
        // the paper's overloaded time for this order (§4.3)
        if policy == "dcuda" {
            p.series.push(paper_line("every GPU overloaded <= 6% (§4.3)", 6.0, x));
        } else {
            p.series.push(paper_line("overloaded 14.3% (least, §4.3)", 14.3, x));
            p.series.push(paper_line("overloaded 51.4% (most, §4.3)", 51.4, x));
        }
        p
    };
    draw_panels(&dir.join("fig10.svg"), &[bands("least-loaded"), bands("dcuda")])?;
    // Figure 11: utilization and overloaded time per order
    let util = per_order(r, |x| x.utilization, 100.0);
    let over = per_order(r, |x| x.overloaded, 100.0);
    let mut a =
        Panel::new("Fig. 11(a): GPU utilization", "arrival order", "%", orders, (0.0, 100.0));
    a.series = util;
    // the paper gives averages relative to least-loaded: drawn on our least-loaded mean
    let ll_util = medium_mean(r, "least-loaded", |x| x.utilization);
    a.series.push(paper_line(
        "DCUDA +14.6% over least-loaded's mean (§4.3)",
        100.0 * ll_util * 1.146,
        span,
    ));
    let mut b = Panel::new(
        "Fig. 11(b): overloaded time",
        "arrival order",
        "% of the run",
        orders,
        (0.0, top(&over)),
    );
    b.series = over;
    let ll_over = medium_mean(r, "least-loaded", |x| x.overloaded);
    b.series.push(paper_line(
        "DCUDA -78.3% from least-loaded's mean (§4.3)",
        100.0 * ll_over * (1.0 - 0.783),
        span,
    ));
    draw_panels(&dir.join("fig11.svg"), &[a, b])?;
    // Figure 12: mean run time over solo per order
    let exec = per_order(r, |x| x.mean_normalized, 1.0);
    let mut e = Panel::new(
        "Fig. 12: mean run time / solo",
        "arrival order",
        "normalized time",
        orders,
        (0.0, top(&exec)),
    );
    e.series = exec;
    let ll_exec = medium_mean(r, "least-loaded", |x| x.mean_normalized);
    e.series.push(paper_line(
        "best order 42.1% below least-loaded's mean (§4.4)",
        ll_exec * (1.0 - 0.421),
        span,
    ));
    draw_panels(&dir.join("fig12.svg"), &[e])?;
    // Figure 13: QoS share and Jain's index per order
    let mut q = Panel::new(
        "Fig. 13(a): apps within 20% of solo",
        "arrival order",
        "%",
        orders,
        (0.0, 100.0),
    );
    q.series = per_order(r, |x| x.qos, 100.0);
    q.series.push(paper_line("DCUDA > 80% (§4.5)", 80.0, span));
    q.series.push(paper_line("least-loaded < 60% (§4.5)", 60.0, span));
    let mut j = Panel::new(
        "Fig. 13(b): Jain's fairness index",
        "arrival order",
        "index",
        orders,
        (0.0, 1.05),
    );
    j.series = per_order(r, |x| x.jain, 1.0);
    let ll_jain = medium_mean(r, "least-loaded", |x| x.jain);
    j.series.push(paper_line(
        "DCUDA +12.1% over least-loaded's mean (§4.5)",
        (ll_jain * 1.121).min(1.0),
        span,
    ));
    draw_panels(&dir.join("fig13.svg"), &[q, j])?;
    // Figure 14: the cut in mean run time per load (the paper gives no values, only
    // that medium is the largest)
    let cut: Vec<(f64, f64)> = r
        .config
        .loads
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let p = paired(r, &l.name, |x| x.mean_normalized);
            let m = p.iter().map(|(a, b)| 1.0 - b / a).sum::<f64>() / p.len().max(1) as f64;
            (i as f64, 100.0 * m)
        })
        .collect();
    let hi = cut.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.2;
    let lo = cut.iter().map(|p| p.1).fold(0.0, f64::min) * 1.2;
    let mut f = Panel::new(
        "Fig. 14: run time cut by DCUDA (paper: largest at medium)",
        "load (seconds between arrivals)",
        "% less than least-loaded",
        (-0.5, r.config.loads.len() as f64 - 0.5),
        (lo, hi),
    );
    f.x_categories =
        r.config.loads.iter().map(|l| format!("{} ({} s)", l.name, l.interval_s)).collect();
    f.series = vec![Series { paper: false, name: "mean over orders".into(), points: cut }];
    draw_panels(&dir.join("fig14.svg"), &[f])?;
    Ok(())
}

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
            Series { name: (*p).into(), points }
        })
        .collect()
}

fn top(series: &[Series]) -> f64 {
    series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1e-9) * 1.15
}

pub(super) fn draw(r: &DcudaResults, dir: &Path) -> Result<(), ExperimentError> {
    let orders = (-1.0, r.config.orders as f64);
    // Figure 10: one order, each GPU's share of time per band
    let bands = |policy: &str| -> Panel {
        let run = r.runs_of(policy, "medium").find(|x| x.order == 0);
        let mut p = Panel::new(
            format!("Fig. 10: {policy}, order 0, medium load"),
            "GPU",
            "% of the run",
            (-1.0, super::GPUS as f64),
            (0.0, 100.0),
        );
        let names = ["0-50%", "50-100%", "overloaded"];
        p.series = (0..3)
            .map(|b| Series {
                name: names[b].into(),
                points: run
                    .map(|x| {
                        x.bands.iter().enumerate().map(|(g, v)| (g as f64, 100.0 * v[b])).collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        p
    };
    draw_panels(&dir.join("fig10.svg"), &[bands("least-loaded"), bands("dcuda")])?;
    // Figure 11: utilization and overloaded time per order
    let util = per_order(r, |x| x.utilization, 100.0);
    let over = per_order(r, |x| x.overloaded, 100.0);
    let mut a =
        Panel::new("Fig. 11(a): GPU utilization", "arrival order", "%", orders, (0.0, 100.0));
    a.series = util;
    let mut b = Panel::new(
        "Fig. 11(b): overloaded time",
        "arrival order",
        "% of the run",
        orders,
        (0.0, top(&over)),
    );
    b.series = over;
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
    let mut j = Panel::new(
        "Fig. 13(b): Jain's fairness index",
        "arrival order",
        "index",
        orders,
        (0.0, 1.05),
    );
    j.series = per_order(r, |x| x.jain, 1.0);
    draw_panels(&dir.join("fig13.svg"), &[q, j])?;
    // Figure 14: the cut in mean run time per load (x: seconds between arrivals)
    let cut: Vec<(f64, f64)> = r
        .config
        .loads
        .iter()
        .map(|l| {
            let p = paired(r, &l.name, |x| x.mean_normalized);
            let m = p.iter().map(|(a, b)| 1.0 - b / a).sum::<f64>() / p.len().max(1) as f64;
            (l.interval_s as f64, 100.0 * m)
        })
        .collect();
    let hi = cut.iter().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.2;
    let mut f = Panel::new(
        "Fig. 14: run time cut by DCUDA",
        "seconds between arrivals",
        "% less than least-loaded",
        (2.0, 8.0),
        (0.0, hi),
    );
    f.series = vec![Series { name: "mean over orders".into(), points: cut }];
    draw_panels(&dir.join("fig14.svg"), &[f])?;
    Ok(())
}

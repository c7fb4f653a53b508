//! Figures 8-11 and Table 4 as SVG, drawn from the results.

use super::FairgvResults;
use crate::experiments::ExperimentError;
use crate::plot::{Panel, Series, draw_panels};
use std::path::Path;

/// MMR (or overhead) per benchmark, one series per scheduler; benchmarks on x by index.
fn per_benchmark(r: &FairgvResults, setup: &str, what: fn(&super::Row) -> f64) -> Vec<Series> {
    let benches: Vec<&str> = {
        let mut b: Vec<&str> =
            r.rows.iter().filter(|x| x.setup == setup).map(|x| x.benchmark.as_str()).collect();
        b.dedup();
        b
    };
    let mut scheds: Vec<&str> =
        r.rows.iter().filter(|x| x.setup == setup).map(|x| x.scheduler.as_str()).collect();
    scheds.sort_unstable();
    scheds.dedup();
    scheds
        .iter()
        .map(|s| Series {
            paper: false,
            name: format!("{s} ({})", benches.join(", ")),
            points: benches
                .iter()
                .enumerate()
                .filter_map(|(i, b)| {
                    r.rows
                        .iter()
                        .find(|x| x.setup == setup && x.benchmark == *b && x.scheduler == *s)
                        .map(|x| (i as f64, what(x)))
                })
                .collect(),
        })
        .collect()
}

pub(super) fn draw(r: &FairgvResults, dir: &Path) -> Result<(), ExperimentError> {
    for (setup, file, fig) in
        [("non-congested", "fig8.svg", "Fig. 8"), ("congested", "fig9.svg", "Fig. 9")]
    {
        let n = r.rows.iter().filter(|x| x.setup == setup && x.scheduler == "FairGV").count();
        let xr = (-0.5, n as f64 - 0.5);
        let mut mmr =
            Panel::new(format!("{fig}: MMR, {setup}"), "benchmark", "MMR", xr, (0.0, 1.05));
        let mut names: Vec<String> = r
            .rows
            .iter()
            .filter(|x| x.setup == setup && x.scheduler == "FairGV")
            .map(|x| x.benchmark.clone())
            .collect();
        names.dedup();
        mmr.x_categories = names.clone();
        mmr.bars = true;
        mmr.series = per_benchmark(r, setup, |x| x.mmr);
        // the paper's values, where its text gives them: bounds, drawn across the
        // benchmarks they apply to
        let bound = |name: &str, y: f64, from: usize, to: usize| Series {
            paper: true,
            name: name.into(),
            points: vec![(from as f64, y), (to as f64, y)],
        };
        if setup == "non-congested" {
            mmr.series.push(bound(
                "paper: FairGV >= 0.99, every benchmark (§5.4.3)",
                0.99,
                0,
                n - 1,
            ));
            mmr.series.push(bound("paper: Credit-poll, -hs >= 0.9 on MM, HS (§5.4.3)", 0.9, 0, 1));
        } else {
            mmr.series.push(bound("paper: FairGV >= 0.97 (§5.4.4)", 0.97, 0, n - 1));
        }
        let over = per_benchmark(r, setup, |x| x.overhead);
        let top = over.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(1.0, f64::max);
        let mut ov = Panel::new(
            format!("{fig}: aggregated overhead, {setup}"),
            "benchmark",
            "ideal / measured",
            xr,
            (0.0, top * 1.1),
        );
        ov.series = over;
        if setup == "congested" {
            ov.series.push(bound("paper: FairGV <= 1.02 (§5.4.4)", 1.02, 0, n - 1));
        } else {
            ov.series.push(bound("paper: Credit-poll, -hs <= 1 on MM, HS (§5.4.3)", 1.0, 0, 1));
        }
        ov.x_categories = names;
        ov.bars = true;
        draw_panels(&dir.join(file), &[mmr, ov])?;
    }
    // Figure 10: total GPU utilization by sleep ratio
    let mut f10 = Panel::new(
        "Fig. 10: GPU utilization, BS beside a sleeping MM",
        "MM's sleep ratio (%)",
        "GPU utilization (%)",
        (45.0, 85.0),
        (0.0, 100.0),
    );
    for sched in ["FairGV non-WC", "FairGV"] {
        f10.series.push(Series {
            paper: false,
            name: sched.into(),
            points: r
                .work_conserving
                .iter()
                .filter(|x| x.scheduler == sched)
                .map(|x| (100.0 * x.sleep_ratio, 100.0 * x.gpu_busy))
                .collect(),
        });
    }
    draw_panels(&dir.join("fig10.svg"), &[f10])?;
    // Figure 11: normalized run time by background kernel size (log x)
    let top = r.collaborative.iter().map(|x| x.normalized_run_time).fold(2.5, f64::max);
    let panels: Vec<Panel> = ["MM", "HS"]
        .iter()
        .map(|fg| {
            let mut p = Panel::new(
                format!("Fig. 11: {fg} beside a background MM"),
                "background kernel (µs)",
                "run time / alone",
                (21f64.log10() - 0.1, 1_605f64.log10() + 0.1),
                (0.0, top * 1.1),
            );
            p.log_x = true;
            for sched in ["Credit-poll", "FairGV"] {
                p.series.push(Series {
                    paper: false,
                    name: sched.into(),
                    points: r
                        .collaborative
                        .iter()
                        .filter(|x| x.foreground == *fg && x.scheduler == sched)
                        .map(|x| (x.background_kernel_us.log10(), x.normalized_run_time))
                        .collect(),
                });
            }
            p
        })
        .collect();
    draw_panels(&dir.join("fig11.svg"), &panels)?;
    // Table 4: slowdown by blocks per sub-kernel, paper and model, per grid
    let top = r.slicing.rows.iter().map(|x| x.paper_pct.max(x.ours_pct)).fold(5.0, f64::max);
    let mut t4 = Panel::new(
        format!("Table 4: slicing MM (model: {} blocks at once)", r.slicing.concurrent),
        "blocks per sub-kernel",
        "slowdown (%)",
        (1.5, 6.0),
        (0.0, top * 1.1),
    );
    t4.log_x = true;
    t4.x_markers = vec![1_500f64.log10()];
    for (grid, label) in [(360_000u64, "600×600"), (810_000, "900×900")] {
        let rows =
            || r.slicing.rows.iter().filter(move |x| x.grid_blocks == grid && x.sub_kernels > 1);
        t4.series.push(Series {
            paper: true,
            name: format!("{label} paper"),
            points: rows()
                .map(|x| ((x.blocks_per_sub_kernel as f64).log10(), x.paper_pct))
                .collect(),
        });
        t4.series.push(Series {
            paper: false,
            name: format!("{label} model"),
            points: rows()
                .map(|x| ((x.blocks_per_sub_kernel as f64).log10(), x.ours_pct))
                .collect(),
        });
    }
    draw_panels(&dir.join("table4.svg"), &[t4])?;
    Ok(())
}

//! Figures 5, 6 and 7 as SVG.

use super::{FIG5_POLICIES, FlexyResults, curve};
use crate::experiments::ExperimentError;
use crate::plot::{Panel, Series, draw_panels};
use crate::workloads::flexy::Mix;
use std::path::Path;

pub(super) fn draw(
    results: &FlexyResults,
    mode: &str,
    suffix: &str,
    dir: &Path,
) -> Result<(), ExperimentError> {
    let sla = results.config.sla_ms;
    let fig5 = FIG5_POLICIES;
    let fig6 = ["F-MinRes0", "F-MinRes1", "F-MinRes2", "F-MinRes3"];
    let panel = |mix: Mix, policies: &[&str], fig: &str| Panel {
        title: format!(
            "{fig}: {} ({}), SLA {sla} ms, {mode}",
            mix.name().to_uppercase(),
            mix.spec().label
        ),
        x_label: "user-facing tasks meeting SLA (%)".into(),
        y_label: "GPU utilization (%)".into(),
        x_range: (0.0, 100.0),
        y_range: (0.0, 100.0),
        log_x: false,
        x_markers: vec![],
        dots: true,
        x_categories: vec![],
        bars: false,
        series: policies
            .iter()
            .map(|p| Series {
                paper: false,
                name: (*p).into(),
                points: curve(results, mode, mix.name(), p, sla)
                    .iter()
                    .map(|x| (100.0 * x.sla_met, 100.0 * x.utilization))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect(),
    };
    let mixes = &results.config.mixes;
    draw_panels(
        &dir.join(format!("fig5{suffix}.svg")),
        &mixes.iter().map(|m| panel(*m, &fig5, "Fig. 5")).collect::<Vec<_>>(),
    )?;
    draw_panels(
        &dir.join(format!("fig6{suffix}.svg")),
        &mixes.iter().map(|m| panel(*m, &fig6, "Fig. 6")).collect::<Vec<_>>(),
    )?;
    let fig7: Vec<Panel> = mixes
        .iter()
        .map(|m| Panel {
            title: format!("Fig. 7: {} reset policies, {mode}", m.name().to_uppercase()),
            x_label: "user-facing latency (s, log)".into(),
            y_label: "tasks at or below (%)".into(),
            x_range: (-2.0, 2.0),
            y_range: (0.0, 100.0),
            log_x: true,
            dots: true,
            x_categories: vec![],
            bars: false,
            x_markers: vec![
                (sla as f64 / 1000.0).log10(),
                (results.config.long_sla_ms as f64 / 1000.0).log10(),
            ],
            series: results
                .latency_cdfs
                .iter()
                .filter(|c| c.mode == mode && c.workload == m.name())
                .map(|c| Series {
                    paper: false,
                    name: format!("{} SLA {} ms", c.policy, c.sla_ms),
                    points: c.points.iter().map(|(x, y)| (x.log10(), 100.0 * y)).collect(),
                })
                // the paper's one value (§IV-E): F-Reset meets a 1 s SLA for more
                // than 92% of user-facing tasks
                .chain(std::iter::once(Series {
                    paper: true,
                    name: "paper: F-Reset, SLA 1 s: > 92% within it".into(),
                    points: vec![(0.0, 92.0)],
                }))
                .collect(),
        })
        .collect();
    draw_panels(&dir.join(format!("fig7{suffix}.svg")), &fig7)?;
    Ok(())
}

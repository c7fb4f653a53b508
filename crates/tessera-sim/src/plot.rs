//! SVG figures: rows of line-and-marker panels, drawn with plotters.

use plotters::prelude::*;
use std::path::Path;

/// One line of a panel.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// A value the paper gives, not ours: drawn as a dashed dark line (over the
    /// categories it spans, in a bar panel) beside our bars or lines.
    pub paper: bool,
}

/// One panel of a figure.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Caption above the panel.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X range.
    pub x_range: (f64, f64),
    /// Y range.
    pub y_range: (f64, f64),
    /// X values are log10 of the quantity: ticks are labelled 10^x.
    pub log_x: bool,
    /// Vertical reference lines (at x), e.g. an SLA.
    pub x_markers: Vec<f64>,
    /// Draw a dot at every point (off for dense time series).
    pub dots: bool,
    /// Names of categories placed at x = 0, 1, ...: the x ticks are labelled with
    /// them instead of numbers.
    pub x_categories: Vec<String>,
    /// Draw each series as bars grouped by category (x = 0, 1, ... of
    /// `x_categories`), side by side within a category, instead of lines joining
    /// categories that have no order.
    pub bars: bool,
    /// The lines.
    pub series: Vec<Series>,
}

impl Panel {
    /// An empty panel of dotted lines on linear axes, with no reference lines.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        x_range: (f64, f64),
        y_range: (f64, f64),
    ) -> Panel {
        Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_range,
            y_range,
            log_x: false,
            x_markers: vec![],
            dots: true,
            x_categories: vec![],
            bars: false,
            series: vec![],
        }
    }
}

/// A figure could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

/// Draw `panels` side by side into an SVG file at `path`.
pub fn draw_panels(path: &Path, panels: &[Panel]) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let width = 480 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        // bars rise from the bottom: room above them for the legend, a line per entry
        let top = if panel.bars {
            let span = panel.y_range.1 - panel.y_range.0;
            let highest = panel
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .fold(panel.y_range.0, f64::max);
            panel.y_range.1.max(highest + span * 0.08 * (panel.series.len() as f64 + 0.5))
        } else {
            panel.y_range.1
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(panel.x_range.0..panel.x_range.1, panel.y_range.0..top)
            .map_err(|e| err(&e))?;
        let log_x = panel.log_x;
        let categories = &panel.x_categories;
        // log ticks fall between round numbers: three significant digits at most
        let x_fmt = move |v: &f64| {
            if !categories.is_empty() {
                let i = v.round();
                return match categories.get(i as usize) {
                    Some(name) if (v - i).abs() < 1e-6 && i >= 0.0 => name.clone(),
                    _ => String::new(),
                };
            }
            if !log_x {
                return format!("{v:.0}");
            }
            let x = 10f64.powf(*v);
            match x {
                x if x >= 100.0 => format!("{x:.0}"),
                x if x >= 1.0 => format!("{x:.1}"),
                x => format!("{x:.3}"),
            }
        };
        // whole numbers on a wide axis ("3000", not "3000.0")
        let wide = panel.y_range.1 - panel.y_range.0 > 20.0;
        // and no float noise on a narrow one ("0.6", not "0.6000000000000001")
        let y_fmt = move |v: &f64| {
            if wide {
                format!("{v:.0}")
            } else {
                let s = format!("{v:.3}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        };
        chart
            .configure_mesh()
            .x_desc(panel.x_label.as_str())
            .y_desc(panel.y_label.as_str())
            .x_labels(if panel.x_categories.is_empty() {
                // log ticks are long numbers: fewer, so that they never touch
                if panel.log_x { 7 } else { 10 }
            } else {
                4 * panel.x_categories.len() + 1
            })
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .draw()
            .map_err(|e| err(&e))?;
        for x in &panel.x_markers {
            chart
                .draw_series(LineSeries::new(
                    vec![(*x, panel.y_range.0), (*x, panel.y_range.1)],
                    BLACK.mix(0.4),
                ))
                .map_err(|e| err(&e))?;
        }
        // our series that coincide point for point are drawn once, named together
        // (one line hidden under another would be a legend entry with nothing to see)
        let mut series: Vec<Series> = Vec::new();
        for s in &panel.series {
            match series.iter_mut().find(|t| t.points == s.points && t.paper == s.paper) {
                Some(t) if !s.points.is_empty() => t.name = format!("{} = {}", t.name, s.name),
                _ => series.push(s.clone()),
            }
        }
        let ours = series.iter().filter(|s| !s.paper).count().max(1) as f64;
        let (mut bar, mut paper) = (0, 0);
        for (i, s) in series.iter().enumerate() {
            if s.paper {
                // the paper's values: dashed, dark, beside our bars or lines
                const DARK: [RGBColor; 4] = [
                    RGBColor(0, 0, 0),
                    RGBColor(110, 110, 110),
                    RGBColor(140, 70, 20),
                    RGBColor(60, 60, 160),
                ];
                let color = DARK[paper % DARK.len()];
                paper += 1;
                let on_category = |x: f64| (x - x.round()).abs() < 1e-9;
                let points = match s.points.as_slice() {
                    // a bound from one category to another covers their whole groups
                    [a, b] if panel.bars && on_category(a.0) && on_category(b.0) => {
                        vec![(a.0 - 0.45, a.1), (b.0 + 0.45, b.1)]
                    }
                    _ => s.points.clone(),
                };
                chart
                    .draw_series(DashedLineSeries::new(points.clone(), 8, 5, color.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        let dash = |from: i32| {
                            PathElement::new(vec![(from, 0), (from + 5, 0)], color.stroke_width(2))
                        };
                        EmptyElement::at((x, y)) + dash(0) + dash(9)
                    });
                if !panel.bars && panel.dots {
                    chart
                        .draw_series(
                            points.iter().map(|p| Cross::new(*p, 4, color.stroke_width(2))),
                        )
                        .map_err(|e| err(&e))?;
                }
                continue;
            }
            let color = Palette99::pick(i).to_rgba();
            if panel.bars {
                // the group fills 80% of a category's width, one bar per series
                let width = 0.8 / ours;
                let left = -0.4 + width * bar as f64;
                bar += 1;
                chart
                    .draw_series(s.points.iter().map(|&(x, y)| {
                        Rectangle::new(
                            [(x + left, panel.y_range.0), (x + left + width * 0.9, y)],
                            color.filled(),
                        )
                    }))
                    .map_err(|e| err(&e))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
                continue;
            }
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            if panel.dots {
                chart
                    .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                    .map_err(|e| err(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            // a CDF rises to the upper left; performance curves fill the upper right
            .position(if panel.log_x {
                SeriesLabelPosition::LowerRight
            } else if panel.bars {
                // bars rise from the bottom: the legend goes in the headroom above them
                SeriesLabelPosition::UpperRight
            } else {
                SeriesLabelPosition::LowerLeft
            })
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(panel: Panel) -> String {
        let path = std::env::temp_dir().join(format!(
            "tessera-plot-{}-{}.svg",
            std::process::id(),
            panel.title.len()
        ));
        draw_panels(&path, &[panel]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        svg
    }

    /// The texts an SVG shows.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
            .collect()
    }

    fn series(name: &str, paper: bool, points: &[(f64, f64)]) -> Series {
        Series { name: name.into(), points: points.to_vec(), paper }
    }

    /// Issue 27: benchmark categories were drawn on a numeric axis ("-1, -0, 0, 1"):
    /// a bar panel's ticks are the categories' names only, and the paper's value is a
    /// legend entry of its own.
    #[test]
    fn categories_are_named_ticks_and_the_papers_value_is_drawn_beside_ours() {
        let mut p = Panel::new("t", "benchmark", "MMR", (-0.6, 2.4), (0.0, 1.0));
        p.x_categories = vec!["MM".into(), "HS".into(), "BS".into()];
        p.bars = true;
        p.series = vec![
            series("FairGV", false, &[(0.0, 0.99), (1.0, 0.98), (2.0, 0.97)]),
            series("paper: FairGV >= 0.99", true, &[(0.0, 0.99), (2.0, 0.99)]),
        ];
        let shown = texts(&drawn(p));
        for name in ["MM", "HS", "BS", "FairGV", "paper: FairGV &gt;= 0.99"] {
            assert!(shown.iter().any(|t| t == name), "no {name} in {shown:?}");
        }
        // (the y axis runs 0-1: "2" or "-1" could only be an x tick)
        for number in ["-1", "-0", "2"] {
            assert!(!shown.iter().any(|t| t == number), "a numeric tick {number} in {shown:?}");
        }
    }

    /// Issue 27: Flexy's Fig. 7 listed curves that lay exactly on each other: they are
    /// drawn once, named together.
    #[test]
    fn coinciding_series_share_one_legend_entry() {
        let mut p = Panel::new("cdf", "x", "y", (0.0, 2.0), (0.0, 100.0));
        let pts = [(0.0, 10.0), (1.0, 90.0)];
        p.series = vec![
            series("P-Reset SLA 200 ms", false, &pts),
            series("P-Reset SLA 1000 ms", false, &pts),
            series("F-Reset SLA 200 ms", false, &[(0.0, 5.0), (1.0, 80.0)]),
        ];
        let shown = texts(&drawn(p));
        let has = |t: &str| shown.iter().any(|s| s == t);
        assert!(has("P-Reset SLA 200 ms = P-Reset SLA 1000 ms"), "{shown:?}");
        assert!(!has("P-Reset SLA 1000 ms"), "{shown:?}");
        assert!(has("F-Reset SLA 200 ms"), "{shown:?}");
    }
}

//! SVG figures: rows of line-and-marker panels, drawn with plotters.

use plotters::prelude::*;
use std::path::Path;

/// One line of a panel.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
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
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(panel.x_range.0..panel.x_range.1, panel.y_range.0..panel.y_range.1)
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
        let y_fmt = move |v: &f64| if wide { format!("{v:.0}") } else { format!("{v}") };
        chart
            .configure_mesh()
            .x_desc(panel.x_label.as_str())
            .y_desc(panel.y_label.as_str())
            .x_labels(if panel.x_categories.is_empty() {
                10
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
        let n = panel.series.len().max(1) as f64;
        for (i, s) in panel.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            if panel.bars {
                // the group fills 80% of a category's width, one bar per series
                let width = 0.8 / n;
                let left = -0.4 + width * i as f64;
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

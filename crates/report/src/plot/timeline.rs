//! Figures over time (flent's view of a run): one or more lines against seconds since the
//! measurement began.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::{
    HEIGHT, MAX_POINTS, Pick, WIDTH, colour, legend, log_span, svg, text, thin, zero_span,
};
use crate::error::ReportError;

/// One line: its legend label, its points (seconds, value) and how to thin it.
pub(crate) struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub pick: Pick,
}

/// The chart around the lines.
pub(crate) struct Axes {
    pub y_desc: &'static str,
    pub y_fmt: fn(f64) -> String,
    /// Latency is drawn on a log axis; rates on a linear one from zero.
    pub log_y: bool,
}

/// Draw lines over time.
pub(crate) fn timeline(axes: &Axes, lines: &[Line]) -> Result<String, ReportError> {
    let lines: Vec<Line> = lines
        .iter()
        .map(|l| Line {
            label: l.label.clone(),
            points: thin(&l.points, MAX_POINTS, l.pick),
            pick: l.pick,
        })
        .collect();
    let x_hi = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1e-3, f64::max);
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    if axes.log_y {
        let (lo, hi) = log_span(ys);
        draw(axes, &lines, x_hi, (lo..hi).log_scale())
    } else {
        draw(axes, &lines, x_hi, 0.0..zero_span(ys))
    }
}

fn draw<Y>(axes: &Axes, lines: &[Line], x_hi: f64, y: Y) -> Result<String, ReportError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let drawn = svg((WIDTH, HEIGHT), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .margin_right(36)
            .x_label_area_size(44)
            .y_label_area_size(84)
            .build_cartesian_2d(0.0..x_hi, y)?;
        let y_fmt = axes.y_fmt;
        chart
            .configure_mesh()
            .x_desc("time since the measurement began (s)")
            .y_desc(axes.y_desc)
            .x_label_formatter(&|v| secs_label(*v))
            .y_label_formatter(&|v| y_fmt(*v))
            .label_style(text(16))
            .axis_desc_style(text(16))
            .light_line_style(RGBColor(235, 235, 235))
            .max_light_lines(3)
            .draw()?;
        for (i, line) in lines.iter().enumerate() {
            let style = ShapeStyle::from(&colour(i)).stroke_width(2);
            chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
        }
        Ok(())
    })?;
    Ok(drawn + &legend(lines.iter().map(|l| l.label.as_str())))
}

/// Seconds on the axis: whole numbers plainly, fractions with one decimal.
fn secs_label(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

//! Stacked horizontal bars: where a request's time goes (diagnose's latency budget).

use latscope_core::units::format_ns;
use plotters::prelude::*;

use super::{WIDTH, colour, legend, svg, text};
use crate::error::ReportError;

/// One bar: its name and its parts, left to right (label, ns).
pub(crate) struct Bar {
    pub label: String,
    pub parts: Vec<(String, f64)>,
}

/// Draw the bars on one time axis, each bar's name above it (long names need no margin on a
/// phone); parts with the same label share a colour across bars, named in the legend.
pub(crate) fn stacked(bars: &[Bar], x_desc: &str) -> Result<String, ReportError> {
    let total = bars
        .iter()
        .map(|b| b.parts.iter().map(|p| p.1.max(0.0)).sum::<f64>())
        .fold(1.0, f64::max)
        * 1.05;
    let mut names: Vec<&str> = Vec::new();
    for p in bars.iter().flat_map(|b| &b.parts) {
        if !names.contains(&p.0.as_str()) {
            names.push(&p.0);
        }
    }
    let n = bars.len().max(1);
    let height = 80 + 64 * n as u32;
    let drawn = svg((WIDTH, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(10)
            .build_cartesian_2d(0.0..total, 0.0..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(x_desc)
            .x_label_formatter(&|v| format_ns(*v))
            .label_style(text(16))
            .axis_desc_style(text(16))
            .light_line_style(RGBColor(235, 235, 235))
            .max_light_lines(3)
            .draw()?;
        for (row, bar) in bars.iter().enumerate() {
            let y = (n - 1 - row) as f64;
            let total_ns: f64 = bar.parts.iter().map(|p| p.1.max(0.0)).sum();
            let title = format!("{}: {}", bar.label, format_ns(total_ns));
            chart.draw_series([Text::new(title, (total * 0.005, y + 0.95), text(16))])?;
            let mut x = 0.0;
            for (label, ns) in &bar.parts {
                let w = ns.max(0.0);
                let c = colour(names.iter().position(|n| n == label).unwrap_or(0));
                chart.draw_series([Rectangle::new(
                    [(x, y + 0.08), (x + w, y + 0.6)],
                    c.mix(0.9).filled(),
                )])?;
                x += w;
            }
        }
        Ok(())
    })?;
    Ok(drawn + &legend(names.iter().copied()))
}

//! Latency against message size (`rr --sizes`), with the window of sizes the jump detector
//! flagged shaded and labelled with its likely cause.

use latscope_core::model::rr::RrSizeResult;
use latscope_core::sweep::SizeJump;
use latscope_core::units::{format_bytes, format_ns};
use plotters::prelude::*;

use super::{
    HEIGHT, WIDTH, colour, draw_latency_mesh, legend, line_with_dots, log_span, svg, text,
    wide_chart,
};
use crate::error::ReportError;

/// Draw p50 and p99 per size; shade the flagged sizes.
pub(crate) fn sweep(
    results: &[RrSizeResult],
    jump: Option<&SizeJump>,
) -> Result<String, ReportError> {
    let size = |r: &RrSizeResult| f64::from(r.request_bytes.max(r.response_bytes).max(1));
    let x_lo = results.iter().map(size).fold(f64::MAX, f64::min).min(1e9);
    let x_hi = results.iter().map(size).fold(2.0, f64::max);
    let (x_lo, x_hi) = (x_lo / 1.5, x_hi * 1.5);
    let series: [(&str, Vec<(f64, f64)>); 2] = [
        (
            "p50",
            results
                .iter()
                .map(|r| (size(r), r.rtt.p50_ns as f64))
                .collect(),
        ),
        (
            "p99",
            results
                .iter()
                .map(|r| (size(r), r.rtt.p99_ns as f64))
                .collect(),
        ),
    ];
    let (lo, hi) = log_span(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    let drawn = svg((WIDTH, HEIGHT), |root| {
        let mut chart = wide_chart(root)
            .build_cartesian_2d((x_lo..x_hi).log_scale().base(2.0), (lo..hi).log_scale())?;
        draw_latency_mesh(
            chart
                .configure_mesh()
                .x_desc("message size (bytes, log scale)")
                .y_desc("round-trip latency (time, log scale)")
                .x_label_formatter(&|v| format_bytes(*v)),
        )?;
        if let Some(j) = jump {
            shade(&mut chart, j, (lo, hi))?;
        }
        for (i, (_, pts)) in series.iter().enumerate() {
            let c = colour(i);
            line_with_dots(&mut chart, pts, c)?;
        }
        Ok(())
    })?;
    Ok(drawn + &legend(series.iter().map(|s| s.0)))
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<
        plotters::coord::combinators::LogCoord<f64>,
        plotters::coord::combinators::LogCoord<f64>,
    >,
>;

/// Shade each run of consecutive flagged sizes (half a step either side) and name the stall.
fn shade(chart: &mut Chart<'_, '_>, j: &SizeJump, (lo, hi): (f64, f64)) -> super::Drawn {
    let (Some(&first), Some(&last)) = (j.sizes.iter().min(), j.sizes.iter().max()) else {
        return Ok(());
    };
    let (a, b) = ((first.max(1) as f64) / 1.3, (last.max(1) as f64) * 1.3);
    let band = RGBColor(0xE6, 0x9F, 0x00).mix(0.2).filled();
    chart.draw_series([Rectangle::new([(a, lo), (b, hi)], band)])?;
    let label = format!("stall: +{} per request", format_ns(j.excess_ns as f64));
    chart.draw_series([Text::new(
        label,
        (a * 1.05, lo * 1.5),
        text(16).color(&super::PALETTE[1]),
    )])?;
    Ok(())
}

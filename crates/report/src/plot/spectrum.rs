//! The percentile spectrum (HdrHistogram's "percentile distribution" plot): latency against
//! percentile on a log "nines" axis, x = −log10(1 − p), so p90, p99, p99.9 … are equally spaced
//! and the tail gets as much room as the median.

use latscope_core::Summary;
use plotters::prelude::*;

use super::{
    HEIGHT, WIDTH, colour, draw_latency_mesh, legend, line_with_dots, log_span, svg, wide_chart,
};
use crate::error::ReportError;

/// One distribution to draw.
pub(crate) struct Curve<'a> {
    pub label: String,
    pub summary: &'a Summary,
}

/// Right end of the axis: p99.999.
const MAX_NINES: f64 = 5.0;

/// The nines value of percentile `p` (0 ≤ p < 100).
fn nines(p: f64) -> f64 {
    -(1.0 - p / 100.0).log10()
}

/// The points a summary supports. A percentile is drawn only when the sample holds enough
/// values to have one (p99.9 needs 1000); the maximum sits where one sample in `count` is, at
/// x = log10(count), the 1/count tail.
pub(crate) fn points(s: &Summary) -> Vec<(f64, f64)> {
    if s.count == 0 {
        return Vec::new();
    }
    let tail = (s.count as f64).log10().clamp(0.0, MAX_NINES);
    let mut pts = vec![(0.0, s.min_ns as f64)];
    for (p, v) in [
        (50.0, s.p50_ns),
        (75.0, s.p75_ns),
        (90.0, s.p90_ns),
        (99.0, s.p99_ns),
        (99.9, s.p999_ns),
        (99.99, s.p9999_ns),
    ] {
        if nines(p) < tail {
            pts.push((nines(p), v as f64));
        }
    }
    pts.push((tail.max(pts.last().map_or(0.0, |p| p.0)), s.max_ns as f64));
    pts
}

fn axis_label(x: &f64) -> String {
    const NAMES: [(f64, &str); 6] = [
        (0.0, "min"),
        (1.0, "p90"),
        (2.0, "p99"),
        (3.0, "p99.9"),
        (4.0, "p99.99"),
        (5.0, "p99.999"),
    ];
    NAMES
        .iter()
        .find(|(v, _)| (v - x).abs() < 1e-3)
        .map_or_else(String::new, |(_, n)| (*n).to_string())
}

/// Draw one or more spectra on shared axes.
pub(crate) fn spectrum(curves: &[Curve<'_>]) -> Result<String, ReportError> {
    let all: Vec<Vec<(f64, f64)>> = curves.iter().map(|c| points(c.summary)).collect();
    let (lo, hi) = log_span(all.iter().flatten().map(|p| p.1));
    let drawn = svg((WIDTH, HEIGHT), |root| {
        let mut chart =
            wide_chart(root).build_cartesian_2d(0.0..MAX_NINES, (lo..hi).log_scale())?;
        draw_latency_mesh(
            chart
                .configure_mesh()
                .x_desc("percentile (%, log \"nines\" scale)")
                .y_desc("latency (time, log scale)")
                .x_labels(6)
                .x_label_formatter(&axis_label),
        )?;
        for (i, pts) in all.iter().enumerate() {
            let c = colour(i);
            line_with_dots(&mut chart, pts, c)?;
        }
        Ok(())
    })?;
    Ok(drawn + &legend(curves.iter().map(|c| c.label.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_samples_stop_where_their_data_stops() {
        let s = Summary {
            count: 45,
            min_ns: 1,
            p50_ns: 2,
            p75_ns: 3,
            p90_ns: 4,
            p99_ns: 5,
            p999_ns: 5,
            p9999_ns: 5,
            max_ns: 5,
            ..Summary::default()
        };
        let xs: Vec<f64> = points(&s).iter().map(|p| p.0).collect();
        // min, p50, p75, p90, then the max at log10(45) ≈ 1.65: no p99 from 45 samples.
        assert_eq!(xs.len(), 5);
        assert!((xs[4] - 45f64.log10()).abs() < 1e-9);
    }

    #[test]
    fn draws_text_as_svg_text() {
        let s = Summary {
            count: 100_000,
            min_ns: 10_000,
            p50_ns: 20_000,
            p99_ns: 90_000,
            max_ns: 1_000_000,
            ..Summary::default()
        };
        let out = spectrum(&[Curve {
            label: "run a".into(),
            summary: &s,
        }])
        .unwrap();
        assert!(out.contains("<text") && out.contains("p99.9") && out.contains("run a"));
        assert!(out.contains("viewBox"));
    }
}

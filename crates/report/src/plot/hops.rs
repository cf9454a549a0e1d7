//! A trace's hops side by side (mtr's report as a picture): per hop, the spread of its round
//! trips — whisker from min to max, a box from p50 to p90, the probes themselves as dots — and,
//! below, the share of its probes that got no answer.

use plotters::prelude::*;

use super::{HEIGHT, WIDTH, colour, draw_latency_mesh, log_span, svg, text, wide_chart};
use crate::error::ReportError;

/// One hop's round trips, ns.
pub(crate) struct HopDist {
    /// The TTL it was probed with.
    pub ttl: u8,
    /// Individual probes (plain trace), drawn as dots.
    pub samples: Vec<f64>,
    /// (min, max): the whisker.
    pub range: Option<(f64, f64)>,
    /// (p50, p90): the box (enough rounds for a p90).
    pub band: Option<(f64, f64)>,
    /// The median: a bar across the whisker.
    pub p50: Option<f64>,
    /// Unanswered probes, %.
    pub loss_pct: f64,
}

fn ttl_span(hops: &[HopDist]) -> (f64, f64) {
    let lo = hops.iter().map(|h| h.ttl).min().unwrap_or(1);
    let hi = hops.iter().map(|h| h.ttl).max().unwrap_or(1);
    (f64::from(lo) - 0.6, f64::from(hi) + 0.6)
}

fn ttl_label(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 1.0 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

/// The RTT spread per hop on a log time axis.
pub(crate) fn hop_rtts(hops: &[HopDist]) -> Result<String, ReportError> {
    let (x_lo, x_hi) = ttl_span(hops);
    let values = hops.iter().flat_map(|h| {
        h.samples
            .iter()
            .copied()
            .chain(h.range.into_iter().flat_map(|(a, b)| [a, b]))
    });
    let (lo, hi) = log_span(values);
    let n_ticks = (x_hi - x_lo).round() as usize + 1;
    svg((WIDTH, HEIGHT), |root| {
        let mut chart = wide_chart(root).build_cartesian_2d(x_lo..x_hi, (lo..hi).log_scale())?;
        draw_latency_mesh(
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("hop (TTL)")
                .y_desc("round-trip time (time, log scale)")
                .x_labels(n_ticks.min(32))
                .x_label_formatter(&ttl_label),
        )?;
        let c = colour(0);
        for h in hops {
            let x = f64::from(h.ttl);
            if let Some((a, b)) = h.range {
                chart.draw_series([PathElement::new(
                    [(x, a.max(lo)), (x, b.max(lo))],
                    ShapeStyle::from(&c).stroke_width(2),
                )])?;
            }
            if let Some((a, b)) = h.band {
                chart.draw_series([Rectangle::new(
                    [(x - 0.22, a.max(lo)), (x + 0.22, b.max(lo))],
                    c.mix(0.35).filled(),
                )])?;
            }
            if let Some(m) = h.p50 {
                chart.draw_series([PathElement::new(
                    [(x - 0.3, m.max(lo)), (x + 0.3, m.max(lo))],
                    ShapeStyle::from(&BLACK).stroke_width(3),
                )])?;
            }
            chart.draw_series(
                h.samples
                    .iter()
                    .map(|&v| Circle::new((x, v.max(lo)), 4, colour(1).filled())),
            )?;
        }
        Ok(())
    })
}

/// Unanswered probes per hop, %.
pub(crate) fn hop_loss(hops: &[HopDist]) -> Result<String, ReportError> {
    let (x_lo, x_hi) = ttl_span(hops);
    let n_ticks = (x_hi - x_lo).round() as usize + 1;
    svg((WIDTH, 260), |root| {
        let mut chart = wide_chart(root).build_cartesian_2d(x_lo..x_hi, 0.0..105.0)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("hop (TTL)")
            .y_desc("unanswered (%)")
            .x_labels(n_ticks.min(32))
            .x_label_formatter(&ttl_label)
            .y_label_formatter(&|v| format!("{v:.0}%"))
            .y_labels(6)
            .label_style(text(16))
            .axis_desc_style(text(16))
            .light_line_style(RGBColor(235, 235, 235))
            .max_light_lines(1)
            .draw()?;
        let fill = colour(1).mix(0.85).filled();
        chart.draw_series(hops.iter().map(|h| {
            let x = f64::from(h.ttl);
            // A hairline at 0% still shows that the hop was probed.
            let top = h.loss_pct.clamp(0.6, 100.0);
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, top)], fill)
        }))?;
        Ok(())
    })
}

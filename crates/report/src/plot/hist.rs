//! Latency histograms on a log time axis (Gregg's latency histograms, netstacklat's log2 view):
//! equal-width bars per factor of time, so a 40 ms mode shows next to a 40 µs one. The count
//! axis is logarithmic too: a tail of a few samples stays visible beside a peak of 100k.

use latscope_core::log2::{bucket_lower, bucket_upper};
use latscope_core::units::{format_ns, format_si};
use latscope_core::{Log2Histogram, LogBins};
use plotters::prelude::*;

use super::{HEIGHT, WIDTH, colour, decades, svg, text};
use crate::error::ReportError;

/// The bottom of the log count axis: below 1, so a bin of one sample is a bar, not a line.
const COUNT_FLOOR: f64 = 0.5;

/// Values in `(lo_ns, hi_ns]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bin {
    pub lo_ns: f64,
    pub hi_ns: f64,
    pub count: u64,
}

/// The bins of a [`LogBins`] histogram (empty bins inside the span kept: they are gaps).
pub(crate) fn from_bins(b: &LogBins) -> Vec<Bin> {
    b.counts
        .iter()
        .enumerate()
        .map(|(k, &count)| {
            let (lo_ns, hi_ns) = b.edges(k);
            Bin {
                lo_ns,
                hi_ns,
                count,
            }
        })
        .collect()
}

/// The non-empty span of a log2 histogram, as bins (bucket 0, values 0 and 1 ns, drawn from
/// 0.5 ns so the log axis can hold it).
pub(crate) fn from_log2(h: &Log2Histogram) -> Vec<Bin> {
    let first = h.buckets.iter().position(|&c| c > 0);
    let last = h.buckets.iter().rposition(|&c| c > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return Vec::new();
    };
    (first..=last)
        .map(|k| Bin {
            lo_ns: if k == 0 { 0.5 } else { bucket_lower(k) as f64 },
            hi_ns: bucket_upper(k).max(1) as f64,
            count: h.buckets[k],
        })
        .collect()
}

/// Draw histograms side by side in one row of panels (one per `(title, bins)`), sharing the
/// time axis so their modes line up.
pub(crate) fn histograms(panels: &[(String, Vec<Bin>)]) -> Result<String, ReportError> {
    let lo = panels
        .iter()
        .flat_map(|p| p.1.first().map(|b| b.lo_ns))
        .fold(f64::MAX, f64::min);
    let hi = panels
        .iter()
        .flat_map(|p| p.1.last().map(|b| b.hi_ns))
        .fold(1.0, f64::max);
    let (lo, hi) = if lo == f64::MAX {
        (1.0, 10.0)
    } else {
        // The bins' edges as they are (no room added): an edge on a decade stays its end.
        decades(lo * 1.05, hi / 1.05)
    };
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    let height = if panels.len() > 1 {
        300 * rows as u32
    } else {
        HEIGHT
    };
    svg((WIDTH, height), |root| {
        let areas = root.split_evenly((rows, cols));
        for (i, ((title, bins), area)) in panels.iter().zip(areas.iter()).enumerate() {
            let most = bins.iter().map(|b| b.count).max().unwrap_or(1).max(1);
            let (_, top) = decades(1.0, most as f64);
            let mut chart = ChartBuilder::on(area)
                .margin(10)
                // Room for the last time label, centred on the right edge.
                .margin_right(30)
                .caption(title, text(16))
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d((lo..hi).log_scale(), (COUNT_FLOOR..top).log_scale())?;
            chart
                .configure_mesh()
                .x_desc("latency (time, log scale)")
                .y_desc("samples (count, log scale)")
                .x_label_formatter(&|v| format_ns(*v))
                .y_label_formatter(&|v| format_si(*v))
                .x_labels(if cols > 1 { 4 } else { 8 })
                .label_style(text(15))
                .axis_desc_style(text(16))
                .light_line_style(RGBColor(235, 235, 235))
                .max_light_lines(3)
                .draw()?;
            let fill = colour(i).mix(0.8).filled();
            chart.draw_series(bins.iter().filter(|b| b.count > 0).map(|b| {
                Rectangle::new([(b.lo_ns, COUNT_FLOOR), (b.hi_ns, b.count as f64)], fill)
            }))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_decade_bins() {
        let bins = from_bins(&LogBins::from_samples([1_000, 1_000, 10_000, 100_000]));
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 4);
        let b = bins
            .iter()
            .find(|b| b.lo_ns <= 10_000.0 && 10_000.0 < b.hi_ns)
            .unwrap();
        assert_eq!(b.count, 1);
    }

    #[test]
    fn log2_bins_keep_bucket_edges() {
        let mut h = Log2Histogram::new();
        h.record(3000);
        let bins = from_log2(&h);
        assert_eq!(bins.len(), 1);
        assert_eq!((bins[0].lo_ns, bins[0].hi_ns), (2048.0, 4096.0));
    }
}

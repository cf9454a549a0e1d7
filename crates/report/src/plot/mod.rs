//! The chart types, drawn with `plotters` into SVG strings. Text stays SVG `<text>` (no font
//! rasterising, no system font library); sizes are a fixed view box that CSS scales to the
//! screen.

pub(crate) mod bars;
pub(crate) mod hist;
pub(crate) mod hops;
pub(crate) mod spectrum;
pub(crate) mod sweep;
pub(crate) mod timeline;

use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

use crate::error::ReportError;

/// Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008), most distinct
/// first: blue, vermillion, bluish green, orange, reddish purple, sky blue, black. Yellow is
/// left out: it vanishes on white paper.
pub(crate) const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
];

/// The colour of series `i`.
pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// View-box size of a normal plot, px.
pub(crate) const WIDTH: u32 = 680;
/// View-box height of a normal plot, px.
pub(crate) const HEIGHT: u32 = 380;
/// Font of every label; SVG viewers pick what the system has.
pub(crate) const FONT: &str = "sans-serif";

/// The legend of a plot as HTML under it (never covering data, and it wraps on a phone).
pub(crate) fn legend<'a>(labels: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("<ul class=\"legend\">");
    for (i, l) in labels.into_iter().enumerate() {
        let RGBColor(r, g, b) = colour(i);
        out.push_str(&format!(
            "<li><span class=\"swatch\" style=\"background:#{r:02x}{g:02x}{b:02x}\"></span>{}</li>",
            crate::html::esc(l)
        ));
    }
    out.push_str("</ul>");
    out
}

/// What a drawing closure returns.
pub(crate) type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Draw into a fresh SVG of `(w, h)` and return its text.
pub(crate) fn svg(
    (w, h): (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Drawn,
) -> Result<String, ReportError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root).map_err(|e| ReportError::Plot(e.to_string()))?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

fn plot_err(e: impl std::fmt::Display) -> ReportError {
    ReportError::Plot(e.to_string())
}

/// A label style at `size` px.
pub(crate) fn text(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}

/// A y label: the latency in its unit.
fn latency_label(v: &f64) -> String {
    latscope_core::units::format_ns(*v)
}

/// The builder of a full-width chart: 14 px margins (36 on the right, for the last x label),
/// room for the x labels below and for latency labels on the left.
pub(crate) fn wide_chart<'a, 'b, 'c>(
    root: &'a DrawingArea<SVGBackend<'c>, Shift>,
) -> ChartBuilder<'a, 'b, SVGBackend<'c>> {
    let mut b = ChartBuilder::on(root);
    b.margin(14)
        .margin_right(36)
        .x_label_area_size(44)
        .y_label_area_size(78);
    b
}

/// Finish and draw the mesh of a latency chart the way every chart here looks: latency labels
/// on y, 16 px text, three faint lines between labels.
pub(crate) fn draw_latency_mesh<X, Y>(mesh: &mut MeshStyle<'_, '_, X, Y, SVGBackend<'_>>) -> Drawn
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    mesh.y_label_formatter(&latency_label)
        .label_style(text(16))
        .axis_desc_style(text(16))
        .light_line_style(RGBColor(235, 235, 235))
        .max_light_lines(3)
        .draw()?;
    Ok(())
}

/// A line through `pts` with a dot on each point, in colour `c`.
pub(crate) fn line_with_dots<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    pts: &[(f64, f64)],
    c: RGBColor,
) -> Drawn
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let style = ShapeStyle::from(&c).stroke_width(3);
    chart.draw_series(LineSeries::new(pts.iter().copied(), style))?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    Ok(())
}

/// A log axis range that holds every value, from the decade at or below the lowest to the
/// decade above the highest: both ends are labelled, so every point sits between two labels
/// (a 44 ms point under a last label of 10 ms reads as 10 ms). Never starts at zero.
pub(crate) fn log_span(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (1.0, 10.0);
    }
    decades(lo, hi)
}

/// `lo..hi` widened to whole decades, with room so no point sits on the frame: the decade at or
/// below `lo / 1.05` to the one at or above `hi × 1.05` (at least one decade).
pub(crate) fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let down = 10f64.powf((lo / 1.05).log10().floor());
    let up = 10f64.powf((hi * 1.05).log10().ceil());
    (down, up.max(down * 10.0))
}

/// A linear range from zero that holds every value with headroom.
pub(crate) fn zero_span(values: impl IntoIterator<Item = f64>) -> f64 {
    let hi = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    if hi > 0.0 { hi * 1.1 } else { 1.0 }
}

/// Keep at most `max` points of a series: each kept point stands for a run of neighbours and
/// carries `pick` of their values (the maximum for tail latency, the mean for rates), so a
/// ten-hour run draws in the same size as a ten-second one.
pub(crate) fn thin(points: &[(f64, f64)], max: usize, pick: Pick) -> Vec<(f64, f64)> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max);
    points
        .chunks(per)
        .map(|run| {
            let x = run.iter().map(|p| p.0).sum::<f64>() / run.len() as f64;
            let y = match pick {
                Pick::Max => run.iter().map(|p| p.1).fold(f64::MIN, f64::max),
                Pick::Mean => run.iter().map(|p| p.1).sum::<f64>() / run.len() as f64,
            };
            (x, y)
        })
        .collect()
}

/// How [`thin`] merges a run of points.
#[derive(Clone, Copy)]
pub(crate) enum Pick {
    Max,
    Mean,
}

/// Most points one line draws (a 10-minute run at 1 s intervals fits unthinned).
pub(crate) const MAX_POINTS: usize = 1200;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_peak() {
        let pts: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64, (i == 5_000) as u8 as f64))
            .collect();
        let t = thin(&pts, 100, Pick::Max);
        assert!(t.len() <= 100);
        assert_eq!(t.iter().filter(|p| p.1 == 1.0).count(), 1);
    }

    #[test]
    fn log_span_of_a_flat_series_is_a_decade() {
        let (lo, hi) = log_span([5.0, 5.0]);
        assert!(lo < 5.0 && hi > 5.0 && hi / lo >= 10.0);
    }

    /// Both ends are decades (labelled), and the highest point is below the top one.
    #[test]
    fn log_span_ends_on_the_decades_around_the_points() {
        let near = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
        let (lo, hi) = log_span([13_700.0, 44_000_000.0]);
        assert!(near(lo, 10_000.0) && near(hi, 100_000_000.0), "{lo} {hi}");
        // A point on a decade gets the next one above it, so its dot is not cut by the frame.
        let (lo, hi) = log_span([1_000.0, 10_000_000.0]);
        assert!(near(lo, 100.0) && near(hi, 100_000_000.0), "{lo} {hi}");
        let (lo, hi) = log_span([0.7, 0.9]);
        assert!(near(lo, 0.1) && near(hi, 1.0), "{lo} {hi}");
    }
}

//! Drawing [`LiveState`] into a ratatui frame: a pure function of the state and the clock, so
//! tests render it into ratatui's `TestBackend` and read the buffer.

use std::time::Duration;

use latscope_core::log2::bucket_upper;
use latscope_core::units::{format_bitrate, format_ns, format_si};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Gauge, Paragraph, Row, Sparkline, Table};

use crate::state::{Goal, LiveState, RateUnit};

/// The hint on how to stop, always on screen.
pub const STOP_HINT: &str = "q or Ctrl-C: stop with partial results";

/// Blue of the Okabe–Ito palette (colour-blind safe), as the HTML report uses.
const BLUE: Color = Color::Rgb(0, 114, 178);
/// Vermillion of the Okabe–Ito palette: the tail (p99).
const VERMILLION: Color = Color::Rgb(213, 94, 0);

/// Draw the whole view. `elapsed` is the wall-clock time since the run started.
pub fn draw(frame: &mut Frame<'_>, st: &LiveState, elapsed: Duration) {
    let area = frame.area();
    let has_latency = st.last.is_some() || st.so_far.is_some();
    let table_rows = st.table.as_ref().map_or(0, |(_, rows)| rows.len() as u16);
    let mut constraints = vec![
        Constraint::Length(3), // title, progress, hint
        Constraint::Length(4), // now | so far
        Constraint::Min(4),    // rate sparkline
    ];
    if has_latency {
        constraints.push(Constraint::Min(4)); // p99 sparkline
    }
    if st.buckets.is_some() {
        constraints.push(Constraint::Min(7)); // histogram
    }
    if table_rows > 0 {
        constraints.push(Constraint::Length(table_rows + 3));
    }
    let rows = Layout::vertical(constraints).split(area);
    let mut next = 0;
    let mut take = || {
        let r = rows[next];
        next += 1;
        r
    };
    header(frame, st, elapsed, take());
    figures(frame, st, take());
    rate_line(frame, st, take());
    if has_latency {
        p99_line(frame, st, take());
    }
    if st.buckets.is_some() {
        histogram(frame, st, take());
    }
    if table_rows > 0 {
        table(frame, st, take());
    }
}

fn header(frame: &mut Frame<'_>, st: &LiveState, elapsed: Duration, area: Rect) {
    let [top, gauge, hint] = Layout::vertical([Constraint::Length(1); 3]).areas(area);
    let secs = elapsed.as_secs_f64();
    let clock = match st.goal {
        Goal::Duration(d) => format!("{secs:.1} s of {:.0} s", d.as_secs_f64()),
        Goal::Count(n) => format!("{secs:.1} s, {} of {}", st.total, n),
        Goal::Open => format!("{secs:.1} s"),
    };
    let left = st
        .time_left(elapsed)
        .map(|d| format!(", {:.0} s left", d.as_secs_f64().ceil()))
        .unwrap_or_default();
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                st.title.clone(),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("   {clock}{left}")),
        ])),
        top,
    );
    match st.done_share(elapsed) {
        Some(share) => frame.render_widget(
            Gauge::default()
                .gauge_style(Style::default().fg(BLUE))
                .ratio(share)
                .label(format!("{:.0}%", share * 100.0)),
            gauge,
        ),
        None => frame.render_widget(Paragraph::new("runs until stopped"), gauge),
    }
    let mut hint_line = vec![Span::styled(
        STOP_HINT,
        Style::default().add_modifier(Modifier::DIM),
    )];
    if !st.status.is_empty() {
        hint_line.push(Span::raw(format!("   {}", st.status)));
    }
    frame.render_widget(Paragraph::new(Line::from(hint_line)), hint);
}

fn rate_text(unit: RateUnit, v: f64) -> String {
    match unit {
        RateUnit::PerSec(name) => format!("{} {name}", format_si(v)),
        RateUnit::Bits => format_bitrate(v),
    }
}

fn figures(frame: &mut Frame<'_>, st: &LiveState, area: Rect) {
    let [now, all] =
        Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(area);
    let mut lines = vec![Line::from(format!(
        "rate {}",
        st.rates
            .back()
            .map_or_else(|| "-".to_string(), |r| rate_text(st.unit, *r))
    ))];
    if let Some(s) = &st.last {
        lines.push(Line::from(format!(
            "p50 {}  p99 {}",
            format_ns(s.p50_ns as f64),
            format_ns(s.p99_ns as f64)
        )));
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("last interval")),
        now,
    );
    let mut lines = Vec::new();
    if let Some(s) = st.summary_so_far() {
        lines.push(Line::from(format!(
            "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            format_ns(s.p50_ns as f64),
            format_ns(s.p90_ns as f64),
            format_ns(s.p99_ns as f64),
            format_ns(s.p999_ns as f64),
            format_ns(s.max_ns as f64)
        )));
    }
    let mut counts = Vec::new();
    if st.total > 0 {
        counts.push(format!("{} done", st.total));
    }
    let secs = st.measured_ns as f64 / 1e9;
    if st.total > 0 && secs > 0.0 {
        counts.push(format!(
            "mean rate {}",
            rate_text(st.unit, st.total as f64 / secs)
        ));
    }
    counts.push(format!("errors {}", st.errors));
    let style = if st.errors > 0 {
        Style::default().fg(VERMILLION)
    } else {
        Style::default()
    };
    lines.push(Line::styled(counts.join("  "), style));
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("so far")),
        all,
    );
}

/// The last `width` values of a series, for a sparkline that fills the area.
fn tail<T: Copy>(q: &std::collections::VecDeque<T>, width: u16) -> Vec<T> {
    let n = q.len().saturating_sub(width as usize);
    q.iter().skip(n).copied().collect()
}

fn rate_line(frame: &mut Frame<'_>, st: &LiveState, area: Rect) {
    let data: Vec<u64> = tail(&st.rates, area.width.saturating_sub(2))
        .into_iter()
        .map(|r| r.max(0.0) as u64)
        .collect();
    let max = data.iter().copied().max().unwrap_or(0);
    let title = format!(
        "rate per interval (last {}; max {})",
        data.len(),
        rate_text(st.unit, max as f64)
    );
    frame.render_widget(
        Sparkline::default()
            .block(Block::bordered().title(title))
            .style(Style::default().fg(BLUE))
            .data(&data),
        area,
    );
}

fn p99_line(frame: &mut Frame<'_>, st: &LiveState, area: Rect) {
    let data = tail(&st.p99s, area.width.saturating_sub(2));
    let max = data.iter().copied().max().unwrap_or(0);
    let title = format!("p99 latency per interval (max {})", format_ns(max as f64));
    frame.render_widget(
        Sparkline::default()
            .block(Block::bordered().title(title))
            .style(Style::default().fg(VERMILLION))
            .data(&data),
        area,
    );
}

fn histogram(frame: &mut Frame<'_>, st: &LiveState, area: Rect) {
    let Some(h) = &st.buckets else { return };
    let block = Block::bordered().title("latency histogram so far (share of samples ≤ bucket)");
    let Some((lo, hi)) = h.occupied_range() else {
        frame.render_widget(Paragraph::new("no samples yet").block(block), area);
        return;
    };
    const BAR: u16 = 6;
    let fit = (area.width.saturating_sub(2) / (BAR + 1)).max(1) as usize;
    // Too many buckets for the width: keep the highest ones, where the tail is.
    let lo = lo.max((hi + 1).saturating_sub(fit));
    let total = h.count().max(1) as f64;
    let bars: Vec<Bar<'_>> = (lo..=hi)
        .map(|k| {
            let c = h.buckets[k];
            let pct = c as f64 * 100.0 / total;
            Bar::default()
                .value(c)
                .text_value(if c == 0 {
                    String::new()
                } else if pct >= 1.0 {
                    format!("{pct:.0}%")
                } else {
                    "<1%".to_string()
                })
                .label(Line::from(short_ns(bucket_upper(k))))
        })
        .collect();
    frame.render_widget(
        BarChart::default()
            .block(block)
            .bar_width(BAR)
            .bar_gap(1)
            .bar_style(Style::default().fg(BLUE))
            .value_style(Style::default().fg(Color::Black).bg(BLUE))
            .data(BarGroup::default().bars(&bars)),
        area,
    );
}

/// A bucket bound in at most 6 characters (`512ns`, `66us`, `4.2ms`, `1.1s`), in
/// `format_ns`'s ASCII units.
fn short_ns(ns: u64) -> String {
    let v = ns as f64;
    let (x, unit) = if v < 1e3 {
        (v, "ns")
    } else if v < 1e6 {
        (v / 1e3, "us")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    if x < 10.0 && x.fract() > 0.05 {
        format!("{x:.1}{unit}")
    } else {
        format!("{x:.0}{unit}")
    }
}

fn table(frame: &mut Frame<'_>, st: &LiveState, area: Rect) {
    let Some((header, rows)) = &st.table else {
        return;
    };
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let w = rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(4);
            Constraint::Length(w as u16)
        })
        .collect();
    frame.render_widget(
        Table::new(rows.iter().map(|r| Row::new(r.clone())), widths)
            .header(Row::new(header.clone()).style(Style::default().add_modifier(Modifier::BOLD)))
            .column_spacing(2)
            .block(Block::bordered().title("detail, last interval")),
        area,
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::state::Tick;
    use latscope_core::LatencyHistogram;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn screen(st: &LiveState, elapsed: Duration, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, st, elapsed)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    fn http_like() -> LiveState {
        let mut st = LiveState::new(
            "latscope http http://127.0.0.1:8080/",
            Goal::Duration(Duration::from_secs(30)),
            RateUnit::PerSec("req/s"),
        );
        for i in 0..10u64 {
            let mut h = LatencyHistogram::new();
            for _ in 0..990 {
                h.record(50_000); // 50 µs
            }
            for _ in 0..10 {
                h.record(40_000_000); // 40 ms: the Nagle stall
            }
            let s = h.summary();
            st.tick(Tick {
                end_ns: (i + 1) * 1_000_000_000,
                count: 1000,
                errors: u64::from(i == 3),
                rate: 1000.0 + i as f64,
                latency: Some(&s),
                hist: Some(&h),
            });
        }
        st
    }

    #[test]
    fn shows_rate_percentiles_histogram_and_time_left() {
        let st = http_like();
        let s = screen(&st, Duration::from_secs(10), 100, 40);
        assert!(s.contains("latscope http http://127.0.0.1:8080/"), "{s}");
        assert!(s.contains("10.0 s of 30 s, 20 s left"), "{s}");
        assert!(s.contains("33%"), "gauge:\n{s}");
        assert!(s.contains(STOP_HINT), "{s}");
        assert!(s.contains("rate 1.01k req/s"), "current rate:\n{s}");
        assert!(s.contains("10000 done"), "{s}");
        assert!(s.contains("errors 1"), "{s}");
        // 1% of the samples are 40 ms: p50 is 50 µs and p99.9 is the stall.
        assert!(s.contains("p50 50us"), "{s}");
        assert!(s.contains("p99.9 40ms"), "{s}");
        assert!(s.contains("latency histogram so far"), "{s}");
        // The two occupied buckets: (32, 64] µs with 99% and (33.5, 67.1] ms with 1%.
        assert!(s.contains("99%") && s.contains("1%"), "{s}");
        assert!(s.contains("66us") && s.contains("67ms"), "{s}");
        assert!(s.contains("p99 latency per interval"), "{s}");
    }

    #[test]
    fn throughput_view_has_a_table_and_no_latency_panels() {
        let mut st = LiveState::new("latscope stream 10.0.0.2", Goal::Open, RateUnit::Bits);
        st.tick(Tick {
            end_ns: 1_000_000_000,
            count: 0,
            errors: 0,
            rate: 9.4e9,
            latency: None,
            hist: None,
        });
        st.table = Some((
            vec!["direction".into(), "rate".into()],
            vec![vec!["client→server".into(), "9.40 Gbit/s".into()]],
        ));
        let s = screen(&st, Duration::from_secs(1), 80, 24);
        assert!(s.contains("runs until stopped"), "{s}");
        assert!(s.contains("client→server"), "{s}");
        assert!(s.contains("Gbit/s"), "{s}");
        assert!(!s.contains("histogram"), "{s}");
        assert!(!s.contains("p99"), "{s}");
    }

    #[test]
    fn a_tiny_terminal_does_not_panic() {
        let st = http_like();
        for (w, h) in [(1, 1), (10, 5), (30, 8)] {
            screen(&st, Duration::from_secs(3), w, h);
        }
    }

    #[test]
    fn short_bucket_labels() {
        assert_eq!(short_ns(512), "512ns");
        assert_eq!(short_ns(65_536), "66us");
        assert_eq!(short_ns(4_194_304), "4.2ms");
        assert_eq!(short_ns(1_073_741_824), "1.1s");
    }
}

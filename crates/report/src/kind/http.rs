//! `latscope http`: the latency spectrum, and over time the request rate and p50/p99.

use latscope_core::model::http::{HttpInterval, HttpReport};
use latscope_core::model::rr::LoadMode;
use latscope_core::units::{format_bytes, format_ns, format_si};

use super::{error_list, histogram_block, interrupted, latency_block};
use crate::error::ReportError;
use crate::html::{facts, figure, table};
use crate::plot::Pick;
use crate::plot::timeline::{Axes, Line, timeline};

pub(crate) fn body(r: &HttpReport) -> Result<String, ReportError> {
    let load = match &r.load {
        LoadMode::Closed => "closed loop".to_string(),
        LoadMode::Open { rate_per_sec } => format!("open loop, {}/s", format_si(*rate_per_sec)),
    };
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        ("URL", format!("{} {}", r.method, r.url)),
        (
            "protocol",
            format!("{}{}", r.protocol, if r.tls { " over TLS" } else { "" }),
        ),
        (
            "connections / threads",
            format!("{} / {}", r.connections, r.threads),
        ),
        ("load", load),
        ("requests", format_si(r.requests as f64)),
        ("rate", format!("{}/s", format_si(r.requests_per_sec))),
        ("read", format!("{}/s", format_bytes(r.bytes_read_per_sec))),
        (
            "p50 / p99",
            format!(
                "{} / {}",
                format_ns(r.latency.p50_ns as f64),
                format_ns(r.latency.p99_ns as f64)
            ),
        ),
        ("errors", format_si(r.errors.total as f64)),
        ("error responses", error_responses(r)),
    ]);
    let mut rows = Vec::new();
    if let Some(i) = &r.latency_from_intended {
        rows.push(("from intended send time (corrected)".to_string(), i));
    }
    rows.push(("request → response".to_string(), &r.latency));
    rows.push(("TCP connect".to_string(), &r.connect));
    if let Some(t) = &r.tls_handshake {
        rows.push(("TLS handshake".to_string(), t));
    }
    out += &latency_block(&rows)?;
    out += &histogram_block(&[
        (
            "corrected: from intended send time".to_string(),
            r.latency_from_intended_bins.as_ref(),
        ),
        ("request → response".to_string(), r.latency_bins.as_ref()),
    ])?;
    if !r.timeline.is_empty() {
        out += &over_time(r)?;
    }
    let status: Vec<Vec<String>> = r
        .status
        .iter()
        .map(|s| vec![s.code.to_string(), format_si(s.count as f64)])
        .collect();
    out += &table("status", &["status", "responses"], &status);
    out += &error_list("Error samples", &r.error_samples);
    Ok(out)
}

impl crate::page::Page for HttpReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        match &self.latency_from_intended {
            Some(s) => Some(("latency from intended send time", s.clone())),
            None => Some(("request → response", self.latency.clone())),
        }
    }
}

/// The error pages by status with their share (`1200 × 404 (100%)`), or `none`.
fn error_responses(r: &HttpReport) -> String {
    let pages = latscope_core::model::http::error_responses(&r.status);
    if pages.is_empty() {
        return "none".into();
    }
    pages
        .iter()
        .map(|s| {
            let pct = s.count as f64 * 100.0 / r.requests.max(1) as f64;
            format!("{} × {} ({pct:.0}%)", format_si(s.count as f64), s.code)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn over_time(r: &HttpReport) -> Result<String, ReportError> {
    let t = &r.timeline;
    let rate = Line {
        label: "requests/s".into(),
        points: t
            .iter()
            .map(|i| (secs(i.end_ns), i.requests_per_sec))
            .collect(),
        pick: Pick::Mean,
    };
    let mut lines = vec![rate];
    if t.iter().any(|i| i.errors > 0) {
        lines.push(Line {
            label: "errors/s".into(),
            points: t
                .iter()
                .map(|i| {
                    (
                        secs(i.end_ns),
                        i.errors as f64 / secs(i.end_ns - i.start_ns).max(1e-9),
                    )
                })
                .collect(),
            pick: Pick::Mean,
        });
    }
    let rate_axes = Axes {
        y_desc: "completed requests (requests/s)",
        y_fmt: |v| format_si(v),
        log_y: false,
    };
    let lat = |label: &str, f: fn(&HttpInterval) -> Option<u64>| Line {
        label: label.into(),
        points: t
            .iter()
            .filter(|i| i.requests > 0)
            .filter_map(|i| f(i).map(|v| (secs(i.end_ns), v as f64)))
            .collect(),
        pick: Pick::Max,
    };
    let lat_axes = Axes {
        y_desc: "latency (time, log scale)",
        y_fmt: |v| format_ns(v),
        log_y: true,
    };
    let open = r.latency_from_intended.is_some();
    let raw = open && t.iter().any(|i| i.raw_p50_ns.is_some());
    let mut lat_lines = if open {
        vec![
            lat("p50 from intended send (corrected)", |i| Some(i.p50_ns)),
            lat("p99 from intended send (corrected)", |i| Some(i.p99_ns)),
        ]
    } else {
        vec![
            lat("p50", |i| Some(i.p50_ns)),
            lat("p99", |i| Some(i.p99_ns)),
        ]
    };
    if raw {
        lat_lines.push(lat("p50 from actual send (raw)", |i| i.raw_p50_ns));
        lat_lines.push(lat("p99 from actual send (raw)", |i| i.raw_p99_ns));
    }
    lat_lines.push(lat(if open { "max (corrected)" } else { "max" }, |i| {
        Some(i.max_ns)
    }));
    let corrected = match (open, raw) {
        (true, true) => {
            " Open loop: corrected lines count from each request's intended send time (coordinated \
             omission corrected, as wrk2), raw lines from when it was actually sent; a gap \
             between them is requests waiting to be sent behind a slow server."
        }
        (true, false) => {
            " Open loop: counted from each request's intended send time (coordinated omission \
             corrected)."
        }
        _ => "",
    };
    Ok(format!(
        "{}{}",
        figure(
            "rate-over-time",
            &timeline(&rate_axes, &lines)?,
            "Completed requests per second, per interval: a steady line is a steady server; dips \
             are stalls (look for the same moment in the latency plot below).",
        ),
        figure(
            "latency-over-time",
            &timeline(&lat_axes, &lat_lines)?,
            &format!(
                "Latency of the responses completed in each interval: p99 rising while p50 stays \
                 is a growing tail (queueing, GC, a timer); both rising is saturation.{corrected}"
            ),
        )
    ))
}

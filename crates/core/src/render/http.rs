use std::fmt::Write;

use super::rr::load_text;
use super::{Human, Page, Table};
use crate::model::http::{CertificateCheck, HttpReport, error_responses};
use crate::model::rr::LoadMode;
use crate::summary::Summary;
use crate::units::{count, format_bytes, format_ns, format_si};

/// Most timeline rows shown; longer runs show every n-th second (`--json` has them all).
const MAX_TIMELINE_ROWS: usize = 30;

impl Human for HttpReport {
    fn render_human(&self, out: &mut Page) {
        self.header(out);
        out.push('\n');
        self.latency_table(out);
        out.push('\n');
        self.outcomes(out);
        self.timeline(out);
        out.push('\n');
        self.footnotes(out);
    }
}

impl HttpReport {
    /// What was asked of whom, and the totals.
    fn header(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "latscope http {} — {} {} to {}{}, {}{}, {}, {}",
            self.url,
            self.protocol,
            self.method,
            self.address,
            match (self.tls, self.certificate) {
                (true, Some(CertificateCheck::NotVerified)) => {
                    " (TLS, certificate not verified: --insecure)"
                }
                (true, _) => " (TLS)",
                (false, _) => "",
            },
            count(u64::from(self.connections), "connection"),
            self.streams_per_connection
                .map(|s| format!(" × {}", count(u64::from(s), "stream")))
                .unwrap_or_default(),
            count(u64::from(self.threads), "thread"),
            load_text(&self.load)
        );
        super::address_line(self.address_choice.as_ref(), out);
        if self.requests == 0 {
            // What was read then was handshakes and failed answers, not responses: no rate.
            let _ = writeln!(
                out,
                "  0 requests in {}: no response completed",
                format_ns(self.elapsed_ns as f64),
            );
        } else {
            let _ = writeln!(
                out,
                "  {} in {}: {} req/s; read {} ({}/s)",
                count(self.requests, "request"),
                format_ns(self.elapsed_ns as f64),
                format_si(self.requests_per_sec),
                format_bytes(self.bytes_read as f64),
                format_bytes(self.bytes_read_per_sec),
            );
        }
        if self.warmup_ns > 0 {
            let _ = writeln!(
                out,
                "  warm-up {} ({}) not counted",
                format_ns(self.warmup_ns as f64),
                count(self.warmup_requests, "response")
            );
        }
    }

    /// Request (and, open loop, from-intended-send), connect and TLS latency.
    fn latency_table(&self, out: &mut Page) {
        let mut headers: Vec<&str> = vec!["latency"];
        headers.extend(Summary::HEADERS);
        let mut t = Table::new(&headers);
        let mut row = |name: &str, s: &Summary| {
            let mut cells = vec![name.to_string()];
            cells.extend(s.cells());
            t.row(cells);
        };
        if let Some(ci) = &self.latency_from_intended {
            row("from intended send", ci);
            row("from actual send", &self.latency);
        } else {
            row("request", &self.latency);
        }
        row("TCP connect", &self.connect);
        if let Some(h) = &self.tls_handshake {
            row("TLS handshake", h);
        }
        t.render("  ", out);
    }

    /// Status codes, errors by kind, connections opened, late sends.
    fn outcomes(&self, out: &mut Page) {
        let status: Vec<String> = self
            .status
            .iter()
            .map(|s| format!("{} × {}", s.code, s.count))
            .collect();
        let _ = writeln!(
            out,
            "  status: {}",
            if status.is_empty() {
                "none".to_string()
            } else {
                status.join(", ")
            }
        );
        let e = &self.errors;
        let kinds = [
            ("connect", e.connect),
            ("timeout", e.timeout),
            ("reset", e.reset),
            ("closed early", e.closed),
            ("malformed", e.malformed),
            ("tls", e.tls),
            ("io", e.io),
        ];
        // Error pages first: the server answered, but not with what was asked for.
        let errs: Vec<String> = error_responses(&self.status)
            .iter()
            .map(|s| {
                format!(
                    "{} {} ({})",
                    count(s.count, "response"),
                    s.code,
                    share(s.count, self.requests)
                )
            })
            .chain(
                kinds
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(k, n)| format!("{n} {k}")),
            )
            .collect();
        let _ = writeln!(
            out,
            "  errors: {}",
            if errs.is_empty() {
                "none".to_string()
            } else {
                errs.join(", ")
            }
        );
        for s in &self.error_samples {
            let _ = writeln!(out, "    {s}");
        }
        let _ = writeln!(out, "  connections opened: {}", self.connections_opened);
        if matches!(self.load, LoadMode::Open { .. }) {
            let _ = writeln!(
                out,
                "  late sends (> 1 ms after their intended time): {}",
                self.late_sends
            );
        }
    }

    /// One row per second (every n-th second of a long run).
    fn timeline(&self, out: &mut Page) {
        if self.timeline.is_empty() {
            return;
        }
        out.push('\n');
        let mut t = Table::new(&["second", "req/s", "p50", "p99", "max", "errors"]);
        let step = self.timeline.len().div_ceil(MAX_TIMELINE_ROWS);
        for iv in self.timeline.iter().step_by(step.max(1)) {
            let has = iv.requests > 0;
            let lat = |v: u64| if has { format_ns(v as f64) } else { "-".into() };
            t.row(vec![
                format!(
                    "{:.0}–{:.1}s",
                    iv.start_ns as f64 / 1e9,
                    iv.end_ns as f64 / 1e9
                ),
                format_si(iv.requests_per_sec),
                lat(iv.p50_ns),
                lat(iv.p99_ns),
                lat(iv.max_ns),
                iv.errors.to_string(),
            ]);
        }
        t.render("  ", out);
    }

    /// What the clock covers, the Little's-law check, open loop and Ctrl-C notes.
    fn footnotes(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "  Latency: request write started → last response byte read."
        );
        if let Some(line) = self.littles_law() {
            let _ = writeln!(out, "  {line}");
        }
        if matches!(self.load, LoadMode::Open { .. }) {
            let _ = writeln!(
                out,
                "  Open loop: 'from intended send' counts from when each request was due, so server stalls are not hidden (coordinated omission, as in wrk2)."
            );
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "\n  (interrupted: figures cover what was measured before Ctrl-C)"
            );
        }
    }
    /// Closed loop keeps every connection (every stream with HTTP/2) busy with one request, so
    /// by Little's law the mean latency is requests in flight ÷ throughput: the check that the
    /// figure covers each request's whole time in the system (a load generator whose clock
    /// starts late reports less).
    fn littles_law(&self) -> Option<String> {
        if !matches!(self.load, LoadMode::Closed) || self.requests_per_sec <= 0.0 {
            return None;
        }
        let in_flight =
            f64::from(self.connections) * f64::from(self.streams_per_connection.unwrap_or(1));
        let expected_ns = in_flight / self.requests_per_sec * 1e9;
        Some(format!(
            "Little's law: {in_flight:.0} in flight ÷ {} req/s = {}; measured mean {}.",
            format_si(self.requests_per_sec),
            format_ns(expected_ns),
            format_ns(self.latency.mean_ns)
        ))
    }
}

/// `part` as a share of `whole` responses: `100%` only when it is all of them, one decimal
/// below 10% (`0.4%`), never `0%` for a part that is there.
fn share(part: u64, whole: u64) -> String {
    if whole == 0 || part >= whole {
        return "100%".into();
    }
    let pct = part as f64 * 100.0 / whole as f64;
    if pct < 10.0 {
        format!("{:.1}%", pct.max(0.1))
    } else {
        format!("{:.0}%", pct.min(99.0))
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_say_all_only_for_all() {
        assert_eq!(share(1200, 1200), "100%");
        assert_eq!(share(1199, 1200), "99%");
        assert_eq!(share(600, 1200), "50%");
        assert_eq!(share(5, 1200), "0.4%");
        assert_eq!(share(1, 1_000_000), "0.1%");
    }
}

//! `latscope rr`: one size → its spectrum; `--sizes` → latency against size with the stall.

use latscope_core::model::rr::{LoadMode, RrReport, RrSizeResult, SockOpts};
use latscope_core::units::{format_bytes, format_ns, format_si, of};

use super::{error_list, histogram_block, interrupted, latency_block, summary_table};
use crate::error::ReportError;
use crate::html::{facts, figure, para};
use crate::plot::sweep::sweep;

pub(crate) fn body(r: &RrReport) -> Result<String, ReportError> {
    let mut out = interrupted(r.interrupted);
    out += &facts(&setup(r));
    match r.results.as_slice() {
        [one] => out += &single(one)?,
        many => out += &sizes(r, many)?,
    }
    let errors: Vec<String> = r.results.iter().flat_map(|s| s.errors.clone()).collect();
    out += &error_list("Errors", &errors);
    Ok(out)
}

impl crate::page::Page for RrReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        match self.results.as_slice() {
            [one] => Some(("round trip", one.rtt.clone())),
            _ => None,
        }
    }

    fn not_comparable(&self) -> &'static str {
        "a --sizes sweep has one per size: compare single-size runs"
    }
}

fn setup(r: &RrReport) -> Vec<(&'static str, String)> {
    let load = match &r.load {
        LoadMode::Closed => "closed loop".to_string(),
        LoadMode::Open { rate_per_sec } => format!("open loop, {}/s", format_si(*rate_per_sec)),
    };
    vec![
        ("target", r.target.clone()),
        ("transport", r.transport.name().to_string()),
        ("peer", r.peer.clone()),
        ("connections", r.connections.to_string()),
        ("load", load),
        ("client options", opts(&r.client)),
        (
            "server writes",
            format!("{:?}", r.server.write_mode).to_lowercase(),
        ),
        ("server options", opts(&r.server.sockopts)),
    ]
}

fn opts(o: &SockOpts) -> String {
    let mut v = vec![if o.nodelay { "TCP_NODELAY" } else { "Nagle on" }];
    if o.quickack {
        v.push("TCP_QUICKACK");
    }
    if o.cork {
        v.push("TCP_CORK");
    }
    v.join(", ")
}

fn single(s: &RrSizeResult) -> Result<String, ReportError> {
    let mut out = facts(&[
        (
            "request / response",
            format!(
                "{} / {}",
                format_bytes(f64::from(s.request_bytes)),
                format_bytes(f64::from(s.response_bytes))
            ),
        ),
        ("transactions", format_si(s.transactions as f64)),
        ("rate", format!("{}/s", format_si(s.transactions_per_sec))),
        ("RTT p50", format_ns(s.rtt.p50_ns as f64)),
        ("RTT p99", format_ns(s.rtt.p99_ns as f64)),
        (
            "one-way p50 (RTT/2)",
            // Half a TCP timer's stall is no one-way latency.
            if latscope_core::timer::TcpTimer::classify(s.rtt.p50_ns).is_none() {
                format_ns(s.one_way_p50_ns as f64)
            } else {
                "- (the median is a TCP timer's stall)".into()
            },
        ),
        ("lost / timeouts", format!("{} / {}", s.lost, s.timeouts)),
    ]);
    let mut rows = vec![("round trip".to_string(), &s.rtt)];
    if let Some(i) = &s.rtt_from_intended {
        rows.push(("from intended send time".to_string(), i));
    }
    out += &latency_block(&rows)?;
    out += &histogram_block(&[
        ("round trip".to_string(), s.rtt_bins.as_ref()),
        (
            "from intended send time".to_string(),
            s.rtt_from_intended_bins.as_ref(),
        ),
    ])?;
    Ok(out)
}

fn sizes(r: &RrReport, many: &[RrSizeResult]) -> Result<String, ReportError> {
    let mut caption = "Round-trip latency per message size. It should rise gently with size; a \
        shaded band marks sizes whose latency jumped far above the rest."
        .to_string();
    let mut out = String::new();
    if let Some(j) = &r.size_jump {
        caption += &format!(
            " Here: +{} per request at the shaded sizes.",
            format_ns(j.excess_ns as f64)
        );
        out += &para(
            "warn",
            &format!(
                "Stall at {} (p50 {} against {} elsewhere): {}",
                of(j.sizes.len() as u64, many.len() as u64, "size"),
                format_ns(j.jumped_p50_ns as f64),
                format_ns(j.baseline_p50_ns as f64),
                j.likely_cause
            ),
        );
    } else {
        caption += " No size jumped here.";
    }
    out.insert_str(
        0,
        &figure("sweep", &sweep(many, r.size_jump.as_ref())?, &caption),
    );
    let rows: Vec<(String, &latscope_core::Summary)> = many
        .iter()
        .map(|s| {
            (
                format!(
                    "{} / {}",
                    format_bytes(f64::from(s.request_bytes)),
                    format_bytes(f64::from(s.response_bytes))
                ),
                &s.rtt,
            )
        })
        .collect();
    out += &summary_table(&rows);
    Ok(out)
}

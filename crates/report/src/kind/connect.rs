//! `latscope connect`: handshake latency (and `--crr` transactions).

use latscope_core::model::connect::{ConnectMode, ConnectReport};
use latscope_core::units::{format_ns, format_si};

use super::{error_list, histogram_block, interrupted, latency_block};
use crate::error::ReportError;
use crate::html::facts;

pub(crate) fn body(r: &ConnectReport) -> Result<String, ReportError> {
    let mode = match r.mode {
        ConnectMode::Connect => "connect + close",
        ConnectMode::Crr => "connect + request + response + close (CRR)",
    };
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        ("target", r.target.clone()),
        ("mode", mode.to_string()),
        ("parallel", r.parallel.to_string()),
        ("attempts", format_si(r.attempts as f64)),
        ("succeeded", format_si(r.succeeded as f64)),
        (
            "refused / timed out / other",
            format!("{} / {} / {}", r.refused, r.timed_out, r.other_errors),
        ),
        ("rate", format!("{}/s", format_si(r.rate_per_sec))),
        ("connect p50", format_ns(r.connect.p50_ns as f64)),
    ]);
    let mut rows = vec![("connect()".to_string(), &r.connect)];
    if let Some(t) = &r.transaction {
        rows.push(("whole transaction".to_string(), t));
    }
    out += &latency_block(&rows)?;
    out += &histogram_block(&[
        ("connect()".to_string(), r.connect_bins.as_ref()),
        ("whole transaction".to_string(), r.transaction_bins.as_ref()),
    ])?;
    out += &error_list("Error samples", &r.error_samples);
    Ok(out)
}

impl crate::page::Page for ConnectReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        match &self.transaction {
            Some(t) => Some(("transaction", t.clone())),
            None => Some(("connect()", self.connect.clone())),
        }
    }
}

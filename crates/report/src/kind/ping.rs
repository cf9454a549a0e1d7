//! `latscope ping`: the RTT spectrum and, from the per-reply records, the RTT histogram.

use latscope_core::model::ping::PingReport;
use latscope_core::units::format_ns;

use super::{interrupted, latency_block};
use crate::error::ReportError;
use crate::html::{facts, figure};
use crate::plot::hist::{from_bins, histograms};
use latscope_core::LogBins;

pub(crate) fn body(r: &PingReport) -> Result<String, ReportError> {
    let port = r.port.map(|p| format!(":{p}")).unwrap_or_default();
    let mut out = interrupted(r.interrupted);
    out += &facts(&[
        ("target", format!("{} ({}{port})", r.target, r.address)),
        ("probe", r.mode.name().to_string()),
        ("timestamps", r.timestamps.clone()),
        ("sent / received", format!("{} / {}", r.sent, r.received)),
        ("loss", format!("{:.1}%", r.loss_percent)),
        ("RTT p50", format_ns(r.rtt.p50_ns as f64)),
        ("port", r.port_state.map_or("-", |s| s.name()).to_string()),
    ]);
    out += &latency_block(&[("RTT".to_string(), &r.rtt)])?;
    if !r.replies.is_empty() {
        let bins = LogBins::from_samples(r.replies.iter().map(|p| p.rtt_ns));
        let svg = histograms(&[(format!("{} replies", r.replies.len()), from_bins(&bins))])?;
        out += &figure(
            "histogram",
            &svg,
            "How many replies took how long (10 bins per decade): one narrow peak is a quiet \
             path; a second peak or a long right tail is queueing or a slow responder.",
        );
    }
    Ok(out)
}

impl crate::page::Page for PingReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        Some(("RTT", self.rtt.clone()))
    }
}

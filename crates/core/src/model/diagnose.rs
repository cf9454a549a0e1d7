//! `latscope diagnose`: the measurements it ran, the findings, and the latency budget.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use crate::summary::Summary;

/// One step of the investigation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// e.g. "path", "single request", "concurrent requests", "quick-ack experiment".
    pub name: String,
    /// "ran", "skipped" or "failed".
    pub status: String,
    /// What was measured, or why it was skipped.
    pub detail: String,
}

/// Which side a finding blames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Client,
    Server,
    Both,
    Network,
    Kernel,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Both => "client and server",
            Side::Network => "network path",
            Side::Kernel => "kernel",
        }
    }
}

/// A named rule that fired.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// Stable rule name, e.g. "nagle_delayed_ack".
    pub rule: String,
    pub title: String,
    /// Latency per request this finding explains, ns.
    pub explains_ns: u64,
    /// 0.0 ..= 1.0.
    pub confidence: f64,
    pub side: Side,
    /// The figures behind it.
    pub evidence: Vec<String>,
    pub fix: String,
}

/// Where a request's time goes (medians, ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Connection set-up (SYN → SYN-ACK): the network path without the application.
    pub path_rtt_ns: Option<u64>,
    /// One request at a time.
    pub single_request_ns: Option<u64>,
    /// Under concurrency.
    pub concurrent_request_ns: Option<u64>,
    pub concurrency: u32,
    /// single − path: time spent in the hosts (kernel + application).
    pub host_ns: Option<u64>,
}

/// The report of `latscope diagnose`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DiagnoseReport {
    pub meta: Meta,
    pub target: String,
    /// "latscope" (a latscope server), "http" or "tcp" (any TCP service: path only).
    pub target_kind: String,
    pub steps: Vec<Step>,
    pub budget: Budget,
    /// Distributions measured, by step name.
    pub distributions: Vec<(String, Summary)>,
    /// Ranked by the latency they explain.
    pub findings: Vec<Finding>,
    /// One sentence: the answer.
    pub verdict: String,
    pub interrupted: bool,
}

//! `latscope demo`: a healthy and a Nagle-stalled server side by side, each diagnosed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use super::diagnose::{DiagnoseReport, RuleId};
use super::rr::ServerBehaviour;

/// One of the demo's servers and its diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoServer {
    /// "healthy" or "slow".
    pub name: String,
    /// Where the server listened ("addr:port").
    pub address: String,
    /// How the server was configured to behave.
    pub behaviour: ServerBehaviour,
    /// latscope diagnose's report on it.
    pub diagnosis: DiagnoseReport,
}

/// What the two diagnoses say together, computed from them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoVerdict {
    /// Path RTT medians within a factor of 2 (or 100 µs) of each other.
    pub same_path: bool,
    /// slow request p50 − healthy request p50, ns.
    pub excess_ns: u64,
    /// A stall was observed (excess ≥ 1 ms and ≥ 10× the healthy p50).
    pub stalled: bool,
    /// The slow server's top finding (rule name), if any.
    pub slow_cause: Option<RuleId>,
    /// The side that finding blames.
    pub side_to_fix: Option<String>,
    /// The healthy server has no finding.
    pub healthy_is_clean: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
/// The report of `latscope demo`: two servers, their diagnoses, and what they say together.
pub struct DemoReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The healthy and the slow server.
    pub servers: Vec<DemoServer>,
    /// The comparison of the two diagnoses; absent when Ctrl-C came before both servers were
    /// measured.
    pub verdict: Option<DemoVerdict>,
    /// True when Ctrl-C ended the demo.
    pub interrupted: bool,
}

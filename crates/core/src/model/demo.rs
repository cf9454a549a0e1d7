//! `latscope demo`: a healthy and a Nagle-stalled server side by side.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use super::rr::{RrSizeResult, ServerBehaviour};
use crate::summary::Summary;

/// One of the demo's servers and what was measured against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoServer {
    /// "healthy" or "slow".
    pub name: String,
    pub address: String,
    pub behaviour: ServerBehaviour,
    /// TCP connect latency: the path without the application.
    pub path_rtt: Summary,
    /// Request/response latency through the application.
    pub request: RrSizeResult,
}

/// What the measurements say, computed from them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoVerdict {
    /// Path RTT p50s within a factor of 2 (or 100 µs) of each other.
    pub same_path: bool,
    /// slow request p50 − healthy request p50, ns.
    pub excess_ns: u64,
    /// A stall was observed (excess ≥ 1 ms and ≥ 10× the healthy p50).
    pub stalled: bool,
    /// The TCP mechanism whose timer matches the excess.
    pub likely_cause: String,
    /// With TCP_QUICKACK on the client the stall disappears (p50 < 1/10 of the slow p50).
    pub quickack_fixes_it: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DemoReport {
    pub meta: Meta,
    pub servers: Vec<DemoServer>,
    /// The slow server again, with TCP_QUICKACK re-armed by the client after every read.
    pub slow_with_client_quickack: RrSizeResult,
    pub verdict: DemoVerdict,
    pub interrupted: bool,
}

//! `latscope connect`: connection set-up latency (LMbench lat_connect, netperf TCP_CRR).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use crate::bins::LogBins;
use crate::summary::Summary;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
/// What one connection attempt measures.
pub enum ConnectMode {
    /// connect() then close(): the three-way handshake as the client sees it.
    Connect,
    /// connect + request + response + close against latscope serve (netperf TCP_CRR).
    Crr,
}

/// The report of `latscope connect`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConnectReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The target as given.
    pub target: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// Handshake only, or a whole connect-request-response-close transaction.
    pub mode: ConnectMode,
    /// Attempts in flight at once.
    pub parallel: u32,
    /// Attempts made.
    pub attempts: u64,
    /// Attempts that completed.
    pub succeeded: u64,
    /// Connection refused (RST to the SYN).
    pub refused: u64,
    /// No answer within the timeout (SYN dropped or filtered).
    pub timed_out: u64,
    /// Other failures, by message.
    pub other_errors: u64,
    /// Wall-clock time of the run, ns.
    pub elapsed_ns: u64,
    /// Successful operations per second.
    pub rate_per_sec: f64,
    /// connect() latency: SYN sent → connection established.
    pub connect: Summary,
    /// `--crr` only: connect → request → response → close, per transaction.
    pub transaction: Option<Summary>,
    /// connect() latency as a histogram in log bins (what `latscope report` draws; absent in
    /// results of older versions).
    #[serde(default)]
    pub connect_bins: Option<LogBins>,
    /// `--crr` only: the transactions in log bins.
    #[serde(default)]
    pub transaction_bins: Option<LogBins>,
    /// A sample of distinct error messages.
    pub error_samples: Vec<String>,
    /// True when Ctrl-C ended the run.
    pub interrupted: bool,
}

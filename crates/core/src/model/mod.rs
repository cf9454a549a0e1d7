//! One serde struct per command's result: the JSON contract (`--json`), and what the human
//! renderings are made from. Schemas are derived with `schemars` and committed under `schema/`.

pub mod address;
pub mod analyze;
pub mod capture;
pub mod connect;
pub mod demo;
pub mod diagnose;
pub mod evidence;
pub mod hoststack;
pub mod http;
pub mod names;
pub mod ping;
pub mod round_trips;
pub mod rr;
pub mod sockets;
pub mod stack;
pub mod stream;
pub mod transfer;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::summary::Summary;

/// Schema version of every report; bump on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Who produced a report, and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Meta {
    /// Always "latscope".
    pub tool: String,
    /// latscope's version (Cargo package version).
    pub version: String,
    /// Version of the JSON model; bumped on incompatible changes.
    pub schema_version: u32,
    /// The subcommand: "rr", "connect", ...
    pub command: String,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
}

impl Meta {
    /// Meta for `command` started at `started_unix_ms`.
    pub fn new(command: &str, version: &str, started_unix_ms: u64) -> Self {
        Meta {
            tool: "latscope".into(),
            version: version.into(),
            schema_version: SCHEMA_VERSION,
            command: command.into(),
            started_unix_ms,
        }
    }
}

/// One `--json-lines` record for a measurement interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalEvent {
    /// Always "interval".
    pub event: String,
    /// The subcommand that measured.
    pub command: String,
    /// What the interval belongs to, e.g. "64B/64B" for a size of a sweep.
    pub label: String,
    /// Interval start and end, ns since the measurement began.
    pub start_ns: u64,
    /// Interval end, ns since the measurement began.
    pub end_ns: u64,
    /// Operations completed in the interval and their rate.
    pub count: u64,
    /// Operations per second in the interval.
    pub rate_per_sec: f64,
    /// Operations that failed in the interval.
    pub errors: u64,
    /// Latency of the operations completed in the interval.
    pub latency: Summary,
}

/// The last `--json-lines` record: the whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SummaryEvent<R> {
    /// Always "summary".
    pub event: String,
    /// The command's full report.
    pub report: R,
}

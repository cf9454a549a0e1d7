//! The summary every latency measurement reports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::format_ns;

/// Count, extremes, moments and percentiles of a latency distribution, all in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Smallest sample, ns.
    pub min_ns: u64,
    /// Arithmetic mean, ns.
    pub mean_ns: f64,
    /// Standard deviation, ns.
    pub stddev_ns: f64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 75th percentile, ns.
    pub p75_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// 99.99th percentile, ns.
    pub p9999_ns: u64,
    /// Largest sample, ns.
    pub max_ns: u64,
}

impl Summary {
    /// Column headers matching [`Summary::cells`].
    pub const HEADERS: [&'static str; 9] = [
        "min", "mean", "stddev", "p50", "p90", "p99", "p99.9", "p99.99", "max",
    ];

    /// The figures formatted for a human table, in [`Summary::HEADERS`] order.
    pub fn cells(&self) -> Vec<String> {
        if self.count == 0 {
            return vec!["-".to_string(); Self::HEADERS.len()];
        }
        vec![
            format_ns(self.min_ns as f64),
            format_ns(self.mean_ns),
            format_ns(self.stddev_ns),
            format_ns(self.p50_ns as f64),
            format_ns(self.p90_ns as f64),
            format_ns(self.p99_ns as f64),
            format_ns(self.p999_ns as f64),
            format_ns(self.p9999_ns as f64),
            format_ns(self.max_ns as f64),
        ]
    }
}

//! Latency histograms small enough to travel in a JSON result: counts in log-spaced bins, ten
//! per factor of ten (each bin 26% wider than the one before), only the span that holds data.
//! A microsecond mode and a 40 ms timer mode show side by side, as in Brendan Gregg's latency
//! histograms, in a few dozen numbers instead of HdrHistogram's thousands of buckets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::LatencyHistogram;

/// Bins per factor of ten.
pub const PER_DECADE: u32 = 10;

/// Counts in log-spaced bins: bin `k` holds values in
/// `[10^((first + k) / per_decade), 10^((first + k + 1) / per_decade))` ns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LogBins {
    /// Bins per factor of ten.
    pub per_decade: u32,
    /// Index of the first bin (10^(first / per_decade) ns is its lower edge).
    pub first: i32,
    /// Samples per bin, from `first` on.
    pub counts: Vec<u64>,
}

impl LogBins {
    fn index(ns: u64, per_decade: u32) -> i32 {
        ((ns.max(1) as f64).log10() * f64::from(per_decade)).floor() as i32
    }

    /// Bin raw samples (ns).
    pub fn from_samples(samples: impl IntoIterator<Item = u64>) -> LogBins {
        Self::from_counts(samples.into_iter().map(|v| (v, 1)))
    }

    /// Bin (value ns, count) pairs.
    pub fn from_counts(pairs: impl IntoIterator<Item = (u64, u64)>) -> LogBins {
        let mut out = LogBins {
            per_decade: PER_DECADE,
            first: 0,
            counts: Vec::new(),
        };
        for (v, n) in pairs {
            let k = Self::index(v, PER_DECADE);
            if out.counts.is_empty() {
                out.first = k;
                out.counts.push(0);
            } else if k < out.first {
                let grow = (out.first - k) as usize;
                out.counts.splice(0..0, std::iter::repeat_n(0, grow));
                out.first = k;
            }
            let i = (k - out.first) as usize;
            if i >= out.counts.len() {
                out.counts.resize(i + 1, 0);
            }
            out.counts[i] += n;
        }
        out
    }

    /// Lower and upper edge of bin `k` (from 0), ns.
    pub fn edges(&self, k: usize) -> (f64, f64) {
        let d = f64::from(self.per_decade.max(1));
        let at = |i: f64| 10f64.powf((f64::from(self.first) + i) / d);
        (at(k as f64), at(k as f64 + 1.0))
    }

    /// Samples in all bins.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl LatencyHistogram {
    /// The recorded samples in [`LogBins`] (each HDR bucket counted at its lowest value; the
    /// HDR bucket is 0.1% wide, a log bin 26%).
    pub fn log_bins(&self) -> LogBins {
        LogBins::from_counts(self.recorded())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_bins() {
        let b = LogBins::from_samples([1_000, 1_000, 10_000, 100_000, 5]);
        assert_eq!(b.total(), 5);
        assert_eq!(b.first, 6); // 5 ns: log10(5) = 0.7
        let k = (40 - b.first) as usize; // 10 µs = 10^4 → index 40
        assert_eq!(b.counts[k], 1);
        let (lo, hi) = b.edges(k);
        assert!((lo - 10_000.0).abs() < 1e-6 && hi > 12_000.0 && hi < 13_000.0);
    }

    #[test]
    fn histogram_and_samples_agree() {
        let mut h = LatencyHistogram::new();
        let vals = [20_000, 21_000, 25_000, 40_000_000, 40_100_000];
        for v in vals {
            h.record(v);
        }
        assert_eq!(h.log_bins(), LogBins::from_samples(vals));
    }
}

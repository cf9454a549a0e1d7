//! Base-2 logarithmic histograms, the format kernel-side (eBPF) latency data arrives in.
//!
//! Bucket `k` (k ≥ 1) holds values in `(2^(k-1), 2^k]` nanoseconds; bucket 0 holds 0 and 1 ns.
//! This matches the layout netstacklat and bcc's `log2l` use, so BPF maps can be read straight
//! into a [`Log2Histogram`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::format_ns;

/// Number of buckets: enough for any u64 value.
pub const BUCKETS: usize = 65;

/// A log2 histogram of nanosecond values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Log2Histogram {
    /// `buckets[k]` counts values in `(2^(k-1), 2^k]` ns.
    #[schemars(length(equal = 65))]
    pub buckets: Vec<u64>,
    /// Sum of all values in ns (for the average), as the BPF side accumulates it.
    pub sum_ns: u64,
}

impl Default for Log2Histogram {
    fn default() -> Self {
        Log2Histogram {
            buckets: vec![0; BUCKETS],
            sum_ns: 0,
        }
    }
}

/// The bucket a value falls in: the smallest `k` with `value ≤ 2^k`.
#[inline]
pub fn bucket_of(value: u64) -> usize {
    if value <= 1 {
        0
    } else {
        (64 - (value - 1).leading_zeros()) as usize
    }
}

/// Upper bound (inclusive) of bucket `k` in ns, saturating at `u64::MAX`.
pub fn bucket_upper(k: usize) -> u64 {
    if k >= 64 { u64::MAX } else { 1u64 << k }
}

/// Lower bound (exclusive) of bucket `k` in ns.
pub fn bucket_lower(k: usize) -> u64 {
    if k == 0 { 0 } else { bucket_upper(k - 1) }
}

/// A bucket's label in SI time units, e.g. `(32.8us, 65.5us]` for k = 16; bucket 0 also
/// holds 0, so it is `[0, 1ns]`.
pub fn bucket_label(k: usize) -> String {
    if k == 0 {
        return format!("[0, {}]", format_ns(bucket_upper(0) as f64));
    }
    format!(
        "({}, {}]",
        format_ns(bucket_lower(k) as f64),
        format_ns(bucket_upper(k) as f64)
    )
}

/// A figure estimated from a log2 histogram (mean, quantile) in SI time units. Inside the
/// first bucket (0 or 1 ns) linear interpolation would print "0.5ns", a precision the buckets do
/// not have: such a figure is "≤ 1ns".
pub fn format_estimate_ns(ns: f64) -> String {
    if ns <= bucket_upper(0) as f64 {
        format!("≤ {}", format_ns(bucket_upper(0) as f64))
    } else {
        format_ns(ns)
    }
}

impl Log2Histogram {
    /// Whether every sample is in the first bucket (0 or 1 ns): the value was taken where the
    /// timestamp it is measured from was.
    pub fn all_in_first_bucket(&self) -> bool {
        self.occupied_range() == Some((0, 0))
    }

    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Build from raw bucket counts (e.g. a BPF map summed over CPUs). Extra buckets are folded
    /// into the last one.
    pub fn from_buckets(counts: &[u64], sum_ns: u64) -> Self {
        let mut h = Log2Histogram::new();
        for (k, &c) in counts.iter().enumerate() {
            h.buckets[k.min(BUCKETS - 1)] += c;
        }
        h.sum_ns = sum_ns;
        h
    }

    #[inline]
    /// Count one sample of `ns`.
    pub fn record(&mut self, ns: u64) {
        self.buckets[bucket_of(ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Add `other`'s counts and sum to this one.
    pub fn merge(&mut self, other: &Log2Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// Counts accumulated since `earlier` (for per-interval output from cumulative BPF maps).
    pub fn delta_since(&self, earlier: &Log2Histogram) -> Log2Histogram {
        Log2Histogram {
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// Samples counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Mean of the samples, ns (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            0.0
        } else {
            self.sum_ns as f64 / n as f64
        }
    }

    /// Estimate quantile `q` by linear interpolation inside the bucket that holds it. The true
    /// value lies in that bucket, so the estimate is off by at most a factor of two.
    pub fn quantile_ns(&self, q: f64) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let rank = (q.clamp(0.0, 1.0) * n as f64).max(1.0);
        let mut cum = 0u64;
        for (k, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (cum + c) as f64 >= rank {
                let lo = bucket_lower(k) as f64;
                let hi = bucket_upper(k) as f64;
                let frac = (rank - cum as f64) / c as f64;
                return lo + (hi - lo) * frac;
            }
            cum += c;
        }
        bucket_upper(BUCKETS - 1) as f64
    }

    /// Non-empty bucket range (first, last), or `None` when empty.
    pub fn occupied_range(&self) -> Option<(usize, usize)> {
        let first = self.buckets.iter().position(|&c| c > 0)?;
        let last = self.buckets.iter().rposition(|&c| c > 0)?;
        Some((first, last))
    }

    /// Share of samples above `ns` (bucket-granular: buckets whose lower bound ≥ `ns`).
    pub fn share_at_or_above(&self, ns: u64) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let above: u64 = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(k, _)| bucket_lower(*k) >= ns)
            .map(|(_, c)| c)
            .sum();
        above as f64 / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_boundaries() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 2);
        assert_eq!(bucket_of(4), 2);
        assert_eq!(bucket_of(5), 3);
        assert_eq!(bucket_of(65_536), 16);
        assert_eq!(bucket_of(65_537), 17);
        assert_eq!(bucket_of(u64::MAX), 64);
    }

    #[test]
    fn labels_in_si_units() {
        assert_eq!(bucket_label(16), "(32.8us, 65.5us]");
        assert_eq!(bucket_label(25), "(16.8ms, 33.6ms]");
        assert_eq!(bucket_label(1), "(1ns, 2ns]");
        assert_eq!(bucket_label(0), "[0, 1ns]");
    }

    #[test]
    fn figures_inside_the_first_bucket_are_not_given_sub_ns_precision() {
        let mut h = Log2Histogram::new();
        for _ in 0..100 {
            h.record(0);
        }
        assert!(h.all_in_first_bucket());
        assert_eq!(format_estimate_ns(h.quantile_ns(0.5)), "≤ 1ns");
        assert_eq!(format_estimate_ns(h.mean_ns()), "≤ 1ns");
        h.record(3000);
        assert!(!h.all_in_first_bucket());
        assert_eq!(format_estimate_ns(h.quantile_ns(1.0)), format_ns(4096.0));
    }

    #[test]
    fn quantile_falls_in_right_bucket() {
        let mut h = Log2Histogram::new();
        for _ in 0..90 {
            h.record(1_000); // bucket 10: (512, 1024]
        }
        for _ in 0..10 {
            h.record(50_000_000); // bucket 26: (33.6ms, 67.1ms]
        }
        let p50 = h.quantile_ns(0.5);
        assert!((512.0..=1024.0).contains(&p50), "{p50}");
        let p99 = h.quantile_ns(0.99);
        assert!((33_554_432.0..=67_108_864.0).contains(&p99), "{p99}");
        assert_eq!(h.count(), 100);
        assert!((h.share_at_or_above(33_554_432) - 0.10).abs() < 1e-9);
    }

    #[test]
    fn delta_and_merge() {
        let mut a = Log2Histogram::new();
        a.record(10);
        let before = a.clone();
        a.record(10);
        a.record(1000);
        let d = a.delta_since(&before);
        assert_eq!(d.count(), 2);
        let mut m = before.clone();
        m.merge(&d);
        assert_eq!(m, a);
    }
}

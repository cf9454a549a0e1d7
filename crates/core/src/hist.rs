//! HDR latency histograms: fixed memory, mergeable by addition, 3 significant digits over
//! 1 ns ..= 1 hour.
//!
//! The bucketing is Gil Tene's HdrHistogram (via the `hdrhistogram` crate). Next to it we keep
//! the exact count, minimum, maximum, sum and sum of squares so that min/max/mean/stddev are
//! exact rather than bucket-rounded; percentiles carry the histogram's relative error
//! (≤ 1/2^10 ≈ 0.1% for 3 significant digits).

use hdrhistogram::Histogram;

use crate::summary::Summary;

/// Lowest trackable value: 1 ns.
pub const LOWEST_NS: u64 = 1;
/// Highest trackable value: 1 hour in nanoseconds. Larger samples are clamped and counted in
/// [`LatencyHistogram::clamped`].
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept by every bucket.
pub const SIGFIG: u8 = 3;

/// A latency histogram in nanoseconds. One per thread; merge with [`LatencyHistogram::merge`].
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    count: u64,
    min_ns: u64,
    max_ns: u64,
    sum_ns: u128,
    /// Sum of squares in f64: u128 would overflow for 1 h samples × billions of samples.
    sum_sq: f64,
    clamped: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// A new, empty histogram (about 270 KiB, allocated once).
    pub fn new() -> Self {
        // The bounds are constants that hdrhistogram accepts (1 ≤ low, high ≥ 2·low, sigfig ≤ 5),
        // so construction cannot fail.
        #[allow(clippy::expect_used)]
        let hist = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
            .expect("constant histogram bounds are valid");
        LatencyHistogram {
            hist,
            count: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            sum_sq: 0.0,
            clamped: 0,
        }
    }

    /// Record one sample. Values outside 1 ns ..= 1 h are clamped into range; nothing allocates.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let v = if ns < LOWEST_NS {
            LOWEST_NS
        } else if ns > HIGHEST_NS {
            self.clamped += 1;
            HIGHEST_NS
        } else {
            ns
        };
        // In range by construction, so `record` cannot fail; `saturating_record` avoids a branch
        // on the error anyway.
        self.hist.saturating_record(v);
        self.count += 1;
        self.min_ns = self.min_ns.min(v);
        self.max_ns = self.max_ns.max(v);
        self.sum_ns += u128::from(v);
        let f = v as f64;
        self.sum_sq += f * f;
    }

    /// Add every sample of `other` into `self`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both histograms have identical bounds, so `add` cannot fail (it only fails when the
        // other histogram's range exceeds ours and auto-resize is off).
        let _ = self.hist.add(&other.hist);
        self.count += other.count;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
        self.sum_sq += other.sum_sq;
        self.clamped += other.clamped;
    }

    /// Forget every sample (keeps the allocation).
    pub fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
        self.sum_ns = 0;
        self.sum_sq = 0.0;
        self.clamped = 0;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Samples above one hour that were clamped to one hour.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Smallest sample, ns (0 when empty).
    pub fn min_ns(&self) -> u64 {
        if self.count == 0 { 0 } else { self.min_ns }
    }

    /// Largest sample, ns (0 when empty).
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Exact arithmetic mean.
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// Exact population standard deviation.
    pub fn stddev_ns(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let n = self.count as f64;
        let mean = self.sum_ns as f64 / n;
        (self.sum_sq / n - mean * mean).max(0.0).sqrt()
    }

    /// The value at quantile `q` (0.0 ..= 1.0): the smallest recorded value such that at least
    /// `q` of the samples are ≤ it, to the histogram's precision, never beyond the exact min/max.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let v = self.hist.value_at_quantile(q.clamp(0.0, 1.0));
        v.clamp(self.min_ns, self.max_ns)
    }

    /// Summary statistics of everything recorded.
    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            min_ns: self.min_ns(),
            mean_ns: self.mean_ns(),
            stddev_ns: self.stddev_ns(),
            p50_ns: self.quantile_ns(0.50),
            p75_ns: self.quantile_ns(0.75),
            p90_ns: self.quantile_ns(0.90),
            p99_ns: self.quantile_ns(0.99),
            p999_ns: self.quantile_ns(0.999),
            p9999_ns: self.quantile_ns(0.9999),
            max_ns: self.max_ns,
        }
    }

    /// Each non-empty HDR bucket as (its lowest value ns, samples), ascending.
    pub fn recorded(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.hist.iter_recorded().map(|it| {
            (
                self.hist.lowest_equivalent(it.value_iterated_to()),
                it.count_at_value(),
            )
        })
    }

    /// The same samples in base-2 buckets (the kernel-side layout of [`crate::Log2Histogram`]),
    /// for views that draw a coarse histogram. Each HDR bucket's count goes to the log2 bucket of
    /// its highest equivalent value, so a sample never moves more than one HDR bucket (0.1%).
    pub fn to_log2(&self) -> crate::Log2Histogram {
        let mut out = crate::Log2Histogram::new();
        for it in self.hist.iter_recorded() {
            let v = self.hist.highest_equivalent(it.value_iterated_to());
            out.buckets[crate::log2::bucket_of(v)] += it.count_at_value();
        }
        out.sum_ns = u64::try_from(self.sum_ns).unwrap_or(u64::MAX);
        out
    }

    /// Iterate the percentile distribution in HdrHistogram's classic "percentile distribution"
    /// layout: (value_ns, quantile, cumulative count), `ticks` steps per halving distance.
    pub fn percentile_distribution(&self, ticks: u32) -> Vec<(u64, f64, u64)> {
        self.hist
            .iter_quantiles(ticks)
            .map(|it| {
                (
                    it.value_iterated_to(),
                    it.quantile_iterated_to(),
                    it.count_since_last_iteration(),
                )
            })
            .scan(0u64, |cum, (v, q, c)| {
                *cum += c;
                Some((v, q, *cum))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn to_log2_keeps_every_sample_in_its_power_of_two() {
        let mut h = LatencyHistogram::new();
        for v in [3u64, 4, 1000, 1024, 1025, 5_000_000] {
            h.record(v);
        }
        let l = h.to_log2();
        assert_eq!(l.count(), 6);
        assert_eq!(l.buckets[2], 2); // (2, 4]
        assert_eq!(l.buckets[10], 2); // (512, 1024]
        assert_eq!(l.buckets[11], 1); // (1024, 2048]
        assert_eq!(l.buckets[23], 1); // (4.19 ms, 8.39 ms]
    }

    fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn assert_within_precision(got: u64, want: u64) {
        // 3 significant digits: HdrHistogram guarantees relative error ≤ 10^-3 of the value.
        let tol = (want as f64 * 1e-3).max(1.0);
        assert!(
            (got as f64 - want as f64).abs() <= tol,
            "got {got}, exact {want}, tolerance {tol}"
        );
    }

    #[test]
    fn percentiles_match_exact_sort() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for &(lo, hi) in &[(1u64, 1_000u64), (1_000, 50_000_000), (1, HIGHEST_NS)] {
            let mut h = LatencyHistogram::new();
            let mut xs: Vec<u64> = (0..200_000)
                .map(|_| {
                    // log-uniform, like real latency data spanning decades
                    let e = rng.random_range((lo as f64).ln()..(hi as f64).ln());
                    e.exp() as u64
                })
                .collect();
            for &x in &xs {
                h.record(x);
            }
            xs.sort_unstable();
            for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
                assert_within_precision(h.quantile_ns(q), exact_quantile(&xs, q));
            }
            assert_eq!(h.min_ns(), xs[0]);
            assert_eq!(h.max_ns(), *xs.last().unwrap_or(&0));
            let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
            assert!((h.mean_ns() - mean).abs() / mean < 1e-9);
        }
    }

    #[test]
    fn merge_is_addition() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        let mut all = LatencyHistogram::new();
        for i in 1..10_000u64 {
            let v = i * 997 % 100_000 + 1;
            if i % 3 == 0 {
                a.record(v)
            } else {
                b.record(v)
            }
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        assert_eq!(a.summary(), all.summary());
    }

    #[test]
    fn clamps_out_of_range() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(HIGHEST_NS * 10);
        assert_eq!(h.count(), 2);
        assert_eq!(h.clamped(), 1);
        assert_eq!(h.min_ns(), 1);
        assert_eq!(h.max_ns(), HIGHEST_NS);
    }

    #[test]
    fn empty_summary_is_zero() {
        let h = LatencyHistogram::new();
        let s = h.summary();
        assert_eq!(s.count, 0);
        assert_eq!(s.p99_ns, 0);
        assert_eq!(s.min_ns, 0);
    }

    #[test]
    fn reset_forgets() {
        let mut h = LatencyHistogram::new();
        h.record(5);
        h.reset();
        assert!(h.is_empty());
        h.record(7);
        assert_eq!(h.summary().p50_ns, 7);
    }
}

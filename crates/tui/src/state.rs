//! What the live view shows: the figures of a run so far, fed one interval at a time.
//!
//! Engines already merge their per-thread figures once per interval off the hot path (http's
//! interval merger, rr's coordinator, stream's control channel, stack's map reads); the live
//! view only consumes those intervals, so it adds nothing per request.

use std::collections::VecDeque;
use std::time::Duration;

use latscope_core::{LatencyHistogram, Log2Histogram, Summary};

/// How many intervals the sparklines keep (10 minutes of one-second intervals).
pub const HISTORY: usize = 600;

/// When the run ends, for the progress gauge and the time left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// After this much measured time.
    Duration(Duration),
    /// After this many operations (requests, transactions).
    Count(u64),
    /// When the user stops it.
    Open,
}

/// What the rate counts, for its label and formatting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateUnit {
    /// Operations per second, named (`req/s`, `trans/s`, `pkt/s`).
    PerSec(&'static str),
    /// Bits per second (throughput).
    Bits,
}

/// One interval of the run, as an engine reports it.
#[derive(Clone, Copy, Debug)]
pub struct Tick<'a> {
    /// End of the interval, ns since the measured start.
    pub end_ns: u64,
    /// Operations completed in the interval (0 for pure throughput).
    pub count: u64,
    /// Failures in the interval.
    pub errors: u64,
    /// The interval's rate, in the view's [`RateUnit`].
    pub rate: f64,
    /// The interval's latency figures, when the engine measures latency.
    pub latency: Option<&'a Summary>,
    /// The interval's latency histogram, when the engine has one: merged into the percentiles
    /// so far and the histogram.
    pub hist: Option<&'a LatencyHistogram>,
}

/// The live view's model: everything it draws, and nothing about the terminal.
#[derive(Clone, Debug)]
pub struct LiveState {
    /// First line: the command and its target.
    pub title: String,
    /// When the run ends.
    pub goal: Goal,
    /// What the rate counts.
    pub unit: RateUnit,
    /// A short word on what the run is doing (`connecting…`, `warming up…`, `stopping…`).
    pub status: String,
    /// Operations so far.
    pub total: u64,
    /// Failures so far.
    pub errors: u64,
    /// End of the last interval, ns since the measured start.
    pub measured_ns: u64,
    /// The rate of each interval, oldest first (at most [`HISTORY`]).
    pub rates: VecDeque<f64>,
    /// p99 of each interval, ns, oldest first (at most [`HISTORY`]).
    pub p99s: VecDeque<u64>,
    /// The last interval's latency.
    pub last: Option<Summary>,
    /// Every latency sample so far (when the engine hands over histograms).
    pub so_far: Option<Box<LatencyHistogram>>,
    /// `so_far` in base-2 buckets, recomputed per interval for the histogram.
    pub buckets: Option<Log2Histogram>,
    /// A detail table (per direction, per hook): header, then rows.
    pub table: Option<(Vec<String>, Vec<Vec<String>>)>,
}

impl LiveState {
    /// An empty view for a run of `title` that ends at `goal`.
    pub fn new(title: impl Into<String>, goal: Goal, unit: RateUnit) -> LiveState {
        LiveState {
            title: title.into(),
            goal,
            unit,
            status: String::new(),
            total: 0,
            errors: 0,
            measured_ns: 0,
            rates: VecDeque::new(),
            p99s: VecDeque::new(),
            last: None,
            so_far: None,
            buckets: None,
            table: None,
        }
    }

    /// Take one interval in.
    pub fn tick(&mut self, t: Tick<'_>) {
        self.total += t.count;
        self.errors += t.errors;
        self.measured_ns = self.measured_ns.max(t.end_ns);
        push_capped(&mut self.rates, t.rate);
        if let Some(s) = t.latency {
            push_capped(&mut self.p99s, s.p99_ns);
            if s.count > 0 {
                self.last = Some(s.clone());
            }
        }
        if let Some(h) = t.hist {
            let all = self
                .so_far
                .get_or_insert_with(|| Box::new(LatencyHistogram::new()));
            all.merge(h);
            self.buckets = Some(all.to_log2());
        }
        if !self.status.is_empty() && self.status != STOPPING {
            self.status.clear();
        }
    }

    /// Percentiles of every sample so far, when the engine hands over histograms.
    pub fn summary_so_far(&self) -> Option<Summary> {
        self.so_far
            .as_ref()
            .filter(|h| !h.is_empty())
            .map(|h| h.summary())
    }

    /// The share of the run done (0..=1), when its end is known.
    pub fn done_share(&self, elapsed: Duration) -> Option<f64> {
        match self.goal {
            Goal::Duration(d) if !d.is_zero() => {
                Some((elapsed.as_secs_f64() / d.as_secs_f64()).clamp(0.0, 1.0))
            }
            Goal::Count(n) if n > 0 => Some((self.total as f64 / n as f64).clamp(0.0, 1.0)),
            _ => None,
        }
    }

    /// Time left, when its end is known: from the clock for a duration, from the current rate
    /// for a count.
    pub fn time_left(&self, elapsed: Duration) -> Option<Duration> {
        match self.goal {
            Goal::Duration(d) => Some(d.saturating_sub(elapsed)),
            Goal::Count(n) => {
                let rate = self.rates.back().copied().filter(|r| *r > 0.0)?;
                Some(Duration::from_secs_f64(
                    n.saturating_sub(self.total) as f64 / rate,
                ))
            }
            Goal::Open => None,
        }
    }
}

/// The status shown once the user asked to stop.
pub const STOPPING: &str = "stopping… (partial results follow)";

fn push_capped<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &v in values {
            h.record(v);
        }
        h
    }

    #[test]
    fn ticks_accumulate_counts_and_percentiles_so_far() {
        let mut s = LiveState::new("t", Goal::Count(1000), RateUnit::PerSec("req/s"));
        let a = hist(&[1_000; 90]);
        let b = hist(&[1_000_000; 10]);
        for (i, h) in [&a, &b].into_iter().enumerate() {
            let sum = h.summary();
            s.tick(Tick {
                end_ns: (i as u64 + 1) * 1_000_000_000,
                count: h.count(),
                errors: i as u64,
                rate: h.count() as f64,
                latency: Some(&sum),
                hist: Some(h),
            });
        }
        assert_eq!((s.total, s.errors), (100, 1));
        let all = s.summary_so_far().unwrap();
        assert_eq!(all.count, 100);
        assert!(all.p50_ns < 2_000 && all.p99_ns >= 999_000, "{all:?}");
        assert_eq!(s.buckets.as_ref().unwrap().count(), 100);
        assert_eq!(s.done_share(Duration::ZERO), Some(0.1));
        // 900 left at the last interval's 10/s.
        assert_eq!(s.time_left(Duration::ZERO), Some(Duration::from_secs(90)));
        assert_eq!(s.p99s.len(), 2);
    }

    #[test]
    fn history_is_bounded() {
        let mut s = LiveState::new("t", Goal::Open, RateUnit::Bits);
        for i in 0..(HISTORY as u64 + 50) {
            s.tick(Tick {
                end_ns: i,
                count: 0,
                errors: 0,
                rate: i as f64,
                latency: None,
                hist: None,
            });
        }
        assert_eq!(s.rates.len(), HISTORY);
        assert_eq!(s.rates.front().copied(), Some(50.0));
        assert_eq!(s.time_left(Duration::from_secs(5)), None);
    }
}

//! When each side of a stream test reports an interval: every `--interval` from the test's
//! start, and once more when the test ends, so that the intervals cover the whole run on both
//! ends (issue 41: the last interval of a 2 s run was missing in 3 runs of 4, on the side whose
//! tick came after the end of the test).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::flow::{FlowCounters, IntervalState};

/// The interval clock of one side of a stream test.
#[derive(Debug)]
pub struct IntervalClock {
    start: Instant,
    every: Duration,
    /// The senders' deadline (duration tests).
    deadline: Option<Instant>,
    next: Instant,
    last_tick: Instant,
    ended: bool,
    /// What [`crate::flow::intervals`] keeps between two intervals.
    pub state: IntervalState,
}

impl IntervalClock {
    /// A clock ticking every `every` from `start`, for a test whose senders stop at `deadline`.
    pub fn new(start: Instant, every: Duration, deadline: Option<Instant>) -> IntervalClock {
        IntervalClock {
            start,
            every,
            deadline,
            next: start + every,
            last_tick: start,
            ended: false,
            state: IntervalState::default(),
        }
    }

    /// The interval (from, to) to report at `now`, when one is due. No tick falls in the last
    /// tenth of an interval before the deadline, nor after it: the run's last interval is
    /// [`IntervalClock::end`]'s, which runs to the end of the transfer, instead of a sliver of
    /// microseconds on a line of its own.
    pub fn due(&mut self, now: Instant) -> Option<(Instant, Instant)> {
        if self.ended || now < self.next {
            return None;
        }
        if self
            .deadline
            .is_some_and(|d| self.next + self.every / 10 > d)
        {
            return None;
        }
        let from = self.last_tick;
        self.last_tick = now;
        self.next += self.every;
        Some((from, now))
    }

    /// The run's last interval, once, when the test ends at `now`: from the last tick to the end
    /// of the transfer — its deadline or the last byte moved (data in flight when the deadline
    /// passed), whichever is later, and never past `now`: the wait for the peer's Stop or a UDP
    /// receiver's grace period is no part of it. None when nothing is left to report: no byte
    /// moved since the last tick, and less than a tenth of an interval of the run was left.
    pub fn end(&mut self, now: Instant, counters: &[FlowCounters]) -> Option<(Instant, Instant)> {
        if std::mem::replace(&mut self.ended, true) {
            return None;
        }
        let last_ns = counters
            .iter()
            .map(|c| c.last_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let last_byte = self.start + Duration::from_nanos(last_ns);
        let end = self
            .deadline
            .map_or(last_byte, |d| d.max(last_byte))
            .min(now);
        let from = self.last_tick;
        if end <= from || (last_byte <= from && end - from < self.every / 10) {
            return None;
        }
        Some((from, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(last_ns: &[u64]) -> Vec<FlowCounters> {
        last_ns
            .iter()
            .map(|&n| {
                let c = FlowCounters::default();
                c.last_ns.store(n, Ordering::Relaxed);
                c
            })
            .collect()
    }

    const S: Duration = Duration::from_secs(1);

    /// A 2 s run with 1 s intervals: one tick at 1 s; none at 2 s, where the run ends — the
    /// end's interval runs from 1 s to the last byte (2.003 s, in flight at the deadline), even
    /// when the Stop came 250 ms later, and the clock reports nothing after it.
    #[test]
    fn the_intervals_cover_the_run_to_its_last_byte() {
        let t0 = Instant::now();
        let mut c = IntervalClock::new(t0, S, Some(t0 + 2 * S));
        assert_eq!(c.due(t0 + S / 2), None);
        assert_eq!(c.due(t0 + S), Some((t0, t0 + S)));
        assert_eq!(c.due(t0 + S + S / 2), None);
        assert_eq!(c.due(t0 + 2 * S), None, "the last interval is the end's");
        assert_eq!(c.due(t0 + 3 * S), None);
        let fl = counters(&[2_003_000_000, 1_999_000_000]);
        let end = t0 + Duration::from_millis(2003);
        assert_eq!(
            c.end(t0 + Duration::from_millis(2250), &fl),
            Some((t0 + S, end))
        );
        assert_eq!(c.end(t0 + 3 * S, &fl), None, "once");
        assert_eq!(c.due(t0 + 4 * S), None);
    }

    /// Ctrl-C at 1.5 s of a 10 s run: the half interval up to then is reported; a test that
    /// ends just after a tick, having moved nothing since, has nothing left to report.
    #[test]
    fn an_interrupted_run_reports_its_partial_interval_and_a_sliver_is_none() {
        let t0 = Instant::now();
        let mut c = IntervalClock::new(t0, S, Some(t0 + 10 * S));
        assert!(c.due(t0 + S).is_some());
        let fl = counters(&[1_500_000_000]);
        let now = t0 + S + S / 2;
        assert_eq!(c.end(now, &fl), Some((t0 + S, now)));
        // A byte count (no deadline) that ended 1 ms after the 3 s tick, its last byte before it.
        let mut c = IntervalClock::new(t0, S, None);
        for k in 1..=3 {
            assert!(c.due(t0 + k * S).is_some());
        }
        let fl = counters(&[2_999_000_000]);
        assert_eq!(c.end(t0 + 3 * S + Duration::from_millis(1), &fl), None);
        // The same with bytes after the tick: they are reported.
        let mut c = IntervalClock::new(t0, S, None);
        assert!(c.due(t0 + S).is_some());
        let fl = counters(&[1_000_400_000]);
        let now = t0 + S + Duration::from_millis(1);
        assert_eq!(
            c.end(now, &fl),
            Some((t0 + S, t0 + S + Duration::from_micros(400)))
        );
    }
}

//! Precise waiting for open-loop schedules.
//!
//! `thread::sleep` alone overshoots by the timer slack (50 µs by default on Linux) plus wake-up
//! latency, which would make a 10 k/s schedule drift. We shrink this thread's timer slack to 1 ns
//! (PR_SET_TIMERSLACK), sleep until shortly before the deadline, and spin the rest.

use std::time::{Duration, Instant};

/// Spin (rather than sleep) for the last stretch before a deadline.
const SPIN: Duration = Duration::from_micros(80);

/// Make this thread's sleeps as precise as the kernel allows. Call once per worker thread.
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Wait until `deadline`: sleep most of the way, spin the last [`SPIN`].
pub fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Longest single sleep of [`sleep_until_or_stop`]: how late a stop flag is noticed.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// Like [`sleep_until`], but wakes at least every 50 ms to look at `stop`. Returns false if
/// `stop` was set before the deadline: a long pacing gap (a rate of 1 bit/s) never holds a
/// thread past its test.
pub fn sleep_until_or_stop(deadline: Instant, stop: &std::sync::atomic::AtomicBool) -> bool {
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left <= STOP_CHECK {
            sleep_until(deadline);
            return true;
        }
        std::thread::sleep(STOP_CHECK);
    }
}

/// Sleep until `deadline` without spinning (the kernel's timer wakes us: a paced sender that
/// batches its datagrams needs no better than the timer slack), waking at least every 50 ms to
/// look at `stop`. Returns false if `stop` was set before the deadline.
pub fn wait_until_or_stop(deadline: Instant, stop: &std::sync::atomic::AtomicBool) -> bool {
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(STOP_CHECK));
    }
}

/// The intended send times of one connection in an open-loop run: connection `index` of `n`
/// sends every `n / rate` seconds, offset so the connections interleave evenly.
#[derive(Clone, Debug)]
pub struct Schedule {
    start: Instant,
    period_ns: f64,
    offset_ns: f64,
    next: u64,
}

impl Schedule {
    /// Connection `index` of `n` sharing `total_rate` sends per second, from `start`.
    pub fn new(start: Instant, total_rate: f64, index: u32, n: u32) -> Schedule {
        let period_ns = 1e9 * f64::from(n) / total_rate;
        Schedule {
            start,
            period_ns,
            offset_ns: period_ns * f64::from(index) / f64::from(n),
            next: 0,
        }
    }

    /// The next intended send time.
    pub fn next_due(&mut self) -> Instant {
        let at = self.offset_ns + self.period_ns * self.next as f64;
        self.next += 1;
        self.start + Duration::from_nanos(at as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_interleaves_connections() {
        let t0 = Instant::now();
        // 1000/s over 4 connections: each every 4 ms, offsets 0,1,2,3 ms.
        let mut all: Vec<Duration> = (0..4)
            .flat_map(|i| {
                let mut s = Schedule::new(t0, 1000.0, i, 4);
                (0..3).map(move |_| s.next_due() - t0).collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        let want: Vec<Duration> = (0..12).map(Duration::from_millis).collect();
        assert_eq!(all, want);
    }

    #[test]
    fn sleep_until_is_precise() {
        precise_timers();
        let mut over: Vec<Duration> = (0..21)
            .map(|_| {
                let due = Instant::now() + Duration::from_micros(300);
                sleep_until(due);
                Instant::now() - due
            })
            .collect();
        over.sort();
        // Spinning the last 80 µs keeps the typical overshoot tiny; the median ignores the few
        // sleeps a loaded machine preempts (one took 3.8 ms while CI ran beside a build), and
        // 1 ms still fails a sleep that rounds up to the next millisecond or tick.
        let median = over[over.len() / 2];
        assert!(median < Duration::from_millis(1), "overshoots {over:?}");
    }
}

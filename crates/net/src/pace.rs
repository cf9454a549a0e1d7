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

/// A byte-rate limit shared by several threads (all the flows of one source address): the
/// generic cell rate algorithm (ITU-T I.371's GCRA, the "virtual scheduling" form), i.e. a token
/// bucket kept as one time — the theoretical arrival time `tat` of the next byte. Bytes go out
/// at `rate` on average with bursts of at most `burst` worth of them.
#[derive(Debug)]
pub struct RateLimit {
    ns_per_byte: f64,
    burst: Duration,
    tat: std::sync::Mutex<Option<Instant>>,
}

impl RateLimit {
    /// `bytes_per_s` on average (> 0), bursts of `burst` (e.g. 50 ms) at most.
    pub fn new(bytes_per_s: f64, burst: Duration) -> RateLimit {
        RateLimit {
            ns_per_byte: 1e9 / bytes_per_s.max(1.0),
            burst,
            tat: std::sync::Mutex::new(None),
        }
    }

    /// The average rate, bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        1e9 / self.ns_per_byte
    }

    /// Account `bytes`; when they may go (now, or later if the rate is used up).
    fn debit(&self, bytes: u64, now: Instant) -> Instant {
        let Ok(mut tat) = self.tat.lock() else {
            return now;
        };
        let base = tat.map_or(now, |t| t.max(now));
        // Saturate at a day: a tiny rate cannot overflow Instant (every wait is bounded by the
        // caller's deadline anyway).
        let cost = (bytes as f64 * self.ns_per_byte).min(86_400e9);
        let next = base + Duration::from_nanos(cost as u64);
        *tat = Some(next);
        next.checked_sub(self.burst).unwrap_or(now).max(now)
    }

    /// Shaping: account `bytes` and wait until they may go. False, without waiting it out,
    /// when `stop` is set or `deadline` comes first.
    pub fn wait(
        &self,
        bytes: u64,
        deadline: Option<Instant>,
        stop: &std::sync::atomic::AtomicBool,
    ) -> bool {
        let now = Instant::now();
        let at = self.debit(bytes, now);
        if at <= now {
            return true;
        }
        if deadline.is_some_and(|d| at >= d) {
            // Sleep up to the deadline, so a caller that loops is not a busy loop.
            if let Some(d) = deadline {
                sleep_until_or_stop(d, stop);
            }
            return false;
        }
        sleep_until_or_stop(at, stop)
    }

    /// Policing (what cannot be slowed down, e.g. datagrams already received): whether `bytes`
    /// fit in the rate now; they are accounted only if they do.
    pub fn admit(&self, bytes: u64) -> bool {
        let now = Instant::now();
        let Ok(mut tat) = self.tat.lock() else {
            return true;
        };
        let base = tat.map_or(now, |t| t.max(now));
        let next =
            base + Duration::from_nanos((bytes as f64 * self.ns_per_byte).min(86_400e9) as u64);
        if next.checked_sub(self.burst).is_some_and(|t| t > now) {
            return false;
        }
        *tat = Some(next);
        true
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

    #[test]
    fn rate_limit_shapes_to_its_rate() {
        use std::sync::atomic::AtomicBool;
        // 1 MB/s, 10 ms bursts: 300 KB take ~0.29 s (the first 10 KB go at once).
        let r = RateLimit::new(1e6, Duration::from_millis(10));
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        for _ in 0..30 {
            assert!(r.wait(10_000, None, &stop));
        }
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(270) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // A deadline before the bytes may go: false, at the deadline.
        let d = Instant::now() + Duration::from_millis(30);
        assert!(!r.wait(1_000_000, Some(d), &stop));
        assert!(Instant::now() >= d);
    }

    #[test]
    fn rate_limit_polices() {
        let r = RateLimit::new(1e6, Duration::from_millis(10));
        // The burst (10 ms of 1 MB/s = 10 KB) fits, the next datagram does not.
        assert!(r.admit(5_000));
        assert!(r.admit(5_000));
        assert!(!r.admit(5_000));
        std::thread::sleep(Duration::from_millis(20));
        assert!(r.admit(5_000));
    }
}

//! Clocks, named after the clock they read. Use [`monotonic_ns`] to measure intervals and for
//! deadlines (timerfd uses the same clock); use [`realtime_ns`] only to compare with kernel
//! software timestamps (SO_TIMESTAMPING), which are CLOCK_REALTIME.

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clocks used here always exist on Linux,
    // so the call cannot fail (and `ts` stays zero if it somehow did).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds (since an arbitrary point, typically boot): never jumps.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), ns: what it spent running, not
/// waiting (a blocking read, a poll, a run queue).
#[inline]
pub fn thread_cpu_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch: the clock of kernel software
/// timestamps. It can jump (NTP, the administrator): do not measure intervals with it.
#[inline]
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_and_differ() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        // Realtime is nanoseconds since 1970: far beyond any uptime.
        assert!(realtime_ns() > 1_500_000_000_000_000_000);
        assert!(monotonic_ns() < realtime_ns());
    }
}

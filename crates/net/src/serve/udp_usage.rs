//! The shared UDP thread's CPU time, as that thread publishes it and stream tests read it (the
//! cost of receiving a UDP stream): below `udp`, which publishes, and `stream`, which reads.

use std::thread;
use std::time::{Duration, Instant};

use super::Shared;
use crate::flow::ThreadUsage;

/// The shared UDP thread's CPU time, published by that thread: every `udp::UDP_USAGE_EVERY`
/// while busy, and whenever its receive times out (idle), so a snapshot is exact once traffic
/// stops.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UdpUsage {
    /// Datagrams the thread had received when `usage` was taken.
    datagrams: u64,
    usage: ThreadUsage,
    at: Option<Instant>,
}

/// The UDP thread's receive timeout: how often it checks for shutdown, and how soon after the
/// traffic stops it publishes its final CPU time.
pub(super) const UDP_IDLE: Duration = Duration::from_millis(20);

/// Publish the UDP thread's CPU time after `datagrams` datagrams; returns when.
pub(super) fn publish(sh: &Shared, datagrams: u64) -> Instant {
    let now = Instant::now();
    if let Ok(mut u) = sh.udp_usage.lock() {
        *u = UdpUsage {
            datagrams,
            usage: ThreadUsage::now(),
            at: Some(now),
        };
    }
    now
}

/// A snapshot of the UDP thread's published usage.
pub(super) fn usage_now(sh: &Shared) -> UdpUsage {
    sh.udp_usage.lock().map(|u| *u).unwrap_or_default()
}

/// The UDP thread's CPU time since `before`, once it has published after the end of the test,
/// if at most 1% of the datagrams it received meanwhile (and no more than 16) were not this
/// test's `ours`.
pub(super) fn udp_thread_usage(sh: &Shared, before: UdpUsage, ours: u64) -> Option<ThreadUsage> {
    let ended = Instant::now();
    let deadline = ended + 5 * UDP_IDLE;
    let after = loop {
        let u = sh.udp_usage.lock().map(|u| *u).ok()?;
        if u.at.is_some_and(|t| t > ended) {
            break u;
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(UDP_IDLE / 4);
    };
    let others = (after.datagrams - before.datagrams).saturating_sub(ours);
    (others <= 16.max(ours / 100)).then(|| after.usage.since(before.usage))
}

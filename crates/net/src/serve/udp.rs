//! The server's one UDP socket, read by one thread: probe echoes, UDP rr datagrams and the
//! datagrams of UDP stream tests. It also publishes its own CPU time, which stream tests use
//! to report the cost of receiving.

use std::net::UdpSocket;
use std::thread;
use std::time::{Duration, Instant};

use super::{Shared, stream_join, udp_rr};
use crate::flow::ThreadUsage;
use crate::proto::{StreamDatagram, UDP_ECHO_MAGIC, UDP_ECHO_REPLY, UDP_ECHO_REQUEST, UdpHeader};

/// The shared UDP thread's CPU time, published by that thread: every [`UDP_USAGE_EVERY`] while
/// busy, and whenever its receive times out (idle), so a snapshot is exact once traffic stops.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UdpUsage {
    /// Datagrams the thread had received when `usage` was taken.
    datagrams: u64,
    usage: ThreadUsage,
    at: Option<Instant>,
}

/// How often the busy UDP thread publishes its CPU time (getrusage is a system call: not per
/// datagram).
const UDP_USAGE_EVERY: Duration = Duration::from_millis(10);

/// The UDP thread's receive timeout: how often it checks for shutdown, and how soon after the
/// traffic stops it publishes its final CPU time.
pub(super) const UDP_IDLE: Duration = Duration::from_millis(20);

/// Read datagrams until the server stops, and dispatch each by its magic.
pub(super) fn udp_loop(udp: &UdpSocket, sh: &Shared) {
    let mut buf = vec![0u8; 65_536];
    let mut resp = vec![0u8; 65_536];
    let mut datagrams = 0u64;
    let mut published = Instant::now();
    let publish = |datagrams: u64| {
        let now = Instant::now();
        if let Ok(mut u) = sh.udp_usage.lock() {
            *u = UdpUsage {
                datagrams,
                usage: ThreadUsage::now(),
                at: Some(now),
            };
        }
        now
    };
    while !sh.stopping() {
        let (n, from) = match udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => {
                published = publish(datagrams);
                continue;
            }
        };
        datagrams += 1;
        if datagrams % 64 == 0 && published.elapsed() >= UDP_USAGE_EVERY {
            published = publish(datagrams);
        }
        let pkt = &mut buf[..n];
        if n >= 5 && &pkt[..4] == UDP_ECHO_MAGIC && pkt[4] == UDP_ECHO_REQUEST {
            pkt[4] = UDP_ECHO_REPLY;
            let _ = udp.send_to(pkt, from);
        } else if let Some(d) = StreamDatagram::parse(pkt) {
            stream_join::on_datagram(udp, sh, d, n, from);
        } else if let Some(h) = UdpHeader::parse(pkt) {
            udp_rr::on_datagram(udp, sh, h, from, &mut resp);
        }
    }
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

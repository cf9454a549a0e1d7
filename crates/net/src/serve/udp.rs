//! The server's one UDP socket, read by one thread: probe echoes, UDP rr datagrams and the
//! datagrams of UDP stream tests. It also publishes its own CPU time, which stream tests use
//! to report the cost of receiving.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use super::{Shared, stream_join, udp_rr};
use crate::flow::ThreadUsage;
use crate::proto::{StreamDatagram, UDP_ECHO_MAGIC, UDP_ECHO_REPLY, UDP_ECHO_REQUEST, UdpHeader};
use crate::udp_batch::BatchReceiver;

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

/// Messages one receive call of the shared socket takes (each up to 64 KiB: a GRO message
/// or a single datagram).
const RECV_SLOTS: usize = 16;

/// Read datagrams until the server stops — everything queued in one call, coalesced by the
/// kernel where it can (GRO) — and dispatch each by its magic.
pub(super) fn udp_loop(udp: &UdpSocket, sh: &Shared) {
    let fd = udp.as_raw_fd();
    let mut batch = BatchReceiver::new(fd, RECV_SLOTS);
    let mut resp = vec![0u8; 65_536];
    // A writable copy of each probe or rr datagram (the echo is answered in place).
    let mut scratch = vec![0u8; 65_536];
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
        let got = match batch.recv(fd) {
            Ok(n) => n,
            Err(_) => {
                published = publish(datagrams);
                continue;
            }
        };
        let received_at = Instant::now();
        let before = datagrams;
        let mut timed = true;
        for i in 0..got {
            let Some(m) = batch.message(i) else { continue };
            let Some(from) = m.from else { continue };
            datagrams += m.datagrams().len() as u64;
            if StreamDatagram::parse(m.data).is_some() {
                stream_join::on_datagrams(udp, sh, m.datagrams(), from, received_at, &mut timed);
                continue;
            }
            for pkt in m.datagrams() {
                let copy = &mut scratch[..pkt.len()];
                copy.copy_from_slice(pkt);
                reply(udp, sh, copy, from, &mut resp);
            }
        }
        if datagrams / 64 != before / 64 && published.elapsed() >= UDP_USAGE_EVERY {
            published = publish(datagrams);
        }
    }
}

/// Answer a probe echo or a UDP rr datagram.
fn reply(udp: &UdpSocket, sh: &Shared, pkt: &mut [u8], from: SocketAddr, resp: &mut [u8]) {
    if sh.cfg.evidence_only {
        return;
    }
    if pkt.len() >= 5 && &pkt[..4] == UDP_ECHO_MAGIC && pkt[4] == UDP_ECHO_REQUEST {
        pkt[4] = UDP_ECHO_REPLY;
        let _ = udp.send_to(pkt, from);
    } else if let Some(h) = UdpHeader::parse(pkt) {
        udp_rr::on_datagram(udp, sh, h, from, resp);
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

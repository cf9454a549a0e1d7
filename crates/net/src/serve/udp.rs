//! The server's one UDP socket, read by one thread: probe echoes, UDP rr datagrams and the
//! datagrams of UDP stream tests. It also publishes its own CPU time (`udp_usage`), which
//! stream tests use to report the cost of receiving.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::udp_usage::publish;
use super::{Shared, stream_join, udp_rr};
use crate::proto::{StreamDatagram, UDP_ECHO_MAGIC, UDP_ECHO_REPLY, UDP_ECHO_REQUEST, UdpHeader};
use crate::udp_batch::BatchReceiver;

/// How often the busy UDP thread publishes its CPU time (getrusage is a system call: not per
/// datagram).
const UDP_USAGE_EVERY: Duration = Duration::from_millis(10);

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
    while !sh.stopping() {
        let got = match batch.recv(fd) {
            Ok(n) => n,
            Err(_) => {
                published = publish(sh, datagrams);
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
            published = publish(sh, datagrams);
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

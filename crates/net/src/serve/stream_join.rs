//! How data reaches a running stream test: TCP/unix data connections that join it by token
//! ([`join`]), and UDP stream datagrams on the shared socket ([`on_datagram`]).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use latscope_core::model::rr::{ServerBehaviour, Transport};

use super::admission::Held;
use super::stream::StreamTest;
use super::test::refuse;
use super::{POLL, Shared, canonical};
use crate::flow::{self, DataSock};
use crate::proto::{self, RefusalCode, Reply, Start, StreamDatagram, UDP_JOIN_SEQ};
use crate::sock::{Conn, set_int};

/// A data connection joins its stream test. Err: what to log.
pub(super) fn join(sh: &Shared, mut conn: Conn, slot: Held, start: &Start) -> Result<(), String> {
    let Some(j) = start.join else {
        let _ = refuse(
            &mut conn,
            RefusalCode::Invalid,
            "a join without its test token",
        );
        return Err("join without token".into());
    };
    let test = sh
        .streams
        .read()
        .ok()
        .and_then(|m| m.get(&j.token).cloned());
    let Some(test) = test else {
        let _ = refuse(
            &mut conn,
            RefusalCode::Invalid,
            "no such stream test (it ended or never started)",
        );
        return Err("join for an unknown test".into());
    };
    if j.index >= test.spec.flows() || test.spec.transport == Transport::Udp {
        let _ = refuse(&mut conn, RefusalCode::Invalid, "no such flow in this test");
        return Err("join for an unknown flow".into());
    }
    let v6 = matches!(&conn, Conn::Tcp(s) if s.local_addr().map(|a| a.is_ipv6()).unwrap_or(false));
    if let Err(e) = flow::apply_options(conn.as_raw_fd(), &test.spec.options, conn.is_tcp(), v6) {
        let _ = refuse(
            &mut conn,
            RefusalCode::Invalid,
            &format!("socket options: {e}"),
        );
        return Err(format!("socket options: {e}"));
    }
    if let Some(l) = &test.limit
        && conn.is_tcp()
    {
        // A rate-limited source gets a receive window the size of 100 ms of its rate: what
        // the kernel accepts ahead of the server's paced reads stays small.
        let window = (l.bytes_per_s() / 10.0).clamp(64.0 * 1024.0, 4.0 * 1024.0 * 1024.0) as i32;
        let _ = set_int(conn.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, window);
    }
    let accepted = Reply::Accepted {
        test_id: 0,
        server: ServerBehaviour::default(),
        udp_token: None,
    };
    if proto::write_frame(&mut conn, &accepted).is_err() {
        return Err("data connection closed while joining".into());
    }
    let sock = match conn {
        Conn::Tcp(s) => DataSock::Tcp(s),
        Conn::Unix(s) => DataSock::Unix(s),
    };
    sock.set_read_timeout(None);
    // A client that stops reading must not hold the sending thread past the test: writes time
    // out and the sender checks its stop flag and deadline.
    sock.set_write_timeout(Some(POLL));
    if let Ok(mut v) = test.socks.lock() {
        if v[j.index as usize].is_some() {
            return Err("flow joined twice".into());
        }
        v[j.index as usize] = Some(Arc::new(sock));
    }
    // The data connection keeps its connection slot for as long as the test holds it.
    if let Ok(mut h) = test.held.lock() {
        h.push(slot);
    }
    test.joined.notify_all();
    Ok(())
}

/// Stream-test datagrams arrived on the shared UDP socket from `from`: one, or several that the
/// kernel coalesced (GRO) or one receive call took together. The test is looked up once per
/// message. `timed` is true while the receive call's first datagram is still to be accounted:
/// that one alone has its own arrival time (`received_at`, see [`crate::flow::UdpRx`]).
pub(super) fn on_datagrams<'a>(
    udp: &UdpSocket,
    sh: &Shared,
    datagrams: impl Iterator<Item = &'a [u8]>,
    from: SocketAddr,
    received_at: Instant,
    timed: &mut bool,
) {
    let mut test: Option<Arc<StreamTest>> = None;
    for pkt in datagrams {
        let Some(d) = StreamDatagram::parse(pkt) else {
            continue;
        };
        if test.as_ref().is_none_or(|t| t.token != d.token) {
            test = sh
                .streams
                .read()
                .ok()
                .and_then(|m| m.get(&d.token).cloned());
        }
        let Some(t) = &test else { continue };
        on_datagram(udp, t, d, pkt.len(), from, received_at, timed);
    }
}

/// One stream-test datagram of test `t`.
fn on_datagram(
    udp: &UdpSocket,
    t: &StreamTest,
    d: StreamDatagram,
    len: usize,
    from: SocketAddr,
    received_at: Instant,
    timed: &mut bool,
) {
    if t.peer_ip.is_some_and(|ip| ip != canonical(from.ip())) || d.index >= t.spec.flows() {
        return;
    }
    let i = d.index as usize;
    if d.seq == UDP_JOIN_SEQ {
        if let Ok(mut v) = t.udp_peers.lock() {
            v[i] = Some(from);
        }
        t.joined.notify_all();
        // Echo: tells the client its flow is known (and opens stateful firewalls both ways).
        let mut buf = [0u8; proto::UDP_STREAM_HEADER_LEN];
        d.write(&mut buf);
        let _ = udp.send_to(&buf, from);
        return;
    }
    let Some(start) = t.start.get() else { return };
    if !t.spec.client_sends(d.index) {
        return;
    }
    // Beyond the source's rate the datagram is dropped (policed): it counts as lost.
    if t.udp_rx_shares[i]
        .as_ref()
        .is_some_and(|s| !s.admit(len as u64))
    {
        return;
    }
    let arrival = received_at.saturating_duration_since(*start).as_nanos() as u64;
    let c = &t.counters[i];
    let first = std::mem::take(timed);
    if let Ok(mut rx) = t.udp_rx[i].lock() {
        if first {
            rx.on_datagram(d.seq, len, d.send_ns, arrival);
        } else {
            rx.on_untimed(d.seq, len);
        }
    }
    // A receive call is counted once, with its first datagram; `datagrams` counts them all.
    if first {
        c.calls.fetch_add(1, Ordering::Relaxed);
    }
    c.datagrams.fetch_add(1, Ordering::Relaxed);
    c.bytes.fetch_add(len as u64, Ordering::Relaxed);
    c.last_ns.fetch_max(arrival, Ordering::Relaxed);
}

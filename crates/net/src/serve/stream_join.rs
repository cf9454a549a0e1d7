//! How data reaches a running stream test: TCP/unix data connections that join it by token
//! ([`join`]), and UDP stream datagrams on the shared socket ([`on_datagram`]).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use latscope_core::model::rr::{ServerBehaviour, Transport};

use super::admission::Held;
use super::control::refuse;
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

/// A stream-test datagram arrived on the shared UDP socket.
pub(super) fn on_datagram(
    udp: &UdpSocket,
    sh: &Shared,
    d: StreamDatagram,
    len: usize,
    from: SocketAddr,
) {
    let test = sh
        .streams
        .read()
        .ok()
        .and_then(|m| m.get(&d.token).cloned());
    let Some(t) = test else { return };
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
    let arrival = start.elapsed().as_nanos() as u64;
    if let Ok(mut rx) = t.udp_rx[i].lock() {
        rx.on_datagram(d.seq, len, d.send_ns, arrival);
    }
    let c = &t.counters[i];
    c.bytes.fetch_add(len as u64, Ordering::Relaxed);
    c.calls.fetch_add(1, Ordering::Relaxed);
    c.last_ns.store(arrival, Ordering::Relaxed);
}

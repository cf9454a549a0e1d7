//! Test kind `udp_rr`: request/response over the server's shared UDP socket. The control
//! connection is the test's lifetime; the UDP thread (`udp`) answers datagrams carrying the
//! test's token, from the host that opened it, while it lasts.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::test::{Ended, Test};
use super::{POLL, Shared, admission, canonical, rr::read_full};
use crate::fair::Share;
use crate::proto::UdpHeader;

/// A running UDP request/response test, as the UDP thread sees it.
pub(super) struct UdpTest {
    peer_ip: IpAddr,
    response_bytes: u32,
    drop_every: u32,
    requests: AtomicU64,
    deadline: Instant,
    /// The source's byte rate (`--per-source-rate`): transactions beyond it go unanswered.
    limit: Option<Share>,
    request_bytes: u32,
}

/// Run a UDP rr test: register its token, then wait for the client to close the control
/// connection (or the deadline).
pub(super) fn run(t: &mut Test) -> Ended {
    let Some(peer_ip) = t.peer_ip else {
        return Ended::new(0, "UDP test without a peer address");
    };
    let test = Arc::new(UdpTest {
        peer_ip: canonical(peer_ip),
        response_bytes: t.start.response_bytes,
        drop_every: t.behaviour.drop_every,
        requests: AtomicU64::new(0),
        deadline: t.deadline,
        limit: admission::source_rate(t.sh, Some(peer_ip)).map(|l| l.share()),
        request_bytes: t.start.request_bytes,
    });
    let token = t.token;
    if let Ok(mut m) = t.sh.udp_tests.write() {
        m.insert(token, test.clone());
    }
    let reason = if t.accept() {
        // The control connection is the test's lifetime: wait for the client to close it.
        let _ = t.conn.set_read_timeout(Some(POLL));
        let mut one = [0u8; 1];
        match read_full(t.conn, &mut one, t.sh, t.deadline, false) {
            Ok(_) => "client closed".to_string(),
            Err(e) => e,
        }
    } else {
        "the client left before the test".to_string()
    };
    if let Ok(mut m) = t.sh.udp_tests.write() {
        m.remove(&token);
    }
    Ended::new(test.requests.load(Ordering::Relaxed), reason)
}

/// A test datagram arrived on the shared UDP socket: answer it if it belongs to a live test,
/// from that test's host.
pub(super) fn on_datagram(
    udp: &UdpSocket,
    sh: &Shared,
    h: UdpHeader,
    from: SocketAddr,
    resp: &mut [u8],
) {
    let test = match sh.udp_tests.read() {
        Ok(m) => m.get(&h.token).cloned(),
        Err(_) => None,
    };
    let Some(t) = test else { return };
    // Only the host that opened the test may use its token, and only while it lasts.
    if canonical(from.ip()) != t.peer_ip || Instant::now() >= t.deadline {
        return;
    }
    let k = t.requests.fetch_add(1, Ordering::Relaxed) + 1;
    if t.drop_every > 0 && k % u64::from(t.drop_every) == 0 {
        return;
    }
    let len = t.response_bytes as usize;
    let bytes = u64::from(t.request_bytes) + len as u64;
    if t.limit.as_ref().is_some_and(|l| !l.admit(bytes)) {
        return;
    }
    h.write(&mut resp[..len]);
    let _ = udp.send_to(&resp[..len], from);
}

//! The control protocol on the server side: greeting, test request, refusal or acceptance, and
//! dispatch to the test kind's module.

use std::io::Write;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use latscope_sys::sockopt::set_nodelay;

use super::admission::{self, Held, Refusal, Resource};
use super::test::{Ended, Handshake, Test, refuse};
use super::{ServeEvent, Shared, evidence, rr, stream, stream_join, udp_rr};
use crate::auth::{self, AuthKey};
use crate::proto::{
    self, ClientHello, FrameError, RefusalCode, Reply, ServerHello, Start, TestKind,
};
use crate::sock::Conn;

/// The one place that maps a test kind to the module that runs it.
fn run_kind(t: &mut Test) -> Ended {
    match t.start.kind {
        TestKind::Rr | TestKind::Crr => rr::run(t),
        TestKind::UdpRr => udp_rr::run(t),
        TestKind::Stream => stream::run(t),
        // Joins and evidence requests are handled before a test slot is taken (a join belongs
        // to a running test; evidence has its own slots, see `evidence`).
        TestKind::StreamJoin | TestKind::Evidence => Ended::new(0, "not a test"),
    }
}

/// The server's greeting; `challenge`: this connection's authentication challenge.
fn hello(sh: &Shared, challenge: Option<&[u8]>) -> Vec<u8> {
    let hello = ServerHello {
        software: format!("latscope {}", env!("CARGO_PKG_VERSION")),
        limits: sh.cfg.limits.clone(),
        auth_required: sh.cfg.auth.is_some(),
        challenge: challenge.map(auth::to_hex),
    };
    let mut greeting = Vec::with_capacity(256);
    proto::encode_greeting(&hello, &mut greeting);
    greeting
}

/// Turn away a connection beyond `--max-connections` (or its source's share): greeting first,
/// so the client knows it reached a latscope server, then the refusal.
pub(super) fn refuse_connection(sh: &Shared, mut conn: Conn, peer: String, why: Refusal) {
    let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
    let mut out = hello(sh, None);
    proto::encode_frame(&refusal(sh, why.0, &why.1), &mut out);
    let _ = conn.write_all(&out);
    (sh.log)(ServeEvent::Refused {
        peer,
        reason: format!("connection: {}", why.1),
    });
}

/// A refusal frame; `busy` ones say how many tests run.
fn refusal(sh: &Shared, code: RefusalCode, message: &str) -> Reply {
    let running = sh
        .tests
        .load(Ordering::Relaxed)
        .min(sh.cfg.limits.max_tests);
    Reply::Refused {
        code,
        message: message.into(),
        running_tests: (code == RefusalCode::Busy).then_some(running),
    }
}

/// Handshake, admission and the test itself, on the connection's own thread.
pub(super) fn handle_conn(
    sh: &Arc<Shared>,
    mut conn: Conn,
    slot: Held,
    peer: String,
    peer_ip: Option<IpAddr>,
) {
    let cfg = &sh.cfg;
    let handshake_deadline = Instant::now() + cfg.handshake_timeout;
    let _ = conn.set_write_timeout(Some(cfg.handshake_timeout));
    if conn.is_tcp() {
        let _ = set_nodelay(conn.as_raw_fd(), true);
    }
    let challenge = match sh.cfg.auth {
        Some(_) => match auth::challenge() {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = conn.write_all(&hello(sh, None));
                let _ = refuse(
                    &mut conn,
                    RefusalCode::Busy,
                    "the server cannot draw a random challenge",
                );
                return (sh.log)(ServeEvent::Refused {
                    peer,
                    reason: format!("getrandom: {e}"),
                });
            }
        },
        None => None,
    };
    if conn
        .write_all(&hello(sh, challenge.as_ref().map(|c| &c[..])))
        .is_err()
    {
        return;
    }
    let log_refused = |reason: String| {
        (sh.log)(ServeEvent::Refused {
            peer: peer.clone(),
            reason,
        })
    };
    let mut hs = Handshake {
        conn: &mut conn,
        deadline: handshake_deadline,
    };
    let start = match read_request(&mut hs, sh.cfg.auth.as_ref(), challenge.as_ref()) {
        Ok(s) => s,
        Err(Some(msg)) => return log_refused(msg),
        Err(None) => return (sh.log)(ServeEvent::BareConnect { peer }),
    };
    if let Err((code, msg)) = admission::validate(&start, cfg, !conn.is_tcp()) {
        let _ = refuse(&mut conn, code, &msg);
        return log_refused(msg);
    }
    if start.kind == TestKind::Evidence {
        if let Err(msg) = evidence::serve(sh, conn, &start, &peer, peer_ip, handshake_deadline) {
            log_refused(msg);
        }
        drop(slot);
        return;
    }
    if start.kind == TestKind::StreamJoin {
        if let Err(msg) = stream_join::join(sh, conn, slot, &start) {
            log_refused(msg);
        }
        return;
    }
    let memory = admission::memory_needed(&start);
    let held = admission::take(sh, Resource::Test, peer_ip)
        .and_then(|t| Ok((t, admission::take(sh, Resource::Memory(memory), None)?)));
    let _held = match held {
        Ok(h) => h,
        Err((code, msg)) => {
            let _ = proto::write_frame(&mut conn, &refusal(sh, code, &msg));
            return log_refused(msg);
        }
    };
    let began = Instant::now();
    let mut test = Test {
        sh,
        conn: &mut conn,
        start: &start,
        peer: &peer,
        peer_ip,
        behaviour: cfg.forced.clone().unwrap_or_else(|| start.server.clone()),
        id: sh.next_id.fetch_add(1, Ordering::Relaxed),
        token: random_token(),
        deadline: began + Duration::from_millis(start.duration_ms.max(1)),
    };
    let ended = run_kind(&mut test);
    let id = test.id;
    (sh.log)(ServeEvent::TestEnded {
        id,
        peer,
        kind: start.kind,
        transactions: ended.transactions,
        elapsed: began.elapsed(),
        reason: ended.reason,
    });
}

/// Read the client's greeting and test request; refuse a wrong version, a client that does not
/// prove it has the server's key, or a malformed request. Err: what to log, or None for a
/// connection that closed before sending anything (a bare connect).
fn read_request(
    conn: &mut Handshake,
    key: Option<&AuthKey>,
    challenge: Option<&[u8; auth::NONCE_BYTES]>,
) -> Result<Start, Option<String>> {
    let client: ClientHello = match proto::read_greeting(conn) {
        Ok(h) => h,
        Err(FrameError::Version(v)) => {
            let _ = refuse(
                conn.conn,
                RefusalCode::Version,
                &format!(
                    "protocol version {v} is not supported; this server speaks {}",
                    proto::VERSION
                ),
            );
            return Err(Some(format!("protocol version {v}")));
        }
        // Closed or reset before the first byte: a bare connect (no message to log).
        Err(FrameError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return Err(None);
        }
        Err(e) => return Err(Some(format!("bad greeting: {e}"))),
    };
    if let (Some(key), Some(challenge)) = (key, challenge) {
        // Checked before the request is even read: an unauthenticated client gets no further.
        let refused = match &client.auth {
            None => Some((
                format!(
                    "authentication required: pass --auth-file FILE (or set {}) with this server's key",
                    auth::AUTH_FILE_ENV
                ),
                "no authentication",
            )),
            Some(proof) if !key.verify(challenge, proof) => Some((
                "authentication failed: the key does not match this server's (check --auth-file)"
                    .to_string(),
                "wrong key",
            )),
            Some(_) => None,
        };
        if let Some((message, logged)) = refused {
            let _ = refuse(conn.conn, RefusalCode::Auth, &message);
            return Err(Some(format!("authentication: {logged}")));
        }
    }
    proto::read_frame(conn).map_err(|e| {
        let _ = refuse(
            conn.conn,
            RefusalCode::Invalid,
            &format!("bad test request: {e}"),
        );
        Some(format!("bad test request: {e}"))
    })
}

fn random_token() -> u64 {
    let mut b = [0u8; 8];
    // getrandom(2) cannot fail for 8 bytes once the pool is initialised; fall back to time-based
    // entropy mixed with the address of a stack variable if it somehow does.
    // SAFETY: `b` is valid for writes of 8 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ ((&b as *const _ as u64).rotate_left(29))
    }
}

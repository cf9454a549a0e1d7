//! Evidence requests ([`TestKind::Evidence`]): the server's end of `diagnose --server-agent`.
//! This module owns the exchange, its bounds and its rate limits; what is observed, and how a
//! request reads, belong to the [`EvidenceService`] the server is configured with (the diagnose
//! crate's `remote::server`). Off unless a service is configured, and only behind
//! authentication (`latscope serve` refuses to configure one without `--auth-file`).
//!
//! ```text
//! client: greeting (auth), Start { kind: evidence, duration_ms: window }, frame: request
//! server: Accepted, once its observers run | Refused { code, message }
//! client: one byte ("done"), or nothing until the window ends
//! server: frame: the evidence; close
//! ```

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::test::{Handshake, refuse};
use super::{ServeEvent, Shared, canonical};
use crate::proto::{self, FrameError, RefusalCode, Reply, Start};
use crate::sock::Conn;

/// Largest evidence request body, bytes: a request names a port and a version.
pub const MAX_REQUEST_BYTES: usize = 1024;
/// Longest observation window a client may ask for.
pub const MAX_WINDOW: Duration = Duration::from_secs(60);
/// Shortest window (below it the observers' own start-up dominates).
pub const MIN_WINDOW: Duration = Duration::from_millis(200);
/// Evidence requests observing at once, server-wide: each may hold eBPF programs and scan
/// threads, so a few at most.
pub const MAX_RUNNING: usize = 2;
/// The least time between two requests' starts from one source address.
pub const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// Why a request is refused: the protocol's code and what to change.
pub type Refusal = (RefusalCode, String);

/// What answers evidence requests. Implementations parse the request's bytes themselves (the
/// request format is theirs) and must be bounded: observing ends when [`Observation::finish`]
/// is called, which the server does by the end of the window at the latest.
pub trait EvidenceService: Send + Sync + std::fmt::Debug {
    /// Check `request` (a frame body of at most [`MAX_REQUEST_BYTES`]) from `peer` and start
    /// observing; Err: the refusal to send.
    fn begin(&self, request: &[u8], peer: IpAddr) -> Result<Box<dyn Observation>, Refusal>;
}

/// Observers running for one request.
pub trait Observation: Send {
    /// Stop observing and give the evidence as a JSON document. `done`: when the client said
    /// it was done (None: the window ended first).
    fn finish(self: Box<Self>, done: Option<Done>) -> serde_json::Value;
}

/// The moment the client said it was done, by both of the server's clocks: the wall clock's
/// reading lets the client estimate the clocks' offset, the monotonic one how long the server
/// took to answer after it (which the estimate leaves out).
#[derive(Clone, Copy, Debug)]
pub struct Done {
    /// The wall clock, ns since the Unix epoch.
    pub unix_ns: u64,
    /// The monotonic clock.
    pub at: Instant,
}

/// Evidence requests running and each source's last start.
#[derive(Debug, Default)]
pub(super) struct EvidenceUse {
    running: usize,
    /// Sources with a request observing (at most [`MAX_RUNNING`] entries).
    observing: Vec<IpAddr>,
    last_start: HashMap<IpAddr, Instant>,
}

/// A running request's place, given back on drop.
struct Slot<'a>(&'a Mutex<EvidenceUse>, Option<IpAddr>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Ok(mut u) = self.0.lock() {
            u.running = u.running.saturating_sub(1);
            if let Some(ip) = self.1
                && let Some(i) = u.observing.iter().position(|&o| o == ip)
            {
                u.observing.swap_remove(i);
            }
        }
    }
}

/// Take a place for `peer`'s request, or the refusal: [`MAX_RUNNING`] server-wide; per source
/// one observing at a time and one start per [`MIN_INTERVAL`].
fn take(u: &Mutex<EvidenceUse>, peer: Option<IpAddr>, now: Instant) -> Result<Slot<'_>, Refusal> {
    let mut g = u
        .lock()
        .map_err(|_| (RefusalCode::Busy, "evidence state poisoned".to_string()))?;
    if g.running >= MAX_RUNNING {
        return Err((
            RefusalCode::Busy,
            format!("{MAX_RUNNING} evidence requests are already observing: retry later"),
        ));
    }
    let peer = peer.map(canonical);
    if let Some(ip) = peer {
        if g.observing.contains(&ip) {
            return Err((
                RefusalCode::Quota,
                "this address already has an evidence request observing".into(),
            ));
        }
        if let Some(last) = g.last_start.get(&ip)
            && now.duration_since(*last) < MIN_INTERVAL
        {
            return Err((
                RefusalCode::Quota,
                format!(
                    "one evidence request per {} ms from an address",
                    MIN_INTERVAL.as_millis()
                ),
            ));
        }
        // Bounded map: sources that have not asked within the interval are forgotten.
        g.last_start
            .retain(|_, t| now.duration_since(*t) < MIN_INTERVAL);
        g.last_start.insert(ip, now);
        g.observing.push(ip);
    }
    g.running += 1;
    Ok(Slot(u, peer))
}

/// The server's wall clock, ns since the Unix epoch (0 if the clock is before it).
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Check the window a request asks for.
fn window_of(start: &Start) -> Result<Duration, Refusal> {
    let w = Duration::from_millis(start.duration_ms);
    if w < MIN_WINDOW || w > MAX_WINDOW {
        return Err((
            RefusalCode::Limit,
            format!(
                "an evidence window is {} ms to {} s, not {} ms",
                MIN_WINDOW.as_millis(),
                MAX_WINDOW.as_secs(),
                start.duration_ms
            ),
        ));
    }
    Ok(w)
}

/// Serve one evidence request on its connection (after authentication and `validate`).
pub(super) fn serve(
    sh: &Arc<Shared>,
    mut conn: Conn,
    start: &Start,
    peer: &str,
    peer_ip: Option<IpAddr>,
    handshake_deadline: Instant,
) -> Result<(), String> {
    let refused = |conn: &mut Conn, (code, msg): Refusal| {
        let _ = refuse(conn, code, &msg);
        Err(format!("evidence: {msg}"))
    };
    let Some(service) = sh.cfg.evidence.clone() else {
        return refused(
            &mut conn,
            (
                RefusalCode::Invalid,
                "this server does not answer evidence requests (serve --evidence-ports, with --auth-file)"
                    .into(),
            ),
        );
    };
    let window = match window_of(start) {
        Ok(w) => w,
        Err(r) => return refused(&mut conn, r),
    };
    let body = {
        let mut hs = Handshake {
            conn: &mut conn,
            deadline: handshake_deadline,
        };
        proto::read_frame_bytes(&mut hs, MAX_REQUEST_BYTES)
    };
    let body = match body {
        Ok(b) => b,
        Err(FrameError::TooLarge(n)) => {
            return refused(
                &mut conn,
                (
                    RefusalCode::Limit,
                    format!("a {n}-byte evidence request (at most {MAX_REQUEST_BYTES})"),
                ),
            );
        }
        Err(e) => {
            return refused(
                &mut conn,
                (RefusalCode::Invalid, format!("no request: {e}")),
            );
        }
    };
    let slot = match take(&sh.evidence_use, peer_ip, Instant::now()) {
        Ok(s) => s,
        Err(r) => return refused(&mut conn, r),
    };
    let Some(ip) = peer_ip.map(canonical) else {
        return refused(
            &mut conn,
            (
                RefusalCode::Invalid,
                "evidence is of a network peer's connections: not over a unix socket".into(),
            ),
        );
    };
    let observing = match service.begin(&body, ip) {
        Ok(o) => o,
        Err(r) => return refused(&mut conn, r),
    };
    let began = Instant::now();
    let id = sh
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let accepted = Reply::Accepted {
        test_id: id,
        server: start.server.clone(),
        udp_token: None,
    };
    if proto::write_frame(&mut conn, &accepted).is_err() {
        drop(observing.finish(None));
        return Err("evidence: the client left before the observation began".into());
    }
    (sh.log)(ServeEvent::TestStarted {
        id,
        peer: peer.to_string(),
        kind: start.kind,
        request_bytes: start.request_bytes,
        response_bytes: start.response_bytes,
        stream: None,
    });
    let (done, reason) = wait_done(&mut conn, began + window, sh);
    let evidence = observing.finish(done.then(|| Done {
        unix_ns: unix_ns(),
        at: Instant::now(),
    }));
    // The observers have stopped: the place goes back before the answer leaves, or a client
    // that asks again as soon as it has read it could find its address still observing.
    drop(slot);
    let sent = proto::write_frame(&mut conn, &evidence);
    (sh.log)(ServeEvent::TestEnded {
        id,
        peer: peer.to_string(),
        kind: start.kind,
        transactions: u64::from(sent.is_ok()),
        elapsed: began.elapsed(),
        reason: reason.into(),
    });
    Ok(())
}

/// Wait for the client's "done" byte until `deadline` (or the server stops). True: the client
/// said it was done; the reason is for the log.
fn wait_done(conn: &mut Conn, deadline: Instant, sh: &Shared) -> (bool, &'static str) {
    let mut b = [0u8; 1];
    loop {
        if sh.stopping() {
            return (false, "server stopping");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (false, "window ended");
        }
        let _ = conn.set_read_timeout(Some(left.min(super::POLL)));
        match conn.read(&mut b) {
            Ok(0) => return (false, "client left"),
            Ok(_) => return (true, "client done"),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return (false, "client left"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_per_source_and_server_wide() {
        let u = Mutex::new(EvidenceUse::default());
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let s1 = take(&u, Some(a), t0).expect("first");
        // The same source while its first observes, even after the interval: quota.
        let twice = take(&u, Some(a), t0 + MIN_INTERVAL * 4);
        assert_eq!(twice.err().map(|r| r.0), Some(RefusalCode::Quota));
        // Again within the interval: quota, even once the first ended.
        drop(s1);
        let again = take(&u, Some(a), t0 + Duration::from_millis(100));
        assert_eq!(again.err().map(|r| r.0), Some(RefusalCode::Quota));
        // IPv4-mapped is the same source.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(take(&u, Some(mapped), t0 + Duration::from_millis(200)).is_err());
        let s2 = take(&u, Some(a), t0 + MIN_INTERVAL).expect("after the interval");
        let s3 = take(&u, Some(b), t0 + MIN_INTERVAL).expect("another source");
        let busy = take(&u, Some(c), t0 + MIN_INTERVAL);
        assert_eq!(busy.err().map(|r| r.0), Some(RefusalCode::Busy));
        drop((s2, s3));
        assert!(take(&u, Some(c), t0 + MIN_INTERVAL).is_ok());
        assert_eq!(u.lock().unwrap().running, 0, "slots given back");
        assert!(u.lock().unwrap().observing.is_empty());
        // The map forgets old sources.
        assert!(u.lock().unwrap().last_start.len() <= 3);
    }

    #[test]
    fn windows_are_bounded() {
        let mut s = Start {
            kind: crate::proto::TestKind::Evidence,
            request_bytes: 1,
            response_bytes: 1,
            duration_ms: 100,
            server: Default::default(),
            stream: None,
            join: None,
        };
        assert!(window_of(&s).is_err());
        s.duration_ms = 61_000;
        assert!(window_of(&s).is_err());
        s.duration_ms = 30_000;
        assert_eq!(window_of(&s).ok(), Some(Duration::from_secs(30)));
    }
}

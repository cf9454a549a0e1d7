//! Admission: connection and test slots, the `--workers` queue, and the check of a test request
//! against the server's limits.

use std::sync::atomic::{AtomicU32, Ordering};

use latscope_core::model::rr::Transport;

use super::Shared;
use crate::proto::{self, Limits, RefusalCode, Start, TestKind, UDP_HEADER_LEN};

/// First come, first served admission to the `--workers` slots (a plain semaphore would let
/// the thread that just finished win again and starve the others — unlike a real worker,
/// which takes queued requests in order).
#[derive(Debug, Default)]
pub(super) struct WorkerQueue {
    busy: u32,
    next_ticket: u64,
    next_admit: u64,
}

/// One of `--workers` request slots; waits its turn, gives the slot back when dropped.
pub(super) struct WorkerPermit<'a>(Option<&'a Shared>);

impl<'a> WorkerPermit<'a> {
    pub(super) fn take(sh: &'a Shared) -> WorkerPermit<'a> {
        let Some(max) = sh.cfg.workers else {
            return WorkerPermit(None);
        };
        let Ok(mut q) = sh.busy.lock() else {
            return WorkerPermit(None);
        };
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        while q.next_admit != ticket || q.busy >= max {
            q = match sh.free.wait(q) {
                Ok(q) => q,
                Err(_) => return WorkerPermit(None),
            };
        }
        q.next_admit += 1;
        q.busy += 1;
        // The next ticket may be admissible too (more than one free slot).
        sh.free.notify_all();
        WorkerPermit(Some(sh))
    }
}

impl Drop for WorkerPermit<'_> {
    fn drop(&mut self) {
        if let Some(sh) = self.0
            && let Ok(mut q) = sh.busy.lock()
        {
            q.busy = q.busy.saturating_sub(1);
            sh.free.notify_all();
        }
    }
}

/// Decrements a counter when dropped.
pub(super) struct Slot<'a>(&'a AtomicU32);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Take one of `max` slots counted by `counter`, or None when all are taken.
pub(super) fn try_slot(counter: &AtomicU32, max: u32) -> Option<Slot<'_>> {
    let prev = counter.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(counter);
    if prev >= max { None } else { Some(slot) }
}

/// Why a request is refused: the protocol's code and a message telling the client what to change.
pub(super) type Refusal = (RefusalCode, String);

/// Check a test request against the limits; the refusal text tells the client what to change.
pub(super) fn validate(start: &Start, limits: &Limits, unix: bool) -> Result<(), Refusal> {
    check_sizes(start, limits)?;
    check_duration(start.duration_ms, limits)?;
    if start.kind == TestKind::UdpRr {
        check_udp_rr(start, unix)?;
    }
    if start.kind == TestKind::Stream {
        check_stream(start, limits, unix)?;
    }
    if start.server.think_ns > 10_000_000_000 {
        return Err((RefusalCode::Limit, "think time above 10 s".into()));
    }
    Ok(())
}

fn check_sizes(start: &Start, limits: &Limits) -> Result<(), Refusal> {
    let max = limits.max_message_bytes;
    for (what, n) in [
        ("request", start.request_bytes),
        ("response", start.response_bytes),
    ] {
        if n == 0 {
            return Err((
                RefusalCode::Invalid,
                format!("{what} size 0: messages must be at least 1 byte"),
            ));
        }
        if n > max {
            return Err((
                RefusalCode::Limit,
                format!(
                    "{what} size {n} B exceeds this server's limit of {max} B (serve --max-message)"
                ),
            ));
        }
    }
    Ok(())
}

fn check_duration(duration_ms: u64, limits: &Limits) -> Result<(), Refusal> {
    if duration_ms > limits.max_duration_ms {
        return Err((
            RefusalCode::DurationLimit,
            format!(
                "a {} s test exceeds this server's limit of {} s (serve --max-duration)",
                duration_ms / 1000,
                limits.max_duration_ms / 1000
            ),
        ));
    }
    Ok(())
}

fn check_udp_rr(start: &Start, unix: bool) -> Result<(), Refusal> {
    if unix {
        return Err((
            RefusalCode::Invalid,
            "UDP tests need a TCP control connection, not a unix socket".into(),
        ));
    }
    if start.request_bytes < UDP_HEADER_LEN as u32 || start.response_bytes < UDP_HEADER_LEN as u32 {
        return Err((
            RefusalCode::Invalid,
            format!(
                "UDP messages carry a {UDP_HEADER_LEN}-byte header: sizes must be ≥ {UDP_HEADER_LEN}"
            ),
        ));
    }
    if start.request_bytes > 65_507 || start.response_bytes > 65_507 {
        return Err((
            RefusalCode::Invalid,
            "UDP messages are at most 65507 bytes".into(),
        ));
    }
    if start.server.think_ns > 0 {
        return Err((
            RefusalCode::Invalid,
            "think time is supported on stream tests only".into(),
        ));
    }
    Ok(())
}

fn check_stream(start: &Start, limits: &Limits, unix: bool) -> Result<(), Refusal> {
    let max = limits.max_message_bytes;
    let Some(spec) = &start.stream else {
        return Err((
            RefusalCode::Invalid,
            "a stream test without its description".into(),
        ));
    };
    if spec.streams == 0 || spec.streams > 128 {
        return Err((
            RefusalCode::Limit,
            format!("{} streams: this server allows 1 to 128", spec.streams),
        ));
    }
    if spec.buffer_bytes == 0 || spec.buffer_bytes > max {
        return Err((
            RefusalCode::Limit,
            format!(
                "buffer length {} B is outside 1 B – {max} B (serve --max-message)",
                spec.buffer_bytes
            ),
        ));
    }
    check_duration(spec.duration_ms, limits)?;
    if spec.duration_ms == 0 && spec.bytes_per_stream.is_none() {
        return Err((
            RefusalCode::Invalid,
            "a stream test needs a duration or a byte count".into(),
        ));
    }
    if spec.transport == Transport::Udp
        && (spec.buffer_bytes < proto::UDP_STREAM_HEADER_LEN as u32 || spec.buffer_bytes > 65_507)
    {
        return Err((
            RefusalCode::Invalid,
            format!(
                "UDP datagrams must be {}–65507 B",
                proto::UDP_STREAM_HEADER_LEN
            ),
        ));
    }
    if (spec.transport == Transport::Unix) != unix {
        return Err((
            RefusalCode::Invalid,
            "the stream's transport does not match this connection".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::model::rr::ServerBehaviour;

    fn start(kind: TestKind, req: u32, resp: u32, dur: u64) -> Start {
        Start {
            kind,
            request_bytes: req,
            response_bytes: resp,
            duration_ms: dur,
            server: ServerBehaviour::default(),
            stream: None,
            join: None,
        }
    }

    #[test]
    fn limits_are_enforced() {
        let l = Limits {
            max_tests: 1,
            max_duration_ms: 10_000,
            max_message_bytes: 1000,
        };
        let code = |s: &Start, unix| validate(s, &l, unix).map_err(|e| e.0);
        assert!(code(&start(TestKind::Rr, 64, 64, 1000), false).is_ok());
        assert_eq!(
            code(&start(TestKind::Rr, 0, 64, 1000), false),
            Err(RefusalCode::Invalid)
        );
        assert_eq!(
            code(&start(TestKind::Rr, 64, 2000, 1000), false),
            Err(RefusalCode::Limit)
        );
        assert_eq!(
            code(&start(TestKind::Rr, 64, 64, 20_000), false),
            Err(RefusalCode::DurationLimit)
        );
        assert_eq!(
            code(&start(TestKind::UdpRr, 10, 64, 1000), false),
            Err(RefusalCode::Invalid)
        );
        assert_eq!(
            code(&start(TestKind::UdpRr, 64, 64, 1000), true),
            Err(RefusalCode::Invalid)
        );
    }

    #[test]
    fn slots_are_bounded_and_released() {
        let c = AtomicU32::new(0);
        let a = try_slot(&c, 2);
        let b = try_slot(&c, 2);
        assert!(a.is_some() && b.is_some());
        assert!(try_slot(&c, 2).is_none());
        drop(a);
        assert!(try_slot(&c, 2).is_some());
        drop(b);
        assert_eq!(c.load(Ordering::SeqCst), 0);
    }
}

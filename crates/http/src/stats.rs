//! What one worker thread measured. Fixed size whatever the number of requests (HDR histograms
//! and counters, no per-request storage); threads' results are merged by addition.

use latscope_core::LatencyHistogram;
use latscope_core::model::http::{StatusCount, error_responses};

/// Why a request (or a connection attempt) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// TCP connection set-up failed (refused, unreachable, timed out).
    Connect,
    /// No complete response within `--timeout`.
    Timeout,
    /// The connection was reset (ECONNRESET, EPIPE).
    Reset,
    /// The server closed the connection before the response was complete.
    Closed,
    /// The response was not valid HTTP/1.x.
    Malformed,
    /// TLS handshake or record-layer failure (certificate, alert, bad record).
    Tls,
    /// Any other socket error.
    Io,
}

impl ErrorKind {
    /// Every kind, in the order of the counters.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Closed,
        ErrorKind::Malformed,
        ErrorKind::Tls,
        ErrorKind::Io,
    ];

    /// The kind's name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Closed => "closed",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Tls => "tls",
            ErrorKind::Io => "io",
        }
    }

    /// Classify a socket error.
    pub fn of_io(e: &std::io::Error) -> ErrorKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted => ErrorKind::Reset,
            K::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::Io,
        }
    }
}

/// Error counters by [`ErrorKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts([u64; 7]);

impl ErrorCounts {
    /// Count one error of `kind`.
    pub fn add(&mut self, kind: ErrorKind) {
        self.0[kind as usize] += 1;
    }

    /// Errors of `kind`.
    pub fn get(&self, kind: ErrorKind) -> u64 {
        self.0[kind as usize]
    }

    /// Errors of every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Add `o`'s counts into `self`.
    pub fn merge(&mut self, o: &ErrorCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

/// How many distinct error messages are kept as examples.
pub const MAX_ERROR_SAMPLES: usize = 8;

/// Everything one worker measured (after the warm-up).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Latency from the actual send (request write started → response complete).
    pub latency: LatencyHistogram,
    /// Open loop: latency from the intended send time (coordinated-omission corrected).
    pub latency_intended: LatencyHistogram,
    /// TCP connect: `connect()` → writable.
    pub connect: LatencyHistogram,
    /// TLS handshake: connected → handshake complete.
    pub tls_handshake: LatencyHistogram,
    /// Completed responses.
    pub requests: u64,
    /// Completed during the warm-up (not in any other figure).
    pub warmup_requests: u64,
    /// Bytes read from / written to sockets (TLS records included).
    pub bytes_read: u64,
    /// Bytes written to sockets (TLS records included).
    pub bytes_written: u64,
    /// Responses by status code (index = code, 100..=599).
    pub status: Box<[u64; 600]>,
    /// Failures by kind.
    pub errors: ErrorCounts,
    /// Open loop: requests sent more than 1 ms after their intended time.
    pub late_sends: u64,
    /// TCP connections opened (successfully).
    pub connections_opened: u64,
    /// TCP connects still in progress when the run ended: never in `connect`, which holds
    /// completed ones. A server whose accept queue is full drops SYNs, and a connect that
    /// waits for its second resend (1 s, then 2 s more) outlasts a short run.
    pub connects_pending: u64,
    /// The time those connects had waited within the measured span (from the later of their
    /// start and the warm-up's end, to the run's end).
    pub connect_pending_ns: u64,
    /// A few distinct error messages, for the report.
    pub error_samples: Vec<String>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency: LatencyHistogram::new(),
            latency_intended: LatencyHistogram::new(),
            connect: LatencyHistogram::new(),
            tls_handshake: LatencyHistogram::new(),
            requests: 0,
            warmup_requests: 0,
            bytes_read: 0,
            bytes_written: 0,
            status: Box::new([0; 600]),
            errors: ErrorCounts::default(),
            late_sends: 0,
            connections_opened: 0,
            connects_pending: 0,
            connect_pending_ns: 0,
            error_samples: Vec::new(),
        }
    }
}

impl Stats {
    /// Remember `msg` as an example if it is new and there is room (allocates only then).
    pub fn sample_error(&mut self, kind: ErrorKind, msg: &dyn std::fmt::Display) {
        if self.error_samples.len() >= MAX_ERROR_SAMPLES {
            return;
        }
        let text = format!("{}: {msg}", kind.name());
        if !self.error_samples.contains(&text) {
            self.error_samples.push(text);
        }
    }

    /// Add `o` into `self`.
    pub fn merge(&mut self, o: &Stats) {
        self.latency.merge(&o.latency);
        self.latency_intended.merge(&o.latency_intended);
        self.connect.merge(&o.connect);
        self.tls_handshake.merge(&o.tls_handshake);
        self.requests += o.requests;
        self.warmup_requests += o.warmup_requests;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        for (a, b) in self.status.iter_mut().zip(o.status.iter()) {
            *a += b;
        }
        self.errors.merge(&o.errors);
        self.late_sends += o.late_sends;
        self.connections_opened += o.connections_opened;
        self.connects_pending += o.connects_pending;
        self.connect_pending_ns += o.connect_pending_ns;
        for s in &o.error_samples {
            if self.error_samples.len() < MAX_ERROR_SAMPLES && !self.error_samples.contains(s) {
                self.error_samples.push(s.clone());
            }
        }
    }

    /// Responses by status code, for every status seen, ascending.
    pub fn status_counts(&self) -> Vec<StatusCount> {
        self.status
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(code, &count)| StatusCount {
                code: code as u16,
                count,
            })
            .collect()
    }

    /// The responses that are error pages (status not 2xx/3xx), by status code, ascending:
    /// the server answered, but not with what was asked for.
    pub fn error_responses(&self) -> Vec<StatusCount> {
        error_responses(&self.status_counts())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        a.requests = 2;
        a.status[200] = 2;
        a.latency.record(10);
        b.requests = 3;
        b.status[200] = 1;
        b.status[404] = 2;
        b.errors.add(ErrorKind::Timeout);
        b.latency.record(20);
        b.sample_error(ErrorKind::Timeout, &"x");
        b.sample_error(ErrorKind::Timeout, &"x");
        a.merge(&b);
        assert_eq!(a.requests, 5);
        let pairs = |v: Vec<StatusCount>| v.iter().map(|s| (s.code, s.count)).collect::<Vec<_>>();
        assert_eq!(pairs(a.status_counts()), vec![(200, 3), (404, 2)]);
        assert_eq!(pairs(a.error_responses()), vec![(404, 2)]);
        assert_eq!(a.errors.get(ErrorKind::Timeout), 1);
        assert_eq!(a.errors.total(), 1);
        assert_eq!(a.latency.count(), 2);
        assert_eq!(a.error_samples, vec!["timeout: x".to_string()]);
    }
}

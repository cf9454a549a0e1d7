//! `latscope http`: HTTP load (closed loop like wrk, or open loop at a fixed rate with
//! coordinated-omission correction like wrk2).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use super::rr::LoadMode;
use crate::bins::LogBins;
use crate::summary::Summary;

/// Responses with one status code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StatusCount {
    /// HTTP status code.
    pub code: u16,
    /// Responses with this status.
    pub count: u64,
}

/// The class of an HTTP status code (RFC 9110 §15: its first digit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusClass {
    /// 1xx: interim (never the final answer to a request).
    Informational,
    /// 2xx: the request succeeded.
    Success,
    /// 3xx: the answer is elsewhere (a redirect, or "not modified").
    Redirection,
    /// 4xx: the server refused the request as asked (404, 403, 429 …).
    ClientError,
    /// 5xx: the server failed to answer (500, 502, 503 …).
    ServerError,
}

impl StatusClass {
    /// The class of `code` (codes outside 100–599 count as server errors: no valid server
    /// sends them).
    pub fn of(code: u16) -> StatusClass {
        match code {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// Whether a final response of this class is an error page rather than the answer asked
    /// for: anything but 2xx and 3xx. Its latency measures how fast the server refuses.
    pub fn is_error(self) -> bool {
        !matches!(self, StatusClass::Success | StatusClass::Redirection)
    }
}

impl StatusCount {
    /// The status code's class.
    pub fn class(&self) -> StatusClass {
        StatusClass::of(self.code)
    }
}

/// The responses in `status` that are error pages (not 2xx/3xx), by status code, ascending.
pub fn error_responses(status: &[StatusCount]) -> Vec<StatusCount> {
    status
        .iter()
        .filter(|s| s.class().is_error())
        .cloned()
        .collect()
}

/// Failed requests and connection attempts, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HttpErrors {
    /// TCP connection set-up failed (refused, unreachable, timed out).
    pub connect: u64,
    /// No complete response within the timeout.
    pub timeout: u64,
    /// Connection reset by the peer (ECONNRESET, EPIPE).
    pub reset: u64,
    /// The server closed the connection before the response was complete.
    pub closed: u64,
    /// The response was not valid HTTP/1.x.
    pub malformed: u64,
    /// TLS handshake or record failure (certificate, alert).
    pub tls: u64,
    /// Other socket errors.
    pub io: u64,
    /// All of the above.
    pub total: u64,
}

/// One second of the measured run (the last may be shorter).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpInterval {
    /// Since the end of the warm-up, ns.
    pub start_ns: u64,
    /// Interval end, ns since the end of the warm-up.
    pub end_ns: u64,
    /// Responses completed in the interval.
    pub requests: u64,
    /// Responses per second in the interval.
    pub requests_per_sec: f64,
    /// Failures in the interval.
    pub errors: u64,
    /// Bytes read in the interval.
    pub bytes_read: u64,
    /// Latency of the responses completed in this interval (from the intended send time in
    /// open loop).
    pub p50_ns: u64,
    /// 99th percentile latency in the interval, ns.
    pub p99_ns: u64,
    /// Longest latency in the interval, ns.
    pub max_ns: u64,
    /// Open loop only: median latency of the same responses from their actual send time, ns
    /// (without the wait for a late send; absent in closed loop and in older results).
    #[serde(default)]
    pub raw_p50_ns: Option<u64>,
    /// Open loop only: 99th percentile from the actual send time, ns.
    #[serde(default)]
    pub raw_p99_ns: Option<u64>,
}

/// The report of `latscope http`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The URL requested.
    pub url: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// The request method.
    pub method: String,
    /// "HTTP/1.1" or "HTTP/2".
    pub protocol: String,
    /// HTTP/2: concurrent streams per connection.
    pub streams_per_connection: Option<u32>,
    /// The address connections went to.
    pub address: String,
    /// HTTPS (rustls).
    pub tls: bool,
    /// HTTPS: how the server's certificate was checked (absent for http://).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateCheck>,
    /// Concurrent connections.
    pub connections: u32,
    /// Worker threads.
    pub threads: u32,
    /// Closed loop (wrk) or open loop at a fixed rate (wrk2).
    pub load: LoadMode,
    /// Warm-up excluded from the statistics, ns.
    pub warmup_ns: u64,
    /// Measured time (warm-up excluded), ns.
    pub elapsed_ns: u64,
    /// Completed responses (any status) after the warm-up.
    pub requests: u64,
    /// Responses per second.
    pub requests_per_sec: f64,
    /// Bytes read from the sockets (TLS records included) after the warm-up: the same span as
    /// `requests`.
    pub bytes_read: u64,
    /// bytes_read per second.
    pub bytes_read_per_sec: f64,
    /// Bytes written to the sockets (TLS records included) after the warm-up.
    pub bytes_written: u64,
    /// Request write started → response complete.
    pub latency: Summary,
    /// Open loop only: intended send time → response complete (coordinated-omission corrected,
    /// as in wrk2).
    pub latency_from_intended: Option<Summary>,
    /// `latency` as a histogram in log bins (what `latscope report` draws; absent in results
    /// of older versions).
    #[serde(default)]
    pub latency_bins: Option<LogBins>,
    /// Open loop only: `latency_from_intended` in log bins.
    #[serde(default)]
    pub latency_from_intended_bins: Option<LogBins>,
    /// Open loop only: requests sent more than 1 ms after their intended time.
    pub late_sends: u64,
    /// Responses by status code.
    pub status: Vec<StatusCount>,
    /// The responses of `status` whose code is not 2xx/3xx (error pages: 404, 403, 503 …), by
    /// status code. They count in `requests` and `latency` (the server answered), and make the
    /// run's exit code 1. Empty in results of older versions.
    #[serde(default)]
    pub error_responses: Vec<StatusCount>,
    /// Failures by kind.
    pub errors: HttpErrors,
    /// Up to 8 distinct error messages, "kind: message".
    pub error_samples: Vec<String>,
    /// TCP connections established (more than `connections` when the server closes them).
    pub connections_opened: u64,
    /// TCP connect time: connect() → established.
    pub connect: Summary,
    /// HTTPS only: TLS handshake time.
    pub tls_handshake: Option<Summary>,
    /// Responses completed during the warm-up (not counted anywhere else).
    pub warmup_requests: u64,
    /// Per-second timeline.
    pub timeline: Vec<HttpInterval>,
    /// The run was cut short by Ctrl-C; figures cover what was measured.
    pub interrupted: bool,
}

/// How the server's certificate was checked in a run over TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CertificateCheck {
    /// Verified: a Mozilla root or a `--cacert` certificate vouches for it, for the URL's name.
    Verified,
    /// Not verified (`--insecure`): the server's identity is unchecked.
    NotVerified,
}

impl HttpReport {
    /// Responses whose status is not 2xx/3xx (error pages), from `status` (so results of older
    /// versions, without `error_responses`, count them too).
    pub fn error_statuses(&self) -> u64 {
        error_responses(&self.status).iter().map(|s| s.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_and_3xx_are_answers() {
        let classes: Vec<(u16, StatusClass, bool)> = [101, 200, 204, 301, 304, 403, 404, 429, 503]
            .into_iter()
            .map(|c| (c, StatusClass::of(c), StatusClass::of(c).is_error()))
            .collect();
        let errors: Vec<u16> = classes.iter().filter(|c| c.2).map(|c| c.0).collect();
        assert_eq!(errors, vec![101, 403, 404, 429, 503]);
        assert_eq!(StatusClass::of(429), StatusClass::ClientError);
        assert_eq!(StatusClass::of(503), StatusClass::ServerError);
        let status = [
            StatusCount {
                code: 200,
                count: 7,
            },
            StatusCount {
                code: 404,
                count: 3,
            },
            StatusCount {
                code: 502,
                count: 1,
            },
        ];
        assert_eq!(
            error_responses(&status),
            vec![status[1].clone(), status[2].clone()]
        );
    }
}

//! Two-ended diagnosis: the server's host observes its end of the client's connections while
//! the client's steps run, and answers with typed evidence. One home for the exchange's types:
//! the [`EvidenceRequest`] a client sends and the [`ServerEvidence`] it gets back
//! (`latscope schema evidence`); [`server`] answers requests (`latscope serve --evidence-ports`),
//! [`client`] is the diagnose step that asks (`--server-agent`). The transport, authentication and rate limits are `latscope serve`'s
//! (`latscope_net::serve::evidence`).
//!
//! No clock synchronisation is assumed: the evidence is durations and counts over the
//! observation window; the one cross-host time (when the client said it was done) only
//! estimates the clocks' offset, and says so.

pub mod client;
pub mod fuzzing;
pub mod server;

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::evidence::{CpuEvidence, NsCounters, ServerSockets, StackEvidence};

/// The version of the request and of the evidence: a server answers only its own.
pub const EVIDENCE_VERSION: u32 = 1;

/// What a client asks the server's agent to observe. Anything else in the request (another
/// process, another address's connections, a file) is refused: unknown fields are errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceRequest {
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The server's local TCP port whose connections from the client are observed.
    pub port: u16,
}

/// Why a request is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// Not the request's JSON (the parser's message).
    Malformed(String),
    /// Another version of the exchange.
    Version(u32),
    /// Port 0.
    NoPort,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Malformed(e) => write!(f, "malformed evidence request: {e}"),
            RequestError::Version(v) => write!(
                f,
                "evidence request version {v}; this latscope answers version {EVIDENCE_VERSION}"
            ),
            RequestError::NoPort => f.write_str("an evidence request names a port (1–65535)"),
        }
    }
}

impl std::error::Error for RequestError {}

impl EvidenceRequest {
    /// Parse and check a request's bytes (a frame body).
    pub fn parse(body: &[u8]) -> Result<EvidenceRequest, RequestError> {
        let r: EvidenceRequest =
            serde_json::from_slice(body).map_err(|e| RequestError::Malformed(e.to_string()))?;
        if r.version != EVIDENCE_VERSION {
            return Err(RequestError::Version(r.version));
        }
        if r.port == 0 {
            return Err(RequestError::NoPort);
        }
        Ok(r)
    }
}

/// One observer's outcome at the server's end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum Observed<T> {
    /// It ran: what it measured.
    Ran(T),
    /// It does not apply there (e.g. no cgroup limit and no eBPF): why.
    Skipped(String),
    /// It tried and failed: why.
    Failed(String),
}

impl<T> Observed<T> {
    /// The value, when it ran.
    pub fn value(&self) -> Option<&T> {
        match self {
            Observed::Ran(v) => Some(v),
            _ => None,
        }
    }
}

/// What the server's agent observed of the client's connections to one port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerEvidence {
    /// [`EVIDENCE_VERSION`].
    pub version: u32,
    /// The port observed.
    pub port: u16,
    /// The client's address as the server sees it: every per-connection figure is of this
    /// address's connections only.
    pub peer: IpAddr,
    /// How long the observers ran, ns (the server's monotonic clock).
    pub observed_ns: u64,
    /// The server's wall clock when the client said it was done (ns since the Unix epoch);
    /// absent when the window ended first. Used only to estimate the clocks' offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_unix_ns: Option<u64>,
    /// How long the server took from reading "done" to having its evidence ready, ns (its
    /// monotonic clock): the part of the client's wait that is not the network's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_delay_ns: Option<u64>,
    /// The server's end of the peer's connections: options and MSS (its sockets).
    pub sockets: Observed<ServerSockets>,
    /// The port owner's run-queue waits and its cgroup's CPU throttling.
    pub cpu: Observed<CpuEvidence>,
    /// Receive-path latency of the peer's packets to the port (eBPF).
    pub kernel_stack: Observed<StackEvidence>,
    /// The TCP counters of the server's network namespace over the window (namespace-wide:
    /// the kernel counts no finer).
    pub counters: Observed<NsCounters>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_strictly() {
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":1,"port":80}"#),
            Ok(EvidenceRequest {
                version: 1,
                port: 80
            })
        );
        for (bad, what) in [
            (
                &br#"{"version":1,"port":80,"pid":1}"#[..],
                "another process",
            ),
            (br#"{"version":1}"#, "no port"),
            (br#"{"version":1,"port":70000}"#, "port out of range"),
            (br#"{"version":1,"port":-1}"#, "negative port"),
            (br#""port 80""#, "not an object"),
            (b"\xff\xfe", "not UTF-8"),
            (b"", "empty"),
        ] {
            assert!(
                matches!(EvidenceRequest::parse(bad), Err(RequestError::Malformed(_))),
                "{what}"
            );
        }
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":2,"port":80}"#),
            Err(RequestError::Version(2))
        );
        assert_eq!(
            EvidenceRequest::parse(br#"{"version":1,"port":0}"#),
            Err(RequestError::NoPort)
        );
    }

    #[test]
    fn evidence_round_trips_through_json() {
        let e = ServerEvidence {
            version: EVIDENCE_VERSION,
            port: 80,
            peer: "10.0.0.1".parse().unwrap(),
            observed_ns: 5_000_000_000,
            done_unix_ns: Some(1),
            answer_delay_ns: Some(2),
            sockets: Observed::Skipped("no connection".into()),
            cpu: Observed::Failed("x".into()),
            kernel_stack: Observed::Ran(StackEvidence::default()),
            counters: Observed::Ran(NsCounters {
                retrans_segs: 3,
                ..Default::default()
            }),
        };
        let j = serde_json::to_string(&e).unwrap();
        assert!(
            j.contains(r#""sockets":{"status":"skipped","value":"no connection"}"#),
            "{j}"
        );
        let back: ServerEvidence = serde_json::from_str(&j).unwrap();
        assert_eq!(back, e);
    }
}

//! What a request costs in round trips of the measured path (`latscope diagnose`): the parts
//! of a request and what saves them, and the TLS handshake's facts. The accounts themselves
//! ([`RoundTrips`](super::diagnose::RoundTrips)) are part of the diagnose report.
//!
//! Across a path of tens of milliseconds a request is counted in round trips: the TCP
//! handshake, the TLS handshake (two for a full TLS 1.2 one, one for TLS 1.3 or a resumed
//! session), the request itself, the rounds of slow start its response needs, rounds lost to a
//! window that holds less than the path carries per round trip, redirects. Each part of a
//! request is counted here with what it measured, and the round trips a fix would save are
//! marked with the finding that names them and its fix; what is left is the path's floor,
//! which only a shorter path shortens.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which request an account is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A client's first request: the name looked up, a new connection, no TLS session yet.
    First,
    /// A new connection of a client that has been here before: it offers the TLS session the
    /// server gave it (resumption), its name already looked up.
    Returning,
    /// The next request, sent as soon as the previous response arrived: on the same connection
    /// when the server keeps it open, else on a new one.
    Next,
    /// The next request after the connection was idle longer than its retransmission timeout
    /// (a person reading a page before the next click).
    AfterIdle,
}

impl RequestKind {
    /// How the human report names it.
    pub const fn label(self) -> &'static str {
        match self {
            RequestKind::First => "a first request (new connection)",
            RequestKind::Returning => "a returning client's new connection",
            RequestKind::Next => "the next request",
            RequestKind::AfterIdle => "a request after an idle pause",
        }
    }
}

/// The parts of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoundTripKind {
    /// Looking up the name (the resolver's round trips, not the path's).
    Dns,
    /// SYN → SYN-ACK.
    TcpHandshake,
    /// The TLS handshake: 2 round trips for a full TLS 1.2 one, 1 for TLS 1.3 or a resumed
    /// session, one more for a TLS 1.3 HelloRetryRequest.
    TlsHandshake,
    /// A redirect: the exchange (and, to another origin, the connection) before the page.
    Redirect,
    /// The request and its response's first flight (with the server's time to answer).
    Request,
    /// The further rounds the response needs while the sender's congestion window grows.
    SlowStart,
    /// Rounds lost to a window that holds less than the path carries per round trip (the
    /// client's receive window, the server's send buffer).
    WindowLimited,
    /// Retransmission timeouts (a lost segment waited for by a timer, not a round trip).
    RetransmissionTimeout,
}

impl RoundTripKind {
    /// Whether its count is in round trips of the path (DNS lookups and timeouts are not).
    pub const fn is_path_round(self) -> bool {
        !matches!(
            self,
            RoundTripKind::Dns | RoundTripKind::RetransmissionTimeout
        )
    }

    /// The human report's word for it.
    pub const fn label(self) -> &'static str {
        match self {
            RoundTripKind::Dns => "DNS",
            RoundTripKind::TcpHandshake => "TCP handshake",
            RoundTripKind::TlsHandshake => "TLS handshake",
            RoundTripKind::Redirect => "redirect",
            RoundTripKind::Request => "request",
            RoundTripKind::SlowStart => "slow start",
            RoundTripKind::WindowLimited => "window-limited",
            RoundTripKind::RetransmissionTimeout => "timeouts",
        }
    }
}

/// What saves an avoidable part (the finding's own fix says where and how).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoundTripFix {
    /// Keep connections open between requests (HTTP keep-alive, a long enough timeout).
    KeepAlive,
    /// Resume TLS sessions (session tickets or a session cache).
    TlsResumption,
    /// Offer TLS 1.3 (one round trip for a full handshake).
    Tls13,
    /// An initial congestion window of 10 segments (RFC 6928).
    InitialWindow,
    /// Keep the congestion window over idle periods (`tcp_slow_start_after_idle = 0`).
    KeepWindowWhenIdle,
    /// A receive window of at least the path's bandwidth × RTT.
    ReceiveWindow,
    /// A send buffer of at least the path's bandwidth × RTT.
    SendBuffer,
    /// Link to the final URL.
    FinalUrl,
    /// The resolver's options (query types, timeouts, search list).
    ResolverOptions,
    /// Remove the loss the timers wait for.
    RemoveLoss,
}

impl RoundTripFix {
    /// A few words for the budget's table.
    pub const fn label(self) -> &'static str {
        match self {
            RoundTripFix::KeepAlive => "keep-alive",
            RoundTripFix::TlsResumption => "TLS resumption",
            RoundTripFix::Tls13 => "TLS 1.3",
            RoundTripFix::InitialWindow => "initial window of 10",
            RoundTripFix::KeepWindowWhenIdle => "tcp_slow_start_after_idle=0",
            RoundTripFix::ReceiveWindow => "larger receive window",
            RoundTripFix::SendBuffer => "larger send buffer",
            RoundTripFix::FinalUrl => "link the final URL",
            RoundTripFix::ResolverOptions => "resolver options",
            RoundTripFix::RemoveLoss => "remove the loss",
        }
    }
}

/// The TLS protocol version a handshake negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TlsVersion {
    /// TLS 1.2: a full handshake is two round trips, a resumed one one.
    Tls12,
    /// TLS 1.3: one round trip, resumed or not (two with a HelloRetryRequest).
    Tls13,
}

impl TlsVersion {
    /// "TLS 1.2".
    pub const fn label(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLS 1.2",
            TlsVersion::Tls13 => "TLS 1.3",
        }
    }
}

/// How a TLS handshake went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TlsKind {
    /// A full handshake: no session offered, or the offered one refused.
    Full,
    /// A full TLS 1.3 handshake after a HelloRetryRequest (the server wanted another key
    /// share): one more round trip.
    FullWithHelloRetry,
    /// The session offered was resumed.
    Resumed,
}

/// A TLS handshake: its time, version and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TlsHandshake {
    /// TCP established → handshake complete, ns.
    pub handshake_ns: u64,
    /// The version negotiated.
    pub version: TlsVersion,
    /// Full, or resumed.
    pub kind: TlsKind,
}

impl TlsHandshake {
    /// The round trips the handshake takes by its protocol: a full TLS 1.2 handshake two (RFC
    /// 5246 §7.3), TLS 1.3 (RFC 8446 §2) or a resumed session one, a HelloRetryRequest one
    /// more. 0-RTT data would take none; latscope sends none.
    pub const fn round_trips(&self) -> u32 {
        match (self.version, self.kind) {
            (_, TlsKind::Resumed) => 1,
            (TlsVersion::Tls12, _) => 2,
            (TlsVersion::Tls13, TlsKind::Full) => 1,
            (TlsVersion::Tls13, TlsKind::FullWithHelloRetry) => 2,
        }
    }

    /// e.g. "TLS 1.2, full handshake".
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            TlsKind::Full => "full handshake",
            TlsKind::FullWithHelloRetry => "full handshake after a HelloRetryRequest",
            TlsKind::Resumed => "resumed session",
        };
        format!("{}, {kind}", self.version.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_trips_of_each_handshake() {
        let t = |version, kind| {
            TlsHandshake {
                handshake_ns: 0,
                version,
                kind,
            }
            .round_trips()
        };
        assert_eq!(t(TlsVersion::Tls12, TlsKind::Full), 2);
        assert_eq!(t(TlsVersion::Tls12, TlsKind::Resumed), 1);
        assert_eq!(t(TlsVersion::Tls13, TlsKind::Full), 1);
        assert_eq!(t(TlsVersion::Tls13, TlsKind::Resumed), 1);
        assert_eq!(t(TlsVersion::Tls13, TlsKind::FullWithHelloRetry), 2);
    }
}

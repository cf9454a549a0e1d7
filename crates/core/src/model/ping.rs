//! `latscope ping` and `latscope trace`: probe replies, per-host statistics, traced hops.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;
use crate::summary::Summary;

/// How probes are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProbeMode {
    /// TCP SYN from a raw socket; SYN-ACK or RST answers; the kernel resets the half-open
    /// connection (needs CAP_NET_RAW).
    Syn,
    /// A full TCP connect() and an abortive close (no privilege).
    Connect,
    /// UDP datagrams: latscope serve's echo (`LSP1` 0x01), or ICMP port unreachable.
    Udp,
    /// ICMP echo (unprivileged ping sockets where allowed, else a raw socket).
    Icmp,
}

impl ProbeMode {
    /// The mode's name for tables ("TCP SYN", "ICMP echo", ...).
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Syn => "TCP SYN",
            ProbeMode::Connect => "TCP connect",
            ProbeMode::Udp => "UDP",
            ProbeMode::Icmp => "ICMP echo",
        }
    }
}

/// What answered a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplyKind {
    /// SYN-ACK: a listener (port open).
    SynAck,
    /// RST: nothing listens (port closed).
    Rst,
    /// connect() completed (port open).
    Connected,
    /// connect() refused (port closed).
    Refused,
    /// ICMP echo reply.
    EchoReply,
    /// latscope serve's UDP echo reply (port open).
    UdpEcho,
    /// ICMP port unreachable (UDP port closed).
    PortUnreachable,
    /// ICMP time exceeded: a router on the path.
    TimeExceeded,
    /// ICMP administratively prohibited (a firewall rejects: filtered).
    Prohibited,
    /// ICMP host unreachable: a router has a route to the address, but no host answers on its
    /// link (ARP / neighbour discovery failed, ~3 s on Linux), or an `unreachable` route.
    HostUnreachable,
    /// ICMP network unreachable: a router has no route to the address.
    NetUnreachable,
    /// ICMP protocol unreachable: the host does not handle the probe's protocol.
    ProtocolUnreachable,
    /// Another ICMP destination unreachable (fragmentation needed, source route failed, ...).
    Unreachable,
}

impl ReplyKind {
    /// Whether this kind of reply comes from the destination itself.
    pub fn from_destination(self) -> bool {
        !(self == ReplyKind::TimeExceeded || self.is_unreachable())
    }

    /// Whether this is an ICMP destination unreachable other than port unreachable (host, net,
    /// protocol, prohibited, ...): the probe could not be delivered. Its delay is how long the
    /// sender tried (a router's ARP timeout), never a round trip.
    pub fn is_unreachable(self) -> bool {
        matches!(
            self,
            ReplyKind::Prohibited
                | ReplyKind::HostUnreachable
                | ReplyKind::NetUnreachable
                | ReplyKind::ProtocolUnreachable
                | ReplyKind::Unreachable
        )
    }

    /// traceroute's mark for an unreachable: `!H`, `!N`, `!P`, `!X` (prohibited), `!U` (any
    /// other code).
    pub fn trace_mark(self) -> Option<&'static str> {
        match self {
            ReplyKind::HostUnreachable => Some("!H"),
            ReplyKind::NetUnreachable => Some("!N"),
            ReplyKind::ProtocolUnreachable => Some("!P"),
            ReplyKind::Prohibited => Some("!X"),
            ReplyKind::Unreachable => Some("!U"),
            _ => None,
        }
    }

    /// The port state this reply implies (None for ICMP echo and router replies).
    pub fn port_state(self) -> Option<PortState> {
        match self {
            ReplyKind::SynAck | ReplyKind::Connected | ReplyKind::UdpEcho => Some(PortState::Open),
            ReplyKind::Rst | ReplyKind::Refused | ReplyKind::PortUnreachable => {
                Some(PortState::Closed)
            }
            ReplyKind::Prohibited => Some(PortState::Filtered),
            _ => None,
        }
    }

    /// A short label: `SA`, `RA`, `echo`, `port-unreachable`, ...
    pub fn label(self) -> &'static str {
        match self {
            ReplyKind::SynAck => "SA",
            ReplyKind::Rst => "RA",
            ReplyKind::Connected => "connected",
            ReplyKind::Refused => "refused",
            ReplyKind::EchoReply => "echo-reply",
            ReplyKind::UdpEcho => "udp-echo",
            ReplyKind::PortUnreachable => "port-unreachable",
            ReplyKind::TimeExceeded => "time-exceeded",
            ReplyKind::Prohibited => "prohibited",
            ReplyKind::HostUnreachable => "host-unreachable",
            ReplyKind::NetUnreachable => "net-unreachable",
            ReplyKind::ProtocolUnreachable => "protocol-unreachable",
            ReplyKind::Unreachable => "unreachable",
        }
    }
}

/// Port state as nmap names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PortState {
    /// Something answers on the port.
    Open,
    /// The host answers that nothing listens.
    Closed,
    /// No answer (probes dropped) or an administrative reject.
    Filtered,
    /// UDP without any answer: a firewall drops the probes, or a service listens and does not
    /// answer these datagrams (nmap's "open|filtered").
    #[serde(rename = "open|filtered")]
    OpenFiltered,
}

impl PortState {
    /// The state's name as nmap prints it.
    pub fn name(self) -> &'static str {
        match self {
            PortState::Open => "open",
            PortState::Closed => "closed",
            PortState::Filtered => "filtered",
            PortState::OpenFiltered => "open|filtered",
        }
    }
}

/// One answered probe (one line of `latscope ping`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PingReply {
    /// Probe sequence number, from 0.
    pub seq: u64,
    /// Who answered.
    pub from: String,
    /// What kind of answer it was.
    pub kind: ReplyKind,
    /// TCP flags of the answer (`SA`, `RA`), when TCP.
    pub flags: Option<String>,
    /// TTL / hop limit of the answer, when the socket could see it.
    pub ttl: Option<u8>,
    /// Bytes of the answer as received.
    pub size: u64,
    /// Round-trip time, ns.
    pub rtt_ns: u64,
    /// Whether both ends of this RTT are kernel timestamps.
    pub kernel_timestamps: bool,
}

/// The report of `latscope ping`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PingReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The target as given.
    pub target: String,
    /// The address it resolved to (once, at start).
    pub address: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// Destination port (TCP and UDP modes).
    pub port: Option<u16>,
    /// How the probes were sent.
    pub mode: ProbeMode,
    /// Why this mode (chosen by the user, or picked from the privileges available).
    pub mode_reason: String,
    /// Where the RTT timestamps came from.
    pub timestamps: String,
    /// Payload bytes per probe.
    pub payload_bytes: u64,
    /// Probes sent.
    pub sent: u64,
    /// Probes answered.
    pub received: u64,
    /// Probes that got no answer within the timeout.
    pub lost: u64,
    /// lost / sent, %.
    pub loss_percent: f64,
    /// Answers by kind (label, count).
    pub replies_by_kind: Vec<(String, u64)>,
    /// RTT of the answered probes.
    pub rtt: Summary,
    /// open / closed / filtered (TCP and UDP modes).
    pub port_state: Option<PortState>,
    /// Wall-clock time of the run, ns.
    pub elapsed_ns: u64,
    /// Probes sent per second.
    pub rate_per_sec: f64,
    /// Every answer (bounded: at most the first 100000).
    pub replies: Vec<PingReply>,
    /// True when Ctrl-C ended the run.
    pub interrupted: bool,
}

/// One probe of one hop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HopProbe {
    /// Who answered (None: no answer within the wait time, shown as `*`).
    pub from: Option<String>,
    /// What kind of answer it was.
    pub kind: Option<ReplyKind>,
    /// Round-trip time, ns (None: no answer, or an unreachable, whose delay is no round trip).
    pub rtt_ns: Option<u64>,
    /// An unreachable ([`ReplyKind::is_unreachable`]): how long after the probe it came, ns —
    /// mostly how long the router tried to reach the address (its ARP / neighbour discovery
    /// timeout), not the time to the router. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ns: Option<u64>,
}

/// Where a trace stopped because a router said the destination cannot be reached (traceroute's
/// `!H`, `!N`, `!P`, `!X`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceUnreachable {
    /// The TTL whose probes got the unreachable.
    pub ttl: u8,
    /// The router that sent it.
    pub from: String,
    /// Which unreachable.
    pub kind: ReplyKind,
    /// How long after the probe it came, ns (the first such answer).
    pub after_ns: u64,
}

/// One TTL of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceHop {
    /// The TTL (hop limit) the probes were sent with.
    pub ttl: u8,
    /// The probes sent at this TTL.
    pub probes: Vec<HopProbe>,
    /// Whether the destination answered at this TTL.
    pub destination: bool,
}

/// Per-hop statistics over the rounds of `trace --report` (mtr's report, plus percentiles).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HopStats {
    /// The TTL (hop limit) of this hop.
    pub ttl: u8,
    /// The addresses that answered at this TTL, most frequent first.
    pub addresses: Vec<String>,
    /// Probes sent at this TTL.
    pub sent: u64,
    /// Probes answered at this TTL.
    pub received: u64,
    /// Unanswered probes, %.
    pub loss_percent: f64,
    /// RTT of the last answered probe, ns.
    pub last_ns: Option<u64>,
    /// RTT of the answered probes.
    pub rtt: Summary,
    /// Whether the destination answered at this TTL.
    pub destination: bool,
}

/// A hop that leaves probes unanswered while probes sent further, through it, are answered:
/// the router forwards fine and only limits the ICMP errors it sends itself (Linux
/// `icmp_ratelimit`, router control-plane policing).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitedHop {
    /// The hop that answers only part of its probes.
    pub ttl: u8,
    /// Its unanswered share, %.
    pub loss_percent: f64,
    /// The later hop with the fewest unanswered probes.
    pub later_ttl: u8,
    /// That hop's unanswered share, %.
    pub later_loss_percent: f64,
}

/// Hops whose loss later hops contradict, from (ttl, sent, answered) per hop in TTL order.
pub fn rate_limited_hops(hops: &[(u8, u64, u64)]) -> Vec<RateLimitedHop> {
    let loss = |sent: u64, got: u64| {
        if sent == 0 {
            0.0
        } else {
            100.0 * sent.saturating_sub(got) as f64 / sent as f64
        }
    };
    let mut out = Vec::new();
    for (i, &(ttl, sent, got)) in hops.iter().enumerate() {
        let here = loss(sent, got);
        // A hop that never answers is silent by policy, not rate-limited; it says nothing.
        if got == 0 || here == 0.0 {
            continue;
        }
        let best_later = hops[i + 1..]
            .iter()
            .filter(|(_, s, g)| *s > 0 && *g > 0)
            .map(|&(t, s, g)| (t, loss(s, g)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((later_ttl, later)) = best_later.filter(|(_, l)| *l < here) {
            out.push(RateLimitedHop {
                ttl,
                loss_percent: here,
                later_ttl,
                later_loss_percent: later,
            });
        }
    }
    out
}

impl TraceReport {
    /// Hops whose unanswered probes are ICMP rate limiting rather than loss (see
    /// [`rate_limited_hops`]), from `--report`'s statistics or the plain trace's probes.
    pub fn rate_limited_hops(&self) -> Vec<RateLimitedHop> {
        let counts: Vec<(u8, u64, u64)> = match &self.report {
            Some(rep) => rep.iter().map(|h| (h.ttl, h.sent, h.received)).collect(),
            None => self
                .hops
                .iter()
                .map(|h| {
                    let got = h.probes.iter().filter(|p| p.rtt_ns.is_some()).count();
                    (h.ttl, h.probes.len() as u64, got as u64)
                })
                .collect(),
        };
        rate_limited_hops(&counts)
    }
}

/// The report of `latscope trace`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TraceReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// The target as given.
    pub target: String,
    /// Which of the name's addresses was used, and the RFC 8305 race that chose it (absent for
    /// unix sockets and in results of older versions).
    #[serde(default)]
    pub address_choice: Option<crate::model::address::AddressChoice>,
    /// The address it resolved to.
    pub address: String,
    /// How the probes were sent.
    pub mode: ProbeMode,
    /// Why this mode (chosen by the user, or picked from the privileges available).
    pub mode_reason: String,
    /// Destination port (TCP and UDP modes).
    pub port: Option<u16>,
    /// What stays constant across TTLs so load balancers keep the probes on one path (Paris
    /// traceroute), and which field identifies each probe.
    pub flow: String,
    /// First TTL probed.
    pub first_ttl: u8,
    /// Highest TTL probed.
    pub max_ttl: u8,
    /// Probes per TTL.
    pub queries: u32,
    /// How long to wait for an answer, ns.
    pub wait_ns: u64,
    /// Whether the destination answered.
    pub reached: bool,
    /// How the destination answered (SYN-ACK, RST, echo reply, port unreachable, ...).
    pub destination_reply: Option<ReplyKind>,
    /// The trace stopped where a router answered that the destination cannot be reached.
    #[serde(default)]
    pub unreachable: Option<TraceUnreachable>,
    /// Where the RTT timestamps came from.
    pub timestamps: String,
    /// The hops, one per TTL (plain trace).
    pub hops: Vec<TraceHop>,
    /// `--report`: the number of rounds and per-hop statistics.
    pub rounds: Option<u64>,
    /// Per-hop statistics (`--report`).
    pub report: Option<Vec<HopStats>>,
    /// True when Ctrl-C ended the trace.
    pub interrupted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_that_later_hops_contradict_is_rate_limiting() {
        // Hop 2 answers 65 of 100, hops 3 and 4 (through it) all 100: hop 2 limits its ICMP.
        let v = rate_limited_hops(&[(1, 100, 100), (2, 100, 65), (3, 100, 100), (4, 100, 100)]);
        assert_eq!(
            v,
            [RateLimitedHop {
                ttl: 2,
                loss_percent: 35.0,
                later_ttl: 3,
                later_loss_percent: 0.0
            }]
        );
    }

    #[test]
    fn loss_that_carries_on_to_the_end_is_not_rate_limiting() {
        // Real loss at hop 2 shows at every later hop too.
        assert!(rate_limited_hops(&[(1, 100, 100), (2, 100, 70), (3, 100, 70)]).is_empty());
        // The last hop's loss has nothing beyond it to contradict it.
        assert!(rate_limited_hops(&[(1, 100, 100), (2, 100, 60)]).is_empty());
        // A silent hop (no answer at all) is not rate limiting.
        assert!(rate_limited_hops(&[(1, 100, 0), (2, 100, 100)]).is_empty());
        // Partly contradicted: 40% at hop 2, 10% beyond.
        let v = rate_limited_hops(&[(2, 10, 6), (3, 10, 9)]);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].later_loss_percent, 10.0);
    }
}

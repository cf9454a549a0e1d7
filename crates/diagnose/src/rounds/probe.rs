//! What the round-trip step measured of a URL, as the rules and the round-trip accounts read
//! it: a browser's requests — the first on a new connection, the next back to back, one after
//! an idle pause, a second connection offering the first's TLS session — and what the server
//! let it reuse.

use latscope_core::model::round_trips::TlsHandshake;

/// The round-trip step's requests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundTripProbe {
    /// The first connection's set-up (no TLS session offered).
    pub first: Opened,
    /// Its first request.
    pub first_exchange: Exchanged,
    /// What the server did with the connection after that response.
    pub reuse: Reuse,
    /// The next request, back to back, on the same connection (when the server kept it).
    pub next: Option<Exchanged>,
    /// The idle pause after the next request, and what followed it.
    pub idle: Option<IdlePause>,
    /// A second connection offering the session the first got, and its request (https only).
    pub returning: Option<Visit>,
    /// The redirects the URL led through, in order (none when it answers itself).
    pub redirects: Vec<Hop>,
    /// Where the redirects ended: the page's response on the connection of the last hop.
    pub page: Option<Visit>,
}

impl RoundTripProbe {
    /// What a new connection of a client that has been here costs: the returning visit's
    /// set-up (its TLS session offered) when measured, else the first one's.
    pub fn new_connection(&self) -> Opened {
        self.returning.as_ref().map_or(self.first, |v| v.opened)
    }
}

/// A new connection and its first request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Visit {
    pub opened: Opened,
    /// Its request, when it completed.
    pub exchange: Option<Exchanged>,
}

/// A connection's set-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// `connect()` → established, ns.
    pub connect_ns: u64,
    /// The TLS handshake (https).
    pub tls: Option<TlsHandshake>,
}

impl RoundTripProbe {
    /// What one round trip of a full TLS handshake costs, priced the same whichever finding
    /// would save it: the path's round trip, never more than any full handshake of the probe
    /// (the first connection's, a returning one's) spent per round trip as measured. TLS 1.2
    /// where 1.3 takes one round trip and a session not resumed where a resumed one takes one
    /// save the same round trip of the same path; priced from two handshakes apart they ranked
    /// by which of the two met this host's noise (the lab's tls12-no-resumption 20 ms away, the
    /// two-ended seat: one run of three put TLS 1.2 first by 0.5 ms of 21).
    pub fn tls_round_trip_ns(&self, rtt_ns: u64) -> u64 {
        [
            self.first.tls,
            self.returning.as_ref().and_then(|v| v.opened.tls),
        ]
        .into_iter()
        .flatten()
        .filter(|t| t.kind != latscope_core::model::round_trips::TlsKind::Resumed)
        .map(|t| handshake_saving(&t, 1, rtt_ns))
        .fold(rtt_ns, u64::min)
    }
}

impl Opened {
    /// Connect and TLS handshake, ns.
    pub fn total_ns(&self) -> u64 {
        self.connect_ns + self.tls.map_or(0, |t| t.handshake_ns)
    }

    /// The round trips of the set-up: the TCP handshake and the TLS handshake's.
    pub fn round_trips(&self) -> u32 {
        1 + self.tls.map_or(0, |t| t.round_trips())
    }
}

/// One request and its response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchanged {
    /// Request written → first response byte, ns.
    pub ttfb_ns: u64,
    /// First → last response byte, ns.
    pub transfer_ns: u64,
    /// Status code of the final response.
    pub status: u16,
    /// Body bytes.
    pub body_bytes: u64,
    /// Bytes read from the socket for it (head, body, TLS records).
    pub wire_bytes: u64,
    /// The bytes of each flight of its transfer, first flight first (see
    /// [`super::flights::flights`]); empty over a path too short to tell them apart.
    pub flights: Vec<u64>,
    /// The round trips the transfer spanned after its first flight (see
    /// [`super::flights::transfer_rounds`]); 0 over a path too short to count them.
    pub rounds: u32,
    /// The server's segment size as the client's socket saw it (tcpi_rcv_mss), bytes.
    pub mss: Option<u32>,
    /// The client socket's retransmission timeout after it, µs.
    pub rto_us: Option<u32>,
    /// The window the client advertised after it (tcpi_rcv_wnd: fully open once the response
    /// is read), bytes.
    pub window: Option<u32>,
    /// What its head said of the connection.
    pub head: HeadSaid,
}

impl Exchanged {
    /// The further rounds of the transfer after its first flight.
    pub fn further_rounds(&self) -> u32 {
        self.rounds
    }

    /// Request sent → last byte, ns.
    pub fn total_ns(&self) -> u64 {
        self.ttfb_ns + self.transfer_ns
    }
}

/// What a response's head said of the connection and the resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadSaid {
    /// HTTP/1.0.
    pub http10: bool,
    /// `Connection: close`, or HTTP/1.0 without keep-alive.
    pub close: bool,
    /// `Keep-Alive: timeout=N`, s.
    pub keep_alive_timeout_s: Option<u32>,
    /// A redirect's `Location`.
    pub location: Option<String>,
}

/// What the server did with the connection after the first response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reuse {
    /// It kept it: the next request went on the same connection.
    #[default]
    Kept,
    /// It said it closes it (`Connection: close`, HTTP/1.0 without keep-alive, or a body
    /// delimited by the close).
    SaidClose,
    /// It closed it without saying so: the next request on it found it closed.
    ClosedSilently,
}

/// The idle pause on a kept connection and what followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdlePause {
    /// How long the connection was left idle, ns (longer than its retransmission timeout).
    pub pause_ns: u64,
    /// The client socket's retransmission timeout before the pause, µs.
    pub rto_us: Option<u32>,
    pub outcome: AfterPause,
}

/// What became of the connection over the pause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterPause {
    /// Still open: the request after it.
    Open(Exchanged),
    /// The server closed it this long into the pause (its keep-alive timeout), ns.
    Closed { after_ns: u64 },
}

/// One redirect the URL led through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The URL requested and its redirect status.
    pub from: String,
    pub status: u16,
    /// Where it pointed (resolved against `from`).
    pub to: String,
    /// `to` is on the same scheme, host and port: a client can ask it on the same connection.
    pub same_origin: bool,
    /// What the hop cost a client: its exchange, and for the first hop to another origin the
    /// connection to this one too, ns.
    pub cost_ns: u64,
    /// The round trips it took: one exchange, plus a connection's set-up when the next hop
    /// needs a new one.
    pub round_trips: u32,
}

/// What saving `extra` of a handshake's round trips saves: that many of the path's round
/// trips, never more than the handshake's own share of them as measured.
pub fn handshake_saving(t: &TlsHandshake, extra: u32, rtt_ns: u64) -> u64 {
    let rounds = u64::from(t.round_trips().max(1));
    let extra = u64::from(extra.min(t.round_trips()));
    (extra * rtt_ns).min(t.handshake_ns * extra / rounds)
}

impl Opened {
    /// What this connection costs beyond a reused one: its round trips of the path (TCP,
    /// TLS), never more than its set-up measured. A handshake's CPU is not a round trip
    /// (`slow_tls` names it).
    pub fn saving(&self, rtt_ns: u64) -> u64 {
        (u64::from(self.round_trips()) * rtt_ns).min(self.total_ns())
    }
}

impl Exchanged {
    /// What the transfer's rounds beyond `needed` cost: that many round trips, never more than
    /// the transfer took.
    pub fn rounds_saving(&self, needed: u32, rtt_ns: u64) -> u64 {
        (u64::from(self.further_rounds().saturating_sub(needed)) * rtt_ns).min(self.transfer_ns)
    }

    /// The further rounds the response would need from a first flight of ten segments,
    /// doubling.
    pub fn floor_rounds(&self) -> u32 {
        super::flights::floor_rounds(self.wire_bytes, self.mss.unwrap_or(1448))
    }
}

//! What the steps found: one named field per step, filled by that step's typed outcome and
//! read by the rules. Absent steps leave their field `None`.

use latscope_core::Summary;
use latscope_core::model::diagnose::{RequestPhases, TargetKind};
use latscope_core::model::names::NameLookup;

pub use latscope_core::model::evidence::{
    CpuEvidence, EgressEvidence, EgressStage, HeldPerPeriod, NsCounters, RunQueueWaits, ServerEnd,
    ServerSockets, StackEvidence, Throttling,
};

/// What the measurements found, by step.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Round-trip time of the path without the application (SYN ping with kernel timestamps,
    /// or the kernel's handshake RTT).
    pub path: Option<Summary>,
    /// The path was measured by a SYN ping with kernel timestamps: its RTT leaves out this
    /// host's netfilter, qdisc and wake-ups, which a `connect()` pays.
    pub path_by_syn: bool,
    /// connect() latency as the client sees it (includes SYN retransmissions).
    pub handshake: Option<Summary>,
    /// Connect attempts and how many failed.
    pub connect_failures: ConnectFailures,
    /// The same connects several at once (a burst), when measured.
    pub connect_burst: Option<ConnectBurst>,
    /// The connections the concurrent requests opened and what their handshakes took (HTTP:
    /// a server that closes connections makes the client open one per request).
    pub request_connects: Option<RequestConnects>,
    /// What answered at the target; `None` when no connection succeeded.
    pub target: Option<TargetKind>,
    /// One request at a time.
    pub single: Option<Summary>,
    /// What one of those requests and its response weighed.
    pub sizes: Option<Sizes>,
    /// The same with TCP_QUICKACK re-armed by the client after every read.
    pub quickack: Option<Summary>,
    /// Several connections at once.
    pub concurrent: Option<Concurrent>,
    /// A small request's latency idle and while a bulk transfer runs on the same path.
    pub under_load: Option<UnderLoad>,
    /// The server's end of our connections, when it runs on this host.
    pub server_sockets: Option<ServerSockets>,
    /// What a packet capture of the single-request step showed.
    pub capture: Option<CaptureEvidence>,
    /// Kernel receive-path latency of the server's packets (eBPF), medians in ns, and the
    /// server host's way out.
    pub stack: Option<StackEvidence>,
    /// This (the client's) host's way out for its packets to the server: the transmit stages
    /// (eBPF).
    pub client_egress: Option<EgressEvidence>,
    /// A URL request phase by phase (medians).
    pub phases: Option<RequestPhases>,
    /// The URL's host name looked up query by query as this host's stub resolver does it.
    pub names: Option<NameLookup>,
    /// The server's threads waiting for a CPU (local servers).
    pub cpu: Option<CpuEvidence>,
    /// The path's bottleneck rate and what one request puts through it.
    pub bottleneck: Option<Bottleneck>,
    /// The kernel's TCP counters of both namespaces across the handshakes and single requests.
    pub counters: Option<TcpCounters>,
    /// How late this host woke a sleeping thread while the single requests ran (its own
    /// scheduling noise, as cyclictest measures it).
    pub host_noise: Option<Summary>,
    /// The single requests cut into time slices, each with how late this host woke a sleeping
    /// thread within it: a tail is compared with the host's noise of the same moments. Empty
    /// when the engine gave no slices.
    pub slices: Vec<TimeSlice>,
    /// A name's address families, one connect to each (names with both families only).
    pub families: Option<Vec<FamilyProbe>>,
    /// The MSS experiment: the URL fetched as usual and announcing a smaller MSS.
    pub mss: Option<MssProbe>,
    /// The HTTP responses of the request steps by status code (URL targets).
    pub responses: Option<Responses>,
    /// How long latscope's own packets spent in this (the client's) host: `send()` → driver and
    /// driver → `recv()`, from kernel timestamps on its own sockets.
    pub client_host: Option<ClientHost>,
    /// What the server's agent observed at its end (`--server-agent`), when it answered; its
    /// figures are merged into the server-side fields above where this host saw nothing.
    pub server_end: Option<ServerEnd>,
    /// A URL's response as this host received it on new connections (the request-phases
    /// step): its size, how long its transfer took, and the window this host advertised.
    pub download: Option<Download>,
    /// latscope's own CPU while the requests ran: it is the client, and a client that cannot
    /// run measures its own waiting.
    pub client_cpu: Option<ClientCpu>,
    /// A URL requested as a browser requests it (the request-phases step): first, next,
    /// after a pause, a returning client's new connection; what the server let it reuse.
    pub browser: Option<crate::rounds::probe::RoundTripProbe>,
}

/// What one exchange weighs, bytes: the latscope sizes asked for, or an HTTP request and its
/// response as the sockets carried them (headers and TLS records included), averaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub request: u64,
    pub response: u64,
}

impl Sizes {
    /// The average exchange of a run that moved `written` and `read` bytes in `exchanges`.
    pub fn average(written: u64, read: u64, exchanges: u64) -> Option<Sizes> {
        (exchanges > 0).then(|| Sizes {
            request: written.div_ceil(exchanges),
            response: read.div_ceil(exchanges),
        })
    }
}

/// latscope's own CPU over the request steps: its cgroup's throttling and its threads' time on
/// a CPU and waiting for one (`/proc/self/task/*/schedstat`: the scheduler's run-queue wait of
/// each thread, counted from its start for threads that began meanwhile).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientCpu {
    /// The throttling of latscope's cgroup (its own or an ancestor with a CPU limit), when
    /// one is limited or throttled.
    pub throttling: Option<Throttling>,
    /// Why its cgroup could not be read, when it could not: the quota is then unknown.
    pub cgroup_unread: Option<String>,
    /// Its threads' time on a CPU, summed, ns.
    pub run_ns: u64,
    /// Their time runnable and waiting for a CPU, summed, ns.
    pub wait_ns: u64,
    /// How many times they were put on a CPU.
    pub slices: u64,
    /// Threads counted.
    pub threads: u32,
    /// The span watched, ns.
    pub span_ns: u64,
    /// The sampling thread's wake-ups (it sleeps 50 ms between reads).
    pub wakes: u64,
    /// Its wake-ups at least [`HELD_WAKE_NS`] late: a whole hold of latscope's threads, seen
    /// even where its cgroup cannot be read (under `ip netns exec`, or a container without
    /// its cgroup mounted).
    pub held_wakes: u64,
    /// The latest of its wake-ups, ns beyond the 50 ms asked.
    pub max_late_ns: u64,
}

/// A wake-up of the client's sampling thread this late is latscope held off every CPU (a
/// quota's throttled period, or a host busy for that long): 20 ms, a hundred times a loaded
/// host's usual lateness.
pub const HELD_WAKE_NS: u64 = 20_000_000;

impl ClientCpu {
    /// The threads' mean wait for a CPU each time they were put on one, ns (0: none counted).
    pub fn wait_per_slice_ns(&self) -> u64 {
        self.wait_ns.checked_div(self.slices).unwrap_or(0)
    }
}

/// A response's transfer as the client received it: the median request of the request-phases
/// step (each a new connection), with the client socket's side of who limited it, read after
/// the last byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Download {
    /// Response body bytes.
    pub body_bytes: u64,
    /// First → last response byte, ns.
    pub transfer_ns: u64,
    /// The client socket's tcp_info and buffers: the window it advertised (tcpi_rcv_wnd), its
    /// window scale, SO_RCVBUF.
    pub client: Option<latscope_core::model::transfer::TransferLimits>,
    /// The most receive auto-tuning may grow a socket's buffer to on this host
    /// (`net.ipv4.tcp_rmem`'s third value), bytes.
    pub rmem_max: Option<u32>,
}

impl Download {
    /// The rate the body arrived at, bit/s (0 for an instant transfer).
    pub fn rate_bps(&self) -> f64 {
        if self.transfer_ns == 0 {
            return 0.0;
        }
        self.body_bytes as f64 * 8.0 / (self.transfer_ns as f64 / 1e9)
    }

    /// The largest window the client could advertise: the window it advertised last (after the
    /// last byte was read, the window is fully open), else its receive buffer's half (what the
    /// kernel offers of it by default) — never more than the 16-bit window field carries at the
    /// connection's scale. tcpi_rcv_wnd is the kernel's window before that cap
    /// (`tcp_select_window` stores it, then clamps what it sends to 65535 << rcv_wscale): a
    /// connection without window scaling reports 213 KiB and puts 64 KiB on the wire.
    pub fn window_bytes(&self) -> Option<u32> {
        let c = self.client?;
        let field_max = 65_535u32 << c.rcv_wscale.unwrap_or(0).min(14);
        c.rcv_wnd
            .filter(|&w| w > 0)
            .or(c.rcvbuf_bytes.map(|b| b / 2))
            .map(|w| w.min(field_max))
    }

    /// Whether the receive buffer has grown as far as it may: at least 90% of `tcp_rmem`'s
    /// ceiling. Auto-tuning then cannot open the window any wider.
    pub fn buffer_at_ceiling(&self) -> bool {
        match (self.client.and_then(|c| c.rcvbuf_bytes), self.rmem_max) {
            (Some(b), Some(m)) => u64::from(b) * 10 >= u64::from(m) * 9,
            _ => false,
        }
    }
}

/// How one address family's first address answered a connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyProbe {
    pub addr: std::net::IpAddr,
    pub reach: FamilyReach,
    /// How long the connect took to succeed or fail.
    pub spent_ns: u64,
}

/// How a connect ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyReach {
    Connected,
    /// A reset: the host is there, nothing listens on the port.
    Refused,
    /// No answer within the step's timeout.
    TimedOut,
    /// No route, or an ICMP unreachable.
    Unreachable,
}

/// How long one fetch of the MSS experiment may take: a black hole hangs, so this bounds the
/// step. Long enough for a connect and a few round trips of a slow path; a large response need
/// not complete in it, its full-size segments arriving is what tells (see
/// [`MssProbe::lowered_passes`]).
pub const MSS_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1_200);

/// The MSS experiment's two fetches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MssProbe {
    /// As this host connects normally: did the response complete, and how much arrived.
    pub normal_completed: bool,
    pub normal_bytes: u64,
    /// The MSS this host announced then (its route's MTU less the headers).
    pub normal_mss: Option<u32>,
    /// The smaller MSS announced in the second fetch.
    pub lowered_mss: u32,
    pub lowered_completed: bool,
    pub lowered_bytes: u64,
    /// How long the second fetch took.
    pub lowered_ns: u64,
}

impl MssProbe {
    /// The smaller MSS got through where the usual one did not: the usual fetch got no complete
    /// response, and the smaller one completed, or (a large response that needs longer than a
    /// fetch may take) carried at least four of its segments more than the usual fetch did.
    pub fn black_hole(&self) -> bool {
        let further =
            self.lowered_bytes.saturating_sub(self.normal_bytes) >= 4 * u64::from(self.lowered_mss);
        !self.normal_completed && (self.lowered_completed || further)
    }
}

/// HTTP responses by status code, over the request steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Responses {
    /// (status, responses), ascending by status.
    pub by_status: Vec<(u16, u64)>,
}

impl Responses {
    /// Add a run's counts.
    pub fn add(&mut self, status: u16, n: u64) {
        if n == 0 {
            return;
        }
        match self.by_status.binary_search_by_key(&status, |&(s, _)| s) {
            Ok(i) => self.by_status[i].1 += n,
            Err(i) => self.by_status.insert(i, (status, n)),
        }
    }

    /// Every response.
    pub fn total(&self) -> u64 {
        self.by_status.iter().map(|&(_, n)| n).sum()
    }

    /// The responses that are errors: not 1xx/2xx/3xx (what a client asking for a page did
    /// not get).
    pub fn errors(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.by_status.iter().copied().filter(|&(s, _)| s >= 400)
    }

    /// How many responses were errors.
    pub fn error_count(&self) -> u64 {
        self.errors().map(|(_, n)| n).sum()
    }
}

/// Medians of the time latscope's own packets spent in the client's host (ns), from
/// SO_TIMESTAMPING on its own sockets: between the application's `send()` and the driver (the
/// qdisc, netfilter OUTPUT/POSTROUTING, routing on the way out) and between the driver and the
/// application's `recv()` return (softirq, netfilter INPUT, the wake-up on the way in).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientHost {
    /// `send()` → handed to the driver (TX_SOFTWARE), median.
    pub send_to_driver_ns: Option<u64>,
    /// `send()` → entered the qdisc (TX_SCHED), median.
    pub send_to_qdisc_ns: Option<u64>,
    /// Driver received (RX_SOFTWARE) → `recv()` returned, median.
    pub driver_to_recv_ns: Option<u64>,
    /// Timestamps the medians stand on.
    pub samples: u64,
}

impl ClientHost {
    /// What one exchange (a request out, its response in) spends in this host.
    pub fn per_exchange_ns(&self) -> Option<u64> {
        match (self.send_to_driver_ns, self.driver_to_recv_ns) {
            (None, None) => None,
            (tx, rx) => Some(tx.unwrap_or(0) + rx.unwrap_or(0)),
        }
    }
}

/// How long a time slice of a sliced request step lasts.
pub const SLICE: std::time::Duration = std::time::Duration::from_millis(100);

/// One time slice of the single-request step ([`SLICE`] long).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeSlice {
    /// Requests completed in it.
    pub requests: u64,
    /// Its slow requests (at least [`SLOW_FLOOR_NS`]) by latency: (value ns, requests).
    pub slow: Vec<(u64, u64)>,
    /// The latest the sleeping thread woke among its wake-ups overlapping the slice; `None`
    /// when it did not run then.
    pub host_late_ns: Option<u64>,
}

/// Requests at least this slow are kept per slice: below the least a request of a heavy tail
/// takes (the median plus half of [`crate::rules::TAIL_FLOOR_NS`]).
pub const SLOW_FLOOR_NS: u64 = 1_000_000;

impl TimeSlice {
    /// Requests of at least `ns`.
    pub fn at_least(&self, ns: u64) -> u64 {
        self.slow
            .iter()
            .filter(|&&(v, _)| v >= ns)
            .map(|&(_, n)| n)
            .sum()
    }
}

/// The TCP counters of the client's namespace and of the server's (when it is on this host).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    pub client: NsCounters,
    /// `None`: the server is not on this host (or its namespace could not be read).
    pub server: Option<NsCounters>,
    /// Client and server share one namespace: both fields hold the same counters.
    pub shared: bool,
}

impl TcpCounters {
    /// Retransmissions that the receivers reported they already had (D-SACKs received on
    /// either side): spurious, not lost.
    pub fn spurious(&self) -> u64 {
        match (self.server, self.shared) {
            (Some(s), true) => s.dsack_recv,
            (s, _) => self.client.dsack_recv + s.map_or(0, |s| s.dsack_recv),
        }
    }

    /// Segments retransmitted on either side over the run (`RetransSegs`).
    pub fn retransmitted(&self) -> u64 {
        match (self.server, self.shared) {
            (Some(s), true) => s.retrans_segs,
            (s, _) => self.client.retrans_segs + s.map_or(0, |s| s.retrans_segs),
        }
    }
}

/// The path's bottleneck, per direction: a rate measured one way says nothing of the other (a
/// token bucket on the uplink leaves the downlink alone), so each direction carries its own
/// rate and the bytes one request/response exchange puts through it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bottleneck {
    /// Client → server: the request's bytes are serialised at this rate.
    pub up: Option<LinkRate>,
    /// Server → client: the response's bytes are serialised at this rate.
    pub down: Option<LinkRate>,
}

/// One direction's rate and the bytes of one exchange that cross it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkRate {
    pub rate_bps: f64,
    /// How the rate was measured.
    pub source: RateSource,
    /// Bytes one exchange sends this way on the wire (TCP/IP/Ethernet headers included).
    pub wire_bytes: u64,
}

impl LinkRate {
    /// Time to serialise this direction's bytes of one exchange, ns.
    pub fn serialisation_ns(&self) -> u64 {
        self.serialise_ns(self.wire_bytes)
    }

    /// Time to serialise `bytes` at this rate, ns (0 for a rate that is not one).
    pub fn serialise_ns(&self, bytes: u64) -> u64 {
        if self.rate_bps <= 0.0 {
            return 0;
        }
        (bytes as f64 * 8.0 / self.rate_bps * 1e9) as u64
    }
}

impl Bottleneck {
    /// What `connections` concurrent requests carried over the path at once, bits/s of their
    /// responses: where that is more than [`CARRIED_MARGIN`] × the rate the responses were
    /// measured at one by one (their delivery or packet trains), it is the least the path's
    /// server → client bottleneck is, and replaces it. A bulk transfer's rate is the path's own
    /// and stays.
    pub fn carried(&mut self, connections: u32, carried_bps: f64) {
        let Some(d) = self.down.as_mut() else {
            return;
        };
        if d.source == RateSource::BulkTransfer || d.rate_bps <= 0.0 {
            return;
        }
        if carried_bps > CARRIED_MARGIN * d.rate_bps {
            d.source = RateSource::Carried {
                connections,
                one_bps: d.rate_bps as u64,
            };
            d.rate_bps = carried_bps;
        }
    }

    /// Time to serialise one exchange: the request at the client→server rate plus the response
    /// at the server→client rate, each where measured (an unmeasured direction adds nothing).
    pub fn serialisation_ns(&self) -> u64 {
        [self.up, self.down]
            .iter()
            .flatten()
            .map(LinkRate::serialisation_ns)
            .sum()
    }

    /// The slower measured direction's rate.
    pub fn slowest_bps(&self) -> Option<f64> {
        [self.up, self.down]
            .iter()
            .flatten()
            .map(|r| r.rate_bps)
            .reduce(f64::min)
    }
}

impl Evidence {
    /// The part of a single request that serialisation at the bottleneck takes, as far as the
    /// measurement allows: a prediction above the single request's excess over the path
    /// (beyond [`SERIALISATION_SLACK`]) is contradicted by it — the rate is not what these
    /// requests see (a token bucket passes a small request in its burst at line rate) — and
    /// claims nothing; otherwise never more than that excess. `None` without a rate or a
    /// single-request measurement.
    pub fn serialisation_share_ns(&self) -> Option<u64> {
        let ser = self.bottleneck?.serialisation_ns();
        let single = self.single.as_ref()?.p50_ns;
        let excess = single.saturating_sub(self.path.as_ref().map_or(0, |p| p.p50_ns));
        if ser as f64 > excess as f64 * SERIALISATION_SLACK {
            return None;
        }
        Some(ser.min(excess))
    }
}

/// How far a serialisation estimate may exceed what a request measured and still be taken: 2×.
/// The rate comes from a bulk TCP transfer, whose goodput through a shaper with a shallow queue
/// (its losses and the sawtooth that follows them), both ways at once, falls to half or two
/// thirds of the rate a small exchange crosses the link at: the lab's slow-link (4 Mbit/s, 5 ms
/// of queue) measured 2.9 Mbit/s, predicting 3.4 ms where 2.2 ms was measured. A token bucket
/// that passes a small request in its burst contradicts the prediction by more: 205 µs
/// predicted against 47 µs measured (issue 28), 4.4×.
pub const SERIALISATION_SLACK: f64 = 2.0;

/// How a bottleneck rate was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateSource {
    /// A bulk transfer to `latscope serve`: its throughput.
    BulkTransfer,
    /// The spacing of back-to-back segments of the target's responses in the capture (packet
    /// trains): `pairs` consecutive full segments measured.
    PacketTrains { pairs: u64 },
    /// The rate large responses were delivered at once their transfer settled, from the
    /// client's capture: `responses` rated.
    Delivery { responses: u64 },
    /// What `connections` concurrent requests carried over the path at once (the HTTP load's
    /// responses), where that is well above what one response was measured at (`one_bps`, by
    /// its capture): a link carries no more than its rate, so the path's bottleneck is at least
    /// this, and the single response's pace was its ends' (a send buffer, a window) or its
    /// hosts' copying, no link's.
    Carried { connections: u32, one_bps: u64 },
}

/// How far what many requests carried at once must exceed the rate one response was measured
/// at before it replaces it: 1.5×. Through a link of rate R the load's responses (their bytes
/// without the headers of each segment) reach at most R; the lab's nginx with `sndbuf=4k` on a
/// veth delivered one 1 MiB page at 6.65–10 Gbit/s, read as a bottleneck of 1.26 ms per page in
/// some runs, while 64 such requests at once carried 23.4 Gbit/s.
pub const CARRIED_MARGIN: f64 = 1.5;

/// Connect attempts of the handshakes step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectFailures {
    pub attempts: u64,
    pub refused: u64,
    pub timed_out: u64,
}

/// Connects `connections` at once: their time and failures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnectBurst {
    pub connections: u32,
    pub connect: Summary,
    pub failures: ConnectFailures,
}

/// The connections a request step opened: how many, for how many requests, and their
/// connect() → established times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestConnects {
    pub connections: u64,
    pub requests: u64,
    pub connect: Summary,
    /// Connects still waiting when the step ended (not in `connect`), and how long they had
    /// waited within it.
    pub pending: u64,
    pub pending_ns: u64,
}

impl RequestConnects {
    /// Connections opened per request (at most 1: a connection serves at least one request).
    pub fn per_request(&self) -> f64 {
        (self.connections as f64 / self.requests.max(1) as f64).min(1.0)
    }
}

/// Requests with `connections` connections at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Concurrent {
    pub connections: u32,
    pub latency: Summary,
}

/// A small request's latency idle and under load.
#[derive(Clone, Debug, PartialEq)]
pub struct UnderLoad {
    pub idle: Summary,
    pub loaded: Summary,
    /// What loaded the path meanwhile.
    pub load: Load,
}

/// The load of the latency-under-load step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// A bulk TCP transfer to `latscope serve` (its rate, when measured).
    Bulk { rate_bps: Option<f64> },
    /// Concurrent requests of the HTTP engine: the top of its ramp.
    Http {
        connections: u32,
        requests_per_sec: f64,
        bytes_per_sec: f64,
    },
}

impl Load {
    /// A closed-loop load's own wait per request by Little's law (connections ÷ throughput),
    /// ns: what a probe request served in turn among the load's requests waits. None for a bulk
    /// transfer (its queue is the path's, not a turn among requests).
    pub fn fair_share_ns(&self) -> Option<u64> {
        match *self {
            Load::Http {
                connections,
                requests_per_sec,
                ..
            } if requests_per_sec > 0.0 && connections > 0 => {
                Some((f64::from(connections) / requests_per_sec * 1e9) as u64)
            }
            _ => None,
        }
    }

    /// e.g. "a bulk transfer at 9.4 Gbit/s", "32 concurrent GET (41k/s)".
    pub fn describe(&self) -> String {
        use latscope_core::units::format_bitrate;
        match *self {
            Load::Bulk { rate_bps: Some(r) } => format!("a bulk transfer at {}", format_bitrate(r)),
            Load::Bulk { rate_bps: None } => "a bulk transfer".into(),
            Load::Http {
                connections,
                requests_per_sec,
                bytes_per_sec,
            } => format!(
                "{connections} concurrent GET ({requests_per_sec:.0}/s, {})",
                format_bitrate(bytes_per_sec * 8.0)
            ),
        }
    }
}

/// How many stalls of one kind the wire showed and the time they cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallTotal {
    pub count: u64,
    pub lost_ns: u64,
}

/// Where one stall can be seen in the capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallExample {
    /// Connection number in the analysis.
    pub conn: u64,
    /// The frame the stall started after.
    pub since_frame: u64,
    /// The frame that ended it.
    pub frame: u64,
}

/// Nagle × delayed ACK stalls seen on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NagleStalls {
    pub total: StallTotal,
    pub example: StallExample,
}

/// Stalls and retransmissions seen on the wire (latscope analyze's detectors).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptureEvidence {
    pub frames: u64,
    pub transactions: u64,
    pub nagle: Option<NagleStalls>,
    pub think: Option<StallTotal>,
    /// Retransmitted data (and FIN) segments: resent SYNs and SYN-ACKs are left out, they are
    /// in `syn_resends` (a lost SYN costs a connection set-up, not an open connection's requests).
    pub retransmissions: u64,
    /// Timer retransmissions of data and the time they lost (resent SYNs left out too).
    pub rto_stalls: Option<StallTotal>,
    /// Sends that stopped with both windows open and went on only when the peer's next segment
    /// reached the sender: segments lost before the capture point and sent again unseen (the
    /// server's own output dropping them, or loss on its way here), and the time they cost.
    pub unseen_loss: Option<StallTotal>,
    /// SYNs and SYN-ACKs sent again, and the time the handshakes waited for them.
    pub syn_resends: Option<StallTotal>,
    /// Delayed ACKs that held data back without Nagle.
    pub delayed_ack: Option<StallTotal>,
    /// The sender filled the receiver's advertised window and waited for it to open
    /// (Wireshark's `tcp.analysis.window_full`), and zero windows.
    pub window_full: Option<StallTotal>,
    /// Segments that filled the receiver's advertised window (Wireshark's
    /// `tcp.analysis.window_full`) or met a zero window, however short the wait after them:
    /// `window_full` keeps only waits a person would notice.
    pub window_full_segments: u64,
    /// The bottleneck rate from the dispersion of the responses' packet trains, when the
    /// responses were long enough to measure it (bit/s), and the pairs it came from.
    pub train_rate_bps: Option<(f64, u64)>,
    /// The server → client delivery rate of the large responses once settled (bit/s on the
    /// wire), and how many responses it came from.
    pub delivery_rate_bps: Option<(f64, u64)>,
    /// Bytes on the wire (TCP/IP/Ethernet headers included) per transaction.
    pub wire_bytes_per_transaction: Option<u64>,
}

//! The shared flow tracker: the connection table (canonical flow keys, a slab of connection
//! state, expiry of closed connections) and the per-connection, per-direction state every part
//! of the analysis reads.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;

use latscope_core::model::analyze::{HandshakeSegment, StallKind, TcpCounts, Transaction};

use crate::fxhash::FxHasher;

use super::ipid::IpIdCounter;
use super::limits::MAX_TX_WORST;

use crate::packet::{Addr, flags};

/// A closed connection stays this long (capture time) so that stragglers — a FIN retransmitted
/// because the last ACK was lost, the duplicate ACK answering it — are analysed in their
/// connection, as Wireshark does; then it is summarised and dropped.
pub(super) const LINGER_NS: u64 = 2_000_000_000;
/// A connection closed by FINs whose last FIN was never seen acknowledged stays this long: its
/// closer retransmits that FIN with exponential backoff for minutes (Linux: `tcp_orphan_retries`,
/// 0.2 s doubling to 2 min), and each is a retransmission in this connection, as in Wireshark,
/// not a new connection.
pub(super) const LINGER_UNACKED_FIN_NS: u64 = 180_000_000_000;
/// A connection expired after its linger is remembered this long (capture time), so that a
/// straggler of it without SYN — a FIN resent minutes later because the last ACK was lost on
/// the way — is no new connection (tshark keeps it in the old stream: `edonkey.pcap`'s FIN
/// 12 s after the close).
pub(super) const TOMBSTONE_NS: u64 = LINGER_UNACKED_FIN_NS;
/// Expired connections remembered at most (each ~50 bytes), the oldest forgotten first.
pub(super) const MAX_TOMBSTONES: usize = 65_536;

/// A canonical (direction-independent) TCP flow key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct FlowKey {
    a: Addr,
    ap: u16,
    b: Addr,
    bp: u16,
}

impl FlowKey {
    pub(super) fn new(src: Addr, sp: u16, dst: Addr, dp: u16) -> Self {
        if (src, sp) <= (dst, dp) {
            FlowKey {
                a: src,
                ap: sp,
                b: dst,
                bp: dp,
            }
        } else {
            FlowKey {
                a: dst,
                ap: dp,
                b: src,
                bp: sp,
            }
        }
    }
}

/// One segment still waiting for its ACK.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unacked {
    pub frame: u64,
    pub seq: u32,
    pub nextseq: u32,
    pub ts: u64,
}

/// A data segment remembered for the release detectors.
#[derive(Debug, Clone, Copy)]
pub(super) struct DataSeg {
    pub ts: u64,
    pub frame: u64,
    pub len: u32,
    /// Relative sequence number just past it.
    pub end: u32,
    /// Bytes unacknowledged when it left (up to its end).
    pub in_flight: u32,
    /// The most its sender had unacknowledged at once before it, on this connection (as seen
    /// from the capture point: a lower bound of what its congestion window allowed).
    pub max_in_flight_before: u32,
}

/// Silence from a sender before new data counts as the start of a burst.
const BURST_IDLE_NS: u64 = 1_000_000;

/// The rhythm of one sender's bursts of new data: a sender on its own clock (a device pushing
/// every 20 ms, a PLC's 1 s cycle) starts bursts at a strict period whatever the peer does,
/// while a sender that reacts to the peer starts them a steady time after the peer's packets.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Cadence {
    last_start: u64,
    interval: u64,
    /// Intervals in a row equal to the one before.
    run: u32,
    /// The phase of this sender's own clock, if it keeps one.
    pub grid: PhaseGrid,
    /// Smallest and largest time from the peer's last packet to a burst start over the run.
    lag_lo: u64,
    lag_hi: u64,
    /// Smallest and largest time from the previous burst start to the peer's last packet
    /// before the next one (the peer's reaction) over the run.
    react_lo: u64,
    react_hi: u64,
}

impl Cadence {
    /// Equal intervals: within 5 % (at least 1 ms) of each other.
    fn tolerance(interval: u64) -> u64 {
        (interval / 20).max(1_000_000)
    }

    /// New data at `ts`, `idle` after this sender's previous data and `lag` after the peer's
    /// last packet.
    pub(super) fn on_data(&mut self, ts: u64, idle: u64, lag: u64) {
        if idle < BURST_IDLE_NS {
            return;
        }
        self.grid.on_burst(ts, self.last_start, lag);
        let iv = ts.saturating_sub(self.last_start);
        let react = iv.saturating_sub(lag);
        if self.last_start != 0
            && self.interval != 0
            && iv.abs_diff(self.interval) <= Self::tolerance(self.interval)
        {
            self.run += 1;
            self.lag_lo = self.lag_lo.min(lag);
            self.lag_hi = self.lag_hi.max(lag);
            self.react_lo = self.react_lo.min(react);
            self.react_hi = self.react_hi.max(react);
        } else {
            self.run = 0;
            (self.lag_lo, self.lag_hi) = (lag, lag);
            (self.react_lo, self.react_hi) = (react, react);
        }
        self.interval = if self.last_start != 0 { iv } else { 0 };
        self.last_start = ts;
    }

    /// The latest burst kept a strict period (three equal intervals in a row) that is
    /// independent of the peer (the time since the peer's last packet varied, and so did when
    /// that packet came after the previous burst): the application's clock released it, not
    /// an ACK, a timer or a request. A server answering a ping-pong after a think time that
    /// varies by a few milliseconds keeps near-equal intervals and a varying lag too, but the
    /// client's reaction to each answer stays put (`tests/integration/wire_stalls.rs`' 60 ms server on a
    /// loaded machine had one answer in ten taken for a clock).
    pub(super) fn app_clock(&self) -> bool {
        let tol = Self::tolerance(self.interval);
        self.run >= 3 && self.lag_hi - self.lag_lo > tol && self.react_hi - self.react_lo > tol
    }
}

/// The shortest period a [`PhaseGrid`] is looked for at: below it bursts are a transfer's.
const GRID_MIN_PERIOD_NS: u64 = 10_000_000;
/// Bursts on a grid before it can be shown to be the sender's own clock.
const GRID_PROOF_HITS: u32 = 3;
/// A grid is given up when this many periods pass without a burst on it.
const GRID_MAX_PERIODS: u64 = 3;

/// A sender's bursts on a fixed grid of its own clock, found even when other bursts come
/// between its points (a PLC pushing every 1.000 s and answering requests in between breaks
/// [`Cadence`]'s run of equal intervals, never its phase): each burst on the grid lands a
/// whole number of periods (≤ [`GRID_MAX_PERIODS`]) after the previous one, within 0.5 %
/// (at least 1 ms).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PhaseGrid {
    period: u64,
    last: u64,
    /// Bursts on the grid after the two that set its period.
    pub hits: u32,
    lag_lo: u64,
    lag_hi: u64,
    /// Smallest and largest time from the grid point before a burst on it to the peer's last
    /// packet before that burst: the peer's reaction, nearly constant when each burst answers
    /// the peer's last packet.
    react_lo: u64,
    react_hi: u64,
    /// The time from the peer's last packet to the bursts on the grid varied (a request
    /// answered in between did not move the grid), and so did where that packet fell between
    /// the grid's points: the sender's own clock, not a steady answer to the peer.
    pub own_clock: bool,
    /// The latest burst is on the grid (after at least one earlier hit).
    pub on: bool,
}

impl PhaseGrid {
    fn tolerance(period: u64) -> u64 {
        (period / 200).max(1_000_000)
    }

    /// A burst at `ts`; the previous one started at `prev_start`, `lag` after the peer's last
    /// packet.
    fn on_burst(&mut self, ts: u64, prev_start: u64, lag: u64) {
        self.on = false;
        let since = ts.saturating_sub(self.last);
        if let Some(k) = since
            .saturating_add(self.period / 2)
            .checked_div(self.period)
        {
            let tol = Self::tolerance(self.period);
            if (1..=GRID_MAX_PERIODS).contains(&k)
                && since.abs_diff(k.saturating_mul(self.period)) <= tol
            {
                // The peer's last packet, from the grid point before this burst.
                let react = since
                    .saturating_sub((k - 1).saturating_mul(self.period))
                    .saturating_sub(lag);
                self.hits += 1;
                self.last = ts;
                self.on = true;
                self.lag_lo = self.lag_lo.min(lag);
                self.lag_hi = self.lag_hi.max(lag);
                self.react_lo = self.react_lo.min(react);
                self.react_hi = self.react_hi.max(react);
                // Three hits at least: bursts at random times land on some grid now and then.
                // A varying lag alone is no proof: when each burst answers the peer (a server
                // thinking a near-constant time in a ping-pong), the lag moves with the
                // interval, within the grid's tolerance, while the peer's reaction stays put.
                self.own_clock |= self.hits >= GRID_PROOF_HITS
                    && self.lag_hi - self.lag_lo > tol
                    && self.react_hi - self.react_lo > tol;
                return;
            }
            // A burst between the grid's points (an answer to a request) leaves it standing.
            let horizon = GRID_MAX_PERIODS.saturating_mul(self.period);
            if self.hits > 0 && since <= horizon.saturating_add(tol) {
                return;
            }
        }
        let iv = ts.saturating_sub(prev_start);
        *self = if prev_start != 0 && iv >= GRID_MIN_PERIOD_NS {
            PhaseGrid {
                period: iv,
                last: ts,
                lag_lo: lag,
                lag_hi: lag,
                react_lo: iv.saturating_sub(lag),
                react_hi: iv.saturating_sub(lag),
                ..PhaseGrid::default()
            }
        } else {
            PhaseGrid::default()
        };
    }
}

/// One direction of a connection (index 0: client → server, 1: server → client).
#[derive(Debug, Default)]
pub(super) struct Dir {
    // Wireshark's per-direction sequence state.
    pub base_set: bool,
    pub base: u32,
    pub nextseq: u32,
    pub nextseq_ts: u64,
    /// The frame that set `nextseq` (the original of a retransmission no longer listed).
    pub nextseq_frame: u64,
    pub maxseqtobeacked: u32,
    pub lastack: u32,
    pub lastack_ts: u64,
    /// When this side's ACK number last moved forward (a window update or a duplicate ACK
    /// repeats it without acknowledging anything).
    pub ack_advanced_ts: u64,
    /// The shortest time from one of this side's segments to the peer's ACK ending exactly at
    /// it (segments never resent): the round trip from the capture point to the peer, plus
    /// however long the peer held that ACK — an upper bound of the round trip that holds even
    /// when the handshake's is inflated (a slow SYN-ACK) or missing.
    pub min_ack_rtt: Option<u64>,
    pub window: u32,
    /// -1 unknown, -2 no scaling, ≥ 0 the shift.
    pub win_scale: i8,
    pub dupacknum: i32,
    pub lastsegmentflags: u32,
    pub unacked: VecDeque<Unacked>,
    /// MSS this side advertised in its SYN.
    pub mss_opt: Option<u16>,
    pub timestamps: bool,
    pub max_seg: u32,
    /// The most new data this side had unacknowledged at once (see [`DataSeg::in_flight`]).
    pub max_in_flight: u32,
    /// The largest segment of this side that fits an Ethernet frame (≤ 1460 bytes of data).
    pub max_eth_seg: u32,
    pub bytes: u64,
    pub fin: bool,
    /// This side's FIN was acknowledged by the peer.
    pub fin_acked: bool,
    // What the detectors look back at.
    /// The last new data segment this side sent.
    pub last_data: Option<DataSeg>,
    pub last_pkt_ts: u64,
    pub last_pkt_frame: u64,
    pub last_pkt_len: u32,
    pub last_pkt_ack: u32,
    pub last_pkt_pure_ack: bool,
    pub last_data_ts: u64,
    /// When this side last retransmitted: a release after a retransmission is loss recovery,
    /// not a delayed ACK or cork.
    pub last_rexmit_ts: Option<u64>,
    /// This side's previous segment, to tell a frame captured twice.
    pub last_seg_key: Option<SegKey>,
    /// A packet of this side was captured.
    pub seen: bool,
    /// This side's SYN laid its options out as Linux does (None: no SYN captured).
    pub linux_syn: Option<bool>,
    /// TSval of this side's last packet (TCP timestamps option).
    pub last_pkt_tsval: Option<u32>,
    /// This side's IPv4 identification: whether it sent packets the capture missed.
    pub ip_ids: IpIdCounter,
    /// The newest TSval of this side captured (RFC 7323 §5.2: TSval never goes back).
    pub max_tsval: Option<u32>,
    /// The TSvals of this side's latest captured packets (oldest first once full).
    pub recent_tsvals: [u32; RECENT_TSVALS],
    pub recent_len: u8,
    /// Capture time of the latest proof that packets of this side are missing from the
    /// capture: the peer echoed (TSecr) a TSval newer than any of this side's captured ones,
    /// so it received a packet of this side the capture never saw (RFC 7323 §4.3: TSecr
    /// echoes a TSval received).
    pub unseen_pkts_ts: Option<u64>,
    /// A timer retransmission not yet charged: the peer's ACK of it may prove it spurious,
    /// with a D-SACK (RFC 2883) or by echoing an earlier transmission's TSval (RFC 3522).
    pub pending_rto: Option<PendingRto>,
    /// The last timer retransmission charged, while a later D-SACK may still show it was
    /// not needed.
    pub charged_rto: Option<PendingRto>,
    /// A lone segment that ended a silence after packets sent unseen, waiting to be shown a
    /// timer's resend: nothing more from this side before the peer's ACK of it.
    pub pending_unseen: Option<PendingUnseen>,
    /// (time, frame) of this side's segment that filled the peer's window, while it waits.
    pub win_full_since: Option<(u64, u64)>,
    /// The full-size segment this side is resending by timer without an ACK.
    pub stuck: Option<Stuck>,
    /// The largest data segment of this side the peer acknowledged that got through on its
    /// first transmission.
    pub largest_acked: u32,
    /// The MTU an ICMP "fragmentation needed" / "packet too big" quoting this side's segment
    /// named: path MTU discovery works on this path.
    pub icmp_mtu: Option<u32>,
    /// The ranges of this side's latest retransmissions (relative sequence numbers).
    pub resent: [Option<(u32, u32)>; RESENT_RANGES],
    /// (time, frame) of the transmission up to which this side's RTO waits are already
    /// counted: a later resend of the same bytes is charged from there.
    pub rto_charged_until: (u64, u64),
    /// (time, frame) of this side's first zero-window advertisement still in force.
    pub zero_since: Option<(u64, u64)>,
    /// The rhythm of this side's bursts of new data.
    pub cadence: Cadence,
    /// This side's last data segment when it was one short line of text: (hash, length).
    pub last_line: Option<(u64, u32)>,
    /// Think times of this side's answers that landed on its [`PhaseGrid`] before the grid
    /// was shown to be its own clock: charged, and taken back once it is (at most
    /// [`PENDING_THINK`]).
    pub pending_think: Vec<PendingThink>,
}

/// How many think times are remembered for a grid's verdict.
pub(super) const PENDING_THINK: usize = 4;

/// A think time charged while its answer's grid was unproven.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingThink {
    pub frame: u64,
    pub think_ns: u64,
}

/// What identifies a frame as the same packet as the previous one of its side: (IPv4
/// identification, relative seq, ack, length, flags, raw window, TSval, capture time).
pub(super) type SegKey = (u16, u32, u32, u32, u8, u32, Option<u32>, u64);

/// TSvals of a side's latest packets remembered, to tell an echo of a packet never captured.
pub(super) const RECENT_TSVALS: usize = 8;

/// A silence that may have been a timer's after unseen sends (`detect/unseen_resend.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingUnseen {
    pub frame: u64,
    pub since_frame: u64,
    pub lost: u64,
    /// The silence before it, and the identification numbers skipped.
    pub wait: u64,
    pub unseen: u16,
    /// Relative sequence number just past the segment.
    pub end: u32,
}

/// A timer retransmission waiting for the peer's ACK of it before it is charged.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingRto {
    pub frame: u64,
    /// The transmission before it, which the time lost is measured from.
    pub since_frame: u64,
    pub since_ts: u64,
    pub lost: u64,
    /// Relative sequence range resent.
    pub seq: u32,
    pub end: u32,
    /// The resend's TSval: an ACK echoing an older one was sent for an earlier
    /// transmission (RFC 3522 §2).
    pub tsval: Option<u32>,
    /// Timer resends of these bytes so far (1: this is the first).
    pub resends: u32,
    /// The peer's newest TSval captured when the resend left, and that of its ACK of it:
    /// an echo of a TSval between them that the capture never saw is a packet the peer sent
    /// during the wait — perhaps the ACK whose absence made the resend a loss.
    pub peer_before: Option<u32>,
    pub peer_ack: Option<u32>,
}

/// Retransmitted ranges remembered per direction, to tell a segment that got through on its
/// first transmission.
pub(super) const RESENT_RANGES: usize = 8;

/// RTO stalls charged to the resends of a [`Stuck`] segment, taken back if it turns out to be
/// a path MTU black hole (that finding carries the wait).
pub(super) const STUCK_CHARGES: usize = 4;

/// A full-size segment resent by timer again and again without an ACK.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stuck {
    pub seq: u32,
    pub len: u32,
    pub first_ts: u64,
    pub first_frame: u64,
    pub resends: u32,
    /// Its latest transmission and when it left: (frame, time, length).
    pub last: (u64, u64, u32),
    /// Resent at full size often enough, while smaller segments passed: a black hole unless
    /// full-size packets are shown to pass.
    pub candidate: bool,
    /// RTO stalls charged to its resends: (frame, ns).
    pub rto_charges: [Option<(u64, u64)>; STUCK_CHARGES],
}

/// Where a connection is in its request/response cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxState {
    Idle,
    Request,
    Response,
}

/// The transaction in progress.
#[derive(Debug)]
pub(super) struct TxCur {
    pub req_frame: u64,
    pub req_start: u64,
    pub req_last: u64,
    pub resp_first: u64,
    pub resp_last: u64,
    pub resp_last_frame: u64,
    pub http_request: String,
    pub http_status: Option<u16>,
    /// The largest stall charged to it.
    pub stall: Option<StallKind>,
    pub stall_lost: u64,
    pub think: u64,
    /// latscope's own peer-protocol set-up (greeting, test request): neither a transaction
    /// nor think time of the application.
    pub setup: bool,
    /// The client sent again after a long silence with no answer between
    /// (`transaction::UNANSWERED_NS`): it was not waiting for one (a heartbeat, a stream of reports),
    /// so the server's next data is not shown to answer it.
    pub unanswered: bool,
    /// When the server's first acknowledgement of the request's last byte (without data)
    /// arrived.
    pub acked_ts: Option<u64>,
    /// (time, TSval) of the request's latest resend, while no answer has come.
    pub resent: Option<(u64, Option<u32>)>,
    /// A machine's request on a protocol otherwise paced by a person (an SSH key exchange).
    pub machine: bool,
}

/// One transmission of a SYN or SYN-ACK.
#[derive(Debug, Clone, Copy)]
pub(super) struct HsTx {
    pub ts: u64,
    pub frame: u64,
    pub tsval: Option<u32>,
    /// IPv4 identification (None: IPv6, or 0, which tells no copy from a resend).
    pub ip_id: Option<u16>,
}

/// A resent SYN or SYN-ACK held until the set-up shows whether it was needed.
#[derive(Debug, Clone, Copy)]
pub(super) struct SetUpWait {
    pub segment: HandshakeSegment,
    pub frame: u64,
    /// The transmission its wait is timed from.
    pub since_frame: u64,
    pub lost: u64,
    pub tsval: Option<u32>,
}

/// Resent SYNs and SYN-ACKs held at once, waiting for the set-up to complete.
pub(super) const SETUP_PENDING: usize = 4;

/// The connection's set-up: its SYNs and SYN-ACKs and the resends waiting for a verdict.
#[derive(Debug, Default)]
pub(super) struct SetUp {
    /// The client's latest SYN and the server's latest SYN-ACK.
    pub syn: Option<HsTx>,
    pub syn_ack: Option<HsTx>,
    /// (TSval, TSecr) of the latest SYN-ACKs: which SYN each answered.
    pub syn_acks: [Option<(u32, u32)>; SETUP_PENDING],
    /// A SYN arrived since the latest SYN-ACK: the next SYN-ACK answers it.
    pub syn_since_syn_ack: bool,
    /// The server answered the latest SYN with a RST.
    pub refused: bool,
    /// The client acknowledged a SYN-ACK.
    pub completed: bool,
    /// After that, the client sent its data again.
    pub client_resent: bool,
    /// The server sent something other than its SYN-ACK.
    pub taken: bool,
    /// (time, frame) up to which the set-up's waits are charged.
    pub charged_until: (u64, u64),
    pub pending: [Option<SetUpWait>; SETUP_PENDING],
}

/// One tracked TCP connection.
pub(super) struct Conn {
    pub id: u64,
    pub client: (Addr, u16),
    pub server: (Addr, u16),
    pub dirs: [Dir; 2],
    pub first_ts: u64,
    pub first_frame: u64,
    pub last_ts: u64,
    pub frames: u64,
    pub syn_ts: Option<u64>,
    pub synack_ts: Option<u64>,
    pub first_rtt: Option<u64>,
    pub rtt_to_server: Option<u64>,
    pub rtt_to_client: Option<u64>,
    pub closed_at: Option<u64>,
    pub rst: bool,
    pub counts: TcpCounts,
    pub tx_state: TxState,
    pub tx: Option<TxCur>,
    /// Transactions kept: the first `tx_keep` of the traced connection, else the
    /// [`MAX_TX_WORST`] that lost the most time, in order.
    pub txs: Vec<Transaction>,
    /// How many transactions `txs` keeps.
    pub tx_keep: usize,
    pub tx_count: u64,
    pub stall_lost: u64,
    pub client_isn: Option<u32>,
    /// When this connection expires (closed, plus its linger); queued under this deadline (a
    /// connection reopened, or whose last FIN got its ACK, is queued again).
    pub expire_at: Option<u64>,
    /// Capture time of the latest sign of segments missing from the capture (a gap in the
    /// sequence, or an ACK for data never seen).
    pub gap_ts: Option<u64>,
    /// Human-paced: a protocol of keystrokes and screen updates (see [`interactive_port`]).
    pub interactive: bool,
    /// The set-up's SYNs and SYN-ACKs.
    pub setup: SetUp,
    /// Think times charged on this connection so far: (count, ns), to be taken back at once if
    /// the server turns out to send on its own.
    pub think_charged: (u64, u64),
    /// The server's delayed-ACK timer, as a transaction of this connection showed it: the
    /// request acknowledged that late, the answer at least 10 ms after.
    pub server_ack_timer: Option<u64>,
    /// Bursts the server sent on its own: ≥ 1 s after its previous data with no data of the
    /// client's between (see `detect/think_time.rs`).
    pub server_pushes: u8,
    /// A segment no TCP stack sends was seen (SYN with FIN or RST, RFC 9293 §3.10.7): a
    /// scanner's or a fuzzer's packets, whose sequence and acknowledgement numbers mean
    /// nothing. No detector judges the connection.
    pub crafted: bool,
    /// The client sent again after a long silence with no answer between (see
    /// `transaction::UNANSWERED_NS`): its messages are not requests.
    pub client_unanswered: bool,
}

/// Ports of protocols whose traffic is paced by a person at a terminal or screen (telnet,
/// ssh, rlogin/rsh, X11, VNC, RDP): a keystroke and its echo, a screen update, are neither a
/// request and its answer nor a kernel timer.
pub(super) fn interactive_port(port: u16) -> bool {
    matches!(port, 22 | 23 | 513 | 514 | 3389 | 5900..=5909 | 6000..=6063)
}

/// The longest segment taken for one typed line.
const LINE_MAX: usize = 256;

/// `payload` as one line of text (printable ASCII ending in a newline, at most
/// [`LINE_MAX`] bytes): its hash and length.
pub(super) fn text_line(payload: &[u8]) -> Option<(u64, u32)> {
    let body = payload.strip_suffix(b"\n")?;
    let printable = |b: &u8| (0x20..0x7f).contains(b) || *b == b'\t' || *b == b'\r';
    if body.is_empty() || payload.len() > LINE_MAX || !body.iter().all(printable) {
        return None;
    }
    let mut h = FxHasher::default();
    std::hash::Hasher::write(&mut h, payload);
    Some((std::hash::Hasher::finish(&h), payload.len() as u32))
}

impl Conn {
    /// New data `line` (see [`text_line`]) from direction `d`: a line that repeats the one the
    /// peer just sent is a terminal's echo of what a person typed (a reverse shell on any port,
    /// `HackChallenge_Cmas2011.pcap`'s "del sqlite3.exe"), so the connection is human-paced.
    pub(super) fn on_line(&mut self, d: usize, line: Option<(u64, u32)>) {
        if line.is_some() && line == self.dirs[1 - d].last_line {
            self.interactive = true;
        }
        self.dirs[d].last_line = line;
    }

    /// A connection whose first captured segment went `src` → `dst` with flags `fl`.
    pub(super) fn new(
        id: u64,
        frame: u64,
        ts: u64,
        src: (Addr, u16),
        dst: (Addr, u16),
        fl: u8,
    ) -> Self {
        // Who is the client: the SYN sender; the SYN-ACK's receiver; else the higher port.
        let src_is_client = if fl & flags::SYN != 0 {
            fl & flags::ACK == 0
        } else {
            src.1 > dst.1
        };
        let (client, server) = if src_is_client {
            (src, dst)
        } else {
            (dst, src)
        };
        let mut dirs: [Dir; 2] = Default::default();
        for d in &mut dirs {
            d.win_scale = -1;
        }
        Conn {
            id,
            client,
            server,
            dirs,
            first_ts: ts,
            first_frame: frame,
            last_ts: ts,
            frames: 0,
            syn_ts: None,
            synack_ts: None,
            first_rtt: None,
            rtt_to_server: None,
            rtt_to_client: None,
            closed_at: None,
            rst: false,
            counts: TcpCounts::default(),
            tx_state: TxState::Idle,
            tx: None,
            txs: Vec::new(),
            tx_keep: MAX_TX_WORST,
            tx_count: 0,
            stall_lost: 0,
            client_isn: None,
            expire_at: None,
            gap_ts: None,
            interactive: interactive_port(server.1),
            crafted: false,
            setup: SetUp::default(),
            think_charged: (0, 0),
            server_pushes: 0,
            server_ack_timer: None,
            client_unanswered: false,
        }
    }

    /// Round trip between the capture point and the sender of direction `d` (from the
    /// handshake).
    pub(super) fn rtt_to_sender(&self, d: usize) -> Option<u64> {
        if d == 1 {
            self.rtt_to_server
        } else {
            self.rtt_to_client
        }
    }

    /// Round trip between the capture point and the receiver of direction `d`.
    pub(super) fn rtt_to_receiver(&self, d: usize) -> Option<u64> {
        self.rtt_to_sender(1 - d)
    }

    /// How soon after the peer's packet the sender's reaction can show at the capture point:
    /// two round trips to the sender plus 1 ms (2 ms without a handshake).
    pub(super) fn release_window(&self, d: usize) -> u64 {
        self.quickest_rtt_to_sender(d)
            .map_or(2_000_000, |v| v.saturating_mul(2).saturating_add(1_000_000))
    }

    /// The latest a segment the peer's packet released can show at the capture point: the
    /// peer's packet reaches the sender and the segment comes back, one round trip to the
    /// sender, plus half of it (at least 3 ms: a slow endpoint's reaction, a path's jitter)
    /// and 1 ms; 2 ms without a handshake. A segment later than that left on the sender's own time (a response 27 ms
    /// after the ACK reached the server across a 31.6 ms path, `iphone.pcap`), not on the
    /// ACK's — a stack sends what an ACK releases as it processes the ACK
    /// (`tcp_data_snd_check()` in Linux's `tcp_rcv_established()`).
    pub(super) fn release_latest(&self, d: usize) -> u64 {
        self.quickest_rtt_to_sender(d).map_or(2_000_000, |v| {
            v.saturating_add((v / 2).max(3_000_000))
                .saturating_add(1_000_000)
        })
    }

    /// Round trip between the capture point and the sender of direction `d`: the handshake's,
    /// lowered to the sender's ACKs of the peer's segments when they came back quicker
    /// (`suspicious-time.pcap`: a 700 ms SYN→SYN-ACK, then ACKs 0.2 ms after the data).
    pub(super) fn quickest_rtt_to_sender(&self, d: usize) -> Option<u64> {
        // Only ever lowered: an ACK sample alone also holds the peer's own delay (an OpenFlow
        // switch answering 100 ms later is no 100 ms path).
        let h = self.rtt_to_sender(d)?;
        Some(self.dirs[1 - d].min_ack_rtt.map_or(h, |a| h.min(a)))
    }

    /// Effective MSS of the sender of direction `d`: what the peer advertised, minus the
    /// 12 bytes of the timestamp option when both SYNs carried it (RFC 7323 §3.2: sent on every
    /// segment once negotiated), and no more than the largest segment this sender sent when
    /// that is Ethernet-sized (a path or a tunnel clamped it lower); without a captured
    /// handshake, see below.
    pub(super) fn sender_mss(&self, d: usize) -> u32 {
        let seen = self.dirs[d].max_seg;
        match self.dirs[1 - d].mss_opt {
            Some(m) => {
                let ts = self.dirs[d].timestamps && self.dirs[1 - d].timestamps;
                let mss = u32::from(m).saturating_sub(if ts { 12 } else { 0 });
                if (FULL_SEGMENT_MIN..mss).contains(&seen) {
                    seen
                } else {
                    mss
                }
            }
            // No handshake: the largest segment seen when it looks like a full segment of an
            // Ethernet-sized path (with or without options), else Ethernet's MSS; a segment
            // that large is never "small". A capture at an endpoint holds segments merged by
            // GRO (8 KB and more on a 1500-byte path): when Ethernet-sized full segments were
            // seen too, they are the path's, not the merged ones.
            None => match (self.dirs[d].max_eth_seg, seen) {
                (e, _) if e >= FULL_SEGMENT_MIN => e,
                (_, m) if m >= FULL_SEGMENT_MIN => m,
                _ => ETHERNET_MSS,
            },
        }
    }

    /// A packet of each side was captured (so far).
    pub(super) fn both_directions(&self) -> bool {
        self.dirs[0].seen && self.dirs[1].seen
    }

    /// What every detector that weighs both sides needs: both directions captured, and
    /// packets a TCP stack sent (not a crafted or fuzzed exchange).
    pub(super) fn judgeable(&self) -> bool {
        self.both_directions() && !self.crafted
    }

    /// No segment went missing from the capture since `ts`.
    pub(super) fn unbroken_since(&self, ts: u64) -> bool {
        self.gap_ts.is_none_or(|g| g < ts)
    }
}

/// "ip:port", with IPv6 addresses in brackets.
pub(super) fn endpoint(a: (Addr, u16)) -> String {
    match a.0.ip() {
        std::net::IpAddr::V4(v4) => format!("{v4}:{}", a.1),
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{}", a.1),
    }
}

/// The smallest segment taken for a full one of a path clamped below Ethernet's MSS (IPv6 over
/// a tunnel, PPPoE, a VPN): below this a segment is "small" whatever the largest seen.
pub(super) const FULL_SEGMENT_MIN: u32 = 1200;

/// The MSS of a 1500-byte Ethernet path without TCP options.
pub(super) const ETHERNET_MSS: u32 = 1460;

/// The connection table: a hash from flow key to a slot of a slab, so a connection can be
/// borrowed in place on the per-packet path, and a queue of closed connections in order of
/// closing, so expiry costs O(1) per connection (no walk over the table).
#[derive(Default)]
pub(super) struct FlowTable {
    table: HashMap<FlowKey, usize, BuildHasherDefault<FxHasher>>,
    slab: Vec<Option<(FlowKey, Conn)>>,
    free: Vec<usize>,
    /// (deadline, slot, connection id) of closed connections, in order of deadline: one queue
    /// per linger, so each stays ordered.
    closed: VecDeque<(u64, usize, u64)>,
    closed_unacked: VecDeque<(u64, usize, u64)>,
    /// Flow keys of expired connections and until when their stragglers belong to them.
    tombstones: HashMap<FlowKey, u64, BuildHasherDefault<FxHasher>>,
    /// The same, in order of expiry.
    tomb_order: VecDeque<(u64, FlowKey)>,
    /// Connections created so far (the next connection's id).
    pub next_id: u64,
    /// Connections tracked now.
    pub open: u64,
    /// The most tracked at once.
    pub peak_open: u64,
}

impl FlowTable {
    /// The slot of the connection `key` belongs to, if any.
    pub(super) fn slot(&self, key: &FlowKey) -> Option<usize> {
        self.table.get(key).copied()
    }

    /// The connection in `slot`.
    pub(super) fn get(&self, slot: usize) -> Option<&Conn> {
        self.slab.get(slot).and_then(Option::as_ref).map(|(_, c)| c)
    }

    /// The connection in `slot`, mutably.
    pub(super) fn get_mut(&mut self, slot: usize) -> Option<&mut Conn> {
        self.slab
            .get_mut(slot)
            .and_then(Option::as_mut)
            .map(|(_, c)| c)
    }

    /// Track a new connection under `key`; returns its slot.
    pub(super) fn insert(&mut self, key: FlowKey, c: Conn) -> usize {
        self.next_id = self.next_id.max(c.id + 1);
        let i = if let Some(i) = self.free.pop() {
            self.slab[i] = Some((key, c));
            i
        } else {
            self.slab.push(Some((key, c)));
            self.slab.len() - 1
        };
        self.table.insert(key, i);
        self.open += 1;
        self.peak_open = self.peak_open.max(self.open);
        i
    }

    /// Stop tracking `key`; returns its connection.
    pub(super) fn remove(&mut self, key: &FlowKey) -> Option<Conn> {
        let i = self.table.remove(key)?;
        let (_, c) = self.slab[i].take()?;
        self.free.push(i);
        self.open -= 1;
        Some(c)
    }

    /// After a segment of the connection in `slot`: queue it for expiry if it just closed (or
    /// its last FIN was just acknowledged, which shortens its linger).
    pub(super) fn note_closed(&mut self, slot: usize) {
        let Some((_, c)) = self.slab.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let Some(t) = c.closed_at else {
            c.expire_at = None;
            return;
        };
        let acked = c.rst || (c.dirs[0].fin_acked && c.dirs[1].fin_acked);
        let deadline = t.saturating_add(if acked {
            LINGER_NS
        } else {
            LINGER_UNACKED_FIN_NS
        });
        // Queued already: under this deadline, or (still unacknowledged) under the long one.
        if c.expire_at == Some(deadline) || (c.expire_at.is_some() && !acked) {
            return;
        }
        c.expire_at = Some(deadline);
        let q = if acked {
            &mut self.closed
        } else {
            &mut self.closed_unacked
        };
        q.push_back((deadline, slot, c.id));
    }

    /// The next closed connection past its linger at capture time `now`, removed from the
    /// table. Entries whose connection reopened, was queued again under another deadline or
    /// was replaced (port reuse) are dropped on the way. Capture time going backwards
    /// (concatenated files) only delays expiry.
    pub(super) fn expire_one(&mut self, now: u64) -> Option<Conn> {
        loop {
            let due = |q: &VecDeque<(u64, usize, u64)>| q.front().filter(|e| e.0 < now).copied();
            let (deadline, slot, id) = if let Some(e) = due(&self.closed) {
                self.closed.pop_front();
                e
            } else if let Some(e) = due(&self.closed_unacked) {
                self.closed_unacked.pop_front();
                e
            } else {
                return None;
            };
            let key = match self.slab.get(slot).and_then(Option::as_ref) {
                Some((k, c)) if c.id == id && c.expire_at == Some(deadline) => *k,
                _ => continue,
            };
            self.bury(key, now);
            return self.remove(&key);
        }
    }

    /// Remember expired flow `key` at capture time `now`; forget what is past its time.
    fn bury(&mut self, key: FlowKey, now: u64) {
        while let Some(&(t, k)) = self.tomb_order.front() {
            if t >= now && self.tomb_order.len() < MAX_TOMBSTONES {
                break;
            }
            self.tomb_order.pop_front();
            if self.tombstones.get(&k) == Some(&t) {
                self.tombstones.remove(&k);
            }
        }
        let until = now.saturating_add(TOMBSTONE_NS);
        self.tombstones.insert(key, until);
        self.tomb_order.push_back((until, key));
    }

    /// A segment of flow `key` (no live connection has it) at `now` that belongs to a
    /// connection already expired: its tombstone still stands.
    pub(super) fn straggler(&self, key: &FlowKey, now: u64) -> bool {
        self.tombstones.get(key).is_some_and(|&t| now <= t)
    }

    /// Every connection still tracked, in connection order, removed from the table.
    pub(super) fn drain(&mut self) -> Vec<Conn> {
        self.table.clear();
        self.free.clear();
        self.closed.clear();
        self.closed_unacked.clear();
        self.open = 0;
        let mut conns: Vec<Conn> = self.slab.drain(..).flatten().map(|(_, c)| c).collect();
        conns.sort_by_key(|c| c.id);
        conns
    }
}

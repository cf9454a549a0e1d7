//! One TCP segment as the analysis passes it on: relative numbers, the options read, what the
//! sequence analysis said of it, and what the transaction tracker and the look-back state
//! found, so every detector reads the same facts.

use crate::packet::flags;

use super::flow::DataSeg;
use super::ipid::IdEvidence;

// Wireshark's per-segment analysis flags.
pub(super) const A_RETRANS: u32 = 1 << 0;
pub(super) const A_LOST: u32 = 1 << 1;
pub(super) const A_ACK_LOST: u32 = 1 << 2;
pub(super) const A_KEEP_ALIVE: u32 = 1 << 3;
pub(super) const A_DUP_ACK: u32 = 1 << 4;
pub(super) const A_ZERO_WIN: u32 = 1 << 5;
pub(super) const A_ZWP: u32 = 1 << 6;
pub(super) const A_ZWP_ACK: u32 = 1 << 7;
pub(super) const A_KA_ACK: u32 = 1 << 8;
pub(super) const A_OOO: u32 = 1 << 9;
pub(super) const A_FAST: u32 = 1 << 10;
pub(super) const A_WIN_UPDATE: u32 = 1 << 11;
pub(super) const A_WIN_FULL: u32 = 1 << 12;
pub(super) const A_SPURIOUS: u32 = 1 << 14;
/// Any kind of resent (or reordered) segment: not new data.
pub(super) const A_RESENT: u32 = A_RETRANS | A_FAST | A_SPURIOUS | A_OOO;

/// One TCP segment as the detectors see it.
pub(super) struct Segment<'p> {
    pub frame: u64,
    pub ts: u64,
    /// Direction: 0 client → server, 1 server → client.
    pub d: usize,
    /// Relative sequence and acknowledgement numbers (as Wireshark shows them).
    pub seq: u32,
    pub ack: u32,
    /// Payload length.
    pub len: u32,
    pub flags: u8,
    /// The window field as sent.
    pub raw_win: u32,
    /// The window after scaling.
    pub window: u32,
    pub payload: &'p [u8],
    /// The sequence analysis' flags (`seq::A_*`).
    pub analysis: u32,
    /// For a timer retransmission: (time, frame) of the original transmission.
    pub rto_since: Option<(u64, u64)>,
    /// New in-order data (not resent, not reordered).
    pub new_data: bool,
    /// For new data: the sender's previous data segment, unless it retransmitted since (a
    /// release after a retransmission is loss recovery).
    pub held: Option<DataSeg>,
    /// For new server data: the transaction's first response byte.
    pub first_response: Option<FirstResponse>,
    /// An exact copy of this side's previous frame: captured twice, not sent twice.
    /// Detectors never see one.
    pub duplicate: bool,
    /// IPv4 identification (None for IPv6).
    pub ip_id: Option<u16>,
    /// What the sender's identification says of packets it sent since its previous captured
    /// one.
    pub id_evidence: IdEvidence,
    /// Its TSecr echoes a TSval of the peer's no captured packet carried: the capture missed a
    /// packet of the peer's (RFC 7323 §4.3: an echo is of a TSval received).
    pub echoes_unseen: bool,
    /// TCP timestamps option: TSval and TSecr.
    pub tsval: Option<u32>,
    pub tsecr: Option<u32>,
    /// A D-SACK block (relative to the peer's sequence numbers): data the sender of this
    /// ACK received twice.
    pub dsack: Option<(u32, u32)>,
}

impl Segment<'_> {
    /// SYN or FIN: occupies one sequence number.
    pub(super) fn syn_or_fin(&self) -> bool {
        self.flags & (flags::SYN | flags::FIN) != 0
    }
}

/// The first response byte of a transaction arrived.
#[derive(Debug, Clone, Copy)]
pub(super) struct FirstResponse {
    /// Frame of the first request byte.
    pub req_frame: u64,
    /// Last request byte → first response byte, minus the round trip to the server.
    pub think_ns: u64,
    /// What of it the server's acknowledgement of the request leaves proven: when that
    /// acknowledgement came late, the time up to it may have been the request's or the
    /// acknowledgement's way (`think_ns` − this), and only the time after it is the server's
    /// for sure.
    pub proven_ns: u64,
}

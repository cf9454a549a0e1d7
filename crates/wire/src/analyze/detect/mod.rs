//! The stall detectors, one file each, behind one small interface: after the flow tracker,
//! the sequence analysis and the transaction tracker have seen a segment, every registered
//! [`Detector`] looks at it (with the connection's state) and reports stalls to a [`Sink`].
//!
//! Adding a detector: a new file here with a unit struct implementing [`Detector`], a line in
//! [`DETECTORS`], and (if it reports a new kind) a [`StallKind`] variant with its explanation.

mod cork;
mod cwnd_limited;
mod delayed_ack;
mod pmtu;
mod rto;
mod think_time;
mod window_full;
mod zero_window;

use latscope_core::timer::TcpTimer;

use crate::packet::flags;
use crate::report::{PmtuEvidence, StallExample, StallFinding, StallKind};

use super::explain::explain;
use super::flow::{Conn, DataSeg};
use super::ladder::{Notes, Trace};
use super::transaction::FirstResponse;

/// Every detector, in the order they look at a segment (which is also the order their stalls
/// are charged to the transaction in progress).
pub(super) static DETECTORS: &[&dyn Detector] = &[
    // Before the RTO detector: once a black hole is recognised its resends are its own.
    &pmtu::PmtuBlackHole,
    &rto::Rto,
    &delayed_ack::DelayedAckRelease,
    &cork::Cork,
    &think_time::ThinkTime,
    &zero_window::ZeroWindow,
    &cwnd_limited::CwndLimited,
    &window_full::WindowFull,
];

/// The connection ends: what a detector still held back is settled.
pub(super) fn close(c: &mut Conn, out: &mut Sink<'_>) {
    rto::flush(c, out);
}

/// A stall detector.
pub(super) trait Detector: Sync {
    /// Look at segment `s` of connection `c` (whose state is still as it was before `s`, except
    /// for the sequence analysis and the transaction tracker) and report stalls to `out`.
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>);
}

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

/// The shortest stall attributed to a delayed ACK: the start of the shortest delayed-ACK
/// timer band (a coarse ~20 ms stack), from the one TCP timer vocabulary.
pub(super) fn delayed_ack_floor_ns() -> u64 {
    TcpTimer::ALL
        .into_iter()
        .filter(|t| t.is_delayed_ack())
        .map(|t| *t.band_ns().start())
        .min()
        .unwrap_or(0)
}

/// The longest ACK delay a delayed-ACK timer explains: the end of the longest delayed-ACK band
/// (Linux and Windows delay ≤ 200 ms; RFC 1122 §4.2.3.2 allows at most 500 ms, which no
/// common stack uses). A later ACK is a slow receiver, not its timer.
pub(super) fn delayed_ack_ceiling_ns() -> u64 {
    TcpTimer::ALL
        .into_iter()
        .filter(|t| t.is_delayed_ack())
        .map(|t| *t.band_ns().end())
        .max()
        .unwrap_or(0)
}

#[derive(Default, Clone)]
struct FindingAcc {
    count: u64,
    lost: u64,
    examples: Vec<StallExample>,
}

/// How many examples each finding keeps unless asked otherwise.
pub const DEFAULT_EXAMPLES: usize = 5;

/// Stalls found so far, per kind.
pub(super) struct Stalls {
    acc: [FindingAcc; StallKind::ALL.len()],
    /// The path MTU black hole resent most often.
    pub pmtu: Option<PmtuEvidence>,
    /// How many examples each kind keeps (the largest).
    pub examples_cap: usize,
}

impl Default for Stalls {
    fn default() -> Self {
        Stalls {
            acc: Default::default(),
            pmtu: None,
            examples_cap: DEFAULT_EXAMPLES,
        }
    }
}

impl Stalls {
    /// The findings, ranked by time lost, each with its largest examples.
    pub(super) fn findings(&self) -> Vec<StallFinding> {
        let mut findings: Vec<StallFinding> = StallKind::ALL
            .iter()
            .filter(|k| self.acc[k.index()].count > 0)
            .map(|&k| {
                let acc = &self.acc[k.index()];
                let mut examples = acc.examples.clone();
                examples.sort_by(|a, b| b.lost_ns.cmp(&a.lost_ns).then(a.frame.cmp(&b.frame)));
                StallFinding {
                    kind: k,
                    title: k.label().into(),
                    count: acc.count,
                    lost_ns: acc.lost,
                    examples,
                    explanation: explain(k),
                }
            })
            .collect();
        findings.sort_by_key(|f| std::cmp::Reverse(f.lost_ns));
        findings
    }
}

/// Where detectors report: the stall tallies, and the ladder when the connection is traced.
pub(super) struct Sink<'a> {
    pub stalls: &'a mut Stalls,
    pub notes: &'a mut Notes,
    pub trace: &'a mut Trace,
}

impl Sink<'_> {
    /// A stall of `kind` on `c` that began at frame `since` and ended at `frame`, costing
    /// `lost` ns: charged to the connection, its transaction in progress, and the finding.
    pub(super) fn stall(
        &mut self,
        c: &mut Conn,
        kind: StallKind,
        frame: u64,
        since: u64,
        lost: u64,
    ) {
        c.stall_lost = c.stall_lost.saturating_add(lost);
        if let Some(t) = &mut c.tx {
            // The largest stall names the transaction's cause.
            if t.stall.is_none() || lost > t.stall_lost {
                t.stall = Some(kind);
            }
            t.stall_lost = t.stall_lost.saturating_add(lost);
        }
        let cap = self.stalls.examples_cap;
        let acc = &mut self.stalls.acc[kind.index()];
        acc.count += 1;
        acc.lost = acc.lost.saturating_add(lost);
        let ex = StallExample {
            conn: c.id,
            frame,
            since_frame: since,
            lost_ns: lost,
        };
        if acc.examples.len() < cap {
            acc.examples.push(ex);
        } else if let Some(min) = acc.examples.iter_mut().min_by_key(|e| e.lost_ns) {
            if min.lost_ns < lost {
                *min = ex;
            }
        }
    }

    /// Take back a stall charged at `frame` of `c` that later evidence showed was none.
    pub(super) fn retract(&mut self, c: &mut Conn, kind: StallKind, frame: u64, lost: u64) {
        c.stall_lost = c.stall_lost.saturating_sub(lost);
        let acc = &mut self.stalls.acc[kind.index()];
        acc.count = acc.count.saturating_sub(1);
        acc.lost = acc.lost.saturating_sub(lost);
        acc.examples.retain(|e| e.conn != c.id || e.frame != frame);
    }

    /// The figures of a path MTU black hole (the one resent most often is kept).
    pub(super) fn pmtu(&mut self, ev: PmtuEvidence) {
        if self
            .stalls
            .pmtu
            .as_ref()
            .is_none_or(|p| p.resends < ev.resends)
        {
            self.stalls.pmtu = Some(ev);
        }
    }

    /// Mark an earlier ladder row (only when tracing).
    pub(super) fn note_on(&mut self, frame: u64, note: impl FnOnce() -> String) {
        if self.notes.on {
            self.trace.note_on(frame, note());
        }
    }
}

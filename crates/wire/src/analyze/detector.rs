//! What every stall detector is written against: the [`Detector`] interface, the [`Sink`] it
//! reports to, and the [`Stalls`] tallied per kind. The detectors (one file each under
//! `detect/`) and their registry sit above this; nothing here knows any detector.

use latscope_core::model::analyze::{
    HandshakeResends, HandshakeSegment, PmtuEvidence, StallExample, StallFinding, StallKind,
    Undecided, UndecidedFinding,
};

use super::explain::explain;
use super::flow::Conn;
use super::ladder::{Notes, Trace};
use super::limits::DEFAULT_EXAMPLES;
use super::segment::Segment;

/// A stall detector.
pub(super) trait Detector: Sync {
    /// Look at segment `s` of connection `c` (whose state is still as it was before `s`, except
    /// for the sequence analysis and the transaction tracker) and report stalls to `out`.
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>);

    /// Connection `c` ends: settle what this detector still held back.
    fn close(&self, _c: &mut Conn, _out: &mut Sink<'_>) {}
}

#[derive(Default, Clone)]
struct FindingAcc {
    count: u64,
    lost: u64,
    examples: Vec<StallExample>,
}

impl FindingAcc {
    /// Count one more, keeping the `cap` largest examples.
    fn add(&mut self, ex: StallExample, cap: usize) {
        self.count += 1;
        self.lost = self.lost.saturating_add(ex.lost_ns);
        if self.examples.len() < cap {
            self.examples.push(ex);
        } else if let Some(min) = self.examples.iter_mut().min_by_key(|e| e.lost_ns) {
            if min.lost_ns < ex.lost_ns {
                *min = ex;
            }
        }
    }

    /// The examples, largest first.
    fn ranked(&self) -> Vec<StallExample> {
        let mut examples = self.examples.clone();
        examples.sort_by(|a, b| b.lost_ns.cmp(&a.lost_ns).then(a.frame.cmp(&b.frame)));
        examples
    }
}

/// Stalls found so far, per kind.
pub(super) struct Stalls {
    acc: [FindingAcc; StallKind::ALL.len()],
    /// What the capture could not decide, per kind and reason.
    undecided: [[FindingAcc; Undecided::ALL.len()]; StallKind::ALL.len()],
    /// The path MTU black hole resent most often.
    pub pmtu: Option<PmtuEvidence>,
    /// What the set-ups' resent SYNs and SYN-ACKs cost, by segment.
    pub handshake: HandshakeResends,
    /// How many examples each kind keeps (the largest).
    pub examples_cap: usize,
}

impl Default for Stalls {
    fn default() -> Self {
        Stalls {
            acc: Default::default(),
            undecided: Default::default(),
            pmtu: None,
            handshake: HandshakeResends::default(),
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
                StallFinding {
                    kind: k,
                    title: k.label().into(),
                    count: acc.count,
                    lost_ns: acc.lost,
                    examples: acc.ranked(),
                    explanation: explain(k),
                }
            })
            .collect();
        findings.sort_by_key(|f| std::cmp::Reverse(f.lost_ns));
        findings
    }

    /// What the capture could not decide, by kind and reason, the most costly first.
    pub(super) fn undecided(&self) -> Vec<UndecidedFinding> {
        let mut v: Vec<UndecidedFinding> = StallKind::ALL
            .iter()
            .flat_map(|&k| Undecided::ALL.iter().map(move |&r| (k, r)))
            .filter(|(k, r)| self.undecided[k.index()][r.index()].count > 0)
            .map(|(kind, reason)| {
                let acc = &self.undecided[kind.index()][reason.index()];
                UndecidedFinding {
                    kind,
                    reason,
                    count: acc.count,
                    lost_ns: acc.lost,
                    examples: acc.ranked(),
                }
            })
            .collect();
        v.sort_by_key(|f| std::cmp::Reverse(f.lost_ns));
        v
    }
}

/// The example a stall of connection `c` leaves: at `frame`, waiting since `since`, `lost` ns.
fn example(c: &Conn, frame: u64, since: u64, lost: u64) -> StallExample {
    StallExample {
        conn: c.id,
        frame,
        since_frame: since,
        lost_ns: lost,
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
        let ex = example(c, frame, since, lost);
        self.stalls.acc[kind.index()].add(ex, cap);
    }

    /// A stall of `kind` the capture cannot decide, for `reason`: counted apart, never
    /// charged to the connection or its transaction. `lost` is the most it could have cost.
    pub(super) fn undecided(
        &mut self,
        c: &Conn,
        kind: StallKind,
        reason: Undecided,
        frame: u64,
        since: u64,
        lost: u64,
    ) {
        let cap = self.stalls.examples_cap;
        let ex = example(c, frame, since, lost);
        self.stalls.undecided[kind.index()][reason.index()].add(ex, cap);
        self.notes.push(|| {
            format!(
                "undecided {}: {} ({} at most)",
                kind.label(),
                reason.label(),
                super::ladder::fmt_ms(lost)
            )
        });
    }

    /// Take back a stall charged at `frame` of `c` that later evidence showed was none.
    pub(super) fn retract(&mut self, c: &mut Conn, kind: StallKind, frame: u64, lost: u64) {
        c.stall_lost = c.stall_lost.saturating_sub(lost);
        let acc = &mut self.stalls.acc[kind.index()];
        acc.count = acc.count.saturating_sub(1);
        acc.lost = acc.lost.saturating_sub(lost);
        acc.examples.retain(|e| e.conn != c.id || e.frame != frame);
    }

    /// A resent `segment` kept a set-up waiting `lost` ns (its stall is charged apart).
    pub(super) fn set_up_wait(&mut self, segment: HandshakeSegment, lost: u64) {
        let t = match segment {
            HandshakeSegment::Syn => &mut self.stalls.handshake.syn,
            HandshakeSegment::SynAck => &mut self.stalls.handshake.syn_ack,
        };
        t.add(lost);
    }

    /// Take back every stall of `kind` charged to `c` so far (`count` of them, `lost` ns in
    /// all): later evidence showed none was one.
    pub(super) fn retract_conn(&mut self, c: &mut Conn, kind: StallKind, count: u64, lost: u64) {
        c.stall_lost = c.stall_lost.saturating_sub(lost);
        let acc = &mut self.stalls.acc[kind.index()];
        acc.count = acc.count.saturating_sub(count);
        acc.lost = acc.lost.saturating_sub(lost);
        acc.examples.retain(|e| e.conn != c.id);
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

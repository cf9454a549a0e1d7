//! A packet capture of the target's port while one request at a time runs, through latscope
//! analyze's stall detectors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use latscope_core::model::diagnose::StepName;
use latscope_wire::analyze::Analysis;
use latscope_wire::report::StallKind;

use super::syn_resends::SynResends;
use super::trains::{self, Trains};
use super::{NotRun, Observe, requests_target};
use crate::collect::Context;
use crate::evidence::{
    Bottleneck, CaptureEvidence, Evidence, LinkRate, NagleStalls, RateSource, StallExample,
    StallTotal,
};

pub struct Capture;

/// The capture thread and its stop flag.
pub struct Capturing {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<CaptureEvidence, String>>,
}

impl Observe for Capture {
    const NAME: StepName = StepName::PacketCapture;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::OneRequest;
    type Running = Capturing;
    type Output = CaptureEvidence;

    fn start(cx: &Context, ev: &Evidence) -> Result<Capturing, NotRun> {
        requests_target(ev)?;
        let stop = Arc::new(AtomicBool::new(false));
        let filter = format!("tcp port {}", cx.plan.addr.port());
        let limit = cx.plan.duration + Duration::from_secs(5);
        let flag = stop.clone();
        let port = cx.plan.addr.port();
        let thread = std::thread::spawn(move || capture_and_analyze(&filter, port, &flag, limit));
        Ok(Capturing { stop, thread })
    }

    fn finish(_cx: &Context, c: Capturing) -> Result<CaptureEvidence, NotRun> {
        c.stop.store(true, Ordering::Relaxed);
        match c.thread.join() {
            Ok(Ok(e)) => Ok(e),
            // Typically no capture privilege: the other steps still stand.
            Ok(Err(e)) => Err(NotRun::Skipped(e)),
            Err(_) => Err(NotRun::Failed("the capture thread panicked".into())),
        }
    }

    fn detail(_cx: &Context, c: &CaptureEvidence) -> String {
        format!(
            "{} frames, {} transactions, {} Nagle × delayed-ACK stalls, {} retransmissions{}; {}",
            c.frames,
            c.transactions,
            c.nagle.map(|n| n.total.count).unwrap_or(0),
            c.retransmissions,
            c.syn_resends
                .map(|s| format!(
                    " (and {} resent, {} of handshakes waiting)",
                    latscope_core::units::count(s.count, "SYN or SYN-ACK"),
                    latscope_core::units::format_ns(s.lost_ns as f64)
                ))
                .unwrap_or_default(),
            match c.train_rate_bps {
                Some((r, pairs)) => format!(
                    "packet trains of the responses: bottleneck ≈ {} ({pairs} segment pairs)",
                    latscope_core::units::format_bitrate(r)
                ),
                None => format!(
                    "bottleneck rate unavailable: the responses ({} B on the wire each) are too short for a packet-train estimate (needs {} pairs of back-to-back full segments)",
                    c.wire_bytes_per_transaction.unwrap_or(0),
                    trains::MIN_PAIRS
                ),
            }
        )
    }

    fn store(ev: &mut Evidence, c: CaptureEvidence) {
        // The responses' packet trains measure the server → client direction (the bulk
        // transfer, when there is one, the other).
        if let (Some((rate_bps, pairs)), Some(wire_bytes)) =
            (c.train_rate_bps, c.wire_bytes_per_transaction)
        {
            let b = ev.bottleneck.get_or_insert_with(Bottleneck::default);
            b.down = Some(LinkRate {
                rate_bps,
                source: RateSource::PacketTrains { pairs },
                wire_bytes,
            });
        }
        ev.capture = Some(c);
    }
}

/// Capture `filter` on every interface while `stop` is clear (at most `limit`) and run latscope
/// analyze's detectors over it.
fn capture_and_analyze(
    filter: &str,
    port: u16,
    stop: &AtomicBool,
    limit: Duration,
) -> Result<CaptureEvidence, String> {
    let cfg = latscope_capture::CaptureConfig {
        iface: "any".into(),
        filter: filter.into(),
        snaplen: 256,
        buffer_bytes: 8 << 20,
    };
    let mut cap = latscope_capture::LiveCapture::open(&cfg).map_err(|e| format!("{e:#}"))?;
    let link = cap.link_type();
    let mut analyzer = latscope_wire::Analyzer::new(latscope_wire::AnalyzeOptions {
        trace_conn: None,
        top: 1,
    });
    let mut trains = Trains::new(port);
    let mut syns = SynResends::default();
    let mut frame = 0u64;
    cap.run(stop, None, Some(limit), |ts, _orig, data| {
        frame += 1;
        let d = latscope_wire::decode(link, data);
        if let Ok(d) = &d {
            trains.push(ts, d);
            syns.push(ts, d);
        }
        analyzer.push(frame, ts, d);
        Ok(())
    })
    .map_err(|e| format!("{e:#}"))?;
    let analysis = analyzer.finish();
    let mut ev = set_apart(evidence_of(&analysis), syns.total());
    ev.train_rate_bps = trains.rate();
    ev.wire_bytes_per_transaction = trains.wire_bytes_per(analysis.transactions);
    Ok(ev)
}

/// The analysis counts resent SYNs with the data's retransmissions (as tshark does), and their
/// waits as timer stalls (every SYN resend is one): set them apart.
fn set_apart(mut ev: CaptureEvidence, syn: Option<StallTotal>) -> CaptureEvidence {
    let Some(syn) = syn else {
        return ev;
    };
    ev.retransmissions = ev.retransmissions.saturating_sub(syn.count);
    ev.rto_stalls = ev.rto_stalls.and_then(|r| {
        let left = StallTotal {
            count: r.count.saturating_sub(syn.count),
            lost_ns: r.lost_ns.saturating_sub(syn.lost_ns),
        };
        (left.count > 0).then_some(left)
    });
    ev.syn_resends = Some(syn);
    ev
}

/// The figures diagnose's rules use from an analysis.
fn evidence_of(r: &Analysis) -> CaptureEvidence {
    let find = |k: StallKind| r.findings.iter().find(|f| f.kind == k);
    let total = |k: StallKind| {
        find(k).map(|f| StallTotal {
            count: f.count,
            lost_ns: f.lost_ns,
        })
    };
    CaptureEvidence {
        frames: r.frames,
        transactions: r.transactions,
        nagle: find(StallKind::NagleDelayedAck).map(|f| NagleStalls {
            total: StallTotal {
                count: f.count,
                lost_ns: f.lost_ns,
            },
            example: f
                .examples
                .first()
                .map(|x| StallExample {
                    conn: x.conn,
                    since_frame: x.since_frame,
                    frame: x.frame,
                })
                .unwrap_or_default(),
        }),
        think: total(StallKind::ThinkTime),
        retransmissions: r.counts.retransmission + r.counts.fast_retransmission,
        rto_stalls: total(StallKind::RtoRetransmission),
        syn_resends: None,
        delayed_ack: total(StallKind::DelayedAck),
        train_rate_bps: None,
        wire_bytes_per_transaction: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resent_syns_are_not_the_datas_retransmissions() {
        let stall = |count, lost_ns| StallTotal { count, lost_ns };
        let ev = CaptureEvidence {
            frames: 3,
            retransmissions: 2,
            rto_stalls: Some(stall(2, 2_042_000_000)),
            ..CaptureEvidence::default()
        };
        let ev = set_apart(ev, Some(stall(2, 2_042_000_000)));
        assert_eq!(ev.retransmissions, 0);
        assert_eq!(ev.rto_stalls, None);
        assert_eq!(ev.syn_resends, Some(stall(2, 2_042_000_000)));
        // Data lost too: what is left is the data's.
        let ev = CaptureEvidence {
            retransmissions: 9,
            rto_stalls: Some(stall(5, 3_300_000_000)),
            ..CaptureEvidence::default()
        };
        let ev = set_apart(ev, Some(stall(1, 1_000_000_000)));
        assert_eq!(ev.retransmissions, 8);
        assert_eq!(ev.rto_stalls, Some(stall(4, 2_300_000_000)));
        assert_eq!(set_apart(ev.clone(), None), ev);
    }
}

//! A packet capture of the target's port while one request at a time runs, through latscope
//! analyze's stall detectors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use latscope_core::model::analyze::{Analysis, StallKind};
use latscope_core::model::diagnose::StepName;

use super::delivery::Delivery;
use super::step::{NotRun, Observe, requests_target};
use super::trains::{self, Trains};
use crate::context::Context;
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
        let path_rtt = ev.path.as_ref().map(|p| p.p50_ns);
        let thread =
            std::thread::spawn(move || capture_and_analyze(&filter, port, path_rtt, &flag, limit));
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
            "{} frames, {} transactions, {} Nagle × delayed-ACK stalls, {} retransmissions{}{}{}; {}",
            c.frames,
            c.transactions,
            c.nagle.map(|n| n.total.count).unwrap_or(0),
            c.retransmissions,
            match (
                c.window_full_segments,
                c.window_full.filter(|w| w.count > 0)
            ) {
                (0, None) => String::new(),
                (n, None) => format!(
                    ", {} filled the receiver's window",
                    latscope_core::units::count(n, "segment")
                ),
                (n, Some(w)) => {
                    let (waits, waited) = count_and_time(w, "wait");
                    format!(
                        ", {} filled the receiver's window ({waits} of 1 ms or more: {waited})",
                        latscope_core::units::count(n, "segment")
                    )
                }
            },
            c.unseen_loss
                .map(|u| {
                    let (sends, lost) = count_and_time(u, "send");
                    format!(", {sends} lost before the capture and sent again unseen ({lost})")
                })
                .unwrap_or_default(),
            c.syn_resends
                .map(|s| {
                    let (resent, waiting) = count_and_time(s, "SYN or SYN-ACK");
                    format!(" (and {resent} resent, {waiting} of handshakes waiting)")
                })
                .unwrap_or_default(),
            match (c.delivery_rate_bps, c.train_rate_bps) {
                (Some((r, n)), _) => format!(
                    "large responses delivered at {} once settled ({})",
                    latscope_core::units::format_bitrate(r),
                    latscope_core::units::count(n, "response")
                ),
                (None, Some((r, pairs))) => format!(
                    "packet trains of the responses: bottleneck ≈ {} ({pairs} segment pairs)",
                    latscope_core::units::format_bitrate(r)
                ),
                (None, None) => format!(
                    "bottleneck rate unavailable: the responses ({} B on the wire each) are too short for a packet-train estimate (needs {} pairs of back-to-back full segments)",
                    c.wire_bytes_per_transaction.unwrap_or(0),
                    trains::MIN_PAIRS
                ),
            }
        )
    }

    fn store(ev: &mut Evidence, c: CaptureEvidence) {
        // The responses measure the server → client direction (the bulk transfer, when there
        // is one, the other): the rate large responses got once settled where there were
        // some (what a shaped link leaves them), else their packet trains (the link's
        // capacity).
        let down = match (c.delivery_rate_bps, c.train_rate_bps) {
            (Some((r, responses)), _) => Some((r, RateSource::Delivery { responses })),
            (None, Some((r, pairs))) => Some((r, RateSource::PacketTrains { pairs })),
            (None, None) => None,
        };
        if let (Some((rate_bps, source)), Some(wire_bytes)) = (down, c.wire_bytes_per_transaction) {
            ev.bottleneck.get_or_insert_with(Bottleneck::default).down = Some(LinkRate {
                rate_bps,
                source,
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
    path_rtt: Option<u64>,
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
    let mut delivery = Delivery::new(port, path_rtt);
    let mut frame = 0u64;
    cap.run(stop, None, Some(limit), |ts, _orig, data| {
        frame += 1;
        let d = latscope_wire::decode(link, data);
        if let Ok(d) = &d {
            trains.push(ts, d);
            delivery.push(ts, d);
        }
        analyzer.push(frame, ts, d);
        Ok(())
    })
    .map_err(|e| format!("{e:#}"))?;
    let analysis = analyzer.finish();
    let resends = analysis.handshake_resends.total();
    let syn = (resends.count > 0).then_some(StallTotal {
        count: resends.count,
        lost_ns: resends.waited_ns,
    });
    let mut ev = set_apart(evidence_of(&analysis), syn);
    ev.train_rate_bps = trains.rate();
    ev.delivery_rate_bps = delivery.rate();
    ev.wire_bytes_per_transaction = trains.wire_bytes_per(analysis.transactions);
    Ok(ev)
}

/// The analysis counts resent SYNs and SYN-ACKs with the data's retransmissions, as tshark
/// does, but keeps them out of its timer stalls (the wire analyzer's own handshake finding,
/// `syn_retransmission`): set them apart from the retransmissions too.
fn set_apart(mut ev: CaptureEvidence, syn: Option<StallTotal>) -> CaptureEvidence {
    let Some(syn) = syn else {
        return ev;
    };
    ev.retransmissions = ev.retransmissions.saturating_sub(syn.count);
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
        unseen_loss: total(StallKind::UnseenLoss),
        syn_resends: None,
        delayed_ack: total(StallKind::DelayedAck),
        window_full: window_full(
            total(StallKind::ReceiveWindowFull),
            total(StallKind::ZeroWindow),
        ),
        window_full_segments: r.counts.window_full + r.counts.zero_window,
        train_rate_bps: None,
        delivery_rate_bps: None,
        wire_bytes_per_transaction: None,
    }
}

/// Waits for the receiver's window: a full window and a zero window are the same limit, the
/// receiver's buffer.
fn window_full(full: Option<StallTotal>, zero: Option<StallTotal>) -> Option<StallTotal> {
    match (full, zero) {
        (None, None) => None,
        (a, b) => {
            let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
            Some(StallTotal {
                count: a.count + b.count,
                lost_ns: a.lost_ns + b.lost_ns,
            })
        }
    }
}

/// A total of stalls in words: "3 sends", "1.2ms".
fn count_and_time(t: StallTotal, what: &str) -> (String, String) {
    (
        latscope_core::units::count(t.count, what),
        latscope_core::units::format_ns(t.lost_ns as f64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's seat against a URL behind a 10 Mbit/s link: no bulk transfer, no server
    /// counters, responses of 100 KB too paced for packet trains to say more than the
    /// delivery rate. The capture alone makes it the path's bandwidth, not the server's time.
    #[test]
    fn a_slow_link_seen_from_the_client_alone_is_bandwidth() {
        use latscope_core::Summary;
        use latscope_core::model::diagnose::{RuleId, Side};
        let s = |p50_ns| Summary {
            count: 100,
            p50_ns,
            p99_ns: p50_ns * 11 / 10,
            ..Summary::default()
        };
        // This host's own stack measured and ruled out (connects as fast as the SYN ping), so
        // the time beyond the path is placed at the server's end: without the delivery rate
        // it was called the server's think time.
        let mut ev = Evidence {
            path: Some(s(1_000_000)),
            path_by_syn: true,
            handshake: Some(s(1_020_000)),
            single: Some(s(89_000_000)),
            ..Evidence::default()
        };
        let before = crate::rules::apply(&ev);
        assert_eq!(before[0].rule, RuleId::ThinkTime, "what it was called");
        let c = CaptureEvidence {
            frames: 7_400,
            transactions: 100,
            delivery_rate_bps: Some((10e6, 100)),
            wire_bytes_per_transaction: Some(104_600),
            ..CaptureEvidence::default()
        };
        <Capture as Observe>::store(&mut ev, c);
        let down = ev.bottleneck.and_then(|b| b.down).expect("server → client");
        assert_eq!(down.source, RateSource::Delivery { responses: 100 });
        assert_eq!(ev.bottleneck.and_then(|b| b.up), None);
        let found = crate::rules::apply(&ev);
        assert_eq!(found[0].rule, RuleId::BottleneckBandwidth, "{found:#?}");
        assert_eq!(found[0].side, Side::Network);
        assert!(found[0].explains_ns <= 88_000_000);
        assert!(
            found.iter().all(|f| f.rule != RuleId::ThinkTime),
            "{found:#?}"
        );
        assert!(
            found[0]
                .evidence
                .iter()
                .any(|l| l.contains("only the server → client direction"))
        );
    }

    #[test]
    fn resent_syns_are_not_the_datas_retransmissions() {
        let stall = |count, lost_ns| StallTotal { count, lost_ns };
        // Two resent SYNs among three frames: the analysis counts them as retransmissions
        // (tshark's count) and not as timer stalls; diagnose files them under the handshakes.
        let ev = CaptureEvidence {
            frames: 3,
            retransmissions: 2,
            ..CaptureEvidence::default()
        };
        let ev = set_apart(ev, Some(stall(2, 2_042_000_000)));
        assert_eq!(ev.retransmissions, 0);
        assert_eq!(ev.rto_stalls, None);
        assert_eq!(ev.syn_resends, Some(stall(2, 2_042_000_000)));
        // Data lost too: the retransmissions left are the data's, its timer stalls untouched.
        let ev = CaptureEvidence {
            retransmissions: 9,
            rto_stalls: Some(stall(4, 2_300_000_000)),
            ..CaptureEvidence::default()
        };
        let ev = set_apart(ev, Some(stall(1, 1_000_000_000)));
        assert_eq!(ev.retransmissions, 8);
        assert_eq!(ev.rto_stalls, Some(stall(4, 2_300_000_000)));
        assert_eq!(set_apart(ev.clone(), None), ev);
    }
}

//! A packet capture of the target's port while one request at a time runs, through latscope
//! analyze's stall detectors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use latscope_core::model::diagnose::StepName;
use latscope_wire::analyze::Analysis;
use latscope_wire::report::StallKind;

use super::{NotRun, Observe, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::{CaptureEvidence, Evidence, NagleStalls, StallExample, StallTotal};

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
        let thread = std::thread::spawn(move || capture_and_analyze(&filter, &flag, limit));
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
            "{} frames, {} transactions, {} Nagle × delayed-ACK stalls, {} retransmissions",
            c.frames,
            c.transactions,
            c.nagle.map(|n| n.total.count).unwrap_or(0),
            c.retransmissions
        )
    }

    fn store(ev: &mut Evidence, c: CaptureEvidence) {
        ev.capture = Some(c);
    }
}

/// Capture `filter` on every interface while `stop` is clear (at most `limit`) and run latscope
/// analyze's detectors over it.
fn capture_and_analyze(
    filter: &str,
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
    let mut frame = 0u64;
    cap.run(stop, None, Some(limit), |ts, _orig, data| {
        frame += 1;
        analyzer.push(frame, ts, latscope_wire::decode(link, data));
        Ok(())
    })
    .map_err(|e| format!("{e:#}"))?;
    Ok(evidence_of(&analyzer.finish()))
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
        delayed_ack: total(StallKind::DelayedAck),
    }
}

//! The stall detectors, one file each, behind one small interface ([`Detector`], with the
//! [`Sink`] it reports to, in `detector.rs`): after the flow tracker, the sequence analysis and
//! the transaction tracker have seen a segment, every registered detector looks at it (with
//! the connection's state) and reports stalls. The facts several detectors weigh (a release
//! by a delayed ACK, the timer bands) are in `evidence.rs`, below them: no detector imports
//! another.
//!
//! Adding a detector: a new file here with a unit struct implementing [`Detector`], a line in
//! [`DETECTORS`], and (if it reports a new kind) a `StallKind` variant with its explanation.
//!
//! [`Sink`]: super::detector::Sink

mod cork;
mod cwnd_limited;
mod delayed_ack;
mod pmtu;
mod rto;
mod syn_wait;
mod think_time;
mod unseen_resend;
mod window_full;
mod zero_window;

use super::detector::Detector;

/// Every detector, in the order they look at a segment (which is also the order their stalls
/// are charged to the transaction in progress).
pub(super) static DETECTORS: &[&dyn Detector] = &[
    &rto::Rto,
    // After the RTO detector: a black hole decided takes back the RTO stalls of its resends.
    &pmtu::PmtuBlackHole,
    &syn_wait::SynWait,
    &delayed_ack::DelayedAckRelease,
    // After the delayed-ACK detector: a release by a delayed ACK is its, whatever was unseen.
    &unseen_resend::UnseenResend,
    &cork::Cork,
    &think_time::ThinkTime,
    &zero_window::ZeroWindow,
    &cwnd_limited::CwndLimited,
    &window_full::WindowFull,
];

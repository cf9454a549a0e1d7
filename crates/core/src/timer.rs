//! One vocabulary for TCP's timers: which kernel timer a stall of a given length matches, and
//! what that means. Every part of latscope that reasons about 40 ms / 200 ms / 1 s stalls (the
//! size sweep, the wire's stall detectors, socket findings, diagnose's rules) classifies through
//! [`TcpTimer::classify`] and describes through [`TcpTimer::describe`], so the thresholds live
//! here and nowhere else.
//!
//! Linux constants (include/net/tcp.h, HZ-independent since 2.6): `TCP_ATO_MIN` = HZ/25 = 40 ms
//! (the delayed-ACK timeout a receiver starts with), `TCP_DELACK_MAX` = HZ/5 = 200 ms (its upper
//! bound), `TCP_RTO_MIN` = 200 ms, `TCP_TIMEOUT_INIT` = 1 s (RFC 6298 §2.1). The TCP_CORK flush
//! timer is also 200 ms (`tcp_push_pending_frames` from `tcp_write_timer`). Older kernels with
//! HZ=100 and some other stacks delay ACKs by ~20 ms (the 2003 LKML report saw ~20 ms stalls).

use std::ops::RangeInclusive;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::format_ns;

const MS: u64 = 1_000_000;

/// A TCP timer whose expiry shows up as a stall of a recognisable length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TcpTimer {
    /// ~20 ms: a delayed ACK on a coarse-timer stack (HZ=100-era Linux, some other OSes).
    CoarseDelayedAck,
    /// ~40 ms: Linux's minimum delayed-ACK timeout (`TCP_ATO_MIN`).
    DelayedAckMin,
    /// ~200 ms: the delayed-ACK ceiling (`TCP_DELACK_MAX`), the minimum retransmission timeout
    /// (`TCP_RTO_MIN`) or the TCP_CORK flush; the wire tells which.
    DelayedAckMaxOrRtoMin,
    /// ~1 s: the initial retransmission timeout (`TCP_TIMEOUT_INIT`): a lost SYN or first segment.
    InitialRto,
}

impl TcpTimer {
    /// Every timer, shortest first.
    pub const ALL: [TcpTimer; 4] = [
        TcpTimer::CoarseDelayedAck,
        TcpTimer::DelayedAckMin,
        TcpTimer::DelayedAckMaxOrRtoMin,
        TcpTimer::InitialRto,
    ];

    /// The timer's nominal length, ns.
    pub const fn nominal_ns(self) -> u64 {
        match self {
            TcpTimer::CoarseDelayedAck => 20 * MS,
            TcpTimer::DelayedAckMin => 40 * MS,
            TcpTimer::DelayedAckMaxOrRtoMin => 200 * MS,
            TcpTimer::InitialRto => 1_000 * MS,
        }
    }

    /// The stall lengths (ns, inclusive) attributed to this timer. The bands leave room for the
    /// timer wheel's granularity and a path's RTT on top of the timer, and do not overlap.
    pub const fn band_ns(self) -> RangeInclusive<u64> {
        match self {
            TcpTimer::CoarseDelayedAck => 15 * MS..=(30 * MS - 1),
            TcpTimer::DelayedAckMin => 30 * MS..=60 * MS,
            TcpTimer::DelayedAckMaxOrRtoMin => 170 * MS..=260 * MS,
            TcpTimer::InitialRto => 900 * MS..=1_200 * MS,
        }
    }

    /// The timer a stall of `excess_ns` matches, if any.
    pub fn classify(excess_ns: u64) -> Option<TcpTimer> {
        Self::ALL
            .into_iter()
            .find(|t| t.band_ns().contains(&excess_ns))
    }

    /// Whether the timer is a delayed-ACK timer (the Nagle × delayed ACK family).
    pub const fn is_delayed_ack(self) -> bool {
        matches!(
            self,
            TcpTimer::CoarseDelayedAck | TcpTimer::DelayedAckMin | TcpTimer::DelayedAckMaxOrRtoMin
        )
    }

    /// Short name for tables ("~40 ms delayed ACK").
    pub const fn label(self) -> &'static str {
        match self {
            TcpTimer::CoarseDelayedAck => "~20 ms coarse delayed ACK",
            TcpTimer::DelayedAckMin => "~40 ms delayed ACK (TCP_ATO_MIN)",
            TcpTimer::DelayedAckMaxOrRtoMin => "~200 ms delayed-ACK max / RTO min",
            TcpTimer::InitialRto => "~1 s initial RTO",
        }
    }

    /// What a stall of this length usually is, and the fix.
    pub const fn describe(self) -> &'static str {
        match self {
            TcpTimer::CoarseDelayedAck => {
                "~20 ms: a delayed ACK on a stack with a coarse timer (HZ=100 era kernels, other OSes) holding back Nagle-delayed data"
            }
            TcpTimer::DelayedAckMin => {
                "~40 ms: the receiver's delayed ACK (TCP_ATO_MIN) releases data the sender's Nagle algorithm held back — set TCP_NODELAY on the sender (or TCP_QUICKACK on the receiver)"
            }
            TcpTimer::DelayedAckMaxOrRtoMin => {
                "~200 ms: delayed-ACK maximum (TCP_DELACK_MAX) or minimum retransmission timeout (TCP_RTO_MIN, a lost segment)"
            }
            TcpTimer::InitialRto => {
                "~1 s: initial retransmission timeout (TCP_TIMEOUT_INIT) — a lost SYN or first segment"
            }
        }
    }
}

/// A sentence for a stall of `excess_ns`: the matching timer's description, or a statement that
/// no TCP timer has that length (application think time or the path).
pub fn describe_stall(excess_ns: u64) -> String {
    match TcpTimer::classify(excess_ns) {
        Some(t) => t.describe().to_string(),
        None => format!(
            "a {} step that matches no TCP timer: look at the application (think time) or the path",
            format_ns(excess_ns as f64)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_classify_and_do_not_overlap() {
        assert_eq!(TcpTimer::classify(40 * MS), Some(TcpTimer::DelayedAckMin));
        assert_eq!(TcpTimer::classify(44 * MS), Some(TcpTimer::DelayedAckMin));
        assert_eq!(
            TcpTimer::classify(20 * MS),
            Some(TcpTimer::CoarseDelayedAck)
        );
        assert_eq!(
            TcpTimer::classify(200 * MS),
            Some(TcpTimer::DelayedAckMaxOrRtoMin)
        );
        assert_eq!(TcpTimer::classify(1_010 * MS), Some(TcpTimer::InitialRto));
        assert_eq!(TcpTimer::classify(5 * MS), None);
        assert_eq!(TcpTimer::classify(100 * MS), None);
        for w in TcpTimer::ALL.windows(2) {
            assert!(w[0].band_ns().end() < w[1].band_ns().start(), "{w:?}");
        }
        for t in TcpTimer::ALL {
            assert!(t.band_ns().contains(&t.nominal_ns()), "{t:?}");
            assert_eq!(TcpTimer::classify(t.nominal_ns()), Some(t));
        }
    }

    #[test]
    fn descriptions() {
        assert!(describe_stall(40 * MS).starts_with("~40 ms"));
        assert!(describe_stall(200 * MS).starts_with("~200 ms"));
        assert!(describe_stall(20 * MS).starts_with("~20 ms"));
        assert!(describe_stall(5 * MS).contains("matches no TCP timer"));
        assert!(TcpTimer::DelayedAckMin.is_delayed_ack());
        assert!(!TcpTimer::InitialRto.is_delayed_ack());
    }
}

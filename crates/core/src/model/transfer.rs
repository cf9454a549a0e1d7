//! Who limited a TCP transfer (M-Lab NDT's question), from the sending socket's tcp_info: the
//! time it was busy sending, and how much of it the peer's receive window
//! (`tcpi_rwnd_limited`) or the own send buffer (`tcpi_sndbuf_limited`) held it back; the rest
//! of the busy time the congestion window (the network) set the pace. With the windows both
//! ends advertised and the buffers behind them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::sockets::TcpStats;

/// What held a sender back for most of its busy time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransferLimit {
    /// The receiver's advertised window was full (its SO_RCVBUF / tcp_rmem, window scaling).
    ReceiveWindow,
    /// The sender's own send buffer was full (its SO_SNDBUF / tcp_wmem).
    SendBuffer,
    /// Neither: the congestion window, i.e. the network path (or loss), set the pace.
    Network,
}

/// One socket's view of a transfer (or the sum over a direction's streams).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TransferLimits {
    /// Time with data to send (tcpi_busy_time, kernel 4.10+), µs; it includes both limited
    /// times below. 0 on a socket that only received.
    pub busy_us: u64,
    /// Part of the busy time the peer's receive window was full (tcpi_rwnd_limited), µs.
    pub rwnd_limited_us: u64,
    /// Part of the busy time the send buffer was full (tcpi_sndbuf_limited), µs.
    pub sndbuf_limited_us: u64,
    /// The last delivery-rate sample (tcpi_delivery_rate), bit/s.
    pub delivery_rate_bps: Option<u64>,
    /// The peer's advertised window as this socket last saw it (tcpi_snd_wnd, 5.4+), bytes.
    pub snd_wnd: Option<u32>,
    /// The window this socket advertised last (tcpi_rcv_wnd, 6.2+), bytes.
    pub rcv_wnd: Option<u32>,
    /// Receive auto-tuning's estimate of the peer's data per RTT (tcpi_rcv_space), bytes.
    pub rcv_space: u32,
    /// This socket's window-scale shift; None when window scaling was not negotiated (a
    /// window stops at 64 KiB).
    pub rcv_wscale: Option<u8>,
    /// The peer's window-scale shift; None without window scaling.
    pub snd_wscale: Option<u8>,
    /// SO_RCVBUF as the kernel reports it (twice what was set), bytes.
    pub rcvbuf_bytes: Option<u32>,
    /// SO_SNDBUF as the kernel reports it, bytes.
    pub sndbuf_bytes: Option<u32>,
    /// What held the sender back for the largest share of its busy time; None for a socket
    /// that was never busy sending, or a kernel without the chrono counters.
    pub limited_by: Option<TransferLimit>,
}

impl TransferLimits {
    /// From a socket's tcp_info (and its buffer sizes when known).
    pub fn from_stats(t: &TcpStats, rcvbuf: Option<u32>, sndbuf: Option<u32>) -> Self {
        let mut l = TransferLimits {
            busy_us: t.busy_time_us.unwrap_or(0),
            rwnd_limited_us: t.rwnd_limited_us.unwrap_or(0),
            sndbuf_limited_us: t.sndbuf_limited_us.unwrap_or(0),
            delivery_rate_bps: t.delivery_rate_bps,
            snd_wnd: t.snd_wnd,
            rcv_wnd: t.rcv_wnd,
            rcv_space: t.rcv_space,
            rcv_wscale: t.rcv_wscale,
            snd_wscale: t.snd_wscale,
            rcvbuf_bytes: rcvbuf,
            sndbuf_bytes: sndbuf,
            limited_by: None,
        };
        l.limited_by = l.classify();
        l
    }

    /// Busy time neither window nor buffer held back: the congestion window's, µs.
    pub fn network_us(&self) -> u64 {
        self.busy_us
            .saturating_sub(self.rwnd_limited_us)
            .saturating_sub(self.sndbuf_limited_us)
    }

    /// `part_us` as a share of the busy time, 0–1 (0 when never busy).
    pub fn share(&self, part_us: u64) -> f64 {
        if self.busy_us == 0 {
            0.0
        } else {
            (part_us as f64 / self.busy_us as f64).min(1.0)
        }
    }

    /// The largest of the three shares of the busy time.
    fn classify(&self) -> Option<TransferLimit> {
        if self.busy_us == 0 {
            return None;
        }
        let parts = [
            (self.rwnd_limited_us, TransferLimit::ReceiveWindow),
            (self.sndbuf_limited_us, TransferLimit::SendBuffer),
            (self.network_us(), TransferLimit::Network),
        ];
        parts.iter().max_by_key(|(us, _)| *us).map(|(_, l)| *l)
    }

    /// Add another stream's view: times and rates add up, the smallest windows and buffers
    /// (the most constraining) are kept.
    pub fn merge(&mut self, o: &TransferLimits) {
        fn min_opt<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            }
        }
        self.busy_us += o.busy_us;
        self.rwnd_limited_us += o.rwnd_limited_us;
        self.sndbuf_limited_us += o.sndbuf_limited_us;
        self.delivery_rate_bps = match (self.delivery_rate_bps, o.delivery_rate_bps) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.snd_wnd = min_opt(self.snd_wnd, o.snd_wnd);
        self.rcv_wnd = min_opt(self.rcv_wnd, o.rcv_wnd);
        self.rcv_space = if self.rcv_space == 0 {
            o.rcv_space
        } else {
            self.rcv_space.min(o.rcv_space.max(1))
        };
        self.rcv_wscale = min_opt(self.rcv_wscale, o.rcv_wscale);
        self.snd_wscale = min_opt(self.snd_wscale, o.snd_wscale);
        self.rcvbuf_bytes = min_opt(self.rcvbuf_bytes, o.rcvbuf_bytes);
        self.sndbuf_bytes = min_opt(self.sndbuf_bytes, o.sndbuf_bytes);
        self.limited_by = self.classify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_share_of_busy_time_names_the_limit() {
        let t = TcpStats {
            busy_time_us: Some(1_000_000),
            rwnd_limited_us: Some(800_000),
            sndbuf_limited_us: Some(50_000),
            rcv_wscale: Some(7),
            ..TcpStats::default()
        };
        let l = TransferLimits::from_stats(&t, Some(8192), None);
        assert_eq!(l.limited_by, Some(TransferLimit::ReceiveWindow));
        assert_eq!(l.network_us(), 150_000);
        assert!((l.share(l.rwnd_limited_us) - 0.8).abs() < 1e-9);
        let net = TcpStats {
            busy_time_us: Some(1_000_000),
            rwnd_limited_us: Some(100_000),
            sndbuf_limited_us: Some(0),
            ..TcpStats::default()
        };
        let n = TransferLimits::from_stats(&net, None, None);
        assert_eq!(n.limited_by, Some(TransferLimit::Network));
        let mut sum = l;
        sum.merge(&n);
        assert_eq!(sum.busy_us, 2_000_000);
        assert_eq!(sum.rwnd_limited_us, 900_000);
        assert_eq!(
            sum.limited_by,
            Some(TransferLimit::Network),
            "1.0 s of network vs 0.9 s"
        );
    }

    #[test]
    fn a_receiver_was_never_busy() {
        let l = TransferLimits::from_stats(&TcpStats::default(), None, None);
        assert_eq!(l.limited_by, None);
        assert_eq!(l.share(10), 0.0);
    }
}

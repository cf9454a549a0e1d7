//! Time latscope's own packets spend in the client's own host stack, from the kernel's
//! SO_TIMESTAMPING software timestamps (Documentation/networking/timestamping.rst): send() →
//! the qdisc (TX_SCHED: netfilter OUTPUT, routing and the IP layer lie before it), the qdisc →
//! the driver (TX_SOFTWARE: queueing discipline, traffic control), and the driver's receive
//! stamp → recv() returning (softirq, socket queue, wake-up and scheduling).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One stage's spread over the samples of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StageTimes {
    /// Sends (or receives) timed.
    pub samples: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Mean, ns (exact: what a sum of stages is compared with). Absent in results written
    /// before it was recorded.
    #[serde(default)]
    pub mean_ns: u64,
}

impl StageTimes {
    /// From unsorted samples (ns); None when there are none.
    pub fn of(samples: &mut [u64]) -> Option<StageTimes> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Some(StageTimes {
            samples: samples.len() as u64,
            p50_ns: at(0.5),
            p99_ns: at(0.99),
            mean_ns: (samples.iter().map(|&v| u128::from(v)).sum::<u128>() / samples.len() as u128)
                as u64,
        })
    }
}

/// The client host's share of its own packets' time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HostStackTimes {
    /// send() called → the packet reached the qdisc (netfilter OUTPUT, routing, IP).
    pub send_to_sched: Option<StageTimes>,
    /// The qdisc → handed to the driver (queueing discipline, traffic shaping).
    pub sched_to_driver: Option<StageTimes>,
    /// The driver received the packet → recv() returned it to latscope.
    pub driver_to_recv: Option<StageTimes>,
    /// Sends whose timestamps never arrived within the bound (counted, not timed).
    pub missing: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_samples() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = StageTimes::of(&mut v).expect("samples");
        assert_eq!(
            (s.samples, s.p50_ns, s.p99_ns, s.mean_ns),
            (100, 51, 99, 50)
        );
        assert!(StageTimes::of(&mut []).is_none());
    }
}

//! Message-size sweeps: the size-list syntax (`1:65536:x2`, `0:4096:+64`, `64,1500,9000`) and the
//! detector that flags sizes whose latency jumps far above the rest, with what the jump looks
//! like (a ~40 ms step is TCP's minimum delayed-ACK timeout holding data behind Nagle, …).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::timer::{TcpTimer, describe_stall};
use crate::units::{UnitError, parse_size};

/// Largest number of sizes one sweep may hold; more is almost certainly a typo in the step.
pub const MAX_SWEEP_POINTS: usize = 4096;

const SPEC_HINT: &str = "expected a size, a list (64,1500), a doubling range (1:65536:x2) or a stepped range (0:4096:+64)";

fn spec_err(s: &str, hint: &'static str) -> UnitError {
    UnitError {
        what: "size list",
        input: s.to_string(),
        hint: hint.into(),
    }
}

/// Parse a size list: `64`, `64,1500,9000`, `START:END:xFACTOR`, `START:END:+STEP`.
/// The result is sorted and free of duplicates.
pub fn parse_size_list(s: &str) -> Result<Vec<u64>, UnitError> {
    let s = s.trim();
    let mut out: Vec<u64> = Vec::new();
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        let [start, end, step] = parts.as_slice() else {
            return Err(spec_err(s, SPEC_HINT));
        };
        let start = parse_size(start).map_err(|_| spec_err(s, SPEC_HINT))?;
        let end = parse_size(end).map_err(|_| spec_err(s, SPEC_HINT))?;
        if end < start {
            return Err(spec_err(s, "the range's end is below its start"));
        }
        if let Some(f) = step.strip_prefix('x').or_else(|| step.strip_prefix('*')) {
            let factor: f64 = f.parse().map_err(|_| spec_err(s, SPEC_HINT))?;
            if factor.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) || !factor.is_finite()
            {
                return Err(spec_err(s, "the factor must be greater than 1 (e.g. x2)"));
            }
            let mut v = start as f64;
            if start == 0 {
                out.push(0);
                v = 1.0;
            }
            while v <= end as f64 {
                out.push(v.round() as u64);
                if out.len() > MAX_SWEEP_POINTS {
                    return Err(spec_err(s, "more than 4096 sizes: use a larger factor"));
                }
                v *= factor;
            }
        } else if let Some(st) = step.strip_prefix('+') {
            let step = parse_size(st).map_err(|_| spec_err(s, SPEC_HINT))?;
            if step == 0 {
                return Err(spec_err(s, "the step must be above zero (e.g. +64)"));
            }
            let mut v = start;
            while v <= end {
                out.push(v);
                if out.len() > MAX_SWEEP_POINTS {
                    return Err(spec_err(s, "more than 4096 sizes: use a larger step"));
                }
                v = match v.checked_add(step) {
                    Some(n) => n,
                    None => break,
                };
            }
        } else {
            return Err(spec_err(s, SPEC_HINT));
        }
    } else {
        for item in s.split(',') {
            out.push(parse_size(item).map_err(|_| spec_err(s, SPEC_HINT))?);
        }
        if out.len() > MAX_SWEEP_POINTS {
            return Err(spec_err(s, "more than 4096 sizes"));
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The flagged part of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeJump {
    /// Sizes (bytes) whose median latency jumped.
    pub sizes: Vec<u64>,
    /// Median of the flagged sizes' medians, ns.
    pub jumped_p50_ns: u64,
    /// Median of the other sizes' medians, ns.
    pub baseline_p50_ns: u64,
    /// `jumped - baseline`: the time the jump adds, ns.
    pub excess_ns: u64,
    /// The TCP timer the jump's length matches, if any.
    pub timer: Option<TcpTimer>,
    /// What a jump of this size usually is.
    pub likely_cause: String,
}

/// Minimum ratio between the slow and the fast group.
const MIN_RATIO: f64 = 2.0;
/// Minimum absolute step: timer-driven stalls are milliseconds; smaller steps are bandwidth.
const MIN_STEP_NS: f64 = 1e6;

/// Whether `high_ns` is a latency jump above `low_ns`: at least 2× and 1 ms above it. The one
/// rule for "a latency jump" (a finding, exit 1): between message sizes here, and between a small
/// request's latency idle and under a transfer (`stream --latency-probe`).
pub fn is_jump(low_ns: f64, high_ns: f64) -> bool {
    high_ns / low_ns.max(1.0) >= MIN_RATIO && high_ns - low_ns >= MIN_STEP_NS
}

/// Flag sizes whose median latency is far above the others.
///
/// Latency normally rises smoothly with size (serialisation, copies). TCP's stalls are discrete
/// timer expiries (delayed ACK 40 ms/200 ms, RTO ≥ 200 ms), so the medians split into two groups
/// with a large multiplicative gap between them. We sort the medians, take the largest gap in
/// log space and flag the upper group when it is at least 2× and 1 ms above the lower one.
pub fn find_jump(points: &[(u64, u64)]) -> Option<SizeJump> {
    if points.len() < 2 {
        return None;
    }
    let mut lat: Vec<f64> = points.iter().map(|&(_, ns)| (ns.max(1)) as f64).collect();
    lat.sort_by(f64::total_cmp);
    let (mut best_i, mut best_gap) = (0usize, 0.0f64);
    for i in 1..lat.len() {
        let gap = (lat[i] / lat[i - 1]).ln();
        if gap > best_gap {
            best_gap = gap;
            best_i = i;
        }
    }
    let lo_max = lat[best_i - 1];
    let hi_min = lat[best_i];
    if !is_jump(lo_max, hi_min) {
        return None;
    }
    let sizes: Vec<u64> = points
        .iter()
        .filter(|&&(_, ns)| ns.max(1) as f64 >= hi_min)
        .map(|&(s, _)| s)
        .collect();
    let median = |v: &[f64]| v[v.len() / 2];
    let jumped = median(&lat[best_i..]);
    let baseline = median(&lat[..best_i]);
    let excess = (jumped - baseline).max(0.0);
    Some(SizeJump {
        sizes,
        jumped_p50_ns: jumped as u64,
        baseline_p50_ns: baseline as u64,
        excess_ns: excess as u64,
        timer: TcpTimer::classify(excess as u64),
        likely_cause: describe_stall(excess as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jump_is_twice_and_a_millisecond_above() {
        assert!(is_jump(30_000.0, 1_500_000.0)); // 50×, +1.47 ms
        assert!(!is_jump(30_000.0, 900_000.0)); // 30×, but +0.87 ms: CPU sharing, not a queue
        assert!(!is_jump(20e6, 30e6)); // +10 ms, but 1.5×
        assert!(is_jump(0.0, 2e6));
    }

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse_size_list("64"), Ok(vec![64]));
        assert_eq!(parse_size_list("1500,64,64"), Ok(vec![64, 1500]));
        assert_eq!(parse_size_list("1:16:x2"), Ok(vec![1, 2, 4, 8, 16]));
        assert_eq!(parse_size_list("0:4:x2"), Ok(vec![0, 1, 2, 4]));
        assert_eq!(parse_size_list("0:256:+64"), Ok(vec![0, 64, 128, 192, 256]));
        assert_eq!(parse_size_list("1KiB:4KiB:x2"), Ok(vec![1024, 2048, 4096]));
        assert_eq!(parse_size_list("1:65536:x2").map(|v| v.len()), Ok(17));
        assert!(parse_size_list("1:10:x1").is_err());
        assert!(parse_size_list("10:1:x2").is_err());
        assert!(parse_size_list("0:10:+0").is_err());
        assert!(parse_size_list("0:1M:+1").is_err());
        assert!(parse_size_list("1:2").is_err());
        assert!(parse_size_list("a,b").is_err());
    }

    #[test]
    fn flags_nagle_window() {
        // The 2003 report's shape: fine below 500 B and above 1500 B, 40 ms in between.
        let pts: Vec<(u64, u64)> = (1..=40)
            .map(|i| {
                let size = i * 100;
                let ns = if (500..=1500).contains(&size) {
                    40_200_000
                } else {
                    30_000 + size * 10
                };
                (size, ns)
            })
            .collect();
        let j = find_jump(&pts).expect("jump found");
        assert_eq!(j.sizes, (5..=15).map(|i| i * 100).collect::<Vec<_>>());
        assert!(j.likely_cause.starts_with("~40 ms"), "{}", j.likely_cause);
        assert_eq!(j.timer, Some(TcpTimer::DelayedAckMin));
        assert!((40_000_000..40_200_000).contains(&j.excess_ns));
    }

    #[test]
    fn smooth_growth_is_not_flagged() {
        // Bandwidth-bound growth: 10 us at 1 B to ~600 us at 64 KiB.
        let pts: Vec<(u64, u64)> = (0..17)
            .map(|k| (1u64 << k, 10_000 + (1u64 << k) * 9))
            .collect();
        assert_eq!(find_jump(&pts), None);
    }

    #[test]
    fn small_absolute_steps_are_not_stalls() {
        let pts = vec![(64, 10_000), (128, 10_500), (256, 60_000), (512, 61_000)];
        assert_eq!(find_jump(&pts), None);
    }
}

//! A heavy tail of idle single requests, the detector several rules share: at a quantile
//! (p99, p99.9) or in rare long stalls too few for any quantile. The rules decide what the
//! tail means ([`super::server_tail_latency`], [`super::cpu_throttling`], …); this only finds
//! it.

use crate::evidence::Evidence;

/// Fewest single requests for a p99 to stand on (it then rests on at least five samples)…
pub const MIN_SAMPLES: u64 = 500;
/// …and for a p99.9.
pub const MIN_SAMPLES_P999: u64 = 5_000;
/// The tail (p99 − p50) must add at least this…
pub const TAIL_FLOOR_NS: u64 = 5_000_000;
/// …and the p99 be at least this many medians.
pub const TAIL_RATIO: u64 = 25;
/// Fewest stalls ([`stalls_over`]) for the time they take to stand on.
pub const MIN_STALLS: u64 = 5;
/// The stalls must take at least this share of the requests' time, beyond the median each,
/// in per mille: a pause that costs the requests a tenth of their time is no noise of a busy
/// client host (that the sleeping thread rules out separately), and a server that stalls for
/// one request in a thousand does not show it at any quantile the client reads.
pub const STALL_SHARE_PERMILLE: u64 = 100;

/// A heavy tail on idle single requests: the median and the tail quantile that is heavy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    pub p50_ns: u64,
    /// The tail quantile's value, and its name ("p99", "p99.9"; "stalls": the median of rare
    /// long stalls, [`stalls_over`]).
    pub tail_ns: u64,
    pub quantile: &'static str,
    pub samples: u64,
    /// The requests in the tail: one in a hundred at a p99, one in a thousand at a p99.9, the
    /// stalls counted.
    pub in_tail: u64,
    /// For stalls: their time beyond the median, in per mille of all the requests' time — the
    /// share of the time the server was stalled, since one request at a time always waits on
    /// it (0 for a quantile's tail).
    pub stalled_permille: u64,
}

impl Tail {
    /// The tail quantile − p50.
    pub fn extra_ns(&self) -> u64 {
        self.tail_ns.saturating_sub(self.p50_ns)
    }

    /// What `explains_ns` of the tail's requests costs the average request: only the tail's
    /// share of the requests pays it. Stalls are waited out by whoever arrives during one: a
    /// request at a random moment (a user's, not the next of a closed loop) meets one with the
    /// chance of the time they take, and then waits half of one on average.
    pub fn per_request_ns(&self, explains_ns: u64) -> u64 {
        match self.quantile {
            "p99" => explains_ns / 100,
            "p99.9" => explains_ns / 1_000,
            _ => (explains_ns as u128 * self.stalled_permille.min(1_000) as u128 / 2_000) as u64,
        }
    }

    /// Heavy: at least `floor` above the median, and [`TAIL_RATIO`] medians.
    fn heavy(&self, floor: u64) -> bool {
        self.extra_ns() >= floor && self.tail_ns >= TAIL_RATIO.saturating_mul(self.p50_ns)
    }
}

/// The heaviest tail of a distribution: its p99 (with at least [`MIN_SAMPLES`] requests) or,
/// with ten times as many, its p99.9 — a pause that hits one request in a few hundred is below
/// the p99 of a fast server.
pub fn heavy_tail(s: &latscope_core::Summary) -> Option<Tail> {
    tail_over(s, TAIL_FLOOR_NS)
}

/// [`heavy_tail`] with another floor for the tail's extra.
pub(crate) fn tail_over(s: &latscope_core::Summary, floor: u64) -> Option<Tail> {
    let at = |tail_ns, quantile, per| Tail {
        p50_ns: s.p50_ns,
        tail_ns,
        quantile,
        samples: s.count,
        in_tail: s.count / per,
        stalled_permille: 0,
    };
    [
        (MIN_SAMPLES, at(s.p99_ns, "p99", 100)),
        (MIN_SAMPLES_P999, at(s.p999_ns, "p99.9", 1_000)),
    ]
    .into_iter()
    .find(|(min, t)| s.count >= *min && t.heavy(floor))
    .map(|(_, t)| t)
}

/// Rare long stalls of idle single requests, too few for any quantile the client reads: the
/// requests of the step's time slices at least `floor` beyond the median and [`TAIL_RATIO`]
/// medians, at least [`MIN_STALLS`] of them, whose time beyond the median is at least
/// [`STALL_SHARE_PERMILLE`] of all the requests' time. A server in a CPU quota that a request
/// at a time exhausts once a period stalls one request in a thousand for most of the period
/// (12 of 12,621 requests waited 60–90 ms: 73% of the step's time, its p99.9 3.6 ms); so does
/// a collector's or a log flush's pause. The tail is their median, its requests the stalls.
pub fn stalls_over(e: &Evidence, floor: u64) -> Option<Tail> {
    stalls_counted(e, floor, MIN_STALLS, STALL_SHARE_PERMILLE)
}

/// [`stalls_over`] with another fewest number of stalls and share of the time: for a rule
/// whose own evidence (the kernel's counters) already says the pauses happened, and which asks
/// the requests only whether they met them.
pub(crate) fn stalls_counted(
    e: &Evidence,
    floor: u64,
    min_stalls: u64,
    share_permille: u64,
) -> Option<Tail> {
    let s = e.single.as_ref()?;
    if s.count < MIN_SAMPLES {
        return None;
    }
    let at_least = s
        .p50_ns
        .saturating_add(floor)
        .max(TAIL_RATIO.saturating_mul(s.p50_ns));
    let mut stalls: Vec<(u64, u64)> = e
        .slices
        .iter()
        .flat_map(|sl| sl.slow.iter().copied())
        .filter(|&(v, _)| v >= at_least)
        .collect();
    let n: u64 = stalls.iter().map(|&(_, k)| k).sum();
    let beyond: u128 = stalls
        .iter()
        .map(|&(v, k)| (v - s.p50_ns) as u128 * k as u128)
        .sum();
    let all = (s.mean_ns.max(0.0) * s.count as f64) as u128;
    if n < min_stalls.max(1) || beyond * 1_000 < all * share_permille as u128 {
        return None;
    }
    stalls.sort_unstable();
    let mut left = n.div_ceil(2);
    let median = stalls
        .iter()
        .find(|&&(_, k)| {
            left = left.saturating_sub(k);
            left == 0
        })
        .map_or(at_least, |&(v, _)| v);
    Some(Tail {
        p50_ns: s.p50_ns,
        tail_ns: median,
        quantile: "stalls",
        samples: s.count,
        in_tail: n,
        stalled_permille: (beyond * 1_000 / all.max(1)) as u64,
    })
}

/// The single requests' heavy tail: at a quantile ([`heavy_tail`]) or in rare long stalls
/// ([`stalls_over`]).
pub fn tail_of(e: &Evidence) -> Option<Tail> {
    heaviest(e, TAIL_FLOOR_NS)
}

/// Of the quantile's tail and the stalls, at least `floor` beyond the median, the one that costs
/// the average request more: a server that stalls 65 ms once a period also has a p99.9 of a few
/// milliseconds (the requests queued behind a stall), which the client host's own noise can
/// match, while the stalls themselves are ten times its noise and most of the requests' time.
pub(crate) fn heaviest(e: &Evidence, floor: u64) -> Option<Tail> {
    let quantile = e.single.as_ref().and_then(|s| tail_over(s, floor));
    let stalls = stalls_over(e, floor);
    match (quantile, stalls) {
        (Some(q), Some(s)) => Some(
            if s.per_request_ns(s.extra_ns()) > q.per_request_ns(q.extra_ns()) {
                s
            } else {
                q
            },
        ),
        (q, s) => q.or(s),
    }
}

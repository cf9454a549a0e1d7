//! The catalogue of findings. Each rule is a pure function of the evidence, so each is tested
//! on its own with synthetic figures (`tests.rs`): one file per rule, what several read in
//! `shared.rs`; the collection of evidence lives in `steps/`.

use latscope_core::model::diagnose::{Diagnosis, RuleId, Side};
use latscope_core::timer::{TcpTimer, describe_stall};
use latscope_core::units::{count, format_ns, of};

pub use crate::evidence::*;

mod bottleneck_bandwidth;
mod bufferbloat;
mod client_host_stack;
mod cpu_throttling;
mod dead_address_family;
mod delayed_ack;
mod error_responses;
mod nagle_delayed_ack;
mod path_dominates;
mod pmtu_black_hole;
mod pre_tcp_kernel;
mod receive_window_limited;
mod retransmissions;
mod run_queue_delay;
mod send_buffer_limited;
mod server_tail_latency;
mod shared;
mod slow_dns;
mod slow_handshake;
mod slow_tls;
mod socket_queueing;
mod think_time;
mod unexplained;

pub use self::bottleneck_bandwidth::*;
pub use self::bufferbloat::*;
pub use self::client_host_stack::*;
pub use self::cpu_throttling::*;
pub use self::dead_address_family::*;
pub use self::delayed_ack::*;
pub use self::error_responses::*;
pub use self::nagle_delayed_ack::*;
pub use self::path_dominates::*;
pub use self::pmtu_black_hole::*;
pub use self::pre_tcp_kernel::*;
pub use self::receive_window_limited::*;
pub use self::retransmissions::*;
pub use self::run_queue_delay::*;
pub use self::send_buffer_limited::*;
pub use self::server_tail_latency::*;
pub(crate) use self::shared::*;
pub use self::slow_dns::*;
pub use self::slow_handshake::*;
pub use self::slow_tls::*;
pub use self::socket_queueing::*;
pub use self::think_time::*;
pub use self::unexplained::*;

/// A rule: the evidence in, a finding out when it fires.
pub type Rule = fn(&Evidence) -> Option<Diagnosis>;

/// Rules in the order they are tried; the report ranks what fires by [`rank`].
pub const RULES: &[Rule] = &[
    nagle_delayed_ack,
    think_time,
    socket_queueing,
    slow_handshake,
    retransmissions,
    delayed_ack,
    pre_tcp_kernel,
    bufferbloat,
    path_dominates,
    slow_dns,
    slow_tls,
    cpu_throttling,
    run_queue_delay,
    bottleneck_bandwidth,
    self::server_tail_latency::server_tail_latency,
    client_host_stack,
    error_responses,
    pmtu_black_hole,
    dead_address_family,
    receive_window_limited,
    send_buffer_limited,
];

/// Apply every rule, then rank: root causes first (most latency explained first), each
/// consequence linked to its cause (see [`CHAINS`]).
///
/// Then the open world: what the findings leave of a request, when material, is a finding of
/// its own ([`unexplained`]), never silence.
pub fn apply(e: &Evidence) -> Vec<Diagnosis> {
    let mut found = rank(e, RULES.iter().filter_map(|r| r(e)).collect());
    if let Some(u) = unexplained(e, &found) {
        found.push(u);
        found = rank(e, found);
    }
    found
}

/// One finding explaining another: `cause` makes `effect` happen, when `holds` says the
/// figures fit (the cause is large enough to account for the effect).
pub struct Link {
    pub cause: RuleId,
    pub effect: RuleId,
    pub holds: fn(&Evidence, &Diagnosis, &Diagnosis) -> bool,
}

/// The causal links between findings. A kernel that makes every packet wait makes requests
/// queue behind each other and shows up as host time; Nagle's held segments are what the
/// delayed ACKs release, unless loss made the sender wait for the ACKs (see
/// [`loss_explains_ack_stalls`]); loss on the path drops SYNs and SYN-ACKs too (a SYN retransmitted
/// because of loss is loss, not a backlog: only the listen queue's overflow counters blame the
/// backlog), while SYN drops alone are the retransmissions a capture sees; a load whose bytes
/// fill the bottleneck makes the probe wait behind them. Every link also needs its cause to
/// explain something itself ([`explains_something`]).
pub const CHAINS: &[Link] = &[
    Link {
        cause: RuleId::PreTcpKernel,
        effect: RuleId::SocketQueueing,
        // Each request is at least two packets through the slow path, and the concurrent
        // requests wait for each other's: the kernel accounts for the queueing when that
        // covers half of it.
        holds: |e, c, q| {
            let n = e
                .concurrent
                .as_ref()
                .map_or(1, |c| u64::from(c.connections));
            c.explains_ns.saturating_mul(2 * n) * 2 >= q.explains_ns
        },
    },
    Link {
        // A cgroup that runs out of CPU quota in most periods cannot serve faster than its
        // quota: concurrent requests queue behind the throttled periods, whatever its workers.
        cause: RuleId::CpuThrottling,
        effect: RuleId::SocketQueueing,
        holds: |e, _, _| {
            e.cpu
                .as_ref()
                .and_then(|c| c.throttling.as_ref())
                .is_some_and(|t| t.throttled.saturating_mul(2) >= t.periods.max(1))
        },
    },
    Link {
        // A server that spends milliseconds of CPU on every handshake works through them one
        // at a time per worker: new connections' requests wait in the socket behind them. It
        // accounts for the queueing when N concurrent handshakes cover half of it.
        cause: RuleId::SlowTls,
        effect: RuleId::SocketQueueing,
        holds: |e, c, q| {
            let n = e
                .concurrent
                .as_ref()
                .map_or(1, |c| u64::from(c.connections));
            c.explains_ns.saturating_mul(n) * 2 >= q.explains_ns
        },
    },
    Link {
        cause: RuleId::PreTcpKernel,
        effect: RuleId::ThinkTime,
        holds: |_, c, t| c.explains_ns.saturating_mul(2) * 2 >= t.explains_ns,
    },
    // Loss before Nagle: a delayed ACK that loss made necessary is the loss's, and listed
    // first so that it is not read as Nagle's.
    Link {
        cause: RuleId::Retransmissions,
        effect: RuleId::DelayedAck,
        holds: |e, _, _| loss_explains_ack_stalls(e),
    },
    Link {
        cause: RuleId::Retransmissions,
        effect: RuleId::NagleDelayedAck,
        holds: |e, _, _| loss_explains_ack_stalls(e),
    },
    Link {
        cause: RuleId::NagleDelayedAck,
        effect: RuleId::DelayedAck,
        holds: |_, _, _| true,
    },
    Link {
        // Loss that slows handshakes slows the requests' data too: where a capture watched
        // the requests, it must show them waiting for the loss (see [`loss_waits_seen`]).
        cause: RuleId::Retransmissions,
        effect: RuleId::SlowHandshake,
        holds: |e, c, _| data_loss_material(e) && !listen_overflowed(e) && loss_waits_seen(e, c),
    },
    Link {
        cause: RuleId::SlowHandshake,
        effect: RuleId::Retransmissions,
        holds: |e, _, _| listen_overflowed(e) || !data_loss_material(e),
    },
    // A window or a buffer that limits a transfer paces it: the rate measured from the
    // responses is theirs, not the link's, and the time is not the server's thinking.
    Link {
        cause: RuleId::ReceiveWindowLimited,
        effect: RuleId::BottleneckBandwidth,
        holds: |e, _, _| limit_paces_bottleneck(e),
    },
    Link {
        cause: RuleId::SendBufferLimited,
        effect: RuleId::BottleneckBandwidth,
        holds: |e, _, _| limit_paces_bottleneck(e),
    },
    Link {
        cause: RuleId::ReceiveWindowLimited,
        effect: RuleId::ThinkTime,
        holds: |_, c, t| c.explains_ns.saturating_mul(2) >= t.explains_ns,
    },
    Link {
        cause: RuleId::SendBufferLimited,
        effect: RuleId::ThinkTime,
        holds: |_, c, t| c.explains_ns.saturating_mul(2) >= t.explains_ns,
    },
    Link {
        cause: RuleId::BottleneckBandwidth,
        effect: RuleId::Bufferbloat,
        holds: |e, _, _| load_fills_bottleneck(e),
    },
    Link {
        // A server that serves one request at a time makes a probe wait behind the requests of a
        // load sent to that same server (an HTTP ramp: the finding blames both sides). A bulk
        // transfer that fills the path (blamed on the network) is a cause of its own.
        cause: RuleId::SocketQueueing,
        effect: RuleId::Bufferbloat,
        holds: |_, _, b| b.side == Side::Both,
    },
];

/// What a finding costs the average request, to rank findings by: its `explains_ns`, except
/// for a tail finding, whose `explains_ns` only the requests of the tail lose (one in a hundred
/// at a p99, one in a thousand at a p99.9). A 6 ms tail at the p99 costs a request 64 µs on
/// average: less than a 98 µs wait every request has.
pub fn cost_per_request(e: &Evidence, f: &Diagnosis) -> u64 {
    let single = e.single.as_ref();
    if !self::server_tail_latency::is_tail(f, single.map(|s| s.p50_ns)) {
        return f.explains_ns;
    }
    let share = match single.and_then(self::server_tail_latency::heavy_tail) {
        Some(t) if t.quantile == "p99.9" => 1_000,
        _ => 100,
    };
    f.explains_ns / share
}

/// A cause explains another finding only if it explains something itself: at least
/// 1/[`CAUSE_SHARE`] of what the effect costs a request ([`cost_per_request`]; an effect that
/// costs nothing needs nothing). A finding that
/// explains 0 ns — the client's counters reading a full accept queue's resent requests as
/// loss, while no request measured waited for it — cannot be why the handshakes cost 65 ms a
/// request (the lab's accept-queue from the client's seat, round 7).
pub fn explains_something(e: &Evidence, cause: &Diagnosis, effect: &Diagnosis) -> bool {
    cost_per_request(e, cause).saturating_mul(CAUSE_SHARE) >= cost_per_request(e, effect)
}

/// The smallest share of an effect's cost its cause must explain, as a divisor: 1/100. The
/// links that amplify a cost (a per-packet kernel cost that N concurrent requests pay one after
/// another: 1/(4 N), 1/32 at 8 connections) stay well above it.
pub const CAUSE_SHARE: u64 = 100;

/// Order findings so that the root cause comes first: findings another finding explains are
/// marked `caused_by` it and ranked after every root cause; within each group, most latency
/// per request first ([`cost_per_request`]).
pub fn rank(e: &Evidence, mut found: Vec<Diagnosis>) -> Vec<Diagnosis> {
    found.sort_by_key(|f| std::cmp::Reverse(cost_per_request(e, f)));
    for link in CHAINS {
        let (Some(ci), Some(ei)) = (
            found.iter().position(|f| f.rule == link.cause),
            found.iter().position(|f| f.rule == link.effect),
        ) else {
            continue;
        };
        // One cause per effect, and no cycles: an effect already explained, or a cause that is
        // itself this effect's consequence, is left alone.
        if found[ei].caused_by.is_some() || found[ci].caused_by == Some(link.effect) {
            continue;
        }
        if !explains_something(e, &found[ci], &found[ei])
            || !(link.holds)(e, &found[ci], &found[ei])
        {
            continue;
        }
        let cause_title = found[ci].title.clone();
        found[ei].caused_by = Some(link.cause);
        found[ei].evidence.push(format!(
            "explained by another finding: {cause_title} [{}]",
            link.cause.name()
        ));
        found[ci].causes.push(link.effect);
    }
    // Stable: within roots and within consequences the order by latency stays.
    found.sort_by_key(|f| f.caused_by.is_some());
    // Mostly error pages: that is what every other figure is of, so it is said first.
    if error_share(e).is_some_and(|s| s >= MOSTLY_ERRORS)
        && let Some(i) = found.iter().position(|f| f.rule == RuleId::ErrorResponses)
    {
        let f = found.remove(i);
        found.insert(0, f);
    }
    found
}

#[cfg(test)]
mod tests;

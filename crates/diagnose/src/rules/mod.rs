//! The catalogue of findings. Each rule is a pure function of the evidence, so each is tested
//! on its own with synthetic figures (`tests.rs`): one file per rule, what several read in
//! `shared.rs`; the collection of evidence lives in `steps/`.

use latscope_core::model::diagnose::{Diagnosis, RuleId, Side};
use latscope_core::timer::{TcpTimer, describe_stall};
use latscope_core::units::{count, format_ns, of};

pub use crate::evidence::*;

mod bottleneck_bandwidth;
mod bufferbloat;
mod client_cpu_starved;
mod client_host_stack;
mod connection_not_reused;
mod cpu_throttling;
mod dead_address_family;
mod delayed_ack;
mod error_responses;
mod host_egress;
mod nagle_delayed_ack;
mod old_tls_version;
mod pmtu_black_hole;
mod pre_tcp_kernel;
mod receive_window_limited;
mod redirects;
mod retransmissions;
mod run_queue_delay;
mod send_buffer_limited;
mod server_tail_latency;
mod shared;
mod slow_dns;
mod slow_handshake;
mod slow_start_after_idle;
mod slow_tls;
mod small_initial_window;
mod socket_queueing;
mod tail;
mod think_time;
mod tls_not_resumed;
mod unexplained;

pub use self::bottleneck_bandwidth::*;
pub use self::bufferbloat::*;
pub use self::client_cpu_starved::*;
pub use self::client_host_stack::*;
pub use self::connection_not_reused::*;
pub use self::cpu_throttling::*;
pub use self::dead_address_family::*;
pub use self::delayed_ack::*;
pub use self::error_responses::*;
pub use self::host_egress::*;
pub use self::nagle_delayed_ack::*;
pub use self::old_tls_version::*;
pub use self::pmtu_black_hole::*;
pub use self::pre_tcp_kernel::*;
pub use self::receive_window_limited::*;
pub use self::redirects::*;
pub use self::retransmissions::*;
pub use self::run_queue_delay::*;
pub use self::send_buffer_limited::*;
pub use self::server_tail_latency::*;
pub(crate) use self::shared::*;
pub use self::slow_dns::*;
pub use self::slow_handshake::*;
pub use self::slow_start_after_idle::*;
pub use self::slow_tls::*;
pub use self::small_initial_window::*;
pub use self::socket_queueing::*;
pub use self::tail::*;
pub use self::think_time::*;
pub use self::tls_not_resumed::*;
pub use self::unexplained::*;

/// How a rule reads the run.
#[derive(Clone, Copy)]
pub enum Check {
    /// From the evidence alone.
    Evidence(fn(&Evidence) -> Option<Diagnosis>),
    /// From the evidence and what the other rules found (the open world: what they leave).
    Remainder(fn(&Evidence, &[Diagnosis]) -> Option<Diagnosis>),
}

/// A rule as registered: its id (whose name and description are the result model's,
/// [`RuleId::name`], [`RuleId::about`]), the sides its findings may blame, and its check.
#[derive(Clone, Copy)]
pub struct Rule {
    /// The finding's name.
    pub id: RuleId,
    /// The sides its findings name (checked on every finding the unit tests make).
    pub sides: &'static [Side],
    /// How it reads the run.
    pub check: Check,
}

impl Rule {
    const fn evidence(
        id: RuleId,
        sides: &'static [Side],
        f: fn(&Evidence) -> Option<Diagnosis>,
    ) -> Rule {
        Rule {
            id,
            sides,
            check: Check::Evidence(f),
        }
    }

    const fn remainder(
        id: RuleId,
        sides: &'static [Side],
        f: fn(&Evidence, &[Diagnosis]) -> Option<Diagnosis>,
    ) -> Rule {
        Rule {
            id,
            sides,
            check: Check::Remainder(f),
        }
    }

    /// The registered rule with `id`, if it has one (an id may be named before its rule exists).
    pub fn of(id: RuleId) -> Option<&'static Rule> {
        RULES.iter().find(|r| r.id == id)
    }
}

/// The registry of rules, in the order they are tried (the report ranks what fires by
/// [`rank`]); the rules that read what the others found come last. A new rule is one file in
/// `rules/` and one line here (and its id in `RuleId`); `diagnose --help` and the docs' list are
/// made from this table.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule::evidence(RuleId::NagleDelayedAck, &[Side::Server], nagle_delayed_ack),
    Rule::evidence(RuleId::ThinkTime, &[Side::Server], think_time),
    Rule::evidence(RuleId::SocketQueueing, &[Side::Server], socket_queueing),
    Rule::evidence(RuleId::SlowHandshake, &[Side::Network, Side::Server], slow_handshake),
    Rule::evidence(RuleId::Retransmissions, &[Side::Network], retransmissions),
    Rule::evidence(RuleId::DelayedAck, &[Side::Client], delayed_ack),
    Rule::evidence(RuleId::PreTcpKernel, &[Side::Server], pre_tcp_kernel),
    Rule::evidence(RuleId::Bufferbloat, &[Side::Network, Side::Both], bufferbloat),
    Rule::evidence(RuleId::SlowDns, &[Side::Client], slow_dns),
    Rule::evidence(RuleId::SlowTls, &[Side::Server], slow_tls),
    Rule::evidence(RuleId::CpuThrottling, &[Side::Server], cpu_throttling),
    Rule::evidence(RuleId::RunQueueDelay, &[Side::Server], run_queue_delay),
    Rule::evidence(RuleId::BottleneckBandwidth, &[Side::Network], bottleneck_bandwidth),
    Rule::evidence(RuleId::ServerTailLatency, &[Side::Server], self::server_tail_latency::server_tail_latency),
    Rule::evidence(RuleId::ClientHostStack, &[Side::Client], client_host_stack),
    Rule::evidence(RuleId::HostEgress, &[Side::Client, Side::Server], host_egress),
    Rule::evidence(RuleId::ErrorResponses, &[Side::Server], error_responses),
    Rule::evidence(RuleId::PmtuBlackHole, &[Side::Network], pmtu_black_hole),
    Rule::evidence(RuleId::DeadAddressFamily, &[Side::Server], dead_address_family),
    Rule::evidence(RuleId::ReceiveWindowLimited, &[Side::Client], receive_window_limited),
    Rule::evidence(RuleId::SendBufferLimited, &[Side::Server], send_buffer_limited),
    Rule::evidence(RuleId::ClientCpuStarved, &[Side::Client], client_cpu_starved),
    // The round trips a fix would save: a request over a long path is counted in them (see
    // `crate::accounts`); the path that is left is the floor, no finding of its own.
    // Resumption before the version: where both cost the same round trip, the missing
    // resumption is said first (ranking keeps the order of equals).
    Rule::evidence(RuleId::ConnectionNotReused, &[Side::Server], connection_not_reused),
    Rule::evidence(RuleId::TlsNotResumed, &[Side::Server], tls_not_resumed),
    Rule::evidence(RuleId::OldTlsVersion, &[Side::Server], old_tls_version),
    Rule::evidence(RuleId::SlowStartAfterIdle, &[Side::Server], slow_start_after_idle),
    Rule::evidence(RuleId::SmallInitialWindow, &[Side::Server], small_initial_window),
    Rule::evidence(RuleId::Redirects, &[Side::Both], redirects),
    Rule::remainder(RuleId::Unexplained, &[Side::Server, Side::Both], unexplained),
];

/// Apply every rule, then rank: root causes first (most latency explained first), each
/// consequence linked to its cause (see [`CHAINS`]).
///
/// Then the open world: what the findings leave of a request, when material, is a finding of
/// its own ([`unexplained`]), never silence.
pub fn apply(e: &Evidence) -> Vec<Diagnosis> {
    let mut found = rank(
        e,
        RULES
            .iter()
            .filter_map(|r| match r.check {
                Check::Evidence(f) => f(e),
                Check::Remainder(_) => None,
            })
            .filter(|f| material(e, f))
            .collect(),
    );
    for r in RULES {
        if let Check::Remainder(f) = r.check
            && let Some(d) = f(e, &found)
        {
            found.push(d);
            found = rank(e, found);
        }
    }
    #[cfg(test)]
    for f in &found {
        let sides = Rule::of(f.rule).map_or(&[][..], |r| r.sides);
        assert!(
            sides.contains(&f.side),
            "{:?} blames {:?}, not a side its registration names ({sides:?})",
            f.rule,
            f.side
        );
    }
    found
}

/// The least share of a request a finding must explain to be one: 1/20. Below it the finding
/// is a figure about a mechanism that cost the requests nothing that matters (a `slow_handshake`
/// of 54 ns in a 17 µs request, issue 41), and "a latency problem found" would be false.
pub const MATERIAL_SHARE: f64 = 0.05;

/// …and the least time: 10 µs (a wake-up on an idle host).
pub const MATERIAL_FLOOR_NS: u64 = 10_000;

/// The request a finding's cost is a share of: the single request's median, or a URL's whole
/// request on a new connection (its phases) when that is longer — the set-up costs (DNS, TCP,
/// TLS) are paid there. `None` when no request was measured.
pub fn request_ns(e: &Evidence) -> Option<u64> {
    let single = e.single.as_ref().map(|s| s.p50_ns);
    let phases = e
        .phases
        .as_ref()
        .filter(|p| p.requests > 0)
        .map(|p| p.total_ns());
    single.max(phases).filter(|&r| r > 0)
}

/// Whether a finding explains something material of a request: what it costs a request
/// ([`Diagnosis::explains_ns`]) at least [`MATERIAL_FLOOR_NS`] and [`MATERIAL_SHARE`] of the
/// request ([`request_ns`]). A tail finding is about the requests of the tail, and its wait is
/// measured against theirs (its rule already asked for a heavy tail over enough requests); error
/// pages are a finding about what was measured, not a cost; with no request measured, nothing
/// to compare with, every finding stands on its own evidence.
pub fn material(e: &Evidence, f: &Diagnosis) -> bool {
    // Error pages, and a client that could not run, are findings about what was measured,
    // not costs: said whatever their share.
    if matches!(f.rule, RuleId::ErrorResponses | RuleId::ClientCpuStarved) {
        return true;
    }
    let Some(request) = request_ns(e) else {
        return true;
    };
    let cost = f.explains_ns;
    cost >= MATERIAL_FLOOR_NS
        && (cost as f64 >= MATERIAL_SHARE * request as f64
            || saves_beyond_the_path(e, cost, f.side != Side::Client))
}

/// The least a finding must save on a far path to be one: 100 µs.
pub const FAR_SAVING_FLOOR_NS: u64 = 100_000;

/// Whether `cost` is material against what a request takes beyond a far path's round trip:
/// on a path of a millisecond or more the round trip is a floor no fix on either host lowers,
/// so a cause is weighed against the rest — at least [`FAR_SAVING_FLOOR_NS`] and a quarter of
/// the single request's median beyond the path. 10,000 netfilter rules cost 0.3 ms of a 40 ms
/// request (under 1/20 of it) and are all of what the hosts add.
///
/// What every request takes beyond the path is the smaller of the medians' difference and the
/// fastest request's beyond the fastest SYN ping: a moment of the hosts' noise moves the
/// median, never the floor. The lab's netfilter-10k 20 ms away from the server's host, one run
/// of three: 188 µs in netfilter of every request, the medians 1.16 ms apart on a run whose
/// server read its requests 658 µs late (the host's CPUs busy), the floors 0.48 ms apart —
/// "nothing to save" where the two other runs named the rules.
///
/// For a finding on another host than this one (`beyond_this_host`), what this host's own
/// stack was measured to cost an exchange is taken off too: it is in every request latscope
/// times, no fix elsewhere saves it, and the path's SYN ping (timestamped in the kernel) leaves
/// it out. The same netfilter-10k, another run: 196 µs of the 868 µs beyond the path, 171 µs
/// of which were this host's stack.
pub fn saves_beyond_the_path(e: &Evidence, cost: u64, beyond_this_host: bool) -> bool {
    let (Some(path), Some(single)) = (far_path(e), e.single.as_ref()) else {
        return false;
    };
    let mut beyond = single.p50_ns.saturating_sub(path);
    if let Some(p) = e
        .path
        .as_ref()
        .filter(|p| p.min_ns > 0 && single.min_ns >= p.min_ns)
    {
        beyond = beyond.min(single.min_ns - p.min_ns);
    }
    if beyond_this_host {
        beyond = beyond.saturating_sub(client_stack_ns(e).unwrap_or(0));
    }
    cost >= FAR_SAVING_FLOOR_NS && cost.saturating_mul(4) >= beyond
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
    // A slow link makes a response's later packets wait for its earlier ones in the sender's
    // qdisc (or the driver's ring): that wait is the serialisation the bottleneck rule names,
    // when it covers half of it, not a queue to configure away.
    Link {
        cause: RuleId::BottleneckBandwidth,
        effect: RuleId::HostEgress,
        holds: |e, b, h| {
            held_by_the_device(e, h.side) && b.explains_ns.saturating_mul(2) >= h.explains_ns
        },
    },
    // The client's host holding every packet is what a stage of its way out costs: the stage
    // (named, with its fix) is the cause when it is the client's and covers a quarter of the
    // host's cost (an exchange sends the request and an ACK through it, and the host's figure
    // counts the way in too).
    Link {
        cause: RuleId::HostEgress,
        effect: RuleId::ClientHostStack,
        holds: |_, c, h| c.side == Side::Client && c.explains_ns.saturating_mul(4) >= h.explains_ns,
    },
    // A client that could not run times its own waiting: a tail the requests show, as long as
    // its holds, is the client's — a server's tail or unexplained time seen from it is its
    // consequence when the client's own tail covers half of it.
    Link {
        cause: RuleId::ClientCpuStarved,
        effect: RuleId::ServerTailLatency,
        holds: |_, c, t| c.explains_ns.saturating_mul(2) >= t.explains_ns,
    },
    Link {
        cause: RuleId::ClientCpuStarved,
        effect: RuleId::Unexplained,
        holds: |e, c, u| cost_per_request(e, c).saturating_mul(2) >= cost_per_request(e, u),
    },
    Link {
        cause: RuleId::PreTcpKernel,
        effect: RuleId::SocketQueueing,
        // Each request is at least two packets through the slow path, and the concurrent
        // requests wait for each other's: the kernel accounts for the queueing when that
        // covers half of it.
        holds: |e, c, q| c.explains_ns.saturating_mul(2 * connections(e)) * 2 >= q.explains_ns,
    },
    Link {
        // A cgroup that runs out of CPU quota in most periods cannot serve faster than its
        // quota: concurrent requests queue behind the throttled periods, whatever its workers.
        cause: RuleId::CpuThrottling,
        effect: RuleId::SocketQueueing,
        // Held in fewer periods (one in four or more), the queueing is still the throttling's
        // when it is no longer than the N requests at once waiting out a hold each: at 20 ms
        // from the client, a run meets fewer periods and fewer of them throttled, while the
        // queueing it measures is the same holds (issue 37's stable verdicts).
        holds: |e, _, q| {
            server_throttled(e).is_some_and(|t| {
                throttled_mostly(t)
                    || (throttled_materially(t)
                        && t.throttled.saturating_mul(4) >= t.periods
                        && t.held_per_period().is_some_and(|h| {
                            q.explains_ns <= h.held_ns.saturating_mul(connections(e))
                        }))
            })
        },
    },
    // The same holds make the symptoms the requests show — a server slow before its first
    // byte, a heavy tail, time no rule names — whichever requests met them in a run (issue 37:
    // a throttled server read as think_time once, cpu_throttling the next): they are the
    // throttling's when the group was held in most periods and the symptom is no longer than
    // a hold (a request waits out at most the rest of one).
    Link {
        cause: RuleId::CpuThrottling,
        effect: RuleId::ThinkTime,
        holds: |e, _, t| within_a_hold(e, t.explains_ns),
    },
    Link {
        cause: RuleId::CpuThrottling,
        effect: RuleId::ServerTailLatency,
        holds: |e, _, t| within_a_hold(e, t.explains_ns),
    },
    Link {
        cause: RuleId::CpuThrottling,
        effect: RuleId::Unexplained,
        holds: |e, _, u| within_a_hold(e, u.explains_ns),
    },
    Link {
        // A server that spends milliseconds of CPU on every handshake works through them one
        // at a time per worker: new connections' requests wait in the socket behind them. It
        // accounts for the queueing when N concurrent handshakes cover half of it.
        cause: RuleId::SlowTls,
        effect: RuleId::SocketQueueing,
        holds: |e, c, q| c.explains_ns.saturating_mul(connections(e)) * 2 >= q.explains_ns,
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
        holds: |e, _, _| {
            loss_explains_ack_stalls(e) || retransmissions::loss_inferred_from_timer(e).is_some()
        },
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
        // A server that stops now and then even for one request at a time (a CPU quota, a
        // collector's pauses) stops the more under a load sent to it: a probe arriving during a
        // stop waits it out, while the load's closed loop is served in the bursts between, so
        // the probe waits many times its fair share (the lab's cpu-starved from the client
        // alone: stalls of 9 ms idle, 89 ms under 64 connections, in one run of three).
        cause: RuleId::ServerTailLatency,
        effect: RuleId::Bufferbloat,
        holds: |e, _, b| {
            b.side == Side::Both && self::tail::tail_of(e).is_some_and(|t| t.quantile == "stalls")
        },
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

/// The connections the requests ran on at once (one when the run was not concurrent).
fn connections(e: &Evidence) -> u64 {
    e.concurrent
        .as_ref()
        .map_or(1, |c| u64::from(c.connections))
}

/// The server's cgroup throttling, when its CPU was observed.
fn server_throttled(e: &Evidence) -> Option<&Throttling> {
    e.cpu.as_ref()?.throttling.as_ref()
}

/// The server's group was throttled in most periods ([`throttled_mostly`]) and `ns` is no
/// longer than a throttled period held it (wall clock, with half again for the requests'
/// own time around it).
fn within_a_hold(e: &Evidence, ns: u64) -> bool {
    server_throttled(e)
        .filter(|t| throttled_mostly(t))
        .and_then(Throttling::held_per_period)
        .is_some_and(|h| ns <= h.held_ns.saturating_mul(3) / 2)
}

/// What a finding costs the average request, to rank findings by: its `explains_ns`, except
/// for a tail finding, whose `explains_ns` only the requests of the tail lose (one in a hundred
/// at a p99, one in a thousand at a p99.9, the stalls counted). A 6 ms tail at the p99 costs a request 64 µs on
/// average: less than a 98 µs wait every request has.
pub fn cost_per_request(e: &Evidence, f: &Diagnosis) -> u64 {
    let single = e.single.as_ref();
    if !self::server_tail_latency::is_tail(f, single.map(|s| s.p50_ns)) {
        return f.explains_ns;
    }
    match self::tail::tail_of(e) {
        Some(t) => t.per_request_ns(f.explains_ns),
        None => f.explains_ns / 100,
    }
}

/// A cause explains another finding only if it explains something itself: at least
/// 1/[`CAUSE_SHARE`] of what the effect costs a request ([`cost_per_request`]; an effect that
/// costs nothing needs nothing). A finding that
/// explains 0 ns — the client's counters reading a full accept queue's resent requests as
/// loss, while no request measured waited for it — cannot be why the handshakes cost 65 ms a
/// request (the lab's accept-queue from the client's seat, round 7).
pub fn explains_something(e: &Evidence, cause: &Diagnosis, effect: &Diagnosis) -> bool {
    // A tail explains what the requests that meet it lose: its own figure, not its average.
    let cause_ns = if self::server_tail_latency::is_tail(cause, e.single.as_ref().map(|s| s.p50_ns))
    {
        cause.explains_ns
    } else {
        cost_per_request(e, cause)
    };
    cause_ns.saturating_mul(CAUSE_SHARE) >= cost_per_request(e, effect)
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
mod round_trip_tests;
#[cfg(test)]
mod tests;

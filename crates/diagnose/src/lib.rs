//! `latscope diagnose` as a library: runs the measurements a latency hunt needs, in order, and
//! applies the named rules of [`rules`] to what they found. A caller states a [`plan::Request`],
//! checked into a [`plan::Plan`]; each measurement is a step of [`steps`], run by the pipeline
//! in [`collect`] into the typed [`evidence`]; rules are pure and tested on their own. The
//! `latscope` binary (`diagnose`, `demo`) and the fleet agent (on an SLO breach) both run it.

pub mod accounts;
pub mod collect;
pub mod context;
pub mod evidence;
pub mod locate;
pub mod plan;
pub mod remote;
pub mod resolv;
pub mod rounds;
pub mod rules;
pub mod steps;
pub mod stub;

use latscope_core::model::diagnose::{Budget, DiagnoseReport, Diagnosis, RuleId};
use latscope_core::model::diagnose::{RequestRounds, RoundTrips};
use latscope_core::model::round_trips::RequestKind;
use std::fmt::Write;

use latscope_core::units::{count, format_ns};

use evidence::Evidence;

/// Where a request's time goes, from the evidence.
pub fn budget(ev: &Evidence) -> Budget {
    // Only the serialisation the single request's time bears out: a rate that predicts more
    // than was measured is not what these requests see, and leaves the hosts' share alone.
    let ser = ev.serialisation_share_ns();
    let host_ns = match (&ev.single, &ev.path) {
        (Some(s), Some(pth)) => Some(
            s.p50_ns
                .saturating_sub(pth.p50_ns)
                .saturating_sub(ser.unwrap_or(0)),
        ),
        _ => None,
    };
    Budget {
        path_rtt_ns: ev.path.as_ref().map(|s| s.p50_ns),
        single_request_ns: ev.single.as_ref().map(|s| s.p50_ns),
        concurrent_request_ns: ev.concurrent.as_ref().map(|c| c.latency.p50_ns),
        concurrency: ev.concurrent.as_ref().map(|c| c.connections).unwrap_or(1),
        host_ns,
        client_host_ns: rules::client_stack_ns(ev),
        server_app_ns: server_app_ns(ev, host_ns),
        bottleneck_bps: ev.bottleneck.and_then(|b| b.slowest_bps()),
        serialisation_ns: ser,
    }
}

/// The server's time before its first response byte that no TCP timer explains: the request
/// phases' time to first byte beyond the path's round trip, or else the hosts' excess when the
/// think-time rule attributes it to the application. Never more than the hosts' share of the
/// same budget (`host_ns`): the phases are a few requests on new connections, the budget the
/// median of many, and a part cannot exceed its whole.
///
/// Only when something places time at the server's end ([`rules::server_end_located`]): never
/// the server's time without a measurement that puts it there. What this host's own stack was
/// measured to cost an exchange ([`rules::client_stack_ns`]: a request's way out, its
/// response's way in) lies within both figures and is the client's, not the server's.
fn server_app_ns(ev: &Evidence, host_ns: Option<u64>) -> Option<u64> {
    if rules::timer_explains(ev) || !rules::server_end_located(ev) {
        return None;
    }
    let path = ev.path.as_ref().map_or(0, |p| p.p50_ns);
    let client = rules::client_stack_ns(ev).unwrap_or(0);
    let app = match &ev.phases {
        Some(ph) => Some(ph.ttfb_ns.saturating_sub(path)),
        None => rules::think_time(ev).map(|d| d.explains_ns),
    }?
    .saturating_sub(client);
    Some(host_ns.map_or(app, |h| app.min(h.saturating_sub(client))))
}

/// One sentence: the answer to "where does the latency come from?", accounting for the
/// budget — how much of a request the top finding explains, the round trips it costs, what it
/// explains in turn, and with no finding where the time goes (over a long path: the path is
/// the floor).
pub fn verdict(findings: &[Diagnosis], budget: &Budget, rounds: Option<&RoundTrips>) -> String {
    if let Some(top) = findings.first() {
        let mut v = if top.rule == RuleId::ErrorResponses {
            // A finding about what was measured (error pages), not a share of the time.
            top.title.clone()
        } else if rules::is_tail(top, budget.single_request_ns) {
            format!(
                "{} — {} beyond the median in the slowest requests (the tail)",
                top.title,
                format_ns(top.explains_ns as f64)
            )
        } else if top.explains_ns == 0 {
            format!("{} — its cost per request was not measured", top.title)
        } else {
            format!(
                "{} — {} of each request",
                top.title,
                format_ns(top.explains_ns as f64)
            )
        };
        // Of the request the finding's round trips are in, else of one request at a time.
        let whole = rounds
            .and_then(|r| account_saving(r, top.rule))
            .map(|(a, _)| a.measured_ns)
            .or(budget.single_request_ns);
        if let Some(s) = whole.filter(|&s| s >= top.explains_ns && s > 0 && top.explains_ns > 0) {
            let _ = write!(
                v,
                " ({:.0}% of its {})",
                100.0 * top.explains_ns as f64 / s as f64,
                format_ns(s as f64)
            );
        }
        if let Some(r) = rounds.and_then(|r| rounds_saved(r, top.rule)) {
            let _ = write!(v, "; {r}");
        }
        let effects: Vec<&str> = top
            .causes
            .iter()
            .filter_map(|r| findings.iter().find(|f| f.rule == *r))
            .map(|f| f.title.as_str())
            .collect();
        if !effects.is_empty() {
            let _ = write!(v, "; this explains: {}", effects.join("; "));
        }
        let _ = write!(v, "; fix on the {} side: {}", top.side.name(), top.fix);
        if top.rule != RuleId::ErrorResponses
            && let Some(errors) = findings.iter().find(|f| f.rule == RuleId::ErrorResponses)
        {
            let _ = write!(v, " (note: {})", errors.title);
        }
        // Figures taken by a client that could not always run are said to be so, whatever
        // else was found.
        if top.rule != RuleId::ClientCpuStarved
            && let Some(starved) = findings.iter().find(|f| f.rule == RuleId::ClientCpuStarved)
        {
            let _ = write!(v, " (caveat: {})", starved.title);
        }
        return v;
    }
    if let Some(floor) = rounds.and_then(|r| path_floor(r, budget)) {
        return floor;
    }
    match (budget.single_request_ns, budget.path_rtt_ns, budget.host_ns) {
        (Some(s), Some(p), Some(h)) => {
            let mut v = format!(
                "no latency problem found: a request takes {} — {} network path, {} in the hosts (kernel and application)",
                format_ns(s as f64),
                format_ns(p as f64),
                format_ns(h as f64)
            );
            if let Some(a) = budget.server_app_ns.filter(|&a| a > 0) {
                let _ = write!(
                    v,
                    ", of which {} is the server's own time before its first response byte",
                    format_ns(a as f64)
                );
            }
            v
        }
        (None, Some(p), _) => format!(
            "no problem on the path (connect RTT {}); the application was not measured",
            format_ns(p as f64)
        ),
        _ => "nothing could be measured".into(),
    }
}

/// The account where `rule` saves the most, and what it saves there, when it saves any (the
/// first of equals).
fn account_saving(r: &RoundTrips, rule: RuleId) -> Option<(&RequestRounds, u64)> {
    r.requests
        .iter()
        .map(|a| {
            let saved = a
                .avoidable()
                .filter(|p| p.rule == Some(rule))
                .map(|p| p.avoidable_ns)
                .sum::<u64>();
            (a, saved)
        })
        .filter(|&(_, saved)| saved > 0)
        .fold(None, |best, (a, saved)| match best {
            Some((_, b)) if b >= saved => best,
            _ => Some((a, saved)),
        })
}

/// "the next request: 4 round trips where 1 would do" for the account where `rule` saves the
/// most, when it saves any.
fn rounds_saved(r: &RoundTrips, rule: RuleId) -> Option<String> {
    let (a, _) = account_saving(r, rule)?;
    Some(format!(
        "{}: {} where {} would do",
        a.request.label(),
        count(u64::from(a.round_trips()), "round trip"),
        a.needed()
    ))
}

/// The share of a request the path's round trip must be for the path to be the floor of a
/// clean run's time (the rest in the hosts).
const FLOOR_SHARE: f64 = 0.6;

/// With nothing found over a long path: the path is the floor. "the path is the floor: nothing
/// to save — the next request takes 1 round trip of 40.1ms (40.5ms measured); a first request
/// 2 (80.9ms)". `None` over a short path, or where the path is not most of a request.
fn path_floor(r: &RoundTrips, budget: &Budget) -> Option<String> {
    let single = budget.single_request_ns?;
    if r.rtt_ns < 1_000_000 || (r.rtt_ns as f64) < FLOOR_SHARE * single as f64 {
        return None;
    }
    let next = r.requests.iter().find(|a| a.request == RequestKind::Next)?;
    let mut v = format!(
        "the path is the floor: nothing to save — {} takes {} of {} ({} measured)",
        next.request.label(),
        count(u64::from(next.round_trips()), "round trip"),
        format_ns(r.rtt_ns as f64),
        format_ns(next.measured_ns as f64)
    );
    if let Some(first) = r.requests.iter().find(|a| a.request == RequestKind::First) {
        let _ = write!(
            v,
            "; {} {} ({}); only a shorter path (a server or a CDN closer to the clients) makes them faster",
            first.request.label(),
            first.round_trips(),
            format_ns(first.measured_ns as f64)
        );
    }
    Some(v)
}

/// What a run amounts to, which decides the exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Ctrl-C: partial results.
    Interrupted,
    /// The target could not be measured (no connection, or no step ran): never "no problem".
    Unmeasurable(String),
    /// At least one rule fired.
    Findings,
    /// Measured, and nothing is wrong.
    Clean,
}

impl Outcome {
    /// Classify a finished report from its typed steps.
    pub fn of(r: &DiagnoseReport) -> Outcome {
        if r.interrupted {
            return Outcome::Interrupted;
        }
        if let Some(why) = r.unmeasurable() {
            return Outcome::Unmeasurable(why);
        }
        if r.findings.is_empty() {
            Outcome::Clean
        } else {
            Outcome::Findings
        }
    }
}

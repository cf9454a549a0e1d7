//! `unexplained`: the open world. A material share of a request that no named rule explains is
//! said as such — how much, where it sits and what was ruled out — rather than "no problem" or
//! the nearest named cause.

use super::*;

/// Where the unexplained time sits, as far as the evidence can place it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At the server's end (its host or its application): this host's stack was measured and
    /// ruled out, or the server's was observed.
    ServerEnd,
    /// Between the two ends' stacks: neither this host's nor the server's was measured.
    Unplaced,
}

/// The unexplained share is material when it is at least half the request, at least three
/// times the parts that were measured (the path's RTT, the serialisation, this host's stack),
/// and at least ten times this host's own wake-up lateness (a user-space server needs a
/// wake-up or two per request; on an idle host that is tens of microseconds, not a finding).
fn material(e: &Evidence, unexplained: u64, single: u64) -> bool {
    let path = e.path.as_ref().map_or(0, |p| p.p50_ns);
    let wire = e.bottleneck.map_or(0, |b| b.serialisation_ns());
    let client = client_stack_ns(e).unwrap_or(0);
    let noise = e
        .host_noise
        .as_ref()
        .map_or(50_000, |n| n.p50_ns.max(5_000));
    unexplained * 2 >= single
        && unexplained >= 3 * (path + wire + client)
        && unexplained >= 10 * noise
}

/// What the findings explain of a request: the root findings' costs added up (consequences are
/// counted with their cause), or the largest single finding's when that is more (a consequence
/// measured directly, e.g. the delayed ACKs a loss made necessary, can exceed its cause's
/// average).
fn explained(e: &Evidence, found: &[Diagnosis]) -> u64 {
    let roots: u64 = found
        .iter()
        .filter(|f| f.caused_by.is_none())
        .map(|f| cost_per_request(e, f))
        .sum();
    let largest = found
        .iter()
        .map(|f| cost_per_request(e, f))
        .max()
        .unwrap_or(0);
    roots.max(largest)
}

/// What is left beyond the path and the findings: at most what an experiment left when it took
/// a cause away (TCP_QUICKACK removed the waits for the client's ACK: what remains with it on,
/// beyond the path, is all that can be unexplained).
fn left_over(e: &Evidence, found: &[Diagnosis], host: u64) -> u64 {
    let mut left = host.saturating_sub(explained(e, found));
    if quickack_helped(e)
        && let (Some(q), Some(p)) = (&e.quickack, &e.path)
    {
        let wire = e.bottleneck.map_or(0, |b| b.serialisation_ns());
        left = left.min(q.p50_ns.saturating_sub(p.p50_ns).saturating_sub(wire));
    }
    left
}

/// What no named rule explains, when it is material: the part of the single request's median
/// that the path, the serialisation and the findings leave ([`unexplained_share`]), or — when
/// nothing at all was found — a heavy tail that only concurrent requests show
/// ([`unexplained_concurrent_tail`]). `found` are the other rules' findings.
pub fn unexplained(e: &Evidence, found: &[Diagnosis]) -> Option<Diagnosis> {
    unexplained_share(e, found).or_else(|| {
        if found.is_empty() {
            unexplained_concurrent_tail(e).or_else(|| unexplained_concurrent_wait(e))
        } else {
            None
        }
    })
}

/// Fewest concurrent requests for their median to stand on.
const CONCURRENT_MIN_SAMPLES: u64 = 20;

/// Requests at once that each wait far more than a server serving one at a time would make
/// them: their median, beyond what one alone takes of the server's end ([`concurrency_ratio`]:
/// beyond a far path's round trip), over [`SERIAL_MAX_PER_CONNECTION`] × N times it — the
/// server serves them slower together than one by one. Its CPU quota used up within a period,
/// a lock or a pool that runs out: from the client the cause cannot be named, and calling it
/// clean (the path the floor) would hide a server that cannot take a handful of users at once.
/// The wait must be material on its own: at least 1 ms and a quarter of one request.
///
/// The lab's cpu-throttled at 20 ms from the client alone (a threaded Python server, 2 ms of
/// CPU a request, 10 ms of CPU per 100 ms): one at a time 22.5 ms over a 20.3 ms path, 8 at once
/// p50 103 ms, p99 598 ms (35 requests) — 37× the server's 2.2 ms share where one worker would
/// make it 8×; no tail of 25 medians, so the tail branch is silent.
fn unexplained_concurrent_wait(e: &Evidence) -> Option<Diagnosis> {
    let c = e.concurrent.as_ref()?;
    if c.latency.count < CONCURRENT_MIN_SAMPLES || data_loss_material(e) {
        return None;
    }
    let (n, single, conc, ratio) = concurrency_ratio(e)?;
    let wait = conc.saturating_sub(single);
    if ratio <= SERIAL_MAX_PER_CONNECTION * f64::from(n)
        || wait < 1_000_000
        || wait.saturating_mul(4) < single
    {
        return None;
    }
    let alone = queueable_ns(e, single);
    let mut evidence = vec![format!(
        "one request at a time: p50 {}; {n} at once: p50 {}, p99 {} over {}",
        format_ns(single as f64),
        format_ns(conc as f64),
        format_ns(c.latency.p99_ns as f64),
        count(c.latency.count, "request")
    )];
    evidence.push(match far_path(e) {
        Some(path) => format!(
            "beyond the path's round trip of {} (every request pays it at the same time), a request takes {} alone and {} with {n} at once: {ratio:.0}× — a server that serves one at a time makes it {n}× at most",
            format_ns(path as f64),
            format_ns(alone as f64),
            format_ns(queueable_ns(e, conc) as f64)
        ),
        None => format!(
            "{ratio:.0}× longer with {n} at once — a server that serves one at a time makes it {n}× at most"
        ),
    });
    if let Some(u) = &e.under_load
        && let Load::Http {
            connections,
            requests_per_sec,
            ..
        } = u.load
    {
        evidence.push(format!(
            "under load ({connections} requests at once, served at {requests_per_sec:.0}/s): a probe request p50 {} against {} idle",
            format_ns(u.loaded.p50_ns as f64),
            format_ns(u.idle.p50_ns as f64)
        ));
    }
    evidence.push(ruled_out(e));
    let (side, place, fix) = concurrency_place(
        e,
        &mut evidence,
        "look at the server while requests arrive together: its CPU quota (cgroup `cpu.max`, `cpu.cfs_quota_us`, `nr_throttled` in `cpu.stat`) and run queue, its worker or connection pool, locks, garbage collection; run `latscope diagnose` on its host (or with its agent) to see them",
    );
    Some(Diagnosis {
        rule: RuleId::Unexplained,
        title: format!(
            "with {n} requests at once each waits {} more than alone, {ratio:.0}× what the server's end takes of one — more than a server serving one at a time makes them wait, and no named cause explains it: {place}",
            format_ns(wait as f64)
        ),
        explains_ns: wait,
        confidence: 0.5,
        side,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// The part of the single request's median that the path, the serialisation and the findings
/// leave unexplained, when it is material.
fn unexplained_share(e: &Evidence, found: &[Diagnosis]) -> Option<Diagnosis> {
    let (single, path, host) = host_excess(e)?;
    let left = left_over(e, found, host);
    if left == 0 || !material(e, left, single) {
        return None;
    }
    let held_back = sender_held_back(e);
    let place = if server_end_located(e) || held_back.is_some() {
        Place::ServerEnd
    } else {
        Place::Unplaced
    };
    let mut evidence = vec![format!(
        "one request: p50 {} against a path RTT of {}: {} ({:.0}%) that {}",
        format_ns(single as f64),
        format_ns(path as f64),
        format_ns(left as f64),
        100.0 * left as f64 / single as f64,
        if found.is_empty() {
            "no rule explains".to_string()
        } else {
            "the findings above leave unexplained".to_string()
        }
    )];
    evidence.push(ruled_out(e));
    evidence.extend(held_back.clone());
    let (title, side, fix) = match place {
        Place::ServerEnd => {
            let seen = if held_back.is_some() && !server_observed(e) {
                "the server held the response back: its send buffer, its application's writes or its congestion window"
            } else if server_observed(e) {
                evidence.push("the server's end was observed (its sockets, kernel stack, run queue or counters) and none of its named causes fired".into());
                "the server's application or something the observers do not see"
            } else {
                evidence.push(format!(
                    "this host's own stack was measured ({} per exchange) and is not where it goes; the server's sockets, kernel stack, run queue and cgroup are not visible from here",
                    client_stack_ns(e).map_or("-".into(), |c| format_ns(c as f64))
                ));
                "the server's host or its application"
            };
            (
                format!(
                    "{} of each request is explained by no named cause: it sits at the server's end ({seen})",
                    format_ns(left as f64)
                ),
                Side::Server,
                "look at the server: run `latscope diagnose` on its host (or with its agent) to see its kernel stack, run queue, cgroup and sockets; profile its request handling".to_string(),
            )
        }
        Place::Unplaced => {
            evidence.push("neither this host's own stack (no kernel timestamps, no SYN ping to compare connects with) nor the server's was measured: the time can be in either host".into());
            (
                format!(
                    "{} of each request is explained by no named cause, in the hosts beyond the path's RTT (this one's or the server's: neither was measured)",
                    format_ns(left as f64)
                ),
                Side::Both,
                "measure each end: run with CAP_NET_RAW (a SYN ping to compare connects with), and `latscope diagnose` on the server's host (or with its agent)".to_string(),
            )
        }
    };
    Some(Diagnosis {
        rule: RuleId::Unexplained,
        title,
        explains_ns: left,
        confidence: 0.5,
        side,
        evidence,
        fix,
        caused_by: None,
        causes: Vec::new(),
    })
}

/// A concurrency tail must add at least this beyond the concurrent median: twice the idle
/// tail's floor, since requests that arrive together also wait for each other a little.
const CONCURRENT_TAIL_FLOOR_NS: u64 = 2 * TAIL_FLOOR_NS;

/// A heavy tail that only requests arriving together show, which no named rule explains: the
/// p99 of the concurrent step at least [`CONCURRENT_TAIL_FLOOR_NS`] and [`TAIL_RATIO`] medians
/// beyond its median, over enough requests, with the path's own tail, loss, the bottleneck's
/// serialisation and this host's scheduling noise ruled out. A server that stalls when several
/// requests arrive at once — a CPU quota used up within a period, a pool or lock that runs
/// out, garbage collection under allocation pressure — shows it, while one request at a time
/// fits in its slack. From the client the cause cannot be named (a quota, a run queue, a lock
/// are all on the server's host): the finding says how much, where and what was ruled out.
///
/// The lab's cpu-starved (a threaded Python server in a cgroup with 10 ms of CPU per 100 ms),
/// from the client alone: 8 at once p50 63 µs, p99 86.5 ms; one at a time no tail in that run.
/// Healthy servers in the same runs: p99 at most 1.6 ms under 8 connections.
fn unexplained_concurrent_tail(e: &Evidence) -> Option<Diagnosis> {
    let c = e.concurrent.as_ref()?;
    let t = self::tail::tail_over(&c.latency, CONCURRENT_TAIL_FLOOR_NS)?;
    if t.quantile != "p99" || data_loss_material(e) || bandwidth_explains_concurrency(e) {
        return None;
    }
    let path = self::server_tail_latency::path_stays_short(e, &t)?;
    let quiet = self::server_tail_latency::host_quiet(e, &t)?;
    let per_request = t.extra_ns() / 100;
    let mut evidence = vec![format!(
        "{} at once: p50 {}, p99 {} ({:.0}× the median) over {} requests",
        c.connections,
        format_ns(t.p50_ns as f64),
        format_ns(t.tail_ns as f64),
        t.tail_ns as f64 / t.p50_ns.max(1) as f64,
        t.samples
    )];
    if let Some(s) = &e.single {
        evidence.push(format!(
            "one request at a time: p50 {}, p99 {} — the tail comes with concurrency",
            format_ns(s.p50_ns as f64),
            format_ns(s.p99_ns as f64)
        ));
    }
    evidence.extend(path);
    evidence.push(quiet);
    evidence.push(ruled_out(e));
    let (side, place, fix) = concurrency_place(
        e,
        &mut evidence,
        "look at the server while requests arrive together: its CPU quota (cgroup `cpu.max`, `cpu.cfs_quota_us`) and run queue, its worker or connection pool, locks, garbage collection; run `latscope diagnose` on its host (or with its agent) to see them",
    );
    Some(Diagnosis {
        rule: RuleId::Unexplained,
        title: format!(
            "with {} requests at once, one in a hundred waits {} beyond the median, and no named cause explains it: {place}",
            c.connections,
            format_ns(t.extra_ns() as f64)
        ),
        explains_ns: per_request,
        confidence: 0.5,
        side,
        evidence,
        fix: fix.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Where a wait that only requests arriving together show sits, with the line that says what
/// could not be seen: the server's end (its fix `server_fix`) when something places it there,
/// else either host. (side, the place in the title's words, the fix)
fn concurrency_place(
    e: &Evidence,
    evidence: &mut Vec<String>,
    server_fix: &'static str,
) -> (Side, &'static str, &'static str) {
    if server_end_located(e) {
        if !server_observed(e) {
            evidence.push(
                "the server's CPU quota, run queue, locks and sockets are not visible from here"
                    .into(),
            );
        }
        (Side::Server, "it sits at the server's end", server_fix)
    } else {
        evidence.push("neither this host's own stack nor the server's was measured: the time can be in either host".into());
        (
            Side::Both,
            "in the hosts beyond the path (this one's or the server's: neither was measured)",
            "measure each end: run with CAP_NET_RAW (kernel timestamps of this host's stack), and `latscope diagnose` on the server's host (or with its agent)",
        )
    }
}

/// The line that says what the measurements ruled out.
fn ruled_out(e: &Evidence) -> String {
    let mut out = Vec::new();
    if e.quickack.is_some() && !quickack_helped(e) {
        out.push("delayed ACKs (TCP_QUICKACK changed nothing)");
    }
    if let Some(c) = &e.capture {
        if lost_on_wire(e, c) == 0 {
            out.push("loss (no retransmission on the wire)");
        }
        if ack_stalls(c).is_none() {
            out.push("TCP timers (no stall of a timer's length on the wire)");
        }
    }
    if e.bottleneck.is_some() {
        out.push("the bottleneck's serialisation (subtracted)");
    }
    if client_host_ruled_out(e) {
        out.push("this host's own stack");
    }
    if out.is_empty() {
        "ruled out: nothing beyond the path's RTT (no experiment ran that could)".into()
    } else {
        format!("ruled out: {}", out.join(", "))
    }
}

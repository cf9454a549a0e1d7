//! `socket_queueing`: requests wait in the server's socket before it reads them.

use super::*;

/// Socket queueing: requests wait in the server's socket before it reads them. Two instruments
/// see it, and either is enough (one cause, one fix — two findings would only split it):
/// - from the client, with N concurrent connections each request takes about N times as long as
///   alone: the server handles one request at a time and the rest wait ([`concurrency_scaling`]);
/// - from the server's kernel, data queued on the socket long before the application reads it
///   (netstacklat's tcp-socket-enqueued → tcp-socket-read, [`read_wait`]): too few workers, or
///   busy ones.
pub fn socket_queueing(e: &Evidence) -> Option<Diagnosis> {
    let scaling = concurrency_scaling(e);
    let read = read_wait(e);
    if scaling.is_none() && read.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    let (title, explains_ns, mut confidence) = match scaling {
        Some((n, single, conc, ratio)) => {
            evidence.push(format!(
                "one request at a time: p50 {}",
                format_ns(single as f64)
            ));
            match far_path(e) {
                Some(path) => evidence.push(format!(
                    "{n} at once: p50 {} — beyond the path's round trip of {} (paid by every request at once, never queued), {} against {}: {ratio:.1}× longer, close to {n}× (serialised)",
                    format_ns(conc as f64),
                    format_ns(path as f64),
                    format_ns(conc.saturating_sub(path) as f64),
                    format_ns(single.saturating_sub(path) as f64)
                )),
                None => evidence.push(format!(
                    "{n} at once: p50 {} — {ratio:.1}× longer, close to {n}× (serialised)",
                    format_ns(conc as f64)
                )),
            }
            (
                "requests wait in the server's socket queue: it serves one at a time",
                conc.saturating_sub(single),
                if ratio >= 0.8 * f64::from(n) {
                    0.85
                } else {
                    0.65
                },
            )
        }
        None => (
            "requests wait in the socket before the server reads them",
            read.as_ref().map_or(0, |r| r.0),
            0.85,
        ),
    };
    if let Some((_, line)) = read {
        evidence.push(line);
        if scaling.is_some() {
            confidence = 0.9;
        }
    }
    Some(Diagnosis {
        rule: RuleId::SocketQueueing,
        title: title.into(),
        explains_ns,
        confidence,
        side: Side::Server,
        evidence,
        fix: "add workers (nginx `worker_processes`, more threads or processes) or make request handling concurrent; if the workers are idle, find what keeps them from reading (blocking calls, a global lock, CPU starvation)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// A server that serves one request at a time makes N at once take up to N times its time
/// (each waits for those before it); beyond this many times N, its requests are served slower
/// together than one by one — a CPU quota a period's work uses up, a lock, a pool — which is
/// no longer one worker's queue ([`super::unexplained`] says what is known of it).
pub const SERIAL_MAX_PER_CONNECTION: f64 = 2.0;

/// The path's round trip when it is far (1 ms or more): every request pays it, the concurrent
/// ones at the same time, so only what a request takes beyond it can queue at the server.
pub(crate) fn far_path(e: &Evidence) -> Option<u64> {
    e.path
        .as_ref()
        .map(|p| p.p50_ns)
        .filter(|&p| p >= 1_000_000)
}

/// What the server's end can queue of a request that took `ns`: beyond a far path's round
/// trip ([`far_path`]); all of it on a near path (its round trip is within the noise of the
/// hosts' time, and the lab's near rules were measured that way).
pub(crate) fn queueable_ns(e: &Evidence, ns: u64) -> u64 {
    far_path(e).map_or(ns, |path| ns.saturating_sub(path))
}

/// The concurrent requests' time against one alone's, in what the server's end can queue of
/// each ([`queueable_ns`]): the connections, the single and the concurrent medians, and the
/// ratio. Not when the single request is too fast for the ratio to mean anything (under
/// 200 µs), nor when serialisation at the bottleneck explains it (the requests queue on the
/// link, not in the server), nor when the wait is measured to be spent on this host
/// ([`wait_on_client`]) or is within this host's own scheduling noise ([`within_host_noise`]).
pub(crate) fn concurrency_ratio(e: &Evidence) -> Option<(u32, u64, u64, f64)> {
    let c = e.concurrent.as_ref()?;
    let (n, conc) = (c.connections, c.latency.p50_ns);
    let single = e.single.as_ref()?.p50_ns;
    let (alone, together) = (queueable_ns(e, single), queueable_ns(e, conc));
    if n < 2 || alone < 200_000 || bandwidth_explains_concurrency(e) {
        return None;
    }
    if wait_on_client(e, n, conc.saturating_sub(single)).is_some()
        || within_host_noise(e, conc.saturating_sub(single))
    {
        return None;
    }
    Some((n, single, conc, together as f64 / alone as f64))
}

/// Whether the concurrent requests' `wait` (their median beyond one alone's) is within twice
/// what this host takes, at its p99, to wake a sleeping thread: N connections at once share the
/// CPUs of a busy host with everything else on it, and a wait of that size is its contention,
/// not a server that serves one request at a time. The lab's healthy nginx 20 ms away, from
/// the server's host (one run of three): 8 at once 1.57 ms slower than one alone (7× the
/// 262 µs a request took beyond the path), while this host woke a thread 2.1 ms late at its
/// p99 and nginx waited for a CPU 1.6 ms at its own: "it serves one at a time" of an nginx.
///
/// Where the server's own run-queue waits were measured (its host, or its agent), they decide:
/// contention makes the server's threads wait for a CPU about as long as the requests wait, and
/// a server whose threads got a CPU at once (p99 under a quarter of the wait) kept the requests
/// waiting itself. The lab's single-threaded `python3 -m http.server` beside its agent: 8 at
/// once 2.86 ms slower, this host waking a thread 1.65 ms late at its p99 that run, and the
/// server's thread waiting 324 µs for a CPU at its p99 — a queue, read as noise.
pub(crate) fn within_host_noise(e: &Evidence, wait: u64) -> bool {
    let noisy = e
        .host_noise
        .as_ref()
        .is_some_and(|n| n.count > 0 && wait < n.p99_ns.saturating_mul(2));
    let server_ran_at_once = e
        .cpu
        .as_ref()
        .and_then(|c| c.run_queue.as_ref())
        .is_some_and(|r| r.waits > 0 && r.p99_ns * 4.0 < wait as f64);
    noisy && !server_ran_at_once
}

/// N concurrent requests take about N times as long as one alone (at least 0.6 N, at most
/// [`SERIAL_MAX_PER_CONNECTION`] N), counted beyond a far path's round trip
/// ([`concurrency_ratio`]): 8 at once 20 ms away from a one-worker server that takes 2 ms a
/// request wait ~16 ms each, 1.7× the whole request but 8× its server's share.
pub(crate) fn concurrency_scaling(e: &Evidence) -> Option<(u32, u64, u64, f64)> {
    let (n, single, conc, ratio) = concurrency_ratio(e)?;
    let n_f = f64::from(n);
    (ratio >= 0.6 * n_f && ratio <= SERIAL_MAX_PER_CONNECTION * n_f)
        .then_some((n, single, conc, ratio))
}

/// The server's kernel had requests queued on the socket for a millisecond or more (median) and
/// ten times as long as they took to get there: the wait, and its evidence line.
pub(crate) fn read_wait(e: &Evidence) -> Option<(u64, String)> {
    let st = e.stack.as_ref()?;
    let (enq, read) = (st.enqueued_ns?, st.read_ns?);
    if read < 1_000_000.0 || read < 10.0 * enq.max(1.0) {
        return None;
    }
    Some((
        (read - enq) as u64,
        format!(
            "kernel stack (eBPF), server side: queued on the socket after {} but read by the application after {} (median{})",
            format_ns(enq),
            format_ns(read),
            st.read_bucket
                .as_ref()
                .map(|b| format!(", bucket {b}"))
                .unwrap_or_default()
        ),
    ))
}

/// Why the concurrent requests' extra `wait` (with `n` at once) is this host's and not the
/// server's queue, when it is: only when this host's own stack was measured high
/// ([`client_stack_high`]), the one place besides the server that N connections' packets
/// queue in — a per-packet cost on the client (its netfilter rules, its qdisc's classifiers)
/// is CPU time that the connections' packets take one after another. Any of three
/// measurements places the wait there:
/// - the server's kernel saw the connections' data read from its socket promptly: at the 90th
///   percentile in under a quarter of the wait (a server that serves one request at a time
///   holds most concurrent requests in its socket for about the wait), [`WaitOnClient::ServerReadPromptly`];
/// - this host's stack, once per connection, covers half the wait (N exchanges through it one
///   after another), [`WaitOnClient::StackCovers`];
/// - the server's share of a request (the hosts' excess beyond this host's stack), N times
///   over, is less than half the wait, [`WaitOnClient::ServerShareSmall`].
///
/// The lab's client-netfilter (6,000 nftables rules on the client's output hook, nginx):
/// 184–284 µs of a 226–328 µs request in the client's stack, 8 at once 0.7–1.5 ms longer,
/// the server reading the requests 16–44 µs after they reached its socket (median).
pub(crate) fn wait_on_client(e: &Evidence, n: u32, wait: u64) -> Option<WaitOnClient> {
    if !client_stack_high(e) {
        return None;
    }
    let client = client_stack_ns(e)?;
    if let Some(w) = e.stack.as_ref().and_then(StackEvidence::socket_wait_p90_ns)
        && w.saturating_mul(4) < wait
    {
        return Some(WaitOnClient::ServerReadPromptly { p90_ns: w });
    }
    if client.saturating_mul(u64::from(n)).saturating_mul(2) >= wait {
        return Some(WaitOnClient::StackCovers { stack_ns: client });
    }
    let (_, _, host) = host_excess(e)?;
    let server = host.saturating_sub(client);
    (server.saturating_mul(u64::from(n)).saturating_mul(2) < wait)
        .then_some(WaitOnClient::ServerShareSmall { server_ns: server })
}

/// Which measurement places the concurrent requests' wait on the client ([`wait_on_client`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOnClient {
    /// The server's kernel: the connections' data left its socket this soon (p90, ns).
    ServerReadPromptly { p90_ns: u64 },
    /// This host's stack per exchange (ns), N times over, covers half the wait.
    StackCovers { stack_ns: u64 },
    /// The server's share of a request (ns), N times over, is less than half the wait.
    ServerShareSmall { server_ns: u64 },
}

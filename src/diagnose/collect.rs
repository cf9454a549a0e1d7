//! Evidence collection: each step runs one of latscope's engines and records what it measured
//! or why it was skipped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use latscope_core::Summary;
use latscope_core::model::Meta;
use latscope_core::model::connect::ConnectMode;
use latscope_core::model::diagnose::{Budget, DiagnoseReport, Step};
use latscope_core::model::rr::{ServerBehaviour, SockOpts, Transport};
use latscope_core::model::stream::{Direction, StreamOptions};
use latscope_core::units::format_ns;
use latscope_net::connect::ConnectConfig;
use latscope_net::proto::{Start, StreamSpec, TestKind};
use latscope_net::rr::{Peer, RrConfig, StopAfter, open_session};
use latscope_net::sock::Target;
use latscope_net::stream::StreamConfig;

use super::rules::{self, Evidence};
use crate::output::unix_ms;

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub target: Target,
    pub addr: SocketAddr,
    /// Time per application measurement.
    pub duration: Duration,
    pub concurrency: u32,
    /// Request and response size for latscope targets.
    pub request_bytes: u32,
    pub response_bytes: u32,
    /// Skip the latency-under-load step (it saturates the path for a few seconds).
    pub no_load: bool,
    /// An http:// or https:// URL: the application steps use the HTTP load engine.
    pub url: Option<String>,
}

fn step(name: &str, status: &str, detail: impl Into<String>) -> Step {
    Step {
        name: name.into(),
        status: status.into(),
        detail: detail.into(),
    }
}

fn meta(cmd: &str) -> Meta {
    Meta::new(cmd, env!("CARGO_PKG_VERSION"), unix_ms())
}

fn rr_cfg(p: &Plan, connections: u32, quickack: bool, duration: Duration) -> RrConfig {
    RrConfig {
        target: p.target.clone(),
        addr: Some(p.addr),
        transport: Transport::Tcp,
        sizes: vec![(p.request_bytes, p.response_bytes)],
        connections,
        stop_after: StopAfter::Duration(duration),
        warmup: Duration::from_millis(300),
        rate: None,
        client: SockOpts {
            nodelay: true,
            quickack,
            ..SockOpts::default()
        },
        server: ServerBehaviour {
            sockopts: SockOpts {
                nodelay: true,
                ..SockOpts::default()
            },
            ..ServerBehaviour::default()
        },
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(3),
        interval: Duration::from_secs(1),
        peer: Peer::Latscope,
    }
}

fn rr_p50(
    p: &Plan,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Summary, String> {
    let r = latscope_net::rr::run(
        &rr_cfg(p, connections, quickack, duration),
        meta("rr"),
        stop,
        &mut |_| {},
        false,
    )
    .map_err(|e| e.to_string())?;
    let s = r.results.into_iter().next().ok_or("no result")?;
    if let Some(e) = s.errors.first() {
        return Err(e.clone());
    }
    Ok(s.rtt)
}

/// Capture the target's port on every interface while `stop` is clear (at most `limit`) and
/// run latscope analyze's detectors over it.
fn capture_and_analyze(
    filter: &str,
    stop: &AtomicBool,
    limit: Duration,
) -> Result<rules::CaptureEvidence, String> {
    use latscope_wire::report::StallKind;
    let cfg = latscope_capture::CaptureConfig {
        iface: "any".into(),
        filter: filter.into(),
        snaplen: 256,
        buffer_bytes: 8 << 20,
    };
    let mut cap = latscope_capture::LiveCapture::open(&cfg).map_err(|e| format!("{e:#}"))?;
    let link = cap.link_type();
    let mut analyzer = latscope_wire::Analyzer::new(latscope_wire::AnalyzeOptions {
        trace_conn: None,
        top: 1,
    });
    let mut frame = 0u64;
    cap.run(stop, None, Some(limit), |ts, _orig, data| {
        frame += 1;
        analyzer.push(frame, ts, latscope_wire::decode(link, data));
        Ok(())
    })
    .map_err(|e| format!("{e:#}"))?;
    let r = analyzer.finish();
    let find = |k: StallKind| r.findings.iter().find(|f| f.kind == k);
    Ok(rules::CaptureEvidence {
        frames: r.frames,
        transactions: r.transactions,
        nagle: find(StallKind::NagleDelayedAck).map(|f| {
            let ex = f
                .examples
                .first()
                .map(|x| (x.conn, x.since_frame, x.frame))
                .unwrap_or_default();
            (f.count, f.lost_ns, ex)
        }),
        think: find(StallKind::ThinkTime).map(|f| (f.count, f.lost_ns)),
        retransmissions: r.counts.retransmission + r.counts.fast_retransmission,
        rto_stalls: find(StallKind::RtoRetransmission).map(|f| (f.count, f.lost_ns)),
        delayed_ack: find(StallKind::DelayedAck).map(|f| (f.count, f.lost_ns)),
    })
}

/// Latency of GET `url` with `connections` connections for `duration` (HTTP load engine).
fn http_p50(
    url: &str,
    connections: u32,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Summary, String> {
    let o = latscope_http::Options {
        url: url.into(),
        method: "GET".into(),
        headers: vec![],
        body: vec![],
        connections,
        threads: connections.clamp(1, 2),
        duration: Some(duration),
        requests: None,
        rate_per_sec: None,
        warmup: Duration::from_millis(300),
        timeout: Duration::from_secs(5),
        insecure: true,
        ca_files: vec![],
        connect_to: None,
        host: None,
        http2: false,
        streams: 1,
        quickack: false,
    };
    let cfg = latscope_http::Config::new(&o).map_err(|e| e.to_string())?;
    let r = latscope_http::run(&cfg, stop, &mut |_| {}).map_err(|e| e.to_string())?;
    if r.stats.requests == 0 {
        return Err(r
            .stats
            .error_samples
            .first()
            .cloned()
            .unwrap_or_else(|| "no request succeeded".into()));
    }
    Ok(r.stats.latency.summary())
}

/// One request's latency measurement for this target: rr for latscope, HTTP for a URL.
fn app_p50(
    p: &Plan,
    connections: u32,
    quickack: bool,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Summary, String> {
    match &p.url {
        Some(url) => http_p50(url, connections, duration, stop),
        None => rr_p50(p, connections, quickack, duration, stop),
    }
}

/// Is a latscope server listening there?
fn is_latscope(p: &Plan) -> bool {
    let start = Start {
        kind: TestKind::Rr,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: 1000,
        server: ServerBehaviour::default(),
        stream: None,
        join: None,
    };
    open_session(&p.target, Some(p.addr), Duration::from_secs(2), &start, &[]).is_ok()
}

/// Run the investigation.
pub fn run(p: &Plan, stop: &AtomicBool, progress: &dyn Fn(&str)) -> DiagnoseReport {
    let mut steps = Vec::new();
    let mut ev = Evidence::default();
    let mut dists: Vec<(String, Summary)> = Vec::new();

    // 1. The path without the application: a SYN ping with kernel timestamps where
    //    CAP_NET_RAW allows, else the kernel's own handshake RTT of full connects. Then plain
    //    connects, for handshake failures and their time as the client sees it.
    progress("path: SYN/connect ping");
    let req = latscope_probe::ProbeRequest {
        mode: None,
        port: p.addr.port(),
        payload: 0,
        trace: false,
        kernel_timestamps: true,
    };
    match latscope_probe::open(p.addr.ip(), req) {
        Ok((mut prober, why)) => {
            let ctx = latscope_probe::ping::PingContext {
                meta: meta("ping"),
                target: p.target.to_string(),
                address: p.addr.ip(),
                port: Some(p.addr.port()),
                mode_reason: why,
                payload_bytes: 0,
            };
            let opts = latscope_probe::ping::PingOptions {
                count: Some(50),
                interval: Duration::from_millis(5),
                timeout: Duration::from_secs(1),
                ..Default::default()
            };
            match latscope_probe::ping::ping(prober.as_mut(), ctx, &opts, stop, &mut |_| {}) {
                Ok(r) if r.received > 0 => {
                    steps.push(step(
                        "path",
                        "ran",
                        format!(
                            "{} ping ({}): p50 {}, {} of {} answered",
                            r.mode.name(),
                            r.timestamps,
                            format_ns(r.rtt.p50_ns as f64),
                            r.received,
                            r.sent
                        ),
                    ));
                    dists.push(("path".into(), r.rtt.clone()));
                    ev.path = Some(r.rtt);
                }
                Ok(r) => steps.push(step(
                    "path",
                    "failed",
                    format!("{} ping: no answer to {} probes", r.mode.name(), r.sent),
                )),
                Err(e) => steps.push(step("path", "failed", e.to_string())),
            }
        }
        Err(e) => steps.push(step("path", "failed", e.to_string())),
    }
    progress("handshakes");
    let cc = ConnectConfig {
        target: p.target.clone(),
        addr: p.addr,
        mode: ConnectMode::Connect,
        stop_after: StopAfter::Count(100),
        parallel: 1,
        timeout: Duration::from_secs(3),
        interval: Duration::from_millis(2),
        request_bytes: 1,
        response_bytes: 1,
        server: ServerBehaviour::default(),
    };
    let mut connected = false;
    match latscope_net::connect::run(&cc, meta("connect"), stop) {
        Ok(r) => {
            connected = r.succeeded > 0;
            steps.push(step(
                "handshakes",
                if connected { "ran" } else { "failed" },
                format!(
                    "{} connects: p50 {}, p99 {}, {} refused, {} timed out",
                    r.attempts,
                    format_ns(r.connect.p50_ns as f64),
                    format_ns(r.connect.p99_ns as f64),
                    r.refused,
                    r.timed_out
                ),
            ));
            ev.connect_failures = (r.attempts, r.refused, r.timed_out);
            dists.push(("handshakes".into(), r.connect.clone()));
            ev.handshake = Some(r.connect);
        }
        Err(e) => steps.push(step("handshakes", "failed", e.to_string())),
    }

    let latscope = connected && p.url.is_none() && is_latscope(p);
    let app = latscope || (connected && p.url.is_some());
    let kind = if p.url.is_some() {
        "http"
    } else if latscope {
        "latscope"
    } else {
        "tcp"
    };
    if !app && connected {
        for s in [
            "one request",
            "quick-ack experiment",
            "concurrent requests",
            "latency under load",
        ] {
            steps.push(step(s, "skipped", "the port does not speak the latscope protocol: request steps need `latscope serve` there (or an http:// URL)"));
        }
    }
    if app && !stop.load(Ordering::Relaxed) {
        // 2. One request at a time — and, when the server runs on this host, a look at its
        //    end of the connection while the requests flow.
        progress("one request at a time");
        let local = std::net::UdpSocket::bind((p.addr.ip(), 0)).is_ok();
        let port = p.addr.port();
        let scan_deadline = std::time::Instant::now() + p.duration + Duration::from_secs(3);
        let scan = local.then(|| {
            std::thread::spawn(move || {
                use latscope_inspect::scan::{Selection, scan};
                let server_end = |r: &latscope_core::model::sockets::SocketsReport| {
                    r.sockets.iter().any(|row| {
                        row.state == "ESTAB"
                            && row.local.ends_with(&format!(":{port}"))
                            && row.options.is_some()
                    })
                };
                // Look once the requests are flowing; retry (bounded) if the connection is not
                // up yet — set-up steps before the requests take a variable time.
                loop {
                    std::thread::sleep(Duration::from_millis(400));
                    let mut r = scan(Selection::Port(port), meta("sockets"))?;
                    // A port scan leaves out latscope's own process; a server running inside
                    // it (as in `latscope demo`) is found by scanning this process itself.
                    if !server_end(&r) {
                        let own = scan(Selection::Pid(std::process::id()), meta("sockets"))?;
                        r.sockets.extend(own.sockets);
                    }
                    if server_end(&r) || std::time::Instant::now() >= scan_deadline {
                        return Ok::<_, latscope_inspect::InspectError>(r);
                    }
                }
            })
        });
        // Kernel receive-path latency of the server's packets, while the requests run.
        let stack = if local {
            let cfg = latscope_ebpf::StackConfig {
                filters: latscope_ebpf::Filters {
                    local_port: Some(port),
                    ..Default::default()
                },
                ..Default::default()
            };
            match latscope_ebpf::Session::start(&cfg) {
                Ok(s) => Some(s),
                Err(e) => {
                    steps.push(step("kernel stack", "skipped", e.to_string()));
                    None
                }
            }
        } else {
            steps.push(step(
                "kernel stack",
                "skipped",
                "the server is not on this host",
            ));
            None
        };
        let cap_stop = std::sync::Arc::new(AtomicBool::new(false));
        let capture = {
            let cap_stop = cap_stop.clone();
            let filter = format!("tcp port {port}");
            let limit = p.duration + Duration::from_secs(5);
            std::thread::spawn(move || capture_and_analyze(&filter, &cap_stop, limit))
        };
        let single = app_p50(p, 1, false, p.duration, stop);
        cap_stop.store(true, Ordering::Relaxed);
        match capture.join() {
            Ok(Ok(c)) => {
                steps.push(step(
                    "packet capture",
                    "ran",
                    format!(
                        "{} frames, {} transactions, {} Nagle × delayed-ACK stalls, {} retransmissions",
                        c.frames,
                        c.transactions,
                        c.nagle.map(|n| n.0).unwrap_or(0),
                        c.retransmissions
                    ),
                ));
                ev.capture = Some(c);
            }
            Ok(Err(e)) => steps.push(step("packet capture", "skipped", e)),
            Err(_) => steps.push(step(
                "packet capture",
                "failed",
                "the capture thread panicked",
            )),
        }
        match scan.map(|h| h.join()) {
            None => steps.push(step(
                "server sockets",
                "skipped",
                "the server is not on this host",
            )),
            Some(Ok(Ok(r))) => {
                // The server's end has the service port as its local port (our client ends
                // have it as the remote one), whichever process holds it — even this one, as in
                // `latscope demo`.
                let server: Vec<_> = r
                    .sockets
                    .iter()
                    .filter(|row| row.state == "ESTAB" && row.local.ends_with(&format!(":{port}")))
                    .collect();
                let with_opts: Vec<_> = server
                    .iter()
                    .filter_map(|row| row.options.as_ref().map(|o| (row, o)))
                    .collect();
                if server.is_empty() {
                    steps.push(step(
                        "server sockets",
                        "failed",
                        "no server-side connection found on this host",
                    ));
                } else if with_opts.is_empty() {
                    let why = server
                        .first()
                        .and_then(|r| r.options_error.clone())
                        .unwrap_or_else(|| "options unreadable".into());
                    steps.push(step(
                        "server sockets",
                        "skipped",
                        format!("found the server's connections but not their options: {why}"),
                    ));
                } else {
                    let process = with_opts[0]
                        .0
                        .owners
                        .first()
                        .map(|o| format!("{}[{}]", o.comm, o.pid))
                        .unwrap_or_else(|| "?".into());
                    let ss = rules::ServerSockets {
                        process: process.clone(),
                        connections: with_opts.len(),
                        nagle_on: with_opts
                            .iter()
                            .filter(|(_, o)| o.nodelay == Some(false))
                            .count(),
                        corked: with_opts
                            .iter()
                            .filter(|(_, o)| o.cork == Some(true))
                            .count(),
                    };
                    steps.push(step(
                        "server sockets",
                        "ran",
                        format!(
                            "{process}: {} connection(s), TCP_NODELAY off on {}, TCP_CORK on {}",
                            ss.connections, ss.nagle_on, ss.corked
                        ),
                    ));
                    ev.server_sockets = Some(ss);
                }
            }
            Some(Ok(Err(e))) => steps.push(step("server sockets", "failed", e.to_string())),
            Some(Err(_)) => {
                steps.push(step("server sockets", "failed", "the socket scan panicked"))
            }
        }
        match single {
            Ok(s) => {
                steps.push(step(
                    "one request",
                    "ran",
                    format!(
                        "{} B / {} B, p50 {}, p99 {}",
                        p.request_bytes,
                        p.response_bytes,
                        format_ns(s.p50_ns as f64),
                        format_ns(s.p99_ns as f64)
                    ),
                ));
                dists.push(("one request".into(), s.clone()));
                ev.single = Some(s);
            }
            Err(e) => steps.push(step("one request", "failed", e)),
        }
        // 3. If the hosts add milliseconds: does an immediate ACK from the client change it?
        let host_ms = match (&ev.single, &ev.path) {
            (Some(s), Some(pth)) => s.p50_ns.saturating_sub(pth.p50_ns) as f64 / 1e6,
            _ => 0.0,
        };
        if p.url.is_some() {
            steps.push(step("quick-ack experiment", "skipped", "the HTTP engine does not re-arm TCP_QUICKACK; the packet capture is the evidence instead"));
        } else if host_ms >= 1.0 && !stop.load(Ordering::Relaxed) {
            progress("quick-ack experiment");
            match rr_p50(p, 1, true, p.duration.min(Duration::from_secs(2)), stop) {
                Ok(s) => {
                    steps.push(step(
                        "quick-ack experiment",
                        "ran",
                        format!(
                            "client TCP_QUICKACK after every read: p50 {}",
                            format_ns(s.p50_ns as f64)
                        ),
                    ));
                    dists.push(("quick-ack experiment".into(), s.clone()));
                    ev.quickack = Some(s);
                }
                Err(e) => steps.push(step("quick-ack experiment", "failed", e)),
            }
        } else {
            steps.push(step(
                "quick-ack experiment",
                "skipped",
                "the hosts add under 1 ms: no stall to explain",
            ));
        }
        // 4. Concurrency.
        if !stop.load(Ordering::Relaxed) && p.concurrency > 1 {
            progress("concurrent requests");
            match app_p50(p, p.concurrency, false, p.duration, stop) {
                Ok(s) => {
                    steps.push(step(
                        "concurrent requests",
                        "ran",
                        format!(
                            "{} connections: p50 {}, p99 {}",
                            p.concurrency,
                            format_ns(s.p50_ns as f64),
                            format_ns(s.p99_ns as f64)
                        ),
                    ));
                    dists.push(("concurrent requests".into(), s.clone()));
                    ev.concurrent = Some((p.concurrency, s));
                }
                Err(e) => steps.push(step("concurrent requests", "failed", e)),
            }
        }
        if let Some(session) = stack {
            match session.read_histograms() {
                Ok(raw) => {
                    use latscope_ebpf::Probe;
                    let get = |p: Probe| {
                        let mut h = latscope_core::Log2Histogram::new();
                        for r in raw.iter().filter(|r| r.probe == p) {
                            h.merge(&r.hist);
                        }
                        h
                    };
                    let med = |p: Probe| {
                        let h = get(p);
                        (h.count() > 0).then(|| h.quantile_ns(0.5))
                    };
                    let read = get(Probe::TcpSocketRead);
                    let read_bucket = (read.count() > 0).then(|| {
                        latscope_core::log2::bucket_label(latscope_core::log2::bucket_of(
                            read.quantile_ns(0.5) as u64,
                        ))
                    });
                    let sev = rules::StackEvidence {
                        packets: get(Probe::IpStart).count(),
                        ip_start_ns: med(Probe::IpStart),
                        tcp_start_ns: med(Probe::TcpStart),
                        enqueued_ns: med(Probe::TcpSocketEnqueued),
                        read_ns: med(Probe::TcpSocketRead),
                        read_bucket,
                    };
                    let f = |v: Option<f64>| v.map(format_ns).unwrap_or_else(|| "-".into());
                    steps.push(step(
                        "kernel stack",
                        "ran",
                        format!(
                            "{} packets to port {port}; medians: ip-start {}, tcp-start {}, tcp-socket-enqueued {}, tcp-socket-read {}",
                            sev.packets,
                            f(sev.ip_start_ns),
                            f(sev.tcp_start_ns),
                            f(sev.enqueued_ns),
                            f(sev.read_ns)
                        ),
                    ));
                    ev.stack = Some(sev);
                }
                Err(e) => steps.push(step("kernel stack", "failed", e.to_string())),
            }
        }
        // 5. Latency under load.
        if p.no_load {
            steps.push(step("latency under load", "skipped", "--no-load"));
        } else if p.url.is_some() {
            steps.push(step(
                "latency under load",
                "skipped",
                "a bulk transfer needs `latscope serve` at the target",
            ));
        } else if !stop.load(Ordering::Relaxed) {
            progress("latency under load");
            let sc = StreamConfig {
                target: p.target.clone(),
                addr: Some(p.addr),
                spec: StreamSpec {
                    transport: Transport::Tcp,
                    direction: Direction::Send,
                    streams: 1,
                    duration_ms: 3000,
                    bytes_per_stream: None,
                    buffer_bytes: 128 * 1024,
                    udp_rate_bps: None,
                    options: StreamOptions::default(),
                    interval_ms: 1000,
                },
                connect_timeout: Duration::from_secs(3),
                affinity: vec![],
                latency_probe: true,
            };
            match latscope_net::stream::run(&sc, meta("stream"), stop, &mut |_| {}) {
                Ok(r) => match r.latency_probe {
                    Some(lp) => {
                        steps.push(step(
                            "latency under load",
                            "ran",
                            format!(
                                "64 B probe p50 {} idle, {} during a {} bulk transfer",
                                format_ns(lp.idle.p50_ns as f64),
                                format_ns(lp.loaded.p50_ns as f64),
                                r.results
                                    .first()
                                    .map(|d| latscope_core::units::format_bitrate(d.rate_bps))
                                    .unwrap_or_default()
                            ),
                        ));
                        ev.under_load = Some((lp.idle, lp.loaded));
                    }
                    None => steps.push(step(
                        "latency under load",
                        "failed",
                        r.error.unwrap_or_else(|| "no probe result".into()),
                    )),
                },
                Err(e) => steps.push(step("latency under load", "failed", e.to_string())),
            }
        }
    }
    let findings = rules::apply(&ev);
    let budget = Budget {
        path_rtt_ns: ev.path.as_ref().map(|s| s.p50_ns),
        single_request_ns: ev.single.as_ref().map(|s| s.p50_ns),
        concurrent_request_ns: ev.concurrent.as_ref().map(|(_, s)| s.p50_ns),
        concurrency: ev.concurrent.as_ref().map(|(n, _)| *n).unwrap_or(1),
        host_ns: match (&ev.single, &ev.path) {
            (Some(s), Some(pth)) => Some(s.p50_ns.saturating_sub(pth.p50_ns)),
            _ => None,
        },
    };
    let verdict = super::verdict(&findings, &budget);
    DiagnoseReport {
        meta: meta("diagnose"),
        target: p.target.to_string(),
        target_kind: kind.into(),
        steps,
        budget,
        distributions: dists,
        findings,
        verdict,
        interrupted: stop.load(Ordering::Relaxed),
    }
}

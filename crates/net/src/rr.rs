//! `latscope rr`: request/response ping-pong over TCP, UDP or a unix socket against
//! `latscope serve` (LMbench lat_tcp/lat_udp, netperf TCP_RR, sockperf ping-pong).
//!
//! Each connection runs on its own thread with blocking sockets — the shortest path through the
//! kernel, so the tool adds as little as possible to what it measures. Samples go into a
//! per-thread HDR histogram (no allocation per sample); histograms are merged at the end.

use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use latscope_core::LatencyHistogram;
use latscope_core::model::rr::{
    LoadMode, RrReport, RrSizeResult, ServerBehaviour, SockOpts, Transport,
};
use latscope_core::model::{IntervalEvent, Meta};
use latscope_core::sweep::find_jump;
use latscope_core::units::format_span;
use latscope_sys::mem::PageAligned;

use crate::NetError;
use crate::auth::AuthKey;
use crate::pace::{Schedule, precise_timers, sleep_until};
use crate::proto::{self, ServerHello, Start, TestKind, UDP_HEADER_LEN, UdpHeader};
use crate::session::{Session, open_session};
use crate::sock::{Conn, Target, connect, set_int};

/// Blocked reads wake this often to look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Extra lifetime asked of the server beyond warm-up + duration.
const SERVER_SLACK: Duration = Duration::from_secs(2);
/// An open-loop request sent later than this after its due time counts as a late send.
const LATE: Duration = Duration::from_millis(1);

/// When each size's measurement ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAfter {
    /// Run this long.
    Duration(Duration),
    /// Measured transactions (warm-up excluded), over all connections.
    Count(u64),
}

/// Everything `rr` needs to run.
#[derive(Clone, Debug)]
pub struct RrConfig {
    /// Where the server is.
    pub target: Target,
    /// The resolved address (None for unix targets).
    pub addr: Option<SocketAddr>,
    /// TCP, UDP or unix.
    pub transport: Transport,
    /// (request, response) bytes, one entry per size of a sweep.
    pub sizes: Vec<(u32, u32)>,
    /// Connections (or UDP sockets), each one worker.
    pub connections: u32,
    /// Stop after a count or a duration.
    pub stop_after: StopAfter,
    /// Time measured but not recorded at the start.
    pub warmup: Duration,
    /// Open loop at this total rate (requests/s); None = closed loop.
    pub rate: Option<f64>,
    /// Socket options of the client.
    pub client: SockOpts,
    /// Behaviour asked of the server.
    pub server: ServerBehaviour,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Interval of the `on_interval` callback.
    pub interval: Duration,
    /// Which server speaks at the other end.
    pub peer: Peer,
    /// The key proving this client may use the server (`--auth-file`); None: none sent.
    pub auth: Option<AuthKey>,
}

impl RrConfig {
    /// Connect to the target and ask for the test `start` (nothing pipelined behind it).
    pub fn open_session(&self, start: &Start) -> Result<Session, NetError> {
        open_session(
            &self.target,
            self.addr,
            self.connect_timeout,
            self.auth.as_ref(),
            start,
            &[],
        )
    }

    /// A latency probe of `target`: one connection exchanging 64 B each way with TCP_NODELAY on
    /// both sides, closed loop for 10 s without warm-up, a 10 s request timeout, 3 s to connect,
    /// 1 s intervals, against `latscope serve` without a key. Callers change what differs with
    /// struct update syntax.
    pub fn probe(target: Target, addr: Option<SocketAddr>, transport: Transport) -> RrConfig {
        let nodelay = SockOpts {
            nodelay: true,
            ..SockOpts::default()
        };
        RrConfig {
            target,
            addr,
            transport,
            sizes: vec![(64, 64)],
            connections: 1,
            stop_after: StopAfter::Duration(Duration::from_secs(10)),
            warmup: Duration::ZERO,
            rate: None,
            client: nodelay.clone(),
            server: ServerBehaviour {
                sockopts: nodelay,
                ..ServerBehaviour::default()
            },
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            interval: Duration::from_secs(1),
            peer: Peer::Latscope,
            auth: None,
        }
    }
}

/// The server at the other end of an rr test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Peer {
    /// `latscope serve`: the test is negotiated (sizes, server behaviour, limits).
    #[default]
    Latscope,
    /// A `sockperf server`: each message starts with sockperf's 14-byte header and is echoed
    /// back whole, so `rr` and `sockperf ping-pong` can measure the very same server.
    Sockperf,
}

/// sockperf's message header: u64 sequence, u16 flags, u32 total length, all big-endian.
pub const SOCKPERF_HEADER_LEN: usize = 14;
/// Flags of a client message that asks for a reply (sockperf: CLIENT | PONG_REQUEST).
const SOCKPERF_PING: u16 = 0x3;

fn sockperf_header(buf: &mut [u8], seq: u64) {
    let len = buf.len() as u32;
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..10].copy_from_slice(&SOCKPERF_PING.to_be_bytes());
    buf[10..14].copy_from_slice(&len.to_be_bytes());
}

/// What a worker measured.
struct WorkerOut {
    hist: LatencyHistogram,
    intended: Option<LatencyHistogram>,
    count: u64,
    lost: u64,
    late_responses: u64,
    timeouts: u64,
    late_sends: u64,
    last_done: Option<Instant>,
    error: Option<String>,
}

/// Live per-interval state a worker shares with the coordinator.
#[derive(Default)]
struct Live {
    hist: LatencyHistogram,
    errors: u64,
}

struct WorkerPlan {
    index: u32,
    req: usize,
    resp: usize,
    /// Transactions starting before this are warm-up.
    measure_from: Instant,
    /// Measured transactions to do (None: until `end`).
    quota: Option<u64>,
    end: Option<Instant>,
    schedule: Option<Schedule>,
    timeout: Duration,
    client: SockOpts,
    peer: Peer,
}

fn worker_out(open: bool) -> WorkerOut {
    WorkerOut {
        hist: LatencyHistogram::new(),
        intended: open.then(LatencyHistogram::new),
        count: 0,
        lost: 0,
        late_responses: 0,
        timeouts: 0,
        late_sends: 0,
        last_done: None,
        error: None,
    }
}

impl WorkerPlan {
    /// A worker's empty tally and its own copy of the open-loop schedule.
    fn start(&self) -> (WorkerOut, Option<Schedule>) {
        (worker_out(self.schedule.is_some()), self.schedule.clone())
    }

    /// Wait for the next request's due time (open loop) and start it: its due time and start,
    /// or None when the worker is finished.
    #[inline]
    fn next(
        &self,
        schedule: &mut Option<Schedule>,
        out: &WorkerOut,
        stop: &AtomicBool,
    ) -> Option<(Option<Instant>, Instant)> {
        let due = schedule.as_mut().map(Schedule::next_due);
        if let Some(d) = due {
            sleep_until(d);
        }
        let t0 = Instant::now();
        (!self.finished(out, t0, stop)).then_some((due, t0))
    }

    fn finished(&self, out: &WorkerOut, now: Instant, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed)
            || self.quota.is_some_and(|q| out.count >= q)
            || self.end.is_some_and(|e| now >= e)
    }

    /// Record one completed transaction.
    #[inline]
    fn record(
        &self,
        out: &mut WorkerOut,
        live: Option<&Mutex<Live>>,
        due: Option<Instant>,
        t0: Instant,
        t1: Instant,
    ) {
        if t0 < self.measure_from {
            return;
        }
        let rtt = (t1 - t0).as_nanos() as u64;
        out.hist.record(rtt);
        if let (Some(h), Some(due)) = (out.intended.as_mut(), due) {
            h.record((t1 - due).as_nanos() as u64);
            if t0.saturating_duration_since(due) > LATE {
                out.late_sends += 1;
            }
        }
        out.count += 1;
        out.last_done = Some(t1);
        if let Some(l) = live
            && let Ok(mut g) = l.lock()
        {
            g.hist.record(rtt);
        }
    }
}

fn stream_worker(
    mut conn: Conn,
    plan: WorkerPlan,
    stop: &AtomicBool,
    live: Option<&Mutex<Live>>,
) -> WorkerOut {
    let (mut out, mut schedule) = plan.start();
    if let Err(e) = conn.apply(&plan.client) {
        out.error = Some(format!("conn {}: setting socket options: {e}", plan.index));
        return out;
    }
    let _ = conn.set_read_timeout(Some(POLL.min(plan.timeout)));
    let _ = conn.set_write_timeout(Some(plan.timeout));
    let tcp = conn.is_tcp();
    let fd = conn.as_raw_fd();
    let mut req = vec![b'q'; plan.req];
    let mut resp = PageAligned::zeroed(plan.resp);
    let mut seq = 0u64;
    while let Some((due, t0)) = plan.next(&mut schedule, &out, stop) {
        if plan.peer == Peer::Sockperf {
            seq += 1;
            sockperf_header(&mut req, seq);
        }
        if tcp && plan.client.cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 1);
        }
        let wrote = conn.write_all(&req);
        if tcp && plan.client.cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 0);
        }
        if let Err(e) = wrote {
            out.error = Some(format!("conn {}: sending a request: {e}", plan.index));
            bump_errors(live);
            break;
        }
        let mut got = 0;
        let mut failed = None;
        while got < resp.len() {
            match conn.read(&mut resp[got..]) {
                Ok(0) => {
                    failed = Some("the server closed the connection".to_string());
                    break;
                }
                Ok(n) => {
                    got += n;
                    if tcp && plan.client.quickack {
                        // Re-arm after every read, partial ones included: setting TCP_QUICKACK
                        // sends a pending delayed ACK at once (tcp_setsockopt → tcp_cleanup_rbuf),
                        // which is what releases a Nagle-held rest of the response. The kernel
                        // leaves quick-ack mode on its own, so once per response is not enough.
                        let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
                    }
                }
                Err(e) if latscope_sys::error::is_transient(&e) => {
                    if stop.load(Ordering::Relaxed) {
                        failed = Some(String::new());
                        break;
                    }
                    if t0.elapsed() >= plan.timeout {
                        out.timeouts += 1;
                        failed = Some(format!(
                            "no response within {} (timeout)",
                            latscope_core::units::format_duration(plan.timeout)
                        ));
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(format!("reading a response: {e}"));
                    break;
                }
            }
        }
        let t1 = Instant::now();
        if let Some(msg) = failed {
            if !msg.is_empty() {
                out.error = Some(format!("conn {}: {msg}", plan.index));
                bump_errors(live);
            }
            break;
        }
        plan.record(&mut out, live, due, t0, t1);
    }
    conn.shutdown_write();
    out
}

fn bump_errors(live: Option<&Mutex<Live>>) {
    if let Some(l) = live
        && let Ok(mut g) = l.lock()
    {
        g.errors += 1;
    }
}

fn udp_worker(
    udp: UdpSocket,
    token: Option<u64>,
    plan: WorkerPlan,
    stop: &AtomicBool,
    live: Option<&Mutex<Live>>,
) -> WorkerOut {
    let (mut out, mut schedule) = plan.start();
    let wait = POLL.min(plan.timeout);
    let _ = udp.set_read_timeout(Some(wait));
    let mut req = vec![b'q'; plan.req];
    let mut buf = PageAligned::zeroed(plan.resp.max(UDP_HEADER_LEN) + 1);
    let mut seq = 0u64;
    while let Some((due, t0)) = plan.next(&mut schedule, &out, stop) {
        seq += 1;
        match token {
            Some(token) => UdpHeader { token, seq }.write(&mut req),
            None => sockperf_header(&mut req, seq),
        }
        if let Err(e) = udp.send(&req) {
            // ECONNREFUSED here is the ICMP port-unreachable of an earlier datagram.
            out.error = Some(format!("conn {}: sending a datagram: {e}", plan.index));
            bump_errors(live);
            break;
        }
        let answered = loop {
            match udp.recv(&mut buf) {
                Ok(n) => match reply_seq(&buf[..n], token) {
                    Some(s) if s == seq => break Some(Instant::now()),
                    Some(s) if s < seq => out.late_responses += 1,
                    _ => {}
                },
                Err(e) if latscope_sys::error::is_transient(&e) => {}
                Err(e) => {
                    out.error = Some(format!("conn {}: receiving: {e}", plan.index));
                    break None;
                }
            }
            if t0.elapsed() >= plan.timeout || stop.load(Ordering::Relaxed) {
                break None;
            }
        };
        if out.error.is_some() {
            bump_errors(live);
            break;
        }
        match answered {
            Some(t1) => plan.record(&mut out, live, due, t0, t1),
            None if stop.load(Ordering::Relaxed) => break,
            None => {
                // A lost request counts toward -n only when measured, so -n N always ends.
                if t0 >= plan.measure_from {
                    out.lost += 1;
                    out.count += 1;
                    bump_errors(live);
                }
            }
        }
    }
    out
}

/// The sequence number of a reply, if it belongs to this test.
fn reply_seq(buf: &[u8], token: Option<u64>) -> Option<u64> {
    match token {
        Some(t) => UdpHeader::parse(buf)
            .filter(|h| h.token == t)
            .map(|h| h.seq),
        None if buf.len() >= SOCKPERF_HEADER_LEN => {
            Some(u64::from_be_bytes(buf[..8].try_into().ok()?))
        }
        None => None,
    }
}

/// Run the measurement. `on_interval` is called from this thread every `cfg.interval` with the
/// interval's figures and its merged latency histogram (for a live view's percentiles so far).
pub fn run(
    cfg: &RrConfig,
    meta: Meta,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&IntervalEvent, &LatencyHistogram),
    want_intervals: bool,
) -> Result<RrReport, NetError> {
    if cfg.connections == 0 {
        return Err(NetError::Invalid("--connections must be at least 1".into()));
    }
    if cfg.sizes.is_empty() {
        return Err(NetError::Invalid("no message size to measure".into()));
    }
    let mut results = Vec::with_capacity(cfg.sizes.len());
    let mut server = cfg.server.clone();
    let mut interrupted = false;
    for &(req, resp) in &cfg.sizes {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let (r, s) = run_size(cfg, req, resp, stop, on_interval, want_intervals)?;
        server = s;
        results.push(r);
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
        }
    }
    let size_jump = if results.len() >= 3 {
        let pts: Vec<(u64, u64)> = results
            .iter()
            .filter(|r| r.rtt.count > 0)
            .map(|r| {
                (
                    u64::from(r.request_bytes.max(r.response_bytes)),
                    r.rtt.p50_ns,
                )
            })
            .collect();
        find_jump(&pts)
    } else {
        None
    };
    Ok(RrReport {
        meta,
        target: cfg.target.to_string(),
        address_choice: None,
        client_stack: None,
        transport: cfg.transport,
        peer: match cfg.peer {
            Peer::Latscope => "latscope".into(),
            Peer::Sockperf => "sockperf".into(),
        },
        connections: cfg.connections,
        load: match cfg.rate {
            Some(r) => LoadMode::Open { rate_per_sec: r },
            None => LoadMode::Closed,
        },
        client: cfg.client.clone(),
        server,
        warmup_ns: cfg.warmup.as_nanos() as u64,
        results,
        size_jump,
        interrupted,
    })
}

fn run_size(
    cfg: &RrConfig,
    req: u32,
    resp: u32,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&IntervalEvent, &LatencyHistogram),
    want_intervals: bool,
) -> Result<(RrSizeResult, ServerBehaviour), NetError> {
    // Open every session before starting the clock, so set-up cost is not measured.
    let sessions = open_sessions(cfg, req, resp)?;
    let server = sessions
        .iter()
        .flatten()
        .next()
        .map(|s| s.server.clone())
        .unwrap_or_else(|| cfg.server.clone());
    let (outs, t_start) = run_workers(
        cfg,
        (req, resp),
        sessions,
        stop,
        on_interval,
        want_intervals,
    )?;
    Ok((merge_outs(cfg, (req, resp), &outs, t_start, stop), server))
}

/// One session per connection: negotiated with a latscope server, or a plain connection to a
/// sockperf server (none for UDP, whose socket each worker opens).
fn open_sessions(cfg: &RrConfig, req: u32, resp: u32) -> Result<Vec<Option<Session>>, NetError> {
    let udp = cfg.transport == Transport::Udp;
    let lifetime = match cfg.stop_after {
        StopAfter::Duration(d) => Some(cfg.warmup + d + SERVER_SLACK),
        StopAfter::Count(_) => None,
    };
    // Open every session before starting the clock, so set-up cost is not measured.
    let mut sessions = Vec::with_capacity(cfg.connections as usize);
    for _ in 0..cfg.connections {
        if cfg.peer == Peer::Sockperf {
            // No negotiation: a plain connection (its fd stays open for UDP runs too, unused).
            let conn = if udp {
                None
            } else {
                Some(connect(&cfg.target, cfg.addr, cfg.connect_timeout)?)
            };
            sessions.push(conn.map(|conn| Session {
                conn,
                server: cfg.server.clone(),
                udp_token: None,
                hello: ServerHello {
                    software: "sockperf".into(),
                    limits: proto::Limits {
                        max_tests: 0,
                        max_duration_ms: 0,
                        max_message_bytes: 0,
                    },
                    auth_required: false,
                    challenge: None,
                },
            }));
            continue;
        }
        let mut start = Start {
            kind: if udp { TestKind::UdpRr } else { TestKind::Rr },
            request_bytes: req,
            response_bytes: resp,
            duration_ms: lifetime.map(|d| d.as_millis() as u64).unwrap_or(0),
            server: cfg.server.clone(),
            stream: None,
            join: None,
        };
        if lifetime.is_none() {
            // Count mode: ask for as long as the server allows (its hello says how long), by
            // first asking for one hour and retrying with the announced limit if refused.
            start.duration_ms = 3_600_000;
        }
        let session = match cfg.open_session(&start) {
            Err(NetError::ServerRefused {
                code: proto::RefusalCode::DurationLimit,
                ..
            }) if lifetime.is_none() => {
                let probe = open_probe_limits(cfg)?;
                start.duration_ms = probe;
                cfg.open_session(&start)?
            }
            // The server counts the warm-up and our slack too ("a 7202s test" for `-d 2h`):
            // say it in the user's terms.
            Err(NetError::ServerRefused {
                code: code @ proto::RefusalCode::DurationLimit,
                ..
            }) if matches!(cfg.stop_after, StopAfter::Duration(_)) => {
                let d = match cfg.stop_after {
                    StopAfter::Duration(d) => d,
                    StopAfter::Count(_) => Duration::ZERO,
                };
                let max = Duration::from_millis(open_probe_limits(cfg)?);
                let message = if d > max {
                    format!(
                        "-d {} exceeds this server's limit of {} (serve --max-duration)",
                        format_span(d),
                        format_span(max)
                    )
                } else {
                    format!(
                        "-d {} with its warm-up ({}) and {} of slack exceeds this server's limit of {} (serve --max-duration)",
                        format_span(d),
                        format_span(cfg.warmup),
                        format_span(SERVER_SLACK),
                        format_span(max)
                    )
                };
                return Err(NetError::ServerRefused { code, message });
            }
            other => other?,
        };
        sessions.push(Some(session));
    }
    Ok(sessions)
}

/// Start one worker per session behind a barrier, relay interval events while they run, and
/// return what each measured plus the instant the clock started.
fn run_workers(
    cfg: &RrConfig,
    (req, resp): (u32, u32),
    sessions: Vec<Option<Session>>,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&IntervalEvent, &LatencyHistogram),
    want_intervals: bool,
) -> Result<(Vec<WorkerOut>, Instant), NetError> {
    let udp = cfg.transport == Transport::Udp;
    let label = format!("{req}B/{resp}B");
    let n = cfg.connections;
    let barrier = Barrier::new(n as usize + 1);
    let lives: Vec<Option<Mutex<Live>>> = (0..n)
        .map(|_| want_intervals.then(Mutex::default))
        .collect();
    let t_start_cell: Mutex<Option<Instant>> = Mutex::new(None);
    let outs: Vec<WorkerOut> = thread::scope(|scope| -> Result<Vec<WorkerOut>, NetError> {
        let mut handles = Vec::with_capacity(n as usize);
        for (i, session) in sessions.into_iter().enumerate() {
            let i = i as u32;
            let barrier = &barrier;
            let live = lives[i as usize].as_ref();
            let t_start_cell = &t_start_cell;
            let quota = match cfg.stop_after {
                StopAfter::Count(total) => {
                    Some(total / u64::from(n) + u64::from(u64::from(i) < total % u64::from(n)))
                }
                StopAfter::Duration(_) => None,
            };
            let udp_sock = if udp { Some(udp_socket(cfg)?) } else { None };
            handles.push(scope.spawn(move || {
                precise_timers();
                barrier.wait();
                let t_start = t_start_cell
                    .lock()
                    .ok()
                    .and_then(|g| *g)
                    .unwrap_or_else(Instant::now);
                let measure_from = t_start + cfg.warmup;
                let plan = WorkerPlan {
                    index: i,
                    req: req as usize,
                    resp: resp as usize,
                    measure_from,
                    quota,
                    end: match cfg.stop_after {
                        StopAfter::Duration(d) => Some(measure_from + d),
                        StopAfter::Count(_) => None,
                    },
                    schedule: cfg.rate.map(|r| Schedule::new(t_start, r, i, n)),
                    timeout: cfg.timeout,
                    client: cfg.client.clone(),
                    peer: cfg.peer,
                };
                match (udp_sock, session) {
                    (Some(sock), session) => {
                        let token = session.as_ref().and_then(|s| s.udp_token);
                        let out = udp_worker(sock, token, plan, stop, live);
                        drop(session);
                        out
                    }
                    (None, Some(session)) => stream_worker(session.conn, plan, stop, live),
                    (None, None) => worker_out(false),
                }
            }));
        }
        let t_start = Instant::now();
        if let Ok(mut g) = t_start_cell.lock() {
            *g = Some(t_start);
        }
        barrier.wait();
        // Coordinate: per-interval events until every worker is done.
        let mut next = t_start + cfg.interval;
        let mut idx_start = t_start;
        // Without interval consumers, just wait: a coordinator waking every few ms would steal
        // the CPU from the workers on small machines.
        while want_intervals && !handles.iter().all(|h| h.is_finished()) {
            thread::sleep(Duration::from_millis(20).min(cfg.interval));
            let now = Instant::now();
            if now >= next {
                emit_interval(&lives, &label, t_start, idx_start, now, on_interval);
                idx_start = now;
                next = now + cfg.interval;
            }
        }
        if want_intervals {
            let now = Instant::now();
            if now > idx_start + Duration::from_millis(1) {
                emit_interval(&lives, &label, t_start, idx_start, now, on_interval);
            }
        }
        Ok(handles.into_iter().filter_map(|h| h.join().ok()).collect())
    })?;
    let t_start = t_start_cell
        .lock()
        .ok()
        .and_then(|g| *g)
        .unwrap_or_else(Instant::now);
    Ok((outs, t_start))
}

/// Merge the workers' histograms and counters into the size's result.
fn merge_outs(
    cfg: &RrConfig,
    (req, resp): (u32, u32),
    outs: &[WorkerOut],
    t_start: Instant,
    stop: &AtomicBool,
) -> RrSizeResult {
    let measure_from = t_start + cfg.warmup;
    let mut hist = LatencyHistogram::new();
    let mut intended = cfg.rate.map(|_| LatencyHistogram::new());
    let mut r = RrSizeResult {
        request_bytes: req,
        response_bytes: resp,
        transactions: 0,
        elapsed_ns: 0,
        transactions_per_sec: 0.0,
        rtt: Default::default(),
        rtt_from_intended: None,
        rtt_bins: None,
        rtt_from_intended_bins: None,
        one_way_p50_ns: 0,
        lost: 0,
        late_responses: 0,
        timeouts: 0,
        late_sends: 0,
        errors: vec![],
    };
    let mut last_done = measure_from;
    for o in outs {
        hist.merge(&o.hist);
        if let (Some(a), Some(b)) = (intended.as_mut(), o.intended.as_ref()) {
            a.merge(b);
        }
        r.lost += o.lost;
        r.late_responses += o.late_responses;
        r.timeouts += o.timeouts;
        r.late_sends += o.late_sends;
        if let Some(t) = o.last_done {
            last_done = last_done.max(t);
        }
        if let Some(e) = &o.error {
            r.errors.push(e.clone());
        }
    }
    let elapsed = match cfg.stop_after {
        StopAfter::Duration(d) if !stop.load(Ordering::Relaxed) => d,
        _ => last_done.saturating_duration_since(measure_from),
    };
    r.transactions = hist.count();
    r.elapsed_ns = elapsed.as_nanos() as u64;
    r.transactions_per_sec = if elapsed.is_zero() {
        0.0
    } else {
        r.transactions as f64 / elapsed.as_secs_f64()
    };
    r.rtt = hist.summary();
    r.rtt_from_intended = intended.as_ref().map(LatencyHistogram::summary);
    r.rtt_bins = Some(hist.log_bins());
    r.rtt_from_intended_bins = intended.as_ref().map(LatencyHistogram::log_bins);
    r.one_way_p50_ns = r.rtt.p50_ns / 2;
    r
}

/// Ask the server for its limits (count mode whose 1 h request was refused).
fn open_probe_limits(cfg: &RrConfig) -> Result<u64, NetError> {
    let start = Start {
        kind: TestKind::Rr,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: 1,
        server: ServerBehaviour::default(),
        stream: None,
        join: None,
    };
    let s = cfg.open_session(&start)?;
    Ok(s.hello.limits.max_duration_ms)
}

fn udp_socket(cfg: &RrConfig) -> Result<UdpSocket, NetError> {
    let addr = cfg
        .addr
        .ok_or_else(|| NetError::Invalid("UDP needs a network target".into()))?;
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .map_err(|_| NetError::Invalid("bind address".into()))?;
    let s = UdpSocket::bind(bind).map_err(|e| NetError::io("binding a UDP socket", e))?;
    s.connect(addr)
        .map_err(|e| NetError::io(format!("connecting a UDP socket to {addr}"), e))?;
    Ok(s)
}

fn emit_interval(
    lives: &[Option<Mutex<Live>>],
    label: &str,
    t_start: Instant,
    from: Instant,
    to: Instant,
    on_interval: &mut dyn FnMut(&IntervalEvent, &LatencyHistogram),
) {
    let mut h = LatencyHistogram::new();
    let mut errors = 0;
    for l in lives.iter().flatten() {
        if let Ok(mut g) = l.lock() {
            h.merge(&g.hist);
            g.hist.reset();
            errors += g.errors;
            g.errors = 0;
        }
    }
    let secs = (to - from).as_secs_f64();
    let ev = IntervalEvent {
        event: "interval".into(),
        command: "rr".into(),
        label: label.into(),
        start_ns: (from - t_start).as_nanos() as u64,
        end_ns: (to - t_start).as_nanos() as u64,
        count: h.count(),
        rate_per_sec: if secs > 0.0 {
            h.count() as f64 / secs
        } else {
            0.0
        },
        errors,
        latency: h.summary(),
    };
    on_interval(&ev, &h);
}

//! `latscope stream`: throughput against `latscope serve` — TCP, UDP or unix; client → server,
//! server → client or both at once; many streams; both sides' figures and costs; and, with
//! `latency_probe`, the latency a small request sees idle and while the bulk transfer runs.
//!
//! A stream test is one control connection (test description, Go, the server's interval
//! reports, Stop, the server's final figures) plus one data connection (or UDP flow) per stream
//! and direction, each introduced to the server with the test's token.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use latscope_core::model::Meta;
use latscope_core::model::rr::{ServerBehaviour, Transport};
use latscope_core::model::stream::{
    Cost, DirectionResult, IntervalStats, LatencyProbe, SideView, StreamFigures, StreamInterval,
    StreamReport, TcpFigures, UdpFigures,
};
use latscope_core::model::transfer::TransferLimits;
use latscope_sys::snmp::Counters;
use socket2::{Domain, Protocol, Socket, Type};

use crate::NetError;
use crate::auth::AuthKey;
use crate::flow::{self, DataSock, FlowCounters, ThreadUsage, UdpRx, Until};
use crate::interval_clock::IntervalClock;
use crate::proto::{
    Control, FlowFinal, FrameError, FrameReader, Join, Start, StreamDatagram, StreamSpec, TestKind,
    UDP_JOIN_SEQ,
};
use crate::rr::{self, RrConfig, StopAfter};
use crate::session::{Session, handshake, open_session};
use crate::sock::{Conn, Target, connect, connect_error};
use crate::udp_batch;

/// Time after the last UDP datagram is sent before the receiver is asked for its count.
const UDP_GRACE: Duration = Duration::from_millis(250);
/// How long to wait for the server's Go and final figures.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
/// Configuration of a stream (throughput) test.
pub struct StreamConfig {
    /// Where the server is.
    pub target: Target,
    /// The resolved address (None for unix sockets).
    pub addr: Option<SocketAddr>,
    /// What to move.
    pub spec: StreamSpec,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// CPUs to pin stream threads to, round-robin; empty: no pinning.
    pub affinity: Vec<usize>,
    /// Measure rr latency before and during the load.
    pub latency_probe: bool,
    /// The key proving this client may use the server (`--auth-file`); None: none sent.
    pub auth: Option<AuthKey>,
}

fn io_err(ctx: &str) -> impl Fn(std::io::Error) -> NetError + '_ {
    move |e| NetError::io(ctx.to_string(), e)
}

/// Open one TCP data connection with the stream options applied before connecting (buffer
/// sizes and MSS only take full effect on the handshake).
fn tcp_data(cfg: &StreamConfig, addr: SocketAddr) -> Result<Conn, NetError> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))
        .map_err(io_err("creating a socket"))?;
    flow::apply_options(s.as_raw_fd(), &cfg.spec.options, true, addr.is_ipv6())
        .map_err(|e| NetError::Invalid(format!("socket option: {e}")))?;
    s.connect_timeout(&addr.into(), cfg.connect_timeout)
        .map_err(|e| connect_error(&cfg.target.to_string(), e, cfg.connect_timeout))?;
    let t: TcpStream = s.into();
    Ok(Conn::Tcp(t))
}

fn join_start(token: u64, index: u32) -> Start {
    Start {
        kind: TestKind::StreamJoin,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: 0,
        server: ServerBehaviour::default(),
        stream: None,
        join: Some(Join { token, index }),
    }
}

enum Flow {
    Stream(Arc<DataSock>),
    Udp(Arc<UdpSocket>),
}

fn open_flow(cfg: &StreamConfig, token: u64, index: u32) -> Result<Flow, NetError> {
    match (cfg.spec.transport, cfg.addr) {
        (Transport::Udp, Some(addr)) => {
            let bind: SocketAddr = if addr.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let u = UdpSocket::bind(bind).map_err(io_err("binding a UDP socket"))?;
            u.connect(addr).map_err(io_err("connecting a UDP socket"))?;
            flow::apply_options(u.as_raw_fd(), &cfg.spec.options, false, addr.is_ipv6())
                .map_err(|e| NetError::Invalid(format!("socket option: {e}")))?;
            if !cfg.spec.client_sends(index) && cfg.spec.options.rcvbuf.is_none() {
                // Room for 100 ms of the server's datagrams (an explicit --rcvbuf wins).
                let rate = cfg.spec.udp_rate_bps.unwrap_or(f64::INFINITY);
                udp_batch::raise_rcvbuf(u.as_raw_fd(), udp_batch::rcvbuf_for_rate(rate));
            }
            let _ = u.set_read_timeout(Some(Duration::from_millis(100)));
            let mut hello = [0u8; crate::proto::UDP_STREAM_HEADER_LEN];
            StreamDatagram {
                token,
                index,
                seq: UDP_JOIN_SEQ,
                send_ns: 0,
            }
            .write(&mut hello);
            let mut buf = [0u8; 64];
            for _ in 0..30 {
                let _ = u.send(&hello);
                if let Ok(n) = u.recv(&mut buf)
                    && StreamDatagram::parse(&buf[..n])
                        .is_some_and(|d| d.token == token && d.index == index)
                {
                    return Ok(Flow::Udp(Arc::new(u)));
                }
            }
            Err(NetError::Timeout {
                target: cfg.target.to_string(),
                timeout: "3s (UDP flow join: is UDP to the server's port blocked?)".into(),
            })
        }
        (Transport::Udp, None) => Err(NetError::Invalid("UDP needs a network target".into())),
        (_, addr) => {
            let conn = match (&cfg.target, addr) {
                (Target::Inet { .. }, Some(a)) => tcp_data(cfg, a)?,
                _ => connect(&cfg.target, None, cfg.connect_timeout)?,
            };
            let session = handshake(
                conn,
                &cfg.target,
                cfg.auth.as_ref(),
                &join_start(token, index),
                &[],
            )?;
            let sock = match session.conn {
                Conn::Tcp(s) => DataSock::Tcp(s),
                Conn::Unix(s) => DataSock::Unix(s),
            };
            sock.set_read_timeout(None);
            Ok(Flow::Stream(Arc::new(sock)))
        }
    }
}

/// What a client flow thread returns.
struct FlowOut {
    usage: ThreadUsage,
    error: Option<String>,
}

fn direction_name(client_sends: bool) -> &'static str {
    if client_sends {
        "client→server"
    } else {
        "server→client"
    }
}

/// Average/min/max of full-length interval rates; None when there was no full-length interval.
fn interval_stats(ivs: &[&StreamInterval], interval: Duration) -> Option<IntervalStats> {
    let full: Vec<f64> = ivs
        .iter()
        .filter(|i| i.end_ns.saturating_sub(i.start_ns) * 2 >= interval.as_nanos() as u64)
        .map(|i| i.rate_bps)
        .collect();
    if full.is_empty() {
        return None;
    }
    Some(IntervalStats {
        avg_bps: full.iter().sum::<f64>() / full.len() as f64,
        min_bps: full.iter().copied().fold(f64::INFINITY, f64::min),
        max_bps: full.iter().copied().fold(0.0, f64::max),
    })
}

fn probe_config(cfg: &StreamConfig, duration: Duration) -> Option<RrConfig> {
    let transport = if cfg.spec.transport == Transport::Unix {
        Transport::Unix
    } else {
        Transport::Tcp
    };
    Some(RrConfig {
        stop_after: StopAfter::Duration(duration),
        warmup: Duration::from_millis(100),
        connect_timeout: cfg.connect_timeout,
        auth: cfg.auth.clone(),
        ..RrConfig::probe(cfg.target.clone(), cfg.addr, transport)
    })
}

fn run_probe(
    cfg: &StreamConfig,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<latscope_core::Summary, NetError> {
    let Some(c) = probe_config(cfg, duration) else {
        return Ok(Default::default());
    };
    let r = rr::run(
        &c,
        Meta::new("rr", env!("CARGO_PKG_VERSION"), 0),
        stop,
        &mut |_, _| {},
        false,
    )?;
    Ok(r.results
        .into_iter()
        .next()
        .map(|r| r.rtt)
        .unwrap_or_default())
}

/// The client's side of a running test: what every flow thread shares with the coordinator.
struct Shared {
    counters: Arc<Vec<FlowCounters>>,
    udp_rx: Arc<Vec<Mutex<UdpRx>>>,
    send_stop: Arc<AtomicBool>,
    recv_stop: Arc<AtomicBool>,
}

impl Shared {
    fn new(flows: u32) -> Self {
        Shared {
            counters: Arc::new((0..flows).map(|_| FlowCounters::default()).collect()),
            udp_rx: Arc::new((0..flows).map(|_| Mutex::new(UdpRx::default())).collect()),
            send_stop: Arc::new(AtomicBool::new(false)),
            recv_stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A flow thread: its index, whether the client sends on it, and its handle.
type FlowThread = (u32, bool, thread::JoinHandle<FlowOut>);

/// What the control connection ended with.
#[derive(Default)]
struct ControlOutcome {
    intervals: Vec<StreamInterval>,
    /// The server's per-flow figures and its costs as sender and as receiver.
    final_msg: Option<(Vec<FlowFinal>, Cost, Cost)>,
    error: Option<String>,
}

/// Run a stream test. `on_interval` receives both sides' interval figures as they come.
pub fn run(
    cfg: &StreamConfig,
    meta: Meta,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&StreamInterval),
) -> Result<StreamReport, NetError> {
    let spec = &cfg.spec;
    let duration = Duration::from_millis(spec.duration_ms);
    let idle = if cfg.latency_probe {
        Some(run_probe(cfg, Duration::from_secs(1), stop)?)
    } else {
        None
    };
    let rcvbuf = RcvbufWatch::start(cfg);
    let (mut control, mut reader, flows, token) = start_test(cfg)?;
    let start = Instant::now();
    let until = Until {
        deadline: (spec.duration_ms > 0).then(|| start + duration),
        bytes: spec.bytes_per_stream,
    };
    let shared = Shared::new(spec.flows());
    let handles = spawn_flows(cfg, &flows, &shared, until, start, token)?;
    let probe_stop = Arc::new(AtomicBool::new(false));
    let probe = spawn_probe(cfg, duration, &probe_stop);

    let mut outcome = coordinate(
        cfg,
        &mut control.conn,
        &mut reader,
        &flows,
        &shared,
        &handles,
        (start, until),
        stop,
        on_interval,
    );
    // Whatever happened, wind everything down.
    shared.send_stop.store(true, Ordering::Relaxed);
    if outcome.error.is_some() || outcome.final_msg.is_some() {
        // TCP receivers drain to EOF after the server's senders stop; bound the wait.
        let t = Instant::now();
        while handles.iter().any(|(_, _, h)| !h.is_finished())
            && t.elapsed() < Duration::from_secs(3)
        {
            thread::sleep(Duration::from_millis(10));
        }
        shared.recv_stop.store(true, Ordering::Relaxed);
    }
    let end_tcp: Vec<Option<TcpFigures>> = flows
        .iter()
        .map(|f| match f {
            Flow::Stream(s) if s.is_tcp() => flow::tcp_info(s.fd()),
            _ => None,
        })
        .collect();
    let outs: Vec<(u32, bool, FlowOut)> = handles
        .into_iter()
        .filter_map(|(i, s, h)| h.join().ok().map(|o| (i, s, o)))
        .collect();
    if outcome.error.is_none() {
        outcome.error = outs
            .iter()
            .find_map(|(i, _, o)| o.error.as_ref().map(|e| format!("stream {i}: {e}")));
    }
    probe_stop.store(true, Ordering::Relaxed);
    let loaded = match probe.map(|p| p.join()) {
        Some(Ok(Ok(s))) => Some(s),
        Some(Ok(Err(e))) => {
            outcome.error.get_or_insert(format!("latency probe: {e}"));
            None
        }
        _ => None,
    };
    drop(flows);
    // CPU shares are of the test's wall time, as nuttcp reports them.
    let wall = start.elapsed();

    let ends = FlowEnds {
        outs: &outs,
        end_tcp: &end_tcp,
        shared: &shared,
        server: outcome.final_msg.take().unwrap_or_default(),
        intervals: &outcome.intervals,
        interval: Duration::from_millis(spec.interval_ms.max(10)),
        wall,
    };
    let mut results: Vec<DirectionResult> = [true, false]
        .into_iter()
        .filter_map(|client_sends| direction_result(spec, client_sends, &ends))
        .collect();
    rcvbuf.finish(&mut results);
    Ok(StreamReport {
        meta,
        target: cfg.target.to_string(),
        address_choice: None,
        transport: spec.transport,
        direction: spec.direction,
        streams: spec.streams,
        duration_ns: (spec.duration_ms > 0).then_some(duration.as_nanos() as u64),
        bytes: spec.bytes_per_stream.map(|b| b * u64::from(spec.streams)),
        buffer_bytes: spec.buffer_bytes,
        udp_rate_bps: spec.udp_rate_bps.map(|r| r * f64::from(spec.streams)),
        options: spec.options.clone(),
        results,
        intervals: outcome.intervals,
        latency_probe: match (idle, loaded) {
            (Some(idle), Some(loaded)) => Some(LatencyProbe { idle, loaded }),
            _ => None,
        },
        error: outcome.error,
        interrupted: stop.load(Ordering::Relaxed),
    })
}

/// The UDP receive-buffer drops of a test whose receivers are on this host: the namespace's
/// `Udp RcvbufErrors` (and `Udp6RcvbufErrors`) before the test, compared after it. A receiver at
/// a loopback or local address lives in latscope's own namespace, whose counters these are.
struct RcvbufWatch(Option<Counters>);

impl RcvbufWatch {
    fn start(cfg: &StreamConfig) -> RcvbufWatch {
        let local =
            cfg.spec.transport == Transport::Udp && cfg.addr.is_some_and(|a| is_local(a.ip()));
        RcvbufWatch(local.then(|| Counters::read_own().ok()).flatten())
    }

    /// Say how many of the lost datagrams the receiving socket had no room for — when only one
    /// direction carried UDP, so that the growth is that direction's.
    fn finish(self, results: &mut [DirectionResult]) {
        let Some(before) = self.0 else { return };
        let Ok(after) = Counters::read_own() else {
            return;
        };
        let grew = after.delta(&before, "Udp", "RcvbufErrors")
            + after.delta(&before, "Snmp6", "Udp6RcvbufErrors");
        let mut udp: Vec<&mut UdpFigures> =
            results.iter_mut().filter_map(|r| r.udp.as_mut()).collect();
        if let [u] = udp.as_mut_slice() {
            u.lost_in_rcvbuf = Some(grew.min(u.lost));
        }
    }
}

/// A loopback address or one of this host's (this namespace's) interface addresses.
fn is_local(ip: std::net::IpAddr) -> bool {
    ip.is_loopback()
        || latscope_sys::net::interface_addrs()
            .map(|v| v.iter().any(|(_, a)| *a == ip))
            .unwrap_or(false)
}

/// Ask for the test, open every flow and wait for the server's Go.
fn start_test(cfg: &StreamConfig) -> Result<(Session, FrameReader, Vec<Flow>, u64), NetError> {
    let spec = &cfg.spec;
    let start_req = Start {
        kind: TestKind::Stream,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: spec.duration_ms,
        server: ServerBehaviour::default(),
        stream: Some(spec.clone()),
        join: None,
    };
    let mut control = open_session(
        &cfg.target,
        cfg.addr,
        cfg.connect_timeout,
        cfg.auth.as_ref(),
        &start_req,
        &[],
    )?;
    let token = control
        .udp_token
        .ok_or_else(|| NetError::Protocol("the server gave no test token".into()))?;
    let flows: Vec<Flow> = (0..spec.flows())
        .map(|i| open_flow(cfg, token, i))
        .collect::<Result<_, _>>()?;
    control
        .conn
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(io_err("control connection"))?;
    let mut reader = FrameReader::default();
    let go_deadline = Instant::now() + CONTROL_TIMEOUT;
    loop {
        match reader.poll::<Control>(&mut control.conn) {
            Ok(Some(Control::Go)) => break,
            Ok(Some(Control::Error { message })) => return Err(NetError::ServerFailed(message)),
            Ok(_) if Instant::now() < go_deadline => {}
            Ok(_) => {
                return Err(NetError::Protocol(
                    "the server did not start the test".into(),
                ));
            }
            Err(e) => return Err(NetError::Protocol(format!("control connection: {e}"))),
        }
    }
    Ok((control, reader, flows, token))
}

/// One thread per flow, sending or receiving until told to stop.
fn spawn_flows(
    cfg: &StreamConfig,
    flows: &[Flow],
    shared: &Shared,
    until: Until,
    start: Instant,
    token: u64,
) -> Result<Vec<FlowThread>, NetError> {
    let spec = &cfg.spec;
    let mut handles = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        let i = i as u32;
        let sends = spec.client_sends(i);
        let (counters, udp_rx, send_stop, recv_stop) = (
            shared.counters.clone(),
            shared.udp_rx.clone(),
            shared.send_stop.clone(),
            shared.recv_stop.clone(),
        );
        let spec = spec.clone();
        let cpu = (!cfg.affinity.is_empty())
            .then(|| cfg.affinity[(i % spec.streams) as usize % cfg.affinity.len()]);
        let f = match f {
            Flow::Stream(s) => Flow::Stream(s.clone()),
            Flow::Udp(u) => Flow::Udp(u.clone()),
        };
        let h = thread::Builder::new()
            .name(format!("stream-{i}"))
            .spawn(move || {
                if let Some(cpu) = cpu
                    && let Err(e) = flow::pin_to_cpu(cpu)
                {
                    return FlowOut {
                        usage: ThreadUsage::default(),
                        error: Some(format!("pinning to CPU {cpu}: {e}")),
                    };
                }
                crate::pace::precise_timers();
                let u0 = ThreadUsage::now();
                let c = &counters[i as usize];
                let len = spec.buffer_bytes as usize;
                let res = match (&f, sends) {
                    (Flow::Stream(s), true) => flow::stream_send(
                        s,
                        len,
                        spec.options.zerocopy,
                        until,
                        None,
                        start,
                        c,
                        &send_stop,
                    ),
                    (Flow::Stream(s), false) => {
                        flow::stream_recv(s, len, None, start, c, &recv_stop)
                    }
                    (Flow::Udp(u), true) => flow::udp_send(
                        u,
                        None,
                        token,
                        i,
                        len,
                        spec.udp_rate_bps,
                        until,
                        None,
                        start,
                        c,
                        &send_stop,
                    ),
                    (Flow::Udp(u), false) => {
                        flow::udp_recv(u, token, start, &udp_rx[i as usize], c, &recv_stop)
                    }
                };
                FlowOut {
                    usage: ThreadUsage::now().since(u0),
                    error: res.err(),
                }
            })
            .map_err(io_err("starting a stream thread"))?;
        handles.push((i, sends, h));
    }
    Ok(handles)
}

/// The latency probe under load, on its own connection, for most of the test.
fn spawn_probe(
    cfg: &StreamConfig,
    duration: Duration,
    probe_stop: &Arc<AtomicBool>,
) -> Option<thread::JoinHandle<Result<latscope_core::Summary, NetError>>> {
    if !cfg.latency_probe {
        return None;
    }
    let (c, ps) = (cfg.clone(), probe_stop.clone());
    let d = if cfg.spec.duration_ms > 0 {
        duration
            .saturating_sub(Duration::from_millis(300))
            .max(Duration::from_millis(200))
    } else {
        Duration::from_secs(3600)
    };
    Some(thread::spawn(move || run_probe(&c, d, &ps)))
}

/// One read of the control connection: relays a server interval; `true` when the test is over
/// (the server's final figures, its error or a lost connection are then in `out`).
fn poll_control(
    reader: &mut FrameReader,
    control: &mut Conn,
    out: &mut ControlOutcome,
    on_interval: &mut dyn FnMut(&StreamInterval),
) -> bool {
    match reader.poll::<Control>(control) {
        Ok(Some(Control::Interval(ev))) => {
            on_interval(&ev);
            out.intervals.push(ev);
            false
        }
        Ok(Some(Control::Final {
            flows,
            cost_as_sender,
            cost_as_receiver,
        })) => {
            out.final_msg = Some((flows, cost_as_sender, cost_as_receiver));
            true
        }
        Ok(Some(Control::Error { message })) => {
            out.error = Some(format!("the server ended the test: {message}"));
            true
        }
        Ok(_) => false,
        Err(e) => {
            out.error = Some(match e {
                FrameError::Io(_) => "the server closed the connection mid-test".to_string(),
                e => format!("control connection: {e}"),
            });
            true
        }
    }
}

/// When the client may send Stop: our senders are done (plus a grace period for datagrams in
/// flight), our UDP receivers have had the sender's whole run, and the TCP (and unix) flows the
/// server sends have ended with its EOF — a Stop before that would cut a server→client test short.
fn ready_to_stop(
    spec: &StreamSpec,
    counters: &[FlowCounters],
    handles: &[FlowThread],
    (start, until): (Instant, Until),
    senders_done_at: Option<Instant>,
    now: Instant,
) -> bool {
    let udp = spec.transport == Transport::Udp;
    let has_client_senders = (0..spec.flows()).any(|i| spec.client_sends(i));
    let udp_recv_done = !udp
        || spec.client_sends(spec.flows() - 1)
        || until.deadline.is_some_and(|d| now >= d + UDP_GRACE)
        || (until.bytes.is_some()
            && counters.iter().all(|c| {
                now.duration_since(start).as_nanos() as u64
                    > c.last_ns.load(Ordering::Relaxed) + 1_000_000_000
            }));
    let stream_recv_done = udp
        || handles
            .iter()
            .filter(|(_, s, _)| !*s)
            .all(|(i, _, _)| counters[*i as usize].done.load(Ordering::Relaxed))
        || until.deadline.is_some_and(|d| now >= d + UDP_GRACE);
    let grace = if udp { UDP_GRACE } else { Duration::ZERO };
    (!has_client_senders || senders_done_at.is_some_and(|t| now >= t + grace))
        && udp_recv_done
        && stream_recv_done
}

/// Drive the test from the control connection: relay both sides' intervals, send Stop when
/// our senders are done (or on Ctrl-C) and wait for the server's final figures, each wait
/// bounded by [`CONTROL_TIMEOUT`].
#[allow(clippy::too_many_arguments)]
fn coordinate(
    cfg: &StreamConfig,
    control: &mut Conn,
    reader: &mut FrameReader,
    flows: &[Flow],
    shared: &Shared,
    handles: &[FlowThread],
    (start, until): (Instant, Until),
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&StreamInterval),
) -> ControlOutcome {
    let spec = &cfg.spec;
    let counters = &shared.counters;
    let interval = Duration::from_millis(spec.interval_ms.max(10));
    let mut out = ControlOutcome::default();
    let mut clock = IntervalClock::new(start, interval, until.deadline);
    let tcp_fd = |i: u32| match flows.get(i as usize) {
        Some(Flow::Stream(s)) if s.is_tcp() => Some(s.fd()),
        _ => None,
    };
    let mut stop_sent_at: Option<Instant> = None;
    let mut senders_done_at: Option<Instant> = None;
    let udp = spec.transport == Transport::Udp;
    loop {
        let now = Instant::now();
        let interrupted = stop.load(Ordering::Relaxed);
        if interrupted {
            shared.send_stop.store(true, Ordering::Relaxed);
        }
        if poll_control(reader, control, &mut out, on_interval) {
            return out;
        }
        let mut report = |(from, to): (Instant, Instant), st: &mut flow::IntervalState| {
            for ev in flow::intervals(
                spec,
                true,
                counters,
                &shared.udp_rx,
                &tcp_fd,
                start,
                from,
                to,
                st,
            ) {
                on_interval(&ev);
                out.intervals.push(ev);
            }
        };
        if let Some(iv) = clock.due(now) {
            report(iv, &mut clock.state);
        }
        let senders_done = handles
            .iter()
            .filter(|(_, s, _)| *s)
            .all(|(i, _, _)| counters[*i as usize].done.load(Ordering::Relaxed));
        if senders_done && senders_done_at.is_none() {
            senders_done_at = Some(now);
        }
        let ready = ready_to_stop(
            spec,
            counters,
            handles,
            (start, until),
            senders_done_at,
            now,
        );
        if stop_sent_at.is_none() && (ready || interrupted) {
            // Our side's last interval, to the end of the transfer, before the server's.
            if let Some(iv) = clock.end(now, counters) {
                report(iv, &mut clock.state);
            }
            if udp {
                shared.recv_stop.store(true, Ordering::Relaxed);
            }
            let udp_sent: Vec<(u32, u64)> = (0..spec.flows())
                .filter(|i| spec.client_sends(*i) && udp)
                .map(|i| (i, counters[i as usize].datagrams.load(Ordering::Relaxed)))
                .collect();
            if crate::proto::write_frame(control, &Control::Stop { udp_sent }).is_err() {
                out.error = Some("the server closed the connection mid-test".into());
                return out;
            }
            stop_sent_at = Some(now);
        }
        if stop_sent_at.is_some_and(|t| now > t + CONTROL_TIMEOUT) {
            out.error = Some("the server sent no final figures".into());
            return out;
        }
    }
}

/// Everything known at the end of a test, from which each direction's result is assembled.
struct FlowEnds<'a> {
    outs: &'a [(u32, bool, FlowOut)],
    end_tcp: &'a [Option<TcpFigures>],
    shared: &'a Shared,
    /// The server's per-flow figures and its costs as sender and as receiver.
    server: (Vec<FlowFinal>, Cost, Cost),
    intervals: &'a [StreamInterval],
    interval: Duration,
    wall: Duration,
}

/// Sums over one direction's flows.
#[derive(Default)]
struct DirectionSums {
    usage: ThreadUsage,
    /// The client's own bytes, I/O calls, time in calls and last activity.
    bytes: u64,
    calls: u64,
    call_ns: u64,
    last_ns: u64,
    streams: Vec<StreamFigures>,
    tcp: Option<TcpFigures>,
    /// The client's receiving sockets' view (when the client receives).
    receiver_limits: Option<TransferLimits>,
    udp: Option<UdpFigures>,
    /// Bytes the receivers got and bytes the senders sent.
    delivered: u64,
    sent: u64,
    /// The end of the run (the senders' end or the last arrival, whichever is later): what
    /// delivered rates are over.
    span_ns: u64,
}

impl DirectionSums {
    fn add_tcp(&mut self, t: &TcpFigures) {
        let a = self.tcp.get_or_insert_with(TcpFigures::default);
        a.retransmits += t.retransmits;
        a.cwnd = a.cwnd.max(t.cwnd);
        a.rtt_us = a.rtt_us.max(t.rtt_us);
        a.rtt_var_us = a.rtt_var_us.max(t.rtt_var_us);
        if let Some(l) = &t.limits {
            match &mut a.limits {
                Some(sum) => sum.merge(l),
                None => a.limits = Some(*l),
            }
        }
    }

    fn add_receiver(&mut self, l: &TransferLimits) {
        match &mut self.receiver_limits {
            Some(sum) => sum.merge(l),
            None => self.receiver_limits = Some(*l),
        }
    }

    fn add_udp(&mut self, u: &UdpFigures) {
        let a = self.udp.get_or_insert_with(UdpFigures::default);
        a.sent += u.sent;
        a.received += u.received;
        a.lost += u.lost;
        a.out_of_order += u.out_of_order;
        a.duplicates += u.duplicates;
        a.jitter_ns = a.jitter_ns.max(u.jitter_ns);
    }
}

/// One flow's figures from both ends, added to its direction's sums.
fn add_flow(
    spec: &StreamSpec,
    i: u32,
    client_sends: bool,
    e: &FlowEnds<'_>,
    d: &mut DirectionSums,
) {
    if let Some((_, _, o)) = e.outs.iter().find(|(k, _, _)| *k == i) {
        d.usage.add(o.usage);
    }
    let c = &e.shared.counters[i as usize];
    let cb = c.bytes.load(Ordering::Relaxed);
    d.bytes += cb;
    d.calls += c.calls.load(Ordering::Relaxed);
    d.call_ns += c.call_ns.load(Ordering::Relaxed);
    d.last_ns = d.last_ns.max(c.last_ns.load(Ordering::Relaxed));
    let sf = e
        .server
        .0
        .iter()
        .find(|f| f.index == i)
        .cloned()
        .unwrap_or_default();
    let (sent, received, rns, sns) = if client_sends {
        let own = c.last_ns.load(Ordering::Relaxed);
        (cb, sf.bytes_received, sf.receive_ns, own)
    } else {
        let own = c.last_ns.load(Ordering::Relaxed);
        (sf.bytes_sent, cb, own, sf.send_ns)
    };
    d.delivered += received;
    d.sent += sent;
    // A rate is over the time the flow ran, not up to its last arrival: a UDP flow whose
    // datagrams stopped arriving early (dropped) must not claim the rate of its first burst.
    let span = rns.max(sns);
    d.span_ns = d.span_ns.max(span);
    let tcp = if client_sends {
        e.end_tcp.get(i as usize).cloned().flatten()
    } else {
        sf.tcp.clone()
    };
    let udp = if spec.transport != Transport::Udp {
        None
    } else if client_sends {
        sf.udp_rx.clone()
    } else {
        e.shared.udp_rx[i as usize]
            .lock()
            .ok()
            .map(|r| r.figures(sf.udp_sent))
    };
    if let Some(t) = &tcp {
        d.add_tcp(t);
    }
    if !client_sends
        && let Some(Some(own)) = e.end_tcp.get(i as usize)
        && let Some(l) = &own.limits
    {
        d.add_receiver(l);
    }
    if let Some(u) = &udp {
        d.add_udp(u);
    }
    d.streams.push(StreamFigures {
        index: i,
        bytes_sent: sent,
        bytes_received: received,
        rate_bps: if span == 0 {
            0.0
        } else {
            received as f64 * 8e9 / span as f64
        },
        tcp,
        udp,
    });
}

/// Both sides' figures for one direction, or `None` when no flow goes that way.
fn direction_result(
    spec: &StreamSpec,
    client_sends: bool,
    e: &FlowEnds<'_>,
) -> Option<DirectionResult> {
    let idx: Vec<u32> = (0..spec.flows())
        .filter(|i| spec.client_sends(*i) == client_sends)
        .collect();
    if idx.is_empty() {
        return None;
    }
    let dir = direction_name(client_sends);
    let mut d = DirectionSums::default();
    for &i in &idx {
        add_flow(spec, i, client_sends, e, &mut d);
    }
    if let Some(u) = d.udp.as_mut() {
        u.loss_pct = if u.sent == 0 {
            0.0
        } else {
            100.0 * u.lost as f64 / u.sent as f64
        };
    }
    let (server_flows, server_send_cost, server_recv_cost) = &e.server;
    // Rates are bytes over the run's time: a receiver's time is the flow's (to the sender's end
    // or the last arrival, whichever is later), not up to the last datagram it happened to get.
    let own_ns = if client_sends { d.last_ns } else { d.span_ns };
    let own = SideView {
        side: "client".into(),
        role: if client_sends { "sender" } else { "receiver" }.into(),
        bytes: d.bytes,
        elapsed_ns: own_ns,
        rate_bps: d.bytes as f64 * 8e9 / own_ns.max(1) as f64,
        cost: flow::cost(d.usage, d.bytes, d.calls, d.call_ns, e.wall),
    };
    let server_bytes = if client_sends { d.delivered } else { d.sent };
    let server_ns = if client_sends {
        d.span_ns
    } else {
        idx.iter()
            .filter_map(|i| server_flows.iter().find(|f| f.index == *i))
            .map(|f| f.send_ns)
            .max()
            .unwrap_or(0)
    };
    let theirs = SideView {
        side: "server".into(),
        role: if client_sends { "receiver" } else { "sender" }.into(),
        bytes: server_bytes,
        elapsed_ns: server_ns,
        rate_bps: server_bytes as f64 * 8e9 / server_ns.max(1) as f64,
        cost: if client_sends {
            server_recv_cost.clone()
        } else {
            server_send_cost.clone()
        },
    };
    let receiver_side = if client_sends { "server" } else { "client" };
    let recv_ivs: Vec<&StreamInterval> = e
        .intervals
        .iter()
        .filter(|iv| iv.direction == dir && iv.side == receiver_side && iv.role == "receiver")
        .collect();
    let (sender, receiver) = if client_sends {
        (own, theirs)
    } else {
        (theirs, own)
    };
    Some(DirectionResult {
        direction: dir.into(),
        bytes_delivered: d.delivered,
        rate_bps: d.delivered as f64 * 8e9 / d.span_ns.max(1) as f64,
        sender,
        receiver,
        streams: d.streams,
        intervals: interval_stats(&recv_ivs, e.interval),
        tcp: d.tcp,
        receiver_limits: d.receiver_limits,
        udp: d.udp,
    })
}

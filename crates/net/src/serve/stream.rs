//! Test kind `stream`: a throughput test. This connection is its control channel; data flows on
//! the connections (or UDP flows) that join it (`stream_join`). The server waits for every flow,
//! says Go, sends interval reports, stops on the client's word (or the deadline) and sends its
//! final figures.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use latscope_core::model::rr::Transport;

use super::admission::{self, Held, Refusal, Resource};
use super::test::{self, Ended, Test};
use super::udp_usage::{UdpUsage, udp_thread_usage, usage_now};
use super::{POLL, Shared, canonical};
use crate::fair::{RateLimit, Share};
use crate::flow::{self, DataSock, FlowCounters, ThreadUsage, UdpRx, Until};
use crate::interval_clock::IntervalClock;
use crate::proto::{self, Control, FlowFinal, FrameReader, StreamSpec};
use crate::sock::Conn;

/// A running stream test, shared by its control thread, its joining data connections and the
/// UDP thread.
pub(super) struct StreamTest {
    pub(super) spec: StreamSpec,
    pub(super) token: u64,
    pub(super) peer_ip: Option<IpAddr>,
    pub(super) socks: Mutex<Vec<Option<Arc<DataSock>>>>,
    pub(super) udp_peers: Mutex<Vec<Option<SocketAddr>>>,
    pub(super) joined: Condvar,
    pub(super) start: OnceLock<Instant>,
    pub(super) udp_rx: Vec<Mutex<UdpRx>>,
    pub(super) counters: Vec<FlowCounters>,
    pub(super) stop: AtomicBool,
    /// Connection slots of the joined data connections and server-sent UDP flows.
    pub(super) held: Mutex<Vec<Held>>,
    /// The source address's byte rate, shared with its other tests (`--per-source-rate`).
    pub(super) limit: Option<Arc<RateLimit>>,
    /// Each UDP flow the server receives: its share of `limit` (policed by the UDP thread).
    pub(super) udp_rx_shares: Vec<Option<Share>>,
}

impl StreamTest {
    fn all_joined(&self) -> bool {
        match self.spec.transport {
            Transport::Udp => self
                .udp_peers
                .lock()
                .map(|v| v.iter().all(Option::is_some))
                .unwrap_or(false),
            _ => self
                .socks
                .lock()
                .map(|v| v.iter().all(Option::is_some))
                .unwrap_or(false),
        }
    }
}

/// A registered stream test; unregistered when dropped.
struct StreamGuard<'a> {
    sh: &'a Shared,
    token: u64,
    test: Arc<StreamTest>,
}

impl<'a> StreamGuard<'a> {
    fn register(
        sh: &'a Shared,
        spec: &StreamSpec,
        token: u64,
        peer_ip: Option<IpAddr>,
    ) -> StreamGuard<'a> {
        let flows = spec.flows() as usize;
        let limit = admission::source_rate(sh, peer_ip);
        let test = Arc::new(StreamTest {
            spec: spec.clone(),
            token,
            peer_ip: peer_ip.map(canonical),
            socks: Mutex::new(vec![None; flows]),
            udp_peers: Mutex::new(vec![None; flows]),
            joined: Condvar::new(),
            start: OnceLock::new(),
            udp_rx: (0..flows).map(|_| Mutex::new(UdpRx::default())).collect(),
            counters: (0..flows).map(|_| FlowCounters::default()).collect(),
            stop: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
            udp_rx_shares: (0..flows)
                .map(|i| {
                    let received = spec.transport == Transport::Udp && spec.client_sends(i as u32);
                    limit.as_ref().filter(|_| received).map(RateLimit::share)
                })
                .collect(),
            limit,
        });
        if let Ok(mut m) = sh.streams.write() {
            m.insert(token, test.clone());
        }
        StreamGuard { sh, token, test }
    }
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.test.stop.store(true, Ordering::SeqCst);
        if let Ok(mut m) = self.sh.streams.write() {
            m.remove(&self.token);
        }
    }
}

/// How long after a stream test's deadline the server waits for the client's Stop.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What a server data thread returns: its CPU usage and whether it sent.
struct FlowThread {
    usage: ThreadUsage,
    sends: bool,
    error: Option<String>,
}

/// Run a stream test's control channel.
pub(super) fn run(t: &mut Test) -> Ended {
    let Some(spec) = &t.start.stream else {
        return Ended::new(0, "stream test without description");
    };
    // The test must be findable before the client learns its token, or its first data
    // connection could arrive first.
    let guard = StreamGuard::register(t.sh, spec, t.token, t.peer_ip);
    size_udp_rcvbuf(t.sh, spec);
    if let Err((code, message)) = hold_udp_flows(t, &guard.test) {
        let _ = test::refuse(t.conn, code, &message);
        return Ended::new(0, message);
    }
    if !t.accept() {
        return Ended::new(0, "the client left before the test");
    }
    let (sh, conn, test) = (t.sh, &mut *t.conn, &guard.test);
    if let Err(message) = wait_joined(sh, test) {
        let _ = proto::write_frame(
            conn,
            &Control::Error {
                message: message.clone(),
            },
        );
        return Ended::new(0, message);
    }
    let udp_usage_start = usage_now(sh);
    let start = Instant::now();
    let _ = test.start.set(start);
    if proto::write_frame(conn, &Control::Go).is_err() {
        return Ended::new(0, "client left before the start");
    }
    let socks: Vec<Option<Arc<DataSock>>> =
        test.socks.lock().map(|v| v.clone()).unwrap_or_default();
    // Every wait of the test ends with it: bytes-count tests get the server's longest duration.
    let limit_ms = if spec.duration_ms > 0 {
        spec.duration_ms
    } else {
        sh.cfg.limits.max_duration_ms
    };
    let deadline = start + Duration::from_millis(limit_ms);
    let threads = spawn_flows(sh, test, &socks, start, deadline);
    let every = Duration::from_millis(spec.interval_ms.max(10));
    let mut clock = IntervalClock::new(start, every, (spec.duration_ms > 0).then_some(deadline));
    let (udp_sent, mut reason) =
        control_loop(sh, conn, test, &socks, (start, deadline), &mut clock);
    test.stop.store(true, Ordering::SeqCst);
    let outs: Vec<FlowThread> = threads.into_iter().filter_map(|h| h.join().ok()).collect();
    // The last interval once the flows have ended: a receiver drains what was in flight when
    // the client said Stop (a client that went away hears nothing more: the write fails).
    if let Some(iv) = clock.end(Instant::now(), &test.counters) {
        let _ = send_intervals(conn, test, &socks, start, iv, &mut clock.state);
    }
    let (fin, total) = final_figures(sh, test, &socks, &outs, &udp_sent, udp_usage_start, start);
    let _ = proto::write_frame(conn, &fin);
    if let Some(e) = outs.iter().find_map(|o| o.error.clone()) {
        reason = e;
    }
    drop(socks);
    drop(guard);
    // The flows' buffers are freed: give the memory back.
    latscope_sys::mem::trim();
    Ended::new(total, reason)
}

/// UDP the client sends arrives on the server's one shared socket: give it room for 100 ms of
/// the test's rate, so that a receiving thread the scheduler puts off for a moment loses
/// nothing. The buffer is never shrunk (other tests may be running); it costs memory only
/// while datagrams wait in it.
fn size_udp_rcvbuf(sh: &Shared, spec: &StreamSpec) {
    let receives = (0..spec.flows()).filter(|&i| spec.client_sends(i)).count();
    if spec.transport != Transport::Udp || receives == 0 {
        return;
    }
    let Some(udp) = &sh.udp_out else { return };
    let rate = spec
        .udp_rate_bps
        .map_or(f64::INFINITY, |r| r * receives as f64);
    crate::udp_batch::raise_rcvbuf(udp.as_raw_fd(), crate::udp_batch::rcvbuf_for_rate(rate));
}

/// Each flow the server sends over UDP has a thread of its own: it takes a connection slot,
/// as a joined data connection does.
fn hold_udp_flows(t: &Test, test: &StreamTest) -> Result<(), Refusal> {
    let spec = &test.spec;
    if spec.transport != Transport::Udp {
        return Ok(());
    }
    let senders = (0..spec.flows()).filter(|&i| !spec.client_sends(i)).count();
    let mut held = Vec::with_capacity(senders);
    for _ in 0..senders {
        held.push(admission::take(t.sh, Resource::Conn, t.peer_ip)?);
    }
    if let Ok(mut h) = test.held.lock() {
        h.extend(held);
    }
    Ok(())
}

/// Wait (bounded by the handshake timeout) for every flow to join.
fn wait_joined(sh: &Shared, test: &StreamTest) -> Result<(), String> {
    let join_deadline = Instant::now() + sh.cfg.handshake_timeout;
    while !test.all_joined() {
        let Ok(g) = test.socks.lock() else { break };
        let left = join_deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || sh.stopping() {
            return Err("not every data connection joined in time".into());
        }
        let _ = test.joined.wait_timeout(g, left.min(POLL));
    }
    Ok(())
}

/// One thread per flow the server sends or receives on a socket of its own (UDP flows the
/// server receives are read by the shared UDP thread).
fn spawn_flows(
    sh: &Shared,
    test: &Arc<StreamTest>,
    socks: &[Option<Arc<DataSock>>],
    start: Instant,
    deadline: Instant,
) -> Vec<JoinHandle<FlowThread>> {
    let spec = &test.spec;
    let until = Until {
        deadline: Some(deadline),
        bytes: spec.bytes_per_stream,
    };
    let peers: Vec<Option<SocketAddr>> =
        test.udp_peers.lock().map(|v| v.clone()).unwrap_or_default();
    let mut threads = Vec::new();
    for i in 0..spec.flows() {
        let sends = !spec.client_sends(i);
        if spec.transport == Transport::Udp && !sends {
            continue; // received by the UDP thread
        }
        let t = test.clone();
        let sock = socks.get(i as usize).cloned().flatten();
        let peer = peers.get(i as usize).copied().flatten();
        let udp = if spec.transport == Transport::Udp {
            sh.udp_out.as_ref().and_then(|u| u.try_clone().ok())
        } else {
            None
        };
        let handle = thread::Builder::new()
            .name("serve-flow".into())
            .stack_size(admission::THREAD_STACK)
            .spawn(move || {
                let u0 = ThreadUsage::now();
                let share = t.limit.as_ref().map(RateLimit::share);
                let c = &t.counters[i as usize];
                let spec = &t.spec;
                let len = spec.buffer_bytes as usize;
                let res = match (sock, udp, peer) {
                    (Some(sock), _, _) if sends => flow::stream_send(
                        &sock,
                        len,
                        spec.options.zerocopy,
                        until,
                        share.as_ref(),
                        start,
                        c,
                        &t.stop,
                    ),
                    (Some(sock), _, _) => {
                        flow::stream_recv(&sock, len, share.as_ref(), start, c, &t.stop)
                    }
                    (None, Some(udp), Some(peer)) => flow::udp_send(
                        &udp,
                        Some(peer),
                        t.token,
                        i,
                        len,
                        spec.udp_rate_bps,
                        until,
                        share.as_ref(),
                        start,
                        c,
                        &t.stop,
                    ),
                    _ => Err("flow without a socket".into()),
                };
                FlowThread {
                    usage: ThreadUsage::now().since(u0),
                    sends,
                    error: res.err(),
                }
            });
        if let Ok(h) = handle {
            threads.push(h);
        }
    }
    threads
}

/// Send this side's figures of the interval (from, to) to the client; false if it went away.
fn send_intervals(
    conn: &mut Conn,
    test: &StreamTest,
    socks: &[Option<Arc<DataSock>>],
    start: Instant,
    (from, to): (Instant, Instant),
    state: &mut flow::IntervalState,
) -> bool {
    let tcp_fd = |i: u32| {
        socks
            .get(i as usize)
            .cloned()
            .flatten()
            .filter(|s| s.is_tcp())
            .map(|s| s.fd())
    };
    flow::intervals(
        &test.spec,
        false,
        &test.counters,
        &test.udp_rx,
        &tcp_fd,
        start,
        from,
        to,
        state,
    )
    .into_iter()
    .all(|ev| proto::write_frame(conn, &Control::Interval(ev)).is_ok())
}

/// Intervals out, Stop in, until the client stops the test, leaves, or the deadline passes
/// (the test's last interval is the caller's, once its flows have ended).
/// Returns the client's count of UDP datagrams sent per flow, and why the test ended.
fn control_loop(
    sh: &Shared,
    conn: &mut Conn,
    test: &StreamTest,
    socks: &[Option<Arc<DataSock>>],
    (start, deadline): (Instant, Instant),
    clock: &mut IntervalClock,
) -> (Vec<(u32, u64)>, String) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(20)));
    let mut reader = FrameReader::default();
    // The client says Stop once its senders are done; past the deadline, give it a little
    // time to, then end the test ourselves.
    let hard_deadline = deadline + STOP_GRACE;
    loop {
        match reader.poll::<Control>(conn) {
            Ok(Some(Control::Stop { udp_sent })) => {
                return (udp_sent, "client stopped the test".into());
            }
            Ok(_) => {}
            Err(_) => return (Vec::new(), "the client went away".into()),
        }
        let now = Instant::now();
        if sh.stopping() || now >= hard_deadline {
            return (Vec::new(), "server stopping or test deadline".into());
        }
        if let Some(iv) = clock.due(now)
            && !send_intervals(conn, test, socks, start, iv, &mut clock.state)
        {
            return (Vec::new(), "the client went away".into());
        }
    }
}

/// The server's final figures (per flow, and the CPU cost of each side); and the bytes moved.
fn final_figures(
    sh: &Shared,
    test: &StreamTest,
    socks: &[Option<Arc<DataSock>>],
    outs: &[FlowThread],
    udp_sent_by_client: &[(u32, u64)],
    udp_usage_start: UdpUsage,
    start: Instant,
) -> (Control, u64) {
    let spec = &test.spec;
    let (mut send_usage, mut recv_usage) = (ThreadUsage::default(), ThreadUsage::default());
    for o in outs {
        if o.sends {
            send_usage.add(o.usage)
        } else {
            recv_usage.add(o.usage)
        }
    }
    let (mut sb, mut sc, mut rb, mut rc) = (0u64, 0u64, 0u64, 0u64);
    // UDP datagrams received (a receive call may bring many).
    let mut rd = 0u64;
    let mut total = 0u64;
    let mut flows = Vec::new();
    for i in 0..spec.flows() {
        let c = &test.counters[i as usize];
        let bytes = c.bytes.load(Ordering::Relaxed);
        let last = c.last_ns.load(Ordering::Relaxed);
        let mut f = FlowFinal {
            index: i,
            ..FlowFinal::default()
        };
        if spec.client_sends(i) {
            f.bytes_received = bytes;
            f.receive_ns = last;
            rb += bytes;
            rc += c.calls.load(Ordering::Relaxed);
            rd += c.datagrams.load(Ordering::Relaxed);
            if spec.transport == Transport::Udp {
                let sent = udp_sent_by_client
                    .iter()
                    .find(|(k, _)| *k == i)
                    .map(|(_, n)| *n)
                    .unwrap_or(0);
                f.udp_rx = test.udp_rx[i as usize].lock().ok().map(|r| r.figures(sent));
            }
        } else {
            f.bytes_sent = bytes;
            f.send_ns = last;
            f.udp_sent = c.datagrams.load(Ordering::Relaxed);
            sb += bytes;
            sc += c.calls.load(Ordering::Relaxed);
            if let Some(Some(s)) = socks.get(i as usize)
                && s.is_tcp()
            {
                f.tcp = flow::tcp_info(s.fd());
            }
        }
        total += bytes;
        flows.push(f);
    }
    let call_ns = |send: bool| -> u64 {
        (0..spec.flows())
            .filter(|i| spec.client_sends(*i) != send)
            .map(|i| test.counters[i as usize].call_ns.load(Ordering::Relaxed))
            .sum()
    };
    // UDP is received by the server's one shared UDP thread: its CPU time is this test's when
    // (nearly) all it received meanwhile was this test's datagrams.
    let udp_cpu = (spec.transport == Transport::Udp && rd > 0)
        .then(|| udp_thread_usage(sh, udp_usage_start, rd))
        .flatten();
    if let Some(u) = udp_cpu {
        recv_usage.add(u);
    }
    let mut cost_as_receiver = flow::cost(recv_usage, rb, rc, call_ns(false), start.elapsed());
    cost_as_receiver.cpu_measured = spec.transport != Transport::Udp || udp_cpu.is_some();
    let fin = Control::Final {
        flows,
        cost_as_sender: flow::cost(send_usage, sb, sc, call_ns(true), start.elapsed()),
        cost_as_receiver,
    };
    (fin, total)
}

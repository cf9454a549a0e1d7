//! `latscope serve`: the peer every latscope test talks to. TCP and UDP on one port, optionally
//! a unix socket. One thread per connection (latency first: a blocking read/write pair is the
//! shortest path through the kernel), bounded by connection and test limits; a slow or hostile
//! client only ever holds its own thread, and only until the handshake timeout.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use latscope_core::model::rr::{ServerBehaviour, WriteMode};
use socket2::{Domain, Protocol, Socket, Type};

use latscope_core::model::rr::Transport;

use crate::NetError;
use crate::flow::{self, DataSock, FlowCounters, ThreadUsage, UdpRx, Until};
use crate::proto::{
    self, ClientHello, Control, FlowFinal, FrameError, FrameReader, Limits, Reply, ServerHello,
    Start, StreamDatagram, StreamSpec, TestKind, UDP_ECHO_MAGIC, UDP_ECHO_REPLY, UDP_ECHO_REQUEST,
    UDP_HEADER_LEN, UDP_JOIN_SEQ, UdpHeader,
};
use crate::sock::{Conn, set_int};

/// How often blocked threads look at the stop flag and their deadline.
const POLL: Duration = Duration::from_millis(100);

/// Server configuration.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address to bind; `::` binds both IPv6 and IPv4 where the kernel allows.
    pub bind: IpAddr,
    /// TCP and UDP port; 0 picks a free one (the same for both).
    pub port: u16,
    /// Also listen on this unix stream socket.
    pub unix: Option<PathBuf>,
    pub limits: Limits,
    /// Connections (including ones still in their handshake) beyond which new ones are refused.
    pub max_connections: u32,
    /// Time a client has to send its hello and test request.
    pub handshake_timeout: Duration,
    /// Behaviour applied to every test regardless of what clients ask (to emulate a given
    /// server, e.g. the split-write, Nagle-on one).
    pub forced: Option<ServerBehaviour>,
    /// Handle at most this many requests at once across all connections, like that many
    /// single-threaded workers: the rest wait their turn (socket queueing). None: no limit.
    pub workers: Option<u32>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            bind: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            port: proto::DEFAULT_PORT,
            unix: None,
            limits: Limits {
                max_tests: 128,
                max_duration_ms: 3_600_000,
                max_message_bytes: 4 << 20,
            },
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(5),
            forced: None,
            workers: None,
        }
    }
}

/// Something the server did, for its log. The server itself never prints.
#[derive(Clone, Debug, PartialEq)]
pub enum ServeEvent {
    Listening {
        tcp: SocketAddr,
        udp: SocketAddr,
        unix: Option<PathBuf>,
    },
    TestStarted {
        id: u64,
        peer: String,
        kind: TestKind,
        request_bytes: u32,
        response_bytes: u32,
    },
    TestEnded {
        id: u64,
        peer: String,
        transactions: u64,
        elapsed: Duration,
        reason: String,
    },
    Refused {
        peer: String,
        reason: String,
    },
}

struct UdpTest {
    peer_ip: IpAddr,
    response_bytes: u32,
    drop_every: u32,
    requests: AtomicU64,
    deadline: Instant,
}

/// The shared UDP thread's CPU time, published by that thread: every [`UDP_USAGE_EVERY`] while
/// busy, and whenever its receive times out (idle), so a snapshot is exact once traffic stops.
#[derive(Clone, Copy, Debug, Default)]
struct UdpUsage {
    /// Datagrams the thread had received when `usage` was taken.
    datagrams: u64,
    usage: ThreadUsage,
    at: Option<Instant>,
}

/// How often the busy UDP thread publishes its CPU time (getrusage is a system call: not per
/// datagram).
const UDP_USAGE_EVERY: Duration = Duration::from_millis(10);

/// The UDP thread's receive timeout: how often it checks for shutdown, and how soon after the
/// traffic stops it publishes its final CPU time.
const UDP_IDLE: Duration = Duration::from_millis(20);

struct Shared {
    udp_usage: Mutex<UdpUsage>,
    cfg: ServeConfig,
    stop: Arc<AtomicBool>,
    conns: AtomicU32,
    tests: AtomicU32,
    next_id: AtomicU64,
    udp_tests: RwLock<HashMap<u64, Arc<UdpTest>>>,
    streams: RwLock<HashMap<u64, Arc<StreamTest>>>,
    /// Requests being handled and the FIFO of waiting ones, against `cfg.workers`.
    busy: Mutex<WorkerQueue>,
    free: Condvar,
    /// A clone of the UDP socket for stream tests in which the server sends datagrams.
    udp_out: Option<UdpSocket>,
    log: Box<dyn Fn(ServeEvent) + Send + Sync>,
}

/// A running stream test, shared by its control thread, its joining data connections and the
/// UDP thread.
struct StreamTest {
    spec: StreamSpec,
    token: u64,
    peer_ip: Option<IpAddr>,
    socks: Mutex<Vec<Option<Arc<DataSock>>>>,
    udp_peers: Mutex<Vec<Option<SocketAddr>>>,
    joined: Condvar,
    start: std::sync::OnceLock<Instant>,
    udp_rx: Vec<Mutex<UdpRx>>,
    counters: Vec<FlowCounters>,
    stop: AtomicBool,
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

/// A bound server, not yet running.
pub struct Server {
    tcp: TcpListener,
    udp: UdpSocket,
    unix: Option<(UnixListener, PathBuf)>,
    shared: Arc<Shared>,
}

/// A server running on background threads; dropping it stops it.
pub struct ServerHandle {
    pub tcp_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Stop and wait for the accept loop to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind_pair(bind: IpAddr, port: u16) -> io::Result<(TcpListener, UdpSocket)> {
    let domain = if bind.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    // With port 0 the kernel picks a TCP port that may be taken for UDP: retry a few times.
    let mut last = None;
    for _ in 0..32 {
        let tcp = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if bind.is_ipv6() {
            let _ = tcp.set_only_v6(false);
        }
        tcp.set_reuse_address(true)?;
        tcp.bind(&SocketAddr::new(bind, port).into())?;
        tcp.listen(1024)?;
        let tcp: TcpListener = tcp.into();
        let actual = tcp.local_addr()?.port();
        let udp = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if bind.is_ipv6() {
            let _ = udp.set_only_v6(false);
        }
        match udp.bind(&SocketAddr::new(bind, actual).into()) {
            Ok(()) => return Ok((tcp, udp.into())),
            Err(e) if port == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port")))
}

impl Server {
    /// Bind every socket. `log` receives the server's events (from several threads).
    pub fn bind(
        cfg: ServeConfig,
        stop: Arc<AtomicBool>,
        log: impl Fn(ServeEvent) + Send + Sync + 'static,
    ) -> Result<Server, NetError> {
        let where_ = format!("binding {}", SocketAddr::new(cfg.bind, cfg.port));
        let (tcp, udp) = match bind_pair(cfg.bind, cfg.port) {
            Ok(p) => p,
            // IPv6 disabled on this host: fall back to IPv4 only.
            Err(e)
                if cfg.bind == IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    && e.raw_os_error() == Some(libc::EAFNOSUPPORT) =>
            {
                bind_pair(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), cfg.port)
                    .map_err(|e| bind_error(&where_, e))?
            }
            Err(e) => return Err(bind_error(&where_, e)),
        };
        let unix = match &cfg.unix {
            Some(p) => {
                // A stale socket file from a previous run would make bind fail; remove it only
                // if it is a socket nobody answers on.
                if p.exists() && std::os::unix::net::UnixStream::connect(p).is_err() {
                    let _ = std::fs::remove_file(p);
                }
                let l = UnixListener::bind(p)
                    .map_err(|e| bind_error(&format!("binding {}", p.display()), e))?;
                Some((l, p.clone()))
            }
            None => None,
        };
        tcp.set_nonblocking(true)
            .map_err(|e| NetError::io("listener", e))?;
        if let Some((l, _)) = &unix {
            l.set_nonblocking(true)
                .map_err(|e| NetError::io("listener", e))?;
        }
        udp.set_read_timeout(Some(UDP_IDLE))
            .map_err(|e| NetError::io("udp socket", e))?;
        let udp_out = udp.try_clone().ok();
        Ok(Server {
            tcp,
            udp,
            unix,
            shared: Arc::new(Shared {
                udp_usage: Mutex::new(UdpUsage::default()),
                cfg,
                stop,
                conns: AtomicU32::new(0),
                tests: AtomicU32::new(0),
                next_id: AtomicU64::new(1),
                udp_tests: RwLock::new(HashMap::new()),
                streams: RwLock::new(HashMap::new()),
                busy: Mutex::new(WorkerQueue::default()),
                free: Condvar::new(),
                udp_out,
                log: Box::new(log),
            }),
        })
    }

    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(self.shared.cfg.bind, 0))
    }

    /// Run until the stop flag is set. Removes the unix socket file on the way out.
    pub fn run(self) -> Result<(), NetError> {
        let sh = self.shared.clone();
        (sh.log)(ServeEvent::Listening {
            tcp: self.tcp_addr(),
            udp: self
                .udp
                .local_addr()
                .map_err(|e| NetError::io("udp socket", e))?,
            unix: self.unix.as_ref().map(|(_, p)| p.clone()),
        });
        let udp_shared = sh.clone();
        let udp = self.udp;
        let udp_thread = thread::Builder::new()
            .name("serve-udp".into())
            .spawn(move || udp_loop(&udp, &udp_shared))
            .map_err(|e| NetError::io("spawning the UDP thread", e))?;

        let mut fds = vec![libc::pollfd {
            fd: self.tcp.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some((l, _)) = &self.unix {
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        while !sh.stop.load(Ordering::Relaxed) {
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the whole call.
            let n = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    POLL.as_millis() as i32,
                )
            };
            if n <= 0 {
                continue;
            }
            while let Ok((s, peer)) = self.tcp.accept() {
                let _ = s.set_nonblocking(false);
                spawn_conn(&sh, Conn::Tcp(s), peer.to_string(), Some(peer.ip()));
            }
            if let Some((l, p)) = &self.unix {
                while let Ok((s, _)) = l.accept() {
                    let _ = s.set_nonblocking(false);
                    spawn_conn(&sh, Conn::Unix(s), format!("unix:{}", p.display()), None);
                }
            }
        }
        let _ = udp_thread.join();
        if let Some((_, p)) = &self.unix {
            let _ = std::fs::remove_file(p);
        }
        Ok(())
    }

    /// Run on a background thread (for tests and `latscope demo`).
    pub fn spawn(self) -> Result<ServerHandle, NetError> {
        let tcp_addr = self.tcp_addr();
        let stop = self.shared.stop.clone();
        let thread = thread::Builder::new()
            .name("serve".into())
            .spawn(move || {
                let _ = self.run();
            })
            .map_err(|e| NetError::io("spawning the server", e))?;
        Ok(ServerHandle {
            tcp_addr,
            stop,
            thread: Some(thread),
        })
    }
}

fn bind_error(what: &str, e: io::Error) -> NetError {
    match e.kind() {
        io::ErrorKind::AddrInUse => NetError::Invalid(format!(
            "{what}: address in use — another server runs there; pick another with --port"
        )),
        io::ErrorKind::PermissionDenied => NetError::Privilege {
            what: what.into(),
            capability: "CAP_NET_BIND_SERVICE (ports below 1024)".into(),
            remedy: "use a port ≥ 1024".into(),
        },
        _ => NetError::io(what, e),
    }
}

/// First come, first served admission to the `--workers` slots (a plain semaphore would let
/// the thread that just finished win again and starve the others — unlike a real worker,
/// which takes queued requests in order).
#[derive(Debug, Default)]
struct WorkerQueue {
    busy: u32,
    next_ticket: u64,
    next_admit: u64,
}

/// One of `--workers` request slots; waits its turn, gives the slot back when dropped.
struct WorkerPermit<'a>(Option<&'a Shared>);

impl<'a> WorkerPermit<'a> {
    fn take(sh: &'a Shared) -> WorkerPermit<'a> {
        let Some(max) = sh.cfg.workers else {
            return WorkerPermit(None);
        };
        let Ok(mut q) = sh.busy.lock() else {
            return WorkerPermit(None);
        };
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        while q.next_admit != ticket || q.busy >= max {
            q = match sh.free.wait(q) {
                Ok(q) => q,
                Err(_) => return WorkerPermit(None),
            };
        }
        q.next_admit += 1;
        q.busy += 1;
        // The next ticket may be admissible too (more than one free slot).
        sh.free.notify_all();
        WorkerPermit(Some(sh))
    }
}

impl Drop for WorkerPermit<'_> {
    fn drop(&mut self) {
        if let Some(sh) = self.0
            && let Ok(mut q) = sh.busy.lock()
        {
            q.busy = q.busy.saturating_sub(1);
            sh.free.notify_all();
        }
    }
}

/// Decrements a counter when dropped.
struct Slot<'a>(&'a AtomicU32);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn try_slot(counter: &AtomicU32, max: u32) -> Option<Slot<'_>> {
    let prev = counter.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(counter);
    if prev >= max { None } else { Some(slot) }
}

fn spawn_conn(sh: &Arc<Shared>, conn: Conn, peer: String, peer_ip: Option<IpAddr>) {
    let sh2 = sh.clone();
    let peer2 = peer.clone();
    let spawned = thread::Builder::new()
        .name("serve-conn".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let Some(_slot) = try_slot(&sh2.conns, sh2.cfg.max_connections) else {
                let mut conn = conn;
                let _ = refuse(&mut conn, "busy", "too many connections; try again later");
                (sh2.log)(ServeEvent::Refused {
                    peer: peer2,
                    reason: "too many connections".into(),
                });
                return;
            };
            handle_conn(&sh2, conn, peer2, peer_ip);
        });
    if spawned.is_err() {
        (sh.log)(ServeEvent::Refused {
            peer,
            reason: "cannot start a thread".into(),
        });
    }
}

fn refuse(conn: &mut Conn, code: &str, message: &str) -> io::Result<()> {
    proto::write_frame(
        conn,
        &Reply::Refused {
            code: code.into(),
            message: message.into(),
        },
    )
}

/// Check a test request against the limits; the refusal text tells the client what to change.
fn validate(start: &Start, limits: &Limits, unix: bool) -> Result<(), (&'static str, String)> {
    let max = limits.max_message_bytes;
    for (what, n) in [
        ("request", start.request_bytes),
        ("response", start.response_bytes),
    ] {
        if n == 0 {
            return Err((
                "invalid",
                format!("{what} size 0: messages must be at least 1 byte"),
            ));
        }
        if n > max {
            return Err((
                "limit",
                format!(
                    "{what} size {n} B exceeds this server's limit of {max} B (serve --max-message)"
                ),
            ));
        }
    }
    if start.duration_ms > limits.max_duration_ms {
        return Err((
            "limit",
            format!(
                "a {} s test exceeds this server's limit of {} s (serve --max-duration)",
                start.duration_ms / 1000,
                limits.max_duration_ms / 1000
            ),
        ));
    }
    if start.kind == TestKind::UdpRr {
        if unix {
            return Err((
                "invalid",
                "UDP tests need a TCP control connection, not a unix socket".into(),
            ));
        }
        if start.request_bytes < UDP_HEADER_LEN as u32
            || start.response_bytes < UDP_HEADER_LEN as u32
        {
            return Err((
                "invalid",
                format!(
                    "UDP messages carry a {UDP_HEADER_LEN}-byte header: sizes must be ≥ {UDP_HEADER_LEN}"
                ),
            ));
        }
        if start.request_bytes > 65_507 || start.response_bytes > 65_507 {
            return Err(("invalid", "UDP messages are at most 65507 bytes".into()));
        }
        if start.server.think_ns > 0 {
            return Err((
                "invalid",
                "think time is supported on stream tests only".into(),
            ));
        }
    }
    if start.kind == TestKind::Stream {
        let Some(spec) = &start.stream else {
            return Err(("invalid", "a stream test without its description".into()));
        };
        if spec.streams == 0 || spec.streams > 128 {
            return Err((
                "limit",
                format!("{} streams: this server allows 1 to 128", spec.streams),
            ));
        }
        if spec.buffer_bytes == 0 || spec.buffer_bytes > max {
            return Err((
                "limit",
                format!(
                    "buffer length {} B is outside 1 B – {max} B (serve --max-message)",
                    spec.buffer_bytes
                ),
            ));
        }
        if spec.duration_ms > limits.max_duration_ms {
            return Err((
                "limit",
                format!(
                    "a {} s test exceeds this server's limit of {} s (serve --max-duration)",
                    spec.duration_ms / 1000,
                    limits.max_duration_ms / 1000
                ),
            ));
        }
        if spec.duration_ms == 0 && spec.bytes_per_stream.is_none() {
            return Err((
                "invalid",
                "a stream test needs a duration or a byte count".into(),
            ));
        }
        if spec.transport == Transport::Udp
            && (spec.buffer_bytes < proto::UDP_STREAM_HEADER_LEN as u32
                || spec.buffer_bytes > 65_507)
        {
            return Err((
                "invalid",
                format!(
                    "UDP datagrams must be {}–65507 B",
                    proto::UDP_STREAM_HEADER_LEN
                ),
            ));
        }
        if (spec.transport == Transport::Unix) != unix {
            return Err((
                "invalid",
                "the stream's transport does not match this connection".into(),
            ));
        }
    }
    if start.server.think_ns > 10_000_000_000 {
        return Err(("limit", "think time above 10 s".into()));
    }
    Ok(())
}

fn handle_conn(sh: &Arc<Shared>, mut conn: Conn, peer: String, peer_ip: Option<IpAddr>) {
    let cfg = &sh.cfg;
    let _ = conn.set_read_timeout(Some(cfg.handshake_timeout));
    let _ = conn.set_write_timeout(Some(cfg.handshake_timeout));
    if conn.is_tcp() {
        let _ = set_int(conn.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    }
    let hello = ServerHello {
        software: format!("latscope {}", env!("CARGO_PKG_VERSION")),
        limits: cfg.limits.clone(),
        auth_required: false,
    };
    let mut greeting = Vec::with_capacity(256);
    proto::encode_greeting(&hello, &mut greeting);
    if conn.write_all(&greeting).is_err() {
        return;
    }
    let log_refused = |reason: String| {
        (sh.log)(ServeEvent::Refused {
            peer: peer.clone(),
            reason,
        })
    };
    let _client: ClientHello = match proto::read_greeting(&mut conn) {
        Ok(h) => h,
        Err(FrameError::Version(v)) => {
            let _ = refuse(
                &mut conn,
                "version",
                &format!(
                    "protocol version {v} is not supported; this server speaks {}",
                    proto::VERSION
                ),
            );
            return log_refused(format!("protocol version {v}"));
        }
        Err(e) => return log_refused(format!("bad greeting: {e}")),
    };
    let start: Start = match proto::read_frame(&mut conn) {
        Ok(s) => s,
        Err(e) => {
            let _ = refuse(&mut conn, "invalid", &format!("bad test request: {e}"));
            return log_refused(format!("bad test request: {e}"));
        }
    };
    if let Err((code, msg)) = validate(&start, &cfg.limits, !conn.is_tcp()) {
        let _ = refuse(&mut conn, code, &msg);
        return log_refused(msg);
    }
    if start.kind == TestKind::StreamJoin {
        if let Err(msg) = join_stream(sh, conn, &start) {
            log_refused(msg);
        }
        return;
    }
    let Some(_test) = try_slot(&sh.tests, cfg.limits.max_tests) else {
        let msg = format!(
            "this server already runs its limit of {} tests; try again later",
            cfg.limits.max_tests
        );
        let _ = refuse(&mut conn, "busy", &msg);
        return log_refused(msg);
    };
    let behaviour = cfg.forced.clone().unwrap_or_else(|| start.server.clone());
    let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
    let token = matches!(start.kind, TestKind::UdpRr | TestKind::Stream).then(random_token);
    // A stream test must be findable before the client learns its token, or its first data
    // connection could arrive first.
    let registered = match (&start.stream, token) {
        (Some(spec), Some(token)) if start.kind == TestKind::Stream => {
            Some(StreamGuard::register(sh, spec, token, peer_ip))
        }
        _ => None,
    };
    let reply = Reply::Accepted {
        test_id: id,
        server: behaviour.clone(),
        udp_token: token,
    };
    if proto::write_frame(&mut conn, &reply).is_err() {
        return;
    }
    (sh.log)(ServeEvent::TestStarted {
        id,
        peer: peer.clone(),
        kind: start.kind,
        request_bytes: start.request_bytes,
        response_bytes: start.response_bytes,
    });
    let began = Instant::now();
    let deadline = began + Duration::from_millis(start.duration_ms.max(1));
    let (transactions, reason) = match (start.kind, token, &start.stream) {
        (TestKind::Stream, _, _) => match &registered {
            Some(g) => run_stream_test(sh, &mut conn, &g.test),
            None => (0, "stream test without description".into()),
        },
        (TestKind::UdpRr, Some(token), _) => {
            udp_test(sh, &mut conn, &start, &behaviour, token, peer_ip, deadline)
        }
        _ => stream_test(sh, &mut conn, &start, &behaviour, deadline),
    };
    (sh.log)(ServeEvent::TestEnded {
        id,
        peer,
        transactions,
        elapsed: began.elapsed(),
        reason,
    });
}

fn random_token() -> u64 {
    let mut b = [0u8; 8];
    // getrandom(2) cannot fail for 8 bytes once the pool is initialised; fall back to time-based
    // entropy mixed with the address of a stack variable if it somehow does.
    // SAFETY: `b` is valid for writes of 8 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ ((&b as *const _ as u64).rotate_left(29))
    }
}

/// Read exactly `buf.len()` bytes, waking every [`POLL`] to check the stop flag and deadline.
/// Returns Ok(false) on a clean EOF before the first byte.
fn read_full(
    conn: &mut Conn,
    buf: &mut [u8],
    sh: &Shared,
    deadline: Instant,
    quickack: bool,
) -> Result<bool, String> {
    let mut got = 0;
    while got < buf.len() {
        match conn.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("client closed mid-request".into()),
            Ok(n) => {
                got += n;
                if quickack {
                    // Every read, partial ones too: this sends a pending delayed ACK at once.
                    let _ = set_int(conn.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if sh.stop.load(Ordering::Relaxed) {
                    return Err("server stopping".into());
                }
                if Instant::now() >= deadline {
                    return Err("test duration reached".into());
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(true)
}

fn stream_test(
    sh: &Shared,
    conn: &mut Conn,
    start: &Start,
    b: &ServerBehaviour,
    deadline: Instant,
) -> (u64, String) {
    if let Err(e) = conn.apply(&b.sockopts) {
        return (0, format!("setting socket options: {e}"));
    }
    let _ = conn.set_read_timeout(Some(POLL));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let mut req = vec![0u8; start.request_bytes as usize];
    let resp = vec![b'r'; start.response_bytes as usize];
    let split =
        (b.write_mode == WriteMode::Split).then(|| (b.split_at as usize).clamp(1, resp.len()));
    let tcp = conn.is_tcp();
    let fd = conn.as_raw_fd();
    let think = Duration::from_nanos(b.think_ns);
    let mut n = 0u64;
    loop {
        match read_full(conn, &mut req, sh, deadline, tcp && b.sockopts.quickack) {
            Ok(true) => {}
            Ok(false) => return (n, "client closed".into()),
            Err(e) => return (n, e),
        }
        let _worker = WorkerPermit::take(sh);
        if !think.is_zero() {
            thread::sleep(think);
        }
        if tcp && b.sockopts.cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 1);
        }
        let wrote = match split {
            Some(at) if at < resp.len() => conn
                .write_all(&resp[..at])
                .and_then(|_| conn.write_all(&resp[at..])),
            _ => conn.write_all(&resp),
        };
        if tcp && b.sockopts.cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 0);
        }
        drop(_worker);
        if let Err(e) = wrote {
            return (n, format!("write failed: {e}"));
        }
        n += 1;
        if start.kind == TestKind::Crr {
            // One transaction; wait for the client's close so it, not us, holds TIME_WAIT.
            let mut one = [0u8; 1];
            let _ = read_full(conn, &mut one, sh, deadline, false);
            return (n, "transaction done".into());
        }
    }
}

fn udp_test(
    sh: &Shared,
    conn: &mut Conn,
    start: &Start,
    b: &ServerBehaviour,
    token: u64,
    peer_ip: Option<IpAddr>,
    deadline: Instant,
) -> (u64, String) {
    let Some(peer_ip) = peer_ip else {
        return (0, "UDP test without a peer address".into());
    };
    let t = Arc::new(UdpTest {
        peer_ip: canonical(peer_ip),
        response_bytes: start.response_bytes,
        drop_every: b.drop_every,
        requests: AtomicU64::new(0),
        deadline,
    });
    if let Ok(mut m) = sh.udp_tests.write() {
        m.insert(token, t.clone());
    }
    // The control connection is the test's lifetime: wait for the client to close it.
    let _ = conn.set_read_timeout(Some(POLL));
    let mut one = [0u8; 1];
    let reason = match read_full(conn, &mut one, sh, deadline, false) {
        Ok(_) => "client closed".to_string(),
        Err(e) => e,
    };
    if let Ok(mut m) = sh.udp_tests.write() {
        m.remove(&token);
    }
    (t.requests.load(Ordering::Relaxed), reason)
}

/// IPv4-mapped IPv6 addresses compare equal to their IPv4 form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn udp_loop(udp: &UdpSocket, sh: &Shared) {
    let mut buf = vec![0u8; 65_536];
    let mut resp = vec![0u8; 65_536];
    let mut datagrams = 0u64;
    let mut published = Instant::now();
    let publish = |datagrams: u64| {
        let now = Instant::now();
        if let Ok(mut u) = sh.udp_usage.lock() {
            *u = UdpUsage {
                datagrams,
                usage: ThreadUsage::now(),
                at: Some(now),
            };
        }
        now
    };
    while !sh.stop.load(Ordering::Relaxed) {
        let (n, from) = match udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => {
                published = publish(datagrams);
                continue;
            }
        };
        datagrams += 1;
        if datagrams % 64 == 0 && published.elapsed() >= UDP_USAGE_EVERY {
            published = publish(datagrams);
        }
        let pkt = &mut buf[..n];
        if n >= 5 && &pkt[..4] == UDP_ECHO_MAGIC && pkt[4] == UDP_ECHO_REQUEST {
            pkt[4] = UDP_ECHO_REPLY;
            let _ = udp.send_to(pkt, from);
            continue;
        }
        if let Some(d) = StreamDatagram::parse(pkt) {
            stream_datagram(udp, sh, d, n, from);
            continue;
        }
        let Some(h) = UdpHeader::parse(pkt) else {
            continue;
        };
        let test = match sh.udp_tests.read() {
            Ok(m) => m.get(&h.token).cloned(),
            Err(_) => None,
        };
        let Some(t) = test else { continue };
        // Only the host that opened the test may use its token, and only while it lasts.
        if canonical(from.ip()) != t.peer_ip || Instant::now() >= t.deadline {
            continue;
        }
        let k = t.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if t.drop_every > 0 && k % u64::from(t.drop_every) == 0 {
            continue;
        }
        let len = t.response_bytes as usize;
        h.write(&mut resp[..len]);
        let _ = udp.send_to(&resp[..len], from);
    }
}

/// The UDP thread's CPU time since `before`, once it has published after the end of the test,
/// if at most 1% of the datagrams it received meanwhile (and no more than 16) were not this
/// test's `ours`.
fn udp_thread_usage(sh: &Shared, before: UdpUsage, ours: u64) -> Option<ThreadUsage> {
    let ended = Instant::now();
    let deadline = ended + 5 * UDP_IDLE;
    let after = loop {
        let u = sh.udp_usage.lock().map(|u| *u).ok()?;
        if u.at.is_some_and(|t| t > ended) {
            break u;
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(UDP_IDLE / 4);
    };
    let others = (after.datagrams - before.datagrams).saturating_sub(ours);
    (others <= 16.max(ours / 100)).then(|| after.usage.since(before.usage))
}

/// A data connection joins its stream test.
fn join_stream(sh: &Shared, mut conn: Conn, start: &Start) -> Result<(), String> {
    let Some(j) = start.join else {
        let _ = refuse(&mut conn, "invalid", "a join without its test token");
        return Err("join without token".into());
    };
    let test = sh
        .streams
        .read()
        .ok()
        .and_then(|m| m.get(&j.token).cloned());
    let Some(test) = test else {
        let _ = refuse(
            &mut conn,
            "invalid",
            "no such stream test (it ended or never started)",
        );
        return Err("join for an unknown test".into());
    };
    if j.index >= test.spec.flows() || test.spec.transport == Transport::Udp {
        let _ = refuse(&mut conn, "invalid", "no such flow in this test");
        return Err("join for an unknown flow".into());
    }
    let v6 = matches!(&conn, Conn::Tcp(s) if s.local_addr().map(|a| a.is_ipv6()).unwrap_or(false));
    if let Err(e) = flow::apply_options(conn.as_raw_fd(), &test.spec.options, conn.is_tcp(), v6) {
        let _ = refuse(&mut conn, "invalid", &format!("socket options: {e}"));
        return Err(format!("socket options: {e}"));
    }
    if proto::write_frame(
        &mut conn,
        &Reply::Accepted {
            test_id: 0,
            server: ServerBehaviour::default(),
            udp_token: None,
        },
    )
    .is_err()
    {
        return Err("data connection closed while joining".into());
    }
    let sock = match conn {
        Conn::Tcp(s) => DataSock::Tcp(s),
        Conn::Unix(s) => DataSock::Unix(s),
    };
    sock.set_read_timeout(None);
    if let Ok(mut v) = test.socks.lock() {
        if v[j.index as usize].is_some() {
            return Err("flow joined twice".into());
        }
        v[j.index as usize] = Some(Arc::new(sock));
    }
    test.joined.notify_all();
    Ok(())
}

/// A stream-test datagram arrived on the shared UDP socket.
fn stream_datagram(udp: &UdpSocket, sh: &Shared, d: StreamDatagram, len: usize, from: SocketAddr) {
    let test = sh
        .streams
        .read()
        .ok()
        .and_then(|m| m.get(&d.token).cloned());
    let Some(t) = test else { return };
    if t.peer_ip.is_some_and(|ip| ip != canonical(from.ip())) || d.index >= t.spec.flows() {
        return;
    }
    let i = d.index as usize;
    if d.seq == UDP_JOIN_SEQ {
        if let Ok(mut v) = t.udp_peers.lock() {
            v[i] = Some(from);
        }
        t.joined.notify_all();
        // Echo: tells the client its flow is known (and opens stateful firewalls both ways).
        let mut buf = [0u8; proto::UDP_STREAM_HEADER_LEN];
        d.write(&mut buf);
        let _ = udp.send_to(&buf, from);
        return;
    }
    let Some(start) = t.start.get() else { return };
    if !t.spec.client_sends(d.index) {
        return;
    }
    let arrival = start.elapsed().as_nanos() as u64;
    if let Ok(mut rx) = t.udp_rx[i].lock() {
        rx.on_datagram(d.seq, len, d.send_ns, arrival);
    }
    let c = &t.counters[i];
    c.bytes.fetch_add(len as u64, Ordering::Relaxed);
    c.calls.fetch_add(1, Ordering::Relaxed);
    c.last_ns.store(arrival, Ordering::Relaxed);
}

/// What a server data thread returns: its CPU usage and whether it sent.
struct FlowThread {
    usage: ThreadUsage,
    sends: bool,
    error: Option<String>,
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
        let test = Arc::new(StreamTest {
            spec: spec.clone(),
            token,
            peer_ip: peer_ip.map(canonical),
            socks: Mutex::new(vec![None; flows]),
            udp_peers: Mutex::new(vec![None; flows]),
            joined: Condvar::new(),
            start: std::sync::OnceLock::new(),
            udp_rx: (0..flows).map(|_| Mutex::new(UdpRx::default())).collect(),
            counters: (0..flows).map(|_| FlowCounters::default()).collect(),
            stop: AtomicBool::new(false),
        });
        if let Ok(mut m) = sh.streams.write() {
            m.insert(token, test.clone());
        }
        StreamGuard { sh, token, test }
    }
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.sh.streams.write() {
            m.remove(&self.token);
        }
    }
}

/// Run a stream test's control channel: wait for the flows, start them, report intervals,
/// stop on the client's word (or the deadline), and send the server's final figures.
fn run_stream_test(sh: &Shared, conn: &mut Conn, test: &Arc<StreamTest>) -> (u64, String) {
    let spec = &test.spec;
    // Wait (bounded) for every flow to join.
    let join_deadline = Instant::now() + sh.cfg.handshake_timeout;
    while !test.all_joined() {
        let Ok(g) = test.socks.lock() else { break };
        let left = join_deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || sh.stop.load(Ordering::Relaxed) {
            drop(g);
            let message = "not every data connection joined in time".to_string();
            let _ = proto::write_frame(
                conn,
                &Control::Error {
                    message: message.clone(),
                },
            );
            return (0, message);
        }
        let _ = test.joined.wait_timeout(g, left.min(POLL));
    }
    let udp_usage_start = sh.udp_usage.lock().map(|u| *u).unwrap_or_default();
    let start = Instant::now();
    let _ = test.start.set(start);
    if proto::write_frame(conn, &Control::Go).is_err() {
        test.stop.store(true, Ordering::SeqCst);
        return (0, "client left before the start".into());
    }
    let until = Until {
        deadline: (spec.duration_ms > 0).then(|| start + Duration::from_millis(spec.duration_ms)),
        bytes: spec.bytes_per_stream,
    };
    let socks: Vec<Option<Arc<DataSock>>> =
        test.socks.lock().map(|v| v.clone()).unwrap_or_default();
    let peers: Vec<Option<SocketAddr>> =
        test.udp_peers.lock().map(|v| v.clone()).unwrap_or_default();
    let mut threads = Vec::new();
    for i in 0..spec.flows() {
        let sends = !spec.client_sends(i);
        let t = test.clone();
        let sock = socks.get(i as usize).cloned().flatten();
        let peer = peers.get(i as usize).copied().flatten();
        let udp = if spec.transport == Transport::Udp && sends {
            sh.udp_out.as_ref().and_then(|u| u.try_clone().ok())
        } else {
            None
        };
        if spec.transport == Transport::Udp && !sends {
            continue; // received by the UDP thread
        }
        let handle = thread::Builder::new()
            .name("serve-flow".into())
            .spawn(move || {
                let u0 = ThreadUsage::now();
                let c = &t.counters[i as usize];
                let spec = &t.spec;
                let res = match (sock, udp, peer) {
                    (Some(sock), _, _) if sends => flow::stream_send(
                        &sock,
                        spec.buffer_bytes as usize,
                        spec.options.zerocopy,
                        until,
                        start,
                        c,
                        &t.stop,
                    ),
                    (Some(sock), _, _) => {
                        flow::stream_recv(&sock, spec.buffer_bytes as usize, start, c, &t.stop)
                    }
                    (None, Some(udp), Some(peer)) => flow::udp_send(
                        &udp,
                        Some(peer),
                        t.token,
                        i,
                        spec.buffer_bytes as usize,
                        spec.udp_rate_bps,
                        until,
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
    // Control loop: intervals out, Stop in.
    let _ = conn.set_read_timeout(Some(Duration::from_millis(20)));
    let mut reader = FrameReader::default();
    let interval = Duration::from_millis(spec.interval_ms.max(10));
    let hard_deadline = start + Duration::from_millis(spec.duration_ms) + Duration::from_secs(30);
    let mut next = start + interval;
    let mut ivs = flow::IntervalState::default();
    let tcp_fd = |i: u32| {
        socks
            .get(i as usize)
            .cloned()
            .flatten()
            .filter(|s| s.is_tcp())
            .map(|s| s.fd())
    };
    let mut last_tick = start;
    let mut udp_sent_by_client: Vec<(u32, u64)> = Vec::new();
    let mut reason = String::from("client stopped the test");
    loop {
        match reader.poll::<Control>(conn) {
            Ok(Some(Control::Stop { udp_sent })) => {
                udp_sent_by_client = udp_sent;
                break;
            }
            Ok(Some(_)) => {}
            Ok(None) => {}
            Err(_) => {
                reason = "the client went away".into();
                break;
            }
        }
        let now = Instant::now();
        if sh.stop.load(Ordering::Relaxed) || now >= hard_deadline {
            reason = "server stopping or test deadline".into();
            break;
        }
        if now >= next {
            for ev in flow::intervals(
                spec,
                false,
                &test.counters,
                &test.udp_rx,
                &tcp_fd,
                start,
                last_tick,
                now,
                &mut ivs,
            ) {
                if proto::write_frame(conn, &Control::Interval(ev)).is_err() {
                    reason = "the client went away".into();
                }
            }
            last_tick = now;
            next += interval;
        }
    }
    test.stop.store(true, Ordering::SeqCst);
    let outs: Vec<FlowThread> = threads.into_iter().filter_map(|h| h.join().ok()).collect();
    // Final figures.
    let mut flows = Vec::new();
    let (mut send_usage, mut recv_usage) = (ThreadUsage::default(), ThreadUsage::default());
    for o in &outs {
        if o.sends {
            send_usage.add(o.usage)
        } else {
            recv_usage.add(o.usage)
        }
    }
    let (mut sb, mut sc, mut rb, mut rc) = (0u64, 0u64, 0u64, 0u64);
    let mut total = 0u64;
    for i in 0..spec.flows() {
        let c = &test.counters[i as usize];
        let bytes = c.bytes.load(Ordering::Relaxed);
        let last = c.last_ns.load(Ordering::Relaxed);
        let client_sends = spec.client_sends(i);
        let mut f = FlowFinal {
            index: i,
            ..FlowFinal::default()
        };
        if client_sends {
            f.bytes_received = bytes;
            f.receive_ns = last;
            rb += bytes;
            rc += c.calls.load(Ordering::Relaxed);
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
    let fin = Control::Final {
        flows,
        cost_as_sender: flow::cost(send_usage, sb, sc, call_ns(true), start.elapsed()),
        cost_as_receiver: {
            // UDP is received by the server's one shared UDP thread: its CPU time is this
            // test's when (nearly) all it received meanwhile was this test's datagrams.
            let udp_cpu = (spec.transport == Transport::Udp && rc > 0)
                .then(|| udp_thread_usage(sh, udp_usage_start, rc))
                .flatten();
            if let Some(u) = udp_cpu {
                recv_usage.add(u);
            }
            let mut c = flow::cost(recv_usage, rb, rc, call_ns(false), start.elapsed());
            c.cpu_measured = spec.transport != Transport::Udp || udp_cpu.is_some();
            c
        },
    };
    let _ = proto::write_frame(conn, &fin);
    if let Some(e) = outs.iter().find_map(|o| o.error.clone()) {
        reason = e;
    }
    (total, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(kind: TestKind, req: u32, resp: u32, dur: u64) -> Start {
        Start {
            kind,
            request_bytes: req,
            response_bytes: resp,
            duration_ms: dur,
            server: ServerBehaviour::default(),
            stream: None,
            join: None,
        }
    }

    #[test]
    fn limits_are_enforced() {
        let l = Limits {
            max_tests: 1,
            max_duration_ms: 10_000,
            max_message_bytes: 1000,
        };
        assert!(validate(&start(TestKind::Rr, 64, 64, 1000), &l, false).is_ok());
        assert_eq!(
            validate(&start(TestKind::Rr, 0, 64, 1000), &l, false).map_err(|e| e.0),
            Err("invalid")
        );
        assert_eq!(
            validate(&start(TestKind::Rr, 64, 2000, 1000), &l, false).map_err(|e| e.0),
            Err("limit")
        );
        assert_eq!(
            validate(&start(TestKind::Rr, 64, 64, 20_000), &l, false).map_err(|e| e.0),
            Err("limit")
        );
        assert_eq!(
            validate(&start(TestKind::UdpRr, 10, 64, 1000), &l, false).map_err(|e| e.0),
            Err("invalid")
        );
        assert_eq!(
            validate(&start(TestKind::UdpRr, 64, 64, 1000), &l, true).map_err(|e| e.0),
            Err("invalid")
        );
    }

    #[test]
    fn slots_are_bounded_and_released() {
        let c = AtomicU32::new(0);
        let a = try_slot(&c, 2);
        let b = try_slot(&c, 2);
        assert!(a.is_some() && b.is_some());
        assert!(try_slot(&c, 2).is_none());
        drop(a);
        assert!(try_slot(&c, 2).is_some());
        drop(b);
        assert_eq!(c.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn mapped_addresses_match() {
        let v4: IpAddr = "127.0.0.1"
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(v4);
        assert_eq!(canonical(mapped), v4);
    }
}

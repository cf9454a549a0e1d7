//! `latscope serve`: the peer every latscope test talks to. TCP and UDP on one port, optionally
//! a unix socket. One thread per connection (latency first: a blocking read/write pair is the
//! shortest path through the kernel), bounded by connection and test limits; a slow or hostile
//! client only ever holds its own thread, and only until the handshake timeout.
//!
//! Layout, by job:
//! - [`listener`]: binding, the accept loop, one thread per connection;
//! - `conn_threads`: those threads, kept for the next connection once theirs ends;
//! - `admission`: connection and test slots, the `--workers` queue, request validation;
//! - `control`: the handshake (greeting, request, refusal) and dispatch to a test kind;
//! - `test`: what control hands a test kind (`Test`) and gets back (`Ended`), the refusal frame
//!   and the handshake's reader, below control and the kinds;
//! - one file per test kind: `rr` (rr and crr), `udp_rr`, `stream` (+ `stream_join` for its
//!   data connections); `udp` is the shared UDP socket's loop (echo, test datagrams), and
//!   `udp_usage` the CPU time it publishes for stream tests.
//!
//! Adding a test kind: a `TestKind` variant in [`crate::proto`], one file here with a
//! `run(&mut Test) -> Ended`, and one line in `control::run_kind`.

mod admission;
mod conn_threads;
mod control;
pub mod evidence;
pub mod fuzzing;
pub mod listener;
mod rr;
mod stream;
mod stream_join;
mod test;
mod udp;
mod udp_rr;
mod udp_usage;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;
use std::time::Duration;

use latscope_core::model::rr::ServerBehaviour;

use crate::NetError;
use crate::auth::AuthKey;
use crate::proto::{self, Limits, TestKind};

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
    /// Limits announced to clients and enforced on every request.
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
    /// What one source address may hold at once, and the memory budget.
    pub budget: Budget,
    /// When set, every connection must prove it knows this key (see [`crate::auth`]).
    pub auth: Option<AuthKey>,
    /// What answers evidence requests (`diagnose --server-agent`); None: they are refused.
    pub evidence: Option<Arc<dyn evidence::EvidenceService>>,
    /// Answer evidence requests and nothing else: every test is refused and UDP datagrams are
    /// ignored. `latscope agent`'s `[evidence]` endpoint runs so, beside (not instead of) the
    /// `latscope serve` its peers measure.
    pub evidence_only: bool,
}

/// Per-source quotas and the memory budget; the resource figures below hold by construction:
///
/// - **threads** ≤ `max_connections` + 3: one per connection (a handshake, an rr test, a stream
///   test's control channel, or a joined data connection's flow thread), one per server-sent
///   UDP stream flow — which takes a connection slot too — plus the accept, UDP and main
///   threads. A connection's thread waits (10 s at most) for the next connection once its own
///   ends, while the pool holds no more than `max_connections` threads and 32 idle ones.
///   Connection and flow threads have 256 KiB stacks.
/// - **descriptors** ≤ `max_connections` + one memfd per zero-copy sending flow + 3 (listener,
///   UDP socket, unix listener); joined data connections count toward `max_connections`.
/// - **memory**: each test reserves its buffers (rr: request + response; stream: per flow the
///   write or read buffer, twice for zero-copy senders, plus 256 KiB of thread stack) against
///   `max_test_memory_bytes` (default 64 MiB) and the server-wide `max_memory_bytes` (default
///   512 MiB); a request beyond the first is refused (`limit`), beyond what is left waits for
///   nothing: it is refused `busy`. Buffers are unmapped when freed (glibc's mmap threshold is
///   pinned at 128 KiB) and the heap is trimmed after every stream test, so memory goes back.
///   Kernel socket buffers are the kernel's budget (net.ipv4.tcp_mem), not counted here.
#[derive(Clone, Debug)]
pub struct Budget {
    /// Tests one source address may run at once (default: a quarter of `max_tests`, ≥ 1).
    pub max_tests_per_source: Option<u32>,
    /// Connections one source address may hold (default: a quarter of `max_connections`).
    pub max_connections_per_source: Option<u32>,
    /// Buffers one test may reserve, bytes.
    pub max_test_memory_bytes: u64,
    /// Buffers all tests together may reserve, bytes.
    pub max_memory_bytes: u64,
    /// Fastest UDP the server sends for one test (sum of its flows), bit/s.
    pub max_udp_rate_bps: f64,
    /// Largest UDP rr response as a multiple of the request (amplification cap).
    pub max_udp_amplification: u32,
    /// Bytes per second one source address may move through the server, both ways, over all
    /// its tests (stream data, rr and UDP); None: no limit. TCP flows are slowed to it (the
    /// server reads and writes no faster), UDP datagrams beyond it are dropped (received ones
    /// cannot be slowed down: they count as lost).
    pub max_source_rate_bytes: Option<f64>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_tests_per_source: None,
            max_connections_per_source: None,
            max_test_memory_bytes: 64 << 20,
            max_memory_bytes: 512 << 20,
            max_udp_rate_bps: 1e9,
            max_udp_amplification: 10,
            max_source_rate_bytes: None,
        }
    }
}

impl ServeConfig {
    fn tests_per_source(&self) -> u32 {
        self.budget
            .max_tests_per_source
            .unwrap_or(self.limits.max_tests / 4)
            .max(1)
    }

    fn connections_per_source(&self) -> u32 {
        self.budget
            .max_connections_per_source
            .unwrap_or(self.max_connections / 4)
            .max(1)
    }
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
            budget: Budget::default(),
            auth: None,
            evidence: None,
            evidence_only: false,
        }
    }
}

/// Something the server did, for its log. The server itself never prints.
#[derive(Clone, Debug, PartialEq)]
pub enum ServeEvent {
    /// The server is bound and accepting.
    Listening {
        /// The interfaces (name, address) reachable through the bound address.
        exposed: Vec<(String, IpAddr)>,
        /// The TCP listening address.
        tcp: SocketAddr,
        /// The UDP socket's address (the same port).
        udp: SocketAddr,
        /// The unix socket, if any.
        unix: Option<PathBuf>,
    },
    /// A test was accepted.
    TestStarted {
        /// The server's id of the test.
        id: u64,
        /// Who asked for it.
        peer: String,
        /// What kind of test.
        kind: TestKind,
        /// Request size asked for.
        request_bytes: u32,
        /// Response size asked for.
        response_bytes: u32,
        /// A stream test's description (transport, direction, streams).
        stream: Option<proto::StreamSpec>,
    },
    /// A test ended.
    TestEnded {
        /// The server's id of the test.
        id: u64,
        /// Who ran it.
        peer: String,
        /// What kind of test it was.
        kind: TestKind,
        /// Transactions (rr, crr, udp rr), or bytes moved (stream).
        transactions: u64,
        /// How long it ran.
        elapsed: Duration,
        /// Why it ended.
        reason: String,
    },
    /// A connection closed (or was reset) before sending a byte: a bare TCP connect, as
    /// `latscope connect` or a port scanner makes. Not a refusal; logs summarise these.
    BareConnect {
        /// Who connected.
        peer: String,
    },
    /// A connection or test was turned away.
    Refused {
        /// Who was refused.
        peer: String,
        /// Why.
        reason: String,
    },
}

/// State shared by every thread of one server.
struct Shared {
    udp_usage: Mutex<udp_usage::UdpUsage>,
    cfg: ServeConfig,
    stop: Arc<AtomicBool>,
    conns: AtomicU32,
    tests: AtomicU32,
    next_id: AtomicU64,
    udp_tests: RwLock<HashMap<u64, Arc<udp_rr::UdpTest>>>,
    streams: RwLock<HashMap<u64, Arc<stream::StreamTest>>>,
    /// Requests being handled and the FIFO of waiting ones, against `cfg.workers`.
    busy: Mutex<admission::WorkerQueue>,
    free: Condvar,
    /// Connections and tests held per source address.
    sources: Mutex<HashMap<IpAddr, admission::SourceUse>>,
    /// Each source address's byte rate, while one of its tests holds it.
    rates: Mutex<HashMap<IpAddr, std::sync::Weak<crate::fair::RateLimit>>>,
    /// Bytes of buffers reserved by running tests.
    memory: AtomicU64,
    /// Evidence requests observing, and when each source last asked.
    evidence_use: Mutex<evidence::EvidenceUse>,
    /// A clone of the UDP socket for stream tests in which the server sends datagrams.
    udp_out: Option<UdpSocket>,
    log: Box<dyn Fn(ServeEvent) + Send + Sync>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
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
    /// The address the server's TCP listener is bound to.
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

impl Server {
    /// The address the TCP listener is bound to.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(self.shared.cfg.bind, 0))
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

/// IPv4-mapped IPv6 addresses compare equal to their IPv4 form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_match() {
        let v4: IpAddr = "127.0.0.1"
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap_or(v4);
        assert_eq!(canonical(mapped), v4);
    }
}

//! One worker thread: an edge-triggered epoll loop over its share of the connections.
//!
//! Per request on a keep-alive connection the hot path is one `send` and one `recv` (a short
//! read means the socket is drained, so edge-triggered epoll needs no extra `recv` that would
//! return EAGAIN), two clock reads, and no allocation: the request bytes were serialised once,
//! the response is read into the worker's one read buffer, lent to the connection being read,
//! and parsed there (a connection keeps a buffer only while a response head is incomplete).
//!
//! Closed loop: a connection sends its next request as soon as the previous response is
//! complete (wrk). Open loop (`--rate`): each connection owns a fixed schedule of intended send
//! times; a request that is due while its connection is still busy waits, and its latency is
//! counted from the intended time — the coordinated-omission correction of wrk2 (Gil Tene,
//! "How NOT to Measure Latency"). Pacing uses a timerfd at absolute nanosecond deadlines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use latscope_core::LatencyHistogram;
use rustls::ClientConnection;
use socket2::{Domain, Protocol, Socket, Type};

use crate::handshake::{self, HandshakeFailure};
use crate::not_http::{Detector, NotHttp};
use crate::parse::{MAX_HEAD_BYTES, ParseError, Response, ResponseParser, Step};
use crate::stats::{ErrorKind, Stats};
use crate::sys::{self, Epoll, Event, HANGUP, READABLE, Timer, WRITABLE};
use crate::{Config, IntervalMsg};

/// A read buffer: room for the largest head we accept plus one read.
const BUF_BYTES: usize = MAX_HEAD_BYTES + 16 * 1024;
/// Token of the pacing timer (connection tokens are index | generation << 32).
const TIMER_TOKEN: u64 = u64::MAX;
/// Housekeeping (timeouts, reconnects, interval boundaries, stop flag) at least this often.
const TICK_NS: u64 = 10_000_000;
/// Wait before retrying a failed connection attempt (keeps a refused target from spinning).
const RECONNECT_BACKOFF_NS: u64 = 50_000_000;
/// Open loop: a send this much later than intended counts as late.
pub(crate) const LATE_NS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No socket; (re)connect at `retry_at_ns`.
    Down {
        retry_at_ns: u64,
    },
    Connecting,
    Handshaking,
    /// Connected, no request outstanding, nothing scheduled (run over, or quota used up).
    Idle,
    /// Open loop: connected, waiting in the pacing heap for the next intended send time.
    Waiting,
    /// Its next request goes out at the end of the current batch of events.
    Ready,
    /// Request partly written.
    Writing,
    /// Request written, response not complete.
    Reading,
}

struct Conn {
    generation: u32,
    sock: Option<Socket>,
    tls: Option<Box<ClientConnection>>,
    phase: Phase,
    /// Bytes read and not yet parsed: lent by the worker for a read ([`Worker::lend_buf`]) and
    /// kept only while a response's head is incomplete; empty (no allocation) otherwise.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    parser: ResponseParser,
    written: usize,
    connect_started_ns: u64,
    handshake_started_ns: u64,
    sent_ns: u64,
    intended_ns: u64,
    measured: bool,
    deadline_ns: u64,
    /// Open loop: the next intended send time and the spacing of this connection's schedule.
    next_ns: u64,
    spacing_ns: u64,
}

/// Adapter giving rustls `Read`/`Write` over a non-blocking socket (send with MSG_NOSIGNAL so
/// a closed peer is an EPIPE error, never a signal).
struct SockIo<'a>(&'a Socket);

impl Read for SockIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

impl Write for SockIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send_with_flags(buf, libc::MSG_NOSIGNAL)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `--quickack`: set TCP_QUICKACK again after a read. Setting it sends a pending delayed ACK at
/// once (tcp_setsockopt → tcp_cleanup_rbuf), which is what releases a Nagle-held rest of a
/// response; the kernel leaves quick-ack mode on its own, so once per connection is not enough.
/// A failure only means the ACK may be delayed, as without the option.
fn rearm_quickack(sock: &Socket) {
    let _ = sock.set_tcp_quickack(true);
}

/// Per-interval accumulators, shipped to the coordinator once a second.
struct IntervalAcc {
    index: u64,
    requests: u64,
    errors: u64,
    bytes: u64,
    hist: LatencyHistogram,
    /// Open loop: latency from the actual send time (`hist` is from the intended one).
    raw_hist: Option<LatencyHistogram>,
}

pub(crate) struct Worker<'a> {
    cfg: &'a Config,
    addr: SocketAddr,
    stop: &'a AtomicBool,
    thread: usize,
    tx: Sender<IntervalMsg>,
    ep: Epoll,
    timer: Timer,
    armed_ns: u64,
    conns: Vec<Conn>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Connections whose next request goes out at the end of this batch of events:
    /// (index, generation, intended send time: when it was queued in closed loop).
    ready: Vec<(usize, u32, u64)>,
    stats: Stats,
    acc: IntervalAcc,
    /// Measured requests this thread may still start (`-n`); `None` = unlimited.
    quota: Option<u64>,
    measure_start_ns: u64,
    /// The warm-up is not over yet: the bytes read and written so far are the warm-up's.
    warming_up: bool,
    end_ns: Option<u64>,
    outstanding_measured: u64,
    open_loop: bool,
    /// Gives up when every attempt shows the port does not speak HTTP.
    not_http: Detector,
    /// Gives up when every TLS handshake fails the same way.
    handshakes: handshake::Detector,
    /// Give the core away once before sleeping ([`Worker::wait`]).
    yield_before_sleep: bool,
    /// The read buffer lent to the connection being read ([`Worker::lend_buf`]); empty while
    /// lent.
    spare: Box<[u8]>,
}

/// What a worker hands back when it ends.
pub(crate) struct WorkerResult {
    pub stats: Stats,
    /// When the worker's last measured request completed or the run ended, CLOCK_MONOTONIC ns.
    pub finished_ns: u64,
    /// The worker gave up: the port does not speak HTTP, and this is what it answered.
    pub not_http: Option<NotHttp>,
    /// The worker gave up: every TLS handshake failed this way.
    pub handshake: Option<HandshakeFailure>,
}

/// One thread's share of the run.
pub(crate) struct Share<'s> {
    pub thread: usize,
    /// Global connection indices (used to stagger open-loop schedules).
    pub ids: &'s [u32],
    /// Measured requests this thread sends (`-n`).
    pub quota: Option<u64>,
}

impl<'a> Worker<'a> {
    /// A worker for its `share` of the connections to `addr`.
    pub(crate) fn new(
        cfg: &'a Config,
        addr: SocketAddr,
        stop: &'a AtomicBool,
        tx: Sender<IntervalMsg>,
        share: Share<'_>,
        run_start_ns: u64,
    ) -> io::Result<Worker<'a>> {
        let Share { thread, ids, quota } = share;
        let ep = Epoll::new()?;
        let timer = Timer::new()?;
        ep.add_level(timer.raw(), TIMER_TOKEN)?;
        let open_loop = cfg.rate_per_sec.is_some();
        let spacing_ns = match cfg.rate_per_sec {
            Some(r) if r > 0.0 => (f64::from(cfg.connections) * 1e9 / r).max(1.0) as u64,
            _ => 0,
        };
        let conns = ids
            .iter()
            .map(|&g| Conn {
                generation: 0,
                sock: None,
                tls: None,
                phase: Phase::Down { retry_at_ns: 0 },
                buf: Box::default(),
                start: 0,
                end: 0,
                parser: ResponseParser::new(cfg.head_request),
                written: 0,
                connect_started_ns: 0,
                handshake_started_ns: 0,
                sent_ns: 0,
                intended_ns: 0,
                measured: false,
                deadline_ns: 0,
                // Stagger the connections' schedules evenly over one spacing.
                next_ns: run_start_ns
                    + spacing_ns * u64::from(g) / u64::from(cfg.connections.max(1)),
                spacing_ns,
            })
            .collect::<Vec<_>>();
        let measure_start_ns = run_start_ns + cfg.warmup_ns;
        Ok(Worker {
            cfg,
            addr,
            stop,
            thread,
            tx,
            ep,
            timer,
            armed_ns: 0,
            heap: BinaryHeap::with_capacity(conns.len() + 1),
            ready: Vec::with_capacity(conns.len() + 1),
            conns,
            stats: Stats::default(),
            acc: IntervalAcc {
                index: 0,
                requests: 0,
                errors: 0,
                bytes: 0,
                hist: LatencyHistogram::new(),
                raw_hist: open_loop.then(LatencyHistogram::new),
            },
            quota,
            measure_start_ns,
            warming_up: cfg.warmup_ns > 0,
            end_ns: cfg.duration_ns.map(|d| measure_start_ns + d),
            outstanding_measured: 0,
            open_loop,
            not_http: Detector::new(ids.len()),
            handshakes: handshake::Detector::new(ids.len()),
            yield_before_sleep: cfg.threads > 1 && sys::is_local(addr.ip()),
            spare: vec![0u8; BUF_BYTES].into_boxed_slice(),
        })
    }

    /// Run until the duration is over, the quota is used up (and answered), or `stop` is set.
    pub(crate) fn run(mut self) -> WorkerResult {
        let mut evbuf = sys::event_buffer(512);
        let mut events: Vec<Event> = Vec::with_capacity(512);
        let now = sys::monotonic_ns();
        for i in 0..self.conns.len() {
            self.open(i, now);
        }
        let mut next_tick = now;
        loop {
            let now = sys::monotonic_ns();
            if self.warming_up && now >= self.measure_start_ns {
                self.end_warmup();
            }
            if now >= next_tick {
                next_tick = now + TICK_NS;
                if self.stop.load(Ordering::Relaxed) {
                    break;
                }
                self.housekeeping(now);
            }
            if self.finished(now) {
                break;
            }
            self.arm_timer();
            let wake = self.end_ns.map_or(next_tick, |e| e.min(next_tick));
            let wait_ms = (wake.saturating_sub(now) / 1_000_000).max(1) as i32;
            if self.wait(&mut evbuf, &mut events, wait_ms).is_err() {
                break;
            }
            for &ev in &events {
                if ev.token == TIMER_TOKEN {
                    self.timer.drain();
                    self.armed_ns = 0;
                    continue;
                }
                let i = (ev.token & 0xffff_ffff) as usize;
                let generation = (ev.token >> 32) as u32;
                if i < self.conns.len() && self.conns[i].generation == generation {
                    self.on_event(i, ev.bits);
                }
            }
            self.flush_ready();
            if self.open_loop {
                self.send_due(sys::monotonic_ns());
            }
        }
        let finished_ns = sys::monotonic_ns();
        let end = self.end_ns.map_or(finished_ns, |e| e.min(finished_ns));
        self.flush_interval(end, true);
        self.count_pending_connects(end);
        WorkerResult {
            stats: self.stats,
            finished_ns: end,
            not_http: self.not_http.into_verdict(),
            handshake: self.handshakes.into_verdict(),
        }
    }

    /// Connects still in progress at `end`, and how long they had waited in the measured span.
    fn count_pending_connects(&mut self, end: u64) {
        for c in &self.conns {
            if matches!(c.phase, Phase::Connecting) {
                self.stats.connects_pending += 1;
                let since = c.connect_started_ns.max(self.measure_start_ns);
                self.stats.connect_pending_ns += end.saturating_sub(since);
            }
        }
    }

    /// Wait up to `wait_ms` for events.
    ///
    /// When the server runs on this host and the run has several workers, a server worker is
    /// often runnable on a worker's own core. A worker that finds nothing ready then yields its
    /// core once before it sleeps, so that the server answers the requests just sent without
    /// this worker going to sleep and being woken for each answer — a sleep and a wake-up cost
    /// both processes kernel time on every request. One yield, then a blocking wait: never a
    /// spin. benches/http_vs_wrk.sh, -t2 on 2 cores, same run:
    /// client CPU per request 7.1 µs against 12.4 without the yield (nginx's 15.2 against
    /// 16.3), requests/s 1.32× wrk's against 1.01× (50 connections). With one worker the client
    /// thread is the bottleneck, and giving its core away cost requests/s (1.17× → 0.97× wrk):
    /// one worker never yields; nor does any worker of a remote server's run, where no server
    /// thread can be waiting for this core.
    fn wait(
        &self,
        evbuf: &mut [libc::epoll_event],
        events: &mut Vec<Event>,
        wait_ms: i32,
    ) -> io::Result<()> {
        if self.yield_before_sleep {
            self.ep.wait(evbuf, events, 0)?;
            if !events.is_empty() {
                return Ok(());
            }
            sys::yield_core();
        }
        self.ep.wait(evbuf, events, wait_ms)
    }

    /// The warm-up is over: the bytes counted so far were the warm-up's, and the measured
    /// figures (requests, bytes, their rates) cover the same span from here on.
    fn end_warmup(&mut self) {
        self.warming_up = false;
        self.stats.bytes_read = 0;
        self.stats.bytes_written = 0;
        self.acc.bytes = 0;
    }

    /// Whether the run is over for this thread.
    fn finished(&self, now: u64) -> bool {
        if self.end_ns.is_some_and(|e| now >= e) {
            return true;
        }
        (self.quota == Some(0) && self.outstanding_measured == 0) || self.gave_up()
    }

    /// Whether the target showed it cannot be measured: not HTTP, or no TLS handshake succeeds.
    fn gave_up(&self) -> bool {
        self.not_http.gave_up() || self.handshakes.gave_up()
    }

    /// Whether the run still needs connections (not over, quota left, not stopped).
    fn wants_more(&self, now: u64) -> bool {
        self.end_ns.is_none_or(|e| now < e)
            && self.quota != Some(0)
            && !self.stop.load(Ordering::Relaxed)
            && !self.gave_up()
    }

    /// Whether a new request intended at `intended_ns` may start.
    fn may_start(&self, intended_ns: u64) -> bool {
        !(self.quota == Some(0) && intended_ns >= self.measure_start_ns)
    }

    /// Reserve one request of the `-n` quota for a request intended at `intended_ns` (warm-up
    /// requests take none); false when the quota is used up. Reserving when the request is
    /// queued, not when it is written, keeps the count exact with batched sends.
    fn take_quota(&mut self, intended_ns: u64) -> bool {
        if !self.may_start(intended_ns) {
            return false;
        }
        if intended_ns >= self.measure_start_ns
            && let Some(q) = self.quota.as_mut()
        {
            *q -= 1;
        }
        true
    }

    fn token(&self, i: usize) -> u64 {
        (u64::from(self.conns[i].generation) << 32) | i as u64
    }

    /// Open a new connection for slot `i` (closing any old one).
    fn open(&mut self, i: usize, now: u64) {
        self.close(i);
        let c = &mut self.conns[i];
        c.generation = c.generation.wrapping_add(1);
        c.connect_started_ns = now;
        c.deadline_ns = now + self.cfg.timeout_ns;
        let addr = self.addr;
        let sock = match Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        ) {
            Ok(s) => s,
            Err(e) => return self.fail(i, ErrorKind::Connect, &e, now),
        };
        let _ = sock.set_tcp_nodelay(true);
        match sock.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return self.fail(i, ErrorKind::Connect, &e, now),
        }
        let token = self.token(i);
        if let Err(e) = self.ep.add_edge(sock.as_raw_fd(), token) {
            return self.fail(i, ErrorKind::Io, &e, now);
        }
        let c = &mut self.conns[i];
        c.sock = Some(sock);
        c.phase = Phase::Connecting;
    }

    /// Drop the socket of slot `i` (closing it removes it from epoll).
    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if matches!(c.phase, Phase::Reading | Phase::Writing) && c.measured {
            self.outstanding_measured -= 1;
        }
        c.sock = None;
        c.tls = None;
        c.start = 0;
        c.end = 0;
        c.generation = c.generation.wrapping_add(1);
        c.phase = Phase::Down { retry_at_ns: 0 };
    }

    /// Count an error on slot `i` and schedule a reconnect.
    fn fail(&mut self, i: usize, kind: ErrorKind, msg: &dyn std::fmt::Display, now: u64) {
        let c = &self.conns[i];
        if matches!(
            kind,
            ErrorKind::Malformed | ErrorKind::Closed | ErrorKind::Reset | ErrorKind::Timeout
        ) {
            let closed = kind != ErrorKind::Timeout;
            self.not_http
                .failed(&c.buf[c.start..c.end], c.parser.started(), closed);
        }
        // Errors of warm-up requests, and connection errors during the warm-up, are not counted.
        let counted = if matches!(c.phase, Phase::Reading | Phase::Writing) {
            c.measured
        } else {
            now >= self.measure_start_ns
        };
        if counted {
            self.stats.errors.add(kind);
            self.stats.sample_error(kind, msg);
            self.acc.errors += 1;
            // A failed connection attempt (connect, TLS handshake) is one of `-n`'s: a run
            // against a target that fails every attempt ends, with that many errors.
            if matches!(
                c.phase,
                Phase::Down { .. } | Phase::Connecting | Phase::Handshaking
            ) && let Some(q) = self.quota.as_mut()
            {
                *q = q.saturating_sub(1);
            }
        }
        self.close(i);
        let backoff = if kind == ErrorKind::Connect {
            RECONNECT_BACKOFF_NS
        } else {
            0
        };
        self.conns[i].phase = Phase::Down {
            retry_at_ns: now + backoff,
        };
        if backoff == 0 && self.wants_more(now) {
            self.open(i, now);
        }
    }

    fn on_event(&mut self, i: usize, bits: u32) {
        match self.conns[i].phase {
            Phase::Connecting => self.on_connected(i, bits),
            Phase::Down { .. } => {}
            _ => {
                if bits & WRITABLE != 0 {
                    self.on_writable(i);
                }
                if bits & (READABLE | HANGUP) != 0
                    && !matches!(self.conns[i].phase, Phase::Down { .. })
                {
                    self.on_readable(i, bits & HANGUP != 0);
                }
            }
        }
    }

    fn on_connected(&mut self, i: usize, bits: u32) {
        let now = sys::monotonic_ns();
        let err = match &self.conns[i].sock {
            Some(s) => match s.take_error() {
                Ok(Some(e)) | Err(e) => Some(e),
                Ok(None) if bits & WRITABLE == 0 => {
                    Some(io::Error::from(io::ErrorKind::ConnectionAborted))
                }
                Ok(None) => None,
            },
            None => return,
        };
        if let Some(e) = err {
            return self.fail(i, ErrorKind::Connect, &e, now);
        }
        let c = &mut self.conns[i];
        self.stats.connect.record(now - c.connect_started_ns);
        self.stats.connections_opened += 1;
        if let Some((config, name)) = &self.cfg.tls {
            match ClientConnection::new(config.clone(), name.clone()) {
                Ok(t) => {
                    c.tls = Some(Box::new(t));
                    c.phase = Phase::Handshaking;
                    c.handshake_started_ns = now;
                    self.flush_tls(i, now);
                }
                Err(e) => self.fail(i, ErrorKind::Tls, &e, now),
            }
        } else {
            self.became_idle(i, now);
        }
    }

    /// Slot `i` is connected with nothing outstanding: start or schedule the next request.
    fn became_idle(&mut self, i: usize, now: u64) {
        if self.end_ns.is_some_and(|e| now >= e) || self.stop.load(Ordering::Relaxed) {
            self.conns[i].phase = Phase::Idle;
            return;
        }
        // Requests are not sent from here but at the end of the batch of events (flush_ready):
        // the server then gets them in a burst and answers them in one wake-up, instead of one
        // context switch per request on either side — on a machine where client and server
        // share the cores that is worth more throughput than anything else (wrk gets the same
        // batching from re-arming EPOLLOUT and writing on the next epoll_wait).
        if !self.open_loop {
            if self.take_quota(now) {
                self.conns[i].phase = Phase::Ready;
                self.ready.push((i, self.conns[i].generation, now));
            } else {
                self.conns[i].phase = Phase::Idle;
            }
            return;
        }
        let due = self.conns[i].next_ns;
        if !self.may_start(due) {
            self.conns[i].phase = Phase::Idle;
        } else if due <= now {
            self.take_quota(due);
            self.conns[i].phase = Phase::Ready;
            self.ready.push((i, self.conns[i].generation, due));
        } else {
            self.conns[i].phase = Phase::Waiting;
            self.heap.push(Reverse((due, i)));
        }
    }

    /// Send the requests queued during this batch of events (quota and end re-checked now).
    fn flush_ready(&mut self) {
        if self.ready.is_empty() {
            return;
        }
        let mut ready = std::mem::take(&mut self.ready);
        let now = sys::monotonic_ns();
        let over = self.end_ns.is_some_and(|e| now >= e) || self.stop.load(Ordering::Relaxed);
        for &(i, generation, intended) in &ready {
            let c = &self.conns[i];
            if c.generation != generation || c.phase != Phase::Ready {
                continue;
            }
            if !over {
                self.send(i, now, intended);
            } else {
                self.conns[i].phase = Phase::Idle;
            }
        }
        ready.clear();
        self.ready = ready;
    }

    /// Open loop: send every waiting connection whose time has come.
    fn send_due(&mut self, now: u64) {
        while let Some(&Reverse((due, i))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            if self.conns[i].phase == Phase::Waiting && self.conns[i].next_ns == due {
                if self.take_quota(due) {
                    self.send(i, sys::monotonic_ns(), due);
                } else {
                    self.conns[i].phase = Phase::Idle;
                }
            }
        }
    }

    fn arm_timer(&mut self) {
        if let Some(&Reverse((due, _))) = self.heap.peek()
            && due != self.armed_ns
            && self.timer.arm_at(due).is_ok()
        {
            self.armed_ns = due;
        }
    }

    /// Start a request on slot `i` at `now`, intended at `intended_ns`.
    fn send(&mut self, i: usize, now: u64, intended_ns: u64) {
        let measured = intended_ns >= self.measure_start_ns;
        if measured {
            self.outstanding_measured += 1;
            if self.open_loop && now > intended_ns + LATE_NS {
                self.stats.late_sends += 1;
            }
        }
        let c = &mut self.conns[i];
        c.measured = measured;
        c.sent_ns = now;
        c.intended_ns = intended_ns;
        c.deadline_ns = now + self.cfg.timeout_ns;
        c.written = 0;
        c.parser.reset();
        c.next_ns = c.next_ns.max(intended_ns) + c.spacing_ns;
        c.phase = Phase::Writing;
        if c.tls.is_some() {
            let req = &self.cfg.request[..];
            if let Some(t) = c.tls.as_mut() {
                // Plaintext is buffered by rustls (no limit set), so this cannot block.
                let _ = t.writer().write_all(req);
            }
            c.phase = Phase::Reading;
            self.flush_tls(i, now);
        } else {
            self.write_plain(i, now);
        }
    }

    /// Continue writing the request bytes on a plain connection.
    fn write_plain(&mut self, i: usize, now: u64) {
        let req = &self.cfg.request[..];
        let c = &mut self.conns[i];
        let Some(sock) = &c.sock else { return };
        while c.written < req.len() {
            match sock.send_with_flags(&req[c.written..], libc::MSG_NOSIGNAL) {
                Ok(n) => {
                    c.written += n;
                    self.stats.bytes_written += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, ErrorKind::of_io(&e), &e, now),
            }
        }
        c.phase = Phase::Reading;
    }

    /// Write pending TLS records; on a finished handshake, start requesting.
    fn flush_tls(&mut self, i: usize, now: u64) {
        let c = &mut self.conns[i];
        let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else {
            return;
        };
        while tls.wants_write() {
            match tls.write_tls(&mut SockIo(sock)) {
                Ok(n) => self.stats.bytes_written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, ErrorKind::of_io(&e), &e, now),
            }
        }
    }

    fn on_writable(&mut self, i: usize) {
        let now = sys::monotonic_ns();
        if self.conns[i].tls.is_some() {
            self.flush_tls(i, now);
        } else if self.conns[i].phase == Phase::Writing {
            self.write_plain(i, now);
        }
    }

    fn on_readable(&mut self, i: usize, hangup: bool) {
        if self.conns[i].tls.is_some() {
            self.read_tls(i);
        } else {
            self.read_plain(i, hangup);
        }
    }

    /// Make room at the end of slot `i`'s buffer by moving unparsed bytes to the front.
    fn compact(c: &mut Conn) {
        if c.start == c.end {
            c.start = 0;
            c.end = 0;
        } else if c.start > 0 && c.end == c.buf.len() {
            c.buf.copy_within(c.start..c.end, 0);
            c.end -= c.start;
            c.start = 0;
        }
    }

    /// Give slot `i` a read buffer if it has none: the worker's spare. Reads then land in the
    /// same memory whatever the number of connections, and memory does not grow with them (a
    /// 48 KiB buffer per connection made the peak RSS 53 MB at 5000 connections; 12.7 MB with
    /// the lent buffer). A fresh buffer only when the spare is held by a connection whose head
    /// is incomplete, which keeps it until the rest arrives.
    fn lend_buf(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if !c.buf.is_empty() {
            return;
        }
        if self.spare.is_empty() {
            self.spare = vec![0u8; BUF_BYTES].into_boxed_slice();
        }
        std::mem::swap(&mut c.buf, &mut self.spare);
    }

    /// Take slot `i`'s buffer back once everything in it is parsed (it keeps the buffer while
    /// part of a response waits there for the rest).
    fn take_buf_back(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if c.start != c.end || c.buf.is_empty() {
            return;
        }
        c.start = 0;
        c.end = 0;
        if self.spare.is_empty() {
            std::mem::swap(&mut c.buf, &mut self.spare);
        } else {
            c.buf = Box::default();
        }
    }

    fn read_plain(&mut self, i: usize, hangup: bool) {
        self.lend_buf(i);
        self.read_plain_into_buf(i, hangup);
        self.take_buf_back(i);
    }

    fn read_plain_into_buf(&mut self, i: usize, hangup: bool) {
        let generation = self.conns[i].generation;
        loop {
            let c = &mut self.conns[i];
            if c.generation != generation {
                return; // the connection was replaced while handling a response
            }
            Self::compact(c);
            let Some(sock) = &c.sock else { return };
            let space = c.buf.len() - c.end;
            if space == 0 {
                // Cannot happen (the parser rejects heads and lines long before the buffer is
                // full), but a zero-length read would look like end of file.
                let now = sys::monotonic_ns();
                return self.fail(i, ErrorKind::Malformed, &ParseError::HeadTooLarge, now);
            }
            match (&*sock).read(&mut c.buf[c.end..]) {
                Ok(0) => return self.on_eof(i),
                Ok(n) => {
                    if self.cfg.quickack {
                        rearm_quickack(sock);
                    }
                    c.end += n;
                    self.stats.bytes_read += n as u64;
                    self.acc.bytes += n as u64;
                    self.process(i);
                    // A short read drained the socket: edge-triggered epoll reports new data
                    // with a new edge. After a hang-up there is no new edge: read to the end.
                    if n < space && !hangup {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let now = sys::monotonic_ns();
                    return self.fail(i, ErrorKind::of_io(&e), &e, now);
                }
            }
        }
    }

    fn read_tls(&mut self, i: usize) {
        self.lend_buf(i);
        self.read_tls_into_buf(i);
        self.take_buf_back(i);
    }

    fn read_tls_into_buf(&mut self, i: usize) {
        let generation = self.conns[i].generation;
        loop {
            let now = sys::monotonic_ns();
            let c = &mut self.conns[i];
            if c.generation != generation {
                return;
            }
            let (Some(sock), Some(tls)) = (&c.sock, c.tls.as_mut()) else {
                return;
            };
            match tls.read_tls(&mut SockIo(sock)) {
                Ok(0) => return self.on_eof(i),
                Ok(n) => {
                    if self.cfg.quickack {
                        rearm_quickack(sock);
                    }
                    self.stats.bytes_read += n as u64;
                    self.acc.bytes += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.fail(i, ErrorKind::of_io(&e), &e, now),
            }
            if let Err(e) = tls.process_new_packets() {
                // Send the alert rustls queued, then give up on the connection.
                let _ = tls.write_tls(&mut SockIo(sock));
                if c.phase == Phase::Handshaking {
                    let failure = HandshakeFailure::of(&e, self.cfg.alpn());
                    self.handshakes.failed(failure.clone());
                    return self.fail(i, ErrorKind::Tls, &failure, now);
                }
                return self.fail(i, ErrorKind::Tls, &e, now);
            }
            if c.phase == Phase::Handshaking && !tls.is_handshaking() {
                self.handshakes.completed();
                self.stats
                    .tls_handshake
                    .record(now - c.handshake_started_ns);
                self.flush_tls(i, now);
                self.became_idle(i, now);
                continue;
            }
            // Drain the decrypted bytes into the connection buffer and parse them.
            loop {
                let c = &mut self.conns[i];
                if c.generation != generation {
                    return;
                }
                Self::compact(c);
                let Some(tls) = c.tls.as_mut() else { return };
                let end = c.end;
                if end == c.buf.len() {
                    let now = sys::monotonic_ns();
                    return self.fail(i, ErrorKind::Malformed, &ParseError::HeadTooLarge, now);
                }
                match tls.reader().read(&mut c.buf[end..]) {
                    Ok(0) => return self.on_eof(i),
                    Ok(n) => {
                        c.end += n;
                        self.process(i);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        let now = sys::monotonic_ns();
                        return self.fail(i, ErrorKind::Closed, &e, now);
                    }
                }
            }
            self.flush_tls(i, sys::monotonic_ns());
        }
    }

    /// The peer closed the connection.
    fn on_eof(&mut self, i: usize) {
        let now = sys::monotonic_ns();
        match self.conns[i].phase {
            Phase::Reading | Phase::Writing => match self.conns[i].parser.eof() {
                Ok(r) => self.complete(i, now, r),
                Err(e) => {
                    let kind = if e == ParseError::Truncated {
                        ErrorKind::Closed
                    } else {
                        ErrorKind::Malformed
                    };
                    self.fail(i, kind, &e, now)
                }
            },
            Phase::Handshaking => {
                self.handshakes.failed(HandshakeFailure::Closed);
                self.fail(i, ErrorKind::Tls, &HandshakeFailure::Closed, now)
            }
            // An idle keep-alive connection closed by the server: not an error, reconnect.
            _ if self.wants_more(now) => self.open(i, now),
            _ => self.close(i),
        }
    }

    /// Parse what is buffered on slot `i`.
    fn process(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            if c.start == c.end {
                c.start = 0;
                c.end = 0;
                return;
            }
            if !matches!(c.phase, Phase::Reading | Phase::Writing) {
                // Bytes nobody asked for (we never pipeline): a protocol violation.
                let now = sys::monotonic_ns();
                return self.fail(
                    i,
                    ErrorKind::Malformed,
                    &"data received with no request outstanding",
                    now,
                );
            }
            match c.parser.feed(&c.buf[c.start..c.end]) {
                Ok((n, Step::NeedMore)) => {
                    c.start += n;
                    if c.start == c.end {
                        c.start = 0;
                        c.end = 0;
                    }
                    return;
                }
                Ok((n, Step::Complete(r))) => {
                    c.start += n;
                    let now = sys::monotonic_ns();
                    let generation = c.generation;
                    self.complete(i, now, r);
                    if self.conns[i].generation != generation {
                        return;
                    }
                }
                Err(e) => {
                    let now = sys::monotonic_ns();
                    return self.fail(i, ErrorKind::Malformed, &e, now);
                }
            }
        }
    }

    /// A response on slot `i` is complete.
    fn complete(&mut self, i: usize, now: u64, r: Response) {
        self.not_http.answered();
        let c = &mut self.conns[i];
        if c.measured && self.end_ns.is_some_and(|e| now > e) {
            // Completed after the end of the measured time (the loop notices the end at its
            // next turn): like a request still in flight at the end, not counted.
            self.outstanding_measured -= 1;
        } else if c.measured {
            self.outstanding_measured -= 1;
            let actual = now.saturating_sub(c.sent_ns);
            self.stats.latency.record(actual);
            self.stats.requests += 1;
            self.stats.status[usize::from(r.status).min(599)] += 1;
            self.acc.requests += 1;
            if self.open_loop {
                let corrected = now.saturating_sub(c.intended_ns);
                self.stats.latency_intended.record(corrected);
                self.acc.hist.record(corrected);
                if let Some(h) = &mut self.acc.raw_hist {
                    h.record(actual);
                }
            } else {
                self.acc.hist.record(actual);
            }
        } else {
            self.stats.warmup_requests += 1;
        }
        c.measured = false;
        c.phase = Phase::Idle;
        if r.close {
            self.close(i);
            if self.wants_more(now) {
                self.open(i, now);
            }
        } else {
            self.became_idle(i, now);
        }
    }

    /// Timeouts, reconnects, interval boundaries.
    fn housekeeping(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            match c.phase {
                Phase::Down { retry_at_ns } if retry_at_ns <= now && self.wants_more(now) => {
                    self.open(i, now)
                }
                Phase::Connecting if now >= c.deadline_ns => {
                    self.fail(i, ErrorKind::Connect, &"connection set-up timed out", now);
                }
                Phase::Handshaking | Phase::Reading | Phase::Writing if now >= c.deadline_ns => {
                    self.fail(
                        i,
                        ErrorKind::Timeout,
                        &"no complete response within the timeout",
                        now,
                    );
                }
                _ => {}
            }
        }
        while now >= self.measure_start_ns + (self.acc.index + 1) * self.cfg.interval_ns {
            let end = self.measure_start_ns + (self.acc.index + 1) * self.cfg.interval_ns;
            if self.end_ns.is_some_and(|e| end > e) {
                break;
            }
            self.flush_interval(end, false);
        }
    }

    /// Ship the current interval to the coordinator and start the next.
    fn flush_interval(&mut self, end_ns: u64, last: bool) {
        if end_ns <= self.measure_start_ns {
            return;
        }
        let start = self.measure_start_ns + self.acc.index * self.cfg.interval_ns;
        let msg = IntervalMsg {
            thread: self.thread,
            index: self.acc.index,
            start_ns: start - self.measure_start_ns,
            end_ns: end_ns.max(start) - self.measure_start_ns,
            requests: self.acc.requests,
            errors: self.acc.errors,
            bytes: self.acc.bytes,
            hist: self.acc.hist.clone(),
            raw_hist: self.acc.raw_hist.clone(),
            last,
        };
        // The coordinator outlives the workers; a send can only fail if it is gone, and then
        // nobody wants the interval.
        let _ = self.tx.send(msg);
        self.acc.index += 1;
        self.acc.requests = 0;
        self.acc.errors = 0;
        self.acc.bytes = 0;
        self.acc.hist.reset();
        if let Some(h) = &mut self.acc.raw_hist {
            h.reset();
        }
    }
}

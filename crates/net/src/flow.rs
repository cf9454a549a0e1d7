//! The data plane of stream tests, shared by client and server: senders and receivers for
//! TCP, unix and UDP flows, their counters, UDP sequence and jitter accounting, TCP_INFO and
//! per-thread CPU cost.
//!
//! Hot loops are plain blocking read/write calls on a reused buffer; the only shared state is a
//! few relaxed atomics per flow that the coordinator samples once per interval.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use latscope_core::model::rr::Transport;
use latscope_core::model::stream::{Cost, StreamInterval, StreamOptions, TcpFigures, UdpFigures};

use crate::fair::Share;
use crate::pace::wait_until_or_stop;
use crate::proto::{StreamDatagram, StreamSpec, UDP_STREAM_HEADER_LEN};
use crate::udp_batch::{self, BatchReceiver, BatchSender};
use latscope_sys::error::is_transient as is_timeout;
use latscope_sys::mem::PageAligned;
use latscope_sys::sockopt::{set_bytes, set_int, set_nodelay};

/// A connected stream socket shared between the thread moving data and the coordinator
/// (which reads TCP_INFO from it).
#[derive(Debug)]
pub enum DataSock {
    /// A TCP data connection.
    Tcp(TcpStream),
    /// A unix-socket data connection.
    Unix(UnixStream),
}

impl DataSock {
    /// The raw descriptor.
    pub fn fd(&self) -> RawFd {
        match self {
            DataSock::Tcp(s) => s.as_raw_fd(),
            DataSock::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Whether this is a TCP socket.
    pub fn is_tcp(&self) -> bool {
        matches!(self, DataSock::Tcp(_))
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            DataSock::Tcp(s) => (&*s).read(buf),
            DataSock::Unix(s) => (&*s).read(buf),
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            DataSock::Tcp(s) => (&*s).write(buf),
            DataSock::Unix(s) => (&*s).write(buf),
        }
    }

    /// Shut the write side down (the peer reads EOF).
    pub fn shutdown_write(&self) {
        let _ = match self {
            DataSock::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            DataSock::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
    }

    /// Set (or clear) the send timeout; errors are ignored (a closed socket fails later anyway).
    pub fn set_write_timeout(&self, t: Option<Duration>) {
        let _ = match self {
            DataSock::Tcp(s) => s.set_write_timeout(t),
            DataSock::Unix(s) => s.set_write_timeout(t),
        };
    }

    /// Set (or clear) the receive timeout; errors are ignored (a closed socket fails later anyway).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        let _ = match self {
            DataSock::Tcp(s) => s.set_read_timeout(t),
            DataSock::Unix(s) => s.set_read_timeout(t),
        };
    }
}

/// Apply stream options to a socket. MSS must be set before the connection is established to
/// matter; callers set it on the listening or connecting socket too.
pub fn apply_options(fd: RawFd, o: &StreamOptions, tcp: bool, v6: bool) -> io::Result<()> {
    if let Some(b) = o.sndbuf {
        set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, b as i32)?;
    }
    if let Some(b) = o.rcvbuf {
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, b as i32)?;
    }
    if let Some(t) = o.tos {
        if v6 {
            set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, i32::from(t))?;
        } else {
            set_int(fd, libc::IPPROTO_IP, libc::IP_TOS, i32::from(t))?;
        }
    }
    if tcp {
        set_nodelay(fd, o.nodelay)?;
        if let Some(m) = o.mss {
            set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, m as i32)?;
        }
        if let Some(cc) = &o.congestion {
            if let Err(e) = set_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_bytes()) {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "congestion control '{cc}' ({e}); see /proc/sys/net/ipv4/tcp_available_congestion_control"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Live counters of one flow, sampled by the coordinator.
#[derive(Debug, Default)]
pub struct FlowCounters {
    /// Bytes moved so far.
    pub bytes: AtomicU64,
    /// send/recv calls made so far.
    pub calls: AtomicU64,
    /// ns spent inside I/O calls.
    pub call_ns: AtomicU64,
    /// UDP: datagrams sent (senders) or received (the server's receivers).
    pub datagrams: AtomicU64,
    /// ns since the flow's start when the last byte moved.
    pub last_ns: AtomicU64,
    /// Set when the flow has finished.
    pub done: AtomicBool,
}

impl FlowCounters {
    /// One send/recv call, made from `t0` to `t1`.
    fn count_call(&self, t0: Instant, t1: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call_ns
            .fetch_add((t1 - t0).as_nanos() as u64, Ordering::Relaxed);
    }

    /// `n` bytes moved, the last of them `at_ns` after the flow's start.
    fn count_bytes(&self, n: usize, at_ns: u64) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.last_ns.store(at_ns, Ordering::Relaxed);
    }

    /// A sender's run ended now (or at its deadline, if that came first): its time runs to
    /// there, not to its last write — a paced flow that sent one datagram in a 1 s test ran
    /// for 1 s, and its rate is over that second.
    fn ran_until(&self, until: Until, start: Instant) {
        let now = Instant::now();
        let end = until.deadline.map_or(now, |d| d.min(now));
        self.last_ns.fetch_max(
            end.saturating_duration_since(start).as_nanos() as u64,
            Ordering::Relaxed,
        );
    }
}

/// When a sender stops.
#[derive(Clone, Copy, Debug)]
pub struct Until {
    /// Stop at this instant (duration tests).
    pub deadline: Option<Instant>,
    /// Stop after this many bytes (byte-count tests).
    pub bytes: Option<u64>,
}

/// CPU time and context switches of the calling thread so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadUsage {
    /// User CPU time, ns.
    pub user_ns: u64,
    /// System CPU time, ns.
    pub sys_ns: u64,
    /// Voluntary + involuntary context switches.
    pub ctx_switches: u64,
}

impl ThreadUsage {
    /// This thread's usage now (getrusage RUSAGE_THREAD).
    pub fn now() -> ThreadUsage {
        // SAFETY: rusage is plain data; getrusage fills it for RUSAGE_THREAD.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
            return ThreadUsage::default();
        }
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        ThreadUsage {
            user_ns: ns(ru.ru_utime),
            sys_ns: ns(ru.ru_stime),
            ctx_switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
        }
    }

    /// The usage between `start` and `self`.
    pub fn since(self, start: ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            user_ns: self.user_ns.saturating_sub(start.user_ns),
            sys_ns: self.sys_ns.saturating_sub(start.sys_ns),
            ctx_switches: self.ctx_switches.saturating_sub(start.ctx_switches),
        }
    }

    /// Add another thread's usage.
    pub fn add(&mut self, o: ThreadUsage) {
        self.user_ns += o.user_ns;
        self.sys_ns += o.sys_ns;
        self.ctx_switches += o.ctx_switches;
    }
}

/// Turn summed thread usage and call counts into a [`Cost`] over `elapsed`.
pub fn cost(usage: ThreadUsage, bytes: u64, calls: u64, call_ns: u64, elapsed: Duration) -> Cost {
    let el = elapsed.as_nanos().max(1) as f64;
    Cost {
        cpu_measured: true,
        cpu_user_pct: 100.0 * usage.user_ns as f64 / el,
        cpu_sys_pct: 100.0 * usage.sys_ns as f64 / el,
        io_calls: calls,
        bytes_per_call: if calls == 0 {
            0.0
        } else {
            bytes as f64 / calls as f64
        },
        us_per_call: if calls == 0 {
            0.0
        } else {
            call_ns as f64 / calls as f64 / 1000.0
        },
        context_switches: usage.ctx_switches,
    }
}

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it for cpu < CPU_SETSIZE, which
    // sched_setaffinity then reads.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CPU number too large",
            ));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An in-memory file holding one buffer, the source of sendfile(2) for the zero-copy path.
fn memfd_with(buf: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"latscope-stream".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(owned);
    f.write_all(buf)?;
    Ok(f.into())
}

/// Send on a stream socket until `until`, `stop`, or an error, no faster than `limit` allows
/// (the server's per-source rate). Shuts the write side down at the end so the receiver sees
/// EOF after the last byte.
#[allow(clippy::too_many_arguments)]
pub fn stream_send(
    sock: &DataSock,
    len: usize,
    zerocopy: bool,
    until: Until,
    limit: Option<&Share>,
    start: Instant,
    c: &FlowCounters,
    stop: &AtomicBool,
) -> Result<(), String> {
    let buf = vec![b's'; len.max(1)];
    let memfd = if zerocopy {
        Some(memfd_with(&buf).map_err(|e| format!("zero-copy source: {e}"))?)
    } else {
        None
    };
    let mut sent = 0u64;
    let res = loop {
        if stop.load(Ordering::Relaxed) || until.bytes.is_some_and(|b| sent >= b) {
            break Ok(());
        }
        let t0 = Instant::now();
        if until.deadline.is_some_and(|d| t0 >= d) {
            break Ok(());
        }
        let want = until
            .bytes
            .map(|b| (b - sent).min(buf.len() as u64) as usize)
            .unwrap_or(buf.len());
        if let Some(l) = limit
            && !l.wait(want as u64, until.deadline, stop)
        {
            break Ok(());
        }
        let r = match &memfd {
            Some(fd) => {
                let mut off: libc::off_t = 0;
                // SAFETY: both fds are open for the call; `off` is a valid in/out offset.
                let n = unsafe { libc::sendfile(sock.fd(), fd.as_raw_fd(), &mut off, want) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }
            None => sock.write(&buf[..want]),
        };
        let t1 = Instant::now();
        c.count_call(t0, t1);
        match r {
            Ok(n) => {
                sent += n as u64;
                c.count_bytes(n, (t1 - start).as_nanos() as u64);
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => break Err(format!("sending: {e}")),
        }
    };
    sock.shutdown_write();
    c.ran_until(until, start);
    c.done.store(true, Ordering::Relaxed);
    res
}

/// Receive on a stream socket until EOF, `stop` or an error. With `limit`, reading waits for
/// the rate: the sender is slowed down by TCP's flow control.
pub fn stream_recv(
    sock: &DataSock,
    len: usize,
    limit: Option<&Share>,
    start: Instant,
    c: &FlowCounters,
    stop: &AtomicBool,
) -> Result<(), String> {
    let mut buf = PageAligned::zeroed(len.max(4096));
    sock.set_read_timeout(Some(Duration::from_millis(100)));
    let res = loop {
        let t0 = Instant::now();
        let r = sock.read(&mut buf);
        let t1 = Instant::now();
        match r {
            Ok(0) => break Ok(()),
            Ok(n) => {
                c.count_call(t0, t1);
                c.count_bytes(n, (t1 - start).as_nanos() as u64);
                // Once stopped, a limited receiver reads no more: what the kernel still holds is
                // beyond the rate.
                if let Some(l) = limit
                    && !l.wait(n as u64, None, stop)
                {
                    break Ok(());
                }
            }
            Err(e) if is_timeout(&e) => {
                if stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
            }
            Err(e) => break Err(format!("receiving: {e}")),
        }
    };
    c.done.store(true, Ordering::Relaxed);
    res
}

/// Pacing gaps beyond this (a day) end a UDP flow: no test lasts that long.
const MAX_GAP_NS: f64 = 86_400e9;

/// How far ahead of their due times a paced sender hands datagrams to the kernel: at most one
/// timer wake-up per millisecond (iperf3's default pacing timer is 1 ms too). A datagram leaves
/// at most this early; the average rate is exact.
const BATCH_AHEAD_NS: f64 = 1e6;

/// Send datagrams of `len` bytes at `rate_bps` (None: as fast as possible), no faster than
/// `limit` allows. `dest` None means the socket is connected.
///
/// Pacing sleeps on the kernel's timer until the next batch is due and sends every datagram due
/// in the next [`BATCH_AHEAD_NS`] in one call ([`BatchSender`]: one GSO send or one
/// `sendmmsg`); it never spins. Every datagram of a batch carries the batch's send time.
#[allow(clippy::too_many_arguments)]
pub fn udp_send(
    sock: &UdpSocket,
    dest: Option<SocketAddr>,
    token: u64,
    index: u32,
    len: usize,
    rate_bps: Option<f64>,
    until: Until,
    limit: Option<&Share>,
    start: Instant,
    c: &FlowCounters,
    stop: &AtomicBool,
) -> Result<(), String> {
    let len = len.max(UDP_STREAM_HEADER_LEN);
    let mut tx = BatchSender::new(sock.as_raw_fd(), dest);
    let max_n = udp_batch::max_batch(len);
    let mut buf = vec![b'u'; len * max_n];
    let gap_ns = rate_bps.map(|r| len as f64 * 8.0 * 1e9 / r);
    // The schedule's position (datagrams sent or given up to a full buffer) and the datagrams
    // sent: sequence numbers stay contiguous when the kernel refuses a batch.
    let (mut slot, mut seq, mut sent_bytes) = (0u64, 0u64, 0u64);
    let res = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let mut n = max_n;
        if let Some(b) = until.bytes {
            let left = b.saturating_sub(sent_bytes);
            if left == 0 {
                break Ok(());
            }
            n = n.min(left.div_ceil(len as u64) as usize);
        }
        if let Some(g) = gap_ns {
            match pace_batch(g, slot, n, start, until.deadline, stop) {
                Some(k) => n = k,
                None => break Ok(()),
            }
        }
        if let Some(l) = limit
            && !l.wait((n * len) as u64, until.deadline, stop)
        {
            break Ok(());
        }
        let t0 = Instant::now();
        if until.deadline.is_some_and(|d| t0 >= d) {
            break Ok(());
        }
        let send_ns = (t0 - start).as_nanos() as u64;
        for (i, d) in buf[..n * len].chunks_mut(len).enumerate() {
            StreamDatagram {
                token,
                index,
                seq: seq + i as u64,
                send_ns,
            }
            .write(d);
        }
        let r = tx.send(&buf[..n * len], len);
        let t1 = Instant::now();
        c.count_call(t0, t1);
        match r {
            Ok(k) => {
                seq += k as u64;
                slot += k as u64;
                sent_bytes += (k * len) as u64;
                c.datagrams.fetch_add(k as u64, Ordering::Relaxed);
                c.count_bytes(k * len, (t1 - start).as_nanos() as u64);
            }
            // A full socket buffer (ENOBUFS) or an ICMP error from an earlier datagram: the
            // batch is not sent; pacing goes on past its time slots.
            Err(e)
                if is_timeout(&e)
                    || e.raw_os_error() == Some(libc::ENOBUFS)
                    || e.kind() == io::ErrorKind::ConnectionRefused =>
            {
                slot += n as u64;
            }
            Err(e) => break Err(format!("sending datagrams: {e}")),
        }
    };
    c.ran_until(until, start);
    c.done.store(true, Ordering::Relaxed);
    res
}

/// Wait for the batch that starts at schedule slot `slot` (a datagram every `gap_ns`), and say
/// how many datagrams (1..=`most`) are due within [`BATCH_AHEAD_NS`] of now and before the
/// deadline. None: the flow is over — stopped, or its next datagram falls past the deadline
/// (the flow then idles until the deadline: a run lasts its duration, even at 100 bit/s).
fn pace_batch(
    gap_ns: f64,
    slot: u64,
    most: usize,
    start: Instant,
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Option<usize> {
    let due_ns = gap_ns * slot as f64;
    let past_deadline =
        |ns: f64| deadline.is_some_and(|d| start + Duration::from_nanos(ns as u64) >= d);
    if !due_ns.is_finite() || due_ns >= MAX_GAP_NS || past_deadline(due_ns) {
        if let Some(d) = deadline {
            wait_until_or_stop(d, stop);
        }
        return None;
    }
    if !wait_until_or_stop(start + Duration::from_nanos(due_ns as u64), stop) {
        return None;
    }
    let horizon_ns = start.elapsed().as_nanos() as f64 + BATCH_AHEAD_NS;
    let mut n = (((horizon_ns - due_ns) / gap_ns).ceil() as usize).clamp(1, most);
    while n > 1 && past_deadline(due_ns + gap_ns * (n - 1) as f64) {
        n -= 1;
    }
    Some(n)
}

/// Receiver-side accounting of one UDP flow: distinct datagrams, gaps, order, duplicates and
/// RFC 3550 interarrival jitter.
#[derive(Debug)]
pub struct UdpRx {
    received: u64,
    bytes: u64,
    /// Highest sequence number seen + 1.
    next_expected: u64,
    out_of_order: u64,
    duplicates: u64,
    /// Bit i set: sequence `next_expected - 1 - i` was received (a 1024-datagram window).
    window: [u64; 16],
    jitter_ns: f64,
    last_transit: Option<i128>,
}

impl Default for UdpRx {
    fn default() -> Self {
        UdpRx {
            received: 0,
            bytes: 0,
            next_expected: 0,
            out_of_order: 0,
            duplicates: 0,
            window: [0; 16],
            jitter_ns: 0.0,
            last_transit: None,
        }
    }
}

impl UdpRx {
    fn seen(&self, seq: u64) -> Option<bool> {
        let back = self.next_expected.checked_sub(1)?.checked_sub(seq)?;
        if back >= 1024 {
            return None;
        }
        Some(self.window[(back / 64) as usize] & (1 << (back % 64)) != 0)
    }

    fn mark(&mut self, seq: u64) {
        if seq >= self.next_expected {
            let shift = seq + 1 - self.next_expected;
            shift_window(&mut self.window, shift);
            self.next_expected = seq + 1;
        }
        let back = self.next_expected - 1 - seq;
        if back < 1024 {
            self.window[(back / 64) as usize] |= 1 << (back % 64);
        }
    }

    /// Account one datagram that arrived `arrival_ns` after the flow's start. `arrival_ns` and
    /// `send_ns` come from different clocks: only the change of their difference (transit)
    /// enters the jitter, per RFC 3550 §6.4.1: J += (|D(i-1,i)| − J) / 16.
    pub fn on_datagram(&mut self, seq: u64, len: usize, send_ns: u64, arrival_ns: u64) {
        if !self.count(seq, len) {
            return;
        }
        let transit = i128::from(arrival_ns) - i128::from(send_ns);
        if let Some(prev) = self.last_transit {
            let d = (transit - prev).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
    }

    /// Account one datagram without an arrival time of its own: one that a receive call took
    /// after the call's first (a `recvmmsg` batch, or a GRO message the kernel coalesced). It
    /// counts for sequence, loss, order and bytes, and not for jitter: the jitter is then the
    /// RFC 3550 estimate over the first datagram of each receive call — the variation of the
    /// transit time between the moments the receiver found data, which is what a datagram's
    /// own arrival time would have measured when each call took one (at low rates they do).
    pub fn on_untimed(&mut self, seq: u64, len: usize) {
        self.count(seq, len);
    }

    /// Sequence bookkeeping of one datagram; false for a duplicate.
    fn count(&mut self, seq: u64, len: usize) -> bool {
        match self.seen(seq) {
            Some(true) => {
                self.duplicates += 1;
                return false;
            }
            Some(false) => self.out_of_order += 1,
            None if seq < self.next_expected => {
                // Older than the window: count as late (out of order) without dedup.
                self.out_of_order += 1;
            }
            None => {}
        }
        self.mark(seq);
        self.received += 1;
        self.bytes += len as u64;
        true
    }

    /// Distinct datagrams received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Bytes received in distinct datagrams.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gaps so far: sequence numbers below the highest seen that never arrived.
    pub fn gaps(&self) -> u64 {
        self.next_expected.saturating_sub(self.received)
    }

    /// Final figures once the sender's count is known.
    pub fn figures(&self, sent: u64) -> UdpFigures {
        let lost = sent.saturating_sub(self.received);
        UdpFigures {
            sent,
            received: self.received,
            lost,
            loss_pct: if sent == 0 {
                0.0
            } else {
                100.0 * lost as f64 / sent as f64
            },
            out_of_order: self.out_of_order,
            duplicates: self.duplicates,
            jitter_ns: self.jitter_ns,
            lost_in_rcvbuf: None,
        }
    }
}

fn shift_window(w: &mut [u64; 16], shift: u64) {
    if shift >= 1024 {
        *w = [0; 16];
        return;
    }
    let (words, bits) = ((shift / 64) as usize, (shift % 64) as u32);
    for i in (0..16).rev() {
        let src = i as isize - words as isize;
        let mut v = if src >= 0 { w[src as usize] << bits } else { 0 };
        if bits > 0 && src > 0 {
            v |= w[src as usize - 1] >> (64 - bits);
        }
        w[i] = v;
    }
}

/// Receive slots of a flow's own socket: one `recvmmsg` takes up to this many messages.
const RECV_SLOTS: usize = 16;

/// Receive one UDP flow on its own (connected) socket until `stop` or `idle` without data,
/// everything queued in one call ([`BatchReceiver`]).
pub fn udp_recv(
    sock: &UdpSocket,
    token: u64,
    start: Instant,
    rx: &Mutex<UdpRx>,
    c: &FlowCounters,
    stop: &AtomicBool,
) -> Result<(), String> {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(100)));
    let fd = sock.as_raw_fd();
    let mut batch = BatchReceiver::new(fd, RECV_SLOTS);
    let res = loop {
        let t0 = Instant::now();
        match batch.recv(fd) {
            Ok(got) => {
                let t1 = Instant::now();
                c.count_call(t0, t1);
                let arrival = (t1 - start).as_nanos() as u64;
                let Ok(mut r) = rx.lock() else { continue };
                let mut timed = true;
                let mut bytes = 0;
                for d in (0..got)
                    .filter_map(|i| batch.message(i))
                    .flat_map(|m| m.datagrams())
                {
                    let Some(h) = StreamDatagram::parse(d) else {
                        continue;
                    };
                    if h.token != token || h.seq == crate::proto::UDP_JOIN_SEQ {
                        continue;
                    }
                    if std::mem::take(&mut timed) {
                        r.on_datagram(h.seq, d.len(), h.send_ns, arrival);
                    } else {
                        r.on_untimed(h.seq, d.len());
                    }
                    bytes += d.len();
                }
                drop(r);
                if bytes > 0 {
                    c.count_bytes(bytes, arrival);
                }
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::ConnectionRefused => {
                if stop.load(Ordering::Relaxed) {
                    break Ok(());
                }
            }
            Err(e) => break Err(format!("receiving datagrams: {e}")),
        }
    };
    c.done.store(true, Ordering::Relaxed);
    res
}

/// Per-interval figures kept between calls of [`intervals`].
#[derive(Debug, Default)]
pub struct IntervalState {
    bytes: Vec<u64>,
    retrans: Vec<u64>,
}

/// One side's view of the interval (from, to] of a stream test: one event per direction.
/// `client` says which side this is; `tcp_fd(i)` gives flow i's TCP socket where there is one.
/// Senders report TCP_INFO (retransmits in the interval, cwnd, RTT), UDP receivers the
/// sequence gaps so far.
#[allow(clippy::too_many_arguments)]
pub fn intervals(
    spec: &StreamSpec,
    client: bool,
    counters: &[FlowCounters],
    udp_rx: &[Mutex<UdpRx>],
    tcp_fd: &dyn Fn(u32) -> Option<RawFd>,
    start: Instant,
    from: Instant,
    to: Instant,
    st: &mut IntervalState,
) -> Vec<StreamInterval> {
    let n = spec.flows() as usize;
    st.bytes.resize(n, 0);
    st.retrans.resize(n, 0);
    let secs = (to - from).as_secs_f64().max(1e-9);
    let mut out = Vec::new();
    for client_sends in [true, false] {
        let idx: Vec<u32> = (0..spec.flows())
            .filter(|i| spec.client_sends(*i) == client_sends)
            .collect();
        if idx.is_empty() {
            continue;
        }
        let sends = client_sends == client;
        let mut stream_bytes = Vec::with_capacity(idx.len());
        let mut tcp: Option<TcpFigures> = None;
        let mut lost = None;
        let mut received = None;
        let mut jitter: Option<f64> = None;
        for &i in &idx {
            let k = i as usize;
            let now = counters[k].bytes.load(Ordering::Relaxed);
            stream_bytes.push(now - st.bytes[k]);
            st.bytes[k] = now;
            if sends && let Some(ti) = tcp_fd(i).and_then(tcp_info) {
                let t = tcp.get_or_insert_with(TcpFigures::default);
                t.retransmits += ti.retransmits - st.retrans[k].min(ti.retransmits);
                st.retrans[k] = ti.retransmits;
                t.cwnd = t.cwnd.max(ti.cwnd);
                t.rtt_us = t.rtt_us.max(ti.rtt_us);
                t.rtt_var_us = t.rtt_var_us.max(ti.rtt_var_us);
            }
            if !sends
                && spec.transport == Transport::Udp
                && let Ok(r) = udp_rx[k].lock()
            {
                *lost.get_or_insert(0) += r.gaps();
                *received.get_or_insert(0) += r.received();
                let j = jitter.get_or_insert(0.0);
                *j = j.max(r.jitter_ns);
            }
        }
        let bytes: u64 = stream_bytes.iter().sum();
        out.push(StreamInterval {
            event: "stream_interval".into(),
            direction: if client_sends {
                "client→server"
            } else {
                "server→client"
            }
            .into(),
            side: if client { "client" } else { "server" }.into(),
            role: if sends { "sender" } else { "receiver" }.into(),
            start_ns: (from - start).as_nanos() as u64,
            end_ns: (to - start).as_nanos() as u64,
            stream_bytes,
            bytes,
            rate_bps: bytes as f64 * 8.0 / secs,
            tcp,
            udp_lost: lost,
            udp_received: received,
            udp_jitter_ns: jitter,
        });
    }
    out
}

/// TCP_INFO figures of a TCP socket: total retransmits, cwnd, srtt and rttvar µs, and who
/// limited its transfer ([`TransferLimits`]: busy / rwnd- / sndbuf-limited time, windows,
/// buffers).
pub fn tcp_info(fd: RawFd) -> Option<TcpFigures> {
    let (t, limits) = latscope_sys::tcpinfo::limits(fd).ok()?;
    Some(TcpFigures {
        retransmits: u64::from(t.total_retrans),
        cwnd: t.snd_cwnd,
        rtt_us: t.rtt_us,
        rtt_var_us: t.rttvar_us,
        limits: Some(limits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_accounting() {
        let mut rx = UdpRx::default();
        for seq in [0u64, 1, 2, 4, 3, 3, 7] {
            rx.on_datagram(seq, 100, seq * 1000, seq * 1000 + 50);
        }
        // Distinct: 0,1,2,3,4,7 = 6; 3 arrived after 4 (out of order); the second 3 is a dup.
        assert_eq!(rx.received(), 6);
        let f = rx.figures(8);
        assert_eq!(f.lost, 2, "5 and 6 never arrived");
        assert_eq!(f.out_of_order, 1);
        assert_eq!(f.duplicates, 1);
        assert_eq!(f.sent, f.received + f.lost);
        // Constant transit: no jitter.
        assert!(f.jitter_ns.abs() < 1e-9);
        assert_eq!(rx.gaps(), 2);
    }

    #[test]
    fn jitter_follows_rfc3550() {
        let mut rx = UdpRx::default();
        // Transit alternates 0 and 1000 ns: |D| = 1000 each step after the first.
        for seq in 0..200u64 {
            let extra = if seq % 2 == 0 { 0 } else { 1000 };
            rx.on_datagram(seq, 10, seq * 10_000, seq * 10_000 + extra);
        }
        // J converges to 1000 (J += (1000 − J)/16).
        let j = rx.figures(200).jitter_ns;
        assert!((j - 1000.0).abs() < 1.0, "{j}");
    }

    #[test]
    fn untimed_datagrams_count_but_leave_the_jitter() {
        let mut rx = UdpRx::default();
        // Receive calls of 4 datagrams each: the first of each is timed, with transits that
        // alternate 0 and 800 ns; the others arrived with it and carry no time of their own.
        for call in 0..100u64 {
            let extra = if call % 2 == 0 { 0 } else { 800 };
            rx.on_datagram(call * 4, 10, call * 1000, call * 1000 + extra);
            for k in 1..4 {
                rx.on_untimed(call * 4 + k, 10);
            }
        }
        rx.on_untimed(5, 10);
        let f = rx.figures(400);
        assert_eq!((f.received, f.lost, f.duplicates), (400, 0, 1));
        assert!((f.jitter_ns - 800.0).abs() < 2.0, "{}", f.jitter_ns);
    }

    #[test]
    fn window_shifts_far() {
        let mut rx = UdpRx::default();
        rx.on_datagram(0, 1, 0, 0);
        rx.on_datagram(5000, 1, 0, 0);
        rx.on_datagram(4990, 1, 0, 0);
        rx.on_datagram(4990, 1, 0, 0);
        assert_eq!(rx.figures(5001).duplicates, 1);
        assert_eq!(rx.figures(5001).received, 3);
    }
}

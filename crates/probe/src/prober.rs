//! The four probe kinds behind one interface: send probe `id` (with a TTL for traces), collect
//! the answers, and tell the time each probe left.
//!
//! Every kind identifies its probes by a field that does not change the flow (Paris
//! traceroute): TCP SYN by the sequence number, UDP by a payload word whose one's complement
//! follows it (constant checksum), ICMP echo by the sequence number with a compensating payload
//! word (constant checksum). Ports, addresses and protocol never change within a run.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use latscope_core::model::ping::{ProbeMode, ReplyKind};

use crate::error::ProbeError;
use crate::packet::{self, IcmpKind};
use crate::sys::{self, TsMode, TsSource};

/// An answer to probe `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub id: u16,
    pub from: IpAddr,
    pub kind: ReplyKind,
    /// TCP flags of the answer, for TCP answers.
    pub tcp_flags: Option<u8>,
    pub ttl: Option<u8>,
    pub size: usize,
    /// Receive time, CLOCK_REALTIME ns.
    pub rx_ns: u64,
    pub rx_kernel: bool,
}

/// One probe kind.
pub trait Prober {
    /// Send probe `id`; `ttl` sets the TTL / hop limit (traces).
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError>;
    /// Wait at most `timeout` for answers and append every answer available to `out`.
    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError>;
    /// When probe `id` left: (CLOCK_REALTIME ns, whether a kernel TX timestamp).
    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)>;
    /// Drop what is kept about probe `id`.
    fn forget(&mut self, id: u16);
    /// The best timestamp source this prober can give.
    fn ts_source(&self) -> TsSource;
    /// The probe kind.
    fn mode(&self) -> ProbeMode;
}

/// Send times per probe, with kernel TX timestamps matched by their OPT_ID key.
#[derive(Default)]
struct TxBook {
    tx: HashMap<u16, (u64, bool)>,
    key_to_id: HashMap<u32, u16>,
    next_key: u32,
}

impl TxBook {
    fn sent(&mut self, id: u16, user_ns: u64, ts: TsMode) {
        self.tx.insert(id, (user_ns, false));
        if ts == TsMode::TxRx {
            self.key_to_id.insert(self.next_key, id);
        }
        self.next_key = self.next_key.wrapping_add(1);
    }

    fn kernel_tx(&mut self, key: u32, ns: u64) {
        if let Some(id) = self.key_to_id.remove(&key)
            && let Some(e) = self.tx.get_mut(&id)
        {
            *e = (ns, true);
        }
    }

    fn forget(&mut self, id: u16) {
        self.tx.remove(&id);
        if self.key_to_id.len() > 4096 {
            // Keys whose timestamp never came (a driver without TX timestamps): drop the old.
            let live: std::collections::HashSet<u16> = self.tx.keys().copied().collect();
            self.key_to_id.retain(|_, id| live.contains(id));
        }
    }

    /// The oldest probe still waiting (for errors that do not quote an id).
    fn oldest(&self) -> Option<u16> {
        self.tx
            .iter()
            .min_by_key(|(_, (ns, _))| *ns)
            .map(|(id, _)| *id)
    }
}

/// Read TX timestamps from a socket's error queue into `book`; other queued errors are handed
/// to `on_err`.
fn drain_errqueue(
    fd: &OwnedFd,
    book: &mut TxBook,
    buf: &mut [u8],
    mut on_err: impl FnMut(&sys::Msg, &[u8]),
) -> io::Result<()> {
    while let Some(m) = sys::recv_msg(fd, buf, true)? {
        match m.err {
            Some(e) if e.origin == libc::SO_EE_ORIGIN_TIMESTAMPING => {
                if let Some(ns) = m.kernel_ns {
                    book.kernel_tx(e.data, ns);
                }
            }
            Some(_) => on_err(&m, &buf[..m.len.min(buf.len())]),
            None => {}
        }
    }
    Ok(())
}

fn domain(v6: bool) -> libc::c_int {
    if v6 { libc::AF_INET6 } else { libc::AF_INET }
}

fn raw_socket(v6: bool, proto: libc::c_int, what: &str) -> Result<OwnedFd, ProbeError> {
    sys::socket(domain(v6), libc::SOCK_RAW, proto).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => privilege_error(what),
        _ => ProbeError::io(format!("raw socket for {what}"), e),
    })
}

/// The error for a mode that needs CAP_NET_RAW.
pub fn privilege_error(what: &str) -> ProbeError {
    ProbeError::Privilege {
        what: what.to_string(),
        capability: "CAP_NET_RAW (a raw socket)".into(),
        remedy: "run as root or `sudo setcap cap_net_raw+ep $(command -v latscope)`; without it \
                 --connect and --udp work, and --icmp where net.ipv4.ping_group_range allows"
            .into(),
    }
}

/// Whether this process may open raw sockets (CAP_NET_RAW in effect), tried for real.
pub fn have_raw(v6: bool) -> bool {
    let proto = if v6 {
        libc::IPPROTO_ICMPV6
    } else {
        libc::IPPROTO_ICMP
    };
    sys::socket(domain(v6), libc::SOCK_RAW, proto).is_ok()
}

fn map_icmp(kind: IcmpKind) -> Option<ReplyKind> {
    match kind {
        IcmpKind::EchoReply => Some(ReplyKind::EchoReply),
        IcmpKind::TimeExceeded => Some(ReplyKind::TimeExceeded),
        IcmpKind::PortUnreachable => Some(ReplyKind::PortUnreachable),
        IcmpKind::Prohibited => Some(ReplyKind::Prohibited),
        IcmpKind::Unreachable(_) => Some(ReplyKind::Unreachable),
        IcmpKind::Other(..) => None,
    }
}

/// Read every queued ICMP message of a raw ICMP socket; `matcher` maps a parsed message to a
/// probe id.
fn read_raw_icmp(
    fd: &OwnedFd,
    v6: bool,
    buf: &mut [u8],
    out: &mut Vec<Response>,
    mut matcher: impl FnMut(&packet::IcmpMessage<'_>, IpAddr) -> Option<u16>,
) -> io::Result<()> {
    while let Some(m) = sys::recv_msg(fd, buf, false)? {
        let data = &buf[..m.len.min(buf.len())];
        let (icmp, from, ttl) = if v6 {
            match m.from {
                Some(a) => (data, a.ip(), m.ttl),
                None => continue,
            }
        } else {
            match packet::parse_ipv4(data) {
                Some(h) => (&data[h.header_len..], h.src, Some(h.ttl)),
                None => continue,
            }
        };
        let Some(msg) = packet::parse_icmp(v6, icmp) else {
            continue;
        };
        let Some(kind) = map_icmp(msg.kind) else {
            continue;
        };
        if let Some(id) = matcher(&msg, from) {
            out.push(Response {
                id,
                from,
                kind,
                tcp_flags: None,
                ttl,
                size: m.len,
                rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                rx_kernel: m.kernel_ns.is_some(),
            });
        }
    }
    Ok(())
}

fn ts_source(ts: TsMode) -> TsSource {
    match ts {
        TsMode::TxRx => TsSource::Kernel,
        TsMode::RxOnly => TsSource::KernelRx,
        TsMode::None => TsSource::User,
    }
}

/// TCP SYN probes from a raw socket. Source ports are reserved by binding (never listening)
/// TCP sockets, so no other program uses them and the kernel, finding no connection, answers
/// every SYN-ACK with a RST: no half-open connection stays on the target.
pub struct SynProber {
    v6: bool,
    src: IpAddr,
    dst: IpAddr,
    dport: u16,
    sports: Vec<u16>,
    _reserved: Vec<OwnedFd>,
    seq_base: u32,
    tcp: OwnedFd,
    icmp: OwnedFd,
    ts: TsMode,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
}

impl SynProber {
    /// `ports` source ports (1 for a trace: the flow must not change).
    pub fn new(dst: IpAddr, dport: u16, ports: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let tcp = raw_socket(v6, libc::IPPROTO_TCP, "--syn (TCP SYN probes)")?;
        let icmp = raw_socket(
            v6,
            if v6 {
                libc::IPPROTO_ICMPV6
            } else {
                libc::IPPROTO_ICMP
            },
            "--syn",
        )?;
        let src = sys::source_for(dst).map_err(|e| unreachable(dst, e))?;
        let mut sports = Vec::new();
        let mut reserved = Vec::new();
        for _ in 0..ports.max(1) {
            let s = sys::socket(domain(v6), libc::SOCK_STREAM, 0)
                .map_err(|e| ProbeError::io("TCP socket", e))?;
            sys::bind(&s, SocketAddr::new(src, 0))
                .map_err(|e| ProbeError::io("reserving a source port", e))?;
            sports.push(
                sys::local_addr(&s)
                    .map_err(|e| ProbeError::io("getsockname", e))?
                    .port(),
            );
            reserved.push(s);
        }
        let ts = if kernel_ts {
            sys::enable_timestamps(&tcp)
        } else {
            TsMode::None
        };
        if kernel_ts {
            sys::enable_timestamps(&icmp);
        }
        if v6 {
            let _ = sys::enable_recv_ttl(&tcp, true);
            let _ = sys::enable_recv_ttl(&icmp, true);
        }
        Ok(SynProber {
            v6,
            src,
            dst,
            dport,
            sports,
            _reserved: reserved,
            seq_base: random_u32(),
            tcp,
            icmp,
            ts,
            book: TxBook::default(),
            ttl: None,
            buf: vec![0u8; 2048],
        })
    }

    fn port_for(&self, id: u16) -> u16 {
        self.sports[usize::from(id) % self.sports.len()]
    }

    fn id_of(&self, seq: u32) -> Option<u16> {
        u16::try_from(seq.wrapping_sub(self.seq_base)).ok()
    }
}

fn unreachable(dst: IpAddr, e: io::Error) -> ProbeError {
    ProbeError::Unreachable {
        target: dst.to_string(),
        reason: format!("no route ({e})"),
    }
}

/// A random 32-bit value from the kernel.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: b is a writable 4-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        (sys::now_ns() as u32) ^ std::process::id()
    }
}

impl Prober for SynProber {
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError> {
        if ttl != self.ttl
            && let Some(t) = ttl
        {
            sys::set_ttl(&self.tcp, self.v6, t)
                .map_err(|e| ProbeError::io("setting the TTL", e))?;
            self.ttl = ttl;
        }
        let seg = packet::tcp_syn(
            self.src,
            self.dst,
            self.port_for(id),
            self.dport,
            self.seq_base.wrapping_add(u32::from(id)),
        );
        let t = sys::now_ns();
        sys::send_to(&self.tcp, &seg, Some(SocketAddr::new(self.dst, 0)))
            .map_err(|e| send_error(self.dst, e))?;
        self.book.sent(id, t, self.ts);
        let book = &mut self.book;
        let _ = drain_errqueue(&self.tcp, book, &mut self.buf, |_, _| {});
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        sys::poll_in(&[self.tcp.as_raw_fd(), self.icmp.as_raw_fd()], timeout)
            .map_err(|e| ProbeError::io("poll", e))?;
        let _ = drain_errqueue(&self.tcp, &mut self.book, &mut self.buf, |_, _| {});
        let mut buf = std::mem::take(&mut self.buf);
        let r = (|| -> io::Result<()> {
            while let Some(m) = sys::recv_msg(&self.tcp, &mut buf, false)? {
                let data = &buf[..m.len.min(buf.len())];
                let (from, seg_bytes, ttl) = if self.v6 {
                    match m.from {
                        Some(a) => (a.ip(), data, m.ttl),
                        None => continue,
                    }
                } else {
                    match packet::parse_ipv4(data) {
                        Some(h) if h.proto == packet::PROTO_TCP => {
                            (h.src, &data[h.header_len..], Some(h.ttl))
                        }
                        _ => continue,
                    }
                };
                let Some(seg) = packet::parse_tcp(seg_bytes) else {
                    continue;
                };
                if from != self.dst || seg.sport != self.dport || !self.sports.contains(&seg.dport)
                {
                    continue;
                }
                let kind = if seg.flags & packet::TCP_RST != 0 {
                    ReplyKind::Rst
                } else if seg.flags & (packet::TCP_SYN | packet::TCP_ACK)
                    == packet::TCP_SYN | packet::TCP_ACK
                {
                    ReplyKind::SynAck
                } else {
                    continue;
                };
                let Some(id) = self.id_of(seg.ack.wrapping_sub(1)) else {
                    continue;
                };
                if self.port_for(id) != seg.dport {
                    continue;
                }
                out.push(Response {
                    id,
                    from,
                    kind,
                    tcp_flags: Some(seg.flags),
                    ttl,
                    size: m.len,
                    rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                    rx_kernel: m.kernel_ns.is_some(),
                });
            }
            let (dst, dport, sports, base) =
                (self.dst, self.dport, self.sports.clone(), self.seq_base);
            read_raw_icmp(&self.icmp, self.v6, &mut buf, out, |msg, _| {
                let q = msg.quote.as_ref()?;
                let t = packet::parse_tcp(q.transport).or_else(|| {
                    // Only 8 bytes quoted: ports and sequence number are all we need.
                    let b = q.transport;
                    (b.len() >= 8).then(|| packet::TcpSegment {
                        sport: u16::from_be_bytes([b[0], b[1]]),
                        dport: u16::from_be_bytes([b[2], b[3]]),
                        seq: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                        ack: 0,
                        flags: 0,
                    })
                })?;
                if q.proto != packet::PROTO_TCP
                    || q.dst != dst
                    || t.dport != dport
                    || !sports.contains(&t.sport)
                {
                    return None;
                }
                u16::try_from(t.seq.wrapping_sub(base)).ok()
            })
        })();
        self.buf = buf;
        r.map_err(|e| ProbeError::io("receiving", e))
    }

    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
        if self.book.tx.get(&id).is_some_and(|t| !t.1) {
            let _ = drain_errqueue(&self.tcp, &mut self.book, &mut self.buf, |_, _| {});
        }
        self.book.tx.get(&id).copied()
    }

    fn forget(&mut self, id: u16) {
        self.book.forget(id);
    }

    fn ts_source(&self) -> TsSource {
        ts_source(self.ts)
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Syn
    }
}

fn send_error(dst: IpAddr, e: io::Error) -> ProbeError {
    match e.raw_os_error() {
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => unreachable(dst, e),
        Some(libc::EPERM) | Some(libc::EACCES) => ProbeError::io(
            format!("sending to {dst} (a local firewall rule rejects it, or a broadcast address)"),
            e,
        ),
        _ => ProbeError::io(format!("sending to {dst}"), e),
    }
}

/// UDP probes from one connected socket with a constant 4-tuple (and constant checksum). The
/// destination answers with latscope serve's echo, or ICMP port unreachable; routers with time
/// exceeded, which the kernel queues on the socket's error queue (IP_RECVERR) — no privilege.
pub struct UdpProber {
    v6: bool,
    fd: OwnedFd,
    size: usize,
    ts: TsMode,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
    dst: IpAddr,
    /// ICMP errors read from the error queue, not yet returned.
    held: Vec<Response>,
}

impl UdpProber {
    pub fn new(dst: IpAddr, port: u16, size: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let fd = sys::socket(domain(v6), libc::SOCK_DGRAM, 0)
            .map_err(|e| ProbeError::io("UDP socket", e))?;
        sys::connect(&fd, SocketAddr::new(dst, port)).map_err(|e| unreachable(dst, e))?;
        sys::enable_recv_err(&fd, v6).map_err(|e| ProbeError::io("IP_RECVERR", e))?;
        let _ = sys::enable_recv_ttl(&fd, v6);
        let ts = if kernel_ts {
            sys::enable_timestamps(&fd)
        } else {
            TsMode::None
        };
        Ok(UdpProber {
            v6,
            fd,
            size,
            ts,
            book: TxBook::default(),
            ttl: None,
            buf: vec![0u8; 65536],
            dst,
            held: Vec::new(),
        })
    }

    /// Read the error queue: TX timestamps into the book, ICMP errors into `held`.
    fn drain(&mut self) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let v6 = self.v6;
        let mut errs = Vec::new();
        let r = drain_errqueue(&self.fd, &mut self.book, &mut buf, |m, data| {
            let Some(e) = m.err else { return };
            if e.origin != libc::SO_EE_ORIGIN_ICMP && e.origin != libc::SO_EE_ORIGIN_ICMP6 {
                return;
            }
            let Some(kind) = map_icmp(packet::icmp_kind(v6, e.icmp_type, e.icmp_code)) else {
                return;
            };
            let Some(from) = e.offender else { return };
            errs.push((
                packet::parse_udp_probe(data, packet::LSP_ECHO_REQUEST),
                from,
                kind,
                *m,
            ));
        });
        self.buf = buf;
        for (id, from, kind, m) in errs {
            // A router that quotes only 8 bytes leaves no id: the oldest waiting probe it is.
            let Some(id) = id.or_else(|| self.book.oldest()) else {
                continue;
            };
            self.held.push(Response {
                id,
                from,
                kind,
                tcp_flags: None,
                ttl: None,
                size: m.len + 8,
                rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                rx_kernel: m.kernel_ns.is_some(),
            });
        }
        r
    }
}

impl Prober for UdpProber {
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError> {
        if ttl != self.ttl
            && let Some(t) = ttl
        {
            sys::set_ttl(&self.fd, self.v6, t).map_err(|e| ProbeError::io("setting the TTL", e))?;
            self.ttl = ttl;
        }
        let p = packet::udp_probe(id, self.size);
        let t = sys::now_ns();
        match sys::send_to(&self.fd, &p, None) {
            Ok(_) => {}
            // A previous ICMP error reported on this send: the probe did not leave; resend once.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                sys::send_to(&self.fd, &p, None).map_err(|e| send_error(self.dst, e))?;
            }
            Err(e) => return Err(send_error(self.dst, e)),
        }
        self.book.sent(id, t, self.ts);
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        if self.held.is_empty() {
            sys::poll_in(&[self.fd.as_raw_fd()], timeout).map_err(|e| ProbeError::io("poll", e))?;
        }
        let r = self.drain();
        out.append(&mut self.held);
        let mut buf = std::mem::take(&mut self.buf);
        let r2 = (|| -> io::Result<()> {
            loop {
                let m = match sys::recv_msg(&self.fd, &mut buf, false) {
                    Ok(Some(m)) => m,
                    Ok(None) => return Ok(()),
                    // The pending ICMP error is reported once on the normal queue too.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                        ) =>
                    {
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let data = &buf[..m.len.min(buf.len())];
                let Some(id) = packet::parse_udp_probe(data, packet::LSP_ECHO_REPLY) else {
                    continue;
                };
                out.push(Response {
                    id,
                    from: m.from.map(|a| a.ip()).unwrap_or(self.dst),
                    kind: ReplyKind::UdpEcho,
                    tcp_flags: None,
                    ttl: m.ttl,
                    size: m.len,
                    rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                    rx_kernel: m.kernel_ns.is_some(),
                });
            }
        })();
        self.buf = buf;
        r.and(r2).map_err(|e| ProbeError::io("receiving", e))
    }

    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
        if self.book.tx.get(&id).is_some_and(|t| !t.1) && self.ts == TsMode::TxRx {
            let _ = self.drain();
        }
        self.book.tx.get(&id).copied()
    }

    fn forget(&mut self, id: u16) {
        self.book.forget(id);
    }

    fn ts_source(&self) -> TsSource {
        ts_source(self.ts)
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Udp
    }
}

/// ICMP echo probes: an unprivileged ping socket (SOCK_DGRAM/IPPROTO_ICMP, allowed by
/// net.ipv4.ping_group_range) when possible, else a raw socket.
pub struct IcmpProber {
    v6: bool,
    fd: OwnedFd,
    raw: bool,
    ident: u16,
    size: usize,
    dst: IpAddr,
    ts: TsMode,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
    held: Vec<Response>,
}

impl IcmpProber {
    pub fn new(dst: IpAddr, size: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let proto = if v6 {
            libc::IPPROTO_ICMPV6
        } else {
            libc::IPPROTO_ICMP
        };
        let (fd, raw) = match sys::socket(domain(v6), libc::SOCK_DGRAM, proto) {
            Ok(fd) => (fd, false),
            Err(_) => match sys::socket(domain(v6), libc::SOCK_RAW, proto) {
                Ok(fd) => (fd, true),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    return Err(ProbeError::Privilege {
                        what: "--icmp (ICMP echo)".into(),
                        capability: "CAP_NET_RAW, or a group in net.ipv4.ping_group_range".into(),
                        remedy: "run as root, or `sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"` \
                                 for unprivileged ping sockets; --connect and --udp work without either"
                            .into(),
                    });
                }
                Err(e) => return Err(ProbeError::io("ICMP socket", e)),
            },
        };
        let ident = if raw {
            (random_u32() & 0xffff) as u16
        } else {
            // The kernel uses the socket's "port" as the echo id.
            sys::connect(&fd, SocketAddr::new(dst, 0)).map_err(|e| unreachable(dst, e))?;
            sys::local_addr(&fd)
                .map_err(|e| ProbeError::io("getsockname", e))?
                .port()
        };
        if !raw {
            sys::enable_recv_err(&fd, v6).map_err(|e| ProbeError::io("IP_RECVERR", e))?;
        }
        let _ = sys::enable_recv_ttl(&fd, v6);
        let ts = if kernel_ts {
            sys::enable_timestamps(&fd)
        } else {
            TsMode::None
        };
        Ok(IcmpProber {
            v6,
            fd,
            raw,
            ident,
            size,
            dst,
            ts,
            book: TxBook::default(),
            ttl: None,
            buf: vec![0u8; 65536],
            held: Vec::new(),
        })
    }

    /// Read the error queue: TX timestamps into the book, ICMP errors (ping sockets) into `held`.
    fn drain(&mut self) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let v6 = self.v6;
        let mut errs = Vec::new();
        let r = drain_errqueue(&self.fd, &mut self.book, &mut buf, |m, data| {
            let Some(e) = m.err else { return };
            if e.origin != libc::SO_EE_ORIGIN_ICMP && e.origin != libc::SO_EE_ORIGIN_ICMP6 {
                return;
            }
            let Some(kind) = map_icmp(packet::icmp_kind(v6, e.icmp_type, e.icmp_code)) else {
                return;
            };
            let (Some(from), Some((_, seq))) = (e.offender, packet::parse_echo(data)) else {
                return;
            };
            errs.push(Response {
                id: seq,
                from,
                kind,
                tcp_flags: None,
                ttl: None,
                size: m.len,
                rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                rx_kernel: m.kernel_ns.is_some(),
            });
        });
        self.buf = buf;
        self.held.extend(errs);
        r
    }

    /// Whether a raw socket is used (no ping-socket permission).
    pub fn is_raw(&self) -> bool {
        self.raw
    }
}

impl Prober for IcmpProber {
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError> {
        if ttl != self.ttl
            && let Some(t) = ttl
        {
            sys::set_ttl(&self.fd, self.v6, t).map_err(|e| ProbeError::io("setting the TTL", e))?;
            self.ttl = ttl;
        }
        let p = packet::icmp_echo(self.v6, self.ident, id, self.size);
        let t = sys::now_ns();
        let to = if self.raw {
            Some(SocketAddr::new(self.dst, 0))
        } else {
            None
        };
        sys::send_to(&self.fd, &p, to).map_err(|e| send_error(self.dst, e))?;
        self.book.sent(id, t, self.ts);
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        if self.held.is_empty() {
            sys::poll_in(&[self.fd.as_raw_fd()], timeout).map_err(|e| ProbeError::io("poll", e))?;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let (v6, ident, dst) = (self.v6, self.ident, self.dst);
        let r = if self.raw {
            let _ = drain_errqueue(&self.fd, &mut self.book, &mut buf, |_, _| {});
            read_raw_icmp(&self.fd, v6, &mut buf, out, |msg, from| {
                if let Some((id, seq)) = msg.echo {
                    return (id == ident && from == dst).then_some(seq);
                }
                let q = msg.quote.as_ref()?;
                let want = if v6 {
                    packet::PROTO_ICMPV6
                } else {
                    packet::PROTO_ICMP
                };
                let (id, seq) = packet::parse_echo(q.transport)?;
                (q.proto == want && q.dst == dst && id == ident).then_some(seq)
            })
        } else {
            self.buf = buf;
            let r = self.drain();
            out.append(&mut self.held);
            buf = std::mem::take(&mut self.buf);
            r.and_then(|_| {
                loop {
                    let m = match sys::recv_msg(&self.fd, &mut buf, false) {
                        Ok(Some(m)) => m,
                        Ok(None) => return Ok(()),
                        Err(e)
                            if matches!(
                                e.raw_os_error(),
                                Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ECONNREFUSED)
                            ) =>
                        {
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let data = &buf[..m.len.min(buf.len())];
                    let Some(msg) = packet::parse_icmp(v6, data) else {
                        continue;
                    };
                    let (IcmpKind::EchoReply, Some((_, seq))) = (msg.kind, msg.echo) else {
                        continue;
                    };
                    out.push(Response {
                        id: seq,
                        from: m.from.map(|a| a.ip()).unwrap_or(dst),
                        kind: ReplyKind::EchoReply,
                        tcp_flags: None,
                        ttl: m.ttl,
                        size: m.len,
                        rx_ns: m.kernel_ns.unwrap_or_else(sys::now_ns),
                        rx_kernel: m.kernel_ns.is_some(),
                    });
                }
            })
        };
        self.buf = buf;
        r.map_err(|e| ProbeError::io("receiving", e))
    }

    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
        if self.book.tx.get(&id).is_some_and(|t| !t.1) && self.ts == TsMode::TxRx {
            let _ = self.drain();
        }
        self.book.tx.get(&id).copied()
    }

    fn forget(&mut self, id: u16) {
        self.book.forget(id);
    }

    fn ts_source(&self) -> TsSource {
        ts_source(self.ts)
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Icmp
    }
}

/// TCP connect() probes: a non-blocking connect per probe, closed with RST (SO_LINGER 0) so
/// floods leave no TIME_WAIT behind. The RTT of a completed handshake is the kernel's own
/// sample (TCP_INFO); refusals and kernels without it are timed with the user-space clock.
pub struct ConnectProber {
    dst: SocketAddr,
    pending: Vec<(u16, OwnedFd)>,
    tx: HashMap<u16, (u64, bool)>,
    done: Vec<Response>,
}

impl ConnectProber {
    pub fn new(dst: IpAddr, port: u16) -> Self {
        ConnectProber {
            dst: SocketAddr::new(dst, port),
            pending: Vec::new(),
            tx: HashMap::new(),
            done: Vec::new(),
        }
    }

    fn finish(&mut self, id: u16, err: Option<io::Error>, kernel_rtt_us: Option<u32>) {
        let mut rx_ns = sys::now_ns();
        let mut rx_kernel = false;
        if let (Some(us), Some(tx)) = (kernel_rtt_us, self.tx.get_mut(&id)) {
            rx_ns = tx.0 + u64::from(us) * 1000;
            rx_kernel = true;
            tx.1 = true;
        }
        let kind = match err.as_ref().and_then(|e| e.raw_os_error()) {
            None => ReplyKind::Connected,
            Some(libc::ECONNREFUSED) => ReplyKind::Refused,
            Some(libc::EACCES | libc::EPERM) => ReplyKind::Prohibited,
            Some(_) => ReplyKind::Unreachable,
        };
        self.done.push(Response {
            id,
            from: self.dst.ip(),
            kind,
            tcp_flags: None,
            ttl: None,
            size: 0,
            rx_ns,
            rx_kernel,
        });
    }
}

impl Prober for ConnectProber {
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError> {
        if ttl.is_some() {
            return Err(ProbeError::Invalid(
                "TCP connect probes cannot trace; use --syn, --udp or --icmp".into(),
            ));
        }
        let fd = sys::socket(domain(self.dst.is_ipv6()), libc::SOCK_STREAM, 0)
            .map_err(|e| ProbeError::io("TCP socket", e))?;
        let _ = sys::set_int(&fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
        let _ = sys::set_linger_zero(&fd);
        let t = sys::now_ns();
        self.tx.insert(id, (t, false));
        match sys::connect(&fd, self.dst) {
            Ok(()) => {
                let rtt = sys::tcp_rtt_us(&fd);
                self.finish(id, None, rtt)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => self.pending.push((id, fd)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENETUNREACH)) => {
                return Err(unreachable(self.dst.ip(), e));
            }
            Err(e) => self.finish(id, Some(e), None),
        }
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        if self.done.is_empty() && !self.pending.is_empty() {
            let fds: Vec<_> = self.pending.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
            let rev = sys::poll_out(&fds, timeout).map_err(|e| ProbeError::io("poll", e))?;
            let mut i = 0;
            let mut k = 0;
            while i < self.pending.len() {
                if rev[k] != 0 {
                    let (id, fd) = self.pending.remove(i);
                    let err = sys::take_error(&fd).unwrap_or_else(Some);
                    let rtt = if err.is_none() {
                        sys::tcp_rtt_us(&fd)
                    } else {
                        None
                    };
                    self.finish(id, err, rtt);
                } else {
                    i += 1;
                }
                k += 1;
            }
        } else if self.done.is_empty() {
            std::thread::sleep(timeout);
        }
        out.append(&mut self.done);
        Ok(())
    }

    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
        self.tx.get(&id).copied()
    }

    fn forget(&mut self, id: u16) {
        self.tx.remove(&id);
        // A probe given up on: abandon its connection attempt.
        self.pending.retain(|(i, _)| *i != id);
    }

    fn ts_source(&self) -> TsSource {
        TsSource::TcpInfo
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Connect
    }
}

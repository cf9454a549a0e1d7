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
use std::os::fd::AsRawFd;
use std::time::Duration;

use latscope_core::model::ping::{ProbeMode, ReplyKind};

use crate::error::ProbeError;
use crate::packet::{self, IcmpKind};
use crate::sys::{self, Msg, TsMode, TsSource};
use latscope_sys::clock::realtime_ns;
use latscope_sys::error::MissingPrivilege;
use latscope_sys::{msg, poll};
use socket2::{Socket, Type};

mod connect;
mod icmp;
mod syn;
mod udp;

pub use connect::ConnectProber;
pub use icmp::IcmpProber;
pub use syn::SynProber;
pub use udp::UdpProber;

/// An answer to probe `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The probe answered.
    pub id: u16,
    /// Who answered.
    pub from: IpAddr,
    /// What the answer says.
    pub kind: ReplyKind,
    /// TCP flags of the answer, for TCP answers.
    pub tcp_flags: Option<u8>,
    /// TTL / hop limit of the answer, when visible.
    pub ttl: Option<u8>,
    /// Bytes received.
    pub size: usize,
    /// Receive time, CLOCK_REALTIME ns.
    pub rx_ns: u64,
    /// Whether `rx_ns` is a kernel timestamp.
    pub rx_kernel: bool,
}

/// One probe kind.
pub trait Prober {
    /// Send probe `id`; `ttl` sets the TTL / hop limit (traces).
    fn send(&mut self, id: u16, ttl: Option<u8>) -> Result<(), ProbeError>;
    /// Wait at most `timeout` for answers and append every answer available to `out`.
    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError>;
    /// The probe kind.
    fn mode(&self) -> ProbeMode;
    /// The [`TxBook`] a kind that stamps its own sends keeps: `tx_time`, `forget` and
    /// `ts_source` are then answered from it. A kind without one overrides those three.
    fn book(&self) -> Option<&TxBook> {
        None
    }
    /// The book, to change.
    fn book_mut(&mut self) -> Option<&mut TxBook> {
        None
    }
    /// Read the kernel TX timestamps still queued on the socket into the book.
    fn read_tx_stamps(&mut self) {}
    /// When probe `id` left: (CLOCK_REALTIME ns, whether a kernel TX timestamp).
    fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
        if self.book().is_some_and(|b| b.awaits_kernel_tx(id)) {
            self.read_tx_stamps();
        }
        self.book().and_then(|b| b.get(id))
    }
    /// Drop what is kept about probe `id`.
    fn forget(&mut self, id: u16) {
        if let Some(b) = self.book_mut() {
            b.forget(id);
        }
    }
    /// The best timestamp source this prober can give.
    fn ts_source(&self) -> TsSource {
        self.book().map_or(TsSource::User, TxBook::ts_source)
    }
}

/// Send times per probe, with kernel TX timestamps matched by their OPT_ID key, and the
/// timestamping the socket was given.
pub struct TxBook {
    tx: HashMap<u16, (u64, bool)>,
    key_to_id: HashMap<u32, u16>,
    next_key: u32,
    ts: TsMode,
}

impl TxBook {
    fn new(ts: TsMode) -> TxBook {
        TxBook {
            tx: HashMap::new(),
            key_to_id: HashMap::new(),
            next_key: 0,
            ts,
        }
    }

    fn sent(&mut self, id: u16, user_ns: u64) {
        self.tx.insert(id, (user_ns, false));
        if self.ts == TsMode::TxRx {
            self.key_to_id.insert(self.next_key, id);
        }
        self.next_key = self.next_key.wrapping_add(1);
    }

    fn kernel_tx(&mut self, key: u32, ns: u64) {
        // A failed send may or may not consume an OPT_ID key (kernel versions differ), which
        // would shift keys by one: a timestamp older than the probe's own user-space send time
        // belongs to an earlier probe, and is not used.
        if let Some(id) = self.key_to_id.remove(&key)
            && let Some(e) = self.tx.get_mut(&id)
            && ns + 1_000 >= e.0
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

    /// When probe `id` left, as far as the book knows.
    fn get(&self, id: u16) -> Option<(u64, bool)> {
        self.tx.get(&id).copied()
    }

    /// Whether probe `id`'s kernel TX timestamp is due but not read yet.
    fn awaits_kernel_tx(&self, id: u16) -> bool {
        self.ts == TsMode::TxRx && self.tx.get(&id).is_some_and(|t| !t.1)
    }

    /// The best timestamps the socket gives.
    fn ts_source(&self) -> TsSource {
        match self.ts {
            TsMode::TxRx => TsSource::Kernel,
            TsMode::RxOnly => TsSource::KernelRx,
            TsMode::None => TsSource::User,
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
    fd: &Socket,
    book: &mut TxBook,
    buf: &mut [u8],
    mut on_err: impl FnMut(&Msg, &[u8]),
) -> io::Result<()> {
    while let Some(m) = sys::recv_msg(fd, buf, true)? {
        match m.control.err {
            Some(e) if e.origin == libc::SO_EE_ORIGIN_TIMESTAMPING => {
                if let Some(ns) = m.control.kernel_ns {
                    book.kernel_tx(e.data, ns);
                }
            }
            Some(_) => on_err(&m, &buf[..m.len.min(buf.len())]),
            None => {}
        }
    }
    Ok(())
}

/// An ICMP error a router or the target sent about one of our probes, as the kernel queued it
/// on the probe's socket (MSG_ERRQUEUE, SO_EE_ORIGIN_ICMP/ICMP6).
struct QueuedIcmp {
    /// The probe id read from the quoted datagram, when the quote holds it.
    id: Option<u16>,
    from: IpAddr,
    kind: ReplyKind,
    /// Bytes of the quoted datagram.
    len: usize,
    kernel_ns: Option<u64>,
}

impl QueuedIcmp {
    /// The answer to probe `id`, `extra` bytes added to the quote's length.
    fn response(&self, id: u16, extra: usize) -> Response {
        response(
            id,
            self.from,
            self.kind,
            None,
            self.len + extra,
            self.kernel_ns,
        )
    }
}

/// Read the error queue of a probe socket: TX timestamps into `book`, the ICMP errors (with
/// the probe id `probe_id` finds in the quoted datagram) returned, other errors ignored.
fn drain_icmp_errors(
    fd: &Socket,
    book: &mut TxBook,
    buf: &mut [u8],
    v6: bool,
    probe_id: impl Fn(&[u8]) -> Option<u16>,
) -> (Vec<QueuedIcmp>, io::Result<()>) {
    let mut errs = Vec::new();
    let r = drain_errqueue(fd, book, buf, |m, data| {
        let Some(e) = m.control.err else { return };
        if e.origin != libc::SO_EE_ORIGIN_ICMP && e.origin != libc::SO_EE_ORIGIN_ICMP6 {
            return;
        }
        let Some(kind) = map_icmp(packet::icmp_kind(v6, e.icmp_type, e.icmp_code)) else {
            return;
        };
        let Some(from) = e.offender else { return };
        errs.push(QueuedIcmp {
            id: probe_id(data),
            from,
            kind,
            len: m.len,
            kernel_ns: m.control.kernel_ns,
        });
    });
    (errs, r)
}

/// An answer to probe `id` (not a TCP segment), timed by the kernel's receive stamp when there
/// is one.
fn response(
    id: u16,
    from: IpAddr,
    kind: ReplyKind,
    ttl: Option<u8>,
    size: usize,
    kernel_ns: Option<u64>,
) -> Response {
    Response {
        id,
        from,
        kind,
        tcp_flags: None,
        ttl,
        size,
        rx_ns: kernel_ns.unwrap_or_else(realtime_ns),
        rx_kernel: kernel_ns.is_some(),
    }
}

fn raw_socket(v6: bool, proto: libc::c_int, what: &str) -> Result<Socket, ProbeError> {
    sys::socket(v6, Type::RAW, proto).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => privilege_error(what),
        _ => ProbeError::io(format!("raw socket for {what}"), e),
    })
}

/// The error for a mode that needs CAP_NET_RAW.
pub fn privilege_error(what: &str) -> ProbeError {
    ProbeError::Privilege(MissingPrivilege {
        what: what.to_string(),
        capability: "CAP_NET_RAW (a raw socket)".into(),
        remedy: "run as root or `sudo setcap cap_net_raw+ep $(command -v latscope)`; without it \
                 --connect and --udp work, and --icmp where net.ipv4.ping_group_range allows"
            .into(),
    })
}

/// Whether this process may open raw sockets (CAP_NET_RAW in effect), tried for real.
pub fn have_raw(v6: bool) -> bool {
    let proto = if v6 {
        libc::IPPROTO_ICMPV6
    } else {
        libc::IPPROTO_ICMP
    };
    sys::socket(v6, Type::RAW, proto).is_ok()
}

fn map_icmp(kind: IcmpKind) -> Option<ReplyKind> {
    match kind {
        IcmpKind::EchoReply => Some(ReplyKind::EchoReply),
        IcmpKind::TimeExceeded => Some(ReplyKind::TimeExceeded),
        IcmpKind::PortUnreachable => Some(ReplyKind::PortUnreachable),
        IcmpKind::Prohibited => Some(ReplyKind::Prohibited),
        IcmpKind::HostUnreachable => Some(ReplyKind::HostUnreachable),
        IcmpKind::NetUnreachable => Some(ReplyKind::NetUnreachable),
        IcmpKind::ProtocolUnreachable => Some(ReplyKind::ProtocolUnreachable),
        IcmpKind::Unreachable(_) => Some(ReplyKind::Unreachable),
        IcmpKind::Other(..) => None,
    }
}

/// Read every queued ICMP message of a raw ICMP socket; `matcher` maps a parsed message to a
/// probe id.
fn read_raw_icmp(
    fd: &Socket,
    v6: bool,
    buf: &mut [u8],
    out: &mut Vec<Response>,
    mut matcher: impl FnMut(&packet::IcmpMessage<'_>, IpAddr) -> Option<u16>,
) -> io::Result<()> {
    while let Some(m) = sys::recv_msg(fd, buf, false)? {
        let data = &buf[..m.len.min(buf.len())];
        let (icmp, from, ttl) = if v6 {
            match m.from {
                Some(a) => (data, a.ip(), m.control.ttl),
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
            out.push(response(id, from, kind, ttl, m.len, m.control.kernel_ns));
        }
    }
    Ok(())
}

/// Read every datagram queued on a connected UDP or ping socket; `answer` names the probe a
/// datagram answers and how (None: not an answer). An ICMP error about an earlier probe is
/// reported once on the normal queue too: it is skipped here (the error queue has it).
fn read_datagrams(
    fd: &Socket,
    buf: &mut [u8],
    dst: IpAddr,
    out: &mut Vec<Response>,
    mut answer: impl FnMut(&[u8]) -> Option<(u16, ReplyKind)>,
) -> io::Result<()> {
    loop {
        let m = match sys::recv_msg(fd, buf, false) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
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
        let Some((id, kind)) = answer(&buf[..m.len.min(buf.len())]) else {
            continue;
        };
        let from = m.from.map_or(dst, |a| a.ip());
        out.push(response(
            id,
            from,
            kind,
            m.control.ttl,
            m.len,
            m.control.kernel_ns,
        ));
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
        (realtime_ns() as u32) ^ std::process::id()
    }
}

/// The errors a datagram socket reports once after an ICMP error about an earlier packet.
fn is_reported_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EPROTO)
    )
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

//! ICMP echo probes: ping sockets, or raw sockets.

use super::*;

/// ICMP echo probes: an unprivileged ping socket (SOCK_DGRAM/IPPROTO_ICMP, allowed by
/// net.ipv4.ping_group_range) when possible, else a raw socket.
pub struct IcmpProber {
    v6: bool,
    fd: Socket,
    raw: bool,
    ident: u16,
    size: usize,
    dst: IpAddr,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
    held: Vec<Response>,
}

impl IcmpProber {
    /// Echo probes to `dst` with `size` payload bytes; `kernel_ts` asks for kernel timestamps.
    pub fn new(dst: IpAddr, size: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let proto = if v6 {
            libc::IPPROTO_ICMPV6
        } else {
            libc::IPPROTO_ICMP
        };
        let (fd, raw) = match sys::socket(v6, Type::DGRAM, proto) {
            Ok(fd) => (fd, false),
            Err(_) => match sys::socket(v6, Type::RAW, proto) {
                Ok(fd) => (fd, true),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    return Err(ProbeError::Privilege(MissingPrivilege {
                        what: "--icmp (ICMP echo)".into(),
                        capability: "CAP_NET_RAW, or a group in net.ipv4.ping_group_range".into(),
                        remedy: "run as root, or `sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"` \
                                 for unprivileged ping sockets; --connect and --udp work without either"
                            .into(),
                    }));
                }
                Err(e) => return Err(ProbeError::io("ICMP socket", e)),
            },
        };
        let ident = if raw {
            (random_u32() & 0xffff) as u16
        } else {
            // The kernel uses the socket's "port" as the echo id.
            fd.connect(&SocketAddr::new(dst, 0).into())
                .map_err(|e| unreachable(dst, e))?;
            sys::local_port(&fd).map_err(|e| ProbeError::io("getsockname", e))?
        };
        if raw {
            // Echo replies to us, destination unreachable, time exceeded: nothing else.
            let _ = sys::restrict_icmp(&fd, v6, if v6 { &[129, 1, 3] } else { &[0, 3, 11] });
            if sys::attach_echo_filter(&fd, v6, ident).is_ok() {
                let mut scratch = [0u8; 64];
                while let Ok(Some(_)) = sys::recv_msg(&fd, &mut scratch, false) {}
            }
        } else {
            msg::enable_recv_err(fd.as_raw_fd(), v6)
                .map_err(|e| ProbeError::io("IP_RECVERR", e))?;
        }
        let _ = msg::enable_recv_ttl(fd.as_raw_fd(), v6);
        let ts = if kernel_ts {
            msg::enable_timestamps(fd.as_raw_fd())
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
            book: TxBook::new(ts),
            ttl: None,
            buf: vec![0u8; 65536],
            held: Vec::new(),
        })
    }

    /// Read the error queue: TX timestamps into the book, ICMP errors (ping sockets) into `held`.
    fn drain(&mut self) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let (errs, r) = drain_icmp_errors(&self.fd, &mut self.book, &mut buf, self.v6, |data| {
            packet::parse_echo(data).map(|(_, seq)| seq)
        });
        self.buf = buf;
        let answers = errs.iter().filter_map(|q| Some(q.response(q.id?, 0)));
        self.held.extend(answers);
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
        let to = if self.raw {
            Some(SocketAddr::new(self.dst, 0))
        } else {
            // An ICMP error about an earlier probe sets the socket error, which fails the next
            // send (ping_err in net/ipv4/ping.c): reading the error queue clears it.
            let _ = self.drain();
            None
        };
        let t = realtime_ns();
        match sys::send_to(&self.fd, &p, to) {
            Ok(_) => {}
            Err(e) if !self.raw && is_reported_icmp_error(&e) => {
                let _ = self.drain();
                sys::send_to(&self.fd, &p, to).map_err(|e| send_error(self.dst, e))?;
            }
            Err(e) => return Err(send_error(self.dst, e)),
        }
        self.book.sent(id, t);
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        if self.held.is_empty() {
            poll::readable(&[self.fd.as_raw_fd()], timeout)
                .map_err(|e| ProbeError::io("poll", e))?;
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
                read_datagrams(&self.fd, &mut buf, dst, out, |data| {
                    let msg = packet::parse_icmp(v6, data)?;
                    let (IcmpKind::EchoReply, Some((_, seq))) = (msg.kind, msg.echo) else {
                        return None;
                    };
                    Some((seq, ReplyKind::EchoReply))
                })
            })
        };
        self.buf = buf;
        r.map_err(|e| ProbeError::io("receiving", e))
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Icmp
    }

    fn book(&self) -> Option<&TxBook> {
        Some(&self.book)
    }

    fn book_mut(&mut self) -> Option<&mut TxBook> {
        Some(&mut self.book)
    }

    fn read_tx_stamps(&mut self) {
        let _ = self.drain();
    }
}

//! TCP SYN probes from a raw socket.

use super::*;

/// TCP SYN probes from a raw socket. Source ports are reserved by binding (never listening)
/// TCP sockets, so no other program uses them and the kernel, finding no connection, answers
/// every SYN-ACK with a RST: no half-open connection stays on the target.
pub struct SynProber {
    v6: bool,
    src: IpAddr,
    dst: IpAddr,
    dport: u16,
    sports: Vec<u16>,
    _reserved: Vec<Socket>,
    seq_base: u32,
    tcp: Socket,
    icmp: Socket,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
}

impl SynProber {
    /// `ports` source ports (1 for a trace: the flow must not change).
    pub fn new(dst: IpAddr, dport: u16, ports: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let tcp = raw_socket(v6, libc::IPPROTO_TCP, "--syn (TCP SYN probes)")?;
        // Best effort: without the filter every TCP segment is copied to us and matched below.
        if sys::attach_tcp_filter(&tcp, dst, dport).is_ok() {
            // Drop what was queued before the filter applied.
            let mut scratch = [0u8; 64];
            while let Ok(Some(_)) = sys::recv_msg(&tcp, &mut scratch, false) {}
        }
        let icmp = raw_socket(
            v6,
            if v6 {
                libc::IPPROTO_ICMPV6
            } else {
                libc::IPPROTO_ICMP
            },
            "--syn",
        )?;
        // Only errors about our probes matter: destination unreachable, time exceeded.
        let _ = sys::restrict_icmp(&icmp, v6, if v6 { &[1, 3] } else { &[3, 11] });
        let src = sys::source_for(dst).map_err(|e| unreachable(dst, e))?;
        let mut sports = Vec::new();
        let mut reserved = Vec::new();
        for _ in 0..ports.max(1) {
            let s =
                sys::socket(v6, Type::STREAM, 0).map_err(|e| ProbeError::io("TCP socket", e))?;
            s.bind(&SocketAddr::new(src, 0).into())
                .map_err(|e| ProbeError::io("reserving a source port", e))?;
            sports.push(sys::local_port(&s).map_err(|e| ProbeError::io("getsockname", e))?);
            reserved.push(s);
        }
        let ts = if kernel_ts {
            msg::enable_timestamps(tcp.as_raw_fd())
        } else {
            TsMode::None
        };
        if kernel_ts {
            msg::enable_timestamps(icmp.as_raw_fd());
        }
        if v6 {
            let _ = msg::enable_recv_ttl(tcp.as_raw_fd(), true);
            let _ = msg::enable_recv_ttl(icmp.as_raw_fd(), true);
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
            book: TxBook::new(ts),
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
        let t = realtime_ns();
        sys::send_to(&self.tcp, &seg, Some(SocketAddr::new(self.dst, 0)))
            .map_err(|e| send_error(self.dst, e))?;
        self.book.sent(id, t);
        let book = &mut self.book;
        let _ = drain_errqueue(&self.tcp, book, &mut self.buf, |_, _| {});
        Ok(())
    }

    fn recv(&mut self, timeout: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
        poll::readable(&[self.tcp.as_raw_fd(), self.icmp.as_raw_fd()], timeout)
            .map_err(|e| ProbeError::io("poll", e))?;
        let _ = drain_errqueue(&self.tcp, &mut self.book, &mut self.buf, |_, _| {});
        let mut buf = std::mem::take(&mut self.buf);
        let r = (|| -> io::Result<()> {
            while let Some(m) = sys::recv_msg(&self.tcp, &mut buf, false)? {
                let data = &buf[..m.len.min(buf.len())];
                let (from, seg_bytes, ttl) = if self.v6 {
                    match m.from {
                        Some(a) => (a.ip(), data, m.control.ttl),
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
                    rx_ns: m.control.kernel_ns.unwrap_or_else(realtime_ns),
                    rx_kernel: m.control.kernel_ns.is_some(),
                });
            }
            let (dst, dport, sports, base) = (self.dst, self.dport, &self.sports, self.seq_base);
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

    fn mode(&self) -> ProbeMode {
        ProbeMode::Syn
    }

    fn book(&self) -> Option<&TxBook> {
        Some(&self.book)
    }

    fn book_mut(&mut self) -> Option<&mut TxBook> {
        Some(&mut self.book)
    }

    fn read_tx_stamps(&mut self) {
        let _ = drain_errqueue(&self.tcp, &mut self.book, &mut self.buf, |_, _| {});
    }
}

//! UDP probes: latscope serve's echo, ICMP port unreachable, time exceeded via IP_RECVERR.

use super::*;

/// UDP probes from one connected socket with a constant 4-tuple (and constant checksum). The
/// destination answers with latscope serve's echo, or ICMP port unreachable; routers with time
/// exceeded, which the kernel queues on the socket's error queue (IP_RECVERR) — no privilege.
pub struct UdpProber {
    v6: bool,
    fd: Socket,
    size: usize,
    book: TxBook,
    ttl: Option<u8>,
    buf: Vec<u8>,
    dst: IpAddr,
    /// ICMP errors read from the error queue, not yet returned.
    held: Vec<Response>,
}

impl UdpProber {
    /// Probes to `dst`:`port` with `size` payload bytes; `kernel_ts` asks for kernel timestamps.
    pub fn new(dst: IpAddr, port: u16, size: usize, kernel_ts: bool) -> Result<Self, ProbeError> {
        let v6 = dst.is_ipv6();
        let fd = sys::socket(v6, Type::DGRAM, 0).map_err(|e| ProbeError::io("UDP socket", e))?;
        fd.connect(&SocketAddr::new(dst, port).into())
            .map_err(|e| unreachable(dst, e))?;
        msg::enable_recv_err(fd.as_raw_fd(), v6).map_err(|e| ProbeError::io("IP_RECVERR", e))?;
        let _ = msg::enable_recv_ttl(fd.as_raw_fd(), v6);
        let ts = if kernel_ts {
            msg::enable_timestamps(fd.as_raw_fd())
        } else {
            TsMode::None
        };
        Ok(UdpProber {
            v6,
            fd,
            size,
            book: TxBook::new(ts),
            ttl: None,
            buf: vec![0u8; 65536],
            dst,
            held: Vec::new(),
        })
    }

    /// Read the error queue: TX timestamps into the book, ICMP errors into `held`.
    fn drain(&mut self) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let (errs, r) = drain_icmp_errors(&self.fd, &mut self.book, &mut buf, self.v6, |data| {
            packet::parse_udp_probe(data, packet::LSP_ECHO_REQUEST)
        });
        self.buf = buf;
        for q in errs {
            // A router that quotes only 8 bytes leaves no id: the oldest waiting probe it is.
            let Some(id) = q.id.or_else(|| self.book.oldest()) else {
                continue;
            };
            // The quote starts after the UDP header the kernel strips.
            self.held.push(q.response(id, 8));
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
        // Read queued ICMP errors first: that clears the socket error, which would otherwise
        // fail this send with ECONNREFUSED.
        let _ = self.drain();
        let t = realtime_ns();
        match sys::send_to(&self.fd, &p, None) {
            Ok(_) => {}
            // An ICMP error that arrived since the drain, reported on this send: the probe did
            // not leave; read the error and resend once.
            Err(e) if is_reported_icmp_error(&e) => {
                let _ = self.drain();
                sys::send_to(&self.fd, &p, None).map_err(|e| send_error(self.dst, e))?;
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
        let r = self.drain();
        out.append(&mut self.held);
        let mut buf = std::mem::take(&mut self.buf);
        let r2 = read_datagrams(&self.fd, &mut buf, self.dst, out, |data| {
            let id = packet::parse_udp_probe(data, packet::LSP_ECHO_REPLY)?;
            Some((id, ReplyKind::UdpEcho))
        });
        self.buf = buf;
        r.and(r2).map_err(|e| ProbeError::io("receiving", e))
    }

    fn mode(&self) -> ProbeMode {
        ProbeMode::Udp
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

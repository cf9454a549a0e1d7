//! TCP connect() probes.

use super::*;

/// TCP connect() probes: a non-blocking connect per probe, closed with RST (SO_LINGER 0) so
/// floods leave no TIME_WAIT behind. The RTT of a completed handshake is the kernel's own
/// sample (TCP_INFO); refusals and kernels without it are timed with the user-space clock.
pub struct ConnectProber {
    dst: SocketAddr,
    pending: Vec<(u16, Socket)>,
    tx: HashMap<u16, (u64, bool)>,
    done: Vec<Response>,
}

impl ConnectProber {
    /// Probes to `dst`:`port`.
    pub fn new(dst: IpAddr, port: u16) -> Self {
        ConnectProber {
            dst: SocketAddr::new(dst, port),
            pending: Vec::new(),
            tx: HashMap::new(),
            done: Vec::new(),
        }
    }

    fn finish(&mut self, id: u16, err: Option<io::Error>, kernel_rtt_us: Option<u32>) {
        let mut rx_ns = realtime_ns();
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
            Some(libc::EHOSTUNREACH) => ReplyKind::HostUnreachable,
            Some(libc::ENETUNREACH) => ReplyKind::NetUnreachable,
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
        let fd = sys::socket(self.dst.is_ipv6(), Type::STREAM, 0)
            .map_err(|e| ProbeError::io("TCP socket", e))?;
        let _ = latscope_sys::sockopt::set_nodelay(fd.as_raw_fd(), true);
        let _ = sys::set_linger_zero(&fd);
        let t = realtime_ns();
        self.tx.insert(id, (t, false));
        match fd.connect(&self.dst.into()) {
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
            let rev = poll::writable(&fds, timeout).map_err(|e| ProbeError::io("poll", e))?;
            let mut i = 0;
            let mut k = 0;
            while i < self.pending.len() {
                if rev[k] != 0 {
                    let (id, fd) = self.pending.remove(i);
                    let err = fd.take_error().unwrap_or_else(Some);
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

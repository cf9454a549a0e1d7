//! Many UDP datagrams per system call, for stream tests: a paced sender hands the kernel a whole
//! batch at once (one `sendmsg` with `UDP_SEGMENT` — UDP GSO, Linux 4.18 — or one `sendmmsg`
//! where GSO is missing or refused), and a receiver takes everything queued in one `recvmmsg`,
//! asking for coalesced datagrams (`UDP_GRO`, Linux 5.0) where the kernel offers them.
//!
//! Kernel features are probed when a socket is set up and dropped at the first refusal: a kernel
//! or route without GSO gets `sendmmsg`, one without GRO gets one datagram per message.
//!
//! Timing: datagrams that one call receives share one arrival time (the call's return), and a
//! GRO message is many datagrams that the kernel delivered together. Only the first datagram of
//! each receive call has an arrival time of its own; see [`crate::flow::UdpRx`] for what the
//! jitter is then computed from.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use latscope_sys::mem::PageAligned;
use latscope_sys::msg;
use latscope_sys::sockopt::{get_int, set_int};
use socket2::SockAddr;

/// Most datagrams one GSO send may carry (the kernel's UDP_MAX_SEGMENTS).
const MAX_SEGMENTS: usize = 64;
/// Most payload bytes of one GSO send: a datagram's largest IPv4 payload (65 535 − 20 − 8).
const MAX_GSO_PAYLOAD: usize = 65_507;
/// Most datagrams in one `sendmmsg` batch or one `recvmmsg` call.
pub const MAX_BATCH: usize = MAX_SEGMENTS;
/// The largest UDP payload: the size of one receive slot.
const SLOT_BYTES: usize = 65_536;

/// How many datagrams of `len` bytes one batched send may carry.
pub fn max_batch(len: usize) -> usize {
    (MAX_GSO_PAYLOAD / len.max(1)).clamp(1, MAX_SEGMENTS)
}

/// Whether the kernel segments UDP for this socket (UDP_SEGMENT can be read back).
fn gso_available(fd: RawFd) -> bool {
    get_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok()
}

/// Sends batches of equal-sized datagrams on one socket.
#[derive(Debug)]
pub struct BatchSender {
    fd: RawFd,
    dest: Option<SockAddr>,
    gso: bool,
}

impl BatchSender {
    /// A sender on `fd` (connected when `dest` is None); probes GSO.
    pub fn new(fd: RawFd, dest: Option<SocketAddr>) -> BatchSender {
        BatchSender {
            fd,
            dest: dest.map(SockAddr::from),
            gso: gso_available(fd),
        }
    }

    /// Whether sends go out as one GSO super-datagram.
    pub fn uses_gso(&self) -> bool {
        self.gso
    }

    /// Send `buf` as datagrams of `seg` bytes each (`buf.len()` a multiple of `seg`, at most
    /// [`max_batch`] of them). Returns how many datagrams the kernel took.
    pub fn send(&mut self, buf: &[u8], seg: usize) -> io::Result<usize> {
        let n = buf.len() / seg.max(1);
        if n == 0 {
            return Ok(0);
        }
        if self.gso && n > 1 {
            match self.send_gso(buf, seg) {
                Ok(()) => return Ok(n),
                // The route or device cannot segment (a datagram above the path MTU, IPsec,
                // no checksum offload): batch with sendmmsg from now on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                    ) =>
                {
                    self.gso = false;
                }
                Err(e) => return Err(e),
            }
        }
        self.send_mmsg(buf, seg)
    }

    /// The destination's address and length for a msghdr (null when connected).
    fn name(&self) -> (*mut libc::c_void, libc::socklen_t) {
        match &self.dest {
            Some(a) => (a.as_ptr() as *mut libc::c_void, a.len()),
            None => (std::ptr::null_mut(), 0),
        }
    }

    fn send_gso(&self, buf: &[u8], seg: usize) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // Room for one cmsg carrying a u16, aligned as the kernel expects.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        (msg.msg_name, msg.msg_namelen) = self.name();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        // SAFETY: msg_control points at `control`, which is at least CMSG_SPACE(2) bytes and
        // 8-aligned, so CMSG_FIRSTHDR is non-null and CMSG_DATA has room for the u16.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg as u16);
        }
        // SAFETY: every pointer in `msg` refers to live buffers for the duration of the call.
        let r = unsafe { libc::sendmsg(self.fd, &msg, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn send_mmsg(&self, buf: &[u8], seg: usize) -> io::Result<usize> {
        let n = (buf.len() / seg).min(MAX_BATCH);
        // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        let (name, namelen) = self.name();
        for i in 0..n {
            iov[i].iov_base = buf[i * seg..].as_ptr() as *mut libc::c_void;
            iov[i].iov_len = seg;
            msgs[i].msg_hdr.msg_name = name;
            msgs[i].msg_hdr.msg_namelen = namelen;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `n` headers point at live iovecs over `buf` and at `dest`.
        let r = unsafe { libc::sendmmsg(self.fd, msgs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}

/// Ask the kernel to hand over coalesced datagrams (UDP_GRO); false where it cannot.
pub fn enable_gro(fd: RawFd) -> bool {
    set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Raise a UDP socket's receive buffer to at least `bytes` (never lower it): past the
/// `net.core.rmem_max` cap when the process may (SO_RCVBUFFORCE, CAP_NET_ADMIN).
pub fn raise_rcvbuf(fd: RawFd, bytes: usize) {
    let want = bytes.min(i32::MAX as usize / 2) as i32;
    // The kernel reports double what was asked (its bookkeeping overhead).
    let have = get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0) / 2;
    if have >= want {
        return;
    }
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want).is_err() {
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want);
    }
}

/// The receive buffer a UDP flow of `rate_bps` needs: 100 ms of its bytes (a receiver that a
/// busy machine deschedules for that long loses nothing), between 1 and 64 MiB.
pub fn rcvbuf_for_rate(rate_bps: f64) -> usize {
    (rate_bps / 8.0 / 10.0).clamp(1024.0 * 1024.0, 64.0 * 1024.0 * 1024.0) as usize
}

/// One received message: one datagram, or several that GRO coalesced (`seg` bytes each, the
/// last possibly shorter).
#[derive(Debug)]
pub struct Message<'a> {
    /// The payload.
    pub data: &'a [u8],
    /// The size of each datagram in `data` (its length when not coalesced).
    pub seg: usize,
    /// The sender.
    pub from: Option<SocketAddr>,
}

impl<'a> Message<'a> {
    /// The datagrams of this message.
    pub fn datagrams(&self) -> std::slice::Chunks<'a, u8> {
        self.data.chunks(self.seg.max(1))
    }
}

/// Receives up to `slots` messages per call into buffers it owns.
pub struct BatchReceiver {
    /// Page-aligned: see [`PageAligned`] (the kernel's copy into a misaligned buffer is slow).
    bufs: PageAligned,
    slots: usize,
    got: usize,
    lens: [usize; MAX_BATCH],
    segs: [usize; MAX_BATCH],
    froms: Vec<libc::sockaddr_storage>,
    fromlens: [libc::socklen_t; MAX_BATCH],
    gro: bool,
}

impl std::fmt::Debug for BatchReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchReceiver")
            .field("slots", &self.slots)
            .field("gro", &self.gro)
            .finish()
    }
}

impl BatchReceiver {
    /// A receiver of `slots` (1..=[`MAX_BATCH`]) messages per call on `fd`, with GRO where the
    /// kernel has it.
    pub fn new(fd: RawFd, slots: usize) -> BatchReceiver {
        let slots = slots.clamp(1, MAX_BATCH);
        BatchReceiver {
            bufs: PageAligned::zeroed(slots * SLOT_BYTES),
            slots,
            got: 0,
            lens: [0; MAX_BATCH],
            segs: [0; MAX_BATCH],
            // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
            froms: vec![unsafe { zeroed() }; slots],
            fromlens: [0; MAX_BATCH],
            gro: enable_gro(fd),
        }
    }

    /// Whether the kernel coalesces datagrams for this receiver.
    pub fn uses_gro(&self) -> bool {
        self.gro
    }

    /// Wait for at least one message (as long as the socket's receive timeout allows) and take
    /// every one already queued, up to the slots. Returns how many arrived.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        const CONTROL: usize = 32;
        // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid value.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        let mut control = [[0u64; CONTROL / 8]; MAX_BATCH];
        let base = self.bufs.as_mut_ptr();
        for i in 0..self.slots {
            // SAFETY: slot i lies inside `bufs` (slots × SLOT_BYTES bytes).
            iov[i].iov_base = unsafe { base.add(i * SLOT_BYTES) } as *mut libc::c_void;
            iov[i].iov_len = SLOT_BYTES;
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = &mut self.froms[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_control = control[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CONTROL;
        }
        // SAFETY: each header points at its own slot, address and control buffer, all live for
        // the call; MSG_WAITFORONE blocks only for the first message.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                self.slots as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            self.got = 0;
            return Err(io::Error::last_os_error());
        }
        self.got = r as usize;
        for (i, m) in msgs.iter().take(self.got).enumerate() {
            let len = m.msg_len as usize;
            self.lens[i] = len;
            self.fromlens[i] = m.msg_hdr.msg_namelen;
            // SAFETY: recvmmsg filled this header's control buffer and set its length.
            let control = unsafe { msg::parse_control(&m.msg_hdr) };
            self.segs[i] = control.gro_size.unwrap_or(len);
        }
        Ok(self.got)
    }

    /// Message `i` of the last [`recv`](Self::recv).
    pub fn message(&self, i: usize) -> Option<Message<'_>> {
        if i >= self.got {
            return None;
        }
        let from = msg::socket_addr(&self.froms[i], self.fromlens[i]);
        Some(Message {
            data: &self.bufs[i * SLOT_BYTES..i * SLOT_BYTES + self.lens[i]],
            seg: self.segs[i],
            from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.connect(rx.local_addr().expect("addr")).expect("connect");
        rx.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        (tx, rx)
    }

    /// Every datagram of a batch arrives whole and in order, whichever of GSO/GRO the kernel has.
    fn round_trip(gso: bool) {
        let (tx, rx) = pair();
        let mut s = BatchSender::new(tx.as_raw_fd(), None);
        s.gso &= gso;
        let seg = 1400;
        let n = max_batch(seg);
        assert_eq!(n, 46);
        let buf: Vec<u8> = (0..n * seg).map(|i| (i / seg) as u8).collect();
        assert_eq!(s.send(&buf, seg).expect("send"), n);
        let mut r = BatchReceiver::new(rx.as_raw_fd(), 8);
        let mut seen = Vec::new();
        while seen.len() < n {
            let got = r.recv(rx.as_raw_fd()).expect("recv");
            for i in 0..got {
                let m = r.message(i).expect("message");
                assert_eq!(m.from, Some(tx.local_addr().expect("addr")));
                for d in m.datagrams() {
                    assert_eq!(d.len(), seg);
                    assert!(d.iter().all(|b| *b == d[0]));
                    seen.push(d[0]);
                }
            }
        }
        assert_eq!(seen, (0..n as u8).collect::<Vec<_>>());
    }

    #[test]
    fn batches_arrive_whole_with_gso() {
        round_trip(true);
    }

    #[test]
    fn batches_arrive_whole_with_sendmmsg() {
        round_trip(false);
    }

    #[test]
    fn unconnected_sender_reaches_its_destination() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        rx.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mut s = BatchSender::new(tx.as_raw_fd(), rx.local_addr().ok());
        assert_eq!(s.send(&[7u8; 300], 100).expect("send"), 3);
        let mut r = BatchReceiver::new(rx.as_raw_fd(), 4);
        let mut total = 0;
        while total < 3 {
            let got = r.recv(rx.as_raw_fd()).expect("recv");
            total += (0..got)
                .filter_map(|i| r.message(i))
                .map(|m| m.datagrams().count())
                .sum::<usize>();
        }
        assert_eq!(total, 3);
    }

    #[test]
    fn rcvbuf_grows_and_never_shrinks() {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        raise_rcvbuf(s.as_raw_fd(), 4 << 20);
        let big = get_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get");
        raise_rcvbuf(s.as_raw_fd(), 64 << 10);
        let after = get_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get");
        assert_eq!(big, after);
        assert_eq!(rcvbuf_for_rate(500e6), 6_250_000);
        assert_eq!(rcvbuf_for_rate(1e3), 1 << 20);
    }
}

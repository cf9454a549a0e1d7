//! A minimal netlink client: open a socket, send one dump request, collect the replies, and walk
//! route attributes. Enough for NETLINK_SOCK_DIAG (inet_diag) and NETLINK_ROUTE (RTM_GETROUTE);
//! hand-written so the crate needs nothing but libc.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{InspectError, Result};

/// `struct nlmsghdr` is 16 bytes; every message and attribute is 4-byte aligned.
pub const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Request flags.
pub const NLM_F_REQUEST: u16 = 0x1;
/// Dump flags (NLM_F_ROOT | NLM_F_MATCH): every object, not one.
pub const NLM_F_DUMP: u16 = 0x300;

/// Round up to the netlink alignment (4).
pub fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// An open netlink socket of one protocol.
#[derive(Debug)]
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

impl Netlink {
    /// Open a netlink socket for `protocol` (NETLINK_SOCK_DIAG, NETLINK_ROUTE, ...), in the
    /// network namespace of the calling thread.
    pub fn open(protocol: i32) -> Result<Self> {
        // SAFETY: plain socket(2) call; the returned fd is checked and then owned.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(InspectError::io(
                "opening a netlink socket",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Netlink { fd, seq: 1 })
    }

    /// Send a request (`msg_type`, `flags`, `payload` after the header) and collect every reply
    /// message's (type, payload) until NLMSG_DONE — or, without NLM_F_DUMP, the first reply.
    pub fn request(
        &mut self,
        msg_type: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Vec<(u16, Vec<u8>)>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let len = NLMSG_HDRLEN + payload.len();
        let mut msg = Vec::with_capacity(align4(len));
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&msg_type.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(payload);
        // SAFETY: an all-zero sockaddr_nl is valid; we set the family (destination: the kernel).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: msg and addr outlive the call; lengths are theirs.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(InspectError::io(
                "sending a netlink request",
                io::Error::last_os_error(),
            ));
        }
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: buf is valid for buf.len() bytes for the duration of the call.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(InspectError::io("reading a netlink reply", e));
            }
            let mut data = &buf[..n as usize];
            while data.len() >= NLMSG_HDRLEN {
                let mlen = u32_at(data, 0) as usize;
                let mtype = u16::from_ne_bytes([data[4], data[5]]);
                let mseq = u32_at(data, 8);
                if mlen < NLMSG_HDRLEN || mlen > data.len() {
                    return Err(InspectError::Malformed {
                        what: "netlink reply".into(),
                        detail: format!("message length {mlen} with {} bytes left", data.len()),
                    });
                }
                let body = &data[NLMSG_HDRLEN..mlen];
                data = &data[align4(mlen).min(data.len())..];
                if mseq != seq {
                    continue;
                }
                match mtype {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = if body.len() >= 4 {
                            i32::from_ne_bytes([body[0], body[1], body[2], body[3]])
                        } else {
                            0
                        };
                        if errno == 0 {
                            // An ACK.
                            return Ok(out);
                        }
                        return Err(InspectError::io(
                            "netlink request",
                            io::Error::from_raw_os_error(-errno),
                        ));
                    }
                    t => {
                        out.push((t, body.to_vec()));
                        if !dump {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }
}

/// Read a native-endian u32 at `off` (callers check bounds).
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Iterate route attributes (`struct rtattr`/`nlattr`: u16 len, u16 type, payload) in `b`,
/// yielding (type, payload). Stops at the first malformed attribute.
pub fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = b;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let ty = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let payload = &rest[4..len];
        rest = &rest[align4(len).min(rest.len())..];
        Some((ty, payload))
    })
}

/// Append one attribute to `out`.
pub fn push_attr(out: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len() + align4(len) - len, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_roundtrip() {
        let mut b = Vec::new();
        push_attr(&mut b, 4, b"cubic\0");
        push_attr(&mut b, 7, &42u32.to_ne_bytes());
        let v: Vec<_> = attrs(&b).collect();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], (4, &b"cubic\0"[..]));
        assert_eq!(v[1].0, 7);
        assert_eq!(u32_at(v[1].1, 0), 42);
    }

    #[test]
    fn attrs_stop_on_garbage() {
        let b = [200u8, 0, 1, 0, 0, 0];
        assert_eq!(attrs(&b).count(), 0);
    }
}

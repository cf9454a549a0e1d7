//! One request broken into phases, as `curl -w` and httpstat show it: DNS lookup, TCP connect,
//! TLS handshake, time to first byte, transfer.
//!
//! [`request_phases`] makes one HTTP/1.1 request on a fresh connection with blocking sockets
//! and reads CLOCK_MONOTONIC between the steps. Everything after the DNS lookup is bounded by
//! one deadline (`Options::timeout`), re-applied as the socket timeout before every blocking
//! call, so a server that trickles bytes cannot stretch it; the lookup itself is bounded by
//! the resolver's own timeouts (resolv.conf), as std offers no other.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use latscope_core::model::transfer::TransferLimits;
use latscope_sys::txstamp::Stamper;
use rustls::ClientConnection;

use crate::error::{HttpError, Phase};
use crate::handshake::HandshakeFailure;
use crate::head::HeadFacts;
use crate::parse::{ResponseParser, Step};
use crate::{Config, Options, sys};

/// Time of one request, phase by phase, in nanoseconds. The phases follow each other without
/// gaps, so they add up to [`Phases::total_ns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// The address the request went to.
    pub addr: SocketAddr,
    /// Name resolution (`getaddrinfo`); an IP literal takes microseconds.
    pub dns_ns: u64,
    /// TCP connect: `connect()` → established (every address tried, failed ones included).
    pub connect_ns: u64,
    /// TLS handshake: established → handshake complete; `None` for `http://`.
    pub tls_ns: Option<u64>,
    /// This client's own CPU over the TLS handshake (its thread's CPU time: the key exchange,
    /// the certificate chain's verification), ns; `None` for `http://`. The rest of the
    /// handshake beyond its round trips is the server's.
    pub tls_client_cpu_ns: Option<u64>,
    /// Request write started → first response byte: one round trip plus the server's time
    /// (httpstat's "server processing"; curl's `time_starttransfer - time_pretransfer`).
    pub ttfb_ns: u64,
    /// First → last response byte (the body's transfer; ~0 for a response in one segment).
    pub transfer_ns: u64,
    /// Status code of the final response.
    pub status: u16,
    /// Response body bytes (without chunk framing).
    pub body_bytes: u64,
    /// The client socket's side of who limited the response's transfer, read after the last
    /// byte: the window it advertised, its window scale and receive buffer (None where
    /// tcp_info is unreadable).
    pub limits: Option<TransferLimits>,
}

impl Phases {
    /// The whole request: the sum of the phases.
    pub fn total_ns(&self) -> u64 {
        self.dns_ns + self.connect_ns + self.tls_ns.unwrap_or(0) + self.ttfb_ns + self.transfer_ns
    }
}

/// Make one request as `o` describes (URL, method, headers, body, TLS options, `connect_to`,
/// `host`, `timeout`; the load options are ignored) on a fresh connection, and time its phases.
/// HTTP/1.1 only: `o.http2` is a usage error.
pub fn request_phases(o: &Options) -> Result<Phases, HttpError> {
    if o.http2 {
        return Err(HttpError::Config(
            "request phases are measured over HTTP/1.1 only".into(),
        ));
    }
    let cfg = Config::new(o)?;
    let deadline_ns = sys::monotonic_ns() + cfg.timeout_ns;
    let connect_start = sys::monotonic_ns();
    let (stream, addr) = connect(&cfg, deadline_ns)?;
    let connected = sys::monotonic_ns();
    let mut conn = Conn::new(stream, None, deadline_ns);
    let (tls_ns, tls_client_cpu_ns) = match &cfg.tls {
        Some(_) => {
            let cpu = sys::thread_cpu_ns();
            conn.start_tls(&cfg)?;
            (
                Some(sys::monotonic_ns() - connected),
                Some(sys::thread_cpu_ns().saturating_sub(cpu)),
            )
        }
        None => (None, None),
    };
    let sent = sys::monotonic_ns();
    conn.send(&cfg.request)?;
    let r = conn.response(cfg.head_request)?;
    let limits = latscope_sys::tcpinfo::limits(conn.stream.as_raw_fd())
        .ok()
        .map(|(_, l)| l);
    Ok(Phases {
        addr,
        dns_ns: cfg.resolve_ns,
        connect_ns: connected - connect_start,
        tls_ns,
        tls_client_cpu_ns,
        ttfb_ns: r.first_byte_ns.saturating_sub(sent),
        transfer_ns: r.last_byte_ns.saturating_sub(r.first_byte_ns),
        status: r.status,
        body_bytes: r.body_bytes,
        limits,
    })
}

/// Connect as RFC 8305 does: the resolved addresses raced (the next 250 ms after the previous,
/// or at once when one fails), the first to connect wins, all before the deadline.
pub(crate) fn connect(
    cfg: &Config,
    deadline_ns: u64,
) -> Result<(TcpStream, SocketAddr), HttpError> {
    let left = remaining(deadline_ns).map_err(|source| HttpError::Connect {
        addr: cfg.addr.to_string(),
        source,
    })?;
    let race = latscope_sys::happy::race_choice(
        &cfg.host,
        &cfg.addrs,
        cfg.resolve_ns,
        latscope_sys::happy::RaceConfig::with_timeout(left),
    );
    match race.stream {
        Some(s) => {
            let _ = s.set_nodelay(true);
            Ok((s, race.addr))
        }
        None => {
            let first = race.choice.attempts.first();
            Err(HttpError::Connect {
                addr: first.map_or_else(|| cfg.addr.to_string(), |a| a.addr.to_string()),
                source: first.map_or_else(
                    || io::ErrorKind::NotFound.into(),
                    latscope_sys::happy::attempt_error,
                ),
            })
        }
    }
}

/// Time left before `deadline_ns`, or a timeout error.
fn remaining(deadline_ns: u64) -> io::Result<Duration> {
    let now = sys::monotonic_ns();
    if now >= deadline_ns {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no answer within the timeout",
        ));
    }
    Ok(Duration::from_nanos(deadline_ns - now))
}

fn exchange(phase: Phase, source: io::Error) -> HttpError {
    HttpError::Exchange { phase, source }
}

/// What the response reading saw.
pub(crate) struct Received {
    pub(crate) first_byte_ns: u64,
    pub(crate) last_byte_ns: u64,
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    /// The server closes the connection after this response.
    pub(crate) close: bool,
    /// What the final response's head says (its first bytes read with httparse), when it
    /// parsed.
    pub(crate) facts: Option<HeadFacts>,
}

/// One read from a connection's socket: when it returned and how many bytes it carried (TLS
/// records included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// CLOCK_MONOTONIC, ns.
    pub at_ns: u64,
    /// Bytes read.
    pub bytes: u32,
}

/// Reads recorded per response at most; later ones are added to the last record (its time
/// moved on), so the bytes still add up.
const MAX_ARRIVALS: usize = 65_536;

/// Record a read of `n` bytes at `at_ns`.
pub(crate) fn record(a: &mut Vec<Arrival>, at_ns: u64, n: usize) {
    let bytes = u32::try_from(n).unwrap_or(u32::MAX);
    let full = a.len() >= MAX_ARRIVALS;
    match a.last_mut() {
        Some(last) if full => {
            last.at_ns = at_ns;
            last.bytes = last.bytes.saturating_add(bytes);
        }
        _ => a.push(Arrival { at_ns, bytes }),
    }
}

/// The socket as rustls and the response reader use it: plain reads and writes, or through a
/// [`Stamper`] that times each one with the kernel's timestamps.
struct Wire<'a> {
    stream: &'a TcpStream,
    stamper: Option<&'a mut Stamper>,
    /// Where each read's time and size go, when they are recorded.
    arrivals: Option<&'a mut Vec<Arrival>>,
}

impl Read for Wire<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.stamper.as_deref_mut() {
            Some(s) => s.recv(buf),
            None => (&*self.stream).read(buf),
        }?;
        if n > 0
            && let Some(a) = self.arrivals.as_deref_mut()
        {
            record(a, sys::monotonic_ns(), n);
        }
        Ok(n)
    }
}

impl Write for Wire<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.stamper.as_deref_mut() {
            Some(s) => s.send(buf),
            None => (&*self.stream).write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A blocking connection, plain or TLS, with one deadline for everything; its sends and
/// receives timed by `stamper` when there is one.
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    pub(crate) stamper: Option<Stamper>,
    pub(crate) tls: Option<ClientConnection>,
    pub(crate) deadline_ns: u64,
    /// When set, every read from the socket is recorded: when, and how many bytes (TLS
    /// records included).
    pub(crate) arrivals: Option<Vec<Arrival>>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, stamper: Option<Stamper>, deadline_ns: u64) -> Conn {
        Conn {
            stream,
            stamper,
            tls: None,
            deadline_ns,
            arrivals: None,
        }
    }

    /// For an https URL: the TLS handshake as `cfg` configures it.
    pub(crate) fn start_tls(&mut self, cfg: &Config) -> Result<(), HttpError> {
        if let Some((config, name)) = &cfg.tls {
            let tls = ClientConnection::new(config.clone(), name.clone())
                .map_err(|e| exchange(Phase::Tls, io::Error::other(e)))?;
            self.tls = Some(tls);
            self.handshake()?;
        }
        Ok(())
    }

    /// The connection taken apart for one blocking step, its socket bounded by the time left:
    /// the socket as a [`Wire`], the TLS session (if any) and the deadline, for the step's
    /// further calls (each one bounded again with [`bound`]).
    fn split(&mut self) -> io::Result<(Wire<'_>, Option<&mut ClientConnection>, u64)> {
        bound(&self.stream, self.deadline_ns)?;
        let wire = Wire {
            stream: &self.stream,
            stamper: self.stamper.as_mut(),
            arrivals: self.arrivals.as_mut(),
        };
        Ok((wire, self.tls.as_mut(), self.deadline_ns))
    }

    fn handshake(&mut self) -> Result<(), HttpError> {
        let addr = self.stream.peer_addr().map(|a| a.to_string());
        let err = |e: io::Error| match HandshakeFailure::of_io(&e, "http/1.1") {
            // The certificate refused, an alert: said for people, with the remedy.
            Some(failure) => HttpError::Handshake {
                addr: addr
                    .as_ref()
                    .map_or_else(|_| "the server".into(), Clone::clone),
                failure,
            },
            None => exchange(Phase::Tls, timed_out(e)),
        };
        while self.tls.as_ref().is_some_and(|t| t.is_handshaking()) {
            if let (mut wire, Some(tls), _) = self.split().map_err(err)? {
                tls.complete_io(&mut wire).map_err(err)?;
            }
        }
        Ok(())
    }

    pub(crate) fn send(&mut self, request: &[u8]) -> Result<(), HttpError> {
        let err = |e| exchange(Phase::Request, timed_out(e));
        let (mut wire, tls, deadline_ns) = self.split().map_err(err)?;
        match tls {
            Some(tls) => {
                tls.writer().write_all(request).map_err(err)?;
                while tls.wants_write() {
                    bound(wire.stream, deadline_ns).map_err(err)?;
                    tls.write_tls(&mut wire).map_err(err)?;
                }
                Ok(())
            }
            None => wire.write_all(request).map_err(err),
        }
    }

    /// Read response bytes into `buf` (plaintext for TLS); `Ok(0)` at end of file.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (mut wire, tls, deadline_ns) = self.split()?;
        let Some(tls) = tls else {
            return wire.read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            bound(wire.stream, deadline_ns)?;
            if tls.read_tls(&mut wire)? == 0 {
                // The peer closed without close_notify: end of the response stream.
                return Ok(0);
            }
            tls.process_new_packets().map_err(io::Error::other)?;
        }
    }

    /// Read and parse the response; times of its first and last bytes.
    pub(crate) fn response(&mut self, head_request: bool) -> Result<Received, HttpError> {
        let mut parser = ResponseParser::new(head_request);
        let mut pending: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut first_byte_ns = None;
        // The response's first bytes, for what its head says (see `crate::head`).
        let mut head: Vec<u8> = Vec::new();
        loop {
            let phase = if first_byte_ns.is_some() {
                Phase::Transfer
            } else {
                Phase::FirstByte
            };
            let n = self
                .read(&mut chunk)
                .map_err(|e| exchange(phase, timed_out(e)))?;
            let now = sys::monotonic_ns();
            let first = *first_byte_ns.get_or_insert(now);
            let done = if n == 0 {
                let r = parser.eof().map_err(|e| exchange(phase, invalid(e)))?;
                Some(r)
            } else {
                let room = crate::parse::MAX_HEAD_BYTES.saturating_sub(head.len());
                head.extend_from_slice(&chunk[..n.min(room)]);
                pending.extend_from_slice(&chunk[..n]);
                match parser
                    .feed(&pending)
                    .map_err(|e| exchange(phase, invalid(e)))?
                {
                    (_, Step::Complete(r)) => Some(r),
                    (used, Step::NeedMore) => {
                        pending.drain(..used);
                        None
                    }
                }
            };
            if let Some(r) = done {
                return Ok(Received {
                    first_byte_ns: first,
                    last_byte_ns: now,
                    status: r.status,
                    body_bytes: r.body_bytes,
                    close: r.close,
                    facts: crate::head::facts(&head),
                });
            }
        }
    }
}

/// Apply the time left before `deadline_ns` as the socket's read and write timeout.
fn bound(stream: &TcpStream, deadline_ns: u64) -> io::Result<()> {
    let left = remaining(deadline_ns)?;
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))
}

/// A socket timeout (EAGAIN from SO_RCVTIMEO) as the timeout it is.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "no answer within the timeout")
    } else {
        e
    }
}

fn invalid(e: crate::parse::ParseError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_bounded_and_keep_their_bytes() {
        let mut a = Vec::new();
        for i in 0..(MAX_ARRIVALS + 10) {
            record(&mut a, i as u64, 100);
        }
        assert_eq!(a.len(), MAX_ARRIVALS);
        let total: u64 = a.iter().map(|x| u64::from(x.bytes)).sum();
        assert_eq!(total, 100 * (MAX_ARRIVALS as u64 + 10));
        assert_eq!(a.last().unwrap().at_ns, MAX_ARRIVALS as u64 + 9);
    }
}

//! A client that keeps what a browser keeps between requests — its connection (HTTP
//! keep-alive) and its TLS sessions (resumption) — to time a first request against the ones
//! after it: what the server lets a client reuse, and what each reuse saves. diagnose's
//! round-trip step runs it.
//!
//! Blocking sockets and one deadline per call, as [`crate::phases`]; each connection records
//! every read of a response (when, how many bytes), so the rounds of a transfer — the flights
//! a sender's congestion window lets out one round trip apart — can be told apart.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use latscope_core::model::round_trips::{TlsHandshake, TlsKind, TlsVersion};
use latscope_core::model::sockets::TcpStats;
use latscope_core::model::transfer::TransferLimits;
use rustls::{HandshakeKind, ProtocolVersion};

use crate::error::{HttpError, Phase};
use crate::head::HeadFacts;
pub use crate::phases::Arrival;
use crate::phases::{Conn, connect};
use crate::{Config, Options, sys};

/// A client: one resolved target, one request, one TLS configuration whose session cache its
/// connections share (a second connection offers the session the first one got).
pub struct Client {
    cfg: Config,
}

/// A connection's set-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// The address connected to.
    pub addr: SocketAddr,
    /// `connect()` → established, ns.
    pub connect_ns: u64,
    /// The TLS handshake, for https.
    pub tls: Option<TlsHandshake>,
}

/// One request and its response on a [`Connection`].
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// When the request's first byte was written (CLOCK_MONOTONIC, ns).
    pub sent_ns: u64,
    /// Request written → first response byte, ns.
    pub ttfb_ns: u64,
    /// First → last response byte, ns.
    pub transfer_ns: u64,
    /// Status code of the final response.
    pub status: u16,
    /// Response body bytes.
    pub body_bytes: u64,
    /// What the response's head says, when it parsed.
    pub head: Option<HeadFacts>,
    /// The connection ends with this response: the server said so (`Connection: close`,
    /// HTTP/1.0), or the body is delimited by the close.
    pub closes: bool,
    /// The reads of the response from the socket, in order.
    pub arrivals: Vec<Arrival>,
    /// The client socket's tcp_info after the response (its RTT, RTO, the peer's MSS).
    pub tcp: Option<TcpStats>,
    /// The client socket's side of who limited the transfer (its window, scale, buffer).
    pub limits: Option<TransferLimits>,
}

/// What became of an idle connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Still open after the whole pause.
    Open,
    /// The server ended it (FIN, reset, or its TLS close_notify) this long into the pause.
    Closed {
        /// Since the pause began, ns.
        after_ns: u64,
    },
}

/// A connection of a [`Client`].
pub struct Connection {
    conn: Conn,
    head_request: bool,
    /// Its set-up.
    pub setup: Setup,
}

impl Client {
    /// Prepare requests as `o` describes (URL, method, headers, TLS options, `connect_to`,
    /// `host`; HTTP/1.1). The name is resolved once, here.
    pub fn new(o: &Options) -> Result<Client, HttpError> {
        if o.http2 {
            return Err(HttpError::Config(
                "connection reuse is measured over HTTP/1.1 only".into(),
            ));
        }
        Ok(Client {
            cfg: Config::new(o)?,
        })
    }

    /// How long resolving the target's name took, ns.
    pub fn resolve_ns(&self) -> u64 {
        self.cfg.resolve_ns
    }

    /// Open a new connection, with its TLS handshake for https (offering a session an earlier
    /// connection of this client got), within `timeout`.
    pub fn connect(&self, timeout: Duration) -> Result<Connection, HttpError> {
        let deadline_ns = sys::monotonic_ns() + timeout.as_nanos() as u64;
        let started = sys::monotonic_ns();
        let (stream, addr) = connect(&self.cfg, deadline_ns)?;
        let connected = sys::monotonic_ns();
        let mut conn = Conn::new(stream, None, deadline_ns);
        let tls = match &self.cfg.tls {
            Some(_) => {
                conn.start_tls(&self.cfg)?;
                let done = sys::monotonic_ns();
                conn.tls.as_ref().map(|t| tls_setup(t, done - connected))
            }
            None => None,
        };
        Ok(Connection {
            conn,
            head_request: self.cfg.head_request,
            setup: Setup {
                addr,
                connect_ns: connected - started,
                tls: tls.flatten(),
            },
        })
    }

    /// The request bytes every exchange sends.
    fn request(&self) -> &[u8] {
        &self.cfg.request
    }
}

/// What rustls says of a finished handshake; `None` for a version it should not have
/// negotiated.
fn tls_setup(t: &rustls::ClientConnection, handshake_ns: u64) -> Option<TlsHandshake> {
    let version = match t.protocol_version()? {
        ProtocolVersion::TLSv1_3 => TlsVersion::Tls13,
        ProtocolVersion::TLSv1_2 => TlsVersion::Tls12,
        _ => return None,
    };
    let kind = match t.handshake_kind()? {
        HandshakeKind::Full => TlsKind::Full,
        HandshakeKind::FullWithHelloRetryRequest => TlsKind::FullWithHelloRetry,
        HandshakeKind::Resumed => TlsKind::Resumed,
    };
    Some(TlsHandshake {
        handshake_ns,
        version,
        kind,
    })
}

impl Connection {
    /// Send the client's request and read its response, within `timeout`; every read of the
    /// response is recorded.
    pub fn request(&mut self, client: &Client, timeout: Duration) -> Result<Exchange, HttpError> {
        self.conn.deadline_ns = sys::monotonic_ns() + timeout.as_nanos() as u64;
        self.conn.arrivals = Some(Vec::new());
        let sent_ns = sys::monotonic_ns();
        self.conn.send(client.request())?;
        let r = self.conn.response(self.head_request);
        let arrivals = self.conn.arrivals.take().unwrap_or_default();
        let r = r?;
        let (tcp, limits) = match latscope_sys::tcpinfo::limits(self.conn.stream.as_raw_fd()) {
            Ok((t, l)) => (Some(t), Some(l)),
            Err(_) => (None, None),
        };
        Ok(Exchange {
            sent_ns,
            ttfb_ns: r.first_byte_ns.saturating_sub(sent_ns),
            transfer_ns: r.last_byte_ns.saturating_sub(r.first_byte_ns),
            status: r.status,
            body_bytes: r.body_bytes,
            closes: r.close,
            head: r.facts,
            arrivals,
            tcp,
            limits,
        })
    }

    /// Leave the connection idle for `pause`, watching for the server to end it (a keep-alive
    /// timeout shorter than the pause).
    pub fn idle(&mut self, pause: Duration) -> Idle {
        let started = sys::monotonic_ns();
        let end = started + pause.as_nanos() as u64;
        let mut probe = [0u8; 1];
        loop {
            let now = sys::monotonic_ns();
            if now >= end {
                return Idle::Open;
            }
            if self
                .conn
                .stream
                .set_read_timeout(Some(Duration::from_nanos(end - now)))
                .is_err()
            {
                return Idle::Open;
            }
            match self.conn.stream.peek(&mut probe) {
                // End of file, or bytes nobody asked for on an idle HTTP/1.1 connection: a TLS
                // close_notify, or a 408 before the close.
                Ok(_) => {
                    return Idle::Closed {
                        after_ns: sys::monotonic_ns() - started,
                    };
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    return Idle::Closed {
                        after_ns: sys::monotonic_ns() - started,
                    };
                }
            }
        }
    }

    /// The client socket's tcp_info now.
    pub fn tcp(&self) -> Option<TcpStats> {
        latscope_sys::tcpinfo::read(self.conn.stream.as_raw_fd()).ok()
    }
}

/// Whether a request failed because the server had closed the connection (end of file or a
/// reset before any byte of the response), not because it was slow or spoke nonsense.
pub fn closed_before_response(e: &HttpError) -> bool {
    match e {
        HttpError::Exchange {
            phase: Phase::Request | Phase::FirstByte,
            source,
        } => {
            matches!(
                source.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::UnexpectedEof
            ) || source
                .get_ref()
                .and_then(|s| s.downcast_ref::<crate::parse::ParseError>())
                .is_some_and(|p| *p == crate::parse::ParseError::Truncated)
        }
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A keep-alive server on loopback: the second request reuses the connection, and the pause
    /// in between ends when the server closes its side.
    #[test]
    fn a_connection_is_reused_and_its_close_seen() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            for _ in 0..2 {
                let _ = s.read(&mut buf).unwrap();
                s.write_all(
                    b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 5\r\n\r\nhello",
                )
                .unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
            drop(s);
        });
        let o = Options::new(format!("http://127.0.0.1:{port}/"));
        let client = Client::new(&o).unwrap();
        let mut c = client.connect(Duration::from_secs(2)).unwrap();
        assert!(c.setup.tls.is_none());
        let a = c.request(&client, Duration::from_secs(2)).unwrap();
        assert_eq!((a.status, a.body_bytes, a.closes), (200, 5, false));
        assert_eq!(a.head.as_ref().unwrap().keep_alive_timeout_s, Some(1));
        let got: u64 = a.arrivals.iter().map(|x| u64::from(x.bytes)).sum();
        assert!(got >= 5 + 40, "{:?}", a.arrivals);
        assert!(a.tcp.is_some());
        let b = c.request(&client, Duration::from_secs(2)).unwrap();
        assert_eq!(b.status, 200);
        match c.idle(Duration::from_secs(2)) {
            Idle::Closed { after_ns } => assert!(after_ns < 1_500_000_000, "{after_ns}"),
            Idle::Open => panic!("the server's close was not seen"),
        }
        let e = c.request(&client, Duration::from_secs(2)).unwrap_err();
        assert!(closed_before_response(&e), "{e:?}");
        server.join().unwrap();
    }
}

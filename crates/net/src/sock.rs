//! Small socket helpers shared by the engines: a stream that is TCP or unix, target parsing and
//! resolution, and the latency-relevant socket options.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use latscope_core::model::rr::SockOpts;

use crate::NetError;
use latscope_sys::error::MissingPrivilege;
pub use latscope_sys::happy::{self, Race, RaceConfig};

/// A connected stream socket.
#[derive(Debug)]
pub enum Conn {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A unix-socket connection.
    Unix(UnixStream),
}

impl Conn {
    /// Set (or clear) the receive timeout.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(t),
            Conn::Unix(s) => s.set_read_timeout(t),
        }
    }

    /// Set (or clear) the send timeout.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_write_timeout(t),
            Conn::Unix(s) => s.set_write_timeout(t),
        }
    }

    /// Whether this is a TCP connection.
    pub fn is_tcp(&self) -> bool {
        matches!(self, Conn::Tcp(_))
    }

    /// Apply the latency-relevant options. TCP-only options are skipped on unix sockets.
    pub fn apply(&self, o: &SockOpts) -> io::Result<()> {
        let fd = self.as_raw_fd();
        if self.is_tcp() {
            set_nodelay(fd, o.nodelay)?;
            if o.quickack {
                set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)?;
            }
        }
        if let Some(b) = o.sndbuf {
            set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, b as i32)?;
        }
        if let Some(b) = o.rcvbuf {
            set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, b as i32)?;
        }
        Ok(())
    }

    /// Shut the write side down (the peer reads EOF); errors are ignored.
    pub fn shutdown_write(&self) {
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
    }
}

impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Conn {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub use latscope_sys::sockopt::{get_int, set_int, set_nodelay};

/// Where to measure: a host and port, or a unix socket path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A host name or address literal, and a port.
    Inet {
        /// Name or address literal (no brackets).
        host: String,
        /// TCP/UDP port.
        port: u16,
    },
    /// A unix socket path.
    Unix(PathBuf),
}

impl Target {
    /// Parse `HOST`, `HOST:PORT`, `[V6]:PORT`, `V6` (bare IPv6 literal) or `unix:PATH`.
    pub fn parse(s: &str, default_port: u16) -> Result<Target, NetError> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        if s.is_empty() {
            return Err(NetError::Invalid(
                "empty target: give HOST or HOST:PORT".into(),
            ));
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (host, tail) = rest
                .split_once(']')
                .ok_or_else(|| NetError::Invalid(format!("invalid target '{s}': missing ']'")))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => parse_port(s, p)?,
                None if tail.is_empty() => default_port,
                None => return Err(NetError::Invalid(format!("invalid target '{s}'"))),
            };
            return Ok(Target::Inet {
                host: host.into(),
                port,
            });
        }
        if s.parse::<std::net::Ipv6Addr>().is_ok() {
            return Ok(Target::Inet {
                host: s.into(),
                port: default_port,
            });
        }
        match s.rsplit_once(':') {
            Some((host, port)) => Ok(Target::Inet {
                host: host.into(),
                port: parse_port(s, port)?,
            }),
            None => Ok(Target::Inet {
                host: s.into(),
                port: default_port,
            }),
        }
    }

    /// Resolve and choose the address to measure, as RFC 8305 (Happy Eyeballs v2) does: a
    /// literal or a name's only address as is; several raced over TCP, IPv6 first, the first
    /// to connect wins ([`latscope_sys::happy`]). Waits at most `timeout` per attempt.
    pub fn choose(&self, family: Family, timeout: Duration) -> Result<Race, NetError> {
        let Target::Inet { host, port } = self else {
            return Err(NetError::Invalid(
                "a unix socket has no network address".into(),
            ));
        };
        happy::choose(host, *port, family, RaceConfig::with_timeout(timeout)).map_err(|e| {
            NetError::Unreachable {
                target: self.to_string(),
                reason: e.to_string(),
            }
        })
    }

    /// The address to measure, chosen as [`Target::choose`] does with a 2 s attempt timeout.
    pub fn resolve(&self, family: Family) -> Result<SocketAddr, NetError> {
        self.choose(family, RESOLVE_ATTEMPT_TIMEOUT).map(|r| r.addr)
    }
}

/// How long [`Target::resolve`] waits for one address of a name with several.
pub const RESOLVE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

fn parse_port(target: &str, p: &str) -> Result<u16, NetError> {
    p.parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| NetError::Invalid(format!("invalid port in '{target}': expected 1-65535")))
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Inet { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Target::Inet { host, port } => write!(f, "{host}:{port}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

pub use latscope_sys::Family;

/// Turn a connect error into the engine error users should see.
pub fn connect_error(target: &str, e: io::Error, timeout: Duration) -> NetError {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => NetError::Refused {
            target: target.into(),
        },
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => NetError::Timeout {
            target: target.into(),
            timeout: latscope_core::units::format_duration(timeout),
        },
        io::ErrorKind::NotFound => NetError::Unreachable {
            target: target.into(),
            reason: "no such socket file".into(),
        },
        io::ErrorKind::PermissionDenied => NetError::Privilege(MissingPrivilege {
            what: format!("connecting to {target}"),
            capability: "permission on the socket".into(),
            remedy: "check the socket file's permissions or firewall rules".into(),
        }),
        _ => match e.raw_os_error() {
            Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) | Some(libc::EADDRNOTAVAIL) => {
                NetError::Unreachable {
                    target: target.into(),
                    reason: e.to_string(),
                }
            }
            _ => NetError::io(format!("connecting to {target}"), e),
        },
    }
}

/// Connect to a target with a timeout.
pub fn connect(
    target: &Target,
    addr: Option<SocketAddr>,
    timeout: Duration,
) -> Result<Conn, NetError> {
    let name = target.to_string();
    match (target, addr) {
        (Target::Unix(p), _) => UnixStream::connect(p)
            .map(Conn::Unix)
            .map_err(|e| connect_error(&name, e, timeout)),
        (Target::Inet { .. }, Some(a)) => TcpStream::connect_timeout(&a, timeout)
            .map(Conn::Tcp)
            .map_err(|e| connect_error(&name, e, timeout)),
        (Target::Inet { .. }, None) => Err(NetError::Invalid("target not resolved".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_targets() {
        assert_eq!(
            Target::parse("host", 7).ok(),
            Some(Target::Inet {
                host: "host".into(),
                port: 7
            })
        );
        assert_eq!(
            Target::parse("h:80", 7).ok(),
            Some(Target::Inet {
                host: "h".into(),
                port: 80
            })
        );
        assert_eq!(
            Target::parse("[::1]:80", 7).ok(),
            Some(Target::Inet {
                host: "::1".into(),
                port: 80
            })
        );
        assert_eq!(
            Target::parse("::1", 7).ok(),
            Some(Target::Inet {
                host: "::1".into(),
                port: 7
            })
        );
        assert_eq!(
            Target::parse("unix:/tmp/x", 7).ok(),
            Some(Target::Unix("/tmp/x".into()))
        );
        assert!(Target::parse("h:0", 7).is_err());
        assert!(Target::parse("h:99999", 7).is_err());
        assert!(Target::parse("", 7).is_err());
        assert_eq!(
            Target::parse("[::1]:80", 7).map(|t| t.to_string()).ok(),
            Some("[::1]:80".into())
        );
    }

    #[test]
    fn resolve_loopback() {
        let t = Target::parse("127.0.0.1:9", 7).expect("parse");
        assert_eq!(t.resolve(Family::V4).ok(), "127.0.0.1:9".parse().ok());
        assert!(t.resolve(Family::V6).is_err());
    }
}

//! Every address of a name, tried as RFC 8305 ("Happy Eyeballs Version 2") does: resolve A and
//! AAAA, interleave the families (IPv6 first, §4), start the next connection attempt 250 ms
//! after the previous one (the Connection Attempt Delay, §5) or at once when one fails; the
//! first to connect wins and the others are closed. The one home of address selection for every
//! client command (connect, rr, stream, http, ping, trace, the agent).
//!
//! The outcome is typed ([`AddressChoice`]): the winner, and each failed or abandoned attempt
//! with its address, how it ended and the time it took, so that a dead address family and what
//! it costs a new connection can be reported.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::model::address::{AddressAttempt, AddressChoice, AttemptOutcome, ChoiceMethod};
use socket2::{Domain, Protocol, Socket, Type};

use crate::Family;

/// RFC 8305 §5: the recommended Connection Attempt Delay.
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// At most this many addresses are tried (a name with hundreds of records must not open
/// hundreds of sockets).
pub const MAX_ADDRESSES: usize = 16;

/// How to race.
#[derive(Clone, Copy, Debug)]
pub struct RaceConfig {
    /// Between the starts of two attempts, unless one fails first.
    pub attempt_delay: Duration,
    /// How long one attempt may take.
    pub attempt_timeout: Duration,
}

impl RaceConfig {
    /// RFC 8305's delay, and `attempt_timeout` per attempt.
    pub fn with_timeout(attempt_timeout: Duration) -> Self {
        RaceConfig {
            attempt_delay: ATTEMPT_DELAY,
            attempt_timeout,
        }
    }
}

/// Why a name gave no address to try.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// getaddrinfo failed. Every command words it so, after "cannot reach {target}: " (rr,
    /// ping and http said it three ways, issue 41).
    #[error("the name '{host}' does not resolve ({source})")]
    Lookup {
        /// The name.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The name has addresses, none in the family asked for.
    #[error("'{host}' has no {family} address (found: {found})")]
    NoAddress {
        /// The name.
        host: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// The addresses it has, comma-separated.
        found: String,
    },
    /// A literal of the other family than `-4`/`-6` asked for.
    #[error("{host} is not an {family} address: drop -4/-6 or give an address of that family")]
    WrongFamily {
        /// The literal.
        host: String,
        /// "IPv4" or "IPv6".
        family: &'static str,
    },
}

/// The name's addresses in `family`, in the order to try them, and how long resolving took, ns.
/// A literal resolves to itself without a lookup.
pub fn resolve(
    host: &str,
    port: u16,
    family: Family,
) -> Result<(Vec<SocketAddr>, u64), ResolveError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        if !family.accepts(ip) {
            return Err(ResolveError::WrongFamily {
                host: host.into(),
                family: family.name(),
            });
        }
        return Ok((vec![SocketAddr::new(ip, port)], 0));
    }
    let t0 = Instant::now();
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|source| ResolveError::Lookup {
            host: host.into(),
            source,
        })?
        .collect();
    let resolve_ns = t0.elapsed().as_nanos() as u64;
    let mut kept: Vec<SocketAddr> = Vec::new();
    for a in all.iter().filter(|a| family.accepts(a.ip())) {
        if !kept.contains(a) {
            kept.push(*a);
        }
    }
    if kept.is_empty() {
        let found: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
        return Err(ResolveError::NoAddress {
            host: host.into(),
            family: family.name(),
            found: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    let mut ordered = interleave(&kept);
    ordered.truncate(MAX_ADDRESSES);
    Ok((ordered, resolve_ns))
}

/// RFC 8305 §4: alternate the families, IPv6 first, keeping the resolver's (RFC 6724) order
/// within each family.
pub fn interleave(addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    let v6: Vec<SocketAddr> = addrs.iter().copied().filter(SocketAddr::is_ipv6).collect();
    let v4: Vec<SocketAddr> = addrs.iter().copied().filter(SocketAddr::is_ipv4).collect();
    let mut out = Vec::with_capacity(addrs.len());
    for i in 0..v6.len().max(v4.len()) {
        out.extend(v6.get(i));
        out.extend(v4.get(i));
    }
    out
}

/// The chosen address, the race that chose it and, when an attempt connected, its socket
/// (blocking again; the caller may use it or drop it).
#[derive(Debug)]
pub struct Race {
    /// The address to measure.
    pub addr: SocketAddr,
    /// The typed outcome, for the report.
    pub choice: AddressChoice,
    /// The winner's connected socket (None for a literal or single address, and when none
    /// connected).
    pub stream: Option<TcpStream>,
}

/// Resolve `host` and choose the address to measure: a literal or a single address is used as
/// is (no connection is made); several are raced over TCP to `port`.
pub fn choose(
    host: &str,
    port: u16,
    family: Family,
    cfg: RaceConfig,
) -> Result<Race, ResolveError> {
    let (addrs, resolve_ns) = resolve(host, port, family)?;
    let name = host.trim_start_matches('[').trim_end_matches(']');
    if addrs.len() == 1 {
        let method = single_method(name);
        return Ok(Race {
            addr: addrs[0],
            choice: AddressChoice::without_race(name, addrs[0].ip(), method, resolve_ns),
            stream: None,
        });
    }
    Ok(race_choice(name, &addrs, resolve_ns, cfg))
}

/// Literal when `name` is an address, else the single address of a name.
fn single_method(name: &str) -> ChoiceMethod {
    if name.parse::<IpAddr>().is_ok() {
        ChoiceMethod::Literal
    } else {
        ChoiceMethod::Single
    }
}

/// Race `addrs` (already in RFC 8305 order, at least one) and say which won. With one address
/// this is a plain connect with the attempt recorded.
pub fn race_choice(name: &str, addrs: &[SocketAddr], resolve_ns: u64, cfg: RaceConfig) -> Race {
    let port = addrs.first().map_or(0, SocketAddr::port);
    let (attempts, stream) = race(addrs, cfg);
    let first = addrs
        .first()
        .map_or(IpAddr::from([0, 0, 0, 0]), SocketAddr::ip);
    let winner = attempts
        .iter()
        .find(|a| a.outcome == AttemptOutcome::Connected)
        .map(|a| {
            let how = if addrs.len() == 1 {
                single_method(name)
            } else {
                ChoiceMethod::Connected
            };
            (a.addr, how)
        })
        .or_else(|| {
            attempts
                .iter()
                .find(|a| a.outcome == AttemptOutcome::Refused)
                .map(|a| (a.addr, ChoiceMethod::Refused))
        })
        .unwrap_or((first, ChoiceMethod::Unanswered));
    Race {
        addr: SocketAddr::new(winner.0, port),
        choice: AddressChoice {
            host: name.into(),
            chosen: winner.0,
            method: winner.1,
            resolved: addrs.iter().map(SocketAddr::ip).collect(),
            resolve_ns,
            attempts,
        },
        stream,
    }
}

/// The error an attempt ended with, as an `io::Error` (for engines whose errors carry one).
pub fn attempt_error(a: &AddressAttempt) -> io::Error {
    match a.outcome {
        AttemptOutcome::Connected => io::Error::other("connected"),
        AttemptOutcome::Refused => io::ErrorKind::ConnectionRefused.into(),
        AttemptOutcome::TimedOut | AttemptOutcome::Abandoned => {
            io::Error::new(io::ErrorKind::TimedOut, "no answer within the timeout")
        }
        AttemptOutcome::Unreachable => io::ErrorKind::HostUnreachable.into(),
        AttemptOutcome::Error => io::Error::other(a.error.clone().unwrap_or_default()),
    }
}

/// One attempt in flight.
struct Pending {
    index: usize,
    socket: Socket,
    started: Instant,
}

/// Race connections to `addrs` in order (RFC 8305 §5). Returns one record per attempt started,
/// in start order, and the winner's socket. Bounded: at most `addrs.len()` attempts, each
/// ending within `attempt_timeout`.
pub fn race(addrs: &[SocketAddr], cfg: RaceConfig) -> (Vec<AddressAttempt>, Option<TcpStream>) {
    let t0 = Instant::now();
    let mut attempts: Vec<AddressAttempt> = Vec::with_capacity(addrs.len());
    let mut pending: Vec<Pending> = Vec::new();
    let mut next_start = t0;
    let since = |t: Instant| t.saturating_duration_since(t0).as_nanos() as u64;
    loop {
        let now = Instant::now();
        let next = attempts.len();
        if next < addrs.len() && (now >= next_start || pending.is_empty()) {
            attempts.push(AddressAttempt {
                addr: addrs[next].ip(),
                started_ns: since(now),
                spent_ns: 0,
                outcome: AttemptOutcome::Abandoned,
                error: None,
            });
            match start(addrs[next]) {
                Ok(socket) => {
                    pending.push(Pending {
                        index: next,
                        socket,
                        started: now,
                    });
                    next_start = now + cfg.attempt_delay;
                }
                Err(e) => finish(&mut attempts[next], now, Err(e)),
            }
            continue;
        }
        if pending.is_empty() {
            return (attempts, None);
        }
        let mut wake = pending
            .iter()
            .map(|p| p.started + cfg.attempt_timeout)
            .min()
            .unwrap_or(now);
        if next < addrs.len() {
            wake = wake.min(next_start);
        }
        let ready = wait_writable(&pending, wake.saturating_duration_since(now));
        let now = Instant::now();
        let mut i = 0;
        while i < pending.len() {
            let p = &pending[i];
            let result = if ready.contains(&i) {
                Some(match p.socket.take_error() {
                    Ok(None) => Ok(()),
                    Ok(Some(e)) | Err(e) => Err(e),
                })
            } else if now >= p.started + cfg.attempt_timeout {
                Some(Err(io::ErrorKind::TimedOut.into()))
            } else {
                None
            };
            match result {
                None => i += 1,
                Some(Ok(())) => {
                    let won = pending.swap_remove(i);
                    finish(&mut attempts[won.index], won.started, Ok(()));
                    for lost in &pending {
                        attempts[lost.index].spent_ns = (now - lost.started).as_nanos() as u64;
                    }
                    let stream = TcpStream::from(won.socket);
                    let stream = stream.set_nonblocking(false).map(|()| stream).ok();
                    return (attempts, stream);
                }
                Some(Err(e)) => {
                    let lost = pending.swap_remove(i);
                    finish(&mut attempts[lost.index], lost.started, Err(e));
                    // §5: a failed attempt starts the next one at once.
                    next_start = now;
                }
            }
        }
    }
}

/// How often a pending connect looks at its stop flag: a step's budget or Ctrl-C ends the wait
/// within this, where a blocking connect holds the caller for its whole timeout.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// `TcpStream::connect_timeout` that also gives up when `stop` is raised: the error is then of
/// kind `Interrupted` (the attempt neither succeeded nor failed), `TimedOut` past `timeout`, and
/// the connect's own error otherwise. The time to connect is not coarsened: the wait ends as
/// soon as the socket is writable, and `STOP_CHECK` only bounds how late a raised flag is seen.
pub fn connect_until(
    addr: SocketAddr,
    timeout: Duration,
    stop: &AtomicBool,
) -> io::Result<TcpStream> {
    let socket = start(addr)?;
    let deadline = Instant::now() + timeout;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "connect stopped",
            ));
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
        }
        // EINTR or a poll error reads as "not yet": the flag and the deadline still end the wait.
        let ready =
            !poll_writable(&[socket.as_raw_fd()], (deadline - now).min(STOP_CHECK)).is_empty();
        if ready {
            if let Some(e) = socket.take_error()? {
                return Err(e);
            }
            // Writable without an error: connected (or the peer already went away, which the
            // first read or write reports, as after a blocking connect).
            let stream = TcpStream::from(socket);
            stream.set_nonblocking(false)?;
            return Ok(stream);
        }
    }
}

/// A non-blocking socket with its connect() under way (or already failed).
fn start(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(socket),
        Err(e) => Err(e),
    }
}

/// Record how an attempt that started at `started` ended.
fn finish(a: &mut AddressAttempt, started: Instant, result: io::Result<()>) {
    a.spent_ns = started.elapsed().as_nanos() as u64;
    a.outcome = match &result {
        Ok(()) => AttemptOutcome::Connected,
        Err(e) => outcome_of(e),
    };
    if a.outcome == AttemptOutcome::Error
        && let Err(e) = result
    {
        a.error = Some(e.to_string());
    }
}

/// The outcome class of a connect error.
pub fn outcome_of(e: &io::Error) -> AttemptOutcome {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => AttemptOutcome::Refused,
        Some(libc::ETIMEDOUT) => AttemptOutcome::TimedOut,
        // EINVAL: a blackhole route (the kernel's RTN_BLACKHOLE answer to connect()).
        Some(
            libc::ENETUNREACH
            | libc::EHOSTUNREACH
            | libc::EADDRNOTAVAIL
            | libc::ENETDOWN
            | libc::EHOSTDOWN
            | libc::EINVAL,
        ) => AttemptOutcome::Unreachable,
        _ if e.kind() == io::ErrorKind::TimedOut => AttemptOutcome::TimedOut,
        _ => AttemptOutcome::Error,
    }
}

/// poll() the pending sockets for writability until `wait`; the indexes that are ready.
fn wait_writable(pending: &[Pending], wait: Duration) -> Vec<usize> {
    let fds: Vec<_> = pending.iter().map(|p| p.socket.as_raw_fd()).collect();
    poll_writable(&fds, wait)
}

/// poll() `fds` for writability until `wait`; the indexes that are ready (none on a timeout, an
/// interruption or an error).
fn poll_writable(fds: &[std::os::fd::RawFd], wait: Duration) -> Vec<usize> {
    let revents = crate::poll::writable(fds, wait).unwrap_or_default();
    revents
        .iter()
        .enumerate()
        .filter(|(_, r)| **r != 0)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::net::TcpListener;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    /// A listener whose accept queue is full drops further SYNs: a connect to it hangs, and
    /// raising the stop flag ends the wait at once (not at the timeout), as `Interrupted`;
    /// without the flag it is `TimedOut` at its timeout; a free port is refused.
    #[test]
    fn a_hanging_connect_ends_when_told_to_stop() {
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        listener.bind(&sa("127.0.0.1:0").into()).unwrap();
        listener.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let idle = AtomicBool::new(false);
        // Fill the queue (never accepted) until a connect hangs.
        let mut held = Vec::new();
        let mut hung = false;
        for _ in 0..8 {
            match connect_until(addr, Duration::from_millis(300), &idle) {
                Ok(s) => held.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
                    hung = true;
                    break;
                }
            }
        }
        assert!(
            hung,
            "{} connects completed: the queue never filled",
            held.len()
        );
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                stop.store(true, Ordering::Relaxed);
            });
            connect_until(addr, Duration::from_secs(20), &stop)
        });
        let took = t0.elapsed();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::Interrupted);
        assert!(took < Duration::from_secs(2), "stopped after {took:?}");
        drop(listener);
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = connect_until(free, Duration::from_secs(2), &idle).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[test]
    fn families_interleave_ipv6_first() {
        let got = interleave(&[sa("10.0.0.1:1"), sa("10.0.0.2:1"), sa("[::1]:1")]);
        assert_eq!(got, vec![sa("[::1]:1"), sa("10.0.0.1:1"), sa("10.0.0.2:1")]);
    }

    #[test]
    fn literal_needs_no_race() {
        let r = choose(
            "127.0.0.1",
            9,
            Family::Any,
            RaceConfig::with_timeout(Duration::from_secs(1)),
        )
        .expect("choose");
        assert_eq!(r.choice.method, ChoiceMethod::Literal);
        assert!(r.stream.is_none() && r.choice.attempts.is_empty());
        assert!(matches!(
            choose(
                "127.0.0.1",
                9,
                Family::V6,
                RaceConfig::with_timeout(Duration::from_secs(1))
            ),
            Err(ResolveError::WrongFamily { .. })
        ));
    }

    #[test]
    fn refused_address_moves_on_to_the_listening_one_at_once() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        // 127.0.0.2 refuses (nothing listens there on this port): the next starts at once,
        // long before the 250 ms delay.
        let addrs = [
            SocketAddr::new([127, 0, 0, 2].into(), port),
            SocketAddr::new([127, 0, 0, 1].into(), port),
        ];
        let (attempts, stream) = race(&addrs, RaceConfig::with_timeout(Duration::from_secs(2)));
        assert!(stream.is_some());
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].outcome, AttemptOutcome::Refused);
        assert_eq!(attempts[1].outcome, AttemptOutcome::Connected);
        assert!(attempts[1].started_ns < 200_000_000, "{attempts:?}");
    }

    #[test]
    fn every_address_refused_keeps_the_first_that_answered() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        drop(l);
        let addrs = [
            SocketAddr::new([127, 0, 0, 1].into(), port),
            SocketAddr::new([127, 0, 0, 3].into(), port),
        ];
        let (attempts, stream) = race(&addrs, RaceConfig::with_timeout(Duration::from_secs(2)));
        assert!(stream.is_none());
        assert!(
            attempts
                .iter()
                .all(|a| a.outcome == AttemptOutcome::Refused),
            "{attempts:?}"
        );
    }
}

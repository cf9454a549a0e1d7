//! The client host's own stack on an HTTP(S) target: requests as the load engine makes them (the
//! same request bytes, TLS configuration and response parser) one at a time on a blocking
//! connection of their own, every `send()` and `recv()` timed by the kernel's software
//! timestamps ([`latscope_sys::txstamp`]: send → qdisc → driver, driver → recv). Apart from the
//! load engine, so its hot path never pays for the stamps; bounded by a count and a time budget.
//! Under TLS the stamps time the TCP sends and receives that carry the records.

use std::os::fd::AsRawFd;
use std::time::Duration;

use latscope_core::model::hoststack::HostStackTimes;
use latscope_sys::txstamp::Stamper;

use crate::error::HttpError;
use crate::phases::{Conn, connect};
use crate::{Config, Options, sys};

/// Requests timed at most.
pub const EXCHANGES: u32 = 200;
/// Time the requests may take at most (each is also bounded by `Options::timeout`).
pub const BUDGET: Duration = Duration::from_secs(1);

/// Time this host's stack over up to [`EXCHANGES`] requests of `o` (URL, method, headers, body,
/// TLS options, `connect_to`, `host`; the load options are ignored), reconnecting when the
/// server closes. HTTP/1.1 only. An error after the first request ends the run with what was
/// timed; an error before it is returned.
pub fn measure(o: &Options) -> Result<HostStackTimes, HttpError> {
    if o.http2 {
        return Err(HttpError::Config(
            "the host stack is timed over HTTP/1.1 only".into(),
        ));
    }
    let cfg = Config::new(o)?;
    let per_request_ns = cfg.timeout_ns.min(BUDGET.as_nanos() as u64);
    let end_ns = sys::monotonic_ns() + BUDGET.as_nanos() as u64;
    // The stamper of the last connection, closed, to go on with on the next one.
    let mut spare: Option<Stamper> = None;
    let mut conn: Option<Conn> = None;
    for done in 0..EXCHANGES {
        let now = sys::monotonic_ns();
        if now >= end_ns {
            break;
        }
        let c = match conn.take() {
            Some(c) => Ok(c),
            None => open(&cfg, &mut spare, now + per_request_ns),
        };
        let outcome = c.and_then(|mut c| {
            c.deadline_ns = now + per_request_ns;
            match request(&cfg, &mut c) {
                Ok(false) => conn = Some(c),
                Ok(true) => spare = retire(c),
                Err(e) => {
                    spare = retire(c);
                    return Err(e);
                }
            }
            Ok(())
        });
        match outcome {
            Ok(()) => {}
            // What was timed stands; the failure is the request steps' to report.
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    let mut s = conn.and_then(retire).or(spare).ok_or_else(|| {
        HttpError::Config("the host stack was not timed: no request was made".into())
    })?;
    Ok(s.summary())
}

/// One request on `c`, its transmit stamps read after the response: whether the server closes
/// the connection now.
fn request(cfg: &Config, c: &mut Conn) -> Result<bool, HttpError> {
    c.send(&cfg.request)?;
    let r = c.response(cfg.head_request)?;
    if let Some(s) = c.stamper.as_mut() {
        s.drain();
    }
    Ok(r.close)
}

/// A connection's stamper, closed (its last stamps read) before the socket goes.
fn retire(c: Conn) -> Option<Stamper> {
    c.stamper.map(|mut s| {
        s.close();
        s
    })
}

/// A new connection with the stamps on from its first byte (before any TLS record), timed by
/// the `spare` stamper when there is one.
fn open(cfg: &Config, spare: &mut Option<Stamper>, deadline_ns: u64) -> Result<Conn, HttpError> {
    let (stream, addr) = connect(cfg, deadline_ns)?;
    let fd = stream.as_raw_fd();
    let io = |source| HttpError::Connect {
        addr: addr.to_string(),
        source,
    };
    let stamper = match spare.as_mut() {
        Some(s) => {
            s.restart(fd).map_err(io)?;
            spare.take()
        }
        None => Some(Stamper::new(fd).map_err(io)?),
    };
    let mut c = Conn::new(stream, stamper, deadline_ns);
    if let Err(e) = c.start_tls(cfg) {
        *spare = retire(c);
        return Err(e);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A keep-alive HTTP/1.1 server answering `per_conn` requests a connection, then closing.
    fn server(per_conn: usize) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let mut buf = [0u8; 4096];
                for i in 0..per_conn {
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let close = if i + 1 == per_conn {
                        "Connection: close\r\n"
                    } else {
                        ""
                    };
                    let r = format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n{close}\r\nhello");
                    if s.write_all(r.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        });
        format!("http://{addr}/")
    }

    #[test]
    fn requests_are_stamped_across_reconnects() {
        // A server that closes after every 3 responses: the stamps go on over the new
        // connections, and every stage is timed.
        let mut o = Options::new(server(3));
        o.timeout = Duration::from_secs(2);
        let t = measure(&o).unwrap();
        let sched = t.send_to_sched.expect("TX_SCHED stamps");
        let drv = t.sched_to_driver.expect("TX_SOFTWARE stamps");
        assert!(sched.samples >= 20, "{t:?}");
        assert!(drv.samples >= 20, "{t:?}");
        // Loopback: microseconds at the median, far below a millisecond.
        assert!(sched.p50_ns < 1_000_000 && drv.p50_ns < 1_000_000, "{t:?}");
    }

    #[test]
    fn a_refused_target_is_an_error_and_http2_a_usage_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let mut o = Options::new(format!("http://{addr}/"));
        o.timeout = Duration::from_millis(500);
        assert!(matches!(measure(&o), Err(HttpError::Connect { .. })));
        o.http2 = true;
        assert!(matches!(measure(&o), Err(HttpError::Config(_))));
    }
}

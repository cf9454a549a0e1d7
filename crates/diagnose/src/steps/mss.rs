//! The MSS experiment (an A/B like the quick-ack one): when no request completed although the
//! connections opened, fetch the URL once as the client normally would and once announcing a
//! smaller MSS in its SYN (`TCP_MAXSEG` before `connect()`), so the server's segments are
//! smaller. Full-size segments lost on the path while small ones pass — a link with a smaller
//! MTU whose ICMP "fragmentation needed" never reaches the sender — make the first hang and the
//! second complete: a path-MTU black hole.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::{StepName, TargetKind};
use latscope_core::units::{format_bytes, format_ns};
use socket2::{Domain, Protocol, Socket, Type};

use super::step::{Measure, NotRun};
use crate::context::Context;
use crate::evidence::{Evidence, MssProbe};
use crate::plan::Plan;

pub struct MssExperiment;

use crate::evidence::MSS_FETCH_TIMEOUT as FETCH_TIMEOUT;
/// The MSS announced in the second fetch: IPv6's minimum MTU (1280) less 40 bytes of IPv6 and
/// 20 of TCP with room for options — a size every path must carry, IPv4 or IPv6 (RFC 8200).
pub const LOWERED_MSS: u32 = 1_200;
/// The most of a response read: the experiment needs to see it complete, not all of a large one.
const MAX_BYTES: u64 = 4 << 20;

/// One fetch: whether the response completed, its bytes, its time, and the MSS the connection
/// had (TCP_INFO: what this end announced, what the peer did).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fetch {
    pub completed: bool,
    pub bytes: u64,
    pub elapsed_ns: u64,
    /// The MSS this end's SYN announced (`TCP_MAXSEG` read after connect).
    pub mss: Option<u32>,
}

impl Measure for MssExperiment {
    const NAME: StepName = StepName::MssExperiment;
    type Output = MssProbe;

    fn run(cx: &Context, ev: &Evidence) -> Result<MssProbe, NotRun> {
        if ev.target != Some(TargetKind::Http) {
            return Err(NotRun::Skipped("plain http:// URLs only".into()));
        }
        if ev.single.is_some() {
            return Err(NotRun::Skipped(
                "requests completed: nothing hangs on the way back".into(),
            ));
        }
        let Some(url) = cx.plan.url.as_deref() else {
            return Err(NotRun::Skipped("plain http:// URLs only".into()));
        };
        let url = latscope_http::Url::parse(url).map_err(|e| NotRun::Failed(e.to_string()))?;
        if url.scheme != latscope_http::Scheme::Http {
            return Err(NotRun::Skipped(
                "an https:// URL: the experiment speaks plain HTTP only".into(),
            ));
        }
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: latscope-diagnose\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            url.path,
            host_header(&url.host, url.port)
        );
        let fetch = |mss| fetch(cx.plan.addr, request.as_bytes(), mss).map_err(NotRun::Failed);
        let normal = fetch(None)?;
        if cx.stopped() {
            return Err(NotRun::Failed("interrupted".into()));
        }
        let lowered = fetch(Some(LOWERED_MSS))?;
        Ok(MssProbe {
            normal_completed: normal.completed,
            normal_bytes: normal.bytes,
            normal_mss: normal.mss,
            lowered_mss: LOWERED_MSS,
            lowered_completed: lowered.completed,
            lowered_bytes: lowered.bytes,
            lowered_ns: lowered.elapsed_ns,
        })
    }

    fn detail(_cx: &Context, o: &MssProbe) -> String {
        let done = |ok: bool, bytes: u64| {
            if ok {
                format!("completed ({})", format_bytes(bytes as f64))
            } else {
                format!(
                    "no complete response in {} ({} received)",
                    format_ns(FETCH_TIMEOUT.as_nanos() as f64),
                    format_bytes(bytes as f64)
                )
            }
        };
        format!(
            "GET with this host's MSS{}: {}; announcing MSS {}: {}",
            o.normal_mss.map(|m| format!(" ({m})")).unwrap_or_default(),
            done(o.normal_completed, o.normal_bytes),
            o.lowered_mss,
            done(o.lowered_completed, o.lowered_bytes)
        )
    }

    /// Two bounded fetches, for a plain http:// URL (the only target it runs for). It runs
    /// when no request completed, in the time the quick-ack experiment (which needs a
    /// completed request) then leaves unused.
    fn budget(plan: &Plan) -> Duration {
        if plan
            .url
            .as_deref()
            .is_some_and(|u| u.starts_with("http://"))
        {
            2 * FETCH_TIMEOUT + Duration::from_millis(500)
        } else {
            Duration::ZERO
        }
    }

    fn store(ev: &mut Evidence, o: MssProbe) {
        ev.mss = Some(o);
    }
}

/// The Host header: IPv6 literals in brackets, the port when not 80.
fn host_header(host: &str, port: u16) -> String {
    let h = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == 80 { h } else { format!("{h}:{port}") }
}

/// GET over a new connection, announcing `mss` when given; the whole fetch within
/// [`FETCH_TIMEOUT`] (connect, write, every read: one deadline a slow peer cannot stretch).
fn fetch(addr: SocketAddr, request: &[u8], mss: Option<u32>) -> Result<Fetch, String> {
    let started = Instant::now();
    let deadline = started + FETCH_TIMEOUT;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    if let Some(m) = mss {
        latscope_sys::sockopt::set_int(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            m as libc::c_int,
        )
        .map_err(|e| format!("TCP_MAXSEG {m}: {e}"))?;
    }
    s.connect_timeout(&addr.into(), FETCH_TIMEOUT)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let announced =
        latscope_sys::sockopt::get_int(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG)
            .ok()
            .and_then(|m| u32::try_from(m).ok());
    let mut stream: std::net::TcpStream = s.into();
    let left = |now: Instant| deadline.saturating_duration_since(now);
    stream
        .set_write_timeout(Some(left(Instant::now()).max(Duration::from_millis(1))))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request)
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut got: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut completed = false;
    loop {
        let remaining = left(Instant::now());
        if remaining.is_zero() || got.len() as u64 >= MAX_BYTES {
            break;
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut buf) {
            Ok(0) => {
                // `Connection: close`: the end of the response, when its head arrived.
                completed = response_complete(&got, true);
                break;
            }
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if response_complete(&got, false) {
                    completed = true;
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Ok(Fetch {
        completed,
        bytes: got.len() as u64,
        elapsed_ns: started.elapsed().as_nanos() as u64,
        mss: announced,
    })
}

/// Whether `got` holds a whole response: its head and `Content-Length` bytes of body, or its
/// head and the connection's end (`eof`) for a response framed by closing.
fn response_complete(got: &[u8], eof: bool) -> bool {
    let Some(head_end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..head_end]);
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    match length {
        Some(n) => got.len() >= head_end + 4 + n,
        None => eof,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_by_its_length_or_the_close() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel";
        assert!(!response_complete(r, false));
        assert!(!response_complete(r, true), "short of its length");
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert!(response_complete(r, false));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
        assert!(!response_complete(r, false));
        assert!(response_complete(r, true));
        assert!(!response_complete(b"HTTP/1.1 200 OK\r\n", true), "no head");
    }

    #[test]
    fn host_headers() {
        assert_eq!(host_header("example.com", 80), "example.com");
        assert_eq!(host_header("::1", 8080), "[::1]:8080");
    }
}

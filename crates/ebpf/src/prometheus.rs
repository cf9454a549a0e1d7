//! Prometheus text exposition (format 0.0.4) of the stack histograms, and a minimal HTTP/1.1
//! server for `GET /metrics`.
//!
//! One histogram family per probe, `latscope_stack_<probe>_seconds`, labelled by `hook` and
//! `interface` (plus `cgroup` when grouping by cgroup). Buckets are the log2 bucket bounds in
//! seconds, cumulative as the format requires (each `le` counts every observation ≤ it); the
//! `+Inf` bucket equals `_count`. See
//! <https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format>.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use latscope_core::log2::bucket_upper;

use crate::probes::Probe;
use crate::report::{ProbeHistogram, ProbeStamps};
use crate::session::GroupBy;

/// Bucket bounds exported: 2^8 ns (256 ns) … 2^36 ns (68.7 s); faster samples count in the
/// first bucket, slower ones only in `+Inf`.
pub const FIRST_BUCKET: usize = 8;
/// The last bucket exported (upper bound 2^36 ns, about 69 s); slower samples only in `+Inf`.
pub const LAST_BUCKET: usize = 36;

/// Default port when `--prometheus` gets only a port or nothing.
pub const DEFAULT_PORT: u16 = 9573;

/// `9573`, `:9573`, `127.0.0.1:9573`, `[::1]:9573`, `localhost:9573` → a socket address.
/// A bare port binds loopback.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let port_only = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.to_socket_addrs()
        .map_err(|e| format!("bad --prometheus address '{s}': {e} (use PORT or HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT})"))?
        .next()
        .ok_or_else(|| format!("--prometheus address '{s}' resolves to nothing"))
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Family name for a probe, e.g. `latscope_stack_tcp_socket_read_seconds`.
pub fn family_name(p: Probe) -> String {
    format!("latscope_stack_{}_seconds", p.name().replace('-', "_"))
}

/// The whole `/metrics` page. `attached` lists (probe, hook) for every running probe so that
/// families exist (with zero counts) before the first packet.
pub fn render(
    attached: &[(Probe, String)],
    hists: &[ProbeHistogram],
    stamps: &[ProbeStamps],
    group_by: GroupBy,
) -> String {
    let mut out = String::new();
    for (probe, hook) in attached {
        let fam = family_name(*probe);
        let _ = writeln!(
            out,
            "# HELP {fam} Time from the packet's software receive timestamp until it reached {} ({}).",
            probe.name(),
            probe.description()
        );
        let _ = writeln!(out, "# TYPE {fam} histogram");
        let mine: Vec<&ProbeHistogram> = hists.iter().filter(|h| h.probe == *probe).collect();
        let empty;
        let series: Vec<&ProbeHistogram> = if mine.is_empty() && group_by == GroupBy::None {
            empty = ProbeHistogram::new(*probe, hook, "all".into(), Default::default());
            vec![&empty]
        } else {
            mine
        };
        for h in series {
            let labels = match group_by {
                GroupBy::Cgroup => format!(
                    "hook=\"{}\",interface=\"all\",cgroup=\"{}\"",
                    escape_label(&h.hook),
                    escape_label(&h.group)
                ),
                GroupBy::Interface => format!(
                    "hook=\"{}\",interface=\"{}\"",
                    escape_label(&h.hook),
                    escape_label(&h.group)
                ),
                GroupBy::None => format!("hook=\"{}\",interface=\"all\"", escape_label(&h.hook)),
            };
            let mut cum = 0u64;
            for (k, c) in h.hist.buckets.iter().enumerate() {
                cum += c;
                if k < FIRST_BUCKET {
                    continue;
                }
                if k > LAST_BUCKET {
                    break;
                }
                let le = bucket_upper(k) as f64 / 1e9;
                let _ = writeln!(out, "{fam}_bucket{{{labels},le=\"{le}\"}} {cum}");
            }
            let count = h.hist.count();
            let _ = writeln!(out, "{fam}_bucket{{{labels},le=\"+Inf\"}} {count}");
            let _ = writeln!(out, "{fam}_sum{{{labels}}} {}", h.hist.sum_ns as f64 / 1e9);
            let _ = writeln!(out, "{fam}_count{{{labels}}} {count}");
        }
    }
    if !stamps.is_empty() {
        let fam = "latscope_stack_fallback_stamped_total";
        let _ = writeln!(
            out,
            "# HELP {fam} Packets without skb->tstamp, timed from the first hook latscope sees instead."
        );
        let _ = writeln!(out, "# TYPE {fam} counter");
        for s in stamps {
            let _ = writeln!(
                out,
                "{fam}{{probe=\"{}\"}} {}",
                s.probe, s.stats.fallback_stamped
            );
        }
        let fam = "latscope_stack_uncounted_total";
        let _ = writeln!(
            out,
            "# HELP {fam} Packets not counted because they had no usable receive timestamp."
        );
        let _ = writeln!(out, "# TYPE {fam} counter");
        for s in stamps {
            let _ = writeln!(
                out,
                "{fam}{{probe=\"{}\"}} {}",
                s.probe,
                s.stats.no_stamp + s.stats.bad_stamp
            );
        }
    }
    out
}

/// A `/metrics` server on its own thread serving the latest page; stops and joins on drop.
pub struct MetricsServer {
    addr: SocketAddr,
    page: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Bind and start serving (an empty page until [`MetricsServer::update`]).
    pub fn start(addr: SocketAddr) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let page = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (page.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("latscope-metrics".into())
            .spawn(move || serve(listener, p, s))?;
        Ok(MetricsServer {
            addr,
            page,
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replace the page served.
    pub fn update(&self, text: String) {
        if let Ok(mut p) = self.page.lock() {
            *p = text;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: TcpListener, page: Arc<Mutex<String>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((conn, _)) => {
                let _ = handle(conn, &page);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn handle(conn: TcpStream, page: &Mutex<String>) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Consume the headers (we need none of them).
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            page.lock().map(|p| p.clone()).unwrap_or_default(),
        ),
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "latscope stack exporter: metrics at /metrics\n".to_string(),
        ),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; try /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
    };
    let mut w = conn;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        w.write_all(body.as_bytes())?;
    }
    w.flush()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use latscope_core::Log2Histogram;

    #[test]
    fn listen_address_forms() {
        assert_eq!(
            parse_listen_addr("9573").ok(),
            Some("127.0.0.1:9573".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr(":9000").ok(),
            Some("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("0.0.0.0:1").ok(),
            Some("0.0.0.0:1".parse().unwrap())
        );
        assert!(parse_listen_addr("nonsense").is_err());
    }

    #[test]
    fn buckets_are_cumulative_and_inf_equals_count() {
        let mut hist = Log2Histogram::new();
        hist.record(100); // below the first exported bound: counted in le=2.56e-7
        hist.record(40_000);
        hist.record(40_000);
        hist.record(100_000_000_000); // 100 s: only in +Inf
        let h = ProbeHistogram::new(Probe::TcpStart, "cgroup_skb/ingress", "all".into(), hist);
        let text = render(
            &[(Probe::TcpStart, "cgroup_skb/ingress".into())],
            &[h],
            &[],
            GroupBy::None,
        );
        let fam = "latscope_stack_tcp_start_seconds";
        assert!(text.contains(&format!("# TYPE {fam} histogram")));
        let mut last = 0u64;
        let mut n = 0;
        for l in text
            .lines()
            .filter(|l| l.starts_with(&format!("{fam}_bucket")))
        {
            let v: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(v >= last, "{l}");
            last = v;
            n += 1;
        }
        assert_eq!(n, LAST_BUCKET - FIRST_BUCKET + 2);
        assert!(text.contains(&format!(
            "{fam}_bucket{{hook=\"cgroup_skb/ingress\",interface=\"all\",le=\"0.000000256\"}} 1"
        )));
        assert!(text.contains(&format!(
            "{fam}_bucket{{hook=\"cgroup_skb/ingress\",interface=\"all\",le=\"0.000065536\"}} 3"
        )));
        assert!(text.contains(&format!(
            "{fam}_bucket{{hook=\"cgroup_skb/ingress\",interface=\"all\",le=\"+Inf\"}} 4"
        )));
        assert!(text.contains(&format!(
            "{fam}_count{{hook=\"cgroup_skb/ingress\",interface=\"all\"}} 4"
        )));
    }

    #[test]
    fn empty_probe_still_has_a_family() {
        let text = render(
            &[(Probe::UdpSocketRead, "x".into())],
            &[],
            &[],
            GroupBy::None,
        );
        assert!(text.contains(
            "latscope_stack_udp_socket_read_seconds_count{hook=\"x\",interface=\"all\"} 0"
        ));
    }

    #[test]
    fn serves_metrics_over_http() {
        let srv = MetricsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
        srv.update("a_metric 1\n".into());
        let mut c = TcpStream::connect(srv.local_addr()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        std::io::Read::read_to_string(&mut c, &mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
        assert!(resp.contains("version=0.0.4"));
        assert!(resp.ends_with("\r\n\r\na_metric 1\n"), "{resp}");
    }
}

//! Checking a scenario's fault with tools that are not latscope (curl's timings, `ss -ti`,
//! `nstat`, `tc -s`, cgroup statistics, a plain Python socket loop), never with diagnose: what
//! the held-back sets and the far world share. A [`Check`] builds its scenario (at each of its
//! round trips), measures the fault, prints the figures, tears it down and requires that nothing
//! is left (no namespace of this process, no /etc/netns entry).

use std::process::Command;
use std::time::Duration;

use crate::fixtures::python;
use crate::scenarios::{self, Setup};

/// A built scenario and the namespaces its check looks into.
pub struct Built {
    pub setup: Setup,
    /// Where the server runs.
    pub server_ns: String,
    /// The router between client and server, when there is one.
    pub router_ns: Option<String>,
    /// The round trip it was built with (zero: the near world).
    pub rtt: Duration,
}

impl Built {
    pub fn direct(setup: Setup, server_ns: &str) -> Built {
        Built {
            setup,
            server_ns: server_ns.into(),
            router_ns: None,
            rtt: Duration::ZERO,
        }
    }

    /// A set-up at round trip `rtt` whose server runs in `server_ns`.
    pub fn at(setup: Setup, server_ns: &str, rtt: Duration) -> Built {
        Built {
            rtt,
            ..Built::direct(setup, server_ns)
        }
    }

    /// The round trip in ms.
    pub fn rtt_ms(&self) -> f64 {
        self.rtt.as_secs_f64() * 1e3
    }
}

/// Run `argv` in namespace `ns`: (exit code, stdout, stderr).
pub fn in_ns(ns: &str, argv: &[&str]) -> (i32, String, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(argv)
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    crate::lab::split(&out)
}

/// Run `argv` in this process's namespace.
pub fn in_ns_free(argv: &[&str]) -> (i32, String, String) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    crate::lab::split(&out)
}

/// One curl transfer's figures (`-w`).
#[derive(Debug, Clone)]
pub struct Curl {
    pub exit: i32,
    pub status: u16,
    pub connect_s: f64,
    pub first_byte_s: f64,
    pub total_s: f64,
    pub bytes_per_s: f64,
    pub remote_ip: String,
    /// The TLS handshake's end (0 for plain HTTP).
    pub appconnect_s: f64,
    /// New connections the transfer opened (0: it reused one).
    pub num_connects: u32,
    /// The DNS lookup's end (0 for an address).
    pub lookup_s: f64,
}

/// The `-w` format [`Curl`] parses: one line per transfer.
const CURL_W: &str = "%{http_code} %{time_connect} %{time_starttransfer} %{time_total} %{speed_download} %{remote_ip} %{time_appconnect} %{num_connects} %{time_namelookup}\\n";

fn parse_curl(exit: i32, line: &str) -> Curl {
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    Curl {
        exit,
        status: f.first().and_then(|v| v.parse().ok()).unwrap_or(0),
        connect_s: num(1),
        first_byte_s: num(2),
        total_s: num(3),
        bytes_per_s: num(4),
        remote_ip: f.get(5).map(|s| s.to_string()).unwrap_or_default(),
        appconnect_s: num(6),
        num_connects: f.get(7).and_then(|v| v.parse().ok()).unwrap_or(0),
        lookup_s: num(8),
    }
}

/// `curl ARGS URL` from namespace `ns`, body discarded, at most 5 s.
pub fn curl(ns: &str, url: &str, args: &[&str]) -> Curl {
    curl_urls(ns, &[url], args)
        .pop()
        .expect("curl reports its transfer")
}

/// One curl process fetching `urls` in turn (reusing a connection where the server lets it),
/// body discarded, at most 10 s: one [`Curl`] per transfer. curl runs in the real-time class so
/// that a loaded machine does not add its wake-ups to the times it reads.
pub fn curl_urls(ns: &str, urls: &[&str], args: &[&str]) -> Vec<Curl> {
    let mut argv = vec![
        "chrt",
        "-f",
        "1",
        "curl",
        "-s",
        "--max-time",
        "10",
        "-w",
        CURL_W,
    ];
    argv.extend_from_slice(args);
    for u in urls {
        argv.extend_from_slice(&["-o", "/dev/null", u]);
    }
    let (exit, out, _) = in_ns(ns, &argv);
    let mut v: Vec<Curl> = out.lines().map(|l| parse_curl(exit, l)).collect();
    if v.is_empty() {
        v.push(parse_curl(exit, ""));
    }
    v
}

pub fn curls(ns: &str, url: &str, args: &[&str], n: usize) -> Vec<Curl> {
    (0..n).map(|_| curl(ns, url, args)).collect()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A kernel counter of namespace `ns` (`nstat -asz NAME`: absolute, zeros shown, history left
/// alone).
pub fn nstat(ns: &str, name: &str) -> u64 {
    let (_, out, _) = in_ns(ns, &["nstat", "-asz", name]);
    out.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(name)).then(|| f.next().and_then(|v| v.parse().ok()))?
        })
        .unwrap_or(0)
}

/// A plain Python socket loop (not latscope): `n` connects to `host:port`, each followed by one
/// HTTP/1.1 request on TCP_NODELAY, timed with perf_counter: the p25 of connect and of request,
/// in µs.
const PY_PROBE: &str = r#"
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
con, req = [], []
for _ in range(n):
    s = socket.socket()
    t0 = time.perf_counter(); s.connect((host, port)); t1 = time.perf_counter()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n")
    b = b""
    while b"\r\n\r\n" not in b:
        b += s.recv(65536)
    t2 = time.perf_counter(); s.close()
    con.append(t1 - t0); req.append(t2 - t1)
con.sort(); req.sort()
print(f"{con[len(con)//4]*1e6:.0f} {req[len(req)//4]*1e6:.0f}")
"#;

/// (connect p25, request p25) in µs over `n` fresh connections, from namespace `ns` (the loop
/// in the real-time class, as [`curl_urls`]).
pub fn py_probe(ns: &str, host: &str, port: u16, n: usize) -> (f64, f64) {
    let (_, out, err) = in_ns(
        ns,
        &[
            "chrt",
            "-f",
            "1",
            python(),
            "-c",
            PY_PROBE,
            host,
            &port.to_string(),
            &n.to_string(),
        ],
    );
    let f: Vec<f64> = out
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    assert_eq!(f.len(), 2, "probe: {out} {err}");
    (f[0], f[1])
}

/// The figures of a check: `Ok` when they show the fault as built, `Err` when not.
pub type Verdict = Result<String, String>;

pub fn ok_if(cond: bool, figures: String) -> Verdict {
    if cond { Ok(figures) } else { Err(figures) }
}

/// How a check builds its scenario.
#[derive(Clone, Copy)]
pub enum Make {
    Fixed(fn() -> Built),
    /// With the scenario's own builder at each of its round trips; the server's namespace is
    /// the one that holds the target's address.
    Lab,
}

/// A scenario's builder and its independent check.
pub struct Check {
    pub name: &'static str,
    pub make: Make,
    pub verify: fn(&Built) -> Verdict,
}

/// The namespaces this process made (`ls<tag><pid>x<n>`) that still exist.
fn my_namespaces() -> Vec<String> {
    let pid = (std::process::id() % 100_000).to_string();
    let (_, out, _) = in_ns_free(&["ip", "netns", "list"]);
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| {
            n.strip_prefix("ls")
                .map(|r| r.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
                .and_then(|r| r.split_once('x'))
                .is_some_and(|(p, _)| p == pid)
        })
        .map(String::from)
        .collect()
}

/// Build each scenario of `checks` (`LAB_ONLY=a,b` picks some, `LAB_RTT=0,20` round trips),
/// check its fault, print the figures, tear it down and check that nothing is left behind;
/// panics naming the scenarios not as built.
pub fn run_checks(checks: &[Check]) {
    let list = |k: &str| -> Vec<String> {
        std::env::var(k)
            .map(|v| v.split(',').map(|w| w.trim().to_string()).collect())
            .unwrap_or_default()
    };
    let (only, rtts) = (list("LAB_ONLY"), list("LAB_RTT"));
    let _serial = crate::lab::timing_lock();
    let mut failed = vec![];
    for c in checks {
        if !only.is_empty() && !only.iter().any(|o| o == c.name) {
            continue;
        }
        let s = scenarios::by_name(c.name);
        if let Some(why) = crate::fixtures::missing(s.needs) {
            eprintln!("{}: not run: {why}", c.name);
            continue;
        }
        for &rtt_ms in s.rtts {
            if !rtts.is_empty() && !rtts.iter().any(|r| *r == rtt_ms.to_string()) {
                continue;
            }
            let label = format!("{}@{rtt_ms}ms", c.name);
            let rtt = Duration::from_millis(rtt_ms.into());
            let built = match c.make {
                Make::Fixed(f) => f(),
                Make::Lab => {
                    let setup = s.build_at(rtt_ms);
                    let (_, server_ns, _) =
                        crate::agent::server_of(&setup.client_ns, &setup.target)
                            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
                    Built::at(setup, &server_ns, rtt)
                }
            };
            let netns_files: Vec<String> = [&built.setup.client_ns, &built.server_ns]
                .iter()
                .map(|n| format!("/etc/netns/{n}"))
                .collect();
            let cgroup = built.setup.client_cgroup.clone();
            let verdict = (c.verify)(&built);
            drop(built);
            match &verdict {
                Ok(figures) => eprintln!("{label}: as built: {figures}"),
                Err(figures) => {
                    eprintln!("{label}: NOT AS BUILT: {figures}");
                    failed.push(label.clone());
                }
            }
            let left = my_namespaces();
            assert!(left.is_empty(), "{label}: namespaces left behind: {left:?}");
            for f in netns_files
                .iter()
                .map(String::as_str)
                .chain(cgroup.as_ref().and_then(|c| c.to_str()))
            {
                assert!(
                    !std::path::Path::new(f).exists(),
                    "{label}: {f} left behind"
                );
            }
        }
    }
    assert!(failed.is_empty(), "not as built: {failed:?}");
}

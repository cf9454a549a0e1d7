//! The catalogue: each scenario builds a real server or a real kernel fault in namespaces of its
//! own and says which rule `latscope diagnose` must put first (or that it must exit 0).
//!
//! The client namespace `a` runs diagnose; the server lives in namespace `b` (or behind a router
//! or a delay line). Nothing here knows how the rules decide: a scenario states the fault and
//! the finding a person who built it would expect.

use std::any::Any;
use std::time::Duration;

use crate::fixtures::{
    CpuCgroup, Hosts, Proc, Resolver, nft, program, python, servers_js, servers_py, wait_tcp,
};
use crate::lab::netns::NetnsPair;
use crate::lab::nginx::{Nginx, NginxConf};
use crate::lab::probe::DelayLine;
use crate::lab::{BIN, TempDir, sh};

#[path = "far.rs"]
pub mod far;
#[path = "holdout6.rs"]
mod holdout6;
#[path = "holdout_far.rs"]
mod holdout_far;

/// What a scenario must produce, from one seat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// This rule first, exit 1.
    Rule(&'static str),
    /// This rule first, exit 1, naming this host to fix (`server`, `client`, `network`): where
    /// the side is what a user would get wrong (a kernel finding on the server, the client's
    /// own CPU).
    On {
        rule: &'static str,
        side: &'static str,
    },
    /// One of these rules first, exit 1, naming this host: where the seat's instruments decide
    /// how precisely one cause is named — the client's OUTPUT rules are `host_egress` (the
    /// stage, `local-out`) where this host's eBPF programs load and `client_host_stack` (its
    /// kernel timestamps) where they do not, and the server-host and agent seats share an
    /// expectation while only the first has the client's eBPF.
    OneOf {
        rules: &'static [&'static str],
        side: &'static str,
    },
    /// No finding, exit 0.
    Clean,
    /// The cause cannot be observed from this seat: the report must say that part of the time
    /// is unexplained and where to look (an [`UNNAMED_CAUSES`] finding first, its side `side`),
    /// never a named rule whose evidence it could not have. `lacks` is the evidence this seat
    /// has no access to (for the table and the docs). Not counted as right in top-1 accuracy:
    /// the lab reports it apart.
    Unobservable {
        side: &'static str,
        lacks: &'static str,
    },
}

impl Expect {
    /// Whether a run that ended with `code` and these findings (rule and side, in order) is
    /// what this expectation asks for.
    pub fn met(self, code: i32, rules: &[String], sides: &[String]) -> bool {
        match self {
            Expect::Rule(r) => code == 1 && rules.first().map(String::as_str) == Some(r),
            Expect::On { rule, side } => {
                code == 1
                    && rules.first().map(String::as_str) == Some(rule)
                    && sides.first().map(String::as_str) == Some(side)
            }
            Expect::OneOf { rules: any, side } => {
                code == 1
                    && rules.first().is_some_and(|r| any.contains(&r.as_str()))
                    && sides.first().map(String::as_str) == Some(side)
            }
            Expect::Clean => code == 0,
            Expect::Unobservable { side, .. } => {
                code == 1
                    && rules
                        .first()
                        .is_some_and(|r| UNNAMED_CAUSES.contains(&r.as_str()))
                    && sides.first().map(String::as_str) == Some(side)
            }
        }
    }

    /// The expectation in the lab's table.
    pub fn label(self) -> String {
        match self {
            Expect::Rule(r) => r.into(),
            Expect::On { rule, side } => format!("{rule} ({side})"),
            Expect::OneOf { rules, side } => format!("{} ({side})", rules.join(" or ")),
            Expect::Clean => "clean".into(),
            Expect::Unobservable { side, .. } => format!("unexplained ({side})"),
        }
    }
}

/// The findings that say "the time is there, and no named cause explains it": `unexplained` for a
/// share of every request, `server_tail_latency` for the tail of idle requests (its evidence names
/// what was not observed, e.g. the server's CPU scheduling). An unobservable cause must end in
/// one of them, on the right side.
const UNNAMED_CAUSES: [&str; 2] = ["unexplained", "server_tail_latency"];

/// The server's kernel, processes and cgroups, which only the server-host seat can read.
const SERVER_CPU: &str = "the server's cgroup and scheduler statistics (CPU quota, run queue)";

/// Which runs include a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    /// The lab (scripts/diagnose-lab.sh).
    Lab,
    /// Held back while the rules were developed; run last, reported separately.
    Holdout,
    /// Held back in round 6 (`holdout6.rs`), run once on the merged code of that round.
    Holdout6,
    /// Far-world scenarios held back for issue 37 (`holdout_far.rs`), run once at its end.
    HoldoutFar,
}

/// A built scenario: where to run diagnose, against what, and what to tear down.
pub struct Setup {
    pub client_ns: String,
    pub target: String,
    pub args: Vec<String>,
    /// A CPU-limited cgroup diagnose itself runs in (the client's own CPU quota).
    pub client_cgroup: Option<std::path::PathBuf>,
    guards: Vec<Box<dyn Any>>,
}

impl Setup {
    fn new(client_ns: &str, target: String) -> Setup {
        Setup {
            client_ns: client_ns.into(),
            target,
            args: vec![],
            client_cgroup: None,
            guards: vec![],
        }
    }

    fn keep<T: 'static>(mut self, g: T) -> Setup {
        self.guards.push(Box::new(g));
        self
    }

    fn arg(mut self, a: &str) -> Setup {
        self.args.push(a.into());
        self
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Last made, first undone: processes go before the cgroups and namespaces they use.
        while let Some(g) = self.guards.pop() {
            drop(g);
        }
    }
}

pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    /// What diagnose must say from the server's host.
    pub expect: Expect,
    /// What it must say from the client alone (the same as `expect` unless the cause cannot be
    /// observed from there).
    pub client: Expect,
    pub set: Set,
    /// Programs the scenario runs (besides latscope and iproute2): when one is missing it is
    /// reported as not run, with the remedy, instead of failing half-built.
    pub needs: &'static [&'static str],
    /// The round trips (ms) it runs at: with [`Build::AtRtt`] each is built; with
    /// [`Build::Fixed`] the one its set-up has (its distance is part of it).
    pub rtts: &'static [u32],
    /// What it must produce at ~0 (from the server's host, from the client alone) where that
    /// differs from `expect` and `client`, which hold at every other round trip: distance
    /// changes what a fault costs (a handshake's round trip is 50 µs on a veth, 20 ms far away).
    pub at_zero: Option<(Expect, Expect)>,
    pub build: Build,
}

/// How a scenario is built.
#[derive(Clone, Copy)]
pub enum Build {
    /// One set-up, its distance part of it.
    Fixed(fn() -> Setup),
    /// The same set-up at any round trip: the client's path to the server (and whatever else
    /// the scenario puts on that side, a resolver) is [`NetnsPair::with_rtt`]'s.
    AtRtt(fn(Duration) -> Setup),
}

/// The lab's near world: a veth pair, tens of microseconds.
pub const NEAR: &[u32] = &[0];

/// Near and far: ~0 and a 20 ms round trip (a server a country away).
pub const NEAR_FAR: &[u32] = &[0, 20];

/// Near, far and farther: ~0, 20 ms and 40 ms (another continent's edge).
pub const NEAR_FAR_40: &[u32] = &[0, 20, 40];

impl Scenario {
    /// Build it at `rtt_ms` (one of [`Scenario::rtts`]).
    pub fn build_at(&self, rtt_ms: u32) -> Setup {
        match self.build {
            Build::Fixed(f) => f(),
            Build::AtRtt(f) => f(Duration::from_millis(rtt_ms.into())),
        }
    }

    /// What it must produce at `rtt_ms` from the server's host and from the client alone.
    pub fn expected_at(&self, rtt_ms: u32) -> (Expect, Expect) {
        match self.at_zero {
            Some(near) if rtt_ms == 0 => near,
            _ => (self.expect, self.client),
        }
    }
}

/// Two namespaces joined by a veth pair (10.<net>.0.1 — 10.<net>.0.2, MTU 1500).
fn pair(net: u8) -> NetnsPair {
    NetnsPair::new("dl", net, 1500)
}

/// Client `a` and server `b` with a round trip of `rtt` between them, MTU 1500: the veth pair of
/// [`pair`] at zero, two routers joined by the lab's delay line otherwise.
pub fn pair_at(net: u8, rtt: Duration) -> NetnsPair {
    NetnsPair::with_rtt("dl", net, 1500, rtt)
}

/// `latscope serve` in namespace `ns` on `addr` port 7373 with extra flags.
fn serve(ns: &str, addr: &str, extra: &[&str]) -> Proc {
    let mut cmd = vec![BIN, "serve", "--bind", addr, "-q"];
    cmd.extend_from_slice(extra);
    Proc::start(ns, &cmd)
}

/// The lab's Python HTTP server in `ns` on `addr`:8080.
pub(crate) fn py_http(ns: &str, addr: &str, extra: &[&str]) -> Proc {
    let py = servers_py();
    let mut cmd = vec![python(), py.as_str(), "http", addr, "8080"];
    cmd.extend_from_slice(extra);
    Proc::start(ns, &cmd)
}

fn nginx_in(ns: &str, addr: &str, conf: NginxConf) -> Nginx {
    Nginx::start(NginxConf {
        netns: Some(ns.into()),
        addr: addr.into(),
        ..conf
    })
}

/// Many nftables rules on `hook` (`input` on a server, `output` on a client) that match nothing
/// the lab sends: each is evaluated for every packet.
fn nft_bloat(hook: &str, rules: usize) -> String {
    let mut s = format!(
        "table inet bloat {{\n chain {hook} {{\n  type filter hook {hook} priority 0; policy accept;\n"
    );
    for i in 0..rules {
        // An address outside the lab's nets and a port.
        s.push_str(&format!(
            "  ip saddr 192.0.{}.{} tcp dport {} drop\n",
            (i / 250) % 250,
            i % 250 + 1,
            1000 + i % 60000
        ));
    }
    s.push_str(" }\n}\n");
    s
}

/// A table with one base chain on `hook` holding `rule`.
fn one_rule(table: &str, hook: &str, rule: &str) -> String {
    format!(
        "table inet {table} {{\n chain {hook} {{\n  type filter hook {hook} priority 0; policy accept;\n  {rule}\n }}\n}}\n"
    )
}

fn latscope_pair(net: u8, serve_flags: &[&str]) -> (NetnsPair, Proc, String) {
    latscope_on(pair(net), serve_flags)
}

/// `latscope serve` in `p`'s server namespace on its address: the pair, the server, the target.
fn latscope_on(p: NetnsPair, serve_flags: &[&str]) -> (NetnsPair, Proc, String) {
    let srv = serve(&p.b, &p.addr_b, serve_flags);
    let target = format!("{}:7373", p.addr_b);
    wait_tcp(&p.a, &target);
    (p, srv, target)
}

fn healthy_latscope(rtt: Duration) -> Setup {
    let (p, srv, t) = latscope_on(pair_at(141, rtt), &[]);
    Setup::new(&p.a.clone(), t).keep(p).keep(srv)
}

fn healthy_nginx(rtt: Duration) -> Setup {
    let p = pair_at(142, rtt);
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn healthy_routed_nginx() -> Setup {
    let p = NetnsPair::routed("dl", 143, 1500);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 4096,
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn python_http_server() -> Setup {
    let p = pair(144);
    let dir = TempDir::new();
    std::fs::write(dir.path("index.html"), vec![b'p'; 612]).unwrap();
    let d = dir.0.display().to_string();
    let srv = Proc::start(
        &p.b,
        &[
            python(),
            "-m",
            "http.server",
            "--bind",
            &p.addr_b,
            "-d",
            &d,
            "8000",
        ],
    );
    let t = format!("{}:8000", p.addr_b);
    wait_tcp(&p.a, &t);
    Setup::new(&p.a.clone(), format!("http://{t}/index.html"))
        .keep(p)
        .keep(dir)
        .keep(srv)
}

fn py_target(p: NetnsPair, srv: Proc) -> Setup {
    let t = format!("{}:8080", p.addr_b);
    wait_tcp(&p.a, &t);
    Setup::new(&p.a.clone(), format!("http://{t}/"))
        .keep(p)
        .keep(srv)
}

fn nagle_server() -> Setup {
    let p = pair(145);
    let srv = py_http(&p.b, &p.addr_b, &["--split"]);
    py_target(p, srv)
}

fn think_time(rtt: Duration) -> Setup {
    let p = pair_at(146, rtt);
    let srv = py_http(&p.b, &p.addr_b, &["--think-ms", "15"]);
    py_target(p, srv)
}

fn one_worker() -> Setup {
    let p = pair(147);
    let srv = py_http(&p.b, &p.addr_b, &["--single", "--think-ms", "3"]);
    py_target(p, srv)
}

fn delayed_ack_client() -> Setup {
    // The server may send one segment per round trip (its congestion window is clamped to 1 on
    // the route back): a two-segment response needs the client's ACK of the first, which the
    // client delays (one full segment alone does not force an immediate ACK).
    let p = pair(148);
    p.exec(
        &p.b,
        &[
            "ip",
            "route",
            "replace",
            "10.148.0.0/24",
            "dev",
            &p.dev_b,
            "cwnd",
            "lock",
            "1",
        ],
    );
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 2000,
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn cpu_starved(rtt: Duration) -> Setup {
    // A threaded Python server given 10 ms of CPU per 100 ms period: under concurrent requests
    // it uses its quota and waits for the next period.
    let p = pair_at(149, rtt);
    let cg = CpuCgroup::new(10_000);
    let srv = py_http(&p.b, &p.addr_b, &[]);
    cg.add(srv.pid());
    let t = format!("{}:8080", p.addr_b);
    wait_tcp(&p.a, &t);
    Setup::new(&p.a.clone(), format!("http://{t}/"))
        .keep(p)
        .keep(cg)
        .keep(srv)
}

fn netfilter_bloat() -> Setup {
    let p = pair(150);
    nft(&p.b, &nft_bloat("input", 6000));
    let (srv, t) = {
        let s = serve(&p.b, &p.addr_b, &[]);
        let t = format!("{}:7373", p.addr_b);
        wait_tcp(&p.a, &t);
        (s, t)
    };
    Setup::new(&p.a.clone(), t)
        .arg("--no-load")
        .keep(p)
        .keep(srv)
}

fn loss(rtt: Duration) -> Setup {
    let (p, srv, t) = latscope_on(pair_at(151, rtt), &[]);
    nft(
        &p.b,
        &one_rule(
            "loss",
            "input",
            "tcp dport 7373 numgen random mod 50 0 drop",
        ),
    );
    Setup::new(&p.a.clone(), t)
        .arg("--no-load")
        .keep(p)
        .keep(srv)
}

fn syn_drops() -> Setup {
    let (p, srv, t) = latscope_pair(152, &[]);
    nft(
        &p.b,
        &one_rule(
            "syn",
            "input",
            "tcp dport 7373 tcp flags & (syn|ack) == syn numgen random mod 2 0 drop",
        ),
    );
    Setup::new(&p.a.clone(), t)
        .arg("--no-load")
        .keep(p)
        .keep(srv)
}

fn tbf(p: &NetnsPair, ns: &str, dev: &str, rate: &str, latency: &str) {
    p.exec(
        ns,
        &[
            "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "4kb",
            "latency", latency,
        ],
    );
}

fn slow_link(rtt: Duration) -> Setup {
    // A 4 Mbit/s link both ways with a short queue: each 1 KiB response takes ~2 ms to serialise.
    // (Far away, the shaping sits on the ends' own links, before the path's delay.)
    let (p, srv, t) = latscope_on(pair_at(153, rtt), &[]);
    tbf(&p, &p.a.clone(), &p.dev_a.clone(), "4mbit", "5ms");
    tbf(&p, &p.b.clone(), &p.dev_b.clone(), "4mbit", "5ms");
    Setup::new(&p.a.clone(), t).keep(p).keep(srv)
}

fn slow_link_http() -> Setup {
    // nginx with a 64 KiB page behind 8 Mbit/s on the server's way out (a queue deep enough
    // not to drop a response): no latscope serve there, so only the responses' packet trains
    // can tell the link's rate.
    let p = pair(157);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 64 * 1024,
            ..NginxConf::default()
        },
    );
    tbf(&p, &p.b.clone(), &p.dev_b.clone(), "8mbit", "100ms");
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn deep_queue() -> Setup {
    // 20 Mbit/s with 300 ms of queue on the client's way out: the bulk transfer fills it.
    let (p, srv, t) = latscope_pair(154, &[]);
    tbf(&p, &p.a.clone(), &p.dev_a.clone(), "20mbit", "300ms");
    Setup::new(&p.a.clone(), t).keep(p).keep(srv)
}

fn long_path() -> Setup {
    let dl = DelayLine::new(Duration::from_millis(25));
    let srv = serve(&dl.server.name, "10.8.0.2", &[]);
    wait_tcp(&dl.client.name, "10.8.0.2:7373");
    Setup::new(&dl.client.name.clone(), "10.8.0.2:7373".into())
        .arg("--no-load")
        .keep(dl)
        .keep(srv)
}

fn slow_dns() -> Setup {
    // The client's resolver (a local responder the lab starts) takes 300 ms per answer.
    let p = pair(155);
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    let py = servers_py();
    let dns = Proc::start_ready(
        &p.a,
        &[
            python(),
            &py,
            "dns",
            "127.0.0.1",
            "53",
            "web.lab.test",
            &p.addr_b,
            "300",
        ],
        "ready",
    );
    let res = Resolver::new(&p.a, "127.0.0.1");
    let url = format!("http://web.lab.test:{}/index.html", ng.port);
    Setup::new(&p.a.clone(), url)
        .keep(p)
        .keep(ng)
        .keep(res)
        .keep(dns)
}

/// A self-signed certificate and its key in `dir`, the key made by `openssl req -newkey`
/// with `key_args` (e.g. `["rsa:4096"]`).
fn self_signed(dir: &TempDir, key_args: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.path("srv.pem"), dir.path("srv.key"));
    let (key_s, cert_s) = (key.display().to_string(), cert.display().to_string());
    let mut cmd = vec!["openssl", "req", "-x509", "-newkey"];
    cmd.extend_from_slice(key_args);
    cmd.extend_from_slice(&[
        "-nodes", "-days", "2", "-subj", "/CN=lab", "-keyout", &key_s, "-out", &cert_s,
    ]);
    sh(&cmd);
    (cert, key)
}

fn slow_tls(rtt: Duration) -> Setup {
    // Every request is a new connection with a full TLS handshake signed by an RSA-4096 key.
    // Far away the new connection's round trips (TCP, TLS) cost more than the signature.
    let p = pair_at(156, rtt);
    let dir = TempDir::new();
    let tls = self_signed(&dir, &["rsa:4096"]);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            tls: Some(tls),
            keepalive: false,
            // No resumption: every connection pays the full RSA-4096 handshake.
            extra: "ssl_session_tickets off; ssl_session_cache off;".into(),
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(dir).keep(ng)
}

fn return_loss() -> Setup {
    // Loss on the way back: the server's own output drops 3% of its segments, nginx target.
    let p = pair(160);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 8000,
            ..NginxConf::default()
        },
    );
    nft(
        &p.b,
        &one_rule(
            "rloss",
            "output",
            &format!("tcp sport {} numgen random mod 33 0 drop", ng.port),
        ),
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn healthy_threaded_python() -> Setup {
    let p = pair(161);
    let srv = py_http(&p.b, &p.addr_b, &[]);
    py_target(p, srv)
}

fn cpu_hog() -> Setup {
    // latscope serve shares one CPU with two busy loops at the same priority: its threads wait
    // in the run queue for their turn.
    let (p, srv, t) = latscope_pair(162, &[]);
    sh(&["taskset", "-a", "-p", "-c", "0", &srv.pid().to_string()]);
    let hogs: Vec<Proc> = (0..2)
        .map(|_| {
            Proc::start(
                &p.b,
                &["taskset", "-c", "0", python(), "-c", "while True: pass"],
            )
        })
        .collect();
    Setup::new(&p.a.clone(), t)
        .arg("--no-load")
        .keep(p)
        .keep(srv)
        .keep(hogs)
}

// Round 3's held-back set (written before that round's rules, run twice at its end): part of the
// lab since.

fn policed_nginx() -> Setup {
    // nginx with a 64 KiB page whose output is policed to 2 MB/s by nftables: bursts above the
    // rate are dropped (a policer drops, it does not queue), so responses lose segments.
    let p = pair(163);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 64 * 1024,
            ..NginxConf::default()
        },
    );
    nft(
        &p.b,
        &one_rule(
            "police",
            "output",
            &format!("tcp sport {} limit rate over 2 mbytes/second drop", ng.port),
        ),
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn loopback_nodelay() -> Setup {
    // Client and server in one namespace over loopback (65 KB MSS): a threaded HTTP/1.1 server
    // with TCP_NODELAY and one write per response, so delayed ACKs never hold anything.
    let p = pair(164);
    let srv = py_http(&p.a, "127.0.0.1", &[]);
    wait_tcp(&p.a, "127.0.0.1:8080");
    Setup::new(&p.a.clone(), "http://127.0.0.1:8080/".into())
        .keep(p)
        .keep(srv)
}

fn pauses() -> Setup {
    // A fast threaded HTTP server that stops for 30 ms on every 40th request (a stop-the-world
    // pause): the median is untouched, the slowest requests wait.
    let p = pair(165);
    let srv = py_http(
        &p.b,
        &p.addr_b,
        &["--pause-ms", "30", "--pause-every", "40"],
    );
    py_target(p, srv)
}

// Held back in round 4: written before that round's rules, not run through diagnose until its
// end. Each fault was checked with independent tools (curl, tcpdump, cgroup and scheduler
// statistics) when it was written, never with diagnose.

/// The lab's Node.js server (`servers.js`) in `ns` on `addr`:8080.
fn node_http(ns: &str, addr: &str, extra: &[&str]) -> Proc {
    let node = program("node").expect("`needs` checked that node is installed");
    let js = servers_js();
    let node = node.display().to_string();
    let mut cmd = vec![node.as_str(), js.as_str(), addr, "8080"];
    cmd.extend_from_slice(extra);
    Proc::start(ns, &cmd)
}

fn node_target(p: NetnsPair, srv: Proc) -> Setup {
    let t = format!("{}:8080", p.addr_b);
    wait_tcp(&p.a, &t);
    Setup::new(&p.a.clone(), format!("http://{t}/"))
        .keep(p)
        .keep(srv)
}

fn holdout_node_default() -> Setup {
    // Node.js `http.createServer` with every default: keep-alive, one `res.end()` per response.
    let p = pair(166);
    let srv = node_http(&p.b, &p.addr_b, &[]);
    node_target(p, srv)
}

fn holdout_node_nagle() -> Setup {
    // Node.js with `socket.setNoDelay(false)`: the headers go out alone, the body a tick later
    // waits for their ACK, which the client delays.
    let p = pair(167);
    let srv = node_http(&p.b, &p.addr_b, &["--nagle"]);
    node_target(p, srv)
}

fn holdout_jumbo_server_delay() -> Setup {
    // A 9000-byte MTU link whose delay is on the way back: the TUN delay line holds every
    // server→client packet 30 ms, stock nginx with a 4 KiB page (one jumbo segment).
    let dl = DelayLine::asymmetric(Duration::ZERO, Duration::from_millis(30), 9000);
    let ng = nginx_in(
        &dl.server.name,
        "10.8.0.2",
        NginxConf {
            index_bytes: 4096,
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&dl.client.name.clone(), url).keep(dl).keep(ng)
}

/// `len` bytes of text that compresses like prose (words drawn from a fixed vocabulary by a
/// linear congruential generator, about 5:1 with `gzip -9`), so that inflating it is real work.
fn prose(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "latency", "the", "of", "server", "request", "queue", "kernel", "and", "packet", "a",
        "window", "socket", "to", "timer", "is", "path", "in", "cpu", "wait", "response", "buffer",
        "thread", "link", "for", "segment", "round", "trip", "cgroup", "quota", "on",
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        out.extend_from_slice(WORDS[(x >> 33) as usize % WORDS.len()].as_bytes());
        out.push(if (x >> 20) % 13 == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

fn holdout_nginx_quota() -> Setup {
    // nginx (a master and one worker) in a cgroup with 5 ms of CPU per 100 ms period. Its 256 KiB
    // page is stored compressed (`gzip -9`) and, for every client that does not send
    // `Accept-Encoding: gzip` (latscope's HTTP engine does not), decompressed by nginx on each
    // request (`gzip_static always; gunzip on;`): every request costs the worker CPU.
    let p = pair(168);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            master_process: true,
            extra: "gzip_static always; gunzip on; gunzip_buffers 64 4k;".into(),
            ..NginxConf::default()
        },
    );
    let page = ng.dir.path("html/index.html");
    std::fs::write(&page, prose(256 * 1024)).unwrap();
    sh(&["gzip", "-9", "-k", "-f", "-n", &page.display().to_string()]);
    let cg = CpuCgroup::new(5_000);
    cg.add(ng.master());
    cg.add(ng.worker().expect("nginx worker"));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(cg).keep(ng)
}

fn holdout_nginx_hogged() -> Setup {
    // nginx (a master and one worker) pinned to CPU 1 with two busy loops pinned there too.
    let p = pair(169);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            master_process: true,
            ..NginxConf::default()
        },
    );
    for pid in [ng.master(), ng.worker().expect("nginx worker")] {
        sh(&["taskset", "-a", "-p", "-c", "1", &pid.to_string()]);
    }
    let hogs: Vec<Proc> = (0..2)
        .map(|_| {
            Proc::start(
                &p.b,
                &["taskset", "-c", "1", python(), "-c", "while True: pass"],
            )
        })
        .collect();
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng).keep(hogs)
}

fn holdout_nginx_tls_keepalive() -> Setup {
    // A healthy HTTPS server: ECDSA P-256 (a handshake signature costs tens of µs), keep-alive,
    // a shared session cache.
    let p = pair(170);
    let dir = TempDir::new();
    let tls = self_signed(&dir, &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            tls: Some(tls),
            extra: "ssl_session_cache shared:lab:1m; ssl_session_timeout 10m;".into(),
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(dir).keep(ng)
}

// Round 5 (issue 25): causes on the client's own host, on the path, in the name → address step,
// and in what the server answers; each one seen from both seats. Written before that round's
// rules and without reading them; each fault was checked with tools that are not latscope (the
// figures are in each builder's comment).

fn client_netfilter() -> Setup {
    // 6,000 nftables rules on the *client's* output hook (its own host's firewall), stock nginx:
    // every packet the client sends walks them before it reaches the wire.
    // Checked with curl from the client namespace, 40 sequential requests (load average 16):
    // time_connect p25 0.14 ms without the table, 0.43 ms and 0.32 ms with it (two runs), the
    // SYN alone crossing the rules.
    let p = pair(171);
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    nft(&p.a, &nft_bloat("output", 6000));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

/// A 256 KiB page: a response that needs many round trips' worth of window.
const LARGE_PAGE: usize = 256 * 1024;

fn receive_window(rtt: Duration) -> Setup {
    // The client's TCP receive buffer capped at 16 KiB (`tcp_rmem` in its namespace), a 256 KiB
    // page: the server may never have more than the client's small window in flight, one window
    // per round trip.
    // Checked with curl (DelayLine, 20 ms all on the way out): time_total 0.69–0.75 s against
    // 0.14–0.15 s with the default tcp_rmem (3 requests each); `ss -ti` on the server 0.3 s into
    // a transfer: snd_wnd 8832, rwnd_limited 144 ms (56%). At each round trip: `far_faults`.
    let p = pair_at(172, rtt);
    p.exec(
        &p.a,
        &["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 16384 16384"],
    );
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: LARGE_PAGE,
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn send_buffer(rtt: Duration) -> Setup {
    // nginx with `listen … sndbuf=4k` (the kernel doubles it to 8 KiB), a 1 MiB page: the server
    // never has much more than its small send buffer in flight.
    // (TCP may still fill one GSO-sized buffer past the limit, so a 256 KiB page was only 1.4×
    // slower: 0.20 s against 0.14–0.16 s.)
    // Checked with curl (DelayLine, 20 ms all on the way out): 0.52–0.56 s per 1 MiB page
    // against 0.19–0.21 s without `sndbuf` (3 requests each); `ss -tmi` on the server 0.45 s
    // into a transfer: tb8192, snd_wnd 303104, sndbuf_limited 168 ms (42% of busy 400 ms);
    // without `sndbuf`: tb276480, no sndbuf_limited. At each round trip: `far_faults`.
    let p = pair_at(173, rtt);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 1024 * 1024,
            listen_params: "sndbuf=4k".into(),
            ..NginxConf::default()
        },
    );
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn pmtu_black_hole() -> Setup {
    // client — router — nginx, every link MTU 1500 but the router's link to the client at 1400
    // (a tunnel on the way, as a VPN or a PPPoE line would be); the router's ICMP
    // "fragmentation needed" is dropped (its output hook), so the server never learns the path
    // MTU. Requests (small) pass; full-size response segments (1500 bytes) are lost.
    // Checked: curl of the 64 KiB page gets the headers (200) and no body byte, exit 28 at
    // `--max-time 5`; tcpdump on the server's link: the first full-size segment resent at
    // +7 ms and +215 ms; the router's nftables counter: 8 "fragmentation needed" dropped; a
    // 500-byte page answers (41 ms at load average 16); with `advmss 1300` on the client's
    // route the 64 KiB page arrives in 21 ms.
    let p = NetnsPair::routed("dl", 174, 1500);
    let (router, _) = p.router.clone().expect("routed pair");
    let to_client = p.router_to_a.clone().expect("routed pair");
    p.exec(&router, &["ip", "link", "set", &to_client, "mtu", "1400"]);
    nft(
        &router,
        &one_rule(
            "pmtu",
            "output",
            "icmp type destination-unreachable icmp code frag-needed counter drop",
        ),
    );
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 64 * 1024,
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn dead_aaaa() -> Setup {
    // web.lab.test has an IPv6 address that answers nothing (routed to the server's namespace,
    // which drops it, as a firewall or a stale AAAA does) and a working IPv4 address, both in
    // the client's hosts file. The client has a global IPv6 address of its own, so RFC 6724
    // orders the AAAA first (`getent ahosts web.lab.test`: 2001:db8:175:1::1 first).
    // Checked: `curl http://web.lab.test:PORT/` answers from 10.175.0.2 with time_connect
    // 0.23–0.26 s (Happy Eyeballs: 200 ms for IPv6, then IPv4); `curl -6` exit 28 after its 3 s
    // connect timeout; `curl -4` 0.05 s (load average 16); the server's drop counted 6 SYNs.
    let p = pair(175);
    let (v6_a, v6_b, dead) = ("2001:db8:175::1", "2001:db8:175::2", "2001:db8:175:1::1");
    p.exec(
        &p.a,
        &[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{v6_a}/64"),
            "dev",
            &p.dev_a,
            "nodad",
        ],
    );
    p.exec(
        &p.b,
        &[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{v6_b}/64"),
            "dev",
            &p.dev_b,
            "nodad",
        ],
    );
    p.exec(
        &p.a,
        &[
            "ip",
            "-6",
            "route",
            "add",
            &format!("{dead}/128"),
            "via",
            v6_b,
        ],
    );
    nft(
        &p.b,
        &format!(
            "table ip6 dead {{\n chain pre {{\n  type filter hook prerouting priority 0; policy accept;\n  ip6 daddr {dead} drop\n }}\n}}\n"
        ),
    );
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    let hosts = Hosts::new(
        &p.a,
        &[
            format!("{dead} web.lab.test").as_str(),
            format!("{} web.lab.test", p.addr_b).as_str(),
        ],
    );
    let url = format!("http://web.lab.test:{}/index.html", ng.port);
    Setup::new(&p.a.clone(), url).keep(p).keep(ng).keep(hosts)
}

fn accept_queue() -> Setup {
    // A threaded HTTP server that closes after every response (each request a new connection),
    // listens with a backlog of 1 and spends 20 ms on each new connection before it accepts the
    // next: under concurrent clients the accept queue is full, the kernel drops the SYNs
    // (ListenOverflows) and the clients send them again 1 s later.
    // Checked: nstat in the server's namespace after 8 parallel curl loops of 20 requests:
    // TcpExtListenOverflows 25, TcpExtListenDrops 25; 19 of the 160 requests had a
    // time_connect of 0.9 s or more (a SYN sent again after 1 s), the median 0.13 ms; 20
    // sequential requests: no overflow, the slowest connect 34 ms.
    let p = pair(176);
    let srv = py_http(
        &p.b,
        &p.addr_b,
        &["--backlog", "1", "--accept-ms", "20", "--close"],
    );
    py_target(p, srv)
}

fn slow_path() -> Setup {
    // client — router — nginx (128 KiB page), the router's link to the client shaped to
    // 10 Mbit/s (tbf with 200 ms of queue, so one response is delayed, not dropped): the server's
    // host and the client's host are both fast, the path is not.
    // Checked: curl, 5 pages: 107–133 ms each (1.0–1.2 MB/s), against 14–53 ms unshaped at load
    // average 16; `tc -s qdisc` on the router: 0 dropped (34 dropped with 50 ms of queue).
    let p = NetnsPair::routed("dl", 177, 1500);
    let (router, _) = p.router.clone().expect("routed pair");
    let to_client = p.router_to_a.clone().expect("routed pair");
    tbf(&p, &router, &to_client, "10mbit", "200ms");
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: 128 * 1024,
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn forbidden() -> Setup {
    // nginx as deployed (a root master, workers as `nobody`) whose document root sits in a 0700
    // directory: every request is answered 403 Forbidden (a small error page, fast).
    // Checked: curl -w '%{http_code}' → 403 for /index.html and /; 200 once the directory is
    // 0755.
    let p = pair(178);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            master_process: true,
            ..NginxConf::default()
        },
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ng.dir.0, std::fs::Permissions::from_mode(0o700))
        .expect("chmod 0700 nginx's prefix");
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "healthy-latscope-serve",
        what: "latscope serve, defaults, one veth hop",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &[],
        rtts: NEAR_FAR_40,
        at_zero: None,
        build: Build::AtRtt(healthy_latscope),
    },
    Scenario {
        name: "healthy-nginx",
        what: "nginx, default settings (tcp_nodelay on, sendfile on), one veth hop",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        at_zero: None,
        build: Build::AtRtt(healthy_nginx),
    },
    Scenario {
        name: "healthy-nginx-routed",
        what: "nginx with a 4 KiB page behind a router namespace",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(healthy_routed_nginx),
    },
    Scenario {
        name: "python-http.server",
        what: "python3 -m http.server defaults: HTTP/1.0, a connection and a thread per request, one GIL",
        expect: Expect::Rule("socket_queueing"),
        client: Expect::Rule("socket_queueing"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(python_http_server),
    },
    Scenario {
        name: "nagle-server",
        what: "HTTP server writing header and body in two send()s, TCP_NODELAY off",
        expect: Expect::Rule("nagle_delayed_ack"),
        client: Expect::Rule("nagle_delayed_ack"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(nagle_server),
    },
    Scenario {
        name: "delayed-ack-client",
        what: "server's congestion window locked to 1 segment, 2-segment responses: the client's delayed ACK releases the second",
        expect: Expect::Rule("delayed_ack"),
        client: Expect::Rule("delayed_ack"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(delayed_ack_client),
    },
    Scenario {
        name: "think-time",
        what: "HTTP server sleeping 15 ms before every answer",
        expect: Expect::Rule("think_time"),
        client: Expect::Rule("think_time"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(think_time),
    },
    Scenario {
        name: "one-worker",
        what: "HTTP server on one thread (event loop) doing 3 ms of blocking work per request, 8 concurrent clients",
        expect: Expect::Rule("socket_queueing"),
        client: Expect::Rule("socket_queueing"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(one_worker),
    },
    Scenario {
        name: "cpu-starved",
        what: "threaded HTTP server in a cgroup limited to 10% of a CPU",
        expect: Expect::Rule("cpu_throttling"),
        client: Expect::Unobservable {
            side: "server",
            lacks: SERVER_CPU,
        },
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::AtRtt(cpu_starved),
    },
    Scenario {
        name: "netfilter-bloat",
        what: "6000 nftables rules on the server's input hook",
        expect: Expect::Rule("pre_tcp_kernel"),
        client: Expect::Unobservable {
            side: "server",
            lacks: "the server's kernel stack (time between the wire and TCP)",
        },
        set: Set::Lab,
        needs: &["nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(netfilter_bloat),
    },
    Scenario {
        name: "loss",
        what: "nftables numgen drops 2% of segments to the server",
        expect: Expect::Rule("retransmissions"),
        client: Expect::Rule("retransmissions"),
        set: Set::Lab,
        needs: &["nft"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(loss),
    },
    Scenario {
        name: "syn-drops",
        what: "nftables drops half of the SYNs",
        expect: Expect::Rule("slow_handshake"),
        client: Expect::Rule("slow_handshake"),
        set: Set::Lab,
        needs: &["nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(syn_drops),
    },
    Scenario {
        name: "slow-link",
        what: "4 Mbit/s tbf both ways, short queue",
        // 20 ms away a request's 1 KiB fits the bucket's burst: a single request is not held
        // by the shaper at all (ping -s 1400: 20.43 ms against 20.40 without the tbf), and the
        // 5 ms queue is 1/4 of a round trip; naming the link would be a false finding there.
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &["tc"],
        rtts: NEAR_FAR,
        at_zero: Some((
            Expect::Rule("bottleneck_bandwidth"),
            Expect::Rule("bottleneck_bandwidth"),
        )),
        build: Build::AtRtt(slow_link),
    },
    Scenario {
        name: "slow-link-http",
        what: "nginx, 64 KiB page, 8 Mbit/s tbf on the server's way out (URL target: no bulk transfer)",
        expect: Expect::Rule("bottleneck_bandwidth"),
        client: Expect::Rule("bottleneck_bandwidth"),
        set: Set::Lab,
        needs: &["nginx", "tc"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(slow_link_http),
    },
    Scenario {
        name: "deep-queue",
        what: "20 Mbit/s tbf with 300 ms of queue on the client's way out",
        expect: Expect::Rule("bufferbloat"),
        client: Expect::Rule("bufferbloat"),
        set: Set::Lab,
        needs: &["tc"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(deep_queue),
    },
    Scenario {
        name: "long-path",
        what: "TUN delay line holding every client→server packet 25 ms",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &[],
        rtts: &[25],
        at_zero: None,
        build: Build::Fixed(long_path),
    },
    Scenario {
        name: "slow-dns",
        what: "the client's resolver answers after 300 ms (URL with a host name)",
        expect: Expect::Rule("slow_dns"),
        client: Expect::Rule("slow_dns"),
        set: Set::Lab,
        needs: &["nginx", "python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(slow_dns),
    },
    Scenario {
        name: "slow-tls",
        what: "nginx HTTPS, RSA-4096 key, no keep-alive: a full handshake per request (far away its new connection's round trips cost more than the signature)",
        expect: Expect::Rule("connection_not_reused"),
        client: Expect::Rule("connection_not_reused"),
        set: Set::Lab,
        needs: &["nginx", "openssl"],
        rtts: NEAR_FAR,
        at_zero: Some((Expect::Rule("slow_tls"), Expect::Rule("slow_tls"))),
        build: Build::AtRtt(slow_tls),
    },
    Scenario {
        name: "return-loss",
        what: "nginx, 8 KB page, the server's output drops 3% of its segments",
        expect: Expect::Rule("retransmissions"),
        client: Expect::Rule("retransmissions"),
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(return_loss),
    },
    Scenario {
        name: "healthy-threaded-python",
        what: "threaded Python HTTP/1.1 keep-alive server, TCP_NODELAY, one write per response",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(healthy_threaded_python),
    },
    Scenario {
        name: "cpu-hog",
        what: "latscope serve pinned to a CPU shared with two busy loops",
        expect: Expect::Rule("run_queue_delay"),
        client: Expect::Unobservable {
            side: "server",
            lacks: SERVER_CPU,
        },
        set: Set::Lab,
        needs: &["taskset", "python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(cpu_hog),
    },
    Scenario {
        name: "policed-nginx",
        what: "nginx, 64 KiB page, the server's output policed to 2 MB/s by nftables (drops above the rate)",
        expect: Expect::Rule("retransmissions"),
        client: Expect::Rule("retransmissions"),
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(policed_nginx),
    },
    Scenario {
        name: "loopback-nodelay",
        what: "threaded Python HTTP/1.1 server on 127.0.0.1 in the client's namespace, TCP_NODELAY, one write per response",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(loopback_nodelay),
    },
    Scenario {
        name: "pauses",
        what: "threaded Python HTTP server pausing 30 ms on every 40th request",
        expect: Expect::Rule("server_tail_latency"),
        client: Expect::Rule("server_tail_latency"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(pauses),
    },
    Scenario {
        name: "client-netfilter",
        what: "6000 nftables rules on the client's own output hook, stock nginx",
        expect: Expect::OneOf {
            rules: &["host_egress", "client_host_stack"],
            side: "client",
        },
        client: Expect::Rule("client_host_stack"),
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(client_netfilter),
    },
    Scenario {
        name: "receive-window",
        what: "the client's tcp_rmem capped at 16 KiB, nginx 256 KiB page",
        expect: Expect::Rule("receive_window_limited"),
        client: Expect::Rule("receive_window_limited"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        at_zero: None,
        build: Build::AtRtt(receive_window),
    },
    Scenario {
        name: "send-buffer",
        what: "nginx `listen … sndbuf=4k`, 1 MiB page",
        expect: Expect::Rule("send_buffer_limited"),
        // From the client alone: the responses' flights of one size round after round, with a
        // pause between them (the finding says the server's host tells a buffer from a slow
        // writer apart).
        client: Expect::Rule("send_buffer_limited"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        // 8 KiB in flight per 50 µs round trip is more than a veth needs.
        at_zero: Some((Expect::Clean, Expect::Clean)),
        build: Build::AtRtt(send_buffer),
    },
    Scenario {
        name: "pmtu-black-hole",
        what: "router's link to the client at MTU 1400 with ICMP fragmentation-needed dropped, nginx 64 KiB page",
        expect: Expect::Rule("pmtu_black_hole"),
        client: Expect::Rule("pmtu_black_hole"),
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(pmtu_black_hole),
    },
    Scenario {
        name: "dead-aaaa",
        what: "a name (hosts file) with a dead AAAA address ordered first and a working A address, nginx",
        expect: Expect::Rule("dead_address_family"),
        client: Expect::Rule("dead_address_family"),
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(dead_aaaa),
    },
    Scenario {
        name: "accept-queue",
        what: "HTTP server with listen backlog 1, 20 ms per accept, a connection per request: the accept queue overflows under concurrency",
        expect: Expect::Rule("slow_handshake"),
        client: Expect::Rule("slow_handshake"),
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(accept_queue),
    },
    Scenario {
        name: "slow-path",
        what: "nginx 128 KiB page behind a router whose link to the client is shaped to 10 Mbit/s (tbf, 200 ms of queue)",
        expect: Expect::Rule("bottleneck_bandwidth"),
        client: Expect::Rule("bottleneck_bandwidth"),
        set: Set::Lab,
        needs: &["nginx", "tc"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(slow_path),
    },
    Scenario {
        name: "error-responses",
        what: "nginx (workers as nobody) whose pages sit in a 0700 directory: 403 to every request",
        expect: Expect::Rule("error_responses"),
        client: Expect::Rule("error_responses"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(forbidden),
    },
    Scenario {
        name: "holdout-node-default",
        what: "Node.js http.createServer, every default (keep-alive), 612-byte body in one res.end()",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Holdout,
        needs: &["node"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(holdout_node_default),
    },
    Scenario {
        name: "holdout-node-nagle",
        what: "Node.js server with socket.setNoDelay(false), headers flushed, body a tick later",
        expect: Expect::Rule("nagle_delayed_ack"),
        client: Expect::Rule("nagle_delayed_ack"),
        set: Set::Holdout,
        needs: &["node"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(holdout_node_nagle),
    },
    Scenario {
        name: "holdout-jumbo-server-delay",
        what: "stock nginx (4 KiB page) over a 9000-byte-MTU TUN delay line holding every server→client packet 30 ms",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Holdout,
        needs: &["nginx"],
        rtts: &[30],
        at_zero: None,
        build: Build::Fixed(holdout_jumbo_server_delay),
    },
    Scenario {
        name: "holdout-nginx-quota",
        what: "nginx (one worker) in a cgroup with 5 ms of CPU per 100 ms, 256 KiB page stored gzip -9 and gunzip'ed for every request",
        expect: Expect::Rule("cpu_throttling"),
        client: Expect::Unobservable {
            side: "server",
            lacks: SERVER_CPU,
        },
        set: Set::Holdout,
        needs: &["nginx"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(holdout_nginx_quota),
    },
    Scenario {
        name: "holdout-nginx-hogged",
        what: "nginx (one worker) pinned to CPU 1 with two busy loops pinned there too",
        expect: Expect::Rule("run_queue_delay"),
        client: Expect::Unobservable {
            side: "server",
            lacks: SERVER_CPU,
        },
        set: Set::Holdout,
        needs: &["nginx", "taskset", "python3"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(holdout_nginx_hogged),
    },
    Scenario {
        name: "holdout-nginx-tls-keepalive",
        what: "nginx HTTPS, ECDSA P-256 key, keep-alive, shared session cache",
        expect: Expect::Clean,
        client: Expect::Clean,
        set: Set::Holdout,
        needs: &["nginx", "openssl"],
        rtts: NEAR,
        at_zero: None,
        build: Build::Fixed(holdout_nginx_tls_keepalive),
    },
];

/// Every scenario: the lab's and the held-back sets', wherever they are written.
pub fn all() -> impl Iterator<Item = &'static Scenario> {
    SCENARIOS
        .iter()
        .chain(far::SCENARIOS)
        .chain(holdout6::SCENARIOS)
        .chain(holdout_far::SCENARIOS)
}

pub fn by_name(name: &str) -> &'static Scenario {
    all()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario {name}"))
}

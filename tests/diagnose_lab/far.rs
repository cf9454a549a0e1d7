//! The far world (issue 37): faults whose cost is counted in round trips, each built at ~0 and at
//! 20–40 ms of round trip with one parameter ([`NetnsPair::with_rtt`]), and what a network
//! engineer who built it would expect diagnose to name. Written from the faults, not from the
//! rules (the round-trip rules were being written at the same time, by others).
//!
//! Every fault is checked at each round trip with tools that are not latscope (curl's `-w`
//! timings and connection counts, `openssl s_client`, `getent`, the resolver's own query log,
//! `ss -ti`, `nstat`, hping3, ping, cgroup statistics): the ignored test [`far_faults`] builds
//! each, measures it, prints the figures and tears it down, and the lab's scenarios that became
//! far-capable (healthy servers, think time, a CPU-starved server, loss, a slow link, TLS, the
//! windows) are checked there too. The figures seen are in each builder's comment.

use std::time::Duration;

use super::{
    Build, Expect, NEAR_FAR, NEAR_FAR_40, SERVER_CPU, Scenario, Set, Setup, nft_bloat, nginx_in,
    pair_at, self_signed,
};
use crate::fixtures::{CpuCgroup, Proc, Resolver, python, servers_py, wait_tcp};
use crate::lab::netns::NetnsPair;
use crate::lab::nginx::NginxConf;
use crate::lab::{TempDir, sh};
use crate::verify::{
    Built, Check, Make, Verdict, curl, curl_urls, in_ns, median, ok_if, py_probe, run_checks,
};

/// The name the DNS scenarios' resolver answers.
pub(super) const NAME: &str = "web.lab.test";

fn no_keepalive(rtt: Duration) -> Setup {
    // Stock nginx with `keepalive_timeout 0`: it answers `Connection: close` and closes after
    // every response, so every request opens a new connection (one more round trip, and a
    // handshake's worth of work on both hosts).
    let p = pair_at(190, rtt);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            keepalive: false,
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn tls12_no_resumption(rtt: Duration) -> Setup {
    // nginx HTTPS (ECDSA P-256: the signature costs tens of µs, so only round trips are left)
    // that speaks TLS 1.2 only, with neither session tickets nor a session cache: every new
    // connection pays a full two-round-trip handshake where a resumed one (or TLS 1.3) takes
    // one. Keep-alive on.
    let p = pair_at(191, rtt);
    let dir = TempDir::new();
    let tls = self_signed(&dir, &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            tls: Some(tls),
            extra: "ssl_protocols TLSv1.2; ssl_session_tickets off; ssl_session_cache off;".into(),
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(dir).keep(ng)
}

/// A file removed on drop.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The lab's DNS responder (`servers.py dns`) on the server's side of the path (port 53 of its
/// address: each query crosses the path), answering [`NAME`] with the server's address, and
/// logging every query to `log`.
fn far_resolver(ns: &str, addr: &str, log: &std::path::Path, extra: &[&str]) -> Proc {
    let py = servers_py();
    let log = log.display().to_string();
    let mut cmd = vec![
        python(),
        py.as_str(),
        "dns",
        addr,
        "53",
        NAME,
        addr,
        "0",
        "--log",
        &log,
    ];
    cmd.extend_from_slice(extra);
    Proc::start_ready(ns, &cmd, "ready")
}

/// stock nginx at `rtt` named [`NAME`] by a resolver across the path whose extra flags are
/// `resolver_flags`, the client's resolv.conf `conf` (with `{ns}` for the resolver's address).
pub(super) fn named_nginx(net: u8, rtt: Duration, resolver_flags: &[&str], conf: &str) -> Setup {
    let p = pair_at(net, rtt);
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let log = Removed(query_log(&p.a));
    let dns = far_resolver(&p.b, &p.addr_b, &log.0, resolver_flags);
    let res = Resolver::with_conf(&p.a, &conf.replace("{ns}", &p.addr_b));
    let url = format!("http://{NAME}:{}/index.html", ng.port);
    Setup::new(&p.a.clone(), url)
        .keep(p)
        .keep(ng)
        .keep(log)
        .keep(res)
        .keep(dns)
}

fn aaaa_timeout(rtt: Duration) -> Setup {
    // The client's resolver (across the path) answers A queries at once and never answers AAAA
    // (a resolver or a middlebox that drops them). getaddrinfo asks for both and waits out its
    // timeout (`options timeout:2 attempts:1`: 2 s) for the AAAA before it returns the A: every
    // lookup of the name costs the resolver's timeout.
    named_nginx(
        192,
        rtt,
        &["--no-aaaa"],
        "nameserver {ns}\noptions timeout:2 attempts:1\n",
    )
}

fn ndots_search(rtt: Duration) -> Setup {
    // A Kubernetes pod's resolv.conf: three search domains and `ndots:5`. `web.lab.test` has
    // two dots, fewer than five, so getaddrinfo tries it under each search domain first (three
    // NXDOMAIN answers, each a round trip to the resolver for A and AAAA) before the name
    // itself: four round trips per lookup where one would do.
    named_nginx(
        193,
        rtt,
        &[],
        "nameserver {ns}\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
    )
}

fn client_cpu_quota(rtt: Duration) -> Setup {
    // A healthy stock nginx; latscope itself runs in a cgroup with 2 ms of CPU per 100 ms
    // (a CI runner's or a pod's CPU limit): its own threads wait for the next period. The
    // issue's client was throttled in 152 of 164 periods under 10 ms; latscope needs about
    // 2 ms per 100 ms from the client's seats now, and under 10 ms it was throttled in 0–3 of
    // 48 periods (round 16): no starved client to find. Under 3 ms, 20 ms away, the client
    // seats' runs were throttled in only 5–7 of 45 periods (round 17: a starved client one run
    // in two); under 2 ms its bursts (the handshakes, the concurrent requests) outrun the
    // quota in most periods at either distance, as the issue's did.
    let p = pair_at(194, rtt);
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let cg = CpuCgroup::new(2_000);
    let url = ng.url("/index.html");
    let mut setup = Setup::new(&p.a.clone(), url);
    setup.client_cgroup = Some(cg.dir.clone());
    setup.keep(p).keep(ng).keep(cg)
}

fn netfilter_10k(rtt: Duration) -> Setup {
    // 10,000 nftables rules on the server's input hook (none matching), stock nginx: every
    // packet the server receives walks them before TCP sees it.
    let p = pair_at(195, rtt);
    crate::fixtures::nft(&p.b, &nft_bloat("input", 10_000));
    let ng = nginx_in(&p.b, &p.addr_b, NginxConf::default());
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

fn cpu_throttled(rtt: Duration) -> Setup {
    // The lab's threaded Python HTTP server computing 2 ms of CPU per request (rendering) in a
    // cgroup with 10 ms of CPU per 100 ms: five requests a period, then every thread waits for
    // the next one. (The lab's `cpu-starved`, whose requests cost ~0.1 ms, is not throttled by
    // the few hundred requests a second a client gets over 20 ms of round trip.)
    let p = pair_at(196, rtt);
    let cg = CpuCgroup::new(10_000);
    let srv = super::py_http(&p.b, &p.addr_b, &["--work-ms", "2"]);
    cg.add(srv.pid());
    let t = format!("{}:8080", p.addr_b);
    wait_tcp(&p.a, &t);
    Setup::new(&p.a.clone(), format!("http://{t}/"))
        .keep(p)
        .keep(cg)
        .keep(srv)
}

/// `attrs` (`initcwnd 2`, `congctl reno`) on the server's route to the client: a host route
/// beside the one the kernel chose, through the same gateway and device (ip-route(8)'s per-route
/// TCP parameters, which apply to every connection to that destination).
fn server_route_to_client(p: &NetnsPair, attrs: &[&str]) {
    let out = sh(&["ip", "-n", &p.b, "-4", "route", "get", &p.addr_a]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |key: &str| {
        let i = words.iter().position(|w| *w == key)?;
        words.get(i + 1).copied()
    };
    let dev = after("dev").unwrap_or_else(|| panic!("ip route get {}: {text}", p.addr_a));
    let host = format!("{}/32", p.addr_a);
    let mut argv = vec!["ip", "-n", &p.b, "route", "replace", &host];
    if let Some(gw) = after("via") {
        argv.extend(["via", gw]);
    }
    argv.extend(["dev", dev]);
    argv.extend_from_slice(attrs);
    sh(&argv);
}

fn redirect_chain(rtt: Duration) -> Setup {
    // Stock nginx (keep-alive on) whose entry URL answers two redirects in a row before the
    // page (/start 302 → /landing 302 → /index.html), as an old link through a campaign page
    // does: three requests for one page, two round trips where none would do (a link to the
    // final URL).
    let p = pair_at(197, rtt);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            server_extra: "location = /start { return 302 /landing; } \
                           location = /landing { return 302 /index.html; }"
                .into(),
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/start");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

/// The page of the window scenarios below: big enough to need several congestion windows.
const IDLE_PAGE: usize = 512 * 1024;

fn idle_restart(rtt: Duration) -> Setup {
    // Stock nginx, keep-alive, a 512 KiB page, Reno on the server's route to the client
    // (Linux's slow start after idle is skipped by congestion controls that pace on their own,
    // BBR: this host's default) and `tcp_slow_start_after_idle` 1 (Linux's default): a kept
    // connection idle for longer than its RTO starts again from the initial window, so the
    // first request after a pause pays slow start's round trips again (RFC 5681 section 4.1).
    let p = pair_at(198, rtt);
    sh(&[
        "ip",
        "netns",
        "exec",
        &p.b,
        "sysctl",
        "-qw",
        "net.ipv4.tcp_slow_start_after_idle=1",
    ]);
    server_route_to_client(&p, &["congctl", "reno"]);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: IDLE_PAGE,
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

/// The page of the initial-window scenario: 90 segments of 1448 bytes.
const INITCWND_PAGE: usize = 128 * 1024;

fn small_initcwnd(rtt: Duration) -> Setup {
    // Stock nginx, a 128 KiB page, the server's route to the client with `initcwnd 2` (what
    // Linux sent before 2.6.39; RFC 6928 raised it to 10): a new connection's response needs
    // six flights (2, 4, … 64 segments) where ten segments to start take four.
    let p = pair_at(199, rtt);
    server_route_to_client(&p, &["initcwnd", "2"]);
    let ng = nginx_in(
        &p.b,
        &p.addr_b,
        NginxConf {
            index_bytes: INITCWND_PAGE,
            ..NginxConf::default()
        },
    );
    wait_tcp(&p.a, &format!("{}:{}", p.addr_b, ng.port));
    let url = ng.url("/index.html");
    Setup::new(&p.a.clone(), url).keep(p).keep(ng)
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "no-keepalive",
        what: "stock nginx with keepalive_timeout 0: Connection: close after every response",
        expect: Expect::Rule("connection_not_reused"),
        client: Expect::Rule("connection_not_reused"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        at_zero: None,
        build: Build::AtRtt(no_keepalive),
    },
    Scenario {
        name: "tls12-no-resumption",
        what: "nginx HTTPS (ECDSA P-256), TLS 1.2 only, no session tickets nor cache, keep-alive",
        expect: Expect::Rule("tls_not_resumed"),
        client: Expect::Rule("tls_not_resumed"),
        set: Set::Lab,
        needs: &["nginx", "openssl"],
        rtts: NEAR_FAR_40,
        // Two round trips of 50 µs on a veth, on the few new connections of a keep-alive run.
        at_zero: Some((Expect::Clean, Expect::Clean)),
        build: Build::AtRtt(tls12_no_resumption),
    },
    Scenario {
        name: "aaaa-timeout",
        what: "the client's resolver (across the path) never answers AAAA: each lookup waits its 2 s timeout",
        expect: Expect::Rule("slow_dns"),
        client: Expect::Rule("slow_dns"),
        set: Set::Lab,
        needs: &["nginx", "python3"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(aaaa_timeout),
    },
    Scenario {
        name: "ndots-search",
        what: "a pod's resolv.conf (three search domains, ndots:5): each lookup walks the search list first",
        expect: Expect::Rule("slow_dns"),
        client: Expect::Rule("slow_dns"),
        set: Set::Lab,
        needs: &["nginx", "python3"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(ndots_search),
    },
    Scenario {
        name: "client-cpu-quota",
        what: "healthy nginx; latscope itself in a cgroup with 2 ms of CPU per 100 ms",
        expect: Expect::On {
            rule: "client_cpu_starved",
            side: "client",
        },
        client: Expect::On {
            rule: "client_cpu_starved",
            side: "client",
        },
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(client_cpu_quota),
    },
    Scenario {
        name: "cpu-throttled",
        what: "threaded Python HTTP server computing 2 ms per request in a cgroup with 10 ms of CPU per 100 ms",
        expect: Expect::Rule("cpu_throttling"),
        client: Expect::Unobservable {
            side: "server",
            lacks: SERVER_CPU,
        },
        set: Set::Lab,
        needs: &["python3"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(cpu_throttled),
    },
    Scenario {
        name: "netfilter-10k",
        what: "10,000 nftables rules on the server's input hook, stock nginx",
        expect: Expect::On {
            rule: "pre_tcp_kernel",
            side: "server",
        },
        client: Expect::Unobservable {
            side: "server",
            lacks: "the server's kernel stack (time between the wire and TCP)",
        },
        set: Set::Lab,
        needs: &["nginx", "nft"],
        rtts: NEAR_FAR,
        at_zero: None,
        build: Build::AtRtt(netfilter_10k),
    },
    Scenario {
        name: "redirect-chain",
        what: "stock nginx whose entry URL redirects twice (302, 302) before the page, keep-alive",
        expect: Expect::Rule("redirects"),
        client: Expect::Rule("redirects"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        at_zero: None,
        build: Build::AtRtt(redirect_chain),
    },
    Scenario {
        name: "idle-restart",
        what: "stock nginx, 512 KiB page, Reno on the route, tcp_slow_start_after_idle 1: a kept connection restarts slow start after a pause",
        expect: Expect::Rule("slow_start_after_idle"),
        client: Expect::Rule("slow_start_after_idle"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        // Slow start's rounds are 50 µs each on a veth: nothing to save there.
        at_zero: Some((Expect::Clean, Expect::Clean)),
        build: Build::AtRtt(idle_restart),
    },
    Scenario {
        name: "small-initcwnd",
        what: "stock nginx, 128 KiB page, initcwnd 2 on the server's route to the client",
        expect: Expect::Rule("small_initial_window"),
        client: Expect::Rule("small_initial_window"),
        set: Set::Lab,
        needs: &["nginx"],
        rtts: NEAR_FAR_40,
        at_zero: Some((Expect::Clean, Expect::Clean)),
        build: Build::AtRtt(small_initcwnd),
    },
];

// The independent checks, at each round trip of each scenario (`LAB_RTT` picks some).

/// The resolver's query log of the DNS scenarios whose client namespace is `client_ns`.
pub(super) fn query_log(client_ns: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("latscope-lab-dns-{client_ns}.log"))
}

/// Milliseconds a shell command takes in namespace `ns` (`date +%s%N` around it).
pub(super) fn timed_ms(ns: &str, cmd: &str) -> f64 {
    let script = format!("s=$(date +%s%N); {cmd} >/dev/null 2>&1; e=$(date +%s%N); echo $((e-s))");
    let (_, out, _) = in_ns(ns, &["chrt", "-f", "1", "sh", "-c", &script]);
    out.trim().parse::<f64>().unwrap_or(f64::NAN) / 1e6
}

/// The `key:VALUE` words of `ss -ti` output (`rwnd_limited:144ms(56.1%)`, `snd_wnd:8832`).
pub(super) fn ss_fields(text: &str, keys: &[&str]) -> Vec<String> {
    text.split_whitespace()
        .filter(|w| keys.iter().any(|k| w.starts_with(&format!("{k}:"))))
        .map(String::from)
        .collect()
}

/// The percentage in a `…_limited:NNNms(PP.P%)` field.
pub(super) fn limited_pct(field: &str) -> f64 {
    field
        .split_once('(')
        .and_then(|(_, r)| r.trim_end_matches(')').trim_end_matches('%').parse().ok())
        .unwrap_or(0.0)
}

/// `ss -tmi` in the server's namespace while one curl of the target runs, `after` into it.
pub(super) fn ss_during_transfer(b: &Built, after: Duration) -> String {
    let mut bg = std::process::Command::new("ip")
        .args(["netns", "exec", &b.setup.client_ns])
        .args(["curl", "-s", "-o", "/dev/null", &b.setup.target])
        .spawn()
        .expect("curl");
    std::thread::sleep(after);
    let (_, ss, _) = in_ns(&b.server_ns, &["ss", "-tmin", "state", "established"]);
    let _ = bg.wait();
    ss
}

pub(super) fn ms(s: f64) -> f64 {
    s * 1e3
}

fn check_no_keepalive(b: &Built) -> Verdict {
    let t = b.setup.target.as_str();
    let c = curl_urls(&b.setup.client_ns, &[t; 5], &[]);
    let connects: Vec<u32> = c.iter().map(|c| c.num_connects).collect();
    let total = median(c.iter().map(|c| ms(c.total_s)).collect());
    let rtt = b.rtt_ms();
    ok_if(
        connects.iter().all(|&n| n == 1)
            && c.iter().all(|c| c.status == 200)
            && (rtt == 0.0 || total >= 1.8 * rtt),
        format!(
            "curl, 5 URLs in one process: new connections {connects:?} (the server closes each), {total:.2} ms per request (median) at {rtt:.0} ms"
        ),
    )
}

fn check_tls12_no_resumption(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let (ip, _, port) = crate::agent::server_of(ns, &b.setup.target)?;
    let hp = format!("{ip}:{port}");
    let (_, out, _) = in_ns(
        ns,
        &[
            "sh",
            "-c",
            &format!("openssl s_client -connect {hp} -tls1_2 -reconnect </dev/null 2>&1"),
        ],
    );
    let new = out.lines().filter(|l| l.starts_with("New,")).count();
    let reused = out.lines().filter(|l| l.starts_with("Reused,")).count();
    let (tls13, _, _) = in_ns(
        ns,
        &[
            "sh",
            "-c",
            &format!("openssl s_client -connect {hp} -tls1_3 </dev/null >/dev/null 2>&1"),
        ],
    );
    let c: Vec<_> = (0..5).map(|_| curl(ns, &b.setup.target, &["-k"])).collect();
    let hs = median(c.iter().map(|c| ms(c.appconnect_s - c.connect_s)).collect());
    let rtt = b.rtt_ms();
    ok_if(
        new == 6 && reused == 0 && tls13 != 0 && (rtt == 0.0 || hs >= 1.8 * rtt),
        format!(
            "openssl s_client -tls1_2 -reconnect: {new} new sessions, {reused} reused; -tls1_3 exit {tls13}; curl: TLS handshake {hs:.2} ms (median of 5 new connections) at {rtt:.0} ms"
        ),
    )
}

/// The queries the resolver logged (`NAME TYPE` lines).
pub(super) fn logged_queries(b: &Built) -> Vec<String> {
    std::fs::read_to_string(query_log(&b.setup.client_ns))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn check_aaaa_timeout(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let both = timed_ms(ns, &format!("getent ahosts {NAME}"));
    let v4 = timed_ms(ns, &format!("getent ahostsv4 {NAME}"));
    let q = logged_queries(b);
    let aaaa = q.iter().filter(|l| l.ends_with(" 28")).count();
    let c = curl(ns, &b.setup.target, &[]);
    ok_if(
        both >= 1800.0 && v4 < 500.0 && aaaa >= 1 && c.status == 200,
        format!(
            "getent ahosts (A and AAAA) {both:.0} ms, ahostsv4 (A only) {v4:.1} ms; the resolver saw {aaaa} AAAA queries of {}; curl by name: lookup {:.0} ms, status {}",
            q.len(),
            ms(c.lookup_s),
            c.status
        ),
    )
}

fn check_ndots_search(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let _ = std::fs::write(query_log(ns), "");
    let lookup = timed_ms(ns, &format!("getent ahosts {NAME}"));
    let q = logged_queries(b);
    let expanded = q
        .iter()
        .filter(|l| l.starts_with(&format!("{NAME}.")))
        .count();
    let bare = q
        .iter()
        .filter(|l| l.starts_with(&format!("{NAME} ")))
        .count();
    let fqdn = timed_ms(ns, &format!("getent ahosts {NAME}."));
    let rtt = b.rtt_ms();
    ok_if(
        expanded >= 3 && bare >= 1 && (rtt == 0.0 || lookup >= 3.5 * rtt),
        format!(
            "getent ahosts {NAME}: {lookup:.1} ms, {} queries ({expanded} under the search domains before {bare} for the name); the absolute name {NAME}. {fqdn:.1} ms; at {rtt:.0} ms",
            q.len()
        ),
    )
}

/// `nr_throttled`, `throttled_time` (ns) and `nr_periods` of a cgroup's cpu.stat.
pub(super) fn throttled(dir: &std::path::Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(dir.join("cpu.stat")).unwrap_or_default();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        get("nr_throttled"),
        get("throttled_time").max(get("throttled_usec") * 1000),
        get("nr_periods"),
    )
}

/// A Python loop burning 100 ms of CPU, and the wall time it took (ms).
const BURN: &str = "import time\nt=time.process_time()\nw=time.perf_counter()\nwhile time.process_time()-t<0.1: pass\nprint(round((time.perf_counter()-w)*1e3))";

fn check_client_cpu_quota(b: &Built) -> Verdict {
    let cg = b.setup.client_cgroup.clone().ok_or("no client cgroup")?;
    let burn = |inside: bool| -> f64 {
        let join = if inside {
            format!("echo $$ > {}/cgroup.procs && ", cg.display())
        } else {
            String::new()
        };
        let (_, out, _) = in_ns_free_sh(&format!("{join}exec {} -c '{BURN}'", python()));
        out.trim().parse().unwrap_or(f64::NAN)
    };
    let before = throttled(&cg);
    let inside = burn(true);
    let after = throttled(&cg);
    let outside = burn(false);
    // 2% of a CPU: 100 ms of CPU takes about 5 s of wall time, whatever the machine's load
    // (which slows the loop outside the cgroup too).
    ok_if(
        inside >= 800.0 && inside >= 2.0 * outside && after.0 >= before.0 + 5,
        format!(
            "100 ms of CPU took {inside:.0} ms in the client's cgroup, {outside:.0} ms outside it; cpu.stat nr_throttled +{} (throttled {:.0} ms)",
            after.0 - before.0,
            (after.1 - before.1) as f64 / 1e6
        ),
    )
}

/// `sh -c SCRIPT` in this process's namespace (where /sys/fs/cgroup is visible).
fn in_ns_free_sh(script: &str) -> (i32, String, String) {
    crate::verify::in_ns_free(&["sh", "-c", script])
}

fn check_netfilter_10k(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let (ip, _, port) = crate::agent::server_of(ns, &b.setup.target)?;
    let host = ip.to_string();
    let with = py_probe(ns, &host, port, 100);
    in_ns(&b.server_ns, &["nft", "delete", "table", "inet", "bloat"]);
    let without = py_probe(ns, &host, port, 100);
    ok_if(
        with.0 - without.0 >= 50.0 && with.1 - without.1 >= 50.0,
        format!(
            "Python socket loop, 100 new connections, p25: connect {:.0} µs / request {:.0} µs with the 10,000 rules, {:.0} / {:.0} µs without them, at {:.0} ms",
            with.0,
            with.1,
            without.0,
            without.1,
            b.rtt_ms()
        ),
    )
}

// The lab's scenarios that became far-capable.

fn check_healthy_nginx(b: &Built) -> Verdict {
    let t = b.setup.target.as_str();
    let c = curl_urls(&b.setup.client_ns, &[t; 6], &[]);
    let connects: Vec<u32> = c.iter().map(|c| c.num_connects).collect();
    let reused = median(c[1..].iter().map(|c| ms(c.total_s)).collect());
    let rtt = b.rtt_ms();
    ok_if(
        connects == [1, 0, 0, 0, 0, 0]
            && c.iter().all(|c| c.status == 200)
            && reused <= rtt * 1.1 + 1.0,
        format!(
            "curl, 6 URLs in one process: new connections {connects:?} (kept alive), a request on the kept connection {reused:.2} ms (median) at {rtt:.0} ms"
        ),
    )
}

/// Median ICMP echo round trip from the client to the target's address (ping, 20 echoes), ms.
pub(super) fn ping_target(b: &Built) -> Result<f64, String> {
    let (ip, _, _) = crate::agent::server_of(&b.setup.client_ns, &b.setup.target)?;
    let (_, out, _) = in_ns(
        &b.setup.client_ns,
        &["ping", "-n", "-c", "20", "-i", "0.05", &ip.to_string()],
    );
    let rtts: Vec<f64> = out
        .split("time=")
        .skip(1)
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    if rtts.len() < 18 {
        return Err(format!("ping: {} replies", rtts.len()));
    }
    Ok(median(rtts))
}

fn check_healthy_latscope(b: &Built) -> Verdict {
    let p = ping_target(b)?;
    let rtt = b.rtt_ms();
    ok_if(
        (p - rtt).abs() <= rtt * 0.05 + 0.5,
        format!("ping to the server {p:.2} ms at {rtt:.0} ms (nothing else between them)"),
    )
}

fn check_think_time(b: &Built) -> Verdict {
    let c: Vec<_> = (0..5)
        .map(|_| curl(&b.setup.client_ns, &b.setup.target, &[]))
        .collect();
    let wait = median(c.iter().map(|c| ms(c.first_byte_s - c.connect_s)).collect());
    let rtt = b.rtt_ms();
    let think = wait - rtt;
    ok_if(
        (14.0..20.0).contains(&think),
        format!(
            "curl: first byte {wait:.2} ms after the connect (median of 5) at {rtt:.0} ms: {think:.2} ms beyond the round trip"
        ),
    )
}

/// The pid of the process listening on TCP `port` in namespace `ns` (`ss -ltnp`).
pub(super) fn listener_pid(ns: &str, port: u16) -> Option<u32> {
    let (_, out, _) = in_ns(ns, &["ss", "-ltnpH", &format!("sport = :{port}")]);
    let rest = out.split("pid=").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The cgroup v1 cpu directory (or v2 directory) of process `pid`.
pub(super) fn cpu_cgroup_of(pid: u32) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        if ctrl.split(',').any(|c| c == "cpu") {
            let root = std::fs::read_dir("/sys/fs/cgroup")
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.split(',').any(|c| c == "cpu"))
                })?;
            return Some(root.join(path.trim_start_matches('/')));
        }
        None
    })
}

fn check_cpu_starved(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let pid = listener_pid(&b.server_ns, 8080).ok_or("no listener on 8080")?;
    let cg = cpu_cgroup_of(pid).ok_or("the server's cpu cgroup not found")?;
    let before = throttled(&cg);
    let (_, out, _) = in_ns(
        ns,
        &["wrk", "-t1", "-c8", "-d2s", "--latency", &b.setup.target],
    );
    let after = throttled(&cg);
    let line = |key: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(key))
            .map_or(String::new(), |l| {
                l.split_whitespace().collect::<Vec<_>>().join(" ")
            })
    };
    ok_if(
        after.0 >= before.0 + 5,
        format!(
            "wrk -c8 2 s at {:.0} ms: {}; {}; {}; the server's cgroup: nr_throttled +{} of {} periods, throttled {:.0} ms",
            b.rtt_ms(),
            line("Latency "),
            line("99%"),
            line("Requests/sec"),
            after.0 - before.0,
            after.2 - before.2,
            (after.1 - before.1) as f64 / 1e6
        ),
    )
}

/// `n` TCP connects to HOST PORT one after the other (not latscope): how many took a second
/// or more (a SYN or SYN-ACK lost and sent again) and the median in ms.
const PY_CONNECTS: &str = r#"
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ts = []
for _ in range(n):
    s = socket.socket()
    t0 = time.perf_counter(); s.connect((host, port)); ts.append(time.perf_counter() - t0)
    s.close()
ts.sort()
print(sum(1 for t in ts if t >= 0.9), f"{ts[len(ts)//2]*1e3:.2f}")
"#;

fn check_loss(b: &Built) -> Verdict {
    let (ip, _, port) = crate::agent::server_of(&b.setup.client_ns, &b.setup.target)?;
    let (_, out, err) = in_ns(
        &b.setup.client_ns,
        &[
            python(),
            "-c",
            PY_CONNECTS,
            &ip.to_string(),
            &port.to_string(),
            "300",
        ],
    );
    let f: Vec<f64> = out
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let [resent, p50] = f[..] else {
        return Err(format!("connect loop: {out} {err}"));
    };
    ok_if(
        (1.0..=20.0).contains(&resent),
        format!(
            "Python, 300 connects to the server's port: {resent:.0} took ≥ 0.9 s (a SYN dropped and sent again 1 s later), median {p50:.2} ms at {:.0} ms",
            b.rtt_ms()
        ),
    )
}

/// iperf3 from the client to an iperf3 server started beside the target for the check: the
/// receiver's rate in Mbit/s over `secs` seconds, each way (client → server, then `-R`).
fn iperf3_both_ways(b: &Built, secs: &str) -> Result<(f64, f64), String> {
    let (ip, _, _) = crate::agent::server_of(&b.setup.client_ns, &b.setup.target)?;
    let server = Proc::start(&b.server_ns, &["iperf3", "-s", "-p", "5399"]);
    wait_tcp(&b.setup.client_ns, &format!("{ip}:5399"));
    let rate = |reverse: bool| -> f64 {
        let mut argv = vec!["iperf3", "-c", "", "-p", "5399", "-t", secs, "-J"];
        let ip = ip.to_string();
        argv[2] = &ip;
        if reverse {
            argv.push("-R");
        }
        let (_, out, _) = in_ns(&b.setup.client_ns, &argv);
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["end"]["sum_received"]["bits_per_second"].as_f64())
            .unwrap_or(f64::NAN)
            / 1e6
    };
    let rates = (rate(false), rate(true));
    drop(server);
    Ok(rates)
}

fn check_slow_link(b: &Built) -> Verdict {
    let (up, down) = iperf3_both_ways(b, "3")?;
    ok_if(
        (3.0..4.2).contains(&up) && (3.0..4.2).contains(&down),
        format!(
            "iperf3, 3 s each way: {up:.2} Mbit/s to the server, {down:.2} Mbit/s back (tbf 4 Mbit/s both ways) at {:.0} ms",
            b.rtt_ms()
        ),
    )
}

fn check_slow_tls(b: &Built) -> Verdict {
    let c: Vec<_> = (0..5)
        .map(|_| curl(&b.setup.client_ns, &b.setup.target, &["-k"]))
        .collect();
    let hs = median(c.iter().map(|c| ms(c.appconnect_s - c.connect_s)).collect());
    let total = median(c.iter().map(|c| ms(c.total_s)).collect());
    let rtt = b.rtt_ms();
    let t = b.setup.target.as_str();
    let two = curl_urls(&b.setup.client_ns, &[t, t], &["-k"]);
    let connects: Vec<u32> = two.iter().map(|c| c.num_connects).collect();
    ok_if(
        hs - rtt >= 2.0 && connects == [1, 1],
        format!(
            "curl: TLS handshake {hs:.2} ms ({:.2} ms beyond the round trip: the RSA-4096 signature), request {total:.2} ms (medians of 5) at {rtt:.0} ms; two URLs in one process: new connections {connects:?}",
            hs - rtt
        ),
    )
}

fn check_receive_window(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let ss = ss_during_transfer(b, Duration::from_millis(150));
    let fields = ss_fields(&ss, &["snd_wnd", "rwnd_limited"]);
    // (On a veth the transfer is over before `ss` looks.)
    let fault = median(
        crate::verify::curls(ns, &b.setup.target, &[], 3)
            .iter()
            .map(|c| ms(c.total_s))
            .collect(),
    );
    in_ns(
        ns,
        &["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 131072 6291456"],
    );
    let fixed = median(
        crate::verify::curls(ns, &b.setup.target, &[], 3)
            .iter()
            .map(|c| ms(c.total_s))
            .collect(),
    );
    in_ns(ns, &["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 16384 16384"]);
    let limited = fields
        .iter()
        .find(|f| f.starts_with("rwnd_limited"))
        .map_or(0.0, |f| limited_pct(f));
    // Near, a transfer is over before `ss` looks: the times alone.
    ok_if(
        fault >= 1.3 * fixed && (b.rtt.is_zero() || limited >= 20.0),
        format!(
            "256 KiB: {fault:.1} ms with the 16 KiB tcp_rmem, {fixed:.1} ms with Linux's default (median of 3) at {:.0} ms; the server's ss 150 ms in: {fields:?}",
            b.rtt_ms()
        ),
    )
}

fn check_send_buffer(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let ss = ss_during_transfer(b, Duration::from_millis(400));
    let fields = ss_fields(&ss, &["snd_wnd", "sndbuf_limited", "busy"]);
    let page = |url: &str| -> f64 {
        median(
            crate::verify::curls(ns, url, &[], 3)
                .iter()
                .map(|c| ms(c.total_s))
                .collect(),
        )
    };
    let small = page(&b.setup.target);
    // The same page from an nginx with the default send buffer, on the same path.
    let (ip, _, _) = crate::agent::server_of(ns, &b.setup.target)?;
    let stock = nginx_in(
        &b.server_ns,
        &ip.to_string(),
        NginxConf {
            index_bytes: 1024 * 1024,
            ..NginxConf::default()
        },
    );
    let default = page(&stock.url("/index.html"));
    drop(stock);
    let rtt = b.rtt_ms();
    // Near, 8 KiB in flight per 50 µs round trip is about what the veth needs: no fault.
    let as_built = if rtt == 0.0 {
        small < 2.0 * default + 1.0
    } else {
        small >= 1.5 * default
    };
    ok_if(
        as_built,
        format!(
            "1 MiB: {small:.1} ms with sndbuf=4k, {default:.1} ms from a stock nginx on the same path (median of 3) at {rtt:.0} ms; the server's ss 400 ms in: {fields:?}"
        ),
    )
}

fn check_redirect_chain(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    let t = b.setup.target.as_str();
    let (_, out, _) = in_ns(
        ns,
        &[
            "chrt",
            "-f",
            "1",
            "curl",
            "-s",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}\\n",
            t,
            "--next",
            "-s",
            "--max-time",
            "10",
            "-L",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{num_redirects} %{time_redirect} %{time_total} %{num_connects}\\n",
            t,
        ],
    );
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let [first, followed] = &lines[..] else {
        return Err(format!("curl: {out}"));
    };
    let num = |v: &Vec<&str>, i: usize| {
        v.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let final_url = t.replace("/start", "/index.html");
    let direct = median(
        crate::verify::curls(ns, &final_url, &[], 3)
            .iter()
            .map(|c| ms(c.total_s))
            .collect(),
    );
    let (redirects, redirect_ms, total_ms) =
        (num(followed, 1), ms(num(followed, 2)), ms(num(followed, 3)));
    let rtt = b.rtt_ms();
    // The followed transfer reuses the first one's connection: its redirects are one request
    // (one round trip) each.
    ok_if(
        first.first() == Some(&"302")
            && followed.first() == Some(&"200")
            && redirects == 2.0
            && (rtt == 0.0 || redirect_ms >= 1.8 * rtt),
        format!(
            "curl {t}: {} to {}; with -L: {} after {redirects} redirects on {} connection(s), {redirect_ms:.1} ms in the redirects, {total_ms:.1} ms in all; the final URL directly on a new connection {direct:.1} ms (median of 3) at {rtt:.0} ms",
            first.first().unwrap_or(&"?"),
            first.get(1).unwrap_or(&"?"),
            followed.first().unwrap_or(&"?"),
            followed.get(4).unwrap_or(&"?"),
        ),
    )
}

/// A plain Python client (not latscope) on one kept connection: a request, two more back to
/// back (the window open), a pause of IDLE s, one more: the three times in ms.
const PY_IDLE: &str = r#"
import socket, sys, time
host, port, path, idle = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
s = socket.create_connection((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def get():
    t = time.perf_counter()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(1 << 20)
    head, body = buf.split(b"\r\n\r\n", 1)
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0]
    while len(body) < n:
        body += s.recv(1 << 20)
    return (time.perf_counter() - t) * 1e3
first = get(); get(); warm = get()
time.sleep(idle)
after = get()
print(f"{first:.1f} {warm:.1f} {after:.1f}")
"#;

/// [`PY_IDLE`] against the target: (first, warm, after the pause) in ms.
fn idle_times(b: &Built, idle_s: &str) -> Result<[f64; 3], String> {
    let (ip, _, port) = crate::agent::server_of(&b.setup.client_ns, &b.setup.target)?;
    let (_, out, err) = in_ns(
        &b.setup.client_ns,
        &[
            "chrt",
            "-f",
            "1",
            python(),
            "-c",
            PY_IDLE,
            &ip.to_string(),
            &port.to_string(),
            "/index.html",
            idle_s,
        ],
    );
    let f: Vec<f64> = out
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    f.try_into()
        .map_err(|_| format!("idle client: {out} {err}"))
}

fn check_idle_restart(b: &Built) -> Verdict {
    let on = idle_times(b, "1")?;
    in_ns(
        &b.server_ns,
        &["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"],
    );
    let off = idle_times(b, "1")?;
    in_ns(
        &b.server_ns,
        &["sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=1"],
    );
    let (_, route, _) = in_ns(&b.server_ns, &["ip", "route", "show"]);
    let reno = route.contains("congctl reno");
    let rtt = b.rtt_ms();
    // Far, the request after the pause pays slow start's rounds again with the sysctl on and
    // not with it off; near, those rounds are microseconds.
    ok_if(
        reno && (rtt == 0.0 || (on[2] - on[1] >= 1.5 * rtt && off[2] - off[1] < 0.5 * rtt)),
        format!(
            "Python, one kept connection, 512 KiB each: first / warm / after 1 s idle {:.1} / {:.1} / {:.1} ms with tcp_slow_start_after_idle=1, {:.1} / {:.1} / {:.1} ms with it 0, at {rtt:.0} ms; the route says congctl reno: {reno}",
            on[0], on[1], on[2], off[0], off[1], off[2]
        ),
    )
}

fn check_small_initcwnd(b: &Built) -> Verdict {
    let ns = &b.setup.client_ns;
    // The transfer of a new connection's response: from the connect to the last byte.
    let transfer = |n: usize| {
        median(
            crate::verify::curls(ns, &b.setup.target, &[], n)
                .iter()
                .map(|c| ms(c.total_s - c.connect_s))
                .collect(),
        )
    };
    let (_, route, _) = in_ns(&b.server_ns, &["ip", "route", "show"]);
    let line = route
        .lines()
        .find(|l| l.contains("initcwnd"))
        .map(str::to_string)
        .ok_or("no route with initcwnd")?;
    let small = transfer(5);
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut stock: Vec<&str> = words
        .iter()
        .take_while(|w| **w != "initcwnd")
        .copied()
        .collect();
    stock.insert(0, "replace");
    stock.insert(0, "route");
    stock.insert(0, "ip");
    in_ns(&b.server_ns, &stock);
    let ten = transfer(5);
    let rtt = b.rtt_ms();
    ok_if(
        rtt == 0.0 || small - ten >= 1.5 * rtt,
        format!(
            "curl, new connections, 128 KiB: {small:.1} ms from the connect to the last byte with `{line}`, {ten:.1} ms with Linux's initial window (median of 5) at {rtt:.0} ms"
        ),
    )
}

const CHECKS: &[Check] = &[
    Check {
        name: "no-keepalive",
        make: Make::Lab,
        verify: check_no_keepalive,
    },
    Check {
        name: "tls12-no-resumption",
        make: Make::Lab,
        verify: check_tls12_no_resumption,
    },
    Check {
        name: "aaaa-timeout",
        make: Make::Lab,
        verify: check_aaaa_timeout,
    },
    Check {
        name: "ndots-search",
        make: Make::Lab,
        verify: check_ndots_search,
    },
    Check {
        name: "client-cpu-quota",
        make: Make::Lab,
        verify: check_client_cpu_quota,
    },
    Check {
        name: "cpu-throttled",
        make: Make::Lab,
        verify: check_cpu_starved,
    },
    Check {
        name: "netfilter-10k",
        make: Make::Lab,
        verify: check_netfilter_10k,
    },
    Check {
        name: "healthy-nginx",
        make: Make::Lab,
        verify: check_healthy_nginx,
    },
    Check {
        name: "healthy-latscope-serve",
        make: Make::Lab,
        verify: check_healthy_latscope,
    },
    Check {
        name: "think-time",
        make: Make::Lab,
        verify: check_think_time,
    },
    Check {
        name: "cpu-starved",
        make: Make::Lab,
        verify: check_cpu_starved,
    },
    Check {
        name: "loss",
        make: Make::Lab,
        verify: check_loss,
    },
    Check {
        name: "slow-link",
        make: Make::Lab,
        verify: check_slow_link,
    },
    Check {
        name: "slow-tls",
        make: Make::Lab,
        verify: check_slow_tls,
    },
    Check {
        name: "receive-window",
        make: Make::Lab,
        verify: check_receive_window,
    },
    Check {
        name: "send-buffer",
        make: Make::Lab,
        verify: check_send_buffer,
    },
    Check {
        name: "redirect-chain",
        make: Make::Lab,
        verify: check_redirect_chain,
    },
    Check {
        name: "idle-restart",
        make: Make::Lab,
        verify: check_idle_restart,
    },
    Check {
        name: "small-initcwnd",
        make: Make::Lab,
        verify: check_small_initcwnd,
    },
];

/// Build each far-world scenario at each of its round trips (`LAB_ONLY`, `LAB_RTT` pick), check
/// its fault with tools that are not latscope (never diagnose), print the figures, tear it down
/// and check that nothing is left.
#[test]
#[ignore = "manual: cargo test --release --test diagnose_lab -- --ignored --exact scenarios::far::far_faults --nocapture"]
fn far_faults() {
    require_root!();
    run_checks(CHECKS);
}

/// Every far-world scenario has its check, and every scenario built at a round trip is checked
/// there (or, built at ~0 only, in the lab as before).
#[test]
fn far_every_scenario_is_checked() {
    for s in SCENARIOS {
        assert_eq!(s.set, Set::Lab, "{}", s.name);
        assert!(
            s.rtts.len() >= 2 && s.rtts[0] == 0,
            "{}: near and far",
            s.name
        );
        assert!(
            CHECKS.iter().any(|c| c.name == s.name),
            "{}: no check",
            s.name
        );
    }
    for s in super::SCENARIOS {
        if matches!(s.build, Build::AtRtt(_)) && s.rtts.iter().any(|&r| r > 0) {
            assert!(
                CHECKS.iter().any(|c| c.name == s.name),
                "{}: built far away, never checked there",
                s.name
            );
        }
    }
}

//! `latscope agent` end to end with a real Prometheus: three namespaces meshed by veth pairs,
//! each running `latscope serve` and `latscope agent` probing the other two; the a–c link drops
//! 40% of the probe traffic (nftables); the c→b direction is slowed by a tbf queue kept full by a
//! bulk stream (a bufferbloated uplink); b's agent is killed half way. Prometheus (Debian's
//! package, started here with a generated config and a temp storage dir, inside namespace a)
//! scrapes the three agents every second; the test asks its HTTP API whether the lossy edge
//! stands out in histogram_quantile and the loss counters, whether b shows as down while a and c
//! carry on, and whether a's SLO breach on c produced a finding.
//!
//! Two-ended: two namespaces, the server's agent answering evidence requests (`[evidence]`) and
//! the client's agent asking it when its SLO on that edge breaches (`[diagnose]`): the exported
//! finding names a cause only the server's end can see (its cgroup's CPU throttling), with the
//! edge's labels; an agent that cannot be reached leaves the run client-only, and says so.

#![allow(clippy::unwrap_used)]

use crate::lab;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::netns::{Netns, link, run_in};
use lab::{BIN, TempDir};

/// Children killed (and reaped) on drop, so a failed assertion leaves nothing running.
struct Procs(Vec<(String, Child)>);

impl Procs {
    fn spawn(&mut self, what: &str, ns: &Netns, args: &[&str], log: &std::path::Path) {
        let f = std::fs::File::create(log).unwrap();
        let c = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .args(args)
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        self.0.push((what.to_string(), c));
    }

    /// Whether `what` is still running.
    fn running(&mut self, what: &str) -> bool {
        self.0
            .iter_mut()
            .find(|(w, _)| w == what)
            .is_some_and(|(_, c)| matches!(c.try_wait(), Ok(None)))
    }

    fn pid(&self, what: &str) -> u32 {
        self.0.iter().find(|(w, _)| w == what).unwrap().1.id()
    }

    fn kill(&mut self, what: &str) {
        let i = self.0.iter().position(|(w, _)| w == what).unwrap();
        let (_, mut c) = self.0.remove(i);
        // SIGKILL: a crashed agent, not a clean stop.
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            // SAFETY: plain kill(2) on our own child: SIGTERM first, the clean stop.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        std::thread::sleep(Duration::from_millis(300));
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// GET on Prometheus' API from inside namespace `ns`; the JSON answer.
fn prom(ns: &str, port: u16, path_and_query: &str) -> serde_json::Value {
    let req = format!("GET {path_and_query} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n");
    let body = run_in(ns, move || {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    });
    let (_, b) = body.split_once("\r\n\r\n").unwrap();
    // Chunked or not, the JSON object is the outermost {...}.
    let start = b.find('{').unwrap();
    let end = b.rfind('}').unwrap();
    serde_json::from_str(&b[start..=end]).unwrap_or_else(|e| panic!("{e}: {b}"))
}

fn enc(q: &str) -> String {
    q.bytes()
        .map(|c| {
            if c.is_ascii_alphanumeric() || b"_.-~".contains(&c) {
                (c as char).to_string()
            } else {
                format!("%{c:02X}")
            }
        })
        .collect()
}

/// Instant query: (labels, value) per series.
fn query(ns: &str, port: u16, q: &str) -> Vec<(serde_json::Value, f64)> {
    let v = prom(ns, port, &format!("/api/v1/query?query={}", enc(q)));
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let x: f64 = r["value"][1].as_str().unwrap().parse().unwrap_or(f64::NAN);
            (r["metric"].clone(), x)
        })
        .collect()
}

/// The c→b queue's delay bound (tbf `latency`).
const TBF_LATENCY: Duration = Duration::from_millis(40);

fn pick(rows: &[(serde_json::Value, f64)], source: &str, target: &str) -> Option<f64> {
    rows.iter()
        .find(|(m, _)| m["source"] == source && m["target"] == target)
        .map(|r| r.1)
}

#[test]
fn mesh_with_a_lossy_edge_and_a_killed_agent() {
    require_root!();
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prometheus is not installed: run scripts/setup.sh (Debian package prometheus)");
    }
    let _g = lab::timing_lock();
    let dir = TempDir::new();
    let ns: Vec<Netns> = ["fa", "fb", "fc"].iter().map(|t| Netns::new(t)).collect();
    let (a, b, c) = (&ns[0], &ns[1], &ns[2]);
    // a–b 10.77.1.0/24, a–c 10.77.2.0/24, b–c 10.77.3.0/24.
    let edges = [(a, b, 1u8), (a, c, 2), (b, c, 3)];
    for (x, y, net) in edges {
        let (xi, yi) = (format!("m{net}x"), format!("m{net}y"));
        link(x, &xi, y, &yi);
        x.ip(&["addr", "add", &format!("10.77.{net}.1/24"), "dev", &xi]);
        y.ip(&["addr", "add", &format!("10.77.{net}.2/24"), "dev", &yi]);
    }
    // Each node's address as seen by each other node.
    let addr = |from: usize, to: usize| -> &'static str {
        match (from, to) {
            (0, 1) => "10.77.1.2",
            (1, 0) => "10.77.1.1",
            (0, 2) => "10.77.2.2",
            (2, 0) => "10.77.2.1",
            (1, 2) => "10.77.3.2",
            (2, 1) => "10.77.3.1",
            _ => unreachable!(),
        }
    };
    // 40% of the probe traffic (port 7373, both directions) between a and c is dropped, at c.
    c.nft(
        "table inet lossy {\n chain in {\n  type filter hook input priority 0;\n  \
         ip saddr 10.77.2.1 tcp dport 7373 numgen random mod 100 < 40 drop\n  \
         ip saddr 10.77.2.1 tcp sport 7373 numgen random mod 100 < 40 drop\n }\n}\n",
    );
    // c→b is slowed: a tbf shaper on c's side of the b–c link (4 Mbit/s, a queue of at most
    // TBF_LATENCY) that a bulk stream from c to b keeps full, so every packet c sends to b waits
    // in a standing queue of up to TBF_LATENCY — what a bufferbloated uplink does to a probe.
    let tbf_ms = TBF_LATENCY.as_millis().to_string();
    c.exec(&[
        "tc",
        "qdisc",
        "add",
        "dev",
        "m3y",
        "root",
        "tbf",
        "rate",
        "4mbit",
        "burst",
        "4kb",
        "latency",
        &format!("{tbf_ms}ms"),
    ]);
    let names = ["a", "b", "c"];
    let mut procs = Procs(Vec::new());
    for (i, n) in ns.iter().enumerate() {
        procs.spawn(
            &format!("serve-{}", names[i]),
            n,
            &[BIN, "serve", "--bind", "0.0.0.0"],
            &dir.path(&format!("serve-{}.log", names[i])),
        );
    }
    // The bulk stream needs b's server up: wait until c can connect to it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.run_in(|| {
        TcpStream::connect_timeout(&"10.77.3.1:7373".parse().unwrap(), Duration::from_secs(1))
            .is_ok()
    }) {
        assert!(
            Instant::now() < deadline,
            "b's serve is not reachable from c"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    procs.spawn(
        "bulk c→b",
        c,
        &[BIN, "stream", "10.77.3.1", "-d", "300s", "-i", "60s"],
        &dir.path("stream-c-b.log"),
    );
    for (i, n) in ns.iter().enumerate() {
        let mut cfg = format!(
            "listen = \"0.0.0.0:9573\"\nfindings_log = \"{}\"\njitter = 0.2\n",
            dir.path(&format!("findings-{}.jsonl", names[i])).display()
        );
        for j in 0..3 {
            if j == i {
                continue;
            }
            cfg.push_str(&format!(
                "[[target]]\nname = \"{}\"\naddress = \"{}\"\nlabels = {{ source = \"{}\" }}\n\
                 measure = [\n  {{ kind = \"connect\", port = 7373, interval = \"250ms\", timeout = \"250ms\" }},\n  \
                 {{ kind = \"rr\", interval = \"250ms\", timeout = \"250ms\" }},\n]\n\
                 slo = {{ kind = \"rr\", quantile = 0.9, threshold = \"50ms\", window = \"20s\", min_samples = 10 }}\n",
                names[j],
                addr(i, j),
                names[i]
            ));
        }
        let p = dir.path(&format!("agent-{}.toml", names[i]));
        std::fs::write(&p, cfg).unwrap();
        let p = p.to_str().unwrap().to_string();
        let st = Command::new(BIN)
            .args(["agent", "--config", &p, "--check"])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        procs.spawn(
            &format!("agent-{}", names[i]),
            n,
            &[BIN, "agent", "--config", &p],
            &dir.path(&format!("agent-{}.log", names[i])),
        );
    }
    // Prometheus in a: a's agent on loopback, b's and c's across their links to a.
    let prom_port = 19090;
    let prom_cfg = dir.path("prometheus.yml");
    std::fs::write(
        &prom_cfg,
            "global: { scrape_interval: 1s, evaluation_interval: 1s }\n\
             scrape_configs:\n  - job_name: latscope\n    scrape_timeout: 900ms\n    static_configs:\n      \
             - targets: ['127.0.0.1:9573']\n        labels: { node: a }\n      \
             - targets: ['10.77.1.2:9573']\n        labels: { node: b }\n      \
             - targets: ['10.77.2.2:9573']\n        labels: { node: c }\n",
    )
    .unwrap();
    let storage = dir.path("tsdb");
    procs.spawn(
        "prometheus",
        a,
        &[
            "prometheus",
            &format!("--config.file={}", prom_cfg.display()),
            &format!("--storage.tsdb.path={}", storage.display()),
            &format!("--web.listen-address=127.0.0.1:{prom_port}"),
        ],
        &dir.path("prometheus.log"),
    );
    // 10 s of the whole mesh (every edge's SLO window fills: 40 probes of each kind), b's agent
    // killed, then 8 s more: `up` scraped down, and the last 5 s of a's and c's probes all after
    // the kill. diagnose's report on a→c is waited for below, however long it takes.
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    procs.kill("agent-b");
    std::thread::sleep(Duration::from_secs(8));
    let logs = || {
        [
            "agent-a.log",
            "agent-b.log",
            "agent-c.log",
            "prometheus.log",
        ]
        .iter()
        .map(|f| {
            let s = std::fs::read_to_string(dir.path(f)).unwrap_or_default();
            let tail: Vec<&str> = s.lines().rev().take(8).collect();
            format!(
                "--- {f}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    };

    // b's agent is down, a's and c's are up.
    let up = query(&a.name, prom_port, "up");
    let up_of = |node: &str| up.iter().find(|(m, _)| m["node"] == node).map(|r| r.1);
    assert_eq!(up_of("a"), Some(1.0), "{up:?}\n{}", logs());
    assert_eq!(up_of("c"), Some(1.0), "{up:?}\n{}", logs());
    assert_eq!(up_of("b"), Some(0.0), "{up:?}\n{}", logs());

    // a and c carry on: their probes kept counting after b's agent died.
    let recent = query(
        &a.name,
        prom_port,
        "sum by (source) (increase(latscope_probes_total[5s]))",
    );
    for s in ["a", "c"] {
        let n = recent
            .iter()
            .find(|(m, _)| m["source"] == s)
            .map_or(0.0, |r| r.1);
        assert!(n >= 10.0, "{s}: {n} probes in 5 s\n{recent:?}\n{}", logs());
    }

    // The lossy edge stands out in the loss counters: a→c and c→a lose connect probes, the
    // clean edges (a→b, b→a while it lived, c→b) lose none or almost none.
    let probes = query(
        &a.name,
        prom_port,
        "sum by (source, target) (latscope_probes_total{kind=\"connect\"})",
    );
    let failed = query(
        &a.name,
        prom_port,
        "sum by (source, target) (latscope_probe_failures_total{kind=\"connect\"})",
    );
    let ratio = |s: &str, t: &str| {
        pick(&failed, s, t).unwrap_or(0.0) / pick(&probes, s, t).unwrap_or(f64::NAN)
    };
    eprintln!(
        "connect failure ratio: a→c {:.2} c→a {:.2} a→b {:.2} c→b {:.2}",
        ratio("a", "c"),
        ratio("c", "a"),
        ratio("a", "b"),
        ratio("c", "b")
    );
    assert!(ratio("a", "c") >= 0.15, "{failed:?}\n{probes:?}");
    assert!(ratio("c", "a") >= 0.15, "{failed:?}\n{probes:?}");
    assert!(ratio("a", "b") <= 0.05, "{failed:?}\n{probes:?}");
    // c→b crosses a full tbf queue: it may drop a probe as the stream overfills it, not many.
    assert!(ratio("c", "b") <= 0.2, "{failed:?}\n{probes:?}");

    // And in the distributions: rr's p90 over the run (retransmissions after a lost segment
    // wait ≥ 200 ms) against the clean edges' (sub-millisecond on veth, a few ms under load).
    let p90 = query(
        &a.name,
        prom_port,
        "histogram_quantile(0.9, sum by (le, source, target) (increase(latscope_latency_seconds_bucket{kind=\"rr\"}[1m])))",
    );
    let lossy = pick(&p90, "a", "c")
        .unwrap_or(0.0)
        .max(pick(&p90, "c", "a").unwrap_or(0.0));
    let clean = pick(&p90, "a", "b").unwrap_or(f64::NAN);
    eprintln!(
        "rr p90: lossy edge {:.1} ms, a→b {:.3} ms",
        lossy * 1e3,
        clean * 1e3
    );
    assert!(lossy >= 0.05, "{p90:?}");
    assert!(lossy >= 10.0 * clean, "{p90:?}");

    // The slowed edge stands out by the queue's delay: c→b's rr request waits in the standing
    // tbf queue (up to TBF_LATENCY; TCP keeps it between half full and full), so its median is
    // within [¼, 2] × TBF_LATENCY (log2 buckets: histogram_quantile is within 2×), and far above
    // the clean a→b median; connect (the SYN crosses the same queue) is slowed alike.
    let p50 = |kind: &str| {
        query(
            &a.name,
            prom_port,
            &format!(
                "histogram_quantile(0.5, sum by (le, source, target) (increase(latscope_latency_seconds_bucket{{kind=\"{kind}\"}}[1m])))"
            ),
        )
    };
    let stream_log = std::fs::read_to_string(dir.path("stream-c-b.log")).unwrap_or_default();
    assert!(
        procs.running("bulk c→b"),
        "the bulk stream that fills c's tbf queue stopped:\n{stream_log}"
    );
    let (rr50, conn50) = (p50("rr"), p50("connect"));
    let l = TBF_LATENCY.as_secs_f64();
    for (kind, rows) in [("rr", &rr50), ("connect", &conn50)] {
        let slow = pick(rows, "c", "b").unwrap_or(f64::NAN);
        let clean = pick(rows, "a", "b").unwrap_or(f64::NAN);
        eprintln!(
            "{kind} p50: c→b (tbf) {:.1} ms, a→b {:.3} ms, tbf queue {:.0} ms",
            slow * 1e3,
            clean * 1e3,
            l * 1e3
        );
        assert!(slow >= l / 4.0 && slow <= 2.0 * l, "{kind}: {rows:?}");
        assert!(slow >= 10.0 * clean, "{kind}: {rows:?}");
    }

    // a's SLO on c (rr p90 > 50 ms) breached and ran diagnose: a finding is exported and the
    // report logged.
    let breached = query(
        &a.name,
        prom_port,
        "latscope_slo_breached{source=\"a\",target=\"c\"}",
    );
    assert_eq!(
        breached.first().map(|r| r.1),
        Some(1.0),
        "{breached:?}\n{}",
        logs()
    );
    // diagnose on a lossy path takes a while (its handshake step waits out SYN retransmissions):
    // wait for its report line, up to a minute.
    // Then for Prometheus to have scraped the finding it exported (a scrape a second).
    let path = dir.path("findings-a.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (log, findings) = loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let findings = if log.is_empty() {
            Vec::new()
        } else {
            query(
                &a.name,
                prom_port,
                "latscope_finding{source=\"a\",target=\"c\"}",
            )
        };
        if !findings.is_empty() || Instant::now() > deadline {
            break (log, findings);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("findings: {findings:?}");
    let line: serde_json::Value = serde_json::from_str(log.lines().next().unwrap_or("{}")).unwrap();
    assert_eq!(line["target"], "c", "{log}\n{}", logs());
    assert!(
        line["observed_ns"].as_u64().unwrap_or(0) > 50_000_000,
        "{line}"
    );
    let rules: Vec<&str> = findings
        .iter()
        .filter_map(|(m, _)| m["rule"].as_str())
        .collect();
    // The edge drops packets: the finding is loss, seen as retransmitted segments when the 1 s
    // capture caught some, or else as retransmitted SYNs (slow_handshake). Known weakness: without
    // the capture's evidence, slow_handshake still suggests the server's listen backlog.
    assert!(
        rules.contains(&"retransmissions") || rules.contains(&"slow_handshake"),
        "rules {rules:?}; the findings log's line: {line}\n{}",
        logs()
    );
    eprintln!("took {:?}", t0.elapsed());
}

/// GET /metrics of an agent inside namespace `ns`: the exposition's text.
fn scrape(ns: &str, addr: &str) -> String {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    run_in(ns, move || {
        let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            return String::new();
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = c.write_all(b"GET /metrics HTTP/1.0\r\nHost: a\r\n\r\n");
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        s
    })
}

/// The series of `metric` whose labels include every `(name, value)` of `with`: each line's
/// labels and value.
fn series(page: &str, metric: &str, with: &[(&str, &str)]) -> Vec<(String, f64)> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| {
            with.iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| {
            let (labels, value) = l.rsplit_once(' ').unwrap();
            (labels.to_string(), value.parse().unwrap_or(f64::NAN))
        })
        .collect()
}

/// Two agents, two namespaces: b runs `latscope serve` in a cgroup that a co-tenant keeps out
/// of CPU quota (5 ms per 100 ms, a busy loop in the same cgroup: every period throttled), and
/// an agent whose `[evidence]` answers about serve's port; a's agent probes b with rr, breaches
/// its SLO, and diagnoses. Target `b` asks b's agent (`[diagnose] server_agent_port`), target
/// `b-blind` names an agent port where nothing listens. a's agent runs as on another machine
/// (`lab::isolate`: no view of b's processes or cgroups), so the throttling is invisible from a:
/// only `b`'s export may carry `cpu_throttling`, measured at both ends, with the edge's labels;
/// `b-blind`'s says the run was client-only, and why.
#[test]
fn a_breach_on_an_edge_is_diagnosed_with_the_peers_evidence() {
    require_root!();
    let _g = lab::timing_lock();
    let t0 = Instant::now();
    let dir = TempDir::new();
    let (ns_a, ns_b) = (Netns::new("fle"), Netns::new("fle"));
    link(&ns_a, "fla", &ns_b, "flb");
    let (addr_a, addr_b) = ("10.78.0.1".to_string(), "10.78.0.2".to_string());
    ns_a.ip(&["addr", "add", &format!("{addr_a}/24"), "dev", "fla"]);
    ns_b.ip(&["addr", "add", &format!("{addr_b}/24"), "dev", "flb"]);
    let key = dir.secret_file("fleet.key", "fleet-test-key-0123456789abcdef\n");
    // Declared before the processes: dropped after them (a cgroup goes once it is empty).
    let cg = lab::cgroup::CpuCgroup::new(5_000);
    let mut procs = Procs(Vec::new());
    procs.spawn(
        "serve-b",
        &ns_b,
        &[BIN, "serve", "--bind", &addr_b, "--port", "7380", "-q"],
        &dir.path("serve-b.log"),
    );
    procs.spawn(
        "co-tenant",
        &ns_b,
        &["sh", "-c", "while :; do :; done"],
        &dir.path("hog.log"),
    );
    for what in ["serve-b", "co-tenant"] {
        cg.add(procs.pid(what));
    }
    let cfg_b = dir.path("agent-b.toml");
    std::fs::write(
        &cfg_b,
        format!(
            "listen = \"{addr_b}:9573\"\n[evidence]\nauth_file = \"{}\"\nports = [7380]\nlisten = \"{addr_b}:7374\"\n",
            key.display()
        ),
    )
    .unwrap();
    let cfg_a = dir.path("agent-a.toml");
    let target = |name: &str, extra: &str| {
        format!(
            "[[target]]\nname = \"{name}\"\naddress = \"{addr_b}\"\nlabels = {{ source = \"a\" }}\n\
             measure = [{{ kind = \"rr\", port = 7380, interval = \"200ms\", timeout = \"200ms\" }}]\n\
             slo = {{ kind = \"rr\", quantile = 0.99, threshold = \"5ms\", window = \"10s\", min_samples = 5 }}\n{extra}"
        )
    };
    std::fs::write(
        &cfg_a,
        format!(
            "listen = \"{addr_a}:9573\"\nfindings_log = \"{}\"\n[diagnose]\nauth_file = \"{}\"\nserver_agent_port = 7374\n{}{}",
            dir.path("findings-a.jsonl").display(),
            key.display(),
            target("b", ""),
            target("b-blind", &format!("server_agent = \"{addr_b}:7399\"\n")),
        ),
    )
    .unwrap();
    for (name, ns, cfg) in [("agent-b", &ns_b, &cfg_b), ("agent-a", &ns_a, &cfg_a)] {
        let cfg = cfg.to_str().unwrap();
        let check = Command::new(BIN)
            .args(["agent", "--config", cfg, "--check"])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        let argv = [BIN, "agent", "--config", cfg];
        // a's agent runs as on another machine: it cannot see b's processes or cgroups, as
        // it could from the same host (the kernel, /proc and /sys/fs/cgroup are shared).
        let argv: Vec<String> = if name == "agent-a" {
            lab::isolate::isolated(&argv)
        } else {
            argv.iter().map(|s| s.to_string()).collect()
        };
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        procs.spawn(name, ns, &argv, &dir.path(&format!("{name}.log")));
    }
    let logs = || {
        ["agent-a.log", "agent-b.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {f}\n{}",
                    std::fs::read_to_string(dir.path(f)).unwrap_or_default()
                )
            })
            .collect::<String>()
    };
    // Both diagnose runs end (each asks once: the SLO's cooldown is 10 minutes).
    let a_metrics = format!("{addr_a}:9573");
    let deadline = t0 + Duration::from_secs(55);
    let page = loop {
        let page = scrape(&ns_a.name, &a_metrics);
        let done = ["b", "b-blind"]
            .iter()
            .all(|t| !series(&page, "latscope_diagnose_server_agent", &[("target", t)]).is_empty());
        if done {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no diagnose result for both targets within 55 s\n{page}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "{}",
        page.lines()
            .filter(|l| l.starts_with("latscope_finding")
                || l.starts_with("latscope_diagnose_server_agent"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let edge = |t: &'static str| [("target", t), ("source", "a")];
    // The edge a→b: the peer's evidence was used, and the cause only b's end can see is named,
    // server side, with what it explains per request.
    assert_eq!(
        series(&page, "latscope_diagnose_server_agent", &edge("b")),
        vec![(
            "latscope_diagnose_server_agent{target=\"b\",state=\"used\",source=\"a\"}".to_string(),
            1.0
        )],
        "{}",
        logs()
    );
    let mut throttling = edge("b").to_vec();
    throttling.extend([
        ("rule", "cpu_throttling"),
        ("side", "server"),
        ("ends", "client_and_server"),
    ]);
    // On failure: the verdict and what each step measured (b's agent's CPU among them).
    let report_of = |t: &str| {
        let log = std::fs::read_to_string(dir.path("findings-a.jsonl")).unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["target"] == t)
            .map(|l| {
                let steps = l["report"]["steps"].as_array().cloned().unwrap_or_default();
                // Every step: a verdict without the finding is read against what each measured.
                let cpu: Vec<String> = steps
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} {}: {}",
                            s["name"], s["measured_at"], s["status"], s["detail"]
                        )
                    })
                    .collect();
                format!("{}\n{}", l["report"]["verdict"], cpu.join("\n"))
            })
            .unwrap_or_default()
    };
    assert_eq!(
        series(&page, "latscope_finding", &throttling).len(),
        1,
        "{page}\n{}\n{}",
        logs(),
        report_of("b")
    );
    let explains = series(&page, "latscope_finding_explains_seconds", &throttling);
    // At least the rule's millisecond; at most what a period leaves once the quota is spent,
    // wall clock (cpu.stat's throttled time sums the CPUs' run queues, 60–186 ms a period on
    // 2 CPUs: the rule takes them apart), and never more than the tail the run measured.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let most = 0.1 - 0.005 / cpus + 1e-6;
    assert!(
        explains.len() == 1 && explains[0].1 >= 0.001 && explains[0].1 <= most,
        "{explains:?}
{}",
        report_of("b")
    );
    // The edge whose agent cannot be reached: client-only, and it says so.
    assert_eq!(
        series(&page, "latscope_diagnose_server_agent", &edge("b-blind")).len(),
        1
    );
    assert!(
        !series(
            &page,
            "latscope_diagnose_server_agent",
            &[("target", "b-blind"), ("state", "failed")]
        )
        .is_empty(),
        "{page}"
    );
    assert!(
        series(
            &page,
            "latscope_finding",
            &[("target", "b-blind"), ("rule", "cpu_throttling")]
        )
        .is_empty(),
        "the client alone cannot see b's cgroup:\n{page}"
    );
    assert!(
        series(
            &page,
            "latscope_finding",
            &[("target", "b-blind"), ("ends", "client_and_server")]
        )
        .is_empty(),
        "{page}"
    );
    // The findings log says why, for the operator.
    let log = std::fs::read_to_string(dir.path("findings-a.jsonl")).unwrap();
    let blind: serde_json::Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["target"] == "b-blind")
        .unwrap();
    assert_eq!(blind["server_agent"]["state"], "failed", "{blind}");
    assert!(
        blind["server_agent"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains(":7399"),
        "{blind}"
    );
    // b's endpoint answered a's one request and refused nothing.
    let b_page = scrape(&ns_b.name, &format!("{addr_b}:9573"));
    assert_eq!(
        series(
            &b_page,
            "latscope_evidence_requests_total",
            &[("result", "answered")]
        )
        .first()
        .map(|s| s.1),
        Some(1.0),
        "{b_page}"
    );
    drop(procs);
    drop(cg);
    eprintln!("took {:?}", t0.elapsed());
}

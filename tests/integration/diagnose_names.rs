//! latscope diagnose on a URL whose name is slow to look up, in a namespace with its own
//! resolv.conf (`ip netns exec` mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf) and a
//! DNS responder this test runs: one that never answers AAAA queries, and a pod-style search
//! list (ndots:5) in front of a far resolver. The finding names the query type, the names the
//! search list made the lookup ask, and the options behind the wait; glibc's own waits (getent,
//! timed) and dig, asked type by type, are the independent checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab::http::read_request;
use lab::netns::{Netns, spawn_in};
use serde_json::Value;

const NAME: &str = "web.lab.test";
const RESOLVER: &str = "127.0.0.53";
const HTTP_PORT: u16 = 8080;

/// The namespace's own resolv.conf, removed (with its directory) on drop.
struct ResolvConf(PathBuf);

impl ResolvConf {
    fn new(ns: &Netns, text: &str) -> ResolvConf {
        let dir = PathBuf::from(format!("/etc/netns/{}", ns.name));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("resolv.conf"), text).unwrap();
        ResolvConf(dir)
    }
}

impl Drop for ResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the responder does with one query.
#[derive(Clone, Copy, PartialEq)]
enum Act {
    /// 127.0.0.1 for A, an empty answer (NODATA) for AAAA.
    Answer,
    NxDomain,
    Drop,
}

/// A query the responder saw: its name, its type, and when it arrived.
type Seen = (String, u16, Instant);

/// Threads serving in the namespace until dropped; the queries the responder saw, in order.
struct Servers {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// From the first query's arrival to the last's, as the responder saw them.
fn span(seen: &[Seen]) -> Duration {
    match (seen.first(), seen.last()) {
        (Some(a), Some(b)) => b.2.duration_since(a.2),
        _ => Duration::ZERO,
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(60));
    }
}

fn question(msg: &[u8]) -> Option<(String, u16, usize)> {
    let (mut i, mut labels) = (12, Vec::new());
    while *msg.get(i)? != 0 {
        let n = msg[i] as usize;
        labels.push(String::from_utf8_lossy(msg.get(i + 1..i + 1 + n)?).to_lowercase());
        i += 1 + n;
    }
    let t = u16::from_be_bytes([*msg.get(i + 1)?, *msg.get(i + 2)?]);
    Some((labels.join("."), t, i + 5))
}

fn response(msg: &[u8], act: Act) -> Option<Vec<u8>> {
    let (_, t, end) = question(msg)?;
    let mut r = msg[..2].to_vec();
    let (rcode, answers) = match act {
        Act::Drop => return None,
        Act::NxDomain => (3u8, 0u16),
        Act::Answer => (0, u16::from(t == 1)),
    };
    r.extend_from_slice(&[0x81, 0x80 | rcode]);
    r.extend_from_slice(&[0, 1]);
    r.extend_from_slice(&answers.to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&msg[12..end]);
    if answers == 1 {
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some(r)
}

/// A DNS responder on RESOLVER:53 answering after `delay` by `policy`, and an HTTP server on
/// 127.0.0.1:HTTP_PORT, both in `ns`.
fn serve(ns: &Netns, delay: Duration, policy: fn(&str, u16) -> Act) -> Servers {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (st, sn) = (stop.clone(), seen.clone());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let ready = ready_tx.clone();
    spawn_in(&ns.name, move || {
        let s = Arc::new(UdpSocket::bind((RESOLVER, 53)).unwrap());
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        ready.send(()).unwrap();
        let mut buf = [0u8; 1500];
        while !st.load(Ordering::Relaxed) {
            let Ok((n, peer)) = s.recv_from(&mut buf) else {
                continue;
            };
            let msg = buf[..n].to_vec();
            let Some((name, t, _)) = question(&msg) else {
                continue;
            };
            sn.lock().unwrap().push((name.clone(), t, Instant::now()));
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                if let Some(r) = response(&msg, policy(&name, t)) {
                    let _ = s.send_to(&r, peer);
                }
            });
        }
    });
    let st = stop.clone();
    spawn_in(&ns.name, move || {
        let l = TcpListener::bind(("127.0.0.1", HTTP_PORT)).unwrap();
        l.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        while !st.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((c, _)) => {
                    std::thread::spawn(move || answer_http(c));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    for _ in 0..2 {
        ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    Servers { stop, seen }
}

fn answer_http(mut c: TcpStream) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while read_request(&mut c) {
        if c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .is_err()
        {
            return;
        }
    }
}

/// `cmd` run in the namespace, timed: (seconds, stdout).
fn timed(ns: &Netns, cmd: &[&str]) -> (f64, String) {
    let t0 = Instant::now();
    let out = ns.try_exec(cmd);
    (
        t0.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `latscope diagnose URL --json` in the namespace: its document, checked against the schema.
fn diagnose(ns: &Netns) -> Value {
    let url = format!("http://{NAME}:{HTTP_PORT}/");
    let out = ns.latscope(&["diagnose", &url, "-d", "1s", "--no-load", "--json"]);
    let (code, stdout, stderr) = lab::split(&out);
    assert!(code == 0 || code == 1, "diagnose failed ({code}): {stderr}");
    lab::json_checked(&stdout, "diagnose")
}

fn slow_dns(doc: &Value) -> &Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "slow_dns")
        .unwrap_or_else(|| panic!("no slow_dns: {doc}"))
}

fn ns_of(v: &Value) -> f64 {
    v.as_u64().unwrap_or_else(|| panic!("not ns: {v}")) as f64
}

/// A resolver that never answers AAAA (timeout:1): glibc waits the timeout for it three times
/// on a process's first lookup (parallel, single-request, single-request-reopen) and once on
/// each later one. diagnose names the AAAA query, the nameserver and the options, predicts
/// both waits as getent and its own getaddrinfo measure them, and fixes the resolver first.
#[test]
fn an_unanswered_aaaa_is_named_with_its_wait() {
    require_root!();
    let ns = Netns::new("dnsa");
    let _conf = ResolvConf::new(
        &ns,
        &format!("nameserver {RESOLVER}\noptions timeout:1 attempts:2\n"),
    );
    let srv = serve(&ns, Duration::ZERO, |_, t| {
        if t == 28 { Act::Drop } else { Act::Answer }
    });
    // Independently: dig asks each type once; getent pays glibc's full first lookup.
    let dig = |t: &str| {
        let out = ns.try_exec(&[
            "dig",
            "+time=1",
            "+tries=1",
            &format!("@{RESOLVER}"),
            NAME,
            t,
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(dig("A").contains("127.0.0.1"), "dig A: {}", dig("A"));
    assert!(
        dig("AAAA").contains("timed out"),
        "dig AAAA: {}",
        dig("AAAA")
    );
    let (getent_s, out) = timed(&ns, &["getent", "ahosts", NAME]);
    assert!(out.contains("127.0.0.1"), "{out}");
    assert!(
        (2.8..4.0).contains(&getent_s),
        "getent ahosts took {getent_s:.2} s"
    );

    let doc = diagnose(&ns);
    let f = slow_dns(&doc);
    assert_eq!(doc["findings"][0]["rule"], "slow_dns", "{doc}");
    assert_eq!(
        f["title"],
        "slow name resolution: AAAA queries go unanswered and each lookup waits for the resolver's timeout"
    );
    let evidence = f["evidence"].to_string();
    assert!(
        evidence.contains(&format!(
            "AAAA queries for {NAME} got no answer from {RESOLVER} (3 sent"
        )),
        "{evidence}"
    );
    assert!(
        evidence.contains("while its A queries were answered in"),
        "{evidence}"
    );
    assert!(evidence.contains("timeout:1 s"), "{evidence}");
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.starts_with(&format!(
            "make the resolver ({RESOLVER}) answer AAAA queries"
        )),
        "{fix}"
    );
    assert!(fix.contains("`options no-aaaa`"), "{fix}");
    let names = &doc["names"];
    let lost = names["queries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["qtype"] == "AAAA" && q["answer"]["kind"] == "no_answer")
        .count();
    assert_eq!(lost, 3, "{names}");
    // The prediction against glibc: a process's first lookup (getent) and a later one in the
    // same thread (diagnose's own request phases, after its earlier lookups).
    let first = ns_of(&names["wait"]["first_ns"]) / 1e9;
    let later = ns_of(&names["wait"]["later_ns"]) / 1e9;
    let measured = ns_of(&doc["phases"]["dns_ns"]) / 1e9;
    assert!(
        (first - getent_s).abs() < 0.3,
        "first {first:.2} s, getent {getent_s:.2} s"
    );
    assert!(
        (later - measured).abs() < 0.3,
        "later {later:.2} s, measured {measured:.2} s"
    );
    assert_eq!(
        f["explains_ns"], doc["phases"]["dns_ns"],
        "the cost is the measured lookup"
    );
    // The responder saw every AAAA the replay sent.
    let aaaa = srv
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t, _)| *t == 28)
        .count();
    assert!(aaaa >= 3 + 3, "{aaaa}");
}

/// A pod's resolv.conf (three search domains, ndots:5) and a resolver 25 ms away: the name,
/// with two dots, is asked under each search domain (NXDOMAIN) before itself — four round
/// trips where one would do. diagnose names the three expansions, counts them, and gives the
/// trailing dot and a lower ndots as the fix.
#[test]
fn a_search_list_walk_is_named() {
    require_root!();
    let ns = Netns::new("dnss");
    let _conf = ResolvConf::new(
        &ns,
        &format!(
            "nameserver {RESOLVER}\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        ),
    );
    let srv = serve(&ns, Duration::from_millis(25), |n, _| {
        if n == NAME {
            Act::Answer
        } else {
            Act::NxDomain
        }
    });
    // Independently: the responder's log of getent's lookup, and the absolute name's.
    let (walk_s, _) = timed(&ns, &["getent", "ahosts", NAME]);
    let walk: Vec<Seen> = srv.seen.lock().unwrap().drain(..).collect();
    let seen: Vec<String> = walk.iter().map(|(n, ..)| n.clone()).collect();
    let expanded = [
        format!("{NAME}.default.svc.cluster.local"),
        format!("{NAME}.svc.cluster.local"),
        format!("{NAME}.cluster.local"),
    ];
    let order: Vec<&String> = {
        let mut v: Vec<&String> = seen.iter().collect();
        v.dedup();
        v
    };
    assert_eq!(
        order,
        [&expanded[0], &expanded[1], &expanded[2], &NAME.to_string()],
        "{seen:?}"
    );
    let (fqdn_s, _) = timed(&ns, &["getent", "ahosts", &format!("{NAME}.")]);
    let fqdn: Vec<Seen> = srv.seen.lock().unwrap().drain(..).collect();
    // By the responder's clock (a process's start-up under load is no lookup): each expansion
    // waited for the one before it to be refused — three round trips between the walk's first
    // query and its last — while the absolute name's queries all left in one round.
    let (walk_span, fqdn_span) = (span(&walk), span(&fqdn));
    assert!(
        walk_s >= 0.1 && walk_span >= Duration::from_millis(3 * 25) && !fqdn.is_empty(),
        "walk {walk_s:.3} s ({walk_span:?} from its first query to its last), absolute {fqdn_s:.3} s"
    );
    assert!(
        fqdn_span < Duration::from_millis(25),
        "the absolute name took more than one round: {fqdn_span:?} ({fqdn:?})"
    );
    let nx = ns.try_exec(&["dig", "+time=1", &format!("@{RESOLVER}"), &expanded[0]]);
    assert!(String::from_utf8_lossy(&nx.stdout).contains("status: NXDOMAIN"));

    let doc = diagnose(&ns);
    assert_eq!(doc["findings"][0]["rule"], "slow_dns", "{doc}");
    let f = slow_dns(&doc);
    assert_eq!(
        f["title"],
        "slow name resolution: the search list makes each lookup ask 3 names before the one that answers"
    );
    let evidence = f["evidence"].to_string();
    assert!(
        evidence.contains(&format!(
            "{NAME} has 2 dots, fewer than ndots:5, so the search list comes first: it was tried as {}, {}, {} (NXDOMAIN each) before {NAME} answered — 3 lookups × 2 types, 6 queries",
            expanded[0], expanded[1], expanded[2]
        )),
        "{evidence}"
    );
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.contains(&format!("`{NAME}.`")) && fix.contains("`options ndots:2`"),
        "{fix}"
    );
    let measured = ns_of(&doc["phases"]["dns_ns"]) / 1e9;
    assert!(
        (0.1..0.3).contains(&measured),
        "getaddrinfo in diagnose: {measured:.3} s"
    );
    let names = doc["names"]["names"].as_array().unwrap();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(names[3]["result"], "answered");
}

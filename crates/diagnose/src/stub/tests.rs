//! The replay against resolvers on loopback that misbehave as real ones do.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType};

use latscope_core::model::names::{Answer, NameResult, QueryType, ResolvConf, SendMode};

use super::lookup;

/// What the fake resolver does with a query.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Address,
    NoData,
    NxDomain,
    ServFail,
    Drop,
    /// Truncated over UDP, the address over TCP.
    Truncate,
}

/// A resolver on 127.0.0.1 (UDP, and TCP on the same port) acting by `policy(name, type)`.
/// Stops when dropped.
struct Fake {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    seen: Arc<std::sync::Mutex<Vec<(String, RecordType)>>>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn reply(q: &Message, act: Act, tcp: bool) -> Option<Vec<u8>> {
    let mut m = Message::new();
    m.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .set_recursion_available(true);
    m.add_query(q.queries()[0].clone());
    let name = q.queries()[0].name().clone();
    match act {
        Act::Drop => return None,
        Act::NxDomain => {
            m.set_response_code(ResponseCode::NXDomain);
        }
        Act::ServFail => {
            m.set_response_code(ResponseCode::ServFail);
        }
        Act::NoData => {}
        Act::Truncate if !tcp => {
            m.set_truncated(true);
        }
        Act::Address | Act::Truncate => {
            let rdata = match q.queries()[0].query_type() {
                RecordType::AAAA => RData::AAAA(std::net::Ipv6Addr::LOCALHOST.into()),
                _ => RData::A(Ipv4Addr::new(10, 0, 0, 1).into()),
            };
            m.add_answer(Record::from_rdata(name, 60, rdata));
        }
    }
    m.to_vec().ok()
}

fn fake(policy: fn(&str, RecordType) -> Act) -> Fake {
    let (udp, tcp) = loop {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()) {
            break (udp, tcp);
        }
    };
    let addr = udp.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    udp.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    tcp.set_nonblocking(true).unwrap();
    let (st, sn) = (stop.clone(), seen.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while !st.load(Ordering::Relaxed) {
            if let Ok((n, peer)) = udp.recv_from(&mut buf) {
                let q = Message::from_vec(&buf[..n]).unwrap();
                let (name, t) = (
                    q.queries()[0].name().to_ascii(),
                    q.queries()[0].query_type(),
                );
                sn.lock().unwrap().push((name.clone(), t));
                if let Some(r) = reply(&q, policy(name.trim_end_matches('.'), t), false) {
                    let _ = udp.send_to(&r, peer);
                }
            }
            if let Ok((mut c, _)) = tcp.accept() {
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut len = [0u8; 2];
                while c.read_exact(&mut len).is_ok() {
                    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
                    c.read_exact(&mut msg).unwrap();
                    let q = Message::from_vec(&msg).unwrap();
                    let (name, t) = (
                        q.queries()[0].name().to_ascii(),
                        q.queries()[0].query_type(),
                    );
                    sn.lock().unwrap().push((name.clone(), t));
                    if let Some(r) = reply(&q, policy(name.trim_end_matches('.'), t), true) {
                        let _ = c.write_all(&(r.len() as u16).to_be_bytes());
                        let _ = c.write_all(&r);
                    }
                }
            }
        }
    });
    Fake { addr, stop, seen }
}

fn conf(servers: &[SocketAddr], text: &str) -> ResolvConf {
    let mut c = crate::resolv::parse(text, crate::resolv::Env::default());
    c.nameservers = servers.to_vec();
    c
}

fn run(c: &ResolvConf, host: &str, cap_ms: u64) -> super::Walked {
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    lookup(c, host, &stop, deadline, Duration::from_millis(cap_ms)).unwrap()
}

const S: u64 = 1_000_000_000;

/// Each name asked and how it ended.
fn results(w: &super::Walked) -> Vec<(&str, NameResult)> {
    w.names
        .iter()
        .map(|n| (n.name.as_str(), n.result))
        .collect()
}

/// A resolver that never answers AAAA: glibc waits its timeout for it, asks again one at a
/// time, then again from new sockets, and goes on with the A: three timeouts on a thread's
/// first lookup, one on each later (the mode sticks).
#[test]
fn a_dropped_aaaa_costs_three_timeouts_first_and_one_after() {
    let f = fake(|_, t| {
        if t == RecordType::AAAA {
            Act::Drop
        } else {
            Act::Address
        }
    });
    let c = conf(&[f.addr], "options timeout:1 attempts:2");
    let w = run(&c, "web.lab.test", 150);
    assert_eq!(w.names.len(), 1);
    assert_eq!(w.names[0].result, NameResult::Answered);
    let modes: Vec<(QueryType, SendMode, Answer)> = w
        .queries
        .iter()
        .map(|q| (q.qtype, q.mode, q.answer))
        .collect();
    let addr = Answer::Records {
        records: 1,
        addresses: 1,
    };
    assert_eq!(
        modes,
        [
            (QueryType::A, SendMode::Parallel, addr),
            (QueryType::Aaaa, SendMode::Parallel, Answer::NoAnswer),
            (QueryType::A, SendMode::Sequential, addr),
            (QueryType::Aaaa, SendMode::Sequential, Answer::NoAnswer),
            (QueryType::A, SendMode::SequentialReopen, addr),
            (
                QueryType::Aaaa,
                SendMode::SequentialReopen,
                Answer::NoAnswer
            ),
        ]
    );
    assert!(
        w.queries
            .iter()
            .all(|q| q.attempt == 1 && q.glibc_wait_ns == S)
    );
    let lost = &w.queries[1];
    assert!(
        lost.took_ns >= 140_000_000 && lost.took_ns < 400_000_000,
        "{lost:?}"
    );
    assert!(
        w.wait.first_ns >= 3 * S && w.wait.first_ns < 3 * S + S / 10,
        "{:?}",
        w.wait
    );
    assert!(
        w.wait.later_ns >= S && w.wait.later_ns < S + S / 10,
        "{:?}",
        w.wait
    );
    assert_eq!(w.wait.timeouts_first_ns, 3 * S);
    assert!(w.took < Duration::from_millis(900), "capped: {:?}", w.took);
    // With `single-request-reopen` set, the first lookup already pays one timeout only.
    let c = conf(&[f.addr], "options timeout:1 single-request-reopen");
    let w = run(&c, "web.lab.test", 150);
    assert_eq!(w.queries.len(), 2);
    assert_eq!(w.wait.first_ns, w.wait.later_ns);
    assert!(w.wait.first_ns >= S && w.wait.first_ns < S + S / 10);
    // `no-aaaa` asks for A alone.
    let c = conf(&[f.addr], "options no-aaaa");
    let w = run(&c, "web.lab.test", 150);
    assert_eq!(w.queries.len(), 1);
    assert!(w.wait.first_ns < S / 10);
}

/// A pod's search list: a name with fewer dots than ndots walks every search domain (each an
/// NXDOMAIN for A and AAAA) before it is asked as it is; with a trailing dot it is asked once.
#[test]
fn ndots_walks_the_search_list_first() {
    let f = fake(|n, _| {
        if n == "web.lab.test" {
            Act::Address
        } else {
            Act::NxDomain
        }
    });
    let c = conf(
        &[f.addr],
        "search default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5",
    );
    let w = run(&c, "web.lab.test", 500);
    let names = results(&w);
    assert_eq!(
        names,
        [
            (
                "web.lab.test.default.svc.cluster.local",
                NameResult::NotFound
            ),
            ("web.lab.test.svc.cluster.local", NameResult::NotFound),
            ("web.lab.test.cluster.local", NameResult::NotFound),
            ("web.lab.test", NameResult::Answered),
        ]
    );
    assert_eq!(w.queries.len(), 8);
    assert_eq!(w.wait.timeouts_first_ns, 0);
    assert_eq!(f.seen.lock().unwrap().len(), 8);
    let w = run(&c, "web.lab.test.", 500);
    assert_eq!(w.names.len(), 1);
    assert_eq!(w.queries.len(), 2);
    // ndots:2: the name goes first and answers.
    let c = conf(&[f.addr], "search cluster.local\noptions ndots:2");
    assert_eq!(run(&c, "web.lab.test", 500).names.len(), 1);
}

/// A timeout under a search domain leaves the search list (the name itself is still asked);
/// a SERVFAIL does not.
#[test]
fn a_timeout_leaves_the_search_list_a_servfail_does_not() {
    let f = fake(|n, _| match n {
        "web.a.example" => Act::ServFail,
        "web.b.example" => Act::Drop,
        "web" => Act::Address,
        _ => Act::NxDomain,
    });
    let c = conf(
        &[f.addr],
        "search a.example b.example c.example\noptions timeout:1 attempts:1",
    );
    let w = run(&c, "web", 100);
    let names = results(&w);
    assert_eq!(
        names,
        [
            ("web.a.example", NameResult::ServFail),
            ("web.b.example", NameResult::TimedOut),
            ("web", NameResult::Answered),
        ]
    );
    // Both SERVFAILs read, no timeout: the next nameserver (none) and on.
    assert!(w.queries[..2].iter().all(|q| q.answer == Answer::ServFail));
    assert_eq!(w.wait.timeouts_first_ns, S, "{:?}", w.wait);
}

/// The first nameserver is silent: each attempt waits its timeout there, the second answers.
#[test]
fn a_silent_first_nameserver_costs_its_timeout() {
    let dead = UdpSocket::bind("127.0.0.1:0").unwrap(); // bound, never read: no ICMP
    let f = fake(|_, _| Act::Address);
    let c = conf(&[dead.local_addr().unwrap(), f.addr], "options timeout:2");
    let w = run(&c, "web.lab.test", 100);
    assert_eq!(w.names[0].result, NameResult::Answered);
    let servers: Vec<(SocketAddr, Answer)> =
        w.queries.iter().map(|q| (q.server, q.answer)).collect();
    assert_eq!(servers[0], (dead.local_addr().unwrap(), Answer::NoAnswer));
    assert_eq!(servers[2].0, f.addr);
    assert_eq!(w.queries[2].glibc_wait_ns, 2 * S, "(2 << 1) / 2");
    assert!(w.wait.first_ns >= 2 * S && w.wait.first_ns < 2 * S + S / 10);
    assert_eq!(
        w.wait.first_ns, w.wait.later_ns,
        "a timeout with nothing in: no fallback"
    );
}

/// Nothing listens at the nameserver: the host says so at once and the lookup ends.
#[test]
fn an_unreachable_nameserver_ends_the_lookup() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = conf(&[port], "search a.example b.example\noptions ndots:3");
    let w = run(&c, "web", 1000);
    assert!(w.took < Duration::from_millis(500), "{:?}", w.took);
    assert_eq!(w.names.len(), 1, "{:?}", w.names);
    assert_eq!(w.names[0].result, NameResult::Unreachable);
    assert!(w.queries.iter().all(|q| q.answer == Answer::Unreachable));
}

/// A truncated answer is asked again over TCP, both queries on one connection.
#[test]
fn a_truncated_answer_goes_over_tcp() {
    let f = fake(|_, t| {
        if t == RecordType::A {
            Act::Truncate
        } else {
            Act::NoData
        }
    });
    let c = conf(&[f.addr], "");
    let w = run(&c, "web.lab.test", 1000);
    assert_eq!(w.names[0].result, NameResult::Answered);
    let tcp: Vec<&latscope_core::model::names::Query> = w
        .queries
        .iter()
        .filter(|q| q.mode == SendMode::Tcp)
        .collect();
    assert_eq!(tcp.len(), 2, "{:?}", w.queries);
    assert!(w.queries.iter().any(|q| q.answer == Answer::Truncated));
    assert_eq!(
        tcp[0].answer,
        Answer::Records {
            records: 1,
            addresses: 1
        }
    );
}

/// The step's stop flag ends a walk between and within waits.
#[test]
fn a_stopped_walk_keeps_what_it_asked() {
    let f = fake(|_, _| Act::Drop);
    let c = conf(&[f.addr], "search a.example\noptions timeout:5 ndots:3");
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_millis(300);
    let t = Instant::now();
    let w = lookup(&c, "web", &stop, deadline, Duration::from_secs(5)).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(w.names[0].result, NameResult::NotAsked);
    assert!(w.names.iter().all(|n| n.result == NameResult::NotAsked));
}

//! The evidence endpoint (`latscope serve --auth-file KEY --evidence-ports ...`, issue 26 item 6)
//! against hostile clients, on loopback: no authentication, a wrong key, a replayed proof,
//! oversized and slow requests, another port, another process, too long a window, a flood from
//! one address. Each attack is refused with the protocol's code; afterwards the agent still
//! answers an honest request, whose evidence is of the requesting address's connections only,
//! names no process but the port's owner, and leaves no eBPF program behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use latscope_core::model::evidence::{Observed, ServerEvidence};
use latscope_core::model::rr::ServerBehaviour;
use latscope_net::auth::AuthKey;
use latscope_net::proto::{self, ClientHello, RefusalCode, Reply, ServerHello, Start, TestKind};

const BIN: &str = env!("CARGO_BIN_EXE_latscope");
const KEY: &str = "evidence-hostile-test-key";

/// A `latscope serve` child on 127.0.0.1 (ephemeral port), killed on drop.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().expect("start-up line").unwrap();
        std::thread::spawn(move || for _ in lines {});
        let tcp = first
            .split("tcp ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .expect("address in the start-up line");
        Serve {
            child,
            addr: tcp.parse().expect("address"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// eBPF programs the process holds (file descriptors of kind bpf-prog).
    fn bpf_programs(&self) -> usize {
        let dir = format!("/proc/{}/fdinfo", self.pid());
        std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        std::fs::read_to_string(e.path())
                            .is_ok_and(|t| t.lines().any(|l| l.starts_with("prog_type:")))
                    })
                    .count()
            })
            .unwrap_or(0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn evidence_start(window_ms: u64) -> Start {
    Start {
        kind: TestKind::Evidence,
        request_bytes: 1,
        response_bytes: 1,
        duration_ms: window_ms,
        server: ServerBehaviour::default(),
        stream: None,
        join: None,
    }
}

/// A connection from `src`, the server's greeting read.
fn connect(addr: SocketAddr, src: Ipv4Addr) -> (TcpStream, ServerHello) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).unwrap();
    s.connect_timeout(&addr.into(), Duration::from_secs(2))
        .unwrap();
    let mut c: TcpStream = s.into();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let hello: ServerHello = proto::read_greeting(&mut c).expect("greeting");
    (c, hello)
}

/// Greeting with `auth`, the evidence Start and the request body `body`, then the reply.
fn send(
    mut c: TcpStream,
    auth: Option<latscope_net::auth::AuthProof>,
    window_ms: u64,
    body: &[u8],
) -> (TcpStream, Reply) {
    let mut out = Vec::new();
    proto::encode_greeting(
        &ClientHello {
            software: "hostile test".into(),
            auth,
        },
        &mut out,
    );
    proto::encode_frame(&evidence_start(window_ms), &mut out);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    c.write_all(&out).unwrap();
    let reply: Reply = proto::read_frame(&mut c).expect("reply");
    (c, reply)
}

/// An authenticated request for `port` from `src`.
fn ask(addr: SocketAddr, src: Ipv4Addr, window_ms: u64, body: &str) -> (TcpStream, Reply) {
    let (c, hello) = connect(addr, src);
    let proof = AuthKey::from_bytes(KEY.as_bytes())
        .unwrap()
        .prove(hello.challenge.as_deref().expect("a challenge"))
        .unwrap();
    send(c, Some(proof), window_ms, body.as_bytes())
}

fn request(port: u16) -> String {
    format!(r#"{{"version":1,"port":{port}}}"#)
}

fn refusal(r: &Reply) -> Option<RefusalCode> {
    match r {
        Reply::Refused { code, .. } => Some(*code),
        Reply::Accepted { .. } => None,
    }
}

/// Say done and read the evidence.
fn evidence(mut c: TcpStream) -> (ServerEvidence, String) {
    c.write_all(b"d").unwrap();
    let v: serde_json::Value = proto::read_frame(&mut c).expect("evidence");
    let text = v.to_string();
    (
        serde_json::from_value(v).expect("the evidence schema"),
        text,
    )
}

/// An honest client's idle connection to `target` from `src`, with one exchange so both ends
/// exist (the target is a `latscope serve`: greeting read).
fn idle_connection(target: SocketAddr, src: Ipv4Addr) -> TcpStream {
    connect(target, src).0
}

/// Wait (bounded) until the evidence endpoint accepts `src` again (its per-source interval).
fn after_interval() {
    std::thread::sleep(Duration::from_millis(600));
}

#[test]
fn hostile_clients_are_refused_and_evidence_stays_within_its_port() {
    // The target keeps idle connections (the honest clients below) for the whole test.
    let target = Serve::start(&["--handshake-timeout", "60s"]);
    let keys = lab::TempDir::new();
    let key = keys.secret_file("key", KEY);
    let mut agent = Serve::start(&[
        "--auth-file",
        key.to_str().unwrap(),
        "--evidence-ports",
        &format!("{},{}", target.addr.port(), 1),
        "--handshake-timeout",
        "1s",
    ]);
    let tport = target.addr.port();
    let me = Ipv4Addr::LOCALHOST;

    // No authentication.
    let (c, hello) = connect(agent.addr, me);
    assert!(hello.auth_required);
    let (_, r) = send(c, None, 1000, request(tport).as_bytes());
    assert_eq!(refusal(&r), Some(RefusalCode::Auth), "{r:?}");

    // A wrong key.
    let (c, hello) = connect(agent.addr, me);
    let proof = AuthKey::from_bytes(b"not the key")
        .unwrap()
        .prove(hello.challenge.as_deref().unwrap())
        .unwrap();
    let (_, r) = send(c, Some(proof), 1000, request(tport).as_bytes());
    assert_eq!(refusal(&r), Some(RefusalCode::Auth), "{r:?}");

    // A replay: a valid proof for one connection's challenge, sent on another.
    let (_first, hello) = connect(agent.addr, me);
    let proof = AuthKey::from_bytes(KEY.as_bytes())
        .unwrap()
        .prove(hello.challenge.as_deref().unwrap())
        .unwrap();
    let (c, _) = connect(agent.addr, me);
    let (_, r) = send(c, Some(proof), 1000, request(tport).as_bytes());
    assert_eq!(
        refusal(&r),
        Some(RefusalCode::Auth),
        "a replayed proof: {r:?}"
    );

    // Oversized: a request body beyond 1 KiB, and a length prefix of 1 GiB (refused before
    // anything that large is read).
    let big = format!(
        r#"{{"version":1,"port":{tport},"x":"{}"}}"#,
        "a".repeat(4000)
    );
    let (_, r) = ask(agent.addr, me, 1000, &big);
    assert_eq!(refusal(&r), Some(RefusalCode::Limit), "{r:?}");
    let (mut c, hello) = connect(agent.addr, me);
    let proof = AuthKey::from_bytes(KEY.as_bytes())
        .unwrap()
        .prove(hello.challenge.as_deref().unwrap())
        .unwrap();
    let mut out = Vec::new();
    proto::encode_greeting(
        &ClientHello {
            software: "hostile test".into(),
            auth: Some(proof),
        },
        &mut out,
    );
    proto::encode_frame(&evidence_start(1000), &mut out);
    out.extend_from_slice(&(1u32 << 30).to_be_bytes());
    c.write_all(&out).unwrap();
    let r: Reply = proto::read_frame(&mut c).expect("reply");
    assert_eq!(refusal(&r), Some(RefusalCode::Limit), "{r:?}");

    // Slow: a request trickled a byte at a time is cut at the handshake deadline (1 s here),
    // however regularly the bytes come.
    let (mut c, hello) = connect(agent.addr, me);
    let proof = AuthKey::from_bytes(KEY.as_bytes())
        .unwrap()
        .prove(hello.challenge.as_deref().unwrap())
        .unwrap();
    let mut out = Vec::new();
    proto::encode_greeting(
        &ClientHello {
            software: "slow".into(),
            auth: Some(proof),
        },
        &mut out,
    );
    proto::encode_frame(&evidence_start(1000), &mut out);
    let body = request(tport);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body.as_bytes());
    let began = Instant::now();
    let mut cut = None;
    for b in &out {
        if c.write_all(&[*b]).is_err() {
            cut = Some(began.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if began.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    // The server closed (a write failed) or, at the latest, reading shows it gave up.
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let closed_after = cut.unwrap_or_else(|| began.elapsed());
    assert!(
        closed_after < Duration::from_secs(6),
        "a trickled request held the connection {closed_after:?}"
    );
    assert!(
        !rest.windows(8).any(|w| w == b"accepted"),
        "a trickled request was accepted"
    );

    after_interval();
    // Another port: one not listed; a listed one nobody listens on.
    let (_, r) = ask(agent.addr, me, 1000, &request(22));
    assert_eq!(refusal(&r), Some(RefusalCode::Limit), "{r:?}");
    after_interval();
    let (_, r) = ask(agent.addr, me, 1000, &request(1));
    assert_eq!(refusal(&r), Some(RefusalCode::Invalid), "{r:?}");
    after_interval();
    // Another process, by pid: not a field of the request.
    let (_, r) = ask(
        agent.addr,
        me,
        1000,
        &format!(r#"{{"version":1,"port":{tport},"pid":1}}"#),
    );
    assert_eq!(refusal(&r), Some(RefusalCode::Invalid), "{r:?}");
    after_interval();
    // A window beyond 60 s.
    let (_, r) = ask(agent.addr, me, 3_600_000, &request(tport));
    assert_eq!(refusal(&r), Some(RefusalCode::Limit), "{r:?}");
    after_interval();

    // The honest request, with connections to the target from two addresses: ours (127.0.0.1)
    // and another client's (127.0.0.2), which the evidence must leave out.
    let _ours = idle_connection(target.addr, me);
    let _theirs = [
        idle_connection(target.addr, Ipv4Addr::new(127, 0, 0, 2)),
        idle_connection(target.addr, Ipv4Addr::new(127, 0, 0, 2)),
    ];
    let (c, r) = ask(agent.addr, me, 5_000, &request(tport));
    assert_eq!(refusal(&r), None, "{r:?}");
    // A flood from the same address while it observes: refused by the per-source interval.
    let (_, flood) = ask(agent.addr, me, 1000, &request(tport));
    assert_eq!(refusal(&flood), Some(RefusalCode::Quota), "{flood:?}");
    std::thread::sleep(Duration::from_millis(1200));
    let (e, text) = evidence(c);
    assert_eq!(e.port, tport);
    assert_eq!(e.peer, IpAddr::V4(me));
    assert!(e.done_unix_ns.is_some(), "the client said done");
    match &e.sockets {
        Observed::Ran(s) => {
            assert_eq!(
                s.connections, 1,
                "only 127.0.0.1's connection, not 127.0.0.2's: {s:?}"
            );
            assert_eq!(s.process, format!("latscope[{}]", target.pid()));
        }
        other => panic!("the sockets of our connection were not read: {other:?}"),
    }
    // No process but the port's owner is named anywhere in the evidence.
    for (i, _) in text.match_indices('[') {
        let pid: String = text[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !pid.is_empty() && text[i + 1 + pid.len()..].starts_with(']') {
            assert_eq!(
                pid,
                target.pid().to_string(),
                "another process named: {text}"
            );
        }
    }
    // A client with no connection to the port learns nothing of others' connections.
    after_interval();
    let (c, r) = ask(
        agent.addr,
        Ipv4Addr::new(127, 0, 0, 3),
        1000,
        &request(tport),
    );
    assert_eq!(refusal(&r), None, "{r:?}");
    let (e, _) = evidence(c);
    assert!(
        e.sockets.value().is_none(),
        "127.0.0.3 has no connection, yet sockets were reported: {:?}",
        e.sockets
    );
    // The window bounds the observation even if the client never says done.
    after_interval();
    let (mut c, r) = ask(agent.addr, me, 500, &request(tport));
    assert_eq!(refusal(&r), None, "{r:?}");
    let began = Instant::now();
    let v: serde_json::Value = proto::read_frame(&mut c).expect("evidence at the window's end");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let e: ServerEvidence = serde_json::from_value(v).unwrap();
    assert!(e.done_unix_ns.is_none(), "the window ended, not the client");

    assert!(agent.alive(), "the agent died");
    // No eBPF program left behind once the observations ended.
    let deadline = Instant::now() + Duration::from_secs(5);
    while agent.bpf_programs() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(agent.bpf_programs(), 0, "eBPF programs left in the agent");
}

#[test]
fn evidence_is_off_unless_configured() {
    // Without --evidence-ports the endpoint refuses, even to a client holding the key.
    let keys = lab::TempDir::new();
    let key = keys.secret_file("key2", KEY);
    let agent = Serve::start(&["--auth-file", key.to_str().unwrap()]);
    let (_, r) = ask(
        agent.addr,
        Ipv4Addr::LOCALHOST,
        1000,
        &request(agent.addr.port()),
    );
    assert_eq!(refusal(&r), Some(RefusalCode::Invalid), "{r:?}");
    // And --evidence-ports without a key is a usage error (exit 2).
    let out = Command::new(BIN)
        .args(["serve", "--port", "0", "--evidence-ports", "all"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--auth-file"), "{err}");
}

/// The one-server set-up of the two-ended mode (`serve --auth-file k --evidence-ports 7379` on
/// port 7379): evidence about the server's own port is given, its owner named. It was refused
/// as "nothing this server can read listens on port 7379 … CAP_SYS_PTRACE", even as root: a
/// port scan leaves latscope's own process out.
#[test]
fn evidence_about_the_servers_own_port_is_given() {
    let keys = lab::TempDir::new();
    let key = keys.secret_file("key3", KEY);
    let agent = Serve::start(&[
        "--auth-file",
        key.to_str().unwrap(),
        "--evidence-ports",
        "all",
    ]);
    let port = agent.addr.port();
    let _ours = idle_connection(agent.addr, Ipv4Addr::LOCALHOST);
    let (c, r) = ask(agent.addr, Ipv4Addr::LOCALHOST, 1000, &request(port));
    assert_eq!(refusal(&r), None, "{r:?}");
    let (e, _) = evidence(c);
    assert_eq!(e.port, port);
    match &e.sockets {
        Observed::Ran(s) => assert_eq!(s.process, format!("latscope[{}]", agent.pid())),
        other => panic!("the server's own sockets were not read: {other:?}"),
    }
}

/// `serve --evidence-ports` with the default bind (loopback): the start-up says the evidence is
/// for this host's clients only, and how to serve other hosts' (whose first request would
/// otherwise meet "connection refused" with no hint why).
#[test]
fn a_loopback_only_evidence_server_says_so_at_start_up() {
    let keys = lab::TempDir::new();
    let key = keys.secret_file("key4", KEY);
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--auth-file"])
        .arg(&key)
        .args(["--evidence-ports", "80"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let start_up: Vec<String> = lines.take(4).map(Result::unwrap).collect();
    let _ = child.kill();
    let _ = child.wait();
    let line = start_up
        .iter()
        .find(|l| l.contains("evidence requests"))
        .unwrap_or_else(|| panic!("no evidence line: {start_up:?}"));
    assert!(
        line.contains("from this host only") && line.contains("--bind 0.0.0.0"),
        "{line}"
    );
}

//! `latscope serve` against hostile clients (issue 17): each attack runs against a real server
//! process on loopback, bounded in time, and each test then checks that the server is still up,
//! that its slots are free again (an honest test from the same host runs), that an honest client
//! from another source address was served meanwhile, and that threads and memory stay within
//! the budget the server documents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use latscope_core::model::rr::{ServerBehaviour, Transport};
use latscope_core::model::stream::{Direction, StreamOptions};
use latscope_net::proto::{
    self, ClientHello, RefusalCode, Reply, ServerHello, Start, StreamSpec, TestKind,
};

const BIN: &str = env!("CARGO_BIN_EXE_latscope");

/// A `latscope serve` child on 127.0.0.1 (ephemeral port), killed on drop.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        Serve::start_with(args, None)
    }

    /// With `nofile`: the server's RLIMIT_NOFILE.
    fn start_with(args: &[&str], nofile: Option<u64>) -> Serve {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        if let Some(n) = nofile {
            // SAFETY: setrlimit is async-signal-safe; it only touches the child.
            unsafe {
                cmd.pre_exec(move || {
                    let l = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &l);
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().expect("start-up line").unwrap();
        let exposed = lines.next().expect("exposure line").unwrap();
        assert!(
            exposed.contains("127.0.0.1") && exposed.contains("loopback"),
            "{exposed}"
        );
        // Keep draining the log so the server never blocks on a full pipe.
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

    /// (threads, VmRSS in KiB) of the server process.
    fn threads_rss(&self) -> (u64, u64) {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |k: &str| {
            s.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        (field("Threads:"), field("VmRSS:"))
    }

    /// CPU time (user + system) the server used, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    /// The server is up, its slots are free and it serves an honest rr (through the binary).
    fn serves_honest_rr(&mut self) {
        assert!(self.alive(), "the server died");
        let out = Command::new(BIN)
            .args(["rr", &self.addr.to_string(), "-n", "200", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "honest rr failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_req(kind: TestKind, req: u32, resp: u32, ms: u64) -> Start {
    Start {
        kind,
        request_bytes: req,
        response_bytes: resp,
        duration_ms: ms,
        server: ServerBehaviour::default(),
        stream: None,
        join: None,
    }
}

fn stream_req(spec: StreamSpec) -> Start {
    Start {
        stream: Some(spec),
        ..start_req(TestKind::Stream, 1, 1, 0)
    }
}

fn spec(transport: Transport, direction: Direction, streams: u32, buf: u32) -> StreamSpec {
    StreamSpec {
        transport,
        direction,
        streams,
        duration_ms: 1000,
        bytes_per_stream: None,
        buffer_bytes: buf,
        udp_rate_bps: None,
        options: StreamOptions {
            nodelay: true,
            ..StreamOptions::default()
        },
        interval_ms: 1000,
    }
}

/// Connect from `src` (a loopback address), send greeting and request, read the reply.
fn open(addr: SocketAddr, src: Ipv4Addr, start: &Start) -> (TcpStream, Reply) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).unwrap();
    s.connect_timeout(&addr.into(), Duration::from_secs(2))
        .unwrap();
    let mut c: TcpStream = s.into();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    proto::encode_greeting(
        &ClientHello {
            software: "hostile test".into(),
            auth: None,
        },
        &mut out,
    );
    proto::encode_frame(start, &mut out);
    c.write_all(&out).unwrap();
    let _: ServerHello = proto::read_greeting(&mut c).expect("greeting");
    let reply: Reply = proto::read_frame(&mut c).expect("reply");
    (c, reply)
}

fn refusal(r: &Reply) -> Option<RefusalCode> {
    match r {
        Reply::Refused { code, .. } => Some(*code),
        Reply::Accepted { .. } => None,
    }
}

/// An honest rr from another source address (127.0.0.2): 50 transactions of 64 B, each
/// answered within a second.
fn honest_rr_from_elsewhere(addr: SocketAddr) {
    let (mut c, reply) = open(
        addr,
        Ipv4Addr::new(127, 0, 0, 2),
        &start_req(TestKind::Rr, 64, 64, 10_000),
    );
    assert_eq!(refusal(&reply), None, "{reply:?}");
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..50 {
        c.write_all(&[b'q'; 64]).unwrap();
        c.read_exact(&mut buf).expect("an answer within 1 s");
    }
}

#[test]
fn udp_rate_of_one_bit_per_second_does_not_hold_a_slot() {
    let mut srv = Serve::start(&["--max-tests", "1"]);
    // The honest client of the issue: `stream -u -R -b 1 -t 1s` used to hold its slot for hours.
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args([
            "stream",
            &srv.addr.to_string(),
            "-u",
            "-R",
            "-b",
            "1",
            "-t",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}: {}",
        t0.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    // A rate of 0 is refused outright.
    let mut s = spec(Transport::Udp, Direction::Receive, 1, 1000);
    s.udp_rate_bps = Some(0.0);
    let (_c, reply) = open(srv.addr, Ipv4Addr::LOCALHOST, &stream_req(s));
    assert_eq!(refusal(&reply), Some(RefusalCode::Invalid), "{reply:?}");
    // The only test slot is free again.
    srv.serves_honest_rr();
}

#[test]
fn hostile_udp_stream_that_never_stops_is_ended_by_its_deadline() {
    let mut srv = Serve::start(&["--max-tests", "5", "--per-source-tests", "4"]);
    // A 1 bit/s server→client UDP test whose client never joins, never says Stop, never closes.
    let mut s = spec(Transport::Udp, Direction::Receive, 4, 1000);
    s.udp_rate_bps = Some(1.0);
    let conns: Vec<TcpStream> = (0..4)
        .map(|_| {
            let (c, reply) = open(srv.addr, Ipv4Addr::LOCALHOST, &stream_req(s.clone()));
            assert_eq!(refusal(&reply), None, "{reply:?}");
            c
        })
        .collect();
    honest_rr_from_elsewhere(srv.addr);
    // The join wait is bounded by the handshake timeout (5 s): every slot is back after it.
    let t0 = Instant::now();
    loop {
        let (_c, reply) = open(
            srv.addr,
            Ipv4Addr::LOCALHOST,
            &start_req(TestKind::Rr, 64, 64, 1000),
        );
        if refusal(&reply).is_none() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "slots still held: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(conns);
    srv.serves_honest_rr();
}

#[test]
fn handshake_slowloris_is_cut_at_the_whole_handshake_deadline() {
    let mut srv = Serve::start(&[
        "--handshake-timeout",
        "1s",
        "--max-connections",
        "40",
        "--per-source-connections",
        "30",
    ]);
    // 30 clients sending one byte of a valid greeting every 200 ms (a per-read timeout of 1 s
    // would never fire).
    let mut conns: Vec<TcpStream> = (0..30)
        .map(|_| {
            let c = TcpStream::connect(srv.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            c
        })
        .collect();
    let t0 = Instant::now();
    let mut greeting = Vec::new();
    proto::encode_greeting(
        &ClientHello {
            software: "slow".into(),
            auth: None,
        },
        &mut greeting,
    );
    let mut closed_at = vec![None; conns.len()];
    let mut sink = [0u8; 512];
    for i in 0..20 {
        for (k, c) in conns.iter_mut().enumerate() {
            if closed_at[k].is_some() {
                continue;
            }
            let _ = c.write_all(&greeting[i % greeting.len()..][..1]);
            // Drain the server's greeting; EOF or a reset means the server closed it.
            loop {
                match c.read(&mut sink) {
                    Ok(0) => {
                        closed_at[k] = Some(t0.elapsed());
                        break;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                    Err(_) => {
                        closed_at[k] = Some(t0.elapsed());
                        break;
                    }
                }
            }
        }
        if i == 5 {
            // Meanwhile, another host is served.
            honest_rr_from_elsewhere(srv.addr);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (k, t) in closed_at.iter().enumerate() {
        let t = t.unwrap_or_else(|| panic!("connection {k} still open after {:?}", t0.elapsed()));
        assert!(
            t < Duration::from_millis(2500),
            "connection {k} closed at {t:?}"
        );
    }
    srv.serves_honest_rr();
}

#[test]
fn stream_memory_and_connections_are_budgeted() {
    let mut srv = Serve::start(&["--max-connections", "8", "--per-source-connections", "8"]);
    // 128 streams × 4 MiB each way: 1 GiB of buffers in one request (issue 17: 536 MB each).
    let big = spec(Transport::Tcp, Direction::Both, 128, 4 << 20);
    for _ in 0..12 {
        let (_c, reply) = open(srv.addr, Ipv4Addr::LOCALHOST, &stream_req(big.clone()));
        assert_eq!(refusal(&reply), Some(RefusalCode::Limit), "{reply:?}");
    }
    let (threads, rss_kib) = srv.threads_rss();
    assert!(
        rss_kib < 64 * 1024,
        "RSS {rss_kib} KiB after refused requests"
    );
    assert!(threads <= 8 + 3, "{threads} threads");
    // Data connections count toward --max-connections: 8 streams + the control connection do
    // not fit in 8 connections.
    let out = Command::new(BIN)
        .args(["stream", &srv.addr.to_string(), "-P", "8", "-t", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("busy") || err.contains("share"), "{err}");
    // The refused test's joined connections are freed when its join wait (the handshake
    // timeout, 5 s) ends; then a stream test within the budget runs, and its memory is given
    // back.
    let t0 = Instant::now();
    loop {
        let out = Command::new(BIN)
            .args([
                "stream",
                &srv.addr.to_string(),
                "-P",
                "4",
                "-t",
                "1s",
                "-l",
                "4MiB",
            ])
            .output()
            .unwrap();
        if out.status.success() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (threads, rss_kib) = srv.threads_rss();
    assert!(rss_kib < 64 * 1024, "RSS {rss_kib} KiB after the test");
    assert!(threads <= 8 + 3, "{threads} threads");
    srv.serves_honest_rr();
}

#[test]
fn per_source_quota_leaves_room_for_other_hosts() {
    let mut srv = Serve::start(&["--max-tests", "8", "--per-source-tests", "2"]);
    // One host opens idle UDP tests until its share is used up.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let (c, reply) = open(
                srv.addr,
                Ipv4Addr::LOCALHOST,
                &start_req(TestKind::UdpRr, 64, 64, 60_000),
            );
            assert_eq!(refusal(&reply), None, "{reply:?}");
            c
        })
        .collect();
    let (_c, reply) = open(
        srv.addr,
        Ipv4Addr::LOCALHOST,
        &start_req(TestKind::UdpRr, 64, 64, 60_000),
    );
    assert_eq!(refusal(&reply), Some(RefusalCode::Quota), "{reply:?}");
    honest_rr_from_elsewhere(srv.addr);
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    srv.serves_honest_rr();
}

#[test]
fn amplification_and_congestion_control_are_refused() {
    let mut srv = Serve::start(&[]);
    // 20 B asking for 65,507 B (3,275×).
    let (_c, reply) = open(
        srv.addr,
        Ipv4Addr::LOCALHOST,
        &start_req(TestKind::UdpRr, 20, 65_507, 1000),
    );
    assert_eq!(refusal(&reply), Some(RefusalCode::Limit), "{reply:?}");
    // Unpaced or too fast server-sent UDP.
    let mut s = spec(Transport::Udp, Direction::Receive, 4, 1400);
    s.udp_rate_bps = Some(1e9);
    let (_c, reply) = open(srv.addr, Ipv4Addr::LOCALHOST, &stream_req(s));
    assert_eq!(refusal(&reply), Some(RefusalCode::Limit), "{reply:?}");
    // A congestion control outside net.ipv4.tcp_allowed_congestion_control.
    let mut s = spec(Transport::Tcp, Direction::Send, 1, 1000);
    s.options.congestion = Some("latscope_no_such_cc".into());
    let (_c, reply) = open(srv.addr, Ipv4Addr::LOCALHOST, &stream_req(s));
    assert_eq!(refusal(&reply), Some(RefusalCode::Invalid), "{reply:?}");
    srv.serves_honest_rr();
}

#[test]
fn busy_refusal_comes_after_the_greeting() {
    let mut srv = Serve::start(&["--max-connections", "1", "--handshake-timeout", "3s"]);
    let idle = TcpStream::connect(srv.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new(BIN)
        .args(["rr", &srv.addr.to_string(), "-n", "10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("busy: 0 tests running, retry later"), "{err}");
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    srv.serves_honest_rr();
}

#[test]
fn accept_loop_backs_off_when_descriptors_run_out() {
    // 24 descriptors: the server runs out after a handful of connections.
    let mut srv = Serve::start_with(&["--handshake-timeout", "3s"], Some(24));
    let conns: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(srv.addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let c0 = srv.cpu_ticks();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = (srv.cpu_ticks() - c0) as f64 / ticks_per_s / 2.0;
    assert!(
        cpu < 0.2,
        "the server used {:.0}% of a core while out of descriptors",
        cpu * 100.0
    );
    drop(conns);
    // The handshakes time out, the descriptors come back, and the server serves again.
    std::thread::sleep(Duration::from_secs(3));
    srv.serves_honest_rr();
}

/// `latscope ARGS` with no key in the environment unless `env_key` says so.
fn latscope(args: &[&str], env_key: Option<&std::path::Path>) -> std::process::Output {
    let mut c = Command::new(BIN);
    c.args(args).env_remove(latscope_net::auth::AUTH_FILE_ENV);
    if let Some(k) = env_key {
        c.env(latscope_net::auth::AUTH_FILE_ENV, k);
    }
    c.output().unwrap()
}

#[test]
fn authentication_refuses_missing_and_wrong_keys_and_admits_the_right_one() {
    let keys = lab::TempDir::new();
    let key = keys.secret_file("key", "a shared secret of the lab\n");
    let wrong = keys.secret_file("wrong", "not the secret\n");
    let srv = Serve::start(&["--auth-file", key.to_str().unwrap()]);
    let target = srv.addr.to_string();
    // No key: a clear refusal naming the remedy, exit 3 (the target cannot be measured).
    let out = latscope(&["rr", &target, "-n", "20"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("authentication required: pass --auth-file"),
        "{err}"
    );
    // The wrong key.
    let out = latscope(
        &[
            "rr",
            &target,
            "-n",
            "20",
            "--auth-file",
            wrong.to_str().unwrap(),
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    // The right key, by flag (rr over TCP and UDP, a stream test whose data connections each
    // authenticate, connect --crr) and by environment.
    let k = key.to_str().unwrap();
    for args in [
        vec!["rr", &target, "-n", "50", "--auth-file", k],
        vec!["rr", &target, "-n", "50", "--udp", "--auth-file", k],
        vec![
            "stream",
            &target,
            "-P",
            "2",
            "-t",
            "500ms",
            "--auth-file",
            k,
        ],
        vec!["connect", &target, "--crr", "-n", "20", "--auth-file", k],
    ] {
        let out = latscope(&args, None);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = latscope(&["rr", &target, "-n", "50"], Some(&key));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A key file every user can read is refused before anything is sent (usage, exit 2).
    let open_key = keys.secret_file("open", "secret");
    std::fs::set_permissions(
        &open_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let out = latscope(
        &[
            "rr",
            &target,
            "-n",
            "5",
            "--auth-file",
            open_key.to_str().unwrap(),
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn authentication_cannot_be_replayed_and_the_key_never_crosses_the_wire() {
    use latscope_net::auth::AuthKey;
    let secret = "replay-proof secret";
    let keys = lab::TempDir::new();
    let key = keys.secret_file("replay", secret);
    let srv = Serve::start(&["--auth-file", key.to_str().unwrap()]);
    let k = AuthKey::from_file(&key).unwrap();
    // One connection: answer its challenge, keep every byte we send.
    let attempt = |proof: Option<latscope_net::auth::AuthProof>| {
        let mut c = TcpStream::connect(srv.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let hello: ServerHello = proto::read_greeting(&mut c).expect("greeting");
        assert!(hello.auth_required);
        let challenge = hello.challenge.expect("a challenge");
        let proof = proof.unwrap_or_else(|| k.prove(&challenge).unwrap());
        let mut out = Vec::new();
        proto::encode_greeting(
            &ClientHello {
                software: "replay test".into(),
                auth: Some(proof.clone()),
            },
            &mut out,
        );
        proto::encode_frame(&start_req(TestKind::Rr, 64, 64, 1000), &mut out);
        c.write_all(&out).unwrap();
        let reply: Reply = proto::read_frame(&mut c).expect("reply");
        (challenge, proof, out, reply)
    };
    let (c1, proof, sent, reply) = attempt(None);
    assert_eq!(refusal(&reply), None, "{reply:?}");
    assert!(
        !sent.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the secret is on the wire"
    );
    // The same answer on a new connection (a new challenge) is refused.
    let (c2, _, _, reply) = attempt(Some(proof));
    assert_ne!(c1, c2, "challenges repeat");
    assert_eq!(refusal(&reply), Some(RefusalCode::Auth), "{reply:?}");
}

/// `latscope stream TARGET ARGS --json`, its delivered rate in bit/s (every direction summed).
/// The run must have measured: exit 0, or 1 when it found a problem (UDP datagrams lost beyond
/// a quota are one).
fn stream_rate(target: &str, args: &[&str]) -> f64 {
    let out = Command::new(BIN)
        .args(["stream", target, "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {:?} {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rate_bps"].as_f64().unwrap())
        .sum()
}

#[test]
fn per_source_bandwidth_quota_holds_across_tests_and_kinds() {
    // 80 Mbit/s for the whole source address (loopback carries gigabits without it).
    let quota = 80e6;
    let srv = Serve::start(&["--per-source-rate", "80M"]);
    let target = srv.addr.to_string();
    // One TCP test is slowed to the quota, not below half of it.
    let one = stream_rate(&target, &["-t", "2s"]);
    assert!(
        one <= 1.25 * quota && one >= 0.5 * quota,
        "one TCP test: {:.1} Mbit/s against a quota of 80",
        one / 1e6
    );
    // Four tests at once from the same address, each asking for more than the quota: TCP each
    // way, UDP at 300 Mbit/s each way (the server's datagrams are paced to the quota, the
    // client's beyond it dropped). Together they get the quota.
    let runs: Vec<std::thread::JoinHandle<f64>> = [
        vec!["-t", "2s"],
        vec!["-t", "2s", "-R"],
        vec!["-t", "2s", "-R", "--udp", "-b", "300M"],
        vec!["-t", "2s", "--udp", "-b", "300M"],
    ]
    .into_iter()
    .map(|args| {
        let target = target.clone();
        std::thread::spawn(move || stream_rate(&target, &args))
    })
    .collect();
    let rates: Vec<f64> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    let total: f64 = rates.iter().sum();
    let shown = rates.iter().map(|r| (r / 1e6).round()).collect::<Vec<_>>();
    assert!(
        total <= 1.3 * quota,
        "four tests together: {:.1} Mbit/s ({shown:?}) against a quota of 80",
        total / 1e6,
    );
    // The quota is shared: no test is starved (a UDP test once got nothing while a TCP test
    // wrote 128 KiB per turn of the shared bucket) and none reports more than the quota (the
    // starved UDP test's first burst was reported as 290 Mbit/s: bytes over its last arrival
    // instead of over the test). Fair is 20 Mbit/s each; 2 is a bound a loaded machine meets.
    for r in &rates {
        assert!(
            *r >= quota / 40.0 && *r <= 1.3 * quota,
            "four tests sharing a quota of 80 Mbit/s: {shown:?} Mbit/s"
        );
    }
}

/// p99 RTT (ns) of an honest `latscope rr` against `target` for 2 s.
fn rr_p99_ns(target: &str) -> f64 {
    let out = Command::new(BIN)
        .args(["rr", target, "-d", "2s", "--json"])
        .env_remove(latscope_net::auth::AUTH_FILE_ENV)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "honest rr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["results"][0]["rtt"]["p99_ns"].as_f64().unwrap()
}

/// Open descriptors of a process.
fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

#[test]
fn honest_rr_keeps_its_p99_under_mixed_attacks_and_every_slot_comes_back() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (max_tests, max_conns) = (16u32, 64u64);
    let mut srv = Serve::start(&[
        "--max-tests",
        "16",
        "--per-source-tests",
        "4",
        "--max-connections",
        "64",
        "--per-source-connections",
        "40",
        "--handshake-timeout",
        "1s",
        "--max-memory",
        "64MiB",
    ]);
    let target = srv.addr.to_string();
    let addr = srv.addr;
    let idle = rr_p99_ns(&target);
    let stop = Arc::new(AtomicBool::new(false));
    let from = |last: u8| Ipv4Addr::new(127, 0, 0, last);
    let connect_from = move |src: Ipv4Addr| -> Option<TcpStream> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        s.bind(&SocketAddr::new(IpAddr::V4(src), 0).into()).ok()?;
        s.connect_timeout(&addr.into(), Duration::from_secs(1))
            .ok()?;
        Some(s.into())
    };
    let mut attackers = Vec::new();
    // Slowloris from 127.0.0.3: 30 connections, one byte of greeting every 200 ms each,
    // reconnecting whenever the server cuts one.
    let st = stop.clone();
    attackers.push(std::thread::spawn(move || {
        let mut conns: Vec<Option<TcpStream>> = (0..30).map(|_| None).collect();
        while !st.load(Ordering::Relaxed) {
            for c in conns.iter_mut() {
                let alive = c.as_mut().is_some_and(|s| s.write_all(b"L").is_ok());
                if !alive {
                    *c = connect_from(from(3));
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }));
    // Idle UDP tests from 127.0.0.4 up to its share, and more asked for all the time.
    let st = stop.clone();
    attackers.push(std::thread::spawn(move || {
        let mut held = Vec::new();
        while !st.load(Ordering::Relaxed) {
            let (c, reply) = open(addr, from(4), &start_req(TestKind::UdpRr, 64, 64, 60_000));
            if refusal(&reply).is_none() {
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }));
    // Oversized and amplifying requests from 127.0.0.5, refused in a loop.
    let st = stop.clone();
    attackers.push(std::thread::spawn(move || {
        let big = stream_req(spec(Transport::Tcp, Direction::Both, 128, 4 << 20));
        let amp = start_req(TestKind::UdpRr, 20, 65_507, 1000);
        while !st.load(Ordering::Relaxed) {
            for r in [&big, &amp] {
                let (_c, reply) = open(addr, from(5), r);
                assert!(refusal(&reply).is_some(), "{reply:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }));
    // Junk from 127.0.0.6.
    let st = stop.clone();
    attackers.push(std::thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            if let Some(mut c) = connect_from(from(6)) {
                let _ = c.write_all(b"GET / HTTP/1.1\r\n\r\n\x00\xff\x13LATSCOPE\xff\xff");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }));
    // The server's threads, memory and descriptors while under attack.
    let st = stop.clone();
    let pid = srv.pid();
    let monitor = std::thread::spawn(move || {
        let mut worst = (0u64, 0u64, 0u64);
        while !st.load(Ordering::Relaxed) {
            let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let field = |k: &str| {
                s.lines()
                    .find(|l| l.starts_with(k))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            worst.0 = worst.0.max(field("Threads:"));
            worst.1 = worst.1.max(field("VmRSS:"));
            worst.2 = worst.2.max(fds(pid));
            std::thread::sleep(Duration::from_millis(50));
        }
        worst
    });
    std::thread::sleep(Duration::from_millis(500));
    let loaded = rr_p99_ns(&target);
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    let (threads, rss_kib, max_fds) = monitor.join().unwrap();
    eprintln!(
        "honest rr p99: idle {:.1} us, under attack {:.1} us; server peak: {threads} threads, {} MiB RSS, {max_fds} descriptors",
        idle / 1e3,
        loaded / 1e3,
        rss_kib / 1024
    );
    // Within 2× of idle; a 5 ms floor absorbs a loaded CI machine (a server starved by the
    // attack stalls for whole handshake timeouts, far beyond it).
    assert!(
        loaded <= (2.0 * idle).max(5e6),
        "p99 {:.1} us under attack against {:.1} us idle",
        loaded / 1e3,
        idle / 1e3
    );
    // The documented budget: threads ≤ --max-connections + 3, descriptors ≤ connections + a
    // few, buffers ≤ --max-memory (64 MiB) over a baseline.
    assert!(threads <= max_conns + 3, "{threads} threads");
    assert!(max_fds <= max_conns + 8, "{max_fds} descriptors");
    assert!(rss_kib < (64 + 32) * 1024, "RSS {rss_kib} KiB");
    // Every slot is free again: 16 tests at once from four addresses (4 each, the share).
    assert!(srv.alive(), "the server died");
    let t0 = Instant::now();
    loop {
        let held: Vec<(TcpStream, Reply)> = (0..max_tests)
            .map(|i| {
                open(
                    addr,
                    from(10 + (i / 4) as u8),
                    &start_req(TestKind::Rr, 64, 64, 5000),
                )
            })
            .collect();
        let refused: Vec<&Reply> = held
            .iter()
            .map(|(_, r)| r)
            .filter(|r| refusal(r).is_some())
            .collect();
        if refused.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "slots still held: {refused:?}"
        );
        drop(held);
        std::thread::sleep(Duration::from_millis(300));
    }
    srv.serves_honest_rr();
}

/// issue 19: the log is for people. 300 bare connects make one summary line, not 300; tests are
/// named as the CLI names them; Ctrl-C stops at once and says what it cut short.
#[test]
fn the_log_summarises_bare_connects_names_tests_and_reports_the_stop() {
    let mut child = Command::new(BIN)
        .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let addr = first
        .split("tcp ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap()
        .to_string();
    // Each test must complete: exit 0, or 1 where the measurement itself found a problem (UDP
    // datagrams lost in a receive buffer on a loaded machine are exit 1 by design).
    let run = |args: &[&str], codes: &[i32]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(
            out.status.code().is_some_and(|c| codes.contains(&c)),
            "{args:?}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["connect", &addr, "-n", "300"], &[0]);
    run(&["rr", &addr, "-n", "50"], &[0]);
    run(
        &["stream", &addr, "-d", "1s", "--udp", "-b", "10M", "-R"],
        &[0, 1],
    );
    // A test still running when Ctrl-C comes.
    let mut running = Command::new(BIN)
        .args(["rr", &addr, "-d", "10s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let t0 = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let took = t0.elapsed();
    let _ = running.kill();
    let _ = running.wait();
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        took < Duration::from_secs(1),
        "stopping took {took:?}\n{log}"
    );
    assert!(log.lines().count() < 15, "{log}");
    assert!(!log.contains("refused"), "{log}");
    assert!(log.contains("300 bare TCP connects"), "{log}");
    assert!(
        log.contains(": rr, 64 B requests / 64 B responses"),
        "{log}"
    );
    assert!(log.contains(": stream --udp -R"), "{log}");
    assert!(
        log.contains(" moved in ") && log.contains(" transactions in "),
        "{log}"
    );
    for internal in ["Rr", "UdpRr", "Stream "] {
        assert!(!log.contains(internal), "{internal} in\n{log}");
    }
    assert!(
        log.trim_end()
            .ends_with("stopped (Ctrl-C); 1 running test was cut short"),
        "{log}"
    );
}

//! `latscope sockets` against sockets this test creates with known options, in its own and in
//! another network namespace; privilege reduction; processes and sockets that vanish mid-scan.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lab::sockets::*;

const SOL_SOCKET: i32 = libc::SOL_SOCKET;
const TCP: i32 = libc::IPPROTO_TCP;

#[test]
fn known_options_are_reported_exactly() {
    require_root!();
    let me = std::process::id();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut server, _) = l.accept().unwrap();
    // Client: Nagle off, fixed buffers.
    setopt(client.as_raw_fd(), TCP, libc::TCP_NODELAY, 1);
    setopt(client.as_raw_fd(), SOL_SOCKET, libc::SO_SNDBUF, 65536);
    setopt(client.as_raw_fd(), SOL_SOCKET, libc::SO_RCVBUF, 32768);
    // Server: Nagle on, corked after one request/response exchange.
    client.write_all(b"request").unwrap();
    let mut buf = [0u8; 7];
    server.read_exact(&mut buf).unwrap();
    server.write_all(b"response").unwrap();
    let mut buf = [0u8; 8];
    client.read_exact(&mut buf).unwrap();
    setopt(server.as_raw_fd(), TCP, libc::TCP_CORK, 1);
    // A third socket with keep-alive, NOTSENT_LOWAT, reno, user timeout and busy-poll.
    let other = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_other_peer, _) = l.accept().unwrap();
    let o = other.as_raw_fd();
    setopt(o, SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    setopt(o, TCP, libc::TCP_KEEPIDLE, 77);
    setopt(o, TCP, libc::TCP_KEEPINTVL, 11);
    setopt(o, TCP, libc::TCP_KEEPCNT, 4);
    setopt(o, TCP, libc::TCP_NOTSENT_LOWAT, 16384);
    setopt(o, TCP, libc::TCP_USER_TIMEOUT, 3000);
    setopt(o, SOL_SOCKET, libc::SO_BUSY_POLL, 50);
    let reno = b"reno";
    // SAFETY: reno outlives the call; the length is its length.
    assert_eq!(
        unsafe { libc::setsockopt(o, TCP, libc::TCP_CONGESTION, reno.as_ptr().cast(), 4) },
        0
    );
    // TCP_DELACK_MAX_US / TCP_RTO_MIN_US exist on newer kernels only (6.18 here).
    // SAFETY: v outlives the call.
    let newer = [(46, 5000), (45, 50_000)].map(|(name, v): (i32, i32)| unsafe {
        libc::setsockopt(o, TCP, name, (&raw const v).cast(), 4) == 0
    });
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    setopt(udp.as_raw_fd(), SOL_SOCKET, libc::SO_RCVBUF, 20000);

    let (report, out) = latscope_json(&["sockets", "--pid", &me.to_string(), "--json"]);
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The server socket has Nagle on with data both ways, and TCP_CORK: findings, exit 1.
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report["selection"], format!("pid {me}"));
    assert_eq!(report["access"]["cap_sys_ptrace"], true);

    // Buffer sizes: the kernel doubles what was asked (clamped to the sysctl maxima).
    let want_snd = 2 * 65536.min(sysctl("net/core/wmem_max"));
    let want_rcv = 2 * 32768.min(sysctl("net/core/rmem_max"));
    let c = row(&report, me, client.as_raw_fd());
    assert_eq!(c["proto"], "tcp");
    assert_eq!(c["state"], "ESTAB");
    assert_eq!(c["local"], client.local_addr().unwrap().to_string());
    assert_eq!(c["remote"], l.local_addr().unwrap().to_string());
    assert_eq!(c["netns_is_own"], true);
    let co = &c["options"];
    assert_eq!(co["nodelay"], true);
    assert_eq!(co["cork"], false);
    assert_eq!(co["sndbuf"], want_snd);
    assert_eq!(co["rcvbuf"], want_rcv);
    assert_eq!(
        co["sndbuf"],
        getopt(client.as_raw_fd(), SOL_SOCKET, libc::SO_SNDBUF)
    );
    assert_eq!(co["keepalive"], false);
    // tcp_info came through sock_diag.
    let t = &c["tcp"];
    assert!(t["info_len"].as_u64().unwrap() >= 104);
    assert!(t["rtt_us"].as_u64().unwrap() > 0);
    assert!(t["data_segs_out"].as_u64().unwrap() >= 1);
    assert_eq!(t["congestion"], co["congestion"]);

    let s = row(&report, me, server.as_raw_fd());
    assert_eq!(s["options"]["nodelay"], false);
    assert_eq!(s["options"]["cork"], true);
    let rules: Vec<&str> = s["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"nagle-on-rr"), "{rules:?}");
    assert!(rules.contains(&"cork-on"), "{rules:?}");
    let text = s["findings"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("request/response socket with Nagle on (TCP_NODELAY off)"),
        "{text}"
    );

    let k = &row(&report, me, o)["options"];
    assert_eq!(k["keepalive"], true);
    assert_eq!(k["keepidle_s"], 77);
    assert_eq!(k["keepintvl_s"], 11);
    assert_eq!(k["keepcnt"], 4);
    assert_eq!(k["notsent_lowat"], 16384);
    assert_eq!(k["user_timeout_ms"], 3000);
    assert_eq!(k["busy_poll_us"], 50);
    assert_eq!(k["congestion"], "reno");
    if newer[0] {
        // The kernel keeps it in jiffies: compare with what getsockopt says here.
        assert_eq!(k["delack_max_us"], getopt(o, TCP, 46));
        assert!(k["delack_max_us"].as_u64().unwrap() < 200_000);
    } else {
        assert!(k["delack_max_us"].is_null());
    }
    if newer[1] {
        assert_eq!(k["rto_min_us"], getopt(o, TCP, 45));
    }

    let u = row(&report, me, udp.as_raw_fd());
    assert_eq!(u["proto"], "udp");
    assert_eq!(u["state"], "UNCONN");
    assert_eq!(
        u["options"]["rcvbuf"],
        2 * 20000.min(sysctl("net/core/rmem_max"))
    );
    assert_eq!(u["options"]["nodelay"], serde_json::Value::Null);
    assert_eq!(u["mem"]["rcvbuf"], u["options"]["rcvbuf"]);

    // The listener is shown once even though it is one socket.
    let listen = row(&report, me, l.as_raw_fd());
    assert_eq!(listen["state"], "LISTEN");

    // The human view names the same things.
    let human = latscope(&["sockets", "--pid", &me.to_string()]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("TCP_CORK is on"), "{text}");
    assert!(text.contains("transient"), "{text}");
}

#[test]
fn json_matches_the_schema() {
    let me = std::process::id();
    let _l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (report, _) = latscope_json(&["sockets", "--pid", &me.to_string(), "--json"]);
    lab::validate(&report, "sockets");
}

#[test]
fn socket_in_another_namespace_held_by_this_process_is_found() {
    require_root!();
    let ns = Netns::new("t");
    let path = ns.path();
    // A local address whose route carries per-route TCP limits, as `ip route` sets them.
    for args in [
        &["addr", "add", "10.99.0.2/32", "dev", "lo"][..],
        &[
            "route",
            "replace",
            "local",
            "10.99.0.2",
            "dev",
            "lo",
            "table",
            "local",
            "rto_min",
            "5ms",
            "quickack",
            "1",
        ],
    ] {
        assert!(
            Command::new("ip")
                .arg("-n")
                .arg(&ns.name)
                .args(args)
                .status()
                .unwrap()
                .success()
        );
    }
    // A helper thread enters the namespace and opens a listener and a connection there; the fds
    // stay with this process, the sockets stay in that namespace.
    let (l, mut c, mut a) = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: setns on a valid namespace fd; only this helper thread moves.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        let l = TcpListener::bind("10.99.0.2:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        (l, c, a)
    })
    .join()
    .unwrap();
    c.write_all(b"q").unwrap();
    a.read_exact(&mut [0u8; 1]).unwrap();
    a.write_all(b"r").unwrap();
    c.read_exact(&mut [0u8; 1]).unwrap();
    let me = std::process::id();
    let (report, out) = latscope_json(&["sockets", "--pid", &me.to_string(), "--json"]);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = row(&report, me, l.as_raw_fd());
    assert_eq!(r["state"], "LISTEN");
    assert_eq!(r["netns_is_own"], false);
    assert_eq!(r["netns"], inode(&ns.path()));
    let r = row(&report, me, c.as_raw_fd());
    assert_eq!(r["state"], "ESTAB");
    assert_eq!(r["netns"], inode(&ns.path()));
    assert!(r["tcp"]["rtt_us"].as_u64().is_some());
    // The route's limits, looked up in that namespace, and the kernel applying them.
    assert_eq!(r["route"]["rto_min_ms"], 5);
    assert_eq!(r["route"]["quickack"], true);
    assert!(
        r["tcp"]["rto_us"].as_u64().unwrap() < 200_000,
        "{}",
        r["tcp"]
    );
    let rules: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert!(
        rules.contains(&"route-rto-min") && rules.contains(&"route-quickack"),
        "{rules:?}"
    );
}

#[test]
fn nginx_in_another_namespace_is_found_by_port() {
    require_root!();
    let ns = Netns::new("n");
    let nginx = nginx(true, Some(&ns));
    let (report, out) = latscope_json(&["sockets", "--port", &nginx.port.to_string(), "--json"]);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ino = inode(&ns.path());
    let listener = report["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["netns"] == ino && r["state"] == "LISTEN")
        .unwrap_or_else(|| panic!("nginx's listener in {} not found: {report}", ns.name));
    let owners: Vec<u64> = listener["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["pid"].as_u64().unwrap())
        .collect();
    assert!(owners.contains(&u64::from(nginx.master())), "{owners:?}");
    assert_eq!(listener["owners"][0]["comm"], "nginx");
    assert!(listener["options"]["nodelay"].is_boolean());
}

#[test]
fn missing_pid_is_one_clear_line() {
    let out = latscope(&["sockets", "--pid", "4000000000"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no process with pid 4000000000"), "{err}");

    // An exited (reaped) child: its pid is free again.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let out = latscope(&["sockets", "--pid", &pid.to_string()]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A zombie (exited, not yet reaped): no sockets, no spam.
    let mut child = Command::new("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let out = latscope(&["sockets", "--pid", &child.id().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().count() <= 1, "{err}");
    assert!(matches!(out.status.code(), Some(0) | Some(3)), "{err}");
    child.wait().unwrap();

    assert_eq!(latscope(&["sockets"]).status.code(), Some(2));
}

#[test]
fn processes_and_sockets_vanishing_mid_scan_do_not_spam() {
    let stop = Arc::new(AtomicBool::new(false));
    // Churn: short-lived processes, and sockets of this process opened and closed in a loop.
    let s1 = stop.clone();
    let spawner = std::thread::spawn(move || {
        let mut n = 0;
        while !s1.load(Ordering::Relaxed) && n < 1000 {
            if let Ok(mut c) = Command::new("true").spawn() {
                let _ = c.wait();
            }
            n += 1;
        }
    });
    let s2 = stop.clone();
    let churn = std::thread::spawn(move || {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut n = 0;
        // Paced (≤ ~1000/s) so the TIME-WAIT sockets it leaves stay few.
        while !s2.load(Ordering::Relaxed) && n < 5_000 {
            let c = TcpStream::connect(addr).unwrap();
            let (a, _) = l.accept().unwrap();
            drop(c);
            drop(a);
            n += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let me = std::process::id().to_string();
    for args in [
        &["sockets", "--all", "--json"][..],
        &["sockets", "--pid", &me, "--json"],
    ] {
        for _ in 0..5 {
            let (report, out) = latscope_json(args);
            assert!(
                matches!(out.status.code(), Some(0) | Some(1)),
                "{:?}",
                out.status
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.is_empty(), "stderr: {err}");
            // Notes stay few: one per exited process, one for closed sockets.
            assert!(
                report["notes"].as_array().unwrap().len() <= 20,
                "{}",
                report["notes"]
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    spawner.join().unwrap();
    churn.join().unwrap();
}

#[test]
fn without_cap_sys_ptrace_shows_sock_diag_and_says_what_is_missing() {
    require_root!();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_a, _) = l.accept().unwrap();
    let cmd = format!("{BIN} sockets --port {port} --json");
    let out = Command::new("capsh")
        .args(["--drop=cap_sys_ptrace", "--", "-c", &cmd])
        .output()
        .expect("capsh (libcap2-bin)");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON; stderr {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["access"]["cap_sys_ptrace"], false);
    let rows = report["sockets"].as_array().unwrap();
    let client = rows
        .iter()
        .find(|r| r["local"] == c.local_addr().unwrap().to_string())
        .expect("client socket listed");
    // sock_diag still gives state, addresses and tcp_info ...
    assert_eq!(client["state"], "ESTAB");
    assert!(client["tcp"]["rtt_us"].as_u64().is_some());
    // ... but not the owner (this test process has capabilities latscope lacks) or the options.
    assert_eq!(client["owners"].as_array().unwrap().len(), 0);
    assert!(client["options"].is_null());
    let missing = report["access"]["missing"].to_string();
    assert!(missing.contains("options (TCP_NODELAY"), "{missing}");
    assert!(missing.contains("CAP_SYS_PTRACE"), "{missing}");
    assert!(missing.contains("owning process"), "{missing}");

    // Asking for this process by pid: a privilege error naming the capability.
    let cmd = format!("{BIN} sockets --pid {}", std::process::id());
    let out = Command::new("capsh")
        .args(["--drop=cap_sys_ptrace", "--", "-c", &cmd])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_SYS_PTRACE") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn without_ptrace_or_admin_a_container_socket_is_still_listed_from_proc() {
    require_root!();
    let ns = Netns::new("r");
    let nginx = nginx(false, Some(&ns));
    let cmd = format!("{BIN} sockets --port {} --json", nginx.port);
    let out = Command::new("capsh")
        .args(["--drop=cap_sys_ptrace,cap_sys_admin", "--", "-c", &cmd])
        .output()
        .expect("capsh (libcap2-bin)");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON; stderr {}", String::from_utf8_lossy(&out.stderr)));
    let local = format!("127.0.0.1:{}", nginx.port);
    let rows = report["sockets"].as_array().unwrap();
    let l = rows
        .iter()
        .find(|r| r["local"] == local && r["state"] == "LISTEN")
        .unwrap_or_else(|| panic!("nginx's listener in {} not listed: {report}", ns.name));
    // Listed from /proc/PID/net: namespace unknown, no owner, no tcp_info, no options.
    assert_eq!(l["netns"], 0);
    assert_eq!(l["owners"].as_array().unwrap().len(), 0);
    assert!(l["options"].is_null() && l["tcp"].is_null());
    let missing = report["access"]["missing"].to_string();
    assert!(
        missing.contains("/proc/PID/net") && missing.contains("CAP_SYS_ADMIN"),
        "{missing}"
    );
}

/// The findings of the LISTEN row of `report` on `port`.
fn listener_findings(report: &serde_json::Value) -> Vec<(String, String)> {
    let l = report["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "LISTEN")
        .unwrap_or_else(|| panic!("no listener: {report}"));
    l["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().to_string(),
                f["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn syn_ping_resets_and_time_wait_are_explained_not_blamed() {
    require_root!();
    let ns = Netns::new("sd");
    let l = ns.run_in(|| TcpListener::bind("127.0.0.1:0").unwrap());
    let port = l.local_addr().unwrap().port().to_string();
    // A connection this side closes first: its client end stays in TIME-WAIT, no process.
    let c = ns.run_in(|| TcpStream::connect(l.local_addr().unwrap()).unwrap());
    let (s, _) = l.accept().unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    drop(s);
    // Each SYN ping's half-open handshake ends with a reset the listener counts as a drop.
    let ping = ns.latscope(&[
        "ping",
        "--syn",
        "-p",
        &port,
        "-n",
        "10",
        "-i",
        "10ms",
        "127.0.0.1",
    ]);
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stderr)
    );
    let out = ns.latscope(&["sockets", "--port", &port, "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let f = listener_findings(&report);
    let drops: Vec<_> = f.iter().filter(|(r, _)| r.starts_with("listen-")).collect();
    assert_eq!(drops.len(), 1, "{f:?}");
    assert_eq!(drops[0].0, "listen-resets", "{f:?}");
    assert!(!drops[0].1.contains("receive buffer"), "{}", drops[0].1);
    assert!(f.iter().all(|(r, _)| r != "rcvbuf-drops"), "{f:?}");
    let tw = report["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "TIME-WAIT")
        .unwrap_or_else(|| panic!("no TIME-WAIT socket: {report}"));
    assert_eq!(tw["inode"], 0);
    let text = report.to_string();
    assert!(!text.contains("privileged user namespace"), "{text}");
    // The verb agrees with the count: "1 socket (TIME-WAIT) belongs", "2 sockets … belong".
    assert!(
        text.contains("1 socket (TIME-WAIT) belongs to no process")
            || text.contains("sockets (TIME-WAIT) belong to no process"),
        "{text}"
    );
    // The table names them for what they are.
    let human = ns.latscope(&["sockets", "--port", &port]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human
            .lines()
            .any(|l| l.contains("no process") && l.contains("TIME-WAIT")),
        "{human}"
    );
}

#[test]
fn a_full_accept_queue_is_reported_as_listen_queue_overflow() {
    require_root!();
    let ns = Netns::new("so");
    // Backlog 1, never accepted: the third SYN finds the accept queue full.
    let l = ns.run_in(|| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        s.listen(1).unwrap();
        s
    });
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let _clients: Vec<_> = ns.run_in(|| {
        (0..6)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
            .collect()
    });
    let out = ns.latscope(&["sockets", "--port", &addr.port().to_string(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = listener_findings(&report);
    let over: Vec<_> = f.iter().filter(|(r, _)| r == "listen-overflow").collect();
    assert_eq!(over.len(), 1, "{f:?}");
    assert!(over[0].1.contains("accept queue was full"), "{}", over[0].1);
}

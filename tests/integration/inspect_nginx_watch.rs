//! Real nginx with `tcp_nodelay off` and `on`, on an open keep-alive connection: what nginx
//! actually sets on the accepted socket (seen by `--watch` as it happens) and what
//! `latscope sockets` then reads from the socket. And `--watch` on this test's own calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use lab::sockets::*;
use serde_json::Value;

/// nginx's accepted socket for our keep-alive connection `conn`: (worker pid, fd, row).
fn accepted_row(nginx: &Nginx, conn: &TcpStream) -> Value {
    let (report, out) = latscope_json(&["sockets", "--port", &nginx.port.to_string(), "--json"]);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer = conn.local_addr().unwrap().to_string();
    report["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["remote"] == peer && r["netns_is_own"] == true)
        .cloned()
        .unwrap_or_else(|| panic!("nginx's side of {peer} not found: {report}"))
}

fn nginx_case(nodelay: bool) {
    let nginx = nginx(nodelay, None);
    let worker = nginx.worker().unwrap();
    let watch = Watch::start(&["--pid", &worker.to_string()]);
    let conn = http_keepalive(nginx.port);
    let row = accepted_row(&nginx, &conn);
    assert_eq!(row["owners"][0]["comm"], "nginx");
    assert_eq!(row["owners"][0]["pid"], worker);
    let fd = row["owners"][0]["fd"].as_i64().unwrap();

    // What nginx does: with `tcp_nodelay on` it sets TCP_NODELAY=1 when the connection goes
    // keep-alive (ngx_http_set_keepalive); with `off` it never calls it.
    let call = watch.wait_for(if nodelay { 10 } else { 2 }, |e| {
        e["pid"] == worker && e["fd"] == fd && e["option"] == "TCP_NODELAY"
    });
    if nodelay {
        let call = call.expect("nginx's setsockopt(TCP_NODELAY) was not seen by --watch");
        assert_eq!(call["value"], "1");
        assert_eq!(call["comm"], "nginx");
        assert_eq!(call["level"], "SOL_TCP");
    } else {
        assert!(
            call.is_none(),
            "nginx with tcp_nodelay off set TCP_NODELAY: {call:?}"
        );
    }
    let (code, _) = watch.interrupt();
    assert_eq!(code, Some(130));

    // What the socket says now, on the open keep-alive connection.
    let row = accepted_row(&nginx, &conn);
    assert_eq!(row["state"], "ESTAB");
    assert_eq!(row["options"]["nodelay"], nodelay, "{row}");
    let rules: Vec<&str> = row["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules.contains(&"nagle-on-rr"), !nodelay, "{rules:?}");
    drop(conn);
}

#[test]
fn nginx_tcp_nodelay_on() {
    require_root!();
    nginx_case(true);
}

#[test]
fn nginx_tcp_nodelay_off() {
    require_root!();
    nginx_case(false);
}

#[test]
fn watch_sees_a_setsockopt_made_after_it_started() {
    require_root!();
    let me = std::process::id();
    let watch = Watch::start(&[]);
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let fd = s.as_raw_fd();
    let t0 = Instant::now();
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 12345);
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 1);
    let ev = |opt: &'static str| {
        watch
            .wait_for(10, move |e| {
                e["pid"] == me && e["fd"] == fd && e["option"] == opt
            })
            .unwrap_or_else(|| panic!("--watch did not report {opt}"))
    };
    let nd = ev("TCP_NODELAY");
    assert_eq!(nd["value"], "1");
    assert_eq!(nd["level"], "SOL_TCP");
    let sb = ev("SO_SNDBUF");
    assert_eq!(sb["value"], "12345");
    // The value was on our stack: read exactly from the snapshot taken at the call.
    assert_eq!(sb["value_source"], "stack snapshot at the call");
    // Read back from the socket: the kernel doubled it.
    assert_eq!(sb["effective"], (2 * 12345).to_string());
    let cork = ev("TCP_CORK");
    assert_eq!(cork["value"], "1");
    // Events carry wall-clock time of the call.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = nd["unix_ms"].as_i64().unwrap();
    assert!(
        (now_ms - at).abs() < 60_000,
        "event time {at} vs now {now_ms}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30));

    // Ctrl-C: exit 130, a summary line, and nothing left attached.
    let pid = watch.child.id();
    let (code, rest) = watch.interrupt();
    assert_eq!(code, Some(130));
    let summary = rest
        .iter()
        .find(|v| v["event"] == "summary")
        .expect("summary line");
    assert_eq!(summary["report"]["interrupted"], true);
    assert!(summary["report"]["events"].as_u64().unwrap() >= 3);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie_or_gone(pid));
}

fn is_zombie_or_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z"))
        .unwrap_or(true)
}

#[test]
fn watch_with_duration_ends_by_itself() {
    require_root!();
    let t0 = Instant::now();
    let out = latscope(&["sockets", "--watch", "--duration", "300ms", "--json-lines"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::to_string)
        .unwrap_or_default();
    let v: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(v["event"], "summary");
    assert_eq!(v["report"]["interrupted"], false);
}

#[test]
fn watch_names_a_process_that_exited_before_it_was_looked_up() {
    require_root!();
    let watch = Watch::start(&[]);
    // `ip` opens a netlink socket with setsockopt(SO_SNDBUF, 32768) (iproute2's rtnl_open) and
    // exits at once: its name can only come from the kernel's exec record.
    let mut child = std::process::Command::new("ip")
        .args(["link", "show", "lo"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let ev = watch
        .wait_for(10, |e| e["pid"] == pid && e["option"] == "SO_SNDBUF")
        .expect("--watch did not report ip's SO_SNDBUF");
    assert_eq!(ev["comm"], "ip");
    assert_eq!(ev["value"], "32768");
    let (code, _) = watch.interrupt();
    assert_eq!(code, Some(130));
}

#[test]
fn watch_without_privileges_says_which_capability() {
    require_root!();
    let cmd = format!("{BIN} sockets --watch --duration 1s");
    let out = std::process::Command::new("capsh")
        .args(["--drop=cap_perfmon,cap_sys_admin", "--", "-c", &cmd])
        .output()
        .expect("capsh (libcap2-bin)");
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("CAP_SYS_ADMIN") || err.contains("CAP_PERFMON"),
        "{err}"
    );
}

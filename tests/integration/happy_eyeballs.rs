//! Every address of a name (RFC 8305, Happy Eyeballs v2), end to end: in a namespace of its
//! own, names from the namespace's hosts file (`ip netns exec` bind-mounts
//! /etc/netns/NAME/hosts over /etc/hosts) resolve to a dead IPv6 address (SYNs dropped by
//! nftables: connects hang) and a live IPv4 one, to one family only, or to two live ones.
//! connect, rr, ping and http must reach the live address within the 250 ms attempt delay
//! plus a little, say which address answered, and report the dead attempt; -4/-6 keep their
//! meaning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use lab::netns::Netns;
use latscope_net::serve::{ServeConfig, Server, ServerHandle};
use serde_json::Value;

const LIVE4: &str = "10.77.0.1";
const LIVE6: &str = "fd00:77::1";
const DEAD6: &str = "fd00:77::dead";

/// The namespace, its hosts file (removed on drop) and a latscope server on `::` (both
/// families) inside it.
struct Lab {
    ns: Netns,
    hosts_dir: std::path::PathBuf,
    _server: ServerHandle,
    port: u16,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}

fn lab() -> Lab {
    let ns = Netns::new("he").no_icmp_limits();
    ns.ip(&["addr", "add", &format!("{LIVE4}/32"), "dev", "lo"]);
    ns.ip(&["addr", "add", &format!("{LIVE6}/128"), "dev", "lo", "nodad"]);
    // A route to the dead address, so connect() sends SYNs instead of failing at once.
    ns.ip(&["-6", "route", "add", "fd00:77::/64", "dev", "lo"]);
    ns.wait_route(LIVE6);
    ns.wait_route(DEAD6);
    // The dead address: every packet to it is dropped, so a connect hangs (a broken AAAA).
    ns.nft(&format!(
        "table inet he {{\n chain out {{\n type filter hook output priority 0;\n ip6 daddr {DEAD6} drop\n }}\n}}\n"
    ));
    let hosts_dir = std::path::PathBuf::from(format!("/etc/netns/{}", ns.name));
    std::fs::create_dir_all(&hosts_dir).unwrap();
    std::fs::write(
        hosts_dir.join("hosts"),
        format!(
            "127.0.0.1 localhost\n{DEAD6} dual.test\n{LIVE4} dual.test\n{LIVE6} v6only.test\n\
             {LIVE4} v4only.test\n{LIVE6} both.test\n{LIVE4} both.test\n"
        ),
    )
    .unwrap();
    let server = ns.run_in(|| {
        let cfg = ServeConfig {
            bind: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            port: 0,
            ..ServeConfig::default()
        };
        Server::bind(cfg, Arc::new(AtomicBool::new(false)), |_| {})
            .expect("bind")
            .spawn()
            .expect("spawn")
    });
    let port = server.tcp_addr.port();
    Lab {
        ns,
        hosts_dir,
        _server: server,
        port,
    }
}

impl Lab {
    /// `latscope ARGS --json` in the namespace: exit code, the JSON document, wall time.
    fn json(&self, args: &[&str], kind: &str) -> (i32, Value, Duration) {
        let mut v: Vec<&str> = args.to_vec();
        v.push("--json");
        let t0 = Instant::now();
        let out = self.ns.latscope(&v);
        let wall = t0.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.trim().is_empty(),
            "{args:?}: no output; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code().unwrap_or(-1),
            lab::json_checked(&stdout, kind),
            wall,
        )
    }

    fn target(&self, name: &str) -> String {
        format!("{name}:{}", self.port)
    }
}

fn ms(v: &Value) -> f64 {
    v.as_u64().unwrap() as f64 / 1e6
}

/// The dead IPv6 attempt is abandoned when the IPv4 one wins, 250 ms later.
fn assert_dead_v6_then_v4(choice: &Value) {
    assert_eq!(choice["chosen"], LIVE4, "{choice}");
    assert_eq!(choice["method"], "connected", "{choice}");
    assert_eq!(
        choice["resolved"][0], DEAD6,
        "IPv6 is tried first: {choice}"
    );
    let a = choice["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2, "{choice}");
    assert_eq!(a[0]["addr"], DEAD6);
    assert_eq!(a[0]["outcome"], "abandoned", "{choice}");
    assert_eq!(a[1]["addr"], LIVE4);
    assert_eq!(a[1]["outcome"], "connected");
    let start = ms(&a[1]["started_ns"]);
    assert!(
        (249.0..300.0).contains(&start),
        "the IPv4 attempt starts after the 250 ms attempt delay: {start} ms"
    );
    let won = start + ms(&a[1]["spent_ns"]);
    assert!(won < 300.0, "connected via IPv4 within ~300 ms: {won} ms");
}

#[test]
fn a_dead_aaaa_costs_the_attempt_delay_not_a_timeout() {
    require_root!();
    let lab = lab();
    let dual = lab.target("dual.test");
    let (code, doc, wall) = lab.json(&["connect", &dual, "-n", "5", "-W", "3s"], "connect");
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["succeeded"], 5);
    assert_dead_v6_then_v4(&doc["address_choice"]);
    assert!(wall < Duration::from_secs(3), "no 3 s timeout: {wall:?}");

    let (code, doc, _) = lab.json(&["rr", &dual, "-n", "20"], "rr");
    assert_eq!(code, 0, "{doc}");
    assert_dead_v6_then_v4(&doc["address_choice"]);

    let (_, doc, _) = lab.json(
        &[
            "ping",
            "--connect",
            "dual.test",
            "-p",
            &lab.port.to_string(),
            "-c",
            "2",
            "-i",
            "100ms",
        ],
        "ping",
    );
    assert_eq!(doc["address"], LIVE4, "{doc}");
    assert_dead_v6_then_v4(&doc["address_choice"]);
    // A raw SYN ping is no connect: its address is chosen by the same race, then probed.
    let (_, doc, _) = lab.json(
        &[
            "ping",
            "--syn",
            "dual.test",
            "-p",
            &lab.port.to_string(),
            "-c",
            "2",
            "-i",
            "100ms",
        ],
        "ping",
    );
    assert_eq!(doc["address"], LIVE4, "{doc}");
    assert_eq!(doc["received"], 2, "{doc}");
    assert_dead_v6_then_v4(&doc["address_choice"]);
}

#[test]
fn http_races_the_addresses_of_its_url() {
    require_root!();
    let lab = lab();
    // An HTTP server on both families (`::`, not v6-only), in this process: a keep-alive
    // responder whose listener lives in the namespace. (python3 -m http.server once took more
    // than 5 s to start on a loaded CI machine.)
    let listener = lab.ns.run_in(|| {
        let sock = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)?;
        sock.set_only_v6(false)?;
        sock.set_reuse_address(true)?;
        sock.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0).into())?;
        sock.listen(16)?;
        std::io::Result::Ok(std::net::TcpListener::from(sock))
    });
    let listener = listener.expect("an HTTP listener on [::]");
    let port = listener.local_addr().unwrap().port();
    let _server = std::thread::spawn(move || serve_http(&listener));
    let url = format!("http://dual.test:{port}/");
    let (code, doc, _) = lab.json(&["http", &url, "-n", "10", "-c", "1"], "http");
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["address"], format!("{LIVE4}:{port}"));
    assert_dead_v6_then_v4(&doc["address_choice"]);
}

/// Answers every request of every connection with a 2-byte 200 until the test process ends
/// (the thread is detached; its listener closes with the process).
fn serve_http(listener: &std::net::TcpListener) {
    use std::io::{Read, Write};
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = conn.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    buf.drain(..end + 4);
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if conn.write_all(reply).is_err() {
                        return;
                    }
                }
            }
        });
    }
}

#[test]
fn one_family_names_and_forced_families() {
    require_root!();
    let lab = lab();
    let connect = |target: &str, extra: &[&str]| {
        let t = lab.target(target);
        let mut args = vec!["connect", t.as_str(), "-n", "2", "-W", "500ms"];
        args.extend_from_slice(extra);
        lab.json(&args, "connect")
    };
    for (name, want) in [("v6only.test", LIVE6), ("v4only.test", LIVE4)] {
        let (code, doc, _) = connect(name, &[]);
        assert_eq!(code, 0, "{name}: {doc}");
        let c = &doc["address_choice"];
        assert_eq!(c["chosen"], want, "{c}");
        assert_eq!(c["method"], "single", "{c}");
        assert!(c["attempts"].as_array().unwrap().is_empty(), "{c}");
    }
    // Two live addresses: IPv6 wins at once, IPv4 is never tried.
    let (code, doc, _) = connect("both.test", &[]);
    assert_eq!(code, 0, "{doc}");
    let c = &doc["address_choice"];
    assert_eq!(c["chosen"], LIVE6, "{c}");
    assert_eq!(c["attempts"].as_array().unwrap().len(), 1, "{c}");
    // -4 keeps only the live A record; -6 only the dead AAAA, which then times out (exit 3).
    let (code, doc, _) = connect("dual.test", &["-4"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["address_choice"]["chosen"], LIVE4);
    let (code, doc, _) = connect("dual.test", &["-6"]);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["address_choice"]["chosen"], DEAD6);
    assert_eq!(doc["timed_out"], 2, "{doc}");
    // A literal of the wrong family is a clear error, not a race.
    let out = lab
        .ns
        .latscope(&["connect", &format!("{LIVE4}:{}", lab.port), "-6"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("IPv6"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

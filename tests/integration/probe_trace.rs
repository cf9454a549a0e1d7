//! `latscope trace` in a namespace lab: client — R1 — R2 — R3 — destination.

use crate::lab;

use lab::probe::Chain;
use serde_json::Value;

/// The responder of each hop of a plain trace (`None` for a hop with no answer).
fn hop_addrs(v: &Value) -> Vec<Option<String>> {
    v["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .map(|h| {
            h["probes"]
                .as_array()
                .expect("probes")
                .iter()
                .find_map(|p| p["from"].as_str().map(String::from))
        })
        .collect()
}

fn run_trace(lab: &Chain, args: &[&str]) -> Value {
    let mut a = vec!["trace", "--json", "-w", "500ms", "-m", "8"];
    a.extend_from_slice(args);
    let out = lab.client().latscope(&a);
    assert_eq!(
        out.status.code(),
        Some(0),
        "trace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab::probe::json(&out)
}

#[test]
fn trace_finds_routers_then_destination_in_every_mode() {
    require_root!();
    let lab = Chain::new();
    let _web = lab::probe::tcp_server(Some(lab.dest()), "0.0.0.0:80");
    let want: Vec<Option<String>> = Chain::hops_v4().into_iter().map(Some).collect();
    for (mode, reply) in [
        ("--syn", "syn_ack"),
        ("--udp", "port_unreachable"),
        ("--icmp", "echo_reply"),
    ] {
        let v = run_trace(&lab, &[mode, "10.9.4.2"]);
        assert_eq!(
            hop_addrs(&v),
            want,
            "{mode}: hops in order, then the destination"
        );
        assert_eq!(v["reached"], true);
        assert_eq!(v["destination_reply"], reply, "{mode}");
        let hops = v["hops"].as_array().expect("hops");
        assert_eq!(hops.len(), 4);
        assert!(hops[3]["destination"].as_bool().expect("bool"));
        for h in &hops[..3] {
            for p in h["probes"].as_array().expect("probes") {
                assert_eq!(p["kind"], "time_exceeded", "{mode}: {h}");
                let rtt = p["rtt_ns"].as_u64().expect("rtt");
                assert!(rtt > 0 && rtt < 100_000_000, "{mode}: RTT {rtt} ns on veth");
            }
        }
    }
    // Default mode as root: TCP SYN; a closed port answers RST.
    let v = run_trace(&lab, &["-p", "81", "-q", "1", "10.9.4.2"]);
    assert_eq!(v["mode"], "syn");
    assert_eq!(v["destination_reply"], "rst");
    assert_eq!(hop_addrs(&v), want);
}

#[test]
fn trace_ipv6() {
    require_root!();
    let lab = Chain::new();
    let want: Vec<Option<String>> = Chain::hops_v6().into_iter().map(Some).collect();
    for mode in ["--syn", "--udp", "--icmp"] {
        let v = run_trace(&lab, &[mode, "-q", "2", "fd09:4::2"]);
        assert_eq!(hop_addrs(&v), want, "{mode} over IPv6");
    }
}

#[test]
fn silent_router_shows_as_star_and_the_trace_continues() {
    require_root!();
    let lab = Chain::new();
    let r2 = &lab.nodes[2];
    // R2 forwards, but never sends time exceeded (a common firewall/CoPP setting).
    r2.exec(&["nft", "add table inet lsprobe"]);
    r2.exec(&[
        "nft",
        "add chain inet lsprobe out { type filter hook output priority 0 ; policy accept ; }",
    ]);
    r2.exec(&[
        "nft",
        "add rule inet lsprobe out icmp type time-exceeded drop",
    ]);
    r2.exec(&[
        "nft",
        "add rule inet lsprobe out icmpv6 type time-exceeded drop",
    ]);
    for mode in ["--syn", "--udp", "--icmp"] {
        let v = run_trace(&lab, &[mode, "10.9.4.2"]);
        let hops = hop_addrs(&v);
        assert_eq!(
            hops,
            vec![
                Some("10.9.1.2".to_string()),
                None,
                Some("10.9.3.2".to_string()),
                Some("10.9.4.2".to_string())
            ],
            "{mode}"
        );
        assert!(
            v["hops"][1]["probes"]
                .as_array()
                .expect("probes")
                .iter()
                .all(|p| p["from"].is_null())
        );
    }
    // Human output marks the silent hop with stars.
    let out = lab
        .client()
        .latscope(&["trace", "--icmp", "-q", "2", "-w", "300ms", "10.9.4.2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("2 ") && l.matches('*').count() == 2),
        "{text}"
    );
    assert!(text.contains("[destination: echo-reply]"), "{text}");
    // Not reached within the max TTL: exit code 1, the hops so far.
    let out = lab.client().latscope(&[
        "trace", "--udp", "-q", "1", "-w", "300ms", "-m", "3", "--json", "10.9.4.2",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = lab::probe::json(&out);
    assert_eq!(v["reached"], false);
    assert_eq!(
        hop_addrs(&v),
        vec![
            Some("10.9.1.2".to_string()),
            None,
            Some("10.9.3.2".to_string())
        ]
    );
    // The report shows the loss at hop 2 and none elsewhere.
    let out = lab.client().latscope(&[
        "trace", "--report", "--json", "--icmp", "-c", "4", "-i", "50ms", "-w", "300ms", "-m", "8",
        "10.9.4.2",
    ]);
    lab::assert_success(&out);
    let v = lab::probe::json(&out);
    let rep = v["report"].as_array().expect("report");
    assert_eq!(rep.len(), 4, "{rep:?}");
    let loss: Vec<f64> = rep
        .iter()
        .map(|h| h["loss_percent"].as_f64().expect("loss"))
        .collect();
    assert_eq!(loss, vec![0.0, 100.0, 0.0, 0.0]);
    assert!(rep.iter().all(|h| h["sent"] == 4));
    assert_eq!(rep[3]["addresses"][0], "10.9.4.2");
    assert!(rep[3]["destination"].as_bool().expect("bool"));
    assert!(
        rep[0]["rtt"]["p90_ns"].as_u64().expect("p90")
            >= rep[0]["rtt"]["p50_ns"].as_u64().expect("p50")
    );
}

#[test]
fn agrees_with_traceroute_tcp() {
    require_root!();
    let lab = Chain::new();
    let _web = lab::probe::tcp_server(Some(lab.dest()), "0.0.0.0:80");
    let out = lab.client().exec(&[
        "traceroute",
        "-T",
        "-n",
        "-q",
        "1",
        "-w",
        "1",
        "-p",
        "80",
        "10.9.4.2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let theirs: Vec<Option<String>> = text
        .lines()
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .filter(|a| *a != "*")
                .map(String::from)
        })
        .collect();
    let ours = hop_addrs(&run_trace(&lab, &["--syn", "-p", "80", "10.9.4.2"]));
    assert_eq!(ours, theirs, "traceroute -T said:\n{text}");
}

#[test]
fn unprivileged_icmp_trace_with_ping_sockets() {
    require_root!();
    let lab = Chain::new();
    let c = lab.client();
    c.exec(&["sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"]);
    let cmd = format!(
        "exec {} trace --icmp -q 2 -w 500ms -m 8 --json 10.9.4.2",
        lab::probe::BIN
    );
    let out = c.try_exec(&["capsh", "--drop=cap_net_raw", "--", "-c", &cmd]);
    lab::assert_success(&out);
    let v = lab::probe::json(&out);
    assert!(
        v["mode_reason"]
            .as_str()
            .expect("reason")
            .contains("unprivileged ping socket"),
        "{v}"
    );
    let want: Vec<Option<String>> = Chain::hops_v4().into_iter().map(Some).collect();
    assert_eq!(hop_addrs(&v), want);
    // Without the capability and without ping sockets, --icmp says what to do.
    c.exec(&["sysctl", "-qw", "net.ipv4.ping_group_range=1 0"]);
    let out = c.try_exec(&["capsh", "--drop=cap_net_raw", "--", "-c", &cmd]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ping_group_range"), "{err}");
}

/// The probes of one trace as captured on the wire: (protocol, TTL, flow key).
fn captured_probes(pcap: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 24; // pcap global header
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().expect("4")) as usize;
        let pkt = &pcap[at + 16..(at + 16 + caplen).min(pcap.len())];
        at += 16 + caplen;
        // Ethernet, then IPv4.
        if pkt.len() < 14 + 20 || pkt[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &pkt[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let (ttl, proto) = (ip[8], ip[9]);
        let l4 = &ip[ihl..];
        // The flow key a per-flow load balancer may hash: addresses, protocol, ports and, as
        // Paris traceroute does, the UDP / ICMP checksum too.
        let mut key = ip[12..20].to_vec();
        match proto {
            6 if l4.len() >= 14 && l4[13] == 0x02 => key.extend_from_slice(&l4[0..4]),
            17 if l4.len() >= 8 => key.extend_from_slice(&l4[0..8]),
            1 if l4.len() >= 8 && l4[0] == 8 => key.extend_from_slice(&l4[0..6]),
            _ => continue,
        }
        out.push((proto, ttl, key));
    }
    out
}

#[test]
fn paris_flow_is_constant_on_the_wire() {
    require_root!();
    let lab = Chain::new();
    let _web = lab::probe::tcp_server(Some(lab.dest()), "0.0.0.0:80");
    let r1 = &lab.nodes[1];
    let pcap = std::env::temp_dir().join(format!("{}.pcap", lab::probe::unique("cap")));
    struct Cleanup(std::path::PathBuf, std::process::Child);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.1.kill();
            let _ = self.1.wait();
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let child = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &r1.name,
            "tcpdump",
            "-i",
            "left",
            "-U",
            "--immediate-mode",
            "-n",
            "-s",
            "128",
        ])
        .arg("-w")
        .arg(&pcap)
        .args(["src", "host", "10.9.1.1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump");
    let mut guard = Cleanup(pcap.clone(), child);
    for _ in 0..100 {
        if std::fs::metadata(&pcap)
            .map(|m| m.len() >= 24)
            .unwrap_or(false)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    for mode in ["--syn", "--udp", "--icmp"] {
        run_trace(&lab, &[mode, "-q", "3", "10.9.4.2"]);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: SIGTERM to our own child; tcpdump flushes and exits.
    unsafe { libc::kill(guard.1.id() as i32, libc::SIGTERM) };
    let _ = guard.1.wait();
    let data = std::fs::read(&pcap).expect("pcap");
    let probes = captured_probes(&data);
    for proto in [6u8, 17, 1] {
        let p: Vec<_> = probes.iter().filter(|x| x.0 == proto).collect();
        let mut ttls: Vec<u8> = p.iter().map(|x| x.1).collect();
        ttls.dedup();
        assert_eq!(
            ttls,
            vec![1, 2, 3, 4],
            "proto {proto}: 3 probes per TTL 1..4 in order"
        );
        assert_eq!(p.len(), 12, "proto {proto}");
        assert!(
            p.iter().all(|x| x.2 == p[0].2),
            "proto {proto}: every probe of the trace has the same flow key (Paris): {p:?}"
        );
    }
}

#[test]
fn a_router_that_rate_limits_icmp_is_named_not_shown_as_loss() {
    require_root!();
    let lab = Chain::new();
    // R2 forwards everything but sends at most a few time-exceeded per second.
    lab.nodes[2].nft(
        "table inet lsrl {
           chain out {
             type filter hook output priority 0; policy accept;
             icmp type time-exceeded limit rate over 4/second burst 2 packets drop
           }
         }\n",
    );
    let out = lab.client().latscope(&[
        "trace", "--icmp", "--stats", "-n", "30", "-i", "100ms", "-W", "300ms", "-m", "6",
        "10.9.4.2",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("hop 2: ") && text.contains("rate-limiting the ICMP replies"),
        "{text}"
    );
    // Hops that answer every probe are not named.
    assert!(!text.contains("hop 1: "), "{text}");
}

/// A trace to an address nobody has: R3 (hop 3, 10.9.3.2) owns the destination's network but
/// finds no host there, and its ARP gives up after 3 s. The default wait sees its host
/// unreachable, names it (`!H`), stops there like `traceroute -T`, and never shows the 3 s
/// as a round trip. An `unreachable` route answers at once, a `prohibit` route with `!X`.
#[test]
fn trace_stops_at_a_routers_host_unreachable_like_traceroute() {
    require_root!();
    let lab = Chain::new();
    let started = std::time::Instant::now();
    let out = lab
        .client()
        .latscope(&["trace", "--syn", "-m", "8", "--json", "10.9.4.99"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "not reached");
    let v = lab::probe::json(&out);
    let hops = v["hops"].as_array().expect("hops");
    assert_eq!(hops.len(), 4, "stops at the unreachable: {v}");
    assert_eq!(
        hop_addrs(&v),
        ["10.9.1.2", "10.9.2.2", "10.9.3.2", "10.9.3.2"].map(|a| Some(a.to_string())),
    );
    let u = &v["unreachable"];
    assert_eq!(
        (u["ttl"].as_u64(), u["from"].as_str()),
        (Some(4), Some("10.9.3.2"))
    );
    assert_eq!(u["kind"], "host_unreachable");
    let after_s = u["after_ns"].as_f64().expect("after") / 1e9;
    assert!(
        (2.5..4.0).contains(&after_s),
        "ARP gives up after ~3 s: {after_s}"
    );
    for p in hops[3]["probes"].as_array().expect("probes") {
        if !p["from"].is_null() {
            assert_eq!(p["kind"], "host_unreachable", "{p}");
            assert!(p["rtt_ns"].is_null(), "no round trip: {p}");
        }
    }
    assert!(took.as_secs_f64() < 8.0, "{took:?}");
    // The human view: the mark in place of a time, and why the trace stopped.
    let out = lab
        .client()
        .latscope(&["trace", "--syn", "-q", "1", "-m", "8", "10.9.4.99"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("4 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        ["4", "10.9.3.2", "!H"]
    );
    assert!(
        text.contains(
            "destination 10.9.4.99 unreachable: hop 4 (10.9.3.2) answered host-unreachable (!H)"
        ),
        "{text}"
    );
    // traceroute -T says the same hop and stops there too.
    let theirs = lab.client().exec(&[
        "traceroute",
        "-T",
        "-n",
        "-q",
        "1",
        "-m",
        "8",
        "-p",
        "80",
        "10.9.4.99",
    ]);
    let theirs = String::from_utf8_lossy(&theirs.stdout).to_string();
    let last = theirs.lines().last().unwrap_or_default().to_string();
    assert_eq!(
        last.split_whitespace().next(),
        Some("4"),
        "traceroute -T said:\n{theirs}"
    );
    assert!(last.contains("10.9.3.2") && last.contains("!H"), "{theirs}");

    // Route types: R2 (hop 2) refuses at once.
    let r2 = &lab.nodes[2];
    r2.ip(&["route", "add", "unreachable", "10.9.4.128/26"]);
    r2.ip(&["route", "add", "prohibit", "10.9.4.192/26"]);
    for (dst, kind, mark) in [
        ("10.9.4.130", "host_unreachable", "!H"),
        ("10.9.4.200", "prohibited", "!X"),
    ] {
        let out = lab
            .client()
            .latscope(&["trace", "--syn", "-q", "1", "-m", "8", "--json", dst]);
        assert_eq!(out.status.code(), Some(1));
        let v = lab::probe::json(&out);
        assert_eq!(v["unreachable"]["ttl"], 2, "{mark}: {v}");
        assert_eq!(v["unreachable"]["from"], "10.9.2.2", "{mark}: {v}");
        assert_eq!(v["unreachable"]["kind"], kind, "{mark}: {v}");
        assert!(v["unreachable"]["after_ns"].as_u64().expect("after") < 500_000_000);
        assert_eq!(v["hops"].as_array().expect("hops").len(), 2);
    }
}

/// The same over IPv6: neighbour discovery gives up, R3 answers ICMPv6 address unreachable.
#[test]
fn trace_ipv6_address_unreachable() {
    require_root!();
    let lab = Chain::new();
    let out = lab.client().latscope(&[
        "trace",
        "--syn",
        "-q",
        "1",
        "-m",
        "8",
        "--json",
        "fd09:4::99",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = lab::probe::json(&out);
    assert_eq!(v["unreachable"]["ttl"], 4, "{v}");
    assert_eq!(v["unreachable"]["kind"], "host_unreachable", "{v}");
    assert_eq!(v["hops"].as_array().expect("hops").len(), 4);
}

//! `latscope capture` against tcpdump on the same traffic, `analyze --live`, and
//! retransmission counts against tshark on a capture with nftables-made loss.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use lab::wire::{
    BIN, Bg, Netns, Pattern, TempDir, analyze_json, http_client, http_server, spawn_ready,
    tshark_count, tshark_packets,
};

#[test]
fn capture_matches_tcpdump_packet_count() {
    require_root!();
    // Compared with tcpdump/tshark capturing at the same time, on a shared interface: not beside
    // other tests loading the CPUs.
    let _serial = lab::timing_lock();
    let dir = TempDir::new();
    let ours = dir.path("latscope.pcap");
    let theirs = dir.path("tcpdump.pcap");
    let (addr, server) = http_server(Pattern::SplitNoDelay, 5);
    let filter = format!("tcp port {}", addr.port());
    let td = Bg::tcpdump("lo", &theirs, &filter);
    let ls = Bg::latscope_capture(
        None,
        &["-i", "lo", "-w", ours.to_str().unwrap(), "--json", &filter],
    );
    http_client(addr, 5, 4);
    server.join().unwrap();
    let out = ls.stop();
    let td_out = td.stop();
    assert!(
        out.status.code() == Some(130), // Ctrl-C ended it
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (p_ours, p_theirs) = (tshark_packets(&ours), tshark_packets(&theirs));
    let n_ours = same_packets_as_tcpdump(&filter, &p_ours, &p_theirs, &td_out) as u64;
    assert!(n_ours >= 5 * (3 + 4 * 3), "latscope saw {n_ours} packets");
    assert_eq!(report["packets"].as_u64().unwrap(), n_ours);
    assert_eq!(report["kernel_drops"], 0);
    assert!(
        report["filter_mode"]
            .as_str()
            .unwrap()
            .starts_with("kernel")
    );
    // Nanosecond magic, readable by tshark with the same connections.
    let raw = std::fs::read(&ours).unwrap();
    assert_eq!(&raw[..4], &0xa1b2_3c4du32.to_le_bytes());
    assert_eq!(
        tshark_count(&ours, "tcp.flags.syn==1 && tcp.flags.ack==0"),
        5
    );
}

#[test]
fn capture_count_and_bad_filter() {
    require_root!();
    let dir = TempDir::new();
    let f = dir.path("c.pcap");
    let (addr, server) = http_server(Pattern::SplitNoDelay, 3);
    let port = addr.port().to_string();
    // -d bounds the test if packets were missed; the count ends it first.
    let mut cmd = Command::new(BIN);
    cmd.args([
        "capture",
        "-i",
        "lo",
        "-d",
        "60s",
        "-c",
        "7",
        "-w",
        f.to_str().unwrap(),
        "tcp",
        "port",
        &port,
    ])
    .stdout(std::process::Stdio::null());
    let mut child = spawn_ready(cmd, "capturing on");
    http_client(addr, 3, 3);
    server.join().unwrap();
    let st = child.wait().unwrap();
    assert!(st.success());
    assert_eq!(tshark_count(&f, ""), 7);

    // pcapng output (chosen by the file name) opens in tshark with the same count.
    let ng = dir.path("c.pcapng");
    let (addr, server) = http_server(Pattern::SplitNoDelay, 1);
    let port = addr.port().to_string();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "capture",
        "-i",
        "lo",
        "-d",
        "60s",
        "-c",
        "5",
        "-w",
        ng.to_str().unwrap(),
        "tcp",
        "port",
        &port,
    ])
    .stdout(std::process::Stdio::null());
    let mut child = spawn_ready(cmd, "capturing on");
    http_client(addr, 1, 3);
    server.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        &std::fs::read(&ng).unwrap()[..4],
        &0x0a0d_0d0au32.to_le_bytes()
    );
    assert_eq!(tshark_count(&ng, ""), 5);
    let (_, v) = analyze_json(&ng, &[]);
    assert_eq!(v["format"], "pcapng");
    assert_eq!(v["frames"], 5);

    let out = Command::new(BIN)
        .args(["capture", "-i", "lo", "-w", "/dev/null", "port", "eighty"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid capture filter"));
    let out = Command::new(BIN)
        .args(["capture", "-i", "nosuchif0", "-w", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no network interface"));
}

#[test]
fn analyze_live_finds_nagle() {
    require_root!();
    // Compared with tcpdump/tshark capturing at the same time, on a shared interface: not beside
    // other tests loading the CPUs.
    let _serial = lab::timing_lock();
    let (addr, server) = http_server(Pattern::SplitNagle, 1);
    let port = addr.port().to_string();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "analyze",
        "--live",
        "-i",
        "lo",
        "-d",
        "4s",
        "-f",
        &format!("tcp port {port}"),
        "--json",
    ])
    .stdout(std::process::Stdio::piped());
    let child = spawn_ready(cmd, "capturing on");
    http_client(addr, 1, 4);
    server.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "live");
    assert_eq!(v["connections"], 1);
    assert_eq!(v["findings"][0]["kind"], "nagle_delayed_ack");
    assert_eq!(v["findings"][0]["count"], 3);
}

/// Bulk transfers through a namespace whose nftables input hook drops ~6% of the segments.
#[test]
fn retransmissions_match_tshark_under_nft_loss() {
    require_root!();
    // Compared with tcpdump/tshark capturing at the same time, on a shared interface: not beside
    // other tests loading the CPUs.
    let _serial = lab::timing_lock();
    let ns = Netns::new("w").with_lo_mtu(1500);
    let port = 5000;
    ns.nft(&format!(
        "table inet {t} {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  tcp sport {port} numgen random mod 100 < 6 drop\n  tcp dport {port} numgen random mod 100 < 6 drop\n }}\n}}\n",
        t = ns.name
    ));
    let dir = TempDir::new();
    let file = dir.path("loss.pcap");
    let conns = 8;
    let server = ns
        .spawn(move || TcpListener::bind(("127.0.0.1", port)).unwrap())
        .join()
        .unwrap();
    let cap = Bg::latscope_capture_lo(Some(&ns.name), &file, "tcp port 5000");
    let srv = std::thread::spawn(move || {
        for _ in 0..conns {
            let (mut s, _) = server.accept().unwrap();
            let mut req = [0u8; 16];
            s.read_exact(&mut req).unwrap();
            s.write_all(&vec![7u8; 600_000]).unwrap();
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        }
    });
    ns.spawn(move || {
        for _ in 0..conns {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s.write_all(b"GET /bulk please").unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            assert_eq!(got.len(), 600_000);
        }
    })
    .join()
    .unwrap();
    srv.join().unwrap();
    let out = cap.stop();
    assert!(
        out.status.code() == Some(130), // Ctrl-C ended it
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, v) = analyze_json(&file, &[]);
    let c = &v["counts"];
    let ours = c["retransmission"].as_u64().unwrap()
        + c["fast_retransmission"].as_u64().unwrap()
        + c["spurious_retransmission"].as_u64().unwrap();
    let ts_retrans = tshark_count(&file, "tcp.analysis.retransmission");
    let ts_fast = tshark_count(&file, "tcp.analysis.fast_retransmission");
    let ts_spur = tshark_count(&file, "tcp.analysis.spurious_retransmission");
    let ts_dup = tshark_count(&file, "tcp.analysis.duplicate_ack");
    let ts_ooo = tshark_count(&file, "tcp.analysis.out_of_order");
    let ts_zw = tshark_count(&file, "tcp.analysis.zero_window");
    let ts_wf = tshark_count(&file, "tcp.analysis.window_full");
    let ts_lost = tshark_count(&file, "tcp.analysis.lost_segment");
    eprintln!(
        "latscope {c}\ntshark retrans={ts_retrans} fast={ts_fast} spurious={ts_spur} dup={ts_dup} ooo={ts_ooo} zw={ts_zw} wf={ts_wf} lost={ts_lost}"
    );
    if ours != ts_retrans {
        // Which frames differ: ours from the per-connection ladders, tshark's from a filter.
        let mut mine = Vec::new();
        for conn in 0..conns {
            let (_, l) = analyze_json(&file, &["--conn", &conn.to_string()]);
            for r in l["ladder"]["rows"].as_array().unwrap() {
                if r["notes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| n.as_str().unwrap().contains("retransmission"))
                {
                    mine.push(r["frame"].as_u64().unwrap());
                }
            }
        }
        mine.sort_unstable();
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&file)
            .args([
                "-Y",
                "tcp.analysis.retransmission",
                "-T",
                "fields",
                "-e",
                "frame.number",
            ])
            .output()
            .unwrap();
        let theirs: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if let Ok(keep) = std::env::var("LATSCOPE_WIRE_KEEP") {
            let _ = std::fs::copy(&file, keep);
        }
        panic!("retransmission frames differ: latscope {mine:?}, tshark {theirs:?}");
    }
    assert!(
        ts_retrans > 0,
        "the nft rule should have caused retransmissions"
    );
    assert_eq!(ours, ts_retrans, "tcp.analysis.retransmission");
    assert_eq!(
        c["fast_retransmission"].as_u64().unwrap(),
        ts_fast,
        "tcp.analysis.fast_retransmission"
    );
    assert_eq!(
        c["spurious_retransmission"].as_u64().unwrap(),
        ts_spur,
        "tcp.analysis.spurious_retransmission"
    );
    assert_eq!(
        c["duplicate_ack"].as_u64().unwrap(),
        ts_dup,
        "tcp.analysis.duplicate_ack"
    );
    assert_eq!(
        c["out_of_order"].as_u64().unwrap(),
        ts_ooo,
        "tcp.analysis.out_of_order"
    );
    assert_eq!(
        c["zero_window"].as_u64().unwrap(),
        ts_zw,
        "tcp.analysis.zero_window"
    );
    assert_eq!(
        c["window_full"].as_u64().unwrap(),
        ts_wf,
        "tcp.analysis.window_full"
    );
    assert_eq!(
        c["lost_segment"].as_u64().unwrap(),
        ts_lost,
        "tcp.analysis.lost_segment"
    );
}

/// Loopback traffic of known shapes on `tcp_port`/`udp_port`: a few TCP connections (handshake,
/// a small and a large write each way, FIN) and UDP datagrams of 40, 300 and 1,200 bytes.
fn mixed_traffic(tcp: &TcpListener, udp: &std::net::UdpSocket) {
    let addr = tcp.local_addr().unwrap();
    let server = {
        let tcp = tcp.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..3 {
                let (mut s, _) = tcp.accept().unwrap();
                let mut buf = [0u8; 4096];
                let mut got = 0;
                while got < 10 + 1500 {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0);
                    got += n;
                }
                s.write_all(&[7u8; 20]).unwrap();
                s.write_all(&[8u8; 1400]).unwrap();
            }
        })
    };
    for _ in 0..3 {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(&[1u8; 10]).unwrap();
        c.write_all(&[2u8; 1500]).unwrap();
        let mut buf = vec![0u8; 1420];
        c.read_exact(&mut buf).unwrap();
    }
    server.join().unwrap();
    let to = udp.local_addr().unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for size in [40usize, 300, 1200, 40, 300, 1200] {
        tx.send_to(&vec![0u8; size], to).unwrap();
    }
}

/// Every filter tcpdump accepts means the same in latscope capture (both compile with libpcap):
/// the same loopback traffic captured by both under each filter gives the same packet count.
#[test]
fn capture_filters_match_tcpdump() {
    // Compared with tcpdump/tshark capturing at the same time, on a shared interface: not beside
    // other tests loading the CPUs.
    let _serial = lab::timing_lock();
    let dir = TempDir::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let ports = format!(
        "(tcp port {} or udp port {})",
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port()
    );
    let filters = [
        "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
        "tcp[13] = 18",
        "ip[8] < 65",
        "greater 200",
        "less 100",
        "len > 1000",
        "ether proto 0x0800",
        "udp",
        "tcp and not (udp or icmp)",
    ];
    let runs: Vec<(String, std::path::PathBuf, std::path::PathBuf, Bg, Bg)> = filters
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let filter = format!("({f}) and {ports}");
            let ours = dir.path(&format!("ours{i}.pcap"));
            let theirs = dir.path(&format!("theirs{i}.pcap"));
            let td = Bg::tcpdump("lo", &theirs, &filter);
            let ls = Bg::latscope_capture(
                None,
                &[
                    "-i",
                    "lo",
                    "--buffer",
                    "4MiB",
                    "--json",
                    "-w",
                    ours.to_str().unwrap(),
                    &filter,
                ],
            );
            (filter, ours, theirs, td, ls)
        })
        .collect();
    mixed_traffic(&tcp, &udp);
    // Each stop waits for its file to settle (most of a second): the 18 processes are stopped
    // at once, and their files read by tshark at once, instead of one after the other.
    let stopped: Vec<_> = std::thread::scope(|s| {
        let stops: Vec<_> = runs
            .into_iter()
            .map(|(filter, ours, theirs, td, ls)| {
                s.spawn(move || {
                    let ls = s.spawn(move || ls.stop());
                    let td_out = td.stop();
                    (filter, ours, theirs, td_out, ls.join().unwrap())
                })
            })
            .collect();
        stops.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stopped: Vec<_> = stopped
        .into_iter()
        .map(|(filter, ours, theirs, td_out, out)| {
            assert!(
                out.status.code() == Some(130), // Ctrl-C ended it
                "{filter}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{filter}: capture --json: {e}"));
            assert_eq!(report["kernel_drops"], 0, "{filter}: latscope lost packets");
            (filter, ours, theirs, td_out)
        })
        .collect();
    let packets: Vec<(Vec<String>, Vec<String>)> = std::thread::scope(|s| {
        let reads: Vec<_> = stopped
            .iter()
            .map(|(_, ours, theirs, _)| {
                s.spawn(move || (tshark_packets(ours), tshark_packets(theirs)))
            })
            .collect();
        reads.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut nonzero = 0;
    for ((filter, _, _, td_out), (p_ours, p_theirs)) in stopped.iter().zip(packets) {
        let n = same_packets_as_tcpdump(filter, &p_ours, &p_theirs, td_out);
        nonzero += usize::from(n > 0);
    }
    // Every filter matched something, so each comparison could have failed.
    assert_eq!(nonzero, filters.len());

    let out = Command::new(BIN)
        .args(["capture", "-i", "lo", "-w", "/dev/null", "tcp[13] = = 18"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("latscope: error: invalid capture filter 'tcp[13] = = 18': ")
            && err.contains("syntax error"),
        "{err}"
    );
}

/// Compare latscope's capture `ours` with tcpdump's `theirs` of the same traffic, packet by
/// packet, and return latscope's count. Packets latscope lacks are a bug in latscope (tcpdump's
/// window is wider: it starts before and stops after). Packets only latscope has are tcpdump's
/// loss, allowed only up to what tcpdump's own closing counts say it lost (accepted by its
/// filter, never written); on any mismatch the differing packets are printed.
fn same_packets_as_tcpdump(
    what: &str,
    p_ours: &[String],
    p_theirs: &[String],
    tcpdump: &std::process::Output,
) -> usize {
    let td_err = String::from_utf8_lossy(&tcpdump.stderr);
    let counts = lab::wire::TcpdumpCounts::parse(&td_err)
        .unwrap_or_else(|| panic!("{what}: no closing counts from tcpdump: {td_err}"));
    assert_eq!(
        p_theirs.len() as u64,
        counts.captured,
        "{what}: tcpdump's file against its own count"
    );
    let (only_ours, only_theirs) = lab::wire::packet_difference(p_ours, p_theirs);
    let diff = format!(
        "{what}: latscope {} packets, tcpdump {} ({counts:?}); only latscope's: {only_ours:#?}; only tcpdump's: {only_theirs:#?}",
        p_ours.len(),
        p_theirs.len()
    );
    assert!(only_theirs.is_empty(), "{diff}");
    assert!(only_ours.len() as u64 <= counts.lost_on("lo"), "{diff}");
    if only_ours.is_empty() {
        eprintln!("{what}: {} packets, as tcpdump", p_ours.len());
    } else {
        eprintln!("{diff}: tcpdump's own counts account for the difference");
    }
    p_ours.len()
}

/// `capture -w` in a shared directory: a planted symbolic link is refused (nothing is written
/// through it), as is a file with another hard link; a new file is created.
#[test]
fn capture_write_does_not_follow_planted_links() {
    let dir = TempDir::new();
    let victim = dir.path("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.path("planted.pcap");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let hard = dir.path("hard.pcap");
    std::fs::hard_link(&victim, &hard).unwrap();
    for target in [&link, &hard] {
        let out = Command::new(BIN)
            .args(["capture", "-i", "lo", "-c", "1", "-d", "1s", "-w"])
            .arg(target)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", target.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refusing to write"), "{err}");
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // A fresh name is created; an existing file of ours is replaced.
    let fresh = dir.path("fresh.pcap");
    for _ in 0..2 {
        let path = fresh.to_str().unwrap();
        let out = lab::output(&[
            "capture",
            "-i",
            "lo",
            "-d",
            "300ms",
            "-w",
            path,
            "udp port 9",
        ]);
        lab::assert_success(&out);
        assert_eq!(std::fs::metadata(&fresh).unwrap().len(), 24);
    }
}

/// A second Ctrl-C right after the first still leaves a complete file with every packet the
/// summary counted (it used to exit at once, with the packets still in the write buffer).
#[test]
fn capture_second_ctrl_c_still_flushes() {
    let dir = TempDir::new();
    let f = dir.path("twice.pcap");
    let (addr, server) = http_server(Pattern::SplitNoDelay, 3);
    let filter = format!("tcp port {}", addr.port());
    let mut cmd = Command::new(BIN);
    cmd.args(["capture", "-i", "lo", "--json", "-w"])
        .arg(&f)
        .arg(&filter)
        .stdout(std::process::Stdio::piped());
    let child = spawn_ready(cmd, "capturing on");
    http_client(addr, 3, 3);
    server.join().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..2 {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "stopped by Ctrl-C");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = report["packets"].as_u64().unwrap();
    assert!(n >= 3 * (3 + 3 * 3), "{n} packets");
    assert_eq!(tshark_count(&f, ""), n);
}

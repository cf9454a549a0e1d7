//! latscope stream against latscope serve: exact counts, every direction, UDP accounting, a
//! rate-limited link compared with iperf3, latency under load, and faults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::time::{Duration, Instant};

use lab::netns::NetnsPair;
use lab::*;

fn stream_json(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["stream"];
    full.extend(args);
    full.push("--json");
    let (code, out, err) = run(&full);
    let doc = json_checked(&out, "stream");
    assert_eq!(code, findings_code(&doc), "{args:?}: {err}");
    doc
}

/// The exit code a finished stream report stands for: 1 when datagrams were lost or a small
/// request's median latency jumped under the transfer (2× and 1 ms above idle), as in rr.
fn findings_code(doc: &serde_json::Value) -> i32 {
    let lost: u64 = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["udp"]["lost"].as_u64())
        .sum();
    let p = &doc["latency_probe"];
    let jumped = p.is_object() && {
        let (idle, loaded) = (u(&p["idle"]["p50_ns"]), u(&p["loaded"]["p50_ns"]));
        eprintln!("latency probe: idle p50 {idle} ns, loaded p50 {loaded} ns");
        loaded >= 2 * idle && loaded >= idle + 1_000_000
    };
    i32::from(lost > 0 || jumped)
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn tcp_and_unix_counts_agree_exactly_in_every_direction() {
    let path = sock_path("stream");
    let srv = server(Some(path.clone()), None, None);
    let addr = addr_arg(srv.tcp_addr);
    let unix = format!("unix:{}", path.display());
    let cases: Vec<Vec<&str>> = vec![
        vec![&addr, "-t", "1s"],
        vec![&addr, "-t", "1s", "-R"],
        vec![&addr, "-t", "1s", "-P", "4"],
        vec![&addr, "-t", "1s", "--bidir", "-P", "2"],
        vec![&addr, "-n", "64MiB", "-P", "2", "-Z"],
        vec![&unix, "-t", "1s", "--bidir"],
    ];
    for args in cases {
        let doc = stream_json(&args);
        assert!(doc["error"].is_null(), "{args:?}: {}", doc["error"]);
        let results = doc["results"].as_array().unwrap();
        let want_dirs = if args.contains(&"--bidir") { 2 } else { 1 };
        assert_eq!(results.len(), want_dirs, "{args:?}");
        for r in results {
            let sent = u(&r["sender"]["bytes"]);
            let got = u(&r["receiver"]["bytes"]);
            assert!(sent > 1 << 20, "{args:?}: only {sent} bytes");
            assert_eq!(
                sent, got,
                "{args:?} {}: sender and receiver counts differ",
                r["direction"]
            );
            assert_eq!(u(&r["bytes_delivered"]), got);
            let per_stream: u64 = r["streams"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| u(&s["bytes_received"]))
                .sum();
            assert_eq!(per_stream, got, "{args:?}: streams add up");
            assert!(r["sender"]["cost"]["io_calls"].as_u64().unwrap() > 0);
        }
        if args.contains(&"-n") {
            assert_eq!(
                u(&results[0]["bytes_delivered"]),
                64 << 20,
                "-n moves exactly that many bytes"
            );
        }
    }
    // Intervals come from both sides.
    let doc = stream_json(&[&addr, "-t", "1500ms", "-i", "500ms"]);
    let sides: Vec<&str> = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["side"].as_str().unwrap())
        .collect();
    assert!(
        sides.contains(&"client") && sides.contains(&"server"),
        "{sides:?}"
    );
    assert!(sides.len() >= 4);
}

/// Issue 41: `stream -d 2s --json` dropped the last interval in 3 runs of 4 (also `-R`, `--unix`,
/// 3–4 s) — on the side whose tick came after the client's Stop. Every interval of the run is
/// reported, on both ends: from 0 to the end of the transfer, one after the other, and their
/// bytes add up to each side's count.
#[test]
fn every_interval_of_the_run_is_reported_on_both_ends() {
    let path = sock_path("stream-intervals");
    let srv = server(Some(path.clone()), None, None);
    let addr = addr_arg(srv.tcp_addr);
    let unix = format!("unix:{}", path.display());
    let cases: [(&[&str], u64); 3] = [
        (&[&addr, "-d", "2s"], 2),
        (&[&addr, "-d", "2s", "-R"], 2),
        (&[&unix, "-d", "3s"], 3),
    ];
    for (args, secs) in cases {
        let doc = stream_json(args);
        assert!(doc["error"].is_null(), "{args:?}: {}", doc["error"]);
        let ivs = doc["intervals"].as_array().unwrap();
        let r = &doc["results"][0];
        let direction = r["direction"].as_str().unwrap();
        for side in ["client", "server"] {
            let mine: Vec<&serde_json::Value> = ivs
                .iter()
                .filter(|e| e["side"] == side && e["direction"] == direction)
                .collect();
            let spans: Vec<(u64, u64)> = mine
                .iter()
                .map(|e| (u(&e["start_ns"]), u(&e["end_ns"])))
                .collect();
            assert_eq!(spans.len() as u64, secs, "{args:?} {side}: {spans:?}");
            assert_eq!(spans[0].0, 0, "{args:?} {side}: {spans:?}");
            for w in spans.windows(2) {
                assert_eq!(w[0].1, w[1].0, "{args:?} {side}: {spans:?}");
            }
            // To the end of the transfer: the deadline, or a receiver's last byte on its own
            // clock (the server's starts before the client hears Go: a loaded host puts a
            // tenth of a second between them), never the wait for the Stop that followed.
            let end_s = spans.last().unwrap().1 as f64 / 1e9;
            assert!(
                (secs as f64 * 0.95..secs as f64 + 0.5).contains(&end_s),
                "{args:?} {side}: the last interval ends at {end_s} s: {spans:?}"
            );
            let role = mine[0]["role"].as_str().unwrap();
            let bytes: u64 = mine.iter().map(|e| u(&e["bytes"])).sum();
            let view = if (side == "client") == (direction == "client→server") {
                "sender"
            } else {
                "receiver"
            };
            assert_eq!(role, view, "{args:?} {side}");
            assert_eq!(
                bytes,
                u(&r[view]["bytes"]),
                "{args:?} {side}: the intervals add up to the {view}'s count"
            );
        }
    }
}

#[test]
fn udp_sent_equals_received_plus_lost_both_ways() {
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    let doc = stream_json(&[&addr, "-u", "-b", "40M", "-t", "1s", "--bidir", "-P", "2"]);
    for r in doc["results"].as_array().unwrap() {
        let udp = &r["udp"];
        assert!(u(&udp["sent"]) > 3000, "{udp}");
        assert_eq!(
            u(&udp["sent"]),
            u(&udp["received"]) + u(&udp["lost"]),
            "{}: {udp}",
            r["direction"]
        );
        // Both receivers' CPU is known: the client's threads, and the server's shared UDP
        // thread, which received nothing but this test's datagrams.
        let rx = &r["receiver"]["cost"];
        assert_eq!(rx["cpu_measured"], true, "{}: {rx}", r["direction"]);
        assert!(
            rx["cpu_user_pct"].as_f64().unwrap() + rx["cpu_sys_pct"].as_f64().unwrap() > 0.0,
            "{rx}"
        );
        // Paced at 20 Mbit/s per stream, 40 Mbit/s per direction: within 5% of the target.
        let rate = r["sender"]["rate_bps"].as_f64().unwrap();
        assert!(
            (rate / 40e6 - 1.0).abs() < 0.05,
            "{}: sent at {rate}",
            r["direction"]
        );
    }
}

#[test]
fn rates_are_over_the_runs_time_and_unmeasured_intervals_are_null() {
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    // 100 bit/s with 1400-byte datagrams: one datagram in the second. Its rate is 1400 bytes
    // over the run's second, not over the microseconds between its first and last datagram.
    let doc = stream_json(&[&addr, "-u", "-b", "100", "-d", "1s"]);
    let r = &doc["results"][0];
    assert_eq!(u(&r["udp"]["sent"]), 1, "{r}");
    let bits = u(&r["bytes_delivered"]) as f64 * 8.0;
    for rate in [
        &r["rate_bps"],
        &r["sender"]["rate_bps"],
        &r["receiver"]["rate_bps"],
    ] {
        let secs = bits / rate.as_f64().unwrap();
        assert!((0.95..1.5).contains(&secs), "{secs} s: {r}");
    }
    // A run shorter than half an interval (1 s) has no full-length interval: null, not 0 bit/s.
    let doc = stream_json(&[&addr, "-d", "300ms"]);
    assert!(doc["results"][0]["intervals"].is_null(), "{doc}");
}

/// iperf3's delivered rate to b over 2 s after an omitted first second (slow start), as its
/// receiver counted it.
fn iperf3_rate(lab: &mut NetnsPair, extra: &[&str]) -> f64 {
    let port = "15201";
    lab.spawn_cmd(
        &lab.b.clone(),
        &["iperf3", "-s", "-1", "-p", port, "-B", &lab.addr_b.clone()],
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut args = vec![
        "iperf3",
        "-c",
        &lab.addr_b,
        "-p",
        port,
        "-t",
        "2",
        "-O",
        "1",
        "-J",
    ];
    args.extend(extra);
    let out = lab.exec(&lab.a, &args);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("iperf3 JSON");
    let end = &doc["end"];
    end["sum_received"]["bits_per_second"]
        .as_f64()
        .or_else(|| end["sum"]["bits_per_second"].as_f64())
        .expect("iperf3 rate")
}

#[test]
fn shaped_link_rate_matches_the_limit_and_iperf3() {
    require_root!();
    // Rates compared with iperf3's and a latency jump judged against an idle baseline: a
    // neighbour loading the CPUs skews both (run alone, scripts/lib/test-binaries.py).
    let _serial = timing_lock();
    let mut lab = NetnsPair::routed("lss", 92, 1500);
    // A 50 Mbit/s token bucket on the router, towards the server, with a deep queue
    // (bufferbloat). On the router, not the client: a local qdisc would back-pressure the
    // client's UDP socket instead of dropping, and the server would never see a loss.
    let (router, dev) = lab.router.clone().unwrap();
    lab.exec(
        &router,
        &[
            "tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", "50mbit", "burst", "64kb",
            "latency", "100ms",
        ],
    );
    let server = lab.addr_b.clone();
    lab.spawn(&lab.b.clone(), &["serve", "--bind", &server, "-q"]);
    std::thread::sleep(Duration::from_millis(400));
    let limit = 50e6;

    // TCP: latscope and iperf3 on the same link, in the same test.
    let (code, out, err) = lab.run(&lab.a, &["stream", &server, "-t", "3s", "--json"]);
    assert_eq!(code, 0, "{err}");
    let doc = json_checked(&out, "stream");
    let ours = doc["results"][0]["intervals"]["avg_bps"].as_f64().unwrap();
    let theirs = iperf3_rate(&mut lab, &[]);
    // The bucket counts frames: a full segment carries 1448 payload bytes (MSS 1460 less 12
    // of timestamps) in 1514 (TCP 32, IP 20, Ethernet 14), so the payload's rate is 95.6% of it.
    let tcp_payload = limit * 1448.0 / 1514.0;
    eprintln!(
        "TCP: latscope {ours:.0}, iperf3 {theirs:.0}, the limit's payload share {tcp_payload:.0} bit/s"
    );
    assert!(
        (ours / tcp_payload - 1.0).abs() < 0.05,
        "TCP {ours} vs the limit's payload share {tcp_payload}"
    );
    assert!(
        (ours / theirs - 1.0).abs() < 0.05,
        "TCP latscope {ours} vs iperf3 {theirs}"
    );

    // UDP below the limit: delivered at the target.
    let (code, out, err) = lab.run(
        &lab.a,
        &["stream", &server, "-u", "-b", "45M", "-t", "3s", "--json"],
    );
    let doc = json_checked(&out, "stream");
    assert_eq!(code, findings_code(&doc), "{err}");
    let r = &doc["results"][0];
    let rate = r["rate_bps"].as_f64().unwrap();
    eprintln!("UDP at 45M: delivered {rate:.0} bit/s");
    assert!(
        (rate / 45e6 - 1.0).abs() < 0.05,
        "UDP at 45M delivered {rate}"
    );

    // UDP above the limit: the loss the server saw is reported, and delivery sits at the limit
    // (payload share of the wire: 1400 of 1442 bytes per datagram).
    let (code, out, err) = lab.run(
        &lab.a,
        &["stream", &server, "-u", "-b", "70M", "-t", "3s", "--json"],
    );
    assert_eq!(code, 1, "UDP loss is a finding, as in rr: {err}");
    let doc = json_checked(&out, "stream");
    let r = &doc["results"][0];
    let udp = &r["udp"];
    assert_eq!(u(&udp["sent"]), u(&udp["received"]) + u(&udp["lost"]));
    let loss = udp["loss_pct"].as_f64().unwrap();
    assert!(
        loss > 15.0 && loss < 40.0,
        "70M into 50M loses about 30%: {loss}%"
    );
    let delivered = r["intervals"]["avg_bps"].as_f64().unwrap();
    assert!(
        (delivered / (limit * 1400.0 / 1442.0) - 1.0).abs() < 0.05,
        "UDP delivered {delivered}"
    );
    let theirs = iperf3_rate(&mut lab, &["-u", "-b", "70M", "-l", "1400"]);
    eprintln!("UDP at 70M: {loss:.1}% lost, delivered {delivered:.0} bit/s, iperf3 {theirs:.0}");
    assert!(
        (delivered / theirs - 1.0).abs() < 0.05,
        "UDP latscope {delivered} vs iperf3 {theirs}"
    );

    // Latency under load: the probe waits behind the bulk transfer in the token bucket's queue.
    // The sender is CUBIC, as bufferbloat's senders are: it grows until the bucket's queue
    // drops. This host's default, BBR, paces at the bottleneck's rate and keeps that queue near
    // empty: in a fresh-clone CI run its bulk flow left the probe under the 1 ms jump (no
    // finding, exit 0), and in another 1.97 ms against 61 µs idle.
    // (On the route to the server: a namespace may not pick a default outside
    // net.ipv4.tcp_allowed_congestion_control, a route may.)
    let route = lab.exec(&lab.a, &["ip", "-o", "route", "get", &server]);
    let after = |key: &str| {
        let words: Vec<&str> = route.split_whitespace().collect();
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .map(|w| w.to_string())
    };
    let dest = format!("{server}/32");
    let mut cmd = vec!["ip", "route", "replace", &dest];
    let (via, dev) = (after("via"), after("dev").expect("the route's device"));
    if let Some(via) = &via {
        cmd.extend(["via", via]);
    }
    cmd.extend(["dev", &dev, "congctl", "cubic"]);
    lab.exec(&lab.a, &cmd);
    let (code, out, err) = lab.run(
        &lab.a,
        &["stream", &server, "-t", "3s", "--latency-probe", "--json"],
    );
    let doc = json_checked(&out, "stream");
    let p = &doc["latency_probe"];
    let (idle, loaded) = (u(&p["idle"]["p50_ns"]), u(&p["loaded"]["p50_ns"]));
    eprintln!("latency probe: idle p50 {idle} ns, loaded p50 {loaded} ns");
    assert_eq!(
        code, 1,
        "a latency jump under load is a finding (idle p50 {idle} ns, loaded {loaded} ns): {err}"
    );
    // The probe waits in the bucket's queue: many times its idle round trip, and at least the
    // 1 ms above idle that makes a latency jump (how full the queue is at the median varies
    // with the bulk flow: one run from a fresh clone on a quiet machine measured 1.97 ms against
    // 61 µs idle, under the 2 ms this bound used to ask for).
    assert!(
        loaded > 5 * idle && loaded > idle + 1_000_000,
        "idle p50 {idle} ns, loaded p50 {loaded} ns"
    );
}

#[test]
fn faults_end_with_partial_results_and_clear_errors() {
    // A server that is killed mid-test.
    let serve = ServeProcess::start(&[]);
    let port = serve.port;
    let client = std::process::Command::new(BIN)
        .args([
            "stream",
            &format!("127.0.0.1:{port}"),
            "-t",
            "10s",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    drop(serve);
    let t0 = Instant::now();
    let out = client.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "the client noticed quickly"
    );
    assert_eq!(out.status.code(), Some(3));
    let doc = json_checked(&String::from_utf8_lossy(&out.stdout), "stream");
    assert!(
        doc["error"].as_str().unwrap().contains("closed"),
        "{}",
        doc["error"]
    );
    assert!(
        u(&doc["results"][0]["sender"]["bytes"]) > 0,
        "partial figures kept"
    );

    // Refused, and a test longer than the server allows.
    let (code, _, err) = run(&["stream", &format!("127.0.0.1:{port}"), "-t", "1s"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("refused"));
    let srv = server(
        None,
        None,
        Some(latscope_net::proto::Limits {
            max_tests: 4,
            max_duration_ms: 2000,
            max_message_bytes: 1 << 20,
        }),
    );
    let (code, _, err) = run(&["stream", &addr_arg(srv.tcp_addr), "-t", "5s"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("a 5s test exceeds this server's limit of 2s"),
        "{err}"
    );
    let (code, _, err) = run(&["stream", &addr_arg(srv.tcp_addr), "-P", "0"]);
    assert_eq!(code, 2, "{err}");
}

/// `Udp RcvbufErrors` of namespace `ns`.
fn rcvbuf_errors(ns: &lab::netns::Netns) -> u64 {
    let snmp = ns.exec(&["cat", "/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&snmp.stdout).to_string();
    let udp: Vec<&str> = text.lines().filter(|l| l.starts_with("Udp:")).collect();
    let i = udp[0]
        .split_whitespace()
        .position(|n| n == "RcvbufErrors")
        .unwrap();
    udp[1].split_whitespace().nth(i).unwrap().parse().unwrap()
}

#[test]
fn udp_loss_in_a_local_receivers_buffer_is_reported_as_such() {
    require_root!();
    let _g = timing_lock();
    // Its own namespace: the counter moves only for this test.
    let ns = lab::netns::Netns::new("ur");
    let srv = ns.run_in(|| server(None, None, None));
    let addr = addr_arg(srv.tcp_addr);
    let before = rcvbuf_errors(&ns);
    // Faster than one server thread reads on a loaded machine: the socket buffer overflows.
    let out = ns.latscope(&["stream", &addr, "-u", "-b", "4G", "-d", "1s", "--json"]);
    let after = rcvbuf_errors(&ns);
    let doc = json_checked(&String::from_utf8_lossy(&out.stdout), "stream");
    assert_eq!(
        out.status.code(),
        Some(findings_code(&doc)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let udp = &doc["results"][0]["udp"];
    let lost = u(&udp["lost"]);
    let in_rcvbuf = u(&udp["lost_in_rcvbuf"]);
    assert_eq!(in_rcvbuf, (after - before).min(lost), "{udp}");
    eprintln!("lost {lost}, in the receiver's buffer {in_rcvbuf}");
}

#[test]
fn a_small_client_receive_buffer_limits_the_servers_sender() {
    // How long the default buffers hold the sender back is how far the reader lags: beside the
    // pool's other tests a loopback reader let them fill 54% of the time (against 90% with
    // 4 KiB), on a quiet machine far less. The comparison needs the CPUs: run alone.
    let _serial = timing_lock();
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    let small = stream_json(&[&addr, "-t", "1s", "-R", "--rcvbuf", "4k"]);
    let r = &small["results"][0];
    // The server's sending socket (its tcp_info, reported at the end of the test): held back
    // by the client's window for a material share of the time it had data to send. How much
    // depends on how fast the client reads (on an idle loopback the window reopens within
    // microseconds: 18–31% measured on a quiet machine, a fresh-clone CI run 18%; 56–80% on a
    // loaded one), so the share is compared with the same transfer into default buffers below,
    // and the window's effect is measured where it is plainest: the rate it allows.
    let l = &r["tcp"]["limits"];
    let busy = u(&l["busy_us"]);
    let small_share = u(&l["rwnd_limited_us"]) as f64 / busy.max(1) as f64;
    assert!(
        small_share >= 0.1,
        "receive-window-limited {:.0}% of {busy} µs: {l}",
        small_share * 100.0
    );
    // The client's receiving socket: a small buffer, a small advertised window.
    let rx = &r["receiver_limits"];
    assert!(u(&rx["rcvbuf_bytes"]) <= 16 << 10, "{rx}");
    let small_wnd = u(&rx["rcv_wnd"]);
    assert!(small_wnd <= 16 << 10, "{rx}");
    // Default buffers advertise a window many times larger, and hold the sender back far less.
    let big = stream_json(&[&addr, "-t", "1s", "-R"]);
    let big_wnd = u(&big["results"][0]["receiver_limits"]["rcv_wnd"]);
    assert!(big_wnd > 8 * small_wnd, "{big_wnd} vs {small_wnd}");
    let bl = &big["results"][0]["tcp"]["limits"];
    let big_share = u(&bl["rwnd_limited_us"]) as f64 / u(&bl["busy_us"]).max(1) as f64;
    assert!(
        big_share * 2.0 <= small_share,
        "default buffers {:.0}% against {:.0}% with 4 KiB: {bl}",
        big_share * 100.0,
        small_share * 100.0
    );
    // A 4 KiB window per round trip caps the rate: at most half of what default buffers carry
    // on the same loopback (1.4 Gbit/s against 18–32 measured on a quiet machine).
    let rate = |doc: &serde_json::Value| doc["results"][0]["rate_bps"].as_f64().unwrap();
    eprintln!(
        "4 KiB: {:.0}% window-limited, {:.2} Gbit/s; default buffers: {:.0}%, {:.2} Gbit/s",
        small_share * 100.0,
        rate(&small) / 1e9,
        big_share * 100.0,
        rate(&big) / 1e9
    );
    assert!(
        rate(&small) * 2.0 <= rate(&big),
        "4 KiB: {:.2} Gbit/s, default buffers {:.2} Gbit/s",
        rate(&small) / 1e9,
        rate(&big) / 1e9
    );
}

//! Stall detection on captures made here: a split-response server with Nagle on (every slow
//! transaction flagged, the first of each connection not), the same with TCP_NODELAY (nothing
//! flagged), and a server that thinks before replying (think time, not Nagle).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::time::Duration;

use lab::wire::{Bg, Pattern, TempDir, analyze_json, http_client, http_server};
use serde_json::Value;

const CONNS: usize = 2;
const REQS: usize = 5;

fn capture_scenario(pattern: Pattern) -> (TempDir, std::path::PathBuf, Vec<Duration>) {
    let dir = TempDir::new();
    let file = dir.path("lab.pcap");
    let (addr, server) = http_server(pattern, CONNS);
    let filter = format!("tcp port {}", addr.port());
    let cap = Bg::latscope_capture_lo(None, &file, &filter);
    let lat = http_client(addr, CONNS, REQS);
    server.join().unwrap();
    let out = cap.stop();
    assert!(
        out.status.code() == Some(130), // Ctrl-C ended it
        "capture failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, file, lat)
}

fn kinds(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

fn conns(v: &Value) -> Vec<Value> {
    let mut c = v["top_connections"].as_array().unwrap().clone();
    c.sort_by_key(|c| c["id"].as_u64());
    c
}

#[test]
fn nagle_split_response_every_slow_transaction_flagged() {
    require_root!();
    let (_dir, file, lat) = capture_scenario(Pattern::SplitNagle);
    let (code, v) = analyze_json(&file, &[]);
    assert_eq!(code, 1, "findings → exit 1");
    assert_eq!(v["connections"], CONNS as u64);
    assert_eq!(v["transactions"], (CONNS * REQS) as u64);
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "nagle_delayed_ack", "{:#}", v["findings"]);
    for c in conns(&v) {
        let tx = c["transactions"].as_array().unwrap();
        assert_eq!(tx.len(), REQS);
        // The first exchange: the client is still in quick-ack mode, so nothing waits.
        assert!(
            tx[0]["stall"].is_null(),
            "first transaction flagged: {:#}",
            tx[0]
        );
        for (i, t) in tx.iter().enumerate() {
            let dur = t["duration_ns"].as_u64().unwrap();
            let think = t["think_ns"].as_u64().unwrap();
            let flagged = t["stall"] == "nagle_delayed_ack";
            // Linux delays the ACK ≥ 40 ms once the client left quick-ack mode; a slow
            // transaction that is not server think time (scheduling on this shared machine) must
            // be the Nagle stall, and a flagged one must have cost that delay.
            if i > 0 || (dur >= 30_000_000 && think < 5_000_000) {
                assert!(
                    flagged,
                    "transaction {i} of conn {} not flagged: {t:#}",
                    c["id"]
                );
            }
            if flagged {
                assert!(dur >= 30_000_000, "flagged but fast: {t:#}");
                assert!(t["stall_lost_ns"].as_u64().unwrap() >= 30_000_000);
            }
            assert_eq!(t["http_request"], format!("GET /{i} HTTP/1.1"));
        }
    }
    assert_eq!(f["count"].as_u64().unwrap(), (CONNS * (REQS - 1)) as u64);
    // The client saw the same: its slow requests are the flagged ones.
    let slow_measured = lat
        .iter()
        .filter(|d| **d >= Duration::from_millis(30))
        .count();
    assert!(slow_measured >= CONNS * (REQS - 1), "client saw {lat:?}");
    // The ladder marks the stall.
    let out = std::process::Command::new(lab::wire::BIN)
        .arg("analyze")
        .arg(&file)
        .args(["--conn", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("STALL Nagle x delayed ACK"), "{text}");
    assert!(text.contains("delayed ACK ("), "{text}");
}

#[test]
fn nodelay_nothing_flagged() {
    require_root!();
    let (_dir, file, _) = capture_scenario(Pattern::SplitNoDelay);
    let (code, v) = analyze_json(&file, &[]);
    let k = kinds(&v);
    assert!(
        !k.iter()
            .any(|k| k == "nagle_delayed_ack" || k == "delayed_ack" || k == "cork"),
        "{:#}",
        v["findings"]
    );
    assert_eq!(v["transactions"], (CONNS * REQS) as u64);
    for c in conns(&v) {
        for t in c["transactions"].as_array().unwrap() {
            assert!(t["stall"].is_null() || t["stall"] == "think_time", "{t:#}");
        }
    }
    if k.is_empty() {
        assert_eq!(code, 0);
    }
}

#[test]
fn think_time_is_not_nagle() {
    require_root!();
    let (_dir, file, _) = capture_scenario(Pattern::Think(Duration::from_millis(60)));
    let (code, v) = analyze_json(&file, &[]);
    assert_eq!(code, 1);
    assert_eq!(
        kinds(&v),
        vec!["think_time".to_string()],
        "{:#}",
        v["findings"]
    );
    let f = &v["findings"][0];
    assert_eq!(
        f["count"],
        (CONNS * REQS) as u64,
        "{:#}\nundecided: {:#}\n{:#}",
        v["findings"],
        v["undecided"],
        v["top_connections"]
    );
    let mean = f["lost_ns"].as_u64().unwrap() / (CONNS * REQS) as u64;
    assert!(
        (55_000_000..200_000_000).contains(&mean),
        "mean think {mean} ns"
    );
    for c in conns(&v) {
        for t in c["transactions"].as_array().unwrap() {
            assert_eq!(t["stall"], "think_time");
            assert!(t["think_ns"].as_u64().unwrap() >= 55_000_000);
        }
    }
}

//! latscope diagnose on URL targets served by small in-test HTTP servers with a known fault:
//! the quick-ack experiment runs through the HTTP engine, the request is broken into phases,
//! latency under load comes from the HTTP engine's own ramp, and server time before the first
//! byte is named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lab::diagnose::{json as diagnose, step};
use lab::http::{TestServer, read_request};
use lab::*;

fn distribution_p50(doc: &serde_json::Value, name: &str) -> u64 {
    doc["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d[0] == name)
        .unwrap_or_else(|| panic!("no distribution {name}: {doc}"))[1]["p50_ns"]
        .as_u64()
        .unwrap()
}

/// 15 ms before each response on a loopback path: server application time, named as such
/// with its share of the budget, never "no latency problem found" (issue 15 item 3); the
/// request's phases and the responsiveness under the HTTP engine's load are in the report
/// (item 6), and the quick-ack experiment ran through the HTTP engine and changed nothing
/// (item 1).
#[test]
fn server_time_before_the_first_byte_is_named() {
    let _serial = lab::timing_lock();
    let srv = TestServer::start(|mut s: TcpStream| {
        while read_request(&mut s) {
            std::thread::sleep(Duration::from_millis(15));
            let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
            if s.write_all(r).is_err() {
                return;
            }
        }
    });
    let (code, doc) = diagnose(&srv.url(), &["-c", "4"]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["findings"][0]["rule"], "think_time", "{doc}");
    assert_eq!(doc["findings"][0]["side"], "server");
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("server application time"), "{verdict}");
    let app = doc["budget"]["server_app_ns"]
        .as_u64()
        .expect("server_app_ns");
    assert!((14_000_000..60_000_000).contains(&app), "{doc}");
    let ph = &doc["phases"];
    assert!(ph["ttfb_ns"].as_u64().unwrap() >= 14_000_000, "{doc}");
    assert!(ph["requests"].as_u64().unwrap() >= 1);
    assert!(ph["tls_ns"].is_null());
    assert_eq!(step(&doc, "quick-ack experiment")["status"], "ran", "{doc}");
    let q = distribution_p50(&doc, "quick-ack experiment");
    assert!(
        q >= 14_000_000,
        "TCP_QUICKACK cannot remove think time: {doc}"
    );
    assert_eq!(step(&doc, "latency under load")["status"], "ran", "{doc}");
    let rpm = &doc["responsiveness"];
    assert!(rpm["idle_rpm"].as_f64().unwrap() > 0.0, "{doc}");
    assert!(
        rpm["load"].as_str().unwrap().contains("concurrent GET"),
        "{doc}"
    );
}

/// A server with Nagle on that writes its head and body in two calls, on loopback (MSS
/// ~65 KB): the quick-ack experiment through the HTTP engine removes the ~40 ms (item 1), and
/// the finding is Nagle × delayed ACK fixed on the server (item 2).
#[test]
fn nagle_on_an_http_server_is_fixed_on_the_server() {
    let _serial = lab::timing_lock();
    let srv = TestServer::start(|mut s: TcpStream| {
        s.set_nodelay(false).unwrap();
        while read_request(&mut s) {
            let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
            if s.write_all(head).is_err() || s.write_all(b"hello").is_err() {
                return;
            }
        }
    });
    let (code, doc) = diagnose(&srv.url(), &["-c", "4"]);
    assert_eq!(code, 1, "{doc}");
    let top = &doc["findings"][0];
    assert_eq!(top["rule"], "nagle_delayed_ack", "{doc}");
    assert_eq!(top["side"], "server");
    assert_eq!(step(&doc, "quick-ack experiment")["status"], "ran", "{doc}");
    let single = distribution_p50(&doc, "one request");
    let quick = distribution_p50(&doc, "quick-ack experiment");
    assert!(single >= 30_000_000, "{doc}");
    assert!(quick * 5 < single, "quick-ack removes the stall: {doc}");
    assert!(
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["rule"] != "delayed_ack" || !f["caused_by"].is_null()),
        "{doc}"
    );
}

/// A server that accepts and reads but never answers: the run ends within its --max-time
/// (issue 15 item 9), the request steps say they ran out of time, the steps it had no time for
/// are listed as cut short, and the target is "not measured" (exit 3), not "no problem".
#[test]
fn a_hanging_server_is_bounded_in_time() {
    let _serial = lab::timing_lock();
    let srv = TestServer::start(|mut s: TcpStream| {
        let _ = read_request(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let t = Instant::now();
    let (code, out, err) = run(&[
        "diagnose",
        &srv.url(),
        "-d",
        "1s",
        "--max-time",
        "3s",
        "--json",
    ]);
    let took = t.elapsed();
    assert_eq!(code, 3, "{err}\n{out}");
    // The request-phases step alone waits 2.5 s for an answer: by then the 3 s are spent and
    // the later steps are not started.
    assert!(took < Duration::from_secs(9), "took {took:?}");
    let doc = json_checked(&out, "diagnose");
    assert_eq!(doc["max_time_ms"], 3000);
    assert_eq!(step(&doc, "one request")["status"], "failed", "{doc}");
    // Steps the budget stopped say so (failed with "cut short at its … budget", or cut short).
    assert!(
        doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["status"] == "cut_short"
                || s["detail"].as_str().unwrap().contains("cut short at its")),
        "{doc}"
    );
    assert!(
        doc["verdict"].as_str().unwrap().starts_with("not measured"),
        "{doc}"
    );
}

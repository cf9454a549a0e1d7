//! The seeds' case with real nginx: `tcp_nodelay off` + `sendfile on` is diagnosed as Nagle ×
//! delayed ACK on the server; `tcp_nodelay on` gets no latency finding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use lab::nginx::{Nginx, NginxConf};
use lab::*;

fn diagnose_url(url: &str) -> (i32, serde_json::Value) {
    let (code, out, err) = run(&["diagnose", url, "-d", "1s", "-c", "4", "--json"]);
    assert!(code == 0 || code == 1, "diagnose failed ({code}): {err}");
    (code, json_checked(&out, "diagnose"))
}

#[test]
fn nginx_nagle_and_nodelay() {
    require_root!();
    let _serial = lab::timing_lock();
    let slow = Nginx::start(NginxConf {
        tcp_nodelay: false,
        sendfile: true,
        ..NginxConf::default()
    });
    let (code, doc) = diagnose_url(&slow.url("/index.html"));
    assert_eq!(doc["target_kind"], "http");
    assert_eq!(code, 1, "{doc}");
    let top = &doc["findings"][0];
    assert_eq!(top["rule"], "nagle_delayed_ack", "{doc}");
    assert_eq!(top["side"], "server");
    assert!(top["fix"].as_str().unwrap().contains("tcp_nodelay on"));
    let evidence = top["evidence"].to_string();
    assert!(evidence.contains("on the wire"), "{evidence}");
    assert!(
        evidence.contains("nginx") && evidence.contains("TCP_NODELAY off"),
        "nginx's own socket: {evidence}"
    );

    let fast = Nginx::start(NginxConf {
        tcp_nodelay: true,
        sendfile: true,
        ..NginxConf::default()
    });
    let (code, doc) = diagnose_url(&fast.url("/index.html"));
    assert_eq!(code, 0, "{doc}");
    assert!(doc["findings"].as_array().unwrap().is_empty(), "{doc}");
    assert!(doc["budget"]["single_request_ns"].as_u64().unwrap() < 2_000_000);
}

/// diagnose on an https:// URL checks the certificate as `http` does (it skipped the check
/// silently and had no -k/--cacert): a self-signed certificate is refused in words, trusted
/// with --cacert, and with -k the run goes on and its output says the check is off.
#[test]
fn https_is_verified_unless_insecure_and_the_output_says_which() {
    let _serial = lab::timing_lock();
    let ss = lab::http::make_self_signed();
    let ng = Nginx::start(NginxConf {
        tls: Some((ss.cert.clone(), ss.key.clone())),
        ..NginxConf::default()
    });
    let url = format!("https://localhost:{}/", ng.port);
    let cert = ss.cert.to_str().unwrap();
    let quick = ["-d", "300ms", "--no-load", "--max-time", "15s"];
    let diagnose = |extra: &[&str]| {
        let mut args = vec!["diagnose", url.as_str()];
        args.extend(quick);
        args.extend(extra);
        run(&args)
    };
    let (code, out, err) = diagnose(&["--cacert", cert, "--json"]);
    assert!(code == 0 || code == 1, "{code}: {err}");
    let doc = json_checked(&out, "diagnose");
    assert_eq!(doc["certificate"], "verified", "{doc}");
    assert!(doc["phases"].is_object(), "the requests were made: {doc}");

    let (code, out, err) = diagnose(&[]);
    assert_eq!(code, 3, "not measured without the certificate: {out}{err}");
    assert!(
        out.contains("self-signed") && out.contains("--cacert FILE"),
        "{out}{err}"
    );

    let (code, out, err) = diagnose(&["-k"]);
    assert!(code == 0 || code == 1, "{code}: {err}");
    assert!(
        out.contains("certificate is not verified (--insecure)"),
        "{out}"
    );
}

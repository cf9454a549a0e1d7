//! `latscope_http::request_phases`: one request broken into DNS, connect, TLS, time to first
//! byte and transfer, against nginx (http and https) and small servers that stall in one phase.

#![allow(clippy::unwrap_used)]

use crate::lab;

use std::io::Write;
use std::time::{Duration, Instant};

use lab::http::{Nginx, NginxConf, TestServer, free_port, make_certs, read_request};
use latscope_http::handshake::HandshakeFailure;
use latscope_http::tls::CertIssue;
use latscope_http::{HttpError, Options, Phase, request_phases};

const MS: u64 = 1_000_000;

#[test]
fn plain_and_tls_requests_to_nginx() {
    let _serial = lab::timing_lock();
    let ng = Nginx::start(NginxConf::default());
    let p = request_phases(&Options::new(ng.url("/"))).unwrap();
    eprintln!("http: {p:?}");
    assert_eq!((p.status, p.body_bytes), (200, 612));
    assert_eq!(p.tls_ns, None);
    assert_eq!(p.addr.port(), ng.port);
    assert!(p.connect_ns > 0 && p.ttfb_ns > 0, "{p:?}");
    assert!(p.total_ns() < 2_000 * MS, "{p:?}");
    assert_eq!(
        p.total_ns(),
        p.dns_ns + p.connect_ns + p.ttfb_ns + p.transfer_ns
    );

    let certs = make_certs();
    let tls = Nginx::start(NginxConf {
        tls: Some((certs.cert.clone(), certs.key.clone())),
        ..Default::default()
    });
    let o = Options {
        ca_files: vec![certs.ca.clone()],
        ..Options::new(tls.url("/"))
    };
    let p = request_phases(&o).unwrap();
    eprintln!("https: {p:?}");
    assert_eq!((p.status, p.body_bytes), (200, 612));
    // An RSA-2048 handshake costs the server a signature: far more than a loopback connect.
    let tls_ns = p.tls_ns.unwrap();
    assert!(tls_ns > p.connect_ns, "{p:?}");
    // Without the CA the handshake fails, and says why and what to do about it.
    let e = request_phases(&Options::new(tls.url("/"))).unwrap_err();
    assert!(
        matches!(
            e,
            HttpError::Handshake {
                failure: HandshakeFailure::Certificate(CertIssue::UnknownIssuer),
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.is_target() && e.to_string().contains("--cacert FILE"),
        "{e}"
    );
}

/// A server that waits 150 ms before the head, then 100 ms between head and body: the wait
/// before the first byte is time to first byte, the one after it is transfer.
#[test]
fn stalls_land_in_their_phase() {
    let _serial = lab::timing_lock();
    let srv = TestServer::start(|mut s| {
        if read_request(&mut s) {
            std::thread::sleep(Duration::from_millis(150));
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
            std::thread::sleep(Duration::from_millis(100));
            let _ = s.write_all(b"hello");
        }
    });
    let url = format!("http://localhost:{}/", srv.port);
    let p = request_phases(&Options::new(url)).unwrap();
    eprintln!("{p:?}");
    assert_eq!((p.status, p.body_bytes), (200, 5));
    assert!((150 * MS..1_000 * MS).contains(&p.ttfb_ns), "{p:?}");
    assert!((100 * MS..1_000 * MS).contains(&p.transfer_ns), "{p:?}");
    assert!(p.connect_ns < 100 * MS, "{p:?}");
    assert!(p.dns_ns > 0, "localhost is resolved: {p:?}");
}

#[test]
fn refused_and_silent_servers_are_errors_within_the_timeout() {
    let _serial = lab::timing_lock();
    let port = free_port();
    let e = request_phases(&Options::new(format!("http://127.0.0.1:{port}/"))).unwrap_err();
    assert!(matches!(e, HttpError::Connect { .. }), "{e}");

    let silent = TestServer::start(|mut s| {
        read_request(&mut s);
        std::thread::sleep(Duration::from_secs(3));
    });
    let o = Options {
        timeout: Duration::from_millis(300),
        ..Options::new(silent.url())
    };
    let t = Instant::now();
    let e = request_phases(&o).unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(
            &e,
            HttpError::Exchange {
                phase: Phase::FirstByte,
                source
            } if source.kind() == std::io::ErrorKind::TimedOut
        ),
        "{e}"
    );
    assert!(
        (Duration::from_millis(300)..Duration::from_secs(2)).contains(&took),
        "{took:?}"
    );
}

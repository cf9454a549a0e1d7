//! `[peers] dns`: the agent follows a headless Service's records as pods come and go. The agent
//! runs in-process with a stub resolver whose answers the test changes (loopback addresses, so
//! `include_self`); the fleet is read back from /metrics. One test in this binary: it stops the
//! agent by raising SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct NoDiagnose;

impl latscope_agent::Diagnoser for NoDiagnose {
    fn diagnose(
        &self,
        _: &latscope_agent::Ask,
        _: &std::sync::atomic::AtomicBool,
    ) -> Result<latscope_agent::Diagnosis, String> {
        Err("not in this test".into())
    }
}

fn metrics(addr: SocketAddr) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The `target` labels of latscope_probes_total.
fn targets(page: &str) -> Vec<String> {
    let mut t: Vec<String> = page
        .lines()
        .filter(|l| l.starts_with("latscope_probes_total{"))
        .filter_map(|l| Some(l.split("target=\"").nth(1)?.split('"').next()?.to_string()))
        .collect();
    t.sort();
    t.dedup();
    t
}

#[test]
fn dns_peers_join_and_leave_with_the_records() {
    // 0.0.0.0: the port answers on every loopback address.
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
    let metrics_addr: SocketAddr = {
        let m = TcpListener::bind("127.0.0.1:0").unwrap();
        m.local_addr().unwrap()
    };
    let dir = std::env::temp_dir().join(format!("latscope-agent-dns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"{metrics_addr}\"\n[peers]\ndns = [\"mesh.monitoring.svc.cluster.local\"]\n\
             dns_refresh = \"1s\"\ninclude_self = true\n\
             measure = [{{ kind = \"connect\", port = {port}, interval = \"200ms\" }}]\n"
        ),
    )
    .unwrap();
    let answer: Arc<Mutex<Option<Vec<IpAddr>>>> =
        Arc::new(Mutex::new(Some(vec!["127.0.0.1".parse().unwrap()])));
    let a = answer.clone();
    let resolver: Arc<latscope_agent::dns::Resolver> = Arc::new(move |name: &str| {
        assert_eq!(name, "mesh.monitoring.svc.cluster.local");
        a.lock()
            .unwrap()
            .clone()
            .ok_or_else(|| std::io::Error::other("temporary failure in name resolution"))
    });
    let opts = latscope_agent::Options {
        config: cfg,
        listen: None,
    };
    let agent = std::thread::spawn(move || {
        latscope_agent::run_with(&opts, Arc::new(NoDiagnose), resolver).map_err(|e| e.to_string())
    });
    let wait = |want: &[&str], what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let page = metrics(metrics_addr);
            if targets(&page) == want {
                return page;
            }
            assert!(
                Instant::now() < deadline && !agent.is_finished(),
                "{what}: want {want:?}, have {:?}",
                targets(&page)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait(&["127.0.0.1"], "the first record");
    // A pod comes.
    *answer.lock().unwrap() = Some(vec![
        "127.0.0.1".parse().unwrap(),
        "127.0.0.2".parse().unwrap(),
    ]);
    wait(&["127.0.0.1", "127.0.0.2"], "a second record");
    // The resolver fails: the mesh stays as it was, and the failure is counted.
    *answer.lock().unwrap() = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = metrics(metrics_addr);
        if page.contains("latscope_agent_config_reloads_total{result=\"error\"}") {
            assert_eq!(targets(&page), ["127.0.0.1", "127.0.0.2"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DNS failure not counted:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A pod goes: its series go with it.
    *answer.lock().unwrap() = Some(vec!["127.0.0.2".parse().unwrap()]);
    wait(&["127.0.0.2"], "the first record gone");
    // SAFETY: the agent installed its handlers before it served the metrics we read.
    unsafe { libc::raise(libc::SIGTERM) };
    agent.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

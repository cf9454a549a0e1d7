//! The host's own view: socket findings of chosen local services, as metrics.
//!
//! Each `[[service]]` of the configuration is scanned on its own thread every `interval` with
//! `latscope sockets --port PORT`'s engine (crates/inspect: sock_diag, /proc, pidfd_getfd +
//! getsockopt, tcp_info) and exported as
//! `latscope_socket_finding{service,rule,severity}` = how many of the service's sockets have the
//! finding in the last scan (e.g. `rule="nagle-on-rr"` 120: Nagle on 120 request/response
//! connections), `latscope_service_sockets{service,state}` and
//! `latscope_socket_scans_total{service,result}`. A rule that no longer applies disappears from
//! the next scrape.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latscope_core::model::Meta;
use latscope_core::model::sockets::SocketsReport;
use latscope_inspect::scan::{Selection, scan};

use crate::config::Service;
use crate::metrics::Labels;
use crate::{Shared, log, stop_requested};

/// What one scan of a service found: sockets per state and sockets per (rule, severity).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceView {
    /// Sockets by state (`LISTEN`, `ESTAB`, …).
    pub sockets: BTreeMap<String, i64>,
    /// Sockets carrying each finding, by (rule, severity).
    pub findings: BTreeMap<(String, String), i64>,
    /// What the scan could not read (no CAP_SYS_PTRACE: no socket options, …).
    pub missing: Vec<String>,
}

/// Count a report's sockets and findings.
pub fn summarise(report: &SocketsReport) -> ServiceView {
    let mut v = ServiceView {
        missing: report.access.missing.clone(),
        ..ServiceView::default()
    };
    for s in &report.sockets {
        *v.sockets.entry(s.state.clone()).or_default() += 1;
        for f in &s.findings {
            let sev = format!("{:?}", f.severity).to_ascii_lowercase();
            *v.findings.entry((f.rule.clone(), sev)).or_default() += 1;
        }
    }
    v
}

/// Scan the sockets of a service's port once.
pub fn scan_service(port: u16) -> Result<ServiceView, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let meta = Meta::new("agent", env!("CARGO_PKG_VERSION"), now);
    scan(Selection::Port(port), meta)
        .map(|r| summarise(&r))
        .map_err(|e| e.to_string())
}

/// A service's scanning thread.
pub(crate) struct HostWorker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostWorker {
    pub fn start(service: Service, shared: Arc<Shared>) -> std::io::Result<HostWorker> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ls-sockets".into())
            .spawn(move || run(&service, &shared, &s))?;
        Ok(HostWorker {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop and join; the service's series are removed.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(service: &Service, shared: &Shared, stop: &AtomicBool) {
    let m = &shared.metrics;
    let svc = |extra: &[(&str, &str)]| -> Labels {
        let mut l = vec![("service".to_string(), service.name.clone())];
        l.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string())),
        );
        l
    };
    let mut last = ServiceView::default();
    let mut warned = false;
    loop {
        let started = Instant::now();
        match scan_service(service.port) {
            Ok(view) => {
                if !view.missing.is_empty() && !warned {
                    warned = true;
                    log(&format!(
                        "service {}: the socket scan cannot read {}",
                        service.name,
                        view.missing.join("; ")
                    ));
                }
                for state in last
                    .sockets
                    .keys()
                    .filter(|s| !view.sockets.contains_key(*s))
                {
                    m.service_sockets.remove(&svc(&[("state", state.as_str())]));
                }
                for (state, n) in &view.sockets {
                    m.service_sockets
                        .get_or_create(&svc(&[("state", state.as_str())]))
                        .set(*n);
                }
                for (rule, sev) in last
                    .findings
                    .keys()
                    .filter(|k| !view.findings.contains_key(*k))
                {
                    m.socket_finding
                        .remove(&svc(&[("rule", rule.as_str()), ("severity", sev.as_str())]));
                }
                for ((rule, sev), n) in &view.findings {
                    m.socket_finding
                        .get_or_create(&svc(&[("rule", rule.as_str()), ("severity", sev.as_str())]))
                        .set(*n);
                }
                m.socket_scans
                    .get_or_create(&svc(&[("result", "ok")]))
                    .inc();
                last = view;
            }
            Err(e) => {
                m.socket_scans
                    .get_or_create(&svc(&[("result", "error")]))
                    .inc();
                log(&format!(
                    "service {}: socket scan failed: {e}",
                    service.name
                ));
            }
        }
        let next = started + service.interval;
        loop {
            if stop_requested(stop) {
                for state in last.sockets.keys() {
                    m.service_sockets.remove(&svc(&[("state", state.as_str())]));
                }
                for (rule, sev) in last.findings.keys() {
                    m.socket_finding
                        .remove(&svc(&[("rule", rule.as_str()), ("severity", sev.as_str())]));
                }
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::park_timeout((next - now).min(Duration::from_secs(1)));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A listener with Nagle on (the default) in another process: a scan leaves out the
    /// process running it, as `latscope sockets` does.
    struct ChildListener(std::process::Child, u16);

    impl ChildListener {
        fn start() -> ChildListener {
            use std::io::BufRead;
            let mut c = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\ntime.sleep(60)",
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3 (scripts/setup.sh installs it)");
            let mut line = String::new();
            std::io::BufReader::new(c.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let port = line.trim().parse().unwrap();
            ChildListener(c, port)
        }
    }

    impl Drop for ChildListener {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_nagle_listener_is_counted() {
        let child = ChildListener::start();
        let _c = std::net::TcpStream::connect(("127.0.0.1", child.1)).unwrap();
        let v = scan_service(child.1).unwrap();
        assert_eq!(v.sockets.get("LISTEN"), Some(&1), "{v:?}");
        assert!(v.sockets.get("ESTAB").copied().unwrap_or(0) >= 1, "{v:?}");
        // Reading another process's socket options takes CAP_SYS_PTRACE.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "SKIP the finding check: not root, socket options may be unreadable ({:?})",
                v.missing
            );
            return;
        }
        let n = v
            .findings
            .iter()
            .find(|((r, _), _)| r == "nagle-on-listener")
            .map(|(_, n)| *n);
        assert_eq!(n, Some(1), "{v:?}");
        let port = child.1;
        drop(child);
        // The listener is gone: the next scan no longer has its finding.
        let v = scan_service(port).unwrap();
        assert!(!v.sockets.contains_key("LISTEN"), "{v:?}");
        assert!(
            !v.findings.keys().any(|(r, _)| r == "nagle-on-listener"),
            "{v:?}"
        );
    }
}

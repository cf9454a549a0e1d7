//! The server's end: answer an evidence request by running diagnose's server-side observers
//! (the same code the steps run when the server is on the client's host) on one local port,
//! for the requesting address's connections only, until `latscope serve` says the window is
//! over. Read-only: sockets are inspected, counters read, eBPF programs attached for the
//! window and detached when the observation is dropped.

use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latscope_core::model::evidence::{EVIDENCE_VERSION, EvidenceRequest, Observed, ServerEvidence};
use latscope_net::proto::RefusalCode;
use latscope_net::serve::evidence::{Done, EvidenceService, Observation, Refusal};

use crate::evidence::NsCounters;
use crate::steps::step::NotRun;
use crate::steps::{counters, cpu, kernel_stack, server_sockets};

/// Which local ports an agent reports on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Any port something listens on in the agent's network namespace.
    Any,
    /// Only these.
    Only(Vec<u16>),
}

impl Ports {
    /// `all`, or a comma-separated list of ports (`80,443`).
    pub fn parse(s: &str) -> Result<Ports, String> {
        if s.trim() == "all" {
            return Ok(Ports::Any);
        }
        let ports = s
            .split(',')
            .map(|p| match p.trim().parse::<u16>() {
                Ok(0) | Err(_) => Err(format!(
                    "'{}' is not a port: list ports 1–65535 separated by commas, or `all`",
                    p.trim()
                )),
                Ok(n) => Ok(n),
            })
            .collect::<Result<Vec<u16>, String>>()?;
        Ok(Ports::Only(ports))
    }

    /// In words, for start-up lines: `port 80`, `ports 80,443`, `any local port`.
    pub fn describe(&self) -> String {
        match self {
            Ports::Any => "any local port".to_string(),
            Ports::Only(l) if l.len() == 1 => format!("port {self}"),
            Ports::Only(_) => format!("ports {self}"),
        }
    }

    fn allows(&self, port: u16) -> bool {
        match self {
            Ports::Any => true,
            Ports::Only(list) => list.contains(&port),
        }
    }
}

impl std::fmt::Display for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ports::Any => f.write_str("all"),
            Ports::Only(l) => {
                let s: Vec<String> = l.iter().map(u16::to_string).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

/// Answers evidence requests for the ports it is configured with.
#[derive(Debug)]
pub struct EvidenceServer {
    pub ports: Ports,
}

impl EvidenceServer {
    pub fn new(ports: Ports) -> Arc<EvidenceServer> {
        Arc::new(EvidenceServer { ports })
    }
}

/// The inode of this process's network namespace (0 if unreadable: then any namespace).
fn own_netns() -> u64 {
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

impl EvidenceService for EvidenceServer {
    fn begin(&self, request: &[u8], peer: IpAddr) -> Result<Box<dyn Observation>, Refusal> {
        let req =
            EvidenceRequest::parse(request).map_err(|e| (RefusalCode::Invalid, e.to_string()))?;
        if !self.ports.allows(req.port) {
            return Err((
                RefusalCode::Limit,
                format!(
                    "port {} is not one this server reports on (its evidence ports: {})",
                    req.port, self.ports
                ),
            ));
        }
        let netns = own_netns();
        // Something must listen there, and be readable: no evidence about a port nobody owns.
        cpu::listeners(req.port, netns).map_err(|_| {
            (
                RefusalCode::Invalid,
                format!(
                    "nothing this server can read listens on port {} (a listener of another user needs CAP_SYS_PTRACE)",
                    req.port
                ),
            )
        })?;
        Ok(Box::new(Observing::start(req.port, peer, netns)))
    }
}

/// The observers running for one request.
struct Observing {
    port: u16,
    peer: IpAddr,
    netns: u64,
    began: Instant,
    counters: Result<NsCounters, String>,
    scanner: Scanner,
    cpu: Result<cpu::Watching, NotRun>,
    stack: Result<latscope_ebpf::Session, NotRun>,
}

/// A thread scanning the port's sockets until told to stop; it keeps one scan (the last that
/// read the peer's connections' options, else the last), so memory stays that of one scan.
struct Scanner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<server_sockets::Scan, String>>>,
}

/// How often the scanner looks (as the local step does).
const SCAN_EVERY: Duration = Duration::from_millis(400);

impl Scanner {
    fn start(port: u16, peer: IpAddr, netns: u64) -> Scanner {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("evidence-scan".into())
            .spawn(move || scan_until(&flag, port, peer, netns))
            .ok();
        Scanner { stop, thread }
    }

    fn finish(mut self) -> Result<server_sockets::Scan, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the socket scan panicked".into()),
            None => Err("could not start a scan thread".into()),
        }
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn scan_until(
    stop: &AtomicBool,
    port: u16,
    peer: IpAddr,
    netns: u64,
) -> Result<server_sockets::Scan, String> {
    let mut kept: Option<server_sockets::Scan> = None;
    loop {
        let s = server_sockets::scan_peer(port, peer, netns).map_err(|e| e.to_string())?;
        let better = server_sockets::has_options(&s)
            || !kept.as_ref().is_some_and(server_sockets::has_options);
        if better {
            kept = Some(s);
        }
        let next = Instant::now() + SCAN_EVERY;
        while Instant::now() < next {
            if stop.load(Ordering::Relaxed) {
                return kept.ok_or_else(|| "no scan finished".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Observing {
    fn start(port: u16, peer: IpAddr, netns: u64) -> Observing {
        Observing {
            port,
            peer,
            netns,
            began: Instant::now(),
            counters: counters::read("self"),
            scanner: Scanner::start(port, peer, netns),
            cpu: cpu::watch(port, netns, false),
            stack: kernel_stack::session(port, None, Some(peer), (netns != 0).then_some(netns)),
        }
    }
}

fn observed<T>(r: Result<T, NotRun>) -> Observed<T> {
    match r {
        Ok(v) => Observed::Ran(v),
        Err(NotRun::Skipped(w)) => Observed::Skipped(w),
        Err(NotRun::Failed(w)) => Observed::Failed(w),
    }
}

impl Observation for Observing {
    fn finish(self: Box<Self>, done: Option<Done>) -> serde_json::Value {
        let o = *self;
        let sockets = match o.scanner.finish() {
            Ok(scan) => observed(server_sockets::summarise(&scan, o.port, o.netns)),
            Err(e) => Observed::Failed(e),
        };
        let cpu = observed(o.cpu.and_then(cpu::finish_watch));
        let kernel_stack = observed(o.stack.and_then(kernel_stack::summarise));
        let counters = match (o.counters, counters::read("self")) {
            (Ok(before), Ok(after)) => Observed::Ran(after.since(&before)),
            (Err(e), _) | (_, Err(e)) => Observed::Failed(e),
        };
        let evidence = ServerEvidence {
            version: EVIDENCE_VERSION,
            port: o.port,
            peer: o.peer,
            observed_ns: o.began.elapsed().as_nanos() as u64,
            done_unix_ns: done.map(|d| d.unix_ns),
            answer_delay_ns: done.map(|d| d.at.elapsed().as_nanos() as u64),
            sockets,
            cpu,
            kernel_stack,
            counters,
        };
        serde_json::to_value(&evidence).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse() {
        assert_eq!(Ports::parse("all"), Ok(Ports::Any));
        assert_eq!(Ports::parse("80, 443"), Ok(Ports::Only(vec![80, 443])));
        assert!(Ports::parse("0").is_err());
        assert!(Ports::parse("80,http").is_err());
        assert!(Ports::parse("").is_err());
        assert!(Ports::Only(vec![80]).allows(80));
        assert!(!Ports::Only(vec![80]).allows(22));
        assert_eq!(Ports::Only(vec![80, 443]).to_string(), "80,443");
        assert_eq!(Ports::Only(vec![80, 443]).describe(), "ports 80,443");
        assert_eq!(Ports::Only(vec![80]).describe(), "port 80");
        assert_eq!(Ports::Any.describe(), "any local port");
    }

    #[test]
    fn requests_for_unlisted_ports_or_other_fields_are_refused() {
        let s = EvidenceServer {
            ports: Ports::Only(vec![80]),
        };
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let code = |body: &[u8]| s.begin(body, peer).err().map(|r| r.0);
        assert_eq!(
            code(br#"{"version":1,"port":22}"#),
            Some(RefusalCode::Limit)
        );
        assert_eq!(
            code(br#"{"version":1,"port":80,"pid":1}"#),
            Some(RefusalCode::Invalid)
        );
        assert_eq!(code(b"{"), Some(RefusalCode::Invalid));
    }
}

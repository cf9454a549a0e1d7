//! One probe of one measurement, through latscope's engines: the ping engine (SYN and connect
//! probers), `rr` against `latscope serve`, the HTTP phase timer, and the trace engine. Each
//! call is one sample (or one failure); the agent's schedule decides when.

use std::io;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use latscope_core::model::Meta;
use latscope_core::model::ping::{ProbeMode, ReplyKind};
use latscope_core::model::rr::{ServerBehaviour, SockOpts, Transport};
use latscope_net::NetError;
use latscope_net::rr::{Peer, RrConfig, StopAfter};
use latscope_net::sock::Target as NetTarget;
use latscope_probe::ping::{PingContext, PingOptions};
use latscope_probe::trace::TraceOptions;
use latscope_probe::{Family, ProbeError, ProbeRequest, Prober};

use crate::config::{Kind, Measure};

/// Why a probe gave no sample: the `reason` label of `latscope_probe_failures_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The name did not resolve.
    Dns,
    /// No answer within the timeout (a lost probe).
    Timeout,
    /// The port is closed (RST, ECONNREFUSED).
    Refused,
    /// No route, host or network unreachable (ICMP errors).
    Unreachable,
    /// The server answered, but wrongly (not a latscope server, HTTP 5xx, reset).
    Error,
}

impl Failure {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Dns => "dns",
            Failure::Timeout => "timeout",
            Failure::Refused => "refused",
            Failure::Unreachable => "unreachable",
            Failure::Error => "error",
        }
    }
}

/// One hop of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Hop {
    /// TTL.
    pub ttl: u8,
    /// Who answered (None: no answer).
    pub from: Option<String>,
    /// RTT, ns, when answered.
    pub rtt_ns: Option<u64>,
}

/// What one probe found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// (layer, ns) of each part timed: the `layer` label.
    pub layers: Vec<(&'static str, u64)>,
    /// Why there is no sample, if there is none.
    pub failure: Option<Failure>,
    /// A short description of the failure, for logs and /probe.
    pub detail: String,
    /// Trace: every hop.
    pub hops: Vec<Hop>,
}

impl Outcome {
    fn failed(f: Failure, detail: impl Into<String>) -> Outcome {
        Outcome {
            failure: Some(f),
            detail: detail.into(),
            ..Outcome::default()
        }
    }

    /// The figure an SLO looks at: the total of a request (`total` for HTTP), else the only
    /// layer.
    pub fn headline_ns(&self) -> Option<u64> {
        self.layers
            .iter()
            .find(|(l, _)| *l == "total")
            .or_else(|| self.layers.first())
            .map(|(_, ns)| *ns)
    }
}

fn probe_failure(e: &ProbeError) -> Failure {
    match e {
        ProbeError::Unreachable { reason, .. } if reason.contains("resolve") => Failure::Dns,
        ProbeError::Unreachable { .. } => Failure::Unreachable,
        _ => Failure::Error,
    }
}

fn io_failure(e: &io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => Failure::Refused,
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Failure::Timeout,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => Failure::Unreachable,
        _ => Failure::Error,
    }
}

/// A measurement's state between probes: the open prober of SYN/connect pings (opening a raw
/// socket costs more than a probe), reopened after a loss so a late answer can never be taken
/// for the next probe's.
#[derive(Default)]
pub struct Runner {
    prober: Option<(IpAddr, Box<dyn Prober>)>,
    /// The next probe's sequence number (ids never repeat within 65536 probes).
    seq: u64,
    /// The address last chosen for the target's name (RFC 8305 race) and when: kept for
    /// [`RECHOOSE_AFTER`] or until a probe fails, so a name with several addresses does not
    /// cost a connection race per probe.
    chosen: Option<(String, IpAddr, Instant)>,
}

/// How long a SYN/connect ping keeps the address a race chose before racing again.
const RECHOOSE_AFTER: Duration = Duration::from_secs(60);

impl Runner {
    /// The address to probe: the cached choice, or a new RFC 8305 race to the probe's port.
    fn address(&mut self, address: &str, m: &Measure) -> Result<IpAddr, ProbeError> {
        if let Some((name, ip, at)) = &self.chosen
            && name == address
            && at.elapsed() < RECHOOSE_AFTER
        {
            return Ok(*ip);
        }
        let (ip, _) = latscope_probe::choose(address, Family::Any, m.port, m.timeout)?;
        self.chosen = Some((address.to_string(), ip, Instant::now()));
        Ok(ip)
    }

    /// Run one probe of `m` against `address`.
    pub fn run(&mut self, address: &str, m: &Measure, stop: &AtomicBool) -> Outcome {
        match m.kind {
            Kind::Syn | Kind::Connect => self.ping(address, m, stop),
            Kind::Rr => rr(address, m, stop),
            Kind::Http => http(address, m),
            Kind::Trace => trace(address, m, stop),
        }
    }

    fn ping(&mut self, address: &str, m: &Measure, stop: &AtomicBool) -> Outcome {
        let ip = match self.address(address, m) {
            Ok(ip) => ip,
            Err(e) => return Outcome::failed(probe_failure(&e), e.to_string()),
        };
        if self.prober.as_ref().is_none_or(|(a, _)| *a != ip) {
            let req = ProbeRequest {
                mode: Some(if m.kind == Kind::Syn {
                    ProbeMode::Syn
                } else {
                    ProbeMode::Connect
                }),
                port: m.port,
                payload: 0,
                trace: false,
                kernel_timestamps: true,
            };
            match latscope_probe::open(ip, req) {
                Ok((p, _)) => self.prober = Some((ip, p)),
                Err(e) => return Outcome::failed(probe_failure(&e), e.to_string()),
            }
        }
        let Some((_, prober)) = self.prober.as_mut() else {
            return Outcome::failed(Failure::Error, "no prober");
        };
        let ctx = PingContext {
            meta: Meta::new("agent", env!("CARGO_PKG_VERSION"), 0),
            target: address.to_string(),
            address: ip,
            port: Some(m.port),
            mode_reason: String::new(),
            payload_bytes: 0,
        };
        let opts = PingOptions {
            count: Some(1),
            interval: m.interval,
            flood: false,
            timeout: m.timeout,
            keep_replies: 1,
            first_seq: self.seq,
        };
        self.seq = self.seq.wrapping_add(1) & 0xffff;
        let mut answer: Option<(ReplyKind, u64)> = None;
        let r = latscope_probe::ping::ping(prober.as_mut(), ctx, &opts, stop, &mut |r| {
            answer = Some((r.kind, r.rtt_ns))
        });
        let out = match (r, answer) {
            (Err(e), _) => Outcome::failed(probe_failure(&e), e.to_string()),
            (Ok(_), Some((ReplyKind::SynAck | ReplyKind::Connected, ns))) => Outcome {
                layers: vec![("tcp_handshake", ns.max(1))],
                ..Outcome::default()
            },
            (Ok(_), Some((ReplyKind::Rst | ReplyKind::Refused, _))) => {
                Outcome::failed(Failure::Refused, format!("port {} closed", m.port))
            }
            (Ok(_), Some((k, _))) => Outcome::failed(Failure::Unreachable, format!("{k:?}")),
            (Ok(_), None) => Outcome::failed(
                Failure::Timeout,
                format!("no answer within {} ms", m.timeout.as_millis()),
            ),
        };
        if out.failure.is_some() {
            self.prober = None;
            self.chosen = None;
        }
        out
    }
}

fn rr(address: &str, m: &Measure, stop: &AtomicBool) -> Outcome {
    let target = NetTarget::Inet {
        host: address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: m.port,
    };
    let addr = match target.resolve(Family::Any) {
        Ok(a) => a,
        Err(e) => return Outcome::failed(Failure::Dns, e.to_string()),
    };
    let cfg = RrConfig {
        target,
        addr: Some(addr),
        transport: Transport::Tcp,
        sizes: vec![(m.size, m.size)],
        connections: 1,
        stop_after: StopAfter::Count(1),
        warmup: Duration::ZERO,
        rate: None,
        client: SockOpts {
            nodelay: true,
            ..SockOpts::default()
        },
        server: ServerBehaviour::default(),
        timeout: m.timeout,
        connect_timeout: m.timeout,
        interval: Duration::from_secs(3600),
        peer: Peer::Latscope,
        auth: None,
    };
    let meta = Meta::new("agent", env!("CARGO_PKG_VERSION"), 0);
    match latscope_net::rr::run(&cfg, meta, stop, &mut |_, _| {}, false) {
        Err(e) => {
            let f = match &e {
                NetError::Refused { .. } => Failure::Refused,
                NetError::Timeout { .. } => Failure::Timeout,
                NetError::Unreachable { .. } => Failure::Unreachable,
                _ => Failure::Error,
            };
            Outcome::failed(f, e.to_string())
        }
        Ok(report) => match report.results.first() {
            Some(r) if r.rtt.count > 0 => Outcome {
                layers: vec![("application", r.rtt.p50_ns.max(1))],
                ..Outcome::default()
            },
            Some(r) if r.timeouts > 0 || r.lost > 0 => Outcome::failed(
                Failure::Timeout,
                format!("no response within {} ms", m.timeout.as_millis()),
            ),
            Some(r) => Outcome::failed(
                Failure::Error,
                r.errors
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "no transaction".into()),
            ),
            None => Outcome::failed(Failure::Error, "no result"),
        },
    }
}

/// The URL of an HTTP measurement: its own, or `http://ADDRESS:PORT/PATH`.
pub fn http_url(address: &str, m: &Measure) -> String {
    m.url.clone().unwrap_or_else(|| {
        let host = if address.contains(':') && !address.starts_with('[') {
            format!("[{address}]")
        } else {
            address.to_string()
        };
        let path = if m.path.starts_with('/') {
            m.path.clone()
        } else {
            format!("/{}", m.path)
        };
        format!("http://{host}:{}{path}", m.port)
    })
}

fn http(address: &str, m: &Measure) -> Outcome {
    let mut o = latscope_http::Options::new(http_url(address, m));
    o.connections = 1;
    o.threads = 1;
    o.requests = Some(1);
    o.timeout = m.timeout;
    match latscope_http::request_phases(&o) {
        Err(e) => {
            use latscope_http::HttpError as H;
            let f = match &e {
                H::Resolve { .. } => Failure::Dns,
                H::Connect { source, .. } | H::Exchange { source, .. } => io_failure(source),
                _ => Failure::Error,
            };
            Outcome::failed(f, e.to_string())
        }
        Ok(p) if p.status >= 500 => Outcome::failed(Failure::Error, format!("HTTP {}", p.status)),
        Ok(p) => {
            let mut layers = vec![("dns", p.dns_ns), ("tcp_handshake", p.connect_ns)];
            if let Some(t) = p.tls_ns {
                layers.push(("tls_handshake", t));
            }
            layers.push(("ttfb", p.ttfb_ns));
            layers.push(("transfer", p.transfer_ns));
            layers.push(("total", p.total_ns()));
            Outcome {
                layers,
                ..Outcome::default()
            }
        }
    }
}

fn trace(address: &str, m: &Measure, stop: &AtomicBool) -> Outcome {
    let ip = match latscope_probe::choose(address, Family::Any, m.port, m.timeout) {
        Ok((ip, _)) => ip,
        Err(e) => return Outcome::failed(probe_failure(&e), e.to_string()),
    };
    // UDP probes (classic traceroute ports): no privilege, and no SYNs to the target's TCP
    // listeners that would share a 4-tuple space with the agent's own SYN pings.
    let req = ProbeRequest {
        mode: Some(ProbeMode::Udp),
        port: m.port,
        payload: 0,
        trace: true,
        kernel_timestamps: true,
    };
    let (mut prober, _) = match latscope_probe::open(ip, req) {
        Ok(p) => p,
        Err(e) => return Outcome::failed(probe_failure(&e), e.to_string()),
    };
    let opts = TraceOptions {
        max_ttl: m.max_ttl,
        queries: 1,
        wait: m.timeout,
        // The measurement's own timeout bounds every hop (no longer wait for a late unreachable).
        unreachable_wait: m.timeout,
        ..TraceOptions::default()
    };
    match latscope_probe::trace::trace(
        prober.as_mut(),
        ip,
        &opts,
        stop,
        &mut |_| {},
        &mut |_, _| {},
    ) {
        Err(e) => Outcome::failed(probe_failure(&e), e.to_string()),
        Ok(t) => {
            let hops: Vec<Hop> = t
                .hops
                .iter()
                .map(|h| {
                    let p = h.probes.first();
                    Hop {
                        ttl: h.ttl,
                        from: p.and_then(|p| p.from.clone()),
                        rtt_ns: p.and_then(|p| p.rtt_ns),
                    }
                })
                .collect();
            let dest = t
                .hops
                .iter()
                .find(|h| h.destination)
                .and_then(|h| h.probes.iter().find_map(|p| p.rtt_ns));
            match dest {
                Some(ns) if t.reached => Outcome {
                    layers: vec![("path", ns.max(1))],
                    hops,
                    ..Outcome::default()
                },
                _ => Outcome {
                    failure: Some(Failure::Timeout),
                    detail: format!("destination not reached within {} hops", m.max_ttl),
                    hops,
                    ..Outcome::default()
                },
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn measure(kind: Kind, port: u16) -> Measure {
        Measure {
            kind,
            port,
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            url: None,
            path: "/".into(),
            max_ttl: 30,
            size: 64,
        }
    }

    #[test]
    fn connect_to_a_listener_is_a_sample_and_to_a_closed_port_a_refusal() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = AtomicBool::new(false);
        let mut r = Runner::default();
        let o = r.run("127.0.0.1", &measure(Kind::Connect, port), &stop);
        assert_eq!(o.failure, None, "{o:?}");
        assert_eq!(o.layers[0].0, "tcp_handshake");
        assert!(o.layers[0].1 > 0 && o.layers[0].1 < 500_000_000);
        drop(l);
        // A port held by a socket that is bound but never listens: a connection to it is
        // refused, and while it is held no other socket takes it, nor can the connect pick it
        // as its own source port (a dropped listener's port is an ephemeral one: a connect to it
        // could open a connection to itself, as one CI run saw).
        let closed =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        closed
            .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let port = closed.local_addr().unwrap().as_socket().unwrap().port();
        let o = r.run("127.0.0.1", &measure(Kind::Connect, port), &stop);
        assert_eq!(o.failure, Some(Failure::Refused), "{o:?}");
        drop(closed);
    }

    #[test]
    fn unresolvable_names_and_non_latscope_servers_are_failures_not_panics() {
        let stop = AtomicBool::new(false);
        let mut r = Runner::default();
        let o = r.run("no-such-host.invalid", &measure(Kind::Connect, 80), &stop);
        assert_eq!(o.failure, Some(Failure::Dns), "{o:?}");
        let o = r.run("no-such-host.invalid", &measure(Kind::Http, 80), &stop);
        assert_eq!(o.failure, Some(Failure::Dns), "{o:?}");
        // A listener that never speaks: rr times out or reports an error, never panics.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let o = r.run("127.0.0.1", &measure(Kind::Rr, port), &stop);
        assert!(o.failure.is_some(), "{o:?}");
        assert!(o.layers.is_empty());
    }

    #[test]
    fn http_urls() {
        let mut m = measure(Kind::Http, 8080);
        m.path = "health".into();
        assert_eq!(http_url("10.0.0.1", &m), "http://10.0.0.1:8080/health");
        assert_eq!(http_url("::1", &m), "http://[::1]:8080/health");
        m.url = Some("https://x/y".into());
        assert_eq!(http_url("10.0.0.1", &m), "https://x/y");
    }
}

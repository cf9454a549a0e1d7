//! The kernel's view of the connections' packets (eBPF, `latscope stack`), from the first
//! request step to the concurrency step: a local server's receive path and its way out, and
//! this host's own way out towards the server (its outgoing packets' transmit stages), which
//! runs whether the server is here or not.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use latscope_core::Log2Histogram;
use latscope_core::log2::{bucket_label, bucket_of, format_estimate_ns};
use latscope_core::model::diagnose::StepName;
use latscope_core::model::evidence::{EgressEvidence, EgressStage};
use latscope_core::model::stack::{Direction, Directions, Filters, Probe};
use latscope_ebpf::session::RawHistogram;

use super::step::{NotRun, Observe, requests_target};
use crate::context::Context;
use crate::evidence::{Evidence, StackEvidence};

pub struct KernelStack;

/// The sessions watching the connections.
pub struct Watching {
    /// The local server's receive path and way out, when it runs on this host.
    server: Option<latscope_ebpf::Session>,
    /// This host's way out towards the server.
    client: Option<latscope_ebpf::Session>,
}

/// What they saw.
pub struct Seen {
    /// The local server's.
    pub server: Option<StackEvidence>,
    /// This host's own packets to the server, on their way out.
    pub client_egress: Option<EgressEvidence>,
}

impl Observe for KernelStack {
    const NAME: StepName = StepName::KernelStack;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::ConcurrentRequests;
    type Running = Watching;
    type Output = Seen;

    fn start(cx: &Context, ev: &Evidence) -> Result<Watching, NotRun> {
        requests_target(ev)?;
        let client = client_session(cx.plan.addr);
        let server = cx.server.map(|server| {
            session(
                cx.plan.addr.port(),
                Some(cx.plan.addr.ip()),
                client_addr(cx.plan.addr),
                (server.netns_inode != 0).then_some(server.netns_inode),
            )
        });
        match (server, client) {
            (None, Err(e)) => Err(e),
            (Some(Err(e)), Err(_)) => Err(e),
            (server, client) => Ok(Watching {
                server: server.and_then(Result::ok),
                client: client.ok(),
            }),
        }
    }

    /// Measured on a 2-core VM (kernel 6.18): `latscope stack --direction tx` costs 0.37 s of
    /// CPU to load and attach, `--direction both` 0.7 s (BTF parsing and the verifier); a faster
    /// host pays less, which errs towards starting it.
    fn start_cpu(cx: &Context) -> Duration {
        let client = Duration::from_millis(350);
        match cx.server {
            Some(_) => client + Duration::from_millis(650),
            None => client,
        }
    }

    fn finish(_cx: &Context, w: Watching) -> Result<Seen, NotRun> {
        Ok(Seen {
            server: w.server.map(summarise).transpose()?,
            client_egress: w
                .client
                .map(|s| read(&s).map(|raw| egress(&raw)))
                .transpose()?
                .flatten(),
        })
    }

    fn detail(cx: &Context, s: &Seen) -> String {
        let mut parts = Vec::new();
        if let Some(server) = &s.server {
            parts.push(describe(cx, server));
        }
        match &s.client_egress {
            Some(e) => parts.push(format!(
                "this host's way out to the server: {}",
                egress_line(e)
            )),
            None => parts.push("this host's way out to the server: no packet timed".into()),
        }
        parts.join("; ")
    }

    fn store(ev: &mut Evidence, s: Seen) {
        ev.stack = s.server;
        ev.client_egress = s.client_egress;
    }
}

/// The kernel-stack step's detail for one server's evidence (this host's, or its agent's).
pub(crate) fn describe(cx: &Context, s: &StackEvidence) -> String {
    let f = |v: Option<f64>| v.map(format_estimate_ns).unwrap_or_else(|| "-".into());
    let mut line = format!(
        "{} {}; medians: ip-start {}, tcp-start {}, tcp-socket-enqueued {}, tcp-socket-read {} (p90 {})",
        latscope_core::units::count(s.packets, "packet"),
        selection(cx.plan.addr, client_addr(cx.plan.addr)),
        f(s.ip_start_ns),
        f(s.tcp_start_ns),
        f(s.enqueued_ns),
        f(s.read_ns),
        f(s.read_p90_ns)
    );
    if let Some(e) = &s.egress {
        line.push_str(&format!("; the server's way out: {}", egress_line(e)));
    }
    line
}

/// `qdisc p50 18.1ms p99 33.2ms, local-out …`: the stages with packets, slowest median first.
fn egress_line(e: &EgressEvidence) -> String {
    let mut stages: Vec<&EgressStage> = e.stages.iter().collect();
    stages.sort_by(|a, b| b.p50_ns.total_cmp(&a.p50_ns));
    stages
        .iter()
        .take(3)
        .map(|s| {
            format!(
                "{} p50 {} p99 {} ({} packets)",
                s.stage,
                format_estimate_ns(s.p50_ns),
                format_estimate_ns(s.p99_ns),
                s.packets
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Start the probes on a server's packets, both ways: received on local port `port` (and
/// address `local`) from `remote`, and sent from them, in network namespace `netns` (None: any).
pub(crate) fn session(
    port: u16,
    local: Option<IpAddr>,
    remote: Option<IpAddr>,
    netns: Option<u64>,
) -> Result<latscope_ebpf::Session, NotRun> {
    start(
        Directions::Both,
        Filters {
            // The connections' 4-tuple as far as it is fixed: both addresses and the
            // server's port. The client's port changes with every connection the steps
            // open, so it stays open; another client of the same server from the same
            // address is counted too (the detail says so).
            local_port: Some(port),
            local_addr: local,
            remote_addr: remote,
            // Its own namespace: a server in a container or another `ip netns` is watched
            // there, and same-port traffic of other namespaces stays out.
            netns_inode: netns,
            ..Default::default()
        },
    )
}

/// This host's way out towards `server`: the packets latscope's own connections send it, in
/// latscope's namespace.
fn client_session(server: SocketAddr) -> Result<latscope_ebpf::Session, NotRun> {
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).ok();
    start(
        Directions::Tx,
        Filters {
            remote_port: Some(server.port()),
            remote_addr: Some(server.ip()),
            local_addr: client_addr(server),
            netns_inode: own,
            ..Default::default()
        },
    )
}

fn start(direction: Directions, filters: Filters) -> Result<latscope_ebpf::Session, NotRun> {
    let cfg = latscope_ebpf::StackConfig {
        direction,
        filters,
        ..Default::default()
    };
    latscope_ebpf::Session::start(&cfg).map_err(|e| NotRun::Skipped(e.to_string()))
}

fn read(session: &latscope_ebpf::Session) -> Result<Vec<RawHistogram>, NotRun> {
    session
        .read_histograms()
        .map_err(|e| NotRun::Failed(e.to_string()))
}

/// A probe's histogram over groups.
fn merged(raw: &[RawHistogram], p: Probe) -> Log2Histogram {
    let mut h = Log2Histogram::new();
    for r in raw.iter().filter(|r| r.probe == p) {
        h.merge(&r.hist);
    }
    h
}

/// The transmit stages with packets, in path order; `None` when none had any.
fn egress(raw: &[RawHistogram]) -> Option<EgressEvidence> {
    let stages: Vec<EgressStage> = Probe::ALL
        .into_iter()
        .filter(|p| p.direction() == Direction::Tx)
        .filter_map(|p| {
            let h = merged(raw, p);
            (h.count() > 0).then(|| EgressStage {
                stage: p,
                packets: h.count(),
                p50_ns: h.quantile_ns(0.5),
                p99_ns: h.quantile_ns(0.99),
                mean_ns: h.mean_ns(),
            })
        })
        .collect();
    (!stages.is_empty()).then_some(EgressEvidence { stages })
}

/// Read a session's histograms into their medians (the session is dropped: its programs
/// detach).
pub(crate) fn summarise(session: latscope_ebpf::Session) -> Result<StackEvidence, NotRun> {
    let raw = read(&session)?;
    let get = |p: Probe| merged(&raw, p);
    let med = |p: Probe| {
        let h = get(p);
        (h.count() > 0).then(|| h.quantile_ns(0.5))
    };
    let read = get(Probe::TcpSocketRead);
    Ok(StackEvidence {
        packets: get(Probe::IpStart).count(),
        ip_start_ns: med(Probe::IpStart),
        tcp_start_ns: med(Probe::TcpStart),
        enqueued_ns: med(Probe::TcpSocketEnqueued),
        read_ns: med(Probe::TcpSocketRead),
        read_bucket: (read.count() > 0)
            .then(|| bucket_label(bucket_of(read.quantile_ns(0.5) as u64))),
        read_p90_ns: (read.count() > 0).then(|| read.quantile_ns(0.9)),
        egress: egress(&raw),
    })
}

/// The address this host's connections to `server` come from (the kernel's route choice, as a
/// connected UDP socket sees it; nothing is sent). `None` when there is no route.
fn client_addr(server: SocketAddr) -> Option<IpAddr> {
    let any: IpAddr = match server {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let probe = UdpSocket::bind((any, 0)).ok()?;
    probe.connect(server).ok()?;
    Some(probe.local_addr().ok()?.ip())
}

/// Which packets the kernel-stack figures are of, for the step's detail line.
fn selection(server: SocketAddr, client: Option<IpAddr>) -> String {
    match client {
        Some(c) => format!(
            "from {c} to {server} (the connections' addresses and server port, any client port)"
        ),
        None => format!("to {server} (from any address: no route to tell the client's)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_names_both_addresses_and_the_server_port() {
        let server: SocketAddr = "127.0.0.1:7373".parse().unwrap();
        let client = client_addr(server);
        assert_eq!(client, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(
            selection(server, client),
            "from 127.0.0.1 to 127.0.0.1:7373 (the connections' addresses and server port, any client port)"
        );
        assert!(selection(server, None).contains("from any address"));
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        // (Where IPv6 is on at all.)
        if let Some(c) = client_addr(v6) {
            assert_eq!(c, "::1".parse::<IpAddr>().unwrap());
        }
    }
}

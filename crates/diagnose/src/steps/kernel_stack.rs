//! Kernel receive-path latency of the server's packets (eBPF, local servers), from the first
//! request step to the concurrency step.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use latscope_core::Log2Histogram;
use latscope_core::log2::{bucket_label, bucket_of, format_estimate_ns};
use latscope_core::model::diagnose::StepName;
use latscope_ebpf::Probe;

use super::{NotRun, Observe, requests_target};
use crate::collect::Context;
use crate::evidence::{Evidence, StackEvidence};

pub struct KernelStack;

impl Observe for KernelStack {
    const NAME: StepName = StepName::KernelStack;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::ConcurrentRequests;
    type Running = latscope_ebpf::Session;
    type Output = StackEvidence;

    fn start(cx: &Context, ev: &Evidence) -> Result<latscope_ebpf::Session, NotRun> {
        requests_target(ev)?;
        let Some(server) = cx.server else {
            return Err(NotRun::Skipped("the server is not on this host".into()));
        };
        session(
            cx.plan.addr.port(),
            Some(cx.plan.addr.ip()),
            client_addr(cx.plan.addr),
            (server.netns_inode != 0).then_some(server.netns_inode),
        )
    }

    fn finish(_cx: &Context, session: latscope_ebpf::Session) -> Result<StackEvidence, NotRun> {
        summarise(session)
    }

    fn detail(cx: &Context, s: &StackEvidence) -> String {
        let f = |v: Option<f64>| v.map(format_estimate_ns).unwrap_or_else(|| "-".into());
        format!(
            "{} {}; medians: ip-start {}, tcp-start {}, tcp-socket-enqueued {}, tcp-socket-read {} (p90 {})",
            latscope_core::units::count(s.packets, "packet"),
            selection(cx.plan.addr, client_addr(cx.plan.addr)),
            f(s.ip_start_ns),
            f(s.tcp_start_ns),
            f(s.enqueued_ns),
            f(s.read_ns),
            f(s.read_p90_ns)
        )
    }

    fn store(ev: &mut Evidence, s: StackEvidence) {
        ev.stack = Some(s);
    }
}

/// Start the receive-path probes on the packets to local port `port` (and address `local`),
/// from `remote`, in network namespace `netns` (None: any).
pub(crate) fn session(
    port: u16,
    local: Option<IpAddr>,
    remote: Option<IpAddr>,
    netns: Option<u64>,
) -> Result<latscope_ebpf::Session, NotRun> {
    let cfg = latscope_ebpf::StackConfig {
        filters: latscope_ebpf::Filters {
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
        ..Default::default()
    };
    latscope_ebpf::Session::start(&cfg).map_err(|e| NotRun::Skipped(e.to_string()))
}

/// Read a session's histograms into their medians (the session is dropped: its programs
/// detach).
pub(crate) fn summarise(session: latscope_ebpf::Session) -> Result<StackEvidence, NotRun> {
    let raw = session
        .read_histograms()
        .map_err(|e| NotRun::Failed(e.to_string()))?;
    let get = |p: Probe| {
        let mut h = Log2Histogram::new();
        for r in raw.iter().filter(|r| r.probe == p) {
            h.merge(&r.hist);
        }
        h
    };
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

//! Kernel receive-path latency of the server's packets (eBPF, local servers), from the first
//! request step to the concurrency step.

use latscope_core::Log2Histogram;
use latscope_core::log2::{bucket_label, bucket_of, format_estimate_ns};
use latscope_core::model::diagnose::StepName;
use latscope_ebpf::Probe;

use super::{NotRun, Observe, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::{Evidence, StackEvidence};

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
        let cfg = latscope_ebpf::StackConfig {
            filters: latscope_ebpf::Filters {
                local_port: Some(cx.plan.addr.port()),
                // Its own namespace: a server in a container or another `ip netns` is watched
                // there, and same-port traffic of other namespaces stays out.
                netns_inode: (server.netns_inode != 0).then_some(server.netns_inode),
                ..Default::default()
            },
            ..Default::default()
        };
        latscope_ebpf::Session::start(&cfg).map_err(|e| NotRun::Skipped(e.to_string()))
    }

    fn finish(_cx: &Context, session: latscope_ebpf::Session) -> Result<StackEvidence, NotRun> {
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
        })
    }

    fn detail(cx: &Context, s: &StackEvidence) -> String {
        let f = |v: Option<f64>| v.map(format_estimate_ns).unwrap_or_else(|| "-".into());
        format!(
            "{} packets to port {}; medians: ip-start {}, tcp-start {}, tcp-socket-enqueued {}, tcp-socket-read {}",
            s.packets,
            cx.plan.addr.port(),
            f(s.ip_start_ns),
            f(s.tcp_start_ns),
            f(s.enqueued_ns),
            f(s.read_ns)
        )
    }

    fn store(ev: &mut Evidence, s: StackEvidence) {
        ev.stack = Some(s);
    }
}

//! `pre_tcp_kernel`: pre-TCP kernel latency.

use super::*;

/// Pre-TCP kernel latency: packets wait between the IP layer and TCP (netfilter rules,
/// routing) — netstacklat's ip-start → tcp-start gap. The kernel stack observer watches the
/// server's receive path (on this host, or by the server's agent): the host to fix is the
/// server.
pub fn pre_tcp_kernel(e: &Evidence) -> Option<Diagnosis> {
    let st = e.stack.as_ref()?;
    let ip = st.ip_start_ns?;
    // Without a tcp-start probe (no fentry and no tracepoint there), the socket enqueue bounds
    // it from above: TCP's own processing of a segment is a few microseconds.
    let (tcp, at) = match (st.tcp_start_ns, st.enqueued_ns) {
        (Some(t), _) => (t, "TCP"),
        (None, Some(q)) => (q, "the socket"),
        (None, None) => return None,
    };
    let gap = tcp - ip;
    if gap < 20_000.0 {
        return None;
    }
    Some(Diagnosis {
        rule: RuleId::PreTcpKernel,
        title: "packets wait inside the kernel before TCP (netfilter rules or routing)".into(),
        explains_ns: gap as u64,
        confidence: if at == "TCP" { 0.75 } else { 0.65 },
        side: Side::Server,
        evidence: vec![format!(
            "kernel stack (eBPF), server side: packets reach the IP layer after {} and {at} after {} (median): {} between them",
            format_ns(ip),
            format_ns(tcp),
            format_ns(gap)
        )],
        fix: "count and trim the netfilter rules on the input path (`nft list ruleset | wc -l`, `iptables-save | wc -l`); remove redundant ones, use sets instead of long rule chains".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

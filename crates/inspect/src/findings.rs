//! Plain-word findings about one socket, from its options and tcp_info. Each rule is a small
//! function with a stable name; thresholds are stated where they are applied.
//!
//! Background the texts rely on: Nagle's algorithm (RFC 896; RFC 1122 4.2.3.4) holds a small
//! segment while earlier data is unacknowledged; Linux delays ACKs for at least TCP_ATO_MIN
//! (HZ/25 = 40 ms) unless in quick-ack mode (net/ipv4/tcp_input.c, tcp_output.c). The two
//! together give the classic 40 ms stall of request/response traffic.

use latscope_core::model::sockets::{Severity, SocketFinding, SocketRow, TcpStats};
use latscope_core::timer::TcpTimer;
use latscope_core::units::format_bytes;
use latscope_sys::snmp::Counters;

fn f(severity: Severity, rule: &str, text: String) -> SocketFinding {
    SocketFinding {
        severity,
        rule: rule.into(),
        text,
    }
}

fn ms(us: u32) -> String {
    if us >= 10_000 {
        format!("{} ms", us / 1000)
    } else {
        format!("{:.1} ms", f64::from(us) / 1000.0)
    }
}

/// Share of `part` in `whole` in percent, when `whole` is large enough to mean something.
fn share(part: Option<u64>, whole: Option<u64>) -> Option<(f64, u64, u64)> {
    let (p, w) = (part?, whole?);
    // Less than 10 ms of sending is too little to call anything "limited".
    (w >= 10_000 && p > 0).then(|| (p as f64 * 100.0 / w as f64, p, w))
}

/// Findings for `row`. `peer` is the other end of the connection when it is a socket this scan
/// also saw (loopback, or another namespace on this host); `ns` the protocol counters of the
/// socket's network namespace, when they could be read.
pub fn for_socket(
    row: &SocketRow,
    peer: Option<&SocketRow>,
    ns: Option<&Counters>,
) -> Vec<SocketFinding> {
    let mut out = Vec::new();
    nagle_and_cork(row, peer, &mut out);
    if let Some(t) = row.tcp.as_ref().filter(|_| row.state == "ESTAB") {
        connection(row, t, peer, &mut out);
    }
    tuned_limits(row, &mut out);
    drops(row, ns, &mut out);
    out
}

/// The socket's drop counter (sk_drops), read for what it counts on that kind of socket.
///
/// On a listener it is not a receive buffer: the kernel adds to it when it refuses a
/// connection (`tcp_listendrop()`: accept queue full — TcpExt ListenOverflows — or a SYN it
/// could not take — ListenDrops) and also for every segment that ends a half-open handshake
/// (`tcp_v4_rcv()` → `discard_and_relse` after a reset answers a SYN-ACK — TcpExt
/// EmbryonicRsts). SYN pings and port scans (`latscope ping --syn`, diagnose's path step,
/// hping3, nmap -sS) add one per probe, so a listener that never refused anyone can show
/// hundreds of "drops". Connections refused are only what the namespace's ListenDrops shows.
fn drops(row: &SocketRow, ns: Option<&Counters>, out: &mut Vec<SocketFinding>) {
    let Some(m) = row.mem.as_ref().filter(|m| m.drops > 0) else {
        return;
    };
    if row.proto == "tcp" && row.state == "LISTEN" {
        out.push(listen_drops(m.drops, ns));
        return;
    }
    let what = if row.proto == "udp" {
        "datagrams"
    } else {
        "segments"
    };
    out.push(f(
        Severity::Warn,
        "rcvbuf-drops",
        format!(
            "{} {what} dropped on arrival, most often because the receive buffer ({}) was full: the application reads too slowly or SO_RCVBUF is small",
            m.drops,
            format_bytes(f64::from(m.rcvbuf))
        ),
    ));
}

/// A listener's drops: refused connections (listen-queue overflow, SYNs dropped) or the
/// resets that end half-open handshakes. The namespace's counters are since boot and cover all
/// its listeners, so they decide only when one of them is zero.
fn listen_drops(drops: u32, ns: Option<&Counters>) -> SocketFinding {
    let get = |name| ns.and_then(|c| c.get("TcpExt", name));
    let (refused, overflows, resets) = (
        get("ListenDrops"),
        get("ListenOverflows"),
        get("EmbryonicRsts"),
    );
    let half_open = "resets that ended half-open handshakes, which SYN pings and port scans \
                     (`latscope ping --syn`, diagnose's path step, nmap -sS) leave, one per probe";
    match (refused, resets) {
        (Some(0), _) => f(
            Severity::Info,
            "listen-resets",
            format!(
                "{drops} segments discarded by the listener, none a refused connection (its namespace has counted no listen-queue drops, TcpExt ListenDrops 0): \
                 they are {half_open}{}",
                resets
                    .map(|r| format!(" (TcpExt EmbryonicRsts {r} in the namespace)"))
                    .unwrap_or_default()
            ),
        ),
        (Some(n), Some(0)) => f(
            Severity::Warn,
            "listen-overflow",
            format!(
                "{drops} connection attempts refused by the listener: its namespace dropped {n} (TcpExt ListenDrops), {} of them because an accept queue was full (ListenOverflows), \
                 and saw no half-open handshake reset (EmbryonicRsts 0); connections arrive faster than the server accepts them: \
                 raise the listen() backlog and net.core.somaxconn, or accept faster",
                overflows.unwrap_or(0)
            ),
        ),
        (Some(n), Some(r)) => f(
            Severity::Info,
            "listen-drops",
            format!(
                "{drops} segments discarded by the listener: connections refused when its accept queue overflowed, or {half_open}. \
                 Since boot its namespace refused {n} connection attempts on any listener (TcpExt ListenDrops, {} accept-queue overflows) and saw {r} such resets (EmbryonicRsts); \
                 `ss -ltn` (Recv-Q against Send-Q) shows whether this accept queue fills",
                overflows.unwrap_or(0)
            ),
        ),
        _ => f(
            Severity::Info,
            "listen-drops",
            format!(
                "{drops} segments discarded by the listener: connections refused when its accept queue overflowed, or {half_open}; \
                 `nstat -az TcpExtListenDrops TcpExtListenOverflows TcpExtEmbryonicRsts` in its namespace tells which"
            ),
        ),
    }
}

/// Nagle on a listener or a request/response connection, and TCP_CORK.
fn nagle_and_cork(row: &SocketRow, peer: Option<&SocketRow>, out: &mut Vec<SocketFinding>) {
    let opts = row.options.as_ref();
    let tcp = row.tcp.as_ref();
    if row.proto == "tcp" && opts.and_then(|o| o.nodelay) == Some(false) {
        if row.state == "LISTEN" {
            out.push(f(
                Severity::Info,
                "nagle-on-listener",
                "listening socket with Nagle on (TCP_NODELAY off): accepted connections inherit it unless the server sets TCP_NODELAY after accept()".into(),
            ));
        } else if row.state == "ESTAB" {
            let both_ways = tcp.is_some_and(|t| {
                t.data_segs_in.unwrap_or(0) > 0 && t.data_segs_out.unwrap_or(0) > 0
            });
            if both_ways {
                let peer_ato = peer
                    .and_then(|p| p.tcp.as_ref())
                    .map(|t| t.ato_us)
                    .filter(|&a| a > 0);
                let wait = match peer_ato {
                    Some(a) => format!("the peer delays its ACKs up to {} (its ato)", ms(a)),
                    None => {
                        "the peer may delay its ACK up to 40 ms (Linux) or 200 ms (others)".into()
                    }
                };
                out.push(f(
                    Severity::Warn,
                    "nagle-on-rr",
                    format!(
                        "request/response socket with Nagle on (TCP_NODELAY off): a short write that follows an unacknowledged one waits for the peer's ACK, and {wait}"
                    ),
                ));
            }
        }
    }
    if opts.and_then(|o| o.cork) == Some(true) {
        out.push(f(
            Severity::Warn,
            "cork-on",
            "TCP_CORK is on: partial segments are held until the application uncorks, or for up to 200 ms".into(),
        ));
    }
}

/// What an established connection's TCP_INFO says: delayed ACKs against a Nagle peer, buffer
/// and window limits, retransmissions, an unsent queue, RTT jitter.
fn connection(
    row: &SocketRow,
    t: &TcpStats,
    peer: Option<&SocketRow>,
    out: &mut Vec<SocketFinding>,
) {
    let opts = row.options.as_ref();
    // Our own delayed-ACK timeout matters when the peer runs Nagle (otherwise a delayed ACK
    // rides on the response and costs nothing).
    let peer_nagle = peer
        .and_then(|p| p.options.as_ref())
        .and_then(|o| o.nodelay)
        == Some(false);
    if u64::from(t.ato_us) * 1_000 >= TcpTimer::DelayedAckMin.nominal_ns() && peer_nagle {
        out.push(f(
            Severity::Warn,
            "delayed-ack",
            format!(
                "delays its ACKs up to {} (ato) while the peer runs Nagle: the peer's short writes wait for them; TCP_QUICKACK or `ip route ... quickack 1` avoids it",
                ms(t.ato_us)
            ),
        ));
    }
    if let Some((pct, p, w)) = share(t.sndbuf_limited_us, t.busy_time_us).filter(|s| s.0 >= 10.0) {
        out.push(f(
            Severity::Warn,
            "sndbuf-limited",
            format!(
                "send buffer limited {pct:.0}% of the time ({} of {} busy sending): raise SO_SNDBUF or stop fixing it",
                ms(p.min(u64::from(u32::MAX)) as u32),
                ms(w.min(u64::from(u32::MAX)) as u32)
            ),
        ));
    }
    if let Some((pct, _, _)) = share(t.rwnd_limited_us, t.busy_time_us).filter(|s| s.0 >= 10.0) {
        out.push(f(
            Severity::Warn,
            "rwnd-limited",
            format!("the peer's receive window limited sending {pct:.0}% of the time: the peer reads too slowly or its SO_RCVBUF is small"),
        ));
    }
    if t.total_retrans > 0 {
        out.push(f(
            Severity::Warn,
            "retransmits",
            format!(
                "{} segments retransmitted over the connection's life; each timeout costs at least the RTO (now {})",
                t.total_retrans,
                ms(t.rto_us)
            ),
        ));
    }
    if let Some(n) = t.notsent_bytes.filter(|&n| n >= 64 * 1024) {
        let lowat_set = opts
            .and_then(|o| o.notsent_lowat)
            .is_some_and(|l| l > 0 && l < u32::MAX / 2);
        if !lowat_set {
            out.push(f(
                Severity::Info,
                "notsent-queue",
                format!(
                    "{} written but not yet sent: data queued in the socket ages there; TCP_NOTSENT_LOWAT keeps that queue short",
                    format_bytes(f64::from(n))
                ),
            ));
        }
    }
    if t.rtt_us >= 1000 && t.rttvar_us > t.rtt_us / 2 {
        out.push(f(
            Severity::Info,
            "rtt-jitter",
            format!("RTT varies a lot: {} ± {}", ms(t.rtt_us), ms(t.rttvar_us)),
        ));
    }
}

/// Timers and queues someone tuned away from the defaults (socket options, route metrics).
fn tuned_limits(row: &SocketRow, out: &mut Vec<SocketFinding>) {
    let opts = row.options.as_ref();
    // Per-socket limits that differ from the kernel defaults (TCP_RTO_MIN = 200 ms,
    // TCP_DELACK_MAX = 200 ms in include/net/tcp.h): someone tuned them, often a BPF program.
    let default_us = TcpTimer::DelayedAckMaxOrRtoMin.nominal_ns() / 1_000;
    if let Some(us) = opts
        .and_then(|o| o.delack_max_us)
        .filter(|&u| u64::from(u) != default_us)
    {
        out.push(f(
            Severity::Info,
            "delack-max",
            format!(
                "delayed ACKs are capped at {} on this socket (TCP_DELACK_MAX_US)",
                ms(us)
            ),
        ));
    }
    if let Some(us) = opts
        .and_then(|o| o.rto_min_us)
        .filter(|&u| u64::from(u) != default_us)
    {
        out.push(f(
            Severity::Info,
            "rto-min",
            format!(
                "minimum retransmission timeout is {} on this socket (TCP_RTO_MIN_US)",
                ms(us)
            ),
        ));
    }
    if let Some(us) = opts.and_then(|o| o.busy_poll_us).filter(|&u| u > 0) {
        out.push(f(
            Severity::Info,
            "busy-poll",
            format!("busy-polls the device queue for up to {us} µs on reads (SO_BUSY_POLL)"),
        ));
    }
    if let Some(r) = &row.route {
        if r.quickack == Some(true) {
            out.push(f(
                Severity::Info,
                "route-quickack",
                "the route to the peer disables delayed ACKs (quickack 1)".into(),
            ));
        }
        if let Some(m) = r.rto_min_ms {
            out.push(f(
                Severity::Info,
                "route-rto-min",
                format!("the route to the peer sets the minimum RTO to {m} ms (rto_min)"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::model::sockets::{SocketOptions, TcpStats};

    fn row(state: &str) -> SocketRow {
        SocketRow {
            proto: "tcp".into(),
            family: "ipv4".into(),
            state: state.into(),
            local: "127.0.0.1:1".into(),
            remote: "127.0.0.1:2".into(),
            inode: 1,
            uid: 0,
            netns: 1,
            netns_is_own: true,
            owners: vec![],
            options: Some(SocketOptions {
                nodelay: Some(false),
                cork: Some(false),
                ..Default::default()
            }),
            options_error: None,
            tcp: Some(TcpStats {
                data_segs_in: Some(5),
                data_segs_out: Some(5),
                ato_us: 40_000,
                busy_time_us: Some(100_000),
                sndbuf_limited_us: Some(30_000),
                ..Default::default()
            }),
            mem: None,
            route: None,
            findings: vec![],
        }
    }

    fn rules(v: &[SocketFinding]) -> Vec<&str> {
        v.iter().map(|f| f.rule.as_str()).collect()
    }

    #[test]
    fn nagle_rr_and_sndbuf_and_ato() {
        let r = row("ESTAB");
        let peer = row("ESTAB");
        let v = for_socket(&r, Some(&peer), None);
        assert_eq!(rules(&v), ["nagle-on-rr", "delayed-ack", "sndbuf-limited"]);
        assert!(v[0].text.contains("40 ms"), "{}", v[0].text);
        assert!(
            v[2].text.starts_with("send buffer limited 30% of the time"),
            "{}",
            v[2].text
        );
        assert_eq!(v[1].severity, Severity::Warn);
    }

    #[test]
    fn nodelay_on_is_quiet() {
        let mut r = row("ESTAB");
        r.options = Some(SocketOptions {
            nodelay: Some(true),
            ..Default::default()
        });
        r.tcp = Some(TcpStats {
            ato_us: 4_000,
            ..Default::default()
        });
        assert!(for_socket(&r, None, None).is_empty());
    }

    #[test]
    fn listener_and_cork() {
        let mut r = row("LISTEN");
        r.options = Some(SocketOptions {
            nodelay: Some(false),
            cork: Some(true),
            ..Default::default()
        });
        assert_eq!(
            rules(&for_socket(&r, None, None)),
            ["nagle-on-listener", "cork-on"]
        );
    }

    #[test]
    fn little_sending_is_not_limited() {
        let mut r = row("ESTAB");
        r.options = None;
        r.tcp = Some(TcpStats {
            busy_time_us: Some(5_000),
            sndbuf_limited_us: Some(5_000),
            ..Default::default()
        });
        assert!(for_socket(&r, None, None).is_empty());
    }

    fn listener_with_drops(drops: u32) -> SocketRow {
        let mut r = row("LISTEN");
        r.options = None;
        r.tcp = None;
        r.mem = Some(latscope_core::model::sockets::SocketMemory {
            rcvbuf: 131072,
            drops,
            ..Default::default()
        });
        r
    }

    #[test]
    fn listener_drops_without_refusals_are_half_open_resets_not_a_full_buffer() {
        let ns =
            Counters::parse("TcpExt: EmbryonicRsts ListenOverflows ListenDrops\nTcpExt: 100 0 0\n");
        let v = for_socket(&listener_with_drops(100), None, Some(&ns));
        assert_eq!(rules(&v), ["listen-resets"]);
        assert_eq!(v[0].severity, Severity::Info);
        assert!(!v[0].text.contains("receive buffer"), "{}", v[0].text);
        assert!(v[0].text.contains("half-open"), "{}", v[0].text);
        assert!(v[0].text.contains("EmbryonicRsts 100"), "{}", v[0].text);
    }

    #[test]
    fn listener_drops_with_overflows_warn_about_the_accept_queue() {
        let ns =
            Counters::parse("TcpExt: EmbryonicRsts ListenOverflows ListenDrops\nTcpExt: 0 12 12\n");
        let v = for_socket(&listener_with_drops(12), None, Some(&ns));
        assert_eq!(rules(&v), ["listen-overflow"]);
        assert_eq!(v[0].severity, Severity::Warn);
        assert!(
            v[0].text.contains("12 connection attempts refused"),
            "{}",
            v[0].text
        );
        assert!(
            v[0].text
                .contains("12 of them because an accept queue was full"),
            "{}",
            v[0].text
        );
        // Both kinds in the namespace's history: no verdict, both counts, how to look.
        let ns = Counters::parse(
            "TcpExt: EmbryonicRsts ListenOverflows ListenDrops\nTcpExt: 40 206 206\n",
        );
        let v = for_socket(&listener_with_drops(5), None, Some(&ns));
        assert_eq!(rules(&v), ["listen-drops"]);
        assert_eq!(v[0].severity, Severity::Info);
        assert!(
            v[0].text
                .contains("refused 206 connection attempts on any listener"),
            "{}",
            v[0].text
        );
        // Unknown counters: no verdict, and how to find out.
        let v = for_socket(&listener_with_drops(5), None, None);
        assert_eq!(rules(&v), ["listen-drops"]);
        assert!(v[0].text.contains("nstat"), "{}", v[0].text);
    }

    #[test]
    fn udp_drops_are_the_receive_buffer() {
        let mut r = listener_with_drops(7);
        r.proto = "udp".into();
        r.state = "UNCONN".into();
        let v = for_socket(&r, None, None);
        assert_eq!(rules(&v), ["rcvbuf-drops"]);
        assert!(
            v[0].text.starts_with("7 datagrams dropped"),
            "{}",
            v[0].text
        );
    }
}

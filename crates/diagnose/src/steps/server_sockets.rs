//! The server's end of our connections, read from its own sockets while the requests flow
//! (local servers only): is Nagle on, is TCP_CORK set?

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::StepName;
use latscope_core::model::sockets::{SocketRow, SocketsReport};
use latscope_core::model::transfer::TransferLimits;
use latscope_inspect::InspectError;
use latscope_inspect::scan::{Selection, scan};

use super::engines::meta;
use super::step::{NotRun, Observe, requests_target};
use crate::context::Context;
use crate::evidence::{self, Evidence};

pub struct ServerSockets;

/// The scan thread and the server end it looks for.
pub struct Scanning {
    port: u16,
    /// Set when the requests end: the scans stop.
    stop: Arc<AtomicBool>,
    netns: u64,
    thread: JoinHandle<Result<Scan, InspectError>>,
}

/// One scan: the server's port (every namespace latscope can read) and latscope's own sockets,
/// whose connections to the server name the 4-tuples to look for.
pub struct Scan {
    report: SocketsReport,
    /// (client end, server end) of each of our connections to the server, as the scan writes
    /// addresses.
    tuples: Vec<(String, String)>,
}

/// Our own connections to `server`: their (local, remote) addresses.
fn our_tuples(own: &SocketsReport, server: &str) -> Vec<(String, String)> {
    own.sockets
        .iter()
        .filter(|r| r.proto == "tcp" && r.state == "ESTAB" && r.remote == server)
        .map(|r| (r.local.clone(), r.remote.clone()))
        .collect()
}

/// The server's end of one of our connections: its local address is the one we connected to
/// and its remote address our connection's own. The 4-tuple finds it in whichever namespace
/// took the connection, and leaves out other clients' connections and other namespaces'
/// servers on the same port.
fn is_our_server_end(row: &SocketRow, tuples: &[(String, String)]) -> bool {
    row.state == "ESTAB"
        && tuples
            .iter()
            .any(|(client, server)| row.local == *server && row.remote == *client)
}

/// Without our 4-tuples (an address translated on the way, a proxy in between): a socket with
/// the service port as its local port, in the server's network namespace (`netns` 0 or a row
/// of unknown namespace: any).
fn is_server_end(row: &SocketRow, port: u16, netns: u64) -> bool {
    row.state == "ESTAB"
        && row.local.ends_with(&format!(":{port}"))
        && (netns == 0 || row.netns == 0 || row.netns == netns)
}

/// The server's ends of our connections in `s`: by 4-tuple, else by port and namespace.
fn server_ends(s: &Scan, port: u16, netns: u64) -> Vec<&SocketRow> {
    let by_tuple: Vec<&SocketRow> = s
        .report
        .sockets
        .iter()
        .filter(|r| is_our_server_end(r, &s.tuples))
        .collect();
    if !by_tuple.is_empty() {
        return by_tuple;
    }
    s.report
        .sockets
        .iter()
        .filter(|r| is_server_end(r, port, netns))
        .collect()
}

/// Scan until a server end with readable options shows up, or until `deadline`; then keep
/// scanning until `stop` (the requests ended) or the deadline, so that the connections'
/// tcp_info (who limited the server's sending) covers as much of the step as they lasted.
fn scan_for_server(
    server: SocketAddr,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<Scan, InspectError> {
    let first = first_scan(server, deadline)?;
    Ok(follow(server, first, deadline, stop))
}

/// Later scans, until `stop` or `deadline`, folded into the first: each connection keeps its
/// latest reading (tcp_info's busy and limited times only grow, so the last reading of a
/// connection is its fullest), and a connection that closed between scans keeps the one before.
/// The last scan alone would judge a step whose requests open new connections by whichever had
/// just begun (a 2 MiB answer on a 4 KiB send buffer: 28 ms busy of 431 ms, 0% limited).
fn follow(server: SocketAddr, mut seen: Scan, deadline: Instant, stop: &AtomicBool) -> Scan {
    // A scan a second (each reads /proc and sock_diag: light, but not free on a busy host),
    // checking the stop flag every 100 ms so that the step ends promptly.
    'scans: while Instant::now() < deadline {
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                break 'scans;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let Ok(s) = one_scan(server) else {
            break;
        };
        let ours = s
            .report
            .sockets
            .iter()
            .any(|r| is_our_server_end(r, &s.tuples) && r.options.is_some() && r.tcp.is_some());
        if ours {
            absorb(&mut seen, s);
        }
    }
    seen
}

/// Fold a later scan into `into`: its rows replace the same sockets' earlier rows (same
/// inode, or the same addresses in the same namespace), new ones are added, and our
/// connections' 4-tuples are the union.
fn absorb(into: &mut Scan, later: Scan) {
    for row in later.report.sockets {
        let same = |r: &SocketRow| {
            (r.inode != 0 && r.inode == row.inode)
                || (r.local == row.local && r.remote == row.remote && r.netns == row.netns)
        };
        match into.report.sockets.iter_mut().find(|r| same(r)) {
            Some(r) => *r = row,
            None => into.report.sockets.push(row),
        }
    }
    for t in later.tuples {
        if !into.tuples.contains(&t) {
            into.tuples.push(t);
        }
    }
}

/// One scan of the server's port and of latscope's own sockets.
fn one_scan(server: SocketAddr) -> Result<Scan, InspectError> {
    let mut report = scan(Selection::Port(server.port()), meta("sockets"))?;
    // A port scan leaves out latscope's own process: our client ends, and a server running
    // inside it (as in `latscope demo`), come from scanning this process itself.
    let own = scan(Selection::Pid(std::process::id()), meta("sockets"))?;
    let tuples = our_tuples(&own, &server.to_string());
    merge(&mut report, own);
    Ok(Scan { report, tuples })
}

/// The sockets of `port`, this process's own included: a port scan leaves latscope's own
/// process out, and the server asked about may be this one (`latscope serve` asked for
/// evidence about its own port, `latscope demo`).
pub(crate) fn port_and_own(port: u16) -> Result<SocketsReport, InspectError> {
    let mut report = scan(Selection::Port(port), meta("sockets"))?;
    let own = scan(Selection::Pid(std::process::id()), meta("sockets"))?;
    merge(&mut report, own);
    Ok(report)
}

/// Scan until a server end with readable options shows up, or until `deadline`.
fn first_scan(server: SocketAddr, deadline: Instant) -> Result<Scan, InspectError> {
    // Look once the requests are flowing; retry (bounded) until the server's end of one of our
    // connections shows with its options — set-up steps before the requests take a variable
    // time, and other clients' connections to the same port do not count. At the deadline the
    // last scan that saw our connections' server ends wins, else the last scan (port alone).
    let mut seen_ours: Option<Scan> = None;
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let s = one_scan(server)?;
        let ours: Vec<&SocketRow> = s
            .report
            .sockets
            .iter()
            .filter(|r| is_our_server_end(r, &s.tuples))
            .collect();
        if ours.iter().any(|r| r.options.is_some()) {
            return Ok(s);
        }
        let had_ours = !ours.is_empty();
        if Instant::now() >= deadline {
            return Ok(seen_ours.filter(|_| !had_ours).unwrap_or(s));
        }
        if had_ours {
            seen_ours = Some(s);
        }
    }
}

/// One scan of local port `port` in namespace `netns` (0: any) keeping only the established
/// connections whose remote address is `peer`: the server's agent answering an evidence
/// request reports that peer's connections and no other client's.
pub(crate) fn scan_peer(port: u16, peer: IpAddr, netns: u64) -> Result<Scan, InspectError> {
    let mut report = port_and_own(port)?;
    report.sockets.retain(|r| {
        let (Ok(local), Ok(remote)) = (
            r.local.parse::<SocketAddr>(),
            r.remote.parse::<SocketAddr>(),
        ) else {
            return false;
        };
        r.state == "ESTAB"
            && local.port() == port
            && canonical(remote.ip()) == canonical(peer)
            && (netns == 0 || r.netns == 0 || r.netns == netns)
    });
    let tuples = report
        .sockets
        .iter()
        .map(|r| (r.remote.clone(), r.local.clone()))
        .collect();
    Ok(Scan { report, tuples })
}

/// Whether a scan shows a connection with its options read (a scan worth keeping).
pub(crate) fn has_options(s: &Scan) -> bool {
    s.report.sockets.iter().any(|r| r.options.is_some())
}

/// IPv4-mapped IPv6 addresses as their IPv4 form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Add `own`'s rows to `into`, a socket listed by both once (the row with options kept).
fn merge(into: &mut SocketsReport, own: SocketsReport) {
    for row in own.sockets {
        match into
            .sockets
            .iter_mut()
            .find(|r| r.inode != 0 && r.inode == row.inode)
        {
            Some(r) if r.options.is_none() => *r = row,
            Some(_) => {}
            None => into.sockets.push(row),
        }
    }
}

impl Observe for ServerSockets {
    const NAME: StepName = StepName::ServerSockets;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::OneRequest;
    type Running = Scanning;
    type Output = evidence::ServerSockets;

    fn start(cx: &Context, ev: &Evidence) -> Result<Scanning, NotRun> {
        requests_target(ev)?;
        let Some(server) = cx.server else {
            return Err(NotRun::Skipped("the server is not on this host".into()));
        };
        let (addr, port) = (cx.plan.addr, cx.plan.addr.port());
        let netns = server.netns_inode;
        let deadline = Instant::now() + cx.plan.duration + Duration::from_secs(3);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || scan_for_server(addr, deadline, &flag));
        Ok(Scanning {
            port,
            stop,
            netns,
            thread,
        })
    }

    fn finish(_cx: &Context, s: Scanning) -> Result<evidence::ServerSockets, NotRun> {
        s.stop.store(true, Ordering::Relaxed);
        let r = match s.thread.join() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(NotRun::Failed(e.to_string())),
            Err(_) => return Err(NotRun::Failed("the socket scan panicked".into())),
        };
        summarise(&r, s.port, s.netns)
    }

    fn detail(_cx: &Context, ss: &evidence::ServerSockets) -> String {
        // Said plainly when none has the option: "TCP_NODELAY off on 0" reads as a finding.
        let nagle = match ss.nagle_on {
            0 => "TCP_NODELAY on every one".to_string(),
            n => format!("TCP_NODELAY off on {n}"),
        };
        let cork = match ss.corked {
            0 => "none corked".to_string(),
            n => format!("TCP_CORK on {n}"),
        };
        format!(
            "{}: {}, {nagle}, {cork}{}{}",
            ss.process,
            latscope_core::units::count(ss.connections as u64, "connection"),
            ss.snd_mss
                .map(|m| format!(", MSS {m} B"))
                .unwrap_or_default(),
            ss.limits.map(sending_detail).unwrap_or_default()
        )
    }

    fn store(ev: &mut Evidence, ss: evidence::ServerSockets) {
        ev.server_sockets = Some(ss);
    }
}

/// Why the server's sockets could not be read, when the scan says it lacked access.
fn unreadable(r: &SocketsReport) -> Option<String> {
    if !r.access.cap_sys_ptrace {
        return Some(
            "reading another process's sockets (/proc/PID/fd, its network namespace, its sockets' options) needs CAP_SYS_PTRACE, \
             which latscope lacks: run it as root or grant it (`setcap cap_sys_ptrace,cap_sys_admin+ep`)"
                .into(),
        );
    }
    (r.access.processes_unreadable > 0).then(|| {
        format!(
            "{} could not be read even with CAP_SYS_PTRACE (not dumpable, or in a more privileged user namespace)",
            latscope_core::units::count(r.access.processes_unreadable as u64, "process")
        )
    })
}

/// Count the options of the server's connections in a scan.
pub(crate) fn summarise(
    s: &Scan,
    port: u16,
    netns: u64,
) -> Result<evidence::ServerSockets, NotRun> {
    let server = server_ends(s, port, netns);
    let with_opts: Vec<_> = server
        .iter()
        .filter_map(|row| row.options.as_ref().map(|o| (*row, o)))
        .collect();
    if server.is_empty() {
        return Err(match unreadable(&s.report) {
            Some(why) => NotRun::Skipped(format!(
                "the server's end of our connections is not visible: {why}"
            )),
            None => NotRun::Failed("no server-side connection found on this host".into()),
        });
    }
    let Some((first, _)) = with_opts.first() else {
        let why = server
            .first()
            .and_then(|r| r.options_error.clone())
            .or_else(|| unreadable(&s.report))
            .unwrap_or_else(|| "options unreadable".into());
        return Err(NotRun::Skipped(format!(
            "found the server's connections but not their options: {why}"
        )));
    };
    let process = first
        .owners
        .first()
        .map(|o| format!("{}[{}]", o.comm, o.pid))
        .unwrap_or_else(|| "?".into());
    Ok(evidence::ServerSockets {
        process,
        connections: with_opts.len(),
        nagle_on: with_opts
            .iter()
            .filter(|(_, o)| o.nodelay == Some(false))
            .count(),
        corked: with_opts
            .iter()
            .filter(|(_, o)| o.cork == Some(true))
            .count(),
        snd_mss: server
            .iter()
            .filter_map(|row| row.tcp.as_ref().map(|t| t.snd_mss))
            .filter(|&m| m > 0)
            .max(),
        limits: sending_limits(&server),
        cwnd_bytes: server
            .iter()
            .filter_map(|row| row.tcp.as_ref())
            .map(|t| u64::from(t.snd_cwnd) * u64::from(t.snd_mss))
            .filter(|&b| b > 0)
            .max(),
    })
}

/// e.g. "; sending busy 400ms: 42% send-buffer-limited (8 KiB), 0% receive-window-limited".
fn sending_detail(l: TransferLimits) -> String {
    let ms = |us: u64| latscope_core::units::format_ns(us as f64 * 1e3);
    format!(
        "; sending busy {}: {:.0}% send-buffer-limited ({}), {:.0}% receive-window-limited",
        ms(l.busy_us),
        100.0 * l.share(l.sndbuf_limited_us),
        l.sndbuf_bytes.map_or("-".into(), |b| format!("{b} B")),
        100.0 * l.share(l.rwnd_limited_us)
    )
}

/// Who limited the server's sending, over its ends of our connections: their tcp_info (busy
/// time, receive-window- and send-buffer-limited parts) with their buffers, added up. `None`
/// when no connection's tcp_info was read or none was ever busy sending.
///
/// The delivery rate is the fastest single connection's last sample, not a sum: diagnose's
/// connections belong to steps that ran one after another, and a request sees one
/// connection's rate.
fn sending_limits(server: &[&SocketRow]) -> Option<TransferLimits> {
    let each: Vec<TransferLimits> = server
        .iter()
        .filter_map(|row| {
            let t = row.tcp.as_ref()?;
            let mem = row.mem.as_ref();
            Some(TransferLimits::from_stats(
                t,
                mem.map(|m| m.rcvbuf),
                mem.map(|m| m.sndbuf),
            ))
        })
        .collect();
    let fastest = each.iter().filter_map(|l| l.delivery_rate_bps).max();
    let mut all = each.into_iter().reduce(|mut a, b| {
        a.merge(&b);
        a
    })?;
    all.delivery_rate_bps = fastest;
    Some(all).filter(|l| l.busy_us > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::model::sockets::{Access, Owner, SocketOptions};

    fn row(local: &str, remote: &str, netns: u64, nodelay: Option<bool>) -> SocketRow {
        SocketRow {
            proto: "tcp".into(),
            family: "ipv4".into(),
            state: "ESTAB".into(),
            local: local.into(),
            remote: remote.into(),
            inode: 1,
            uid: 0,
            netns,
            netns_is_own: false,
            owners: vec![Owner {
                pid: netns as u32,
                comm: format!("srv{netns}"),
                fd: 3,
            }],
            options: nodelay.map(|n| SocketOptions {
                nodelay: Some(n),
                ..Default::default()
            }),
            options_error: None,
            tcp: None,
            mem: None,
            route: None,
            findings: Vec::new(),
        }
    }

    fn scan_of(rows: Vec<SocketRow>, tuples: &[(&str, &str)], access: Access) -> Scan {
        Scan {
            report: SocketsReport {
                meta: meta("sockets"),
                selection: "port 80".into(),
                access,
                sockets: rows,
                notes: Vec::new(),
            },
            tuples: tuples
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    fn ptrace() -> Access {
        Access {
            cap_sys_ptrace: true,
            ..Access::default()
        }
    }

    #[test]
    fn the_4_tuple_picks_our_servers_namespace_among_same_port_servers() {
        // Two namespaces (7 and 9) each serve 127.0.0.1:80; our connection went to 9's. The
        // namespace `locate` guessed (7) does not matter when the 4-tuple is known.
        let s = scan_of(
            vec![
                row("127.0.0.1:80", "127.0.0.1:40001", 7, Some(true)),
                row("127.0.0.1:80", "127.0.0.1:40000", 9, Some(false)),
                row("127.0.0.1:80", "127.0.0.1:40002", 9, Some(true)),
            ],
            &[("127.0.0.1:40000", "127.0.0.1:80")],
            ptrace(),
        );
        let ss = summarise(&s, 80, 7).unwrap();
        assert_eq!(ss.process, "srv9[9]");
        assert_eq!((ss.connections, ss.nagle_on), (1, 1));
        // Without our 4-tuples: port and namespace.
        let s = scan_of(s.report.sockets, &[], ptrace());
        let ss = summarise(&s, 80, 7).unwrap();
        assert_eq!((ss.process.as_str(), ss.nagle_on), ("srv7[7]", 0));
    }

    #[test]
    fn later_scans_keep_each_connections_fullest_reading() {
        // A connection read twice (its second reading fuller), then closed; a new one that had
        // just begun at the last scan. The last scan alone would read 28 ms busy, 0% limited.
        // Their delivery rates are one connection's each: the fastest is kept, never a sum.
        let sending = |inode, remote: &str, busy_ms: u64, limited_ms: u64| {
            let mut r = row("10.8.0.2:80", remote, 7, Some(true));
            r.inode = inode;
            r.tcp = Some(latscope_core::model::sockets::TcpStats {
                busy_time_us: Some(busy_ms * 1000),
                sndbuf_limited_us: Some(limited_ms * 1000),
                delivery_rate_bps: Some(busy_ms * 1_000_000),
                ..Default::default()
            });
            r
        };
        let tuple = |c: &'static str| (c, "10.8.0.2:80");
        let mut seen = scan_of(
            vec![sending(11, "10.8.0.1:40000", 150, 140)],
            &[tuple("10.8.0.1:40000")],
            ptrace(),
        );
        absorb(
            &mut seen,
            scan_of(
                vec![sending(11, "10.8.0.1:40000", 420, 400)],
                &[tuple("10.8.0.1:40000")],
                ptrace(),
            ),
        );
        absorb(
            &mut seen,
            scan_of(
                vec![sending(12, "10.8.0.1:40001", 28, 0)],
                &[tuple("10.8.0.1:40001")],
                ptrace(),
            ),
        );
        let ss = summarise(&seen, 80, 7).unwrap();
        assert_eq!(ss.connections, 2);
        let l = ss.limits.unwrap();
        assert_eq!((l.busy_us, l.sndbuf_limited_us), (448_000, 400_000));
        assert_eq!(l.delivery_rate_bps, Some(420_000_000));
    }

    #[test]
    fn without_cap_sys_ptrace_the_capability_is_named() {
        let s = scan_of(Vec::new(), &[], Access::default());
        match summarise(&s, 80, 7) {
            Err(NotRun::Skipped(m)) => assert!(m.contains("needs CAP_SYS_PTRACE"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Connections seen (sock_diag) but no owner to read options through.
        let mut r = row("127.0.0.1:80", "127.0.0.1:40000", 7, None);
        r.owners.clear();
        let s = scan_of(vec![r], &[], Access::default());
        match summarise(&s, 80, 7) {
            Err(NotRun::Skipped(m)) => assert!(m.contains("CAP_SYS_PTRACE"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        // With the capability and nothing there: nothing found.
        let s = scan_of(Vec::new(), &[], ptrace());
        assert!(matches!(summarise(&s, 80, 7), Err(NotRun::Failed(_))));
    }
}

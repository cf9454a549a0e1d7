//! One scan: find the processes and their socket fds (/proc), list the sockets of every network
//! namespace involved (sock_diag, entered on a helper thread), join the two by socket inode,
//! read each socket's options through pidfd_getfd, and derive findings.
//!
//! Processes and sockets that disappear while we look are expected: they become a note in the
//! report (once per process), never an error per fd.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;

use latscope_core::model::Meta;
use latscope_core::model::sockets::{Access, Owner, RouteLimits, SocketRow, SocketsReport};
use latscope_sys::snmp::Counters;

use crate::diag;
use crate::error::{InspectError, Result};
use crate::procfs::{self, ProcError};
use crate::socket::{self, DiagSocket, Proto};
use crate::sockopt::{self, OptError, Pidfd};
use crate::{findings, netns, procnet, route};

/// Which sockets to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Sockets held by one process.
    Pid(u32),
    /// Sockets whose local or remote port is this one (any process, any scanned namespace).
    Port(u16),
    /// Every socket of every process we can read.
    All,
}

impl Selection {
    /// "pid 1234" / "port 80" / "all".
    pub fn describe(&self) -> String {
        match self {
            Selection::Pid(p) => format!("pid {p}"),
            Selection::Port(p) => format!("port {p}"),
            Selection::All => "all".into(),
        }
    }
}

struct Proc {
    pid: u32,
    comm: String,
    netns: u64,
    /// socket inode → fds
    sockets: HashMap<u64, Vec<i32>>,
}

/// Where to find a network namespace: a process living in it, or an open namespace fd.
enum NsHandle {
    Own,
    Pid(u32),
    File(std::fs::File),
}

/// What the namespace listings found: sockets per namespace and how to re-enter each.
#[derive(Default)]
struct Listing {
    listed: Vec<(u64, Vec<DiagSocket>)>,
    handles: HashMap<u64, NsHandle>,
    seen_ns: HashSet<u64>,
    /// Namespaces latscope was not allowed to enter.
    ns_denied: u32,
    /// Sockets that came from /proc/PID/net instead of sock_diag.
    from_procnet: usize,
}

impl Listing {
    fn inodes(&self) -> HashSet<u64> {
        self.listed
            .iter()
            .flat_map(|(_, v)| v.iter().map(|s| s.inode))
            .collect()
    }

    /// List the sockets of namespace `ns` and remember how to enter it.
    fn list(&mut self, ns: u64, handle: NsHandle, notes: &mut Vec<String>) {
        match in_ns(&handle, diag::dump_all) {
            Ok(l) => {
                note_once(notes, l.notes);
                self.listed.push((ns, l.sockets));
            }
            Err(InspectError::Privilege { .. }) => self.ns_denied += 1,
            Err(e) => notes.push(format!("network namespace {ns}: {e}")),
        }
        self.handles.insert(ns, handle);
    }
}

/// Scan and build the report: a pipeline of named steps.
pub fn scan(selection: Selection, meta: Meta) -> Result<SocketsReport> {
    let mut notes = Vec::new();
    let mut access = Access {
        cap_sys_ptrace: procfs::has_cap_sys_ptrace(),
        ..Access::default()
    };
    let own_ns = procfs::own_netns().unwrap_or(0);

    let (procs, denied_pids) = read_processes(selection, &mut access)?;
    let owners = owners_of(&procs);
    let wanted_inodes: Option<HashSet<u64>> = match selection {
        Selection::Pid(_) => Some(owners.keys().copied().collect()),
        _ => None,
    };
    let mut listing = list_namespaces(selection, own_ns, &procs, &mut notes);
    if access.cap_sys_ptrace {
        list_socket_namespaces(&procs, wanted_inodes.as_ref(), &mut listing, &mut notes);
    }
    if !matches!(selection, Selection::Pid(_)) && (!denied_pids.is_empty() || listing.ns_denied > 0)
    {
        list_from_procnet(&procs, &denied_pids, &mut listing);
    }
    let mut rows = build_rows(selection, &listing, wanted_inodes.as_ref(), &owners, own_ns);
    let denied = read_options(&mut rows, &mut notes);
    add_route_limits(&mut rows, &listing.listed, &listing.handles);
    let counters = read_counters(&rows, &listing.handles);
    add_findings(&mut rows, &counters);
    say_missing(&rows, &mut access, denied, &listing);
    say_closed(&rows, &mut notes);

    Ok(SocketsReport {
        meta,
        selection: selection.describe(),
        access,
        sockets: rows,
        notes,
    })
}

/// Step 1: processes and their socket fds (/proc). Returns them and the pids whose /proc
/// entries were denied.
fn read_processes(selection: Selection, access: &mut Access) -> Result<(Vec<Proc>, Vec<u32>)> {
    let pids = match selection {
        Selection::Pid(p) => {
            if !procfs::exists(p) {
                return Err(InspectError::NoSuchProcess(p));
            }
            vec![p]
        }
        _ => procfs::all_pids().map_err(|e| InspectError::io("listing /proc", e))?,
    };
    let self_pid = std::process::id();
    let mut procs = Vec::new();
    let mut denied_pids = Vec::new();
    for pid in pids {
        if pid == self_pid && selection != Selection::Pid(pid) {
            continue;
        }
        let read = procfs::netns(pid).and_then(|ns| procfs::socket_fds(pid).map(|s| (ns, s)));
        match read {
            Ok((netns, sockets)) => procs.push(Proc {
                pid,
                comm: procfs::comm(pid),
                netns,
                sockets,
            }),
            Err(ProcError::Gone) => {
                if let Selection::Pid(p) = selection {
                    return Err(InspectError::NoSuchProcess(p));
                }
            }
            Err(ProcError::Denied) => {
                access.processes_unreadable += 1;
                denied_pids.push(pid);
                if let Selection::Pid(p) = selection {
                    let what = format!("reading the fds of pid {p} (/proc/{p}/fd)");
                    return Err(if access.cap_sys_ptrace {
                        // CAP_SYS_PTRACE counts in latscope's own user namespace only.
                        InspectError::io(
                            format!(
                                "{what}: refused even with CAP_SYS_PTRACE (the process is not dumpable, or its user namespace is more privileged than latscope's)"
                            ),
                            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                        )
                    } else {
                        InspectError::Privilege {
                            what,
                            capability: "CAP_SYS_PTRACE",
                        }
                    });
                }
            }
            Err(ProcError::Other) => {}
        }
    }
    Ok((procs, denied_pids))
}

/// Socket inode → the processes and fds holding it.
fn owners_of(procs: &[Proc]) -> HashMap<u64, Vec<Owner>> {
    let mut owners: HashMap<u64, Vec<Owner>> = HashMap::new();
    for p in procs {
        for (inode, fds) in &p.sockets {
            for &fd in fds {
                owners.entry(*inode).or_default().push(Owner {
                    pid: p.pid,
                    comm: p.comm.clone(),
                    fd,
                });
            }
        }
    }
    owners
}

/// Step 2: list every namespace of a selected process, plus our own.
fn list_namespaces(
    selection: Selection,
    own_ns: u64,
    procs: &[Proc],
    notes: &mut Vec<String>,
) -> Listing {
    let mut namespaces: Vec<(u64, NsHandle)> = Vec::new();
    let mut listing = Listing::default();
    if !matches!(selection, Selection::Pid(_)) {
        listing.seen_ns.insert(own_ns);
        namespaces.push((own_ns, NsHandle::Own));
    }
    for p in procs {
        if p.sockets.is_empty() || !listing.seen_ns.insert(p.netns) {
            continue;
        }
        namespaces.push((
            p.netns,
            if p.netns == own_ns {
                NsHandle::Own
            } else {
                NsHandle::Pid(p.pid)
            },
        ));
    }
    for (ns, handle) in namespaces {
        listing.list(ns, handle, notes);
    }
    listing
}

/// Step 3: sockets held by a selected process but not found in any namespace listed so far were
/// created in another namespace (a thread that called setns, a socket passed over a unix
/// socket). Ask the socket itself for its namespace (SIOCGSKNS) and list that one too.
fn list_socket_namespaces(
    procs: &[Proc],
    wanted_inodes: Option<&HashSet<u64>>,
    listing: &mut Listing,
    notes: &mut Vec<String>,
) {
    let found = listing.inodes();
    let mut extra: Vec<(u64, std::fs::File)> = Vec::new();
    let mut pidfds: HashMap<u32, Option<Pidfd>> = HashMap::new();
    for p in procs {
        for (inode, fds) in &p.sockets {
            if found.contains(inode) || wanted_inodes.is_some_and(|w| !w.contains(inode)) {
                continue;
            }
            let Some(pidfd) = pidfds
                .entry(p.pid)
                .or_insert_with(|| Pidfd::open(p.pid).ok())
            else {
                continue;
            };
            let Ok(dup) = pidfd.get_fd(fds[0]) else {
                continue;
            };
            if let Some((_, nsfile)) = sockopt::inet_socket_netns(&dup)
                && let Some(ino) = sockopt::file_inode(&nsfile)
                && listing.seen_ns.insert(ino)
            {
                extra.push((ino, nsfile));
            }
        }
    }
    for (ns, file) in extra {
        listing.list(ns, NsHandle::File(file), notes);
    }
}

/// Step 3b: processes whose namespace latscope may not read or enter still show their
/// namespace's sockets in /proc/PID/net (no tcp_info, namespace unknown = 0). Only sockets no
/// namespace listing had yet, deduplicated by inode (unique across namespaces).
fn list_from_procnet(procs: &[Proc], denied_pids: &[u32], listing: &mut Listing) {
    let mut found = listing.inodes();
    let mut extra = Vec::new();
    let listed_ns: HashSet<u64> = listing.listed.iter().map(|(ns, _)| *ns).collect();
    let mut pids = denied_pids.to_vec();
    pids.extend(
        procs
            .iter()
            .filter(|p| !listed_ns.contains(&p.netns))
            .map(|p| p.pid),
    );
    let mut seen_files = HashSet::new();
    for pid in pids {
        for s in procnet::sockets_of_new_ns(pid, &mut seen_files) {
            if s.inode != 0 && found.insert(s.inode) {
                extra.push(s);
            }
        }
    }
    listing.from_procnet = extra.len();
    if !extra.is_empty() {
        listing.listed.push((0, extra));
    }
}

/// Step 4: one row per selected socket, with its owners.
fn build_rows(
    selection: Selection,
    listing: &Listing,
    wanted_inodes: Option<&HashSet<u64>>,
    owners: &HashMap<u64, Vec<Owner>>,
    own_ns: u64,
) -> Vec<SocketRow> {
    let mut rows = Vec::new();
    for (ns, sockets) in &listing.listed {
        for s in sockets {
            let keep = match selection {
                Selection::Pid(_) => wanted_inodes.is_some_and(|w| w.contains(&s.inode)),
                Selection::Port(port) => s.local.port() == port || s.remote.port() == port,
                // TIME-WAIT and SYN-RECV mini-sockets have inode 0 and no owner.
                Selection::All => s.inode != 0,
            };
            if !keep {
                continue;
            }
            let mut o = if s.inode != 0 {
                owners.get(&s.inode).cloned().unwrap_or_default()
            } else {
                Vec::new()
            };
            o.sort_by_key(|x| (x.pid, x.fd));
            rows.push(row_from(s, *ns, *ns == own_ns, o));
        }
    }

    rows
}

/// Step 5: options, through a duplicate of the fd. Returns how many sockets were denied.
fn read_options(rows: &mut [SocketRow], notes: &mut Vec<String>) -> u32 {
    let mut pidfds: HashMap<u32, std::result::Result<Pidfd, OptError>> = HashMap::new();
    let mut gone_pids = BTreeSet::new();
    let mut denied = 0u32;
    for row in rows.iter_mut() {
        let proto = if row.proto == "tcp" {
            Proto::Tcp
        } else {
            Proto::Udp
        };
        let mut first_err = None;
        for owner in &row.owners {
            let pidfd = pidfds
                .entry(owner.pid)
                .or_insert_with(|| Pidfd::open(owner.pid));
            let res = match pidfd {
                Ok(p) => sockopt::read_remote(p, owner.fd, row.inode, proto),
                Err(e) => Err(e.clone()),
            };
            match res {
                Ok(opts) => {
                    row.options = Some(opts);
                    first_err = None;
                    break;
                }
                Err(e) => {
                    if e == OptError::ProcessGone {
                        gone_pids.insert((owner.pid, owner.comm.clone()));
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            if e == OptError::Denied {
                denied += 1;
            }
            row.options_error = Some(e.to_string());
        }
    }
    for (pid, comm) in gone_pids {
        notes.push(format!("pid {pid} ({comm}) exited during the scan; its sockets are shown as the kernel last listed them"));
    }
    let closed = rows
        .iter()
        .filter(|r| r.options_error.as_deref() == Some(&OptError::SocketGone.to_string()))
        .count();
    if closed > 0 {
        notes.push(format!(
            "{} closed during the scan; shown as the kernel last listed them, without options",
            latscope_core::units::count(closed as u64, "socket")
        ));
    }

    denied
}

/// Step 6b: the protocol counters (TcpExt ListenDrops, …) of the namespaces whose listeners
/// dropped something: what a listener's drop count means depends on them.
fn read_counters(rows: &[SocketRow], handles: &HashMap<u64, NsHandle>) -> HashMap<u64, Counters> {
    let namespaces: BTreeSet<u64> = rows
        .iter()
        .filter(|r| r.state == "LISTEN" && r.mem.as_ref().is_some_and(|m| m.drops > 0))
        .map(|r| r.netns)
        .collect();
    let mut out = HashMap::new();
    for ns in namespaces {
        let Some(handle) = handles.get(&ns) else {
            continue;
        };
        let read = in_ns(handle, || {
            Counters::read_own().map_err(|e| InspectError::io("reading /proc/net/netstat", e))
        });
        // Counters refine a finding; without them it says how to find out.
        if let Ok(c) = read {
            out.insert(ns, c);
        }
    }
    out
}

/// Step 7: findings, with the other end of loopback / same-host connections when we saw it;
/// rows sorted by owner.
fn add_findings(rows: &mut [SocketRow], counters: &HashMap<u64, Counters>) {
    let index: HashMap<(u64, &str, &str), usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.netns, r.local.as_str(), r.remote.as_str()), i))
        .collect();
    let found: Vec<_> = rows
        .iter()
        .map(|r| {
            let peer = index
                .get(&(r.netns, r.remote.as_str(), r.local.as_str()))
                .map(|&i| &rows[i]);
            findings::for_socket(r, peer, counters.get(&r.netns))
        })
        .collect();
    for (r, f) in rows.iter_mut().zip(found) {
        r.findings = f;
    }
    rows.sort_by(|a, b| {
        let ka = a
            .owners
            .first()
            .map(|o| (o.pid, o.fd))
            .unwrap_or((u32::MAX, i32::MAX));
        let kb = b
            .owners
            .first()
            .map(|o| (o.pid, o.fd))
            .unwrap_or((u32::MAX, i32::MAX));
        ka.cmp(&kb)
            .then_with(|| a.proto.cmp(&b.proto))
            .then_with(|| a.local.cmp(&b.local))
    });
}

/// Step 8: say what is missing from the report, and why.
fn say_missing(rows: &[SocketRow], access: &mut Access, denied: u32, listing: &Listing) {
    let without_options = rows.iter().filter(|r| r.options.is_none()).count();
    if without_options > 0 && (denied > 0 || !access.cap_sys_ptrace) {
        access.missing.push(format!(
            "options (TCP_NODELAY, TCP_CORK, TCP_QUICKACK, SO_SNDBUF/SO_RCVBUF, TCP_NOTSENT_LOWAT, congestion control, keep-alive, busy-poll) \
             of {}: they are read from a duplicate of the owner's fd (pidfd_getfd), which needs CAP_SYS_PTRACE \
             for processes with other credentials or more capabilities than latscope",
            latscope_core::units::count(without_options as u64, "socket")
        ));
    }
    // Only open sockets (inode ≠ 0) without an owner can belong to a process we could not
    // read; TIME-WAIT and orphaned sockets belong to no process at all (see `say_closed`).
    let unowned_open = rows
        .iter()
        .filter(|r| r.inode != 0 && r.owners.is_empty())
        .count();
    if access.processes_unreadable > 0 && unowned_open > 0 {
        let why = if access.cap_sys_ptrace {
            "the kernel refused ptrace read access even with CAP_SYS_PTRACE (a process that is not dumpable, \
             or one whose user namespace is more privileged than latscope's, such as a container's host)"
        } else {
            "/proc/PID/fd and /proc/PID/ns need ptrace read access (CAP_SYS_PTRACE)"
        };
        access.missing.push(format!(
            "the owning process and fd of {}: {} could not be read ({why}); \
             sock_diag still lists their sockets (state, addresses, uid, tcp_info) in namespaces latscope can see",
            latscope_core::units::count(unowned_open as u64, "open socket"),
            latscope_core::units::count(access.processes_unreadable as u64, "process")
        ));
    }
    let from_procnet = if listing.from_procnet > 0 {
        rows.iter()
            .filter(|r| r.netns == 0 && !r.netns_is_own)
            .count()
    } else {
        0
    };
    if from_procnet > 0 {
        access.missing.push(format!(
            "tcp_info, memory and namespace of {} in network namespaces latscope may not enter: \
             they are listed from /proc/PID/net (state, addresses, uid); entering needs CAP_SYS_ADMIN, identifying the namespace CAP_SYS_PTRACE",
            latscope_core::units::count(from_procnet as u64, "socket")
        ));
    }
    let ns_denied = listing.ns_denied;
    if ns_denied > 0 {
        access.missing.push(format!(
            "sockets of {}: entering a namespace needs CAP_SYS_ADMIN",
            latscope_core::units::count(ns_denied as u64, "other network namespace")
        ));
    }
    let tcp_with_options = rows
        .iter()
        .filter(|r| r.proto == "tcp" && r.options.is_some());
    if tcp_with_options.clone().any(|r| {
        r.options
            .as_ref()
            .is_some_and(|o| o.delack_max_us.is_none())
    }) {
        access.missing.push(
            "per-socket delayed-ACK / minimum-RTO limits: this kernel has no TCP_DELACK_MAX_US / TCP_RTO_MIN_US, so limits set by \
             BPF (TCP_BPF_DELACK_MAX, TCP_BPF_RTO_MIN) cannot be read from user space; tcp_info's ato and rto show their effect"
                .into(),
        );
    }
}

/// Step 9: sockets that no process holds (inode 0) are not missing owners: the application
/// closed them and the kernel finishes the connection on its own (TIME-WAIT, an orphaned
/// FIN-WAIT / LAST-ACK), or the handshake has not been accepted yet (SYN-RECV).
fn say_closed(rows: &[SocketRow], notes: &mut Vec<String>) {
    let mut states: BTreeSet<&str> = BTreeSet::new();
    let mut n = 0;
    for r in rows.iter().filter(|r| r.inode == 0 && r.owners.is_empty()) {
        states.insert(r.state.as_str());
        n += 1;
    }
    if n == 0 {
        return;
    }
    let states: Vec<&str> = states.into_iter().collect();
    notes.push(format!(
        "{} ({}) {} to no process: TIME-WAIT and orphaned sockets (FIN-WAIT, LAST-ACK, CLOSING) \
         were closed by the application and the kernel finishes the connection alone (TIME-WAIT lasts 60 s); \
         SYN-RECV entries are handshakes not yet accepted",
        latscope_core::units::count(n as u64, "socket"),
        states.join(", "),
        latscope_core::units::verb(n as u64, "belongs", "belong")
    ));
}

/// Add `new` notes not already in `notes` (the same kernel limit shows in every namespace).
fn note_once(notes: &mut Vec<String>, new: Vec<String>) {
    for n in new {
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
}

/// Run `f` in the namespace `handle` stands for.
fn in_ns<T, F>(handle: &NsHandle, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    match handle {
        NsHandle::Own => f(),
        NsHandle::Pid(pid) => netns::run_in_netns_of(*pid, f),
        NsHandle::File(file) => {
            let file = file
                .try_clone()
                .map_err(|e| InspectError::io("duplicating a namespace fd", e))?;
            netns::run_in_netns(file, "a socket's network namespace".into(), f)
        }
    }
}

fn fmt_addr(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(v) => v.to_string(),
        SocketAddr::V6(v) => match v.ip().to_ipv4_mapped() {
            Some(m) => format!("{m}:{}", v.port()),
            None => format!("[{}]:{}", v.ip(), v.port()),
        },
    }
}

fn row_from(s: &DiagSocket, netns: u64, own: bool, owners: Vec<Owner>) -> SocketRow {
    SocketRow {
        proto: s.proto.name().into(),
        family: if s.local.is_ipv4() { "ipv4" } else { "ipv6" }.into(),
        state: socket::state_name(s.proto, s.state).into(),
        local: fmt_addr(&s.local),
        remote: fmt_addr(&s.remote),
        inode: s.inode,
        uid: s.uid,
        netns,
        netns_is_own: own,
        owners,
        options: None,
        options_error: None,
        tcp: s.tcp.clone(),
        mem: s.mem.clone(),
        route: None,
        findings: Vec::new(),
    }
}

/// Look up `ip route` rto_min/quickack for the remote address of each connected TCP socket.
fn add_route_limits(
    rows: &mut [SocketRow],
    listed: &[(u64, Vec<DiagSocket>)],
    handles: &HashMap<u64, NsHandle>,
) {
    let remotes: HashMap<u64, SocketAddr> = listed
        .iter()
        .flat_map(|(_, v)| v.iter().map(|s| (s.inode, s.remote)))
        .collect();
    // Remote addresses of connected TCP sockets, per namespace.
    let mut by_ns: HashMap<u64, BTreeSet<std::net::IpAddr>> = HashMap::new();
    for r in rows.iter() {
        if r.proto != "tcp" || r.state != "ESTAB" || r.inode == 0 {
            continue;
        }
        if let Some(remote) = remotes.get(&r.inode) {
            by_ns.entry(r.netns).or_default().insert(remote.ip());
        }
    }
    let mut limits: HashMap<(u64, std::net::IpAddr), RouteLimits> = HashMap::new();
    for (ns, ips) in by_ns {
        let Some(handle) = handles.get(&ns) else {
            continue;
        };
        let ips: Vec<_> = ips.into_iter().collect();
        let lookup = move || -> Result<Vec<(std::net::IpAddr, Option<RouteLimits>)>> {
            let mut rl = route::RouteLookup::open()?;
            Ok(ips
                .iter()
                .map(|ip| (*ip, rl.limits(*ip).ok().flatten()))
                .collect())
        };
        // Routes are an extra; a failure here leaves the column empty.
        if let Ok(v) = in_ns(handle, lookup) {
            for (ip, l) in v {
                if let Some(l) = l {
                    limits.insert((ns, ip), l);
                }
            }
        }
    }
    for r in rows.iter_mut() {
        if let Some(remote) = remotes.get(&r.inode) {
            r.route = limits.get(&(r.netns, remote.ip())).cloned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str, inode: u64, owned: bool) -> SocketRow {
        SocketRow {
            proto: "tcp".into(),
            family: "ipv4".into(),
            state: state.into(),
            local: "127.0.0.1:80".into(),
            remote: "127.0.0.1:40000".into(),
            inode,
            uid: 0,
            netns: 1,
            netns_is_own: true,
            owners: if owned {
                vec![Owner {
                    pid: 7,
                    comm: "srv".into(),
                    fd: 3,
                }]
            } else {
                Vec::new()
            },
            options: None,
            options_error: None,
            tcp: None,
            mem: None,
            route: None,
            findings: Vec::new(),
        }
    }

    fn access(unreadable: u32) -> Access {
        Access {
            cap_sys_ptrace: true,
            processes_unreadable: unreadable,
            ..Access::default()
        }
    }

    #[test]
    fn time_wait_and_orphans_are_not_blamed_on_unreadable_processes() {
        let rows = [
            row("LISTEN", 11, true),
            row("TIME-WAIT", 0, false),
            row("FIN-WAIT-2", 0, false),
        ];
        let mut a = access(1);
        say_missing(&rows, &mut a, 0, &Listing::default());
        assert!(a.missing.is_empty(), "{:?}", a.missing);
        let mut notes = Vec::new();
        say_closed(&rows, &mut notes);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("2 sockets (FIN-WAIT-2, TIME-WAIT) belong to no process"),
            "{}",
            notes[0]
        );
        let mut notes = Vec::new();
        say_closed(&rows[..2], &mut notes);
        assert!(
            notes[0].starts_with("1 socket (TIME-WAIT) belongs to no process"),
            "{}",
            notes[0]
        );
    }

    #[test]
    fn an_open_socket_without_owner_names_the_unreadable_processes() {
        let rows = [row("ESTAB", 12, false), row("TIME-WAIT", 0, false)];
        let mut a = access(2);
        say_missing(&rows, &mut a, 0, &Listing::default());
        assert_eq!(a.missing.len(), 1, "{:?}", a.missing);
        assert!(
            a.missing[0].starts_with(
                "the owning process and fd of 1 open socket: 2 processes could not be read"
            ),
            "{}",
            a.missing[0]
        );
        // Nothing to explain when every socket has its process.
        let mut a = access(2);
        say_missing(&[row("ESTAB", 12, true)], &mut a, 0, &Listing::default());
        assert!(a.missing.is_empty());
        let mut notes = Vec::new();
        say_closed(&[row("ESTAB", 12, true)], &mut notes);
        assert!(notes.is_empty());
    }
}

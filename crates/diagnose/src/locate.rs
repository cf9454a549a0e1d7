//! Where the server runs: in this network namespace, in another one on this host (a container,
//! an `ip netns` namespace), or on another host. The steps that read the server's own sockets,
//! its kernel stack and its CPU scheduling need it on this host, in whichever namespace.

use std::collections::HashSet;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// A server found on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalServer {
    /// Inode of its network namespace (as `ls -i /proc/PID/ns/net`).
    pub netns_inode: u64,
    /// Whether that is latscope's own namespace.
    pub own_netns: bool,
}

/// Whether `addr`'s IP is an address of the calling thread's namespace, and whether something
/// holds its port there (a bind of the port fails).
fn here(addr: SocketAddr) -> (bool, bool) {
    let local = UdpSocket::bind((addr.ip(), 0)).is_ok();
    let port_taken =
        local && TcpListener::bind(addr).is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse);
    (local, port_taken)
}

/// Every network namespace we can open: named ones (`ip netns`, /run/netns) and those of every
/// process, one file each (deduplicated by inode).
fn namespaces(skip: u64) -> Vec<(u64, File)> {
    let mut seen: HashSet<u64> = HashSet::from([skip]);
    let mut out = Vec::new();
    for path in latscope_sys::netns::namespace_paths() {
        let Ok(f) = File::open(&path) else { continue };
        let Ok(m) = f.metadata() else { continue };
        if seen.insert(m.ino()) {
            out.push((m.ino(), f));
        }
    }
    out
}

/// Find the server at `addr` on this host: our own namespace first, else a namespace where the
/// address is local and its port is held (a listener), else one where the address alone is
/// local. `None`: another host, or namespaces we may not enter (needs CAP_SYS_ADMIN).
///
/// Several namespaces can have the same address and port (containers built from one image,
/// each with its own copy of a network): then the one that takes a connection of ours is the
/// server — found by that connection's 4-tuple, as only its namespace has the other end.
pub fn locate(addr: SocketAddr) -> Option<LocalServer> {
    let own = latscope_inspect::procfs::own_netns().unwrap_or(0);
    if here(addr).0 {
        return Some(LocalServer {
            netns_inode: own,
            own_netns: true,
        });
    }
    let mut listening = Vec::new();
    let mut address_only = None;
    for (inode, file) in namespaces(own) {
        let Ok(dup) = file.try_clone() else { continue };
        let found = latscope_inspect::netns::run_in_netns(dup, "a network namespace".into(), {
            move || Ok(here(addr))
        });
        match found {
            Ok((true, true)) => listening.push((inode, file)),
            Ok((true, false)) if address_only.is_none() => address_only = Some(inode),
            _ => {}
        }
    }
    let inode = match listening.len() {
        0 => address_only?,
        1 => listening[0].0,
        _ => took_our_connection(addr, listening)?,
    };
    Some(LocalServer {
        netns_inode: inode,
        own_netns: false,
    })
}

/// Of `candidates` (namespaces where `addr` is local and listened on), the one holding the
/// server's end of a connection we open to `addr`: local = `addr`, remote = our end.
fn took_our_connection(addr: SocketAddr, candidates: Vec<(u64, File)>) -> Option<u64> {
    let conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    let ours = conn.local_addr().ok()?;
    let same = |a: SocketAddr, b: SocketAddr| {
        a.ip().to_canonical() == b.ip().to_canonical() && a.port() == b.port()
    };
    let found = candidates.into_iter().find_map(|(inode, file)| {
        let list = latscope_inspect::netns::run_in_netns(
            file,
            "a network namespace".into(),
            latscope_inspect::diag::dump_all,
        )
        .ok()?;
        list.sockets
            .iter()
            .any(|s| same(s.local, addr) && same(s.remote, ours))
            .then_some(inode)
    });
    drop(conn);
    found
}

//! Binding and the accept loop: one thread per accepted connection (reused from the last ones,
//! see `conn_threads`), which first takes a connection slot (see `admission`) and then runs the
//! handshake (see `control`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::conn_threads::ConnThreads;
use super::{POLL, ServeConfig, ServeEvent, Server, Shared, admission, control, udp, udp_usage};
use crate::NetError;
use crate::sock::Conn;
use latscope_sys::error::MissingPrivilege;

/// The listen backlog asked for: the kernel caps it at net.core.somaxconn (4096 since Linux
/// 5.4). Connections the kernel has completed wait there for the accept loop; a client that
/// opens and closes them as fast as it can (`latscope connect`, nginx's and haproxy's
/// `backlog=` defaults are the same cap) must find room for a burst while the loop hands the
/// last ones to their threads — with 1024 the queue overflowed once per `connect -d 1s` run and
/// the dropped SYN was resent a second later (issue 41).
const LISTEN_BACKLOG: i32 = 65_535;

/// Bind TCP and UDP on the same port (with port 0, one the kernel picks free for both).
fn bind_pair(bind: IpAddr, port: u16) -> io::Result<(TcpListener, UdpSocket)> {
    let domain = if bind.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    // With port 0 the kernel picks a TCP port that may be taken for UDP: retry a few times.
    let mut last = None;
    for _ in 0..32 {
        let tcp = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if bind.is_ipv6() {
            let _ = tcp.set_only_v6(false);
        }
        tcp.set_reuse_address(true)?;
        tcp.bind(&SocketAddr::new(bind, port).into())?;
        tcp.listen(LISTEN_BACKLOG)?;
        let tcp: TcpListener = tcp.into();
        let actual = tcp.local_addr()?.port();
        let udp = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if bind.is_ipv6() {
            let _ = udp.set_only_v6(false);
        }
        match udp.bind(&SocketAddr::new(bind, actual).into()) {
            Ok(()) => return Ok((tcp, udp.into())),
            Err(e) if port == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port")))
}

fn bind_error(what: &str, e: io::Error) -> NetError {
    match e.kind() {
        io::ErrorKind::AddrInUse => NetError::Invalid(format!(
            "{what}: the address is already in use (another server listens there): stop it, or \
             choose another port"
        )),
        io::ErrorKind::PermissionDenied => NetError::Privilege(MissingPrivilege {
            what: what.into(),
            capability: "CAP_NET_BIND_SERVICE (ports below 1024)".into(),
            remedy: "use a port ≥ 1024".into(),
        }),
        _ => NetError::io(what, e),
    }
}

fn bind_unix(p: &std::path::Path) -> Result<UnixListener, NetError> {
    // A stale socket file from a previous run would make bind fail; remove it only if it is a
    // socket nobody answers on.
    if p.exists() && std::os::unix::net::UnixStream::connect(p).is_err() {
        let _ = std::fs::remove_file(p);
    }
    UnixListener::bind(p).map_err(|e| bind_error(&format!("binding {}", p.display()), e))
}

impl Server {
    /// Bind every socket. `log` receives the server's events (from several threads).
    pub fn bind(
        cfg: ServeConfig,
        stop: Arc<AtomicBool>,
        log: impl Fn(ServeEvent) + Send + Sync + 'static,
    ) -> Result<Server, NetError> {
        let where_ = format!("binding {}", SocketAddr::new(cfg.bind, cfg.port));
        let (tcp, udp) = match bind_pair(cfg.bind, cfg.port) {
            Ok(p) => p,
            // IPv6 disabled on this host: fall back to IPv4 only.
            Err(e)
                if cfg.bind == IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    && e.raw_os_error() == Some(libc::EAFNOSUPPORT) =>
            {
                bind_pair(IpAddr::V4(Ipv4Addr::UNSPECIFIED), cfg.port)
                    .map_err(|e| bind_error(&where_, e))?
            }
            Err(e) => return Err(bind_error(&where_, e)),
        };
        let unix = match &cfg.unix {
            Some(p) => Some((bind_unix(p)?, p.clone())),
            None => None,
        };
        tcp.set_nonblocking(true)
            .map_err(|e| NetError::io("listener", e))?;
        if let Some((l, _)) = &unix {
            l.set_nonblocking(true)
                .map_err(|e| NetError::io("listener", e))?;
        }
        udp.set_read_timeout(Some(udp_usage::UDP_IDLE))
            .map_err(|e| NetError::io("udp socket", e))?;
        let udp_out = udp.try_clone().ok();
        // Test buffers come from their own mappings and go back to the kernel when freed.
        latscope_sys::mem::unmap_large_allocations(128 * 1024);
        Ok(Server {
            tcp,
            udp,
            unix,
            shared: Arc::new(Shared {
                udp_usage: Mutex::new(udp_usage::UdpUsage::default()),
                cfg,
                stop,
                conns: AtomicU32::new(0),
                tests: AtomicU32::new(0),
                next_id: AtomicU64::new(1),
                udp_tests: RwLock::new(HashMap::new()),
                streams: RwLock::new(HashMap::new()),
                sources: Mutex::new(HashMap::new()),
                rates: Mutex::new(HashMap::new()),
                memory: AtomicU64::new(0),
                evidence_use: Mutex::new(Default::default()),
                busy: Mutex::new(admission::WorkerQueue::default()),
                free: Condvar::new(),
                udp_out,
                log: Box::new(log),
            }),
        })
    }

    /// Run until the stop flag is set. Removes the unix socket file on the way out.
    pub fn run(self) -> Result<(), NetError> {
        let sh = self.shared.clone();
        (sh.log)(ServeEvent::Listening {
            exposed: exposed(self.tcp_addr().ip()),
            tcp: self.tcp_addr(),
            udp: self
                .udp
                .local_addr()
                .map_err(|e| NetError::io("udp socket", e))?,
            unix: self.unix.as_ref().map(|(_, p)| p.clone()),
        });
        let udp_shared = sh.clone();
        let udp_sock = self.udp;
        let udp_thread = thread::Builder::new()
            .name("serve-udp".into())
            .spawn(move || udp::udp_loop(&udp_sock, &udp_shared))
            .map_err(|e| NetError::io("spawning the UDP thread", e))?;
        accept_loop(&sh, &self.tcp, self.unix.as_ref());
        let _ = udp_thread.join();
        if let Some((_, p)) = &self.unix {
            let _ = std::fs::remove_file(p);
        }
        Ok(())
    }
}

/// The interfaces a server bound to `bind` is reachable through: every one for a wildcard
/// address (IPv4 ones only for 0.0.0.0), else the one holding the address.
fn exposed(bind: IpAddr) -> Vec<(String, IpAddr)> {
    let all = latscope_sys::net::interface_addrs().unwrap_or_default();
    all.into_iter()
        .filter(|(_, ip)| match bind {
            IpAddr::V4(b) if b.is_unspecified() => ip.is_ipv4(),
            IpAddr::V6(b) if b.is_unspecified() => true,
            b => *ip == b,
        })
        .collect()
}

/// Longest pause of the accept loop while descriptors (or socket memory) are exhausted.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Wait for connections (waking every [`POLL`] to check the stop flag) and hand each to its own
/// thread. When accept fails for lack of descriptors (EMFILE), the pending connection stays
/// queued and poll would report it again at once: back off (1 ms doubling to 500 ms) instead of
/// spinning.
fn accept_loop(sh: &Arc<Shared>, tcp: &TcpListener, unix: Option<&(UnixListener, PathBuf)>) {
    let mut fds = vec![libc::pollfd {
        fd: tcp.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some((l, _)) = unix {
        fds.push(libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    let threads = ConnThreads::new(
        sh.stop.clone(),
        admission::THREAD_STACK,
        sh.cfg.max_connections as usize,
    );
    let mut backoff = Duration::ZERO;
    while !sh.stopping() {
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the whole call.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                POLL.as_millis() as i32,
            )
        };
        if n <= 0 {
            continue;
        }
        let mut next_tcp = || {
            tcp.accept().map(|(s, peer)| {
                let _ = s.set_nonblocking(false);
                (Conn::Tcp(s), peer.to_string(), Some(peer.ip()))
            })
        };
        let mut exhausted = drain(sh, &threads, &mut next_tcp);
        if let Some((l, p)) = unix {
            let mut next_unix = || {
                l.accept().map(|(s, _)| {
                    let _ = s.set_nonblocking(false);
                    (Conn::Unix(s), format!("unix:{}", p.display()), None)
                })
            };
            exhausted |= drain(sh, &threads, &mut next_unix);
        }
        if exhausted {
            backoff = (backoff * 2).clamp(Duration::from_millis(1), MAX_BACKOFF);
            std::thread::sleep(backoff);
        } else {
            backoff = Duration::ZERO;
        }
    }
}

type Accepted = (Conn, String, Option<IpAddr>);

/// Accept until the queue is empty; true if accept failed for lack of resources.
fn drain(
    sh: &Arc<Shared>,
    threads: &Arc<ConnThreads>,
    next: &mut dyn FnMut() -> io::Result<Accepted>,
) -> bool {
    loop {
        match next() {
            Ok((conn, peer, ip)) => spawn_conn(sh, threads, conn, peer, ip),
            Err(e) if latscope_sys::error::is_resource_exhaustion(&e) => return true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            // ECONNABORTED and the like: that connection is gone, try the next.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(_) => return false,
        }
    }
}

/// One thread per connection: take a connection slot (or refuse), then run the handshake.
fn spawn_conn(
    sh: &Arc<Shared>,
    threads: &Arc<ConnThreads>,
    conn: Conn,
    peer: String,
    peer_ip: Option<IpAddr>,
) {
    let sh2 = sh.clone();
    let peer2 = peer.clone();
    let ran = threads.run(Box::new(move || {
        match admission::take(&sh2, admission::Resource::Conn, peer_ip) {
            Ok(slot) => control::handle_conn(&sh2, conn, slot, peer2, peer_ip),
            Err(why) => control::refuse_connection(&sh2, conn, peer2, why),
        }
    }));
    if ran.is_err() {
        (sh.log)(ServeEvent::Refused {
            peer,
            reason: "cannot start a thread".into(),
        });
    }
}

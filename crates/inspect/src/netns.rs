//! Running code inside another network namespace (a container's): a helper thread joins the
//! namespace with setns(CLONE_NEWNET) — only that thread moves, the rest of latscope stays where
//! it is — runs the closure, and ends. Netlink sockets opened there see that namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use crate::error::{InspectError, Result};

/// Run `f` in the network namespace of process `pid` (its `/proc/PID/ns/net`), on a helper
/// thread. Entering another namespace needs CAP_SYS_ADMIN; opening its ns file needs ptrace read
/// access to the process.
pub fn run_in_netns_of<T, F>(pid: u32, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let path = format!("/proc/{pid}/ns/net");
    let ns = File::open(&path).map_err(|e| InspectError::io(format!("opening {path}"), e))?;
    run_in_netns(ns, format!("the network namespace of pid {pid}"), f)
}

/// Run `f` on a helper thread that joined the network namespace `ns` (an open
/// `/proc/PID/ns/net`, or the fd ioctl(SIOCGSKNS) returns for a socket). `what` names the
/// namespace in errors.
pub fn run_in_netns<T, F>(ns: File, what: String, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("netns-helper".into())
        .spawn(move || -> Result<T> {
            // SAFETY: setns on a valid namespace fd; it only changes this helper thread's
            // namespace, and the thread ends right after `f`.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(if e.kind() == io::ErrorKind::PermissionDenied {
                    InspectError::Privilege {
                        what: format!("entering {what}"),
                        capability: "CAP_SYS_ADMIN",
                    }
                } else {
                    InspectError::io(format!("entering {what}"), e)
                });
            }
            drop(ns);
            f()
        })
        .map_err(|e| InspectError::io("starting a namespace helper thread", e))?;
    handle.join().map_err(|_| InspectError::Malformed {
        what: "namespace helper thread".into(),
        detail: "it panicked".into(),
    })?
}

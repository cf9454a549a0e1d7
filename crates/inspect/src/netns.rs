//! Running code inside another network namespace (a container's), on the helper thread of
//! [`latscope_sys::netns::run_in`]. Netlink sockets opened there see that namespace.

use std::fs::File;
use std::io;

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
    latscope_sys::netns::run_in(ns, f)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                InspectError::Privilege {
                    what: format!("entering {what}"),
                    capability: "CAP_SYS_ADMIN",
                }
            } else {
                InspectError::io(format!("entering {what}"), e)
            }
        })
        .and_then(|r| r)
}

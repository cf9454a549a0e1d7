//! Running code inside another network namespace: a helper thread joins the namespace with
//! setns(CLONE_NEWNET) — only that thread moves, the rest of latscope stays where it is — runs
//! the closure, and ends. Sockets, netlink sockets and netfilter BPF links it creates belong to
//! that namespace and stay there after the thread ends.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Where network namespaces can be opened, as `ip netns identify` looks: the names in
/// /run/netns, then every process's /proc/PID/ns/net (several paths may be one namespace).
pub fn namespace_paths() -> impl Iterator<Item = PathBuf> {
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path());
    let procs = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .map(|e| e.path().join("ns/net"));
    named.chain(procs)
}

/// Run `f` on a helper thread that joined the network namespace `ns` (an open
/// `/proc/PID/ns/net`, `/run/netns/NAME`, or the fd ioctl(SIOCGSKNS) returns for a socket).
/// Entering a namespace needs CAP_SYS_ADMIN (`PermissionDenied` otherwise).
pub fn run_in<T, F>(ns: File, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("netns-helper".into())
        .spawn(move || -> io::Result<T> {
            // SAFETY: setns on a valid namespace fd; it only changes this helper thread's
            // namespace, and the thread ends right after `f`.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            drop(ns);
            Ok(f())
        })?;
    handle
        .join()
        .map_err(|_| io::Error::other("the namespace helper thread panicked"))?
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn runs_in_the_namespace_it_is_given() {
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        let ns = File::open("/proc/self/ns/net").unwrap();
        // Joining one's own namespace needs CAP_SYS_ADMIN too; without it the error says so.
        match run_in(ns, || {
            std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
        }) {
            Ok(ino) => assert_eq!(ino, own),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}"),
        }
    }
}

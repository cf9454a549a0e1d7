//! /proc scanning: which processes exist, their names, their network namespace, and which of
//! their fds are sockets (`/proc/PID/fd/N` → `socket:[INODE]`).
//!
//! Processes come and go while we read: a vanished process or fd is an expected outcome
//! ([`ProcError::Gone`]), not an error to print.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::PathBuf;

/// Why a process could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcError {
    /// It exited (ENOENT/ESRCH).
    Gone,
    /// Not allowed: reading another process's fds needs ptrace read access (CAP_SYS_PTRACE for
    /// processes with other credentials or more capabilities).
    Denied,
    /// Anything else.
    Other,
}

impl From<&io::Error> for ProcError {
    fn from(e: &io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound => ProcError::Gone,
            io::ErrorKind::PermissionDenied => ProcError::Denied,
            _ if e.raw_os_error() == Some(libc::ESRCH) => ProcError::Gone,
            _ => ProcError::Other,
        }
    }
}

fn proc_path(pid: u32, rest: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{rest}"))
}

/// Every pid in /proc (thread-group leaders only: threads share the fd table).
pub fn all_pids() -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// Whether the process exists.
pub fn exists(pid: u32) -> bool {
    proc_path(pid, "").exists()
}

/// The process name (`/proc/PID/comm`), or "?" if it cannot be read.
pub fn comm(pid: u32) -> String {
    fs::read_to_string(proc_path(pid, "comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Parse the inode out of a link target like `socket:[12345]` or `net:[4026531840]`.
pub fn bracket_inode(link: &str, prefix: &str) -> Option<u64> {
    link.strip_prefix(prefix)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inode of the process's network namespace.
pub fn netns(pid: u32) -> Result<u64, ProcError> {
    let l = fs::read_link(proc_path(pid, "ns/net")).map_err(|e| ProcError::from(&e))?;
    bracket_inode(&l.to_string_lossy(), "net").ok_or(ProcError::Other)
}

/// The network namespace of this process.
pub fn own_netns() -> Option<u64> {
    let l = fs::read_link("/proc/self/ns/net").ok()?;
    bracket_inode(&l.to_string_lossy(), "net")
}

/// The process's socket fds: socket inode → fd numbers (a socket may be dup'ed).
pub fn socket_fds(pid: u32) -> Result<HashMap<u64, Vec<i32>>, ProcError> {
    let dir = fs::read_dir(proc_path(pid, "fd")).map_err(|e| ProcError::from(&e))?;
    let mut out: HashMap<u64, Vec<i32>> = HashMap::new();
    for entry in dir {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        // An fd closed between readdir and readlink simply is not there any more.
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if let Some(inode) = bracket_inode(&target.to_string_lossy(), "socket") {
            out.entry(inode).or_default().push(fd);
        }
    }
    for fds in out.values_mut() {
        fds.sort_unstable();
    }
    Ok(out)
}

/// Whether CAP_SYS_PTRACE is in this process's effective capability set (`/proc/self/status`).
pub fn has_cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_links() {
        assert_eq!(bracket_inode("socket:[12345]", "socket"), Some(12345));
        assert_eq!(bracket_inode("net:[4026531840]", "net"), Some(4026531840));
        assert_eq!(bracket_inode("pipe:[1]", "socket"), None);
        assert_eq!(bracket_inode("/dev/null", "socket"), None);
    }

    #[test]
    fn sees_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        use std::os::fd::AsRawFd;
        let fds = socket_fds(std::process::id()).expect("own fds");
        assert!(fds.values().any(|v| v.contains(&l.as_raw_fd())));
        assert!(own_netns().is_some());
        assert_eq!(netns(std::process::id()).ok(), own_netns());
    }

    #[test]
    fn missing_process_is_gone() {
        // pid_max is at most 2^22; this pid cannot exist.
        assert_eq!(socket_fds(u32::MAX - 1).err(), Some(ProcError::Gone));
        assert!(!exists(u32::MAX - 1));
    }
}

//! latscope-inspect: the latency-relevant state of other processes' sockets, read without
//! stopping them.
//!
//! - [`procfs`]: processes, their names, network namespaces and socket fds (`/proc`).
//! - [`diag`] + [`tcpinfo`]: every TCP/UDP socket of a namespace with tcp_info, congestion
//!   control and memory (NETLINK_SOCK_DIAG, hand-written on [`netlink`]); [`socket`]: one such
//!   socket, whichever reader found it.
//! - [`netns`]: running those queries inside another network namespace (containers);
//!   [`procnet`]: `/proc/PID/net/*` for namespaces latscope may not enter.
//! - [`sockopt`]: pidfd_open + pidfd_getfd, then getsockopt on the duplicate.
//! - [`route`]: per-route `rto_min` / `quickack` (RTM_GETROUTE).
//! - [`findings`]: plain-word rules over one socket.
//! - [`scan`]: the whole `latscope sockets` scan; [`watch`]: `--watch` (setsockopt tracepoint).
#![warn(missing_docs)]

pub mod diag;
pub mod error;
pub mod findings;
pub mod netlink;
pub mod netns;
pub mod procfs;
pub mod procnet;
pub mod route;
pub mod scan;
pub mod socket;
pub mod sockopt;
pub use latscope_sys::tcpinfo;
pub mod watch;

pub use error::{InspectError, Result};
pub use scan::{Selection, scan};
pub use watch::Watcher;

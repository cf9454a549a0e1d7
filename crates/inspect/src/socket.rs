//! One socket as the kernel's tables describe it, whichever reader found it: sock_diag
//! ([`crate::diag`]) or the `/proc/net` text ([`crate::procnet`]).

use std::net::SocketAddr;

use latscope_core::model::sockets::{SocketMemory, TcpStats};

/// Transport protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// "tcp" / "udp".
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One socket as sock_diag describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct DiagSocket {
    /// TCP or UDP.
    pub proto: Proto,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port (unspecified for listeners and unconnected UDP).
    pub remote: SocketAddr,
    /// Kernel TCP state number (TCP_ESTABLISHED = 1, ...; UDP uses 1 connected, 7 unconnected).
    pub state: u8,
    /// Socket inode (matches `/proc/PID/fd/N` → `socket:[INODE]`).
    pub inode: u64,
    /// Owner uid.
    pub uid: u32,
    /// tcp_info (INET_DIAG_INFO), TCP only.
    pub tcp: Option<TcpStats>,
    /// Queue and buffer memory (INET_DIAG_SKMEMINFO).
    pub mem: Option<SocketMemory>,
}

/// `ss`'s name for a kernel TCP state.
pub fn state_name(proto: Proto, state: u8) -> &'static str {
    match (proto, state) {
        (Proto::Udp, 1) => "ESTAB",
        (Proto::Udp, _) => "UNCONN",
        (_, 1) => "ESTAB",
        (_, 2) => "SYN-SENT",
        (_, 3) => "SYN-RECV",
        (_, 4) => "FIN-WAIT-1",
        (_, 5) => "FIN-WAIT-2",
        (_, 6) => "TIME-WAIT",
        (_, 7) => "CLOSE",
        (_, 8) => "CLOSE-WAIT",
        (_, 9) => "LAST-ACK",
        (_, 10) => "LISTEN",
        (_, 11) => "CLOSING",
        (_, 12) => "SYN-RECV",
        _ => "UNKNOWN",
    }
}

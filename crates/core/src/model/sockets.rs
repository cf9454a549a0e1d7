//! `latscope sockets`: the latency-relevant state of other processes' sockets, read from the
//! sockets themselves (getsockopt on a duplicated fd) and from the kernel's socket diagnostics
//! (sock_diag / tcp_info), plus `--watch` events for setsockopt calls as they happen.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Meta;

/// The report of `latscope sockets`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SocketsReport {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// What was asked: "pid 1234", "port 8080", "all".
    pub selection: String,
    /// What this run could read, and what it could not and why.
    pub access: Access,
    /// One row per socket (a socket shared by several processes is one row with several owners).
    pub sockets: Vec<SocketRow>,
    /// Things that happened during the scan, in plain words (a process exited, a socket closed).
    pub notes: Vec<String>,
}

/// What this run was allowed to read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Access {
    /// CAP_SYS_PTRACE is in the effective set: other processes' fds can be duplicated.
    pub cap_sys_ptrace: bool,
    /// Columns that are empty in this run, and why.
    pub missing: Vec<String>,
    /// Processes whose fd table could not be read (permission denied).
    pub processes_unreadable: u32,
}

/// A process holding a socket, and the fd number it holds it under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// The process name (`/proc/PID/comm`).
    pub comm: String,
    /// The file descriptor number in that process.
    pub fd: i32,
}

/// One TCP or UDP socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SocketRow {
    /// "tcp" or "udp".
    pub proto: String,
    /// "ipv4" or "ipv6".
    pub family: String,
    /// TCP state as `ss` names it (ESTAB, LISTEN, TIME-WAIT, ...); UDP: UNCONN or ESTAB.
    pub state: String,
    /// "addr:port" ("[v6]:port").
    pub local: String,
    /// Peer "addr:port"; "*:*" for listening and unconnected sockets.
    pub remote: String,
    /// The socket inode (what `/proc/PID/fd/N` links to as `socket:[INODE]`).
    pub inode: u64,
    /// The socket's owner uid.
    pub uid: u32,
    /// Network namespace inode (`/proc/PID/ns/net`), and whether it is this process's own. 0 when
    /// unknown: the socket was listed from `/proc/PID/net` of a process latscope may not inspect.
    pub netns: u64,
    /// The socket lives in latscope's own network namespace.
    pub netns_is_own: bool,
    /// Processes holding the socket; empty when no process could be matched (or read).
    pub owners: Vec<Owner>,
    /// Options read with getsockopt on a duplicate of the socket (pidfd_getfd). None when they
    /// could not be read; `options_error` says why.
    pub options: Option<SocketOptions>,
    /// Why `options` could not be read (no CAP_SYS_PTRACE, the process exited, ...).
    pub options_error: Option<String>,
    /// From sock_diag INET_DIAG_INFO (TCP only).
    pub tcp: Option<TcpStats>,
    /// From sock_diag INET_DIAG_SKMEMINFO: queue and buffer memory.
    pub mem: Option<SocketMemory>,
    /// Per-route limits for the remote address (`ip route ... rto_min / quickack`), if set.
    pub route: Option<RouteLimits>,
    /// Plain-word findings about latency.
    pub findings: Vec<SocketFinding>,
}

/// Socket options read from the socket itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SocketOptions {
    /// TCP_NODELAY: Nagle's algorithm off. TCP only.
    pub nodelay: Option<bool>,
    /// TCP_CORK: partial frames held back until uncorked (or 200 ms). TCP only.
    pub cork: Option<bool>,
    /// TCP_QUICKACK as getsockopt reports it: whether the kernel is *currently* in quick-ack
    /// mode. It is a transient state, not a sticky option: the kernel leaves quick-ack mode by
    /// itself, and setting it is a one-shot hint that applications re-arm after reads.
    pub quickack_now: Option<bool>,
    /// SO_SNDBUF / SO_RCVBUF as the kernel reports them (twice what was asked with setsockopt,
    /// for bookkeeping overhead).
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF as the kernel reports it (twice what was asked).
    pub rcvbuf: Option<u32>,
    /// TCP_NOTSENT_LOWAT in bytes as getsockopt returns it: 0 = not set on the socket (the sysctl
    /// net.ipv4.tcp_notsent_lowat applies, by default UINT_MAX = no limit).
    pub notsent_lowat: Option<u32>,
    /// TCP_CONGESTION.
    pub congestion: Option<String>,
    /// SO_KEEPALIVE and, when on, TCP_KEEPIDLE / TCP_KEEPINTVL (s) and TCP_KEEPCNT.
    pub keepalive: Option<bool>,
    /// TCP_KEEPIDLE, s: idle time before the first keepalive probe.
    pub keepidle_s: Option<u32>,
    /// TCP_KEEPINTVL, s: time between keepalive probes.
    pub keepintvl_s: Option<u32>,
    /// TCP_KEEPCNT: unanswered probes before the connection is dropped.
    pub keepcnt: Option<u32>,
    /// SO_BUSY_POLL in µs (0 = off).
    pub busy_poll_us: Option<u32>,
    /// TCP_USER_TIMEOUT in ms (0 = system default).
    pub user_timeout_ms: Option<u32>,
    /// TCP_MAXSEG.
    pub maxseg: Option<u32>,
    /// TCP_RTO_MIN_US: the socket's minimum retransmission timeout (default 200 ms; also what
    /// a BPF program's TCP_BPF_RTO_MIN sets). None on kernels without the option.
    pub rto_min_us: Option<u32>,
    /// TCP_RTO_MAX_MS: the socket's maximum retransmission timeout (default 120 s).
    pub rto_max_ms: Option<u32>,
    /// TCP_DELACK_MAX_US: the longest this socket delays an ACK (default 200 ms; also what
    /// TCP_BPF_DELACK_MAX sets). None on kernels without the option.
    pub delack_max_us: Option<u32>,
}

/// TCP state from tcp_info (parsed at whatever length the kernel returned; fields newer than the
/// running kernel are None).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TcpStats {
    /// Length of the tcp_info the kernel returned, bytes.
    pub info_len: u32,
    /// Congestion-control algorithm (INET_DIAG_CONG).
    pub congestion: Option<String>,
    /// Smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// Round-trip time variation, µs.
    pub rttvar_us: u32,
    /// Lowest RTT seen on the connection, µs (kernel 4.10+).
    pub min_rtt_us: Option<u32>,
    /// Retransmission timeout currently in force.
    pub rto_us: u32,
    /// Delayed-ACK timeout the kernel uses for this connection right now.
    pub ato_us: u32,
    /// Largest segment this side sends, bytes.
    pub snd_mss: u32,
    /// Largest segment seen from the peer, bytes.
    pub rcv_mss: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Segments sent but not yet acknowledged.
    pub unacked: u32,
    /// Segments currently thought lost.
    pub lost: u32,
    /// Retransmitted segments currently outstanding, and over the connection's life.
    pub retrans: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Bytes written by the application but not yet sent.
    pub notsent_bytes: Option<u32>,
    /// Most recent delivery-rate sample, bit/s.
    pub delivery_rate_bps: Option<u64>,
    /// Pacing rate, bit/s.
    pub pacing_rate_bps: Option<u64>,
    /// Bytes the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// Bytes received from the peer.
    pub bytes_received: Option<u64>,
    /// Segments with data received.
    pub data_segs_in: Option<u32>,
    /// Segments with data sent.
    pub data_segs_out: Option<u32>,
    /// Time busy sending, and the parts of it limited by the receive window / the send buffer.
    pub busy_time_us: Option<u64>,
    /// Part of the busy time limited by the peer's receive window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// Part of the busy time limited by the send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// Milliseconds since the last data sent / received.
    pub last_data_sent_ms: u32,
    /// Milliseconds since data was last received.
    pub last_data_recv_ms: u32,
    /// Peer's advertised receive window after scaling.
    pub snd_wnd: Option<u32>,
    /// Timeouts (RTOs) over the connection's life (kernel 6.7+).
    pub total_rto: Option<u16>,
    /// This socket's advertised receive window, bytes (kernel 6.2+).
    #[serde(default)]
    pub rcv_wnd: Option<u32>,
    /// Receive-buffer auto-tuning's estimate of what the peer sends per RTT, bytes
    /// (tcpi_rcv_space).
    #[serde(default)]
    pub rcv_space: u32,
    /// Window-scale shift this socket applies to the windows it advertises; None when the
    /// handshake did not negotiate window scaling (windows stop at 64 KiB).
    #[serde(default)]
    pub rcv_wscale: Option<u8>,
    /// Window-scale shift the peer applies to its windows; None without window scaling.
    #[serde(default)]
    pub snd_wscale: Option<u8>,
}

/// Socket memory (INET_DIAG_SKMEMINFO), bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SocketMemory {
    /// Receive queue memory and its limit (the effective SO_RCVBUF).
    pub rmem_alloc: u32,
    /// Receive buffer limit, bytes.
    pub rcvbuf: u32,
    /// Send queue memory and its limit (the effective SO_SNDBUF).
    pub wmem_queued: u32,
    /// Send buffer limit, bytes.
    pub sndbuf: u32,
    /// Packets dropped because the receive buffer was full (UDP).
    pub drops: u32,
}

/// Per-route limits (RTAX_RTO_MIN / RTAX_QUICKACK) for the socket's remote address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteLimits {
    /// `ip route ... rto_min`, ms.
    pub rto_min_ms: Option<u32>,
    /// `ip route ... quickack 1`: delayed ACKs disabled on this route.
    pub quickack: Option<bool>,
}

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing (a setting, a transient state).
    Info,
    /// Likely adds latency.
    Warn,
}

/// A plain-word statement about one socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SocketFinding {
    /// Info or warn.
    pub severity: Severity,
    /// Stable identifier of the rule ("nagle-on-rr", "peer-delayed-ack", ...).
    pub rule: String,
    /// The finding in plain words, with the fix where there is one.
    pub text: String,
}

/// One `--watch` event: a setsockopt call on an option that decides latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetsockoptEvent {
    /// Always "setsockopt".
    pub event: String,
    /// Wall-clock time of the call, ms since the Unix epoch.
    pub unix_ms: u64,
    /// Process id of the caller.
    pub pid: u32,
    /// Thread id of the caller.
    pub tid: u32,
    /// Process name of the caller.
    pub comm: String,
    /// The socket's file descriptor in the caller.
    pub fd: i32,
    /// "SOL_TCP" / "SOL_SOCKET" / "SOL_UDP".
    pub level: String,
    /// "TCP_NODELAY", "SO_SNDBUF", ...
    pub option: String,
    /// The value passed, decoded ("1", "cubic", "onoff=1 linger=5"); None if unreadable.
    pub value: Option<String>,
    /// Where `value` came from: "stack snapshot at the call" (exact), or "process memory after
    /// the call" (the buffer may have changed since).
    pub value_source: Option<String>,
    /// The option's value read back from the socket afterwards (the kernel's effective value, e.g.
    /// SO_SNDBUF doubled), when the socket could be duplicated.
    pub effective: Option<String>,
}

/// The end of a `--watch` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WatchSummary {
    /// Tool version, host and time of the run.
    pub meta: Meta,
    /// Events reported.
    pub events: u64,
    /// Events the kernel dropped because the ring buffer was full.
    pub lost: u64,
    /// True when Ctrl-C ended the watch.
    pub interrupted: bool,
}

//! latscope's path probes: `latscope ping` (TCP SYN from a raw socket, TCP connect, UDP to
//! latscope serve's echo or a closed port, ICMP echo) and `latscope trace` (Paris traceroute:
//! one constant flow across TTLs; `--report` rounds with per-hop loss and percentiles).
//!
//! Layout: [`packet`] builds and parses packets (no syscalls), [`sys`] wraps the socket calls
//! and kernel timestamps, [`prober`] implements the four probe kinds behind one trait,
//! [`ping`] and [`trace`] are the engines. Engines stream answers to a callback and return the
//! result model of `latscope_core::model::ping`; they never print.

#![warn(missing_docs)]

pub mod error;
pub mod packet;
pub mod ping;
pub mod prober;
pub mod spec;
pub mod sys;
pub mod trace;

use std::net::IpAddr;
use std::time::Duration;

use latscope_core::model::address::AddressChoice;
use latscope_sys::happy::{self, RaceConfig, ResolveError};

pub use error::ProbeError;
use latscope_core::model::ping::ProbeMode;
pub use prober::Prober;
use prober::{ConnectProber, IcmpProber, SynProber, UdpProber};

/// Which address family to use (one definition for every engine, in latscope-sys).
pub use latscope_sys::Family;

/// Resolve `host` (an address literal or a name) in `family` and choose the address to probe
/// as RFC 8305 (Happy Eyeballs v2) does ([`latscope_sys::happy`]): a literal or a single
/// address as is; several are raced with TCP connects to `port`, the first to connect wins
/// (or, when none connects, the first to answer with a reset: the host is up). Raw SYN, UDP
/// and ICMP probes then go to that address; the choice says how it was made.
pub fn choose(
    host: &str,
    family: Family,
    port: u16,
    timeout: Duration,
) -> Result<(IpAddr, AddressChoice), ProbeError> {
    let name = host.trim_start_matches('[').trim_end_matches(']');
    happy::choose(name, port, family, RaceConfig::with_timeout(timeout))
        .map(|r| (r.addr.ip(), r.choice))
        .map_err(|e| match e {
            ResolveError::WrongFamily { .. } => ProbeError::Invalid(e.to_string()),
            ResolveError::Lookup { .. } | ResolveError::NoAddress { .. } => {
                ProbeError::Unreachable {
                    target: name.to_string(),
                    reason: e.to_string(),
                }
            }
        })
}

/// What ping or trace was asked to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRequest {
    /// None: the best the privileges allow.
    pub mode: Option<ProbeMode>,
    /// Destination port (TCP and UDP).
    pub port: u16,
    /// UDP / ICMP payload bytes.
    pub payload: usize,
    /// For a trace: one source port (constant flow), and connect mode refused.
    pub trace: bool,
    /// Use kernel timestamps where the socket offers them (false: user-space clock only).
    pub kernel_timestamps: bool,
}

/// Open the prober for `req`, returning it with a sentence saying why this mode.
pub fn open(dst: IpAddr, req: ProbeRequest) -> Result<(Box<dyn Prober>, String), ProbeError> {
    let r = open_prober(dst, req)?;
    if req.kernel_timestamps {
        // The first socket asking for RX timestamps makes net_enable_timestamp() flip a static
        // key from a workqueue (net/core/dev.c); packets received before it runs carry no
        // timestamp. Give it a moment so the first probes are timed by the kernel too.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(r)
}

fn open_prober(dst: IpAddr, req: ProbeRequest) -> Result<(Box<dyn Prober>, String), ProbeError> {
    // Pings rotate over 64 reserved source ports so that up to 64 probes can be in flight
    // without reusing a 4-tuple the target still holds; a trace keeps one (Paris).
    let syn_ports = if req.trace { 1 } else { 64 };
    match req.mode {
        Some(ProbeMode::Syn) => {
            Ok((Box::new(SynProber::new(dst, req.port, syn_ports, req.kernel_timestamps)?), "chosen with --syn; raw socket (CAP_NET_RAW)".into()))
        }
        Some(ProbeMode::Connect) if req.trace => Err(ProbeError::Invalid(
            "trace cannot use TCP connect probes (no TTL answers reach a socket); use --syn, --udp or --icmp".into(),
        )),
        Some(ProbeMode::Connect) => Ok((Box::new(ConnectProber::new(dst, req.port)), "chosen with --connect".into())),
        Some(ProbeMode::Udp) => {
            Ok((Box::new(UdpProber::new(dst, req.port, req.payload, req.kernel_timestamps)?), "chosen with --udp; no privilege needed".into()))
        }
        Some(ProbeMode::Icmp) => {
            let p = IcmpProber::new(dst, req.payload, req.kernel_timestamps)?;
            let why = if p.is_raw() {
                "chosen with --icmp; raw ICMP socket (ping sockets not allowed by net.ipv4.ping_group_range)"
            } else {
                "chosen with --icmp; unprivileged ping socket"
            };
            Ok((Box::new(p), why.into()))
        }
        None => match SynProber::new(dst, req.port, syn_ports, req.kernel_timestamps) {
            Ok(p) => Ok((Box::new(p), "default: CAP_NET_RAW is available, so TCP SYN from a raw socket".into())),
            Err(ProbeError::Privilege(_)) if req.trace => Ok((
                Box::new(UdpProber::new(dst, req.port, req.payload, req.kernel_timestamps)?),
                "default: no CAP_NET_RAW for TCP SYN probes, so UDP (the kernel reports ICMP errors to the socket)".into(),
            )),
            Err(ProbeError::Privilege(_)) => Ok((
                Box::new(ConnectProber::new(dst, req.port)),
                "default: no CAP_NET_RAW for TCP SYN probes, so a full TCP connect".into(),
            )),
            Err(e) => Err(e),
        },
    }
}

/// A description of the constant flow and the probe identifier (Paris traceroute).
pub fn flow_text(mode: ProbeMode) -> &'static str {
    match mode {
        ProbeMode::Syn => {
            "Paris flow: constant addresses and ports; probes told apart by TCP sequence number"
        }
        ProbeMode::Udp => {
            "Paris flow: constant addresses, ports and UDP checksum; probes told apart by a payload word and its complement"
        }
        ProbeMode::Icmp => {
            "Paris flow: constant ICMP id and checksum; probes told apart by sequence number with a compensating payload word"
        }
        ProbeMode::Connect => "a new connection per probe",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chooses_literals_and_checks_family() {
        let t = Duration::from_secs(1);
        let (ip, c) = choose("127.0.0.1", Family::Any, 9, t).expect("v4");
        assert_eq!(ip, IpAddr::from([127, 0, 0, 1]));
        assert!(c.attempts.is_empty());
        assert_eq!(
            choose("[::1]", Family::V6, 9, t).expect("v6").0,
            "::1".parse::<IpAddr>().expect("ip")
        );
        assert!(matches!(
            choose("::1", Family::V4, 9, t),
            Err(ProbeError::Invalid(_))
        ));
        assert!(matches!(
            choose("localhost", Family::V4, 9, t),
            Ok((IpAddr::V4(_), _))
        ));
        assert!(matches!(
            choose("no-such-host.invalid", Family::Any, 9, t),
            Err(ProbeError::Unreachable { .. })
        ));
    }
}

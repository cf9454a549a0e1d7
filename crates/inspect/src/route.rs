//! Per-route TCP limits: `ip route add ... rto_min 5ms quickack 1` stores RTAX_RTO_MIN and
//! RTAX_QUICKACK in the route's metrics; the kernel applies them to every connection using the
//! route (tcp_rto_min(), tcp_in_quickack_mode()). We ask the kernel which route a remote address
//! takes (RTM_GETROUTE, like `ip route get`) and read those two metrics.

use std::net::IpAddr;

use latscope_core::model::sockets::RouteLimits;

use crate::error::Result;
use crate::netlink::{self, NLM_F_REQUEST, Netlink, u32_at};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_METRICS: u16 = 8;
const RTAX_RTO_MIN: u16 = 13;
const RTAX_QUICKACK: u16 = 15;

/// A route lookup client (one netlink socket, reused for every address).
#[derive(Debug)]
pub struct RouteLookup {
    nl: Netlink,
}

impl RouteLookup {
    /// Open in the calling thread's network namespace.
    pub fn open() -> Result<Self> {
        Ok(RouteLookup {
            nl: Netlink::open(libc::NETLINK_ROUTE)?,
        })
    }

    /// The rto_min / quickack metrics of the route to `dst`; None if the route sets neither.
    pub fn limits(&mut self, dst: IpAddr) -> Result<Option<RouteLimits>> {
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
        let mut req = vec![0u8; 12];
        let (family, bytes): (u8, Vec<u8>) = match dst {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        req[0] = family;
        req[1] = (bytes.len() * 8) as u8;
        netlink::push_attr(&mut req, RTA_DST, &bytes);
        let replies = self.nl.request(RTM_GETROUTE, NLM_F_REQUEST, &req)?;
        for (ty, body) in replies {
            if ty == RTM_NEWROUTE && body.len() >= 12 {
                return Ok(parse_metrics(&body[12..]));
            }
        }
        Ok(None)
    }
}

/// Find RTAX_RTO_MIN / RTAX_QUICKACK inside the RTA_METRICS of a route's attributes.
pub fn parse_metrics(attrs: &[u8]) -> Option<RouteLimits> {
    let mut lim = RouteLimits::default();
    for (ty, p) in netlink::attrs(attrs) {
        if ty != RTA_METRICS {
            continue;
        }
        for (mty, mp) in netlink::attrs(p) {
            if mp.len() < 4 {
                continue;
            }
            match mty {
                RTAX_RTO_MIN => lim.rto_min_ms = Some(u32_at(mp, 0)),
                RTAX_QUICKACK => lim.quickack = Some(u32_at(mp, 0) != 0),
                _ => {}
            }
        }
    }
    (lim.rto_min_ms.is_some() || lim.quickack.is_some()).then_some(lim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_metrics() {
        let mut metrics = Vec::new();
        netlink::push_attr(&mut metrics, RTAX_RTO_MIN, &5u32.to_ne_bytes());
        netlink::push_attr(&mut metrics, RTAX_QUICKACK, &1u32.to_ne_bytes());
        let mut attrs = Vec::new();
        netlink::push_attr(&mut attrs, RTA_DST, &[10, 0, 0, 1]);
        netlink::push_attr(&mut attrs, RTA_METRICS, &metrics);
        let l = parse_metrics(&attrs).expect("limits");
        assert_eq!(l.rto_min_ms, Some(5));
        assert_eq!(l.quickack, Some(true));
        assert!(parse_metrics(&attrs[..8]).is_none());
    }
}

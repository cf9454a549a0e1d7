//! Every address family of the target's name: one connect to each family's first address,
//! all at once, each bounded. A family whose address does not answer while another's does is a
//! dead family (the common broken IPv6 deployment: an AAAA record nobody serves); every new
//! connection of a client that tries it first pays for it.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::StepName;
use latscope_core::units::format_ns;
use latscope_net::sock::Target;
use latscope_probe::Family;

use super::step::{Measure, NotRun};
use crate::context::Context;
use crate::evidence::{Evidence, FamilyProbe, FamilyReach};
use crate::plan::Plan;

pub struct Families;

/// How long one connect may take: past it the address is taken as not answering (a live
/// host answers a SYN in a round trip, a refused port at once).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1_500);

impl Measure for Families {
    const NAME: StepName = StepName::AddressFamilies;
    type Output = Vec<FamilyProbe>;

    fn run(cx: &Context, _ev: &Evidence) -> Result<Vec<FamilyProbe>, NotRun> {
        let Target::Inet { host, port } = &cx.plan.target else {
            return Err(NotRun::Skipped("not a network target".into()));
        };
        if host.parse::<IpAddr>().is_ok() {
            return Err(NotRun::Skipped("an address, not a name".into()));
        }
        if cx.plan.family != Family::Any {
            return Err(NotRun::Skipped(
                "one address family asked for (-4 / -6)".into(),
            ));
        }
        let addrs: Vec<SocketAddr> = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|e| NotRun::Failed(format!("name lookup failed: {e}")))?
            .collect();
        let first = |v6: bool| addrs.iter().copied().find(|a| a.is_ipv6() == v6);
        let targets: Vec<SocketAddr> = [first(true), first(false)].into_iter().flatten().collect();
        if targets.len() < 2 {
            return Err(NotRun::Skipped("the name has one address family".into()));
        }
        Ok(std::thread::scope(|s| {
            let handles: Vec<_> = targets.iter().map(|&a| s.spawn(move || probe(a))).collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        }))
    }

    fn detail(_cx: &Context, probes: &Vec<FamilyProbe>) -> String {
        probes
            .iter()
            .map(|p| {
                format!(
                    "{} {}: {}",
                    if p.addr.is_ipv6() { "IPv6" } else { "IPv4" },
                    p.addr,
                    match p.reach {
                        FamilyReach::Connected =>
                            format!("connects in {}", format_ns(p.spent_ns as f64)),
                        FamilyReach::Refused =>
                            "refused (nothing listens on that port there)".into(),
                        FamilyReach::TimedOut =>
                            format!("no answer in {}", format_ns(p.spent_ns as f64)),
                        FamilyReach::Unreachable =>
                            format!("unreachable after {}", format_ns(p.spent_ns as f64)),
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The connects run at once; only a name has families to compare.
    fn budget(plan: &Plan) -> Duration {
        match &plan.target {
            Target::Inet { host, .. } if host.parse::<IpAddr>().is_err() => {
                CONNECT_TIMEOUT + Duration::from_millis(500)
            }
            _ => Duration::ZERO,
        }
    }

    fn store(ev: &mut Evidence, probes: Vec<FamilyProbe>) {
        ev.families = Some(probes);
    }
}

/// One bounded connect to `addr`.
fn probe(addr: SocketAddr) -> FamilyProbe {
    let t0 = Instant::now();
    let r = std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT);
    let spent_ns = t0.elapsed().as_nanos() as u64;
    let reach = match r {
        Ok(_) => FamilyReach::Connected,
        Err(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => FamilyReach::Refused,
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => FamilyReach::TimedOut,
            _ => FamilyReach::Unreachable,
        },
    };
    FamilyProbe {
        addr: addr.ip(),
        reach,
        spent_ns,
    }
}

//! Peers from DNS: every A/AAAA record of the `[peers]` `dns` names, re-resolved every
//! `dns_refresh` — a Kubernetes headless Service answers with one record per ready pod, so the
//! mesh follows pods as they come and go without a restart or a regenerated peer file.
//!
//! A thread ([`DnsWatcher`]) resolves the names with the system resolver (getaddrinfo: A and
//! AAAA, /etc/hosts, the search domains of resolv.conf) and hands each round to the supervisor,
//! which turns the addresses into peers (one per address, named by it) and reconciles the fleet.
//! A name that fails to resolve keeps its previous addresses (a DNS hiccup does not empty the
//! mesh) and the failure is logged and counted as a reload error. This host's own addresses are
//! left out unless `include_self` is set.

use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::config::{Peer, Peers};

/// Resolves a name to all its addresses.
pub type Resolver = dyn Fn(&str) -> std::io::Result<Vec<IpAddr>> + Send + Sync;

/// The system resolver (getaddrinfo): every A and AAAA record, sorted, without duplicates.
pub fn system_resolve(name: &str) -> std::io::Result<Vec<IpAddr>> {
    let mut v: Vec<IpAddr> = (name, 0u16).to_socket_addrs()?.map(|a| a.ip()).collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// Whether `ip` is one of this host's addresses (a socket can bind to it).
pub fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind((ip, 0)).is_ok()
}

/// One resolution round: the addresses of each name, and the names that failed (with why).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Addresses by name (a failed name keeps its previous addresses).
    pub addresses: BTreeMap<String, Vec<IpAddr>>,
    /// `name: error` of each name that did not resolve this time.
    pub errors: Vec<String>,
}

/// Resolve every name once; a name that fails (or answers nothing) keeps `previous`'s addresses.
pub fn resolve_round(names: &[String], previous: &Round, resolve: &Resolver) -> Round {
    let mut out = Round::default();
    for name in names {
        let kept = || previous.addresses.get(name).cloned().unwrap_or_default();
        let addrs = match resolve(name) {
            Ok(a) if !a.is_empty() => a,
            Ok(_) => {
                out.errors.push(format!("{name}: no A/AAAA record"));
                kept()
            }
            Err(e) => {
                out.errors.push(format!("{name}: {e}"));
                kept()
            }
        };
        out.addresses.insert(name.clone(), addrs);
    }
    out
}

/// The peers of a round: one per address (named by it), this host's own left out unless
/// `include_self`.
pub fn peers_of(round: &Round, include_self: bool, local: &dyn Fn(IpAddr) -> bool) -> Vec<Peer> {
    let mut ips: Vec<IpAddr> = round.addresses.values().flatten().copied().collect();
    ips.sort();
    ips.dedup();
    ips.into_iter()
        .filter(|ip| include_self || !local(*ip))
        .map(|ip| Peer {
            address: ip.to_string(),
            name: ip.to_string(),
            labels: BTreeMap::new(),
        })
        .collect()
}

/// The thread re-resolving the `dns` names; rounds are picked up with [`DnsWatcher::latest`].
pub(crate) struct DnsWatcher {
    /// What it resolves (a reload restarts it only when these change).
    pub key: (Vec<String>, Duration),
    stop: Arc<AtomicBool>,
    rx: mpsc::Receiver<Round>,
}

impl DnsWatcher {
    /// Start resolving `peers.dns` now and every `peers.dns_refresh`.
    pub fn start(peers: &Peers, resolve: Arc<Resolver>) -> std::io::Result<DnsWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (names, every, s) = (peers.dns.clone(), peers.dns_refresh, stop.clone());
        std::thread::Builder::new()
            .name("latscope-dns".into())
            .spawn(move || {
                let mut last = Round::default();
                while !s.load(Ordering::Relaxed) {
                    last = resolve_round(&names, &last, &*resolve);
                    if tx.send(last.clone()).is_err() {
                        return;
                    }
                    let until = Instant::now() + every;
                    while Instant::now() < until && !s.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })?;
        Ok(DnsWatcher {
            key: (peers.dns.clone(), peers.dns_refresh),
            stop,
            rx,
        })
    }

    /// The newest round since the last call, if any.
    pub fn latest(&self) -> Option<Round> {
        self.rx.try_iter().last()
    }
}

impl Drop for DnsWatcher {
    /// Not joined: a lookup in flight may take the resolver's whole timeout; the thread ends
    /// after it without touching anything.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A resolver whose answers the test changes between rounds.
    fn stub(answers: Arc<Mutex<BTreeMap<String, Option<Vec<IpAddr>>>>>) -> Arc<Resolver> {
        Arc::new(move |name: &str| match answers.lock().unwrap().get(name) {
            Some(Some(a)) => Ok(a.clone()),
            Some(None) => Err(std::io::Error::other(
                "temporary failure in name resolution",
            )),
            None => Err(std::io::Error::other("unknown name")),
        })
    }

    #[test]
    fn peers_follow_the_records_and_a_failure_keeps_the_last_answer() {
        let answers = Arc::new(Mutex::new(BTreeMap::new()));
        let resolve = stub(answers.clone());
        let names = vec!["mesh.mon.svc".to_string(), "other".to_string()];
        let no_local = |_: IpAddr| false;
        answers.lock().unwrap().insert(
            "mesh.mon.svc".into(),
            Some(vec![ip("10.0.0.2"), ip("10.0.0.1"), ip("fd00::3")]),
        );
        answers
            .lock()
            .unwrap()
            .insert("other".into(), Some(vec![ip("10.0.0.1")]));
        let r1 = resolve_round(&names, &Round::default(), &*resolve);
        assert!(r1.errors.is_empty());
        let names_of = |r: &Round| -> Vec<String> {
            peers_of(r, false, &no_local)
                .into_iter()
                .map(|p| p.name)
                .collect()
        };
        // Every record is a peer, once even when two names share it.
        assert_eq!(names_of(&r1), ["10.0.0.1", "10.0.0.2", "fd00::3"]);

        // A pod goes, another comes.
        answers.lock().unwrap().insert(
            "mesh.mon.svc".into(),
            Some(vec![ip("10.0.0.2"), ip("10.0.0.9")]),
        );
        let r2 = resolve_round(&names, &r1, &*resolve);
        assert_eq!(names_of(&r2), ["10.0.0.1", "10.0.0.2", "10.0.0.9"]);
        answers.lock().unwrap().remove("other");
        let r3 = resolve_round(&names, &r2, &*resolve);
        // "other" failed: it keeps 10.0.0.1 and says why.
        assert_eq!(names_of(&r3), ["10.0.0.1", "10.0.0.2", "10.0.0.9"]);
        assert_eq!(r3.errors, ["other: unknown name"]);
        // An empty answer is a failure too (a headless Service with no ready pod answers
        // NXDOMAIN; an empty list would drop the whole mesh on a glitch).
        answers
            .lock()
            .unwrap()
            .insert("mesh.mon.svc".into(), Some(vec![]));
        let r4 = resolve_round(&names, &r3, &*resolve);
        assert_eq!(names_of(&r4), names_of(&r3));
        assert_eq!(r4.errors.len(), 2);
    }

    #[test]
    fn own_addresses_are_left_out_unless_asked() {
        let round = Round {
            addresses: [("svc".to_string(), vec![ip("127.0.0.1"), ip("192.0.2.7")])].into(),
            errors: vec![],
        };
        // The real check: this host can bind 127.0.0.1, not the documentation address.
        assert!(is_local(ip("127.0.0.1")));
        assert!(!is_local(ip("192.0.2.7")));
        let names = |p: Vec<Peer>| p.into_iter().map(|p| p.address).collect::<Vec<_>>();
        assert_eq!(names(peers_of(&round, false, &is_local)), ["192.0.2.7"]);
        assert_eq!(
            names(peers_of(&round, true, &is_local)),
            ["127.0.0.1", "192.0.2.7"]
        );
    }

    #[test]
    fn the_watcher_resolves_now_and_again_every_refresh() {
        let answers = Arc::new(Mutex::new(BTreeMap::new()));
        answers
            .lock()
            .unwrap()
            .insert("svc".to_string(), Some(vec![ip("10.1.0.1")]));
        let peers = Peers {
            file: None,
            dns: vec!["svc".into()],
            dns_refresh: Duration::from_millis(200),
            include_self: false,
            labels: BTreeMap::new(),
            measures: vec![],
            slo: None,
        };
        let w = DnsWatcher::start(&peers, stub(answers.clone())).unwrap();
        let wait = |want: &[IpAddr]| {
            let t0 = Instant::now();
            loop {
                if let Some(r) = w.latest()
                    && r.addresses["svc"] == want
                {
                    return;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(5),
                    "no round with {want:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait(&[ip("10.1.0.1")]);
        answers.lock().unwrap().insert(
            "svc".to_string(),
            Some(vec![ip("10.1.0.1"), ip("10.1.0.2")]),
        );
        wait(&[ip("10.1.0.1"), ip("10.1.0.2")]);
    }
}

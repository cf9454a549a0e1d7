//! A URL's host name looked up query by query, as this host's stub resolver (glibc's) looks it
//! up: the resolver's configuration read as glibc reads it, the names its search list and
//! `ndots` make a lookup ask, and each A and AAAA query to each nameserver with what came back
//! and when ([`crate::stub`]). getaddrinfo (the request-phases step) says how long a lookup
//! took; this says which query, under which name, to which nameserver, made it that long, and
//! what the resolver's options make it wait.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::StepName;
use latscope_core::model::names::{Answer, NameLookup, NameResult};
use latscope_core::units::{count, format_ns};
use latscope_net::sock::Target;

use super::step::{Measure, NotRun};
use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;
use crate::resolv;

pub struct NameQueries;

/// The longest one round waits for an answer here (glibc's wait when shorter): a resolver
/// that has not answered in this long has failed the user already, and three such rounds
/// (glibc's fallbacks) must fit the step's budget.
const CAP: Duration = Duration::from_millis(1200);
/// The step's time.
const BUDGET: Duration = Duration::from_millis(4500);

const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The URL's host when it is a name.
fn url_host(plan: &Plan) -> Option<&str> {
    plan.url.as_ref()?;
    match &plan.target {
        Target::Inet { host, .. } if host.trim_matches(['[', ']']).parse::<IpAddr>().is_err() => {
            Some(host)
        }
        _ => None,
    }
}

impl Measure for NameQueries {
    const NAME: StepName = StepName::NameQueries;
    type Output = NameLookup;

    fn run(cx: &Context, _ev: &Evidence) -> Result<NameLookup, NotRun> {
        if cx.plan.url.is_none() {
            return Err(NotRun::Skipped("URL targets only".into()));
        }
        let Some(host) = url_host(cx.plan) else {
            return Err(NotRun::Skipped("an address, not a name".into()));
        };
        let started = Instant::now();
        let text = std::fs::read_to_string(RESOLV_CONF).map_err(|e| {
            NotRun::Failed(format!(
                "cannot read {RESOLV_CONF}: {e} (glibc then asks 127.0.0.1)"
            ))
        })?;
        let localdomain = std::env::var("LOCALDOMAIN").ok();
        let res_options = std::env::var("RES_OPTIONS").ok();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        let conf = resolv::parse(
            &text,
            resolv::Env {
                localdomain: localdomain.as_deref(),
                res_options: res_options.as_deref(),
                hostname: hostname.as_deref().map(str::trim),
            },
        );
        let mut conf_source = RESOLV_CONF.to_string();
        for (var, set) in [("LOCALDOMAIN", &localdomain), ("RES_OPTIONS", &res_options)] {
            if let Some(v) = set {
                conf_source.push_str(&format!(", {var}={v}"));
            }
        }
        let sources = resolv::sources(
            &std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default(),
            &std::fs::read_to_string("/etc/hosts").unwrap_or_default(),
            host,
        );
        if !sources.stub_asked() {
            return Err(NotRun::Skipped(if sources.in_hosts_file {
                format!(
                    "{host} is in /etc/hosts, read before DNS (hosts: {})",
                    sources.order.join(" ")
                )
            } else {
                format!(
                    "lookups go to systemd-resolved (hosts: {}), not to glibc's stub resolver",
                    sources.order.join(" ")
                )
            }));
        }
        let deadline = started + BUDGET - Duration::from_millis(300);
        let walk =
            crate::stub::lookup(&conf, host, cx.stop, deadline, CAP).map_err(NotRun::Failed)?;
        Ok(NameLookup {
            host: host.to_string(),
            conf,
            conf_source,
            sources,
            names: walk.names,
            queries: walk.queries,
            wait: walk.wait,
            took_ns: walk.took.as_nanos() as u64,
            cap_ns: CAP.as_nanos() as u64,
        })
    }

    fn detail(_cx: &Context, n: &NameLookup) -> String {
        detail(n)
    }

    fn failed(n: &NameLookup) -> bool {
        n.names.iter().all(|x| x.result == NameResult::NotAsked)
    }

    fn budget(plan: &Plan) -> Duration {
        if url_host(plan).is_some() {
            BUDGET
        } else {
            Duration::ZERO
        }
    }

    fn store(ev: &mut Evidence, n: NameLookup) {
        ev.names = Some(n);
    }
}

/// One line: the names asked, how the lookup ended, and what went unanswered.
fn detail(n: &NameLookup) -> String {
    let f = |ns: u64| format_ns(ns as f64);
    let asked = n
        .names
        .iter()
        .filter(|x| x.result != NameResult::NotAsked)
        .count();
    let mut s = format!(
        "{} asked, {} to {}",
        count(asked as u64, "name"),
        count(n.queries.len() as u64, "query"),
        n.conf.nameserver_list()
    );
    match n.answered() {
        Some(a) => s.push_str(&format!("; answered as {} after {}", a.name, f(n.took_ns))),
        None => s.push_str(&format!("; no name answered in {}", f(n.took_ns))),
    }
    let lost = n
        .queries
        .iter()
        .filter(|q| q.answer == Answer::NoAnswer)
        .count();
    if lost > 0 {
        s.push_str(&format!(
            "; {lost} unanswered; glibc would wait {} on a first lookup, {} on later ones",
            f(n.wait.first_ns),
            f(n.wait.later_ns)
        ));
    }
    let opts = n.conf.options_line();
    if !opts.is_empty() {
        s.push_str(&format!(" (options {opts})"));
    }
    s
}

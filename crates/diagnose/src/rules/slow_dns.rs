//! `slow_dns`: slow name resolution, and — from the name-queries step — which query type went
//! unanswered, which names the search list made the lookup ask first, and the resolver options
//! that decide the wait.

use latscope_core::model::names::{
    Answer, NameLookup, NameResult, QueryType, ResolvConf, SendMode,
};

use super::*;

/// Slow name resolution: the DNS lookup is a large share of a URL request (paid on every new
/// connection whose name is not cached). Its cost is the lookup getaddrinfo measured; the
/// name queries say why.
pub fn slow_dns(e: &Evidence) -> Option<Diagnosis> {
    let ph = e.phases.as_ref()?;
    let total = ph.total_ns();
    if ph.dns_ns < PHASE_FLOOR_NS || (ph.dns_ns as f64) < PHASE_SHARE * total as f64 {
        return None;
    }
    let mut d = Diagnosis {
        rule: RuleId::SlowDns,
        title: "slow name resolution: the DNS lookup dominates a new connection's request".into(),
        explains_ns: ph.dns_ns,
        confidence: 0.85,
        side: Side::Client,
        evidence: vec![format!(
            "request phases (median of {}): DNS {} of a {} request ({:.0}%)",
            ph.requests,
            format_ns(ph.dns_ns as f64),
            format_ns(total as f64),
            100.0 * ph.dns_ns as f64 / total.max(1) as f64
        )],
        fix: "check the resolver (`resolvectl status`, /etc/resolv.conf: the first nameserver answers slowly or times out); use a local caching resolver, or keep connections alive so the lookup is rare".into(),
        caused_by: None,
        causes: Vec::new(),
    };
    if let Some(n) = &e.names {
        explain(n, ph.dns_ns, &mut d);
    }
    Some(d)
}

/// What the name queries found, most costly first.
struct Causes<'a> {
    /// Query types a nameserver left unanswered while answering the other type.
    lost: Vec<(QueryType, u32)>,
    /// Of those, answered once sent alone (glibc's single-request fallback).
    lost_only_in_parallel: bool,
    /// Nameservers that answered nothing while another answered.
    silent: Vec<std::net::SocketAddr>,
    /// Names asked before the one that answered.
    walked: &'a [latscope_core::model::names::TriedName],
}

fn causes(n: &NameLookup) -> Causes<'_> {
    let lost = n.unanswered_types();
    let lost_only_in_parallel = !lost.is_empty()
        && n.queries.iter().all(|q| {
            q.answer != Answer::NoAnswer
                || q.mode == SendMode::Parallel
                || !lost.iter().any(|(t, _)| *t == q.qtype)
        })
        && n.queries.iter().any(|q| {
            q.mode != SendMode::Parallel
                && lost.iter().any(|(t, _)| *t == q.qtype)
                && q.answer.answered()
        });
    let mut silent: Vec<std::net::SocketAddr> = n
        .queries
        .iter()
        .map(|q| q.server)
        .filter(|s| {
            n.queries
                .iter()
                .filter(|q| q.server == *s)
                .all(|q| !q.answer.answered())
        })
        .collect();
    silent.dedup();
    if !n.queries.iter().any(|q| q.answer.answered()) {
        silent.clear();
    }
    let walked = if n.answered().is_some() {
        n.before_answer()
    } else {
        &[]
    };
    Causes {
        lost,
        lost_only_in_parallel,
        silent,
        walked,
    }
}

/// The name queries' evidence, the title and the fix they point to.
fn explain(n: &NameLookup, dns_ns: u64, d: &mut Diagnosis) {
    let c = causes(n);
    let mut fixes: Vec<String> = Vec::new();
    let mut titles: Vec<String> = Vec::new();
    for &(t, count) in &c.lost {
        d.evidence
            .push(lost_line(n, t, count, c.lost_only_in_parallel));
    }
    if !c.lost.is_empty() {
        let types: Vec<&str> = c.lost.iter().map(|(t, _)| t.name()).collect();
        titles.push(format!(
            "{} queries go unanswered and each lookup waits for the resolver's timeout",
            types.join(" and ")
        ));
        fixes.push(lost_fix(n, &c));
    }
    for s in &c.silent {
        d.evidence.push(format!(
            "nameserver {} answered none of its {} queries; the next nameserver answered",
            s.ip(),
            n.queries.iter().filter(|q| q.server == *s).count()
        ));
        titles.push(format!(
            "nameserver {} does not answer and each lookup waits for it",
            s.ip()
        ));
        fixes.push(format!(
            "remove or repair nameserver {} in /etc/resolv.conf: every lookup waits its timeout there before asking the next one",
            s.ip()
        ));
    }
    if !c.walked.is_empty() {
        d.evidence.push(walk_line(n, c.walked));
        titles.push(format!(
            "the search list makes each lookup ask {} before the one that answers",
            count(c.walked.len() as u64, "name")
        ));
        fixes.push(walk_fix(n));
    }
    if n.wait.timeouts_first_ns > 0 {
        d.evidence.push(wait_line(n, dns_ns));
    } else if n.answered().is_some() && c.walked.is_empty() {
        d.evidence.push(answer_times(n));
    }
    d.evidence.push(format!(
        "resolver: {} (options: {}; glibc's defaults timeout:5 attempts:2 ndots:1)",
        n.conf_source,
        match n.conf.options_line() {
            o if o.is_empty() => "none set".to_string(),
            o => o,
        }
    ));
    if let Some(t) = titles.first() {
        d.title = format!("slow name resolution: {t}");
        d.confidence = 0.9;
    }
    if !fixes.is_empty() {
        d.fix = fixes.join("; ");
    }
}

fn ms(ns: u64) -> String {
    format_ns(ns as f64)
}

/// "AAAA queries for web.lab.test got no answer from 10.8.0.2 (3 sent, …) while its A queries
/// were answered in 0.4 ms".
fn lost_line(n: &NameLookup, t: QueryType, count: u32, only_in_parallel: bool) -> String {
    let lost: Vec<&latscope_core::model::names::Query> = n
        .queries
        .iter()
        .filter(|q| q.qtype == t && q.answer == Answer::NoAnswer)
        .collect();
    let names: Vec<&str> = {
        let mut v: Vec<&str> = lost.iter().map(|q| q.name.as_str()).collect();
        v.dedup();
        v
    };
    let servers: Vec<String> = {
        let mut v: Vec<String> = lost.iter().map(|q| q.server.ip().to_string()).collect();
        v.sort();
        v.dedup();
        v
    };
    let waited = lost.iter().map(|q| q.took_ns).max().unwrap_or(0);
    let glibc = lost.iter().map(|q| q.glibc_wait_ns).max().unwrap_or(0);
    let other: Vec<u64> = n
        .queries
        .iter()
        .filter(|q| q.qtype != t && q.answer.answered() && names.contains(&q.name.as_str()))
        .map(|q| q.took_ns)
        .collect();
    let mut s = format!(
        "{} queries for {} got no answer from {} ({count} sent, each waited {}{})",
        t.name(),
        names.join(", "),
        servers.join(", "),
        ms(waited),
        if glibc > waited {
            format!("; glibc waits {}", ms(glibc))
        } else {
            String::new()
        }
    );
    if let Some(best) = other.iter().min() {
        s.push_str(&format!(
            " while its {} queries were answered in {}",
            if t == QueryType::A { "AAAA" } else { "A" },
            ms(*best)
        ));
    }
    if only_in_parallel {
        s.push_str(", and answered when sent alone (single-request)");
    }
    s
}

fn lost_fix(n: &NameLookup, c: &Causes<'_>) -> String {
    if c.lost_only_in_parallel {
        return "the resolver (or a firewall's connection tracking on the way) loses one of two queries sent at once from one port: add `options single-request-reopen` to /etc/resolv.conf, and fix the resolver or the firewall".into();
    }
    let mut f = format!(
        "make the resolver ({}) answer {} queries, with an empty answer (NOERROR, no record) when the name has none",
        n.conf.nameserver_list(),
        c.lost
            .iter()
            .map(|(t, _)| t.name())
            .collect::<Vec<_>>()
            .join(" and ")
    );
    if c.lost.iter().any(|(t, _)| *t == QueryType::Aaaa) && !n.conf.no_aaaa {
        f.push_str("; until then, on a host without IPv6, `options no-aaaa` (glibc 2.36 and later) in /etc/resolv.conf stops the AAAA queries");
    }
    if n.conf.timeout_s > 1 {
        f.push_str(&format!(
            ", and `options timeout:1` cuts each wait from {} s to 1 s",
            n.conf.timeout_s
        ));
    }
    f
}

/// "web.lab.test has 2 dots, fewer than ndots:5: it was tried as … before …".
fn walk_line(n: &NameLookup, walked: &[latscope_core::model::names::TriedName]) -> String {
    let dots = n.host.trim_end_matches('.').matches('.').count();
    let answered = n.answered().map(|a| a.name.as_str()).unwrap_or("");
    let queries: usize = walked.iter().map(|w| n.queries_of(&w.name).count()).sum();
    let took: u64 = walked.iter().map(|w| w.took_ns).sum();
    let results: Vec<&str> = {
        let mut v: Vec<&str> = walked.iter().map(|w| result_name(w.result)).collect();
        v.dedup();
        v
    };
    let why = if dots < n.conf.ndots as usize {
        format!(
            "{} has {}, fewer than ndots:{}, so the search list comes first",
            n.host,
            count(dots as u64, "dot"),
            n.conf.ndots
        )
    } else {
        format!("{} was not found as it is", n.host)
    };
    let types = if n.conf.no_aaaa { 1 } else { 2 };
    format!(
        "{why}: it was tried as {} ({}) before {answered} answered — {} × {}, {}, {} of this lookup's {}",
        walked
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if results.len() == 1 {
            format!("{} each", results[0])
        } else {
            results.join(", ")
        },
        count(walked.len() as u64, "lookup"),
        count(types, "type"),
        count(queries as u64, "query"),
        ms(took),
        ms(n.took_ns)
    )
}

fn result_name(r: NameResult) -> &'static str {
    match r {
        NameResult::Answered => "answered",
        NameResult::NotFound => "NXDOMAIN",
        NameResult::NoData => "no address (NODATA)",
        NameResult::ServFail => "SERVFAIL",
        NameResult::TimedOut => "no answer",
        NameResult::Unreachable => "no nameserver reachable",
        NameResult::Failed => "refused",
        NameResult::NotAsked => "not asked",
    }
}

fn walk_fix(n: &NameLookup) -> String {
    let dots = n.host.trim_end_matches('.').matches('.').count();
    let mut f = format!(
        "ask for the absolute name `{}.` (a trailing dot: no search list)",
        n.host.trim_end_matches('.')
    );
    if dots > 0 && n.conf.ndots as usize > dots {
        f.push_str(&format!(
            ", or lower ndots to {dots} or less (`options ndots:{dots}` in /etc/resolv.conf; in Kubernetes the pod's dnsConfig) so a name with dots is asked as it is first"
        ));
    } else {
        f.push_str(", or put the domain that answers first in `search`");
    }
    f
}

/// The wait the options put on the lookup, against what was measured.
fn wait_line(n: &NameLookup, dns_ns: u64) -> String {
    let c: &ResolvConf = &n.conf;
    let fallback = n.wait.first_ns > n.wait.later_ns;
    format!(
        "the resolver's options decide the wait: each unanswered query waits timeout:{} s{}{} — {} on a process's first lookup{}; getaddrinfo measured {} here",
        c.timeout_s,
        if c.nameservers.len() > 1 {
            format!(" per nameserver ({} of them)", c.nameservers.len())
        } else {
            String::new()
        },
        if fallback {
            ", and with one answer of the pair in glibc asks again one query at a time (single-request), then from new sockets (single-request-reopen), each a full wait"
        } else {
            ""
        },
        ms(n.wait.first_ns),
        if fallback {
            format!(
                ", {} on each later one in the same thread (the fallback sticks)",
                ms(n.wait.later_ns)
            )
        } else {
            String::new()
        },
        ms(dns_ns)
    )
}

/// How fast the nameservers answered (no timeout, no search list: the answers are slow).
fn answer_times(n: &NameLookup) -> String {
    let parts: Vec<String> = n
        .queries
        .iter()
        .filter(|q| q.answer.answered())
        .map(|q| {
            format!(
                "{} {} from {} in {}",
                q.qtype.name(),
                q.name,
                q.server.ip(),
                ms(q.took_ns)
            )
        })
        .collect();
    format!("the nameserver answered {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::model::diagnose::RequestPhases;
    use latscope_core::model::names::{HostsSources, LookupWait, Query, TriedName};

    const MS: u64 = 1_000_000;

    fn phases(dns_ms: u64) -> RequestPhases {
        RequestPhases {
            requests: 5,
            dns_ns: dns_ms * MS,
            connect_ns: MS,
            tls_ns: None,
            tls_client_cpu_ns: None,
            ttfb_ns: MS,
            transfer_ns: 0,
        }
    }

    fn q(name: &str, t: QueryType, mode: SendMode, answer: Answer, took_ms: u64) -> Query {
        Query {
            name: name.into(),
            qtype: t,
            server: "10.8.0.2:53".parse().unwrap(),
            attempt: 1,
            mode,
            sent_ns: 0,
            answer,
            took_ns: took_ms * MS,
            glibc_wait_ns: 2_000 * MS,
        }
    }

    fn tried(name: &str, domain: Option<&str>, result: NameResult) -> TriedName {
        TriedName {
            name: name.into(),
            search_domain: domain.map(String::from),
            result,
            took_ns: 20 * MS,
        }
    }

    fn lookup(
        text: &str,
        names: Vec<TriedName>,
        queries: Vec<Query>,
        wait: LookupWait,
    ) -> NameLookup {
        NameLookup {
            host: "web.lab.test".into(),
            conf: crate::resolv::parse(text, crate::resolv::Env::default()),
            conf_source: "/etc/resolv.conf".into(),
            sources: HostsSources {
                order: vec!["files".into(), "dns".into()],
                in_hosts_file: false,
            },
            names,
            queries,
            wait,
            took_ns: 3_600 * MS,
            cap_ns: 1_200 * MS,
        }
    }

    const ADDR: Answer = Answer::Records {
        records: 1,
        addresses: 1,
    };

    /// The tester's resolver that never answers AAAA: the type, the nameserver, the waits the
    /// options make, and a fix that names the resolver and the options.
    #[test]
    fn an_unanswered_aaaa_is_named_with_the_options_behind_the_wait() {
        let n = "web.lab.test";
        let queries = vec![
            q(n, QueryType::A, SendMode::Parallel, ADDR, 21),
            q(
                n,
                QueryType::Aaaa,
                SendMode::Parallel,
                Answer::NoAnswer,
                1_200,
            ),
            q(n, QueryType::A, SendMode::Sequential, ADDR, 20),
            q(
                n,
                QueryType::Aaaa,
                SendMode::Sequential,
                Answer::NoAnswer,
                1_200,
            ),
            q(n, QueryType::A, SendMode::SequentialReopen, ADDR, 20),
            q(
                n,
                QueryType::Aaaa,
                SendMode::SequentialReopen,
                Answer::NoAnswer,
                1_200,
            ),
        ];
        let wait = LookupWait {
            first_ns: 6_061 * MS,
            later_ns: 2_020 * MS,
            timeouts_first_ns: 6_000 * MS,
        };
        let mut e = Evidence {
            phases: Some(phases(2_020)),
            ..Evidence::default()
        };
        e.names = Some(lookup(
            "nameserver 10.8.0.2\noptions timeout:2 attempts:1\n",
            vec![tried(n, None, NameResult::Answered)],
            queries,
            wait,
        ));
        let d = slow_dns(&e).expect("fires");
        assert_eq!(d.explains_ns, 2_020 * MS, "what getaddrinfo measured");
        assert_eq!(
            d.title,
            "slow name resolution: AAAA queries go unanswered and each lookup waits for the resolver's timeout"
        );
        let all = d.evidence.join("\n");
        assert!(
            all.contains("AAAA queries for web.lab.test got no answer from 10.8.0.2 (3 sent, each waited 1.2s; glibc waits 2s) while its A queries were answered in 20ms"),
            "{all}"
        );
        assert!(all.contains("timeout:2 s"), "{all}");
        assert!(
            all.contains("6.06s on a process's first lookup, 2.02s on each later one"),
            "{all}"
        );
        assert!(all.contains("options: timeout:2 attempts:1"), "{all}");
        assert!(
            d.fix
                .starts_with("make the resolver (10.8.0.2) answer AAAA queries"),
            "{}",
            d.fix
        );
        assert!(
            d.fix.contains("`options no-aaaa`") && d.fix.contains("`options timeout:1`"),
            "{}",
            d.fix
        );
        assert!(!all.contains("search list"));
    }

    /// AAAA lost only when sent beside the A: single-request is the fix.
    #[test]
    fn a_query_lost_only_beside_the_other_points_to_single_request() {
        let n = "web.lab.test";
        let queries = vec![
            q(n, QueryType::A, SendMode::Parallel, ADDR, 1),
            q(
                n,
                QueryType::Aaaa,
                SendMode::Parallel,
                Answer::NoAnswer,
                1_200,
            ),
            q(n, QueryType::A, SendMode::Sequential, ADDR, 1),
            q(n, QueryType::Aaaa, SendMode::Sequential, Answer::NoData, 1),
        ];
        let wait = LookupWait {
            first_ns: 2_002 * MS,
            later_ns: 2 * MS,
            timeouts_first_ns: 2_000 * MS,
        };
        let e = Evidence {
            phases: Some(phases(2_000)),
            names: Some(lookup(
                "options timeout:2",
                vec![tried(n, None, NameResult::Answered)],
                queries,
                wait,
            )),
            ..Evidence::default()
        };
        let d = slow_dns(&e).expect("fires");
        assert!(
            d.evidence
                .join("\n")
                .contains("answered when sent alone (single-request)")
        );
        assert!(
            d.fix.contains("`options single-request-reopen`"),
            "{}",
            d.fix
        );
    }

    /// A pod's ndots:5 search list: the expansions are named, counted and timed, and the fix
    /// is the trailing dot or a lower ndots.
    #[test]
    fn a_search_list_walk_is_named_with_its_expansions() {
        let n = "web.lab.test";
        let domains = [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
        ];
        let mut names: Vec<TriedName> = domains
            .iter()
            .map(|d| tried(&format!("{n}.{d}"), Some(d), NameResult::NotFound))
            .collect();
        names.push(tried(n, None, NameResult::Answered));
        let queries: Vec<Query> = names
            .iter()
            .flat_map(|t| {
                let a = if t.result == NameResult::Answered {
                    ADDR
                } else {
                    Answer::NxDomain
                };
                [
                    q(&t.name, QueryType::A, SendMode::Parallel, a, 20),
                    q(
                        &t.name,
                        QueryType::Aaaa,
                        SendMode::Parallel,
                        Answer::NxDomain,
                        20,
                    ),
                ]
            })
            .collect();
        let e = Evidence {
            phases: Some(phases(81)),
            names: Some(lookup(
                "nameserver 10.8.0.2\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
                names,
                queries,
                LookupWait {
                    first_ns: 80 * MS,
                    later_ns: 80 * MS,
                    timeouts_first_ns: 0,
                },
            )),
            ..Evidence::default()
        };
        let d = slow_dns(&e).expect("fires");
        assert_eq!(d.explains_ns, 81 * MS);
        assert_eq!(
            d.title,
            "slow name resolution: the search list makes each lookup ask 3 names before the one that answers"
        );
        let all = d.evidence.join("\n");
        assert!(
            all.contains("web.lab.test has 2 dots, fewer than ndots:5, so the search list comes first: it was tried as web.lab.test.default.svc.cluster.local, web.lab.test.svc.cluster.local, web.lab.test.cluster.local (NXDOMAIN each) before web.lab.test answered — 3 lookups × 2 types, 6 queries, 60ms"),
            "{all}"
        );
        assert!(
            d.fix.contains("`web.lab.test.`") && d.fix.contains("`options ndots:2`"),
            "{}",
            d.fix
        );
        assert!(!all.contains("decide the wait"), "no timeout: {all}");
    }

    /// Without the name queries the finding stands as measured; a fast lookup is no finding
    /// whatever the queries show.
    #[test]
    fn the_queries_explain_and_never_make_a_finding() {
        let mut e = Evidence {
            phases: Some(phases(300)),
            ..Evidence::default()
        };
        let d = slow_dns(&e).expect("fires");
        assert!(d.title.contains("dominates"));
        assert_eq!(d.evidence.len(), 1);
        e.phases = Some(phases(0));
        e.names = Some(lookup(
            "",
            vec![tried("web.lab.test", None, NameResult::Answered)],
            vec![q(
                "web.lab.test",
                QueryType::Aaaa,
                SendMode::Parallel,
                Answer::NoAnswer,
                1,
            )],
            LookupWait::default(),
        ));
        assert_eq!(slow_dns(&e), None);
    }
}

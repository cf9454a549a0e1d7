//! The stub resolver's configuration as glibc reads it (`resolv.conf(5)`, glibc's
//! resolv/res_init.c), where it looks host names up (`hosts:` in nsswitch.conf, the hosts
//! file), and the names it asks for a host name, in its order (resolv/res_query.c,
//! `__res_context_search`). Pure: the files' text and the environment come in; the model
//! ([`ResolvConf`]) lives in `latscope_core::model::names`.

use std::net::{IpAddr, SocketAddr};

pub use latscope_core::model::names::ResolvConf;
use latscope_core::model::names::{ATTEMPTS_MAX, HostsSources, MAXNS, NDOTS_MAX, TIMEOUT_MAX_S};

/// What the environment adds to the file.
#[derive(Clone, Copy, Debug, Default)]
pub struct Env<'a> {
    /// `LOCALDOMAIN`: replaces the search list.
    pub localdomain: Option<&'a str>,
    /// `RES_OPTIONS`: options applied after the file's.
    pub res_options: Option<&'a str>,
    /// The host's own name (`gethostname`): its domain is the search list when the file names
    /// none.
    pub hostname: Option<&'a str>,
}

/// Parse the file's text, then the environment, as glibc does. Unknown lines and options are
/// ignored, as by glibc; without a nameserver line the local one (127.0.0.1) is asked.
pub fn parse(text: &str, env: Env<'_>) -> ResolvConf {
    let mut c = ResolvConf::default();
    let mut have_search = false;
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                if let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok())
                    && c.nameservers.len() < MAXNS
                {
                    c.nameservers.push(SocketAddr::new(ip, 53));
                }
            }
            Some("domain") => {
                c.search = words.next().map(|d| vec![d.into()]).unwrap_or_default();
                have_search = true;
            }
            Some("search") => {
                c.search = words.map(String::from).collect();
                have_search = true;
            }
            Some("options") => words.for_each(|o| option(&mut c, o)),
            _ => {}
        }
    }
    if let Some(d) = env.localdomain {
        c.search = d.split_whitespace().map(String::from).collect();
        have_search = true;
    }
    if !have_search
        && let Some((_, domain)) = env.hostname.and_then(|h| h.split_once('.'))
        && !domain.is_empty()
    {
        c.search = vec![domain.into()];
    }
    if let Some(o) = env.res_options {
        o.split_whitespace().for_each(|o| option(&mut c, o));
    }
    if c.nameservers.is_empty() {
        c.nameservers.push(SocketAddr::from(([127, 0, 0, 1], 53)));
    }
    c
}

fn option(c: &mut ResolvConf, o: &str) {
    let num = |v: &str, max: u32| v.parse::<u32>().ok().map(|n| n.min(max));
    match o.split_once(':') {
        Some(("ndots", v)) => c.ndots = num(v, NDOTS_MAX).unwrap_or(c.ndots),
        Some(("timeout", v)) => {
            c.timeout_s = num(v, TIMEOUT_MAX_S).map_or(c.timeout_s, |s| s.max(1))
        }
        Some(("attempts", v)) => c.attempts = num(v, ATTEMPTS_MAX).map_or(c.attempts, |n| n.max(1)),
        _ => match o {
            "rotate" => c.rotate = true,
            "single-request" => c.single_request = true,
            "single-request-reopen" => c.single_request_reopen = true,
            "use-vc" => c.use_vc = true,
            "edns0" => c.edns0 = true,
            "no-tld-query" => c.no_tld_query = true,
            "no-aaaa" => c.no_aaaa = true,
            _ => {}
        },
    }
}

/// One name a lookup asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The name queried (without the root's dot).
    pub name: String,
    /// The search domain appended, when one was.
    pub from_search: Option<String>,
}

impl Candidate {
    fn as_is(name: &str) -> Candidate {
        Candidate {
            name: name.into(),
            from_search: None,
        }
    }
}

/// The names a lookup of `host` asks for, in order (`__res_context_search`): a name ending in
/// a dot is only itself; one with at least `ndots` dots is tried as it is first, then with each
/// search domain; one with fewer, with each search domain first and as it is last (not at all
/// for a name without a dot under `no-tld-query`). The lookup stops at the first name that has
/// an answer, and leaves the search list on a timeout or a refusal (see the walk).
pub fn candidates(c: &ResolvConf, host: &str) -> Vec<Candidate> {
    if let Some(abs) = host.strip_suffix('.') {
        return vec![Candidate::as_is(abs)];
    }
    let dots = host.matches('.').count() as u32;
    let searched = c
        .search
        .iter()
        .map(|d| d.trim_matches('.'))
        .map(|d| Candidate {
            name: if d.is_empty() {
                host.to_string()
            } else {
                format!("{host}.{d}")
            },
            from_search: (!d.is_empty()).then(|| d.to_string()),
        })
        .collect::<Vec<_>>();
    // A root domain in the list ("." or "") is the name as it is, asked once.
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |cand: Candidate| {
        if !out.iter().any(|o| o.name == cand.name) {
            out.push(cand);
        }
    };
    if dots >= c.ndots {
        push(Candidate::as_is(host));
        searched.into_iter().for_each(push);
    } else {
        let had_search = !searched.is_empty();
        searched.into_iter().for_each(&mut push);
        if dots > 0 || !had_search || !c.no_tld_query {
            push(Candidate::as_is(host));
        }
    }
    out
}

/// nsswitch.conf's `hosts:` sources in order, without their `[…]` actions; empty without a
/// `hosts:` line (glibc then asks DNS first).
pub fn hosts_order(nsswitch: &str) -> Vec<String> {
    nsswitch
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .find_map(|l| l.trim_start().strip_prefix("hosts:"))
        .map(|rest| {
            let mut out = Vec::new();
            let mut in_action = false;
            for w in rest.split_whitespace() {
                if w.starts_with('[') || in_action {
                    in_action = !w.ends_with(']');
                } else {
                    out.push(w.to_string());
                }
            }
            out
        })
        .unwrap_or_default()
}

/// Whether the hosts file (`/etc/hosts` text) names `host` (case-insensitive, with or without a
/// trailing dot).
pub fn in_hosts_file(hosts: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.');
    hosts.lines().any(|l| {
        let l = l.split('#').next().unwrap_or("");
        let mut w = l.split_whitespace();
        w.next().is_some_and(|a| a.parse::<IpAddr>().is_ok())
            && w.any(|n| n.trim_end_matches('.').eq_ignore_ascii_case(host))
    })
}

/// Where glibc looks `host` up, from nsswitch.conf's and the hosts file's text.
pub fn sources(nsswitch: &str, hosts: &str, host: &str) -> HostsSources {
    HostsSources {
        order: hosts_order(nsswitch),
        in_hosts_file: in_hosts_file(hosts, host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(c: &ResolvConf, host: &str) -> Vec<String> {
        candidates(c, host).into_iter().map(|c| c.name).collect()
    }

    #[test]
    fn a_kubernetes_search_list_tries_every_domain_first() {
        let c = parse(
            "nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
            Env::default(),
        );
        assert_eq!(c.ndots, 5);
        assert_eq!(
            names(&c, "api.example.com"),
            [
                "api.example.com.default.svc.cluster.local",
                "api.example.com.svc.cluster.local",
                "api.example.com.cluster.local",
                "api.example.com"
            ]
        );
        // A name with a trailing dot is absolute; one with enough dots goes first.
        assert_eq!(names(&c, "api.example.com."), ["api.example.com"]);
        let c = parse("search corp.example\noptions ndots:1", Env::default());
        assert_eq!(names(&c, "web.lab"), ["web.lab", "web.lab.corp.example"]);
        assert_eq!(names(&c, "web"), ["web.corp.example", "web"]);
        let c = parse(
            "search corp.example .\noptions ndots:2 no-tld-query",
            Env::default(),
        );
        assert!(c.no_tld_query);
        assert_eq!(
            names(&c, "web.lab"),
            ["web.lab.corp.example", "web.lab"],
            "the root in the list is the name itself, asked once"
        );
        let c = parse("search corp.example\noptions no-tld-query", Env::default());
        assert_eq!(names(&c, "web"), ["web.corp.example"], "no-tld-query");
    }

    #[test]
    fn options_defaults_limits_and_the_environment() {
        let c = parse("", Env::default());
        assert_eq!(c.nameservers, vec![SocketAddr::from(([127, 0, 0, 1], 53))]);
        assert_eq!((c.ndots, c.timeout_s, c.attempts), (1, 5, 2));
        let c = parse(
            "nameserver 192.0.2.1 # first\nnameserver 2001:db8::1\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n\
             domain a.example\nsearch b.example c.example\noptions timeout:99 attempts:0 ndots:40 rotate single-request use-vc edns0\n; comment\n",
            Env {
                res_options: Some("timeout:2 no-aaaa"),
                ..Env::default()
            },
        );
        assert_eq!(c.nameservers.len(), 3, "glibc asks three at most");
        assert_eq!(c.nameservers[1], "[2001:db8::1]:53".parse().unwrap());
        assert_eq!(
            c.search,
            ["b.example", "c.example"],
            "the last of domain/search wins"
        );
        assert_eq!((c.ndots, c.attempts), (15, 1));
        assert_eq!(c.timeout_s, 2, "RES_OPTIONS after the file");
        assert!(c.rotate && c.single_request && c.no_aaaa && c.use_vc && c.edns0);
        assert!(!c.single_request_reopen);
        let env = Env {
            localdomain: Some("x.example y.example"),
            ..Env::default()
        };
        let c = parse("search a.example\n", env);
        assert_eq!(
            c.search,
            ["x.example", "y.example"],
            "LOCALDOMAIN replaces it"
        );
        let host = Env {
            hostname: Some("box1.corp.example"),
            ..Env::default()
        };
        assert_eq!(
            parse("", host).search,
            ["corp.example"],
            "the host's domain"
        );
        assert_eq!(parse("search a.example", host).search, ["a.example"]);
        assert!(
            parse(
                "",
                Env {
                    hostname: Some("box1"),
                    ..Env::default()
                }
            )
            .search
            .is_empty()
        );
    }

    #[test]
    fn nsswitch_and_the_hosts_file() {
        let ns = "passwd: files\n# hosts: dns\nhosts:  files mdns4_minimal [NOTFOUND=return] resolve [!UNAVAIL=return] dns myhostname\n";
        assert_eq!(
            hosts_order(ns),
            ["files", "mdns4_minimal", "resolve", "dns", "myhostname"]
        );
        assert_eq!(
            hosts_order("hosts: files [ SUCCESS=return ] dns"),
            ["files", "dns"]
        );
        assert!(hosts_order("passwd: files").is_empty());
        let hosts =
            "127.0.0.1 localhost\n10.0.0.5  web.lab.test web # lab\n#10.0.0.6 old.lab.test\n";
        assert!(in_hosts_file(hosts, "WEB.lab.test."));
        assert!(in_hosts_file(hosts, "web"));
        assert!(!in_hosts_file(hosts, "old.lab.test"));
        assert!(!in_hosts_file(hosts, "lab"));
        let s = sources("hosts: files dns\n", hosts, "web.lab.test");
        assert!(!s.stub_asked(), "the hosts file answers first");
    }
}

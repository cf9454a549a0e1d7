//! A host name looked up the way this host's stub resolver (glibc's) does it, query by query:
//! the resolver's configuration (`resolv.conf(5)`), the names a lookup tries (the search list
//! under `ndots`), each A and AAAA query to each nameserver with what came back and when, and
//! what glibc's options make a lookup wait when a query goes unanswered.
//!
//! The waits follow glibc's resolv/res_send.c (`__res_context_send`, `send_dg`) and the order
//! of names its resolv/res_query.c (`__res_context_search`).

use std::net::SocketAddr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What `/etc/resolv.conf` (and `LOCALDOMAIN`, `RES_OPTIONS`) set, as glibc reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResolvConf {
    /// Up to three nameservers, port 53, in the file's order.
    pub nameservers: Vec<SocketAddr>,
    /// The search list (`search`, or `domain`: the last of the two wins; without either, the
    /// domain of the host's own name).
    pub search: Vec<String>,
    /// A name with at least this many dots is tried as it is before the search list.
    pub ndots: u32,
    /// How long a query waits for the first nameserver's answer, per attempt, s.
    pub timeout_s: u32,
    /// How many times the nameservers are asked before the lookup gives up.
    pub attempts: u32,
    /// `rotate`: each lookup starts at the next nameserver.
    pub rotate: bool,
    /// `single-request`: A and AAAA one after the other, not at once.
    pub single_request: bool,
    /// `single-request-reopen`: the same, the second query from a new socket.
    pub single_request_reopen: bool,
    /// `use-vc`: queries over TCP.
    #[serde(default)]
    pub use_vc: bool,
    /// `edns0`: queries carry an EDNS(0) record (1200-byte answers over UDP).
    #[serde(default)]
    pub edns0: bool,
    /// `no-tld-query`: a name without a dot is never asked as it is.
    #[serde(default)]
    pub no_tld_query: bool,
    /// `no-aaaa` (glibc 2.36): no AAAA query at all.
    pub no_aaaa: bool,
}

/// glibc's limits (resolv/resolv.h): the nameservers it uses …
pub const MAXNS: usize = 3;
/// … and the ranges it clamps `ndots`, …
pub const NDOTS_MAX: u32 = 15;
/// … `timeout` (s) …
pub const TIMEOUT_MAX_S: u32 = 30;
/// … and `attempts` to.
pub const ATTEMPTS_MAX: u32 = 5;

impl Default for ResolvConf {
    /// glibc's defaults: no nameserver yet (the parser adds the local one), ndots 1, 5 s,
    /// 2 attempts.
    fn default() -> ResolvConf {
        ResolvConf {
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout_s: 5,
            attempts: 2,
            rotate: false,
            single_request: false,
            single_request_reopen: false,
            use_vc: false,
            edns0: false,
            no_tld_query: false,
            no_aaaa: false,
        }
    }
}

impl ResolvConf {
    /// How long glibc waits for nameserver `index` (0-based, in the file's order) in one
    /// attempt: `send_dg` computes `timeout << index`, divided by the number of nameservers
    /// from the second one on, at least 1 s (res_send.c). One nameserver: the timeout; three
    /// at 5 s: 5, 3 and 6 s.
    pub fn server_wait(&self, index: usize) -> Duration {
        let n = self.nameservers.len().max(1) as u64;
        let mut s = u64::from(self.timeout_s) << index.min(8);
        if index > 0 {
            s /= n;
        }
        Duration::from_secs(s.max(1))
    }

    /// The longest a query nobody answers makes a lookup wait for one name: every nameserver,
    /// each attempt.
    pub fn unanswered_wait(&self) -> Duration {
        let per_attempt: Duration = (0..self.nameservers.len().max(1))
            .map(|i| self.server_wait(i))
            .sum();
        per_attempt * self.attempts.max(1)
    }

    /// The nameservers' addresses, comma-separated.
    pub fn nameserver_list(&self) -> String {
        let ips: Vec<String> = self
            .nameservers
            .iter()
            .map(|s| s.ip().to_string())
            .collect();
        ips.join(", ")
    }

    /// The options as `resolv.conf` would write them, glibc's defaults left out.
    pub fn options_line(&self) -> String {
        let d = ResolvConf::default();
        let mut o = Vec::new();
        if self.ndots != d.ndots {
            o.push(format!("ndots:{}", self.ndots));
        }
        if self.timeout_s != d.timeout_s {
            o.push(format!("timeout:{}", self.timeout_s));
        }
        if self.attempts != d.attempts {
            o.push(format!("attempts:{}", self.attempts));
        }
        for (on, name) in [
            (self.rotate, "rotate"),
            (self.single_request, "single-request"),
            (self.single_request_reopen, "single-request-reopen"),
            (self.use_vc, "use-vc"),
            (self.edns0, "edns0"),
            (self.no_tld_query, "no-tld-query"),
            (self.no_aaaa, "no-aaaa"),
        ] {
            if on {
                o.push(name.into());
            }
        }
        o.join(" ")
    }
}

/// A query's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum QueryType {
    /// An IPv4 address.
    A,
    /// An IPv6 address.
    #[serde(rename = "AAAA")]
    Aaaa,
}

impl QueryType {
    /// The type's name as DNS tools write it.
    pub const fn name(self) -> &'static str {
        match self {
            QueryType::A => "A",
            QueryType::Aaaa => "AAAA",
        }
    }
}

/// How a name's queries were sent: glibc's modes (res_send.c), the first the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SendMode {
    /// A and AAAA at once from one UDP socket (`sendmmsg`).
    Parallel,
    /// One after the other from one socket (`single-request`, or glibc's own fallback after a
    /// timeout with one answer in).
    Sequential,
    /// One after the other, the second from a new socket (`single-request-reopen`, or glibc's
    /// second fallback).
    SequentialReopen,
    /// Over TCP (`use-vc`, or an answer truncated over UDP).
    Tcp,
}

impl SendMode {
    /// The mode in the words of `resolv.conf(5)`.
    pub const fn name(self) -> &'static str {
        match self {
            SendMode::Parallel => "A and AAAA at once",
            SendMode::Sequential => "single-request",
            SendMode::SequentialReopen => "single-request-reopen",
            SendMode::Tcp => "TCP",
        }
    }
}

/// What came back for one query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Answer {
    /// Records in the answer section.
    Records {
        /// How many.
        records: u32,
        /// How many of them are addresses of the type asked.
        addresses: u32,
    },
    /// NOERROR without an answer: the name exists, without a record of this type (NODATA).
    NoData,
    /// The name does not exist (NXDOMAIN).
    NxDomain,
    /// The resolver failed (SERVFAIL).
    ServFail,
    /// The resolver refused the query (REFUSED).
    Refused,
    /// Another response code.
    Rcode {
        /// FORMERR 1, NOTIMP 4, …
        code: u16,
    },
    /// The answer did not fit a datagram (TC): glibc asks again over TCP.
    Truncated,
    /// No answer within the wait.
    NoAnswer,
    /// Nothing listens at the nameserver's address (ICMP port unreachable, or TCP refused).
    Unreachable,
    /// An answer that does not decode as DNS.
    Malformed,
}

impl Answer {
    /// The answer in the words DNS tools use.
    pub fn describe(self) -> String {
        match self {
            Answer::Records { addresses, .. } if addresses > 0 => {
                format!(
                    "{addresses} address{}",
                    if addresses == 1 { "" } else { "es" }
                )
            }
            Answer::Records { records, .. } => format!("{records} records, no address"),
            Answer::NoData => "no record of the type (NODATA)".into(),
            Answer::NxDomain => "NXDOMAIN".into(),
            Answer::ServFail => "SERVFAIL".into(),
            Answer::Refused => "REFUSED".into(),
            Answer::Rcode { code } => format!("response code {code}"),
            Answer::Truncated => "truncated (TC)".into(),
            Answer::NoAnswer => "no answer".into(),
            Answer::Unreachable => "nothing listens there".into(),
            Answer::Malformed => "malformed answer".into(),
        }
    }

    /// Whether the nameserver answered at all.
    pub fn answered(self) -> bool {
        !matches!(self, Answer::NoAnswer | Answer::Unreachable)
    }
}

/// One query sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Query {
    /// The name asked for (without the root's dot).
    pub name: String,
    /// The type asked for.
    pub qtype: QueryType,
    /// The nameserver asked.
    pub server: SocketAddr,
    /// glibc's attempt (1-based: `attempts` of them).
    pub attempt: u32,
    /// How it was sent.
    pub mode: SendMode,
    /// When it was sent, since the lookup began, ns.
    pub sent_ns: u64,
    /// What came back.
    pub answer: Answer,
    /// Sent → answer, or how long it was waited for when none came, ns.
    pub took_ns: u64,
    /// How long glibc waits for this nameserver in this round (its `timeout` share), ns.
    pub glibc_wait_ns: u64,
}

/// How one name of the lookup ended (glibc's `h_errno` for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NameResult {
    /// An answer with records: the lookup ends here.
    Answered,
    /// No such name (NXDOMAIN): the next name is tried.
    NotFound,
    /// The name exists without an address (NODATA): the next name is tried.
    NoData,
    /// The resolver failed (SERVFAIL): the next name is tried.
    ServFail,
    /// No nameserver answered in time: the search list is left (the name as it is still
    /// asked).
    TimedOut,
    /// No nameserver could be reached at all: the lookup ends.
    Unreachable,
    /// A refusal or another error: the search list is left.
    Failed,
    /// Not asked: the run's time ran out first.
    NotAsked,
}

/// One name the lookup tried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TriedName {
    /// The name asked for.
    pub name: String,
    /// The search domain appended, when one was.
    pub search_domain: Option<String>,
    /// How it ended.
    pub result: NameResult,
    /// First query sent → the name's result, ns.
    pub took_ns: u64,
}

/// Where glibc looks host names up (`hosts:` in /etc/nsswitch.conf) and what that means for
/// this name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HostsSources {
    /// The `hosts:` sources in order (e.g. files, dns), without their actions.
    pub order: Vec<String>,
    /// The name is in /etc/hosts (the `files` source answers it before DNS).
    pub in_hosts_file: bool,
}

impl HostsSources {
    /// Whether the stub resolver (`dns`) is asked before another source that could answer:
    /// systemd-resolved (`resolve`) or the hosts file with this name.
    pub fn stub_asked(&self) -> bool {
        for s in &self.order {
            match s.as_str() {
                "dns" => return true,
                "resolve" => return false,
                "files" if self.in_hosts_file => return false,
                _ => {}
            }
        }
        self.order.is_empty()
    }
}

/// The waits glibc's options put on a lookup, given what the queries met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LookupWait {
    /// A thread's (a process's) first lookup, ns: the timeouts it sits through, its fallbacks
    /// to single-request and single-request-reopen included, plus the answers' own times.
    pub first_ns: u64,
    /// Later lookups in the same thread (glibc keeps the fallback it switched to), ns.
    pub later_ns: u64,
    /// Of `first_ns`, the timeouts: time spent waiting for answers that never came.
    pub timeouts_first_ns: u64,
}

/// A name looked up query by query, as glibc's stub resolver does it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NameLookup {
    /// The host name as given.
    pub host: String,
    /// The resolver's configuration.
    pub conf: ResolvConf,
    /// Where the configuration was read (`/etc/resolv.conf`, and the environment's
    /// `LOCALDOMAIN` / `RES_OPTIONS` when set).
    pub conf_source: String,
    /// nsswitch's `hosts:` sources.
    pub sources: HostsSources,
    /// The names tried, in order.
    pub names: Vec<TriedName>,
    /// Every query, in the order sent.
    pub queries: Vec<Query>,
    /// What the options make a lookup like this one wait.
    pub wait: LookupWait,
    /// How long the queries took here (waits capped at `cap_ns`), ns.
    pub took_ns: u64,
    /// The longest one round waited here for an answer (glibc's wait, capped to keep the run
    /// short), ns.
    pub cap_ns: u64,
}

impl NameLookup {
    /// The name that answered, if one did.
    pub fn answered(&self) -> Option<&TriedName> {
        self.names.iter().find(|n| n.result == NameResult::Answered)
    }

    /// The names asked before the one that answered (or all asked, when none did).
    pub fn before_answer(&self) -> &[TriedName] {
        let asked = self
            .names
            .iter()
            .take_while(|n| n.result != NameResult::NotAsked)
            .count();
        let end = self
            .names
            .iter()
            .position(|n| n.result == NameResult::Answered)
            .unwrap_or(asked);
        &self.names[..end]
    }

    /// The queries of one name.
    pub fn queries_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Query> + 'a {
        self.queries.iter().filter(move |q| q.name == name)
    }

    /// Query types some nameserver never answered, for names where the other type was answered
    /// (a resolver or middlebox that drops one type), with how many of them went unanswered.
    pub fn unanswered_types(&self) -> Vec<(QueryType, u32)> {
        let mut out = Vec::new();
        for t in [QueryType::A, QueryType::Aaaa] {
            let lost = self
                .queries
                .iter()
                .filter(|q| q.qtype == t && q.answer == Answer::NoAnswer)
                .filter(|q| {
                    self.queries.iter().any(|o| {
                        o.name == q.name
                            && o.server == q.server
                            && o.qtype != t
                            && o.answer.answered()
                    })
                })
                .count() as u32;
            if lost > 0 {
                out.push((t, lost));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(servers: usize, timeout_s: u32, attempts: u32) -> ResolvConf {
        ResolvConf {
            nameservers: (0..servers)
                .map(|i| SocketAddr::from(([192, 0, 2, i as u8 + 1], 53)))
                .collect(),
            timeout_s,
            attempts,
            ..ResolvConf::default()
        }
    }

    /// res_send.c's `seconds = retrans << ns; if (ns > 0) seconds /= nscount`.
    #[test]
    fn each_nameserver_waits_its_share_of_the_timeout() {
        let s = |c: &ResolvConf, i| c.server_wait(i).as_secs();
        let one = conf(1, 5, 2);
        assert_eq!(s(&one, 0), 5);
        assert_eq!(one.unanswered_wait(), Duration::from_secs(10));
        let two = conf(2, 5, 2);
        assert_eq!((s(&two, 0), s(&two, 1)), (5, 5));
        let three = conf(3, 5, 1);
        assert_eq!((s(&three, 0), s(&three, 1), s(&three, 2)), (5, 3, 6));
        assert_eq!(three.unanswered_wait(), Duration::from_secs(14));
        let fast = conf(3, 1, 1);
        assert_eq!(
            (s(&fast, 0), s(&fast, 1), s(&fast, 2)),
            (1, 1, 1),
            "never under 1 s"
        );
    }

    #[test]
    fn the_options_line_leaves_out_the_defaults() {
        let mut c = conf(1, 5, 2);
        assert_eq!(c.options_line(), "");
        c.ndots = 5;
        c.timeout_s = 1;
        c.single_request_reopen = true;
        assert_eq!(c.options_line(), "ndots:5 timeout:1 single-request-reopen");
    }

    #[test]
    fn the_stub_is_asked_unless_a_source_before_it_answers() {
        let src = |order: &[&str], in_hosts_file| HostsSources {
            order: order.iter().map(|s| s.to_string()).collect(),
            in_hosts_file,
        };
        assert!(src(&["files", "dns"], false).stub_asked());
        assert!(!src(&["files", "dns"], true).stub_asked());
        assert!(!src(&["files", "resolve", "dns"], false).stub_asked());
        assert!(src(&["files", "mdns4_minimal", "dns"], false).stub_asked());
        assert!(!src(&["files"], false).stub_asked());
    }
}

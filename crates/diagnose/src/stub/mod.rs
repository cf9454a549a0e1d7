//! glibc's stub resolver replayed query by query: the names of a lookup in
//! `__res_context_search`'s order and with its rules for leaving the search list (resolv/
//! res_query.c), each name's A and AAAA sent as `__res_context_send` sends them ([`send`]),
//! the replies judged as `__res_context_query` judges the pair. getaddrinfo tells how long a
//! lookup took; this tells which query, to which nameserver, under which name, made it take
//! that long.

mod message;
mod send;

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use latscope_core::model::names::{
    Answer, LookupWait, NameResult, Query, QueryType, ResolvConf, TriedName,
};

use crate::resolv::candidates;
use send::{Sender, Sent};

/// A lookup replayed.
#[derive(Clone, Debug)]
pub struct Walked {
    pub names: Vec<TriedName>,
    pub queries: Vec<Query>,
    pub wait: LookupWait,
    pub took: Duration,
    /// The longest one round waited here.
    pub longest_wait: Duration,
}

/// Look `host` up as getaddrinfo (AF_UNSPEC) does through glibc's DNS module: A and AAAA for
/// each name (A alone under `no-aaaa`), stopping at the first name with an answer. Each wait
/// is glibc's, never longer than `cap`; past `deadline` or once `stop` is raised, the names
/// left are not asked.
pub fn lookup(
    conf: &ResolvConf,
    host: &str,
    stop: &AtomicBool,
    deadline: Instant,
    cap: Duration,
) -> Result<Walked, String> {
    let types: &[QueryType] = if conf.no_aaaa {
        &[QueryType::A]
    } else {
        &[QueryType::A, QueryType::Aaaa]
    };
    let t0 = Instant::now();
    let mut s = Sender::new(conf, stop, deadline, cap);
    let mut names = Vec::new();
    let mut left_search = false;
    let mut out_of_time = false;
    for c in candidates(conf, host) {
        let in_search = c.from_search.is_some();
        if left_search && in_search {
            continue;
        }
        let start = t0.elapsed();
        let result = if out_of_time {
            NameResult::NotAsked
        } else {
            match s.send(&c.name, types)? {
                Sent::Stopped => NameResult::NotAsked,
                sent => judge(&sent),
            }
        };
        names.push(TriedName {
            name: c.name,
            search_domain: c.from_search,
            result,
            took_ns: (t0.elapsed() - start).as_nanos() as u64,
        });
        match result {
            NameResult::Answered => break,
            // No nameserver reachable: from the search list glibc gives up at once.
            NameResult::Unreachable if in_search => break,
            NameResult::NotAsked => out_of_time = true,
            NameResult::TimedOut | NameResult::Failed if in_search => left_search = true,
            _ => {}
        }
    }
    Ok(Walked {
        names,
        wait: LookupWait {
            first_ns: s.glibc_ns,
            later_ns: s.glibc_ns.saturating_sub(s.fallback_ns),
            timeouts_first_ns: s.timeouts_ns,
        },
        queries: std::mem::take(&mut s.queries),
        took: t0.elapsed(),
        longest_wait: s.longest_wait,
    })
}

/// A name's result from its replies, as `__res_context_query` reads the pair: any records
/// answer it; otherwise the first reply's response code, or the second's when the first is
/// NOERROR.
fn judge(sent: &Sent) -> NameResult {
    let got = match sent {
        Sent::Replies(got) => got,
        Sent::TimedOut {
            last: Some(Answer::ServFail),
        } => return NameResult::ServFail,
        Sent::TimedOut { .. } => return NameResult::TimedOut,
        Sent::Unreachable => return NameResult::Unreachable,
        Sent::Stopped => return NameResult::NotAsked,
    };
    let kept: Vec<Answer> = got.iter().flatten().copied().collect();
    if kept.iter().any(|a| matches!(a, Answer::Records { .. })) {
        return NameResult::Answered;
    }
    let first = kept.first().copied();
    let code = match (first, kept.get(1).copied()) {
        (Some(Answer::NoData), Some(second)) => second,
        (Some(a), _) => a,
        (None, _) => return NameResult::TimedOut,
    };
    match code {
        Answer::NxDomain => NameResult::NotFound,
        Answer::NoData => NameResult::NoData,
        Answer::ServFail => NameResult::ServFail,
        _ => NameResult::Failed,
    }
}

#[cfg(test)]
mod tests;

//! Which address of a name a command used, and why: the outcome of RFC 8305 ("Happy Eyeballs
//! v2") address selection, as every client command reports it.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the address a command used was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChoiceMethod {
    /// The target was an address literal: nothing to choose.
    Literal,
    /// The name has one address (in the family allowed): nothing to choose.
    Single,
    /// A connection race over the name's addresses (RFC 8305): the first to connect.
    Connected,
    /// No address accepted a connection; this one answered with a reset (the host is up, the
    /// port closed), so the measurement goes to it.
    Refused,
    /// No address answered at all; the first in RFC 8305 order is kept.
    Unanswered,
}

/// How one connection attempt of the race ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// It connected (the winner).
    Connected,
    /// A reset answered the SYN (nothing listens on the port).
    Refused,
    /// No answer within the attempt's timeout (SYNs dropped: a dead address).
    TimedOut,
    /// No route, or the host or network is unreachable (ICMP error, blackhole route).
    Unreachable,
    /// Still connecting when another address won; closed.
    Abandoned,
    /// Another error (the message is in `error`).
    Error,
}

impl AttemptOutcome {
    /// Whether the address answered at all (connected or reset).
    pub fn answered(self) -> bool {
        matches!(self, AttemptOutcome::Connected | AttemptOutcome::Refused)
    }
}

/// One connection attempt of the race.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddressAttempt {
    /// The address tried.
    pub addr: IpAddr,
    /// When the attempt started, ns after the race began (RFC 8305's Connection Attempt Delay
    /// staggers them by 250 ms, or less when one fails).
    pub started_ns: u64,
    /// How long the attempt lasted until it connected, failed, timed out or was abandoned, ns.
    pub spent_ns: u64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The system's message for `error` outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The address a command used, every address the name had, and the race that chose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddressChoice {
    /// The host as given: a name or an address literal.
    pub host: String,
    /// The address the measurement used.
    pub chosen: IpAddr,
    /// How it was chosen.
    pub method: ChoiceMethod,
    /// Every address of the name in the family allowed (`-4`/`-6`), in the order RFC 8305 tries
    /// them: families interleaved, IPv6 first.
    pub resolved: Vec<IpAddr>,
    /// Name resolution (getaddrinfo, A and AAAA), ns; 0 for a literal.
    pub resolve_ns: u64,
    /// The connection attempts, in the order they started (empty without a race).
    pub attempts: Vec<AddressAttempt>,
}

impl AddressChoice {
    /// A choice without a race: a literal, or the only address of a name.
    pub fn without_race(host: &str, addr: IpAddr, method: ChoiceMethod, resolve_ns: u64) -> Self {
        AddressChoice {
            host: host.into(),
            chosen: addr,
            method,
            resolved: vec![addr],
            resolve_ns,
            attempts: Vec::new(),
        }
    }

    /// The attempts that did not win and did not answer: dead addresses (timed out,
    /// unreachable, abandoned while still silent).
    pub fn silent_attempts(&self) -> impl Iterator<Item = &AddressAttempt> {
        self.attempts
            .iter()
            .filter(|a| !a.outcome.answered() && a.outcome != AttemptOutcome::Error)
    }

    /// What the race cost a new connection before the winner's attempt began, ns: the delay a
    /// Happy Eyeballs client pays on every new connection while an earlier address is dead.
    pub fn winner_delay_ns(&self) -> u64 {
        self.attempts
            .iter()
            .find(|a| a.outcome == AttemptOutcome::Connected)
            .map_or(0, |a| a.started_ns)
    }

    /// One line for the human view: "192.0.2.1 (of 2: ::db8::1 timed out after 250 ms)".
    pub fn describe(&self) -> String {
        let mut s = self.chosen.to_string();
        let others: Vec<String> = self
            .attempts
            .iter()
            .filter(|a| a.addr != self.chosen || a.outcome != AttemptOutcome::Connected)
            .map(|a| {
                let what = match a.outcome {
                    AttemptOutcome::Connected => "connected",
                    AttemptOutcome::Refused => "refused",
                    AttemptOutcome::TimedOut => "no answer",
                    AttemptOutcome::Unreachable => "unreachable",
                    AttemptOutcome::Abandoned => "no answer yet, abandoned",
                    AttemptOutcome::Error => "error",
                };
                format!(
                    "{} {what} after {}",
                    a.addr,
                    crate::units::format_duration(std::time::Duration::from_nanos(a.spent_ns))
                )
            })
            .collect();
        match self.method {
            ChoiceMethod::Literal => {}
            ChoiceMethod::Single => s.push_str(" (the name's only address)"),
            ChoiceMethod::Connected if others.is_empty() => {
                s.push_str(&format!(" (first of {} to connect)", self.resolved.len()))
            }
            ChoiceMethod::Connected => s.push_str(&format!(
                " (of {}; {})",
                self.resolved.len(),
                others.join(", ")
            )),
            ChoiceMethod::Refused | ChoiceMethod::Unanswered => s.push_str(&format!(
                " (none of {} connected: {})",
                self.resolved.len(),
                others.join(", ")
            )),
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(addr: &str, started_ms: u64, spent_ms: u64, o: AttemptOutcome) -> AddressAttempt {
        AddressAttempt {
            addr: addr.parse().expect("ip"),
            started_ns: started_ms * 1_000_000,
            spent_ns: spent_ms * 1_000_000,
            outcome: o,
            error: None,
        }
    }

    #[test]
    fn dead_v6_costs_the_attempt_delay() {
        let c = AddressChoice {
            host: "dual.test".into(),
            chosen: "192.0.2.1".parse().expect("ip"),
            method: ChoiceMethod::Connected,
            resolved: vec![
                "2001:db8::1".parse().expect("ip"),
                "192.0.2.1".parse().expect("ip"),
            ],
            resolve_ns: 1000,
            attempts: vec![
                attempt("2001:db8::1", 0, 251, AttemptOutcome::Abandoned),
                attempt("192.0.2.1", 250, 1, AttemptOutcome::Connected),
            ],
        };
        assert_eq!(c.winner_delay_ns(), 250_000_000);
        assert_eq!(c.silent_attempts().count(), 1);
        let d = c.describe();
        assert!(
            d.starts_with("192.0.2.1 (of 2; 2001:db8::1 no answer yet"),
            "{d}"
        );
        let json = serde_json::to_string(&c).expect("json");
        assert!(json.contains("\"method\":\"connected\""), "{json}");
        assert!(json.contains("\"outcome\":\"abandoned\""), "{json}");
    }

    #[test]
    fn literal_has_no_delay() {
        let c = AddressChoice::without_race(
            "127.0.0.1",
            "127.0.0.1".parse().expect("ip"),
            ChoiceMethod::Literal,
            0,
        );
        assert_eq!(c.winner_delay_ns(), 0);
        assert_eq!(c.describe(), "127.0.0.1");
    }
}

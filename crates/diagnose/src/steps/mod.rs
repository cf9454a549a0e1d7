//! The steps of diagnose, one module each, run in the order of [`PIPELINE`].
//!
//! A step is either a [`Measure`](step::Measure) (runs, returns a typed outcome) or an
//! [`Observe`](step::Observe) (starts before some measuring steps and finishes after them: a
//! packet capture, a socket scan, eBPF histograms). Either way its outcome is stored in its own named field of the
//! [`Evidence`](crate::evidence::Evidence), and the report gets one
//! [`Step`](latscope_core::model::diagnose::Step) line for it. Adding a step means adding a module here with a
//! type implementing one of the traits of [`step`], and one line in [`PIPELINE`].

mod browser;
mod capture;
mod client_cpu;
mod concurrency;
pub(crate) mod counters;
pub(crate) mod cpu;
mod delivery;
mod engines;
mod families;
mod handshakes;
pub(crate) mod kernel_stack;
mod mss;
mod names;
mod path;
mod phases;
mod quickack;
pub(crate) mod server_agent;
pub(crate) mod server_sockets;
mod single;
pub mod step;
mod trains;
mod under_load;

pub use engines::meta;

use step::Entry;

/// The investigation, in order. Observers are listed before the step they start at.
pub const PIPELINE: &[Entry] = &[
    Entry::measure::<families::Families>(),
    Entry::measure::<path::Path>(),
    Entry::observe::<counters::Counters>(),
    Entry::observe::<server_agent::ServerAgent>(),
    Entry::measure::<handshakes::Handshakes>(),
    Entry::observe::<kernel_stack::KernelStack>(),
    Entry::observe::<capture::Capture>(),
    Entry::observe::<server_sockets::ServerSockets>(),
    Entry::observe::<cpu::Cpu>(),
    Entry::observe::<client_cpu::ClientCpuStep>(),
    Entry::measure::<single::Single>(),
    Entry::measure::<mss::MssExperiment>(),
    Entry::measure::<quickack::QuickAck>(),
    Entry::measure::<phases::Phases>(),
    Entry::measure::<names::NameQueries>(),
    Entry::measure::<concurrency::Concurrency>(),
    Entry::measure::<under_load::UnderLoad>(),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DEFAULT_MAX_TIME, Plan};
    use latscope_core::model::diagnose::StepName;
    use std::time::Duration;

    /// Every measuring step's budget, for the default plan, fits in the default run budget
    /// with room for the observers' start-up and wind-down (issue 15 item 9).
    #[test]
    fn default_budgets_fit_the_default_run() {
        let plan = Plan {
            target: latscope_net::sock::Target::Inet {
                host: "127.0.0.1".into(),
                port: 7373,
            },
            addr: "127.0.0.1:7373".parse().unwrap(),
            duration: Duration::from_secs(2),
            concurrency: 8,
            request_bytes: 64,
            response_bytes: 1024,
            no_load: false,
            url: None,
            auth: None,
            max_time: DEFAULT_MAX_TIME,
            family: latscope_probe::Family::Any,
            server_agent: None,
            tls: Default::default(),
        };
        let total: Duration = PIPELINE
            .iter()
            .filter_map(|e| match e {
                Entry::Measure { budget, .. } => Some(budget(&plan)),
                Entry::Observe { .. } => None,
            })
            .sum();
        assert!(
            total <= DEFAULT_MAX_TIME - Duration::from_secs(3),
            "{total:?}"
        );
        assert!(
            total >= Duration::from_secs(15),
            "budgets that tight would cut healthy runs: {total:?}"
        );
        // A plain http:// URL: the MSS experiment runs only when no request completed, and the
        // quick-ack experiment only when one did; either fits with the other steps.
        let plan = Plan {
            url: Some("http://127.0.0.1/".into()),
            ..plan
        };
        let budget_of = |name: StepName| {
            PIPELINE.iter().find_map(|e| match e {
                Entry::Measure {
                    name: n, budget, ..
                } if *n == name => Some(budget(&plan)),
                _ => None,
            })
        };
        let all: Duration = PIPELINE
            .iter()
            .filter_map(|e| match e {
                Entry::Measure { budget, .. } => Some(budget(&plan)),
                Entry::Observe { .. } => None,
            })
            .sum();
        let mss = budget_of(StepName::MssExperiment).unwrap_or_default();
        let quickack = budget_of(StepName::QuickAckExperiment).unwrap_or_default();
        assert!(mss > Duration::ZERO);
        assert!(
            all - mss.min(quickack) <= DEFAULT_MAX_TIME - Duration::from_secs(3),
            "{all:?} with the MSS experiment's {mss:?} and the quick-ack's {quickack:?}"
        );
    }
}

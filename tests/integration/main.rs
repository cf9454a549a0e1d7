//! The `latscope` package's integration tests, one module per subject, in one test binary
//! (the diagnose lab, `tests/diagnose_lab/`, is its own). One binary instead of one per file:
//! the lab (`tests/lab/`) and the generic code of the crates the tests call are compiled once
//! and linked once, where 47 binaries compiled and linked them 47 times (a quarter of the
//! build's compile time). scripts/lib/test-binaries.py still runs each module as a binary of
//! its own (its tests given by name, each module in its own process; those that compare
//! timings alone), and `cargo test --test integration -- MODULE::` runs one module.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[path = "../lab/mod.rs"]
mod lab;
mod agent_dns;
mod agent_fleet;
mod agent_stack;
mod cli;
mod delay_line;
mod deploy_kits;
mod diagnose;
mod diagnose_egress;
mod diagnose_http;
mod diagnose_names;
mod diagnose_nginx;
mod diagnose_round_trips;
mod evidence_hostile;
mod happy_eyeballs;
mod host_stack;
mod http_faults;
mod http_nginx;
mod http_phases;
mod inspect_nginx_watch;
mod inspect_sockets;
mod install;
mod interrupt;
mod lab_cleanup;
mod live_tui;
mod package;
mod probe_ping;
mod probe_trace;
mod registry;
mod render_width;
mod report;
mod report_browser;
mod rr_serve;
mod schema;
mod serve_hostile;
mod stack_cleanup;
mod stack_fentry_vm;
mod stack_probes;
mod stack_tx;
mod stream;
mod sweep_netns;
mod wire_capture;
mod wire_corpus;
mod wire_findings_judged;
mod wire_judged_corpus;
mod wire_malformed;
mod wire_stalls;
mod wire_tshark_counts;

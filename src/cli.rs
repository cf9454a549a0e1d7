//! The command line: one clap definition produces parsing and `--help`.

use clap::{Parser, Subcommand};

use crate::cmd;

const ABOUT: &str = "Measure network latency and throughput at every layer, and explain where the latency comes from.";

const AFTER_HELP: &str = "\
Examples:
  latscope demo                              the healthy vs. Nagle-stalled server story
  latscope serve                             the peer server every test talks to (port 7373)
  latscope rr 127.0.0.1                      request/response RTT (TCP ping-pong)
  latscope rr 10.0.0.2 --sizes 1:65536:x2    latency against message size; flags stalls
  latscope connect 10.0.0.2:443 -n 1000      TCP connection set-up latency
  latscope ping --syn -p 443 10.0.0.2        TCP SYN ping: RTT and open/closed/filtered
  latscope trace --report -c 50 10.0.0.2     per-hop loss and RTT percentiles (mtr report)
  latscope schema rr                         JSON schema of `rr --json`

Exit codes: 0 ok; 1 measured, problems found; 2 bad input; 3 target unreachable, refused or
wrong protocol; 4 missing privileges; 5 local system error; 130 interrupted (partial results).";

#[derive(Parser, Debug)]
#[command(name = "latscope", version, about = ABOUT, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the JSON schema of a command's `--json` output.
    Schema(cmd::schema::SchemaArgs),
    /// RTT to a host with TCP SYN, TCP connect, UDP or ICMP echo probes (hping3-style).
    Ping(cmd::ping::PingArgs),
    /// The hops to a host with one constant flow (Paris traceroute); --report for mtr-style statistics.
    Trace(cmd::trace::TraceArgs),
}

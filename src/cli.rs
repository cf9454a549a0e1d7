//! The command line: one clap definition produces parsing and `--help`; [`run`] hands the
//! parsed command to its module in `cmd/`.

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;
use crate::interrupt::{self, OnInterrupt};

const ABOUT: &str = "Measure network latency and throughput at every layer, and explain where the latency comes from.";

const EXAMPLES: &str = "\
Examples:
  latscope demo                              the healthy vs. Nagle-stalled server story
  latscope diagnose 10.0.0.2                 where does the latency come from? (evidence + fix)
  latscope serve                             the peer server every test talks to (port 7373)
  latscope rr 127.0.0.1                      request/response RTT (TCP ping-pong)
  latscope rr 10.0.0.2 --sizes 1:65536:x2    latency against message size; flags stalls
  latscope connect 10.0.0.2:443 -n 1000      TCP connection set-up latency
  latscope stream 10.0.0.2 -c 4 --bidir      throughput both ways, 4 streams each
  latscope ping --syn -p 443 10.0.0.2        TCP SYN ping: RTT and open/closed/filtered
  latscope trace --stats -n 50 10.0.0.2      per-hop loss and RTT percentiles (mtr report)
  latscope http http://10.0.0.2/ -c 100      HTTP load: req/s and latency percentiles (like wrk)
  latscope schema rr                         JSON schema of `rr --json`
  latscope sockets --pid 1234                TCP_NODELAY, buffers, RTT, ato... of a running process's sockets
  latscope stack -I eth0                     where received packets wait in the kernel (eBPF)";

/// The examples, then the exit-code table (from [`crate::exit::Exit`]).
fn after_help() -> String {
    format!("{EXAMPLES}\n\n{}", crate::exit::help_table())
}

#[derive(Parser, Debug)]
#[command(name = "latscope", version, about = ABOUT, after_help = after_help(), propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Two built-in servers on loopback, one healthy and one Nagle-stalled: measure both and
    /// explain the difference.
    Demo(cmd::demo::DemoArgs),
    /// Run the peer server every latscope test talks to (TCP+UDP port 7373, unix socket).
    Serve(cmd::serve::ServeArgs),
    /// Request/response latency (ping-pong) over TCP, UDP or a unix socket; size sweeps.
    Rr(cmd::rr::RrArgs),
    /// TCP connection set-up latency against any server; --crr: connect+request+response+close.
    Connect(cmd::connect::ConnectArgs),
    /// Throughput over TCP, UDP or unix sockets: per direction, per stream, per interval, with
    /// both sides' CPU and system-call cost, UDP loss and jitter, and latency under load.
    Stream(cmd::stream::StreamArgs),
    /// Run the right measurements and name the cause of latency, with evidence and a fix.
    Diagnose(cmd::diagnose::DiagnoseArgs),
    /// HTTP load: requests/s and latency percentiles, closed loop or open loop at a fixed rate.
    Http(cmd::http::HttpArgs),
    /// Print the JSON schema of a command's `--json` output.
    Schema(cmd::schema::SchemaArgs),
    /// RTT to a host with TCP SYN, TCP connect, UDP or ICMP echo probes (hping3-style).
    Ping(cmd::ping::PingArgs),
    /// The hops to a host with one constant flow (Paris traceroute); --stats for mtr-style statistics.
    Trace(cmd::trace::TraceArgs),
    /// Options and TCP state of running processes' sockets (pidfd_getfd + sock_diag); --watch setsockopt calls.
    Sockets(cmd::sockets::SocketsArgs),
    /// Kernel receive-stack latency per hook point (eBPF; netstacklat's probes), optionally as Prometheus metrics.
    Stack(cmd::stack::StackArgs),
    /// Fleet mode: measure a mesh of targets continuously and serve Prometheus metrics.
    Agent(cmd::agent::AgentArgs),
    /// Capture packets live (AF_PACKET ring, tcpdump filter syntax) into a pcap file.
    Capture(cmd::capture::CaptureArgs),
    /// Find the stalls in a capture: Nagle x delayed ACK, RTO, zero window, think time ...
    Analyze(cmd::analyze::AnalyzeArgs),
    /// Draw results (--json output) as one self-contained HTML page with plots; compare several.
    Report(cmd::report::ReportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::CompletionsArgs),
    /// Print the man page (roff) for `latscope` and every subcommand.
    Man(cmd::completions::ManArgs),
}

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    interrupt::catch(on_interrupt(&cli.command));
    match cli.command {
        Command::Demo(a) => cmd::demo::run(&a),
        Command::Diagnose(a) => cmd::diagnose::run(&a),
        Command::Serve(a) => cmd::serve::run(&a),
        Command::Rr(a) => cmd::rr::run(&a),
        Command::Connect(a) => cmd::connect::run(&a),
        Command::Stream(a) => cmd::stream::run(&a),
        Command::Http(a) => cmd::http::run(&a),
        Command::Schema(a) => cmd::schema::run(&a),
        Command::Ping(a) => cmd::ping::run(&a),
        Command::Trace(a) => cmd::trace::run(&a),
        Command::Sockets(a) => cmd::sockets::run(&a),
        Command::Stack(a) => cmd::stack::run(&a),
        Command::Agent(a) => cmd::agent::run(&a),
        Command::Capture(a) => cmd::capture::run(&a),
        Command::Analyze(a) => cmd::analyze::run(&a),
        Command::Report(a) => cmd::report::run(&a),
        Command::Completions(a) => cmd::completions::completions(&a, Cli::command()),
        Command::Man(a) => cmd::completions::man(&a, Cli::command()),
    }
}

/// What Ctrl-C does to a command: the runs stop and print what they measured, from their
/// first instant (the handler is in place before the command sets up).
fn on_interrupt(c: &Command) -> OnInterrupt {
    match c {
        Command::Demo(_)
        | Command::Diagnose(_)
        | Command::Serve(_)
        | Command::Rr(_)
        | Command::Connect(_)
        | Command::Stream(_)
        | Command::Http(_)
        | Command::Ping(_)
        | Command::Trace(_)
        | Command::Sockets(_)
        | Command::Stack(_)
        | Command::Analyze(_) => OnInterrupt::Partial,
        // Its stop flushes the file: a second signal must not leave half a capture.
        Command::Capture(_) => OnInterrupt::Finishing,
        // The agent handles its signals itself (SIGHUP reloads); the rest end at once.
        Command::Agent(_)
        | Command::Schema(_)
        | Command::Report(_)
        | Command::Completions(_)
        | Command::Man(_) => OnInterrupt::Default,
    }
}

/// A usage error in latscope's one-line form, keeping what clap says besides its first line:
/// the missing arguments ("the following required arguments were not provided: --write
/// <FILE>"), the accepted values ("[possible values: …]") and its tips ("tip: a similar
/// argument exists: '--duration'"). Clap's usage line and "For more information" are replaced
/// by "(see --help)".
pub fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"));
    let first = lines.next().unwrap_or("invalid arguments");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    let details: Vec<String> = lines
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| tip(e, l))
        .collect();
    if line.ends_with(':') && !details.is_empty() {
        // A list announced by its heading (missing arguments): its items, on the same line.
        let items: Vec<&str> = details
            .iter()
            .map(String::as_str)
            .take_while(|d| !d.starts_with("tip:"))
            .collect();
        line = format!("{line} {}", items.join(", "));
        for tip in &details[items.len()..] {
            line = format!("{line}; {tip}");
        }
    } else {
        for d in details {
            let sep = if d.starts_with('[') { " " } else { "; " };
            line = format!("{line}{sep}{d}");
        }
    }
    format!("{line} (see --help)")
}

/// One of clap's detail lines, made right for latscope: its similar names best first (clap
/// lists the closest last: `stram` read "'trace', 'stack', 'stream'"), and no "use '-- -1'" for
/// a negative number (`-d -1s`): no option of latscope takes one, and after `--` it would be a
/// positional argument (issue 41).
fn tip(e: &clap::Error, detail: &str) -> String {
    use clap::error::{ContextKind, ContextValue};
    if !detail.starts_with("tip:") {
        return detail.to_string();
    }
    if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg)
        && arg
            .strip_prefix('-')
            .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        && detail.contains(&format!("'-- {arg}'"))
    {
        return format!("tip: no option takes a negative value ('{arg}' reads as an option)");
    }
    for kind in [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg] {
        if let Some(ContextValue::Strings(names)) = e.get(kind)
            && names.len() > 1
        {
            let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            let listed = quoted.join(", ");
            if let Some(head) = detail.strip_suffix(&listed) {
                let best_first: Vec<&str> = quoted.iter().rev().map(String::as_str).collect();
                return format!("{head}{}", best_first.join(", "));
            }
        }
    }
    detail.to_string()
}

#[cfg(test)]
mod grammar_tests;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `latscope --help` shows `src/exit.rs`'s table as it is (the README's is checked there).
    #[test]
    fn help_shows_the_exit_code_table() {
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains(&crate::exit::help_table()),
            "--help lacks the exit-code table:\n{help}"
        );
    }
}

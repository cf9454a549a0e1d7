//! `latscope diagnose TARGET`: run the right measurements and name the cause.

use std::io::Write;
use std::time::Duration;

use crate::exit;
use crate::interrupt::stop_flag;
use crate::output::OutputArgs;
use crate::progress::Progress;
use clap::Args;
use latscope_core::render::emit;
use latscope_core::units::{parse_duration, parse_size};
use latscope_diagnose::Outcome;
use latscope_diagnose::collect;
use latscope_diagnose::plan::{Plan, PlanError, Request};

/// The help's text after the options: examples, then the rules as the registry lists them
/// (`latscope_diagnose::rules::RULES`), then what a run does and its exit codes.
fn after_help() -> String {
    use latscope_diagnose::rules::{Check, RULES};
    let names = |remainder: bool| {
        RULES
            .iter()
            .filter(|r| matches!(r.check, Check::Remainder(_)) == remainder)
            .map(|r| r.id.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{HELP_EXAMPLES}Findings are named rules ({}){HELP_FINDINGS}\n{}",
        names(false),
        HELP_AFTER.replace("{remainder}", &names(true))
    )
}

const HELP_EXAMPLES: &str = "\
Examples:
  latscope diagnose 10.0.0.2             a latscope server: path, one request, the quick-ack
                                         experiment, concurrency, latency under load
  latscope diagnose http://10.0.0.2/     a web server: path, GET latency alone and concurrent,
                                         packet capture, the server's socket options
  latscope diagnose 10.0.0.2:443         any TCP service: the path (connect RTT, handshakes)
  latscope diagnose 10.0.0.2 --json
  latscope diagnose https://localhost:8443/ --cacert cert.pem
                                         certificates are verified (-k: not, and it says so)
  latscope diagnose http://10.0.0.2/ --server-agent 10.0.0.2 --auth-file key
                                         both ends: the server's host (`latscope serve
                                         --auth-file key --evidence-ports 80`) observes its
                                         sockets, run queue, cgroup, kernel stack and counters

";

const HELP_FINDINGS: &str = "), the root cause first (a finding another explains is marked as its consequence), then by the latency per request they explain, each with its evidence, a confidence, the side to fix and the fix.";

const HELP_AFTER: &str = "\
Time that no rule explains is said as such ({remainder}), with where it sits and what was ruled out.
A run takes at most --max-time; steps it stops are listed as cut short.
When nothing is wrong it says so and shows the budget: network path against time in the hosts.
With --server-agent, each step says which end measured it ([client] or [server]); an agent that cannot be reached or refuses leaves the run client-only, and the verdict says so (the exit code is the run's as usual).

Exit codes: 0 measured, no finding; 1 findings; 2 bad input; 3 the target could not be measured (unreachable, refused, name lookup failed); 4 missing privileges; 130 interrupted.";

#[derive(Args, Debug)]
#[command(after_help = after_help())]
pub struct DiagnoseArgs {
    /// An http:// or https:// URL, or HOST[:PORT]: a latscope server (port 7373 by default) or
    /// any TCP service.
    pub target: String,
    /// Time per application measurement.
    #[arg(short, long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// Connections for the concurrency step.
    #[arg(
        short = 'c',
        long,
        alias = "concurrency",
        default_value_t = 8,
        value_name = "N"
    )]
    pub connections: u32,
    /// Request size for latscope targets.
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "SIZE")]
    pub request_size: u64,
    /// Response size for latscope targets.
    #[arg(long, default_value = "1KiB", value_parser = parse_size, value_name = "SIZE")]
    pub response_size: u64,
    /// Skip the latency-under-load step (a few seconds of bulk transfer).
    #[arg(long)]
    pub no_load: bool,
    /// Time budget of the whole run: each step also has its own (its measurement time plus
    /// set-up); a step still running when its budget or the run's is spent is stopped with
    /// what it measured, later steps are not started, and the report lists them as cut short.
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub max_time: Duration,
    /// Ask the server's agent (`latscope serve --auth-file KEY --evidence-ports PORTS` on the
    /// server's host, port 7373 by default) to observe the target's port while the steps run:
    /// its sockets, run queue, cgroup, kernel stack and TCP counters. Authenticated with
    /// --auth-file.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub server_agent: Option<String>,
    #[command(flatten)]
    pub client: super::ClientArgs,
    #[command(flatten)]
    pub tls: super::TlsArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub report: crate::cmd::report::ReportFile,
}

pub fn run(a: &DiagnoseArgs) -> anyhow::Result<u8> {
    let p = plan(a)?;
    let progress = Progress::new(a.output.progress(), "diagnose");
    let report = collect::run(&p, &stop_flag(), &|s| progress.set(s.to_string()));
    drop(progress);
    let mut out = std::io::stdout().lock();
    emit(&report, a.output.format(), &mut out)?;
    out.flush()?;
    a.report.write(&report)?;
    match Outcome::of(&report) {
        Outcome::Interrupted => Ok(exit::INTERRUPTED),
        Outcome::Unmeasurable(why) => Err(exit::coded(exit::TARGET, why)),
        Outcome::Findings => Ok(exit::FINDINGS),
        Outcome::Clean => Ok(exit::OK),
    }
}

/// The pipeline's plan from the command line: the flags as a [`Request`], checked and resolved
/// by the diagnose crate (bad settings are usage errors; a name that does not resolve keeps the
/// network layer's exit class).
fn plan(a: &DiagnoseArgs) -> anyhow::Result<Plan> {
    let r = Request {
        target: a.target.clone(),
        duration: a.duration,
        concurrency: a.connections,
        request_bytes: a.request_size,
        response_bytes: a.response_size,
        no_load: a.no_load,
        max_time: a.max_time,
        family: a.client.family.family(),
        auth: a.client.auth.key()?,
        server_agent: a.server_agent.clone(),
        tls: a.tls.options(),
    };
    Plan::new(&r).map_err(|e| match e {
        PlanError::Usage(why) => exit::coded(exit::USAGE, why),
        PlanError::Net(e) => e.into(),
    })
}

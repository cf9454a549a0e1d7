//! `latscope diagnose TARGET`: run the right measurements and name the cause.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use latscope_core::render::emit;
use latscope_core::units::{parse_duration, parse_size};
use latscope_net::proto::DEFAULT_PORT;
use latscope_net::sock::Target;

use crate::diagnose::collect::{self, Plan};
use crate::exit;
use crate::output::{OutputArgs, stop_flag};
use crate::progress::Progress;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope diagnose 10.0.0.2             a latscope server: path, one request, the quick-ack
                                         experiment, concurrency, latency under load
  latscope diagnose http://10.0.0.2/     a web server: path, GET latency alone and concurrent,
                                         packet capture, the server's socket options
  latscope diagnose 10.0.0.2:443         any TCP service: the path (connect RTT, handshakes)
  latscope diagnose 10.0.0.2 --json

Findings are named rules (nagle_delayed_ack, delayed_ack, think_time, socket_queueing,
socket_read_wait, pre_tcp_kernel, slow_handshake, retransmissions, bufferbloat, path_dominates), ranked by the latency per request they explain, each with its
evidence, a confidence, the side to fix and the fix. When nothing is wrong it says so and shows
the budget: network path against time in the hosts.

Exit codes: 0 no finding; 1 findings; 2 error (bad input, target unreachable); 130 interrupted.")]
pub struct DiagnoseArgs {
    /// An http:// or https:// URL, or HOST[:PORT]: a latscope server (port 7373 by default) or
    /// any TCP service.
    pub target: String,
    /// Time per application measurement.
    #[arg(short, long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// Connections for the concurrency step.
    #[arg(short, long, default_value_t = 8, value_name = "N")]
    pub concurrency: u32,
    /// Request size for latscope targets.
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "SIZE")]
    pub request_size: u64,
    /// Response size for latscope targets.
    #[arg(long, default_value = "1KiB", value_parser = parse_size, value_name = "SIZE")]
    pub response_size: u64,
    /// Skip the latency-under-load step (a few seconds of bulk transfer).
    #[arg(long)]
    pub no_load: bool,
    #[command(flatten)]
    pub family: super::FamilyArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub report: crate::cmd::report::ReportFile,
}

pub fn run(a: &DiagnoseArgs) -> anyhow::Result<u8> {
    // diagnose documents 2 for every error, as its callers (scripts, CI) expect 0/1/2.
    match plan(a) {
        Ok(p) => {
            let progress = Progress::new(a.output.progress(), "diagnose");
            let report = collect::run(&p, &stop_flag(), &|s| progress.set(s.to_string()));
            drop(progress);
            let mut out = std::io::stdout().lock();
            emit(&report, a.output.format(), &mut out)?;
            out.flush()?;
            a.report.write(&report)?;
            if let Some(h) = report
                .steps
                .iter()
                .find(|s| s.name == "handshakes" && s.status != "ran")
            {
                return Err(exit::coded(
                    exit::USAGE,
                    format!("cannot connect to {}: {}", report.target, h.detail),
                ));
            }
            if report.steps.iter().all(|s| s.status != "ran") {
                return Err(exit::coded(
                    exit::USAGE,
                    format!(
                        "nothing could be measured at {}: {}",
                        report.target,
                        report
                            .steps
                            .first()
                            .map(|s| s.detail.as_str())
                            .unwrap_or("")
                    ),
                ));
            }
            Ok(crate::diagnose::exit_code(&report))
        }
        Err(e) => Err(exit::coded(exit::USAGE, format!("{e:#}"))),
    }
}

fn plan(a: &DiagnoseArgs) -> anyhow::Result<Plan> {
    let url = (a.target.starts_with("http://") || a.target.starts_with("https://"))
        .then(|| a.target.clone());
    let target = match &url {
        Some(u) => {
            let parsed = latscope_http::Url::parse(u)?;
            Target::Inet {
                host: parsed.host,
                port: parsed.port,
            }
        }
        None => Target::parse(&a.target, DEFAULT_PORT)?,
    };
    if matches!(target, Target::Unix(_)) {
        anyhow::bail!("diagnose needs a network target (HOST[:PORT])");
    }
    let family = a.family.family();
    let addr = target.resolve(family)?;
    if a.concurrency == 0 || a.concurrency > 1000 {
        anyhow::bail!("--concurrency must be between 1 and 1000");
    }
    if a.request_size == 0
        || a.response_size == 0
        || a.request_size > 1 << 20
        || a.response_size > 1 << 20
    {
        anyhow::bail!("--request-size and --response-size must be between 1 B and 1 MiB");
    }
    if a.duration < Duration::from_millis(200) {
        anyhow::bail!("--duration must be at least 200ms");
    }
    Ok(Plan {
        target,
        addr,
        duration: a.duration,
        concurrency: a.concurrency,
        request_bytes: a.request_size as u32,
        response_bytes: a.response_size as u32,
        no_load: a.no_load,
        url,
    })
}

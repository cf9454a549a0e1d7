//! `latscope trace HOST`: the hops to a host (Paris traceroute), or `--stats` per-hop loss and
//! RTT percentiles over rounds (mtr's report).

use std::io::Write;

use anyhow::Context;
use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::ping::{ProbeMode, TraceHop, TraceReport};
use latscope_core::render::{self, OutputFormat};
use latscope_core::units::{parse_count, parse_duration};
use latscope_probe::ProbeRequest;
use latscope_probe::trace::TraceOptions;
use serde::Serialize;

use super::FamilyArgs;
use crate::exit;
use crate::output::{self, OutputArgs};

/// Trace probe modes (at most one; none: TCP SYN when privileged, else UDP).
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct TraceModeArgs {
    /// TCP SYN probes from a raw socket (the default; needs CAP_NET_RAW).
    #[arg(long)]
    pub syn: bool,
    /// UDP probes (no privilege; default port 33434, expecting port unreachable at the end).
    #[arg(long)]
    pub udp: bool,
    /// ICMP echo probes.
    #[arg(long)]
    pub icmp: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  latscope trace example.com                TCP SYN to port 80, 3 probes per hop
  latscope trace --udp --queries 1 10.0.0.2  UDP probes, one per hop
  latscope trace --icmp -m 15 ::1           ICMP echo, at most 15 hops
  latscope trace --stats -n 100 10.0.0.2    per-hop loss and RTT percentiles over 100 rounds

Exit codes: 0 destination reached; 1 not reached (or a router answered unreachable); 2 bad input; 3 unresolvable or no route; 4 the mode needs CAP_NET_RAW; 5 local system error; 130 interrupted (hops so far printed).")]
pub struct TraceArgs {
    /// Host name or address (resolved once).
    pub host: String,
    #[command(flatten)]
    pub mode: TraceModeArgs,
    /// Destination port (default 80 for TCP SYN, 33434 for UDP).
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Probes per hop.
    #[arg(long, short_alias = 'q', default_value_t = 3, value_name = "N")]
    pub queries: u32,
    /// Largest TTL (hop count) to try.
    #[arg(
        short = 'm',
        long = "max-ttl",
        default_value_t = 30,
        value_name = "TTL"
    )]
    pub max_ttl: u8,
    /// TTL to start with.
    #[arg(
        long = "first-ttl",
        short_alias = 'f',
        default_value_t = 1,
        value_name = "TTL"
    )]
    pub first_ttl: u8,
    /// How long to wait for a hop's answers after its last probe [default: 1s, and 4s at the
    /// first silent hop after a router, to see its host unreachable].
    #[arg(short = 'W', long, short_alias = 'w', alias = "wait", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,
    /// Statistics over rounds, like `mtr --report`: probe every hop for several rounds, then
    /// print per-hop loss and RTT percentiles.
    #[arg(long, alias = "report")]
    pub stats: bool,
    /// Rounds of `--stats`.
    #[arg(short = 'n', long, short_alias = 'c', default_value = "10", value_parser = parse_count, value_name = "COUNT")]
    pub count: u64,
    /// Time between `--stats` rounds.
    #[arg(short = 'i', long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: std::time::Duration,
    /// UDP / ICMP payload bytes.
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    #[command(flatten)]
    pub family: FamilyArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Serialize)]
struct HopEvent<'a> {
    event: &'static str,
    command: &'static str,
    #[serde(flatten)]
    hop: &'a TraceHop,
}

/// Refuse option combinations that cannot run.
fn validate(args: &TraceArgs) -> anyhow::Result<()> {
    if args.queries == 0 || args.queries > 10 {
        return Err(exit::coded(
            exit::USAGE,
            format!("--queries {}: probes per hop must be 1..10", args.queries),
        ));
    }
    if args.first_ttl == 0 || args.first_ttl > args.max_ttl {
        return Err(exit::coded(
            exit::USAGE,
            format!(
                "--first-ttl {} --max-ttl {}: need 1 <= first TTL <= max TTL",
                args.first_ttl, args.max_ttl
            ),
        ));
    }
    if args.stats && args.count == 0 {
        return Err(exit::coded(
            exit::USAGE,
            "--stats -n 0 runs no round; give at least 1",
        ));
    }
    Ok(())
}

/// Open the prober for `mode` (auto when `None`); the default port follows the mode actually
/// opened (auto may fall back to UDP, whose traceroute port differs).
fn open_prober(
    args: &TraceArgs,
    dst: std::net::IpAddr,
    mode: Option<ProbeMode>,
) -> anyhow::Result<(Box<dyn latscope_probe::Prober>, String, Option<u16>)> {
    let payload = args.size.unwrap_or(if mode == Some(ProbeMode::Icmp) {
        56
    } else {
        16
    });
    // The default port depends on the mode actually opened (auto may fall back to UDP).
    let syn_port = args.port.unwrap_or(80);
    let udp_port = args.port.unwrap_or(33434);
    let first_port = if mode == Some(ProbeMode::Udp) {
        udp_port
    } else {
        syn_port
    };
    let (prober, reason) = match latscope_probe::open(
        dst,
        ProbeRequest {
            mode,
            port: first_port,
            payload,
            trace: true,
            kernel_timestamps: true,
        },
    ) {
        Ok((p, r)) if mode.is_none() && p.mode() == ProbeMode::Udp && udp_port != first_port => {
            drop(p);
            let (p, _) = latscope_probe::open(
                dst,
                ProbeRequest {
                    mode: Some(ProbeMode::Udp),
                    port: udp_port,
                    payload,
                    trace: true,
                    kernel_timestamps: true,
                },
            )?;
            (p, r)
        }
        other => other?,
    };
    let port = match prober.mode() {
        ProbeMode::Syn => Some(syn_port),
        ProbeMode::Udp => Some(udp_port),
        _ => None,
    };
    Ok((prober, reason, port))
}

/// Progress for `--stats` rounds.
fn round_bar(rounds: u64) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(rounds);
    b.set_style(
        indicatif::ProgressStyle::with_template("round {pos}/{len} {wide_bar} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    b
}

/// The probe mode the flags ask for (`None`: picked from the privileges available).
fn asked_mode(args: &TraceArgs) -> Option<ProbeMode> {
    if args.mode.syn {
        Some(ProbeMode::Syn)
    } else if args.mode.udp {
        Some(ProbeMode::Udp)
    } else if args.mode.icmp {
        Some(ProbeMode::Icmp)
    } else {
        None
    }
}

/// The engine's options from the flags. A wait the user chose is kept everywhere; the default
/// listens longer at the first silent hop after a router (`TraceOptions::unreachable_wait`).
fn trace_options(args: &TraceArgs) -> TraceOptions {
    let defaults = TraceOptions::default();
    let wait = args.timeout.unwrap_or(defaults.wait);
    TraceOptions {
        first_ttl: args.first_ttl,
        max_ttl: args.max_ttl,
        queries: args.queries,
        wait,
        unreachable_wait: args.timeout.map_or(defaults.unreachable_wait, |_| wait),
        spacing: wait.min(std::time::Duration::from_millis(50)),
        rounds: args.stats.then_some(args.count),
        round_interval: args.interval,
    }
}

/// Where the RTTs' timestamps came from, and how many had kernel timestamps at both ends.
fn timestamps_text(source: &str, outcome: &latscope_probe::trace::TraceOutcome) -> String {
    if outcome.rtts == outcome.kernel_rtts {
        source.to_string()
    } else {
        format!(
            "{source}; {} of {} RTTs had kernel timestamps at both ends",
            outcome.kernel_rtts, outcome.rtts
        )
    }
}

pub fn run(args: &TraceArgs) -> anyhow::Result<u8> {
    validate(args)?;
    let mode = asked_mode(args);
    // A name's addresses are raced with TCP connects (RFC 8305); the probes go to the winner.
    let (dst, choice) = latscope_probe::choose(
        &args.host,
        args.family.family(),
        args.port.unwrap_or(80),
        args.timeout.unwrap_or(TraceOptions::default().wait),
    )?;
    let (mut prober, reason, port) = open_prober(args, dst, mode)?;
    let mode = prober.mode();
    let format = args.output.format();
    let stop = crate::interrupt::stop_flag();
    let opts = trace_options(args);
    let wait = opts.wait;
    let mut report = TraceReport {
        meta: Meta::new("trace", env!("CARGO_PKG_VERSION"), output::unix_ms()),
        target: args.host.clone(),
        address: dst.to_string(),
        address_choice: Some(choice),
        mode,
        mode_reason: reason,
        port,
        flow: latscope_probe::flow_text(mode).to_string(),
        first_ttl: args.first_ttl,
        max_ttl: args.max_ttl,
        queries: if args.stats { 1 } else { args.queries },
        wait_ns: wait.as_nanos() as u64,
        reached: false,
        destination_reply: None,
        unreachable: None,
        timestamps: String::new(),
        hops: Vec::new(),
        rounds: None,
        report: None,
        interrupted: false,
    };
    let mut stdout = std::io::stdout();
    if format == OutputFormat::Human && !args.stats {
        let _ = writeln!(stdout, "{}", render::ping::trace_header(&report));
        if let Some(line) = report
            .address_choice
            .as_ref()
            .and_then(render::ping::choice_line)
        {
            let _ = writeln!(stdout, "{line}");
        }
    }
    let mut on_hop = |h: &TraceHop| {
        let mut out = std::io::stdout().lock();
        match format {
            OutputFormat::Human => {
                output::live(writeln!(out, "{}", render::ping::hop_line(h)), &stop);
                let _ = out.flush();
            }
            OutputFormat::JsonLines => {
                output::live(
                    render::emit_event(
                        &HopEvent {
                            event: "hop",
                            command: "trace",
                            hop: h,
                        },
                        &mut out,
                    ),
                    &stop,
                );
            }
            OutputFormat::Json => {}
        }
    };
    let bar = (args.stats && args.output.progress()).then(|| round_bar(args.count));
    let mut on_round = |done: u64, _total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    let outcome = latscope_probe::trace::trace(
        prober.as_mut(),
        dst,
        &opts,
        &stop,
        &mut on_hop,
        &mut on_round,
    );
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let outcome = outcome?;
    report.timestamps = timestamps_text(prober.ts_source().name(), &outcome);
    report.reached = outcome.reached;
    report.destination_reply = outcome.destination_reply;
    report.unreachable = outcome.unreachable;
    report.hops = outcome.hops;
    report.rounds = args.stats.then_some(outcome.rounds_done);
    report.report = outcome.report;
    report.interrupted = outcome.interrupted;
    render::emit(&report, format, &mut stdout).context("writing the report")?;
    Ok(if report.interrupted {
        exit::INTERRUPTED
    } else if report.reached {
        exit::OK
    } else {
        exit::FINDINGS
    })
}

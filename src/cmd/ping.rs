//! `latscope ping HOST`: RTT with TCP SYN, TCP connect, UDP or ICMP echo probes.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::ping::{PingReply, ProbeMode};
use latscope_core::render::{self, OutputFormat};
use latscope_core::units::{parse_count, parse_duration};
use latscope_probe::ProbeRequest;
use latscope_probe::ping::{PingContext, PingOptions};
use serde::Serialize;

use crate::exit;
use crate::output::{self, OutputArgs};

/// Probe modes (at most one; none: the best the privileges allow).
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct ModeArgs {
    /// TCP SYN from a raw socket: SYN-ACK means open, RST closed; the kernel resets the
    /// half-open connection. Needs CAP_NET_RAW. The default when allowed.
    #[arg(long)]
    pub syn: bool,
    /// A full TCP connect() and an abortive close; no privilege. The default without CAP_NET_RAW.
    #[arg(long)]
    pub connect: bool,
    /// UDP to latscope serve's echo (port 7373), or to a closed port answering ICMP port unreachable.
    #[arg(long)]
    pub udp: bool,
    /// ICMP echo: unprivileged ping socket where net.ipv4.ping_group_range allows, else raw.
    #[arg(long)]
    pub icmp: bool,
}

impl ModeArgs {
    pub fn mode(&self) -> Option<ProbeMode> {
        if self.syn {
            Some(ProbeMode::Syn)
        } else if self.connect {
            Some(ProbeMode::Connect)
        } else if self.udp {
            Some(ProbeMode::Udp)
        } else if self.icmp {
            Some(ProbeMode::Icmp)
        } else {
            None
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  latscope ping example.com                 TCP SYN to port 80 if privileged, else TCP connect
  latscope ping --syn -p 443 -n 20 10.0.0.2 SYN ping: open (SA) / closed (RA) / filtered (lost)
  latscope ping --udp 10.0.0.2              UDP to `latscope serve` (port 7373)
  latscope ping --icmp -i 10ms -n 1000 ::1  ICMP echo, 100 per second, IPv6
  latscope ping --flood -n 100000 127.0.0.1 next probe as soon as the previous is answered

Exit codes: 0 answers received; 1 no answer at all; 2 bad input; 3 unresolvable or no route; 4 the mode needs CAP_NET_RAW; 5 local system error; 130 interrupted (statistics printed).")]
pub struct PingArgs {
    /// Host name or address (resolved once).
    pub host: String,
    #[command(flatten)]
    pub mode: ModeArgs,
    /// Destination port (default 80 for TCP, 7373 for UDP: latscope serve).
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Number of probes (default: until Ctrl-C).
    #[arg(short = 'n', long, short_alias = 'c', value_parser = parse_count, value_name = "COUNT")]
    pub count: Option<u64>,
    /// Time between probes, down to microseconds (e.g. 1s, 10ms, 200us).
    #[arg(short = 'i', long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: std::time::Duration,
    /// Send the next probe as soon as the previous one is answered (at least every 10 ms);
    /// per-reply lines are not printed.
    #[arg(long)]
    pub flood: bool,
    /// How long to wait for each answer.
    #[arg(short = 'W', long = "timeout", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: std::time::Duration,
    /// Payload bytes (UDP and ICMP; default 56 ICMP, 16 UDP).
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Time with the user-space clock only, as hping3 does (default: kernel timestamps).
    #[arg(long)]
    pub user_timestamps: bool,
    #[command(flatten)]
    pub family: super::FamilyArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One `--json-lines` record per answer.
#[derive(Serialize)]
struct ReplyEvent<'a> {
    event: &'static str,
    command: &'static str,
    #[serde(flatten)]
    reply: &'a PingReply,
}

pub fn run(args: &PingArgs) -> anyhow::Result<u8> {
    if args.count == Some(0) {
        return Err(exit::coded(
            exit::USAGE,
            "-c 0 sends nothing; give a count of at least 1",
        ));
    }
    if args.timeout.is_zero() {
        return Err(exit::coded(
            exit::USAGE,
            "-W 0 cannot receive anything; give a timeout such as 1s",
        ));
    }
    let mode = args.mode.mode();
    let tcp_default = 80;
    let port = args.port.unwrap_or(if mode == Some(ProbeMode::Udp) {
        7373
    } else {
        tcp_default
    });
    // A name's addresses are raced with TCP connects to the port (RFC 8305); every probe mode
    // then goes to the winner.
    let (dst, choice) =
        latscope_probe::choose(&args.host, args.family.family(), port, args.timeout)?;
    let payload = args
        .size
        .unwrap_or(if mode == Some(ProbeMode::Udp) { 16 } else { 56 });
    if payload > 65000 {
        return Err(exit::coded(
            exit::USAGE,
            format!("-s {payload}: a probe payload is at most 65000 bytes"),
        ));
    }
    let (mut prober, reason) = latscope_probe::open(
        dst,
        ProbeRequest {
            mode,
            port,
            payload,
            trace: false,
            kernel_timestamps: !args.user_timestamps,
        },
    )?;
    let mode = prober.mode();
    let port = matches!(mode, ProbeMode::Syn | ProbeMode::Connect | ProbeMode::Udp).then_some(port);
    let payload_bytes = match mode {
        ProbeMode::Udp | ProbeMode::Icmp => payload as u64,
        _ => 0,
    };
    let format = args.output.format();
    let stop = crate::interrupt::stop_flag();
    let mut stdout = std::io::stdout();
    if format == OutputFormat::Human {
        let _ = writeln!(
            stdout,
            "{}",
            render::ping::ping_header(&args.host, &dst.to_string(), port, mode.name(), &reason)
        );
        if let Some(line) = render::ping::choice_line(&choice) {
            let _ = writeln!(stdout, "{line}");
        }
    }
    let flood = args.flood;
    let mut on_reply = |r: &PingReply| {
        let mut out = std::io::stdout().lock();
        match format {
            OutputFormat::Human if !flood => {
                output::live(writeln!(out, "{}", render::ping::reply_line(r)), &stop);
            }
            OutputFormat::JsonLines => {
                output::live(
                    render::emit_event(
                        &ReplyEvent {
                            event: "reply",
                            command: "ping",
                            reply: r,
                        },
                        &mut out,
                    ),
                    &stop,
                );
            }
            _ => {}
        }
    };
    let ctx = PingContext {
        meta: Meta::new("ping", env!("CARGO_PKG_VERSION"), output::unix_ms()),
        target: args.host.clone(),
        address: dst,
        port,
        mode_reason: reason,
        payload_bytes,
    };
    let opts = PingOptions {
        count: args.count,
        interval: args.interval,
        flood: args.flood,
        timeout: args.timeout,
        keep_replies: if format == OutputFormat::Json {
            100_000
        } else {
            0
        },
        first_seq: 0,
    };
    let mut report = latscope_probe::ping::ping(prober.as_mut(), ctx, &opts, &stop, &mut on_reply)?;
    report.address_choice = Some(choice);
    render::emit(&report, format, &mut stdout).context("writing the report")?;
    Ok(if report.interrupted {
        exit::INTERRUPTED
    } else if report.received == 0 {
        exit::FINDINGS
    } else {
        exit::OK
    })
}

//! `latscope connect`: TCP connection set-up latency, or connect+request+response+close.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::address::AddressChoice;
use latscope_core::model::connect::{ConnectMode, ConnectReport};
use latscope_core::model::rr::{ServerBehaviour, SockOpts};
use latscope_core::render::emit;
use latscope_core::units::{format_si, parse_count, parse_duration, parse_size};
use latscope_net::connect::ConnectConfig;
use latscope_net::proto::DEFAULT_PORT;
use latscope_net::rr::StopAfter;
use latscope_net::sock::Target;

use crate::exit;
use crate::interrupt::stop_flag;
use crate::output::{OutputArgs, unix_ms};
use crate::progress::Progress;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope connect 10.0.0.2:443                 200 handshakes against any TCP server
  latscope connect 10.0.0.2:80 -d 10s -c 4      as many as possible for 10 s, 4 in parallel
  latscope connect 127.0.0.1 --crr -n 10k       connect + 64 B request + response + close
                                                against latscope serve (netperf TCP_CRR)

Connect latency is the time connect() takes: SYN sent until the SYN-ACK is in and the connection established, as the client sees it. Refused and timed-out attempts are counted.")]
pub struct ConnectArgs {
    /// HOST:PORT of any TCP server (port 7373, latscope serve's, when omitted).
    pub target: String,
    /// Port of TARGET (as HOST:PORT does) [default: 7373].
    #[arg(short, long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Connect, send a request, read the response, close: against latscope serve.
    #[arg(long)]
    pub crr: bool,
    /// Attempts in all [default: 200 unless --duration].
    #[arg(short = 'n', long, value_parser = parse_count, value_name = "COUNT", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Keep connecting for this long.
    #[arg(short, long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Connection attempts in parallel.
    #[arg(
        short = 'c',
        long,
        short_alias = 'P',
        alias = "parallel",
        default_value_t = 1,
        value_name = "N"
    )]
    pub connections: u32,
    /// Per-attempt timeout.
    #[arg(short = 'W', long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Pause between one worker's attempts.
    #[arg(short, long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// --crr request and response size.
    #[arg(short, long, default_value = "64", value_parser = parse_size, value_name = "SIZE")]
    pub size: u64,
    #[command(flatten)]
    pub client: super::ClientArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The engine's configuration, and how the address was chosen (for the report).
pub fn config(a: &ConnectArgs) -> anyhow::Result<(ConnectConfig, AddressChoice)> {
    let target = super::parse_target(&a.target, a.port, DEFAULT_PORT)?;
    if matches!(target, Target::Unix(_)) {
        return Err(exit::coded(
            exit::USAGE,
            "connect measures TCP: give HOST:PORT, not a unix socket",
        ));
    }
    if a.connections == 0 || a.connections > 10_000 {
        return Err(exit::coded(
            exit::USAGE,
            "--connections must be between 1 and 10000",
        ));
    }
    if a.size == 0 || a.size > 1 << 30 {
        return Err(exit::coded(
            exit::USAGE,
            "--size must be between 1 B and 1 GiB",
        ));
    }
    if a.timeout.is_zero() {
        return Err(exit::coded(exit::USAGE, "--timeout must be above zero"));
    }
    let stop_after = match (a.count, a.duration) {
        (Some(0), _) => return Err(exit::coded(exit::USAGE, "--count must be at least 1")),
        (Some(n), _) => StopAfter::Count(n),
        (None, Some(d)) if d.is_zero() => {
            return Err(exit::coded(exit::USAGE, "--duration must be above zero"));
        }
        (None, Some(d)) => StopAfter::Duration(d),
        (None, None) => StopAfter::Count(200),
    };
    // Every address of a name, raced as RFC 8305 does; the winner is measured (its race
    // connection is not counted).
    let race = target.choose(a.client.family.family(), a.timeout)?;
    let config = ConnectConfig {
        target,
        addr: race.addr,
        mode: if a.crr {
            ConnectMode::Crr
        } else {
            ConnectMode::Connect
        },
        stop_after,
        parallel: a.connections,
        timeout: a.timeout,
        interval: a.interval,
        request_bytes: a.size as u32,
        response_bytes: a.size as u32,
        server: ServerBehaviour {
            sockopts: SockOpts {
                nodelay: true,
                ..SockOpts::default()
            },
            ..ServerBehaviour::default()
        },
        auth: a.client.auth.key()?,
    };
    Ok((config, race.choice))
}

/// 0: every attempt worked; 1: some failed; 3: none did; 130: interrupted.
pub fn report_code(r: &ConnectReport) -> u8 {
    if r.interrupted {
        exit::INTERRUPTED
    } else if r.succeeded == 0 {
        exit::TARGET
    } else if r.succeeded < r.attempts {
        exit::FINDINGS
    } else {
        exit::OK
    }
}

pub fn run(a: &ConnectArgs) -> anyhow::Result<u8> {
    let (cfg, choice) = config(a)?;
    let progress = Progress::new(a.output.progress(), &format!("connect {}", cfg.target));
    progress.set(format!(
        "{} …",
        if a.crr {
            "connect+request+response+close"
        } else {
            "connecting"
        }
    ));
    let meta = Meta::new("connect", env!("CARGO_PKG_VERSION"), unix_ms());
    let mut report = latscope_net::connect::run(&cfg, meta, &stop_flag())?;
    report.address_choice = Some(choice);
    progress.set(format!("{}/s", format_si(report.rate_per_sec)));
    drop(progress);
    let mut out = std::io::stdout().lock();
    emit(&report, a.output.format(), &mut out)?;
    out.flush()?;
    Ok(report_code(&report))
}

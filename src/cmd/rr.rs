//! `latscope rr`: request/response ping-pong against `latscope serve`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use latscope_core::LatencyHistogram;
use latscope_core::model::address::AddressChoice;
use latscope_core::model::rr::{RrReport, SockOpts, Transport};
use latscope_core::model::{IntervalEvent, Meta};
use latscope_core::render::{OutputFormat, emit_event};
use latscope_core::sweep::parse_size_list;
use latscope_core::units::{parse_count, parse_duration, parse_rate, parse_size};
use latscope_net::rr::{Peer, RrConfig, StopAfter};
use latscope_net::sock::Target;
use latscope_tui::{Goal, LiveState, RateUnit, Tick};

use crate::exit;
use crate::interrupt::stop_flag;
use crate::live::LongRunOutput;
use crate::output::unix_ms;

/// `--peer` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerKind {
    Latscope,
    Sockperf,
}

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope rr 127.0.0.1                         TCP ping-pong, 64 B each way, 5 s
  latscope rr 10.0.0.2 --udp -n 100k            UDP: losses counted, never hangs on a lost datagram
  latscope rr unix:/tmp/latscope.sock           unix stream socket
  latscope rr 10.0.0.2 -c 8 -q 20k              open loop, 20k requests/s over 8 connections
  latscope rr 10.0.0.2 --sizes 1:65536:x2       latency per message size; flags sizes that stall
  latscope rr 10.0.0.2:11111 --peer sockperf    against a `sockperf server`, like sockperf ping-pong
  latscope rr 10.0.0.2 -s 1024 --server-split 128 --server-nagle
                                                reproduce Nagle × delayed ACK (expect ~40 ms)

RTT is measured from the request's write to the last response byte read. One-way = RTT/2 is an estimate that assumes a symmetric path. Warm-up transactions are not counted.")]
pub struct RrArgs {
    /// HOST[:PORT] of a latscope server (port 7373 by default), or unix:PATH.
    pub target: Option<String>,
    /// Port of TARGET (as HOST:PORT does) [default: 7373].
    #[arg(short, long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Use a unix stream socket at PATH instead of TARGET.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["target", "udp", "port"])]
    pub unix: Option<PathBuf>,
    /// UDP datagrams instead of TCP (each carries a 20-byte latscope header).
    #[arg(long)]
    pub udp: bool,
    /// The server at TARGET: latscope serve, or a `sockperf server` (the same server that
    /// `sockperf ping-pong` measures; request = response size, at least 14 B).
    #[arg(long, value_enum, default_value_t = PeerKind::Latscope)]
    pub peer: PeerKind,
    /// Request and response size.
    #[arg(short, long, default_value = "64", value_parser = parse_size, value_name = "SIZE")]
    pub size: u64,
    /// Request size (overrides --size).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub request_size: Option<u64>,
    /// Response size (overrides --size).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub response_size: Option<u64>,
    /// Sweep sizes (request = response): a list (64,1500), 1:65536:x2 or 0:4096:+64.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["request_size", "response_size"])]
    pub sizes: Option<String>,
    /// Measured transactions (per size), after warm-up.
    #[arg(short = 'n', long, value_parser = parse_count, value_name = "COUNT", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Measurement time (per size) [default: 5s, or 1s per size with --sizes].
    #[arg(short, long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Warm-up before measuring (per size), excluded from the statistics.
    #[arg(long, short_alias = 'w', default_value = "200ms", value_parser = parse_duration, value_name = "DURATION")]
    pub warmup: Duration,
    /// Connections in parallel, one thread each.
    #[arg(short, long, default_value_t = 1, value_name = "N")]
    pub connections: u32,
    /// Open loop: total requests per second; latency then also counts from the intended send time.
    #[arg(short = 'q', long, value_parser = parse_rate, value_name = "RATE")]
    pub rate: Option<f64>,
    /// Per-request timeout [default: 1s for UDP, 10s otherwise].
    #[arg(short = 'W', long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Connection set-up timeout.
    #[arg(long, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,
    /// Interval of --json-lines events and the progress line.
    #[arg(short, long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    #[command(flatten)]
    pub client: super::ClientArgs,

    /// Client: leave Nagle on (TCP_NODELAY off; it is on by default, as in most RPC clients).
    #[arg(long, help_heading = "Client socket options")]
    pub nagle: bool,
    /// Client: re-arm TCP_QUICKACK after every read (ACK at once instead of delaying).
    #[arg(long, help_heading = "Client socket options")]
    pub quickack: bool,
    /// Client: TCP_CORK around each request.
    #[arg(long, help_heading = "Client socket options")]
    pub cork: bool,
    /// Client: SO_SNDBUF.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", help_heading = "Client socket options")]
    pub sndbuf: Option<u64>,
    /// Client: SO_RCVBUF.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", help_heading = "Client socket options")]
    pub rcvbuf: Option<u64>,

    /// Server: leave Nagle on (TCP_NODELAY off).
    #[arg(long, help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_nagle: bool,
    /// Server: respond in two writes, the first SIZE bytes then the rest (header, then body).
    #[arg(long, value_parser = parse_size, value_name = "SIZE", help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_split: Option<u64>,
    /// Server: re-arm TCP_QUICKACK after every read.
    #[arg(long, help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_quickack: bool,
    /// Server: TCP_CORK around each response.
    #[arg(long, help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_cork: bool,
    /// Server: SO_SNDBUF.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_sndbuf: Option<u64>,
    /// Server: SO_RCVBUF.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_rcvbuf: Option<u64>,
    /// Server: wait this long before each response (think time).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", help_heading = "Server behaviour (asked of latscope serve)")]
    pub server_think: Option<Duration>,
    /// Server (UDP): drop every Nth request, to see losses counted.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Server behaviour (asked of latscope serve)"
    )]
    pub server_drop_every: Option<u32>,

    #[command(flatten)]
    pub view: LongRunOutput,
}

fn buf_size(what: &str, v: Option<u64>) -> anyhow::Result<Option<u32>> {
    match v {
        Some(b) if b == 0 || b > i32::MAX as u64 => Err(exit::coded(
            exit::USAGE,
            format!("{what} must be between 1 B and 2 GiB"),
        )),
        Some(b) => Ok(Some(b as u32)),
        None => Ok(None),
    }
}

fn msg_size(what: &str, v: u64, transport: Transport, peer: PeerKind) -> anyhow::Result<u32> {
    let (min, max, why) = match (peer, transport) {
        (PeerKind::Sockperf, Transport::Udp) => (
            14,
            65_507,
            "sockperf messages carry a 14-byte header and fit one datagram",
        ),
        (PeerKind::Sockperf, _) => (
            14,
            1 << 30,
            "sockperf messages carry a 14-byte header; at most 1 GiB",
        ),
        (_, Transport::Udp) => (
            20,
            65_507,
            "UDP messages carry a 20-byte latscope header and fit one datagram",
        ),
        _ => (
            1,
            1 << 30,
            "a message holds at least 1 byte and at most 1 GiB",
        ),
    };
    if v < min || v > max {
        return Err(exit::coded(
            exit::USAGE,
            format!("{what} {v} B is out of range {min}–{max} B: {why}"),
        ));
    }
    Ok(v as u32)
}

/// The (request, response) sizes to measure: a `--sizes` sweep or one pair.
fn sizes(a: &RrArgs, transport: Transport) -> anyhow::Result<Vec<(u32, u32)>> {
    Ok(match &a.sizes {
        Some(list) => parse_size_list(list)?
            .into_iter()
            .map(|s| msg_size("size", s, transport, a.peer).map(|s| (s, s)))
            .collect::<anyhow::Result<_>>()?,
        None => vec![(
            msg_size(
                "request size",
                a.request_size.unwrap_or(a.size),
                transport,
                a.peer,
            )?,
            msg_size(
                "response size",
                a.response_size.unwrap_or(a.size),
                transport,
                a.peer,
            )?,
        )],
    })
}

/// What a sockperf server cannot do: different request and response sizes, unix sockets,
/// latscope's server-side behaviours.
fn check_sockperf(a: &RrArgs, sizes: &[(u32, u32)], transport: Transport) -> anyhow::Result<()> {
    if sizes.iter().any(|(q, r)| q != r) {
        return Err(exit::coded(
            exit::USAGE,
            "a sockperf server echoes each message: request and response sizes must be equal",
        ));
    }
    if transport == Transport::Unix {
        return Err(exit::coded(
            exit::USAGE,
            "--peer sockperf works over TCP and UDP only",
        ));
    }
    let asks_server = a.server_nagle
        || a.server_split.is_some()
        || a.server_quickack
        || a.server_cork
        || a.server_sndbuf.is_some()
        || a.server_rcvbuf.is_some()
        || a.server_think.is_some()
        || a.server_drop_every.is_some();
    if asks_server {
        return Err(exit::coded(
            exit::USAGE,
            "--server-* options need latscope serve at the other end, not sockperf",
        ));
    }
    Ok(())
}

/// Turn the flags into the engine's configuration.
pub fn config(a: &RrArgs) -> anyhow::Result<(RrConfig, Option<AddressChoice>)> {
    let (target, transport) = super::target_and_transport(&a.target, a.port, &a.unix, a.udp)?;
    let sizes = sizes(a, transport)?;
    if a.peer == PeerKind::Sockperf {
        check_sockperf(a, &sizes, transport)?;
    }
    if a.connections == 0 || a.connections > 10_000 {
        return Err(exit::coded(
            exit::USAGE,
            "--connections must be between 1 and 10000",
        ));
    }
    if a.count == Some(0) {
        return Err(exit::coded(exit::USAGE, "--count must be at least 1"));
    }
    let stop_after = match (a.count, a.duration) {
        (Some(n), _) => StopAfter::Count(n),
        (None, Some(d)) if d.is_zero() => {
            return Err(exit::coded(exit::USAGE, "--duration must be above zero"));
        }
        (None, Some(d)) => StopAfter::Duration(d),
        (None, None) if a.sizes.is_some() => StopAfter::Duration(Duration::from_secs(1)),
        (None, None) => StopAfter::Duration(Duration::from_secs(5)),
    };
    if a.interval < Duration::from_millis(10) {
        return Err(exit::coded(exit::USAGE, "--interval must be at least 10ms"));
    }
    if a.server_split == Some(0) {
        return Err(exit::coded(
            exit::USAGE,
            "--server-split must be at least 1 byte",
        ));
    }
    let timeout = a.timeout.unwrap_or(if transport == Transport::Udp {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    });
    if timeout.is_zero() {
        return Err(exit::coded(exit::USAGE, "--timeout must be above zero"));
    }
    // Every address of a name, raced as RFC 8305 does (a TCP connect race, also for UDP:
    // latscope serve listens on both); the winner is measured.
    let race = match &target {
        Target::Unix(_) => None,
        t => Some(t.choose(a.client.family.family(), a.connect_timeout)?),
    };
    let config = RrConfig {
        addr: race.as_ref().map(|r| r.addr),
        target,
        transport,
        sizes,
        connections: a.connections,
        stop_after,
        warmup: a.warmup,
        rate: a.rate,
        client: SockOpts {
            nodelay: !a.nagle,
            quickack: a.quickack,
            cork: a.cork,
            sndbuf: buf_size("--sndbuf", a.sndbuf)?,
            rcvbuf: buf_size("--rcvbuf", a.rcvbuf)?,
        },
        server: super::serve::behaviour(
            a.server_split,
            a.server_think,
            SockOpts {
                nodelay: !a.server_nagle,
                quickack: a.server_quickack,
                cork: a.server_cork,
                sndbuf: buf_size("--server-sndbuf", a.server_sndbuf)?,
                rcvbuf: buf_size("--server-rcvbuf", a.server_rcvbuf)?,
            },
            a.server_drop_every,
        ),
        timeout,
        connect_timeout: a.connect_timeout,
        interval: a.interval,
        peer: match a.peer {
            PeerKind::Latscope => Peer::Latscope,
            PeerKind::Sockperf => Peer::Sockperf,
        },
        auth: a.client.auth.key()?,
    };
    Ok((config, race.map(|r| r.choice)))
}

/// The exit code a finished report deserves.
pub fn report_code(r: &RrReport) -> u8 {
    if r.interrupted {
        return exit::INTERRUPTED;
    }
    let failed = r
        .results
        .iter()
        .any(|s| s.lost > 0 || s.timeouts > 0 || !s.errors.is_empty());
    if failed || r.size_jump.is_some() {
        exit::FINDINGS
    } else {
        exit::OK
    }
}

pub fn run(a: &RrArgs) -> anyhow::Result<u8> {
    let (cfg, choice) = config(a)?;
    let format = a.view.output.format();
    let stop = stop_flag();
    let live = a.view.start_live(live_state(&cfg), &stop);
    let progress = a.view.progress(&live, &format!("rr {}", cfg.target));
    let mut stdout = std::io::stdout();
    let want = format == OutputFormat::JsonLines || a.view.output.progress() || live.is_some();
    let mut on_interval = |ev: &IntervalEvent, hist: &LatencyHistogram| {
        progress.interval(ev);
        if let Some(v) = &live {
            v.update(|st| {
                if cfg.sizes.len() > 1 {
                    st.status = format!("size {}", ev.label);
                }
                st.tick(Tick {
                    end_ns: ev.end_ns,
                    count: ev.count,
                    errors: ev.errors,
                    rate: ev.rate_per_sec,
                    latency: Some(&ev.latency),
                    hist: Some(hist),
                })
            });
        }
        if format == OutputFormat::JsonLines {
            crate::output::live(emit_event(ev, &mut stdout), &stop);
        }
    };
    let meta = Meta::new("rr", env!("CARGO_PKG_VERSION"), unix_ms());
    let report = latscope_net::rr::run(&cfg, meta, &stop, &mut on_interval, want);
    let report = report.map(|mut r| {
        r.address_choice = choice;
        // The client's own stack, timed on a connection of its own after the run.
        if !r.interrupted {
            r.client_stack = latscope_net::hoststack::measure(&cfg).and_then(Result::ok);
        }
        r
    });
    let report = a.view.finish(progress, live, report)?;
    Ok(report_code(&report))
}

/// The live view's empty state: every size's warm-up and duration, or the transaction count.
fn live_state(cfg: &RrConfig) -> LiveState {
    let sizes = cfg.sizes.len().max(1) as u32;
    let goal = match cfg.stop_after {
        StopAfter::Duration(d) => Goal::Duration((cfg.warmup + d) * sizes),
        StopAfter::Count(n) => Goal::Count(n * u64::from(sizes)),
    };
    let title = format!(
        "latscope rr {} {}  {}",
        cfg.target,
        cfg.transport.name(),
        latscope_core::units::count(u64::from(cfg.connections), "connection")
    );
    let mut st = LiveState::new(title, goal, RateUnit::PerSec("trans/s"));
    st.status = "connecting…".into();
    st
}

//! `latscope stream`: throughput per direction and per interval, with both sides' cost.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::address::AddressChoice;
use latscope_core::model::rr::Transport;
use latscope_core::model::stream::{Direction, StreamInterval, StreamOptions, StreamReport};
use latscope_core::render::stream::interval_line;
use latscope_core::render::{OutputFormat, emit_event};
use latscope_core::units::{format_bitrate, format_ns, parse_bitrate, parse_duration, parse_size};
use latscope_net::proto::StreamSpec;
use latscope_net::sock::Target;
use latscope_net::stream::StreamConfig;
use latscope_tui::{Goal, LiveState, RateUnit, Tick};

use crate::exit;
use crate::interrupt::stop_flag;
use crate::live::LongRunOutput;
use crate::output::unix_ms;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope stream 10.0.0.2                       TCP, client → server, 10 s, per-second lines
  latscope stream 10.0.0.2 -R -c 4               server → client, 4 parallel streams
  latscope stream 10.0.0.2 --bidir -d 30s        both directions at once, reported separately
  latscope stream 10.0.0.2 --udp -b 50M -l 1400  UDP at 50 Mbit/s: loss, order, jitter (RFC 3550)
  latscope stream 10.0.0.2 --latency-probe       latency of a small request, idle vs. under load
  latscope stream --unix /tmp/latscope.sock      unix stream socket

The receiver's count is the truth for delivered bytes; both sides' figures (bytes, time, rate, CPU, I/O calls, bytes and time per call, context switches) are shown, like nuttcp's -t and -r lines. TCP senders add retransmits, cwnd and RTT from TCP_INFO each interval.")]
pub struct StreamArgs {
    /// HOST[:PORT] of a latscope server (port 7373 by default), or unix:PATH.
    pub target: Option<String>,
    /// Port of TARGET (as HOST:PORT does) [default: 7373].
    #[arg(short, long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Use a unix stream socket at PATH instead of TARGET.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["target", "udp", "port"])]
    pub unix: Option<PathBuf>,
    /// UDP datagrams instead of TCP.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// How long to send [default: 10s].
    #[arg(short = 'd', long, short_alias = 't', alias = "time", value_parser = parse_duration, value_name = "DURATION", conflicts_with = "bytes")]
    pub duration: Option<Duration>,
    /// Bytes to send per direction (shared by the streams) instead of a duration.
    #[arg(long, short_alias = 'n', value_parser = parse_size, value_name = "SIZE")]
    pub bytes: Option<u64>,
    /// Parallel streams (connections) per direction.
    #[arg(
        short = 'c',
        long,
        short_alias = 'P',
        alias = "parallel",
        default_value_t = 1,
        value_name = "N"
    )]
    pub connections: u32,
    /// The server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once, on separate connections.
    #[arg(long)]
    pub bidir: bool,
    /// Interval of the per-interval lines and events.
    #[arg(short, long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// Write (datagram) size [default: 128KiB; 1400 B for UDP].
    #[arg(short = 'l', long, value_parser = parse_size, value_name = "SIZE")]
    pub length: Option<u64>,
    /// UDP target bit rate per direction, paced per datagram (no bursts).
    #[arg(short = 'b', long, default_value = "10M", value_parser = parse_bitrate, value_name = "RATE")]
    pub bitrate: f64,
    /// SO_SNDBUF on the data sockets (both sides).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF on the data sockets (both sides).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub rcvbuf: Option<u64>,
    /// TCP maximum segment size (TCP_MAXSEG).
    #[arg(long, value_name = "BYTES")]
    pub mss: Option<u32>,
    /// IP TOS byte (0-255).
    #[arg(long, value_name = "TOS", conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// DSCP code point (0-63), sets TOS to DSCP << 2.
    #[arg(long, value_name = "DSCP")]
    pub dscp: Option<u8>,
    /// TCP congestion control (e.g. cubic, bbr, reno).
    #[arg(short = 'C', long, value_name = "NAME")]
    pub congestion: Option<String>,
    /// TCP_NODELAY on the data sockets.
    #[arg(long)]
    pub nodelay: bool,
    /// Send with sendfile(2) from memory: no user-space copy.
    #[arg(short = 'Z', long)]
    pub zerocopy: bool,
    /// Pin stream threads to these CPUs, round-robin (e.g. 0,1).
    #[arg(long, value_name = "CPUS", value_delimiter = ',')]
    pub affinity: Vec<usize>,
    /// Also measure a 64 B request/response on its own connection, idle and during the transfer.
    #[arg(long)]
    pub latency_probe: bool,
    /// Connection set-up timeout.
    #[arg(long, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,
    #[command(flatten)]
    pub client: super::ClientArgs,
    #[command(flatten)]
    pub view: LongRunOutput,
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    exit::coded(exit::USAGE, msg)
}

pub fn config(a: &StreamArgs) -> anyhow::Result<(StreamConfig, Option<AddressChoice>)> {
    let (target, transport) = super::target_and_transport(&a.target, a.port, &a.unix, a.udp)?;
    if a.connections == 0 || a.connections > 128 {
        return Err(usage("--connections must be between 1 and 128"));
    }
    let length = a.length.unwrap_or(if transport == Transport::Udp {
        1400
    } else {
        128 * 1024
    });
    if transport == Transport::Udp && !(32..=65_507).contains(&length) {
        return Err(usage(format!(
            "--length {length} B: UDP datagrams must be 32–65507 B (a 32-byte header is inside)"
        )));
    }
    if length == 0 || length > 64 << 20 {
        return Err(usage("--length must be between 1 B and 64 MiB"));
    }
    let duration = match (a.duration, a.bytes) {
        (Some(t), _) if t.is_zero() => return Err(usage("--duration must be above zero")),
        (Some(t), _) => t,
        (None, Some(_)) => Duration::ZERO,
        (None, None) => Duration::from_secs(10),
    };
    if a.bytes == Some(0) {
        return Err(usage("--bytes must be above zero"));
    }
    if a.interval < Duration::from_millis(100) {
        return Err(usage("--interval must be at least 100ms"));
    }
    if a.dscp.is_some_and(|d| d > 63) {
        return Err(usage("--dscp must be 0-63"));
    }
    let buf = |what: &str, v: Option<u64>| -> anyhow::Result<Option<u32>> {
        match v {
            Some(b) if b == 0 || b > i32::MAX as u64 => {
                Err(usage(format!("{what} must be between 1 B and 2 GiB")))
            }
            other => Ok(other.map(|b| b as u32)),
        }
    };
    if transport != Transport::Tcp && (a.mss.is_some() || a.congestion.is_some() || a.nodelay) {
        return Err(usage("--mss, --congestion and --nodelay apply to TCP only"));
    }
    if a.zerocopy && transport == Transport::Udp {
        return Err(usage(
            "--zerocopy applies to stream sockets (TCP, unix), not UDP",
        ));
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if let Some(c) = a.affinity.iter().find(|c| **c >= ncpu) {
        return Err(usage(format!(
            "--affinity: CPU {c} does not exist (this machine has {ncpu})"
        )));
    }
    let streams = a.connections;
    let spec = StreamSpec {
        transport,
        direction: if a.bidir {
            Direction::Both
        } else if a.reverse {
            Direction::Receive
        } else {
            Direction::Send
        },
        streams,
        duration_ms: duration.as_millis() as u64,
        bytes_per_stream: a.bytes.map(|b| b.div_ceil(u64::from(streams))),
        buffer_bytes: length as u32,
        udp_rate_bps: (transport == Transport::Udp).then(|| a.bitrate / f64::from(streams)),
        options: StreamOptions {
            nodelay: a.nodelay,
            mss: a.mss,
            tos: a.tos.or(a.dscp.map(|d| d << 2)),
            congestion: a.congestion.clone(),
            sndbuf: buf("--sndbuf", a.sndbuf)?,
            rcvbuf: buf("--rcvbuf", a.rcvbuf)?,
            zerocopy: a.zerocopy,
        },
        interval_ms: a.interval.as_millis() as u64,
    };
    // Every address of a name, raced as RFC 8305 does (a TCP connect race, also for UDP:
    // latscope serve listens on both); the winner is measured.
    let race = match &target {
        Target::Unix(_) => None,
        t => Some(t.choose(a.client.family.family(), a.connect_timeout)?),
    };
    let config = StreamConfig {
        addr: race.as_ref().map(|r| r.addr),
        target,
        spec,
        connect_timeout: a.connect_timeout,
        affinity: a.affinity.clone(),
        latency_probe: a.latency_probe,
        auth: a.client.auth.key()?,
    };
    Ok((config, race.map(|r| r.choice)))
}

/// The exit code a finished report deserves: as in rr, lost datagrams and a latency jump (a
/// small request's median under the transfer 2× and 1 ms above idle) are findings.
pub fn report_code(r: &StreamReport) -> u8 {
    if r.interrupted {
        exit::INTERRUPTED
    } else if r.error.is_some() {
        exit::TARGET
    } else if r.udp_lost() > 0 || r.latency_probe.as_ref().is_some_and(|p| p.jumped()) {
        exit::FINDINGS
    } else {
        exit::OK
    }
}

pub fn run(a: &StreamArgs) -> anyhow::Result<u8> {
    let (cfg, choice) = config(a)?;
    let format = a.view.output.format();
    let stop = stop_flag();
    let live = a.view.start_live(live_state(&cfg), &stop);
    let progress = a.view.progress(&live, &format!("stream {}", cfg.target));
    let mut header_done = false;
    let mut feed = LiveFeed::new(&cfg);
    let mut on_interval = |ev: &StreamInterval| match format {
        OutputFormat::JsonLines => {
            crate::output::live(emit_event(ev, &mut std::io::stdout()), &stop);
        }
        OutputFormat::Human if live.is_some() => {
            if let Some(v) = &live {
                v.update(|st| feed.take(ev, st));
            }
        }
        OutputFormat::Human => {
            progress.set(format!(
                "{} {} {}",
                ev.direction,
                ev.side,
                format_bitrate(ev.rate_bps)
            ));
            let mut out = std::io::stdout().lock();
            if !header_done {
                let _ = writeln!(
                    out,
                    "  {:<14} {:<14} {:<16} {:>14}",
                    "interval", "direction", "view", "rate"
                );
                header_done = true;
            }
            let _ = writeln!(out, "{}", interval_line(ev));
        }
        OutputFormat::Json => {
            progress.set(format!("{} {}", ev.direction, format_bitrate(ev.rate_bps)))
        }
    };
    let meta = Meta::new("stream", env!("CARGO_PKG_VERSION"), unix_ms());
    let report = latscope_net::stream::run(&cfg, meta, &stop, &mut on_interval);
    let report = report.map(|mut r| {
        r.address_choice = choice;
        r
    });
    let report = a.view.finish(progress, live, report)?;
    Ok(report_code(&report))
}

/// The live view's empty state: the senders' duration (plus the idle latency probe), or open
/// when the run is a byte count.
fn live_state(cfg: &StreamConfig) -> LiveState {
    let spec = &cfg.spec;
    let goal = if spec.bytes_per_stream.is_some() || spec.duration_ms == 0 {
        Goal::Open
    } else {
        Goal::Duration(Duration::from_millis(spec.duration_ms))
    };
    let title = format!(
        "latscope stream {} {}  {} {}",
        cfg.target,
        spec.transport.name(),
        latscope_core::units::count(u64::from(spec.streams), "stream"),
        match spec.direction {
            Direction::Send => "client→server",
            Direction::Receive => "server→client",
            Direction::Both => "both ways",
        }
    );
    let mut st = LiveState::new(title, goal, RateUnit::Bits);
    st.status = "connecting…".into();
    st
}

/// Turns the per-side interval records into the live view's figures: one rate per interval (the
/// receivers' rates, summed over the directions) and a table of every side's last interval.
struct LiveFeed {
    directions: usize,
    /// Receivers' rates of the interval being assembled: (direction, bit/s).
    pending: Vec<(String, f64)>,
    /// Each side's last record, keyed by direction, side and role.
    rows: std::collections::BTreeMap<(String, String, String), StreamInterval>,
}

impl LiveFeed {
    fn new(cfg: &StreamConfig) -> LiveFeed {
        LiveFeed {
            directions: if cfg.spec.direction == Direction::Both {
                2
            } else {
                1
            },
            pending: Vec::new(),
            rows: Default::default(),
        }
    }

    fn take(&mut self, ev: &StreamInterval, st: &mut LiveState) {
        self.rows.insert(
            (ev.direction.clone(), ev.side.clone(), ev.role.clone()),
            ev.clone(),
        );
        if ev.role == "receiver" {
            self.pending.retain(|(d, _)| *d != ev.direction);
            self.pending.push((ev.direction.clone(), ev.rate_bps));
            if self.pending.len() >= self.directions {
                st.tick(Tick {
                    end_ns: ev.end_ns,
                    count: 0,
                    errors: 0,
                    rate: self.pending.iter().map(|(_, r)| r).sum(),
                    latency: None,
                    hist: None,
                });
                self.pending.clear();
            }
        }
        let header = [
            "direction",
            "side",
            "role",
            "rate",
            "retransmits",
            "cwnd",
            "rtt",
            "UDP lost",
        ];
        let rows = self
            .rows
            .values()
            .map(|r| {
                let tcp = r.tcp.as_ref();
                vec![
                    r.direction.clone(),
                    r.side.clone(),
                    r.role.clone(),
                    format_bitrate(r.rate_bps),
                    tcp.map_or_else(String::new, |t| t.retransmits.to_string()),
                    tcp.map_or_else(String::new, |t| t.cwnd.to_string()),
                    tcp.map_or_else(String::new, |t| format_ns(f64::from(t.rtt_us) * 1e3)),
                    r.udp_lost.map_or_else(String::new, |l| l.to_string()),
                ]
            })
            .collect();
        st.table = Some((header.iter().map(|h| h.to_string()).collect(), rows));
    }
}

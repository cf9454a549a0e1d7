//! `latscope serve`: run the peer server.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use latscope_core::model::rr::{ServerBehaviour, SockOpts, WriteMode};
use latscope_core::units::{parse_bitrate, parse_duration, parse_size};
use latscope_diagnose::remote::server::{EvidenceServer, Ports};
use latscope_net::proto::{DEFAULT_PORT, Limits};
use latscope_net::serve::{Budget, ServeConfig, ServeEvent, Server};

use super::serve_log::{BARE_SUMMARY_EVERY, ServeLog};
use crate::interrupt::stop_flag;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope serve                                   TCP+UDP on port 7373, loopback only
  latscope serve --bind ::                         every interface (IPv6 and IPv4)
  latscope serve -p 9000 --unix /tmp/latscope.sock
  latscope serve --split-response 128 --nagle      behave like nginx with tcp_nodelay off:
                                                   header and body in two writes, Nagle on
  latscope serve --max-tests 8 --max-duration 60s  a shared server with tight limits
  latscope serve --bind :: --auth-file key         only clients holding `key` (rr/stream/
                                                   connect/diagnose --auth-file key)

Clients state each test (sizes, socket options, duration); the server checks it against its limits and refuses what exceeds them with a message saying which limit. The behaviour flags (--split-response, --nagle, --think, --drop-every) override what clients ask for, to reproduce a misbehaving server. Ctrl-C stops the server and removes its unix socket.

Budget (a server you can leave running): threads ≤ --max-connections + 3 (joined data connections and server-sent UDP flows count as connections); test buffers ≤ --max-test-memory per test and --max-memory in all (refused beyond, given back after each test); each source address at most a quarter of the tests and connections (--per-source-tests/-connections) and, with --per-source-rate, that much bandwidth; server-sent UDP ≤ --max-udp-rate per test; a UDP response ≤ 10× its request; the whole handshake within --handshake-timeout; congestion controls only from net.ipv4.tcp_allowed_congestion_control.")]
pub struct ServeArgs {
    /// Address to listen on: loopback by default; `::` for every interface (IPv6 and IPv4),
    /// `0.0.0.0` for every IPv4 one. The start-up line lists the interfaces exposed.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// TCP and UDP port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Also serve stream tests on this unix socket path.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// Tests that may run at once.
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub max_tests: u32,
    /// Longest test a client may ask for.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = parse_duration)]
    pub max_duration: std::time::Duration,
    /// Largest request or response a client may ask for.
    #[arg(long, default_value = "4MiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_message: u64,
    /// Connections (including unfinished handshakes) before new ones are turned away.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_connections: u32,
    /// Time a client has to send its hello and test request.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub handshake_timeout: std::time::Duration,
    /// Test buffers all tests together may hold.
    #[arg(long, default_value = "512MiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_memory: u64,
    /// Test buffers one test may hold (streams × buffer length).
    #[arg(long, default_value = "64MiB", value_name = "SIZE", value_parser = parse_size)]
    pub max_test_memory: u64,
    /// Tests one source address may run at once (default: a quarter of --max-tests).
    #[arg(long, value_name = "N")]
    pub per_source_tests: Option<u32>,
    /// Connections one source address may hold (default: a quarter of --max-connections).
    #[arg(long, value_name = "N")]
    pub per_source_connections: Option<u32>,
    /// Bandwidth one source address may use, both ways, over all its tests (e.g. 100M = 100
    /// Mbit/s): TCP is slowed to it, UDP beyond it is dropped. Default: no limit.
    #[arg(long, value_name = "RATE", value_parser = parse_bitrate)]
    pub per_source_rate: Option<f64>,
    /// Fastest UDP the server sends for one test.
    #[arg(long, default_value = "1G", value_name = "RATE", value_parser = parse_bitrate)]
    pub max_udp_rate: f64,
    /// Respond in two writes: the first SIZE bytes, then the rest (forces it for every test).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub split_response: Option<u64>,
    /// Leave Nagle's algorithm on (TCP_NODELAY off) for every test.
    #[arg(long)]
    pub nagle: bool,
    /// Wait this long before every response (application think time), for every test.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub think: Option<std::time::Duration>,
    /// Handle at most N requests at once over all connections, like N single-threaded workers;
    /// the others wait (socket queueing under concurrency).
    #[arg(long, value_name = "N")]
    pub workers: Option<u32>,
    /// UDP: drop every Nth request (fault injection), for every test.
    #[arg(long, value_name = "N")]
    pub drop_every: Option<u32>,
    /// Require clients to prove they hold the key in FILE (mode 600; e.g.
    /// `head -c 32 /dev/urandom | base64 > FILE`): an HMAC-SHA256 challenge–response, the key
    /// never crosses the wire. Clients pass the same file with --auth-file.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Answer evidence requests (`diagnose --server-agent`) about these local TCP ports
    /// (`80,443`, or `all`): the requesting address's connections to the port, the port
    /// owner's run queue and cgroup, the kernel stack and the TCP counters, for at most 60 s
    /// per request. Needs --auth-file. Off by default.
    #[arg(long, value_name = "PORTS", value_parser = parse_ports)]
    pub evidence_ports: Option<Ports>,
    /// Log only start-up and errors, not every test.
    #[arg(long, short_alias = 'q')]
    pub quiet: bool,
}

impl ServeArgs {
    fn forced(&self) -> Option<ServerBehaviour> {
        if self.split_response.is_none()
            && !self.nagle
            && self.think.is_none()
            && self.drop_every.is_none()
        {
            return None;
        }
        let sockopts = SockOpts {
            nodelay: !self.nagle,
            ..SockOpts::default()
        };
        Some(behaviour(
            self.split_response,
            self.think,
            sockopts,
            self.drop_every,
        ))
    }
}

fn parse_ports(s: &str) -> Result<Ports, String> {
    Ports::parse(s)
}

/// The server behaviour the options name, whether `latscope serve` forces it or `rr` asks for
/// it with `--server-*`: responses split after `split` bytes, `think` before each response,
/// every `drop_every`-th UDP request dropped.
pub(crate) fn behaviour(
    split: Option<u64>,
    think: Option<Duration>,
    sockopts: SockOpts,
    drop_every: Option<u32>,
) -> ServerBehaviour {
    ServerBehaviour {
        write_mode: if split.is_some() {
            WriteMode::Split
        } else {
            WriteMode::Single
        },
        split_at: split.unwrap_or(0).min(u64::from(u32::MAX)) as u32,
        think_ns: think.map(|d| d.as_nanos() as u64).unwrap_or(0),
        sockopts,
        drop_every: drop_every.unwrap_or(0),
    }
}

pub fn run(a: &ServeArgs) -> anyhow::Result<u8> {
    if a.max_message == 0 || a.max_message > u64::from(u32::MAX) {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            "--max-message must be between 1 B and 4 GiB",
        ));
    }
    if a.workers == Some(0) {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            "--workers must be at least 1",
        ));
    }
    if a.per_source_rate.is_some_and(|r| r.is_nan() || r < 8.0) {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            "--per-source-rate must be at least 8 bit/s (1 byte/s)",
        ));
    }
    if a.split_response == Some(0) {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            "--split-response must be at least 1 byte",
        ));
    }
    if a.evidence_ports.is_some() && a.auth_file.is_none() {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            "--evidence-ports needs --auth-file: evidence is only given to clients holding the key",
        ));
    }
    let cfg = ServeConfig {
        bind: a.bind,
        port: a.port,
        unix: a.unix.clone(),
        limits: Limits {
            max_tests: a.max_tests,
            max_duration_ms: a.max_duration.as_millis() as u64,
            max_message_bytes: a.max_message as u32,
        },
        max_connections: a.max_connections,
        handshake_timeout: a.handshake_timeout,
        forced: a.forced(),
        workers: a.workers,
        budget: Budget {
            max_tests_per_source: a.per_source_tests,
            max_connections_per_source: a.per_source_connections,
            max_test_memory_bytes: a.max_test_memory,
            max_memory_bytes: a.max_memory,
            max_udp_rate_bps: a.max_udp_rate,
            max_source_rate_bytes: a.per_source_rate.map(|bps| bps / 8.0),
            ..Budget::default()
        },
        auth: a
            .auth_file
            .as_deref()
            .map(latscope_net::auth::AuthKey::from_file)
            .transpose()?,
        evidence: a.evidence_ports.clone().map(|p| {
            EvidenceServer::new(p) as Arc<dyn latscope_net::serve::evidence::EvidenceService>
        }),
        evidence_only: false,
    };
    let auth = cfg.auth.is_some();
    let evidence = a.evidence_ports.clone();
    let log = Arc::new(ServeLog::new(a.quiet));
    let events = log.clone();
    let stop = stop_flag();
    let server = Server::bind(cfg, stop.clone(), move |ev| {
        print_listening(&ev, auth, evidence.as_ref());
        for line in events.event(&ev) {
            eprintln!("{line}");
        }
    })
    .context("cannot start the server")?;
    summarise_bare_connects(log.clone(), stop.clone());
    let began = Instant::now();
    server.run()?;
    if let Some(s) = log.summary(began.elapsed().min(BARE_SUMMARY_EVERY)) {
        eprintln!("{s}");
    }
    if stop.load(Ordering::Relaxed) {
        eprintln!("{}", log.stopped());
    }
    Ok(crate::exit::OK)
}

/// The start-up lines (always printed, `-q` included): where the server listens and who can
/// reach it.
fn print_listening(ev: &ServeEvent, auth: bool, evidence: Option<&Ports>) {
    if let ServeEvent::Listening {
        tcp,
        udp,
        unix,
        exposed,
    } = ev
    {
        let unix = unix
            .as_ref()
            .map(|p| format!(", unix {}", p.display()))
            .unwrap_or_default();
        eprintln!("latscope serve: listening on tcp {tcp}, udp {udp}{unix} (Ctrl-C stops)");
        eprintln!("latscope serve: {}", exposure(exposed));
        if auth {
            eprintln!("latscope serve: clients must prove they hold the --auth-file key");
        }
        if let Some(p) = evidence {
            // The two-ended mode's client runs on another host, as a rule: a loopback-only
            // server answers none of its requests (connection refused), so say so now.
            let reach = if !exposed.is_empty() && exposed.iter().all(|(_, ip)| ip.is_loopback()) {
                " from this host only (listening on loopback): for clients on other hosts, \
                 --bind 0.0.0.0 or the address they reach"
            } else {
                ""
            };
            eprintln!(
                "latscope serve: answers evidence requests about {} (diagnose --server-agent){reach}",
                p.describe()
            );
        }
    }
}

/// Print bare-connect summaries every [`BARE_SUMMARY_EVERY`] until `stop`.
fn summarise_bare_connects(log: Arc<ServeLog>, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("serve-log".into())
        .spawn(move || {
            let mut last = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if last.elapsed() >= BARE_SUMMARY_EVERY {
                    if let Some(s) = log.summary(last.elapsed()) {
                        eprintln!("{s}");
                    }
                    last = Instant::now();
                }
            }
        });
}

/// Which interfaces clients can reach the server through, e.g. "exposed on lo 127.0.0.1 only
/// (loopback)" or "exposed on eth0 10.0.0.5, lo 127.0.0.1".
fn exposure(exposed: &[(String, IpAddr)]) -> String {
    if exposed.is_empty() {
        return "exposed on no configured interface address".into();
    }
    let list: Vec<String> = exposed.iter().map(|(n, ip)| format!("{n} {ip}")).collect();
    if exposed.iter().all(|(_, ip)| ip.is_loopback()) {
        format!("exposed on {} only (loopback)", list.join(", "))
    } else {
        format!(
            "exposed on {} — reachable from other hosts; --bind 127.0.0.1 keeps it local",
            list.join(", ")
        )
    }
}

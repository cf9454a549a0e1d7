//! `latscope demo`: start a healthy and a Nagle-stalled server on loopback, measure both, and
//! explain the difference from the measurements.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::connect::ConnectMode;
use latscope_core::model::demo::{DemoReport, DemoServer, DemoVerdict};
use latscope_core::model::rr::{RrSizeResult, ServerBehaviour, SockOpts, Transport, WriteMode};
use latscope_core::render::emit;
use latscope_core::sweep::classify_stall;
use latscope_core::units::parse_duration;
use latscope_net::connect::ConnectConfig;
use latscope_net::proto::Limits;
use latscope_net::rr::{Peer, RrConfig, StopAfter};
use latscope_net::serve::{ServeConfig, Server, ServerHandle};
use latscope_net::sock::Target;

use crate::exit;
use crate::output::{OutputArgs, stop_flag, unix_ms};
use crate::progress::Progress;

/// Response size and split point: a small "header" and a "body", like an HTTP response.
const RESPONSE: u32 = 1024;
const HEADER: u32 = 128;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope demo                 about 10 seconds; prints the comparison and the explanation
  latscope demo -d 5s --json

The demo starts two latscope servers on 127.0.0.1 (ephemeral ports): a healthy one that answers
each 64 B request with 1 KiB in one write, TCP_NODELAY on; and a slow one that writes the same
response as a 128 B header and then the body, with Nagle on — what nginx does with
`tcp_nodelay off` and `sendfile on`. Both are stopped when the demo ends.")]
pub struct DemoArgs {
    /// Measurement time per server.
    #[arg(short, long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn start_server(behaviour: ServerBehaviour) -> anyhow::Result<ServerHandle> {
    let cfg = ServeConfig {
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        unix: None,
        limits: Limits {
            max_tests: 64,
            max_duration_ms: 600_000,
            max_message_bytes: 1 << 20,
        },
        max_connections: 256,
        handshake_timeout: Duration::from_secs(5),
        forced: Some(behaviour),
        workers: None,
    };
    Ok(Server::bind(cfg, Arc::new(AtomicBool::new(false)), |_| {})?.spawn()?)
}

fn rr_config(addr: SocketAddr, duration: Duration, quickack: bool) -> RrConfig {
    RrConfig {
        target: Target::Inet {
            host: addr.ip().to_string(),
            port: addr.port(),
        },
        addr: Some(addr),
        transport: Transport::Tcp,
        sizes: vec![(64, RESPONSE)],
        connections: 1,
        stop_after: StopAfter::Duration(duration),
        warmup: Duration::from_millis(300),
        rate: None,
        client: SockOpts {
            nodelay: true,
            quickack,
            ..SockOpts::default()
        },
        server: ServerBehaviour::default(),
        timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        peer: Peer::Latscope,
    }
}

fn measure_rr(
    addr: SocketAddr,
    duration: Duration,
    quickack: bool,
    stop: &AtomicBool,
) -> anyhow::Result<RrSizeResult> {
    let meta = Meta::new("rr", env!("CARGO_PKG_VERSION"), unix_ms());
    let r = latscope_net::rr::run(
        &rr_config(addr, duration, quickack),
        meta,
        stop,
        &mut |_| {},
        false,
    )?;
    r.results
        .into_iter()
        .next()
        .ok_or_else(|| exit::coded(exit::SYSTEM, "no result"))
}

fn measure_path(addr: SocketAddr, stop: &AtomicBool) -> anyhow::Result<latscope_core::Summary> {
    let cfg = ConnectConfig {
        target: Target::Inet {
            host: addr.ip().to_string(),
            port: addr.port(),
        },
        addr,
        mode: ConnectMode::Connect,
        stop_after: StopAfter::Count(200),
        parallel: 1,
        timeout: Duration::from_secs(1),
        interval: Duration::from_millis(1),
        request_bytes: 1,
        response_bytes: 1,
        server: ServerBehaviour::default(),
    };
    let meta = Meta::new("connect", env!("CARGO_PKG_VERSION"), unix_ms());
    Ok(latscope_net::connect::run(&cfg, meta, stop)?.connect)
}

/// Derive the verdict from the figures.
pub fn verdict(healthy: &DemoServer, slow: &DemoServer, quick: &RrSizeResult) -> DemoVerdict {
    let (hp, sp) = (healthy.path_rtt.p50_ns, slow.path_rtt.p50_ns);
    let same_path = hp.max(sp) <= 2 * hp.min(sp) || hp.abs_diff(sp) < 100_000;
    let excess = slow
        .request
        .rtt
        .p50_ns
        .saturating_sub(healthy.request.rtt.p50_ns);
    let stalled =
        excess >= 1_000_000 && slow.request.rtt.p50_ns >= 10 * healthy.request.rtt.p50_ns.max(1);
    DemoVerdict {
        same_path,
        excess_ns: excess,
        stalled,
        likely_cause: classify_stall(excess),
        quickack_fixes_it: stalled
            && quick.rtt.count > 0
            && quick.rtt.p50_ns * 10 < slow.request.rtt.p50_ns,
    }
}

pub fn run(a: &DemoArgs) -> anyhow::Result<u8> {
    if a.duration < Duration::from_millis(100) {
        return Err(exit::coded(
            exit::USAGE,
            "--duration must be at least 100ms",
        ));
    }
    let stop = stop_flag();
    let healthy_b = ServerBehaviour {
        write_mode: WriteMode::Single,
        sockopts: SockOpts {
            nodelay: true,
            ..SockOpts::default()
        },
        ..ServerBehaviour::default()
    };
    let slow_b = ServerBehaviour {
        write_mode: WriteMode::Split,
        split_at: HEADER,
        sockopts: SockOpts {
            nodelay: false,
            ..SockOpts::default()
        },
        ..ServerBehaviour::default()
    };
    let healthy_srv = start_server(healthy_b.clone())?;
    let slow_srv = start_server(slow_b.clone())?;
    let progress = Progress::new(a.output.progress(), "demo");
    let mut servers = Vec::new();
    for (name, srv, b) in [
        ("healthy", &healthy_srv, healthy_b),
        ("slow", &slow_srv, slow_b),
    ] {
        progress.set(format!("{name} server: path RTT"));
        let path_rtt = measure_path(srv.tcp_addr, &stop)?;
        progress.set(format!(
            "{name} server: request/response for {}",
            latscope_core::units::format_duration(a.duration)
        ));
        let request = measure_rr(srv.tcp_addr, a.duration, false, &stop)?;
        servers.push(DemoServer {
            name: name.into(),
            address: srv.tcp_addr.to_string(),
            behaviour: b,
            path_rtt,
            request,
        });
    }
    progress.set("slow server with client TCP_QUICKACK".into());
    let quick = measure_rr(slow_srv.tcp_addr, a.duration, true, &stop)?;
    drop(progress);
    healthy_srv.stop();
    slow_srv.stop();
    let v = verdict(&servers[0], &servers[1], &quick);
    let report = DemoReport {
        meta: Meta::new("demo", env!("CARGO_PKG_VERSION"), unix_ms()),
        servers,
        slow_with_client_quickack: quick,
        verdict: v,
        interrupted: stop.load(std::sync::atomic::Ordering::Relaxed),
    };
    let mut out = std::io::stdout().lock();
    emit(&report, a.output.format(), &mut out)?;
    out.flush()?;
    Ok(if report.interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}

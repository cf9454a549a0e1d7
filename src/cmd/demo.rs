//! `latscope demo`: start a healthy and a Nagle-stalled server on loopback, diagnose both, and
//! tell the story from the two diagnoses.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::demo::{DemoReport, DemoServer, DemoVerdict};
use latscope_core::model::diagnose::{DiagnoseReport, StepName};
use latscope_core::model::rr::{ServerBehaviour, SockOpts, WriteMode};
use latscope_core::render::emit;
use latscope_core::units::parse_duration;
use latscope_net::proto::Limits;
use latscope_net::serve::{ServeConfig, Server, ServerHandle};
use latscope_net::sock::Target;

use crate::exit;
use crate::interrupt::stop_flag;
use crate::output::{OutputArgs, unix_ms};
use crate::progress::Progress;
use latscope_diagnose::collect;
use latscope_diagnose::plan::{DEFAULT_MAX_TIME, Plan};

/// Response size and split point: a small "header" and a "body", like an HTTP response.
const RESPONSE: u32 = 1024;
const HEADER: u32 = 128;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope demo                 about 15 seconds; prints the comparison and both diagnoses
  latscope demo -d 1s --json

The demo starts two latscope servers on 127.0.0.1 (ephemeral ports): a healthy one that answers each 64 B request with 1 KiB in one write, TCP_NODELAY on; and a slow one that writes the same response as a 128 B header and then the body, with Nagle on — what nginx does with `tcp_nodelay off` and `sendfile on`. It runs `latscope diagnose` against both (path RTT, one request, the quick-ack experiment, 8 concurrent requests, the server's socket options) and prints what they found. Both servers are stopped when the demo ends.")]
pub struct DemoArgs {
    /// Measurement time per diagnose step.
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
        ..ServeConfig::default()
    };
    Ok(Server::bind(cfg, Arc::new(AtomicBool::new(false)), |_| {})?.spawn()?)
}

fn p50(d: &DiagnoseReport, name: StepName) -> Option<u64> {
    d.distribution(name).map(|s| s.p50_ns)
}

/// Derive the demo's verdict from the two diagnoses.
pub fn verdict(healthy: &DiagnoseReport, slow: &DiagnoseReport) -> DemoVerdict {
    let (hp, sp) = (
        p50(healthy, StepName::Path).unwrap_or(0),
        p50(slow, StepName::Path).unwrap_or(0),
    );
    let same_path = hp.max(sp) <= 2 * hp.min(sp) || hp.abs_diff(sp) < 100_000;
    let (hr, sr) = (
        p50(healthy, StepName::OneRequest).unwrap_or(0),
        p50(slow, StepName::OneRequest).unwrap_or(0),
    );
    let excess = sr.saturating_sub(hr);
    DemoVerdict {
        same_path,
        excess_ns: excess,
        stalled: excess >= 1_000_000 && sr >= 10 * hr.max(1),
        slow_cause: slow.findings.first().map(|f| f.rule),
        side_to_fix: slow.findings.first().map(|f| f.side.name().to_string()),
        healthy_is_clean: healthy.findings.is_empty(),
    }
}

pub fn run(a: &DemoArgs) -> anyhow::Result<u8> {
    if a.duration < Duration::from_millis(200) {
        return Err(exit::coded(
            exit::USAGE,
            "--duration must be at least 200ms",
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
        let addr = srv.tcp_addr;
        let plan = Plan {
            target: Target::Inet {
                host: addr.ip().to_string(),
                port: addr.port(),
            },
            addr,
            duration: a.duration,
            concurrency: 8,
            request_bytes: 64,
            response_bytes: RESPONSE,
            no_load: true,
            url: None,
            auth: None,
            max_time: DEFAULT_MAX_TIME,
            family: latscope_probe::Family::Any,
            server_agent: None,
            tls: Default::default(),
        };
        let diagnosis = collect::run(&plan, &stop, &|s| {
            progress.set(format!("{name} server: {s}"))
        });
        servers.push(DemoServer {
            name: name.into(),
            address: addr.to_string(),
            behaviour: b,
            diagnosis,
        });
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    drop(progress);
    healthy_srv.stop();
    slow_srv.stop();
    // Ctrl-C before the slow server was measured leaves nothing to compare: the report says
    // what was measured, without a verdict.
    let v = match (servers.first(), servers.get(1)) {
        (Some(h), Some(s)) => Some(verdict(&h.diagnosis, &s.diagnosis)),
        _ => None,
    };
    let report = DemoReport {
        meta: Meta::new("demo", env!("CARGO_PKG_VERSION"), unix_ms()),
        servers,
        verdict: v,
        interrupted: stop.load(Ordering::Relaxed),
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

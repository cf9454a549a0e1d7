//! `latscope sockets`: the options and TCP state of running processes' sockets, and `--watch`
//! for setsockopt calls as they happen.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use latscope_core::model::Meta;
use latscope_core::model::sockets::{Severity, WatchSummary};
use latscope_core::render::{self, OutputFormat};
use latscope_core::units::parse_duration;
use latscope_inspect::{InspectError, Selection, Watcher};

use crate::exit;
use crate::output::{self, OutputArgs};

const AFTER_HELP: &str = "\
Examples:
  latscope sockets --pid 1234            options and tcp_info of every TCP/UDP socket of pid 1234
  latscope sockets --port 8080           every socket on port 8080, whichever process holds it
  latscope sockets --all --json          everything, as JSON (schema: latscope schema sockets)
  latscope sockets --watch               setsockopt calls system-wide as they happen (Ctrl-C stops)
  latscope sockets --watch --pid 1234 --duration 30s

Options are read from the socket itself (pidfd_getfd + getsockopt, Linux 5.6+), which needs CAP_SYS_PTRACE for other users' processes; without it, state, addresses and tcp_info (sock_diag) are still shown and the report says what is missing. --watch needs CAP_PERFMON or CAP_SYS_ADMIN.
Exit codes: 0 nothing found; 1 findings that add latency; 2 bad input; 3 no such process; 4 missing privileges; 5 system error; 130 interrupted.";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct SocketsArgs {
    /// Sockets held by this process.
    #[arg(long, conflicts_with_all = ["port", "all"])]
    pub pid: Option<u32>,
    /// Sockets with this local or remote port.
    #[arg(short, long, conflicts_with = "all")]
    pub port: Option<u16>,
    /// Every TCP/UDP socket of every readable process, in every network namespace they live in.
    #[arg(long)]
    pub all: bool,
    /// Report setsockopt calls on latency options as they happen (system-wide, or --pid only).
    #[arg(long, conflicts_with_all = ["port", "all"])]
    pub watch: bool,
    /// With --watch: stop after this long (e.g. 30s) instead of at Ctrl-C.
    #[arg(short, long, requires = "watch", value_name = "DURATION")]
    pub duration: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Above this many calls in one poll (≤ 100 ms), events go out without the read-back value.
const READ_BACK_MAX_BATCH: usize = 256;

fn meta() -> Meta {
    Meta::new("sockets", env!("CARGO_PKG_VERSION"), output::unix_ms())
}

pub fn run(args: &SocketsArgs) -> anyhow::Result<u8> {
    if args.watch {
        return watch(args);
    }
    let selection = match (args.pid, args.port, args.all) {
        (Some(p), _, _) => Selection::Pid(p),
        (_, Some(p), _) => Selection::Port(p),
        (_, _, true) => Selection::All,
        _ => {
            return Err(exit::coded(
                exit::USAGE,
                "say which sockets: --pid PID, --port PORT or --all (or --watch for setsockopt calls)",
            ));
        }
    };
    let report = latscope_inspect::scan(selection, meta())?;
    // Buffered: the pretty JSON of thousands of sockets is otherwise one write(2) per line.
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    render::emit(&report, args.output.format(), &mut stdout).context("writing the report")?;
    stdout.flush().context("writing the report")?;
    let warn = report
        .sockets
        .iter()
        .any(|r| r.findings.iter().any(|f| f.severity == Severity::Warn));
    Ok(if warn { exit::FINDINGS } else { exit::OK })
}

fn watch(args: &SocketsArgs) -> anyhow::Result<u8> {
    let limit = match &args.duration {
        Some(d) => Some(parse_duration(d).context("--duration")?),
        None => None,
    };
    if let Some(p) = args.pid
        && !std::path::Path::new(&format!("/proc/{p}")).exists()
    {
        return Err(InspectError::NoSuchProcess(p).into());
    }
    let meta = meta();
    let stop = crate::interrupt::stop_flag();
    let mut watcher = Watcher::open()?;
    let scope = args
        .pid
        .map(|p| format!("of pid {p}"))
        .unwrap_or_else(|| "system-wide".into());
    eprintln!(
        "latscope: watching setsockopt calls {scope} on TCP_NODELAY, TCP_CORK, TCP_QUICKACK, SO_SNDBUF/SO_RCVBUF, \
         TCP_NOTSENT_LOWAT, TCP_CONGESTION, keep-alive, busy-poll, ... ({})",
        if limit.is_some() {
            "until --duration ends"
        } else {
            "Ctrl-C to stop"
        }
    );
    let json = args.output.format() != OutputFormat::Human;
    let start = Instant::now();
    let mut events = 0u64;
    // Buffered, flushed once per batch: a write(2) per event would slow the drain in bursts.
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut interrupted = false;
    let mut decoder = latscope_inspect::watch::Decoder::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            break;
        }
        let wait = limit
            .map(|l| l.saturating_sub(start.elapsed()))
            .unwrap_or(Duration::from_millis(100));
        let wait_ms = wait.min(Duration::from_millis(100)).as_millis() as i32;
        let calls = watcher.poll(wait_ms);
        // In a burst, reading each option back from its socket would let the rings overflow.
        let read_back = calls.len() <= READ_BACK_MAX_BATCH;
        for call in calls {
            if args.pid.is_some_and(|p| p != call.pid) {
                continue;
            }
            let Some(ev) = decoder.event(&call, read_back) else {
                continue;
            };
            events += 1;
            let res = if json {
                serde_json::to_writer(&mut stdout, &ev)
                    .map_err(std::io::Error::from)
                    .and_then(|_| writeln!(stdout))
            } else {
                writeln!(stdout, "{}", ev.human_line())
            };
            // A closed pipe (`| head`) ends the watch quietly.
            if res.is_err() {
                return Ok(exit::OK);
            }
        }
        if stdout.flush().is_err() {
            return Ok(exit::OK);
        }
    }
    let summary = WatchSummary {
        meta,
        events,
        lost: watcher.lost(),
        interrupted,
    };
    drop(watcher);
    let _ = if json {
        render::emit(&summary, OutputFormat::JsonLines, &mut stdout).and_then(|_| stdout.flush())
    } else {
        eprint!("{}", render::human_text(&summary, render::page::width()));
        Ok(())
    };
    Ok(if interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}

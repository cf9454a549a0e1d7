//! The server's end of our connections, read from its own sockets while the requests flow
//! (local servers only): is Nagle on, is TCP_CORK set?

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latscope_core::model::diagnose::StepName;
use latscope_core::model::sockets::{SocketRow, SocketsReport};
use latscope_inspect::InspectError;
use latscope_inspect::scan::{Selection, scan};

use super::engines::meta;
use super::{NotRun, Observe, requests_target};
use crate::diagnose::collect::Context;
use crate::diagnose::evidence::{self, Evidence};

pub struct ServerSockets;

/// The scan thread and the server end it looks for.
pub struct Scanning {
    port: u16,
    netns: u64,
    thread: JoinHandle<Result<SocketsReport, InspectError>>,
}

/// The server's end has the service port as its local port (our client ends have it as the
/// remote one), whichever process holds it — even this one, as in `latscope demo` — in the
/// server's network namespace (`netns` 0 or a row of unknown namespace: any).
fn is_server_end(row: &SocketRow, port: u16, netns: u64) -> bool {
    row.state == "ESTAB"
        && row.local.ends_with(&format!(":{port}"))
        && (netns == 0 || row.netns == 0 || row.netns == netns)
}

/// Scan until a server end with readable options shows up, or until `deadline`.
fn scan_for_server(
    port: u16,
    netns: u64,
    deadline: Instant,
) -> Result<SocketsReport, InspectError> {
    let found = |r: &SocketsReport| {
        r.sockets
            .iter()
            .any(|row| is_server_end(row, port, netns) && row.options.is_some())
    };
    // Look once the requests are flowing; retry (bounded) if the connection is not up yet —
    // set-up steps before the requests take a variable time.
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let mut r = scan(Selection::Port(port), meta("sockets"))?;
        // A port scan leaves out latscope's own process; a server running inside it (as in
        // `latscope demo`) is found by scanning this process itself.
        if !found(&r) {
            let own = scan(Selection::Pid(std::process::id()), meta("sockets"))?;
            r.sockets.extend(own.sockets);
        }
        if found(&r) || Instant::now() >= deadline {
            return Ok(r);
        }
    }
}

impl Observe for ServerSockets {
    const NAME: StepName = StepName::ServerSockets;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::OneRequest;
    type Running = Scanning;
    type Output = evidence::ServerSockets;

    fn start(cx: &Context, ev: &Evidence) -> Result<Scanning, NotRun> {
        requests_target(ev)?;
        let Some(server) = cx.server else {
            return Err(NotRun::Skipped("the server is not on this host".into()));
        };
        let port = cx.plan.addr.port();
        let netns = server.netns_inode;
        let deadline = Instant::now() + cx.plan.duration + Duration::from_secs(3);
        let thread = std::thread::spawn(move || scan_for_server(port, netns, deadline));
        Ok(Scanning {
            port,
            netns,
            thread,
        })
    }

    fn finish(_cx: &Context, s: Scanning) -> Result<evidence::ServerSockets, NotRun> {
        let r = match s.thread.join() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(NotRun::Failed(e.to_string())),
            Err(_) => return Err(NotRun::Failed("the socket scan panicked".into())),
        };
        summarise(&r, s.port, s.netns)
    }

    fn detail(_cx: &Context, ss: &evidence::ServerSockets) -> String {
        format!(
            "{}: {}, TCP_NODELAY off on {}, TCP_CORK on {}{}",
            ss.process,
            latscope_core::units::count(ss.connections as u64, "connection"),
            ss.nagle_on,
            ss.corked,
            ss.snd_mss
                .map(|m| format!(", MSS {m} B"))
                .unwrap_or_default()
        )
    }

    fn store(ev: &mut Evidence, ss: evidence::ServerSockets) {
        ev.server_sockets = Some(ss);
    }
}

/// Count the options of the server's connections in a scan.
fn summarise(r: &SocketsReport, port: u16, netns: u64) -> Result<evidence::ServerSockets, NotRun> {
    let server: Vec<&SocketRow> = r
        .sockets
        .iter()
        .filter(|row| is_server_end(row, port, netns))
        .collect();
    let with_opts: Vec<_> = server
        .iter()
        .filter_map(|row| row.options.as_ref().map(|o| (*row, o)))
        .collect();
    if server.is_empty() {
        return Err(NotRun::Failed(
            "no server-side connection found on this host".into(),
        ));
    }
    let Some((first, _)) = with_opts.first() else {
        let why = server
            .first()
            .and_then(|r| r.options_error.clone())
            .unwrap_or_else(|| "options unreadable".into());
        return Err(NotRun::Skipped(format!(
            "found the server's connections but not their options: {why}"
        )));
    };
    let process = first
        .owners
        .first()
        .map(|o| format!("{}[{}]", o.comm, o.pid))
        .unwrap_or_else(|| "?".into());
    Ok(evidence::ServerSockets {
        process,
        connections: with_opts.len(),
        nagle_on: with_opts
            .iter()
            .filter(|(_, o)| o.nodelay == Some(false))
            .count(),
        corked: with_opts
            .iter()
            .filter(|(_, o)| o.cork == Some(true))
            .count(),
        snd_mss: server
            .iter()
            .filter_map(|row| row.tcp.as_ref().map(|t| t.snd_mss))
            .filter(|&m| m > 0)
            .max(),
    })
}

//! The client's end of a two-ended diagnosis (`crate::remote`): the `server agent` step asks the server's agent (`--server-agent`) to
//! observe the target's port while the other steps run, and merges what it saw into the same
//! evidence fields the server-side steps fill when the server is on this host — so the same
//! rules fire. Each merged step's line says it was measured at the server's end. An agent that
//! cannot be reached, or refuses, leaves the run client-only, and the verdict says so.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latscope_core::model::diagnose::{End, Step, StepName, StepStatus};
use latscope_core::units::format_ns;
use latscope_net::proto::{self, ClientHello, Reply, ServerHello, Start, TestKind};
use latscope_net::serve::evidence::{MAX_WINDOW, MIN_WINDOW};
use latscope_net::sock::{Conn, Target};

pub use latscope_core::model::evidence::{ClockOffset, ServerEnd};
use latscope_core::model::evidence::{EVIDENCE_VERSION, EvidenceRequest, Observed, ServerEvidence};

use super::counters;
use super::cpu;
use super::kernel_stack;
use super::server_sockets;
use super::step::{NotRun, Observe};
use crate::context::Context;
use crate::evidence::Evidence;
use crate::plan::Plan;

pub struct ServerAgent;

/// How long connecting to the agent may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the agent may take to answer each time (its greeting, its evidence once told the
/// steps are done).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the agent may take to start its observers: eBPF programs are loaded and relocated
/// against the kernel's BTF, a second or two on a busy host (much longer in a debug build).
/// Never more than a third of the run's budget.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The agent observing.
pub struct Asking {
    agent: String,
    conn: Conn,
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The observation window to ask for: the run's budget, within what an agent grants.
fn window(plan: &Plan) -> Duration {
    plan.max_time.clamp(MIN_WINDOW, MAX_WINDOW)
}

/// Connect, authenticate and ask; Ok once the agent's observers run.
fn ask(agent: &Target, plan: &Plan) -> Result<Asking, String> {
    let addr: SocketAddr = agent.resolve(plan.family).map_err(|e| e.to_string())?;
    let name = format!("the server's agent at {agent}");
    let mut conn = latscope_net::sock::connect(agent, Some(addr), CONNECT_TIMEOUT)
        .map_err(|e| format!("{name} could not be reached: {e}"))?;
    let io = |e: std::io::Error| format!("{name}: {e}");
    conn.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    conn.set_write_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    let hello: ServerHello =
        proto::read_greeting(&mut conn).map_err(|e| format!("{name} did not greet: {e}"))?;
    let auth = match (&hello.challenge, &plan.auth) {
        (Some(c), Some(k)) => Some(k.prove(c).map_err(|e| e.to_string())?),
        (Some(_), None) => {
            return Err(format!(
                "{name} requires authentication: pass --auth-file with its key"
            ));
        }
        (None, _) => None,
    };
    let mut out = Vec::with_capacity(512);
    proto::encode_greeting(
        &ClientHello {
            software: format!("latscope {}", env!("CARGO_PKG_VERSION")),
            auth,
        },
        &mut out,
    );
    proto::encode_frame(
        &Start {
            kind: TestKind::Evidence,
            request_bytes: 1,
            response_bytes: 1,
            duration_ms: window(plan).as_millis() as u64,
            server: Default::default(),
            stream: None,
            join: None,
        },
        &mut out,
    );
    proto::encode_frame(
        &EvidenceRequest {
            version: EVIDENCE_VERSION,
            port: plan.addr.port(),
        },
        &mut out,
    );
    conn.write_all(&out).map_err(io)?;
    let started_by = Instant::now() + START_TIMEOUT.min(plan.max_time / 3);
    let reply = proto::read_frame::<Reply>(&mut Deadline {
        conn: &mut conn,
        by: started_by,
    });
    conn.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    match reply {
        Ok(Reply::Accepted { .. }) => Ok(Asking {
            agent: format!("{agent} ({addr})"),
            conn,
        }),
        Ok(Reply::Refused { code, message, .. }) => Err(format!(
            "{name} refused ({}): {message}",
            serde_json::to_value(code)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        )),
        Err(e) => Err(format!("{name} did not answer the request: {e}")),
    }
}

/// Tell the agent the steps are done and read its evidence.
fn collect_answer(mut a: Asking) -> Result<ServerEnd, String> {
    let sent = unix_ns();
    // The agent may have ended the window already and sent its evidence: a failed write is
    // not an error until reading the answer fails too.
    let _ = a.conn.write_all(b"d");
    let read_by = Instant::now() + ANSWER_TIMEOUT;
    let evidence: ServerEvidence = proto::read_frame(&mut Deadline {
        conn: &mut a.conn,
        by: read_by,
    })
    .map_err(|e| {
        format!(
            "the server's agent at {} did not send its evidence: {e}",
            a.agent
        )
    })?;
    let answered = unix_ns();
    if evidence.version != EVIDENCE_VERSION {
        return Err(format!(
            "the server's agent at {} answered evidence version {}, this latscope reads {EVIDENCE_VERSION}",
            a.agent, evidence.version
        ));
    }
    let clock = evidence
        .done_unix_ns
        .map(|s| ClockOffset::estimate(sent, answered, s, evidence.answer_delay_ns.unwrap_or(0)));
    Ok(ServerEnd {
        agent: a.agent,
        evidence,
        clock,
    })
}

/// Reads bounded by one deadline (an agent trickling its answer cannot stretch it).
struct Deadline<'a> {
    conn: &'a mut Conn,
    by: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the answer's deadline passed",
            ));
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.read(buf)
    }
}

impl Observe for ServerAgent {
    const NAME: StepName = StepName::ServerAgent;
    const FROM: StepName = StepName::Handshakes;
    const UNTIL: StepName = StepName::ConcurrentRequests;
    type Running = Asking;
    type Output = ServerEnd;

    fn start(cx: &Context, _ev: &Evidence) -> Result<Asking, NotRun> {
        let Some(agent) = &cx.plan.server_agent else {
            return Err(NotRun::Skipped("no --server-agent".into()));
        };
        ask(agent, cx.plan).map_err(NotRun::Failed)
    }

    fn finish(_cx: &Context, a: Asking) -> Result<ServerEnd, NotRun> {
        collect_answer(a).map_err(NotRun::Failed)
    }

    fn detail(_cx: &Context, s: &ServerEnd) -> String {
        let e = &s.evidence;
        let clock = match s.clock {
            Some(c) => format!(
                "its clock reads {} {} this host's (± {}; not used: the evidence is durations and counts)",
                format_ns(c.server_ahead_ns.unsigned_abs() as f64),
                if c.server_ahead_ns >= 0 {
                    "ahead of"
                } else {
                    "behind"
                },
                format_ns(c.uncertainty_ns as f64)
            ),
            None => "its window ended before the steps did".into(),
        };
        format!(
            "{} observed port {} for {}, connections from {}; {clock}",
            s.agent,
            e.port,
            format_ns(e.observed_ns as f64),
            e.peer
        )
    }

    fn store(ev: &mut Evidence, s: ServerEnd) {
        merge(ev, &s.evidence);
        ev.server_end = Some(s);
    }
}

/// Fill the server-side fields the local steps could not (the server is not on this host):
/// the same fields, so the same rules read them.
fn merge(ev: &mut Evidence, e: &ServerEvidence) {
    if ev.server_sockets.is_none() {
        ev.server_sockets = e.sockets.value().cloned();
    }
    if ev.cpu.is_none() {
        ev.cpu = e.cpu.value().cloned();
    }
    if ev.stack.is_none() {
        ev.stack = e.kernel_stack.value().cloned();
    }
    if let (Some(c), Some(s)) = (ev.counters.as_mut(), e.counters.value())
        && c.server.is_none()
    {
        c.server = Some(*s);
        c.shared = false;
    }
}

/// One server-side step's line from its outcome at the agent.
fn server_step<T>(name: StepName, o: &Observed<T>, detail: impl FnOnce(&T) -> String) -> Step {
    let (status, detail) = match o {
        Observed::Ran(v) => (StepStatus::Ran, detail(v)),
        Observed::Skipped(w) => (StepStatus::Skipped, w.clone()),
        Observed::Failed(w) => (StepStatus::Failed, w.clone()),
    };
    Step {
        name,
        status,
        detail,
        measured_at: Some(End::Server),
        took_ms: None,
    }
}

/// The report's steps with both ends: without `--server-agent`, the agent's line goes (nothing
/// was asked); with it, every step says which end measured it, the agent's observations follow
/// its line, and a local server-side step that could not run here (the server is elsewhere)
/// gives way to the agent's.
pub fn merge_steps(cx: &Context, steps: &mut Vec<Step>, ev: &Evidence) {
    if cx.plan.server_agent.is_none() {
        steps.retain(|s| s.name != StepName::ServerAgent);
        return;
    }
    for s in steps.iter_mut() {
        s.measured_at.get_or_insert(End::Client);
    }
    let Some(end) = &ev.server_end else { return };
    let e = &end.evidence;
    let server = [
        server_step(StepName::ServerSockets, &e.sockets, |v| {
            <server_sockets::ServerSockets as Observe>::detail(cx, v)
        }),
        server_step(StepName::CpuScheduling, &e.cpu, |v| {
            <cpu::Cpu as Observe>::detail(cx, v)
        }),
        server_step(StepName::KernelStack, &e.kernel_stack, |v| {
            kernel_stack::describe(cx, v)
        }),
        server_step(StepName::TcpCounters, &e.counters, |v| {
            format!("server namespace: {}", counters::describe(v))
        }),
    ];
    steps.retain(|s| {
        !(s.status == StepStatus::Skipped
            && s.measured_at == Some(End::Client)
            && server.iter().any(|r| r.name == s.name))
    });
    let at = steps
        .iter()
        .position(|s| s.name == StepName::ServerAgent)
        .map_or(steps.len(), |i| i + 1);
    steps.splice(at..at, server);
}

/// The verdict's note when an agent was asked for and did not answer: the run is client-only.
pub fn verdict_note(plan: &Plan, steps: &[Step]) -> Option<String> {
    plan.server_agent.as_ref()?;
    let s = steps.iter().find(|s| s.name == StepName::ServerAgent)?;
    (s.status != StepStatus::Ran).then(|| format!(" [client-side evidence only: {}]", s.detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_evidence_fills_only_what_the_client_could_not_see() {
        use crate::evidence::{CpuEvidence, NsCounters, TcpCounters};
        let e = ServerEvidence {
            version: EVIDENCE_VERSION,
            port: 80,
            peer: "10.0.0.1".parse().unwrap(),
            observed_ns: 1,
            done_unix_ns: None,
            answer_delay_ns: None,
            sockets: Observed::Skipped("none".into()),
            cpu: Observed::Ran(CpuEvidence {
                process: "nginx[7]".into(),
                ..Default::default()
            }),
            kernel_stack: Observed::Failed("no BTF".into()),
            counters: Observed::Ran(NsCounters {
                retrans_segs: 9,
                ..Default::default()
            }),
        };
        let mut ev = Evidence {
            counters: Some(TcpCounters {
                client: NsCounters {
                    retrans_segs: 1,
                    ..Default::default()
                },
                server: None,
                shared: false,
            }),
            ..Default::default()
        };
        merge(&mut ev, &e);
        assert!(ev.server_sockets.is_none() && ev.stack.is_none());
        assert_eq!(
            ev.cpu.as_ref().map(|c| c.process.as_str()),
            Some("nginx[7]")
        );
        let c = ev.counters.unwrap();
        assert_eq!(
            (c.client.retrans_segs, c.server.map(|s| s.retrans_segs)),
            (1, Some(9))
        );
        // A local measurement (the server on this host too) is kept.
        let mut ev = Evidence {
            cpu: Some(CpuEvidence {
                process: "local[1]".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        merge(&mut ev, &e);
        assert_eq!(ev.cpu.unwrap().process, "local[1]");
    }

    fn step(name: StepName, status: StepStatus) -> Step {
        Step {
            name,
            status,
            detail: format!("{} {}", name.label(), status.name()),
            measured_at: None,
            took_ms: None,
        }
    }

    #[test]
    fn steps_say_which_end_and_the_agents_replace_what_could_not_run_here() {
        use crate::evidence::ServerSockets;
        let mut r = crate::plan::Request::new("127.0.0.1:80");
        r.server_agent = Some("127.0.0.1".into());
        let plan = Plan::new(&r).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let cx = Context {
            plan: &plan,
            stop: &stop,
            server: None,
        };
        let local = vec![
            step(StepName::ServerAgent, StepStatus::Ran),
            step(StepName::TcpCounters, StepStatus::Ran),
            step(StepName::ServerSockets, StepStatus::Skipped),
            step(StepName::OneRequest, StepStatus::Ran),
        ];
        let ev = Evidence {
            server_end: Some(ServerEnd {
                agent: "127.0.0.1:7373".into(),
                evidence: ServerEvidence {
                    version: EVIDENCE_VERSION,
                    port: 80,
                    peer: "127.0.0.1".parse().unwrap(),
                    observed_ns: 1,
                    done_unix_ns: None,
                    answer_delay_ns: None,
                    sockets: Observed::Ran(ServerSockets {
                        process: "nginx[7]".into(),
                        connections: 2,
                        nagle_on: 2,
                        ..Default::default()
                    }),
                    cpu: Observed::Skipped("no cgroup limit, no eBPF".into()),
                    kernel_stack: Observed::Failed("no BTF".into()),
                    counters: Observed::Ran(Default::default()),
                },
                clock: None,
            }),
            ..Default::default()
        };
        let mut steps = local.clone();
        merge_steps(&cx, &mut steps, &ev);
        let seen: Vec<(StepName, StepStatus, Option<End>)> = steps
            .iter()
            .map(|s| (s.name, s.status, s.measured_at))
            .collect();
        assert_eq!(
            seen,
            vec![
                (StepName::ServerAgent, StepStatus::Ran, Some(End::Client)),
                (StepName::ServerSockets, StepStatus::Ran, Some(End::Server)),
                (
                    StepName::CpuScheduling,
                    StepStatus::Skipped,
                    Some(End::Server)
                ),
                (StepName::KernelStack, StepStatus::Failed, Some(End::Server)),
                (StepName::TcpCounters, StepStatus::Ran, Some(End::Server)),
                (StepName::TcpCounters, StepStatus::Ran, Some(End::Client)),
                (StepName::OneRequest, StepStatus::Ran, Some(End::Client)),
            ]
        );
        assert!(
            steps[1].detail.contains("TCP_NODELAY off on 2"),
            "{}",
            steps[1].detail
        );
        assert_eq!(verdict_note(&plan, &steps), None);
        // The agent failed: the run is client-only, and the verdict says so with the reason.
        let mut failed = local.clone();
        failed[0] = step(StepName::ServerAgent, StepStatus::Failed);
        merge_steps(&cx, &mut failed, &Evidence::default());
        assert_eq!(failed.len(), local.len(), "nothing merged");
        assert_eq!(
            verdict_note(&plan, &failed).as_deref(),
            Some(" [client-side evidence only: server agent failed]")
        );
        // Not asked for: the agent's line goes, and no step is marked.
        let plan = Plan::new(&crate::plan::Request::new("127.0.0.1:80")).unwrap();
        let cx = Context {
            plan: &plan,
            stop: &stop,
            server: None,
        };
        let mut steps = local;
        merge_steps(&cx, &mut steps, &ev);
        assert!(
            steps
                .iter()
                .all(|s| s.name != StepName::ServerAgent && s.measured_at.is_none())
        );
        assert_eq!(verdict_note(&plan, &steps), None);
    }
}

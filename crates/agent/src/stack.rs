//! The host's own view, kernel side: `latscope stack`'s eBPF histograms in the agent (`[stack]`).
//!
//! One thread attaches the probes the configuration names (crates/ebpf: netstacklat's hook points
//! on fentry/fexit where the kernel allows, else the tracepoint / cgroup_skb fallbacks), reads
//! their maps once a second and hands the reading to the
//! [`latscope_ebpf::prometheus::StackCollector`] registered with the agent's other families, so a
//! scrape shows `latscope_stack_<probe>_seconds{hook,interface}`: one Prometheus histogram per
//! hook point with log2 buckets in seconds (`le` = 2^k ns, 256 ns … 68.7 s), the shape of
//! netstacklat under ebpf_exporter. Beside them `latscope_stack_probes{state}` counts the probes
//! attached and unavailable.
//!
//! When eBPF cannot start (no CAP_BPF/CAP_PERFMON, no BTF, …) the agent logs one line naming
//! what is missing, exports `latscope_stack_unavailable{reason,missing} 1` and carries on with
//! everything else. Stopping the thread (SIGTERM, or a reload that changes `[stack]`) drops the
//! session, which detaches every program.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latscope_core::model::stack::{Filters, GroupBy, Probe, ProbeHistogram, ProbeStamps};
use latscope_core::units::count;
use latscope_ebpf::prometheus::Snapshot;
use latscope_ebpf::{Session, StackConfig, StackError};

use crate::config::Stack;
use crate::{Shared, log};

/// How often the maps are read (a scrape sees figures at most this old).
const READ_EVERY: Duration = Duration::from_secs(1);

/// The thread running the `[stack]` probes.
pub(crate) struct StackWorker {
    /// The settings it runs with (a reload restarts it only when they change).
    pub cfg: Stack,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl StackWorker {
    /// Start the thread; the probes are attached on it (a session stays on its thread).
    pub fn start(cfg: Stack, shared: Arc<Shared>) -> std::io::Result<StackWorker> {
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (cfg.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("latscope-stack".into())
            .spawn(move || run(&c, &shared, &s))?;
        Ok(StackWorker { cfg, stop, handle })
    }

    /// Detach the probes and wait for the thread.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}

fn stack_config(cfg: &Stack) -> StackConfig {
    StackConfig {
        probes: cfg.probes.clone(),
        direction: cfg.direction,
        empty_programs: false,
        mode: cfg.hooks,
        filters: Filters::default(),
        group_by: cfg.group_by,
        try_all: false,
        sample_every: cfg.sample,
    }
}

fn run(cfg: &Stack, shared: &Shared, stop: &AtomicBool) {
    let m = &shared.metrics;
    let session = match Session::start(&stack_config(cfg)) {
        Ok(s) => s,
        Err(e) => {
            let requested = stack_config(cfg).wanted().len();
            unavailable(shared, &e, requested, cap_eff());
            return;
        }
    };
    let attached = session.attached_probes();
    let refused = session.unavailable_probes();
    set_probes(shared, attached, refused.len());
    let hooks: Vec<String> = attached_hooks(&session)
        .iter()
        .map(|(p, h)| format!("{p} on {h}"))
        .collect();
    let mut note = format!(
        "[stack]: {} attached ({})",
        count(attached as u64, "probe"),
        hooks.join(", ")
    );
    if !refused.is_empty() {
        note.push_str(&format!("; unavailable here: {}", refused.join(", ")));
    }
    log(&note);
    let mut read_failed = false;
    while !stop.load(Ordering::Relaxed) {
        match snapshot(&session, cfg.group_by) {
            Ok(s) => {
                m.stack.update(s);
                read_failed = false;
            }
            Err(e) if !read_failed => {
                log(&format!("[stack]: {e}; keeping the last reading"));
                read_failed = true;
            }
            Err(_) => {}
        }
        let until = Instant::now() + READ_EVERY;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    m.stack.update(Snapshot::default());
    m.stack_probes.clear();
    drop(session);
}

fn set_probes(shared: &Shared, attached: usize, unavailable: usize) {
    let m = &shared.metrics;
    m.stack_probes.clear();
    for (state, n) in [("attached", attached), ("unavailable", unavailable)] {
        m.stack_probes
            .get_or_create(&vec![("state".into(), state.into())])
            .set(n as i64);
    }
}

/// eBPF could not start: one log line saying why and what is missing, and the metrics.
fn unavailable(shared: &Shared, e: &StackError, requested: usize, cap_eff: Option<u64>) {
    let (reason, missing) = classify(e, cap_eff);
    set_probes(shared, 0, requested);
    shared
        .metrics
        .stack_unavailable
        .get_or_create(&vec![
            ("reason".into(), reason.into()),
            ("missing".into(), missing.clone()),
        ])
        .set(1);
    let what = match reason {
        "privilege" if missing != "none" => format!("eBPF refused: this process lacks {missing}"),
        "privilege" => "eBPF refused although the process holds CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (a seccomp profile, an LSM or kernel lockdown?)".to_string(),
        _ => e.to_string(),
    };
    log(&format!(
        "[stack]: {what}; the kernel stack histograms are off, everything else carries on ({e})"
    ));
}

/// (reason label, missing label) of a start-up failure.
fn classify(e: &StackError, cap_eff: Option<u64>) -> (&'static str, String) {
    match e {
        StackError::Privilege(_) => {
            let missing = cap_eff.map(missing_capabilities).unwrap_or_default();
            let missing = if missing.is_empty() {
                "none".to_string()
            } else {
                missing.join(",")
            };
            ("privilege", missing)
        }
        StackError::NoBtf => ("no_btf", "none".into()),
        StackError::Load(_) => ("load", "none".into()),
        StackError::NothingAttached(_) => ("nothing_attached", "none".into()),
        StackError::Read(_) => ("read", "none".into()),
        StackError::System(_) => ("system", "none".into()),
    }
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The capabilities the probes need that an effective set lacks: CAP_BPF (load programs and
/// maps), CAP_PERFMON (tracing programs) — CAP_SYS_ADMIN stands in for both, as before Linux
/// 5.8 — and CAP_NET_ADMIN (attaching the cgroup_skb fallbacks).
pub fn missing_capabilities(cap_eff: u64) -> Vec<&'static str> {
    let has = |bit: u32| cap_eff & (1u64 << bit) != 0;
    let mut out = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        out.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        out.push("CAP_PERFMON");
    }
    if !has(CAP_NET_ADMIN) {
        out.push("CAP_NET_ADMIN");
    }
    out
}

/// This process's effective capabilities (`CapEff` of /proc/self/status).
fn cap_eff() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

fn attached_hooks(session: &Session) -> Vec<(Probe, String)> {
    session
        .status()
        .iter()
        .filter_map(|s| s.hook.clone().map(|h| (s.probe, h)))
        .collect()
}

/// One reading of the session's maps, labelled as `latscope stack --prometheus` labels it.
fn snapshot(session: &Session, group_by: GroupBy) -> Result<Snapshot, StackError> {
    let attached = attached_hooks(session);
    let hook_of = |p| {
        attached
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, h)| h.clone())
            .unwrap_or_default()
    };
    let histograms = session
        .read_histograms()?
        .into_iter()
        .map(|r| {
            let group = match group_by {
                GroupBy::None => "all".to_string(),
                // No netns filter: the agent's own namespace names the interfaces it can.
                GroupBy::Interface => latscope_ebpf::sys::ifname(r.group as u32)
                    .unwrap_or_else(|| format!("if{}", r.group)),
                GroupBy::Cgroup => format!("cgroup{}", r.group),
            };
            ProbeHistogram::new(r.probe, &hook_of(r.probe), group, r.hist)
        })
        .collect();
    let stats = session.read_stamp_stats()?;
    let stamps = attached
        .iter()
        .map(|(p, _)| ProbeStamps {
            probe: *p,
            stats: stats.get(p).copied().unwrap_or_default(),
        })
        .collect();
    Ok(Snapshot {
        attached,
        histograms,
        stamps,
        group_by,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn missing_capabilities_name_what_to_grant() {
        let all = u64::MAX >> 23; // CapEff of root on a 5.x/6.x kernel: bits 0..40
        assert!(missing_capabilities(all).is_empty());
        assert_eq!(
            missing_capabilities(0),
            ["CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN"]
        );
        let no_bpf = all & !(1 << CAP_BPF) & !(1 << CAP_SYS_ADMIN);
        assert_eq!(missing_capabilities(no_bpf), ["CAP_BPF"]);
        // CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON (kernels before 5.8).
        let old_style = (1 << CAP_SYS_ADMIN) | (1 << CAP_NET_ADMIN);
        assert!(missing_capabilities(old_style).is_empty());
        let net_only = 1 << CAP_NET_ADMIN;
        assert_eq!(missing_capabilities(net_only), ["CAP_BPF", "CAP_PERFMON"]);
    }

    #[test]
    fn start_up_failures_are_classified() {
        let e = StackError::Privilege("Operation not permitted".into());
        assert_eq!(
            classify(&e, Some(1 << CAP_NET_ADMIN)),
            ("privilege", "CAP_BPF,CAP_PERFMON".to_string())
        );
        assert_eq!(
            classify(&e, Some(u64::MAX)),
            ("privilege", "none".to_string())
        );
        assert_eq!(classify(&StackError::NoBtf, None).0, "no_btf");
    }
}

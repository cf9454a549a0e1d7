//! CPU scheduling of a server on this host (any network namespace) while the requests run: how
//! long its threads wait in the run queue (eBPF on the scheduler tracepoints, as bcc's runqlat)
//! and whether its cgroup's CPU limit throttles it (`cpu.stat` nr_throttled / throttled time,
//! cgroup v1 `cpu.cfs_quota_us` or v2 `cpu.max`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latscope_core::model::diagnose::StepName;
use latscope_core::units::{format_ns, of};
use latscope_ebpf::runq::RunQueue;

use super::step::{NotRun, Observe, requests_target};
use crate::context::Context;
use crate::evidence::{CpuEvidence, Evidence, RunQueueWaits, Throttling};

pub struct Cpu;

/// What runs meanwhile: the probes and the cgroup counters at the start.
pub struct Watching {
    process: String,
    before: Vec<(Cgroup, CpuStat)>,
    /// CPUs the processes may run on (the union of their affinities).
    cpus: Option<u32>,
    runq: Result<RunQueue, String>,
    client_runq: Option<RunQueue>,
}

/// A cgroup with a `cpu.stat` that counts throttling.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cgroup {
    /// Its path in the hierarchy, as /proc/PID/cgroup shows it.
    name: String,
    dir: PathBuf,
    v2: bool,
}

/// The throttling counters of `cpu.stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuStat {
    periods: u64,
    throttled: u64,
    throttled_ns: u64,
}

impl Observe for Cpu {
    const NAME: StepName = StepName::CpuScheduling;
    const FROM: StepName = StepName::OneRequest;
    const UNTIL: StepName = StepName::ConcurrentRequests;
    type Running = Watching;
    type Output = CpuEvidence;

    fn start(cx: &Context, ev: &Evidence) -> Result<Watching, NotRun> {
        requests_target(ev)?;
        let Some(server) = cx.server else {
            return Err(NotRun::Skipped("the server is not on this host".into()));
        };
        watch(cx.plan.addr.port(), server.netns_inode, true)
    }

    /// Two run-queue programs (the server's threads and latscope's own): a few tenths of a
    /// second of CPU to load, like the kernel-stack probes' smallest set.
    fn start_cpu(cx: &Context) -> Duration {
        match cx.server {
            Some(_) => Duration::from_millis(250),
            None => Duration::ZERO,
        }
    }

    fn finish(_cx: &Context, w: Watching) -> Result<CpuEvidence, NotRun> {
        finish_watch(w)
    }

    fn detail(_cx: &Context, c: &CpuEvidence) -> String {
        let rq = match &c.run_queue {
            Some(r) => format!(
                "{} run-queue waits, p50 {}, p99 {}, {} in all",
                r.waits,
                format_ns(r.p50_ns),
                format_ns(r.p99_ns),
                format_ns(r.total_ns as f64)
            ),
            None => "run-queue waits not measured".into(),
        };
        let own = c
            .client_run_queue
            .as_ref()
            .map(|r| {
                format!(
                    " (latscope's own threads meanwhile: {} waits, p99 {})",
                    r.waits,
                    format_ns(r.p99_ns)
                )
            })
            .unwrap_or_default();
        let th = match &c.throttling {
            Some(t) => format!(
                "cgroup {} ({}): throttled in {}, {} held back summed over its CPUs{}",
                t.cgroup,
                t.limit.as_deref().unwrap_or("no limit"),
                of(t.throttled, t.periods, "period"),
                format_ns(t.throttled_ns as f64),
                t.held_per_period()
                    .map(|h| format!(" ({} a throttled period)", format_ns(h.held_ns as f64)))
                    .unwrap_or_default()
            ),
            None => "no CPU limit on its cgroups".into(),
        };
        format!("{}: {rq}{own}; {th}", c.process)
    }

    fn store(ev: &mut Evidence, c: CpuEvidence) {
        ev.cpu = Some(c);
    }
}

/// Start watching the processes listening on `port` in namespace `netns` (0: any): their
/// cgroups' throttling counters and their run-queue waits; with `client_too`, latscope's own
/// threads' waits as well (when the server is not this process).
pub(crate) fn watch(port: u16, netns: u64, client_too: bool) -> Result<Watching, NotRun> {
    let (process, pids) = listeners(port, netns)?;
    let before = cgroup_stats(&pids);
    let cpus = cpus_allowed(&pids);
    let runq = RunQueue::start(&pids).map_err(|e| e.to_string());
    // latscope's own threads too, unless the server is this process (`latscope demo`):
    // waits both show are the host's contention, not the server's.
    let own = std::process::id();
    let client_runq = if client_too && runq.is_ok() && !pids.contains(&own) {
        RunQueue::start(&[own]).ok()
    } else {
        None
    };
    Ok(Watching {
        process,
        before,
        cpus,
        runq,
        client_runq,
    })
}

/// Stop watching: the counters' differences and the run-queue histograms.
pub(crate) fn finish_watch(w: Watching) -> Result<CpuEvidence, NotRun> {
    let throttling = throttling_since(&w.before, w.cpus);
    let run_queue = match &w.runq {
        Ok(rq) => {
            let h = rq.histogram().map_err(|e| NotRun::Failed(e.to_string()))?;
            RunQueueWaits::of(&h)
        }
        Err(_) => None,
    };
    let client_run_queue = w
        .client_runq
        .as_ref()
        .and_then(|rq| rq.histogram().ok())
        .and_then(|h| RunQueueWaits::of(&h));
    if throttling.is_none()
        && let Err(why) = &w.runq
    {
        return Err(NotRun::Skipped(format!(
            "{}: no cgroup CPU limit, and run-queue probes unavailable ({why})",
            w.process
        )));
    }
    Ok(CpuEvidence {
        process: w.process,
        throttling,
        run_queue,
        client_run_queue,
    })
}

/// The cgroups whose CPU limit applies to `pids` (theirs and their ancestors', v1 and v2) that
/// count throttling, with their counters now.
pub(crate) fn cgroup_stats(pids: &[u32]) -> Vec<(Cgroup, CpuStat)> {
    let mut cgroups: Vec<Cgroup> = pids.iter().flat_map(|&p| cgroups_of(p)).collect();
    cgroups.sort();
    cgroups.dedup();
    cgroups
        .into_iter()
        .filter_map(|c| read_stat(&c.dir).map(|s| (c, s)))
        .collect()
}

/// Why the cgroup file system holding `pid`'s CPU limit cannot be read here, if it cannot:
/// its `/proc/PID/cgroup` is unreadable, or no mount of the hierarchies it names is reachable
/// (our mount namespace has none, as under `ip netns exec`, and no other process's root that
/// we may enter has one).
pub(crate) fn cgroups_unreadable(pid: u32) -> Option<String> {
    if let Err(e) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        return Some(format!("/proc/{pid}/cgroup: {e}"));
    }
    let (v2, v1) = mounts();
    let reachable = [v2, v1]
        .into_iter()
        .flatten()
        .any(|p| std::fs::read_dir(p).is_ok());
    (!reachable).then(|| {
        "no cgroup file system is mounted where this process can reach it (`ip netns exec` mounts a /sys of its own, and no other process's root with one could be entered)".into()
    })
}

/// The throttling of the cgroup (the processes' own or an ancestor) that held them back the
/// longest since `before`, when one has a limit or was throttled.
pub(crate) fn throttling_since(
    before: &[(Cgroup, CpuStat)],
    cpus: Option<u32>,
) -> Option<Throttling> {
    before
        .iter()
        .filter_map(|(c, b)| {
            let a = read_stat(&c.dir)?;
            let quota = quota(&c.dir, c.v2);
            Some(Throttling {
                cgroup: c.name.clone(),
                limit: quota.map(|(q, p)| {
                    format!(
                        "{} of CPU per {}",
                        format_ns(q as f64 * 1000.0),
                        format_ns(p as f64 * 1000.0)
                    )
                }),
                periods: a.periods.saturating_sub(b.periods),
                throttled: a.throttled.saturating_sub(b.throttled),
                throttled_ns: a.throttled_ns.saturating_sub(b.throttled_ns),
                quota_us: quota.map(|(q, _)| q),
                period_us: quota.map(|(_, p)| p),
                cpus,
            })
        })
        // A cgroup without a limit never throttles: only limited ones are worth a line.
        .filter(|t| t.limit.is_some() || t.throttled > 0)
        .max_by_key(|t| (t.throttled_ns, t.periods))
}

/// The processes listening on `port` in namespace `netns` (0: any), and the first one's name.
pub(crate) fn listeners(port: u16, netns: u64) -> Result<(String, Vec<u32>), NotRun> {
    let r = super::server_sockets::port_and_own(port).map_err(|e| NotRun::Failed(e.to_string()))?;
    let suffix = format!(":{port}");
    let mut names = BTreeMap::new();
    for row in r.sockets.iter().filter(|row| {
        row.state == "LISTEN"
            && row.local.ends_with(&suffix)
            && (netns == 0 || row.netns == 0 || row.netns == netns)
    }) {
        for o in &row.owners {
            names.entry(o.pid).or_insert_with(|| o.comm.clone());
        }
    }
    let Some((pid, comm)) = names.iter().next() else {
        return Err(NotRun::Skipped(format!(
            "no process listening on port {port} could be read on this host"
        )));
    };
    let process = format!("{comm}[{pid}]");
    Ok((process, names.into_keys().collect()))
}

/// Mount points of the cgroup v2 hierarchy and of the v1 hierarchy holding the cpu controller,
/// as paths we can open. Ours first; where our mount namespace has no cgroup file system (as
/// under `ip netns exec`, which mounts a fresh /sys), those of another process's mount
/// namespace, through its /proc/PID/root: init's, else the first process whose namespace has
/// them and whose root we may enter.
fn mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let found = |(v2, v1): &(Option<PathBuf>, Option<PathBuf>)| {
        [v2, v1]
            .into_iter()
            .flatten()
            .any(|p| std::fs::read_dir(p).is_ok())
    };
    let own = cgroup_mounts(
        &std::fs::read_to_string("/proc/self/mounts").unwrap_or_default(),
        Path::new("/"),
    );
    if found(&own) {
        return own;
    }
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
    for pid in std::iter::once(1).chain(pids).take(4096) {
        let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/mounts")) else {
            continue;
        };
        let m = cgroup_mounts(&table, Path::new(&format!("/proc/{pid}/root")));
        if found(&m) {
            return m;
        }
    }
    own
}

/// The (v2, v1 cpu) cgroup mount points in a mounts table, under `root`.
fn cgroup_mounts(table: &str, root: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1) = (None, None);
    let at = |p: &str| root.join(p.strip_prefix('/').unwrap_or(p));
    for l in table.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        if f[2] == "cgroup2" && v2.is_none() {
            v2 = Some(at(f[1]));
        }
        if f[2] == "cgroup" && f[3].split(',').any(|o| o == "cpu") {
            v1 = Some(at(f[1]));
        }
    }
    (v2, v1)
}

/// The cgroups whose CPU limit applies to `pid`: its own and every ancestor's, in the v1 cpu
/// hierarchy and in v2 (a limit anywhere up the tree throttles it).
fn cgroups_of(pid: u32) -> Vec<Cgroup> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return vec![];
    };
    let (v2_root, v1_root) = mounts();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(hier), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (root, v2) = if hier == "0" && ctrls.is_empty() {
            (v2_root.clone(), true)
        } else if ctrls.split(',').any(|c| c == "cpu") {
            (v1_root.clone(), false)
        } else {
            continue;
        };
        let Some(root) = root else { continue };
        let mut p = Path::new(path);
        loop {
            let rel = p.strip_prefix("/").unwrap_or(p);
            out.push(Cgroup {
                name: p.display().to_string(),
                dir: root.join(rel),
                v2,
            });
            match p.parent() {
                Some(parent) => p = parent,
                None => break,
            }
        }
    }
    out
}

/// The throttling counters of a cgroup's `cpu.stat`; `None` when it has none (no cpu
/// controller there).
fn read_stat(dir: &Path) -> Option<CpuStat> {
    parse_stat(&std::fs::read_to_string(dir.join("cpu.stat")).ok()?)
}

/// v1: `nr_periods`, `nr_throttled`, `throttled_time` (ns); v2: `throttled_usec`.
fn parse_stat(text: &str) -> Option<CpuStat> {
    let mut s = CpuStat::default();
    let mut seen = false;
    for l in text.lines() {
        let mut kv = l.split_whitespace();
        let (Some(k), Some(v)) = (kv.next(), kv.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "nr_periods" => s.periods = v,
            "nr_throttled" => {
                s.throttled = v;
                seen = true;
            }
            "throttled_time" => s.throttled_ns = v,
            "throttled_usec" => s.throttled_ns = v.saturating_mul(1000),
            _ => {}
        }
    }
    seen.then_some(s)
}

/// The tightest CPU limit on this process's cgroups (its own and its ancestors', v1 and v2) as
/// (quota, period) in µs; `None` when none is limited or none can be read.
pub(crate) fn own_cpu_limit() -> Option<(u64, u64)> {
    cgroups_of(std::process::id())
        .iter()
        .filter_map(|c| quota(&c.dir, c.v2))
        .min_by(|a, b| (a.0 as f64 / a.1 as f64).total_cmp(&(b.0 as f64 / b.1 as f64)))
}

/// The cgroup's CPU quota and period, µs; `None` when unlimited ("max", v1's -1).
fn quota(dir: &Path, v2: bool) -> Option<(u64, u64)> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let (quota, period) = if v2 {
        let t = read("cpu.max")?;
        let mut f = t.split_whitespace();
        (
            f.next()?.parse::<i64>().ok()?,
            f.next()?.parse::<i64>().ok()?,
        )
    } else {
        (
            read("cpu.cfs_quota_us")?.trim().parse::<i64>().ok()?,
            read("cpu.cfs_period_us")?.trim().parse::<i64>().ok()?,
        )
    };
    Some((u64::try_from(quota).ok()?, u64::try_from(period).ok()?)).filter(|&(q, p)| q > 0 && p > 0)
}

/// How many CPUs `pids` may run on together: the union of their `Cpus_allowed_list`
/// (sched_setaffinity and the cpuset both narrow it), `None` when none could be read.
pub(crate) fn cpus_allowed(pids: &[u32]) -> Option<u32> {
    let mut cpus = std::collections::BTreeSet::new();
    for pid in pids {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        if let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            cpus.extend(cpu_list(list.trim())?);
        }
    }
    u32::try_from(cpus.len()).ok().filter(|&n| n > 0)
}

/// The CPUs of a kernel CPU list ("0-3,8,10-11"); `None` when it is not one.
fn cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
        // A host has at most a few thousand CPUs: a wider range is not a CPU list.
        if b < a || b - a > 65_536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_of_both_versions() {
        let v1 = "nr_periods 120\nnr_throttled 30\nthrottled_time 2700000000\nnr_bursts 0\n";
        assert_eq!(
            parse_stat(v1),
            Some(CpuStat {
                periods: 120,
                throttled: 30,
                throttled_ns: 2_700_000_000
            })
        );
        let v2 = "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 10\nnr_throttled 4\nthrottled_usec 350000\n";
        assert_eq!(parse_stat(v2).map(|s| s.throttled_ns), Some(350_000_000));
        // A v2 cgroup without the cpu controller counts usage only: no throttling figures.
        assert_eq!(parse_stat("usage_usec 5\nuser_usec 3\n"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
        assert!(cpus_allowed(&[std::process::id()]).is_some_and(|n| n >= 1));
    }

    #[test]
    fn cgroup_mounts_of_a_hybrid_host() {
        let table = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
            cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
            cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n\
            cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let (v2, v1) = cgroup_mounts(table, Path::new("/proc/1/root"));
        assert_eq!(v1, Some(PathBuf::from("/proc/1/root/sys/fs/cgroup/cpu")));
        assert_eq!(
            v2,
            Some(PathBuf::from("/proc/1/root/sys/fs/cgroup/unified"))
        );
        let (v2, v1) = cgroup_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", Path::new("/"));
        assert_eq!((v2, v1), (Some(PathBuf::from("/sys/fs/cgroup")), None));
    }
}

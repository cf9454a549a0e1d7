//! `server_tail_latency` (and the run-queue tail of `run_queue_delay`): the tail of idle single
//! requests. When one request in a hundred takes many times the median and neither the path,
//! nor TCP's timers (retransmissions, delayed ACKs), nor the client's own CPU explain it, the
//! server does — its threads waiting for a CPU when the run-queue probes show it, or else
//! something in the server (scheduling, garbage collection, locks) the finding names with what
//! was ruled out.
//!
//! A shared, busy machine makes tails too: the thresholds ask for enough samples and a tail
//! large both in absolute terms and against the median, and waits latscope's own threads show
//! as well are the host's, not the server's.

use latscope_core::model::diagnose::{Diagnosis, RuleId, Side};
use latscope_core::units::format_ns;

use crate::evidence::{CpuEvidence, Evidence, RunQueueWaits};
use crate::rules;
use crate::rules::tail::*;

/// A server's threads waiting this long at the p99 can make a request tail.
const RUNQ_TAIL_NS: f64 = 1_000_000.0;
/// When the server's threads wait for a CPU much longer than latscope's own on the same host
/// ([`server_stands_out`]), a tail this large (p99 − p50) is enough: the host's own noise is
/// ruled out by the comparison, not by the size of the tail.
const RUNQ_TAIL_FLOOR_NS: u64 = 1_000_000;
/// The server's run-queue p99 against latscope's own: at least this many times as long.
/// Healthy servers measured in the lab stayed within 1.4× (nginx, Python, latscope serve;
/// 0.5–1.40× over 22 runs at load averages 1–33), hogged ones reached 3.8–188×.
const RUNQ_STANDS_OUT: f64 = 2.0;
/// Fewest waits, on each side, for a run-queue p99 to stand on (ten waits above it).
const RUNQ_MIN_WAITS: u64 = 1_000;

/// The single requests' tail when it is heavy and the path and TCP's timers do not explain it;
/// with the lines saying what was ruled out.
pub fn unexplained_tail(e: &Evidence) -> Option<(Tail, Vec<String>)> {
    unexplained_tail_over(e, TAIL_FLOOR_NS)
}

/// The line that states a tail: its quantile, or its stalls and their share of the time.
fn tail_line(e: &Evidence, t: &Tail) -> String {
    if t.quantile == "stalls" {
        let share = stall_share(t) * 100.0;
        return format!(
            "one request at a time, idle: p50 {}, p99.9 {}; yet {} stalled, {} at the median ({:.0}× the median) — about {share:.0}% of the requests' time",
            format_ns(t.p50_ns as f64),
            e.single
                .as_ref()
                .map_or("-".into(), |s| format_ns(s.p999_ns as f64)),
            latscope_core::units::of(t.in_tail, t.samples, "request"),
            format_ns(t.tail_ns as f64),
            t.tail_ns as f64 / t.p50_ns.max(1) as f64,
        );
    }
    format!(
        "one request at a time, idle: p50 {}, {} {} ({:.0}× the median) over {} requests",
        format_ns(t.p50_ns as f64),
        t.quantile,
        format_ns(t.tail_ns as f64),
        t.tail_ns as f64 / t.p50_ns.max(1) as f64,
        t.samples
    )
}

/// What the tail is, in a title's words.
fn tail_title(t: &Tail) -> String {
    match t.quantile {
        "p99" => "one idle request in a hundred takes many times the median".into(),
        "p99.9" => "one idle request in a thousand takes many times the median".into(),
        _ => format!(
            "now and then an idle request stalls ({} at the median, {}), and the stalls take {:.0}% of the requests' time",
            format_ns(t.tail_ns as f64),
            latscope_core::units::of(t.in_tail, t.samples, "request"),
            stall_share(t) * 100.0
        ),
    }
}

/// The stalls' time beyond the median, as a share of all the single requests' time.
fn stall_share(t: &Tail) -> f64 {
    t.stalled_permille as f64 / 1_000.0
}

/// [`unexplained_tail`] for a tail at least `floor` above the median.
fn unexplained_tail_over(e: &Evidence, floor: u64) -> Option<(Tail, Vec<String>)> {
    let t = heaviest(e, floor)?;
    let mut checked = vec![tail_line(e, &t)];
    checked.extend(path_stays_short(e, &t)?);
    // TCP's timers: lost segments wait for a retransmission; delayed ACKs hold data back.
    if rules::data_loss_material(e) {
        return None;
    }
    match &e.capture {
        Some(c) => {
            let timer_stalls = c.rto_stalls.map_or(0, |s| s.count)
                + c.unseen_loss.map_or(0, |s| s.count)
                + c.syn_resends.map_or(0, |s| s.count)
                + c.delayed_ack.map_or(0, |s| s.count)
                + c.nagle.map_or(0, |n| n.total.count);
            if timer_stalls * 100 >= c.transactions.max(1) {
                return None;
            }
            checked.push(format!(
                "no TCP timer on the wire: {} retransmissions and {timer_stalls} timer stalls in {} transactions",
                c.retransmissions, c.transactions
            ));
        }
        None => checked.push("no capture: TCP timers on the wire not checked".into()),
    }
    if let Some(c) = &e.counters {
        checked.push(format!(
            "kernel counters: {} data segments retransmitted by the client{}",
            c.client.data_retrans(),
            match (&c.server, c.shared) {
                (Some(s), false) => format!(", {} by the server", s.data_retrans()),
                _ => String::new(),
            }
        ));
    }
    Some((t, checked))
}

/// The path's own tail (connect round trips) of the same order as `t` explains it: `None` then;
/// else the line saying the path stays short (nothing when the path was not measured).
pub(crate) fn path_stays_short(e: &Evidence, t: &Tail) -> Option<Option<String>> {
    let Some(p) = &e.path else {
        return Some(None);
    };
    (p.p99_ns.saturating_mul(2) < t.tail_ns).then(|| {
        Some(format!(
            "the path's round trip stays short: p99 {}",
            format_ns(p.p99_ns as f64)
        ))
    })
}

/// The tail's requests (at least the median plus half the tail's extra) set against the host's
/// noise of the same time slices: how many there were, and how many came in a slice where the
/// sleeping thread woke at least that half late (the host alone could have made them). `None`
/// when no slice holds a tail request (the engine gave no slices).
fn tail_in_noisy_slices(e: &Evidence, t: &Tail) -> Option<(u64, u64)> {
    let half = t.extra_ns() / 2;
    let at_least = t.p50_ns + half;
    let (mut all, mut noisy) = (0, 0);
    for s in &e.slices {
        let n = s.at_least(at_least);
        all += n;
        if s.host_late_ns.is_some_and(|l| l >= half) {
            noisy += n;
        }
    }
    (all > 0).then_some((all, noisy))
}

/// What the sleeping thread says of the tail: `Err` when the host made it, else the lines saying
/// it did not (empty: not measured). Two checks, either of which blames the host: most of the
/// tail's requests came in time slices where the sleeper woke as late (a burst of the host's
/// load, which the whole step's quantile dilutes), or over the whole step it woke as late at the
/// tail's quantile (the sleeper is one thread: the host's delays also hit the request threads at
/// moments it slept through — a healthy `latscope serve` on the loaded lab host had 70 requests
/// over 3.2 ms, 11 of them in late slices, while the sleeper's p99.9 was 3.9 ms).
fn sleeper(e: &Evidence, t: &Tail) -> Result<Vec<String>, ()> {
    let half = t.extra_ns() / 2;
    let mut lines = Vec::new();
    if let Some((all, noisy)) = tail_in_noisy_slices(e, t) {
        if noisy * 2 >= all {
            return Err(());
        }
        lines.push(format!(
            "of the {all} requests in the tail (≥ {}), {noisy} came while this host woke a sleeping thread {} late or more (the same {} slices)",
            format_ns((t.p50_ns + half) as f64),
            format_ns(half as f64),
            format_ns(crate::evidence::SLICE.as_nanos() as f64)
        ));
    }
    if let Some(n) = &e.host_noise {
        let late = if t.quantile == "p99" {
            n.p99_ns
        } else {
            n.p999_ns
        };
        if late >= half {
            return Err(());
        }
        lines.push(format!(
            "this host woke a sleeping thread at most {} late at the {} over the step",
            format_ns(late as f64),
            t.quantile
        ));
    }
    Ok(lines)
}

/// Whether the client's host makes such a tail by itself: the sleeping thread says so
/// ([`sleeper`]), or latscope's own threads waited as long for a CPU. Returns the line saying it
/// did not, or `None` when it did.
pub(crate) fn host_quiet(e: &Evidence, t: &Tail) -> Option<String> {
    let half = t.extra_ns() / 2;
    let mut lines = sleeper(e, t).ok()?;
    if let Some(own) = e.cpu.as_ref().and_then(|c| c.client_run_queue.as_ref()) {
        if own.p99_ns >= half as f64 {
            return None;
        }
        lines.push(format!(
            "latscope's own threads waited little for a CPU (p99 {})",
            format_ns(own.p99_ns)
        ));
    }
    if lines.is_empty() {
        lines.push("the client host's own scheduling noise was not measured".into());
    }
    Some(lines.join("; "))
}

/// The server's threads waited milliseconds for a CPU: what makes a tail the client's own
/// waits do not explain (checked by [`unexplained_tail`]).
fn waits_make_tails(rq: &RunQueueWaits) -> bool {
    rq.p99_ns >= RUNQ_TAIL_NS
}

/// The server's threads waited for a CPU far longer than latscope's own threads on the same
/// host meanwhile (p99 against p99, each over enough waits): its CPUs in particular are taken
/// (a CPU hog beside it, pinned threads), not the whole host. The ratio with latscope's p99.
fn server_stands_out(c: &CpuEvidence) -> Option<f64> {
    let (rq, own) = (c.run_queue.as_ref()?, c.client_run_queue.as_ref()?);
    if rq.waits < RUNQ_MIN_WAITS || own.waits < RUNQ_MIN_WAITS || !waits_make_tails(rq) {
        return None;
    }
    let ratio = rq.p99_ns / own.p99_ns.max(1.0);
    (ratio >= RUNQ_STANDS_OUT).then_some(ratio)
}

/// Run-queue delay in the tail: a heavy tail the path and TCP's timers leave unexplained, while
/// the server's threads waited milliseconds for a CPU at their p99 (a server on a merely busy
/// host waits a few hundred µs there). The client's own waits do not veto it: on a small host
/// the hog that delays the server delays the client too (a veto when latscope's threads waited as
/// long and the sleeper was late was tried and silenced the lab's cpu-hog on a loaded host). The median wake-up may not wait at all
/// (a woken thread often preempts a CPU hog at once), so the median rule stays silent.
pub fn run_queue_tail(e: &Evidence) -> Option<Diagnosis> {
    let c = e.cpu.as_ref()?;
    let rq = c.run_queue.as_ref()?;
    if c.throttling.as_ref().is_some_and(|t| t.throttled > 0) {
        return None;
    }
    if !waits_make_tails(rq) {
        return None;
    }
    // A tail of a few milliseconds is the host's noise as often as the server's, unless the
    // server's waits stand out against latscope's own: then it is enough, provided the waits
    // are of the tail's size.
    let stands_out = server_stands_out(c);
    let floor = if stands_out.is_some() {
        RUNQ_TAIL_FLOOR_NS
    } else {
        TAIL_FLOOR_NS
    };
    let (t, mut evidence) = unexplained_tail_over(e, floor)?;
    if t.extra_ns() < TAIL_FLOOR_NS && rq.p99_ns * 2.0 < t.extra_ns() as f64 {
        return None;
    }
    evidence.push(format!(
        "scheduler tracepoints (eBPF), {}: {} waits for a CPU, p50 {}, p99 {}, {} in all{}",
        c.process,
        rq.waits,
        format_ns(rq.p50_ns),
        format_ns(rq.p99_ns),
        format_ns(rq.total_ns as f64),
        c.client_run_queue
            .as_ref()
            .map(|o| format!(" — latscope's own threads: p99 {}", format_ns(o.p99_ns)))
            .unwrap_or_default()
    ));
    if let Some(ratio) = stands_out {
        evidence.push(format!(
            "the server's threads waited {ratio:.1}× as long as latscope's own on the same host (p99): its CPUs in particular are taken, not the whole host"
        ));
    }
    Some(Diagnosis {
        rule: RuleId::RunQueueDelay,
        title: "the slowest requests wait for the server's threads to get a CPU (run-queue delay in the tail)".into(),
        explains_ns: t.extra_ns(),
        confidence: 0.75,
        side: Side::Server,
        evidence,
        fix: "find what else runs on the server's CPUs (`top`, `perf sched`, `runqlat`): give the server dedicated CPUs (cpusets, taskset) or more of them, lower the priority of batch work (`nice`, cgroup cpu.weight)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Server-side tail latency: a heavy tail on idle single requests that the path, TCP's timers
/// and the client host's own scheduling noise do not explain, and that no CPU evidence of the
/// server names (it was not measured, or shows nothing): the server's own.
pub fn server_tail_latency(e: &Evidence) -> Option<Diagnosis> {
    if rules::cpu_throttling(e).is_some() || run_queue_tail(e).is_some() {
        return None;
    }
    let (t, mut evidence) = unexplained_tail(e)?;
    evidence.push(host_quiet(e, &t)?);
    evidence.push(match e.cpu.as_ref() {
        Some(c) => match &c.run_queue {
            Some(rq) => format!(
                "the server's threads ({}) did not wait long for a CPU: run-queue p99 {}",
                c.process,
                format_ns(rq.p99_ns)
            ),
            None => format!("{}: run-queue waits not measured", c.process),
        },
        None => {
            "the server's CPU scheduling was not measured (not on this host, or no probes)".into()
        }
    });
    Some(Diagnosis {
        rule: RuleId::ServerTailLatency,
        title: format!("server-side tail latency: {}", tail_title(&t)),
        explains_ns: t.extra_ns(),
        confidence: if e.capture.is_some() { 0.7 } else { 0.55 },
        side: Side::Server,
        evidence,
        fix: "look at what the server does now and then: garbage collection, lock contention, log flushes or fsync, CPU contention on its host (`runqlat`, `perf sched`), periodic jobs".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Whether a finding is about the tail (its `explains_ns` is p99 − p50, not every request's).
pub fn is_tail(d: &Diagnosis, single_p50_ns: Option<u64>) -> bool {
    match d.rule {
        RuleId::ServerTailLatency => true,
        RuleId::RunQueueDelay => single_p50_ns.is_some_and(|p| d.explains_ns > p),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{CaptureEvidence, TimeSlice};
    use latscope_core::Summary;

    fn single(count: u64, p50: u64, p99: u64) -> Summary {
        Summary {
            count,
            p50_ns: p50,
            p99_ns: p99,
            p999_ns: p99,
            ..Summary::default()
        }
    }

    fn rq(p99_ns: f64) -> RunQueueWaits {
        RunQueueWaits {
            waits: 40_000,
            total_ns: 6_000_000_000,
            p50_ns: 49_000.0,
            p99_ns,
        }
    }

    fn hogged() -> Evidence {
        Evidence {
            path: Some(single(100, 15_000, 40_000)),
            single: Some(single(20_000, 20_000, 13_500_000)),
            capture: Some(CaptureEvidence {
                frames: 60_000,
                transactions: 20_000,
                ..CaptureEvidence::default()
            }),
            cpu: Some(CpuEvidence {
                process: "latscope[1]".into(),
                run_queue: Some(rq(2_300_000.0)),
                client_run_queue: Some(rq(300_000.0)),
                ..CpuEvidence::default()
            }),
            ..Evidence::default()
        }
    }

    #[test]
    fn a_cpu_hogged_server_is_named_by_its_run_queue() {
        let e = hogged();
        let f = run_queue_tail(&e).expect("fires");
        assert_eq!(f.rule, RuleId::RunQueueDelay);
        assert!(is_tail(&f, Some(20_000)));
        assert_eq!(
            server_tail_latency(&e),
            None,
            "one finding, the specific one"
        );
        let all = rules::apply(&e);
        assert_eq!(all.first().map(|f| f.rule), Some(RuleId::RunQueueDelay));
    }

    /// The lab's cpu-hog on a loaded host: a tail of 1.7 ms (under the 5 ms floor of a heavy
    /// tail) while the server's threads waited 2.59 ms for a CPU at their p99 and latscope's own
    /// 0.68 ms. Waits that stand out against latscope's own are the server's CPUs' contention,
    /// and then a tail of a millisecond is enough; the same tail on a host where everyone waits
    /// as long (healthy servers on the loaded lab host: 0.5–1.4×), or waits too short for the
    /// tail, name nothing.
    #[test]
    fn waits_that_stand_out_against_latscopes_own_need_no_heavy_tail() {
        let mut e = hogged();
        e.single = Some(single(9_000, 23_000, 1_710_000));
        let c = e.cpu.as_mut().unwrap();
        c.run_queue = Some(rq(2_590_000.0));
        c.client_run_queue = Some(rq(682_000.0));
        let f = run_queue_tail(&e).expect("fires");
        assert_eq!(f.explains_ns, 1_687_000);
        assert!(
            f.evidence
                .iter()
                .any(|l| l.contains("3.8× as long as latscope's own")),
            "{:?}",
            f.evidence
        );
        assert_eq!(
            rules::apply(&e).first().map(|f| f.rule),
            Some(RuleId::RunQueueDelay)
        );
        // Everyone on the host waits as long: the host's noise.
        e.cpu.as_mut().unwrap().client_run_queue = Some(rq(2_300_000.0));
        assert_eq!(run_queue_tail(&e), None);
        assert!(rules::apply(&e).is_empty());
        // Latscope's own waits not measured: no comparison, the heavy-tail floor holds.
        e.cpu.as_mut().unwrap().client_run_queue = None;
        assert_eq!(run_queue_tail(&e), None);
        // Too few waits for a p99.
        let c = e.cpu.as_mut().unwrap();
        c.client_run_queue = Some(rq(682_000.0));
        c.run_queue.as_mut().unwrap().waits = 300;
        assert_eq!(run_queue_tail(&e), None);
        // Waits far shorter than the tail do not explain it.
        let c = e.cpu.as_mut().unwrap();
        c.run_queue = Some(rq(1_200_000.0));
        c.client_run_queue = Some(rq(400_000.0));
        e.single = Some(single(9_000, 23_000, 4_023_000));
        assert_eq!(run_queue_tail(&e), None);
        // A tail that is no tail (the p99 under 25 medians).
        e.single = Some(single(9_000, 300_000, 1_900_000));
        e.cpu.as_mut().unwrap().run_queue = Some(rq(2_590_000.0));
        assert_eq!(run_queue_tail(&e), None);
    }

    #[test]
    fn without_cpu_evidence_the_tail_is_the_servers() {
        let mut e = hogged();
        e.cpu = None;
        let f = server_tail_latency(&e).expect("fires");
        assert_eq!(f.rule, RuleId::ServerTailLatency);
        assert!(f.evidence.iter().any(|l| l.contains("not measured")));
    }

    #[test]
    fn a_busy_host_is_not_the_server() {
        // The server's threads hardly wait, and the client's host wakes a sleeper as late as the
        // tail: the whole machine is busy, not the server.
        let mut e = hogged();
        e.cpu.as_mut().unwrap().run_queue = Some(rq(250_000.0));
        e.host_noise = Some(single(2_000, 60_000, 9_000_000));
        assert_eq!(run_queue_tail(&e), None);
        assert_eq!(server_tail_latency(&e), None);
        assert!(rules::apply(&e).is_empty());
        // Latscope's own threads waiting as long say the same.
        e.host_noise = None;
        e.cpu.as_mut().unwrap().client_run_queue = Some(rq(8_000_000.0));
        assert_eq!(server_tail_latency(&e), None);
        // Short server waits on a quiet host: the tail is the server's, not its run queue's.
        let mut e = hogged();
        e.cpu.as_mut().unwrap().run_queue = Some(rq(200_000.0));
        e.host_noise = Some(single(2_000, 60_000, 200_000));
        assert_eq!(run_queue_tail(&e), None);
        assert!(server_tail_latency(&e).is_some());
    }

    /// `n` slices of 2,000 requests, each with `tail` requests of 13 ms and the host waking a
    /// sleeper `late` ns late.
    fn slices(n: usize, tail: u64, late: u64) -> Vec<TimeSlice> {
        let slow = if tail > 0 {
            vec![(13_000_000, tail)]
        } else {
            vec![]
        };
        vec![
            TimeSlice {
                requests: 2_000,
                slow,
                host_late_ns: Some(late),
            };
            n
        ]
    }

    /// Item 4: the host-noise veto looks at the moments the tail's requests were slow, not at
    /// the whole step. A burst of the host's load that both delays the requests and wakes a
    /// sleeper late is the host's, even when over the whole step the sleeper was mostly on time.
    #[test]
    fn the_host_is_judged_on_the_same_time_slices_as_the_tail() {
        let mut e = hogged();
        e.cpu.as_mut().unwrap().run_queue = Some(rq(200_000.0));
        e.host_noise = Some(single(2_000, 60_000, 300_000));
        // The whole tail in one slice where the host woke a sleeper 9 ms late.
        e.slices = slices(9, 0, 300_000);
        e.slices.extend(slices(1, 250, 9_000_000));
        assert_eq!(server_tail_latency(&e), None, "the host's burst");
        // The tail spread over slices where the host was on time: the server's.
        e.slices = slices(10, 25, 300_000);
        e.slices.extend(slices(10, 0, 12_000_000));
        let f = server_tail_latency(&e).expect("fires");
        assert!(
            f.evidence
                .iter()
                .any(|l| l.contains("of the 250 requests in the tail") && l.contains(", 0 came")),
            "{:?}",
            f.evidence
        );
        // A sleeper late as long as the tail at its quantile over the step still blames the
        // host: it is one thread, and the host's delays hit the others at other moments.
        e.host_noise = Some(single(2_000, 60_000, 9_000_000));
        assert_eq!(server_tail_latency(&e), None);
        e.host_noise = Some(single(2_000, 60_000, 300_000));
        // Half of the tail's requests in noisy slices is enough to doubt it.
        e.slices = slices(5, 25, 300_000);
        e.slices.extend(slices(5, 25, 8_000_000));
        assert_eq!(server_tail_latency(&e), None);
    }

    /// A busy host with a kernel fault: packets wait ~98 µs before TCP on every request, and the
    /// whole machine's load makes a 6.4 ms tail at the p99 (the server's threads wait 1.09 ms at
    /// their p99, a sleeper wakes 5.18 ms late). The tail costs the average request 64 µs, the
    /// kernel 98 µs: the kernel ranks first.
    #[test]
    fn a_tail_ranks_by_what_it_costs_the_average_request() {
        let mut e = hogged();
        e.single = Some(single(1_748, 144_000, 6_560_000));
        let c = e.cpu.as_mut().unwrap();
        c.run_queue = Some(rq(1_090_000.0));
        c.client_run_queue = Some(rq(100_000.0));
        e.stack = Some(crate::evidence::StackEvidence {
            packets: 21_680,
            ip_start_ns: Some(0.5),
            enqueued_ns: Some(98_300.0),
            ..Default::default()
        });
        let all = rules::apply(&e);
        let order: Vec<RuleId> = all.iter().map(|f| f.rule).collect();
        assert_eq!(order, vec![RuleId::PreTcpKernel, RuleId::RunQueueDelay]);
        assert_eq!(rules::cost_per_request(&e, &all[1]), 6_416_000 / 100);
        // Latscope's threads waiting as long and a late sleeper do not take it away: the hog
        // that delays the server delays the client too.
        e.cpu.as_mut().unwrap().client_run_queue = Some(rq(3_330_000.0));
        e.slices = slices(10, 2, 5_180_000);
        assert!(run_queue_tail(&e).is_some());
    }

    #[test]
    fn a_rare_pause_shows_in_the_p999_of_many_requests() {
        let mut e = hogged();
        e.single = Some(Summary {
            count: 8_000,
            p50_ns: 21_800,
            p99_ns: 2_800_000,
            p999_ns: 18_700_000,
            ..Summary::default()
        });
        let t = heavy_tail(e.single.as_ref().unwrap()).expect("heavy");
        assert_eq!(t.quantile, "p99.9");
        assert!(run_queue_delay_fires(&e));
        // The same p99.9 over too few requests is one or two samples.
        e.single.as_mut().unwrap().count = 2_000;
        assert_eq!(heavy_tail(e.single.as_ref().unwrap()), None);
    }

    /// The lab's cpu-starved server seen from the client alone (CI, 1 Dec): a CPU quota that a
    /// request at a time exhausts once a period. 12,621 requests, p50 15.9 µs, p99.9 3.6 ms (no
    /// heavy quantile), mean 73.7 µs: a dozen requests waited 60–90 ms, three quarters of the
    /// step's time.
    fn starved() -> Evidence {
        let mut slices = vec![
            TimeSlice {
                requests: 1_260,
                slow: vec![],
                host_late_ns: Some(90_000),
            };
            10
        ];
        for (i, v) in [62, 70, 71, 74, 88, 91, 69, 70, 72, 73, 1, 2]
            .into_iter()
            .enumerate()
        {
            slices[i % 10].slow.push((v * 1_000_000, 1));
        }
        Evidence {
            path: Some(single(50, 11_263, 31_177)),
            single: Some(Summary {
                count: 12_621,
                mean_ns: 73_728.0,
                p50_ns: 15_903,
                p90_ns: 17_711,
                p99_ns: 143_743,
                p999_ns: 3_575_807,
                p9999_ns: 70_254_591,
                max_ns: 91_000_000,
                ..Summary::default()
            }),
            slices,
            ..Evidence::default()
        }
    }

    #[test]
    fn rare_long_stalls_that_take_the_time_are_a_tail() {
        let e = starved();
        assert_eq!(
            heavy_tail(e.single.as_ref().unwrap()),
            None,
            "no quantile shows it"
        );
        let t = stalls_over(&e, TAIL_FLOOR_NS).expect("stalls");
        assert_eq!(
            (t.in_tail, t.tail_ns, t.quantile),
            (10, 71_000_000, "stalls")
        );
        let f = server_tail_latency(&e).expect("fires");
        assert_eq!(f.side, Side::Server);
        assert_eq!(f.explains_ns, 71_000_000 - 15_903);
        assert!(
            f.evidence[0].contains("10 of 12621 requests stalled")
                && f.evidence[0].contains("% of the requests' time"),
            "{:?}",
            f.evidence
        );
        // The requests queued behind the stalls make a p99.9 of a few milliseconds that this
        // host's own noise matches: the stalls, which cost the average request ten times as
        // much, are the tail.
        let mut both = starved();
        both.single.as_mut().unwrap().p999_ns = 6_356_991;
        both.host_noise = Some(single(1_000, 50_000, 6_180_000));
        let q = heavy_tail(both.single.as_ref().unwrap()).expect("a heavy p99.9");
        assert_eq!(q.quantile, "p99.9");
        assert_eq!(tail_of(&both).map(|t| t.quantile), Some("stalls"));
        assert_eq!(
            server_tail_latency(&both).map(|f| f.explains_ns),
            Some(f.explains_ns)
        );
        // A request at a random moment meets a stall with the chance of the time they take
        // (795 per mille here) and then waits half of one.
        assert_eq!(t.stalled_permille, 795);
        assert_eq!(
            rules::cost_per_request(&e, &f),
            (71_000_000 - 15_903) * 795 / 2_000
        );
        // The same stalls in a run ten times as long are a twentieth of its time: noise.
        let mut long = starved();
        long.single.as_mut().unwrap().mean_ns = 15_903.0 * 10.0 * 5.0;
        assert_eq!(stalls_over(&long, TAIL_FLOOR_NS), None);
        // Four stalls are too few, whatever they take.
        let mut few = starved();
        for sl in &mut few.slices {
            sl.slow.retain(|&(v, _)| v < 70_000_000);
        }
        assert_eq!(stalls_over(&few, TAIL_FLOOR_NS), None);
        // The host woke its sleeping thread as late in the same slices: the host made them.
        let mut noisy = starved();
        for sl in &mut noisy.slices {
            sl.host_late_ns = Some(60_000_000);
        }
        assert_eq!(server_tail_latency(&noisy), None);
    }

    /// Run 2 of three of the lab's cpu-starved from the client alone: stalls of 9 ms idle (17% of
    /// the time), and a probe under 64 connections waiting 89 ms, five times its fair share. The
    /// stalls are the cause, ranked first; a load that filled the path (the network's
    /// bufferbloat) or a tail at a quantile explains no such probe.
    #[test]
    fn a_stalling_server_explains_its_probe_waiting_under_load() {
        let mut e = starved();
        for sl in &mut e.slices {
            for v in &mut sl.slow {
                v.0 /= 8;
            }
        }
        e.single.as_mut().unwrap().mean_ns = 19_200.0 / 0.83;
        let tail = server_tail_latency(&e).expect("stalls");
        let bloat = |side| Diagnosis {
            rule: RuleId::Bufferbloat,
            title: "latency under load".into(),
            explains_ns: 89_242_480,
            confidence: 0.8,
            side,
            evidence: vec![],
            fix: String::new(),
            caused_by: None,
            causes: vec![],
        };
        let all = rules::rank(&e, vec![bloat(Side::Both), tail.clone()]);
        assert_eq!(all[0].rule, RuleId::ServerTailLatency);
        assert_eq!(all[1].caused_by, Some(RuleId::ServerTailLatency));
        let all = rules::rank(&e, vec![bloat(Side::Network), tail.clone()]);
        assert_eq!(all[0].rule, RuleId::Bufferbloat);
        // A tail at the p99 (one request in a hundred, no stalls in the slices) is no such cause.
        e.slices.clear();
        e.single = Some(single(20_000, 20_000, 13_500_000));
        let p99 = server_tail_latency(&e).expect("a p99 tail");
        let all = rules::rank(&e, vec![bloat(Side::Both), p99]);
        assert_eq!(all[0].rule, RuleId::Bufferbloat);
        assert!(all.iter().all(|f| f.caused_by.is_none()));
    }

    fn run_queue_delay_fires(e: &Evidence) -> bool {
        rules::apply(e)
            .first()
            .is_some_and(|f| f.rule == RuleId::RunQueueDelay)
    }

    #[test]
    fn small_or_short_tails_and_few_samples_are_noise() {
        let mut e = hogged();
        // The server's waits no longer than latscope's own: the heavy-tail floor applies.
        e.cpu.as_mut().unwrap().client_run_queue = Some(rq(2_000_000.0));
        e.single = Some(single(20_000, 20_000, 3_000_000)); // +3 ms: below the floor
        assert!(rules::apply(&e).is_empty());
        e.single = Some(single(20_000, 1_000_000, 9_000_000)); // 9×: not heavy
        // No tail finding; the 1 ms median itself, 66 path RTTs with nothing to explain it, is
        // the open world's (`unexplained`), not the tail's.
        let found = rules::apply(&e);
        assert!(
            found.iter().all(|f| f.rule == RuleId::Unexplained),
            "{found:?}"
        );
        e.single = Some(single(200, 20_000, 13_500_000)); // too few samples
        assert!(rules::apply(&e).is_empty());
    }

    #[test]
    fn timers_and_the_path_explain_their_tails() {
        let mut e = hogged();
        e.capture.as_mut().unwrap().retransmissions = 300;
        assert_eq!(unexplained_tail(&e), None, "loss: retransmission timers");
        let mut e = hogged();
        e.path = Some(single(100, 15_000, 10_000_000));
        assert_eq!(unexplained_tail(&e), None, "the path's own tail");
    }
}

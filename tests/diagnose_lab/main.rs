//! The diagnose lab: real servers and real kernel faults in namespaces the lab builds, each with
//! the finding `latscope diagnose` must rank first (or exit 0 for a healthy server), from three
//! seats (`seat.rs`): on the server's host, from the client alone, and from the client with the
//! server's agent (`agent.rs`).
//!
//! - `cargo test --release --test diagnose_lab` runs the CI subset (a few fast scenarios, most
//!   from one seat) and checks the client seat's isolation with tools that are not latscope;
//! - `scripts/diagnose-lab.sh` runs every scenario from every seat (the ignored `lab` test) and
//!   prints top-1 accuracy per seat and the false-positive rate on healthy servers;
//!   `LAB_SET=holdout` runs the scenarios held back while the rules were tuned (`holdout6`: those
//!   held back in round 6, `holdout6.rs`), `LAB_ONLY=a,b`
//!   picks scenarios by name (or `name@RTTms`), `LAB_RTT=0,20` round trips,
//!   `LAB_SEAT=server-host|client-only|client+agent` one seat (or a comma list), `LAB_RUNS=N`
//!   the runs per scenario (3: right only when all are), `LAB_LOCK=FILE` an flock held per run;
//! - the ignored `hold` test builds one scenario (`LAB_HOLD=NAME`) and keeps it up, without
//!   diagnose, to check its fault with other tools.
//!
//! All of it needs root (namespaces, nftables, tc, cgroups).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[path = "../lab/mod.rs"]
mod lab;

mod agent;
mod fixtures;
mod scenarios;
mod seat;
mod verify;

use std::time::Duration;

use fixtures::Outcome;
use scenarios::{Expect, Scenario, Set};
use seat::Seat;

/// Diagnose's flags in the lab: one second per application measurement (what a user in a hurry
/// would pass); everything else is the default.
const DURATION: &str = "1s";

/// One scenario at one round trip (ms).
#[derive(Clone, Copy)]
struct Variant {
    s: &'static Scenario,
    rtt_ms: u32,
}

impl Variant {
    /// What it must produce from `seat`.
    fn expectation(self, seat: Seat) -> Expect {
        let (host, client) = self.s.expected_at(self.rtt_ms);
        match seat {
            // With the server's agent the client should see what the server's host sees.
            Seat::ServerHost | Seat::ClientAgent => host,
            Seat::ClientOnly => client,
        }
    }

    /// `name@RTTms`, the label of the table and of `LAB_ONLY`.
    fn label(self) -> String {
        format!("{}@{}ms", self.s.name, self.rtt_ms)
    }
}

fn run(v: Variant, seat: Seat) -> Outcome {
    let s = v.s;
    if let Some(why) = fixtures::missing(s.needs) {
        return Outcome::not_run(format!("{} not built: {why}", s.name));
    }
    let setup = s.build_at(v.rtt_ms);
    if seat.isolated()
        && let Some(leak) = seat::observe(seat, &setup.client_ns).leaks()
    {
        panic!("{}: the client seat is not isolated: {leak}", v.label());
    }
    let mut args = vec!["-d".to_string(), DURATION.into()];
    // Every HTTPS server of the lab has a self-signed certificate for a name that is not its
    // address: diagnose is told not to verify it, as its user would be for a test server
    // (diagnose refuses an unverifiable certificate since issue 41 item 4).
    if setup.target.starts_with("https://") {
        args.push("--insecure".into());
    }
    args.extend(setup.args.iter().cloned());
    // The third seat: the server's agent runs beside the server while diagnose runs. Without
    // one (no namespace holds the target's address) the run is client-only, and says so.
    let agent = match seat {
        Seat::ClientAgent => match agent::start(&setup.client_ns, &setup.target, s.name) {
            Ok(a) => Some(a),
            Err(why) => {
                eprintln!("lab: {}: no server agent: {why}", v.label());
                None
            }
        },
        _ => None,
    };
    if let Some(a) = &agent {
        args.extend(a.args.iter().cloned());
    }
    let out = fixtures::diagnose(
        seat,
        &setup.client_ns,
        setup.client_cgroup.as_deref(),
        &setup.target,
        &args,
        Duration::from_secs(150),
    );
    drop(agent);
    drop(setup);
    out
}

/// Run one scenario at one round trip from one seat, once, and require its finding (CI).
fn check(name: &str, rtt_ms: u32, seat: Seat) {
    let s = scenarios::by_name(name);
    assert!(
        s.rtts.contains(&rtt_ms),
        "{name} is not built at {rtt_ms} ms"
    );
    let v = Variant { s, rtt_ms };
    let _serial = lab::timing_lock();
    let o = run(v, seat);
    let want = v.expectation(seat);
    assert!(
        want.met(o.code, &o.rules, &o.sides),
        "{} from the {} seat: expected {}, got {} (all findings {:?}, sides {:?}; verdict: {}; stderr: {})\n{}",
        v.label(),
        seat.name(),
        want.label(),
        o.top(),
        o.rules,
        o.sides,
        o.verdict,
        o.stderr,
        o.doc.as_ref().map(|d| d.to_string()).unwrap_or_default()
    );
}

/// One scenario's runs at one round trip from one seat.
struct Row {
    v: Variant,
    seat: Seat,
    want: Expect,
    runs: Vec<Outcome>,
}

impl Row {
    /// Right only when every run met the expectation (so they also agree).
    fn met(&self) -> bool {
        self.runs
            .iter()
            .all(|o| self.want.met(o.code, &o.rules, &o.sides))
    }

    /// The runs' top findings differ: the verdict depends on which requests met the fault.
    fn flipped(&self) -> bool {
        let first = self.runs.first().map(Outcome::top);
        self.runs.iter().any(|o| Some(o.top()) != first)
    }

    /// The top findings of the runs, `a / b / c`.
    fn tops(&self) -> String {
        let tops: Vec<String> = self.runs.iter().map(Outcome::top).collect();
        tops.join(" / ")
    }

    fn result(&self) -> &'static str {
        match (self.met(), self.want, self.flipped()) {
            (true, Expect::Unobservable { .. }, _) => "unobservable, said so",
            (false, Expect::Unobservable { .. }, _) => "**unobservable, not said**",
            (true, _, _) => "ok",
            (false, _, true) => "**flip**",
            (false, _, false) => "**miss**",
        }
    }

    fn unobservable(&self) -> bool {
        matches!(self.want, Expect::Unobservable { .. })
    }
}

/// The closing figures of one seat at one round trip: top-1 accuracy (every run right; an
/// unobservable cause is never counted as right, however well the report says so), flips, how
/// often an unobservable cause was reported as such, false positives on healthy servers (any
/// run with a finding), faults reported as healthy (any run clean).
fn summary(set: Set, seat: Seat, rtt_ms: u32, rows: &[&Row]) -> String {
    let pct = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    let n = rows.len();
    let right = rows.iter().filter(|r| r.met() && !r.unobservable()).count();
    let observable = rows.iter().filter(|r| !r.unobservable()).count();
    let unobs = n - observable;
    let said = rows.iter().filter(|r| r.met() && r.unobservable()).count();
    let flips = rows.iter().filter(|r| r.flipped()).count();
    let healthy: Vec<_> = rows.iter().filter(|r| r.want == Expect::Clean).collect();
    let false_pos = healthy
        .iter()
        .filter(|r| r.runs.iter().any(|o| o.code != 0))
        .count();
    let faulty = n - healthy.len();
    let missed_entirely = rows
        .iter()
        .filter(|r| r.want != Expect::Clean && r.runs.iter().any(|o| o.code == 0))
        .count();
    format!(
        "{set:?} set, {} seat, {rtt_ms} ms: top-1 accuracy (all runs right) {right}/{n} = {:.0}% ({right}/{observable} = {:.0}% of the causes observable from this seat); flips {flips}/{n}; unobservable causes reported as unexplained on the right side {said}/{unobs}; false positives on healthy servers {false_pos}/{} = {:.0}%; faults reported as healthy in a run {missed_entirely}/{faulty}",
        seat.name(),
        pct(right, n),
        pct(right, observable),
        healthy.len(),
        pct(false_pos, healthy.len()),
    )
}

/// The runs the lab makes of each scenario, seat and round trip (`LAB_RUNS`, default 3): a
/// scenario counts as right only when every run is.
fn runs_per_variant() -> usize {
    std::env::var("LAB_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(3)
}

/// The variants `LAB_SET`, `LAB_ONLY` (names or `name@RTTms`) and `LAB_RTT` (ms, a comma list)
/// pick.
fn picked() -> (Set, Vec<Variant>) {
    let set = match std::env::var("LAB_SET").as_deref() {
        Ok("holdout") => Set::Holdout,
        Ok("holdout6") => Set::Holdout6,
        Ok("holdout-far") => Set::HoldoutFar,
        _ => Set::Lab,
    };
    let list = |k: &str| -> Vec<String> {
        std::env::var(k)
            .map(|v| v.split(',').map(|w| w.trim().to_string()).collect())
            .unwrap_or_default()
    };
    let (only, rtts) = (list("LAB_ONLY"), list("LAB_RTT"));
    let variants: Vec<Variant> = scenarios::all()
        .filter(|s| s.set == set)
        .flat_map(|s| s.rtts.iter().map(move |&rtt_ms| Variant { s, rtt_ms }))
        .filter(|v| only.is_empty() || only.iter().any(|o| *o == v.s.name || *o == v.label()))
        .filter(|v| rtts.is_empty() || rtts.iter().any(|r| *r == v.rtt_ms.to_string()))
        .collect();
    assert!(!variants.is_empty(), "no scenario selected");
    (set, variants)
}

/// An exclusive lock on the file `LAB_LOCK` names, held while one run builds its scenario and
/// diagnoses it (machines shared by several people running namespace labs: the lock is taken
/// per run, never for a whole lab); none without `LAB_LOCK`.
fn run_lock() -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = std::env::var_os("LAB_LOCK")?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("LAB_LOCK={}: {e}", path.to_string_lossy()));
    // SAFETY: flock on a descriptor we own; released when the file is closed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    Some(f)
}

/// Run `v` from `seat` `n` times, each on a freshly built set-up, saying what each run gave.
fn run_row(v: Variant, seat: Seat, n: usize) -> Row {
    let want = v.expectation(seat);
    let mut runs = Vec::with_capacity(n);
    for i in 1..=n {
        eprintln!(
            "lab: {} from the {} seat, run {i}/{n} ({}) …",
            v.label(),
            seat.name(),
            v.s.what
        );
        let lock = run_lock();
        let o = run(v, seat);
        drop(lock);
        eprintln!(
            "lab: {} [{}] run {i} → {} [{}] in {:.0}s; all: {:?}; verdict: {}",
            v.label(),
            seat.name(),
            o.top(),
            if want.met(o.code, &o.rules, &o.sides) {
                "ok"
            } else {
                "MISS"
            },
            o.secs,
            o.rules,
            o.verdict
        );
        // A run that did not produce a verdict (exit 2 or 3): what diagnose said instead.
        if o.doc.is_none() && !o.stderr.trim().is_empty() {
            eprintln!(
                "lab: {} [{}] stderr: {}",
                v.label(),
                seat.name(),
                o.stderr.trim()
            );
        }
        if let Ok(dir) = std::env::var("LAB_JSON_DIR")
            && let Some(d) = &o.doc
        {
            let _ = std::fs::write(
                format!("{dir}/{}.{}.run{i}.json", v.label(), seat.name()),
                d.to_string(),
            );
        }
        runs.push(o);
    }
    Row {
        v,
        seat,
        want,
        runs,
    }
}

/// The whole lab, as a benchmark: runs each scenario at each of its round trips from each seat
/// three times (`LAB_RUNS`), prints one line per run, then the table (a scenario is right only
/// when all its runs are; a top finding that changes between runs is a flip), and top-1
/// accuracy and the false-positive rate per seat and round trip. `scripts/diagnose-lab.sh` runs
/// it.
#[test]
#[ignore = "the full lab takes an hour or more: scripts/diagnose-lab.sh"]
fn lab() {
    require_root!();
    let (set, variants) = picked();
    let seats = Seat::from_env();
    let n = runs_per_variant();
    let mut rows = Vec::new();
    for &v in &variants {
        for &seat in &seats {
            rows.push(run_row(v, seat, n));
        }
    }
    print_table(&rows);
    println!();
    let mut rtts: Vec<u32> = rows.iter().map(|r| r.v.rtt_ms).collect();
    rtts.sort_unstable();
    rtts.dedup();
    for &seat in &seats {
        for &rtt in &rtts {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| r.seat == seat && r.v.rtt_ms == rtt)
                .collect();
            println!("{}", summary(set, seat, rtt, &mine));
        }
    }
}

/// The table of rows (markdown), then the flips and the unobservable causes.
fn print_table(rows: &[Row]) {
    println!(
        "\n| scenario | RTT | seat | expected | top finding (each run) | result | all findings (run 1) | time |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let first = r.runs.first();
        let all = first.map_or("-".into(), |o| {
            if o.rules.is_empty() {
                "-".into()
            } else {
                o.rules.join(", ")
            }
        });
        let secs = r.runs.iter().map(|o| o.secs).sum::<f64>() / r.runs.len().max(1) as f64;
        println!(
            "| {} | {} ms | {} | {} | {} | {} | {all} | {secs:.0} s |",
            r.v.s.name,
            r.v.rtt_ms,
            r.seat.name(),
            r.want.label(),
            r.tops(),
            r.result(),
        );
    }
    let flips: Vec<&Row> = rows.iter().filter(|r| r.flipped()).collect();
    if !flips.is_empty() {
        println!("\nFlips (the top finding changed between runs):");
        for r in flips {
            let each: Vec<String> = r
                .runs
                .iter()
                .enumerate()
                .map(|(i, o)| format!("run {}: {}", i + 1, o.top()))
                .collect();
            println!(
                "- {} from the {} seat: {}",
                r.v.label(),
                r.seat.name(),
                each.join("; ")
            );
        }
    }
    let lacking: Vec<&Row> = rows.iter().filter(|r| r.unobservable()).collect();
    if !lacking.is_empty() {
        println!("\nUnobservable from a seat (not counted as right):");
        for r in lacking {
            if let Expect::Unobservable { side, lacks } = r.want {
                println!(
                    "- {} from the {} seat: lacks {lacks}; look at the {side}",
                    r.v.label(),
                    r.seat.name()
                );
            }
        }
    }
}

/// Build one scenario (`LAB_HOLD=NAME`, at `LAB_HOLD_RTT` ms: its first round trip unless set)
/// and keep it up for `LAB_HOLD_SECS` (default 60) without running diagnose: to check a fault
/// with other tools (curl, tcpdump, ss, cgroup statistics) from its client namespace, printed
/// on stderr with the target.
#[test]
#[ignore = "manual: LAB_HOLD=NAME cargo test --release --test diagnose_lab -- --ignored hold"]
fn hold() {
    require_root!();
    let name = std::env::var("LAB_HOLD").expect("LAB_HOLD=NAME: the scenario to build");
    let s = scenarios::by_name(&name);
    if let Some(why) = fixtures::missing(s.needs) {
        panic!("{name} not built: {why}");
    }
    let secs: u64 = std::env::var("LAB_HOLD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let rtt_ms: u32 = std::env::var("LAB_HOLD_RTT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(s.rtts[0]);
    let setup = s.build_at(rtt_ms);
    eprintln!(
        "hold: {name} at {rtt_ms} ms up for {secs} s: client namespace {}, target {}, client cgroup {:?}",
        setup.client_ns, setup.target, setup.client_cgroup
    );
    std::thread::sleep(Duration::from_secs(secs));
}

/// A scenario whose program is missing is reported as not run, naming the program and the
/// remedy (no root needed: nothing is built).
#[test]
fn missing_program_is_not_run() {
    let why = fixtures::missing(&["sh", "latscope-lab-no-such-program"]).expect("missing");
    assert!(
        why.contains("`latscope-lab-no-such-program` is not installed")
            && why.contains("scripts/setup.sh"),
        "{why}"
    );
    assert_eq!(fixtures::missing(&["sh"]), None);
    assert_eq!(Outcome::not_run(why).top(), "not run");
    for s in scenarios::all() {
        for want in [s.expect, s.client] {
            if let Expect::Unobservable { side, lacks } = want {
                assert!(
                    ["client", "server", "network", "both"].contains(&side) && !lacks.is_empty(),
                    "{}: an unobservable cause names its side and the evidence lacked",
                    s.name
                );
            }
        }
    }
    for s in scenarios::all() {
        assert!(
            s.needs.iter().all(|n| !n.is_empty() && !n.contains('/')),
            "{}: needs names programs",
            s.name
        );
    }
}

/// The client seat sees nothing of the server, checked with `ss`, /proc, `bpftool` and the
/// capability sets; the same look from the server's host sees the server (so the check can
/// fail). The server is a Python HTTP server in the client's own namespace (`loopback-nodelay`),
/// the case where a shared network namespace would show its socket.
#[test]
fn client_seat_is_isolated() {
    require_root!();
    let setup = scenarios::by_name("loopback-nodelay").build_at(0);
    let host = seat::observe(Seat::ServerHost, &setup.client_ns);
    assert!(
        host.sockets_with_process
            .iter()
            .any(|l| l.contains(":8080") && l.contains("python")),
        "from the server's host ss -tanp names the server: {host:?}"
    );
    assert!(
        host.processes.iter().any(|p| p.contains("servers.py")),
        "from the server's host /proc shows the server"
    );
    assert!(host.leaks().is_some());
    let client = seat::observe(Seat::ClientOnly, &setup.client_ns);
    assert_eq!(client.leaks(), None, "{client:?}");
    assert!(
        !client.processes.is_empty() && !client.processes.iter().any(|p| p.contains("servers.py")),
        "{client:?}"
    );
    // CAP_NET_RAW and CAP_NET_ADMIN stay: the client may capture its own traffic.
    assert_eq!(
        client.cap_eff & (1 << 13 | 1 << 12),
        1 << 13 | 1 << 12,
        "{client:?}"
    );
    // A client put in a CPU-limited cgroup (a pod, a CI runner) reads that limit as the root of
    // its own hierarchy, and no other cgroup: the server's, in another cgroup of the same host,
    // stays out of sight.
    let mine = fixtures::CpuCgroup::new(10_000);
    let theirs = fixtures::CpuCgroup::new(20_000);
    let look = Seat::ClientOnly.command(
        &setup.client_ns,
        &[
            "sh",
            "-c",
            "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/unified/cpu.max 2>/dev/null; find /sys/fs/cgroup -mindepth 2 -type d",
        ],
    );
    let out = std::process::Command::new("sh")
        .args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""])
        .arg(&mine.dir)
        .arg(look.get_program())
        .args(look.get_args())
        .output()
        .expect("look around from a cgroup");
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.lines().next().is_some_and(|l| l.starts_with("10000")),
        "the client's own quota: {seen:?} {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !seen.contains("20000") && seen.lines().count() == 1,
        "nothing but its own cgroup: {seen:?}"
    );
    drop(theirs);
}

// The CI subset (eight scenarios, about 75 s): one per family of cause, from the server's host —
// a healthy server, its CPU quota, its kernel (netfilter), the path's rate (a slow link) — and
// from the client alone a healthy server, loss, error pages, and a cause it cannot see (a CPU
// quota: its throttling happens in every run, where a co-scheduled CPU hog slowed the server in
// some runs only and left nothing to see in others). The server's workers (socket queueing:
// `one-worker` here) are diagnosed in CI by tests/integration/diagnose.rs (`latscope serve --workers 1`
// under eight connections) and the application's socket options (Nagle) by tests/integration/diagnose.rs,
// diagnose_http.rs (an HTTP server writing head and body in two calls) and diagnose_nginx.rs
// (nginx); the path's length, loss from the server's host, Nagle and one worker in the lab and
// the other healthy server are in the full lab (scripts/diagnose-lab.sh).

macro_rules! ci {
    ($($test:ident => $name:literal at $rtt:literal ms from $seat:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                require_root!();
                check($name, $rtt, Seat::$seat);
            }
        )*
    };
}

ci! {
    healthy_nginx => "healthy-nginx" at 0 ms from ServerHost,
    cpu_starved => "cpu-starved" at 0 ms from ServerHost,
    netfilter_bloat => "netfilter-bloat" at 0 ms from ServerHost,
    slow_link => "slow-link" at 0 ms from ServerHost,
    client_healthy_nginx => "healthy-nginx" at 0 ms from ClientOnly,
    client_loss => "loss" at 0 ms from ClientOnly,
    client_cpu_starved => "cpu-starved" at 0 ms from ClientOnly,
    client_error_responses => "error-responses" at 0 ms from ClientOnly,
}

//! The diagnose lab: real servers and real kernel faults in namespaces the lab builds, each with
//! the finding `latscope diagnose` must rank first (or exit 0 for a healthy server).
//!
//! - `cargo test --release --test diagnose_lab` runs the CI subset (a few fast scenarios);
//! - `scripts/diagnose-lab.sh` runs every scenario (the ignored `lab` test) and prints top-1
//!   accuracy and the false-positive rate on healthy servers; `LAB_SET=holdout` runs the
//!   scenarios held back while the rules were tuned, `LAB_ONLY=a,b` picks scenarios by name;
//! - the ignored `hold` test builds one scenario (`LAB_HOLD=NAME`) and keeps it up, without
//!   diagnose, to check its fault with other tools.
//!
//! All of it needs root (namespaces, nftables, tc, cgroups).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[path = "../lab/mod.rs"]
mod lab;

mod fixtures;
mod scenarios;

use std::time::Duration;

use fixtures::Outcome;
use scenarios::{Expect, SCENARIOS, Scenario, Set};

/// Diagnose's flags in the lab: one second per application measurement (what a user in a hurry
/// would pass); everything else is the default.
const DURATION: &str = "1s";

fn run(s: &Scenario) -> Outcome {
    if let Some(why) = fixtures::missing(s.needs) {
        return Outcome::not_run(format!("{} not built: {why}", s.name));
    }
    let setup = (s.build)();
    let mut args = vec!["-d".to_string(), DURATION.into()];
    args.extend(setup.args.iter().cloned());
    let out = fixtures::diagnose(
        &setup.client_ns,
        &setup.target,
        &args,
        Duration::from_secs(150),
    );
    drop(setup);
    out
}

fn correct(s: &Scenario, o: &Outcome) -> bool {
    match s.expect {
        Expect::Rule(r) => o.code == 1 && o.rules.first().map(String::as_str) == Some(r),
        Expect::Clean => o.code == 0,
    }
}

fn expected(s: &Scenario) -> &'static str {
    match s.expect {
        Expect::Rule(r) => r,
        Expect::Clean => "clean",
    }
}

/// Run one scenario and require its finding (CI).
fn check(name: &str) {
    let s = scenarios::by_name(name);
    let _serial = lab::timing_lock();
    let o = run(s);
    assert!(
        correct(s, &o),
        "{name}: expected {}, got {} (all findings {:?}; verdict: {}; stderr: {})\n{}",
        expected(s),
        o.top(),
        o.rules,
        o.verdict,
        o.stderr,
        o.doc.as_ref().map(|d| d.to_string()).unwrap_or_default()
    );
}

/// The whole lab, as a benchmark: prints one line per scenario, top-1 accuracy and the
/// false-positive rate. `scripts/diagnose-lab.sh` runs it.
#[test]
#[ignore = "the full lab takes minutes: scripts/diagnose-lab.sh"]
fn lab() {
    require_root!();
    let set = match std::env::var("LAB_SET").as_deref() {
        Ok("holdout") => Set::Holdout,
        _ => Set::Lab,
    };
    let only: Vec<String> = std::env::var("LAB_ONLY")
        .map(|v| v.split(',').map(String::from).collect())
        .unwrap_or_default();
    let picked: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| s.set == set && (only.is_empty() || only.iter().any(|o| o == s.name)))
        .collect();
    assert!(!picked.is_empty(), "no scenario selected");
    let mut rows = Vec::new();
    for s in &picked {
        eprintln!("lab: {} ({}) …", s.name, s.what);
        let o = run(s);
        let ok = correct(s, &o);
        eprintln!(
            "lab: {} → {} [{}] in {:.0}s; all: {:?}; verdict: {}",
            s.name,
            o.top(),
            if ok { "ok" } else { "MISS" },
            o.secs,
            o.rules,
            o.verdict
        );
        if let Ok(dir) = std::env::var("LAB_JSON_DIR")
            && let Some(d) = &o.doc
        {
            let _ = std::fs::write(format!("{dir}/{}.json", s.name), d.to_string());
        }
        rows.push((*s, o, ok));
    }
    println!("\n| scenario | expected | top finding | result | all findings | time |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (s, o, ok) in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} s |",
            s.name,
            expected(s),
            o.top(),
            if *ok { "ok" } else { "**miss**" },
            if o.rules.is_empty() {
                "-".into()
            } else {
                o.rules.join(", ")
            },
            o.secs
        );
    }
    let n = rows.len();
    let right = rows.iter().filter(|r| r.2).count();
    let healthy: Vec<_> = rows
        .iter()
        .filter(|r| r.0.expect == Expect::Clean)
        .collect();
    let false_pos = healthy.iter().filter(|r| r.1.code != 0).count();
    let faulty = n - healthy.len();
    let missed_entirely = rows
        .iter()
        .filter(|r| r.0.expect != Expect::Clean && r.1.code == 0)
        .count();
    println!(
        "\n{:?} set: top-1 accuracy {right}/{n} = {:.0}%; false positives on healthy servers {false_pos}/{} = {:.0}%; faults reported as healthy {missed_entirely}/{faulty}",
        set,
        100.0 * right as f64 / n as f64,
        healthy.len(),
        if healthy.is_empty() {
            0.0
        } else {
            100.0 * false_pos as f64 / healthy.len() as f64
        }
    );
}

/// Build one scenario (`LAB_HOLD=NAME`) and keep it up for `LAB_HOLD_SECS` (default 60) without
/// running diagnose: to check a fault with other tools (curl, tcpdump, ss, cgroup statistics)
/// from its client namespace, printed on stderr with the target.
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
    let setup = (s.build)();
    eprintln!(
        "hold: {name} up for {secs} s: client namespace {}, target {}",
        setup.client_ns, setup.target
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
    for s in SCENARIOS {
        assert!(
            s.needs.iter().all(|n| !n.is_empty() && !n.contains('/')),
            "{}: needs names programs",
            s.name
        );
    }
}

// The CI subset: fast scenarios, one per family of cause (a few seconds each).

macro_rules! ci {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                require_root!();
                check($name);
            }
        )*
    };
}

ci! {
    healthy_latscope_serve => "healthy-latscope-serve",
    healthy_nginx => "healthy-nginx",
    nagle_server => "nagle-server",
    one_worker => "one-worker",
    cpu_starved => "cpu-starved",
    netfilter_bloat => "netfilter-bloat",
    loss => "loss",
    slow_link => "slow-link",
    long_path => "long-path",
}

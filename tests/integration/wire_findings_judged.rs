//! `latscope analyze`'s findings on public captures, as judged by reading the packets
//! (docs/analyze.md, "Findings judged by reading the packets"): every judged finding is listed
//! in `tests/data/analyze_judged.tsv` with its verdict. A finding judged right must still be
//! emitted (same kind, connection, start and end frame); one judged false must not come back
//! (no finding of that kind ends at that frame of that connection). A detector change that
//! loses a right finding or brings a false one back fails here, naming the capture and the
//! frames to read again.
//!
//! The captures are found in `LATSCOPE_PCAPS_DIR`, else `../shared/pcaps` next to the
//! checkout (or next to the worktree's parent); without them the test says so and passes, as
//! `wire_tshark_counts` does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use latscope_core::model::analyze::StallKind;
use latscope_wire::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};

/// What reading the packets said of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Right: must still be emitted.
    Right,
    /// False: must not come back.
    False,
    /// Right, given up by a stricter rule: not checked.
    Missed,
    /// False and still emitted, a limitation docs/analyze.md names: must still be emitted,
    /// so the docs are updated the day it goes.
    Open,
    /// The capture cannot decide it: must not come back as a finding (it may be listed among
    /// the undecided).
    Undecided,
}

/// One judged finding.
#[derive(Debug)]
struct Judged {
    file: String,
    kind: StallKind,
    conn: u64,
    since_frame: u64,
    frame: u64,
    verdict: Verdict,
    why: String,
}

fn judged() -> Vec<Judged> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/analyze_judged.tsv");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert!(
                c.len() >= 7,
                "analyze_judged.tsv: file, kind, conn, since, frame, verdict, why: {l}"
            );
            let kind: StallKind = serde_json::from_value(serde_json::json!(c[1]))
                .unwrap_or_else(|_| panic!("analyze_judged.tsv: unknown kind {}", c[1]));
            let verdict = match c[5] {
                "right" => Verdict::Right,
                "false" => Verdict::False,
                "missed" => Verdict::Missed,
                "open" => Verdict::Open,
                "undecided" => Verdict::Undecided,
                v => panic!("verdict is right, false, missed, open or undecided, not {v}: {l}"),
            };
            Judged {
                file: c[0].to_string(),
                kind,
                conn: c[2].parse().unwrap(),
                since_frame: c[3].parse().unwrap(),
                frame: c[4].parse().unwrap(),
                verdict,
                why: c[6].to_string(),
            }
        })
        .collect()
}

/// Every stall of one capture: (kind, conn, since frame, frame).
fn stalls(path: &Path) -> BTreeSet<(StallKind, u64, u64, u64)> {
    let reader = CaptureReader::new(File::open(path).unwrap()).unwrap();
    let mut a = Analyzer::new(AnalyzeOptions {
        trace_conn: None,
        top: 0,
    });
    a.keep_examples(usize::MAX);
    analyze_capture(reader, &mut a, &AtomicBool::new(false), |_| {}).unwrap();
    let r = a.finish();
    r.findings
        .iter()
        .flat_map(|f| {
            assert_eq!(f.examples.len() as u64, f.count, "every example kept");
            f.examples
                .iter()
                .map(move |e| (f.kind, e.conn, e.since_frame, e.frame))
        })
        .collect()
}

#[test]
fn judged_findings_stay_judged() {
    let Some(dir) = lab::wire::pcaps_dir() else {
        eprintln!(
            "skipped: no public captures (set LATSCOPE_PCAPS_DIR or put them in ../shared/pcaps)"
        );
        return;
    };
    let judged = judged();
    assert!(judged.len() >= 100, "the judged sample is in the file");
    let mut by_file: BTreeMap<&str, Vec<&Judged>> = BTreeMap::new();
    for j in &judged {
        by_file.entry(&j.file).or_default().push(j);
    }
    let mut wrong = Vec::new();
    for (file, js) in by_file {
        let found = stalls(&dir.join(file));
        for j in js {
            let emitted = match j.verdict {
                Verdict::Missed => continue,
                Verdict::Right | Verdict::Open => {
                    found.contains(&(j.kind, j.conn, j.since_frame, j.frame))
                }
                Verdict::False | Verdict::Undecided => found
                    .iter()
                    .any(|&(k, c, _, f)| k == j.kind && c == j.conn && f == j.frame),
            };
            let must = matches!(j.verdict, Verdict::Right | Verdict::Open);
            if emitted != must {
                wrong.push(format!(
                    "{file} conn {} #{} → #{} {:?}: judged {:?} ({}), now {}",
                    j.conn,
                    j.since_frame,
                    j.frame,
                    j.kind,
                    j.verdict,
                    j.why,
                    if emitted { "emitted" } else { "not emitted" }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} judged findings changed (read the frames again, then update \
         tests/data/analyze_judged.tsv and docs/analyze.md):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

//! `latscope analyze`'s counts against tshark's on every capture of the public sample set
//! (`../shared/pcaps`, kept outside this repository), without running tshark: its counts were
//! taken once by `scripts/tshark-counts.sh DIR > tests/data/tshark_counts.tsv` (tshark 4.0.17)
//! and are compared here, file by file and counter by counter — frames, TCP frames,
//! connections and every `tcp.analysis.*` item a latency hunter reads (retransmission, fast and
//! spurious retransmission, out-of-order, duplicate ACK, zero window, window full, previous
//! segment not captured, keep-alive). Every difference must be one listed, with its reason, in
//! `tests/data/tshark_known.tsv` (and docs/analyze.md); a listed difference that is gone must
//! leave the list.
//!
//! The captures are found in `LATSCOPE_PCAPS_DIR`, else `../shared/pcaps` next to the
//! checkout (or next to the worktree's parent); without them the test says so and passes, as
//! the other tests that need a peer tool do. The analysis runs in-process on two threads
//! (about a thousand files in a few seconds in a release build).
//!
//! To check the committed figures against tshark itself (slow: tshark starts once per file):
//! `LATSCOPE_CORPUS_DIR=../shared/pcaps cargo test --release --test integration -- --ignored wire_corpus::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use latscope_wire::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};

/// The compared counters, in the column order of `tshark_counts.tsv` (after file and size).
const FIELDS: [&str; 12] = [
    "frames",
    "tcp_frames",
    "connections",
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "out_of_order",
    "duplicate_ack",
    "zero_window",
    "window_full",
    "lost_segment",
    "keep_alive",
];

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// One file's reference line: its size and tshark's counts.
struct Reference {
    size: u64,
    counts: [u64; 12],
}

fn references(file: &str) -> BTreeMap<String, Reference> {
    let text = std::fs::read_to_string(data(file)).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    assert_eq!(&header[2..], &FIELDS, "tshark_counts.tsv columns");
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            let n: Vec<u64> = cols[1..].iter().map(|c| c.parse().unwrap()).collect();
            let mut counts = [0; 12];
            counts.copy_from_slice(&n[1..]);
            (cols[0].to_string(), Reference { size: n[0], counts })
        })
        .collect()
}

/// (file, field) → (latscope, tshark) of every accepted difference.
fn known(file: &str) -> BTreeMap<(String, String), (u64, u64)> {
    let text = std::fs::read_to_string(data(file)).unwrap();
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert!(
                c.len() >= 5,
                "tshark_known.tsv: file, field, latscope, tshark, why: {l}"
            );
            (
                (c[0].to_string(), c[1].to_string()),
                (c[2].parse().unwrap(), c[3].parse().unwrap()),
            )
        })
        .collect()
}

/// latscope's counts for one capture (None: latscope refuses the file, as the CLI does with
/// exit 2).
fn latscope_counts(path: &Path) -> Option<[u64; 12]> {
    let reader = CaptureReader::new(File::open(path).ok()?).ok()?;
    let mut a = Analyzer::new(AnalyzeOptions {
        trace_conn: None,
        top: 0,
    });
    analyze_capture(reader, &mut a, &AtomicBool::new(false), |_| {}).ok()?;
    let r = a.finish();
    let k = &r.counts;
    Some([
        r.frames,
        r.tcp_frames,
        r.connections,
        k.tshark_retransmission(),
        k.fast_retransmission,
        k.spurious_retransmission,
        k.out_of_order,
        k.duplicate_ack,
        k.zero_window,
        k.window_full,
        k.lost_segment,
        k.keep_alive,
    ])
}

#[test]
fn public_captures_count_as_tshark_does() {
    let Some(dir) = lab::wire::pcaps_dir() else {
        eprintln!("skipped: no ../shared/pcaps (set LATSCOPE_PCAPS_DIR to the public captures)");
        return;
    };
    let refs = references("tshark_counts.tsv");
    assert!(refs.len() >= 1000, "{} reference lines", refs.len());
    compare(&dir, &refs, &known("tshark_known.tsv"));
}

/// The same on the judged sample's captures (`../shared/pcaps-judged`, beside the public set):
/// captures no count was tuned on before.
#[test]
fn judged_captures_count_as_tshark_does() {
    let Some(dir) = lab::wire::pcaps_dir()
        .and_then(|d| d.parent().map(|p| p.join("pcaps-judged")))
        .filter(|d| d.is_dir())
    else {
        eprintln!("skipped: no ../shared/pcaps-judged beside the public captures");
        return;
    };
    let refs = references("tshark_counts_judged.tsv");
    assert!(refs.len() >= 50, "{} reference lines", refs.len());
    compare(&dir, &refs, &known("tshark_known_judged.tsv"));
}

/// Every file of `refs` in `dir` counted as tshark did, but for the differences `known` lists.
fn compare(
    dir: &Path,
    refs: &BTreeMap<String, Reference>,
    known: &BTreeMap<(String, String), (u64, u64)>,
) {
    let files: Vec<(&String, &Reference)> = refs.iter().collect();
    let results: Vec<(String, Option<[u64; 12]>)> = std::thread::scope(|s| {
        let workers: Vec<_> = files
            .chunks(files.len().div_ceil(2))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|(name, r)| {
                            let p = dir.join(name);
                            let size = std::fs::metadata(&p).map(|m| m.len()).ok();
                            assert_eq!(size, Some(r.size), "{name}: not the file tshark read");
                            ((*name).clone(), latscope_counts(&p))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let mut seen_known = 0;
    let mut failures = Vec::new();
    let mut equal = 0;
    for (name, ours) in &results {
        let theirs = refs[name].counts;
        // A file latscope refuses counts as 0 frames read.
        let ours = ours.unwrap_or([0; 12]);
        let mut same = true;
        for (i, field) in FIELDS.iter().enumerate() {
            if ours[i] == theirs[i] {
                continue;
            }
            same = false;
            match known.get(&(name.clone(), field.to_string())) {
                Some(&(a, b)) if (a, b) == (ours[i], theirs[i]) => seen_known += 1,
                _ => failures.push(format!("{name}\t{field}\t{}\t{}", ours[i], theirs[i])),
            }
        }
        equal += usize::from(same);
    }
    if seen_known != known.len() {
        failures.push(format!(
            "{} listed differences in tshark_known.tsv no longer happen (or changed)",
            known.len() - seen_known
        ));
    }
    eprintln!(
        "{} files: {equal} equal to tshark on every counter, {} with listed differences",
        results.len(),
        results.len() - equal
    );
    assert!(
        failures.is_empty(),
        "differences from tshark not in tests/data/tshark_known.tsv (file, field, latscope, tshark):\n{}",
        failures.join("\n")
    );
}

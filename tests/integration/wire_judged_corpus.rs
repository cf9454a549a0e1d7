//! `latscope analyze` holds every judgment of the judged corpus (`tests/data/judged/`): public
//! captures whose findings were read packet by packet with tshark and judged — `judgments.tsv`
//! (a sample judged by the project's lead on captures no test had seen) and `own.tsv` (more,
//! judged the same way, for the kinds that sample had few of). Each row: file, finding kind,
//! verdict (T: the packets show the claim, its cause and magnitude; F: they do not; U: the
//! capture cannot decide), and the reason, which starts with the finding's connection and
//! frame (`conn N #F`). A finding judged T must still be emitted (same kind, connection and
//! frame), within the time lost `magnitudes.tsv` gives; one judged F must not be; U may go
//! either way. The per-kind precision and recall are printed (docs/analyze.md quotes them).
//!
//! The captures are kept small (`scripts/reduce-capture.py`): the judged connections whole
//! up to 384 bytes a frame, every other connection only its first frame and SYNs, every other
//! frame an empty record — frame and connection numbers stay the original's. Where each came
//! from is in `SOURCES.tsv`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use latscope_core::model::analyze::{Analysis, StallKind};
use latscope_wire::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/judged")
}

/// One judged finding.
#[derive(Debug)]
struct Judged {
    file: String,
    kind: StallKind,
    verdict: char,
    conn: u64,
    frame: u64,
    why: String,
}

fn judged(name: &str) -> Vec<Judged> {
    let text = std::fs::read_to_string(dir().join(name)).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert!(c.len() >= 4, "{name}: file, kind, verdict, reason: {l}");
            let kind: StallKind = serde_json::from_value(serde_json::json!(c[1]))
                .unwrap_or_else(|_| panic!("{name}: unknown kind {}", c[1]));
            let verdict = c[2].chars().next().unwrap();
            assert!("TFU".contains(verdict), "{name}: verdict T, F or U: {l}");
            // "conn N #F: ..."
            let head = c[3]
                .strip_prefix("conn ")
                .expect("reason starts with `conn N #F`");
            let (conn, rest) = head.split_once(" #").unwrap();
            let frame: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Judged {
                file: c[0].to_string(),
                kind,
                verdict,
                conn: conn.parse().unwrap(),
                frame: frame.parse().unwrap(),
                why: c[3].to_string(),
            }
        })
        .collect()
}

/// (file, kind, conn, frame) → the time lost in ms the judge read.
fn magnitudes() -> BTreeMap<(String, StallKind, u64, u64), (f64, f64)> {
    let text = std::fs::read_to_string(dir().join("magnitudes.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            let kind: StallKind = serde_json::from_value(serde_json::json!(c[1])).unwrap();
            (
                (
                    c[0].to_string(),
                    kind,
                    c[2].parse().unwrap(),
                    c[3].parse().unwrap(),
                ),
                (c[4].parse().unwrap(), c[5].parse().unwrap()),
            )
        })
        .collect()
}

fn analyze(file: &str) -> Analysis {
    let path = dir().join(format!("{file}.gz"));
    let f = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = CaptureReader::new(f).unwrap();
    let mut a = Analyzer::new(AnalyzeOptions {
        trace_conn: None,
        top: 0,
    });
    a.keep_examples(usize::MAX);
    analyze_capture(reader, &mut a, &AtomicBool::new(false), |_| {}).unwrap();
    a.finish()
}

#[test]
fn every_judgment_holds() {
    let mut rows = judged("judgments.tsv");
    rows.extend(judged("own.tsv"));
    assert!(
        rows.len() >= 64,
        "the judged corpus is in tests/data/judged"
    );
    let sizes = magnitudes();
    let files: BTreeSet<&str> = rows.iter().map(|j| j.file.as_str()).collect();
    let found: BTreeMap<&str, Analysis> = files.iter().map(|f| (*f, analyze(f))).collect();
    let mut wrong = Vec::new();
    // kind → (T kept, T judged, F emitted, F judged, U judged)
    let mut tally: BTreeMap<StallKind, [u32; 5]> = BTreeMap::new();
    for j in &rows {
        let a = &found[j.file.as_str()];
        let hit = a
            .findings
            .iter()
            .filter(|f| f.kind == j.kind)
            .flat_map(|f| f.examples.iter())
            .find(|e| e.conn == j.conn && e.frame == j.frame);
        let t = tally.entry(j.kind).or_default();
        match j.verdict {
            'T' => {
                t[1] += 1;
                let Some(e) = hit else {
                    wrong.push(format!(
                        "{} {:?} conn {} #{}: judged T, not emitted ({})",
                        j.file, j.kind, j.conn, j.frame, j.why
                    ));
                    continue;
                };
                t[0] += 1;
                let key = (j.file.clone(), j.kind, j.conn, j.frame);
                let (lo, hi) = sizes
                    .get(&key)
                    .unwrap_or_else(|| panic!("magnitudes.tsv has no range for {key:?}"));
                let ms = e.lost_ns as f64 / 1e6;
                if ms < *lo || ms > *hi {
                    wrong.push(format!(
                        "{} {:?} conn {} #{}: {ms:.1} ms lost, judged {lo}–{hi} ms ({})",
                        j.file, j.kind, j.conn, j.frame, j.why
                    ));
                }
            }
            'F' => {
                t[3] += 1;
                if hit.is_some() {
                    t[2] += 1;
                    wrong.push(format!(
                        "{} {:?} conn {} #{}: judged F, emitted ({})",
                        j.file, j.kind, j.conn, j.frame, j.why
                    ));
                }
            }
            _ => t[4] += 1,
        }
    }
    for (k, [tk, tn, fe, fnn, _]) in &tally {
        let emitted = tk + fe;
        eprintln!(
            "{k:?}: precision {tk}/{emitted}, recall {tk}/{tn}, false gone {}/{fnn}",
            fnn - fe
        );
    }
    assert!(
        wrong.is_empty(),
        "{} judgments broken (read the frames again before changing a judgment):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let table = docs_table(&tally);
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/analyze.md"))
            .unwrap();
    let quoted = docs
        .split_once(DOCS_BEGIN)
        .and_then(|(_, rest)| rest.split_once(DOCS_END))
        .map(|(block, _)| block.trim());
    assert_eq!(
        quoted,
        Some(table.trim()),
        "docs/analyze.md must quote the judged corpus' figures between {DOCS_BEGIN} and {DOCS_END}:\n{table}"
    );
}

const DOCS_BEGIN: &str = "<!-- judged corpus: made by tests/integration/wire_judged_corpus.rs -->";
const DOCS_END: &str = "<!-- /judged corpus -->";

/// The per-kind precision and recall as docs/analyze.md quotes them (every stall kind, in the
/// registry's order; a kind nobody judged says so).
fn docs_table(tally: &BTreeMap<StallKind, [u32; 5]>) -> String {
    let pct = |a: u32, b: u32| {
        if b == 0 {
            "—".to_string()
        } else {
            format!("{a}/{b} ({:.0} %)", 100.0 * f64::from(a) / f64::from(b))
        }
    };
    let mut out = String::from(
        "| stall kind | judged true | judged false | judged undecided | precision (true reported / reported) | recall (true reported / judged true) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut sum = [0u32; 5];
    for k in StallKind::ALL {
        let t = tally.get(&k).copied().unwrap_or_default();
        for (s, v) in sum.iter_mut().zip(t) {
            *s += v;
        }
        let [tk, tn, fe, fnn, un] = t;
        out += &format!(
            "| `{}` | {tn} | {fnn} | {un} | {} | {} |\n",
            k.name(),
            pct(tk, tk + fe),
            pct(tk, tn)
        );
    }
    let [tk, tn, fe, fnn, un] = sum;
    out += &format!(
        "| all | {tn} | {fnn} | {un} | {} | {} |\n",
        pct(tk, tk + fe),
        pct(tk, tn)
    );
    out
}

/// Every capture a judgment names is here, and every capture here is judged.
#[test]
fn the_captures_are_the_judged_ones() {
    let mut rows = judged("judgments.tsv");
    rows.extend(judged("own.tsv"));
    let named: BTreeSet<String> = rows.iter().map(|j| format!("{}.gz", j.file)).collect();
    let here: BTreeSet<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gz"))
        .collect();
    assert_eq!(named, here);
    let sources = std::fs::read_to_string(dir().join("SOURCES.tsv")).unwrap();
    for f in rows.iter().map(|j| &j.file) {
        assert!(
            sources
                .lines()
                .any(|l| l.split('\t').next() == Some(f.as_str())),
            "SOURCES.tsv names no source for {f}"
        );
    }
}

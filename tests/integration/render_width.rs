//! Every command's human view fits the terminal: the committed example results of every command
//! (`tests/data/report/*.json`, `tests/data/render/*.json`, real `--json` outputs) are rendered
//! at 80 and 100 columns, and no line may be wider; latency tables keep p50, p99 and max.

use std::path::{Path, PathBuf};

use latscope_core::registry::{KINDS, kind};

fn examples() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files = Vec::new();
    for dir in ["report", "render"] {
        for e in std::fs::read_dir(root.join(dir)).expect("tests/data directory") {
            let p = e.expect("directory entry").path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// The example's command (its `meta.command`, a result kind of the registry) and its JSON.
fn load(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).expect("readable example");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON example");
    let command = v["meta"]["command"]
        .as_str()
        .expect("meta.command")
        .to_string();
    (command, text)
}

/// The example's human view at `width`, through the registry's renderer for its kind.
fn render(path: &Path, command: &str, text: &str, width: usize) -> String {
    let kind = kind(command)
        .unwrap_or_else(|| panic!("{}: '{command}' is no result kind", path.display()));
    kind.render_human(text, width)
        .unwrap_or_else(|| panic!("{}: '{command}' has no human view", path.display()))
        .unwrap_or_else(|e| panic!("{} does not match its model: {e}", path.display()))
}

/// Lines that head a latency table: they name p50, p99 and max.
fn latency_headers(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            ["p50", "p99", "max"].iter().all(|c| cols.contains(c))
        })
        .count()
}

#[test]
fn every_command_fits_80_and_100_columns() {
    let files = examples();
    let mut commands: Vec<String> = Vec::new();
    let mut failures = Vec::new();
    for path in &files {
        let (command, json) = load(path);
        let wide = render(path, &command, &json, 1000);
        for width in [80, 100] {
            let text = render(path, &command, &json, width);
            for line in text.lines() {
                let w = line.chars().count();
                if w > width {
                    failures.push(format!(
                        "{} at {width}: {w} columns: {line}",
                        path.display()
                    ));
                }
            }
            if latency_headers(&text) != latency_headers(&wide) {
                failures.push(format!(
                    "{} at {width}: a latency table lost p50, p99 or max:\n{text}",
                    path.display()
                ));
            }
        }
        commands.push(command);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every kind with a human view has an example (a new kind's first example goes in
    // tests/data/render/).
    for k in KINDS.iter().filter(|k| k.has_human()) {
        assert!(
            commands.iter().any(|x| x == k.name),
            "no example result for '{}' in tests/data",
            k.name
        );
    }
}

#[test]
fn narrow_terminals_drop_columns_and_say_so() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/rr.json");
    let (command, json) = load(&path);
    let wide = render(&path, &command, &json, 200);
    assert!(
        wide.contains("p99.99") && !wide.contains("left out"),
        "{wide}"
    );
    let narrow = render(&path, &command, &json, 80);
    let header = narrow.lines().find(|l| l.contains("p50")).expect("a table");
    assert!(!header.contains("p99.99"), "{narrow}");
    assert!(narrow.contains("left out to fit 80 columns"), "{narrow}");
}

/// Whether `line` writes a count's noun or verb by hand inside a string literal: "of {} things"
/// (`units::of` makes the noun agree with the whole) or "{} (…) belong"-style plural verbs after
/// a count (`units::verb`).
fn hand_agreement(line: &str) -> bool {
    let in_literal = |at: usize| line[..at].matches('"').count() % 2 == 1;
    let not_plural = [
        "is", "was", "its", "has", "this", "as", "s", "us", "ms", "ns",
    ];
    let after_placeholder = |at: usize| -> Option<&str> {
        let rest = &line[at..];
        let close = rest.find('}')?;
        let inner = &rest[1..close];
        inner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            .then(|| &rest[close + 1..])
    };
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect()
    };
    // "of {n} transactions": the noun is plural whatever the count.
    let plural_after_of = line.match_indices("of {").any(|(at, _)| {
        in_literal(at)
            && after_placeholder(at + 3)
                .and_then(|r| r.strip_prefix(' '))
                .map(word)
                .is_some_and(|w| w.ends_with('s') && !not_plural.contains(&w.as_str()))
    });
    // "{n} (states) belong": a plural verb chosen by hand after a count.
    let plural_verb = line.match_indices('{').any(|(at, _)| {
        let Some(mut r) = after_placeholder(at).filter(|_| in_literal(at)) else {
            return false;
        };
        if let Some(p) = r
            .strip_prefix(" (")
            .and_then(|p| p.find(')').map(|e| &p[e + 1..]))
        {
            r = p;
        }
        r.strip_prefix(' ')
            .map(word)
            .is_some_and(|w| ["belong", "were"].contains(&w.as_str()))
    });
    plural_after_of || plural_verb
}

#[test]
fn hand_agreement_is_caught() {
    assert!(hand_agreement(
        r#"    "TCP_NODELAY off on {} of {} connections{}","#
    ));
    assert!(hand_agreement(
        r#"    format!("{timed_out} of {attempts} attempts timed out"),"#
    ));
    assert!(hand_agreement(r#"    "{} ({}) belong to no process","#));
    assert!(hand_agreement(r#"    "{} were skipped","#));
    assert!(!hand_agreement(r#"    "TCP_NODELAY off on {}{}","#));
    assert!(!hand_agreement(r#"    "p{} of {} over the last {} s is","#));
    assert!(!hand_agreement(r#"    "{} ({}) {} to no process","#));
    assert!(!hand_agreement(
        r#"    // {} of {} connections, in a comment outside a literal"#
    ));
}

/// Counts are written with `latscope_core::units::count` (one pluralising rule): no message
/// in the sources says "connection(s)" or picks an "s" by hand.
#[test]
fn no_hand_made_plurals() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.join("src")];
    for e in std::fs::read_dir(root.join("crates")).expect("crates/") {
        dirs.push(e.expect("entry").path().join("src"));
    }
    let mut found = Vec::new();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).expect("source");
            for (i, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let hand_plural = ["(s)", "(es)"].iter().any(|m| {
                    line.match_indices(m).any(|(at, _)| {
                        // Inside a string literal: an odd number of quotes before it.
                        line[..at].ends_with(|c: char| c.is_ascii_lowercase())
                            && line[..at].matches('"').count() % 2 == 1
                    })
                });
                if hand_plural || line.contains(r#"else { "s" }"#) || hand_agreement(line) {
                    found.push(format!("{}:{}: {}", p.display(), i + 1, code));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "write counts with latscope_core::units::count / of / verb:\n{}",
        found.join("\n")
    );
}

//! The registries are the one list of each thing (result kinds, diagnose's rules, the analyzer's
//! stall kinds, the report's pages): every other list — `--help`, the README, the docs' tables —
//! agrees with them, or this test says what to change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::collections::BTreeSet;
use std::path::Path;

use latscope_core::model::analyze::StallKind;
use latscope_core::model::diagnose::RuleId;
use latscope_core::registry::KINDS;
use latscope_diagnose::rules::{Check, RULES};

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The text of `doc` between `<!-- registry: NAME -->` and `<!-- /registry -->`.
fn block<'a>(doc: &'a str, rel: &str, name: &str) -> &'a str {
    let open = format!("<!-- registry: {name} -->\n");
    let start = doc
        .find(&open)
        .unwrap_or_else(|| panic!("{rel} has no `{}` block", open.trim()))
        + open.len();
    let len = doc[start..]
        .find("<!-- /registry -->")
        .unwrap_or_else(|| panic!("{rel}: the `{name}` block is not closed"));
    &doc[start..start + len]
}

/// A generated block must read as the registry says; on a difference, the block to paste.
fn check_block(rel: &str, name: &str, want: &str) {
    let doc = read(rel);
    let have = block(&doc, rel, name);
    assert!(
        have == want,
        "{rel}'s `{name}` list disagrees with the registry; replace the block with:\n{want}"
    );
}

/// The words of `text` in backquotes.
fn quoted(text: &str) -> BTreeSet<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn rule_names() -> BTreeSet<&'static str> {
    RULES.iter().map(|r| r.id.name()).collect()
}

#[test]
fn diagnose_help_lists_every_rule() {
    let (code, out, _) = lab::run(&["diagnose", "--help"]);
    assert_eq!(code, 0);
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat
        .find("Findings are named rules (")
        .expect("the rules' line")
        + 26;
    let len = flat[start..].find(')').expect("the list's end");
    let listed: BTreeSet<&str> = flat[start..start + len].split(", ").collect();
    let evidence_rules: BTreeSet<&str> = RULES
        .iter()
        .filter(|r| matches!(r.check, Check::Evidence(_)))
        .map(|r| r.id.name())
        .collect();
    assert_eq!(listed, evidence_rules);
    for r in RULES
        .iter()
        .filter(|r| matches!(r.check, Check::Remainder(_)))
    {
        assert!(flat.contains(&format!("({})", r.id.name())), "{flat}");
    }
}

/// Every rule that runs is registered once, and every registered rule is named in the README's
/// list; a rule named there has to exist.
#[test]
fn the_readme_names_every_rule_and_no_other() {
    for (i, r) in RULES.iter().enumerate() {
        assert!(RULES[..i].iter().all(|o| o.id != r.id), "{:?} twice", r.id);
        assert!(!r.sides.is_empty(), "{:?}", r.id);
    }
    let readme = read("README.md");
    let start = readme
        .find("Findings are named rules")
        .expect("the README's rule list");
    let len = readme[start..]
        .find("ranked with the root cause first")
        .expect("the rule list's end");
    let quoted = quoted(&readme[start..start + len]);
    let named: BTreeSet<&str> = RuleId::ALL
        .iter()
        .map(|r| r.name())
        .filter(|n| quoted.contains(n))
        .collect();
    assert_eq!(
        named,
        rule_names(),
        "README.md: the list after \"Findings are named rules\""
    );
}

#[test]
fn schema_help_and_the_readme_list_every_result_kind() {
    let names: BTreeSet<&str> = KINDS.iter().map(|k| k.name).collect();
    let (code, out, _) = lab::run(&["schema", "--help"]);
    assert_eq!(code, 0);
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for k in KINDS {
        assert!(
            flat.contains(&format!("- {}: {}", k.name, k.about)),
            "schema --help lacks {}:\n{out}",
            k.name
        );
    }
    let readme = read("README.md");
    let start = readme
        .find("`latscope schema KIND` (")
        .expect("README: the kinds `latscope schema` takes")
        + 24;
    let len = readme[start..].find(')').expect("the list's end");
    let listed: BTreeSet<&str> = quoted(&readme[start..start + len])
        .into_iter()
        .filter(|w| !w.starts_with("--"))
        .collect();
    assert_eq!(
        listed, names,
        "README.md: the kinds `latscope schema KIND` takes"
    );
}

/// The rules' table in docs/architecture.md.
fn rules_table() -> String {
    let mut out = String::from("| rule | blames | what it names |\n| --- | --- | --- |\n");
    for r in RULES {
        let sides: Vec<&str> = r.sides.iter().map(|s| s.name()).collect();
        let about = r.id.about();
        // Its first sentence (a full stop before a capital, not "e.g. a").
        let end = about
            .match_indices(". ")
            .find(|(i, _)| about[i + 2..].starts_with(|c: char| c.is_uppercase()))
            .map_or(about.len(), |(i, _)| i + 1);
        let first = &about[..end];
        out += &format!("| `{}` | {} | {first} |\n", r.id.name(), sides.join(", "));
    }
    out
}

#[test]
fn the_docs_rules_table_is_the_registry() {
    check_block("docs/architecture.md", "rules", &rules_table());
}

#[test]
fn the_docs_stall_kinds_table_is_the_registry() {
    let mut want = String::from("| stall kind | label | diagnose rule |\n| --- | --- | --- |\n");
    for k in StallKind::ALL {
        let rule = k
            .rule()
            .map_or("—".to_string(), |r| format!("`{}`", r.name()));
        want += &format!("| `{}` | {} | {rule} |\n", k.name(), k.label());
    }
    check_block("docs/analyze.md", "stall kinds", &want);
}

#[test]
fn the_docs_result_kinds_table_is_the_registry() {
    let pages: BTreeSet<&str> = latscope_report::Kind::ALL
        .iter()
        .map(|k| k.command())
        .collect();
    let mut want =
        String::from("| kind | what | human view | report page |\n| --- | --- | --- | --- |\n");
    for k in KINDS {
        let yes = |b: bool| if b { "yes" } else { "—" };
        want += &format!(
            "| `{}` | {} | {} | {} |\n",
            k.name,
            k.about,
            yes(k.has_human()),
            yes(pages.contains(k.name))
        );
    }
    check_block("docs/architecture.md", "result kinds", &want);
}

//! One flag grammar (docs/cli.md): every subcommand's flags, walked from the clap definition.
//!
//! A flag's meaning is the id of the argument it sets (the field name: `count`, `connections`,
//! `interval`, …). Visible flags must mean one thing across all commands, and a concept must have
//! one visible short flag. Hidden aliases keep old and peer spellings working; one that means
//! something else than the same flag elsewhere must be in [`CLASHES`] with its reason, and every
//! hidden alias must be in docs/cli.md's table, whose rows must parse to their new spelling.

use std::collections::{BTreeMap, BTreeSet};

use clap::{CommandFactory, Parser};

use super::Cli;

/// Hidden aliases that mean something else than the same flag in other commands: (command,
/// flag, why the peer's spelling is worth the exception). Each is hidden, so `--help` shows one
/// grammar; each is a spelling the users of that command's peer type by habit.
const CLASHES: &[(&str, &str, &str)] = &[
    (
        "ping",
        "-c",
        "ping/hping3 count; ping opens no parallel connections",
    ),
    (
        "trace",
        "-c",
        "mtr count; trace opens no parallel connections",
    ),
    (
        "capture",
        "-c",
        "tcpdump count; capture opens no connections",
    ),
    (
        "capture",
        "-i",
        "tcpdump interface; capture has no interval",
    ),
    (
        "analyze",
        "-i",
        "tcpdump interface; analyze has no interval",
    ),
    (
        "capture",
        "-s",
        "tcpdump snap length; capture sends no messages",
    ),
    (
        "analyze",
        "-s",
        "tcpdump snap length; analyze sends no messages",
    ),
    (
        "trace",
        "-f",
        "traceroute first TTL; trace takes no capture filter",
    ),
    (
        "trace",
        "-w",
        "traceroute wait time; trace writes no packets",
    ),
    (
        "trace",
        "-q",
        "traceroute probes per hop; trace has no request rate",
    ),
    (
        "trace",
        "--report",
        "mtr's report mode; trace writes no HTML page",
    ),
    (
        "rr",
        "-w",
        "rr's warm-up before the grammar; rr writes no packets",
    ),
    (
        "http",
        "-w",
        "http's warm-up before the grammar; http writes no packets",
    ),
    (
        "http",
        "-m",
        "http's method before the grammar; http has no TTL",
    ),
    ("stream", "-t", "iperf3 time; stream has no thread option"),
    (
        "stream",
        "-n",
        "iperf3 byte count; stream counts no transactions",
    ),
    (
        "stack",
        "-p",
        "stack's probes before the grammar; stack filters ports by --lport/--rport",
    ),
    (
        "serve",
        "-q",
        "the usual quiet flag; serve has no request rate",
    ),
];

/// One spelling of one argument in one command.
struct Flag {
    command: String,
    flag: String,
    id: String,
    visible: bool,
}

/// Every short and long spelling of every subcommand's arguments.
fn flags() -> Vec<Flag> {
    let mut cli = Cli::command();
    cli.build();
    let mut out = Vec::new();
    for sub in cli.get_subcommands() {
        for arg in sub.get_arguments() {
            let id = arg.get_id().to_string();
            let mut push = |flag: String, visible: bool| {
                out.push(Flag {
                    command: sub.get_name().to_string(),
                    flag,
                    id: id.clone(),
                    visible,
                })
            };
            if let Some(s) = arg.get_short() {
                push(format!("-{s}"), true);
            }
            let visible_shorts = arg.get_visible_short_aliases().unwrap_or_default();
            for s in arg.get_all_short_aliases().unwrap_or_default() {
                push(format!("-{s}"), visible_shorts.contains(&s));
            }
            if let Some(l) = arg.get_long() {
                push(format!("--{l}"), true);
            }
            let visible_longs = arg.get_visible_aliases().unwrap_or_default();
            for l in arg.get_all_aliases().unwrap_or_default() {
                push(format!("--{l}"), visible_longs.contains(&l));
            }
        }
    }
    out
}

#[test]
fn a_visible_flag_means_one_thing_in_every_command() {
    let all = flags();
    let mut meanings: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for f in all.iter().filter(|f| f.visible) {
        meanings
            .entry(&f.flag)
            .or_default()
            .insert((&f.id, &f.command));
    }
    let mut clashes = Vec::new();
    for (flag, uses) in &meanings {
        let ids: BTreeSet<&str> = uses.iter().map(|(id, _)| *id).collect();
        if ids.len() > 1 {
            clashes.push(format!("{flag}: {uses:?}"));
        }
    }
    assert!(
        clashes.is_empty(),
        "one flag, several meanings:\n{}",
        clashes.join("\n")
    );
}

#[test]
fn a_concept_has_one_short_flag() {
    let all = flags();
    let mut shorts: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
    for f in all
        .iter()
        .filter(|f| f.visible && !f.flag.starts_with("--"))
    {
        shorts
            .entry(&f.id)
            .or_default()
            .insert((&f.flag, &f.command));
    }
    let mut split = Vec::new();
    for (id, uses) in &shorts {
        let flags: BTreeSet<&str> = uses.iter().map(|(f, _)| *f).collect();
        if flags.len() > 1 {
            split.push(format!("{id}: {uses:?}"));
        }
    }
    assert!(
        split.is_empty(),
        "one concept, several short flags:\n{}",
        split.join("\n")
    );
}

#[test]
fn a_hidden_alias_with_another_meaning_is_an_allowed_clash() {
    let all = flags();
    let visible: BTreeMap<&str, &str> = all
        .iter()
        .filter(|f| f.visible)
        .map(|f| (f.flag.as_str(), f.id.as_str()))
        .collect();
    let mut hidden_ids: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for f in all.iter().filter(|f| !f.visible) {
        hidden_ids.entry(&f.flag).or_default().insert(&f.id);
    }
    let mut used = BTreeSet::new();
    let mut unjustified = Vec::new();
    for f in all.iter().filter(|f| !f.visible) {
        let other_meaning = visible.get(f.flag.as_str()).is_some_and(|id| *id != f.id)
            || hidden_ids[f.flag.as_str()].len() > 1;
        if !other_meaning {
            continue;
        }
        match CLASHES
            .iter()
            .find(|(c, fl, _)| *c == f.command && *fl == f.flag)
        {
            Some(entry) => {
                used.insert((entry.0, entry.1));
            }
            None => unjustified.push(format!("{} {} (sets {})", f.command, f.flag, f.id)),
        }
    }
    assert!(
        unjustified.is_empty(),
        "hidden aliases meaning something else elsewhere, not in CLASHES:\n{}",
        unjustified.join("\n")
    );
    let stale: Vec<_> = CLASHES
        .iter()
        .filter(|(c, f, _)| !used.contains(&(*c, *f)))
        .collect();
    assert!(
        stale.is_empty(),
        "CLASHES entries that clash no more: {stale:?}"
    );
}

/// docs/cli.md's alias table: (old command line, current command line), after `latscope`.
fn documented_aliases() -> Vec<(String, String)> {
    let doc = include_str!("../../docs/cli.md");
    let section = doc
        .split("## Old and peer spellings")
        .nth(1)
        .expect("docs/cli.md has its alias table");
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let code = |s: &str| s.strip_prefix('`')?.strip_suffix('`').map(str::to_string);
            Some((code(cells.get(1)?)?, code(cells.get(2)?)?))
        })
        .collect()
}

fn parse(line: &str) -> String {
    let argv = std::iter::once("latscope").chain(line.split_whitespace());
    match Cli::try_parse_from(argv) {
        Ok(cli) => format!("{:?}", cli.command),
        Err(e) => panic!("`latscope {line}` does not parse: {e}"),
    }
}

#[test]
fn every_documented_alias_parses_as_its_current_spelling() {
    let rows = documented_aliases();
    assert!(rows.len() >= 20, "the alias table went missing: {rows:?}");
    for (old, new) in &rows {
        assert_ne!(old, new);
        assert_eq!(parse(old), parse(new), "`{old}` and `{new}` differ");
    }
}

#[test]
fn every_hidden_alias_is_documented() {
    let rows = documented_aliases();
    let mut missing = Vec::new();
    for f in flags().iter().filter(|f| !f.visible) {
        let documented = rows.iter().any(|(old, _)| {
            let mut words = old.split_whitespace();
            words.next() == Some(f.command.as_str()) && words.any(|w| w == f.flag)
        });
        if !documented {
            missing.push(format!("{} {}", f.command, f.flag));
        }
    }
    assert!(
        missing.is_empty(),
        "hidden aliases not in docs/cli.md: {missing:?}"
    );
}

/// The one-line usage error of `latscope ARGS`.
fn usage_error(line: &str) -> String {
    let argv = std::iter::once("latscope").chain(line.split_whitespace());
    match Cli::try_parse_from(argv) {
        Ok(cli) => panic!("`latscope {line}` parses: {cli:?}"),
        Err(e) => super::usage_error(&e),
    }
}

/// Clap's details survive latscope's one-line form: the list of missing arguments, the
/// accepted values and its "similar argument/subcommand" tips.
#[test]
fn usage_errors_keep_clap_details() {
    let cases: &[(&str, &[&str])] = &[
        (
            "capture",
            &["not provided: --interface <IFACE>, --write <FILE> (see --help)"],
        ),
        ("capture -I lo", &["not provided: --write <FILE> ("]),
        (
            "report",
            &["not provided: --output <FILE>, <RESULT.json>... ("],
        ),
        ("report r.json", &["not provided: --output <FILE> ("]),
        ("completions", &["not provided: <SHELL>"]),
        ("schema", &["not provided: <KIND>"]),
        (
            "rr 127.0.0.1 --duraton 1s",
            &[
                "'--duraton'",
                "tip: a similar argument exists: '--duration'",
            ],
        ),
        (
            "pnig 127.0.0.1",
            &["'pnig'", "tip: a similar subcommand exists: 'ping'"],
        ),
        ("completions bsh", &["[possible values: bash,"]),
    ];
    for (args, want) in cases {
        let line = usage_error(args);
        assert!(!line.contains('\n'), "`{args}`: {line:?}");
        for w in *want {
            assert!(line.contains(w), "`{args}`: {line:?} lacks {w:?}");
        }
    }
}

/// The after-help paragraphs of every command break their lines only where a sentence ends
/// (clap wraps them to the terminal): a hard break inside a sentence leaves a ragged line at
/// every width but the one it was written for. Indented lines (examples, tables) are exempt.
#[test]
fn help_paragraphs_break_only_between_sentences() {
    let mut cli = Cli::command();
    cli.build();
    let mut bad = Vec::new();
    for sub in cli.get_subcommands() {
        let Some(text) = sub.get_after_help().map(|t| t.to_string()) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            let prose = |l: &str| !l.trim().is_empty() && !l.starts_with(' ');
            let ends_sentence = |l: &str| {
                let l = l.trim_end();
                l.ends_with(['.', ':', '!', '?']) || l.ends_with(".)") || l.ends_with(".\"")
            };
            if prose(pair[0]) && prose(pair[1]) && !ends_sentence(pair[0]) {
                bad.push(format!("{}: {:?}", sub.get_name(), pair[0]));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "help lines broken inside a sentence:\n{}",
        bad.join("\n")
    );
}

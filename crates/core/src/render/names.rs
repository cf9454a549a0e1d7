//! The name-queries step's lookup as a table: each query, to which nameserver, how it was sent,
//! what came back and when (diagnose's human report).

use std::fmt::Write;

use super::{Page, Table};
use crate::model::names::{Answer, NameLookup};
use crate::units::format_ns;

/// Rows shown at most; the rest are counted.
const ROWS: usize = 24;

/// The lookup's queries under a heading with the resolver's configuration.
pub(crate) fn render_lookup(n: &NameLookup, out: &mut Page) {
    let opts = n.conf.options_line();
    let search = if n.conf.search.is_empty() {
        String::new()
    } else {
        format!("; search {}", n.conf.search.join(" "))
    };
    let _ = writeln!(
        out,
        "\n  Name lookup of {} (nameserver {}{search}{})",
        n.host,
        n.conf.nameserver_list(),
        if opts.is_empty() {
            String::new()
        } else {
            format!("; options {opts}")
        }
    );
    let f = |ns: u64| format_ns(ns as f64);
    let mut t = Table::new(&["name", "type", "server", "sent as", "answer", "time"]);
    t.drop_first(&["sent as", "server"]);
    for q in n.queries.iter().take(ROWS) {
        let time = if q.answer == Answer::NoAnswer && q.glibc_wait_ns > q.took_ns {
            format!("{} (glibc waits {})", f(q.took_ns), f(q.glibc_wait_ns))
        } else {
            f(q.took_ns)
        };
        t.row(vec![
            q.name.clone(),
            q.qtype.name().into(),
            q.server.ip().to_string(),
            q.mode.name().into(),
            q.answer.describe(),
            time,
        ]);
    }
    t.render("    ", out);
    if n.queries.len() > ROWS {
        let _ = writeln!(out, "    … and {} more queries", n.queries.len() - ROWS);
    }
    if n.wait.timeouts_first_ns > 0 {
        let _ = writeln!(
            out,
            "    glibc would wait {} for this lookup on a process's first lookup, {} on later ones",
            f(n.wait.first_ns),
            f(n.wait.later_ns)
        );
    }
}

//! Renderings of the result model. The human view and `--json` are made from the same struct.

/// Human rendering of `latscope analyze` (findings, counts, connections, the `--conn N` ladder).
pub mod analyze;
mod capture;
mod connect;
mod demo;
mod diagnose;
mod http;
mod names;
pub mod page;
/// Human rendering of ping and trace reports (shared with the report crate).
pub mod ping;
/// Human rendering of diagnose's round-trip accounts (shared with the report crate).
pub mod round_trips;
mod rr;
mod sockets;
/// Human rendering of stack reports (`latscope stack`, its `-r` snapshots, `--list-probes`).
pub mod stack;
/// Human rendering of stream reports (shared with the report crate).
pub mod stream;
pub mod table;

use std::io::{self, Write};

use serde::Serialize;

pub use page::Page;
pub use table::Table;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// Aligned tables and plain-language notes.
    #[default]
    Human,
    /// One JSON document at the end.
    Json,
    /// One JSON object per line: an event per interval, then `{"event":"summary",...}`.
    JsonLines,
}

/// A report that can be shown to a person.
pub trait Human {
    /// Write the human-readable rendering onto `out`, which fits it to the terminal: prose is
    /// wrapped when the page is finished, tables fit themselves ([`Table::render`]).
    fn render_human(&self, out: &mut Page);
}

/// "  address: 192.0.2.1 (of 2; 2001:db8::1 no answer …)" when a name was resolved; nothing for
/// a literal or a unix socket.
pub fn address_line(choice: Option<&crate::model::address::AddressChoice>, out: &mut Page) {
    use std::fmt::Write as _;
    if let Some(c) = choice.filter(|c| c.method != crate::model::address::ChoiceMethod::Literal) {
        let _ = writeln!(out, "  address: {}", c.describe());
    }
}

/// The human rendering of `report` fitted to `width` columns.
pub fn human_text<R: Human + ?Sized>(report: &R, width: usize) -> String {
    let mut page = Page::new(width);
    report.render_human(&mut page);
    page.finish()
}

/// Print `report` in `format` to `w`.
pub fn emit<R: Human + Serialize>(
    report: &R,
    format: OutputFormat,
    w: &mut dyn Write,
) -> io::Result<()> {
    match format {
        OutputFormat::Human => w.write_all(human_text(report, page::width()).as_bytes()),
        OutputFormat::Json => {
            serde_json::to_writer_pretty(&mut *w, report)?;
            writeln!(w)
        }
        OutputFormat::JsonLines => {
            let ev = crate::model::SummaryEvent {
                event: "summary".into(),
                report,
            };
            serde_json::to_writer(&mut *w, &ev)?;
            writeln!(w)
        }
    }
}

/// Write one `--json-lines` event.
pub fn emit_event<E: Serialize>(event: &E, w: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, event)?;
    writeln!(w)?;
    w.flush()
}

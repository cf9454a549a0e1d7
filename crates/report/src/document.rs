//! A result read back from its JSON: the header decides the kind and whether this version can
//! read it, then the body is deserialised into the real model type, so the report tracks the
//! contract (`schema/*.json`) instead of guessing at fields.

use latscope_core::model::connect::ConnectReport;
use latscope_core::model::diagnose::DiagnoseReport;
use latscope_core::model::http::HttpReport;
use latscope_core::model::ping::{PingReport, TraceReport};
use latscope_core::model::rr::RrReport;
use latscope_core::model::stream::StreamReport;
use latscope_core::model::{Meta, SCHEMA_VERSION};
use latscope_ebpf::report::StackReport;
use latscope_wire::report::AnalyzeReport;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::ReportError;

/// The commands whose results can be drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `latscope rr`.
    Rr,
    /// `latscope http`.
    Http,
    /// `latscope connect`.
    Connect,
    /// `latscope ping`.
    Ping,
    /// `latscope diagnose`.
    Diagnose,
    /// `latscope stream`.
    Stream,
    /// `latscope stack`.
    Stack,
    /// `latscope analyze`.
    Analyze,
    /// `latscope trace`.
    Trace,
}

impl Kind {
    /// Every kind, in the order the help lists them.
    pub const ALL: [Kind; 9] = [
        Kind::Rr,
        Kind::Http,
        Kind::Connect,
        Kind::Ping,
        Kind::Diagnose,
        Kind::Stream,
        Kind::Stack,
        Kind::Analyze,
        Kind::Trace,
    ];

    /// The subcommand name, as `meta.command` spells it.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Rr => "rr",
            Kind::Http => "http",
            Kind::Connect => "connect",
            Kind::Ping => "ping",
            Kind::Diagnose => "diagnose",
            Kind::Stream => "stream",
            Kind::Stack => "stack",
            Kind::Analyze => "analyze",
            Kind::Trace => "trace",
        }
    }

    fn from_command(command: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.command() == command)
    }

    /// "rr, http, …" for messages.
    pub fn supported() -> String {
        Kind::ALL.map(Kind::command).join(", ")
    }
}

/// One command's result.
#[derive(Clone, Debug)]
#[allow(missing_docs)]
// each variant is its command's report
// Made once per input file: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Document {
    Rr(RrReport),
    Http(HttpReport),
    Connect(ConnectReport),
    Ping(PingReport),
    Diagnose(DiagnoseReport),
    Stream(StreamReport),
    Stack(StackReport),
    Analyze(AnalyzeReport),
    Trace(TraceReport),
}

/// A result and what to call it on the page (usually its file name).
#[derive(Clone, Debug)]
pub struct Input {
    /// Label in headings, legends and the comparison table.
    pub name: String,
    /// The result.
    pub doc: Document,
}

/// Only the header fields, each optional, so a foreign or damaged file gets a precise error.
#[derive(Deserialize)]
struct Header {
    tool: Option<String>,
    schema_version: Option<u32>,
    command: Option<String>,
}

impl Document {
    /// Read the output of `latscope COMMAND --json` (or the summary line of `--json-lines`).
    pub fn parse(text: &str) -> Result<Document, ReportError> {
        let value = whole_or_summary_line(text)?;
        let header = value
            .get("meta")
            .and_then(|m| Header::deserialize(m).ok())
            .filter(|h| h.tool.as_deref() == Some("latscope"))
            .ok_or(ReportError::NotLatscope)?;
        let command = header.command.unwrap_or_default();
        let kind = Kind::from_command(&command).ok_or_else(|| ReportError::UnknownKind {
            command: command.clone(),
        })?;
        if let Some(found) = header.schema_version.filter(|&v| v > SCHEMA_VERSION) {
            return Err(ReportError::NewerSchema {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(match kind {
            Kind::Rr => Document::Rr(typed(value, &command)?),
            Kind::Http => Document::Http(typed(value, &command)?),
            Kind::Connect => Document::Connect(typed(value, &command)?),
            Kind::Ping => Document::Ping(typed(value, &command)?),
            Kind::Diagnose => Document::Diagnose(typed(value, &command)?),
            Kind::Stream => Document::Stream(typed(value, &command)?),
            Kind::Stack => Document::Stack(typed(value, &command)?),
            Kind::Analyze => Document::Analyze(typed(value, &command)?),
            Kind::Trace => Document::Trace(typed(value, &command)?),
        })
    }

    /// Which command produced it.
    pub fn kind(&self) -> Kind {
        match self {
            Document::Rr(_) => Kind::Rr,
            Document::Http(_) => Kind::Http,
            Document::Connect(_) => Kind::Connect,
            Document::Ping(_) => Kind::Ping,
            Document::Diagnose(_) => Kind::Diagnose,
            Document::Stream(_) => Kind::Stream,
            Document::Stack(_) => Kind::Stack,
            Document::Analyze(_) => Kind::Analyze,
            Document::Trace(_) => Kind::Trace,
        }
    }

    /// The header every report carries.
    pub fn meta(&self) -> &Meta {
        match self {
            Document::Rr(r) => &r.meta,
            Document::Http(r) => &r.meta,
            Document::Connect(r) => &r.meta,
            Document::Ping(r) => &r.meta,
            Document::Diagnose(r) => &r.meta,
            Document::Stream(r) => &r.meta,
            Document::Stack(r) => &r.meta,
            Document::Analyze(r) => &r.meta,
            Document::Trace(r) => &r.meta,
        }
    }
}

/// `--json` is one document; `--json-lines` ends with `{"event":"summary","report":{…}}`.
fn whole_or_summary_line(text: &str) -> Result<serde_json::Value, ReportError> {
    let whole = serde_json::from_str::<serde_json::Value>(text);
    let value = match whole {
        Ok(v) => v,
        Err(e) => {
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            match last.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
                Some(v) if v.get("event").and_then(|e| e.as_str()) == Some("summary") => v,
                _ => return Err(ReportError::NotJson(e)),
            }
        }
    };
    match value.get("event").and_then(|e| e.as_str()) {
        Some("summary") => Ok(value.get("report").cloned().unwrap_or_default()),
        _ => Ok(value),
    }
}

fn typed<T: DeserializeOwned>(value: serde_json::Value, command: &str) -> Result<T, ReportError> {
    serde_json::from_value(value).map_err(|source| ReportError::Invalid {
        command: command.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(command: &str, version: u32) -> String {
        format!(
            r#"{{"meta":{{"tool":"latscope","version":"9","schema_version":{version},"command":"{command}","started_unix_ms":0}}}}"#
        )
    }

    #[test]
    fn unknown_kind_is_named() {
        let e = Document::parse(&meta("frobnicate", 1)).unwrap_err();
        assert!(matches!(e, ReportError::UnknownKind { ref command } if command == "frobnicate"));
        assert!(e.to_string().contains("supported: rr, http"));
    }

    #[test]
    fn newer_schema_is_refused() {
        let e = Document::parse(&meta("rr", SCHEMA_VERSION + 1)).unwrap_err();
        assert!(matches!(e, ReportError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1));
    }

    #[test]
    fn foreign_json_and_non_json() {
        assert!(matches!(
            Document::parse(r#"{"hello":1}"#),
            Err(ReportError::NotLatscope)
        ));
        assert!(matches!(
            Document::parse("not json"),
            Err(ReportError::NotJson(_))
        ));
    }

    #[test]
    fn body_mismatch_names_the_command() {
        let e = Document::parse(&meta("rr", 1)).unwrap_err();
        assert!(matches!(e, ReportError::Invalid { ref command, .. } if command == "rr"));
    }
}

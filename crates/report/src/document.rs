//! A result read back from its JSON: the header decides the kind and whether this version can
//! read it, then the body is deserialised into the real model type, so the report tracks the
//! contract (`schema/*.json`) instead of guessing at fields.

use latscope_core::model::analyze::AnalyzeReport;
use latscope_core::model::connect::ConnectReport;
use latscope_core::model::diagnose::DiagnoseReport;
use latscope_core::model::http::HttpReport;
use latscope_core::model::ping::{PingReport, TraceReport};
use latscope_core::model::rr::RrReport;
use latscope_core::model::stack::StackReport;
use latscope_core::model::stream::StreamReport;
use latscope_core::model::{Meta, SCHEMA_VERSION};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::ReportError;
use crate::page::Page;

/// The registry of report pages: `Variant(model type) = "result kind"`, one line per page. It
/// makes [`Kind`] (with `ALL`, in this order), [`Document`] and their dispatch; the page itself
/// is the model type's [`Page`] impl in `kind/<name>.rs`. Each name is a
/// result kind of `latscope_core::registry::KINDS` of the same model type (a test checks).
macro_rules! pages {
    ($($variant:ident($model:ty) = $name:literal,)*) => {
        /// The commands whose results can be drawn.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind {
            $(
                #[doc = concat!("`latscope ", $name, "`.")]
                $variant,
            )*
        }

        impl Kind {
            /// Every kind, in the order the help lists them.
            pub const ALL: [Kind; [$($name),*].len()] = [$(Kind::$variant),*];

            /// The subcommand name, as `meta.command` spells it.
            pub fn command(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }
        }

        /// One command's result.
        #[derive(Clone, Debug)]
        // Made once per input file: the size of the largest variant does not matter.
        #[allow(clippy::large_enum_variant)]
        pub enum Document {
            $(
                #[doc = concat!("The result of `latscope ", $name, "`.")]
                $variant($model),
            )*
        }

        impl Document {
            /// The body of a kind's document, typed.
            fn typed(kind: Kind, value: serde_json::Value, command: &str) -> Result<Document, ReportError> {
                Ok(match kind {
                    $(Kind::$variant => Document::$variant(typed(value, command)?),)*
                })
            }

            /// Which command produced it.
            pub fn kind(&self) -> Kind {
                match self {
                    $(Document::$variant(_) => Kind::$variant,)*
                }
            }

            /// The header every report carries.
            pub fn meta(&self) -> &Meta {
                match self {
                    $(Document::$variant(r) => &r.meta,)*
                }
            }

            /// Its page.
            pub(crate) fn page(&self) -> &dyn Page {
                match self {
                    $(Document::$variant(r) => r,)*
                }
            }
        }

        /// Whether every page's name is a result kind of the core registry with the same model.
        #[cfg(test)]
        fn pages_are_registered_kinds() -> Vec<String> {
            let mut wrong = Vec::new();
            $(
                match latscope_core::registry::kind($name) {
                    Some(k) if k.is::<$model>() => {}
                    _ => wrong.push($name.to_string()),
                }
            )*
            wrong
        }
    };
}

pages! {
    Rr(RrReport) = "rr",
    Http(HttpReport) = "http",
    Connect(ConnectReport) = "connect",
    Ping(PingReport) = "ping",
    Diagnose(DiagnoseReport) = "diagnose",
    Stream(StreamReport) = "stream",
    Stack(StackReport) = "stack",
    Analyze(AnalyzeReport) = "analyze",
    Trace(TraceReport) = "trace",
}

impl Kind {
    fn from_command(command: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.command() == command)
    }

    /// "rr, http, …" for messages.
    pub fn supported() -> String {
        Kind::ALL.map(Kind::command).join(", ")
    }
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
            supported: Kind::supported(),
        })?;
        if let Some(found) = header.schema_version.filter(|&v| v > SCHEMA_VERSION) {
            return Err(ReportError::NewerSchema {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Document::typed(kind, value, &command)
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
    fn every_page_is_a_registered_result_kind_of_its_model() {
        assert_eq!(pages_are_registered_kinds(), Vec::<String>::new());
    }

    #[test]
    fn unknown_kind_is_named() {
        let e = Document::parse(&meta("frobnicate", 1)).unwrap_err();
        assert!(
            matches!(e, ReportError::UnknownKind { ref command, .. } if command == "frobnicate")
        );
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

//! latscope's registries: each thing that other code, `--help`, the schemas or the docs list is
//! listed once, here or in the enum that names it, and every other list is generated from it
//! (or compared with it by a test).
//!
//! - [`KINDS`]: the result kinds — every document latscope prints with `--json` or
//!   `--json-lines`: its name, what it is, its JSON schema and its human view.
//!   `latscope schema` lists and prints them, the HTML report's pages are checked against them,
//!   the render tests draw every example through them.
//! - [`RuleId`](crate::model::diagnose::RuleId): diagnose's rules, each with its JSON name and
//!   its description (the doc comment, which is also the schema's), declared through
//!   [`registry_enum!`](crate::named); the rule itself and the sides it blames are registered
//!   beside its code (`latscope_diagnose::rules::RULES`).
//! - [`StallKind`](crate::model::analyze::StallKind): the analyzer's stall kinds, each with its
//!   JSON name, label and explanation.
//!
//! A stall kind and a rule may share a name (`nagle_delayed_ack`, `think_time`, …) without being
//! the same thing: a stall is one pattern seen in one capture, timed per occurrence; a rule is a
//! cause judged from a whole run's evidence, of which a capture's stalls are one part.
//! [`StallKind::rule`](crate::model::analyze::StallKind::rule) says which rule each stall is
//! evidence for.

use std::any::TypeId;

use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;

use crate::model;
use crate::render::{Human, human_text};

/// A kind's human view: a document of the kind as JSON text and a width in, the text out.
type HumanView = fn(&str, usize) -> Result<String, serde_json::Error>;

/// One kind of document latscope prints.
#[derive(Clone, Copy)]
pub struct ResultKind {
    /// `latscope schema NAME` and the committed `schema/NAME.schema.json`; for a command's
    /// result, also the `meta.command` it carries.
    pub name: &'static str,
    /// One line for `latscope schema --help`.
    pub about: &'static str,
    schema: fn() -> Schema,
    human: Option<HumanView>,
    type_id: fn() -> TypeId,
}

impl std::fmt::Debug for ResultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl ResultKind {
    /// Its JSON schema.
    pub fn schema(&self) -> Schema {
        (self.schema)()
    }

    /// Its JSON schema as pretty JSON text, as `latscope schema` prints it.
    pub fn schema_text(&self) -> String {
        serde_json::to_string_pretty(&self.schema()).unwrap_or_default()
    }

    /// Whether `T` is the model type of this kind's documents.
    pub fn is<T: 'static>(&self) -> bool {
        (self.type_id)() == TypeId::of::<T>()
    }

    /// Whether it has a human view (a command's result has; a `--json-lines` event has not).
    pub fn has_human(&self) -> bool {
        self.human.is_some()
    }

    /// The human view of `json` (a document of this kind) at `width` columns; `None` for a kind
    /// without one.
    pub fn render_human(
        &self,
        json: &str,
        width: usize,
    ) -> Option<Result<String, serde_json::Error>> {
        self.human.map(|h| h(json, width))
    }
}

fn schema_of<T: JsonSchema>() -> Schema {
    schemars::schema_for!(T)
}

fn human_of<T: DeserializeOwned + Human>(
    json: &str,
    width: usize,
) -> Result<String, serde_json::Error> {
    let doc: T = serde_json::from_str(json)?;
    Ok(human_text(&doc, width))
}

/// A command's result: a schema and a human view.
const fn result<T: JsonSchema + DeserializeOwned + Human + 'static>(
    name: &'static str,
    about: &'static str,
) -> ResultKind {
    ResultKind {
        name,
        about,
        schema: schema_of::<T>,
        human: Some(human_of::<T>),
        type_id: TypeId::of::<T>,
    }
}

/// A document without a human view of its own (a `--json-lines` event, an exchange's message).
const fn document<T: JsonSchema + 'static>(name: &'static str, about: &'static str) -> ResultKind {
    ResultKind {
        name,
        about,
        schema: schema_of::<T>,
        human: None,
        type_id: TypeId::of::<T>,
    }
}

/// Every result kind, in the order `latscope schema --help` lists them. A new kind is its model
/// (`model/<family>.rs`, with its `Human` impl in `render/`) and one line here; then commit
/// `latscope schema NAME > schema/NAME.schema.json` (the schema test says so until you do).
pub const KINDS: &[ResultKind] = &[
    result::<model::rr::RrReport>("rr", "`latscope rr`: request/response latency"),
    result::<model::connect::ConnectReport>("connect", "`latscope connect`: connection set-up"),
    result::<model::demo::DemoReport>("demo", "`latscope demo`: a diagnosis of a built-in fault"),
    result::<model::diagnose::DiagnoseReport>(
        "diagnose",
        "`latscope diagnose`: findings with evidence",
    ),
    result::<model::stream::StreamReport>("stream", "`latscope stream`: throughput"),
    document::<model::stream::StreamInterval>(
        "stream-interval",
        "one `stream --json-lines` interval event",
    ),
    result::<model::http::HttpReport>("http", "`latscope http`: HTTP load"),
    document::<model::IntervalEvent>("interval", "one `--json-lines` interval event (rr, http)"),
    result::<model::ping::PingReport>("ping", "`latscope ping`"),
    result::<model::ping::TraceReport>("trace", "`latscope trace`"),
    result::<model::sockets::SocketsReport>(
        "sockets",
        "`latscope sockets`: other processes' sockets",
    ),
    document::<model::sockets::SetsockoptEvent>("setsockopt", "one `sockets --watch` event"),
    result::<model::stack::StackReport>("stack", "`latscope stack`: kernel-stack latency"),
    document::<model::stack::StackInterval>(
        "stack-interval",
        "one `stack --json-lines` interval event",
    ),
    result::<model::analyze::AnalyzeReport>("analyze", "`latscope analyze`: stalls in a capture"),
    result::<model::capture::CaptureReport>("capture", "`latscope capture`"),
    document::<model::evidence::ServerEvidence>(
        "evidence",
        "What a server's agent answers `diagnose --server-agent` with",
    ),
];

/// The kind named `name`.
pub fn kind(name: &str) -> Option<&'static ResultKind> {
    KINDS.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_unique_and_found() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(KINDS[..i].iter().all(|o| o.name != k.name), "{k:?} twice");
            assert_eq!(kind(k.name).map(|f| f.name), Some(k.name));
            assert!(!k.about.is_empty(), "{k:?}");
        }
        assert!(kind("frobnicate").is_none());
    }

    #[test]
    fn a_kind_renders_its_own_documents_and_refuses_others() {
        let rr = kind("rr").expect("rr");
        assert!(rr.has_human());
        assert!(rr.render_human("{}", 80).is_some_and(|r| r.is_err()));
        let interval = kind("interval").expect("interval");
        assert!(!interval.has_human());
        assert!(interval.render_human("{}", 80).is_none());
        assert!(rr.schema_text().contains("\"RrReport\""));
        assert!(rr.is::<model::rr::RrReport>() && !rr.is::<model::IntervalEvent>());
    }
}

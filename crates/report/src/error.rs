//! What can go wrong reading a result or drawing its page.

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Nothing to render.
    #[error(
        "no result to render: give one or more JSON files written by `latscope COMMAND --json`"
    )]
    NoInput,
    /// Not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// JSON without latscope's `meta` header.
    #[error(
        "not a latscope result: no meta.tool = \"latscope\" (write it with `latscope COMMAND --json`)"
    )]
    NotLatscope,
    /// A command this version cannot draw.
    #[error("no report for `{command}` results (supported: {supported})")]
    UnknownKind {
        /// `meta.command` as found.
        command: String,
        /// The kinds this version draws, for the message.
        supported: String,
    },
    /// Written by a newer latscope whose contract this version does not know.
    #[error(
        "schema version {found} is newer than this latscope understands ({supported}): render it with a newer latscope"
    )]
    NewerSchema {
        /// `meta.schema_version` as found.
        found: u32,
        /// [`latscope_core::model::SCHEMA_VERSION`].
        supported: u32,
    },
    /// The header is fine but the body does not match the model.
    #[error("a `{command}` result that does not match its schema: {source}")]
    Invalid {
        /// `meta.command`.
        command: String,
        /// serde's description, with the field path.
        #[source]
        source: serde_json::Error,
    },
    /// `--compare` with results of different commands.
    #[error(
        "cannot compare results of different commands: '{first}' is `{first_kind}`, '{other}' is `{other_kind}` (compare results of one command, e.g. two `rr` runs)"
    )]
    MixedKinds {
        /// The first input's name.
        first: String,
        /// Its command.
        first_kind: &'static str,
        /// The first input of another kind.
        other: String,
        /// Its command.
        other_kind: &'static str,
    },
    /// `--compare` with fewer than two inputs, or an input without a distribution to compare.
    #[error("nothing to compare: {0}")]
    NotComparable(String),
    /// plotters failed to draw (writing to a string: only on a bug).
    #[error("drawing a plot failed: {0}")]
    Plot(String),
}

//! `latscope schema COMMAND`: the JSON schema of a command's `--json` document.

use clap::{Args, ValueEnum};
use latscope_core::model;
use schemars::schema_for;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchemaKind {
    Rr,
    Connect,
    Demo,
    Diagnose,
    Stream,
    StreamInterval,
    Http,
    Interval,
    Ping,
    Trace,
    Sockets,
    Setsockopt,
    Stack,
    StackInterval,
    Analyze,
    Capture,
    /// What a server's agent answers `diagnose --server-agent` with.
    Evidence,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  latscope schema rr > rr.schema.json\n  latscope schema interval   # one --json-lines interval event"
)]
pub struct SchemaArgs {
    /// Which document.
    pub kind: SchemaKind,
}

/// The schema as pretty JSON text.
pub fn schema_text(kind: SchemaKind) -> String {
    let schema = match kind {
        SchemaKind::Rr => schema_for!(model::rr::RrReport),
        SchemaKind::Connect => schema_for!(model::connect::ConnectReport),
        SchemaKind::Demo => schema_for!(model::demo::DemoReport),
        SchemaKind::Diagnose => schema_for!(model::diagnose::DiagnoseReport),
        SchemaKind::Stream => schema_for!(model::stream::StreamReport),
        SchemaKind::StreamInterval => schema_for!(model::stream::StreamInterval),
        SchemaKind::Http => schema_for!(model::http::HttpReport),
        SchemaKind::Interval => schema_for!(model::IntervalEvent),
        SchemaKind::Ping => schema_for!(model::ping::PingReport),
        SchemaKind::Trace => schema_for!(model::ping::TraceReport),
        SchemaKind::Sockets => schema_for!(model::sockets::SocketsReport),
        SchemaKind::Setsockopt => schema_for!(model::sockets::SetsockoptEvent),
        SchemaKind::Stack => schema_for!(latscope_ebpf::report::StackReport),
        SchemaKind::StackInterval => schema_for!(latscope_ebpf::report::StackInterval),
        SchemaKind::Analyze => schema_for!(latscope_wire::report::AnalyzeReport),
        SchemaKind::Capture => schema_for!(latscope_wire::report::CaptureReport),
        SchemaKind::Evidence => schema_for!(latscope_diagnose::remote::ServerEvidence),
    };
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}

pub fn run(args: &SchemaArgs) -> anyhow::Result<u8> {
    println!("{}", schema_text(args.kind));
    Ok(crate::exit::OK)
}

//! `latscope schema KIND`: the JSON schema of a command's `--json` document, one of the result
//! kinds of the registry (`latscope_core::registry::KINDS`).

use clap::Args;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use latscope_core::registry::{KINDS, ResultKind};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  latscope schema rr > rr.schema.json\n  latscope schema interval   # one --json-lines interval event"
)]
pub struct SchemaArgs {
    /// Which document.
    #[arg(value_parser = kind_parser())]
    pub kind: &'static ResultKind,
}

/// The kinds as clap's possible values (so `--help`, completions and the error for an unknown
/// kind list them), parsed into the registry's entry.
fn kind_parser() -> impl TypedValueParser<Value = &'static ResultKind> {
    PossibleValuesParser::new(
        KINDS
            .iter()
            .map(|k| PossibleValue::new(k.name).help(k.about)),
    )
    .try_map(|name| {
        latscope_core::registry::kind(&name).ok_or_else(|| format!("no result kind '{name}'"))
    })
}

pub fn run(args: &SchemaArgs) -> anyhow::Result<u8> {
    println!("{}", args.kind.schema_text());
    Ok(crate::exit::OK)
}

//! `latscope report RESULT.json [MORE.json …] -o report.html`: one self-contained HTML page with
//! plots from the `--json` output of other commands (crates/report), and the `--report FILE`
//! hook the measuring commands share.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use latscope_report::{Document, Input, ReportError};

use crate::exit::{USAGE, coded};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
latscope rr 10.0.0.2 --json > rr.json && latscope report rr.json -o rr.html\n  \
latscope report before.json after.json -o compare.html   # overlaid spectra + ratio table\n  \
latscope report --compare a.json b.json c.json -o cmp.html # refuse unless all three compare\n  \
latscope http http://10.0.0.2/ -d 60s --report http.html # or straight from the run\n\n\
Results of rr, http, connect, ping, diagnose, stream, stack, analyze and trace are drawn (the --json document, or the \
last line of --json-lines). The page needs no network to view: CSS and SVG plots are inline.")]
pub struct ReportArgs {
    /// Result files written with `latscope COMMAND --json` (two or more of one kind are also
    /// compared).
    #[arg(required = true, value_name = "RESULT.json")]
    pub inputs: Vec<PathBuf>,
    /// Where to write the page (`-` for stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Insist on a comparison: every input must be a result of the same command with a latency
    /// distribution to overlay (otherwise exit 2 naming the odd one out).
    #[arg(long)]
    pub compare: bool,
}

pub fn run(a: &ReportArgs) -> anyhow::Result<u8> {
    let mut inputs = Vec::with_capacity(a.inputs.len());
    for path in &a.inputs {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading '{}'", path.display()))
            .map_err(|e| coded(USAGE, format!("{e:#}")))?;
        if latscope_wire::capfile::is_capture(&bytes) {
            return Err(coded(
                USAGE,
                format!(
                    "'{}' is a capture, not a result: run `latscope analyze {0} --json > analyze.json` first and report that",
                    path.display()
                ),
            ));
        }
        let text = String::from_utf8(bytes)
            .with_context(|| format!("reading '{}'", path.display()))
            .map_err(|e| coded(USAGE, format!("{e:#}")))?;
        let doc = Document::parse(&text).map_err(|e| usage(path, &e))?;
        inputs.push(Input {
            name: display_name(path),
            doc,
        });
    }
    if a.compare {
        latscope_report::check_comparable(&inputs).map_err(|e| coded(USAGE, e.to_string()))?;
    }
    write_page(&inputs, &a.output)?;
    Ok(crate::exit::OK)
}

/// Render `inputs` into the file at `out` (`-`: stdout).
pub fn write_page(inputs: &[Input], out: &Path) -> anyhow::Result<()> {
    let html = latscope_report::render(inputs).map_err(|e| coded(USAGE, e.to_string()))?;
    if out == Path::new("-") {
        use std::io::Write;
        std::io::stdout().write_all(html.as_bytes())?;
        return Ok(());
    }
    std::fs::write(out, html).with_context(|| format!("writing '{}'", out.display()))
}

/// `--report FILE` of a measuring command: the page of the result it just measured.
pub fn write_one(doc: Document, out: &Path) -> anyhow::Result<()> {
    let name = format!("{} run", doc.kind().command());
    write_page(&[Input { name, doc }], out)
}

fn usage(path: &Path, e: &ReportError) -> anyhow::Error {
    coded(USAGE, format!("'{}': {e}", path.display()))
}

fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `--report FILE` of the long-running commands: the page `latscope report` would draw from the
/// `--json` output, written straight after the run (interrupted runs included).
#[derive(Args, Debug, Clone, Default)]
pub struct ReportFile {
    /// Also write the result as one self-contained HTML page with plots (what `latscope report`
    /// draws from --json).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

impl ReportFile {
    /// Write the page of `result` when `--report` was given. The result goes through its JSON
    /// form, so the page is exactly what `latscope report` makes of the `--json` output.
    pub fn write<R: serde::Serialize>(&self, result: &R) -> anyhow::Result<()> {
        let Some(path) = &self.report else {
            return Ok(());
        };
        let json = serde_json::to_string(result).context("serialising the result")?;
        let doc = Document::parse(&json).map_err(|e| coded(USAGE, e.to_string()))?;
        write_one(doc, path)
    }
}

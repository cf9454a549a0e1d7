//! The live terminal view (`latscope-tui`) of the long runs (http, rr, stream, stack): when it is
//! shown, and starting it. It replaces the one-line progress while it is up.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Args;
use std::io::Write;

use anyhow::Context;
use latscope_core::render::{Human, OutputFormat, emit};
use latscope_tui::{Keys, LiveState, LiveView};

use crate::output::OutputArgs;
use crate::progress::Progress;

/// The output options of the long runs (http, rr, stream, stack): the format, the live view and
/// `--report FILE`.
#[derive(Args, Debug, Clone, Default)]
pub struct LongRunOutput {
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub report: crate::cmd::report::ReportFile,
}

impl LongRunOutput {
    /// Start the live view when it is wanted (see [`LiveArgs::start`]).
    pub fn start_live(&self, state: LiveState, stop: &Arc<AtomicBool>) -> Option<LiveView> {
        self.live.start(&self.output, state, stop)
    }

    /// The one-line progress, drawn when the live view is not up and stderr is a terminal.
    pub fn progress(&self, live: &Option<LiveView>, prefix: &str) -> Progress {
        Progress::new(self.output.progress() && live.is_none(), prefix)
    }

    /// After the engine: the progress line and the live view give the screen back (also on an
    /// error), then the result is printed ([`Self::print`]).
    pub fn finish<R, E>(
        &self,
        progress: Progress,
        live: Option<LiveView>,
        result: Result<R, E>,
    ) -> anyhow::Result<R>
    where
        R: Human + serde::Serialize,
        E: std::error::Error + Send + Sync + 'static,
    {
        drop(progress);
        drop(live);
        let result = result?;
        self.print(&result)?;
        Ok(result)
    }

    /// Print the finished result on stdout in the chosen format, then write `--report FILE`.
    pub fn print<R: Human + serde::Serialize>(&self, result: &R) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        emit(result, self.output.format(), &mut out).context("cannot write the report")?;
        out.flush()?;
        self.report.write(result)
    }
}

/// `--no-tui`, flattened into the commands that have a live view.
#[derive(Args, Debug, Clone, Default)]
pub struct LiveArgs {
    /// Never show the live terminal view (rate, percentiles so far, histogram, time left). It is
    /// shown only when stdout is a terminal and the output is for people (not --json or
    /// --no-progress).
    #[arg(long)]
    pub no_tui: bool,
}

impl LiveArgs {
    /// Whether this run gets the live view.
    pub fn wanted(&self, output: &OutputArgs) -> bool {
        // --no-progress asks for no live drawing at all: the view is one too.
        !self.no_tui
            && !output.no_progress
            && output.format() == OutputFormat::Human
            && latscope_tui::stdout_can_draw()
    }

    /// Start the view when it is wanted. A terminal that refuses (no raw mode) costs only the
    /// view: one note on stderr, and the run goes on with the progress line.
    pub fn start(
        &self,
        output: &OutputArgs,
        state: LiveState,
        stop: &Arc<AtomicBool>,
    ) -> Option<LiveView> {
        if !self.wanted(output) {
            return None;
        }
        let keys = Keys {
            second_interrupt_exit: Some(i32::from(crate::exit::INTERRUPTED)),
        };
        match LiveView::start(state, stop.clone(), keys) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("latscope: no live view ({e}); --no-tui skips it");
                None
            }
        }
    }
}

//! The live terminal view (`latscope-tui`) of the long runs (http, rr, stream, stack): when it is
//! shown, and starting it. It replaces the one-line progress while it is up.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Args;
use latscope_core::render::OutputFormat;
use latscope_tui::{Keys, LiveState, LiveView};

use crate::output::OutputArgs;

/// `--no-tui`, flattened into the commands that have a live view.
#[derive(Args, Debug, Clone, Default)]
pub struct LiveArgs {
    /// Never show the live terminal view (rate, percentiles so far, histogram, time left). It is
    /// shown only when stdout is a terminal and the output is for people (not --json).
    #[arg(long)]
    pub no_tui: bool,
}

impl LiveArgs {
    /// Whether this run gets the live view.
    pub fn wanted(&self, output: &OutputArgs) -> bool {
        !self.no_tui && output.format() == OutputFormat::Human && latscope_tui::stdout_can_draw()
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

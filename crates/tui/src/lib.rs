#![warn(missing_docs)]
//! latscope's live terminal view, drawn with `ratatui` while a long run goes on (http, rr,
//! stream, stack): the current rate, the percentiles so far, a latency histogram, sparklines of
//! the rate and p99 per interval, and the progress and time left; `q` or Ctrl-C ends the run with
//! its partial results, and the terminal is always restored.
//!
//! The model ([`LiveState`]) is fed one interval at a time by the engines' existing interval
//! callbacks, so the view costs nothing per request; [`draw`] is a pure function of the model
//! (tested on ratatui's `TestBackend`), and [`LiveView`] owns the terminal from its own thread.

mod state;
mod term;
mod view;

pub use state::{Goal, HISTORY, LiveState, RateUnit, STOPPING, Tick};
pub use term::{Keys, LiveView, REDRAW, stdout_can_draw};
pub use view::{STOP_HINT, draw};

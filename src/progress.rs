//! The live progress line on stderr: shown only on a terminal, never mixed into JSON output.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use latscope_core::model::IntervalEvent;
use latscope_core::units::{format_ns, format_si};

/// A progress line, or nothing when progress is off.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// `enabled` comes from `OutputArgs::progress()`.
    pub fn new(enabled: bool, prefix: &str) -> Progress {
        if !enabled {
            return Progress(None);
        }
        let pb = ProgressBar::new_spinner();
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {prefix} {msg}")
        {
            pb.set_style(style);
        }
        pb.set_prefix(prefix.to_string());
        pb.enable_steady_tick(Duration::from_millis(120));
        Progress(Some(pb))
    }

    pub fn set(&self, msg: String) {
        if let Some(pb) = &self.0 {
            pb.set_message(msg);
        }
    }

    /// Show an interval's figures: rate and recent percentiles.
    pub fn interval(&self, ev: &IntervalEvent) {
        if self.0.is_some() {
            self.set(format!(
                "{}  {}/s  p50 {}  p99 {}{}",
                ev.label,
                format_si(ev.rate_per_sec),
                format_ns(ev.latency.p50_ns as f64),
                format_ns(ev.latency.p99_ns as f64),
                if ev.errors > 0 {
                    format!("  errors {}", ev.errors)
                } else {
                    String::new()
                }
            ));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(pb) = self.0.take() {
            pb.finish_and_clear();
        }
    }
}

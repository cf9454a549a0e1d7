//! The output options every measuring command shares.

use std::io::IsTerminal;

use clap::Args;
use latscope_core::render::{OutputFormat, page};

#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print one JSON document (schema: `latscope schema COMMAND`) instead of tables.
    #[arg(long, conflicts_with = "json_lines")]
    pub json: bool,
    /// Print one JSON object per line: an event per interval, then the summary.
    #[arg(long)]
    pub json_lines: bool,
    /// Never show the live progress line (shown only when stderr is a terminal), nor the live
    /// view of http, rr, stream and stack.
    #[arg(long)]
    pub no_progress: bool,
    /// Keep every column of the tables and do not wrap prose, even when lines get wider than the
    /// terminal (output that is not a terminal always has every column).
    #[arg(long)]
    pub wide: bool,
}

impl OutputArgs {
    pub fn format(&self) -> OutputFormat {
        if self.json {
            OutputFormat::Json
        } else if self.json_lines {
            OutputFormat::JsonLines
        } else {
            OutputFormat::Human
        }
    }

    /// Whether to draw progress: only for people (a terminal on stderr), never for JSON pipes.
    pub fn progress(&self) -> bool {
        !self.no_progress && std::io::stderr().is_terminal()
    }
}

/// The width human output fits to: every column with `--wide`, else `COLUMNS` when it holds a
/// number (as `ls` and Python's `shutil.get_terminal_size` do), else the terminal's width when
/// stdout is a terminal, else [`UNLIMITED`](page::UNLIMITED): a file or a pipe gets every column
/// (p99.9 and p99.99 too), as the reader or program behind it may want them.
pub fn terminal_width(wide: bool) -> usize {
    if wide {
        return page::UNLIMITED;
    }
    let columns = std::env::var("COLUMNS").ok();
    width_from(columns.as_deref(), stdout_columns())
}

/// [`terminal_width`]'s rule without `--wide`, given `COLUMNS` and the terminal's width.
fn width_from(columns: Option<&str>, tty: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or(tty)
        .unwrap_or(page::UNLIMITED)
}

/// The width of the terminal on stdout, if stdout is one that knows its size.
fn stdout_columns() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: an all-zero winsize is a valid value for the kernel to fill in.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize through the valid pointer and nothing else.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// Milliseconds since the Unix epoch, for report metadata.
pub use latscope_core::units::unix_ms;

/// The result of a write made while a run is going (a `--json-lines` event, a per-reply line):
/// if stdout's reader has gone (`latscope … | head`), ask the run to stop as Ctrl-C would. Its
/// final write then fails the same way and the process ends quietly with exit 0 (see
/// `main_with_args`). Other write errors are left to the final write to report.
pub fn live<T>(r: std::io::Result<T>, stop: &std::sync::atomic::AtomicBool) {
    if let Err(e) = r
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::width_from;

    #[test]
    fn width_follows_columns_then_the_terminal_then_no_limit() {
        use latscope_core::render::page::UNLIMITED;
        assert_eq!(width_from(Some("72"), Some(200)), 72);
        assert_eq!(width_from(Some("wide"), Some(132)), 132);
        assert_eq!(width_from(Some("0"), None), UNLIMITED);
        assert_eq!(width_from(None, Some(90)), 90);
        assert_eq!(width_from(None, None), UNLIMITED);
        assert_eq!(super::terminal_width(true), UNLIMITED);
    }
}

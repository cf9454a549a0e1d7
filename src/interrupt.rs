//! Ctrl-C (SIGINT, and SIGTERM the same way): the one flag every long run polls to stop with its
//! partial results, and when a second signal ends the process at once.
//!
//! The handler is installed by the dispatcher before a command starts ([`catch`], see
//! `cli::run`), so a signal that arrives while the command is still setting up (resolving a
//! name, connecting) finds the flag already set when the engine starts: the run then ends at
//! once with what it has, possibly nothing measured, and still prints its report.
//!
//! A second signal exits with 130 only when it comes [`SECOND_AFTER`] or more after the first:
//! one keypress can arrive twice. `timeout -s INT 5 latscope …` (coreutils) signals its child,
//! then its whole process group, which holds the child: two SIGINTs microseconds apart. Taking
//! the second one as a person's "stop now" killed the run before it printed anything whenever
//! both were delivered separately (5 runs of 8 of `diagnose`; when they arrive together the
//! kernel merges them and the run printed).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What Ctrl-C does to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// The first signal asks the run to stop and print what it measured; a second one (a
    /// person pressing again, [`SECOND_AFTER`] later) exits at once with 130.
    Partial,
    /// As [`Partial`](Self::Partial), but a second signal does not exit: the run's stop is
    /// itself bounded and must not be cut short (a capture flushing its file).
    Finishing,
    /// The process's default action, or the command's own signal handling (the agent's).
    Default,
}

/// The shortest time between two signals for the second to count as a second Ctrl-C.
pub const SECOND_AFTER: Duration = Duration::from_millis(500);

/// [`OnInterrupt`] of the installed handler, as its discriminant (0: none installed yet).
static MODE: AtomicU8 = AtomicU8::new(0);

fn mode_code(m: OnInterrupt) -> u8 {
    match m {
        OnInterrupt::Partial => 1,
        OnInterrupt::Finishing => 2,
        OnInterrupt::Default => 3,
    }
}

/// Install the handler for a command that reacts as `mode` says; call once, before the command
/// starts. `Default` installs nothing.
pub fn catch(mode: OnInterrupt) {
    MODE.store(mode_code(mode), Ordering::SeqCst);
    if mode != OnInterrupt::Default {
        let _ = stop_flag();
    }
}

/// Set by the first Ctrl-C (SIGINT/SIGTERM); engines poll it and stop with partial results.
/// Installs the handler (as [`OnInterrupt::Partial`] unless [`catch`] said otherwise) on first
/// use.
pub fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let _ = MODE.compare_exchange(
            0,
            mode_code(OnInterrupt::Partial),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let signals = Mutex::new(Signals::default());
        // Failing to install the handler (another one exists, e.g. in tests) only costs the
        // graceful stop; the default action still ends the process.
        let _ = ctrlc::set_handler(move || {
            f.store(true, Ordering::SeqCst);
            let exit_on_second = MODE.load(Ordering::SeqCst) == mode_code(OnInterrupt::Partial);
            let second = signals
                .lock()
                .map(|mut s| s.arrived(Instant::now()))
                .unwrap_or(false);
            if second && exit_on_second {
                std::process::exit(i32::from(crate::exit::INTERRUPTED));
            }
        });
        flag
    })
    .clone()
}

/// The signals seen so far: when the first came.
#[derive(Debug, Default)]
struct Signals {
    first: Option<Instant>,
}

impl Signals {
    /// Record a signal arriving at `now`; whether it is a second Ctrl-C (one that comes
    /// [`SECOND_AFTER`] or more after the first).
    fn arrived(&mut self, now: Instant) -> bool {
        match self.first {
            None => {
                self.first = Some(now);
                false
            }
            Some(first) => now.saturating_duration_since(first) >= SECOND_AFTER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_signal_is_not_a_second_ctrl_c() {
        let t0 = Instant::now();
        let mut s = Signals::default();
        assert!(!s.arrived(t0), "the first signal only asks to stop");
        // `timeout` sends the same signal to the child and to its group, microseconds apart.
        assert!(!s.arrived(t0 + Duration::from_micros(40)));
        assert!(!s.arrived(t0 + Duration::from_millis(499)));
        // A person pressing again.
        assert!(s.arrived(t0 + SECOND_AFTER));
        assert!(s.arrived(t0 + Duration::from_secs(3)));
    }
}

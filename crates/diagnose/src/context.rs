//! What every step runs with: the plan, the stop flag and where the server is ([`Context`]),
//! and how a step is held to its time budget ([`bounded`]). Below the steps that use it and the
//! pipeline (`collect`) that makes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::locate::LocalServer;
use crate::plan::Plan;

/// What every step may look at: the plan and its stop flag — raised on Ctrl-C, and for a
/// step when its time budget is spent; engines get it as their stop flag.
pub struct Context<'a> {
    pub plan: &'a Plan,
    pub stop: &'a AtomicBool,
    /// The server's namespace when it runs on this host (in any network namespace).
    pub server: Option<LocalServer>,
}

impl Context<'_> {
    /// Whether the step (or the run) was told to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Run `f` with a stop flag raised when the run is interrupted or when `deadline` passes
/// (checked every 20 ms by a watchdog thread). Returns `f`'s value and whether the deadline
/// cut it short.
pub fn bounded<T>(
    interrupt: &AtomicBool,
    deadline: Instant,
    f: impl FnOnce(&AtomicBool) -> T,
) -> (T, bool) {
    let flag = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let cut = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if interrupt.load(Ordering::Relaxed) {
                    flag.store(true, Ordering::Relaxed);
                } else if Instant::now() >= deadline {
                    cut.store(true, Ordering::Relaxed);
                    flag.store(true, Ordering::Relaxed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let v = f(&flag);
        done.store(true, Ordering::Relaxed);
        (v, cut.load(Ordering::Relaxed))
    })
}

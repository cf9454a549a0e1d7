//! The terminal side: a thread that owns the screen, redraws a few times a second, reads `q` and
//! Ctrl-C, and always gives the terminal back (on drop, on error, and from a panic hook).

use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::execute;
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;

use crate::state::{LiveState, STOPPING};
use crate::view;

/// How often the screen is redrawn (the clock and gauge move between intervals).
pub const REDRAW: Duration = Duration::from_millis(250);

/// Whether the screen is ours right now: the panic hook restores it only then.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether a live view can be drawn: stdout is a terminal that can address its cursor.
pub fn stdout_can_draw() -> bool {
    std::io::stdout().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// Give the terminal back: leave the alternate screen, show the cursor, cooked mode. Safe to
/// call twice; errors are ignored (there is nothing better to do with a broken terminal).
fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(
            std::io::stdout(),
            LeaveAlternateScreen,
            crossterm::cursor::Show
        );
    }
}

/// Restore the terminal before the default panic message, so that the message is readable and
/// the shell is usable afterwards. Installed once per process.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// What the view does on the keys that stop a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Keys {
    /// Exit the process with this code on a second Ctrl-C (after restoring the terminal), as
    /// the binary's signal handler does outside the view. `None`: a second Ctrl-C only repeats
    /// the stop request.
    pub second_interrupt_exit: Option<i32>,
}

/// A running live view. Feed it with [`LiveView::update`]; dropping it stops the drawing and
/// restores the terminal.
pub struct LiveView {
    state: Arc<Mutex<LiveState>>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LiveView {
    /// Take over the terminal (raw mode, alternate screen) and start drawing `state`. `q`, Esc
    /// or Ctrl-C set `stop`, which the engine polls to end with partial results.
    pub fn start(state: LiveState, stop: Arc<AtomicBool>, keys: Keys) -> std::io::Result<LiveView> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let mut terminal = match execute!(std::io::stdout(), EnterAlternateScreen)
            .and_then(|()| Terminal::new(CrosstermBackend::new(std::io::stdout())))
        {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        let state = Arc::new(Mutex::new(state));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let state = state.clone();
            let done = done.clone();
            std::thread::Builder::new()
                .name("latscope-tui".into())
                .spawn(move || {
                    run(&mut terminal, &state, &done, &stop, keys);
                    restore();
                })
        };
        match thread {
            Ok(t) => Ok(LiveView {
                state,
                done,
                thread: Some(t),
            }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Change what is drawn (take an interval in, set the status); the next redraw shows it.
    pub fn update(&self, f: impl FnOnce(&mut LiveState)) {
        f(&mut lock(&self.state));
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        restore();
    }
}

/// The state even if a drawing thread panicked while holding it (it only holds figures).
fn lock(m: &Mutex<LiveState>) -> MutexGuard<'_, LiveState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn run(
    terminal: &mut Terminal<CrosstermBackend<Stdout>>,
    state: &Mutex<LiveState>,
    done: &AtomicBool,
    stop: &AtomicBool,
    keys: Keys,
) {
    let started = Instant::now();
    while !done.load(Ordering::SeqCst) {
        let drawn = {
            let st = lock(state);
            terminal.draw(|f| view::draw(f, &st, started.elapsed()))
        };
        if drawn.is_err() {
            // The terminal went away (hang-up): stop drawing, the run goes on.
            return;
        }
        if !event::poll(REDRAW).unwrap_or(false) {
            continue;
        }
        let Ok(Event::Key(k)) = event::read() else {
            continue;
        };
        if k.kind != KeyEventKind::Press {
            continue;
        }
        let interrupt = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
        if interrupt
            && stop.load(Ordering::SeqCst)
            && let Some(code) = keys.second_interrupt_exit
        {
            restore();
            std::process::exit(code);
        }
        if interrupt || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
            stop.store(true, Ordering::SeqCst);
            lock(state).status = STOPPING.to_string();
        }
    }
}

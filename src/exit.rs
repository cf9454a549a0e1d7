//! Documented exit codes (also listed in `latscope --help` and the README).
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | the measurement ran; nothing wrong found |
//! | 1    | the measurement ran, and found problems (diagnose findings, failed transactions) |
//! | 2    | bad input: a flag or value that cannot be used |
//! | 3    | the target could not be measured: unreachable, refused, wrong protocol, refused by the server |
//! | 4    | missing privileges (a capability) for what was asked |
//! | 5    | a local system error (socket, file, kernel interface) |
//! | 130  | interrupted by Ctrl-C (partial results were printed) |

use latscope_core::units::UnitError;

pub const OK: u8 = 0;
pub const FINDINGS: u8 = 1;
pub const USAGE: u8 = 2;
pub const TARGET: u8 = 3;
pub const PRIVILEGE: u8 = 4;
pub const SYSTEM: u8 = 5;
pub const INTERRUPTED: u8 = 130;

/// The text `--help` shows about exit codes.
pub const HELP: &str = "Exit codes: 0 ok; 1 measured, problems found; 2 bad input; 3 target unreachable, refused or \
wrong protocol; 4 missing privileges; 5 local system error; 130 interrupted (partial results printed).";

/// An error that carries its own exit code. Commands return it (through anyhow) when the code
/// is not implied by the error type.
#[derive(Debug)]
pub struct Coded {
    pub code: u8,
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// Shorthand: an `anyhow::Error` with exit code `code`.
pub fn coded(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        message: message.into(),
    })
}

/// Map an error chain to an exit code: the first link with a known type decides.
pub fn code_for(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        if cause.downcast_ref::<UnitError>().is_some() {
            return USAGE;
        }
        if let Some(e) = cause.downcast_ref::<latscope_capture::CaptureError>() {
            use latscope_capture::CaptureError as C;
            return match e {
                C::BadInterfaceName(_) | C::NoSuchInterface(_) | C::Filter(_) => USAGE,
                C::Privilege(_) => PRIVILEGE,
                C::Open(_) | C::Ring(_) => SYSTEM,
                C::Consumer(_) => continue,
            };
        }
        if let Some(e) = cause.downcast_ref::<latscope_net::NetError>() {
            return e.exit_code();
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return match e.kind() {
                std::io::ErrorKind::PermissionDenied => PRIVILEGE,
                std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::HostUnreachable
                | std::io::ErrorKind::NetworkUnreachable => TARGET,
                _ => SYSTEM,
            };
        }
    }
    SYSTEM
}

/// Print `latscope: error: <msg>: <cause>: <cause>` on one line.
pub fn print_error(err: &anyhow::Error) {
    let mut line = String::from("latscope: error: ");
    let mut first = true;
    for cause in err.chain() {
        let text = cause.to_string();
        if !first {
            // Skip causes already included in the previous message.
            if line.contains(&text) {
                continue;
            }
            line.push_str(": ");
        }
        line.push_str(&text);
        first = false;
    }
    eprintln!("{line}");
}

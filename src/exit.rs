//! latscope's exit contract: the documented exit codes ([`Exit`], which also writes the table
//! `--help` shows and the README repeats, checked by a test), and the one place where every
//! crate's error type is mapped to its exit class ([`class_of`]).
//!
//! Commands return their errors unflattened (`?`, `.context(…)`): the chain keeps its sources,
//! [`code_for`] walks it to find the class, and [`print_error`] prints it on one line.

use std::error::Error;
use std::io;

use latscope_capture::CaptureError;
use latscope_core::units::UnitError;
use latscope_ebpf::StackError;
use latscope_http::HttpError;
use latscope_inspect::error::InspectError;
use latscope_net::NetError;
use latscope_probe::ProbeError;
use latscope_wire::ReadError;

/// The documented exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// The measurement ran; nothing wrong found.
    Ok = 0,
    /// The measurement ran and found problems.
    Findings = 1,
    /// Bad input: a flag, value, filter or file that cannot be used.
    Usage = 2,
    /// The target could not be measured.
    Target = 3,
    /// A capability is missing for what was asked.
    Privilege = 4,
    /// A local system error.
    System = 5,
    /// Ctrl-C before the end; partial results were printed.
    Interrupted = 130,
}

impl Exit {
    /// Every code, in order: the table's rows.
    pub const ALL: [Exit; 7] = [
        Exit::Ok,
        Exit::Findings,
        Exit::Usage,
        Exit::Target,
        Exit::Privilege,
        Exit::System,
        Exit::Interrupted,
    ];

    /// The process exit status.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// What the code means, as `--help` and the README say it.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "measured; nothing wrong found",
            Exit::Findings => {
                "measured, and found problems (failed requests, a latency jump, stalls, a diagnosis)"
            }
            Exit::Usage => "bad input: a flag, value, filter or file that cannot be used",
            Exit::Target => {
                "target unreachable or refused, wrong protocol on the port, or the server refused"
            }
            Exit::Privilege => "missing privileges (the message names the capability)",
            Exit::System => "local system error (socket, file, kernel interface)",
            Exit::Interrupted => "interrupted by Ctrl-C (partial results were printed)",
        }
    }
}

pub const OK: u8 = Exit::Ok.code();
pub const FINDINGS: u8 = Exit::Findings.code();
pub const USAGE: u8 = Exit::Usage.code();
pub const TARGET: u8 = Exit::Target.code();
pub const SYSTEM: u8 = Exit::System.code();
pub const INTERRUPTED: u8 = Exit::Interrupted.code();

/// The exit-code table of `latscope --help`.
pub fn help_table() -> String {
    let mut s = String::from("Exit codes:");
    for e in Exit::ALL {
        s.push_str(&format!("\n  {:<4} {}", e.code(), e.meaning()));
    }
    s
}

/// An error made by the binary itself (a flag combination, a path the user gave) with the exit
/// code it stands for, optionally with the error that caused it as its source.
#[derive(Debug)]
pub struct Coded {
    pub code: u8,
    pub message: String,
    pub source: Option<Box<dyn Error + Send + Sync>>,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Coded {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// Shorthand: an `anyhow::Error` with exit code `code`.
pub fn coded(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        message: message.into(),
        source: None,
    })
}

/// `message` with exit code `code`, caused by `source` (kept in the chain, printed after it).
pub fn because(
    code: u8,
    message: impl Into<String>,
    source: impl Error + Send + Sync + 'static,
) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        message: message.into(),
        source: Some(Box::new(source)),
    })
}

/// Map an error chain to an exit code: the outermost link with a known class decides.
pub fn code_for(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(class_of)
        .unwrap_or(Exit::System)
        .code()
}

/// The exit class of one link of an error chain, or `None` to let its source decide. This is
/// the one place where crate errors meet exit codes: a new error type (or variant) is mapped
/// here, and the exhaustive matches make a new variant a compile error until it is.
pub fn class_of(e: &(dyn Error + 'static)) -> Option<Exit> {
    if let Some(c) = e.downcast_ref::<Coded>() {
        return Exit::ALL.into_iter().find(|x| x.code() == c.code);
    }
    if e.is::<UnitError>()
        || e.is::<latscope_ebpf::sys::FilterError>()
        || e.is::<latscope_core::model::stack::UnknownProbe>()
    {
        return Some(Exit::Usage);
    }
    if let Some(e) = e.downcast_ref::<CaptureError>() {
        return capture(e);
    }
    if let Some(e) = e.downcast_ref::<NetError>() {
        return Some(net(e));
    }
    if let Some(e) = e.downcast_ref::<ProbeError>() {
        return Some(probe(e));
    }
    if let Some(e) = e.downcast_ref::<HttpError>() {
        return Some(http(e));
    }
    if let Some(e) = e.downcast_ref::<InspectError>() {
        return inspect(e);
    }
    if let Some(e) = e.downcast_ref::<StackError>() {
        return Some(stack(e));
    }
    if let Some(e) = e.downcast_ref::<ReadError>() {
        return read(e);
    }
    e.downcast_ref::<io::Error>().map(io_class)
}

fn capture(e: &CaptureError) -> Option<Exit> {
    use CaptureError as C;
    match e {
        C::BadInterfaceName(_) | C::NoSuchInterface(_) | C::Filter(_) => Some(Exit::Usage),
        C::Privilege(_) => Some(Exit::Privilege),
        C::Open(_) | C::Ring(_) => Some(Exit::System),
        // Whatever the consumer's own error says (e.g. a full disk).
        C::Consumer(_) => None,
    }
}

fn net(e: &NetError) -> Exit {
    use NetError as N;
    match e {
        N::Invalid(_) => Exit::Usage,
        N::Unreachable { .. }
        | N::Refused { .. }
        | N::Timeout { .. }
        | N::WrongProtocol { .. }
        | N::ServerRefused { .. }
        | N::ServerFailed(_)
        | N::Protocol(_) => Exit::Target,
        N::Privilege(_) => Exit::Privilege,
        N::Io(_) => Exit::System,
    }
}

fn probe(e: &ProbeError) -> Exit {
    match e {
        ProbeError::Invalid(_) => Exit::Usage,
        ProbeError::Unreachable { .. } => Exit::Target,
        ProbeError::Privilege(_) => Exit::Privilege,
        ProbeError::Io(_) => Exit::System,
    }
}

fn http(e: &HttpError) -> Exit {
    use HttpError as H;
    match e {
        H::Url(_) | H::Header(_) | H::Method(_) | H::Config(_) | H::Tls(_) => Exit::Usage,
        H::Resolve { .. }
        | H::Connect { .. }
        | H::Exchange { .. }
        | H::NotHttp { .. }
        | H::Handshake { .. } => Exit::Target,
        H::System { .. } => Exit::System,
    }
}

fn inspect(e: &InspectError) -> Option<Exit> {
    use InspectError as I;
    match e {
        I::NoSuchProcess(_) => Some(Exit::Target),
        I::Privilege { .. } => Some(Exit::Privilege),
        I::Unsupported { .. } | I::Malformed { .. } => Some(Exit::System),
        // EPERM means a capability, anything else the system: the io error says.
        I::Io { .. } => None,
    }
}

fn stack(e: &StackError) -> Exit {
    use StackError as S;
    match e {
        S::Privilege(_) | S::NoBtf => Exit::Privilege,
        S::Load(_) | S::NothingAttached(_) | S::Read(_) | S::System(_) => Exit::System,
    }
}

fn read(e: &ReadError) -> Option<Exit> {
    match e {
        ReadError::Io(_) => None,
        ReadError::TooShort(_) | ReadError::NotACapture(_) | ReadError::Corrupt { .. } => {
            Some(Exit::Usage)
        }
    }
}

fn io_class(e: &io::Error) -> Exit {
    match e.kind() {
        io::ErrorKind::PermissionDenied => Exit::Privilege,
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::TimedOut
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable => Exit::Target,
        _ => Exit::System,
    }
}

/// Print `latscope: error: <msg>: <cause>: <cause>` on one line: the whole chain, each link
/// once (a link whose text its parent already quotes is not repeated).
pub fn print_error(err: &anyhow::Error) {
    eprintln!("latscope: error: {}", one_line(err));
}

/// The error chain on one line.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_in_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 130]);
    }

    /// The README's table under "Output and exit codes" says what the code says, row by row.
    #[test]
    fn readme_table_matches_the_code() {
        let readme = include_str!("../README.md");
        let section = readme
            .split("## Output and exit codes")
            .nth(1)
            .expect("README has an 'Output and exit codes' section");
        let rows: Vec<(u8, String)> = section
            .lines()
            .skip_while(|l| !l.starts_with("| code"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                (cells[0].parse().unwrap(), cells[1].to_string())
            })
            .collect();
        let want: Vec<(u8, String)> = Exit::ALL
            .iter()
            .map(|e| (e.code(), e.meaning().to_string()))
            .collect();
        assert_eq!(rows, want, "README exit-code table vs src/exit.rs");
    }

    #[test]
    fn the_chain_decides_and_sources_are_kept() {
        let io = io::Error::from(io::ErrorKind::NotFound);
        let e = because(USAGE, "cannot open 'x.pcap'", io);
        assert_eq!(code_for(&e), USAGE);
        assert_eq!(
            one_line(&e),
            format!(
                "cannot open 'x.pcap': {}",
                io::Error::from(io::ErrorKind::NotFound)
            )
        );
        // Context added by a command does not hide the crate error's class.
        let e = anyhow::Error::new(NetError::Refused {
            target: "127.0.0.1:1".into(),
        })
        .context("rr");
        assert_eq!(code_for(&e), TARGET);
        // A consumer's error is classified by its own cause.
        let e = anyhow::Error::new(CaptureError::Consumer(io::Error::from(
            io::ErrorKind::PermissionDenied,
        )));
        assert_eq!(code_for(&e), Exit::Privilege.code());
        let e = anyhow::Error::new(StackError::NoBtf);
        assert_eq!(code_for(&e), Exit::Privilege.code());
        assert_eq!(
            code_for(&anyhow::Error::new(StackError::NothingAttached("x".into()))),
            SYSTEM
        );
        assert_eq!(code_for(&anyhow::anyhow!("unclassified")), SYSTEM);
    }
}

//! The `latscope` binary as a library: command-line parsing, one module per subcommand, and the
//! mapping of errors to documented exit codes. Its entry point is [`main_with_args`] (what
//! `main` calls); integration tests run the binary, and [`schema_kinds`] lists the JSON documents
//! `latscope schema` describes. The modules are private: engines and result models live in the
//! crates under `crates/`, and `docs/architecture.md` maps where each thing goes.

#![warn(missing_docs)]

mod cli;
mod cmd;
mod exit;
mod interrupt;
mod live;
mod output;
mod progress;

use std::ffi::OsString;
use std::process::ExitCode;

/// The kinds `latscope schema KIND` accepts, as spelt on the command line: one per JSON document
/// (`schema/<kind>.schema.json`).
pub fn schema_kinds() -> Vec<String> {
    latscope_core::registry::KINDS
        .iter()
        .map(|k| k.name.to_string())
        .collect()
}

/// Parse `args` and run the chosen subcommand; print errors as one line (plus causes) on stderr.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let (cli, wide) = match parse(args) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `latscope` alone: the help, on stderr, as a usage error.
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            eprintln!("latscope: error: {}", cli::usage_error(&e));
            return ExitCode::from(exit::USAGE);
        }
    };
    latscope_core::render::page::set_width(output::terminal_width(wide));
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) if broken_pipe(&err) => {
            // The reader of stdout went away (`latscope … | head`): nothing left to report to,
            // and nothing went wrong on latscope's side (as ripgrep and coreutils do).
            ExitCode::from(exit::OK)
        }
        Err(err) => {
            let code = exit::code_for(&err);
            exit::print_error(&err);
            ExitCode::from(code)
        }
    }
}

/// The parsed command line, and whether the command's `--wide` (`OutputArgs`) was given: read
/// from the matches by its id, so that every command that flattens the output options has it.
fn parse<I, T>(args: I) -> Result<(cli::Cli, bool), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let matches = cli::Cli::command().try_get_matches_from(args)?;
    let wide = matches
        .subcommand()
        .and_then(|(_, m)| m.try_get_one::<bool>("wide").ok().flatten().copied())
        .unwrap_or(false);
    let cli =
        cli::Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cli::Cli::command()))?;
    Ok((cli, wide))
}

/// An EPIPE in the error chain *and* stdout's reader gone: a socket's EPIPE (a peer that closed)
/// stays an error.
fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    }) && stdout_reader_gone()
}

/// poll() reports POLLERR on the write end of a pipe whose read end is closed.
fn stdout_reader_gone() -> bool {
    let mut pfd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n == 1 && pfd.revents & libc::POLLERR != 0
}

//! The `latscope` binary as a library: command-line parsing, one module per subcommand, and the
//! mapping of errors to documented exit codes. Integration tests call [`main_with_args`]
//! in-process or run the binary.

pub mod cli;
pub mod cmd;
pub mod exit;
pub mod output;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

/// Parse `args` and run the chosen subcommand; print errors as one line (plus causes) on stderr.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    match cmd::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = exit::code_for(&err);
            exit::print_error(&err);
            ExitCode::from(code)
        }
    }
}

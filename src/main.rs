//! latscope's entry point: parse → run → exit code. Everything else lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    latscope::main_with_args(std::env::args_os())
}

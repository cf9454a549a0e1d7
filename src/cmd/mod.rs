//! One module per subcommand: arguments → engine → result → rendering.

pub mod analyze;
pub mod capture;
pub mod schema;

use crate::cli::{Cli, Command};

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Schema(a) => schema::run(&a),
        Command::Capture(a) => capture::run(&a),
        Command::Analyze(a) => analyze::run(&a),
    }
}

//! One module per subcommand: arguments → engine → result → rendering.

pub mod schema;
pub mod stack;

use crate::cli::{Cli, Command};

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Schema(a) => schema::run(&a),
        Command::Stack(a) => stack::run(&a),
    }
}

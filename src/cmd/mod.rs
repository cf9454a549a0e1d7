//! One module per subcommand: arguments → engine → result → rendering.

pub mod http;
pub mod schema;

use crate::cli::{Cli, Command};

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Http(a) => http::run(&a),
        Command::Schema(a) => schema::run(&a),
    }
}

//! One module per subcommand: arguments → engine → result → rendering.

pub mod connect;
pub mod demo;
pub mod http;
pub mod rr;
pub mod schema;
pub mod serve;

use crate::cli::{Cli, Command};

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Serve(a) => serve::run(&a),
        Command::Rr(a) => rr::run(&a),
        Command::Connect(a) => connect::run(&a),
        Command::Http(a) => http::run(&a),
        Command::Schema(a) => schema::run(&a),
    }
}

//! One module per subcommand: arguments → engine → result → rendering.

pub mod analyze;
pub mod capture;
pub mod connect;
pub mod demo;
pub mod diagnose;
pub mod http;
pub mod ping;
pub mod rr;
pub mod schema;
pub mod serve;
pub mod sockets;
pub mod stack;
pub mod stream;
pub mod trace;

use crate::cli::{Cli, Command};

/// Run the parsed command; returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Diagnose(a) => diagnose::run(&a),
        Command::Serve(a) => serve::run(&a),
        Command::Rr(a) => rr::run(&a),
        Command::Connect(a) => connect::run(&a),
        Command::Stream(a) => stream::run(&a),
        Command::Http(a) => http::run(&a),
        Command::Schema(a) => schema::run(&a),
        Command::Ping(a) => ping::run(&a),
        Command::Trace(a) => trace::run(&a),
        Command::Sockets(a) => sockets::run(&a),
        Command::Stack(a) => stack::run(&a),
        Command::Capture(a) => capture::run(&a),
        Command::Analyze(a) => analyze::run(&a),
    }
}

//! A latscope server on loopback, for tests that measure against the real peer: in process
//! ([`server`]) or as the binary ([`ServeProcess`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_core::model::rr::{ServerBehaviour, SockOpts, WriteMode};
use latscope_net::proto::Limits;
use latscope_net::serve::{ServeConfig, Server, ServerHandle};

/// A latscope server on 127.0.0.1 (ephemeral port), optionally with a unix socket and forced
/// behaviour; stopped on drop.
pub fn server(
    unix: Option<PathBuf>,
    forced: Option<ServerBehaviour>,
    limits: Option<Limits>,
) -> ServerHandle {
    let cfg = ServeConfig {
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        unix,
        limits: limits.unwrap_or(Limits {
            max_tests: 64,
            max_duration_ms: 600_000,
            max_message_bytes: 4 << 20,
        }),
        max_connections: 256,
        handshake_timeout: Duration::from_secs(2),
        forced,
        workers: None,
        ..ServeConfig::default()
    };
    Server::bind(cfg, Arc::new(AtomicBool::new(false)), |_| {})
        .expect("bind")
        .spawn()
        .expect("spawn")
}

/// The split-write, Nagle-on behaviour of the seeds' slow nginx.
pub fn nagle_split(split_at: u32) -> ServerBehaviour {
    ServerBehaviour {
        write_mode: WriteMode::Split,
        split_at,
        sockopts: SockOpts {
            nodelay: false,
            ..SockOpts::default()
        },
        ..ServerBehaviour::default()
    }
}

pub fn addr_arg(a: SocketAddr) -> String {
    a.to_string()
}

/// `latscope serve -q ARGS` bound to 127.0.0.1 on a free port, as a child process (stderr
/// dropped); killed on drop.
pub struct ServeProcess {
    /// The server process.
    pub child: Child,
    /// Its TCP port.
    pub port: u16,
}

impl ServeProcess {
    /// Start it with `args` added, and give it 300 ms to listen.
    pub fn start(args: &[&str]) -> ServeProcess {
        let port = super::free_port();
        let child = Command::new(super::BIN)
            .args([
                "serve",
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "-q",
            ])
            .args(args)
            .stderr(Stdio::null())
            .spawn()
            .expect("run latscope serve");
        std::thread::sleep(Duration::from_millis(300));
        ServeProcess { child, port }
    }

    /// `127.0.0.1:PORT`.
    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Helpers shared by the foundation's integration tests: in-process servers, running the
//! binary, and checking JSON against the committed schemas.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use latscope_core::model::rr::{ServerBehaviour, SockOpts, WriteMode};
use latscope_net::proto::Limits;
use latscope_net::serve::{ServeConfig, Server, ServerHandle};

pub const BIN: &str = env!("CARGO_BIN_EXE_latscope");

/// Held by tests whose figures are compared with a bound or a peer tool, so that tests of the
/// same binary running in parallel do not load the CPUs under them (`cargo test` runs tests on
/// several threads; CI also sets RUST_TEST_THREADS=1).
pub fn timing_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// Run the binary; return (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out: Output = Command::new(BIN).args(args).output().expect("run latscope");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Parse stdout as one JSON document and validate it against `schema/<kind>.schema.json`.
pub fn json_checked(stdout: &str, kind: &str) -> serde_json::Value {
    let doc: serde_json::Value =
        serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    validate(&doc, kind);
    doc
}

pub fn validate(doc: &serde_json::Value, kind: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("schema/{kind}.schema.json"));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("schema file"))
            .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("valid schema");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{kind} output violates its schema: {errors:?}\n{doc}"
    );
}

/// A unique temp path for a unix socket.
pub fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("latscope-test-{tag}-{}.sock", std::process::id()))
}

pub mod netns;

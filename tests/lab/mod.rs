//! The test lab: everything the integration tests build around the real binary, in one place.
//!
//! - this file: the binary's path and runners, unique names, temp dirs, free ports, the timing
//!   lock, and [`require_root!`] for tests that need root;
//! - [`netns`]: network namespaces, veth pairs and routers ([`netns::Netns`],
//!   [`netns::NetnsPair`], whose [`netns::NetnsPair::with_rtt`] puts any round trip between its
//!   two ends);
//! - [`delay`]: distance — a TUN delay line between two namespaces ([`delay::TunLink`]);
//! - [`nginx`]: private nginx instances ([`nginx::Nginx`]);
//! - [`schema`]: validating JSON against the committed `schema/*.schema.json`;
//! - [`server`]: a latscope server, in process or as a child process;
//! - [`cgroup`]: a CPU-limited cgroup ([`cgroup::CpuCgroup`]); [`isolate`]: a program run as
//!   if on another machine (own PID and mount namespaces, no CAP_SYS_ADMIN/BPF/PERFMON/PTRACE);
//! - per family: [`diagnose`] (running it, reading its steps), [`http`] (misbehaving HTTP servers, wrk, certificates), [`probe`] (router chain,
//!   delay line), [`sockets`] (socket options, `sockets --watch`), [`stack`] (`latscope stack`
//!   runner), [`wire`] (captures, tcpdump, tshark); `vm/` holds the fentry VM's guest files.
//!
//! Everything a helper creates (namespaces, processes, files) carries this process's pid and is
//! removed by a guard's `Drop`, also when the test fails. The integration-test binary
//! (`tests/integration/main.rs`) and the diagnose lab's (`tests/diagnose_lab/main.rs`) each
//! include it once with `#[macro_use] mod lab;`; each module uses what it needs.
// Each test binary uses part of the lab: the rest (and the re-exports that let a test file
// import one family's helpers from one place) is unused there.
#![allow(
    dead_code,
    unused_imports,
    unused_macros,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Return early from a test that needs root (namespaces, eBPF, raw sockets, other processes'
/// sockets), saying so on stderr, when the test runs as another user.
macro_rules! require_root {
    () => {
        if !$crate::lab::is_root() {
            fn here() {}
            let name = std::any::type_name_of_val(&here);
            eprintln!(
                "skipped {}: needs root (network namespaces, eBPF, raw sockets or dropping privileges); run `sudo cargo test`",
                name.strip_suffix("::here").unwrap_or(name)
            );
            return;
        }
    };
}

pub mod cgroup;
pub mod delay;
pub mod diagnose;
pub mod http;
pub mod isolate;
pub mod netns;
pub mod nginx;
pub mod probe;
pub mod schema;
pub mod server;
pub mod sockets;
pub mod stack;
pub mod wire;

pub use schema::{json_checked, validate};
pub use server::{ServeProcess, addr_arg, nagle_split, server};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_latscope");

/// Whether the tests run as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Run the binary; its whole output.
pub fn output(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run latscope")
}

/// Run the binary with its stdout piped, send it SIGINT (Ctrl-C) after `after`, and return its
/// whole output.
pub fn interrupt_after(args: &[&str], after: std::time::Duration) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run latscope");
    std::thread::sleep(after);
    // SAFETY: sending SIGINT to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait_with_output().expect("wait for latscope")
}

/// Run the binary; (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    split(&output(args))
}

/// Run the binary with `args` (the command first) and `--json`, expect exit code `want`, and
/// return its document, checked against the command's schema.
pub fn json_run(args: &[&str], want: i32) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = run(&all);
    assert_eq!(code, want, "{args:?}: {err}");
    json_checked(&out, args[0])
}

/// Panic with the process's stderr unless it exited with 0.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (exit code, stdout, stderr) of a finished process; -1 when a signal ended it.
pub fn split(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run a command; panic with its output if it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A name unique to this process and call: `ls<tag><pid>x<n>`, short enough for an interface
/// name (15 bytes) when `tag` has at most 3 characters.
pub fn unique(tag: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "ls{tag}{}x{}",
        std::process::id() % 100_000,
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// A port nobody listens on right now on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Held by tests whose figures are compared with a bound or a peer tool, so that tests of the
/// same binary running in parallel do not load the CPUs under them (`cargo test` runs tests on
/// several threads; CI also sets RUST_TEST_THREADS=1).
pub fn timing_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh temp directory, removed with its contents on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!("latscope-test-{}", unique("")));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// A path inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A file of mode 600 holding `content` (a key file latscope accepts), inside the directory.
    pub fn secret_file(&self, name: &str, content: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A unique temp path for a unix socket.
pub fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("latscope-test-{tag}-{}.sock", std::process::id()))
}

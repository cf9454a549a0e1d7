//! Nothing of `latscope stack` stays attached: after a normal exit, after Ctrl-C, and after an
//! error during start-up. One test, so no other stack run of this binary overlaps the checks.
#![allow(clippy::unwrap_used)]

use crate::lab;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use lab::stack::{BIN, Stack, lsstk_programs, lsstk_programs_settled};

#[test]
fn nothing_left_attached_after_exit_ctrl_c_or_attach_error() {
    require_root!();
    assert!(
        lsstk_programs_settled().is_empty(),
        "leftovers before the test: {:?}",
        lsstk_programs()
    );

    // While running, the programs are visible (so the check below can fail).
    let mut s = Stack::start(&["--json", "-d", "2s"]);
    // All seven probes share five attach points, one program each once consolidated.
    let running = lsstk_programs();
    assert!(
        running.len() >= 5,
        "expected the probes in bpftool prog list: {running:?}"
    );
    let (code, out) = s.wait();
    assert_eq!(code, 0, "{}", s.stderr());
    assert!(out.contains("\"histograms\""));
    assert!(
        lsstk_programs_settled().is_empty(),
        "left after normal exit: {:?}",
        lsstk_programs()
    );

    // Ctrl-C.
    let s = Stack::start(&["-r", "1h"]);
    std::thread::sleep(Duration::from_millis(300));
    let (code, _) = s.interrupt();
    assert_eq!(code, 130);
    assert!(
        lsstk_programs_settled().is_empty(),
        "left after Ctrl-C: {:?}",
        lsstk_programs()
    );

    // An error after the probes were attached: the metrics port is taken.
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args(["stack", "--prometheus", &addr])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("cannot listen on"), "{err}");
    assert!(
        lsstk_programs_settled().is_empty(),
        "left after an error: {:?}",
        lsstk_programs()
    );

    // An error while attaching: fentry only, which this kind of kernel refuses (on a kernel that
    // allows it, the run must succeed and still leave nothing behind).
    let out = Command::new(BIN)
        .args(["stack", "--hooks", "fentry", "-d", "1s", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(5) => assert!(err.contains("no probe could be attached"), "{err}"),
        Some(0) => {}
        other => panic!("unexpected exit {other:?}: {err}"),
    }
    assert!(
        lsstk_programs_settled().is_empty(),
        "left after an attach error: {:?}",
        lsstk_programs()
    );
}

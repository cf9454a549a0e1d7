//! Test kinds `rr` and `crr` on a stream connection: read `request_bytes`, answer
//! `response_bytes` (with the behaviour asked for: split write, cork, think time), until the
//! client closes or the test's deadline passes. `crr` does one transaction.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use latscope_core::model::rr::WriteMode;
use latscope_sys::mem::PageAligned;
use latscope_sys::sockopt::set_int;

use super::test::{Ended, Test};
use super::{POLL, Shared, admission, admission::WorkerPermit};
use crate::proto::TestKind;
use crate::sock::Conn;

/// Run an rr or crr test on its own connection.
pub(super) fn run(t: &mut Test) -> Ended {
    if !t.accept() {
        return Ended::new(0, "the client left before the test");
    }
    let b = &t.behaviour;
    let (sh, conn, deadline) = (t.sh, &mut *t.conn, t.deadline);
    if let Err(e) = conn.apply(&b.sockopts) {
        return Ended::new(0, format!("setting socket options: {e}"));
    }
    let _ = conn.set_read_timeout(Some(POLL));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let mut req = PageAligned::zeroed(t.start.request_bytes as usize);
    let resp = vec![b'r'; t.start.response_bytes as usize];
    let split =
        (b.write_mode == WriteMode::Split).then(|| (b.split_at as usize).clamp(1, resp.len()));
    let tcp = conn.is_tcp();
    let fd = conn.as_raw_fd();
    let think = Duration::from_nanos(b.think_ns);
    let cork = tcp && b.sockopts.cork;
    // The source's byte rate (`--per-source-rate`), shared with its other tests: each
    // transaction waits for its bytes (bounded by the test's deadline).
    let limit = admission::source_rate(sh, t.peer_ip).map(|l| l.share());
    let per_transaction = (req.len() + resp.len()) as u64;
    let mut n = 0u64;
    loop {
        match read_full(conn, &mut req, sh, deadline, tcp && b.sockopts.quickack) {
            Ok(true) => {}
            Ok(false) => return Ended::new(n, "client closed"),
            Err(e) => return Ended::new(n, e),
        }
        if let Some(l) = &limit
            && !l.wait(per_transaction, Some(deadline), &sh.stop)
        {
            return Ended::new(n, "test duration reached");
        }
        let worker = WorkerPermit::take(sh);
        if !think.is_zero() {
            thread::sleep(think);
        }
        if cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 1);
        }
        let wrote = match split {
            Some(at) if at < resp.len() => conn
                .write_all(&resp[..at])
                .and_then(|_| conn.write_all(&resp[at..])),
            _ => conn.write_all(&resp),
        };
        if cork {
            let _ = set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, 0);
        }
        drop(worker);
        if let Err(e) = wrote {
            return Ended::new(n, format!("write failed: {e}"));
        }
        n += 1;
        if t.start.kind == TestKind::Crr {
            // One transaction; wait for the client's close so it, not us, holds TIME_WAIT.
            let mut one = [0u8; 1];
            let _ = read_full(conn, &mut one, sh, deadline, false);
            return Ended::new(n, "transaction done");
        }
    }
}

/// Read exactly `buf.len()` bytes, waking every [`POLL`] to check the stop flag and deadline.
/// Returns Ok(false) on a clean EOF before the first byte.
pub(super) fn read_full(
    conn: &mut Conn,
    buf: &mut [u8],
    sh: &Shared,
    deadline: Instant,
    quickack: bool,
) -> Result<bool, String> {
    let mut got = 0;
    while got < buf.len() {
        match conn.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("client closed mid-request".into()),
            Ok(n) => {
                got += n;
                if quickack {
                    // Every read, partial ones too: this sends a pending delayed ACK at once.
                    let _ = set_int(conn.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
                }
            }
            Err(e) if latscope_sys::error::is_transient(&e) => {
                if sh.stopping() {
                    return Err("server stopping".into());
                }
                if Instant::now() >= deadline {
                    return Err("test duration reached".into());
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(true)
}

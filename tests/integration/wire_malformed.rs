//! `latscope analyze` on damaged input: a clear one-line error (exit 2) or a counted skip with
//! a warning, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::process::Command;

use lab::wire::{BIN, TempDir};

fn pcap_header(link: u32, snap: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&snap.to_le_bytes());
    b.extend_from_slice(&link.to_le_bytes());
    b
}

fn record(b: &mut Vec<u8>, data: &[u8], orig: u32) {
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&orig.to_le_bytes());
    b.extend_from_slice(data);
}

fn tcp_frame() -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[
        0x08, 0x00, 0x45, 0, 0, 44, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend_from_slice(&[
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 4, 0, 0, 0, 0, 0,
    ]);
    f.extend_from_slice(b"GET ");
    f
}

fn run(dir: &TempDir, name: &str, bytes: &[u8]) -> (i32, String, String) {
    let p = dir.path(name);
    std::fs::write(&p, bytes).unwrap();
    let out = Command::new(BIN).arg("analyze").arg(&p).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn damaged_files_give_clear_errors_or_counted_skips() {
    let dir = TempDir::new();
    let (code, _, err) = run(&dir, "empty.pcap", b"");
    assert_eq!(code, 2);
    assert!(err.contains("too short to be a capture"), "{err}");

    let (code, _, err) = run(
        &dir,
        "text.pcap",
        b"this is not a capture file at all, just text\n",
    );
    assert_eq!(code, 2);
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    // Garbage after a valid header: an impossible record length.
    let mut b = pcap_header(1, 65535);
    record(&mut b, &tcp_frame(), 58);
    b.extend_from_slice(&[0xff; 40]);
    let (code, _, err) = run(&dir, "garbage.pcap", &b);
    assert_eq!(code, 2);
    assert!(
        err.contains("corrupt capture at byte") && err.contains("record 2"),
        "{err}"
    );

    // A file cut in the middle of a record: what came before is analysed, with a warning, and
    // the exit code says the capture could not be wholly used (issue 41: it exited 0).
    let mut b = pcap_header(1, 65535);
    record(&mut b, &tcp_frame(), 58);
    record(&mut b, &tcp_frame(), 58);
    b.truncate(b.len() - 10);
    let (code, out, _) = run(&dir, "cut.pcap", &b);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("1 frame ") && out.contains("ends in the middle of a packet"),
        "{out}"
    );

    // Snap length cut before the TCP header: counted and reported.
    let mut b = pcap_header(1, 40);
    record(&mut b, &tcp_frame()[..40], 58);
    record(&mut b, &tcp_frame(), 58);
    let (code, out, _) = run(&dir, "snap.pcap", &b);
    assert_eq!(code, 0);
    assert!(out.contains("1 frame was cut short"), "{out}");

    // Unknown link type: counted skip, and the verdict says nothing could be read (exit 2),
    // not "no stalls".
    let mut b = pcap_header(147, 65535);
    record(&mut b, &tcp_frame(), 58);
    let (code, out, _) = run(&dir, "dlt147.pcap", &b);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("1 frame has a link type latscope does not decode and was skipped"),
        "{out}"
    );
    assert!(out.contains("the one frame was skipped"), "{out}");
    assert!(
        out.contains("No frames could be read") && !out.contains("No stalls found"),
        "{out}"
    );

    let out = Command::new(BIN)
        .args(["analyze", "/nonexistent/latscope-wire.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

#[test]
fn json_matches_schema() {
    let dir = TempDir::new();
    let mut b = pcap_header(1, 65535);
    record(&mut b, &tcp_frame(), 58);
    let p = dir.path("one.pcap");
    std::fs::write(&p, &b).unwrap();
    let out = Command::new(BIN)
        .arg("analyze")
        .arg(&p)
        .args(["--json", "--conn", "0"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    lab::validate(&doc, "analyze");
    assert_eq!(doc["ladder"]["rows"][0]["frame"], 1);
}

#[test]
fn reads_a_capture_from_stdin() {
    use std::io::Write;
    let seed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/capfile/nagle.pcapng");
    let mut child = Command::new(BIN)
        .args(["analyze", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(seed).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the seed capture has Nagle stalls"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "pcapng");
    assert_eq!(v["findings"][0]["kind"], "nagle_delayed_ack");
    assert_eq!(v["findings"][0]["count"], 8);
}

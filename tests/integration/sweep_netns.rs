//! The 2003 LKML report, reproduced: on a 1500-byte-MTU link, a server that writes a 500-byte
//! header and then the body with Nagle on stalls ~40 ms exactly while the body fits in one
//! segment (sizes 501..1947); a full-MSS segment makes the receiver ACK at once, so larger
//! sizes are fast again. The sweep must flag that window and nothing else. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::time::Duration;

use lab::netns::NetnsPair;
use lab::*;

#[test]
fn sweep_finds_the_500_to_1500_byte_window() {
    require_root!();
    let mut lab = NetnsPair::new("lsw", 91, 1500);
    let server = lab.addr_b.clone();
    lab.spawn(
        &lab.b.clone(),
        &[
            "serve",
            "--bind",
            &server,
            "--split-response",
            "500",
            "--nagle",
            "-q",
        ],
    );
    std::thread::sleep(Duration::from_millis(400));
    let sizes = "300,450,500,600,800,1000,1200,1400,1600,1800,1900,2000,2200,2600,3000";
    let (code, out, err) = lab.run(
        &lab.a,
        &[
            "rr", &server, "--sizes", sizes, "-d", "300ms", "-w", "100ms", "--json",
        ],
    );
    assert_eq!(code, 1, "a jump is a finding: {err}");
    let doc = json_checked(&out, "rr");
    let flagged: Vec<u64> = doc["size_jump"]["sizes"]
        .as_array()
        .expect("a jump")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        flagged,
        vec![600, 800, 1000, 1200, 1400, 1600, 1800, 1900],
        "{out}"
    );
    let excess = doc["size_jump"]["excess_ns"].as_u64().unwrap();
    // A delayed-ACK stall (~40 ms); a loaded machine adds a few ms of scheduling (51.8 ms seen).
    assert!(
        (35_000_000..=65_000_000).contains(&excess),
        "stall {excess} ns"
    );
}

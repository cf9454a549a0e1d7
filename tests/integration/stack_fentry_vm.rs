//! `latscope stack` on the path real servers take: fentry/fexit. This machine's kernel refuses
//! BPF trampolines, so the test boots Debian 12's stock kernel (6.1, fetched by
//! `scripts/vm-kernel.sh`) under QEMU with an initramfs of busybox + virtio/9p modules, mounts
//! the host's root read-only over 9p and runs `tests/lab/vm/guest.sh` there: latscope serve,
//! stack and rr on the VM's loopback. Checks that the fentry/fexit hooks are the ones chosen,
//! receive and transmit, that every probe counts the traffic, and that nothing stays attached
//! after Ctrl-C. Also
//! `latscope sockets` on a kernel without sock_diag handlers (the VM has no tcp_diag module).
//!
//! Emulated (TCG), so ~30 s; the VM has no network device and touches nothing of the host's.
#![allow(clippy::unwrap_used)]

use crate::lab;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lab::BIN;

/// Transactions per transport.
const N: u64 = 300;

fn vm_dir() -> PathBuf {
    std::env::var_os("LATSCOPE_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/latscope/vm"))
}

fn which(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// busybox, the modules and tests/lab/vm/init, as a gzipped cpio archive in `dir`.
fn initramfs(dir: &Path, kernel: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in ["bin", "mods", "proc", "sys", "dev", "host"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let init = root.join("init");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lab/vm/init"),
        &init,
    )
    .unwrap();
    for e in std::fs::read_dir(kernel.join("modules")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), root.join("mods").join(e.file_name())).unwrap();
    }
    let out = dir.join("initrd.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && find . | cpio -o -H newc --quiet | gzip -1 > \"$2\"")
        .args(["sh", root.to_str().unwrap(), out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "building the initramfs failed");
    out
}

/// Boot the VM; return its console lines that start with LSVM-.
fn boot(kernel: &Path, initrd: &Path, lscmd: &str) -> Vec<String> {
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "2"])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(kernel.join("vmlinuz"))
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 quiet panic=-1 lscmd={lscmd}"))
        .args([
            "-virtfs",
            "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("qemu-system-x86_64");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).trim().to_string();
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut lines = Vec::new();
    let mut all = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                if let Some(i) = l.find("LSVM-") {
                    lines.push(l[i..].to_string());
                }
                all.push(l);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the VM did not finish within 10 min; console tail:\n{}",
                    all[all.len().saturating_sub(30)..].join("\n")
                );
            }
        }
    }
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l.starts_with("LSVM-DONE")),
        "the guest script did not finish; console tail:\n{}",
        all[all.len().saturating_sub(40)..].join("\n")
    );
    lines
}

fn field<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key} line in {lines:#?}"))
}

#[test]
fn fentry_hooks_on_a_stock_kernel_count_every_packet_and_detach() {
    require_root!(); // BPF in the VM is loaded by root, as CI does
    let kernel = vm_dir();
    assert!(
        kernel.join("vmlinuz").exists() && kernel.join("modules/order").exists(),
        "no test kernel in {}: run scripts/setup.sh (it calls scripts/vm-kernel.sh)",
        kernel.display()
    );
    for prog in ["qemu-system-x86_64", "cpio", "gzip"] {
        assert!(which(prog), "{prog} missing: run scripts/setup.sh");
    }
    assert!(
        Path::new("/bin/busybox").exists(),
        "/bin/busybox missing: run scripts/setup.sh"
    );
    let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lab/vm/guest.sh");
    let lscmd = format!("{},{BIN},{N}", guest.display());
    assert!(
        !lscmd.contains(' '),
        "paths with spaces cannot go on the kernel command line: {lscmd}"
    );

    // The initramfs's tree and archive: removed on drop, also when the boot fails.
    let tmp = lab::TempDir::new();
    let initrd = initramfs(&tmp.0, &kernel);
    let lines = boot(&kernel, &initrd, &lscmd);
    drop(tmp);

    assert!(
        !lines.iter().any(|l| l.starts_with("LSVM-ERROR")),
        "{lines:#?}"
    );
    let version = std::fs::read_to_string(kernel.join("version")).unwrap();
    assert_eq!(field(&lines, "LSVM-KERNEL"), version.trim());
    assert_eq!(field(&lines, "LSVM-RR-UDP"), "0", "{lines:#?}");
    assert_eq!(field(&lines, "LSVM-RR-TCP"), "0", "{lines:#?}");
    // 130: interrupted by Ctrl-C, the histograms printed (README, exit codes).
    assert_eq!(
        field(&lines, "LSVM-STACK-EXIT"),
        "130",
        "stack: {}",
        field(&lines, "LSVM-STDERR")
    );
    let doc: serde_json::Value = serde_json::from_str(field(&lines, "LSVM-JSON")).unwrap();

    // The hooks: fentry/fexit wherever netstacklat hooks (6.1 inlines tcp_data_queue_ofo, so
    // tcp-socket-enqueued takes fexit/tcp_queue_rcv alone). tcp-socket-read prefers the
    // skb_copy_datagram_iovec tracepoint, which sees every read (fentry/tcp_recv_timestamp only
    // reads by sockets that ask for timestamps).
    let hook = |probe: &str| -> (String, String) {
        let p = doc["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == probe)
            .unwrap_or_else(|| panic!("{probe} not in {}", doc["probes"]));
        (
            p["hook"].as_str().unwrap_or("").to_string(),
            p["hook_kind"].as_str().unwrap_or("").to_string(),
        )
    };
    for (probe, want) in [
        ("ip-start", "fentry/ip_rcv_core+ip6_rcv_core"),
        ("tcp-start", "fentry/tcp_v4_rcv+tcp_v6_rcv"),
        ("udp-start", "fentry/udp_rcv+udpv6_rcv"),
        ("tcp-socket-enqueued", "fexit/tcp_queue_rcv"),
        ("udp-socket-enqueued", "fexit/__udp_enqueue_schedule_skb"),
        ("udp-socket-read", "fentry/skb_consume_udp"),
    ] {
        assert_eq!(
            hook(probe),
            (want.to_string(), "fentry".to_string()),
            "{probe}: {:#}",
            doc["probes"]
        );
    }
    assert_eq!(hook("tcp-socket-read").0, "tp_btf/skb_copy_datagram_iovec");
    // The attach note must not claim a fallback for everything.
    assert!(
        !field(&lines, "LSVM-STDERR").contains("refused by this kernel"),
        "{}",
        field(&lines, "LSVM-STDERR")
    );

    // Counts: every transaction is two received packets (request at the server, response at
    // the client), warm-up comes on top; ip-start sees both transports.
    let hists = doc["histograms"].as_array().unwrap();
    fn of<'a>(
        hists: &'a [serde_json::Value],
        probe: &'a str,
    ) -> impl Iterator<Item = &'a serde_json::Value> {
        hists.iter().filter(move |h| h["probe"] == probe)
    }
    let count =
        |probe: &str| -> u64 { of(hists, probe).map(|h| h["count"].as_u64().unwrap()).sum() };
    for probe in [
        "tcp-start",
        "udp-start",
        "tcp-socket-enqueued",
        "udp-socket-enqueued",
        "tcp-socket-read",
        "udp-socket-read",
    ] {
        assert!(
            count(probe) >= 2 * N,
            "{probe}: {} samples for {N} transactions: {}",
            count(probe),
            doc["histograms"]
        );
    }
    // Each UDP datagram passes udp-start, is queued and is read exactly once.
    let (us, ue, ur) = (
        count("udp-start"),
        count("udp-socket-enqueued"),
        count("udp-socket-read"),
    );
    assert!(
        ue <= us && ur <= ue && ur * 100 >= us * 95,
        "{us} {ue} {ur}"
    );
    assert!(
        count("ip-start") >= count("tcp-start") + count("udp-start") * 95 / 100,
        "ip-start {} against tcp-start {} + udp-start {}",
        count("ip-start"),
        count("tcp-start"),
        count("udp-start")
    );
    // Later hooks, later times: the medians grow along the path.
    let p50 = |probe: &str| -> f64 { of(hists, probe).find_map(|h| h["p50_ns"].as_f64()).unwrap() };
    assert!(
        p50("udp-start") <= p50("udp-socket-read"),
        "{}",
        doc["histograms"]
    );
    assert!(
        p50("tcp-start") <= p50("tcp-socket-read"),
        "{}",
        doc["histograms"]
    );

    // With address filters on (a code path of its own in every program) the same fentry hooks
    // load, and the TCP probes count the loopback rr: its 127.0.0.1 <-> 127.0.0.1 packets.
    assert_eq!(field(&lines, "LSVM-FSTACK-EXIT"), "130");
    let filtered: serde_json::Value = serde_json::from_str(field(&lines, "LSVM-FJSON")).unwrap();
    for probe in ["tcp-start", "tcp-socket-enqueued", "tcp-socket-read"] {
        let p = filtered["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == probe)
            .unwrap();
        assert!(p["hook"].is_string(), "{probe} refused with filters: {p:#}");
        let n: u64 = of(filtered["histograms"].as_array().unwrap(), probe)
            .map(|h| h["count"].as_u64().unwrap())
            .sum();
        assert!(n >= N, "{probe}: {n} samples with the address filters");
    }
    assert_eq!(
        hook("tcp-socket-enqueued").1,
        filtered["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == "tcp-socket-enqueued")
            .unwrap()["hook_kind"]
    );

    transmit_stages(&lines);

    // Ctrl-C detached everything, the transmit programs included.
    assert_eq!(field(&lines, "LSVM-LEFT"), "0");

    // `latscope sockets` without sock_diag handlers (no tcp_diag/udp_diag module in the VM):
    // the connection still listed, with its owners and options, from /proc/net, and said so.
    assert_eq!(field(&lines, "LSVM-SOCKETS-EXIT"), "0");
    let sk: serde_json::Value = serde_json::from_str(field(&lines, "LSVM-SOCKETS-JSON")).unwrap();
    let rows = sk["sockets"].as_array().unwrap();
    let has = |proto: &str, state: &str| {
        rows.iter().any(|r| {
            r["proto"] == proto
                && r["state"] == state
                && r["owners"].as_array().is_some_and(|o| !o.is_empty())
        })
    };
    assert!(has("tcp", "LISTEN") && has("udp", "UNCONN"), "{sk}");
    assert!(
        rows.iter()
            .filter(|r| r["proto"] == "tcp" && r["state"] == "ESTAB")
            .count()
            >= 2,
        "both ends of the rr connection: {sk}"
    );
    let notes = sk["notes"].to_string();
    assert!(
        notes.contains("no sock_diag handler for tcp") && notes.contains("/proc/net"),
        "{notes}"
    );
}

/// `stack --direction tx` under the same loopback rr: the write's and IP output's boundaries on
/// fentry (this machine's kernel takes netfilter links and kprobes for them), the device layer
/// on its tracepoints, and every packet in every stage once.
fn transmit_stages(lines: &[String]) {
    assert_eq!(
        field(lines, "LSVM-TXSTACK-EXIT"),
        "130",
        "stack --direction tx: {}",
        field(lines, "LSVM-TXSTDERR")
    );
    let doc: serde_json::Value = serde_json::from_str(field(lines, "LSVM-TXJSON")).unwrap();
    let status = |probe: &str| -> (String, String) {
        let p = doc["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == probe)
            .unwrap_or_else(|| panic!("{probe} not in {:#}", doc["probes"]));
        (
            p["hook"].as_str().unwrap_or("").to_string(),
            p["hook_kind"].as_str().unwrap_or("").to_string(),
        )
    };
    // A stage is timed between two boundaries: its hook reads `start → end`. 6.1 still has
    // do_tcp_sendpages(), so the TCP write takes the pair. IP output cannot be fentry there:
    // ip6_xmit() has 7 arguments and x86 trampolines take 6 before 6.5 (-ENOTSUPP on attach),
    // and netfilter links came in 6.4; its kprobes see every packet instead, and the refusals
    // are named.
    let write = "fentry/tcp_sendmsg_locked+do_tcp_sendpages";
    let ip_out = "kprobe/__ip_local_out+__ip6_local_out+ip6_xmit";
    let local_out_done = "fentry/ip_output+ip6_output";
    let post_routing_done = "fentry/ip_finish_output+ip6_finish_output";
    for (probe, from, to, kind) in [
        ("tcp-send-queue", write, ip_out, "kprobe"),
        (
            "udp-send",
            "fentry/udp_sendmsg+udpv6_sendmsg",
            ip_out,
            "kprobe",
        ),
        ("local-out", ip_out, local_out_done, "kprobe"),
        ("post-routing", local_out_done, post_routing_done, "fentry"),
        (
            "dev-egress",
            post_routing_done,
            "tp_btf/net_dev_queue",
            "tp_btf",
        ),
        (
            "qdisc",
            "tp_btf/net_dev_queue",
            "tp_btf/net_dev_start_xmit",
            "tp_btf",
        ),
        (
            "driver",
            "tp_btf/net_dev_start_xmit",
            "tp_btf/net_dev_xmit",
            "tp_btf",
        ),
        (
            "tx-completion",
            "tp_btf/net_dev_xmit",
            "tp_btf/consume_skb",
            "tp_btf",
        ),
    ] {
        assert_eq!(
            status(probe),
            (format!("{from} → {to}"), kind.to_string()),
            "{probe}: {:#}",
            doc["probes"]
        );
    }
    let refused = doc["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "local-out")
        .map(|p| p["refused"].to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("lsstk_io_fex6") && refused.contains("ENOTSUPP"),
        "{refused}"
    );
    let hists = doc["histograms"].as_array().unwrap();
    let count = |probe: &str| -> u64 {
        hists
            .iter()
            .filter(|h| h["probe"] == probe)
            .map(|h| h["count"].as_u64().unwrap())
            .sum()
    };
    // Each transaction is two writes (the request, the response) per transport, each one
    // packet on loopback.
    let (tcp, udp) = (count("tcp-send-queue"), count("udp-send"));
    assert!(
        tcp >= 2 * N && udp >= 2 * N,
        "tcp {tcp}, udp {udp}: {hists:#?}"
    );
    // Every packet IP sends passes each stage from IP output to the driver once (handshakes and
    // pure ACKs too, which no write starts): the counts agree.
    let path = ["local-out", "post-routing", "dev-egress", "qdisc", "driver"];
    let counts: Vec<u64> = path.iter().map(|p| count(p)).collect();
    assert!(
        counts[0] >= tcp + udp,
        "{counts:?} against {tcp} + {udp} writes"
    );
    for c in &counts {
        assert!(
            c.abs_diff(counts[0]) <= counts[0] / 50,
            "{path:?}: {counts:?}"
        );
    }
    // Loopback hands every skb to its receive path: no completion to time, said so.
    assert_eq!(count("tx-completion"), 0, "{hists:#?}");
    let handed = doc["stamps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["probe"] == "tx-completion")
        .and_then(|s| s["handed_on"].as_u64())
        .unwrap_or(0);
    assert!(
        handed >= counts[4] * 9 / 10,
        "handed on {handed} of {counts:?}"
    );
}

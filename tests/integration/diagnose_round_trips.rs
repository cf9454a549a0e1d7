//! diagnose at a distance: the round trips a request costs over a 40 ms path (the lab's TUN
//! delay line, 20 ms each way) and the rules that name the avoidable ones — each fault built,
//! named, and its fix shown to take the finding away. The lab's far scenarios
//! (`tests/diagnose_lab/far.rs`) run the others from every seat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::time::Duration;

use lab::nginx::{Nginx, NginxConf};
use lab::probe::DelayLine;
use serde_json::Value;

/// An nginx 40 ms away: `one_way` each way on the delay line, nginx in the server's namespace
/// serving a page of `page_bytes`.
struct Far {
    dl: DelayLine,
    ng: Nginx,
}

fn far(page_bytes: usize) -> Far {
    let one_way = Duration::from_millis(20);
    let dl = DelayLine::asymmetric(one_way, one_way, 1500);
    let ng = Nginx::start(NginxConf {
        netns: Some(dl.server.name.clone()),
        addr: "10.8.0.2".into(),
        index_bytes: page_bytes,
        ..NginxConf::default()
    });
    Far { dl, ng }
}

impl Far {
    /// The server's route to the client with `what` (e.g. `initcwnd 4`, `congctl cubic`).
    fn route(&self, what: &[&str]) {
        let mut args = vec!["route", "change", "10.8.0.1", "dev", "dl0"];
        args.extend_from_slice(what);
        self.dl.server.ip(&args);
    }

    /// `latscope diagnose URL --no-load -d 1s --json` from the client's namespace: its exit
    /// code and its document, checked against the schema.
    fn diagnose(&self, path: &str) -> (i32, Value) {
        let url = self.ng.url(path);
        let out = self
            .dl
            .client
            .latscope(&["diagnose", &url, "--no-load", "-d", "1s", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        lab::validate(&doc, "diagnose");
        (out.status.code().unwrap_or(-1), doc)
    }
}

fn rules(doc: &Value) -> Vec<&str> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect()
}

/// The account of `request` ("first", "next", "after_idle", "returning").
fn account<'a>(doc: &'a Value, request: &str) -> &'a Value {
    doc["round_trips"]["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("no round trips: {doc}"))
        .iter()
        .find(|a| a["request"] == request)
        .unwrap_or_else(|| panic!("no {request} account: {}", doc["round_trips"]))
}

/// The round trips of `account`'s parts that `rule` marks avoidable.
fn avoidable(account: &Value, rule: &str) -> u64 {
    account["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["rule"] == rule)
        .map(|p| p["avoidable"].as_u64().unwrap())
        .sum()
}

/// A keep-alive server whose congestion control restarts slow start after an idle pause
/// (cubic, `tcp_slow_start_after_idle` = 1, Linux's defaults; this host's default BBR restarts
/// nothing), 256 KiB page: the request after the pause takes round trips the back-to-back one
/// did not, named with its fix; with the fix applied the finding goes and the path is the floor.
#[test]
fn slow_start_after_idle_is_named_and_its_fix_takes_it_away() {
    require_root!();
    let _timing = lab::timing_lock();
    let f = far(256 * 1024);
    f.route(&["congctl", "cubic"]);
    let (code, doc) = f.diagnose("/index.html");
    assert_eq!(rules(&doc).first(), Some(&"slow_start_after_idle"), "{doc}");
    assert_eq!(code, 1);
    let idle = account(&doc, "after_idle");
    assert!(avoidable(idle, "slow_start_after_idle") >= 1, "{idle}");
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("a request after an idle pause:") && verdict.contains("would do"),
        "{verdict}"
    );
    f.dl.server.sysctl("net.ipv4.tcp_slow_start_after_idle=0");
    let (code, doc) = f.diagnose("/index.html");
    assert!(!rules(&doc).contains(&"slow_start_after_idle"), "{doc}");
    assert_eq!(code, 0, "{}", doc["verdict"]);
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("the path is the floor"), "{verdict}");
}

/// A server whose route starts connections with four segments: a new connection's 256 KiB take
/// round trips ten segments would not; a URL that redirects pays its round trip before the page.
#[test]
fn a_small_initial_window_and_a_redirect() {
    require_root!();
    let _timing = lab::timing_lock();
    let f = far(256 * 1024);
    f.route(&["initcwnd", "4"]);
    let (code, doc) = f.diagnose("/index.html");
    assert_eq!(rules(&doc).first(), Some(&"small_initial_window"), "{doc}");
    assert_eq!(code, 1);
    let first = account(&doc, "first");
    assert!(avoidable(first, "small_initial_window") >= 1, "{first}");
    // nginx answers a directory without its slash with a 301 to it.
    let sub = f.ng.dir.path("html/sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("index.html"), "sub").unwrap();
    std::fs::set_permissions(&sub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (code, doc) = f.diagnose("/sub");
    assert_eq!(rules(&doc).first(), Some(&"redirects"), "{doc}");
    assert_eq!(code, 1);
    let finding = &doc["findings"][0];
    assert!(
        finding["fix"]
            .as_str()
            .unwrap()
            .contains(&f.ng.url("/sub/")),
        "{finding}"
    );
    // The redirect's round trip, 40 ms of it: never more than was measured.
    let explains = finding["explains_ns"].as_u64().unwrap();
    assert!((30_000_000..200_000_000).contains(&explains), "{finding}");
    let first = account(&doc, "first");
    assert_eq!(avoidable(first, "redirects"), 1, "{first}");
}

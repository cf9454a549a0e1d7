//! `latscope report` pages in a real headless browser (Debian `chromium`, installed by
//! scripts/setup.sh from scripts/packages.d/report.txt): each page loads from a file:// URL
//! with no console error and no network request, its plots are in the rendered DOM, and a PNG
//! screenshot of each is kept under target/report-screenshots/ as an artefact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod lab;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::*;

const CHROMIUM: &str = "chromium";
/// A cold start of chromium on a loaded 2-core machine takes a few seconds.
const BROWSER_DEADLINE: Duration = Duration::from_secs(90);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Run chromium headless on `page` with `mode` (`--dump-dom` or `--screenshot=…`); return
/// (stdout, stderr). Killed at the deadline.
fn chromium(page: &Path, mode: &str, width: u32) -> (String, String) {
    let profile = std::env::temp_dir().join(format!(
        "latscope-chromium-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ u128::from(width) ^ page.as_os_str().len() as u128
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--window-size={width},2200"),
            mode,
            &format!("file://{}", page.display()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{CHROMIUM} not found ({e}): run scripts/setup.sh (scripts/packages.d/report.txt)"
            )
        });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > BROWSER_DEADLINE {
            let _ = child.kill();
            panic!("chromium did not finish within {BROWSER_DEADLINE:?} on {page:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Console messages chromium logs for the page (`CONSOLE(line)] "…"` lines).
fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("CONSOLE")).collect()
}

#[test]
fn each_report_kind_renders_in_chromium() {
    let data = root().join("tests/data/report");
    let pages = root().join("target/report-screenshots");
    std::fs::create_dir_all(&pages).unwrap();
    let cases: [(&str, &[&str], &[&str]); 10] = [
        ("diagnose", &["diagnose.json"], &["budget", "spectrum"]),
        ("rr-sweep", &["rr-sizes-stall.json"], &["sweep"]),
        (
            "http",
            &["http-open.json"],
            &[
                "spectrum",
                "histogram",
                "rate-over-time",
                "latency-over-time",
            ],
        ),
        ("stack", &["stack.json"], &["stack-histograms"]),
        (
            "analyze",
            &["analyze.json"],
            &["connection-stalls", "spectrum"],
        ),
        ("ping", &["ping.json"], &["spectrum", "histogram"]),
        ("stream", &["stream.json"], &["throughput", "spectrum"]),
        ("trace", &["trace-stats.json"], &["hop-rtt", "hop-loss"]),
        (
            "stream-udp",
            &["stream-udp.json"],
            &["throughput", "udp-loss", "udp-jitter"],
        ),
        (
            "compare",
            &["rr.json", "rr-nagle.json"],
            &["compare-spectrum"],
        ),
    ];
    for (name, inputs, plots) in cases {
        let page = pages.join(format!("{name}.html"));
        let mut args = vec!["report".to_string()];
        args.extend(inputs.iter().map(|i| data.join(i).display().to_string()));
        args.extend(["-o".to_string(), page.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run(&args);
        assert_eq!(code, 0, "{err}");

        let (dom, stderr) = chromium(&page, "--dump-dom", 1000);
        assert!(
            console_lines(&stderr).is_empty(),
            "{name}: console output: {:?}",
            console_lines(&stderr)
        );
        assert!(dom.contains("</html>"), "{name}: no DOM: {stderr}");
        for p in plots {
            let tag = format!("data-plot=\"{p}\"");
            let at = dom
                .find(&tag)
                .unwrap_or_else(|| panic!("{name}: no {p} plot in the DOM"));
            let fig = &dom[at..at + dom[at..].find("</figure>").unwrap()];
            assert!(
                fig.contains("<svg") && fig.contains("<text"),
                "{name}: {p} is empty in the DOM"
            );
        }

        // Desktop and phone widths; the PNGs stay as artefacts.
        for (suffix, width) in [("", 1000), ("-phone", 390)] {
            let png = pages.join(format!("{name}{suffix}.png"));
            let _ = std::fs::remove_file(&png);
            let (_, stderr) = chromium(&page, &format!("--screenshot={}", png.display()), width);
            let bytes = std::fs::read(&png)
                .unwrap_or_else(|e| panic!("{name}: no screenshot ({e}): {stderr}"));
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a PNG");
            // A blank 1000×2200 page compresses to a few kB; drawn plots and text do not.
            assert!(
                bytes.len() > 30_000,
                "{name}{suffix}: screenshot looks empty ({} bytes)",
                bytes.len()
            );
            // LATSCOPE_UPDATE_SCREENSHOTS=1 refreshes the README's pictures from this run.
            if suffix.is_empty() && std::env::var_os("LATSCOPE_UPDATE_SCREENSHOTS").is_some() {
                std::fs::copy(&png, root().join(format!("docs/report-{name}.png"))).unwrap();
            }
        }
    }
}

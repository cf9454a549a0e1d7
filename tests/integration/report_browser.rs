//! `latscope report` pages in a real headless browser (Debian `chromium`, installed by
//! scripts/setup.sh from scripts/packages.d/report.txt): each page loads from a file:// URL
//! with no console error and no network request, its plots are in the rendered DOM, and a PNG
//! screenshot of each is kept under target/report-screenshots/ as an artefact; at a phone
//! width (390 px) nothing may stick out sideways except inside a sideways-scrolling container.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

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
    // One profile per launch (the binary's tests run at once): this process's id and a counter.
    static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let profile = std::env::temp_dir().join(format!(
        "latscope-chromium-{}-{}",
        std::process::id(),
        LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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
            // The phone check's wrapper page reads the framed page's layout.
            "--allow-file-access-from-files",
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

/// Layout viewport of the phone check, CSS px (an iPhone 12–15's width).
const PHONE_WIDTH: u32 = 390;

/// Headless chromium lays a window out at least 500 px wide, so the phone check puts the page
/// in a `PHONE_WIDTH` px iframe of a wrapper page (`{W}`: the width, `{SRC}`: the page's file
/// name). Once the page has loaded, the wrapper's script lists what sticks out of the frame's
/// viewport sideways — the page's own scroll width, and every element reaching past either
/// edge that is not inside a container scrolling sideways (`overflow-x: auto|scroll`, the
/// tables' `.scroll`) — into `<pre id="latscope-overflow">`, which `--dump-dom` returns. The
/// page itself is not changed (it has no script).
const PHONE_WRAPPER: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
body{margin:0;background:#888}iframe{display:block;border:0;width:{W}px;height:2200px;background:#fff}
</style></head><body><iframe id="phone" src="{SRC}"></iframe><script>
var frame = document.getElementById('phone');
frame.addEventListener('load', function () {
  var w = frame.contentWindow, d = frame.contentDocument, vw = w.innerWidth;
  var out = ['viewport ' + vw];
  if (d.documentElement.scrollWidth > vw) out.push('page: scrollWidth ' + d.documentElement.scrollWidth);
  var all = d.body.getElementsByTagName('*');
  for (var i = 0; i < all.length; i++) {
    var e = all[i], r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right <= vw + 0.5 && r.left >= -0.5) continue;
    var p = e.parentElement, scrolls = false;
    for (; p && p !== d.body; p = p.parentElement) {
      var ox = w.getComputedStyle(p).overflowX;
      if (ox === 'auto' || ox === 'scroll') { scrolls = true; break; }
    }
    if (scrolls) continue;
    var cls = typeof e.className === 'string' && e.className ? '.' + e.className : '';
    var txt = (e.textContent || '').replace(/\s+/g, ' ').slice(0, 50);
    out.push('overflow: ' + e.tagName.toLowerCase() + cls + ' spans ' + Math.round(r.left) +
      '..' + Math.round(r.right) + ' px: ' + txt);
  }
  var pre = document.createElement('pre');
  pre.id = 'latscope-overflow';
  pre.textContent = out.join('\n');
  document.body.appendChild(pre);
});
</script></body></html>
"#;

/// The wrapper page showing `page` in a phone-wide frame, next to it.
fn phone_wrapper(page: &Path) -> PathBuf {
    let wrapper = page.with_extension("phone.html");
    let src = page.file_name().unwrap().to_str().unwrap();
    std::fs::write(
        &wrapper,
        PHONE_WRAPPER
            .replace("{W}", &PHONE_WIDTH.to_string())
            .replace("{SRC}", src),
    )
    .unwrap();
    wrapper
}

/// Report kinds the browser opens: (name, inputs in tests/data/report, plots expected). The
/// desktop screenshot of each is `docs/report-<name>.png` (LATSCOPE_UPDATE_SCREENSHOTS=1).
const CASES: [(&str, &[&str], &[&str]); 12] = [
    ("rr", &["rr.json"], &["spectrum", "histogram"]),
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
    ("stream", &["stream.json"], &["throughput", "spectrum"]),
    (
        "stream-udp",
        &["stream-udp.json"],
        &["throughput", "udp-loss", "udp-jitter"],
    ),
    ("connect", &["connect.json"], &["spectrum", "histogram"]),
    ("ping", &["ping.json"], &["spectrum", "histogram"]),
    ("trace", &["trace-stats.json"], &["hop-rtt", "hop-loss"]),
    (
        "analyze",
        &["analyze.json"],
        &["connection-stalls", "spectrum"],
    ),
    ("stack", &["stack.json"], &["stack-histograms"]),
    ("diagnose", &["diagnose.json"], &["budget", "spectrum"]),
    (
        "compare",
        &["rr.json", "rr-nagle.json"],
        &["compare-spectrum"],
    ),
];

/// `latscope report` of `inputs` into `page`.
fn render(inputs: &[&str], page: &Path) {
    let data = root().join("tests/data/report");
    let mut args = vec!["report".to_string()];
    args.extend(inputs.iter().map(|i| data.join(i).display().to_string()));
    args.extend(["-o".to_string(), page.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
}

/// The page at desktop width: no console message, each expected plot drawn in the DOM.
fn check_dom(name: &str, page: &Path, plots: &[&str]) {
    let (dom, stderr) = chromium(page, "--dump-dom", 1000);
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
}

/// What the phone check found on `page` in a `PHONE_WIDTH` px frame: the viewport line, then
/// one line per overflow.
fn overflow_at_phone_width(page: &Path) -> Vec<String> {
    let wrapper = phone_wrapper(page);
    let (dom, stderr) = chromium(&wrapper, "--dump-dom", 500);
    assert!(
        console_lines(&stderr).is_empty(),
        "{page:?} at {PHONE_WIDTH} px: console output: {:?}",
        console_lines(&stderr)
    );
    let start = dom
        .find("<pre id=\"latscope-overflow\">")
        .unwrap_or_else(|| panic!("{page:?}: the phone check did not run: {stderr}"));
    let text = &dom[start..];
    let text = &text[text.find('>').unwrap() + 1..text.find("</pre>").unwrap()];
    text.lines()
        .map(|l| {
            l.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&")
        })
        .collect()
}

/// Screenshots at desktop and phone widths (the phone one is the wrapper: the page in its
/// frame, grey beside it), kept as artefacts; the desktop one refreshes
/// docs/report-<name>.png with LATSCOPE_UPDATE_SCREENSHOTS=1.
fn screenshots(name: &str, page: &Path) {
    let pages = page.parent().unwrap();
    let phone = phone_wrapper(page);
    for (suffix, shown, width) in [("", page, 1000), ("-phone", phone.as_path(), 500)] {
        let png = pages.join(format!("{name}{suffix}.png"));
        let _ = std::fs::remove_file(&png);
        let (_, stderr) = chromium(shown, &format!("--screenshot={}", png.display()), width);
        let bytes =
            std::fs::read(&png).unwrap_or_else(|e| panic!("{name}: no screenshot ({e}): {stderr}"));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a PNG");
        // A blank 1000×2200 page compresses to a few kB; drawn plots and text do not.
        assert!(
            bytes.len() > 30_000,
            "{name}{suffix}: screenshot looks empty ({} bytes)",
            bytes.len()
        );
        if suffix.is_empty() && std::env::var_os("LATSCOPE_UPDATE_SCREENSHOTS").is_some() {
            std::fs::copy(&png, root().join(format!("docs/report-{name}.png"))).unwrap();
        }
    }
}

#[test]
fn each_report_kind_renders_in_chromium() {
    let pages = root().join("target/report-screenshots");
    std::fs::create_dir_all(&pages).unwrap();
    let mut overflows = Vec::new();
    for (name, inputs, plots) in CASES {
        let page = pages.join(format!("{name}.html"));
        render(inputs, &page);
        check_dom(name, &page, plots);
        let found = overflow_at_phone_width(&page);
        assert_eq!(
            found.first().map(String::as_str),
            Some(format!("viewport {PHONE_WIDTH}").as_str()),
            "{name}: the phone check did not get a {PHONE_WIDTH} px viewport: {found:?}"
        );
        overflows.extend(found[1..].iter().map(|l| format!("{name}: {l}")));
        screenshots(name, &page);
    }
    assert!(
        overflows.is_empty(),
        "wider than a {PHONE_WIDTH} px phone (outside a sideways-scrolling container):\n{}",
        overflows.join("\n")
    );
}

/// The probe itself: a page with a wide element outside any scrolling container is caught,
/// and the same element inside `.scroll` is not (so the check above can fail).
#[test]
fn the_phone_check_catches_an_overflow() {
    let dir = root().join("target/report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("overflow-fixture.html");
    let doc = |body: &str| {
        format!(
            "<!DOCTYPE html><html><head><meta name=\"viewport\" content=\"width=device-width\">\
             <style>body{{margin:0}}.scroll{{overflow-x:auto}}</style></head><body>{body}</body></html>"
        )
    };
    std::fs::write(
        &page,
        doc("<p>fits</p><div style=\"width:900px\">wide</div>"),
    )
    .unwrap();
    let found = overflow_at_phone_width(&page);
    assert!(
        found.iter().any(|l| l.starts_with("page: scrollWidth")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|l| l.contains("overflow: div")),
        "{found:?}"
    );
    std::fs::write(
        &page,
        doc("<div class=\"scroll\"><div style=\"width:900px\">wide</div></div>"),
    )
    .unwrap();
    assert_eq!(
        overflow_at_phone_width(&page),
        vec![format!("viewport {PHONE_WIDTH}")]
    );
}

/// Long file names (a title, the navigation, the ratio table's row headers) and long unbroken
/// words still fit a phone: they wrap, or scroll inside their table.
#[test]
fn long_names_fit_a_phone() {
    let dir = root().join("target/report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let data = root().join("tests/data/report");
    let mut inputs = Vec::new();
    for (src, name) in [
        (
            "rr.json",
            "rr_before_the_fix_db_primary_eu_west_1_2026_11_24T19_10_15Z.json",
        ),
        (
            "rr-nagle.json",
            "rr_after_the_fix_db_primary_eu_west_1_2026_11_25T08_00_00Z.json",
        ),
    ] {
        let to = dir.join(name);
        std::fs::copy(data.join(src), &to).unwrap();
        inputs.push(to.display().to_string());
    }
    let page = dir.join("long-names.html");
    let mut args = vec!["report"];
    args.extend(inputs.iter().map(String::as_str));
    args.extend(["-o", page.to_str().unwrap()]);
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let found = overflow_at_phone_width(&page);
    assert_eq!(found, vec![format!("viewport {PHONE_WIDTH}")], "{found:#?}");
}

/// Width of the desktop check, CSS px: a laptop's window.
const DESKTOP_WIDTH: u32 = 1280;

/// The page in a `{W}` px frame; once loaded, every sideways-scrolling container whose content
/// is wider than itself is listed in `<pre id="latscope-scrolls">`.
const DESKTOP_WRAPPER: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
body{margin:0}iframe{display:block;border:0;width:{W}px;height:2200px}
</style></head><body><iframe id="page" src="{SRC}"></iframe><script>
var frame = document.getElementById('page');
frame.addEventListener('load', function () {
  var d = frame.contentDocument, out = ['viewport ' + frame.contentWindow.innerWidth];
  var all = d.querySelectorAll('.scroll');
  for (var i = 0; i < all.length; i++) {
    var e = all[i], t = e.firstElementChild;
    if (e.scrollWidth > e.clientWidth + 1)
      out.push('scrolls: ' + (t ? t.tagName.toLowerCase() + '.' + t.className : '?') + ' ' +
        e.scrollWidth + ' px in ' + e.clientWidth);
  }
  var pre = document.createElement('pre');
  pre.id = 'latscope-scrolls';
  pre.textContent = out.join('\n');
  document.body.appendChild(pre);
});
</script></body></html>
"#;

/// Issue 41: at 1280 px the http page's percentile table scrolled sideways and hid `max`.
/// On a desktop window no table of a page needs to scroll.
#[test]
fn tables_fit_a_desktop_window() {
    let dir = root().join("target/report-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("desktop-http.html");
    render(&["http-open.json", "http.json", "diagnose.json"], &page);
    let wrapper = page.with_extension("desktop.html");
    std::fs::write(
        &wrapper,
        DESKTOP_WRAPPER
            .replace("{W}", &DESKTOP_WIDTH.to_string())
            .replace("{SRC}", page.file_name().unwrap().to_str().unwrap()),
    )
    .unwrap();
    let (dom, stderr) = chromium(&wrapper, "--dump-dom", DESKTOP_WIDTH + 20);
    let start = dom
        .find("<pre id=\"latscope-scrolls\">")
        .unwrap_or_else(|| panic!("the desktop check did not run: {stderr}"));
    let text = &dom[start..];
    let text = &text[text.find('>').unwrap() + 1..text.find("</pre>").unwrap()];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("viewport {DESKTOP_WIDTH}").as_str()),
        "{lines:?}"
    );
    assert!(
        lines.len() == 1,
        "tables wider than the page at {DESKTOP_WIDTH} px: {lines:?}"
    );
}

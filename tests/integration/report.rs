//! `latscope report`: golden-structure tests of the page drawn from committed example results
//! (made by real runs against `latscope serve` and nginx on loopback, tests/data/report) and
//! from results this test measures itself; errors; size and time bounds on large inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::lab;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab::*;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/report")
        .join(name)
}

fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/report-tests");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Render `inputs` through the binary; return the page.
fn render(inputs: &[&Path], out: &str) -> String {
    let out = out_dir().join(out);
    let mut args: Vec<String> = vec!["report".into()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    std::fs::read_to_string(&out).unwrap()
}

/// Each `<figure data-plot=…>` of the page: (plot kind, inner HTML).
fn figures(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("<figure class=\"plot\" data-plot=\"") {
        rest = &rest[i + 32..];
        let kind = rest[..rest.find('"').unwrap()].to_string();
        let end = rest.find("</figure>").unwrap();
        out.push((kind, rest[..end].to_string()));
        rest = &rest[end..];
    }
    out
}

/// Data marks drawn in a plot: lines, points and bars (the background is one `<rect>`).
fn marks(fig: &str) -> usize {
    fig.matches("<polyline").count() + fig.matches("<circle").count() + fig.matches("<rect").count()
        - 1
}

/// The page is self-contained and each expected plot is there, drawn, labelled and captioned.
fn assert_page(html: &str, expected: &[&str]) -> Vec<(String, String)> {
    for banned in ["<script", "<link", "src=", "@import", "url("] {
        assert!(
            !html.contains(banned),
            "the page must not load anything: found {banned}"
        );
    }
    let figs = figures(html);
    for want in expected {
        let (_, fig) = figs.iter().find(|(k, _)| k == want).unwrap_or_else(|| {
            panic!(
                "no {want} plot; plots: {:?}",
                figs.iter().map(|f| &f.0).collect::<Vec<_>>()
            )
        });
        assert!(
            fig.contains("<svg") && fig.contains("viewBox"),
            "{want}: no scalable SVG"
        );
        assert!(marks(fig) >= 2, "{want}: nothing drawn");
        assert!(
            fig.matches("<text").count() >= 4,
            "{want}: axis labels missing"
        );
        let cap = &fig[fig.find("<figcaption>").unwrap() + 12..fig.find("</figcaption>").unwrap()];
        assert!(
            cap.len() > 40,
            "{want}: the caption must say what to look at"
        );
    }
    figs
}

#[test]
fn every_committed_example_renders_its_plots() {
    let cases: [(&str, &[&str], &[&str]); 15] = [
        (
            "rr.json",
            &["spectrum", "histogram"],
            &["round trip", "one-way p50"],
        ),
        ("rr-nagle.json", &["spectrum"], &["Nagle on"]),
        ("rr-sizes.json", &["sweep"], &["No size jumped"]),
        (
            "rr-sizes-stall.json",
            &["sweep"],
            &["Stall at 8 of 9 sizes", "delayed ACK"],
        ),
        ("connect.json", &["spectrum", "histogram"], &["connect()"]),
        (
            "ping.json",
            &["spectrum", "histogram"],
            &["TCP SYN", "200 replies"],
        ),
        (
            "http.json",
            &[
                "spectrum",
                "histogram",
                "rate-over-time",
                "latency-over-time",
            ],
            &["request → response"],
        ),
        (
            "http-open.json",
            &[
                "spectrum",
                "histogram",
                "rate-over-time",
                "latency-over-time",
            ],
            &[
                "from intended send time (corrected)",
                "p99 from intended send (corrected)",
                "p99 from actual send (raw)",
            ],
        ),
        (
            "diagnose.json",
            &["budget", "spectrum"],
            &[
                "data-rule=\"nagle_delayed_ack\"",
                "Fix:",
                "quick-ack experiment",
            ],
        ),
        (
            "stack.json",
            &["stack-histograms"],
            &["tcp-socket-read", "tp_btf/netif_receive_skb"],
        ),
        (
            "analyze.json",
            &["connection-stalls", "spectrum"],
            &["Nagle x delayed ACK", "with nothing on the wire", "#61"],
        ),
        (
            "stream.json",
            &["throughput", "spectrum"],
            &["during the transfer", "client→server"],
        ),
        (
            "stream-udp.json",
            &["throughput", "udp-loss", "udp-jitter"],
            &["10.35%", "datagrams lost in the interval (%)"],
        ),
        (
            "trace.json",
            &["hop-rtt", "hop-loss"],
            &["10.77.2.2", "4 of 5", "5 per hop"],
        ),
        (
            "trace-stats.json",
            &["hop-rtt", "hop-loss"],
            &["38.0%", "200 rounds"],
        ),
    ];
    for (file, plots, texts) in cases {
        let html = render(&[&data(file)], &file.replace(".json", ".html"));
        assert_page(&html, plots);
        for t in texts {
            assert!(html.contains(&crate_esc(t)), "{file}: missing {t:?}");
        }
    }
}

/// The page escapes `<`, `>` and `&`; the arrow and quotes in our needles are written as the
/// page writes them.
fn crate_esc(s: &str) -> String {
    if s.starts_with("data-rule") {
        s.to_string()
    } else {
        s.replace('&', "&amp;")
    }
}

#[test]
fn the_stall_window_is_shaded_in_the_sweep() {
    let html = render(&[&data("rr-sizes-stall.json")], "sweep-stall.html");
    let figs = figures(&html);
    let sweep = &figs.iter().find(|f| f.0 == "sweep").unwrap().1;
    assert!(
        sweep.contains("stall: +44"),
        "the band is labelled with the excess"
    );
    let plain = render(&[&data("rr-sizes.json")], "sweep-plain.html");
    let plain_sweep = &figures(&plain)
        .into_iter()
        .find(|f| f.0 == "sweep")
        .unwrap()
        .1;
    assert!(
        !plain_sweep.contains("stall:"),
        "no band without a flagged jump"
    );
}

#[test]
fn two_results_of_one_kind_are_compared() {
    let html = render(&[&data("rr.json"), &data("rr-nagle.json")], "compare.html");
    let figs = assert_page(&html, &["compare-spectrum", "spectrum"]);
    assert_eq!(
        figs.iter().filter(|f| f.0 == "spectrum").count(),
        2,
        "each result keeps its own section"
    );
    assert!(html.contains("id=\"compare-rr\"") && html.contains("class=\"ratios\""));
    // The healthy run is the base (1.00×); the Nagle-stalled one is thousands of times slower.
    let table = &html[html.find("class=\"ratios\"").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("(1.00×)"), "{table}");
    assert!(
        table.matches("(1.00×)").count() >= 5 && table.contains("rr-nagle.json"),
        "{table}"
    );
    let nagle_row = &table[table.find("rr-nagle.json").unwrap()..];
    let ratio: f64 = nagle_row[nagle_row.find('(').unwrap() + 1..nagle_row.find('×').unwrap()]
        .parse()
        .unwrap();
    assert!(ratio > 100.0, "p50 ratio {ratio}");
}

#[test]
fn mixed_kinds_render_without_a_comparison() {
    let html = render(&[&data("rr.json"), &data("connect.json")], "mixed.html");
    assert!(!html.contains("id=\"compare-"));
    assert!(html.contains("id=\"result-1\"") && html.contains("id=\"result-2\""));
    // Two streams, one without its latency probe, beside an rr: nothing of the streams to
    // compare, and no box that says so at the top of the page (issue 41: an empty
    // "Comparison of 2 stream results").
    let html = render(
        &[
            &data("stream.json"),
            &data("stream-udp.json"),
            &data("rr.json"),
        ],
        "mixed-streams.html",
    );
    assert!(!html.contains("id=\"compare-"), "no comparison box");
    assert!(!html.contains("Comparison of"), "no comparison box");
    assert!(html.contains("id=\"result-3\""));
    // A result of an older version without histogram bins: its spectrum, no histogram.
    let old = render(&[&data("rr-nagle.json")], "old.html");
    let figs = assert_page(&old, &["spectrum"]);
    assert!(!figs.iter().any(|f| f.0 == "histogram"));
}

fn write_tmp(name: &str, text: &str) -> PathBuf {
    let p = out_dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let rr = std::fs::read_to_string(data("rr.json")).unwrap();
    let newer = write_tmp(
        "newer.json",
        &rr.replace("\"schema_version\": 1", "\"schema_version\": 99"),
    );
    let trace = write_tmp(
        "trace.json",
        &rr.replace("\"command\": \"rr\"", "\"command\": \"frobnicate\""),
    );
    let broken = write_tmp(
        "broken.json",
        &rr.replace("\"transport\": \"tcp\"", "\"transport\": 7"),
    );
    let foreign = write_tmp("foreign.json", "{\"hello\": 1}");
    let missing = out_dir().join("does-not-exist.json");
    for (path, needle) in [
        (&newer, "schema version 99 is newer"),
        (&trace, "no report for `frobnicate` results"),
        (&broken, "does not match its schema"),
        (&foreign, "not a latscope result"),
        (&missing, "reading"),
    ] {
        let out = out_dir().join("never.html");
        let (code, stdout, err) = run(&[
            "report",
            &path.display().to_string(),
            "-o",
            &out.display().to_string(),
        ]);
        assert_eq!(code, 2, "{path:?}: {err}");
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{path:?}: {err}"
        );
        assert!(stdout.is_empty());
    }
}

#[test]
fn json_lines_summary_is_accepted() {
    let rr: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("rr.json")).unwrap()).unwrap();
    let lines = format!(
        "{{\"event\":\"interval\"}}\n{}\n",
        serde_json::json!({"event": "summary", "report": rr})
    );
    let p = write_tmp("rr.jsonl", &lines);
    let html = render(&[&p], "jsonl.html");
    assert_page(&html, &["spectrum"]);
}

/// Measure for real on loopback, then draw: the page tracks what the binary writes today.
#[test]
fn live_rr_connect_and_report_flag() {
    let srv = server(None, None, None);
    let addr = addr_arg(srv.tcp_addr);
    let (code, rr, err) = run(&["rr", &addr, "-n", "3000", "--json", "--no-progress"]);
    assert_eq!(code, 0, "{err}");
    let (code, cn, err) = run(&["connect", &addr, "-n", "300", "--json", "--no-progress"]);
    assert_eq!(code, 0, "{err}");
    let rr_path = write_tmp("live-rr.json", &rr);
    let cn_path = write_tmp("live-connect.json", &cn);
    let html = render(&[&rr_path, &cn_path], "live.html");
    let figs = assert_page(&html, &["spectrum", "histogram"]);
    assert_eq!(figs.len(), 4, "a spectrum and a histogram each");
    assert!(html.contains("3k"), "the transaction count is shown");

    // --report writes the same page straight from the run.
    let page = out_dir().join("live-flag.html");
    let (code, out, err) = run(&[
        "rr",
        &addr,
        "-n",
        "500",
        "--no-progress",
        "--report",
        &page.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("p99.9"), "the human table is still printed");
    assert_page(&std::fs::read_to_string(&page).unwrap(), &["spectrum"]);
}

/// A day-long http run at one interval per second and a ping with the 100000 replies the JSON
/// keeps at most: the page stays small and quick (figures in docs/report.md).
#[test]
fn large_inputs_render_in_bounded_size_and_time() {
    let mut http: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("http.json")).unwrap()).unwrap();
    let one = http["timeline"][0].clone();
    let day: Vec<serde_json::Value> = (0..86_400u64)
        .map(|s| {
            let mut iv = one.clone();
            iv["start_ns"] = (s * 1_000_000_000).into();
            iv["end_ns"] = ((s + 1) * 1_000_000_000).into();
            iv["p99_ns"] = (1_000_000 + (s % 600) * 10_000).into();
            iv
        })
        .collect();
    http["timeline"] = day.into();
    let http_path = write_tmp("http-day.json", &http.to_string());

    let mut ping: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("ping.json")).unwrap()).unwrap();
    let reply = ping["replies"][0].clone();
    let replies: Vec<serde_json::Value> = (0..100_000u64)
        .map(|i| {
            let mut r = reply.clone();
            r["seq"] = i.into();
            r["rtt_ns"] = (10_000 + (i * 7919) % 5_000_000).into();
            r
        })
        .collect();
    ping["replies"] = replies.into();
    let ping_path = write_tmp("ping-100k.json", &ping.to_string());

    for (path, name) in [
        (&http_path, "http-day.html"),
        (&ping_path, "ping-100k.html"),
    ] {
        let t = Instant::now();
        let html = render(&[path.as_path()], name);
        let took = t.elapsed();
        eprintln!("{name}: {} bytes in {took:?}", html.len());
        assert!(html.len() < 400_000, "{name}: {} bytes", html.len());
        assert!(took < Duration::from_secs(10), "{name}: {took:?}");
        assert_page(&html, &["spectrum"]);
    }
}

/// The contents of each `<text>` of an SVG.
fn svg_texts(fig: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = fig;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let open = rest.find('>').unwrap() + 1;
        let close = rest.find("</text>").unwrap();
        out.push(rest[open..close].trim().to_string());
        rest = &rest[close..];
    }
    out
}

/// Okabe & Ito's colours (the page's palette), as plotters writes them.
const PALETTE: [&str; 7] = [
    "0072B2", "D55E00", "009E73", "E69F00", "CC79A7", "56B4E9", "000000",
];

/// Every plot of every committed example: a caption that says what to look at, an axis
/// description with its unit in brackets for each axis ("latency (time, log scale)",
/// "throughput (bit/s)"), and only colour-blind-safe colours (the palette, or greys).
#[test]
fn every_plot_has_a_caption_units_and_safe_colours() {
    const UNITS: [&str; 8] = [
        "(s)",
        "(bit/s)",
        "(%",
        "(count",
        "(bytes",
        "(time",
        "(TTL)",
        "(requests/s)",
    ];
    let mut files: Vec<PathBuf> = std::fs::read_dir(data(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut pages: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            (name.clone(), render(&[f], &format!("units-{name}.html")))
        })
        .collect();
    pages.push((
        "comparison".into(),
        render(
            &[&data("rr.json"), &data("rr-nagle.json")],
            "units-compare.html",
        ),
    ));
    let mut plots = 0;
    for (name, html) in &pages {
        assert!(html.contains("@media print") && html.contains("@media (max-width"));
        for (kind, fig) in figures(html) {
            plots += 1;
            let cap =
                &fig[fig.find("<figcaption>").unwrap() + 12..fig.find("</figcaption>").unwrap()];
            assert!(cap.len() > 40, "{name} {kind}: caption {cap:?}");
            let descs: Vec<String> = svg_texts(&fig)
                .into_iter()
                .filter(|t| t.contains(" (") && t.ends_with(')'))
                .collect();
            // Bars have one value axis; histograms one pair per panel.
            let axes = if matches!(kind.as_str(), "budget" | "connection-stalls") {
                1
            } else {
                2
            };
            assert!(
                descs.len() >= axes,
                "{name} {kind}: axis descriptions {descs:?}"
            );
            for d in &descs {
                assert!(
                    UNITS
                        .iter()
                        .any(|u| d[d.rfind(" (").unwrap()..].contains(u)),
                    "{name} {kind}: no unit in the axis description {d:?}"
                );
            }
            let svg = &fig[..fig.find("</svg>").unwrap()];
            for (i, _) in svg.match_indices('#') {
                let hex = svg[i + 1..].get(..6).unwrap_or("").to_ascii_uppercase();
                if hex.len() < 6 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    continue;
                }
                let grey = hex[0..2] == hex[2..4] && hex[2..4] == hex[4..6];
                assert!(
                    grey || PALETTE.contains(&hex.as_str()),
                    "{name} {kind}: colour #{hex} is not in the colour-blind-safe palette"
                );
            }
        }
    }
    assert!(plots >= 30, "only {plots} plots checked");
}

/// Comparison for every kind that carries one distribution; `--compare` refuses a mix of kinds
/// or a result without a distribution, naming it.
#[test]
fn every_kind_with_a_distribution_compares() {
    for (a, b) in [
        ("rr.json", "rr-nagle.json"),
        ("http.json", "http-open.json"),
        ("connect.json", "connect.json"),
        ("ping.json", "ping.json"),
        ("diagnose.json", "diagnose.json"),
        ("stream.json", "stream.json"),
        ("analyze.json", "analyze.json"),
        ("trace.json", "trace-stats.json"),
    ] {
        let out = out_dir().join(format!("cmp-{a}.html"));
        let (code, _, err) = run(&[
            "report",
            "--compare",
            &data(a).display().to_string(),
            &data(b).display().to_string(),
            "-o",
            &out.display().to_string(),
        ]);
        assert_eq!(code, 0, "{a} + {b}: {err}");
        let html = std::fs::read_to_string(&out).unwrap();
        assert_page(&html, &["compare-spectrum"]);
        let table = &html[html.find("class=\"ratios\"").unwrap()..];
        assert_eq!(
            table[..table.find("</table>").unwrap()]
                .matches("<tr>")
                .count(),
            3,
            "{a}: a head row and one row per result"
        );
    }
    for (inputs, needle) in [
        (
            &["rr.json", "connect.json"][..],
            "'rr.json' is `rr`, 'connect.json' is `connect`",
        ),
        (&["rr.json"][..], "two or more"),
        (
            &["rr-sizes.json", "rr.json"][..],
            "'rr-sizes.json' has no single",
        ),
        (&["stack.json", "stack.json"][..], "per-hook"),
    ] {
        let mut args = vec!["report".to_string(), "--compare".into()];
        args.extend(inputs.iter().map(|i| data(i).display().to_string()));
        args.extend([
            "-o".into(),
            out_dir().join("never.html").display().to_string(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{inputs:?}: {err}");
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{inputs:?}: {err}"
        );
    }
}

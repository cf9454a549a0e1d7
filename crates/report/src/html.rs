//! The page: one HTML document with inline CSS and the plots as inline SVG. No script, no web
//! font, no external URL, so it renders the same offline, from a mail attachment, or printed.

use std::fmt::Write as _;

use crate::document::Input;

/// One titled part of the page (a result, or a comparison).
pub(crate) struct Section {
    /// Anchor, also what the tests look for.
    pub id: String,
    pub title: String,
    /// The section's inner HTML.
    pub body: String,
}

/// Escape text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A plot with its one-line caption (what to look at). `plot` names the chart type for tests
/// and readers of the source (`data-plot="spectrum"`).
pub(crate) fn figure(plot: &str, svg: &str, caption: &str) -> String {
    format!(
        "<figure class=\"plot\" data-plot=\"{}\">{svg}<figcaption>{}</figcaption></figure>\n",
        esc(plot),
        esc(caption)
    )
}

/// A table; the first column is a row header.
pub(crate) fn table(class: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "<div class=\"scroll\"><table class=\"{}\"><thead><tr>",
        esc(class)
    );
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let tag = if i == 0 { "th" } else { "td" };
            let _ = write!(out, "<{tag}>{}</{tag}>", esc(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// Headline figures as a definition list of label → value.
pub(crate) fn facts(items: &[(&str, String)]) -> String {
    let mut out = String::from("<dl class=\"facts\">");
    for (k, v) in items {
        let _ = write!(out, "<div><dt>{}</dt><dd>{}</dd></div>", esc(k), esc(v));
    }
    out.push_str("</dl>\n");
    out
}

/// A paragraph of plain text.
pub(crate) fn para(class: &str, text: &str) -> String {
    format!("<p class=\"{}\">{}</p>\n", esc(class), esc(text))
}

/// The whole page.
pub(crate) fn page(inputs: &[Input], sections: &[Section]) -> String {
    let title = match inputs {
        [one] => format!("latscope {} — {}", one.doc.kind().command(), one.name),
        _ => format!("latscope — {} results", inputs.len()),
    };
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"generator\" content=\"latscope report\">\
         <title>{}</title><style>{CSS}</style></head><body>\n<header><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    if sections.len() > 1 {
        out.push_str("<nav><ul>");
        for s in sections {
            let _ = write!(
                out,
                "<li><a href=\"#{}\">{}</a></li>",
                esc(&s.id),
                esc(&s.title)
            );
        }
        out.push_str("</ul></nav>");
    }
    out.push_str("</header>\n<main>\n");
    for s in sections {
        // One result: the page's title already names it; a second heading would repeat it.
        let heading = if sections.len() > 1 {
            format!("<h2>{}</h2>", esc(&s.title))
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<section id=\"{}\">{heading}\n{}</section>\n",
            esc(&s.id),
            s.body
        );
    }
    out.push_str(
        "</main>\n<footer>Made by <code>latscope report</code> from the JSON results named above; \
         everything is in this file (no network needed to view it).</footer>\n</body></html>\n",
    );
    out
}

/// Responsive (figures shrink to the screen, tables scroll sideways on a phone, long names
/// wrap: tests/integration/report_browser.rs checks nothing is wider than a 390 px phone) and printable
/// (no backgrounds, figures kept whole on a page). A fact's value breaks only where it would
/// not fit on a line of its own (its box grows to hold `127.0.0.1:52727` whole); on a phone a
/// plot keeps at least 540 px (labels ≥ 12 px) and scrolls sideways instead of shrinking its
/// text out of reach.
const CSS: &str = r#"
:root{--fg:#1a1a1a;--muted:#555;--line:#ccc;--bg:#fff;--accent:#0072B2;--warn:#D55E00}
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg);overflow-wrap:break-word}
header,main,footer{max-width:1000px;margin:0 auto;padding:0 16px}
h1{font-size:1.5em;margin:.8em 0 .3em}
h2{font-size:1.25em;border-bottom:2px solid var(--accent);padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.05em;margin:1.2em 0 .4em}
nav ul{list-style:none;padding:0;margin:0;display:flex;flex-wrap:wrap;gap:.3em 1em}
nav a{color:var(--accent)}
nav li,.legend li{min-width:0;overflow-wrap:anywhere}
.meta{color:var(--muted);font-size:.9em}
.facts{display:flex;flex-wrap:wrap;gap:8px;margin:1em 0}
.facts div{flex:0 1 auto;min-width:9em;max-width:100%;border:1px solid var(--line);border-radius:6px;padding:6px 10px}
.facts dt{font-size:.8em;color:var(--muted)}
.facts dd{margin:0;font-weight:600;font-variant-numeric:tabular-nums;overflow-wrap:break-word}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:.2em 1.2em;font-size:.9em}
.swatch{display:inline-block;width:1.6em;height:.5em;margin-right:.4em;vertical-align:middle;border-radius:2px;-webkit-print-color-adjust:exact;print-color-adjust:exact}
table.steps td,table.steps th{white-space:normal;text-align:left}
table.percentiles tbody th{white-space:normal;min-width:7em}
table.ladder td{text-align:left;font-family:ui-monospace,monospace;font-size:.88em}
table.ladder td:last-child{white-space:normal;min-width:14em}
tr.gap td{text-align:center;color:var(--warn);font-weight:600;border-bottom:2px dashed var(--warn)}
figure.plot{margin:1em 0;break-inside:avoid;page-break-inside:avoid}
figure.plot svg{display:block;width:100%;height:auto;max-width:780px}
figcaption{font-size:.9em;color:var(--muted);margin-top:.3em}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:.6em 0;font-size:.92em}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:right;white-space:nowrap}
thead th{border-bottom:2px solid var(--fg)}
tbody th{text-align:left;font-weight:600}
.finding{border-left:6px solid var(--warn);padding:.4em 1em;margin:1em 0;background:#fdf3ec;break-inside:avoid}
.finding h3{margin-top:.3em}
.finding ul{padding-left:1.2em}
.verdict{font-size:1.1em;font-weight:600}
.note{color:var(--muted)}
.warn{color:var(--warn);font-weight:600}
footer{color:var(--muted);font-size:.85em;margin:2em auto 1em}
@media (max-width:600px){body{font-size:15px}th,td{padding:3px 6px}figure.plot{overflow-x:auto}figure.plot svg{min-width:540px}}
@media print{body{font-size:11pt}header,main,footer{max-width:none}.finding{background:none}nav{display:none}a{color:inherit}h2{break-after:avoid}}
"#;

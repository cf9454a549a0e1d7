//! An aligned text table that fits its page: first column left-aligned, the rest right-aligned.
//!
//! When the table is wider than the page it drops columns, lowest priority first: the columns
//! the table named with [`Table::drop_first`] (by default the less telling latency statistics,
//! [`DEFAULT_DROP_ORDER`]), then any other column from the right, never the first column nor
//! p50, p99 and max ([`ESSENTIAL`]). If that is not enough it abbreviates the first column's
//! cells with "…". A note under the table names what was left out (`--json` has everything).

use std::fmt::Write;

use super::page::{Page, display_width};

/// Columns never dropped to fit (besides the first, which names each row).
pub const ESSENTIAL: [&str; 3] = ["p50", "p99", "max"];

/// The drop order of a table that names none: the latency statistics a reader needs least.
pub const DEFAULT_DROP_ORDER: [&str; 7] = [
    "p99.99",
    "p99.9",
    "stddev",
    "p90",
    "min",
    "one-way p50",
    "mean",
];

/// The first column is not abbreviated below this many columns.
const MIN_LABEL: usize = 8;

#[derive(Debug, Default, Clone)]
/// An aligned text table with a header row.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    drop_order: Option<Vec<String>>,
}

/// A table laid out for a width: its lines, and the headers of the columns left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// The rendered lines, each ending in a newline.
    pub text: String,
    /// Headers of the columns dropped to fit, in table order.
    pub hidden: Vec<String>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.as_ref().to_string()).collect(),
            rows: vec![],
            drop_order: None,
        }
    }

    /// The columns to drop first when the table is too wide, in that order (headers; names that
    /// are not columns are ignored). Replaces [`DEFAULT_DROP_ORDER`].
    pub fn drop_first<S: AsRef<str>>(&mut self, headers: &[S]) -> &mut Self {
        self.drop_order = Some(headers.iter().map(|h| h.as_ref().to_string()).collect());
        self
    }

    /// Append one row (one cell per header).
    pub fn row(&mut self, cells: Vec<String>) -> &mut Self {
        self.rows.push(cells);
        self
    }

    /// True when the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Render onto `out`, every line prefixed by `indent`, fitted to the page's width; a note
    /// names the columns left out.
    pub fn render(&self, indent: &str, out: &mut Page) {
        let fitted = self.fit(indent, out.width());
        out.preformatted(&fitted.text);
        if !fitted.hidden.is_empty() {
            let width = out.width();
            let _ = writeln!(
                out,
                "{indent}(left out to fit {width} columns: {}; --wide or --json shows them)",
                fitted.hidden.join(", ")
            );
        }
    }

    fn ncol(&self) -> usize {
        self.headers
            .len()
            .max(self.rows.iter().map(Vec::len).max().unwrap_or(0))
    }

    fn cell(&self, row: Option<usize>, col: usize) -> &str {
        let r = row.map_or(&self.headers, |r| &self.rows[r]);
        r.get(col).map(String::as_str).unwrap_or("")
    }

    /// The columns, lowest priority first, that may be dropped.
    fn droppable(&self) -> Vec<usize> {
        let ncol = self.ncol();
        let header = |i: usize| self.headers.get(i).map(String::as_str).unwrap_or("");
        let essential = |i: usize| i == 0 || ESSENTIAL.contains(&header(i));
        let named: Vec<&str> = match &self.drop_order {
            Some(v) => v.iter().map(String::as_str).collect(),
            None => DEFAULT_DROP_ORDER.to_vec(),
        };
        let mut order: Vec<usize> = named
            .iter()
            .filter_map(|n| (0..ncol).find(|&i| header(i) == *n))
            .filter(|&i| !essential(i))
            .collect();
        for i in (0..ncol).rev() {
            if !essential(i) && !order.contains(&i) {
                order.push(i);
            }
        }
        order
    }

    /// Lay the table out in `width` columns (including `indent`).
    pub fn fit(&self, indent: &str, width: usize) -> Fitted {
        let ncol = self.ncol();
        let rows = || std::iter::once(None).chain((0..self.rows.len()).map(Some));
        let mut col_w: Vec<usize> = (0..ncol)
            .map(|c| {
                rows()
                    .map(|r| display_width(self.cell(r, c)))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut shown: Vec<bool> = vec![true; ncol];
        let total = |col_w: &[usize], shown: &[bool]| {
            let n = shown.iter().filter(|s| **s).count();
            display_width(indent)
                + (0..ncol)
                    .filter(|&c| shown[c])
                    .map(|c| col_w[c])
                    .sum::<usize>()
                + 2 * n.saturating_sub(1)
        };
        for c in self.droppable() {
            if total(&col_w, &shown) <= width {
                break;
            }
            shown[c] = false;
        }
        let over = total(&col_w, &shown).saturating_sub(width);
        if over > 0 && ncol > 0 {
            col_w[0] = col_w[0].saturating_sub(over).max(MIN_LABEL.min(col_w[0]));
        }
        let mut text = String::new();
        for r in rows() {
            let mut line = String::from(indent);
            let mut first = true;
            for c in (0..ncol).filter(|&c| shown[c]) {
                if !first {
                    line.push_str("  ");
                }
                first = false;
                let w = col_w[c];
                let cell = abbreviate(self.cell(r, c), w);
                if c == 0 {
                    let _ = write!(line, "{cell:<w$}");
                } else {
                    let _ = write!(line, "{cell:>w$}");
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        let hidden = (0..ncol)
            .filter(|&c| !shown[c])
            .map(|c| self.cell(None, c).to_string())
            .collect();
        Fitted { text, hidden }
    }
}

/// `s` cut to `w` columns, its last kept character replaced by "…" when cut.
fn abbreviate(s: &str, w: usize) -> String {
    if display_width(s) <= w {
        return s.to_string();
    }
    let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
    t.push('…');
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::Summary;

    fn render(t: &Table, width: usize) -> String {
        let mut p = Page::new(width);
        t.render("  ", &mut p);
        p.finish()
    }

    #[test]
    fn aligns() {
        let mut t = Table::new(&["size", "p50"]);
        t.row(vec!["64 B".into(), "12us".into()]);
        t.row(vec!["1500 B".into(), "40.1ms".into()]);
        assert_eq!(
            render(&t, 100),
            "  size       p50\n  64 B      12us\n  1500 B  40.1ms\n"
        );
    }

    fn latency_table() -> Table {
        let mut headers = vec!["request/response", "trans/s"];
        headers.extend(Summary::HEADERS);
        headers.push("one-way p50");
        let mut t = Table::new(&headers);
        let mut cells = vec!["65536 B / 65536 B".to_string(), "52.2k".into()];
        cells.extend(
            [
                "13.8us", "19.1us", "144us", "15.1us", "16.2us", "23us", "70.8us", "6.95ms",
                "10.8ms", "7.54us",
            ]
            .map(String::from),
        );
        t.row(cells);
        t
    }

    #[test]
    fn drops_the_least_telling_statistics_first_and_says_so() {
        let t = latency_table();
        let wide = render(&t, 200);
        assert!(!wide.contains("left out"), "{wide}");
        let s = render(&t, 80);
        let header = s.lines().next().unwrap();
        for kept in ["request/response", "trans/s", "p50", "p99", "max", "mean"] {
            assert!(header.contains(kept), "{kept} missing: {s}");
        }
        assert!(
            !header.contains("p99.99") && !header.contains("stddev"),
            "{s}"
        );
        assert!(
            s.contains("left out to fit 80 columns: stddev, p90, p99.9, p99.99;"),
            "{s}"
        );
        assert!(s.lines().all(|l| display_width(l) <= 80), "{s}");
    }

    #[test]
    fn keeps_p50_p99_max_and_abbreviates_the_label_when_nothing_else_can_go() {
        let t = latency_table();
        let s = render(&t, 40);
        assert!(s.lines().all(|l| display_width(l) <= 40), "{s}");
        let header = s.lines().next().unwrap();
        let cols: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(&cols[1..], &["p50", "p99", "max"], "{s}");
        assert!(s.contains("65536 B…") || s.contains('…'), "{s}");
    }

    #[test]
    fn named_drop_order_wins() {
        let mut t = Table::new(&["#", "a", "bbbbbbbbbbbbbbbbbbbb", "c"]);
        t.drop_first(&["c"]);
        t.row(vec!["1".into(), "x".repeat(30), "y".into(), "z".repeat(30)]);
        let s = render(&t, 60);
        assert!(s.contains("left out to fit 60 columns: c;"), "{s}");
        assert!(s.lines().next().unwrap().contains("bbbb"), "{s}");
    }
}

//! A minimal aligned text table: first column left-aligned, the rest right-aligned.

use std::fmt::Write;

#[derive(Debug, Default, Clone)]
/// An aligned text table with a header row.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.as_ref().to_string()).collect(),
            rows: vec![],
        }
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

    /// Render with every line prefixed by `indent`.
    pub fn render(&self, indent: &str, out: &mut String) {
        let ncol = self
            .headers
            .len()
            .max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                if i == 0 {
                    let _ = write!(line, "{c:<w$}");
                } else {
                    let _ = write!(line, "{c:>w$}");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns() {
        let mut t = Table::new(&["size", "p50"]);
        t.row(vec!["64 B".into(), "12us".into()]);
        t.row(vec!["1500 B".into(), "40.1ms".into()]);
        let mut s = String::new();
        t.render("  ", &mut s);
        assert_eq!(s, "  size       p50\n  64 B      12us\n  1500 B  40.1ms\n");
    }
}

//! Fitting human output to the terminal: the one place that knows how wide a line may be.
//!
//! Every human rendering is written into a [`Page`]. Prose written to it (`writeln!`,
//! `push_str`) is wrapped at word boundaries to the page's width when the page is finished, with
//! a hanging indent that keeps bullets, numbered items and aligned `label  value` lines readable.
//! Tables ([`super::Table`]) fit themselves instead: they drop their lowest-priority columns, then
//! abbreviate their first column, and are copied to the page verbatim, never wrapped.
//!
//! The width is chosen once per process by the binary ([`set_width`]: `COLUMNS`, or the
//! terminal's width, or [`UNLIMITED`] when stdout is not a terminal or `--wide` asks for every
//! column); this crate performs no I/O.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The width used until the binary sets one (and by renderings made outside it, e.g. tests).
pub const DEFAULT_WIDTH: usize = 100;

/// No width limit: tables keep every column and prose is not wrapped. For output that does not
/// go to a terminal (a file, a pipe, where a reader or a program wants everything) and for
/// `--wide`. Finite, so that width arithmetic cannot overflow.
pub const UNLIMITED: usize = 1 << 20;

/// The narrowest width honoured: below it tables cannot keep their essential columns.
pub const MIN_WIDTH: usize = 40;

static WIDTH: AtomicUsize = AtomicUsize::new(DEFAULT_WIDTH);

/// Set the width every human rendering of this process fits to (clamped to [`MIN_WIDTH`]).
pub fn set_width(columns: usize) {
    WIDTH.store(columns.max(MIN_WIDTH), Ordering::Relaxed);
}

/// The width human renderings fit to ([`DEFAULT_WIDTH`] until [`set_width`] is called).
pub fn width() -> usize {
    WIDTH.load(Ordering::Relaxed)
}

/// The display width of `s` (one column per character: latscope prints no wide characters).
pub fn display_width(s: &str) -> usize {
    s.chars().count()
}

/// Human output being written at a given width. It dereferences to the `String` that collects
/// prose, so `writeln!(out, …)` and `out.push_str(…)` work as on a `String`; [`Page::finish`]
/// wraps that prose. Preformatted blocks (tables) go in through [`Page::preformatted`].
#[derive(Debug)]
pub struct Page {
    width: usize,
    done: String,
    prose: String,
}

impl Page {
    /// An empty page `width` columns wide (at least [`MIN_WIDTH`]).
    pub fn new(width: usize) -> Self {
        Page {
            width: width.max(MIN_WIDTH),
            done: String::new(),
            prose: String::new(),
        }
    }

    /// An empty page at the process's width ([`width`]).
    pub fn at_terminal_width() -> Self {
        Page::new(width())
    }

    /// The columns a line may use.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Append lines that already fit (a fitted table): they are copied as they are, not wrapped.
    pub fn preformatted(&mut self, text: &str) {
        self.flush_prose();
        self.done.push_str(text);
    }

    fn flush_prose(&mut self) {
        if !self.prose.is_empty() {
            let wrapped = wrap(&self.prose, self.width);
            self.done.push_str(&wrapped);
            self.prose.clear();
        }
    }

    /// The finished text: prose wrapped, tables as they were fitted.
    pub fn finish(mut self) -> String {
        self.flush_prose();
        self.done
    }
}

impl Deref for Page {
    type Target = String;
    fn deref(&self) -> &String {
        &self.prose
    }
}

impl DerefMut for Page {
    fn deref_mut(&mut self) -> &mut String {
        &mut self.prose
    }
}

/// `text` wrapped to the process's width ([`width`]): for lines printed as a run goes (a trace's
/// hops, a stream's intervals), outside any [`Page`].
pub fn fit(text: &str) -> String {
    wrap(text, width())
}

/// Wrap every line of `text` longer than `width` columns (see [`wrap_line`]); shorter lines,
/// blank lines and the final newline are kept as they are.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (j, piece) in wrap_line(line, width).iter().enumerate() {
            if j > 0 {
                out.push('\n');
            }
            out.push_str(piece);
        }
    }
    out
}

/// The column continuation lines of `line` start at: after a bullet (`- `, `! `, `* `, `✓ `,
/// `1. `, `#3 `…) the bullet's text; on an aligned `label   value` line the value's column; else
/// the line's indent plus two. Never more than half the width, so continuations keep room.
fn hang(line: &str, width: usize) -> usize {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[lead..];
    let limit = width / 2;
    let bullet = ["- ", "! ", "* ", "• ", "✓ ", "✗ ", "✔ ", "✘ "]
        .iter()
        .find(|b| rest.starts_with(*b))
        .map(|b| display_width(b))
        .or_else(|| {
            // "1. ", "12. ", "#3 "
            let body = rest.strip_prefix('#').unwrap_or(rest);
            let digits = body.chars().take_while(char::is_ascii_digit).count();
            let after = &body[digits..];
            let marker = usize::from(body.len() != rest.len());
            if digits == 0 {
                None
            } else if let Some(a) = after.strip_prefix(". ") {
                Some(marker + digits + 2 + (after.len() - 2 - a.trim_start().len()))
            } else if marker == 1 && after.starts_with(' ') {
                Some(marker + digits + 1)
            } else {
                None
            }
        });
    // An aligned value: the text after the first run of two or more spaces that follows the
    // label (after any bullet), when that column is in the first half of the line.
    let start = lead + bullet.unwrap_or(0);
    let aligned = line
        .char_indices()
        .skip_while(|(i, _)| *i < byte_of_col(line, start))
        .collect::<Vec<_>>()
        .windows(3)
        .find(|w| w[0].1 != ' ' && w[1].1 == ' ' && w[2].1 == ' ')
        .map(|w| w[1].0)
        .map(|gap| {
            let value = line[gap..].trim_start_matches(' ');
            display_width(&line[..line.len() - value.len()])
        });
    let col = match (aligned, bullet) {
        (Some(c), _) if c <= limit && c > start => c,
        (_, Some(b)) => lead + b,
        _ => lead + 2,
    };
    col.min(limit)
}

/// The byte offset of display column `col` in `s` (its length when `s` is shorter).
fn byte_of_col(s: &str, col: usize) -> usize {
    s.char_indices().nth(col).map_or(s.len(), |(i, _)| i)
}

/// Split one line into pieces of at most `width` columns at spaces; continuation pieces start
/// at the line's hanging indent. A word longer than the room left is cut where it must be.
pub fn wrap_line(line: &str, width: usize) -> Vec<String> {
    if display_width(line) <= width {
        return vec![line.to_string()];
    }
    let indent = hang(line, width);
    let pad = " ".repeat(indent);
    let lead = line.len() - line.trim_start_matches(' ').len();
    let mut pieces = Vec::new();
    let mut cur = line[..lead].to_string();
    let mut cur_w = lead;
    let mut fresh = true; // nothing but indentation in `cur` yet
    // Words with the spaces that precede them, so aligned runs of spaces survive.
    let mut rest = &line[lead..];
    while !rest.is_empty() {
        let spaces = rest.len() - rest.trim_start_matches(' ').len();
        let after = &rest[spaces..];
        let word_len = after.find(' ').unwrap_or(after.len());
        let word = &after[..word_len];
        rest = &after[word_len..];
        if word.is_empty() {
            break; // trailing spaces
        }
        let ww = display_width(word);
        let gap = if fresh { 0 } else { spaces };
        if cur_w + gap + ww <= width {
            cur.extend(std::iter::repeat_n(' ', gap));
            cur.push_str(word);
            cur_w += gap + ww;
            fresh = false;
            continue;
        }
        if !fresh {
            pieces.push(std::mem::replace(&mut cur, pad.clone()));
            cur_w = indent;
        }
        // The word on a line of its own, cut into lengths that fit.
        let mut word = word;
        while cur_w + display_width(word) > width {
            let room = width.saturating_sub(cur_w).max(1);
            let cut = byte_of_col(word, room);
            cur.push_str(&word[..cut]);
            pieces.push(std::mem::replace(&mut cur, pad.clone()));
            cur_w = indent;
            word = &word[cut..];
        }
        cur.push_str(word);
        cur_w += display_width(word);
        fresh = word.is_empty();
    }
    if !fresh || pieces.is_empty() {
        pieces.push(cur);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest(s: &str) -> usize {
        s.lines().map(display_width).max().unwrap_or(0)
    }

    #[test]
    fn short_lines_are_untouched() {
        let text = "a  b\n\n    indented   table-like  row\n";
        assert_eq!(wrap(text, 40), text);
    }

    #[test]
    fn prose_wraps_at_words_with_a_hanging_indent() {
        let line = "  RTT: request write → last response byte read. One-way = RTT/2, an estimate that assumes a symmetric path.";
        let w = wrap(line, 50);
        assert!(widest(&w) <= 50, "{w}");
        let lines: Vec<&str> = w.lines().collect();
        assert!(lines.len() >= 3, "{w}");
        assert!(lines[0].starts_with("  RTT: request"), "{w}");
        assert!(
            lines[1].starts_with("    ") && !lines[1].starts_with("     "),
            "{w}"
        );
        // Nothing lost, nothing added but line breaks and indentation.
        let words: Vec<&str> = w.split_whitespace().collect();
        assert_eq!(words, line.split_whitespace().collect::<Vec<_>>());
    }

    #[test]
    fn bullets_and_numbers_hang_after_their_marker() {
        let w = wrap(
            "       - the extra 44ms matches a TCP timer: ~40 ms: the receiver's delayed ACK releases data",
            60,
        );
        let second = w.lines().nth(1).unwrap();
        assert_eq!(second.len() - second.trim_start().len(), 9, "{w}");
        let w = wrap(
            "    1. Nagle × delayed ACK: the server holds part of each response until the client's delayed ACK",
            60,
        );
        assert!(w.lines().nth(1).unwrap().starts_with("       "), "{w}");
        assert!(!w.lines().nth(1).unwrap().starts_with("        "), "{w}");
    }

    #[test]
    fn aligned_values_continue_under_their_column() {
        let line = "    ✓ path                   TCP SYN ping (kernel software TX+RX (SO_TIMESTAMPING)): p50 22us, 50 of 50 answered";
        let w = wrap(line, 80);
        assert!(widest(&w) <= 80, "{w}");
        let second = w.lines().nth(1).unwrap();
        let col = line.find("TCP SYN").unwrap() - 2; // "✓" is 3 bytes, one column
        assert_eq!(second.len() - second.trim_start().len(), col, "{w}");
    }

    #[test]
    fn words_longer_than_the_line_are_cut() {
        let path = format!("  See it: latscope analyze /{} --conn 0", "x".repeat(150));
        let w = wrap(&path, 60);
        assert!(widest(&w) <= 60, "{w}");
        assert_eq!(w.replace(['\n', ' '], ""), path.replace(' ', ""));
    }

    #[test]
    fn page_wraps_prose_but_not_preformatted_blocks() {
        let mut p = Page::new(40);
        p.push_str(&"word ".repeat(20));
        p.push('\n');
        let long = "  a preformatted line that is deliberately longer than forty columns";
        p.preformatted(&format!("{long}\n"));
        p.push_str("tail\n");
        let s = p.finish();
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.len() >= 5, "{s}");
        assert!(
            lines[..lines.len() - 2]
                .iter()
                .all(|l| display_width(l) <= 40),
            "{s}"
        );
        assert_eq!(lines[lines.len() - 2], long);
        assert_eq!(lines[lines.len() - 1], "tail");
    }

    #[test]
    fn width_is_clamped() {
        assert_eq!(Page::new(10).width(), MIN_WIDTH);
    }
}

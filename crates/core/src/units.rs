//! Parsing and formatting of the quantities users type and read: durations (`250us`, `5s`),
//! counts (`10k`, `1m`), byte sizes (`64KiB`, `1500`), rates (`10k` per second) and bit rates
//! (`50M` bit/s).
//!
//! Suffix rules, the same everywhere: SI prefixes (k, M, G, T) are decimal (×1000), IEC prefixes
//! (Ki, Mi, Gi, Ti) are binary (×1024). For counts a lower-case `m` means million; for durations
//! `m` means minutes.

use std::borrow::Cow;
use std::time::Duration;

use thiserror::Error;

/// A value the user typed could not be understood. The message names the value and what would
/// have been accepted.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid {what} '{input}': {hint}")]
pub struct UnitError {
    /// What was being parsed ("duration", "size", ...).
    pub what: &'static str,
    /// The text the user typed.
    pub input: String,
    /// What would have been accepted.
    pub hint: Cow<'static, str>,
}

fn err(what: &'static str, input: &str, hint: &'static str) -> UnitError {
    UnitError {
        what,
        input: input.to_string(),
        hint: Cow::Borrowed(hint),
    }
}

/// Split `12.5ms` into (12.5, "ms").
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let num: String = s[..end].chars().filter(|c| *c != '_').collect();
    let value: f64 = num.parse().ok()?;
    if !value.is_finite() {
        return None;
    }
    Some((value, s[end..].trim()))
}

const DURATION_HINT: &str =
    "expected a number with a unit: ns, us, ms, s, m or h (e.g. 250us, 10s, 2m)";

/// Parse a duration: a number and its unit. A bare number is refused (`200` could be 200 ms or
/// 200 s, and a probe interval 1000 times too long is a silent mistake), except `0`, which is
/// the same in every unit; the error suggests the unit.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (v, unit) = split_number(s).ok_or_else(|| err("duration", s, DURATION_HINT))?;
    if unit.is_empty() && v != 0.0 {
        let n = s.trim();
        return Err(UnitError {
            what: "duration",
            input: s.to_string(),
            hint: Cow::Owned(format!("{n} what? write {n}ms or {n}s")),
        });
    }
    let scale_ns: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" | "sec" => 1e9, // "" only for 0
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(err("duration", s, DURATION_HINT)),
    };
    let ns = v * scale_ns;
    if ns > u64::MAX as f64 {
        return Err(err("duration", s, "too long"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

fn si_scale(unit: &str) -> Option<f64> {
    Some(match unit {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

const COUNT_HINT: &str =
    "expected a whole number, optionally with k, m (million) or g (e.g. 10k, 1m)";

/// Parse a count such as `1000`, `10k`, `1m` (million), `2g`.
pub fn parse_count(s: &str) -> Result<u64, UnitError> {
    let (v, unit) = split_number(s).ok_or_else(|| err("count", s, COUNT_HINT))?;
    let scale = match unit {
        "m" => 1e6,
        "g" => 1e9,
        u => si_scale(u).ok_or_else(|| err("count", s, COUNT_HINT))?,
    };
    let n = v * scale;
    if n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(err("count", s, COUNT_HINT));
    }
    Ok(n as u64)
}

const SIZE_HINT: &str =
    "expected bytes, optionally with k/M/G (×1000) or KiB/MiB/GiB (×1024) (e.g. 1500, 64KiB)";

/// Parse a byte size such as `1500`, `64KiB`, `1.5k`, `4MB`, `1MiB`.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (v, unit) = split_number(s).ok_or_else(|| err("size", s, SIZE_HINT))?;
    let prefix = unit.strip_suffix('B').unwrap_or(unit);
    let scale = si_scale(prefix).ok_or_else(|| err("size", s, SIZE_HINT))?;
    let n = v * scale;
    if n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(err("size", s, SIZE_HINT));
    }
    Ok(n as u64)
}

const RATE_HINT: &str = "expected a rate per second, optionally with k or M (e.g. 500, 10k, 1.5M)";

/// Parse an operations-per-second rate: `500`, `10k`, `2.5k/s`.
pub fn parse_rate(s: &str) -> Result<f64, UnitError> {
    let body = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    let (v, unit) = split_number(body).ok_or_else(|| err("rate", s, RATE_HINT))?;
    let scale = match unit {
        "m" => 1e6,
        u => si_scale(u).ok_or_else(|| err("rate", s, RATE_HINT))?,
    };
    let r = v * scale;
    if r <= 0.0 {
        return Err(err("rate", s, "the rate must be above zero"));
    }
    Ok(r)
}

const BITRATE_HINT: &str = "expected bits per second with k/M/G (e.g. 50M, 1G, 100Mbit)";

/// Parse a bit rate: `50M`, `1G`, `100Mbit`, `2.5Gbit/s`. Returns bits per second.
pub fn parse_bitrate(s: &str) -> Result<f64, UnitError> {
    let mut body = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    body = body
        .strip_suffix("bit")
        .or_else(|| body.strip_suffix("bps"))
        .or_else(|| body.strip_suffix('b'))
        .unwrap_or(body);
    let (v, unit) = split_number(body).ok_or_else(|| err("bit rate", s, BITRATE_HINT))?;
    let scale = si_scale(unit).ok_or_else(|| err("bit rate", s, BITRATE_HINT))?;
    let r = v * scale;
    if r <= 0.0 {
        return Err(err("bit rate", s, "the rate must be above zero"));
    }
    Ok(r)
}

/// Format `v` with three significant digits, trailing zeros trimmed (`32.8`, `1`, `512`).
fn three_sig(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Scale `v` by a ladder of (divisor, unit) pairs so the mantissa, after rounding to three
/// significant digits, is below 1000.
fn scaled(v: f64, ladder: &[(f64, &str)]) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let mut idx = 0;
    for (i, (div, _)) in ladder.iter().enumerate() {
        if v.abs() >= *div {
            idx = i;
        }
    }
    loop {
        let (div, unit) = ladder[idx];
        let m = v / div;
        let text = three_sig(m);
        let rounded: f64 = text.parse().unwrap_or(m);
        if rounded.abs() >= 1000.0 && idx + 1 < ladder.len() {
            idx += 1;
            continue;
        }
        return format!("{text}{unit}");
    }
}

/// Format nanoseconds in the largest fitting SI time unit: `512ns`, `32.8us`, `40.1ms`, `1.5s`.
pub fn format_ns(ns: f64) -> String {
    scaled(ns, &[(1.0, "ns"), (1e3, "us"), (1e6, "ms"), (1e9, "s")])
}

/// Format a [`Duration`] like [`format_ns`].
pub fn format_duration(d: Duration) -> String {
    format_ns(d.as_nanos() as f64)
}

/// A test's length as a user writes it (`-d 2h`, `--max-duration 90m`): whole hours, minutes or
/// seconds in that unit, anything else as [`format_ns`] — never "a 7200 s test" for `-d 2h`.
pub fn format_span(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_string(),
        _ if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format_duration(d),
    }
}

/// Format a byte count with binary prefixes: `64 B`, `1.5 KiB`, `3.2 GiB`.
pub fn format_bytes(bytes: f64) -> String {
    scaled(
        bytes,
        &[
            (1.0, " B"),
            (1024.0, " KiB"),
            (1048576.0, " MiB"),
            (1073741824.0, " GiB"),
            (1099511627776.0, " TiB"),
        ],
    )
}

/// Format a count or per-second rate with SI prefixes: `950`, `12.3k`, `1.2M`.
pub fn format_si(v: f64) -> String {
    scaled(
        v,
        &[(1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")],
    )
}

/// Format bits per second: `941 Mbit/s`.
pub fn format_bitrate(bps: f64) -> String {
    scaled(
        bps,
        &[
            (1.0, " bit/s"),
            (1e3, " kbit/s"),
            (1e6, " Mbit/s"),
            (1e9, " Gbit/s"),
            (1e12, " Tbit/s"),
        ],
    )
}

/// The plural of an English noun by the regular rules (`connection` → `connections`, `process`
/// → `processes`, `entry` → `entries`); a multi-word noun pluralises its last word.
pub fn plural_of(noun: &str) -> String {
    let last = noun.rsplit(' ').next().unwrap_or(noun);
    let consonant_y = last.len() > 1
        && last.ends_with('y')
        && !last[..last.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &noun[..noun.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| last.ends_with(e))
    {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

/// `noun` for a count of `n`: singular for one, [`plural_of`] otherwise.
pub fn noun(n: u64, noun: &str) -> String {
    if n == 1 {
        noun.to_string()
    } else {
        plural_of(noun)
    }
}

/// A count with its noun, singular or plural as English wants: `1 connection`, `0 connections`,
/// `3 processes`. The one way latscope writes a count of things (never "connection(s)").
pub fn count(n: u64, what: &str) -> String {
    format!("{n} {}", noun(n, what))
}

/// A part of a counted whole: `1 of 1 connection`, `3 of 52 transactions` (the noun agrees
/// with the whole, as in "3 of 52 transactions stalled").
pub fn of(part: u64, total: u64, what: &str) -> String {
    format!("{part} of {}", count(total, what))
}

/// The verb form that agrees with a count of `n`: `verb(1, "belongs", "belong")` is
/// `belongs`, `verb(2, …)` `belong` ("1 socket belongs", "2 sockets belong").
pub fn verb<'a>(n: u64, singular: &'a str, plural: &'a str) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// Milliseconds since the Unix epoch, for report metadata (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `YYYY-MM-DD HH:MM:SS UTC` from Unix milliseconds, via Howard Hinnant's `civil_from_days`
/// (http://howardhinnant.github.io/date_algorithms.html).
pub fn utc_time(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn spans_read_as_written() {
        use super::format_span;
        use std::time::Duration;
        assert_eq!(format_span(Duration::from_secs(7200)), "2h");
        assert_eq!(format_span(Duration::from_secs(5400)), "90m");
        assert_eq!(format_span(Duration::from_secs(7202)), "7202s");
        assert_eq!(format_span(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_span(Duration::ZERO), "0s");
    }

    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
        assert_eq!(utc_time(1_758_304_308_000), "2025-09-19 17:51:48 UTC");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        let e = parse_duration("200").unwrap_err().to_string();
        assert_eq!(e, "invalid duration '200': 200 what? write 200ms or 200s");
        assert!(parse_duration("1.5").is_err());
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("10ns"), Ok(Duration::from_nanos(10)));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("-1s").is_err());
        let e = parse_duration("abc").unwrap_err().to_string();
        assert!(e.contains("invalid duration 'abc'"), "{e}");
    }

    #[test]
    fn parts_and_verbs_agree_with_their_count() {
        assert_eq!(of(1, 1, "connection"), "1 of 1 connection");
        assert_eq!(of(0, 1, "connection"), "0 of 1 connection");
        assert_eq!(of(3, 52, "transaction"), "3 of 52 transactions");
        assert_eq!(of(2, 0, "period"), "2 of 0 periods");
        assert_eq!(verb(1, "belongs", "belong"), "belongs");
        assert_eq!(verb(0, "belongs", "belong"), "belong");
        assert_eq!(verb(2, "was", "were"), "were");
        assert_eq!(
            format!("{} {}", count(1, "socket"), verb(1, "belongs", "belong")),
            "1 socket belongs"
        );
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1m"), Ok(1_000_000));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert_eq!(parse_count("42"), Ok(42));
        assert_eq!(parse_count("1_000"), Ok(1000));
        assert!(parse_count("1.5").is_err());
        assert!(parse_count("ten").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("64Ki"), Ok(65_536));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("1.5k"), Ok(1500));
        assert_eq!(parse_size("4MB"), Ok(4_000_000));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert!(parse_size("12q").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10k"), Ok(10_000.0));
        assert_eq!(parse_rate("2.5k/s"), Ok(2_500.0));
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_bitrate("50M"), Ok(50e6));
        assert_eq!(parse_bitrate("100Mbit"), Ok(100e6));
        assert_eq!(parse_bitrate("1Gbit/s"), Ok(1e9));
        assert!(parse_bitrate("fast").is_err());
    }

    #[test]
    fn plurals() {
        assert_eq!(count(1, "connection"), "1 connection");
        assert_eq!(count(0, "connection"), "0 connections");
        assert_eq!(count(2, "TCP connection"), "2 TCP connections");
        assert_eq!(count(1, "TCP connection"), "1 TCP connection");
        assert_eq!(count(3, "process"), "3 processes");
        assert_eq!(count(2, "entry"), "2 entries");
        assert_eq!(count(2, "delay"), "2 delays");
        assert_eq!(count(5, "setsockopt call"), "5 setsockopt calls");
        assert_eq!(count(4, "network namespace"), "4 network namespaces");
        assert_eq!(noun(1, "thread"), "thread");
        assert_eq!(noun(8, "thread"), "threads");
    }

    #[test]
    fn formatting() {
        assert_eq!(format_ns(32_768.0), "32.8us");
        assert_eq!(format_ns(65_536.0), "65.5us");
        assert_eq!(format_ns(1.0), "1ns");
        assert_eq!(format_ns(999.7), "1us");
        assert_eq!(format_ns(40_123_456.0), "40.1ms");
        assert_eq!(format_ns(1_500_000_000.0), "1.5s");
        assert_eq!(format_ns(0.0), "0ns");
        assert_eq!(format_bytes(64.0), "64 B");
        assert_eq!(format_bytes(1536.0), "1.5 KiB");
        assert_eq!(format_si(12_345.0), "12.3k");
        assert_eq!(format_bitrate(941e6), "941 Mbit/s");
    }
}

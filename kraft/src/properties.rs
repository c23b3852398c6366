//! Java properties files (`server.properties`, `meta.properties`) as
//! `java.util.Properties.load` reads them.
//!
//! - A *natural line* ends at `\n`, `\r` or `\r\n`. A line whose first
//!   non-blank character is `#` or `!` is a comment; blank lines are
//!   skipped.
//! - A *logical line* is natural lines joined while a line ends in an odd
//!   number of backslashes; the continuation's leading blanks are dropped.
//! - The key ends at the first unescaped `=`, `:` or blank; blanks around
//!   the separator are skipped (one `=` or `:` at most); the rest is the
//!   value, trailing blanks kept (as Java does).
//! - Escapes in keys and values: `\t`, `\n`, `\r`, `\f`, `\uXXXX` (a
//!   malformed one is an error naming the line, as Java throws), and `\x`
//!   for any other `x` is `x`.
//! - A key given twice keeps its last value.
//!
//! Invariants: the parser allocates no more than the text's size, never
//! panics, and every error names its line. Reading a file is bounded
//! ([`MAX_BYTES`]).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

/// The largest properties file read (a broker's `server.properties` is a
/// few KiB).
pub const MAX_BYTES: u64 = 1 << 20;

/// Parses properties text into key/value pairs.
pub fn parse(text: &str) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut lines = natural_lines(text);
    while let Some((number, first)) = lines.next() {
        let first = first.trim_start_matches(is_blank);
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::with_capacity(first.len());
        let mut part = first;
        while ends_in_odd_backslashes(part) {
            logical.push_str(&part[..part.len() - 1]);
            match lines.next() {
                Some((_, next)) => part = next.trim_start_matches(is_blank),
                None => {
                    part = "";
                    break;
                }
            }
        }
        logical.push_str(part);
        let (key, value) = split_key_value(&logical);
        let key = unescape(key).map_err(|e| format!("line {number}: {e}"))?;
        let value = unescape(value).map_err(|e| format!("line {number}: {e}"))?;
        out.insert(key, value);
    }
    Ok(out)
}

/// The natural lines of `text` with their 1-based numbers, each without its
/// terminator (`\n`, `\r` or `\r\n`).
fn natural_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text;
    let mut number = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        number += 1;
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            usize::from(end < rest.len())
        };
        rest = &rest[end + skip..];
        Some((number, line))
    })
}

/// Reads and parses the properties file at `path`; a missing file is an
/// error (the caller named it).
pub fn read(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = kafkalog::fsutil::read_to_string_bounded(path, MAX_BYTES)
        .map_err(Error::io("read", path))?;
    parse(&text).map_err(|reason| Error::Properties {
        path: path.to_path_buf(),
        reason,
    })
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c')
}

fn ends_in_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped separator.
fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'=' | b':' | b' ' | b'\t' | b'\x0c' => break,
            _ => i += 1,
        }
    }
    let key_end = i.min(bytes.len());
    let key = &line[..key_end];
    let mut rest = line[key_end..].trim_start_matches(is_blank);
    if let Some(r) = rest.strip_prefix(['=', ':']) {
        rest = r.trim_start_matches(is_blank);
    }
    (key, rest)
}

fn unescape(s: &str) -> std::result::Result<String, String> {
    if !s.contains('\\') {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| format!("malformed \\uxxxx escape \\u{hex}"))?;
                // A lone surrogate half is kept as U+FFFD (Rust strings are UTF-8).
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parses(text: &str, want: &[(&str, &str)]) {
        let got = parse(text).expect("parses");
        let want: BTreeMap<String, String> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want, "{text:?}");
    }

    #[test]
    fn key_equals_value() {
        parses(
            "log.retention.hours=168\n",
            &[("log.retention.hours", "168")],
        );
    }

    #[test]
    fn blanks_around_the_separator_are_skipped() {
        parses("a = b\n", &[("a", "b")]);
    }

    #[test]
    fn a_colon_separates_too() {
        parses("a:b\n", &[("a", "b")]);
    }

    #[test]
    fn a_blank_separates_too() {
        parses("a b\n", &[("a", "b")]);
    }

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        parses("# c\n  ! c\n\n\ta=1\n", &[("a", "1")]);
    }

    #[test]
    fn a_backslash_at_the_end_continues_the_line() {
        parses(
            "listeners=PLAINTEXT://a:9092,\\\n    SSL://b:9093\n",
            &[("listeners", "PLAINTEXT://a:9092,SSL://b:9093")],
        );
    }

    #[test]
    fn an_escaped_backslash_at_the_end_does_not_continue() {
        parses("a=b\\\\\nc=d\n", &[("a", "b\\"), ("c", "d")]);
    }

    #[test]
    fn crlf_line_ends() {
        parses("a=1\r\nb=2\r\n", &[("a", "1"), ("b", "2")]);
    }

    #[test]
    fn crlf_continuation() {
        parses("a=1,\\\r\n  2\r\nb=3\r\n", &[("a", "1,2"), ("b", "3")]);
    }

    #[test]
    fn an_escaped_separator_is_part_of_the_key() {
        parses("a\\=b=c\n", &[("a=b", "c")]);
    }

    #[test]
    fn unicode_escapes() {
        parses("k=\\u00e9t\\u00E9\n", &[("k", "été")]);
    }

    #[test]
    fn the_last_of_a_repeated_key_wins() {
        parses("a=1\na=2\n", &[("a", "2")]);
    }

    #[test]
    fn trailing_blanks_of_a_value_are_kept() {
        parses("a=1  \n", &[("a", "1  ")]);
    }

    #[test]
    fn an_empty_value() {
        parses("a=\nb\n", &[("a", ""), ("b", "")]);
    }

    #[test]
    fn no_final_newline() {
        parses("a=1", &[("a", "1")]);
    }

    #[test]
    fn a_malformed_unicode_escape_is_an_error_naming_the_line() {
        let e = parse("a=1\nb=\\u12\n").expect_err("malformed");
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn a_huge_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("server.properties");
        std::fs::write(&path, vec![b'#'; (MAX_BYTES + 1) as usize]).expect("write");
        assert!(read(&path).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails_without_panicking(text in "[a-z.=:#!\\\\u0-9 \t\r\n-]{0,200}") {
            let _ = parse(&text);
        }
    }
}

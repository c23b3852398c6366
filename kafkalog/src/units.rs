//! Sizes as operators write them, shared by every binary's flags and
//! config files: an integer (bytes) or a number with a unit (`B`; `KB`,
//! `MB`, `GB` are powers of 1000; `KiB`, `MiB`, `GiB`, and the short `K`,
//! `M`, `G`, powers of 1024). A trailing `/s` is accepted for rates
//! (`100MiB/s`). Durations are not here: every binary parses them with
//! `humantime` (`500ms`, `5s`, `10m`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A size in bytes, written as an integer or a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let t = t.strip_suffix("/s").unwrap_or(t).trim_end();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let unit = unit.trim();
        let factor: u64 = match unit {
            "" | "B" => 1,
            "KB" | "kB" => 1000,
            "MB" => 1000 * 1000,
            "GB" => 1000 * 1000 * 1000,
            "KiB" | "K" | "k" => 1024,
            "MiB" | "M" => 1024 * 1024,
            "GiB" | "G" => 1024 * 1024 * 1024,
            _ => {
                return Err(format!(
                    "{s:?}: unknown unit {unit:?} (B, KB, MB, GB, KiB, MiB, GiB)"
                ));
            }
        };
        let value: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a size (examples: 1048576, \"8MiB\", \"64 MB\")"))?;
        let bytes = value * factor as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(format!("{s:?} is out of range"));
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: u64 = 1024 * 1024;
        const KIB: u64 = 1024;
        let b = self.0;
        if b >= MIB && b.is_multiple_of(MIB) {
            write!(f, "{}MiB", b / MIB)
        } else if b >= KIB && b.is_multiple_of(KIB) {
            write!(f, "{}KiB", b / KIB)
        } else {
            write!(f, "{b}")
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(u64),
            Str(String),
        }
        match Repr::deserialize(d)? {
            Repr::Int(n) => Ok(ByteSize(n)),
            Repr::Str(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        for (text, bytes) in [
            ("1048576", 1 << 20),
            ("8MiB", 8 << 20),
            ("8 MiB", 8 << 20),
            ("64MB", 64_000_000),
            ("1.5KiB", 1536),
            ("100MiB/s", 100 << 20),
            ("0", 0),
        ] {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
        for text in ["", "MiB", "8 furlongs", "-1", "1e400GiB"] {
            assert!(text.parse::<ByteSize>().is_err(), "{text}");
        }
        assert_eq!(ByteSize(8 << 20).to_string(), "8MiB");
    }
}

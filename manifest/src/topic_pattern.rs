//! Topic selection patterns (`topics`, `exclude` of the shipper and the
//! applier): a regex that must match the whole topic name.
//!
//! Invariant: the pattern compiles on its own before it is wrapped in
//! `^(?:...)$`, so it cannot close the group it is wrapped in: without that
//! check `orders)|(.*` would become `^(?:orders)|(.*)$` and match every
//! topic.

use regex::Regex;

/// Compiles `pattern` to a regex that matches whole topic names only.
/// The error says why, for the caller to put under its field's name.
pub fn whole_name(pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("regex {pattern:?} cannot be anchored to the whole topic name: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_names_only() {
        let re = whole_name("orders|events").expect("valid");
        assert!(re.is_match("orders") && re.is_match("events"));
        assert!(!re.is_match("orders-eu") && !re.is_match("my-events"));
    }

    #[test]
    fn a_pattern_cannot_escape_its_anchors() {
        let e = whole_name("orders)|(.*").expect_err("unbalanced on its own");
        assert!(e.contains("invalid regex"), "{e}");
        assert!(whole_name("(").is_err());
    }
}

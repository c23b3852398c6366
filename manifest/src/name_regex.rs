//! A regex that must match a whole name (a topic, a config key), never a
//! part of one. Depends on no other module: [`crate::topic_pattern`] (topic
//! selection, which reads the change feed) and [`crate::topic_config`]
//! (config key filters, whose values a manifest carries) both use it, so
//! neither depends on the other.
//!
//! Invariant: the pattern compiles on its own before it is wrapped in
//! `^(?:...)$`, so it cannot close the group it is wrapped in: without that
//! check `orders)|(.*` would become `^(?:orders)|(.*)$` and match every
//! name.

use regex::Regex;

/// Compiles `pattern` to a regex that matches whole names only (topic
/// names, config keys). The error says why, for the caller to put under
/// its field's name.
pub fn whole_name(pattern: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("regex {pattern:?} cannot be anchored to the whole name: {e}"))
}

//! The `[topic_configs]` section of the applier config: which of the
//! source's topic configs the mirror record keeps (`crate::topic_configs`
//! applies the filter it builds).

use manifest::topic_config::ConfigFilter;

use super::ConfigError;

/// The `[topic_configs]` section of the applier config: the operator's
/// whole-key regexes over the default exclusions
/// ([`manifest::topic_config::DEFAULT_EXCLUDED`]). Environment:
/// `SEGMIRROR_TOPIC_CONFIGS_INCLUDE`/`_EXCLUDE` (comma-separated); flags
/// `--config-include`/`--config-exclude` (repeatable).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSection {
    /// Keys copied although a default exclusion names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Keys never copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
}

impl FilterSection {
    /// Each list set in `over` replaces this one's.
    pub fn merge(self, over: FilterSection) -> FilterSection {
        FilterSection {
            include: over.include.or(self.include),
            exclude: over.exclude.or(self.exclude),
        }
    }

    /// The filter, or an error naming the field and the pattern.
    pub fn filter(&self) -> Result<ConfigFilter, ConfigError> {
        let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
        let (include, exclude) = (list(&self.include), list(&self.exclude));
        let err = |field: &'static str| move |reason: String| ConfigError { field, reason };
        ConfigFilter::new(&include, &[]).map_err(err("topic_configs.include"))?;
        ConfigFilter::new(&[], &exclude).map_err(err("topic_configs.exclude"))?;
        ConfigFilter::new(&include, &exclude).map_err(err("topic_configs"))
    }
}

/// A comma-separated list of patterns (an environment variable's value),
/// blanks dropped.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_section_names_the_field_of_a_bad_pattern() {
        let bad = |include: &[&str], exclude: &[&str]| {
            let v = |l: &[&str]| Some(l.iter().map(|p| p.to_string()).collect());
            FilterSection {
                include: v(include),
                exclude: v(exclude),
            }
            .filter()
            .expect_err("refused")
            .field
        };
        assert_eq!(bad(&["("], &[]), "topic_configs.include");
        assert_eq!(bad(&[], &["[x"]), "topic_configs.exclude");
        let ok = FilterSection {
            include: Some(vec![r"min\.insync\.replicas".into()]),
            exclude: None,
        };
        assert!(
            ok.filter()
                .expect("valid")
                .decide("min.insync.replicas")
                .copied()
        );
        assert_eq!(split_list(" a, ,b\\..*,"), ["a", "b\\..*"]);
    }

    #[test]
    fn the_section_reads_as_a_table_and_layers_over_the_file() {
        use crate::config::ApplierConfig;
        let file = ApplierConfig::from_toml(
            "log_dir = \"/x\"\n[topic_configs]\ninclude = [\"min\\\\.insync\\\\.replicas\"]\nexclude = [\"segment\\\\..*\"]\n",
        )
        .expect("parse");
        let flags = ApplierConfig {
            topic_configs: Some(FilterSection {
                include: None,
                exclude: Some(vec![r"retention\..*".into()]),
            }),
            ..ApplierConfig::default()
        };
        let v = file.merge(flags).validate(false).expect("valid");
        let f = &v.config_filter;
        assert!(
            f.decide("min.insync.replicas").copied(),
            "the file's include"
        );
        assert!(!f.decide("retention.ms").copied(), "the flag's exclude");
        assert!(
            f.decide("segment.ms").copied(),
            "the flag replaced the file's exclude"
        );
        let e = ApplierConfig::from_toml("[topic_configs]\nincluded = []\n").expect_err("unknown");
        assert!(e.to_string().contains("included"), "{e}");
    }
}

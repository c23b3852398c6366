//! The doctor's output: checks with a status, the evidence (what the
//! endpoint or the file system answered) and the fix (the Terraform
//! variable or setting that corrects it), printed as a table or as JSON,
//! and the exit code they imply.
//!
//! Invariants:
//! - Only a must-have check can fail: an advisory check that finds a
//!   problem says `warn` ([`Check::new`] downgrades a `fail` of an
//!   advisory check), so `fail` always means "exit 1".
//! - [`Report::exit_code`] is 0 when no check fails and 1 otherwise; usage
//!   and access errors (exit 2) never produce a report
//!   ([`crate::DoctorError`]).
//! - The table and the JSON carry the same checks in the same order.

use serde::Serialize;

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As the Terraform modules promise.
    Pass,
    /// Worth a look, or not measurable here ("not supported by this
    /// endpoint", denied to these credentials); does not change the exit
    /// code.
    Warn,
    /// A must-have promise is broken: exit 1.
    Fail,
}

impl Status {
    /// `pass`, `warn` or `fail`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// The prefix of a warn's evidence when the endpoint cannot answer a call.
pub const NOT_SUPPORTED: &str = "not supported by this endpoint";

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable id, e.g. `versioning`, `lifecycle.abort-multipart`.
    pub id: String,
    /// Whether a failure of this check fails the run (and the preflight).
    pub must_have: bool,
    /// The verdict.
    pub status: Status,
    /// What was asked and what the answer was.
    pub evidence: String,
    /// What corrects it (empty when the check passes).
    pub fix: String,
}

impl Check {
    /// A verdict; `Fail` of an advisory check (`must_have == false`) is
    /// recorded as `Warn`, and a pass carries no fix.
    pub fn new(
        id: &str,
        must_have: bool,
        status: Status,
        evidence: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        let status = if status == Status::Fail && !must_have {
            Status::Warn
        } else {
            status
        };
        Check {
            id: id.to_string(),
            must_have,
            status,
            evidence: evidence.into(),
            fix: if status == Status::Pass {
                String::new()
            } else {
                fix.into()
            },
        }
    }

    /// A passing check.
    pub fn pass(id: &str, must_have: bool, evidence: impl Into<String>) -> Check {
        Check::new(id, must_have, Status::Pass, evidence, "")
    }

    /// A warn whose cause is that the endpoint cannot answer `call`.
    pub fn not_supported(id: &str, must_have: bool, call: &str, answer: &str) -> Check {
        Check {
            id: id.to_string(),
            must_have,
            status: Status::Warn,
            evidence: format!("{NOT_SUPPORTED}: {call} answered {answer}"),
            fix: "check this on AWS S3 (or an endpoint that implements the call)".to_string(),
        }
    }
}

/// All checks of one run, with what they were run against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `shipper` or `applier`: whose view.
    pub view: String,
    /// The bucket URL checked.
    pub bucket: String,
    /// The endpoint requests went to (`None` for local buckets).
    pub endpoint: Option<String>,
    /// Where the expectations came from, and the defaults used for what
    /// they leave out.
    pub expectations: Vec<String>,
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// 0 when no check fails, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        if self.checks.iter().any(|c| c.status == Status::Fail) {
            1
        } else {
            0
        }
    }

    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.status == Status::Fail)
    }

    /// The report as a table: a header naming what was checked and the
    /// expectations, one line per check (status, id, `*` for must-have,
    /// evidence) and, under each that did not pass, its fix; then a summary.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("doctor ({} view): {}", self.view, self.bucket));
        if let Some(e) = &self.endpoint {
            out.push_str(&format!(" (endpoint {e})"));
        }
        out.push('\n');
        for e in &self.expectations {
            out.push_str(&format!("  {e}\n"));
        }
        let width = self
            .checks
            .iter()
            .map(|c| c.id.len() + usize::from(c.must_have))
            .max()
            .unwrap_or(5)
            .max(5);
        out.push_str(&format!("\nSTATUS  {:<width$}  EVIDENCE\n", "CHECK"));
        for c in &self.checks {
            let id = if c.must_have {
                format!("{}*", c.id)
            } else {
                c.id.clone()
            };
            out.push_str(&format!(
                "{:<6}  {id:<width$}  {}\n",
                c.status.as_str(),
                c.evidence
            ));
            if !c.fix.is_empty() {
                out.push_str(&format!("{:<6}  {:<width$}  fix: {}\n", "", "", c.fix));
            }
        }
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        out.push_str(&format!(
            "\n{} pass, {} warn, {} fail (* = must-have: a fail exits 1)\n",
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail)
        ));
        out
    }

    /// The report as JSON: `{view, bucket, endpoint, expectations, checks:
    /// [{id, must_have, status, evidence, fix}], exit_code}`.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            report: &'a Report,
            exit_code: u8,
        }
        serde_json::to_string_pretty(&Out {
            report: self,
            exit_code: self.exit_code(),
        })
        .unwrap_or_else(|e| format!("{{\"error\": \"serializing the report: {e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(checks: Vec<Check>) -> Report {
        Report {
            view: "shipper".into(),
            bucket: "s3://b/p".into(),
            endpoint: None,
            expectations: vec!["defaults".into()],
            checks,
        }
    }

    #[test]
    fn an_advisory_check_never_fails_and_a_pass_has_no_fix() {
        let c = Check::new("x", false, Status::Fail, "e", "f");
        assert_eq!(c.status, Status::Warn);
        assert_eq!(c.fix, "f");
        assert_eq!(Check::new("x", true, Status::Pass, "e", "f").fix, "");
    }

    #[test]
    fn the_exit_code_is_1_only_when_a_must_have_fails() {
        let warn = Check::new("w", true, Status::Warn, "e", "f");
        assert_eq!(report(vec![warn.clone()]).exit_code(), 0);
        let fail = Check::new("v", true, Status::Fail, "e", "f");
        assert_eq!(report(vec![warn, fail]).exit_code(), 1);
    }

    #[test]
    fn table_and_json_carry_the_same_checks_with_fixes() {
        let r = report(vec![
            Check::pass("versioning", true, "Status=Enabled"),
            Check::new("encryption", true, Status::Fail, "none", "modules/bucket"),
        ]);
        let t = r.to_table();
        assert!(t.contains("pass    versioning*"), "{t}");
        assert!(t.contains("fail    encryption*"), "{t}");
        assert!(t.contains("fix: modules/bucket"), "{t}");
        assert!(t.contains("1 pass, 0 warn, 1 fail"), "{t}");
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).expect("json");
        assert_eq!(j["exit_code"], 1);
        assert_eq!(j["checks"][1]["status"], "fail");
        assert_eq!(j["checks"][1]["fix"], "modules/bucket");
    }
}

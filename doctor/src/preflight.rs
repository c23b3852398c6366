//! The services' preflight: `shipper run|once` and `applier run|once` run
//! the must-have configuration checks once at start
//! ([`crate::run::Scope::Preflight`]: read-only calls, no probe object, no
//! listing), then go on, warn, or refuse to start.
//!
//! Invariants:
//! - `off` makes no request; `memory://` makes none either.
//! - Each failure is logged once, as one `tracing` event naming the check,
//!   the evidence and the fix; then one event counts the checks
//!   ([`Summary`]: pass, warn and fail add up to the checks run).
//! - Preflight never blocks for long: it is bounded by its timeout, and an
//!   unusable bucket or a timeout is logged and, under `warn`, ignored (the
//!   service's own requests report it as they always have).
//! - Only [`Mode::Enforce`] with a failure (or an unusable bucket) refuses
//!   to start ([`Outcome::Refuse`]), before any data is touched.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bucket::url::BucketUrl;

use crate::expect::Expectations;
use crate::expect::View;
use crate::report::Status;
use crate::run::{Options, Scope, run};

/// `--preflight off|warn|enforce`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// No preflight.
    Off,
    /// Log failures and start anyway (the default).
    #[default]
    Warn,
    /// Log failures and refuse to start (exit 1).
    Enforce,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s.trim() {
            "off" => Ok(Mode::Off),
            "warn" => Ok(Mode::Warn),
            "enforce" => Ok(Mode::Enforce),
            other => Err(format!("{other:?} is not off, warn or enforce")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::Warn => "warn",
            Mode::Enforce => "enforce",
        })
    }
}

/// What the service does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Start.
    Proceed,
    /// Do not start: the failed checks (or the reason the bucket cannot be
    /// used), one line each.
    Refuse(Vec<String>),
}

/// Runs the preflight for a service (`view`) on `bucket`, for its cluster
/// ids, the whole of it bounded by `timeout` (each request by half of it).
pub async fn preflight(
    mode: Mode,
    view: View,
    bucket: &BucketUrl,
    cluster_ids: &[String],
    timeout: Duration,
) -> Outcome {
    if mode == Mode::Off || matches!(bucket, BucketUrl::Memory) {
        return Outcome::Proceed;
    }
    let opts = Options {
        view,
        bucket: Some(bucket.clone()),
        expect: Expectations::default(),
        cluster_ids: cluster_ids.to_vec(),
        timeout: (timeout / 2).max(Duration::from_millis(500)),
        scope: Scope::Preflight,
    };
    let refuse_or_go = |line: String| {
        if mode == Mode::Enforce {
            tracing::error!(bucket = %bucket, "preflight: {line} (--preflight enforce: not starting)");
            Outcome::Refuse(vec![line])
        } else {
            tracing::warn!(bucket = %bucket, "preflight: {line}");
            Outcome::Proceed
        }
    };
    let report = match tokio::time::timeout(timeout, run(&opts)).await {
        Err(_) => {
            return refuse_or_go(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            ));
        }
        Ok(Err(e)) => return refuse_or_go(e.to_string()),
        Ok(Ok(r)) => r,
    };
    let mut failed = Vec::new();
    for c in &report.checks {
        match c.status {
            Status::Fail => {
                let line = format!("{} failed: {}; fix: {}", c.id, c.evidence, c.fix);
                if mode == Mode::Enforce {
                    tracing::error!(bucket = %bucket, check = %c.id, evidence = %c.evidence, fix = %c.fix, "preflight check failed");
                } else {
                    tracing::warn!(bucket = %bucket, check = %c.id, evidence = %c.evidence, fix = %c.fix, "preflight check failed");
                }
                failed.push(line);
            }
            Status::Warn => {
                tracing::info!(bucket = %bucket, check = %c.id, evidence = %c.evidence, "preflight check warns");
            }
            Status::Pass => {}
        }
    }
    let summary = Summary::of(&report.checks);
    tracing::info!(
        bucket = %bucket,
        passed = summary.pass,
        warned = summary.warn,
        failed = summary.fail,
        "preflight: {summary} (`{} doctor` for all checks)",
        view.as_str()
    );
    if mode == Mode::Enforce && !failed.is_empty() {
        Outcome::Refuse(failed)
    } else {
        Outcome::Proceed
    }
}

/// How many checks passed, warned and failed: the three add up to the
/// checks run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Checks that passed.
    pub pass: usize,
    /// Checks that warned.
    pub warn: usize,
    /// Checks that failed.
    pub fail: usize,
}

impl Summary {
    /// Counts `checks` by status.
    pub fn of(checks: &[crate::report::Check]) -> Summary {
        let mut s = Summary::default();
        for c in checks {
            match c.status {
                Status::Pass => s.pass += 1,
                Status::Warn => s.warn += 1,
                Status::Fail => s.fail += 1,
            }
        }
        s
    }

    /// The checks counted.
    pub fn total(&self) -> usize {
        self.pass + self.warn + self.fail
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} checks: {} pass, {} warn, {} fail",
            self.total(),
            self.pass,
            self.warn,
            self.fail
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Check;

    #[test]
    fn the_summary_adds_up() {
        let (p, w, f) = (Status::Pass, Status::Warn, Status::Fail);
        // (statuses, line)
        let rows: [(&[Status], &str); 6] = [
            (&[], "0 checks: 0 pass, 0 warn, 0 fail"),
            (&[w], "1 checks: 0 pass, 1 warn, 0 fail"),
            (&[p], "1 checks: 1 pass, 0 warn, 0 fail"),
            (&[f], "1 checks: 0 pass, 0 warn, 1 fail"),
            (&[p, w, f, p], "4 checks: 2 pass, 1 warn, 1 fail"),
            (&[f, f, w], "3 checks: 0 pass, 1 warn, 2 fail"),
        ];
        for (statuses, want) in rows {
            let checks: Vec<Check> = statuses
                .iter()
                .enumerate()
                .map(|(i, s)| Check::new(&format!("c{i}"), true, *s, "e", "f"))
                .collect();
            let s = Summary::of(&checks);
            assert_eq!(s.to_string(), want, "{statuses:?}");
            assert_eq!(s.pass + s.warn + s.fail, checks.len(), "{statuses:?}");
        }
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [Mode::Off, Mode::Warn, Mode::Enforce] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert!("strict".parse::<Mode>().is_err());
        assert_eq!(Mode::default(), Mode::Warn);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn memory_and_off_make_no_request() {
        let s3 = BucketUrl::parse("s3://nowhere-bucket/p").expect("url");
        assert_eq!(
            preflight(Mode::Off, View::Shipper, &s3, &[], Duration::from_millis(1)).await,
            Outcome::Proceed
        );
        assert_eq!(
            preflight(
                Mode::Enforce,
                View::Shipper,
                &BucketUrl::Memory,
                &[],
                Duration::from_millis(1)
            )
            .await,
            Outcome::Proceed
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn enforce_refuses_a_broken_file_bucket_and_warn_proceeds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").expect("write");
        let url = BucketUrl::parse(&format!("file://{}", file.display())).expect("url");
        let t = Duration::from_secs(5);
        match preflight(Mode::Enforce, View::Applier, &url, &[], t).await {
            Outcome::Refuse(lines) => {
                assert!(
                    lines.iter().any(|l| l.contains("not a directory")),
                    "{lines:?}"
                )
            }
            Outcome::Proceed => panic!("enforce started on a broken bucket"),
        }
        assert_eq!(
            preflight(Mode::Warn, View::Applier, &url, &[], t).await,
            Outcome::Proceed
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_file_bucket_is_checked_quickly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = BucketUrl::parse(&format!("file://{}", dir.path().display())).expect("url");
        let start = std::time::Instant::now();
        let out = preflight(
            Mode::Enforce,
            View::Shipper,
            &url,
            &["c1".into()],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(out, Outcome::Proceed);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }
}

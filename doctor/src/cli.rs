//! The `doctor` subcommand as both binaries expose it (`shipper doctor`,
//! `applier doctor`): flags, printing and exit codes, so the two stay
//! identical. The binaries only name their view.

use std::path::PathBuf;
use std::time::Duration;

use bucket::url::BucketUrl;

use crate::expect::Expectations;
use crate::expect::View;
use crate::run::{Options, Scope, run};

/// Flags of `doctor`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// The bucket to check: s3://bucket/prefix or file:///abs/path [env: SEGMIRROR_BUCKET] [default: the --expect file's bucket].
    #[arg(long, value_name = "URL")]
    pub bucket: Option<String>,
    /// Expectations (TOML; the Terraform example's `doctor_expectations` output) [default: none: defaults the table states].
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// A cluster id whose prefix is probed and whose data should be there (repeatable) [env: SEGMIRROR_CLUSTER_ID, applier: SEGMIRROR_SOURCE_CLUSTER_ID] [default: the --expect file's cluster_ids].
    #[arg(long = "cluster-id", value_name = "ID")]
    pub cluster_ids: Vec<String>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bound of each request [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Validate the flags and the --expect file and print what would be checked, making no request (exit 0, or 2 naming the bad field).
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `doctor` for `view` (`bin` names the binary in messages); returns
/// the exit code: 0 no must-have fails, 1 one does, 2 usage or access
/// error.
pub async fn main(bin: &str, view: View, args: DoctorArgs) -> u8 {
    let json = args.json;
    let fail = |msg: String| -> u8 {
        eprintln!("{bin} doctor: error: {msg}");
        if json {
            println!("{}", serde_json::json!({ "exit_code": 2, "error": msg }));
        }
        2
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let expect = match &args.expect {
        Some(p) => match Expectations::from_file(p) {
            Ok(e) => e,
            Err(e) => return fail(e.to_string()),
        },
        None => Expectations::default(),
    };
    let bucket_text = args.bucket.clone().or_else(|| {
        let from_expect = match view {
            View::Shipper => expect.source.bucket.is_some(),
            View::Applier => expect.destination.bucket.is_some(),
        };
        if from_expect {
            None
        } else {
            env("SEGMIRROR_BUCKET")
        }
    });
    let bucket = match bucket_text.as_deref().map(BucketUrl::parse).transpose() {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    let mut cluster_ids = args.cluster_ids.clone();
    if cluster_ids.is_empty() && expect.cluster_ids.is_empty() {
        let var = match view {
            View::Shipper => "SEGMIRROR_CLUSTER_ID",
            View::Applier => "SEGMIRROR_SOURCE_CLUSTER_ID",
        };
        cluster_ids.extend(env(var));
    }
    for id in &cluster_ids {
        if let Err(e) = manifest::layout::validate_cluster_id(id) {
            return fail(format!("--cluster-id: {e}"));
        }
    }
    let timeout = match args.timeout.as_deref() {
        None => Duration::from_secs(10),
        Some(t) => match humantime::parse_duration(t.trim()) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => return fail("--timeout must be more than 0".into()),
            Err(e) => return fail(format!("--timeout {t:?}: {e} (examples: 5s, 1m)")),
        },
    };
    let dry_run = args.dry_run;
    let opts = Options {
        view,
        bucket,
        expect,
        cluster_ids,
        timeout,
        scope: Scope::Full,
    };
    if dry_run {
        return match opts.plan() {
            Ok(lines) => {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "exit_code": 0, "would_check": lines })
                    );
                } else {
                    for l in lines {
                        println!("{l}");
                    }
                }
                0
            }
            Err(e) => fail(e.to_string()),
        };
    }
    match run(&opts).await {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_table());
            }
            report.exit_code()
        }
        Err(e) => fail(e.to_string()),
    }
}

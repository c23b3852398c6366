//! `shipper doctor` driven as a binary: against the S3 test server (a bare
//! bucket fails naming each setting with its fix; a bucket configured as
//! infra/'s modules configure it passes; a mistyped cluster id fails), a
//! missing bucket (exit 2) and a `file://` bucket (missing: 2; set up: 0;
//! a mistyped cluster id: 1). S3 cases fail without the S3 test server,
//! unless `SEGMIRROR_SKIP_S3=1` skips them.

mod common;

use std::process::Command;

use common::s3_available;

use doctor::testbed::{
    Testbed, assert_mistyped_cluster, block_on, report_check as check, report_checks as checks,
    unique_bucket as unique,
};
use manifest::layout::ClusterLayout;

fn shipper(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shipper"))
        .args(args)
        .env_remove("SEGMIRROR_BUCKET")
        .env_remove("SEGMIRROR_CLUSTER_ID")
        .output()
        .expect("run shipper");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bare_bucket_fails_naming_each_setting_and_its_fix() {
    if !s3_available() {
        return;
    }
    let bucket = unique("bare");
    block_on(async { Testbed::from_env().await.create_bucket(&bucket).await }).expect("bucket");
    let url = format!("s3://{bucket}/kafka");
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1"]);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    for id in [
        "versioning*",
        "encryption*",
        "public-access-block*",
        "tls-only-policy*",
        "lifecycle.abort-multipart*",
    ] {
        let at = lines
            .iter()
            .position(|l| l.starts_with("fail") && l.split_whitespace().nth(1) == Some(id))
            .unwrap_or_else(|| panic!("no failed {id} in:\n{out}"));
        let fix = lines.get(at + 1).copied().unwrap_or("");
        assert!(
            fix.trim_start().starts_with("fix: "),
            "{id} has no fix: {fix}\n{out}"
        );
    }
    // The same in JSON, with the fixes naming the module's settings.
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1", "--json"]);
    assert_eq!(code, 1, "{err}");
    let c = checks(&out);
    for (id, fix) in [
        ("versioning", "aws_s3_bucket_versioning"),
        ("encryption", "aws:kms"),
        ("public-access-block", "aws_s3_bucket_public_access_block"),
        ("tls-only-policy", "DenyInsecureTransport"),
        (
            "lifecycle.abort-multipart",
            "abort_incomplete_multipart_upload_days",
        ),
    ] {
        let c = check(&c, id);
        assert_eq!(c["status"], "fail", "{c}");
        assert!(c["fix"].as_str().unwrap_or("").contains(fix), "{c}");
    }
    // Without a policy the probe measures the credentials: they can write
    // under the prefix, and (moto enforces no IAM) outside it too.
    assert_eq!(check(&c, "access.prefix")["status"], "pass");
    assert_eq!(check(&c, "access.outside-prefix")["status"], "warn");
    // The probe cleaned up after itself.
    let (_, out, _) = shipper(&["doctor", "--bucket", &url, "--json"]);
    assert_eq!(
        check(&checks(&out), "layout.keys")["evidence"],
        "0 keys, all of segmirror/v1's layout",
        "{out}"
    );
}

#[test]
fn a_bucket_configured_as_the_modules_configure_it_passes() {
    if !s3_available() {
        return;
    }
    let bucket = unique("module");
    let key = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555";
    let layout = ClusterLayout::new("kafka", "c1").expect("layout");
    block_on(async {
        let t = Testbed::from_env().await;
        t.create_bucket(&bucket).await?;
        t.put(&bucket, &layout.head_key(1), b"{}").await?;
        t.configure_as_module(&bucket, "kafka/segmirror/v1", key)
            .await
    })
    .expect("configure");
    let dir = tempfile::tempdir().expect("tempdir");
    let expect = dir.path().join("doctor.toml");
    std::fs::write(
        &expect,
        format!(
            "cluster_ids = [\"c1\"]\n[source]\nbucket = \"s3://{bucket}/kafka\"\nregion = \"us-east-1\"\nkms_key_arn = \"{key}\"\n"
        ),
    )
    .expect("write");
    let expect = expect.to_str().expect("utf-8");
    let (code, out, err) = shipper(&["doctor", "--expect", expect, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let c = checks(&out);
    for id in [
        "region",
        "versioning",
        "encryption",
        "public-access-block",
        "tls-only-policy",
        "lifecycle.abort-multipart",
        "lifecycle.no-expiry-of-live-data",
        "lifecycle.noncurrent-expiry",
        "layout.clusters",
        "layout.keys",
    ] {
        assert_eq!(check(&c, id)["status"], "pass", "{id}: {}", check(&c, id));
    }
    // moto refuses every object request under the TLS-only policy (it does
    // not evaluate aws:SecureTransport) and this endpoint is plain HTTP:
    // the probe is reported as not measurable, and as live evidence of the
    // policy.
    let access = check(&c, "access.prefix");
    assert_eq!(access["status"], "warn", "{access}");
    assert!(
        access["evidence"]
            .as_str()
            .unwrap_or("")
            .contains("plain HTTP"),
        "{access}"
    );
    assert!(
        check(&c, "tls-only-policy")["evidence"]
            .as_str()
            .unwrap_or("")
            .contains("refused (403)"),
        "{c:?}"
    );
    // The table says the same.
    let (code, out, _) = shipper(&["doctor", "--expect", expect]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pass    encryption*"), "{out}");
    assert!(
        out.contains(&format!("expectations: file {expect}")),
        "{out}"
    );
    // A mistyped cluster id fails (exit 1), naming the cluster there.
    let url = format!("s3://{bucket}/kafka");
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "cl", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_mistyped_cluster(&out, "c1");
}

#[test]
fn a_bucket_that_cannot_be_used_is_exit_2() {
    if !s3_available() {
        return;
    }
    let (code, out, err) = shipper(&[
        "doctor",
        "--bucket",
        &format!("s3://{}/p", unique("missing")),
        "--json",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no such bucket"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["exit_code"], 2);
}

#[test]
fn usage_errors_are_exit_2() {
    let (code, _, err) = shipper(&["doctor"]);
    assert_eq!(code, 2);
    assert!(err.contains("no bucket"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[source]\nbucket = \"s4://x\"\n").expect("write");
    let (code, _, err) = shipper(&["doctor", "--expect", bad.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("field `source.bucket`"), "{err}");
    // --dry-run validates and says what would be checked, without a request.
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "cluster_ids = [\"c1\"]\n[source]\nbucket = \"s3://nowhere-bucket/kafka\"\n",
    )
    .expect("write");
    let (code, out, err) = shipper(&[
        "doctor",
        "--dry-run",
        "--expect",
        good.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("would check s3://nowhere-bucket/kafka"),
        "{out}"
    );
}

#[test]
fn a_file_bucket_gets_the_file_layout_and_cluster_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("bucket");
    let url = format!("file://{}", root.display());
    // No such directory: exit 2 naming both ways to set it up, nothing
    // created.
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no such directory"), "{err}");
    assert!(
        err.contains(&format!("shipper init --bucket {url} --cluster-id c1")),
        "{err}"
    );
    assert!(!root.exists(), "doctor created the bucket");
    // Set up for c1: every check passes or warns, exit 0.
    let (code, out, err) = shipper(&["init", "--bucket", &url, "--cluster-id", "c1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1"]);
    assert_eq!(code, 0, "{out}{err}");
    for id in [
        "file.writable*",
        "file.fsync*",
        "file.rename*",
        "file.same-filesystem*",
        "file.free-space*",
        "layout.clusters*",
        "layout.keys*",
    ] {
        assert!(
            out.lines().any(|l| l.split_whitespace().nth(1) == Some(id)),
            "{id} missing:\n{out}"
        );
    }
    let (_, out, _) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1", "--json"]);
    let c = checks(&out);
    assert_eq!(check(&c, "layout.clusters")["status"], "pass", "{out}");
    assert_eq!(check(&c, "layout.keys")["status"], "pass", "{out}");
    // A mistyped cluster id fails (exit 1), naming what is there.
    let (code, out, err) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "cl", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_mistyped_cluster(&out, "c1");
    // A foreign file in the layout fails layout.keys.
    std::fs::write(root.join("segmirror/v1/c1/notes.txt"), b"x").expect("write");
    let (code, out, _) = shipper(&["doctor", "--bucket", &url, "--cluster-id", "c1", "--json"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        check(&checks(&out), "layout.keys")["status"],
        "fail",
        "{out}"
    );
    std::fs::remove_file(root.join("segmirror/v1/c1/notes.txt")).expect("rm");
    // The probe left nothing behind: the marker is all there is.
    let left: Vec<_> = walk(&root);
    assert_eq!(
        left,
        vec!["segmirror/v1/c1/cluster.json".to_string()],
        "probe left behind"
    );
    // Not a directory: exit 2.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let (code, _, err) = shipper(&["doctor", "--bucket", &format!("file://{}", file.display())]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a directory"), "{err}");
}

/// Every file under `root`, relative, sorted.
fn walk(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(
                    p.strip_prefix(root)
                        .expect("under root")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    out.sort();
    out
}

#[test]
fn preflight_enforce_refuses_a_bare_bucket_before_shipping_and_warn_ships() {
    if !s3_available() {
        return;
    }
    let bucket = unique("preflight");
    block_on(async { Testbed::from_env().await.create_bucket(&bucket).await }).expect("bucket");
    let url = format!("s3://{bucket}/kafka");
    let logs = tempfile::tempdir().expect("tempdir");
    let log_dir = logs.path().to_str().expect("utf-8");
    let once = |mode: &str| {
        shipper(&[
            "once",
            "--log-dir",
            log_dir,
            "--bucket",
            &url,
            "--cluster-id",
            "c1",
            "--create-bucket",
            "--preflight",
            mode,
        ])
    };
    let (code, out, err) = once("enforce");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("preflight (--preflight enforce) refused"),
        "{err}"
    );
    assert!(err.contains("versioning failed"), "{err}");
    // Each failure logged once.
    assert_eq!(err.matches("check=versioning").count(), 1, "{err}");
    let (code, out, err) = once("warn");
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("preflight check failed"), "{err}");
    let (code, _, err) = once("off");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("doctor::preflight"), "{err}");
}

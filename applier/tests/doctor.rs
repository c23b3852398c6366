//! `applier doctor` driven as a binary against the S3 test server: a
//! source and a DR bucket configured as infra/'s modules configure them,
//! with the replication rule, pass; removing the rule fails on it; what
//! the server cannot answer (replication status) is a warn that says "not
//! supported by this endpoint"; a mistyped cluster id fails. Without the
//! S3 test server these fail, unless `SEGMIRROR_SKIP_S3=1` skips them.
//! And on a `file://` bucket: missing, 2; the source cluster's data
//! there, 0; a mistyped cluster id, 1.

use std::path::Path;
use std::process::Command;

use doctor::testbed::{
    Testbed, assert_mistyped_cluster, block_on, report_check as check, report_checks as checks,
    unique_bucket as unique,
};
use manifest::layout::ClusterLayout;

const KEY_A: &str = "arn:aws:kms:us-east-1:123456789012:key/aaaaaaaa-0000-0000-0000-000000000001";
const KEY_B: &str = "arn:aws:kms:us-east-1:123456789012:key/bbbbbbbb-0000-0000-0000-000000000002";

fn applier(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .env_remove("SEGMIRROR_BUCKET")
        .env_remove("SEGMIRROR_SOURCE_CLUSTER_ID")
        .output()
        .expect("run applier");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s3_available() -> bool {
    segmirror_testkit::needs::s3().is_some()
}

/// A source and a DR bucket with cluster c1's head in both (as replication
/// would leave it), replication of c1's prefix from source to DR, and, when
/// `module` is set, everything else modules/bucket sets (the TLS-only
/// policy last). Returns the expectations file.
fn two_buckets(dir: &Path, module: bool) -> (String, String, String) {
    let (src, dst) = (unique("src"), unique("dst"));
    let head = ClusterLayout::new("kafka", "c1")
        .expect("layout")
        .head_key(1);
    block_on(async {
        let t = Testbed::from_env().await;
        for b in [&src, &dst] {
            t.create_bucket(b).await?;
            t.put(b, &head, b"{}").await?;
            t.enable_versioning(b).await?;
        }
        if module {
            t.configure_as_module(&src, "kafka/segmirror/v1", KEY_A)
                .await?;
            t.configure_as_module(&dst, "kafka/segmirror/v1", KEY_B)
                .await?;
        }
        t.replicate(&src, "kafka/segmirror/v1/c1/", &dst, KEY_B)
            .await
    })
    .expect("set up buckets");
    let file = dir.join("doctor.toml");
    std::fs::write(
        &file,
        format!(
            "cluster_ids = [\"c1\"]\n\
             [source]\nbucket = \"s3://{src}/kafka\"\nregion = \"us-east-1\"\nkms_key_arn = \"{KEY_A}\"\n\
             [destination]\nbucket = \"s3://{dst}/kafka\"\nregion = \"us-east-1\"\nkms_key_arn = \"{KEY_B}\"\n\
             [replication]\nreplicate_delete_markers = true\n"
        ),
    )
    .expect("write expectations");
    (file.to_str().expect("utf-8").to_string(), src, dst)
}

#[test]
fn buckets_configured_as_the_modules_configure_them_pass_and_removing_the_rule_fails() {
    if !s3_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (expect, src, _dst) = two_buckets(dir.path(), true);
    let (code, out, err) = applier(&["doctor", "--expect", &expect, "--json"]);
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
        "replication.rule",
        "layout.keys",
        "layout.clusters",
    ] {
        assert_eq!(check(&c, id)["status"], "pass", "{id}: {}", check(&c, id));
    }
    assert!(
        check(&c, "encryption")["evidence"]
            .as_str()
            .unwrap_or("")
            .contains(KEY_B),
        "the DR bucket's key: {c:?}"
    );

    // Removing the replication rule: applier doctor fails on it.
    block_on(async { Testbed::from_env().await.delete_replication(&src).await })
        .expect("delete replication");
    let (code, out, err) = applier(&["doctor", "--expect", &expect, "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    let c = checks(&out);
    let rule = check(&c, "replication.rule");
    assert_eq!(rule["status"], "fail", "{rule}");
    assert!(
        rule["fix"]
            .as_str()
            .unwrap_or("")
            .contains("modules/replication"),
        "{rule}"
    );
    let failed: Vec<&str> = c
        .iter()
        .filter(|c| c["status"] == "fail")
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(failed, vec!["replication.rule"], "{out}");
    let (code, table, _) = applier(&["doctor", "--expect", &expect]);
    assert_eq!(code, 1);
    assert!(table.contains("fail    replication.rule*"), "{table}");
}

#[test]
fn a_mistyped_cluster_id_fails_on_s3() {
    if !s3_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, dst) = two_buckets(dir.path(), false);
    let url = format!("s3://{dst}/kafka");
    let (code, out, err) = applier(&["doctor", "--bucket", &url, "--cluster-id", "cl", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_mistyped_cluster(&out, "c1");
}

#[test]
fn a_file_bucket_is_missing_there_or_holds_another_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("dr");
    let url = format!("file://{}", root.display());
    let (code, out, err) = applier(&["doctor", "--bucket", &url, "--cluster-id", "c1"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no such directory"), "{err}");
    assert!(!root.exists(), "doctor created the bucket");
    // Nothing replicated yet: a warn, exit 0.
    std::fs::create_dir_all(&root).expect("mkdir");
    let (code, out, err) = applier(&["doctor", "--bucket", &url, "--cluster-id", "c1", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        check(&checks(&out), "layout.clusters")["status"],
        "warn",
        "{out}"
    );
    // c1's head arrived: pass; another id: fail.
    let head = root.join(ClusterLayout::new("", "c1").expect("layout").head_key(1));
    std::fs::create_dir_all(head.parent().expect("parent")).expect("mkdir");
    std::fs::write(&head, b"{}").expect("write");
    let (code, out, err) = applier(&["doctor", "--bucket", &url, "--cluster-id", "c1", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        check(&checks(&out), "layout.clusters")["status"],
        "pass",
        "{out}"
    );
    let (code, out, err) = applier(&["doctor", "--bucket", &url, "--cluster-id", "cl", "--json"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_mistyped_cluster(&out, "c1");
    let (code, table, _) = applier(&["doctor", "--bucket", &url, "--cluster-id", "cl"]);
    assert_eq!(code, 1);
    assert!(table.contains("fail    layout.clusters*"), "{table}");
}

#[test]
fn what_the_test_server_cannot_answer_is_not_supported_by_this_endpoint() {
    if !s3_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (expect, _, _) = two_buckets(dir.path(), false);
    let (_, out, err) = applier(&["doctor", "--expect", &expect, "--json"]);
    let c = checks(&out);
    // moto creates no replica and sends no x-amz-replication-status.
    let status = check(&c, "replication.status");
    assert_eq!(status["status"], "warn", "{status}{err}");
    assert!(
        status["evidence"]
            .as_str()
            .unwrap_or("")
            .starts_with("not supported by this endpoint"),
        "{status}"
    );
    // It also drops the rule's SourceSelectionCriteria and reports delete
    // markers Disabled whatever was put: warns, saying so.
    for id in ["replication.delete-markers", "replication.sse-kms"] {
        let w = check(&c, id);
        assert_eq!(w["status"], "warn", "{w}");
        assert!(
            w["evidence"]
                .as_str()
                .unwrap_or("")
                .contains("some endpoints"),
            "{w}"
        );
    }
}

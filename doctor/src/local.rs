//! The checks that apply to a `file://` bucket: the directory is writable,
//! a file can be staged, fsynced and renamed into place within it (what
//! object_store's local store and segmirror's atomic writes do), the
//! directory can be fsynced, the cluster directories are on the same file
//! system as the root, and there is free space.
//!
//! A bucket directory that does not exist, or is not a directory, is no
//! report but an error (`doctor` exits 2): the shipper never creates one
//! without `shipper init` or `--create-bucket`. [`list`] walks the format
//! root for the layout checks (`doctor`'s full scope, not the preflight).
//!
//! Invariants: the probe is one hidden temporary file in the bucket
//! directory, renamed once and removed before returning, whatever fails;
//! nothing else is created (not even the directory, when missing).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::report::{Check, Status};

/// Free space below this fails (the largest object the shipper writes by
/// default).
pub const MIN_FREE_BYTES: u64 = 64 * 1024 * 1024;
/// Free space below this warns.
pub const LOW_FREE_BYTES: u64 = 1024 * 1024 * 1024;

/// Free space verdict (pure).
pub fn free_space(root: &Path, available: u64) -> Check {
    let mib = available / (1024 * 1024);
    let status = if available < MIN_FREE_BYTES {
        Status::Fail
    } else if available < LOW_FREE_BYTES {
        Status::Warn
    } else {
        Status::Pass
    };
    Check::new(
        "file.free-space",
        true,
        status,
        format!(
            "{mib} MiB available on the file system of {}",
            root.display()
        ),
        "free space, or move the bucket directory to a larger file system (objects are up to max_object_size, 64MiB by default)",
    )
}

/// Runs the file checks on bucket directory `root`, with the cluster ids
/// whose directories should share its file system; `Err` (what was found
/// and the fix) when `root` is missing or not a directory.
pub fn checks(
    root: &Path,
    format_root: &str,
    cluster_ids: &[String],
) -> Result<Vec<Check>, String> {
    let mut out = Vec::new();
    let init = match cluster_ids.first() {
        Some(id) => format!(
            "shipper init --bucket file://{} --cluster-id {id}",
            root.display()
        ),
        None => format!(
            "shipper init --bucket file://{} --cluster-id <ID>",
            root.display()
        ),
    };
    let meta = match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => m,
        Ok(_) => {
            return Err(format!(
                "{} is not a directory; point --bucket at a directory (file:///abs/path)",
                root.display()
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "no such directory ({}): a mistyped path? A new bucket is set up with `{init}` (or shipper once|run --create-bucket)",
                root.display()
            ));
        }
        Err(e) => {
            return Err(format!("{}: {e}", root.display()));
        }
    };
    out.extend(probe(root));
    let mut other_fs = Vec::new();
    for id in cluster_ids {
        let dir = root.join(format_root).join(id);
        if let Ok(m) = std::fs::metadata(&dir)
            && m.dev() != meta.dev()
        {
            other_fs.push(dir.display().to_string());
        }
    }
    out.push(if other_fs.is_empty() {
        Check::pass(
            "file.same-filesystem",
            true,
            format!(
                "temporary files are staged beside their target, and no cluster directory under {} is another mount",
                root.display()
            ),
        )
    } else {
        Check::new(
            "file.same-filesystem",
            true,
            Status::Fail,
            format!("on another file system than {}: {}", root.display(), other_fs.join(", ")),
            "keep the whole bucket directory on one file system (renames across mounts are not atomic)",
        )
    });
    match rustix::fs::statvfs(root) {
        Ok(s) => out.push(free_space(root, s.f_bavail.saturating_mul(s.f_frsize))),
        Err(e) => out.push(Check::new(
            "file.free-space",
            true,
            Status::Warn,
            format!("statvfs {}: {e}", root.display()),
            "",
        )),
    }
    Ok(out)
}

/// The keys under `<root>/<format_root>/` (paths relative to `root`, with
/// `/`), at most `limit` (the second value says whether it stopped
/// there), without object_store's staging files; nothing when the format
/// root does not exist. `Err` when a
/// directory cannot be read.
pub fn list(root: &Path, format_root: &str, limit: usize) -> Result<(Vec<String>, bool), String> {
    let mut keys = Vec::new();
    let mut dirs = vec![root.join(format_root)];
    if !dirs[0].is_dir() {
        return Ok((keys, false));
    }
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("listing {}: {e}", path.display()))?;
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            // object_store's staging files (`<name>#<n>`, a write in
            // progress) are no keys, as its own listing says.
            if entry.file_name().to_string_lossy().contains('#') {
                continue;
            }
            if keys.len() == limit {
                return Ok((keys, true));
            }
            let relative = path.strip_prefix(root).unwrap_or(&path);
            keys.push(
                relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
    }
    keys.sort();
    Ok((keys, false))
}

/// Write, fsync, rename, fsync the directory, remove.
fn probe(root: &Path) -> Vec<Check> {
    let fail = |id: &str, what: String, fix: &str| Check::new(id, true, Status::Fail, what, fix);
    let mut tmp = match tempfile::Builder::new()
        .prefix(".segmirror-doctor-")
        .suffix(".tmp")
        .tempfile_in(root)
    {
        Ok(t) => t,
        Err(e) => {
            return vec![fail(
                "file.writable",
                format!("creating a file in {}: {e}", root.display()),
                "give the service's user write access to the directory",
            )];
        }
    };
    let mut out = Vec::new();
    if let Err(e) = tmp.write_all(b"segmirror doctor probe\n") {
        out.push(fail(
            "file.writable",
            format!("writing {}: {e}", tmp.path().display()),
            "free space, or check the file system",
        ));
        return out;
    }
    out.push(Check::pass(
        "file.writable",
        true,
        format!("created and wrote a file in {}", root.display()),
    ));
    let fsync = tmp.as_file().sync_all();
    let final_path = tmp.path().with_extension("probe");
    let renamed = tmp.persist(&final_path);
    let dir_sync = std::fs::File::open(root).and_then(|d| d.sync_all());
    let removed = std::fs::remove_file(&final_path);
    match (&fsync, &dir_sync) {
        (Ok(()), Ok(())) => out.push(Check::pass(
            "file.fsync",
            true,
            "fsync of a file and of the directory succeeded",
        )),
        _ => out.push(fail(
            "file.fsync",
            format!(
                "fsync: file {}, directory {}",
                fsync
                    .as_ref()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "ok".into()),
                dir_sync
                    .as_ref()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "ok".into())
            ),
            "use a file system that supports fsync (not a FUSE mount that ignores it)",
        )),
    }
    match renamed {
        Ok(_) => out.push(Check::pass(
            "file.rename",
            true,
            "a staged file was renamed into place",
        )),
        Err(e) => out.push(fail(
            "file.rename",
            format!("rename within {}: {}", root.display(), e.error),
            "use a local POSIX file system for the bucket directory",
        )),
    }
    if let Err(e) = removed
        && e.kind() != std::io::ErrorKind::NotFound
    {
        out.push(Check::new(
            "file.cleanup",
            false,
            Status::Warn,
            format!("removing {}: {e}", final_path.display()),
            "remove the file by hand",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writable_directory_passes_and_is_left_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = checks(dir.path(), "segmirror/v1", &["c1".to_string()]).expect("checks");
        for c in &c {
            assert_ne!(c.status, Status::Fail, "{c:?}");
        }
        let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
        for want in [
            "file.writable",
            "file.fsync",
            "file.rename",
            "file.same-filesystem",
            "file.free-space",
        ] {
            assert!(ids.contains(&want), "{ids:?}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
        assert!(left.is_empty(), "probe left behind: {left:?}");
    }

    #[test]
    fn free_space_thresholds() {
        let p = Path::new("/x");
        assert_eq!(free_space(p, 10 * 1024 * 1024).status, Status::Fail);
        assert_eq!(free_space(p, 100 * 1024 * 1024).status, Status::Warn);
        assert_eq!(free_space(p, 10 * 1024 * 1024 * 1024).status, Status::Pass);
    }

    #[test]
    fn a_missing_directory_is_an_error_and_is_not_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        let e = checks(&missing, "segmirror/v1", &["c1".to_string()]).expect_err("missing");
        assert!(e.contains("no such directory"), "{e}");
        assert!(e.contains("shipper init --bucket file://"), "{e}");
        assert!(!missing.exists());
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        let e = checks(&file, "segmirror/v1", &[]).expect_err("a file");
        assert!(e.contains("not a directory"), "{e}");
    }

    #[test]
    fn the_listing_gives_keys_relative_to_the_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(list(dir.path(), "segmirror/v1", 10), Ok((vec![], false)));
        let head = dir.path().join("segmirror/v1/c1/head");
        std::fs::create_dir_all(&head).expect("mkdir");
        std::fs::write(head.join("a.json"), b"x").expect("write");
        std::fs::write(dir.path().join("segmirror/v1/c1/cluster.json"), b"x").expect("write");
        let (keys, truncated) = list(dir.path(), "segmirror/v1", 10).expect("list");
        assert_eq!(
            keys,
            vec![
                "segmirror/v1/c1/cluster.json",
                "segmirror/v1/c1/head/a.json"
            ]
        );
        assert!(!truncated);
        assert!(list(dir.path(), "segmirror/v1", 1).expect("list").1);
    }
}

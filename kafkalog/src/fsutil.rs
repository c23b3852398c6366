//! Atomic, durable replacement of small files.
//!
//! Format: none of its own; this module moves bytes. The protocol of
//! [`write_atomic`] is Kafka's (`CheckpointFile.write` followed by
//! `Utils.atomicMoveWithFallback`):
//!
//! 1. write the whole content to the sibling `<name>.tmp` (created or
//!    truncated),
//! 2. fsync it (when `sync`),
//! 3. rename it over `<name>`,
//! 4. fsync the parent directory (when `sync`), so that the rename itself
//!    survives a crash.
//!
//! Invariant: a reader of `<name>` sees either the complete old content or
//! the complete new content, never a mix, whatever the moment of a crash. A
//! crash may leave a stale `<name>.tmp` behind; the next write truncates it,
//! and readers never look at it. Every IO error is returned as
//! [`Error::Io`] naming the operation and the path; nothing here panics.
//!
//! # Group commit: [`DeferredSync`]
//!
//! Every fsync of this crate goes through this module ([`sync_file`],
//! [`fsync_dir`], [`write_atomic`]). Inside a [`DeferredSync`] scope they
//! are skipped on the thread that opened it, and [`DeferredSync::barrier`]
//! makes everything written so far durable at once, with one `syncfs(2)` of
//! the filesystem (a journal commit for all of it). A caller whose protocol
//! needs "A durable before B" (the applier's record before the log changes)
//! puts a barrier between the two phases: applied to 1,000 partitions, a
//! few barriers replace thousands of fsyncs, and each partition still sees
//! its writes made durable in the same order. Rules:
//! - nothing is reported done (a command answered, a record acknowledged)
//!   before the barrier that covers it returned;
//! - the scope is not `Send` and lives on one thread: it must not be held
//!   across an `.await`;
//! - dropping the scope without [`DeferredSync::finish`] (an error path)
//!   still runs a barrier, best effort.

use std::cell::Cell;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Suffix of the temporary sibling written before the rename (as Kafka's).
pub const TMP_SUFFIX: &str = ".tmp";

/// The temporary sibling `<name>.tmp` of `path`.
///
/// Fails with [`Error::InvalidArgument`] when `path` has no file name (it is
/// empty, `/`, or ends in `..`).
pub fn tmp_path(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "cannot write {}: the path has no file name",
            path.display()
        ))
    })?;
    let mut tmp_name = OsString::from(name);
    tmp_name.push(TMP_SUFFIX);
    Ok(path.with_file_name(tmp_name))
}

/// Replaces the content of `path` with `contents`, atomically.
///
/// Writes `<name>.tmp` next to `path`, fsyncs it when `sync`, renames it over
/// `path`, then fsyncs the parent directory when `sync`. On failure before
/// the rename the temporary file is removed (best effort) and `path` is left
/// untouched.
pub fn write_atomic(path: &Path, contents: &[u8], sync: bool) -> Result<()> {
    replace(path, contents, sync)?;
    if sync {
        fsync_dir(parent_dir(path))?;
    }
    Ok(())
}

/// [`write_atomic`] with the file fsynced but not its directory: the new
/// content is durable, its name only once the caller fsyncs the parent
/// directory (one [`fsync_dir`] for several files written together). Until
/// then a crash leaves either the old file or the new one, whole.
pub fn write_atomic_dir_unsynced(path: &Path, contents: &[u8]) -> Result<()> {
    replace(path, contents, true)
}

fn replace(path: &Path, contents: &[u8], sync: bool) -> Result<()> {
    let tmp = tmp_path(path)?;
    if let Err(e) = write_file(&tmp, contents, sync) {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(source) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::Io {
            op: "rename",
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}

/// Fsyncs a directory, making renames and creations inside it durable
/// (deferred to the barrier inside a [`DeferredSync`] scope).
pub fn fsync_dir(dir: &Path) -> Result<()> {
    if deferred() {
        return Ok(());
    }
    let handle = File::open(dir).map_err(Error::io("open dir", dir))?;
    handle.sync_all().map_err(Error::io("fsync dir", dir))
}

/// Fsyncs `file` (at `path`, for errors): its data only when `data_only`
/// (`fdatasync`), else data and metadata. Deferred to the barrier inside a
/// [`DeferredSync`] scope.
pub fn sync_file(file: &File, path: &Path, data_only: bool) -> Result<()> {
    if deferred() {
        return Ok(());
    }
    let r = if data_only {
        file.sync_data()
    } else {
        file.sync_all()
    };
    r.map_err(Error::io("fsync", path))
}

thread_local! {
    /// How many [`DeferredSync`] scopes are open on this thread.
    static DEFERRED: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread's fsyncs are deferred to a barrier.
pub fn deferred() -> bool {
    DEFERRED.with(|d| d.get() > 0)
}

/// A scope in which this thread's fsyncs wait for one barrier (see the
/// module docs).
#[derive(Debug)]
pub struct DeferredSync {
    root: PathBuf,
    finished: bool,
    /// Not `Send`: the scope is this thread's.
    _thread: PhantomData<*const ()>,
}

impl DeferredSync {
    /// Opens a scope; `root` names the filesystem its barriers sync (every
    /// file written inside must be on it: a log dir and its partitions).
    pub fn begin(root: &Path) -> DeferredSync {
        DEFERRED.with(|d| d.set(d.get().saturating_add(1)));
        DeferredSync {
            root: root.to_path_buf(),
            finished: false,
            _thread: PhantomData,
        }
    }

    /// Makes every write on the filesystem of `root` durable: one
    /// `syncfs(2)`, which also reports a failed writeback since the last
    /// one.
    pub fn barrier(&self) -> Result<()> {
        let handle = File::open(&self.root).map_err(Error::io("open dir", &self.root))?;
        rustix::fs::syncfs(&handle).map_err(|e| Error::Io {
            op: "syncfs",
            path: self.root.clone(),
            source: e.into(),
        })
    }

    /// A last barrier, then the scope closes.
    pub fn finish(mut self) -> Result<()> {
        self.finished = true;
        self.barrier()
    }
}

impl Drop for DeferredSync {
    fn drop(&mut self) {
        DEFERRED.with(|d| d.set(d.get().saturating_sub(1)));
        if !self.finished {
            // Best effort: the scope ends early only on an error path,
            // whose caller reports that error and nothing as done.
            let _ = self.barrier();
        }
    }
}

/// Reads a whole file, or returns `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_file(tmp: &Path, contents: &[u8], sync: bool) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(Error::io("create", tmp))?;
    file.write_all(contents).map_err(Error::io("write", tmp))?;
    if sync {
        sync_file(&file, tmp, false)?;
    }
    Ok(())
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_scope_skips_fsyncs_until_its_barrier() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!deferred());
        {
            let scope = DeferredSync::begin(dir.path());
            assert!(deferred());
            {
                let _nested = DeferredSync::begin(dir.path());
                assert!(deferred());
            }
            assert!(deferred(), "the outer scope is still open");
            write_atomic(&dir.path().join("a"), b"x", true).expect("write");
            scope.barrier().expect("syncfs");
            scope.finish().expect("finish");
        }
        assert!(!deferred());
        assert_eq!(fs::read(dir.path().join("a")).expect("read"), b"x");
        // Another thread is not deferred.
        let _scope = DeferredSync::begin(dir.path());
        assert!(!std::thread::spawn(deferred).join().expect("thread"));
    }

    #[test]
    fn writes_replaces_and_leaves_no_tmp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leader-epoch-checkpoint");
        write_atomic(&path, b"first", true).expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        write_atomic(&path, b"2nd", false).expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"2nd");
        assert!(!dir.path().join("leader-epoch-checkpoint.tmp").exists());
    }

    #[test]
    fn stale_tmp_is_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(dir.path().join("f.tmp"), b"garbage from a crash, longer").expect("seed");
        write_atomic(&path, b"ok", true).expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"ok");
        assert!(!dir.path().join("f.tmp").exists());
    }

    #[test]
    fn tmp_path_is_a_sibling() {
        assert_eq!(
            tmp_path(Path::new("/a/b/c.x")).expect("tmp"),
            PathBuf::from("/a/b/c.x.tmp")
        );
        assert_eq!(
            tmp_path(Path::new("c")).expect("tmp"),
            PathBuf::from("c.tmp")
        );
        assert!(matches!(
            tmp_path(Path::new("/")),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            tmp_path(Path::new("a/..")),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(parent_dir(Path::new("c")), Path::new("."));
        assert_eq!(parent_dir(Path::new("/a/c")), Path::new("/a"));
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_tmp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("no-such-dir").join("f");
        match write_atomic(&path, b"x", true) {
            Err(Error::Io {
                op: "create",
                path: p,
                ..
            }) => assert!(p.ends_with("no-such-dir/f.tmp")),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn read_optional_distinguishes_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            read_optional(&dir.path().join("absent")).expect("read"),
            None
        );
        fs::write(dir.path().join("present"), b"abc").expect("seed");
        assert_eq!(
            read_optional(&dir.path().join("present")).expect("read"),
            Some(b"abc".to_vec())
        );
        // A directory is not "missing": it is an error.
        assert!(matches!(
            read_optional(dir.path()),
            Err(Error::Io { op: "read", .. })
        ));
    }

    #[test]
    fn fsync_dir_works_and_reports_missing_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        fsync_dir(dir.path()).expect("fsync");
        assert!(matches!(
            fsync_dir(&dir.path().join("nope")),
            Err(Error::Io { op: "open dir", .. })
        ));
    }
}

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
//! [`fsync_dir`], [`write_atomic`]). Inside a [`DeferredSync`] scope, on the
//! thread that opened it, file and directory fsyncs are recorded instead of
//! done, and [`DeferredSync::barrier`] does them all at once, from several
//! threads (ext4 and XFS then share journal commits between them). Only
//! the files and directories written are synced, never the whole
//! filesystem. A [`write_atomic`] inside a scope writes its temporary file
//! and leaves the rest to the barrier, which fsyncs every temporary file,
//! then renames each over its target, then fsyncs the directories: a
//! replaced file is still whole, old or new, after a power loss on any
//! filesystem (its temporary copy is durable before the rename), and the
//! serial fsync-then-rename of each file becomes one parallel pass. Until
//! the barrier the target keeps its old content on disk; this thread's
//! [`read_optional`] and [`remove_file`] see the pending content,
//! [`remove_at_barrier`] removes a file after the renames
//! ([`move_at_barrier`] renames it aside instead, [`rename_at_barrier`]
//! puts a durable file in place, neither adding a directory fsync), and
//! [`write_atomic_visible`] is for a file its writer reads back at once. A
//! caller whose protocol needs "A durable before B" (the
//! applier's record before the log changes) puts a barrier between the two
//! phases: applied to 1,000 partitions, a few barriers replace thousands of
//! serial fsyncs, and each partition still sees its writes made durable in
//! the same order. Rules:
//! - nothing is reported done (a command answered, a record acknowledged)
//!   before the barrier that covers it returned;
//! - the scope is not `Send` and lives on one thread: it must not be held
//!   across an `.await`;
//! - dropping the scope without [`DeferredSync::finish`] (an error path)
//!   still runs a barrier, best effort.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
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

/// Writes `contents` into `path` in place (no temporary file, no rename),
/// for files the log's own recovery checks and rebuilds (segment indexes):
/// the bytes from `unchanged` on are written (the caller knows the file
/// already holds `contents[..unchanged]`), the file is cut to
/// `contents.len()`, and fsynced when `sync` (deferred inside a
/// [`DeferredSync`] scope). Returns true when the file was created: its
/// directory then needs an fsync for the name to be durable.
pub fn write_in_place(path: &Path, contents: &[u8], unchanged: usize, sync: bool) -> Result<bool> {
    use std::os::unix::fs::FileExt;
    let (file, created) = match OpenOptions::new().write(true).open(path) {
        Ok(f) => (f, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(Error::io("create", path))?,
            true,
        ),
        Err(e) => return Err(Error::io("open", path)(e)),
    };
    let from = if created {
        0
    } else {
        unchanged.min(contents.len())
    };
    file.write_all_at(&contents[from..], from as u64)
        .map_err(Error::io("write", path))?;
    let len = file.metadata().map_err(Error::io("stat", path))?.len();
    if len != contents.len() as u64 {
        file.set_len(contents.len() as u64)
            .map_err(Error::io("truncate", path))?;
    }
    if sync {
        sync_file(&file, path, true)?;
    }
    Ok(created)
}

/// [`write_atomic`] with the file fsynced but not its directory: the new
/// content is durable, its name only once the caller fsyncs the parent
/// directory (one [`fsync_dir`] for several files written together). Until
/// then a crash leaves either the old file or the new one, whole.
pub fn write_atomic_dir_unsynced(path: &Path, contents: &[u8]) -> Result<()> {
    replace(path, contents, true)
}

/// [`write_atomic`] that replaces `path` before it returns, also inside a
/// [`DeferredSync`] scope (only the directory fsync waits for the
/// barrier): for a file its writer reads back by path at once (a replaced
/// segment whose indexes are built from it).
pub fn write_atomic_visible(path: &Path, contents: &[u8]) -> Result<()> {
    replace_now(path, contents, true)?;
    fsync_dir(parent_dir(path))
}

fn replace(path: &Path, contents: &[u8], sync: bool) -> Result<()> {
    if sync && defer_replace(path, contents)? {
        return Ok(());
    }
    replace_now(path, contents, sync)
}

/// Inside a [`DeferredSync`] scope: writes `path`'s temporary file and
/// records its fsync and rename for the barrier. False when no scope is
/// open (the caller replaces now).
fn defer_replace(path: &Path, contents: &[u8]) -> Result<bool> {
    if !DEFERRED.with(|d| {
        let d = d.borrow();
        d.depth > 0 && d.keeping == 0
    }) {
        return Ok(false);
    }
    let tmp = tmp_path(path)?;
    if let Err(e) = write_file(&tmp, contents, false) {
        let _ = fs::remove_file(&tmp);
        DEFERRED.with(|d| d.borrow_mut().renames.remove(path));
        return Err(e);
    }
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        d.files.insert(tmp.clone());
        d.removals.remove(path);
        d.unsynced.remove(path);
        d.renames.insert(path.to_path_buf(), tmp);
    });
    Ok(true)
}

/// Removes `path` (a missing file is not an error), at this thread's
/// barrier when a [`DeferredSync`] scope is open: after the scope's renames,
/// so that a file whose presence allows something (the write guard's
/// absence allows writes) goes only once the records written before it in
/// the scope are in place, also after a kill -9. A later [`write_atomic`]
/// of `path` in the scope cancels the removal. The directory's fsync is the
/// caller's.
pub fn remove_at_barrier(path: &Path) -> Result<()> {
    if going_at_barrier(path, None) {
        return Ok(());
    }
    remove_file(path)
}

/// Records that `path` goes at this thread's barrier (deleted, or moved to
/// `to`), cancelling a replacement of it pending there; false when no
/// scope is open (the caller acts now).
fn going_at_barrier(path: &Path, to: Option<&Path>) -> bool {
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.depth == 0 || d.keeping > 0 {
            return false;
        }
        if let Some(tmp) = d.renames.remove(path) {
            d.files.remove(&tmp);
            let _ = fs::remove_file(&tmp);
        }
        d.removals
            .insert(path.to_path_buf(), to.map(Path::to_path_buf));
        true
    })
}

/// [`remove_at_barrier`], except that `path` is renamed to `to` rather
/// than deleted (at once when no scope is open): a file whose absence
/// allows something goes as a removal would, and no inode is freed (ext4
/// scans past every inode freed in the last half minute at each file
/// creation, so deleting and creating a file per partition for 10,000
/// partitions costs seconds). The directory's fsync is the caller's.
pub fn move_at_barrier(path: &Path, to: &Path) -> Result<()> {
    if going_at_barrier(path, Some(to)) {
        return Ok(());
    }
    rename_existing(path, to)
}

/// Renames `from` over `to` at this thread's barrier (at once when no
/// scope is open), with the barrier's other renames: `from` is a file
/// already durable (no fsync of it is added). The directory's fsync is the
/// caller's, as for [`remove_at_barrier`]. Until then this thread's
/// [`read_optional`] of `to` reads `from`.
pub fn rename_at_barrier(from: &Path, to: &Path) -> Result<()> {
    let deferred = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.depth == 0 || d.keeping > 0 {
            return false;
        }
        d.removals.remove(to);
        d.unsynced.insert(to.to_path_buf());
        d.renames.insert(to.to_path_buf(), from.to_path_buf());
        true
    });
    if deferred {
        return Ok(());
    }
    fs::rename(from, to).map_err(Error::io("rename", to))
}

/// Renames `path` to `to`; a missing `path` is not an error.
fn rename_existing(path: &Path, to: &Path) -> Result<()> {
    match fs::rename(path, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("rename", path)(e)),
    }
}

/// Whether `path` is to be removed at this thread's barrier.
fn removal_pending(path: &Path) -> bool {
    DEFERRED.with(|d| d.borrow().removals.contains_key(path))
}

/// The temporary file a barrier of this thread will rename over `path`.
fn pending_tmp(path: &Path) -> Option<PathBuf> {
    DEFERRED.with(|d| d.borrow().renames.get(path).cloned())
}

/// Whether a [`write_atomic`] of `path` on this thread waits for its
/// barrier (the barrier then fsyncs it: a caller that only wants `path`
/// durable has nothing to do).
pub fn replace_pending(path: &Path) -> bool {
    pending_tmp(path).is_some()
}

/// Removes `path`, and a replacement of it still waiting for this thread's
/// barrier (which would otherwise bring it back). A missing file is not an
/// error; the directory's fsync is the caller's.
pub fn remove_file(path: &Path) -> Result<()> {
    if let Some(tmp) = DEFERRED.with(|d| d.borrow_mut().renames.remove(path)) {
        DEFERRED.with(|d| d.borrow_mut().files.remove(&tmp));
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &tmp)(e)),
        }
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path)(e)),
    }
}

fn replace_now(path: &Path, contents: &[u8], sync: bool) -> Result<()> {
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
/// (recorded for the barrier inside a [`DeferredSync`] scope).
pub fn fsync_dir(dir: &Path) -> Result<()> {
    if defer(dir, true) {
        return Ok(());
    }
    let handle = File::open(dir).map_err(Error::io("open dir", dir))?;
    handle.sync_all().map_err(Error::io("fsync dir", dir))
}

/// Fsyncs `file` (at `path`): its data only when `data_only`
/// (`fdatasync`), else data and metadata. Recorded for the barrier inside a
/// [`DeferredSync`] scope (the barrier opens `path` again).
pub fn sync_file(file: &File, path: &Path, data_only: bool) -> Result<()> {
    if defer(path, false) {
        return Ok(());
    }
    let r = if data_only {
        file.sync_data()
    } else {
        file.sync_all()
    };
    r.map_err(Error::io("fsync", path))
}

/// The fsyncs this thread's open [`DeferredSync`] scopes wait for.
#[derive(Default)]
struct Pending {
    depth: u32,
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
    /// Target → its temporary file, renamed at the barrier.
    renames: BTreeMap<PathBuf, PathBuf>,
    /// Files that go at the barrier, after the renames: deleted (`None`,
    /// [`remove_at_barrier`]) or moved to the path given
    /// ([`move_at_barrier`]).
    removals: BTreeMap<PathBuf, Option<PathBuf>>,
    /// Open [`SyncLater::keep`] calls: their fsyncs are kept, but their
    /// renames are done at once (nothing would rename them later).
    keeping: u32,
    /// Bytes appended to a file at the barrier, before the fsyncs
    /// ([`append_durably`]).
    appends: BTreeMap<PathBuf, Vec<u8>>,
    /// Targets of `renames` whose directory the barrier does not fsync
    /// ([`rename_at_barrier`]: the caller's).
    unsynced: BTreeSet<PathBuf>,
}

thread_local! {
    static DEFERRED: RefCell<Pending> = RefCell::new(Pending::default());
}

/// Records an fsync of `path` for the barrier when a scope is open; false
/// when none is (the caller syncs now).
fn defer(path: &Path, dir: bool) -> bool {
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.depth == 0 {
            return false;
        }
        if dir {
            d.dirs.insert(path.to_path_buf());
        } else {
            d.files.insert(path.to_path_buf());
        }
        true
    })
}

/// Whether this thread's fsyncs are deferred to a barrier.
pub fn deferred() -> bool {
    DEFERRED.with(|d| d.borrow().depth > 0)
}

/// The files (not directories) whose fsyncs this thread's open scope
/// waits for, for tests of what a step makes durable.
#[cfg(test)]
pub(crate) fn pending_file_fsyncs() -> Vec<PathBuf> {
    DEFERRED.with(|d| d.borrow().files.iter().cloned().collect())
}

/// Threads a barrier fsyncs from.
const BARRIER_THREADS: usize = 16;

/// Items [`in_parallel`] does on the calling thread rather than spawn for.
const INLINE_AT_MOST: usize = 2;

/// Fsyncs `paths` from up to [`BARRIER_THREADS`] threads; a path gone since
/// it was written (renamed or deleted later in the scope) needs none. The
/// first error, naming its path.
fn sync_all_paths(paths: &[(PathBuf, bool)]) -> Result<()> {
    in_parallel(paths, "fsync", |(path, dir)| {
        let (open_op, sync_op) = if *dir {
            ("open dir", "fsync dir")
        } else {
            ("open", "fsync")
        };
        match File::open(path) {
            Ok(f) => f.sync_all().map_err(Error::io(sync_op, path)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(open_op, path)(e)),
        }
    })
}

/// Renames each `(target, tmp)` from up to [`BARRIER_THREADS`] threads; a
/// temporary file gone since it was written (its directory removed or
/// renamed later in the scope) is skipped. The first error, naming its
/// target.
fn rename_all(renames: &[(PathBuf, PathBuf)]) -> Result<()> {
    in_parallel(renames, "rename", |(path, tmp)| {
        match fs::rename(tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("rename", path)(e)),
        }
    })
}

/// Runs `op` on every item, the items split among up to
/// [`BARRIER_THREADS`] threads, each stopping at its first error; the
/// first error of all. `what` names the threads' work should one panic.
fn in_parallel<T: Sync>(
    items: &[T],
    what: &str,
    op: impl Fn(&T) -> Result<()> + Sync,
) -> Result<()> {
    // A thread costs about as much as the fsync of a small file: a
    // segment's own few files are synced here.
    if items.len() <= INLINE_AT_MOST {
        return items.iter().try_for_each(op);
    }
    let per_thread = items.len().div_ceil(BARRIER_THREADS);
    let op = &op;
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .map(|chunk| scope.spawn(move || chunk.iter().try_for_each(op)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(format!("a {what} thread panicked")))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// A scope in which this thread's fsyncs wait for a barrier (see the
/// module docs).
#[derive(Debug)]
pub struct DeferredSync {
    finished: bool,
    /// Not `Send`: the scope is this thread's.
    _thread: PhantomData<*const ()>,
}

impl DeferredSync {
    /// Opens a scope on this thread.
    #[allow(clippy::new_without_default)]
    pub fn begin() -> DeferredSync {
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            d.depth = d.depth.saturating_add(1);
        });
        DeferredSync {
            finished: false,
            _thread: PhantomData,
        }
    }

    /// Does every fsync recorded on this thread so far (files, then
    /// directories, each group from several threads). On an error the
    /// fsyncs not done are forgotten: the caller must not report the writes
    /// as durable.
    pub fn barrier(&self) -> Result<()> {
        let (mut files, mut dirs, renames, removals, appends, unsynced) = DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            (
                std::mem::take(&mut d.files),
                std::mem::take(&mut d.dirs),
                std::mem::take(&mut d.renames),
                std::mem::take(&mut d.removals),
                std::mem::take(&mut d.appends),
                std::mem::take(&mut d.unsynced),
            )
        });
        // Appends first: their fsyncs are the files' below.
        for (path, bytes) in &appends {
            append_now(path, bytes)?;
            files.insert(path.clone());
        }
        let files: Vec<(PathBuf, bool)> = files.into_iter().map(|p| (p, false)).collect();
        sync_all_paths(&files)?;
        let renames: Vec<(PathBuf, PathBuf)> = renames.into_iter().collect();
        rename_all(&renames)?;
        let removals: Vec<(PathBuf, Option<PathBuf>)> = removals.into_iter().collect();
        in_parallel(&removals, "remove", |(path, to)| match to {
            None => remove_file(path),
            Some(to) => rename_existing(path, to),
        })?;
        dirs.extend(
            renames
                .iter()
                .filter(|(path, _)| !unsynced.contains(path))
                .map(|(path, _)| parent_dir(path).to_path_buf()),
        );
        let dirs: Vec<(PathBuf, bool)> = dirs.into_iter().map(|p| (p, true)).collect();
        sync_all_paths(&dirs)
    }

    /// A last barrier, then the scope closes.
    pub fn finish(mut self) -> Result<()> {
        self.finished = true;
        self.barrier()
    }
}

impl Drop for DeferredSync {
    fn drop(&mut self) {
        if !self.finished {
            // Best effort: the scope ends early only on an error path,
            // whose caller reports that error and nothing as done.
            let _ = self.barrier();
        }
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            d.depth = d.depth.saturating_sub(1);
        });
    }
}

/// Fsyncs kept for later: what a segment roll leaves for the log's next
/// flush under [`crate::FlushPolicy::OnFlush`] (the applier's group
/// commit). Done files first, then directories, from several threads.
/// [`SyncLater::start`] begins them on a thread of their own at once, as
/// Kafka schedules a rolled segment's flush in the background: the disk
/// writes the closed segment back while the next one is appended, and the
/// flush only waits for what is left. [`SyncLater::start_after`] does so
/// once [`START_BATCH_BYTES`] of closed segments wait, so small segments
/// share a pass.
#[derive(Debug, Default)]
pub struct SyncLater {
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
    /// Background fsyncs begun by [`SyncLater::start`], oldest first; each
    /// gives back its paths when it failed.
    started: std::collections::VecDeque<std::thread::JoinHandle<Started>>,
    /// Bytes of closed segments whose fsyncs are kept and not begun
    /// ([`SyncLater::start_after`]).
    unstarted_bytes: u64,
}

/// Bytes of closed segments [`SyncLater::start_after`] lets wait before it
/// begins their fsyncs: a segment this large begins at once, smaller ones
/// together once this many bytes of them are closed (or at the flush). A
/// log of 200 KiB segments (compacted and quiet topics) then starts one
/// background pass per 80 segments, not a thread per segment (issue 31).
pub const START_BATCH_BYTES: u64 = 16 << 20;

/// What a background fsync of [`SyncLater::start`] reports: its paths back
/// with the error when it failed.
type Started = std::result::Result<(), (Error, BTreeSet<PathBuf>, BTreeSet<PathBuf>)>;

/// Background fsyncs of [`SyncLater::start`] running at once per log, at
/// most; the oldest is waited for before another begins.
const STARTED_AT_MOST: usize = 4;

impl SyncLater {
    /// Nothing kept or running.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dirs.is_empty() && self.started.is_empty()
    }

    /// Begins the kept fsyncs now on a thread of their own (files, then
    /// directories); [`SyncLater::sync`] waits for them. Nothing is
    /// reported durable before that wait returned.
    pub fn start(&mut self) {
        self.unstarted_bytes = 0;
        if self.files.is_empty() && self.dirs.is_empty() {
            return;
        }
        while self.started.len() >= STARTED_AT_MOST {
            self.join_oldest();
        }
        let files = std::mem::take(&mut self.files);
        let dirs = std::mem::take(&mut self.dirs);
        let spawned = std::thread::Builder::new()
            .name("segment-fsync".into())
            .spawn({
                let (files, dirs) = (files.clone(), dirs.clone());
                move || -> Started {
                    let f: Vec<(PathBuf, bool)> =
                        files.iter().map(|p| (p.clone(), false)).collect();
                    let d: Vec<(PathBuf, bool)> = dirs.iter().map(|p| (p.clone(), true)).collect();
                    sync_all_paths(&f)
                        .and_then(|()| sync_all_paths(&d))
                        .map_err(|e| (e, files, dirs))
                }
            });
        match spawned {
            Ok(handle) => self.started.push_back(handle),
            // No thread: they stay kept for the flush.
            Err(_) => {
                self.files.extend(files);
                self.dirs.extend(dirs);
            }
        }
    }

    /// [`SyncLater::start`] once the closed segments kept since the last
    /// start, `closed_bytes` more with this one, reach
    /// [`START_BATCH_BYTES`]; until then the fsyncs stay kept (a flush
    /// does them).
    pub fn start_after(&mut self, closed_bytes: u64) {
        self.unstarted_bytes = self.unstarted_bytes.saturating_add(closed_bytes);
        if self.unstarted_bytes >= START_BATCH_BYTES {
            self.start();
        }
    }

    /// Waits for the oldest background fsync; a failed one's paths are
    /// kept again (the flush tries them once more).
    fn join_oldest(&mut self) -> Option<Error> {
        let handle = self.started.pop_front()?;
        match handle.join() {
            Ok(Ok(())) => None,
            Ok(Err((e, files, dirs))) => {
                self.files.extend(files);
                self.dirs.extend(dirs);
                Some(e)
            }
            Err(_) => Some(Error::InvalidArgument(
                "a background fsync thread panicked".into(),
            )),
        }
    }

    /// Runs `f` with this thread's fsyncs kept here instead of done, unless
    /// a [`DeferredSync`] scope is open (its barrier does them, as for any
    /// other write in the scope).
    pub fn keep<T>(&mut self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if deferred() {
            return f();
        }
        struct Depth;
        impl Drop for Depth {
            fn drop(&mut self) {
                DEFERRED.with(|d| {
                    let mut d = d.borrow_mut();
                    d.depth = d.depth.saturating_sub(1);
                    d.keeping = d.keeping.saturating_sub(1);
                });
            }
        }
        fn take_pending(d: &mut Pending) -> (BTreeSet<PathBuf>, BTreeSet<PathBuf>) {
            (std::mem::take(&mut d.files), std::mem::take(&mut d.dirs))
        }
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            d.depth += 1;
            d.keeping += 1;
        });
        let guard = Depth;
        let result = f();
        let (files, dirs) = DEFERRED.with(|d| take_pending(&mut d.borrow_mut()));
        drop(guard);
        self.files.extend(files);
        self.dirs.extend(dirs);
        result
    }

    /// Does the kept fsyncs; on an error they are kept for the next try.
    pub fn sync(&mut self) -> Result<()> {
        self.unstarted_bytes = 0;
        let mut first_error = None;
        while !self.started.is_empty() {
            if let Some(e) = self.join_oldest() {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            // A panicked thread's paths are unknown: fsync what is kept and
            // report the error (the caller does not report durability).
            let _ = self.sync_kept();
            return Err(e);
        }
        self.sync_kept()
    }

    fn sync_kept(&mut self) -> Result<()> {
        if self.files.is_empty() && self.dirs.is_empty() {
            return Ok(());
        }
        let files: Vec<(PathBuf, bool)> = self.files.iter().map(|p| (p.clone(), false)).collect();
        let dirs: Vec<(PathBuf, bool)> = self.dirs.iter().map(|p| (p.clone(), true)).collect();
        sync_all_paths(&files)?;
        self.files.clear();
        sync_all_paths(&dirs)?;
        self.dirs.clear();
        Ok(())
    }
}

/// Largest configuration, users or command file read whole (16 MiB): such
/// files are a few KiB, so anything near this is a mistake or hostile, and
/// a process must not allocate whatever size a file has.
pub const MAX_SMALL_FILE_BYTES: u64 = 16 << 20;

/// Reads a whole file of at most `limit` bytes; a larger one is an
/// `InvalidData` error naming the limit, after reading no more than
/// `limit + 1` bytes of it (the file may grow while it is read).
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = File::open(path)?;
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0).min(limit);
    let mut out = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(out)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e.utf8_error()))
}

/// Appends `bytes` to the existing file `path` and makes them durable
/// (`fdatasync`). Inside a [`DeferredSync`] scope the bytes wait for the
/// barrier, which appends them (in the order given, one write per file)
/// before its fsyncs: until then no reader sees them ([`has_pending_appends`]
/// tells this thread that some wait). Inside [`SyncLater::keep`] they are
/// appended at once and their fsync is kept. For a journal whose one
/// writer is this process: a crash may leave a torn tail, which the
/// journal's reader recognises.
pub fn append_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let deferred = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        if d.depth == 0 || d.keeping > 0 {
            return false;
        }
        d.appends
            .entry(path.to_path_buf())
            .or_default()
            .extend_from_slice(bytes);
        true
    });
    if deferred {
        return Ok(());
    }
    let file = append_now(path, bytes)?;
    sync_file(&file, path, true)
}

/// True when this thread's barrier has bytes to append to `path`.
pub fn has_pending_appends(path: &Path) -> bool {
    DEFERRED.with(|d| d.borrow().appends.contains_key(path))
}

/// Appends `bytes` to `path`; a write that fails part way (a full disk) is
/// cut back, so that the next append does not land after a torn entry.
fn append_now(path: &Path, bytes: &[u8]) -> Result<File> {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(Error::io("open for append", path))?;
    let before = file
        .metadata()
        .map_err(Error::io("stat for append", path))?
        .len();
    if let Err(e) = file.write_all(bytes) {
        let _ = file.set_len(before);
        return Err(Error::io("append", path)(e));
    }
    Ok(file)
}

/// Reads a whole file, or returns `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    // A replacement or removal waiting for this thread's barrier is the
    // content.
    if removal_pending(path) {
        return Ok(None);
    }
    let path = &pending_tmp(path).unwrap_or_else(|| path.to_path_buf());
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
    // Always before the rename, even in a deferred scope: the file a rename
    // puts in place is whole.
    if sync {
        file.sync_all().map_err(Error::io("fsync", tmp))?;
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
    #[test]
    fn a_bounded_read_refuses_a_file_over_its_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(&path, vec![b'a'; 1000]).expect("write");
        assert_eq!(read_bounded(&path, 1000).expect("at the limit").len(), 1000);
        let err = read_bounded(&path, 999).expect_err("over");
        assert_eq!(err.kind(), ErrorKind::InvalidData);
        assert!(err.to_string().contains("larger than 999 bytes"), "{err}");
        assert_eq!(
            read_to_string_bounded(&path, 1000).expect("text").len(),
            1000
        );
        fs::write(&path, [0xff, 0xfe]).expect("write");
        assert_eq!(
            read_to_string_bounded(&path, 10).expect_err("utf-8").kind(),
            ErrorKind::InvalidData
        );
        assert_eq!(
            read_bounded(&dir.path().join("none"), 10)
                .expect_err("missing")
                .kind(),
            ErrorKind::NotFound
        );
    }

    use super::*;

    #[test]
    fn a_deferred_scope_skips_fsyncs_until_its_barrier() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!deferred());
        {
            let scope = DeferredSync::begin();
            assert!(deferred());
            {
                let _nested = DeferredSync::begin();
                assert!(deferred());
            }
            assert!(deferred(), "the outer scope is still open");
            let a = dir.path().join("a");
            write_atomic(&a, b"x", true).expect("write");
            assert!(!a.exists(), "the rename waits for the barrier");
            assert_eq!(read_optional(&a).expect("read"), Some(b"x".to_vec()));
            let in_place = dir.path().join("b");
            write_in_place(&in_place, b"z", 0, true).expect("write");
            let pending = DEFERRED.with(|d| {
                let d = d.borrow();
                (d.files.len(), d.dirs.len(), d.renames.len())
            });
            assert_eq!(pending, (2, 1, 1), "two files, one dir, one rename wait");
            // A file deleted before the barrier needs no fsync.
            let gone = dir.path().join("gone");
            fs::write(&gone, b"y").expect("write");
            sync_file(&File::open(&gone).expect("open"), &gone, false).expect("recorded");
            fs::remove_file(&gone).expect("remove");
            scope.barrier().expect("barrier");
            assert_eq!(fs::read(&a).expect("renamed"), b"x");
            assert!(!dir.path().join("a.tmp").exists());
            let pending = DEFERRED.with(|d| d.borrow().files.len() + d.borrow().dirs.len());
            assert_eq!(pending, 0, "the barrier did them all");
            scope.finish().expect("finish");
        }
        assert!(!deferred());
        assert_eq!(fs::read(dir.path().join("a")).expect("read"), b"x");
        // Another thread is not deferred.
        let _scope = DeferredSync::begin();
        assert!(!std::thread::spawn(deferred).join().expect("thread"));
    }

    #[test]
    fn a_deferred_replace_keeps_the_old_file_until_the_barrier_and_a_removal_cancels_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("record");
        write_atomic(&path, b"old", true).expect("seed");
        let scope = DeferredSync::begin();
        write_atomic(&path, b"new", true).expect("write");
        write_atomic(&path, b"newer", true).expect("rewrite");
        assert_eq!(fs::read(&path).expect("on disk"), b"old");
        assert_eq!(read_optional(&path).expect("read"), Some(b"newer".to_vec()));
        assert!(replace_pending(&path));
        // Removed before the barrier: the barrier must not bring it back.
        let guard = dir.path().join("guard");
        write_atomic(&guard, b"set", true).expect("set");
        remove_file(&guard).expect("clear");
        assert!(!replace_pending(&guard));
        // Its directory gone before the barrier: nothing to rename.
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).expect("mkdir");
        write_atomic(&sub.join("f"), b"x", true).expect("write");
        fs::rename(&sub, dir.path().join("sub-delete")).expect("move away");
        // Removed at the barrier, after the renames; a write cancels it.
        let mark = dir.path().join("mark");
        fs::write(&mark, b"m").expect("seed");
        remove_at_barrier(&mark).expect("remove later");
        assert!(mark.exists(), "still there until the barrier");
        assert_eq!(read_optional(&mark).expect("read"), None);
        let kept = dir.path().join("kept");
        fs::write(&kept, b"k").expect("seed");
        remove_at_barrier(&kept).expect("remove later");
        write_atomic(&kept, b"again", true).expect("set again");
        // Read back by its writer at once: replaced now.
        let seg = dir.path().join("seg");
        write_atomic_visible(&seg, b"batches").expect("visible");
        assert_eq!(fs::read(&seg).expect("there"), b"batches");
        scope.finish().expect("barrier");
        assert_eq!(fs::read(&path).expect("replaced"), b"newer");
        assert!(!guard.exists() && !dir.path().join("guard.tmp").exists());
        assert!(!mark.exists());
        assert_eq!(fs::read(&kept).expect("kept"), b"again");
        assert!(!path.with_extension("tmp").exists());
        assert!(!dir.path().join("sub").exists());
    }

    #[test]
    fn a_rename_kept_by_sync_later_is_done_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snapshot");
        let mut later = SyncLater::default();
        later
            .keep(|| write_atomic(&path, b"s", true))
            .expect("write");
        assert_eq!(fs::read(&path).expect("renamed at once"), b"s");
        assert!(!later.is_empty(), "its directory's fsync is kept");
        later.sync().expect("sync");
    }

    /// One row per case: the sizes of the segments closed one after
    /// another, and after each whether a background pass began.
    #[test]
    fn closed_segments_begin_their_fsyncs_together_once_16_mib_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("00.log");
        fs::write(&file, b"x").expect("write");
        let rows: [(&str, &[(u64, bool)]); 3] = [
            (
                "a large segment begins at once",
                &[(START_BATCH_BYTES, true)],
            ),
            (
                "small ones wait until 16 MiB of them are closed",
                &[
                    (6 << 20, false),
                    (6 << 20, false),
                    (6 << 20, true),
                    (1, false),
                ],
            ),
            (
                "a tiny one alone waits for the flush",
                &[(200 << 10, false)],
            ),
        ];
        for (name, closed) in rows {
            let mut later = SyncLater::default();
            for (i, &(bytes, begins)) in closed.iter().enumerate() {
                let before = later.started.len();
                later
                    .keep(|| sync_file(&File::open(&file).expect("open"), &file, false))
                    .expect("keep");
                later.start_after(bytes);
                assert_eq!(later.started.len() > before, begins, "{name}: segment {i}");
            }
            later.sync().expect("sync");
            assert!(later.is_empty(), "{name}: the flush does the rest");
        }
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

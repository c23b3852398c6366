//! What the applier tells and checks in the background: the log dir's
//! root checkpoints ([`write_checkpoints`]) and the scrub's share of a
//! cycle ([`scrub_step`]).
//!
//! Functions over the parts they are given, never over the applier itself.

#![allow(clippy::result_large_err)]

use std::path::Path;
use std::time::Instant;

use kafkalog::LogDir;

use crate::bucket_reader::BucketReader;
use crate::reserve::DiskReserve;
use crate::table::MirrorTable;

/// Writes the log dir's root checkpoints if a flush changed them (see
/// [`LogDir::defer_checkpoints`]). A failure is logged and retried next
/// cycle: checkpoints that lag only make recovery scan more.
pub(super) fn write_checkpoints(logdir: &LogDir, reserve: &mut DiskReserve) {
    let mut written = logdir.write_checkpoints();
    if let Err(e) = &written
        && crate::reserve::is_disk_full(e)
        && reserve.release()
    {
        written = logdir.write_checkpoints();
    }
    if let Err(e) = written {
        tracing::warn!(error = %e, "could not write the log dir's root checkpoints; retrying next cycle");
    }
}

/// The scrub's share of this cycle (`crate::scrub`): damage found in a
/// mirror partition fails it; on a STOPPED one it is only reported.
pub(super) async fn scrub_step(
    scrub: &mut crate::scrub::Scrub,
    log_dir: &Path,
    table: &mut MirrorTable,
    bucket: &BucketReader,
) {
    let found = scrub.step(
        log_dir,
        &|| table.mirror_slots().map(|m| m.tp().clone()).collect(),
        &|tp| table.state_of(tp),
        Instant::now(),
        crate::clock::now_ms(),
    );
    table.stale |= !found.is_empty();
    for (tp, e) in found {
        table.fail(&tp, e);
        table.changed.insert(tp);
    }
    let n = scrub.objects_due();
    if n > 0
        && let Some(store) = bucket.store()
    {
        let candidates: Vec<_> = table
            .mirror_slots()
            .filter_map(|s| bucket.cached(s.tp()).map(|m| (s.tp().clone(), m)))
            .flat_map(|(tp, m)| m.ranges.iter().map(move |r| (tp.clone(), r.clone())))
            .collect();
        let now = crate::clock::now_ms();
        scrub
            .check_objects(log_dir, store, &candidates, n, now)
            .await;
    }
}

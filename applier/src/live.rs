//! The live status (`<log-dir>/.segmirror/live.json`, read by `applier
//! status` beside a running daemon) and the metrics, rendered from the
//! slots and the feed head: values in, values out; [`LiveOutput`] writes
//! them when due.
//!
//! Invariants: the live status is rewritten only when something it shows
//! but the clock changed ([`LiveOutput::stale`] says it may have) or every
//! [`LIVE_REFRESH`]; the metrics are rendered when something they show
//! changed, every cycle while a partition lags (its lag in seconds grows
//! with the clock), and every [`METRICS_REFRESH`] otherwise (the cycle
//! counter). A live status that cannot be written for lack of space is
//! written again once the disk reserve is released.

use std::collections::{BTreeMap, HashMap};

use manifest::partition::PartitionManifest;
use std::path::Path;
use std::time::{Duration, Instant};

use kafkalog::TopicPartition;
use manifest::feed::Head;
use manifest::state::PartitionState;

use crate::reserve::DiskReserve;
use crate::slot::Slot;
use crate::status::{LivePartition, LiveStatus, PartitionStatus, UnrecordedState};

/// Every partition's slot.
pub(crate) type Slots = BTreeMap<TopicPartition, Slot>;

/// How often the live status is rewritten when nothing changed.
const LIVE_REFRESH: Duration = Duration::from_secs(30);

/// How often the metrics are re-rendered when nothing changed and no
/// partition lags (for `segmirror_applier_cycles_total`).
const METRICS_REFRESH: Duration = Duration::from_secs(10);

/// What was last written of the live status and the metrics.
#[derive(Debug)]
pub(crate) struct LiveOutput {
    /// Where the metrics are published, when they are.
    pub(crate) metrics: Option<crate::metrics::Exposition>,
    /// The live status last written (its stamp zeroed), and when.
    last_live: Option<(LiveStatus, Instant)>,
    /// When the metrics were last rendered, and whether a partition lagged.
    last_metrics: Option<(Instant, bool)>,
    /// Something the live status or the metrics show may have changed
    /// since they were last built.
    pub(crate) stale: bool,
}

impl Default for LiveOutput {
    fn default() -> LiveOutput {
        LiveOutput {
            metrics: None,
            last_live: None,
            last_metrics: None,
            stale: true,
        }
    }
}

impl LiveOutput {
    /// Writes the live status built by `build` when due (see the module
    /// doc); nothing while no feed head was read (`known_source`: keep
    /// what a daemon last wrote).
    pub(crate) fn write_status(
        &mut self,
        log_dir: &Path,
        known_source: bool,
        build: impl FnOnce() -> LiveStatus,
        reserve: &mut DiskReserve,
    ) {
        if !known_source {
            return;
        }
        let refresh_due = self
            .last_live
            .as_ref()
            .is_none_or(|(_, at)| at.elapsed() >= LIVE_REFRESH);
        if !self.stale && !refresh_due {
            // Nothing it shows changed since it was last built.
            return;
        }
        self.stale = false;
        let mut live = build();
        // Rewritten only when something but the clock changed.
        let stamp = live.written_at_ms;
        live.written_at_ms = 0;
        let unchanged = self.last_live.as_ref().is_some_and(|(l, _)| *l == live);
        if unchanged && !refresh_due {
            return;
        }
        live.written_at_ms = stamp;
        let mut written = crate::status::write_live(log_dir, &live);
        if let Err(e) = &written
            && crate::reserve::is_disk_full(e)
            && reserve.release()
        {
            written = crate::status::write_live(log_dir, &live);
        }
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write the live status");
        }
        live.written_at_ms = 0;
        self.last_live = Some((live, Instant::now()));
    }

    /// Re-renders the metrics from the rows `rows` builds when due (see
    /// the module doc; `changed`: something they show changed).
    pub(crate) fn render_metrics(
        &mut self,
        changed: bool,
        rows: impl FnOnce() -> Vec<PartitionStatus>,
        counters: &crate::metrics::Counters,
        scrub: Option<&crate::scrub::ScrubStats>,
    ) {
        let Some(exposition) = &self.metrics else {
            return;
        };
        let due = changed
            || self
                .last_metrics
                .is_none_or(|(at, lagging)| lagging || at.elapsed() >= METRICS_REFRESH);
        if !due {
            return;
        }
        let rows = rows();
        let lagging = rows.iter().any(|r| r.lag_offsets.is_some_and(|l| l > 0));
        if let Ok(mut text) = exposition.lock() {
            *text = crate::metrics::render_with(&rows, counters, scrub);
        }
        self.last_metrics = Some((Instant::now(), lagging));
    }
}

/// Every mirror partition's status, from memory (no file is read but the
/// gaps' acknowledgements); partitions that could not be opened are
/// FAILED here.
pub(crate) fn status_rows(
    slots: &Slots,
    live: &LiveStatus,
    log_dir: &Path,
) -> Vec<PartitionStatus> {
    let now = crate::clock::now_ms();
    let mut rows: Vec<PartitionStatus> = slots
        .values()
        .filter_map(Slot::mirror)
        .map(|s| {
            let m = &s.mirror;
            let l = live.partitions.get(&m.tp.to_string());
            let mut row = crate::status::row(
                &m.tp,
                &m.record,
                l,
                m.log.log_start_offset(),
                m.log.log_end_offset(),
                now,
            );
            row.retention_error.clone_from(&s.retention_error);
            row
        })
        .collect();
    for (tp, slot) in slots {
        if let Slot::Unopened(error) = slot {
            rows.push(crate::status::unopened_row(
                tp,
                &format!("cannot open the partition: {error}"),
            ));
        }
    }
    rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    crate::status::annotate_gaps(log_dir, &mut rows);
    rows
}

/// The live numbers of every partition the feed names.
pub(crate) fn live_status(
    slots: &Slots,
    head: Option<&Head>,
    manifests: &HashMap<TopicPartition, PartitionManifest>,
) -> LiveStatus {
    let mut live = LiveStatus {
        written_at_ms: crate::clock::now_ms(),
        ..LiveStatus::default()
    };
    if let Some(head) = head {
        for (key, e) in &head.partitions {
            let tp = TopicPartition::new(&e.topic, e.partition).ok();
            let slot = tp.as_ref().and_then(|tp| slots.get(tp));
            let mirror = slot.and_then(Slot::mirror);
            let lag_bytes = mirror
                .and_then(|s| manifests.get(s.tp()).map(|m| (m, &s.mirror)))
                .map(|(m, mirror)| {
                    let leo = mirror.log.log_end_offset();
                    m.inline_ranges_from(leo)
                        .iter()
                        .map(|r| r.bytes)
                        .sum::<u64>()
                        + m.pages_from(leo).iter().map(|p| p.bytes).sum::<u64>()
                })
                .unwrap_or(0);
            live.partitions.insert(
                key.clone(),
                LivePartition {
                    shipped_end_offset: e.shipped_end_offset,
                    source_high_watermark: e.source_high_watermark,
                    lag_bytes,
                    committed_at_ms: e.committed_at_ms,
                    local_log_start_offset: mirror.map(|m| m.mirror.log.log_start_offset()),
                    local_log_end_offset: mirror.map(|m| m.mirror.log.log_end_offset()),
                    waiting: slot.and_then(Slot::waiting).map(str::to_string),
                    refused: match slot {
                        Some(Slot::Refused(r)) => Some(r.clone()),
                        _ => None,
                    },
                    unrecorded: slot.and_then(unrecorded),
                    retention_error: mirror.and_then(|m| m.retention_error.clone()),
                },
            );
        }
    }
    // Partitions the daemon cannot record, and STOPPED ones whose
    // retention is not enforced, whether the feed names them or not.
    for (tp, slot) in slots {
        if let Some(u) = unrecorded(slot) {
            live.partitions
                .entry(tp.to_string())
                .or_default()
                .unrecorded = Some(u);
        }
        if let Some(e) = slot.mirror().and_then(|m| m.retention_error.as_ref()) {
            live.partitions
                .entry(tp.to_string())
                .or_default()
                .retention_error = Some(e.clone());
        }
    }
    live
}

/// The state of `tp` that its mirror record does not hold, if any.
fn unrecorded(slot: &Slot) -> Option<UnrecordedState> {
    let slot = match slot {
        Slot::Mirror(m) => m,
        Slot::Unopened(error) => {
            return Some(UnrecordedState {
                state: PartitionState::Failed.as_str().to_string(),
                previous_state: None,
                last_error: Some(format!("cannot open the partition: {error}")),
                retryable: Some(true),
                retry_count: 0,
                why: "opened again every cycle".into(),
            });
        }
        Slot::Waiting(_) | Slot::Refused(_) => return None,
    };
    let m = &slot.mirror;
    let why = m.unsaved.clone().or_else(|| slot.action_error.clone())?;
    Some(UnrecordedState {
        state: m.record.state.state().as_str().to_string(),
        previous_state: m.record.state.previous().map(|s| s.as_str().to_string()),
        last_error: m.record.state.failure().map(|f| f.message.clone()),
        retryable: m.record.state.failure().map(|f| f.retryable),
        retry_count: m.record.state.retries(),
        why,
    })
}

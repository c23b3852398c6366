//! The mirror partition state machine, as one pure function.
//!
//! [`next`] takes the current [`MirrorState`] and an [`Event`] (an operator
//! command, or the outcome of work the driver did) and returns the next
//! state and the [`Action`]s the driver must perform, in order. It does no
//! IO: the applier's driver persists the state, moves the write guard, runs
//! preparation and failover, fetches, and schedules retries.
//!
//! # Invariants
//!
//! Kept by [`initial`] and [`next`] (and checked when a state is
//! deserialized):
//!
//! - The write guard is set in every state but STOPPED: [`Action::SetWriteGuard`]
//!   is returned exactly when a partition leaves STOPPED (or is created), and
//!   [`Action::ClearWriteGuard`] exactly when it enters STOPPED, after the
//!   state is persisted. Only STOPPED is [`is_writable`].
//! - A FAILED state always records its [`Failure`]: the message, whether it is
//!   retryable, the state it came from (PREPARING, MIRRORING, PAUSED or
//!   STOPPING, never FAILED or STOPPED) and the retry count. No other state
//!   carries a failure.
//! - A refused command or an event that does not apply is an `Err` and
//!   changes nothing; a repeated transition is `Ok` with the same state and no
//!   action (a no-op), so every step is safe to retry.
//! - [`Action::PersistState`] is returned exactly when the state changes.

use std::fmt;

/// The state of a mirror partition, with a stable serialized id (`"PREPARING"`,
/// ...) that is also its [`Display`](fmt::Display) form.
///
/// ```text
///   initial() = start on a new partition
///        |
///        v               prepared                   pause
///   +-----------+  ---------------->  +-----------+ -------> +--------+
///   | PREPARING |                     | MIRRORING |          | PAUSED |
///   +-----------+                     +-----------+ <------- +--------+
///     ^   ^   |                             |         resume      |
///     |   |   | stop                        | stop                | stop
///     |   |   |                             v                     |
///     |   |   +----------------------> +----------+ <-------------+
///     |   |                            | STOPPING | <-------------+
///     |   |                            +----------+               |
///     |   |                                 | stopped             | stop
///     |   |  start                          v                     |
///     |   +------------------------------ +---------+        +--------+
///     |                                   | STOPPED |        | FAILED |
///     |                                   +---------+        +--------+
///     |          start                                            |
///     +-----------------------------------------------------------+
///
///   error in PREPARING, MIRRORING, PAUSED or STOPPING  -->  FAILED
///       (keeps the message, retryable or not, the state it came from,
///        the retry count)
///   retry-due, retryable FAILED only  -->  the state it came from
///
///   no-ops: start in PREPARING or MIRRORING, pause in PAUSED, resume in
///   MIRRORING, stop in STOPPING or STOPPED, prepared in MIRRORING,
///   stopped in STOPPED, error in FAILED
///   write guard: set in every state but STOPPED
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum PartitionState {
    /// Identity checks, loop check, LME lookup, truncation of the local log.
    #[serde(rename = "PREPARING")]
    Preparing,
    /// Batches are fetched from the bucket and appended unchanged.
    #[serde(rename = "MIRRORING")]
    Mirroring,
    /// Nothing is fetched; the partition stays read-only.
    #[serde(rename = "PAUSED")]
    Paused,
    /// Failover: LME recorded, leader epoch raised, open transactions aborted.
    #[serde(rename = "STOPPING")]
    Stopping,
    /// An ordinary writable partition, still remembered as a mirror.
    #[serde(rename = "STOPPED")]
    Stopped,
    /// An error stopped the work; see [`Failure`].
    #[serde(rename = "FAILED")]
    Failed,
}

impl PartitionState {
    /// Every state, in the spec's order.
    pub const ALL: [PartitionState; 6] = [
        PartitionState::Preparing,
        PartitionState::Mirroring,
        PartitionState::Paused,
        PartitionState::Stopping,
        PartitionState::Stopped,
        PartitionState::Failed,
    ];

    /// The stable id: `"PREPARING"`, `"MIRRORING"`, `"PAUSED"`, `"STOPPING"`,
    /// `"STOPPED"`, `"FAILED"` (the serialized form too).
    pub const fn as_str(self) -> &'static str {
        match self {
            PartitionState::Preparing => "PREPARING",
            PartitionState::Mirroring => "MIRRORING",
            PartitionState::Paused => "PAUSED",
            PartitionState::Stopping => "STOPPING",
            PartitionState::Stopped => "STOPPED",
            PartitionState::Failed => "FAILED",
        }
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether producers may write to a partition in `state`: only in STOPPED.
/// Reads are allowed in every state.
pub fn is_writable(state: PartitionState) -> bool {
    state == PartitionState::Stopped
}

/// Why a partition is FAILED.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// The error, as reported.
    pub message: String,
    /// Whether the work is retried automatically (object store unavailable,
    /// object missing), or waits for an operator's stop or start (CRC
    /// mismatch, topic id mismatch, source cluster changed, tiered storage).
    pub retryable: bool,
    /// The state the error happened in, and the one a retry returns to.
    pub from: PartitionState,
    /// Automatic retries already made since the last success or operator
    /// command: 0 for a first failure, `n + 1` when the work fails again
    /// after the retry of a failure with count `n`. The driver derives the
    /// backoff from it.
    pub retry_count: u32,
}

/// What is kept of a mirror partition's state machine (persisted by the
/// driver on [`Action::PersistState`]).
///
/// Built only by [`initial`] and [`next`], or deserialized (which checks the
/// module's invariants), so a FAILED state always has its [`Failure`].
/// Unknown fields are ignored when deserializing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "MirrorStateFields")]
pub struct MirrorState {
    state: PartitionState,
    previous: Option<PartitionState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
    retries: u32,
}

impl MirrorState {
    /// The current state.
    pub fn state(&self) -> PartitionState {
        self.state
    }

    /// The state before the last change of state; `None` for a new
    /// partition. Preparation reads it to tell a start after STOPPED
    /// (failback) from a restart after FAILED or a new partition.
    pub fn previous(&self) -> Option<PartitionState> {
        self.previous
    }

    /// The failure, in FAILED (and only there).
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// Automatic retries made since the last success or operator command
    /// (equal to the failure's `retry_count` in FAILED).
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The state after a change to `to` that starts afresh (operator
    /// command, or success): no failure, no retry.
    fn enter(&self, to: PartitionState) -> MirrorState {
        MirrorState {
            state: to,
            previous: Some(self.state),
            failure: None,
            retries: 0,
        }
    }
}

/// The deserialized fields of a [`MirrorState`], before its checks.
#[derive(serde::Deserialize)]
struct MirrorStateFields {
    state: PartitionState,
    previous: Option<PartitionState>,
    #[serde(default)]
    failure: Option<Failure>,
    retries: u32,
}

/// A deserialized [`MirrorState`] that breaks the module's invariants.
#[derive(Debug, thiserror::Error)]
enum InvalidMirrorState {
    #[error("a FAILED mirror state must record its failure")]
    FailureMissing,
    #[error("a {0} mirror state cannot carry a failure")]
    UnexpectedFailure(PartitionState),
    #[error("a failure cannot come from {0}")]
    FailureFrom(PartitionState),
    #[error("retry count {failure} of the failure differs from the state's {state}")]
    RetryCount { failure: u32, state: u32 },
}

impl TryFrom<MirrorStateFields> for MirrorState {
    type Error = InvalidMirrorState;

    fn try_from(f: MirrorStateFields) -> Result<MirrorState, InvalidMirrorState> {
        match (&f.failure, f.state) {
            (None, PartitionState::Failed) => return Err(InvalidMirrorState::FailureMissing),
            (Some(_), state) if state != PartitionState::Failed => {
                return Err(InvalidMirrorState::UnexpectedFailure(state));
            }
            (Some(failure), _) if !can_fail_in(failure.from) => {
                return Err(InvalidMirrorState::FailureFrom(failure.from));
            }
            (Some(failure), _) if failure.retry_count != f.retries => {
                return Err(InvalidMirrorState::RetryCount {
                    failure: failure.retry_count,
                    state: f.retries,
                });
            }
            _ => {}
        }
        Ok(MirrorState {
            state: f.state,
            previous: f.previous,
            failure: f.failure,
            retries: f.retries,
        })
    }
}

/// An operator command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    /// Start (or restart) mirroring: from STOPPED or FAILED to PREPARING.
    Start,
    /// Stop fetching, stay read-only: MIRRORING to PAUSED.
    Pause,
    /// Fetch again from the local LEO, no truncation: PAUSED to MIRRORING.
    Resume,
    /// Fail over: to STOPPING, then STOPPED (writable).
    Stop,
}

impl Command {
    /// The command's name: `start`, `pause`, `resume`, `stop`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Command::Start => "start",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Stop => "stop",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to a partition: an operator command, or the outcome of work
/// the driver did for an [`Action`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Operator: [`Command::Start`].
    Start,
    /// Operator: [`Command::Pause`].
    Pause,
    /// Operator: [`Command::Resume`].
    Resume,
    /// Operator: [`Command::Stop`].
    Stop,
    /// [`Action::RunPreparation`] finished: the local log is ready to
    /// mirror from its LEO.
    Prepared,
    /// [`Action::RunFailover`] finished: LME recorded, epoch raised, open
    /// transactions aborted.
    Stopped,
    /// MIRRORING did its work once without error (a poll applied batches or
    /// found nothing new): the retry count starts again at 0.
    Progressed,
    /// The work of the current state failed.
    Error {
        /// What went wrong (with its context: object, offset, ...).
        message: String,
        /// Whether to retry automatically with backoff.
        retryable: bool,
    },
    /// The backoff of [`Action::ScheduleRetry`] has elapsed.
    RetryDue,
}

impl Event {
    /// The operator command this event is, if it is one.
    pub fn command(&self) -> Option<Command> {
        match self {
            Event::Start => Some(Command::Start),
            Event::Pause => Some(Command::Pause),
            Event::Resume => Some(Command::Resume),
            Event::Stop => Some(Command::Stop),
            _ => None,
        }
    }

    /// A short name, used in errors: `start`, ..., `prepared`, `stopped`,
    /// `progressed`, `error`, `retry-due`.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::Pause => "pause",
            Event::Resume => "resume",
            Event::Stop => "stop",
            Event::Prepared => "prepared",
            Event::Stopped => "stopped",
            Event::Progressed => "progressed",
            Event::Error { .. } => "error",
            Event::RetryDue => "retry-due",
        }
    }
}

impl From<Command> for Event {
    fn from(command: Command) -> Event {
        match command {
            Command::Start => Event::Start,
            Command::Pause => Event::Pause,
            Command::Resume => Event::Resume,
            Command::Stop => Event::Stop,
        }
    }
}

/// Something the driver must do, in the order returned. Every action is
/// idempotent, so a driver that crashes half-way can redo them (see
/// [`on_restart`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Make the partition refuse producer writes (persisted guard).
    SetWriteGuard,
    /// Let producers write to the partition again.
    ClearWriteGuard,
    /// Write the new [`MirrorState`] durably.
    PersistState,
    /// Run PREPARING's work: identity checks, loop check, LME lookup,
    /// truncation; report [`Event::Prepared`] or [`Event::Error`].
    RunPreparation,
    /// Stop a running preparation and wait until it has ended (stop during
    /// PREPARING); a later [`Event::Prepared`] is refused anyway.
    CancelPreparation,
    /// Fetch from the bucket and append, from the local LEO.
    StartFetching,
    /// Stop fetching and wait until no append is in flight.
    StopFetching,
    /// Put the stop's LME, stop offset and stop epoch in the state's
    /// record before it is written (keeping those of a stop already
    /// recorded), so the write of STOPPING carries them.
    StageStop,
    /// Run STOPPING's work: record the LME (keeping one already recorded for
    /// this stop), raise the leader epoch to at least LME + 1, abort the
    /// source producers' open transactions; report [`Event::Stopped`] or
    /// [`Event::Error`].
    RunFailover,
    /// Raise the leader epoch to the recorded stop epoch (a STOPPED
    /// partition opened again: the failover's bump is redone, so it need
    /// not be durable before STOPPED is).
    RaiseEpochToStop,
    /// Send [`Event::RetryDue`] after an exponential backoff with jitter.
    ScheduleRetry {
        /// The failure's retry count, for the backoff.
        retry_count: u32,
    },
    /// Drop a pending [`Action::ScheduleRetry`] (an operator command left a
    /// retryable FAILED first).
    CancelRetry,
}

impl fmt::Display for Action {
    /// In words, for operators' logs and `status`'s last error.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::SetWriteGuard => f.write_str("setting the write guard"),
            Action::ClearWriteGuard => f.write_str("clearing the write guard"),
            Action::PersistState => f.write_str("writing the mirror record"),
            Action::RunPreparation => f.write_str("queueing the preparation"),
            Action::CancelPreparation => f.write_str("cancelling the preparation"),
            Action::StartFetching => f.write_str("starting to fetch"),
            Action::StopFetching => f.write_str("stopping fetching"),
            Action::StageStop => f.write_str("staging the stop in the record"),
            Action::RunFailover => f.write_str("queueing the failover"),
            Action::RaiseEpochToStop => f.write_str("raising the leader epoch to the stop epoch"),
            Action::ScheduleRetry { retry_count } => {
                write!(f, "scheduling retry {retry_count}")
            }
            Action::CancelRetry => f.write_str("cancelling the retry"),
        }
    }
}

/// A command the state does not allow, or an event that does not apply to
/// it. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The operator's command is not allowed in this state, e.g. "cannot
    /// resume: partition is STOPPED, not PAUSED".
    #[error("cannot {command}: partition is {state}, not {}", one_of(allowed))]
    Refused {
        /// The command refused.
        command: Command,
        /// The partition's state.
        state: PartitionState,
        /// The states the command changes.
        allowed: &'static [PartitionState],
    },
    /// An internal event that does not apply to this state: a stale
    /// completion or timer (the operator moved the partition meanwhile). The
    /// driver drops it.
    #[error("{event} does not apply: partition is {state}, {reason}")]
    Unexpected {
        /// The event's [`Event::name`].
        event: &'static str,
        /// The partition's state.
        state: PartitionState,
        /// Why not, e.g. "not PREPARING".
        reason: &'static str,
    },
}

fn one_of(states: &[PartitionState]) -> String {
    let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    names.join(" or ")
}

/// States in which work runs, so an error can happen.
fn can_fail_in(state: PartitionState) -> bool {
    matches!(
        state,
        PartitionState::Preparing
            | PartitionState::Mirroring
            | PartitionState::Paused
            | PartitionState::Stopping
    )
}

/// A new mirror partition: the start command on "(new)". The state is
/// PREPARING with no previous state; the actions set the write guard,
/// persist the state and run the preparation.
pub fn initial() -> (MirrorState, Vec<Action>) {
    (
        MirrorState {
            state: PartitionState::Preparing,
            previous: None,
            failure: None,
            retries: 0,
        },
        vec![
            Action::SetWriteGuard,
            Action::PersistState,
            Action::RunPreparation,
        ],
    )
}

/// The transition function: the state after `event`, and the actions the
/// driver performs, in order. See [`PartitionState`] for the diagram.
///
/// | event | from | to | actions |
/// | --- | --- | --- | --- |
/// | start | STOPPED | PREPARING | SetWriteGuard, PersistState, RunPreparation |
/// | start | FAILED | PREPARING | (CancelRetry,) PersistState, RunPreparation |
/// | start | PREPARING, MIRRORING | no-op | |
/// | start | PAUSED, STOPPING | refused | |
/// | pause | MIRRORING | PAUSED | StopFetching, PersistState |
/// | pause | PAUSED | no-op | |
/// | resume | PAUSED | MIRRORING | PersistState, StartFetching (no truncation) |
/// | resume | MIRRORING | no-op | |
/// | stop | PREPARING | STOPPING | CancelPreparation, StageStop, PersistState, RunFailover |
/// | stop | MIRRORING | STOPPING | StopFetching, StageStop, PersistState, RunFailover |
/// | stop | PAUSED | STOPPING | StageStop, PersistState, RunFailover |
/// | stop | FAILED | STOPPING | (CancelRetry,) StageStop, PersistState, RunFailover |
/// | stop | STOPPING, STOPPED | no-op | |
/// | prepared | PREPARING | MIRRORING | PersistState, StartFetching |
/// | prepared | MIRRORING | no-op | |
/// | stopped | STOPPING | STOPPED | PersistState, ClearWriteGuard |
/// | stopped | STOPPED | no-op | |
/// | progressed | MIRRORING | MIRRORING, retry count 0 | PersistState if the count was not 0 |
/// | error | PREPARING, MIRRORING, PAUSED, STOPPING | FAILED | (StopFetching from MIRRORING,) PersistState, (ScheduleRetry if retryable) |
/// | error | FAILED | no-op (the first failure is kept) | |
/// | retry-due | FAILED, retryable | the state it came from, retry count + 1 | (StageStop to STOPPING,) PersistState, then RunPreparation / StartFetching / nothing / RunFailover |
///
/// Pause, resume and start are refused in the other states (stop never is);
/// prepared, stopped, progressed, error in STOPPED and retry-due elsewhere
/// are [`TransitionError::Unexpected`]. Operator commands and successes
/// reset the retry count.
pub fn next(
    state: &MirrorState,
    event: Event,
) -> Result<(MirrorState, Vec<Action>), TransitionError> {
    use Action as A;
    use PartitionState as S;
    let current = state.state;
    let no_op = || Ok((state.clone(), Vec::new()));
    let change = |to: S, actions: Vec<Action>| Ok((state.enter(to), actions));
    let cancel_retry = || {
        state
            .failure
            .iter()
            .filter(|f| f.retryable)
            .map(|_| A::CancelRetry)
    };
    let refused = |command, allowed| {
        Err(TransitionError::Refused {
            command,
            state: current,
            allowed,
        })
    };
    let name = event.name();
    let unexpected = |reason| {
        Err(TransitionError::Unexpected {
            event: name,
            state: current,
            reason,
        })
    };

    match event {
        Event::Start => match current {
            S::Preparing | S::Mirroring => no_op(),
            S::Stopped => change(
                S::Preparing,
                vec![A::SetWriteGuard, A::PersistState, A::RunPreparation],
            ),
            S::Failed => change(
                S::Preparing,
                cancel_retry()
                    .chain([A::PersistState, A::RunPreparation])
                    .collect(),
            ),
            S::Paused | S::Stopping => refused(Command::Start, &[S::Stopped, S::Failed]),
        },
        Event::Pause => match current {
            S::Mirroring => change(S::Paused, vec![A::StopFetching, A::PersistState]),
            S::Paused => no_op(),
            _ => refused(Command::Pause, &[S::Mirroring]),
        },
        Event::Resume => match current {
            S::Paused => change(S::Mirroring, vec![A::PersistState, A::StartFetching]),
            S::Mirroring => no_op(),
            _ => refused(Command::Resume, &[S::Paused]),
        },
        Event::Stop => match current {
            S::Preparing => change(
                S::Stopping,
                vec![
                    A::CancelPreparation,
                    A::StageStop,
                    A::PersistState,
                    A::RunFailover,
                ],
            ),
            S::Mirroring => change(
                S::Stopping,
                vec![
                    A::StopFetching,
                    A::StageStop,
                    A::PersistState,
                    A::RunFailover,
                ],
            ),
            S::Paused => change(
                S::Stopping,
                vec![A::StageStop, A::PersistState, A::RunFailover],
            ),
            S::Failed => change(
                S::Stopping,
                cancel_retry()
                    .chain([A::StageStop, A::PersistState, A::RunFailover])
                    .collect(),
            ),
            S::Stopping | S::Stopped => no_op(),
        },
        Event::Prepared => match current {
            S::Preparing => change(S::Mirroring, vec![A::PersistState, A::StartFetching]),
            S::Mirroring => no_op(),
            _ => unexpected("not PREPARING"),
        },
        Event::Stopped => match current {
            S::Stopping => change(S::Stopped, vec![A::PersistState, A::ClearWriteGuard]),
            S::Stopped => no_op(),
            _ => unexpected("not STOPPING"),
        },
        Event::Progressed => match current {
            S::Mirroring if state.retries == 0 => no_op(),
            S::Mirroring => Ok((
                MirrorState {
                    retries: 0,
                    ..state.clone()
                },
                vec![A::PersistState],
            )),
            _ => unexpected("not MIRRORING"),
        },
        Event::Error { message, retryable } => match current {
            S::Failed => no_op(),
            S::Stopped => unexpected("which runs no mirror work"),
            S::Preparing | S::Mirroring | S::Paused | S::Stopping => {
                let retry_count = state.retries;
                let mut actions = Vec::with_capacity(3);
                if current == S::Mirroring {
                    actions.push(A::StopFetching);
                }
                actions.push(A::PersistState);
                if retryable {
                    actions.push(A::ScheduleRetry { retry_count });
                }
                Ok((
                    MirrorState {
                        state: S::Failed,
                        previous: Some(current),
                        failure: Some(Failure {
                            message,
                            retryable,
                            from: current,
                            retry_count,
                        }),
                        retries: retry_count,
                    },
                    actions,
                ))
            }
        },
        Event::RetryDue => match (current, &state.failure) {
            (S::Failed, Some(failure)) if failure.retryable && can_fail_in(failure.from) => {
                let to = failure.from;
                let work = match to {
                    S::Preparing => Some(A::RunPreparation),
                    S::Mirroring => Some(A::StartFetching),
                    S::Stopping => Some(A::RunFailover),
                    _ => None,
                };
                let stage = (to == S::Stopping).then_some(A::StageStop);
                Ok((
                    MirrorState {
                        retries: failure.retry_count.saturating_add(1),
                        ..state.enter(to)
                    },
                    stage
                        .into_iter()
                        .chain(std::iter::once(A::PersistState))
                        .chain(work)
                        .collect(),
                ))
            }
            (S::Failed, _) => unexpected("its failure is not retryable"),
            _ => unexpected("not FAILED"),
        },
    }
}

/// The actions that bring the world back in line with a persisted `state`
/// after the driver restarted (crash, kill -9): the write guard as the state
/// wants it, and the work of the state started again (every action is
/// idempotent). No state change.
pub fn on_restart(state: &MirrorState) -> Vec<Action> {
    use Action as A;
    use PartitionState as S;
    match state.state {
        S::Preparing => vec![A::SetWriteGuard, A::RunPreparation],
        S::Mirroring => vec![A::SetWriteGuard, A::StartFetching],
        S::Paused => vec![A::SetWriteGuard],
        S::Stopping => vec![A::SetWriteGuard, A::RunFailover],
        S::Stopped => vec![A::ClearWriteGuard, A::RaiseEpochToStop],
        S::Failed => std::iter::once(A::SetWriteGuard)
            .chain(
                state
                    .failure
                    .iter()
                    .filter(|f| f.retryable)
                    .map(|f| A::ScheduleRetry {
                        retry_count: f.retry_count,
                    }),
            )
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action as A;
    use PartitionState as S;
    use proptest::prelude::*;

    fn at(state: S, previous: S) -> MirrorState {
        MirrorState {
            state,
            previous: Some(previous),
            failure: None,
            retries: 0,
        }
    }

    fn failed(from: S, retryable: bool, retry_count: u32) -> MirrorState {
        MirrorState {
            state: S::Failed,
            previous: Some(from),
            failure: Some(Failure {
                message: "boom".to_owned(),
                retryable,
                from,
                retry_count,
            }),
            retries: retry_count,
        }
    }

    fn err(retryable: bool) -> Event {
        Event::Error {
            message: "object store unavailable".to_owned(),
            retryable,
        }
    }

    #[derive(Debug)]
    enum Want {
        To(S, &'static [Action]),
        NoOp,
        /// The full error message.
        Refused(&'static str),
        Unexpected(&'static str),
    }
    use Want::*;

    /// Every event, in the order of the table's columns.
    fn events() -> Vec<Event> {
        vec![
            Event::Start,
            Event::Pause,
            Event::Resume,
            Event::Stop,
            Event::Prepared,
            Event::Stopped,
            Event::Progressed,
            err(true),
            err(false),
            Event::RetryDue,
        ]
    }

    /// One row per state (FAILED twice: retryable and not), one column per
    /// event of [`events`]: the spec's transitions, every pair.
    fn table() -> Vec<(MirrorState, [Want; 10])> {
        const SCHEDULE_0: &[Action] = &[A::PersistState, A::ScheduleRetry { retry_count: 0 }];
        vec![
            (
                at(S::Preparing, S::Stopped),
                [
                    NoOp,
                    Refused("cannot pause: partition is PREPARING, not MIRRORING"),
                    Refused("cannot resume: partition is PREPARING, not PAUSED"),
                    To(
                        S::Stopping,
                        &[
                            A::CancelPreparation,
                            A::StageStop,
                            A::PersistState,
                            A::RunFailover,
                        ],
                    ),
                    To(S::Mirroring, &[A::PersistState, A::StartFetching]),
                    Unexpected("stopped does not apply: partition is PREPARING, not STOPPING"),
                    Unexpected("progressed does not apply: partition is PREPARING, not MIRRORING"),
                    To(S::Failed, SCHEDULE_0),
                    To(S::Failed, &[A::PersistState]),
                    Unexpected("retry-due does not apply: partition is PREPARING, not FAILED"),
                ],
            ),
            (
                at(S::Mirroring, S::Preparing),
                [
                    NoOp,
                    To(S::Paused, &[A::StopFetching, A::PersistState]),
                    NoOp,
                    To(
                        S::Stopping,
                        &[
                            A::StopFetching,
                            A::StageStop,
                            A::PersistState,
                            A::RunFailover,
                        ],
                    ),
                    NoOp,
                    Unexpected("stopped does not apply: partition is MIRRORING, not STOPPING"),
                    NoOp,
                    To(
                        S::Failed,
                        &[
                            A::StopFetching,
                            A::PersistState,
                            A::ScheduleRetry { retry_count: 0 },
                        ],
                    ),
                    To(S::Failed, &[A::StopFetching, A::PersistState]),
                    Unexpected("retry-due does not apply: partition is MIRRORING, not FAILED"),
                ],
            ),
            (
                at(S::Paused, S::Mirroring),
                [
                    Refused("cannot start: partition is PAUSED, not STOPPED or FAILED"),
                    NoOp,
                    To(S::Mirroring, &[A::PersistState, A::StartFetching]),
                    To(
                        S::Stopping,
                        &[A::StageStop, A::PersistState, A::RunFailover],
                    ),
                    Unexpected("prepared does not apply: partition is PAUSED, not PREPARING"),
                    Unexpected("stopped does not apply: partition is PAUSED, not STOPPING"),
                    Unexpected("progressed does not apply: partition is PAUSED, not MIRRORING"),
                    To(S::Failed, SCHEDULE_0),
                    To(S::Failed, &[A::PersistState]),
                    Unexpected("retry-due does not apply: partition is PAUSED, not FAILED"),
                ],
            ),
            (
                at(S::Stopping, S::Mirroring),
                [
                    Refused("cannot start: partition is STOPPING, not STOPPED or FAILED"),
                    Refused("cannot pause: partition is STOPPING, not MIRRORING"),
                    Refused("cannot resume: partition is STOPPING, not PAUSED"),
                    NoOp,
                    Unexpected("prepared does not apply: partition is STOPPING, not PREPARING"),
                    To(S::Stopped, &[A::PersistState, A::ClearWriteGuard]),
                    Unexpected("progressed does not apply: partition is STOPPING, not MIRRORING"),
                    To(S::Failed, SCHEDULE_0),
                    To(S::Failed, &[A::PersistState]),
                    Unexpected("retry-due does not apply: partition is STOPPING, not FAILED"),
                ],
            ),
            (
                at(S::Stopped, S::Stopping),
                [
                    To(
                        S::Preparing,
                        &[A::SetWriteGuard, A::PersistState, A::RunPreparation],
                    ),
                    Refused("cannot pause: partition is STOPPED, not MIRRORING"),
                    Refused("cannot resume: partition is STOPPED, not PAUSED"),
                    NoOp,
                    Unexpected("prepared does not apply: partition is STOPPED, not PREPARING"),
                    NoOp,
                    Unexpected("progressed does not apply: partition is STOPPED, not MIRRORING"),
                    Unexpected(
                        "error does not apply: partition is STOPPED, which runs no mirror work",
                    ),
                    Unexpected(
                        "error does not apply: partition is STOPPED, which runs no mirror work",
                    ),
                    Unexpected("retry-due does not apply: partition is STOPPED, not FAILED"),
                ],
            ),
            (
                failed(S::Mirroring, true, 2),
                [
                    To(
                        S::Preparing,
                        &[A::CancelRetry, A::PersistState, A::RunPreparation],
                    ),
                    Refused("cannot pause: partition is FAILED, not MIRRORING"),
                    Refused("cannot resume: partition is FAILED, not PAUSED"),
                    To(
                        S::Stopping,
                        &[
                            A::CancelRetry,
                            A::StageStop,
                            A::PersistState,
                            A::RunFailover,
                        ],
                    ),
                    Unexpected("prepared does not apply: partition is FAILED, not PREPARING"),
                    Unexpected("stopped does not apply: partition is FAILED, not STOPPING"),
                    Unexpected("progressed does not apply: partition is FAILED, not MIRRORING"),
                    NoOp,
                    NoOp,
                    To(S::Mirroring, &[A::PersistState, A::StartFetching]),
                ],
            ),
            (
                failed(S::Mirroring, false, 0),
                [
                    To(S::Preparing, &[A::PersistState, A::RunPreparation]),
                    Refused("cannot pause: partition is FAILED, not MIRRORING"),
                    Refused("cannot resume: partition is FAILED, not PAUSED"),
                    To(
                        S::Stopping,
                        &[A::StageStop, A::PersistState, A::RunFailover],
                    ),
                    Unexpected("prepared does not apply: partition is FAILED, not PREPARING"),
                    Unexpected("stopped does not apply: partition is FAILED, not STOPPING"),
                    Unexpected("progressed does not apply: partition is FAILED, not MIRRORING"),
                    NoOp,
                    NoOp,
                    Unexpected(
                        "retry-due does not apply: partition is FAILED, its failure is not retryable",
                    ),
                ],
            ),
        ]
    }

    #[test]
    fn every_state_event_pair_follows_the_spec() {
        let table = table();
        let covered: std::collections::BTreeSet<S> = table.iter().map(|(s, _)| s.state).collect();
        assert_eq!(covered.len(), S::ALL.len(), "every state has a row");
        let mut pairs = 0;
        for (state, wants) in &table {
            for (event, want) in events().into_iter().zip(wants) {
                pairs += 1;
                let at = format!("{} + {event:?}", state.state);
                let got = next(state, event.clone());
                match (want, got) {
                    (To(to, actions), Ok((new, got_actions))) => {
                        assert_eq!(new.state(), *to, "{at}");
                        assert_eq!(got_actions, actions.to_vec(), "{at}");
                        assert_eq!(new.previous(), Some(state.state), "{at}");
                        match &event {
                            Event::Error { message, retryable } => {
                                let failure = new.failure().expect("FAILED has a failure");
                                assert_eq!(&failure.message, message, "{at}");
                                assert_eq!(failure.retryable, *retryable, "{at}");
                                assert_eq!(failure.from, state.state, "{at}");
                                assert_eq!(failure.retry_count, state.retries, "{at}");
                            }
                            Event::RetryDue => {
                                let old = state.failure().expect("failure");
                                assert_eq!(new.retries(), old.retry_count + 1, "{at}");
                                assert!(new.failure().is_none(), "{at}");
                            }
                            _ => {
                                assert!(new.failure().is_none(), "{at}");
                                assert_eq!(new.retries(), 0, "{at}");
                            }
                        }
                    }
                    (NoOp, Ok((new, actions))) => {
                        assert_eq!(&new, state, "{at}: a no-op keeps the state");
                        assert!(actions.is_empty(), "{at}: a no-op does nothing");
                    }
                    (
                        Refused(msg),
                        Err(
                            e @ TransitionError::Refused {
                                command, state: s, ..
                            },
                        ),
                    ) => {
                        assert_eq!(e.to_string(), *msg, "{at}");
                        assert_eq!((Some(command), s), (event.command(), state.state), "{at}");
                    }
                    (Unexpected(msg), Err(e @ TransitionError::Unexpected { .. })) => {
                        assert_eq!(e.to_string(), *msg, "{at}");
                        assert!(event.command().is_none(), "{at}: commands are refused");
                    }
                    (want, got) => panic!("{at}: want {want:?}, got {got:?}"),
                }
            }
        }
        assert_eq!(pairs, 7 * 10);
    }

    #[test]
    fn stop_is_never_refused() {
        for (state, _) in table() {
            assert!(next(&state, Event::Stop).is_ok(), "{}", state.state);
        }
    }

    #[test]
    fn retry_returns_to_the_state_it_came_from() {
        for (from, work) in [
            (S::Preparing, Some(A::RunPreparation)),
            (S::Mirroring, Some(A::StartFetching)),
            (S::Paused, None),
            (S::Stopping, Some(A::RunFailover)),
        ] {
            let (back, actions) = next(&failed(from, true, 4), Event::RetryDue).expect("retry");
            assert_eq!(back.state(), from);
            assert_eq!(back.previous(), Some(S::Failed));
            assert_eq!(back.retries(), 5);
            let stage = (from == S::Stopping).then_some(A::StageStop);
            let want: Vec<Action> = stage
                .into_iter()
                .chain(std::iter::once(A::PersistState))
                .chain(work)
                .collect();
            assert_eq!(actions, want, "{from}");
            // Failing again after the retry counts one more.
            let (again, actions) = next(&back, err(true)).expect("error");
            assert_eq!(again.failure().map(|f| f.retry_count), Some(5));
            assert_eq!(actions.last(), Some(&A::ScheduleRetry { retry_count: 5 }));
        }
    }

    #[test]
    fn progress_resets_the_retry_count() {
        let (mirroring, _) = next(&failed(S::Mirroring, true, 1), Event::RetryDue).expect("retry");
        assert_eq!(mirroring.retries(), 2);
        let (healthy, actions) = next(&mirroring, Event::Progressed).expect("progress");
        assert_eq!(healthy.retries(), 0);
        assert_eq!(healthy.state(), S::Mirroring);
        assert_eq!(healthy.previous(), mirroring.previous());
        assert_eq!(actions, vec![A::PersistState]);
        let (failed_again, _) = next(&healthy, err(true)).expect("error");
        assert_eq!(failed_again.failure().map(|f| f.retry_count), Some(0));
    }

    #[test]
    fn new_partition_starts_preparing_read_only() {
        let (state, actions) = initial();
        assert_eq!(state.state(), S::Preparing);
        assert_eq!(state.previous(), None);
        assert_eq!(
            actions,
            vec![A::SetWriteGuard, A::PersistState, A::RunPreparation]
        );
        let (state, _) = next(&state, Event::Prepared).expect("prepared");
        assert_eq!(state.state(), S::Mirroring);
    }

    #[test]
    fn full_cycle_failover_and_failback() {
        let (s, _) = initial();
        let (s, _) = next(&s, Event::Prepared).expect("prepared");
        let (s, _) = next(&s, Event::Pause).expect("pause");
        let (s, a) = next(&s, Event::Resume).expect("resume");
        assert_eq!(a, vec![A::PersistState, A::StartFetching], "no truncation");
        let (s, _) = next(&s, err(false)).expect("crc error");
        assert_eq!(s.state(), S::Failed);
        let (s, _) = next(&s, Event::Stop).expect("stop from FAILED");
        let (s, a) = next(&s, Event::Stopped).expect("stopped");
        assert_eq!(a, vec![A::PersistState, A::ClearWriteGuard]);
        assert!(is_writable(s.state()));
        let (s, a) = next(&s, Event::Start).expect("failback");
        assert_eq!(s.previous(), Some(S::Stopped));
        assert_eq!(a.first(), Some(&A::SetWriteGuard));
    }

    #[test]
    fn only_stopped_is_writable() {
        for s in S::ALL {
            assert_eq!(is_writable(s), s == S::Stopped, "{s}");
        }
    }

    #[test]
    fn stable_ids() {
        for s in S::ALL {
            assert_eq!(s.to_string(), s.as_str());
            assert_eq!(
                serde_json::to_string(&s).expect("ser"),
                format!("\"{}\"", s.as_str())
            );
            assert_eq!(
                serde_json::from_str::<S>(&format!("\"{s}\"")).expect("de"),
                s
            );
        }
        let ids: Vec<&str> = S::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            ids,
            [
                "PREPARING",
                "MIRRORING",
                "PAUSED",
                "STOPPING",
                "STOPPED",
                "FAILED"
            ]
        );
        assert_eq!(
            serde_json::to_string(&Command::Resume).expect("ser"),
            "\"resume\""
        );
    }

    #[test]
    fn state_serde_golden_and_checked() {
        let json = serde_json::to_string(&failed(S::Mirroring, true, 2)).expect("ser");
        assert_eq!(
            json,
            r#"{"state":"FAILED","previous":"MIRRORING","failure":{"message":"boom","retryable":true,"from":"MIRRORING","retry_count":2},"retries":2}"#
        );
        let json = serde_json::to_string(&initial().0).expect("ser");
        assert_eq!(json, r#"{"state":"PREPARING","previous":null,"retries":0}"#);
        assert_eq!(
            serde_json::from_str::<MirrorState>(
                r#"{"state":"PAUSED","previous":"MIRRORING","retries":0,"later":1}"#
            )
            .expect("unknown fields are ignored"),
            at(S::Paused, S::Mirroring)
        );
        for bad in [
            r#"{"state":"FAILED","previous":"MIRRORING","retries":0}"#,
            r#"{"state":"PAUSED","previous":null,"failure":{"message":"x","retryable":true,"from":"PAUSED","retry_count":0},"retries":0}"#,
            r#"{"state":"FAILED","previous":null,"failure":{"message":"x","retryable":true,"from":"STOPPED","retry_count":0},"retries":0}"#,
            r#"{"state":"FAILED","previous":null,"failure":{"message":"x","retryable":true,"from":"FAILED","retry_count":0},"retries":0}"#,
            r#"{"state":"FAILED","previous":null,"failure":{"message":"x","retryable":true,"from":"PAUSED","retry_count":1},"retries":0}"#,
            r#"{"state":"RUNNING","previous":null,"retries":0}"#,
        ] {
            assert!(serde_json::from_str::<MirrorState>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn restart_actions_restore_the_guard_and_the_work() {
        let cases = [
            (
                at(S::Preparing, S::Stopped),
                vec![A::SetWriteGuard, A::RunPreparation],
            ),
            (
                at(S::Mirroring, S::Paused),
                vec![A::SetWriteGuard, A::StartFetching],
            ),
            (at(S::Paused, S::Mirroring), vec![A::SetWriteGuard]),
            (
                at(S::Stopping, S::Paused),
                vec![A::SetWriteGuard, A::RunFailover],
            ),
            (
                at(S::Stopped, S::Stopping),
                vec![A::ClearWriteGuard, A::RaiseEpochToStop],
            ),
            (
                failed(S::Mirroring, true, 3),
                vec![A::SetWriteGuard, A::ScheduleRetry { retry_count: 3 }],
            ),
            (failed(S::Mirroring, false, 0), vec![A::SetWriteGuard]),
        ];
        for (state, want) in cases {
            assert_eq!(on_restart(&state), want, "{}", state.state);
        }
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Start),
            Just(Event::Pause),
            Just(Event::Resume),
            Just(Event::Stop),
            Just(Event::Prepared),
            Just(Event::Stopped),
            Just(Event::Progressed),
            ("[a-z ]{0,12}", any::<bool>())
                .prop_map(|(message, retryable)| Event::Error { message, retryable }),
            Just(Event::RetryDue),
        ]
    }

    proptest! {
        #[test]
        fn random_events_keep_the_invariants(events in proptest::collection::vec(event(), 0..60)) {
            let (mut state, actions) = initial();
            let mut guard = false;
            let apply = |actions: &[Action], guard: &mut bool| -> Result<(), TestCaseError> {
                for a in actions {
                    match a {
                        A::SetWriteGuard => {
                            prop_assert!(!*guard, "guard set twice");
                            *guard = true;
                        }
                        A::ClearWriteGuard => {
                            prop_assert!(*guard, "guard cleared twice");
                            *guard = false;
                        }
                        _ => {}
                    }
                }
                Ok(())
            };
            apply(&actions, &mut guard)?;
            // Model of the retry count: reset by commands and successes,
            // + 1 by a retry.
            let mut retries = 0u32;
            for event in events {
                let before = state.clone();
                match next(&state, event.clone()) {
                    Ok((new, actions)) => {
                        apply(&actions, &mut guard)?;
                        prop_assert_eq!(
                            new != before,
                            actions.contains(&A::PersistState),
                            "persisted exactly when changed: {:?} {:?}", event, actions
                        );
                        if new.state() != before.state() {
                            prop_assert_eq!(new.previous(), Some(before.state()));
                            if matches!(new.state(), S::Failed) {
                                let failure = new.failure().expect("failure");
                                prop_assert_eq!(failure.retry_count, retries);
                            } else if event == Event::RetryDue {
                                retries += 1;
                            } else {
                                retries = 0;
                            }
                        } else if event == Event::Progressed {
                            retries = 0;
                        }
                        prop_assert_eq!(new.retries(), retries);
                        state = new;
                    }
                    Err(e) => {
                        // Refused: names the state; nothing changed.
                        prop_assert!(e.to_string().contains(before.state().as_str()));
                    }
                }
                prop_assert_eq!(guard, !is_writable(state.state()), "guard in {}", state.state());
                match (state.state(), state.failure()) {
                    (S::Failed, Some(failure)) => {
                        prop_assert!(can_fail_in(failure.from), "from {}", failure.from);
                        prop_assert_eq!(failure.retry_count, state.retries());
                    }
                    (S::Failed, None) => prop_assert!(false, "FAILED without a failure"),
                    (_, failure) => prop_assert!(failure.is_none()),
                }
                let json = serde_json::to_string(&state).expect("ser");
                prop_assert_eq!(&serde_json::from_str::<MirrorState>(&json).expect("de"), &state);
                // A restart re-derives the same guard.
                let mut restarted = !guard;
                for a in on_restart(&state) {
                    match a {
                        A::SetWriteGuard => restarted = true,
                        A::ClearWriteGuard => restarted = false,
                        _ => {}
                    }
                }
                prop_assert_eq!(restarted, guard);
            }
        }
    }
}

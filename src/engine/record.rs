//! What the state store says, turned into evidence: per job (heartbeat, pending approvals,
//! past starts, the run's history, broken rules) and for the whole state_dir (whether a
//! machine watcher watches it).
//!
//! Everything here is read from the event log and the store's tables; nothing is kept beside
//! them, so a dashboard, a watcher and `mihari check` read the same answers. A read error
//! leaves the part empty: the store's own notice says it is unavailable. Nothing is written.

use std::path::Path;

use chrono::{DateTime, Duration, Utc};

use crate::config::{Config, JobSpec};
use crate::core::text::inert;
use crate::core::{Evidence, HeartbeatReading, History, Liveness, PendingApproval, Reading};
use crate::probe::lock::read_lock;
use crate::store::{Kind, Store};

/// The file the machine watcher locks in `state_dir` (JSON with its pid and start time).
pub const WATCH_LOCK: &str = "watch.lock";

/// The store's part of one job's evidence.
pub(super) struct JobRecord {
    heartbeat: Option<Reading<HeartbeatReading>>,
    pending: Vec<PendingApproval>,
    started_before: bool,
    history: History,
}

impl JobRecord {
    pub(super) fn apply(self, evidence: &mut Evidence) {
        evidence.heartbeat = self.heartbeat;
        evidence.pending_approvals = self.pending;
        evidence.started_before = self.started_before;
        evidence.history = self.history;
    }
}

/// The approval requests still pending, read once per gather and shared by every job.
pub(super) fn pending_approvals(store: Option<&Store>) -> Vec<crate::store::Approval> {
    store
        .and_then(|store| store.approvals(true).ok())
        .unwrap_or_default()
}

/// Reads what the store says of `job` as of `now`; `pending` is [`pending_approvals`].
pub(super) fn job_record(
    store: Option<&Store>,
    job: &JobSpec,
    pending: &[crate::store::Approval],
    now: DateTime<Utc>,
) -> JobRecord {
    let Some(store) = store else {
        return JobRecord {
            heartbeat: None,
            pending: Vec::new(),
            started_before: false,
            history: History::default(),
        };
    };
    let id = job.id.as_str();
    let heartbeat = match store.last_heartbeat(id) {
        Ok(Some(beat)) => Some(Reading::Found(HeartbeatReading {
            at: beat.at,
            done: beat.done,
            total: beat.total,
            position: beat.position.as_deref().map(inert),
            note: beat.note.as_deref().map(inert),
        })),
        Ok(None) => None,
        Err(error) => Some(Reading::Fault(inert(&error.to_string()))),
    };
    let pending = pending
        .iter()
        .filter(|a| a.job == id)
        .map(|a| PendingApproval {
            key: inert(&a.key),
            step: inert(&a.step),
            summary: inert(&a.summary),
            requested: a.requested,
        })
        .collect();
    JobRecord {
        heartbeat,
        pending,
        started_before: store.started_before(id).unwrap_or(false),
        history: history(store, id, now),
    }
}

/// The event log's history of one job: its attempt and run, approval waits, how long it has
/// waited to run, its spawns in the last 24 h, and the rules found broken.
fn history(store: &Store, job: &str, now: DateTime<Utc>) -> History {
    let day_ago = now - Duration::hours(24);
    let started = store.last_event(Some(job), &[Kind::Started]).ok().flatten();
    let run_id = started.as_ref().and_then(|e| e.run.clone());
    let run_started = run_id
        .as_deref()
        .and_then(|run| store.run_started(job, run).ok().flatten());
    let spawned = store
        .events_of(job, &[Kind::Spawned], day_ago)
        .unwrap_or_default();
    let waiting_since = store
        .last_event(Some(job), &[Kind::StateChanged])
        .ok()
        .flatten()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.ends_with("-> SHOULD_BE_RUNNING"))
        })
        .map(|e| e.at);

    let mut broken_rules = Vec::new();
    // The last word on the job's restarts: a failure stands until it starts again.
    if let Ok(Some(last)) =
        store.last_event(Some(job), &[Kind::Failed, Kind::Verified, Kind::Started])
        && last.kind == Kind::Failed.as_str()
    {
        broken_rules.push(format!(
            "the last restart failed at {}: {}",
            last.at.format("%Y-%m-%d %H:%M:%S UTC"),
            last.reason.unwrap_or_default()
        ));
    }
    if let Ok(Some(cap)) = store.last_event(Some(job), &[Kind::CapReached, Kind::Started])
        && cap.kind == Kind::CapReached.as_str()
        && cap.at > day_ago
    {
        broken_rules.push(format!(
            "the daily cap of automatic restarts was spent at {}",
            cap.at.format("%Y-%m-%d %H:%M:%S UTC")
        ));
    }
    for key in store.duplicate_spawns(job, day_ago).unwrap_or_default() {
        broken_rules.push(format!(
            "two spawns for one claim key ({key}): exactly-once broke"
        ));
    }
    History {
        attempt_started: started.as_ref().map(|e| e.at),
        run_id,
        run_started,
        approval_waits: store.approval_waits(job).unwrap_or_default(),
        waiting_since,
        auto_spawns_24h: spawned
            .iter()
            .filter(|e| e.actor == crate::store::Actor::Watcher)
            .map(|e| e.at)
            .collect(),
        spawns_24h: spawned.iter().map(|e| e.at).collect(),
        broken_rules,
    }
}

/// Whether a machine watcher watches a state_dir.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WatcherStatus {
    /// No watcher has ever run for this state_dir.
    #[default]
    Never,
    /// A long-running watcher holds the watch lock.
    Alive { pid: u32, since: DateTime<Utc> },
    /// `mihari watch --once` passes come often enough.
    Passes {
        last: DateTime<Utc>,
        interval_sec: u64,
    },
    /// A watcher ran, and nothing watches now.
    Gone { why: String },
    /// The watch lock's holder cannot be judged.
    Unknown { why: String },
}

impl WatcherStatus {
    /// The header's words.
    pub fn words(&self) -> String {
        match self {
            WatcherStatus::Never => "no watcher yet".to_string(),
            WatcherStatus::Alive { pid, since } => {
                format!(
                    "watcher alive (pid {pid}, since {})",
                    since.format("%m-%d %H:%M")
                )
            }
            WatcherStatus::Passes { last, .. } => {
                format!("watcher passes (last {})", last.format("%H:%M:%S"))
            }
            WatcherStatus::Gone { .. } => "NO WATCHER".to_string(),
            WatcherStatus::Unknown { .. } => "watcher unknown".to_string(),
        }
    }

    /// Whether the state is something to be loud about.
    pub fn is_missing(&self) -> bool {
        matches!(self, WatcherStatus::Gone { .. })
    }

    /// The broken rule when a watcher that was running is gone: RED, "no machine is watching".
    pub fn broken_rule(&self, _now: DateTime<Utc>) -> Option<String> {
        match self {
            WatcherStatus::Gone { why } => Some(format!("no machine is watching: {why}")),
            _ => None,
        }
    }

    /// A notice that changes no exit code: a state_dir that never had a watcher, or one whose
    /// watcher cannot be judged.
    pub fn notice(&self, state_dir: &Path) -> Option<String> {
        match self {
            WatcherStatus::Never => Some(format!(
                "no watcher yet: no machine watcher has run for state_dir '{}', so nothing \
                 watches these jobs while no one looks (mihari watch)",
                state_dir.display()
            )),
            WatcherStatus::Unknown { why } => Some(format!("watcher unknown: {why}")),
            _ => None,
        }
    }
}

/// Reads the watch lock and the event log: is a machine watching this state_dir?
pub fn watcher_status(store: Option<&Store>, config: &Config, now: DateTime<Utc>) -> WatcherStatus {
    let lock = config.settings.state_dir.join(WATCH_LOCK);
    match read_lock(&lock) {
        Reading::Found(holder) if holder.liveness == Liveness::Alive => {
            return WatcherStatus::Alive {
                pid: holder.pid.unwrap_or(0),
                since: holder.started_at.unwrap_or(holder.modified),
            };
        }
        Reading::Found(holder) if holder.liveness == Liveness::Unknown => {
            return WatcherStatus::Unknown {
                why: format!("the watch lock's holder: {}", holder.why),
            };
        }
        Reading::Fault(error) => return WatcherStatus::Unknown { why: error },
        _ => {}
    }
    let Some(store) = store else {
        return WatcherStatus::Never;
    };
    if let Ok(Some(pass)) = store.last_event(None, &[Kind::WatcherPass]) {
        let interval = pass
            .reason
            .as_deref()
            .and_then(|r| r.split("interval ").nth(1))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(300);
        let started = store
            .last_event(None, &[Kind::WatcherStarted])
            .ok()
            .flatten();
        let long_running_since = started.filter(|s| s.at > pass.at);
        if long_running_since.is_none() {
            if now - pass.at <= Duration::seconds((interval * 2) as i64) {
                return WatcherStatus::Passes {
                    last: pass.at,
                    interval_sec: interval,
                };
            }
            return WatcherStatus::Gone {
                why: format!(
                    "the last `mihari watch --once` pass was at {}, more than twice its \
                     interval ({interval} s) ago",
                    pass.at.format("%Y-%m-%d %H:%M:%S UTC")
                ),
            };
        }
    }
    match store.last_event(None, &[Kind::WatcherStarted, Kind::WatcherStopped]) {
        Ok(Some(last)) => WatcherStatus::Gone {
            why: if last.kind == Kind::WatcherStopped.as_str() {
                format!(
                    "the watcher was stopped at {}",
                    last.at.format("%Y-%m-%d %H:%M:%S UTC")
                )
            } else {
                format!(
                    "the watcher started at {} ({}) is gone",
                    last.at.format("%Y-%m-%d %H:%M:%S UTC"),
                    last.reason.unwrap_or_default()
                )
            },
        },
        _ => WatcherStatus::Never,
    }
}

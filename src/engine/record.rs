//! What the state store says, turned into evidence: per job (heartbeat, pending approvals,
//! past starts, the run's history, broken rules) and for the whole state_dir (whether a
//! machine watcher watches it).
//!
//! Everything here is read from the event log and the store's tables; nothing is kept beside
//! them, so a dashboard, a watcher and `mihari check` read the same answers. A read error
//! leaves the part empty: the store's own notice says it is unavailable. Nothing is written.
//! [`news_since`] says which jobs new events concern, so a write to the store costs a reading
//! of those jobs, not of every job.

use std::collections::HashSet;
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
    /// When a 24-hour window in the history moves (a spawn or a spent cap ages out): the
    /// record must be read again then, even if nothing is written.
    expires: Option<DateTime<Utc>>,
}

impl JobRecord {
    pub(super) fn expires(&self) -> Option<DateTime<Utc>> {
        self.expires
    }

    pub(super) fn apply(self, evidence: &mut Evidence) {
        evidence.heartbeat = self.heartbeat;
        evidence.pending_approvals = self.pending;
        evidence.started_before = self.started_before;
        evidence.history = self.history;
    }
}

/// How many of the newest events [`news_since`] reads. More new events than this since the
/// last reading means everything is read again.
const NEWS_WINDOW: usize = 128;

/// What was written to the event log since the event `seen`.
pub(super) struct StoreNews {
    /// The newest event id now (`None`: no store, or no events).
    pub newest: Option<i64>,
    /// The jobs the new events concern; `None` when that cannot be told (no earlier reading,
    /// too many new events, a read error, a store that was replaced): read every job.
    pub jobs: Option<HashSet<String>>,
}

/// The jobs whose events were written after event `seen`, from the newest events alone.
pub(super) fn news_since(store: Option<&Store>, seen: Option<i64>) -> StoreNews {
    let everything = |newest| StoreNews { newest, jobs: None };
    let Some(store) = store else {
        return everything(None);
    };
    let filter = crate::store::EventFilter {
        last: Some(if seen.is_some() { NEWS_WINDOW } else { 1 }),
        ..Default::default()
    };
    let Ok(newest) = store.events(&filter) else {
        return everything(None);
    };
    let newest_id = newest.last().map(|e| e.id);
    // No earlier reading, or no events any more (the store was replaced).
    let (Some(seen), Some(oldest)) = (seen, newest.first()) else {
        return everything(newest_id);
    };
    let replaced = newest_id.is_some_and(|id| id < seen);
    let overflowed = newest.len() == NEWS_WINDOW && oldest.id > seen;
    if replaced || overflowed {
        return everything(newest_id);
    }
    StoreNews {
        newest: newest_id,
        jobs: Some(
            newest
                .into_iter()
                .filter(|e| e.id > seen)
                .filter_map(|e| e.job)
                .collect(),
        ),
    }
}

/// Reads again only the parts of `job`'s record that change without an event: its heartbeat
/// (a heartbeat writes none) and its pending approvals (`pending`, read once per pass).
pub(super) fn refresh_unevented(
    store: Option<&Store>,
    job: &JobSpec,
    pending: &[crate::store::Approval],
    evidence: &mut Evidence,
) {
    let Some(store) = store else {
        return;
    };
    evidence.heartbeat = heartbeat_of(store, &job.id);
    evidence.pending_approvals = pending_of(pending, &job.id);
}

fn heartbeat_of(store: &Store, id: &str) -> Option<Reading<HeartbeatReading>> {
    match store.last_heartbeat(id) {
        Ok(Some(beat)) => Some(Reading::Found(HeartbeatReading {
            at: beat.at,
            done: beat.done,
            total: beat.total,
            position: beat.position.as_deref().map(inert),
            note: beat.note.as_deref().map(inert),
        })),
        Ok(None) => None,
        Err(error) => Some(Reading::Fault(inert(&error.to_string()))),
    }
}

fn pending_of(pending: &[crate::store::Approval], id: &str) -> Vec<PendingApproval> {
    pending
        .iter()
        .filter(|a| a.job == id)
        .map(|a| PendingApproval {
            key: inert(&a.key),
            step: inert(&a.step),
            summary: inert(&a.summary),
            requested: a.requested,
        })
        .collect()
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
            expires: None,
        };
    };
    let id = job.id.as_str();
    let (history, expires) = history(store, id, now);
    JobRecord {
        heartbeat: heartbeat_of(store, id),
        pending: pending_of(pending, id),
        started_before: store.started_before(id).unwrap_or(false),
        history,
        expires,
    }
}

/// The event log's history of one job: its attempt and run, approval waits, how long it has
/// waited to run, its spawns in the last 24 h, and the rules found broken; with the moment
/// its first 24-hour window moves.
fn history(store: &Store, job: &str, now: DateTime<Utc>) -> (History, Option<DateTime<Utc>>) {
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
    let day = Duration::hours(24);
    let mut expires = spawned.iter().map(|e| e.at + day).min();
    if let Ok(Some(cap)) = store.last_event(Some(job), &[Kind::CapReached, Kind::Started])
        && cap.kind == Kind::CapReached.as_str()
        && cap.at > day_ago
    {
        expires = Some(expires.map_or(cap.at + day, |at| at.min(cap.at + day)));
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
    let history = History {
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
    };
    (history, expires)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::store::{Actor, Heartbeat, NewEvent};

    fn store_in(dir: &Path) -> Store {
        Store::open(&dir.join("state"), Actor::Cli).expect("a store")
    }

    fn jobs_of(news: &StoreNews) -> Option<Vec<String>> {
        news.jobs.as_ref().map(|jobs| {
            let mut jobs: Vec<String> = jobs.iter().cloned().collect();
            jobs.sort();
            jobs
        })
    }

    #[test]
    fn news_names_the_jobs_of_new_events_and_reads_everything_when_it_cannot_tell() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = store_in(dir.path());
        assert!(news_since(None, Some(1)).jobs.is_none(), "no store");
        assert!(
            news_since(Some(&store), None).jobs.is_none(),
            "no reading yet"
        );

        let first = store.append(NewEvent::new(Kind::StateChanged).job("a"));
        let seen = first.expect("append");
        let news = news_since(Some(&store), Some(seen));
        assert_eq!(news.newest, Some(seen));
        assert_eq!(jobs_of(&news), Some(vec![]), "nothing new");

        for job in ["b", "c", "b"] {
            store
                .append(NewEvent::new(Kind::Started).job(job))
                .expect("append");
        }
        store
            .append(NewEvent::new(Kind::WatcherStarted))
            .expect("append");
        let news = news_since(Some(&store), Some(seen));
        assert_eq!(jobs_of(&news), Some(vec!["b".to_string(), "c".to_string()]));
        assert_eq!(news.newest, Some(seen + 4));

        // More new events than the window: every job.
        for _ in 0..NEWS_WINDOW {
            store
                .append(NewEvent::new(Kind::Detected).job("d"))
                .expect("append");
        }
        assert!(news_since(Some(&store), Some(seen)).jobs.is_none());
        // A reading newer than the store's newest event: the store was replaced.
        assert!(news_since(Some(&store), Some(i64::MAX)).jobs.is_none());
    }

    #[test]
    fn a_store_refresh_reads_the_concerned_jobs_and_every_heartbeat() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut yaml = String::from("settings:\n  state_dir: state\njobs:\n");
        for id in ["a", "b"] {
            yaml.push_str(&format!(
                "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    \
                 should_run_when: [resource_free]\n"
            ));
        }
        let config = crate::config::load_str(&yaml, &dir.path().join("jobs.yaml")).expect("config");
        let mut store = store_in(dir.path());
        store
            .append(NewEvent::new(Kind::WatcherStarted))
            .expect("append");
        let mut engine = Engine::new(config);
        let now = Utc::now();
        let before = engine.refresh(None, now);
        for id in ["a", "b"] {
            let seen = before.evidence_of(id).expect("evidence");
            assert!(!seen.started_before && seen.heartbeat.is_none());
        }

        // Another process: a start of b (an event), a heartbeat of a (no event).
        store
            .append(NewEvent::new(Kind::Started).job("b"))
            .expect("append");
        store
            .heartbeat(&Heartbeat {
                job: "a".to_string(),
                at: now,
                done: Some(3),
                total: None,
                position: None,
                note: None,
            })
            .expect("heartbeat");
        let after = engine.refresh_store(now);
        let a = after.evidence_of("a").expect("a");
        let b = after.evidence_of("b").expect("b");
        assert!(b.started_before, "b's new event is read");
        assert!(b.history.attempt_started.is_some());
        assert!(!a.started_before);
        assert!(
            matches!(&a.heartbeat, Some(Reading::Found(beat)) if beat.done == Some(3)),
            "a heartbeat writes no event and is still read: {:?}",
            a.heartbeat
        );

        // A spawn counts for 24 hours: the record is read again when it ages out, though
        // nothing is written.
        store
            .append(NewEvent::new(Kind::Spawned).job("a"))
            .expect("append");
        let now = Utc::now();
        let counted = engine.refresh_store(now);
        assert_eq!(
            counted
                .evidence_of("a")
                .expect("a")
                .history
                .spawns_24h
                .len(),
            1
        );
        let later = engine.refresh_store(now + Duration::hours(25));
        assert!(
            later
                .evidence_of("a")
                .expect("a")
                .history
                .spawns_24h
                .is_empty()
        );
    }
}

//! What the state store says, turned into evidence: per job (heartbeat, pending approvals,
//! past starts, the run's history, broken rules) and for the whole state_dir (whether a
//! machine watcher watches it).
//!
//! Everything here is read from the event log and the store's tables; nothing is kept beside
//! them, so a dashboard, a watcher and `mihari check` read the same answers. A read error is
//! returned, never read as an empty answer: the engine turns it into a store fault that
//! `check` reports as UNKNOWN. Nothing is written.
//! [`StoreView`] reads every job's part in a handful of queries per gather, so a thousand
//! jobs cost the same few reads as one.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use crate::config::{Config, JobSpec};
use crate::core::schedule::DueAfter;
use crate::core::text::inert;
use crate::core::{
    Evidence, HeartbeatReading, History, LastRun, Liveness, OperatorNote, PendingApproval, Reading,
    RunExit,
};
use crate::probe::lock::read_lock_as;
use crate::probe::safe_open::Role;
use crate::store::{Actor, Approval, ApprovalWait, Event, Heartbeat, Kind, Store, StoreError};

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
    /// Puts the store's part into `evidence`, with why the event log cannot be read (`None`
    /// when it can). A shared evidence is copied only when its part changed: an unchanged job
    /// stays one copy for the engine and every snapshot that shows it.
    pub(super) fn apply(
        mut self,
        evidence: &mut Arc<Evidence>,
        job: &JobSpec,
        unreadable: Option<&String>,
    ) {
        self.history.unreadable = unreadable.cloned();
        // A scheduled job's due time is walked again only when what it counts from (or its
        // schedule) changed: a farm's pass with no run ended walks no cron expression.
        if let Some(schedule) = &job.schedule {
            let history = &self.history;
            let anchor = history.last_success.or(history.first_seen);
            self.history.due_after = match (anchor, &evidence.history.due_after) {
                (Some(anchor), Some(kept)) if kept.is_for(schedule, anchor) => Some(kept.clone()),
                _ => DueAfter::of(schedule, history.last_success, history.first_seen).map(Arc::new),
            };
        }
        if evidence.heartbeat.as_deref() == self.heartbeat.as_ref()
            && evidence.pending_approvals == self.pending
            && evidence.started_before == self.started_before
            && evidence.history == self.history
        {
            return;
        }
        let evidence = Arc::make_mut(evidence);
        evidence.heartbeat = self.heartbeat.map(Box::new);
        evidence.pending_approvals = self.pending;
        evidence.started_before = self.started_before;
        evidence.history = self.history;
    }
}

/// The kinds whose newest event per job the history needs.
const NEWEST_KINDS: [Kind; 10] = [
    Kind::Started,
    Kind::Spawned,
    Kind::Failed,
    Kind::Verified,
    Kind::CapReached,
    Kind::StateChanged,
    Kind::Exited,
    Kind::Paused,
    Kind::Resumed,
    Kind::Acknowledged,
];

/// Everything the store says of every job, read in a handful of queries per gather (never a
/// handful per job: a thousand jobs cost the same few reads).
#[derive(Debug, Default)]
pub(super) struct StoreView {
    /// The newest event of each (job, kind) of [`NEWEST_KINDS`].
    /// The newest event of each of [`NEWEST_KINDS`], by job: looked up by the job's id alone
    /// (a key of two strings cost two copies of them for every lookup, ten a job each pass).
    newest: HashMap<String, Vec<Event>>,
    /// Spawns in the last 24 h, per job, oldest first.
    spawns: HashMap<String, Vec<Event>>,
    /// When each job's current run first started.
    run_started: HashMap<String, DateTime<Utc>>,
    heartbeats: HashMap<String, Heartbeat>,
    pending: Vec<Approval>,
    approval_waits: HashMap<String, Vec<ApprovalWait>>,
    /// Keys spawned twice in the last 24 h, per job, with the id of the newest such spawn.
    duplicates: HashMap<String, Vec<(String, i64)>>,
    /// The newest `state-changed ... -> RUNNING` of each job: when it was last seen healthy.
    healthy: HashMap<String, Event>,
    /// Restarts of each job that failed in its current episode.
    failures: HashMap<String, u64>,
    /// Spawns of each job ever recorded.
    spawn_counts: HashMap<String, u64>,
    /// For each scheduled job, the end of its last success and when mihari first saw it.
    scheduled: HashMap<String, ScheduleRecord>,
}

/// What a scheduled job's due time counts from, as the event log says.
#[derive(Debug, Default, Clone, Copy)]
struct ScheduleRecord {
    last_success: Option<DateTime<Utc>>,
    first_seen: Option<DateTime<Utc>>,
}

impl StoreView {
    /// Reads the view as of `now`. A read that fails fails the whole view: a damaged or
    /// unreadable store is a fault to show, never "nothing there".
    pub(super) fn read(
        store: &Store,
        jobs: &[JobSpec],
        now: DateTime<Utc>,
    ) -> Result<StoreView, StoreError> {
        let day_ago = now - Duration::hours(24);
        let mut view = StoreView::default();
        for event in store.newest_per_job(&NEWEST_KINDS)? {
            if let Some(job) = event.job.clone() {
                view.newest.entry(job).or_default().push(event);
            }
        }
        for event in store.events_since(&[Kind::Spawned], day_ago)? {
            if let Some(job) = event.job.clone() {
                view.spawns.entry(job).or_default().push(event);
            }
        }
        let runs: Vec<(String, String)> = view
            .newest
            .iter()
            .flat_map(|(job, events)| events.iter().map(move |event| (job, event)))
            .filter(|(_, event)| event.kind == Kind::Started.as_str())
            .filter_map(|(job, event)| Some((job.clone(), event.run.clone()?)))
            .collect();
        for (job, _, at) in store.runs_started(&runs)? {
            view.run_started.insert(job, at);
        }
        for beat in store.newest_heartbeats()? {
            view.heartbeats.insert(beat.job.clone(), beat);
        }
        view.pending = store.approvals(true)?;
        // Waits answered long ago cannot overlap a current attempt's budget window.
        for (job, wait) in store.approval_waits_since(now - Duration::days(30))? {
            view.approval_waits.entry(job).or_default().push(wait);
        }
        for (job, key, id) in store.duplicate_spawns_at_since(day_ago)? {
            view.duplicates.entry(job).or_default().push((key, id));
        }
        for event in store.newest_changes_into(crate::core::State::Running.as_str())? {
            if let Some(job) = event.job.clone() {
                view.healthy.insert(job, event);
            }
        }
        view.failures = store
            .restart_failures_in_episode(None)?
            .into_iter()
            .collect();
        view.spawn_counts = store.spawn_counts()?.into_iter().collect();
        // Only scheduled jobs ask, and only what the newest end does not say already: a job
        // whose last run succeeded needs no query, and one with a success never asks when it
        // was first seen. A farm of scheduled jobs that succeed costs nothing more.
        for job in jobs.iter().filter(|job| job.schedule.is_some()) {
            let newest_exit = view.newest(&job.id, &[Kind::Exited]);
            let last_success = match newest_exit {
                Some(exit)
                    if RunExit::from_words(exit.reason.as_deref().unwrap_or(""), exit.at)
                        .succeeded() =>
                {
                    Some(exit.at)
                }
                Some(_) => store.last_success(&job.id)?,
                None => None,
            };
            let first_seen = match last_success {
                Some(_) => None,
                None => store.first_seen(&job.id)?,
            };
            view.scheduled.insert(
                job.id.clone(),
                ScheduleRecord {
                    last_success,
                    first_seen,
                },
            );
        }
        Ok(view)
    }

    fn newest(&self, job: &str, kinds: &[Kind]) -> Option<&Event> {
        self.newest
            .get(job)?
            .iter()
            .filter(|event| kinds.iter().any(|kind| event.kind == kind.as_str()))
            .max_by_key(|event| event.id)
    }

    /// What the store says of `job` as of `now`.
    pub(super) fn record(&self, job: &JobSpec, now: DateTime<Utc>) -> JobRecord {
        let id = job.id.as_str();
        JobRecord {
            heartbeat: self.heartbeats.get(id).map(|beat| {
                Reading::Found(HeartbeatReading {
                    at: beat.at,
                    done: beat.done,
                    total: beat.total,
                    position: beat.position.as_deref().map(inert),
                    note: beat.note.as_deref().map(inert),
                })
            }),
            pending: {
                // Oldest first: the order they were asked in, numbered so in the detail and
                // in the approve key's chooser.
                let mut pending: Vec<PendingApproval> = self
                    .pending
                    .iter()
                    .filter(|a| a.job == id)
                    .map(|a| PendingApproval {
                        key: inert(&a.key),
                        step: inert(&a.step),
                        summary: inert(&a.summary),
                        requested: a.requested,
                        requested_by: a.requested_by.as_deref().map(inert),
                    })
                    .collect();
                pending.sort_by(|a, b| a.requested.cmp(&b.requested).then(a.key.cmp(&b.key)));
                pending
            },
            // A recorded end shows a run as well as a start does (`mihari heartbeat --exit`
            // reports runs started elsewhere, with no start).
            started_before: self
                .newest(id, &[Kind::Started, Kind::Spawned, Kind::Exited])
                .is_some(),
            history: self.history(id, now),
        }
    }

    /// One job's history: its attempt and run, approval waits, how long it has waited to
    /// run, its spawns in the last 24 h, and the rules found broken.
    fn history(&self, job: &str, now: DateTime<Utc>) -> History {
        let day_ago = now - Duration::hours(24);
        let started = self.newest(job, &[Kind::Started]);
        let spawned: Vec<&Event> = self
            .spawns
            .get(job)
            .map(|events| events.iter().filter(|e| e.at > day_ago).collect())
            .unwrap_or_default();
        let waiting_since = self
            .newest(job, &[Kind::StateChanged])
            .filter(|e| {
                e.reason
                    .as_deref()
                    .is_some_and(|r| r.ends_with("-> SHOULD_BE_RUNNING"))
            })
            .map(|e| e.at);
        // A broken rule ends when the job is next seen healthy (a verified restart, or the
        // watcher's `state-changed ... -> RUNNING`) or when the operator acknowledges it: only
        // rules recorded after the newest of those stand.
        let healthy = self.healthy.get(job);
        let verified = self.newest(job, &[Kind::Verified]);
        let acknowledged = self.newest(job, &[Kind::Acknowledged]);
        let ended_after = [healthy, verified, acknowledged]
            .into_iter()
            .flatten()
            .map(|e| e.id)
            .max()
            .unwrap_or(0);
        let failed_restarts = self.failures.get(job).copied().unwrap_or(0);
        let mut broken_rules = Vec::new();
        // The last word on the job's restarts: a failure stands until it starts again.
        if let Some(last) = self.newest(job, &[Kind::Failed, Kind::Verified, Kind::Started])
            && last.kind == Kind::Failed.as_str()
            && last.id > ended_after
        {
            let attempt = if failed_restarts > 1 {
                format!(" (attempt {failed_restarts} of this episode)")
            } else {
                String::new()
            };
            broken_rules.push(format!(
                "the last restart failed at {}{attempt}: {}",
                last.at.format("%Y-%m-%d %H:%M:%S UTC"),
                last.reason.clone().unwrap_or_default()
            ));
        }
        if let Some(cap) = self.newest(job, &[Kind::CapReached, Kind::Started])
            && cap.kind == Kind::CapReached.as_str()
            && cap.at > day_ago
            && cap.id > ended_after
        {
            broken_rules.push(format!(
                "the daily cap of automatic restarts was spent at {}",
                cap.at.format("%Y-%m-%d %H:%M:%S UTC")
            ));
        }
        for (key, _) in self
            .duplicates
            .get(job)
            .into_iter()
            .flatten()
            .filter(|(_, id)| *id > ended_after)
        {
            broken_rules.push(format!(
                "two spawns for one claim key ({key}): exactly-once broke"
            ));
        }
        let note = |event: &Event| {
            OperatorNote::from_words(
                event.reason.as_deref().unwrap_or(""),
                event.actor.as_str(),
                event.at,
            )
        };
        let paused = self
            .newest(job, &[Kind::Paused, Kind::Resumed])
            .filter(|e| e.kind == Kind::Paused.as_str())
            .map(note);
        let seen_healthy = [healthy, verified]
            .into_iter()
            .flatten()
            .map(|e| e.at)
            .max();
        History {
            attempt_started: started.map(|e| e.at),
            run_id: started.and_then(|e| e.run.clone()),
            run_started: self.run_started.get(job).copied(),
            approval_waits: self.approval_waits.get(job).cloned().unwrap_or_default(),
            waiting_since,
            auto_spawns_24h: spawned
                .iter()
                .filter(|e| e.actor == Actor::Watcher)
                .map(|e| e.at)
                .collect(),
            spawns_24h: spawned.iter().map(|e| e.at).collect(),
            broken_rules,
            last_run: self.last_run(job),
            last_success: self
                .scheduled
                .get(job)
                .and_then(|record| record.last_success),
            first_seen: self.scheduled.get(job).and_then(|record| record.first_seen),
            // Set when the record is applied, from what the job's evidence already holds.
            due_after: None,
            paused,
            acknowledged: acknowledged.map(note),
            seen_healthy,
            failed_restarts,
            restarts_total: self.spawn_counts.get(job).copied().unwrap_or(0),
            unreadable: None,
        }
    }

    /// The last run `mihari run` recorded for `job`: its newest `started`, and the `exited`
    /// after it, if any (an `exited` with no `started` recorded still says how a run ended).
    fn last_run(&self, job: &str) -> Option<LastRun> {
        let started = self.newest(job, &[Kind::Started]);
        let exited = self
            .newest(job, &[Kind::Exited])
            .filter(|exit| started.is_none_or(|start| exit.id > start.id));
        if started.is_none() && exited.is_none() {
            return None;
        }
        Some(LastRun {
            started: started.map(|e| e.at),
            exit: exited.map(|e| RunExit::from_words(e.reason.as_deref().unwrap_or(""), e.at)),
        })
    }
}

/// Whether a machine watcher watches a state_dir.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WatcherStatus {
    /// No watcher has ever run for this state_dir.
    #[default]
    Never,
    /// A long-running watcher holds the watch lock; `last_pass` is the last pass it recorded
    /// (the lock's modification time).
    Alive {
        pid: u32,
        since: DateTime<Utc>,
        last_pass: DateTime<Utc>,
    },
    /// The watch lock's holder lives, but its loop recorded no pass for longer than
    /// [`crate::core::watch::STUCK_AFTER_SEC`]: nothing is watched although it looks so.
    Stuck {
        pid: u32,
        last_pass: DateTime<Utc>,
        /// How long ago its last pass was, when judged.
        ago: chrono::TimeDelta,
    },
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

/// How far two readings of one process's start may lie apart. The start is worked out from
/// two clocks read one after the other (the wall clock, and the time since boot), so every
/// reading of the same start differs by microseconds, and by more when the clock is adjusted.
const SAME_START_WITHIN_MS: i64 = 1000;

impl WatcherStatus {
    /// Whether `other` is this live watcher still: the same process, read again (its lock
    /// beaten, say). A PID used again would need the PIDs to wrap round within the second
    /// its start is read to.
    pub fn same_live_watcher(&self, other: &WatcherStatus) -> bool {
        match (self, other) {
            (
                WatcherStatus::Alive { pid, since, .. },
                WatcherStatus::Alive {
                    pid: other_pid,
                    since: other_since,
                    ..
                },
            ) => {
                pid == other_pid
                    && (*since - *other_since).num_milliseconds().abs() < SAME_START_WITHIN_MS
            }
            _ => false,
        }
    }

    /// The header's words, times in UTC.
    pub fn words(&self) -> String {
        self.words_in(crate::probe::zone::Zone::Utc)
    }

    /// The header's words, times in `zone` (the header names it).
    pub fn words_in(&self, zone: crate::probe::zone::Zone) -> String {
        match self {
            WatcherStatus::Never => "no watcher yet".to_string(),
            WatcherStatus::Alive { pid, since, .. } => {
                format!(
                    "watcher alive (pid {pid}, since {})",
                    zone.format(*since, "%m-%d %H:%M")
                )
            }
            WatcherStatus::Passes { last, .. } => {
                format!("watcher passes (last {})", zone.format(*last, "%H:%M:%S"))
            }
            WatcherStatus::Stuck { pid, .. } => format!("WATCHER STUCK (pid {pid})"),
            WatcherStatus::Gone { .. } => "NO WATCHER".to_string(),
            WatcherStatus::Unknown { .. } => "watcher unknown".to_string(),
        }
    }

    /// The header's words on a narrow screen: the state alone.
    pub fn short_words(&self) -> &'static str {
        match self {
            WatcherStatus::Never => "no watcher",
            WatcherStatus::Alive { .. } | WatcherStatus::Passes { .. } => "watcher ok",
            WatcherStatus::Stuck { .. } => "WATCHER STUCK",
            WatcherStatus::Gone { .. } => "NO WATCHER",
            WatcherStatus::Unknown { .. } => "watcher ?",
        }
    }

    /// Whether the state is something to be loud about.
    pub fn is_missing(&self) -> bool {
        matches!(
            self,
            WatcherStatus::Gone { .. } | WatcherStatus::Stuck { .. }
        )
    }

    /// The broken rule when a watcher that was running is gone, or its loop stopped: RED, "no
    /// machine is watching".
    pub fn broken_rule(&self, _now: DateTime<Utc>) -> Option<String> {
        match self {
            WatcherStatus::Gone { why } => Some(format!("no machine is watching: {why}")),
            WatcherStatus::Stuck {
                pid,
                last_pass,
                ago,
            } => Some(format!(
                "no machine is watching: the watcher's process {pid} lives but its last pass \
                 was {} ago ({}): stuck? look at it (cat /proc/{pid}/stack, strace -p {pid}), \
                 then restart it",
                crate::core::assess::fmt_secs(ago.num_milliseconds() as f64 / 1000.0),
                last_pass.format("%Y-%m-%d %H:%M:%S UTC")
            )),
            _ => None,
        }
    }

    /// This status as it stands at `now`: a live watcher whose last recorded pass is too old
    /// is stuck ([`crate::core::watch::stuck_for`]). This process never judges itself stuck:
    /// judging is a pass.
    pub fn at(&self, now: DateTime<Utc>) -> WatcherStatus {
        match self {
            WatcherStatus::Alive { pid, last_pass, .. } if *pid != std::process::id() => {
                match crate::core::watch::stuck_for(*last_pass, now) {
                    Some(ago) => WatcherStatus::Stuck {
                        pid: *pid,
                        last_pass: *last_pass,
                        ago,
                    },
                    None => self.clone(),
                }
            }
            _ => self.clone(),
        }
    }

    /// When this status turns stuck by time alone, for the loop's timer.
    pub fn turns_stuck_at(&self) -> Option<DateTime<Utc>> {
        match self {
            WatcherStatus::Alive { pid, last_pass, .. } if *pid != std::process::id() => Some(
                *last_pass
                    + chrono::TimeDelta::seconds(crate::core::watch::STUCK_AFTER_SEC)
                    + chrono::TimeDelta::milliseconds(1),
            ),
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

/// What the watch lock alone says: a live watcher, or one that cannot be judged; `None` when
/// the event log must be asked.
pub fn watcher_from_lock(config: &Config) -> Option<WatcherStatus> {
    let lock = config.settings.state_dir.join(WATCH_LOCK);
    match read_lock_as(&lock, Role::WatchLock) {
        Reading::Found(holder) if holder.liveness == Liveness::Alive => {
            Some(WatcherStatus::Alive {
                pid: holder.pid.unwrap_or(0),
                since: holder.started_at.unwrap_or(holder.modified),
                last_pass: holder.modified,
            })
        }
        Reading::Found(holder) if holder.liveness == Liveness::Unknown => {
            Some(WatcherStatus::Unknown {
                why: format!("the watch lock's holder: {}", holder.why),
            })
        }
        Reading::Fault(error) => Some(WatcherStatus::Unknown { why: error }),
        _ => None,
    }
}

/// Reads the watch lock and the event log: is a machine watching this state_dir? A store
/// that cannot be read is an error, never "no watcher yet".
pub fn watcher_status(
    store: Option<&Store>,
    config: &Config,
    now: DateTime<Utc>,
) -> Result<WatcherStatus, StoreError> {
    if let Some(status) = watcher_from_lock(config) {
        return Ok(status);
    }
    let Some(store) = store else {
        return Ok(WatcherStatus::Never);
    };
    if let Some(pass) = store.last_event(None, &[Kind::WatcherPass])? {
        let interval = pass
            .reason
            .as_deref()
            .and_then(|r| r.split("interval ").nth(1))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(300);
        let started = store.last_event(None, &[Kind::WatcherStarted])?;
        let long_running_since = started.filter(|s| s.at > pass.at);
        if long_running_since.is_none() {
            if now - pass.at <= Duration::seconds((interval * 2) as i64) {
                return Ok(WatcherStatus::Passes {
                    last: pass.at,
                    interval_sec: interval,
                });
            }
            return Ok(WatcherStatus::Gone {
                why: format!(
                    "the last `mihari watch --once` pass was at {}, more than twice its \
                     interval ({interval} s) ago",
                    pass.at.format("%Y-%m-%d %H:%M:%S UTC")
                ),
            });
        }
    }
    Ok(
        match store.last_event(None, &[Kind::WatcherStarted, Kind::WatcherStopped])? {
            Some(last) => WatcherStatus::Gone {
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
            None => WatcherStatus::Never,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::store::{Actor, Heartbeat, NewEvent};

    fn store_in(dir: &Path) -> Store {
        Store::open(&dir.join("state"), Actor::Cli).expect("a store")
    }

    #[test]
    fn a_watcher_read_again_is_the_same_one_though_its_start_reads_a_little_apart() {
        let since = Utc::now();
        let alive = |pid, since, last_pass| WatcherStatus::Alive {
            pid,
            since,
            last_pass,
        };
        let first = alive(41, since, since);
        let beaten = since + Duration::seconds(30);
        // Microseconds apart, as two reads of one start are.
        let again = alive(41, since + Duration::microseconds(7), beaten);
        assert!(first.same_live_watcher(&again));
        assert!(again.same_live_watcher(&first));
        assert!(!first.same_live_watcher(&alive(42, since, beaten)));
        assert!(!first.same_live_watcher(&alive(41, since + Duration::seconds(5), beaten)));
        assert!(!first.same_live_watcher(&WatcherStatus::Never));
        let stuck = WatcherStatus::Stuck {
            pid: 41,
            last_pass: since,
            ago: Duration::seconds(600),
        };
        assert!(!stuck.same_live_watcher(&stuck));
    }

    #[test]
    fn the_view_reads_every_jobs_newest_events_in_a_few_queries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = store_in(dir.path());
        let now = Utc::now();
        for (job, kind) in [
            ("a", Kind::Started),
            ("b", Kind::Started),
            ("b", Kind::Failed),
            ("a", Kind::Spawned),
            ("a", Kind::Spawned),
        ] {
            let event = NewEvent::new(kind)
                .job(job)
                .run(Some(&format!("run-{job}")));
            store.append(event).expect("append");
        }
        let view = StoreView::read(&store, &[], now).expect("the view");
        let job = |id: &str| {
            crate::config::load_str(
                &format!(
                    "jobs:\n  - id: {id}\n    lock: l\n    log: l.log\n    \
                     should_run_when: [resource_free]\n"
                ),
                &dir.path().join("jobs.yaml"),
            )
            .expect("config")
            .jobs[0]
                .clone()
        };
        let a = view.record(&job("a"), now);
        assert!(a.started_before);
        assert_eq!(a.history.spawns_24h.len(), 2);
        assert_eq!(a.history.run_id.as_deref(), Some("run-a"));
        assert!(a.history.run_started.is_some());
        assert!(a.history.broken_rules.is_empty());
        let b = view.record(&job("b"), now);
        assert!(b.history.broken_rules[0].starts_with("the last restart failed"));
        let c = view.record(&job("c"), now);
        assert!(!c.started_before);
        // A day later the spawns have aged out of their window.
        let later = StoreView::read(&store, &[], now + Duration::hours(25)).expect("the view");
        assert!(
            later
                .record(&job("a"), now + Duration::hours(25))
                .history
                .spawns_24h
                .is_empty()
        );
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
            matches!(a.heartbeat.as_deref(), Some(Reading::Found(beat)) if beat.done == Some(3)),
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

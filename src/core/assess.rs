//! `assess()`: one job's evidence at one moment -> its state, its reasons and its bucket.
//!
//! This is SPEC §4 as a pure function. The clock is an argument; nothing here reads a file,
//! a process or the time. Two rules shape everything below: progress age is the freshest of
//! all sources (never the first one that exists: that was the 303 s false stall), and a fault
//! or an unknown is never rounded to "no progress" or "dead".

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::evidence::{
    Carried, CheckOutcome, CheckResult, Evidence, Fall, Figure, Liveness, LockHolder,
    MatchedProcess, Moved, OperatorNote, PendingApproval, Reading, RunExit,
};
use crate::config::{JobSpec, LogProgress, Predicate};

/// The state of a job, in the order SPEC §4 decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// The operator paused it on purpose (`mihari pause`): nobody restarts it and nothing
    /// escalates it until it is resumed. Decided first, whatever else is true.
    Paused,
    /// The lock exists but its holder is dead: followers would wait forever.
    DeadLockStale,
    /// The lock exists but the holder's liveness cannot be decided, or a predicate or a
    /// stall cannot be judged because a source is faulty. Never acted on.
    Unknown,
    /// Alive, but no progress for longer than `stall_sec`.
    Stalled,
    /// Alive and progressing.
    Running,
    /// Not running, and every `should_run_when` predicate holds: the 57 minutes nobody saw.
    ShouldBeRunning,
    /// Not running, and done has reached `expected_total` — or, with `not_succeeded`, the
    /// last run exited 0.
    Complete,
    /// Not running, and not due.
    NotRunning,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Paused => "PAUSED",
            State::DeadLockStale => "DEAD_LOCK_STALE",
            State::Unknown => "UNKNOWN",
            State::Stalled => "STALLED",
            State::Running => "RUNNING",
            State::ShouldBeRunning => "SHOULD_BE_RUNNING",
            State::Complete => "COMPLETE",
            State::NotRunning => "NOT_RUNNING",
        }
    }

    /// The state spelled `text` ("STALLED"), if it is one.
    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub const ALL: [State; 8] = [
        State::Paused,
        State::DeadLockStale,
        State::Unknown,
        State::Stalled,
        State::Running,
        State::ShouldBeRunning,
        State::Complete,
        State::NotRunning,
    ];
}

/// The sections of the action list, in the fixed order the operator works them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Bucket {
    Restart,
    Red,
    Stale,
    Dispatch,
}

impl Bucket {
    pub const ORDER: [Bucket; 4] = [
        Bucket::Restart,
        Bucket::Red,
        Bucket::Stale,
        Bucket::Dispatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Restart => "RESTART",
            Bucket::Red => "RED",
            Bucket::Stale => "STALE",
            Bucket::Dispatch => "DISPATCH",
        }
    }
}

/// Which source the progress age was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressSource {
    Log,
    ProgressFile,
    ProgressTable,
    Manifest,
    /// The job's own `mihari heartbeat`.
    Heartbeat,
    /// A position that moved in a regular file the live holder's tree has open (the kernel's
    /// reading, `io_progress`).
    Io,
    /// No source has a reading yet: the age counts from when the holder started.
    HolderStart,
}

impl ProgressSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ProgressSource::Log => "log",
            ProgressSource::ProgressFile => "progress_file",
            ProgressSource::ProgressTable => "progress_table",
            ProgressSource::Manifest => "manifest",
            ProgressSource::Heartbeat => "heartbeat",
            ProgressSource::Io => "io",
            ProgressSource::HolderStart => "holder_start",
        }
    }
}

/// The verdict on one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    pub id: String,
    pub state: State,
    /// The action-list section, or `None` for a job that needs nothing.
    pub bucket: Option<Bucket>,
    /// `None` when no lock file exists (or none is declared).
    pub liveness: Option<Liveness>,
    pub pid: Option<u32>,
    /// Seconds since the freshest reading of any source (never negative).
    pub progress_age_sec: Option<f64>,
    pub progress_source: Option<ProgressSource>,
    pub done: Option<u64>,
    pub expected_total: Option<u64>,
    /// Why, in plain words; the first reason explains the state.
    pub reasons: Vec<String>,
    pub checks: Vec<CheckOutcome>,
    /// Whether anything shows the job has run before (decides RESTART versus DISPATCH).
    pub started_before: bool,
    /// For a DISPATCH row while something is RED: why it is held. Set by [`super::order`].
    pub held: Option<String>,
    /// Approvals the job waits for; they show whatever the bucket.
    pub pending_approvals: Vec<PendingApproval>,
    /// How the last run `mihari run` recorded ended; `None` when none has ended (SPEC §8
    /// `last_exit`).
    pub last_exit: Option<RunExit>,
    /// Who paused the job, when and why, while it stays paused.
    pub paused: Option<OperatorNote>,
    /// How far along it is, 0 to 100: done of the total, or the percent its log prints.
    pub percent: Option<f64>,
    /// Items per second while it runs: as the job prints it (tqdm), else over the samples a
    /// long-running process kept of earlier passes; `None` when neither is known.
    pub rate_per_sec: Option<f64>,
    /// Seconds until done at that rate (or as tqdm prints it), while it runs; 0 once done.
    pub eta_sec: Option<f64>,
    /// The manifest's current phase.
    pub phase: Option<String>,
    /// Its stale markers (those `release-marker` may remove), in its `markers:` order, as
    /// judged: each path, age, holder and the judgment in words. `check --json` lists them so
    /// that the fleet screen can offer the one to release.
    pub stale_markers: Vec<super::marker::JudgedMarker>,
    /// Why only a human may restart it now, whatever `auto_restart` says: a standing rule
    /// about how its last run ended (exited 0 short of its total, failed after reaching it, a
    /// failed phase) asks a human to look first. `None` when nothing holds the machine back.
    pub restart_by_hand: Option<String>,
    /// The kernel's reading of the live holder's tree, when it was looked at: what moves, or
    /// what a quiet holder is doing (`check --json`'s `activity`).
    pub activity: Option<Box<super::activity::ActivityReading>>,
    /// The Slurm job that holds it (or last held it), as Slurm listed it, for a job declared
    /// with `slurm:`: its id, state, reason and exit in the row, the detail and `check --json`.
    pub slurm: Option<super::evidence::SlurmJob>,
    /// For a job with a `schedule`: the moment it is overdue unless a run ends with exit 0
    /// before it (`check --json`'s `next_due`); in the past once it is overdue. `None` without
    /// a schedule, or when it cannot be told (the event log cannot be read).
    pub next_due: Option<DateTime<Utc>>,
}

/// Judges one job. `now` is the moment of judgment; the evidence was gathered just before it.
pub fn assess(job: &JobSpec, evidence: &Evidence, now: DateTime<Utc>) -> Assessment {
    assess_sampled(job, evidence, &evidence.progress_samples, now)
}

/// [`assess`], with the earlier (time, done) samples a long-running engine kept for the rate
/// and the ETA given apart from the evidence: the evidence can then be shared by every
/// snapshot as it was gathered, never copied only to carry them.
pub fn assess_sampled(
    job: &JobSpec,
    evidence: &Evidence,
    samples: &[(DateTime<Utc>, u64)],
    now: DateTime<Utc>,
) -> Assessment {
    // A Slurm job's end is a run's end as `mihari run` records one, and its start is the
    // attempt's: read into the history here, so that every rule below reads them unchanged.
    let with_slurm;
    let evidence = match super::slurm::history_with_slurm(evidence) {
        Some(history) => {
            with_slurm = Evidence {
                history,
                ..evidence.clone()
            };
            &with_slurm
        }
        None => evidence,
    };
    let done = Done::of(evidence);
    let started_before = has_started_before(evidence);
    let mut reasons = Vec::new();

    let held = holder_of(evidence);
    let holder = held.as_ref().map(|held| &held.holder);
    let holder_started = holder
        .filter(|h| h.liveness == Liveness::Alive)
        .and_then(|h| h.started_at);
    let progress = Progress::of(job, evidence, now, holder_started);
    // With no reading at all the age counts from the holder's start — unless a source could
    // not be read: then the age is not known, and a fault is never rounded to "nothing yet".
    let age_sec = progress
        .newest
        .map(|(at, source)| (seconds_between(at, now), source))
        .or_else(|| {
            holder_started
                .filter(|_| progress.faults.is_empty())
                .map(|at| (seconds_between(at, now), ProgressSource::HolderStart))
        });
    let count = Count::of(job, evidence, &done);
    // A scheduled job's due time, once per judgment: the overdue predicate, the words and
    // `next_due` all read this one.
    let due = schedule_due(job, evidence, now);
    // A job with no holder declared whose last run reported its end after its freshest
    // progress is not running, however fresh that progress is (a cron line's log, written a
    // moment before its `mihari heartbeat --exit`).
    let ended = run_ended_after(evidence, progress.newest.map(|(at, _)| at));

    let judged = if let Some(Reading::Fault(error)) = &evidence.lock {
        reasons.push(format!(
            "lock: fault: {error}; cannot tell whether a holder is alive"
        ));
        State::Unknown
    } else if let Some(held) = &held {
        let state = judge_holder(
            job,
            &held.holder,
            &held.who,
            age_sec,
            &progress,
            &mut reasons,
        );
        reasons.extend(held.notes.iter().cloned());
        state
    } else if let Some(queued) = super::slurm::queued(evidence) {
        reasons.push(format!(
            "queued in Slurm: {}{}; not running, and not to be submitted again while it waits",
            queued.words(),
            queued
                .submitted
                .map(|at| format!(", submitted {} ago", fmt_secs(seconds_between(at, now))))
                .unwrap_or_default()
        ));
        State::NotRunning
    } else if let Some((age, source)) =
        age_sec.filter(|_| job.lock.is_none() && job.process.is_none() && job.slurm.is_none())
        && job.stall_limit().is_none_or(|limit| age <= limit as f64)
        // Complete comes first: fresh progress of a job that has counted its whole total is
        // the end of its work, not a run.
        && !count.is_whole()
        && !ended
    {
        reasons.push(format!(
            "no lock declared; progress {} ago ({}) counts as running",
            fmt_secs(age),
            source.as_str()
        ));
        State::Running
    } else if job.lock.is_none()
        && job.process.is_none()
        && !ended
        && let Some(doubt) = progress.doubt_words(job, age_sec.map(|(age, _)| age))
    {
        reasons.push(format!("no lock declared; {doubt}"));
        State::Unknown
    } else {
        judge_not_holding(job, evidence, &done, &count, due.as_ref(), &mut reasons)
    };
    // What the kernel says of a live holder (what moves, or what it does while quiet) belongs
    // to the reason that says it is alive: the row, the digest and the detail all show it.
    let activity = evidence
        .activity
        .as_deref()
        .and_then(|reading| reading.found())
        .filter(|_| held.is_some());
    if let Some(reading) = activity
        && matches!(judged, State::Running | State::Stalled)
        && let Some(first) = reasons.first_mut()
    {
        first.push_str("; ");
        first.push_str(&reading.words(now));
    }
    // A pause is the operator's on purpose: it comes first, and what the job would be
    // otherwise stays in the reasons, below it.
    let paused = evidence.history.paused.clone();
    let state = match &paused {
        Some(pause) => {
            reasons.insert(
                0,
                format!(
                    "paused by {} at {}: {} (mihari resume {})",
                    pause.by,
                    pause.at.format("%Y-%m-%d %H:%M:%S UTC"),
                    pause.reason,
                    job.id
                ),
            );
            if let Some(underneath) = reasons.get_mut(1) {
                *underneath = format!("underneath: {underneath}");
            }
            State::Paused
        }
        None => judged,
    };
    let last_exit = evidence
        .history
        .last_run
        .as_ref()
        .and_then(|run| run.exit.clone());

    // A job Slurm lists nothing of: said, with what that means for its StdOut.
    if let (Some(Reading::Empty), Some(spec)) = (evidence.slurm.as_deref(), &job.slurm) {
        let which = match &spec.job {
            crate::config::SlurmJobRef::Name(name) => format!("named '{name}'"),
            crate::config::SlurmJobRef::Id(id) => format!("{id}"),
        };
        reasons.push(format!(
            "slurm: Slurm lists no job {which} (it forgets an ended job after MinJobAge, 300 s \
             by default, where no accounting runs)"
        ));
    }
    // A Slurm job that ended: which one, and how, in Slurm's words.
    if let Some(Reading::Found(held)) = evidence.slurm.as_deref()
        && held.phase() == super::slurm::SlurmPhase::Ended
    {
        reasons.push(match held.ended {
            Some(at) => format!(
                "{} ended at {}",
                held.words(),
                at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
            None => format!("{} has ended", held.words()),
        });
    }
    // Done faults come from the same countable sources, so this names each fault once.
    for (source, error) in &progress.faults {
        reasons.push(format!("{source}: fault: {error}"));
    }
    reasons.extend(log_words(job, evidence, &progress, holder_started, now));
    for words in meter_words(job, evidence, now) {
        // A fall may already be the reason not_complete cannot be told.
        if !reasons.iter().any(|reason| reason.contains(&words)) {
            reasons.push(words);
        }
    }

    for approval in &evidence.pending_approvals {
        reasons.push(format!(
            "approval pending: step '{}': {} (mihari approval approve {})",
            approval.step, approval.summary, approval.key
        ));
    }

    let mut check_trouble = false;
    let mut check_failed = false;
    for check in &evidence.checks {
        match check.result {
            CheckResult::Pass => {}
            CheckResult::Fail => {
                check_failed = true;
                reasons.push(format!("check '{}' failed: {}", check.name, check.detail));
            }
            CheckResult::Fault | CheckResult::Refusal => {
                check_trouble = true;
                reasons.push(format!(
                    "check '{}': {}: {} (not a pass: cannot tell whether the rule holds)",
                    check.name,
                    check.result.as_str(),
                    check.detail
                ));
            }
        }
    }

    let (rules, restart_by_hand) = standing_rules(job, evidence, &count, judged);
    let broken = !rules.is_empty();
    for rule in &rules {
        reasons.push(format!("rule broken: {rule}"));
    }
    let mut timeouts = timeouts_exceeded(job, state, &evidence.history, now);
    timeouts.extend(super::slurm::queue_timeout(job, evidence, now));
    reasons.extend(timeouts.iter().cloned());
    // Stale markers (a dead holder, a bare one past stale_after_sec), and those that cannot
    // be judged: STALE, each named (SPEC §5).
    // With several stale, the bare `release-marker JOB` is refused ("name the one to
    // release"): each then suggests the command naming its own path.
    let judged_markers = super::marker::judge_markers(job, evidence, now);
    let stale_markers: Vec<super::marker::JudgedMarker> = judged_markers
        .iter()
        .filter(|marker| marker.state == super::marker::MarkerState::Stale)
        .cloned()
        .collect();
    let markers_to_look_at: Vec<String> = judged_markers
        .into_iter()
        .filter(|marker| marker.state.needs_a_look())
        .map(|marker| match marker.state {
            super::marker::MarkerState::Stale => format!(
                "{}: stale; look, then release it ({})",
                marker.words,
                super::marker::release_command(&job.id, &marker.path, stale_markers.len() > 1)
            ),
            _ => marker.words,
        })
        .collect();
    reasons.extend(markers_to_look_at.iter().cloned());

    // A broken rule (the daily cap spent, a failed restart, a duplicate spawn) puts the job in
    // RED even when it also needs a restart: it is a human's to look at first.
    let bucket = match state {
        // Paused on purpose: listed after the action list, never in it.
        State::Paused => None,
        _ if broken => Some(Bucket::Red),
        State::DeadLockStale => Some(Bucket::Restart),
        State::ShouldBeRunning if started_before => Some(Bucket::Restart),
        _ if check_failed => Some(Bucket::Red),
        State::Stalled | State::Unknown => Some(Bucket::Stale),
        _ if check_trouble || !timeouts.is_empty() || !markers_to_look_at.is_empty() => {
            Some(Bucket::Stale)
        }
        State::ShouldBeRunning => Some(Bucket::Dispatch),
        _ => None,
    };

    let liveness = match (&evidence.lock, holder) {
        (Some(Reading::Fault(_)), _) => Some(Liveness::Unknown),
        (_, Some(holder)) => Some(holder.liveness),
        _ => None,
    };

    let total = expected_total(job, evidence);
    let percent = percent_of(done.known(), total, evidence);
    let (rate_per_sec, eta_sec) = pace(judged, done.known(), total, evidence, samples, now);
    // With nothing else giving a total, the input the holder has read furthest does: its
    // percent, and the time left at the pace its position moves (a rate in bytes is not one
    // in items: `rate_per_sec` stays what the job counts).
    let input = activity
        .filter(|_| percent.is_none() && matches!(judged, State::Running | State::Stalled))
        .and_then(|reading| reading.input.as_ref());
    let percent = percent.or_else(|| input.and_then(|file| file.percent));
    let eta_sec = eta_sec.or_else(|| input.and_then(|file| file.eta_sec));
    let phase = evidence
        .manifest
        .as_ref()
        .and_then(|m| m.found())
        .and_then(|m| m.current_phase.clone());

    Assessment {
        id: job.id.clone(),
        state,
        bucket,
        liveness,
        pid: holder.and_then(|h| h.pid),
        progress_age_sec: age_sec.map(|(age, _)| age),
        progress_source: age_sec.map(|(_, source)| source),
        done: done.known(),
        expected_total: total,
        percent,
        rate_per_sec,
        eta_sec,
        phase,
        reasons,
        checks: evidence.checks.clone(),
        started_before,
        held: None,
        pending_approvals: evidence.pending_approvals.clone(),
        last_exit,
        paused,
        stale_markers,
        restart_by_hand,
        activity: activity.cloned().map(Box::new),
        slurm: evidence
            .slurm
            .as_deref()
            .and_then(|reading| reading.found())
            .cloned(),
        next_due: due.and_then(Result::ok).and_then(|due| due.by),
    }
}

/// When a job with a `schedule` is due, judged at `now` from the runs its event log holds;
/// `None` without a schedule. An event log that cannot be read is an error: its runs are not
/// known, and a job is never called overdue (or not) on what could not be read.
fn schedule_due(
    job: &JobSpec,
    evidence: &Evidence,
    now: DateTime<Utc>,
) -> Option<Result<super::schedule::Due, String>> {
    let schedule = job.schedule.as_ref()?;
    let history = &evidence.history;
    if let Some(why) = &history.unreadable {
        return Some(Err(format!("the event log cannot be read: {why}")));
    }
    let runs = super::schedule::Runs {
        last_success: history.last_success,
        last_exit: history.last_run.as_ref().and_then(|run| run.exit.as_ref()),
        first_seen: history.first_seen,
        known: history.due_after.as_deref(),
    };
    Some(super::schedule::judge(schedule, runs, now))
}

/// Whether the last recorded run ended at or after `newest` (the freshest progress reading,
/// to the second: an end reported with its heartbeat carries the heartbeat's time).
fn run_ended_after(evidence: &Evidence, newest: Option<DateTime<Utc>>) -> bool {
    let Some(exit) = evidence
        .history
        .last_run
        .as_ref()
        .and_then(|run| run.exit.as_ref())
    else {
        return false;
    };
    newest.is_some_and(|at| exit.at + chrono::Duration::seconds(1) >= at)
}

/// The live holder of `job` (its PID and start ticks) and how old its freshest progress is
/// over every source but the kernel's own reading (or, with none, since the holder started):
/// what decides whether the kernel is asked about it ([`super::activity::plan`]). `None` when
/// no holder is alive.
pub fn live_holder(
    job: &JobSpec,
    evidence: &Evidence,
    now: DateTime<Utc>,
) -> Option<((u32, u64), Option<f64>)> {
    let held = holder_of(evidence)?;
    let holder = &held.holder;
    if holder.liveness != Liveness::Alive {
        return None;
    }
    let identity = (holder.pid?, holder.start_ticks?);
    // Its own last reading left out: the other sources alone decide whether it is quiet.
    let others;
    let evidence = match evidence.activity {
        Some(_) => {
            others = Evidence {
                activity: None,
                ..evidence.clone()
            };
            &others
        }
        None => evidence,
    };
    let progress = Progress::of(job, evidence, now, holder.started_at);
    let age = progress
        .newest
        .map(|(at, _)| at)
        .or(holder.started_at)
        .map(|at| seconds_between(at, now));
    Some((identity, age))
}

/// Who holds a job, from every source that can say (SPEC §4 `holds`): the lock file (with a
/// PID, or flock'ed), the process matching `process.cmdline`, or the lock mihari keeps while
/// `mihari run` supervises a job declared by `process` alone.
struct Held {
    holder: LockHolder,
    /// The holder in the reasons' words: "lock held by pid 4242", "process 4242 (matches
    /// process.cmdline)".
    who: String,
    /// What the other sources said, when they disagree with the one that decides.
    notes: Vec<String>,
}

/// The holder that decides the state. A live holder wins over a dead or unknown one (a
/// stale lock file beside a live matching process is no reason to restart it a second time);
/// an unknown one wins over a dead one (unknown is never rounded to dead).
fn holder_of(evidence: &Evidence) -> Option<Held> {
    // A Slurm job has no lock and no process of its own here (the jobs file refuses them
    // beside `slurm:`): Slurm's word decides alone.
    if let Some(reading) = evidence.slurm.as_deref() {
        return slurm_holder(reading);
    }
    let lock = match &evidence.lock {
        Some(Reading::Found(holder)) => Some(Held {
            who: match holder.pid {
                Some(pid) => format!("lock held by pid {pid}"),
                None => "lock file exists".to_string(),
            },
            holder: holder.clone(),
            // The file names no PID: say how the holder was found.
            notes: if holder.liveness == Liveness::Alive
                && holder.why.starts_with(super::evidence::EMPTY_LOCK_WORDS)
            {
                vec![holder.why.clone()]
            } else {
                Vec::new()
            },
        }),
        _ => None,
    };
    let process = process_holder(evidence);
    match (lock, process) {
        (Some(lock), _) if lock.holder.liveness == Liveness::Alive => Some(lock),
        (Some(lock), Some(mut process))
            if process.holder.liveness == Liveness::Alive
                || (process.holder.liveness == Liveness::Unknown
                    && lock.holder.liveness == Liveness::Dead) =>
        {
            process.notes.push(format!(
                "{}, {}: {}",
                lock.who,
                lock.holder.liveness.as_str(),
                lock.holder.why
            ));
            Some(process)
        }
        (Some(lock), _) => Some(lock),
        (None, process) => process,
    }
}

/// The holder the process scan (and the lock mihari keeps for such a job) says: one match is
/// the holder, several are unknown, none is nobody — unless `mihari run` is supervising it.
fn process_holder(evidence: &Evidence) -> Option<Held> {
    let synthesized = |pid, liveness, why: String| LockHolder {
        pid,
        recorded_start: None,
        cmdline: None,
        run_id: None,
        modified: DateTime::UNIX_EPOCH,
        liveness,
        why,
        started_at: None,
        start_ticks: None,
        stopped: false,
    };
    match evidence.process.as_ref()? {
        Reading::Found(matches) if matches.len() == 1 => {
            let found: &MatchedProcess = &matches[0];
            let mut holder = synthesized(
                Some(found.pid),
                Liveness::Alive,
                format!(
                    "process {} ('{}') matches process.cmdline",
                    found.pid, found.cmdline
                ),
            );
            holder.cmdline = Some(found.cmdline.clone());
            holder.started_at = found.started_at;
            holder.start_ticks = Some(found.start_ticks);
            holder.stopped = found.stopped;
            Some(Held {
                who: format!("process {} ('{}')", found.pid, found.cmdline),
                holder,
                notes: Vec::new(),
            })
        }
        Reading::Found(matches) => {
            let named: Vec<String> = matches
                .iter()
                .take(5)
                .map(|m| {
                    let stopped = if m.stopped { ", stopped" } else { "" };
                    format!("pid {} ('{}'{stopped})", m.pid, m.cmdline)
                })
                .collect();
            let more = match matches.len() {
                0..=5 => String::new(),
                n => format!(" and {} more", n - 5),
            };
            Some(Held {
                who: format!("{} processes match process.cmdline", matches.len()),
                holder: synthesized(
                    None,
                    Liveness::Unknown,
                    format!(
                        "{}{more}: cannot tell which is the job; narrow process.cmdline \
                         (anchor it with '^', name more of its arguments) or add process.user \
                         so that one process matches",
                        named.join(", ")
                    ),
                ),
                notes: Vec::new(),
            })
        }
        Reading::Fault(error) => Some(Held {
            who: "process".to_string(),
            holder: synthesized(None, Liveness::Unknown, format!("fault: {error}")),
            notes: Vec::new(),
        }),
        Reading::Empty => match evidence.kept_lock.as_deref() {
            Some(Reading::Found(kept)) if kept.liveness != Liveness::Dead => Some(Held {
                who: match kept.pid {
                    Some(pid) => format!("'mihari run' pid {pid} (the run lock mihari keeps)"),
                    None => "the run lock mihari keeps".to_string(),
                },
                holder: kept.clone(),
                notes: vec!["no process matches process.cmdline yet".to_string()],
            }),
            Some(Reading::Fault(error)) => Some(Held {
                who: "the run lock mihari keeps".to_string(),
                holder: synthesized(None, Liveness::Unknown, format!("fault: {error}")),
                notes: Vec::new(),
            }),
            _ => None,
        },
    }
}

/// The holder Slurm's reading says: a running job is alive (a suspended one too, said so), a
/// state this mihari does not know or a reading that failed is unknown; a queued job, an
/// ended one and none at all hold nothing (the state is decided without a holder).
fn slurm_holder(reading: &Reading<super::evidence::SlurmJob>) -> Option<Held> {
    use super::slurm::SlurmPhase;
    let synthesized = |liveness, why: String| LockHolder {
        pid: None,
        recorded_start: None,
        cmdline: None,
        run_id: None,
        modified: DateTime::UNIX_EPOCH,
        liveness,
        why,
        started_at: None,
        start_ticks: None,
        stopped: false,
    };
    match reading {
        Reading::Fault(error) => Some(Held {
            who: "Slurm".to_string(),
            holder: synthesized(Liveness::Unknown, format!("slurm: fault: {error}")),
            notes: Vec::new(),
        }),
        Reading::Empty => None,
        Reading::Found(job) => match job.phase() {
            SlurmPhase::Queued | SlurmPhase::Ended => None,
            SlurmPhase::Alive => {
                let mut holder = synthesized(Liveness::Alive, job.words());
                holder.started_at = job.started;
                Some(Held {
                    who: job.words(),
                    holder,
                    notes: Vec::new(),
                })
            }
            SlurmPhase::Suspended => {
                let mut holder = synthesized(Liveness::Alive, job.words());
                holder.started_at = job.started;
                Some(Held {
                    who: format!(
                        "{}, suspended: it makes no progress until it is resumed \
                         (scontrol resume {})",
                        job.words(),
                        job.shown_id()
                    ),
                    holder,
                    notes: Vec::new(),
                })
            }
            SlurmPhase::Unknown => Some(Held {
                who: job.words(),
                holder: synthesized(
                    Liveness::Unknown,
                    format!(
                        "Slurm state '{}' is not one this mihari knows: cannot tell whether \
                         it runs",
                        job.state
                    ),
                ),
                notes: Vec::new(),
            }),
        },
    }
}

/// " and stopped (state 'T': Ctrl-Z or SIGSTOP; it goes on after SIGCONT)" for a stopped
/// holder, else nothing.
fn stopped_words(holder: &LockHolder) -> &'static str {
    if holder.stopped {
        " and stopped (state T: Ctrl-Z or SIGSTOP; it goes on after SIGCONT, fg or kill -CONT)"
    } else {
        ""
    }
}

/// The job's broken rules that still stand at this judgment, and why only a human may restart
/// it now (the first of them that asks a human to look before it runs again).
///
/// The event log's rules (a failed restart, the cap spent, a duplicate spawn) and those of how
/// the last run ended (SPEC §4, "an exit outranks a count": it failed after reaching its total,
/// or it exited 0 short of it) end when the job is seen healthy — RUNNING now, or a
/// `state-changed ... -> RUNNING` or `verified` newer than them in the event log — or when the
/// operator acknowledges them (`mihari ack`): until one of the two, they stay RED. A failed
/// phase in the manifest stands while the manifest says so, running or not, until an
/// acknowledgement newer than the manifest's `updated_at`.
fn standing_rules(
    job: &JobSpec,
    evidence: &Evidence,
    count: &Count,
    state: State,
) -> (Vec<String>, Option<String>) {
    let history = &evidence.history;
    let mut rules = Vec::new();
    let mut by_hand = None;
    if let Some(rule) = failed_phases_rule(job, evidence) {
        by_hand = Some(rule.clone());
        rules.push(rule);
    }
    if state == State::Running {
        return (rules, by_hand);
    }
    rules.extend(history.broken_rules.iter().cloned());
    let ended = [
        history.acknowledged.as_ref().map(|ack| ack.at),
        history.seen_healthy,
    ]
    .into_iter()
    .flatten()
    .max();
    if let Some(exit) = last_exit_of_count(evidence)
        && ended.is_none_or(|ended| exit.at > ended)
    {
        let at = exit.at.format("%Y-%m-%d %H:%M:%S UTC");
        let rule = match count {
            Count::Whole(counted) if !exit.succeeded() => Some(format!(
                "{} after {counted}: the last run failed ({at}); an exit outranks a count, so \
                 it is not complete: look at its log, then restart it by hand or acknowledge \
                 (mihari ack {})",
                exit.words(),
                job.id
            )),
            Count::Short(counted) if exit.succeeded() => Some(format!(
                "exited 0 at {counted} ({at}): the run ended as a success short of its total; \
                 look at why, then restart it by hand or acknowledge (mihari ack {})",
                job.id
            )),
            _ => None,
        };
        if let Some(rule) = rule {
            by_hand.get_or_insert_with(|| rule.clone());
            rules.push(rule);
        }
    }
    (rules, by_hand)
}

/// The rule a manifest's failed phases break, while no acknowledgement newer than the
/// manifest's `updated_at` has ended it: "phase 'publish' failed".
fn failed_phases_rule(job: &JobSpec, evidence: &Evidence) -> Option<String> {
    let manifest = evidence.manifest.as_deref()?.found()?;
    let failed = &manifest.failed_phases;
    if failed.is_empty()
        || evidence
            .history
            .acknowledged
            .as_ref()
            .is_some_and(|ack| ack.at >= manifest.updated_at)
    {
        return None;
    }
    Some(format!(
        "{} (manifest run '{}', updated {}): look at it, then restart it by hand or \
         acknowledge (mihari ack {})",
        failed_phase_words(failed),
        manifest.run_id.as_deref().unwrap_or("-"),
        manifest.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
        job.id
    ))
}

/// "phase 'publish' failed", "phases 'fetch' and 'publish' failed", "phases 'a', 'b', 'c'
/// and 4 more failed".
fn failed_phase_words(failed: &[String]) -> String {
    const NAMED: usize = 3;
    let quoted: Vec<String> = failed
        .iter()
        .take(NAMED)
        .map(|p| format!("'{p}'"))
        .collect();
    match failed.len() {
        1 => format!("phase {} failed", quoted[0]),
        n if n <= NAMED => format!(
            "phases {} and {} failed",
            quoted[..n - 1].join(", "),
            quoted[n - 1]
        ),
        n => format!("phases {} and {} more failed", quoted.join(", "), n - NAMED),
    }
}

/// How far what the job counted got, set against its total: what a run's exit is judged
/// against (SPEC §4, "an exit outranks a count").
enum Count {
    /// Done reached the total, or the log printed 100 %: "50 of 50", "100%".
    Whole(String),
    /// Short of it: "59 of 260", "70%".
    Short(String),
    /// Nothing counted, no total, or a countable source that could not be read.
    Unknown,
}

impl Count {
    fn of(job: &JobSpec, evidence: &Evidence, done: &Done) -> Count {
        match (done.known(), expected_total(job, evidence)) {
            (Some(done), Some(total)) => {
                let words = format!("{done} of {total}");
                if done >= total {
                    Count::Whole(words)
                } else {
                    Count::Short(words)
                }
            }
            (_, None) => match printed_percent(evidence) {
                Some(percent) if percent >= 100.0 => Count::Whole(format!("{percent}%")),
                Some(percent) => Count::Short(format!("{percent}%")),
                None => Count::Unknown,
            },
            _ => Count::Unknown,
        }
    }

    fn is_whole(&self) -> bool {
        matches!(self, Count::Whole(_))
    }
}

/// The end of the last run `mihari run` recorded, when what the job counted belongs to that
/// run: nothing was counted after it ended. A count read after it (a progress file, a table
/// row or a heartbeat newer than the exit) came from a later run started elsewhere, and the
/// old exit says nothing of it. A run that is alive now is judged as running before this is
/// asked; a newer run recorded after a failure has its own end (or none yet).
fn last_exit_of_count(evidence: &Evidence) -> Option<&RunExit> {
    let exit = evidence.history.last_run.as_ref()?.exit.as_ref()?;
    let after = exit.at + chrono::Duration::seconds(1);
    let counted_after = [
        evidence
            .progress_file
            .as_ref()
            .and_then(|r| r.found())
            .map(|count| count.modified),
        evidence
            .progress_table
            .as_ref()
            .and_then(|r| r.found())
            .map(|table| table.newest),
        evidence
            .heartbeat
            .as_deref()
            .and_then(|r| r.found())
            .map(|beat| beat.at),
    ]
    .into_iter()
    .flatten()
    .any(|at| at > after);
    (!counted_after).then_some(exit)
}

/// The state of a job whose holder is known: its lock file exists, or a process matches.
fn judge_holder(
    job: &JobSpec,
    holder: &LockHolder,
    who: &str,
    age_sec: Option<(f64, ProgressSource)>,
    progress: &Progress,
    reasons: &mut Vec<String>,
) -> State {
    let stopped = stopped_words(holder);
    match holder.liveness {
        Liveness::Dead => {
            reasons.push(format!("{who}, process gone: {}", holder.why));
            State::DeadLockStale
        }
        Liveness::Unknown => {
            reasons.push(format!(
                "{who}, liveness unknown: {}; never released or restarted while unknown",
                holder.why
            ));
            State::Unknown
        }
        Liveness::Alive => match age_sec {
            Some((age, _)) if let Some(doubt) = progress.doubt_words(job, Some(age)) => {
                reasons.push(format!("{who}, alive{stopped}; {doubt}"));
                State::Unknown
            }
            Some((age, source)) if job.stall_limit().is_some_and(|limit| age > limit as f64) => {
                if progress.faults.is_empty() && progress.missing.is_none() {
                    reasons.push(format!(
                        "{who}, alive{stopped}, but no progress for {} (freshest: {}; \
                         stall_sec {})",
                        fmt_secs(age),
                        source.as_str(),
                        job.stall_sec
                    ));
                    State::Stalled
                } else if progress.faults.is_empty() {
                    reasons.push(format!(
                        "{who}, alive; nothing seen for {} (stall_sec {}), but the log is \
                         missing: {}: cannot tell a stall from a wrong 'log' path",
                        fmt_secs(age),
                        job.stall_sec,
                        progress.missing.as_deref().unwrap_or_default()
                    ));
                    State::Unknown
                } else {
                    let faulty: Vec<&str> = progress.faults.iter().map(|(s, _)| *s).collect();
                    reasons.push(format!(
                        "{who}, alive{stopped}; no progress seen for {} (stall_sec {}), but {} \
                         could not be read: cannot tell a stall from a read failure",
                        fmt_secs(age),
                        job.stall_sec,
                        faulty.join(" and ")
                    ));
                    State::Unknown
                }
            }
            // A service watched by its holder alone: there is no progress to age.
            None | Some((_, ProgressSource::HolderStart))
                if job.stall_never && !job.has_progress_source() =>
            {
                reasons.push(format!(
                    "{who}, alive{stopped}; stall_sec never and no progress source: watched by \
                     its holder alone, never STALLED"
                ));
                State::Running
            }
            Some((age, source)) => {
                let never = if job.stall_never {
                    "; stall_sec never: idle by nature, never STALLED"
                } else {
                    ""
                };
                reasons.push(format!(
                    "{who}, alive{stopped}; progress {} ago ({}){never}",
                    fmt_secs(age),
                    source.as_str()
                ));
                State::Running
            }
            // No reading, and a source that could not be read: how old its progress is cannot
            // be told, and the holder's start is no stand-in for it (that would round a fault
            // to "nothing yet").
            None if !progress.faults.is_empty() && !job.stall_never => {
                let faulty: Vec<&str> = progress.faults.iter().map(|(s, _)| *s).collect();
                reasons.push(format!(
                    "{who}, alive{stopped}; its progress age is not known: {} could not be read \
                     and no other source has a reading (cannot tell running from stalled)",
                    faulty.join(" and ")
                ));
                State::Unknown
            }
            None if !progress.faults.is_empty() => {
                reasons.push(format!(
                    "{who}, alive{stopped}; no progress source could be read; stall_sec never: \
                     idle by nature, never STALLED"
                ));
                State::Running
            }
            None => {
                reasons.push(format!("{who}, alive{stopped}; no progress recorded yet"));
                State::Running
            }
        },
    }
}

/// The state of a job that holds no lock: should it run, is it complete, or neither?
fn judge_not_holding(
    job: &JobSpec,
    evidence: &Evidence,
    done: &Done,
    count: &Count,
    due: Option<&Result<super::schedule::Due, String>>,
    reasons: &mut Vec<String>,
) -> State {
    let mut held = Vec::new();
    let mut failed = Vec::new();
    let mut undecidable = Vec::new();
    for predicate in &job.should_run_when {
        // A scheduled job's own words come first ("overdue: the last success was ...").
        if *predicate == Predicate::Overdue
            && let Some(Ok(due)) = due
        {
            if due.overdue {
                held.insert(0, due.words.clone());
            } else {
                failed.insert(0, due.words.clone());
            }
            continue;
        }
        match evaluate(*predicate, job, evidence, done, due) {
            Verdict::Holds(why) => held.push(format!("{} ({why})", predicate.as_str())),
            Verdict::Fails(why) => failed.push(format!("{} is false: {why}", predicate.as_str())),
            Verdict::Undecidable(why) => {
                undecidable.push(format!("{} cannot be evaluated: {why}", predicate.as_str()))
            }
        }
    }
    let total = expected_total(job, evidence);
    let counted_complete = count.is_whole();
    // With not_succeeded, a run that exited 0 is the end of the job — unless what it counted
    // says it stopped short (then it is a broken rule, not COMPLETE).
    let succeeded = evidence
        .history
        .last_run
        .as_ref()
        .and_then(|run| run.exit.as_ref())
        .filter(|exit| exit.succeeded())
        .filter(|_| job.should_run_when.contains(&Predicate::NotSucceeded));
    let short = matches!(count, Count::Short(_));
    // An exit outranks a count: a last run that failed, or a phase its manifest says failed,
    // is never the end of the job, whatever was counted.
    let not_complete_because = match (last_exit_of_count(evidence), count) {
        (Some(exit), Count::Whole(counted)) if !exit.succeeded() => Some(format!(
            "the last run {} after {counted} at {} (an exit outranks a count)",
            exit.words(),
            exit.at.format("%Y-%m-%d %H:%M:%S UTC")
        )),
        _ => evidence
            .manifest
            .as_deref()
            .and_then(|reading| reading.found())
            .filter(|manifest| !manifest.failed_phases.is_empty())
            .map(|manifest| failed_phase_words(&manifest.failed_phases)),
    };
    let complete =
        not_complete_because.is_none() && (counted_complete || (succeeded.is_some() && !short));
    if !undecidable.is_empty() {
        reasons.push(format!(
            "not running; cannot tell whether it should run: {}",
            undecidable.join("; ")
        ));
        State::Unknown
    } else if failed.is_empty() {
        match job.schedule {
            // "overdue: the last success was 12:00, due every 20 min + 5 min grace", and any
            // other predicate that holds beside it.
            Some(_) => reasons.push(held.join(" and ")),
            None => reasons.push(format!("not running, but should: {}", held.join(" and "))),
        }
        State::ShouldBeRunning
    } else if job.schedule.is_some() {
        // Idle between its runs by plan: never COMPLETE, whatever it counted, since it runs
        // again at its next due time ("ran 12:00 ok; next due by 12:25").
        let mut words = failed.join("; ");
        if !held.is_empty() {
            words = format!("not due: {words}; though {}", held.join(" and "));
        }
        reasons.push(words);
        State::NotRunning
    } else if complete {
        match succeeded {
            Some(exit) if !counted_complete => reasons.push(format!(
                "complete: the last run exited 0 at {}",
                exit.at.format("%Y-%m-%d %H:%M:%S UTC")
            )),
            _ => match total {
                Some(total) => reasons.push(format!(
                    "complete: {} of {total} done",
                    done.known().unwrap_or(0)
                )),
                None => reasons.push("complete: 100% done, as its log prints".to_string()),
            },
        }
        State::Complete
    } else if let Some(why) = not_complete_because {
        reasons.push(format!(
            "not running, and not complete: {why}; not due: {}",
            failed.join("; ")
        ));
        State::NotRunning
    } else {
        reasons.push(format!("not running, and not due: {}", failed.join("; ")));
        State::NotRunning
    }
}

pub(super) enum Verdict {
    Holds(String),
    Fails(String),
    Undecidable(String),
}

fn evaluate(
    predicate: Predicate,
    job: &JobSpec,
    evidence: &Evidence,
    done: &Done,
    due: Option<&Result<super::schedule::Due, String>>,
) -> Verdict {
    match predicate {
        Predicate::Overdue => match due {
            Some(Ok(due)) if due.overdue => Verdict::Holds(due.words.clone()),
            Some(Ok(due)) => Verdict::Fails(due.words.clone()),
            Some(Err(why)) => Verdict::Undecidable(why.clone()),
            None => Verdict::Undecidable("no schedule is declared".to_string()),
        },
        Predicate::NotComplete => match (done, expected_total(job, evidence)) {
            (Done::Fault(error), _) => Verdict::Undecidable(error.clone()),
            (_, None) if let Some((figure, fell)) = fallen(evidence) => {
                Verdict::Undecidable(fall_words(job, figure, fell))
            }
            (_, None) if printed_percent(evidence).is_some() => {
                let percent = printed_percent(evidence).unwrap_or(0.0);
                if percent < 100.0 {
                    Verdict::Holds(format!("{percent}% done, as its log prints"))
                } else {
                    Verdict::Fails(format!("{percent}% done, as its log prints"))
                }
            }
            // A job whose total is printed has printed nothing yet: it has done nothing.
            (_, None) if matches!(evidence.log_progress.as_deref(), Some(Reading::Empty)) => {
                Verdict::Holds("its log prints no progress yet".to_string())
            }
            (_, None) if job.reports_total() => Verdict::Undecidable(
                "no expected_total, and the progress table's total_column is NULL in its \
                 newest row: no total known yet"
                    .to_string(),
            ),
            (_, None) => Verdict::Undecidable("no expected_total".to_string()),
            (done, Some(total)) => {
                let done = done.known().unwrap_or(0);
                if done < total {
                    Verdict::Holds(format!("{done} of {total} done"))
                } else {
                    Verdict::Fails(format!("{done} of {total} done"))
                }
            }
        },
        Predicate::ResourceFree if job.resource_lock.is_none() && job.slurm.is_some() => {
            super::slurm::resource_free(evidence.slurm.as_deref())
        }
        Predicate::ResourceFree if job.resource_lock.is_none() && job.lock.is_none() => {
            // Declared by `process` alone: free when no matching process lives.
            match process_holder(evidence) {
                None => Verdict::Holds("no process matches process.cmdline".to_string()),
                Some(held) => match held.holder.liveness {
                    Liveness::Alive => Verdict::Fails(format!("{} holds it, alive", held.who)),
                    _ => Verdict::Undecidable(format!("{}: {}", held.who, held.holder.why)),
                },
            }
        }
        Predicate::NotSucceeded => {
            let history = &evidence.history;
            if let Some(why) = &history.unreadable {
                return Verdict::Undecidable(format!("the event log cannot be read: {why}"));
            }
            let at = |at: DateTime<Utc>| at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
            match &history.last_run {
                None => Verdict::Holds("no run of it is recorded yet".to_string()),
                Some(run) => match &run.exit {
                    Some(exit) if exit.succeeded() => {
                        Verdict::Fails(format!("the last run exited 0 at {}", at(exit.at)))
                    }
                    Some(exit) => {
                        Verdict::Holds(format!("the last run {} at {}", exit.words(), at(exit.at)))
                    }
                    None => Verdict::Holds(match run.started {
                        Some(started) => format!(
                            "the last run started at {} and recorded no exit",
                            at(started)
                        ),
                        None => "the last run recorded no exit".to_string(),
                    }),
                },
            }
        }
        Predicate::ResourceFree => {
            let reading = evidence.resource_lock.as_deref().or(evidence.lock.as_ref());
            match reading {
                None | Some(Reading::Empty) => Verdict::Holds("no lock held".to_string()),
                Some(Reading::Fault(error)) => {
                    Verdict::Undecidable(format!("lock: fault: {error}"))
                }
                Some(Reading::Found(holder)) => {
                    let who = holder
                        .pid
                        .map_or_else(|| "its holder".to_string(), |pid| format!("pid {pid}"));
                    match holder.liveness {
                        Liveness::Alive => Verdict::Fails(format!("{who} holds it, alive")),
                        Liveness::Dead => {
                            Verdict::Holds(format!("{who} held it and is gone: {}", holder.why))
                        }
                        Liveness::Unknown => Verdict::Undecidable(format!(
                            "{who} holds it, liveness unknown: {}",
                            holder.why
                        )),
                    }
                }
            }
        }
    }
}

/// The freshest reading over every source, and the sources that could not be read.
struct Progress {
    newest: Option<(DateTime<Utc>, ProgressSource)>,
    faults: Vec<(&'static str, String)>,
    /// Why the log is missing, when it is and nothing carries its last write: a stall cannot
    /// be told from a wrong path then.
    missing: Option<String>,
    /// Seconds since the latest its log's reading can have moved, when its meter redraws and
    /// the earliest is not known as well: the age counts from the earliest (or, when none is
    /// known, the log counts for nothing), so a stall past `stall_sec` by the earliest but
    /// not by this cannot be told from a slow meter.
    redraw_doubt: Option<(f64, Option<f64>)>,
}

impl Progress {
    /// `holder_started` is when the live holder started: a reading carried from before it (a
    /// rotated log, a remembered one, a heartbeat) belongs to an earlier run and does not count.
    fn of(
        job: &JobSpec,
        evidence: &Evidence,
        now: DateTime<Utc>,
        holder_started: Option<DateTime<Utc>>,
    ) -> Self {
        let mut newest: Option<(DateTime<Utc>, ProgressSource)> = None;
        let mut faults = Vec::new();
        // A time more than a minute ahead is a wrong clock or zone: a fault, never age 0.
        let mut consider = |at: Option<DateTime<Utc>>, source: ProgressSource, what: String| {
            let Some(at) = at else {
                return;
            };
            if let Some(ahead) = super::times::in_the_future(at, now) {
                faults.push((
                    source.as_str(),
                    format!("{what} {} (UTC), {ahead}", at.format("%Y-%m-%d %H:%M:%S")),
                ));
            } else if newest.is_none_or(|(best, _)| at > best) {
                newest = Some((at, source));
            }
        };
        let before_holder = |at: DateTime<Utc>| holder_started.is_some_and(|start| at < start);
        let mut redraw_doubt = None;
        if let Some(reading) = &evidence.log {
            let stamp = reading
                .found()
                .filter(|s| s.carried.is_none() || !before_holder(s.modified));
            match redrawn(job, evidence) {
                // Under log_progress the log's time is that of its last redraw: what counts
                // is when its reading last moved (SPEC §3: a reading must advance).
                Some(moved) => {
                    if moved.earliest != Some(moved.latest) {
                        redraw_doubt = Some((
                            seconds_between(moved.latest, now),
                            moved
                                .earliest
                                .map(|earliest| seconds_between(earliest, now)),
                        ));
                    }
                    // With no earliest known, the latest still stands once it is past
                    // stall_sec: a stall then either way, aged from the log.
                    let stalled_by_latest = job
                        .stall_limit()
                        .is_some_and(|limit| seconds_between(moved.latest, now) > limit as f64);
                    consider(
                        moved
                            .earliest
                            .or_else(|| stalled_by_latest.then_some(moved.latest)),
                        ProgressSource::Log,
                        "its reading last moved".to_string(),
                    );
                }
                None => consider(
                    stamp.map(|r| r.modified),
                    ProgressSource::Log,
                    "its last write is".to_string(),
                ),
            }
        }
        if let Some(reading) = &evidence.progress_file {
            consider(
                reading.found().map(|r| r.modified),
                ProgressSource::ProgressFile,
                "its modification time is".to_string(),
            );
        }
        if let Some(reading) = &evidence.progress_table {
            let what = match &job.progress_table {
                Some(table) => format!(
                    "the newest '{}' (text without an offset read in time_zone '{}', numbers \
                     in time_unit '{}') is",
                    table.time_column,
                    table.time_zone.as_str(),
                    table.time_unit.as_str()
                ),
                None => "the newest time is".to_string(),
            };
            consider(
                reading.found().map(|r| r.newest),
                ProgressSource::ProgressTable,
                what,
            );
        }
        if let Some(reading) = evidence.manifest.as_deref() {
            consider(
                reading.found().map(|r| r.updated_at),
                ProgressSource::Manifest,
                "'updated_at' is".to_string(),
            );
        }
        // The job's own report counts too (README: its time counts toward the age), unless it
        // was sent before this holder started.
        if let Some(Reading::Found(beat)) = evidence.heartbeat.as_deref()
            && !before_holder(beat.at)
        {
            consider(
                Some(beat.at),
                ProgressSource::Heartbeat,
                "the last heartbeat was sent".to_string(),
            );
        }
        // The kernel's reading: a position that moved in a file the holder has open.
        if let Some(reading) = evidence.activity.as_deref() {
            match reading {
                Reading::Found(activity) => {
                    consider(
                        activity.moved_at,
                        ProgressSource::Io,
                        "a file position last moved".to_string(),
                    );
                    if let Some(why) = &activity.unreadable
                        && activity.positions
                    {
                        faults.push((
                            "io",
                            format!(
                                "{why}; whether a file it has open moves cannot be told: run \
                                 mihari as root or as its user, or set io_progress: false"
                            ),
                        ));
                    }
                }
                Reading::Fault(error) => faults.push(("io", error.clone())),
                Reading::Empty => {}
            }
        }
        let sources = [
            ("log", evidence.log.as_ref().and_then(|r| r.fault())),
            (
                "progress_file",
                evidence.progress_file.as_ref().and_then(|r| r.fault()),
            ),
            (
                "progress_table",
                evidence.progress_table.as_ref().and_then(|r| r.fault()),
            ),
            (
                "manifest",
                evidence.manifest.as_deref().and_then(|r| r.fault()),
            ),
            (
                "log_progress",
                evidence.log_progress.as_deref().and_then(|r| r.fault()),
            ),
        ];
        for (name, fault) in sources {
            if let Some(error) = fault {
                faults.push((name, error.to_string()));
            }
        }
        let missing = match &evidence.log {
            Some(Reading::Found(_)) => None,
            _ => evidence.log_missing.clone(),
        };
        Progress {
            newest,
            faults,
            missing,
            redraw_doubt,
        }
    }
}

/// When the reading of `job`'s log last moved, when its last write is a redraw of the same
/// figure (a meter drawn again with nothing new): `None` when the log's own time stands.
fn redrawn<'a>(job: &JobSpec, evidence: &'a Evidence) -> Option<&'a Moved> {
    job.log_progress.as_ref()?;
    evidence
        .log_progress
        .as_deref()?
        .found()?
        .moved
        .as_ref()
        .filter(|moved| moved.redrawn_at.is_some())
}

impl Progress {
    /// The words for a job whose age by the earliest its log's reading can have moved is past
    /// `stall_sec`, while by the latest it is not: what neither a stall nor progress can be
    /// said of. `None` when the doubt does not matter to the verdict.
    fn doubt_words(&self, job: &JobSpec, age: Option<f64>) -> Option<String> {
        let (youngest, oldest) = self.redraw_doubt?;
        let limit = job.stall_limit()? as f64;
        if youngest > limit || age.is_some_and(|age| age <= limit) {
            return None;
        }
        let when = match oldest {
            Some(oldest) => format!(
                "between {} and {} ago (its frames do not say when, and the last look was \
                 before it moved)",
                fmt_secs(youngest),
                fmt_secs(oldest)
            ),
            None => format!(
                "at most {} ago, and nothing tells how much earlier (its frames do not say when, \
                 and no earlier look saw it)",
                fmt_secs(youngest)
            ),
        };
        Some(format!(
            "its log's meter redraws, and its reading last moved {when}: cannot tell a stall \
             from a slow meter until a later look (stall_sec {})",
            job.stall_sec
        ))
    }
}

/// What a meter that redraws, and a figure that fell, add to the reasons.
fn meter_words(job: &JobSpec, evidence: &Evidence, now: DateTime<Utc>) -> Vec<String> {
    let mut words = Vec::new();
    let Some(reading) = evidence.log_progress.as_deref().and_then(|r| r.found()) else {
        return words;
    };
    if let Some(moved) = redrawn(job, evidence)
        && let Some(drawn) = moved.redrawn_at
    {
        let stood = seconds_between(moved.latest, now);
        let worth_a_line = job.stall_limit().map_or(REDRAW_WORDS_AFTER_SEC, |limit| {
            REDRAW_WORDS_AFTER_SEC.min(limit as f64)
        });
        // Named as soon as the age the verdict takes (the earliest, when known) says so.
        if seconds_between(moved.earliest.unwrap_or(moved.latest), now) >= worth_a_line {
            // The figure moved between the earliest and the latest: say the age the verdict
            // used when the two are close, the range when they are not.
            let how_long = match moved.earliest {
                Some(earliest) if seconds_between(earliest, moved.latest) <= 5.0 => {
                    fmt_secs(seconds_between(earliest, now))
                }
                Some(earliest) => format!(
                    "between {} and {}",
                    fmt_secs(stood),
                    fmt_secs(seconds_between(earliest, now))
                ),
                None => format!("at least {}", fmt_secs(stood)),
            };
            let what = match reading.figure {
                Figure::Bytes => format!("has read {}", reading.figure.words(moved.value)),
                figure => format!("stands at {}", figure.words(moved.value)),
            };
            words.push(format!(
                "log: its meter redraws (last {} ago) but {what} for {how_long}",
                fmt_secs(seconds_between(drawn, now)),
            ));
        }
    }
    if let Some(fell) = &reading.fell {
        words.push(fall_words(job, reading.figure, fell));
    }
    words
}

/// A redraw is named once the figure has stood this long (or stall_sec, when shorter): a meter
/// that moves every few seconds is not worth a line.
const REDRAW_WORDS_AFTER_SEC: f64 = 10.0;

/// "its log's percent fell from 100 % to 3 %: ...".
fn fall_words(job: &JobSpec, figure: Figure, fell: &Fall) -> String {
    let name = match figure {
        Figure::Percent => "percent",
        Figure::Bytes => "byte count",
        Figure::Items => "count",
    };
    let hint = match job.log_progress {
        Some(LogProgress::Percent | LogProgress::Rsync) => {
            "; for rsync use --info=progress2 and preset rsync"
        }
        _ => "",
    };
    format!(
        "log_progress: its log's {name} fell from {} to {}: a per-file figure or a ratio is not \
         progress, and never says the job is complete{hint}",
        figure.words(fell.from),
        figure.words(fell.to)
    )
}

/// What the log's reading adds to the reasons: that it is missing (naming the path), or that
/// its last write was carried across a rotation (naming where it was found).
fn log_words(
    job: &JobSpec,
    evidence: &Evidence,
    progress: &Progress,
    holder_started: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut words = Vec::new();
    if evidence.log_meter && job.log_progress.is_none() {
        words.push(
            "log: its last line is a progress meter redrawn in place: each redraw moves the \
             log's time whether or not anything moved; declare log_progress (preset tqdm, curl, \
             wget, rsync, pv or dd, or a pattern) so that mihari reads how far it is and sees \
             when it stops moving"
                .to_string(),
        );
    }
    if let Some(missing) = &evidence.log_missing {
        if job.log.is_none() && job.slurm.is_some() {
            words.push(format!(
                "log: missing: {missing}: the StdOut Slurm names for the job is not readable on \
                 this machine; run mihari where the job's output folder is shared, or declare \
                 log"
            ));
        } else {
            words.push(format!(
                "log: missing: {missing}; fix the 'log' path if it is wrong (a job that has \
                 not started yet has no log)"
            ));
        }
    }
    if let Some(Reading::Found(stamp)) = &evidence.log
        && let Some(carried) = &stamp.carried
        && !progress.faults.iter().any(|(source, _)| *source == "log")
    {
        let age = fmt_secs(seconds_between(stamp.modified, now));
        let log = job
            .log
            .as_deref()
            .map(|p| super::text::inert(&p.display().to_string()))
            .unwrap_or_default();
        let mut line = match carried {
            Carried::Rotated(path) => format!(
                "log: last write {age} ago, in '{}' (rotated)",
                super::text::inert(&path.display().to_string())
            ),
            Carried::Remembered => format!(
                "log: last write {age} ago, before '{log}' was rotated or replaced \
                 (remembered since an earlier look)"
            ),
        };
        if holder_started.is_some_and(|start| stamp.modified < start) {
            line.push_str("; not counted: the holder started after it");
        }
        words.push(line);
    }
    words
}

/// The total the job is done at: `expected_total`, else the total the job reports itself —
/// its progress table's (`total_column` of the newest row), the one its log prints
/// (`log_progress`), or its last heartbeat's `--total`, in that order.
pub fn expected_total(job: &JobSpec, evidence: &Evidence) -> Option<u64> {
    job.expected_total
        .or_else(|| {
            evidence
                .progress_table
                .as_ref()
                .and_then(|reading| reading.found())
                .and_then(|table| table.total)
        })
        .or_else(|| {
            evidence
                .log_progress
                .as_ref()
                .and_then(|reading| reading.found())
                .and_then(|printed| printed.total)
        })
        .or_else(|| {
            evidence
                .heartbeat
                .as_ref()
                .and_then(|reading| reading.found())
                .and_then(|beat| beat.total)
        })
}

/// The percent the log prints when it prints no total (`67%`, wget's `45%[===>`): what says
/// how far a job with no total is. Never a percent that fell: a per-file figure or a ratio
/// says nothing of the whole.
fn printed_percent(evidence: &Evidence) -> Option<f64> {
    evidence
        .log_progress
        .as_ref()
        .and_then(|reading| reading.found())
        .filter(|printed| printed.total.is_none() && printed.fell.is_none())
        .and_then(|printed| printed.percent)
}

/// The fall its log's figure showed, when it has no total to be done at.
fn fallen(evidence: &Evidence) -> Option<(Figure, &Fall)> {
    evidence
        .log_progress
        .as_deref()
        .and_then(|reading| reading.found())
        .filter(|printed| printed.total.is_none())
        .and_then(|printed| printed.fell.as_ref().map(|fell| (printed.figure, fell)))
}

/// How far along, 0 to 100: done of the total, else the percent the log prints.
fn percent_of(done: Option<u64>, total: Option<u64>, evidence: &Evidence) -> Option<f64> {
    match (done, total) {
        (Some(done), Some(total)) if total > 0 => {
            Some((done as f64 * 100.0 / total as f64).min(100.0))
        }
        _ => printed_percent(evidence),
    }
}

/// How far back the samples a rate is computed over reach.
pub const RATE_WINDOW_SEC: i64 = 300;

/// The rate and the ETA, while the job runs (RUNNING or STALLED): a dead job has no pace.
/// A rate the job prints (tqdm's `9.95it/s`) is taken while it is RUNNING, when its frame is
/// where done comes from; otherwise the rate is done's rise over the kept samples of the last
/// [`RATE_WINDOW_SEC`] (at least 5 s of them), which is 0 for a job that stopped counting.
fn pace(
    state: State,
    done: Option<u64>,
    total: Option<u64>,
    evidence: &Evidence,
    samples: &[(DateTime<Utc>, u64)],
    now: DateTime<Utc>,
) -> (Option<f64>, Option<f64>) {
    if !matches!(state, State::Running | State::Stalled) {
        return (None, None);
    }
    let printed = evidence
        .log_progress
        .as_ref()
        .and_then(|reading| reading.found())
        .filter(|printed| state == State::Running && printed.done == done);
    // A meter with a percent and no count (curl -#, pv -n) has only what it prints.
    let Some(done) = done else {
        return (
            printed.and_then(|p| p.rate_per_sec),
            printed.and_then(|p| p.remaining_sec),
        );
    };
    let sampled = {
        let since = now - chrono::Duration::seconds(RATE_WINDOW_SEC);
        // Only the samples since done last went down (a restart that counts from 0 again).
        let mut first: Option<(DateTime<Utc>, u64)> = None;
        let mut last_done = None;
        for &(at, count) in samples {
            if at < since || at > now {
                continue;
            }
            if last_done.is_some_and(|before| count < before) {
                first = None;
            }
            first.get_or_insert((at, count));
            last_done = Some(count);
        }
        if last_done.is_some_and(|before| done < before) {
            first = None;
        }
        first.and_then(|(at, count)| {
            let secs = (now - at).num_milliseconds() as f64 / 1000.0;
            (secs >= 5.0).then(|| done.saturating_sub(count) as f64 / secs)
        })
    };
    let (rate, printed_remaining) = match printed.and_then(|p| p.rate_per_sec) {
        Some(rate) => (Some(rate), printed.and_then(|p| p.remaining_sec)),
        None => (sampled, None),
    };
    let eta = match total {
        Some(total) if done >= total => Some(0.0),
        Some(total) => printed_remaining
            .or_else(|| rate.filter(|r| *r > 0.0).map(|r| (total - done) as f64 / r)),
        // No total known, but the tool prints the time left (wget, rsync, pv).
        None => printed_remaining,
    };
    (rate, eta)
}

/// How many items are done, over every countable source (the largest count wins).
enum Done {
    /// No countable source is declared.
    Undeclared,
    Known(u64),
    /// A countable source could not be read: done is not known, and is never taken as 0.
    Fault(String),
}

impl Done {
    fn of(evidence: &Evidence) -> Self {
        let mut known: Option<u64> = None;
        let mut fault = None;
        let mut add = |count: u64| known = Some(known.map_or(count, |k| k.max(count)));
        match &evidence.progress_file {
            Some(Reading::Found(count)) => add(count.done),
            Some(Reading::Empty) => add(0),
            Some(Reading::Fault(error)) => fault = Some(format!("progress_file: fault: {error}")),
            None => {}
        }
        match &evidence.progress_table {
            Some(Reading::Found(table)) => add(table.done()),
            Some(Reading::Empty) => add(0),
            Some(Reading::Fault(error)) => {
                fault.get_or_insert(format!("progress_table: fault: {error}"));
            }
            None => {}
        }
        match evidence.log_progress.as_deref() {
            Some(Reading::Found(printed)) => {
                if let Some(done) = printed.done {
                    add(done);
                }
            }
            // Nothing printed yet (no frame in the log's tail) is nothing done yet.
            Some(Reading::Empty) => add(0),
            Some(Reading::Fault(error)) => {
                fault.get_or_insert(format!("log_progress: fault: {error}"));
            }
            None => {}
        }
        // A heartbeat's done counts too (`mihari heartbeat --done N`): what the job says of
        // itself, with nothing else declared as well as beside a declared count.
        if let Some(Reading::Found(beat)) = evidence.heartbeat.as_deref()
            && let Some(done) = beat.done
        {
            add(done);
        }
        match (fault, known) {
            (Some(error), _) => Done::Fault(error),
            (None, Some(count)) => Done::Known(count),
            (None, None) => Done::Undeclared,
        }
    }

    fn known(&self) -> Option<u64> {
        match self {
            Done::Known(count) => Some(*count),
            _ => None,
        }
    }
}

/// Whether anything shows the job ran before: a log, a manifest, counted progress, a lock, a
/// start in the event log. A source that cannot be read counts as a trace: something is there.
fn has_started_before(evidence: &Evidence) -> bool {
    fn present<T>(reading: Option<&Reading<T>>) -> bool {
        matches!(reading, Some(Reading::Found(_) | Reading::Fault(_)))
    }
    evidence.started_before
        || present(evidence.log.as_ref())
        || present(evidence.manifest.as_deref())
        || present(evidence.progress_file.as_ref())
        || present(evidence.progress_table.as_ref())
        || present(evidence.lock.as_ref())
        || present(evidence.heartbeat.as_deref())
        || present(evidence.slurm.as_deref())
}

/// The timeouts of seed 003 that `job` has exceeded at `now`, each named: waiting to run
/// (`queue_sec`), one attempt (`attempt_sec`), a run across restarts (`total_sec`). Heartbeat
/// loss is `stall_sec` (STALLED). Time spent waiting for an approval is not counted.
pub fn timeouts_exceeded(
    job: &JobSpec,
    state: State,
    history: &super::evidence::History,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut exceeded = Vec::new();
    let timeouts = &job.timeouts;
    if state == State::ShouldBeRunning
        && let (Some(limit), Some(since)) = (timeouts.queue_sec, history.waiting_since)
    {
        let waited = seconds_between(since, now);
        if waited > limit as f64 {
            exceeded.push(format!(
                "timeout: queue_sec exceeded: waiting to run for {} (limit {limit} s)",
                fmt_secs(waited)
            ));
        }
    }
    if matches!(state, State::Running | State::Stalled) {
        let budgets = [
            (
                "attempt_sec",
                timeouts.attempt_sec,
                history.attempt_started,
                "this attempt",
            ),
            (
                "total_sec",
                timeouts.total_sec,
                history.run_started,
                "this run, across restarts,",
            ),
        ];
        for (name, limit, started, what) in budgets {
            let (Some(limit), Some(started)) = (limit, started) else {
                continue;
            };
            let held = approval_wait_sec(&history.approval_waits, started, now);
            let spent = (seconds_between(started, now) - held).max(0.0);
            if spent > limit as f64 {
                let held_words = if held > 0.0 {
                    format!("; {} waiting for approval not counted", fmt_secs(held))
                } else {
                    String::new()
                };
                exceeded.push(format!(
                    "timeout: {name} exceeded: {what} has run {} (limit {limit} s{held_words})",
                    fmt_secs(spent)
                ));
            }
        }
    }
    exceeded
}

/// Seconds of approval waits that fall between `from` and `now`.
pub fn approval_wait_sec(
    waits: &[(DateTime<Utc>, Option<DateTime<Utc>>)],
    from: DateTime<Utc>,
    now: DateTime<Utc>,
) -> f64 {
    waits
        .iter()
        .map(|(asked, answered)| {
            let start = (*asked).max(from);
            let end = answered.unwrap_or(now).min(now);
            if end > start {
                seconds_between(start, end)
            } else {
                0.0
            }
        })
        .sum()
}

/// Seconds from `then` to `now`, never negative (a time up to a minute ahead is clock skew;
/// one further ahead never gets here: it is a fault, see [`super::times`]).
fn seconds_between(then: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    let ms = (now - then).num_milliseconds().max(0);
    ms as f64 / 1000.0
}

/// A duration in words: "42 s", "17 min", "3 h 05 min", "2 d 04 h". The one way mihari
/// writes an age: `check`'s reasons, the dashboard's list and detail, the fleet screen and the
/// digest all use it, so an age reads the same wherever it is shown.
///
/// Seconds are rounded up, so the words agree with the verdict: with a whole-second
/// `stall_sec`, `age > stall_sec` exactly when the shown age is greater too. From 1000 s to
/// two hours it is whole minutes, rounded up as well (never less than the age).
pub fn fmt_secs(secs: f64) -> String {
    let s = secs.max(0.0).ceil() as u64;
    match s {
        0..=999 => format!("{s} s"),
        1000..=7199 => format!("{} min", s.div_ceil(60)),
        7200..=172_799 => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {:02} h", s / 86_400, (s % 86_400) / 3600),
    }
}

//! What the probes found, as plain values.
//!
//! Each declared source answers one of three things: a reading, `Empty` (nothing recorded
//! yet), or a `Fault` (it could not be read, with the error). A fault is never empty and
//! never "no progress": keeping the three apart is what stops a broken disk from looking
//! like a stalled job. This module owns the shapes only; probes fill them, `assess` reads them.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// One source's answer: a reading, nothing recorded yet, or a failure to read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum Reading<T> {
    /// The source was read and holds something.
    Found(T),
    /// The source is readable but holds nothing yet: the file does not exist yet, has no
    /// lines, or the table has no rows.
    Empty,
    /// The source could not be read; the text says why (already inert, see [`super::text`]).
    Fault(String),
}

impl<T> Reading<T> {
    /// The reading, if there is one.
    pub fn found(&self) -> Option<&T> {
        match self {
            Reading::Found(value) => Some(value),
            _ => None,
        }
    }

    /// The fault's error text, if the source could not be read.
    pub fn fault(&self) -> Option<&str> {
        match self {
            Reading::Fault(error) => Some(error),
            _ => None,
        }
    }
}

/// A file whose modification time is evidence (the log).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileStamp {
    /// The last write: the log's own modification time, or, after a rotation left the log
    /// empty or gone, the last write carried across it (see `carried`).
    pub modified: DateTime<Utc>,
    /// The log's own length (0 after a rotation emptied it).
    pub len: u64,
    /// Where `modified` came from when it is not the log's own time; `None` when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
}

/// Where a log's last write was found when the log itself no longer shows it: logrotate
/// (copytruncate, or rename + create) and Python's `RotatingFileHandler` leave a new, empty
/// log behind, and a healthy writer that has not written since must not look stalled.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", content = "path", rename_all = "snake_case")]
pub enum Carried {
    /// In the rotated predecessor at this path (`app.log.1`, `app.log-20261201`).
    Rotated(std::path::PathBuf),
    /// The log's own last reading before it was emptied or replaced, remembered by this
    /// long-running process (no predecessor is where mihari looks).
    Remembered,
}

/// A progress file: its modification time and how many newline-terminated lines it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineCount {
    pub modified: DateTime<Utc>,
    pub done: u64,
}

/// A SQLite progress table: `max(time_column)` and `count(*)`, and, for a status row updated
/// in place, done and total from the newest row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableReading {
    pub newest: DateTime<Utc>,
    pub rows: u64,
    /// `done_column` of the newest row, when declared: done, instead of the number of rows.
    pub done: Option<u64>,
    /// `total_column` of the newest row, when declared and not NULL.
    pub total: Option<u64>,
}

impl TableReading {
    /// How many items are done: the declared done column, else the number of rows.
    pub fn done(&self) -> u64 {
        self.done.unwrap_or(self.rows)
    }
}

/// A phased pipeline's run manifest (see seed 004): which run, which phase, which are done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ManifestReading {
    /// `updated_at` from the manifest, or the file's modification time when it has none.
    pub updated_at: DateTime<Utc>,
    pub run_id: Option<String>,
    pub current_phase: Option<String>,
    /// Phases whose entry in `phase_results` is truthy, in the order the manifest lists them.
    pub completed_phases: Vec<String>,
    /// Phases whose entry in `phase_results` says they failed (`false`, `"failed"`,
    /// `"error"`, or an object with `"ok": false`), in the manifest's order: the job is RED
    /// while one stands, whatever it counted or how its run exited.
    pub failed_phases: Vec<String>,
}

/// Progress read from the job's own output (`log_progress`): the newest frame of the log that
/// matches, a frame being what a terminal would show last between two '\r' or '\n'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogProgressReading {
    pub done: Option<u64>,
    pub total: Option<u64>,
    /// 0 to 100, as printed (or done/total, when both are read).
    pub percent: Option<f64>,
    /// Items per second as the job printed it (tqdm's `9.95it/s`, `1.23s/it`).
    pub rate_per_sec: Option<f64>,
    /// Seconds left as the job printed it (tqdm's `<00:52`).
    pub remaining_sec: Option<f64>,
    /// The frame that matched, inert and cut to a line's width, for the detail pane.
    pub frame: String,
    /// The rotated predecessor it was read from (`run.log.1`), when the log itself holds no
    /// matching frame since a rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<std::path::PathBuf>,
    /// What the figure that must move is: items, bytes or a percent (for the words).
    pub figure: Figure,
    /// When the reading last moved, as far as the log and earlier looks show it; `None` when
    /// it was read in a rotated predecessor (the log's own time stands then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved: Option<Moved>,
    /// A fall of the figure seen in the log's last frames or since an earlier look: a
    /// per-file figure or a ratio, which is not progress of the whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fell: Option<Fall>,
}

/// What a meter's figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    Items,
    Bytes,
    Percent,
}

impl Figure {
    /// `value` in the operator's words: "450 items", "1,999,872 bytes", "45 %".
    pub fn words(self, value: f64) -> String {
        match self {
            Figure::Percent => format!("{} %", trim_number(value)),
            Figure::Bytes => format!("{} bytes", thousands(value.round() as u64)),
            Figure::Items => format!("{} items", thousands(value.round() as u64)),
        }
    }
}

/// 45, 45.5, 45.25: a percent as printed, without trailing zeros.
fn trim_number(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// 1999872 as "1,999,872".
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (at, digit) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// When a log's reading last moved: a time known to the second when the newest frame is the
/// first to show it (or the tool prints its own clock), else the bounds that are known. A
/// meter that redraws the same figure every second moves the log's modification time, never
/// these.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    /// The latest it can have moved: the figure has shown the same value since then.
    pub latest: DateTime<Utc>,
    /// The earliest it can have moved; `None` when nothing tells (a meter that redraws with no
    /// clock of its own, at a first look): then its freshness is not known.
    pub earliest: Option<DateTime<Utc>>,
    /// The log's last write, when it is a redraw of the same figure (the frames after the
    /// move), for the words; `None` when the newest frame is the move or text follows it.
    pub redrawn_at: Option<DateTime<Utc>>,
    /// The figure that has not moved since `latest`.
    pub value: f64,
}

/// A figure that went down: from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fall {
    pub from: f64,
    pub to: f64,
}

/// The last heartbeat a job sent (`mihari heartbeat`): a progress source it reports itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeartbeatReading {
    pub at: DateTime<Utc>,
    pub done: Option<u64>,
    pub total: Option<u64>,
    /// Already inert.
    pub position: Option<String>,
    /// Already inert.
    pub note: Option<String>,
}

/// An approval a job is waiting for: shown on its row and counted in the header, whatever
/// the job's bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    pub key: String,
    /// Already inert.
    pub step: String,
    /// Already inert.
    pub summary: String,
    pub requested: DateTime<Utc>,
    /// Who asked (a user name), already inert; `None` for a request made before it was kept.
    pub requested_by: Option<String>,
}

/// Whether the process that holds a lock is alive. Three values, never two: `Unknown` is
/// never rounded to `Dead`, because that restarts a healthy job a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    Alive,
    Dead,
    Unknown,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Dead => "dead",
            Liveness::Unknown => "unknown",
        }
    }
}

/// A lock file that exists, and what is known about its holder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockHolder {
    /// The PID recorded in the lock, if the content could be parsed.
    pub pid: Option<u32>,
    /// The start time recorded in a JSON lock, in clock ticks since boot.
    pub recorded_start: Option<u64>,
    /// The command line recorded in a JSON lock, if any.
    pub cmdline: Option<String>,
    /// The run recorded in a JSON lock, if any: a restart continues the same run.
    pub run_id: Option<String>,
    /// When the lock file was last written.
    pub modified: DateTime<Utc>,
    pub liveness: Liveness,
    /// Why the liveness is what it is, in plain words ("no such process",
    /// "start time differs: lock says 98765, process 4242 started at 99001").
    pub why: String,
    /// When the holder process started (wall clock), when it is alive and known.
    pub started_at: Option<DateTime<Utc>>,
    /// The alive holder's start time in clock ticks, from `/proc`: with the PID, its identity
    /// (used to wait on exactly this process, never on a successor with the same PID).
    pub start_ticks: Option<u64>,
    /// The alive holder is stopped (state T or t: Ctrl-Z, SIGSTOP, a debugger): it holds the
    /// lock and is alive, but makes no progress until it is continued.
    pub stopped: bool,
}

/// How the `why` of a holder found through the locks on an empty lock file begins (util-linux
/// `flock(1)` writes no PID): the reasons show it, for a PID the file itself does not name.
pub const EMPTY_LOCK_WORDS: &str = "the lock file is empty";

/// A live process whose command line matches a job's `process.cmdline` (and `user`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatchedProcess {
    pub pid: u32,
    /// With the PID, its identity: field 22 of `/proc/<pid>/stat`.
    pub start_ticks: u64,
    /// Wall-clock start, when the clocks could be read.
    pub started_at: Option<DateTime<Utc>>,
    /// Stopped (state T or t: Ctrl-Z, SIGSTOP, a debugger): alive, but no progress until
    /// SIGCONT.
    pub stopped: bool,
    /// Field 3 of its stat line.
    pub state: char,
    /// Its argv joined by spaces, cut to 80 characters, inert.
    pub cmdline: String,
}

/// The outcome of one check, in layers: a fault or a refusal is never a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckResult {
    /// Exited 0.
    Pass,
    /// Ran and exited non-zero: the job goes RED.
    Fail,
    /// Could not run to an answer: not found, timed out, crashed.
    Fault,
    /// The system refused to run it (permission denied).
    Refusal,
}

impl CheckResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckResult::Pass => "pass",
            CheckResult::Fail => "fail",
            CheckResult::Fault => "fault",
            CheckResult::Refusal => "refusal",
        }
    }
}

/// One check's result with its name and a short, inert detail ("exit 1: gap at 2024-05-01").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckOutcome {
    pub name: String,
    pub result: CheckResult,
    pub detail: String,
    pub at: DateTime<Utc>,
}

/// Everything gathered about one job at one moment. A source the job does not declare is
/// `None`; a declared source always has a [`Reading`]. The sources most jobs do not declare
/// are boxed, so that their absence costs a pointer, not the reading's size: a farm keeps
/// this for every job, twice (the engine's and the snapshot's).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Evidence {
    pub lock: Option<Reading<LockHolder>>,
    /// The lock `resource_free` looks at, when it is a different file from `lock`.
    pub resource_lock: Option<Box<Reading<LockHolder>>>,
    pub log: Option<Reading<FileStamp>>,
    /// Why the log counts as missing, naming its path ("'/srv/app/colect.log' does not
    /// exist"): its path names nothing. Said as "missing", never as "empty" or "no progress":
    /// a typo in the path must not read as a quiet job. Not a fault either (the job may not
    /// have started). Already inert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_missing: Option<String>,
    /// The log's last line is a progress meter redrawn with carriage returns (a tqdm bar, a
    /// curl or wget meter) and the job declares no `log_progress`: each redraw moves the log's
    /// time whether or not anything moved, so the log alone cannot tell progress from a meter
    /// that redraws the same figure. Only looked for when `log_progress` is not declared.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub log_meter: bool,
    pub progress_file: Option<Reading<LineCount>>,
    pub progress_table: Option<Reading<TableReading>>,
    pub manifest: Option<Box<Reading<ManifestReading>>>,
    /// `log_progress`: the newest matching frame of the log (empty: no frame matches in the
    /// bounded tail, or the log has nothing yet).
    pub log_progress: Option<Box<Reading<LogProgressReading>>>,
    /// Earlier (time, done) samples of this job, oldest first, kept by a long-running engine
    /// across passes: what a rate and an ETA are computed from. Empty in a fresh `check`, and
    /// in a snapshot's evidence once it is judged (the engine keeps them).
    #[serde(skip)]
    pub progress_samples: Vec<(DateTime<Utc>, u64)>,
    /// The processes matching `process.cmdline`, from the pass's one scan of `/proc`: found
    /// (one or several), empty (none), or a fault (the scan could not tell).
    pub process: Option<Reading<Vec<MatchedProcess>>>,
    /// The lock mihari keeps for a job declared by `process` alone, held by `mihari run`
    /// while it supervises the job.
    pub kept_lock: Option<Box<Reading<LockHolder>>>,
    /// The Slurm job that holds a job declared with `slurm:`, from the pass's one
    /// `squeue --json`: the newest job of that name and user (found), none of that name
    /// (empty), or a fault (the controller cannot be reached, munge refused, a JSON this
    /// mihari does not read) — never "not running".
    pub slurm: Option<Box<Reading<SlurmJob>>>,
    /// `None` until the job has sent a heartbeat (heartbeats are not declared in the file).
    pub heartbeat: Option<Box<Reading<HeartbeatReading>>>,
    /// The kernel's reading of the live holder's tree (source `io`): file positions that
    /// moved, or what a quiet holder is doing. `None` while the holder is not looked at (no
    /// live holder, its other progress is fresh, `stall_sec: never`); a fault when `/proc`
    /// could not tell.
    pub activity: Option<Box<Reading<super::activity::ActivityReading>>>,
    pub checks: Vec<CheckOutcome>,
    /// Approval requests of this job still waiting for a human.
    pub pending_approvals: Vec<PendingApproval>,
    /// Whether the event log records a start of this job (filled once the state store exists).
    pub started_before: bool,
    /// What the event log says about this job's runs and restarts.
    pub history: History,
    /// One reading per declared marker, in the order of the job's `markers:`: empty when the
    /// marker is not there (nothing gates the job), a fault when it cannot be looked at (a
    /// link, a named pipe, a folder someone else can change).
    pub markers: Vec<Reading<MarkerReading>>,
}

/// A Slurm job as `squeue --json` lists it, in Slurm's own words (see [`super::slurm`] for
/// what its state means).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmJob {
    pub id: u64,
    /// Its name (`--job-name`), inert.
    pub name: String,
    /// Its user's name, inert.
    pub user: String,
    /// `job_state` as Slurm spells it: "PENDING", "RUNNING", "FAILED"...
    pub state: String,
    /// `state_reason` ("Resources", "Priority", "JobHeldUser", "NonZeroExitCode"), inert;
    /// `None` when Slurm says "None".
    pub reason: Option<String>,
    /// `exit_code`: the raw wait status (768 for a job that exited 3), once it is known.
    pub exit_status: Option<i32>,
    pub submitted: Option<DateTime<Utc>>,
    /// When it started running; `None` while it is queued.
    pub started: Option<DateTime<Utc>>,
    /// When it ended; `None` while it has not (Slurm's `end_time` of a running job is its
    /// time limit, which is not kept).
    pub ended: Option<DateTime<Utc>>,
    /// Its `StdOut` file, with Slurm's patterns (%j, %x, %A_%a...) filled in and made
    /// absolute against its working folder: its log when the job declares none.
    pub stdout: Option<std::path::PathBuf>,
    /// The node its batch script runs on, inert.
    pub node: Option<String>,
    /// How many times it was requeued (`restart_cnt`).
    pub restarts: u32,
    /// "14_1" for a task of array job 14, "8_[0-4]" for tasks still pending together.
    pub array: Option<String>,
}

/// What a marker is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    File,
    /// A folder, as a `mkdir` lock makes.
    Folder,
}

/// A marker that exists: what it is, when it was last written, and who holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerReading {
    pub kind: MarkerKind,
    pub modified: DateTime<Utc>,
    /// A file's bytes, or how many entries a folder holds.
    pub size: u64,
    /// The holder a PID or a JSON lock in the file names (judged like a lock), or the process
    /// holding a flock on an empty one; `None` for a bare marker, which no process holds.
    pub holder: Option<LockHolder>,
    /// What it holds, for the operator: a file's first characters, a folder's first names;
    /// inert and cut short.
    pub content: String,
}

/// What the event log says about a job, for timeouts, the daily cap and the broken rules.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct History {
    /// When the current attempt started (the last `started` event), and its run id.
    pub attempt_started: Option<DateTime<Utc>>,
    pub run_id: Option<String>,
    /// When the current run started (its first `started`), across restarts.
    pub run_started: Option<DateTime<Utc>>,
    /// Approval waits (requested, decided or still open) of this job: time a human held
    /// the job up, which no time budget counts.
    pub approval_waits: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// Since when the job has been waiting to run (it entered SHOULD_BE_RUNNING).
    pub waiting_since: Option<DateTime<Utc>>,
    /// Every spawn (restart) of this job in the last 24 h, oldest first.
    pub spawns_24h: Vec<DateTime<Utc>>,
    /// The watcher's automatic spawns of this job in the last 24 h, oldest first.
    pub auto_spawns_24h: Vec<DateTime<Utc>>,
    /// Rules found broken for this job, in words ("the last restart failed: ..."): RED.
    /// Only the rules that still stand: a rule ends when the job is next seen healthy or
    /// when the operator acknowledges it (see [`History::seen_healthy`]).
    pub broken_rules: Vec<String>,
    /// The last run `mihari run` recorded for this job: the basis of `not_succeeded`.
    pub last_run: Option<LastRun>,
    /// The end of the newest run that exited 0 (by `mihari run`, or reported by `mihari
    /// heartbeat --exit 0`): what a scheduled job's next due time counts from. Read only for
    /// jobs with a `schedule`.
    pub last_success: Option<DateTime<Utc>>,
    /// When mihari first saw the job: its oldest event in the event log (a watcher records
    /// its first sight of every job). What a scheduled job with no success counts from. Read
    /// only for scheduled jobs with no success recorded.
    pub first_seen: Option<DateTime<Utc>>,
    /// For a scheduled job: its first due time after what it counts from, as computed when
    /// that last changed, so that a pass over a farm does not walk every cron expression again
    /// while no run ended. The judgment uses it only when it was computed for this schedule and
    /// this anchor; otherwise it computes its own.
    pub due_after: Option<std::sync::Arc<super::schedule::DueAfter>>,
    /// The operator's pause, while the job stays paused (a `paused` newer than any `resumed`).
    pub paused: Option<OperatorNote>,
    /// The newest acknowledgement of the job's broken rules: rules older than it have ended.
    pub acknowledged: Option<OperatorNote>,
    /// When the job was last seen healthy by the event log: a `state-changed ... -> RUNNING`
    /// or a `verified` restart. Broken rules older than it have ended.
    pub seen_healthy: Option<DateTime<Utc>>,
    /// Restarts of this job that failed since it was last seen healthy or acknowledged: the
    /// attempt count of the current episode, across claim keys.
    pub failed_restarts: u64,
    /// Every spawn (restart) of this job the event log holds, by anyone: a count that only
    /// grows (the Prometheus counter `mihari_job_restarts_total`).
    pub restarts_total: u64,
    /// Why the event log could not be read, when it could not: then nothing above is known,
    /// and a predicate that needs it (`not_succeeded`) cannot be evaluated.
    pub unreadable: Option<String>,
}

/// How the last run `mihari run` recorded for a job stands: when it started and, once it
/// has ended, how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastRun {
    /// When it started (its `started` event); `None` when only its end is recorded.
    pub started: Option<DateTime<Utc>>,
    /// How it ended; `None` while no end is recorded (it runs, or its supervisor was killed).
    pub exit: Option<RunExit>,
}

/// How one run ended, as `mihari run` recorded it: an exit code, or the signal that killed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunExit {
    pub at: DateTime<Utc>,
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal's name ("SIGTERM"), when a signal ended it.
    pub signal: Option<String>,
    /// How a scheduler ended it when that is neither an exit of its own nor a signal
    /// ("TIMEOUT", "CANCELLED", "NODE_FAIL" for a Slurm job): never a success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_as: Option<String>,
}

impl RunExit {
    /// Reads an `exited` event's reason as `mihari run` writes it ("exit 3", "killed by
    /// SIGTERM", "killed by SIGSEGV (core dumped)"). Anything else is an end of unknown kind:
    /// neither a code nor a signal, so never a success.
    pub fn from_words(words: &str, at: DateTime<Utc>) -> RunExit {
        // `mihari run` may add how long its tree outlived the command after a ';' ("exit 0;
        // the last process of its tree left 3.0 s after it"): the end is what comes before.
        let words = words.split(';').next().unwrap_or_default().trim();
        let code = words
            .strip_prefix("exit ")
            .and_then(|n| n.trim().parse::<i32>().ok());
        let signal = words.strip_prefix("killed by ").map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or("a signal")
                .to_string()
        });
        let ended_as = words
            .strip_prefix("ended as ")
            .map(|state| state.trim().to_string())
            .filter(|state| !state.is_empty());
        RunExit {
            at,
            code,
            signal,
            ended_as,
        }
    }

    /// Whether the run exited 0: the only end that counts as success.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0)
    }

    /// The end in words: "exited 1", "was killed by SIGTERM", "ended in an unknown way".
    pub fn words(&self) -> String {
        match (&self.code, &self.signal, &self.ended_as) {
            (Some(code), _, _) => format!("exited {code}"),
            (None, Some(signal), _) => format!("was killed by {signal}"),
            (None, None, Some(state)) => format!("ended as {state}"),
            (None, None, None) => "ended in an unknown way".to_string(),
        }
    }
}

/// A decision an operator recorded with a reason: a pause, an acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperatorNote {
    pub at: DateTime<Utc>,
    /// Who: the operator's user name as recorded, or the event's actor when none was.
    pub by: String,
    /// Why, in the operator's words (already inert).
    pub reason: String,
}

impl OperatorNote {
    /// The reason an event carries for a decision of an operator's: "by alice: why".
    pub fn reason_words(by: &str, reason: &str) -> String {
        format!("by {by}: {reason}")
    }

    /// Reads back [`OperatorNote::reason_words`]; `actor` names who when the words name no one.
    pub fn from_words(words: &str, actor: &str, at: DateTime<Utc>) -> OperatorNote {
        let named = words
            .strip_prefix("by ")
            .and_then(|rest| rest.split_once(": "))
            .filter(|(by, _)| !by.is_empty() && !by.contains(char::is_whitespace));
        let (by, reason) = match named {
            Some((by, reason)) => (by.to_string(), reason.to_string()),
            None => (actor.to_string(), words.to_string()),
        };
        OperatorNote {
            at,
            by: super::text::inert(&by),
            reason: super::text::inert(&reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_is_read_back_from_the_words_mihari_run_records() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let rows = [
            ("exit 0", Some(0), None, true, "exited 0"),
            ("exit 3", Some(3), None, false, "exited 3"),
            (
                "killed by SIGTERM",
                None,
                Some("SIGTERM"),
                false,
                "was killed by SIGTERM",
            ),
            (
                "killed by SIGSEGV (core dumped)",
                None,
                Some("SIGSEGV"),
                false,
                "was killed by SIGSEGV",
            ),
            (
                "ended in an unknown way",
                None,
                None,
                false,
                "ended in an unknown way",
            ),
            ("", None, None, false, "ended in an unknown way"),
            // A daemonizing launcher: its tree outlived it (`mihari run` as a subreaper).
            // A Slurm job the scheduler ended (TIMEOUT, CANCELLED): never a success.
            (
                "ended as TIMEOUT; Slurm job 5 TIMEOUT (TimeLimit)",
                None,
                None,
                false,
                "ended as TIMEOUT",
            ),
            (
                "exit 0; the last process of its tree left 30.2 s after it",
                Some(0),
                None,
                true,
                "exited 0",
            ),
        ];
        for (words, code, signal, succeeded, said) in rows {
            let exit = RunExit::from_words(words, at);
            assert_eq!(exit.code, code, "{words}");
            assert_eq!(exit.signal.as_deref(), signal, "{words}");
            assert_eq!(exit.succeeded(), succeeded, "{words}");
            assert_eq!(exit.words(), said, "{words}");
        }
    }

    #[test]
    fn an_operators_note_names_who_and_why_and_falls_back_to_the_actor() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let words = OperatorNote::reason_words("alice", "upstream down: wait for ops");
        assert_eq!(words, "by alice: upstream down: wait for ops");
        let note = OperatorNote::from_words(&words, "cli", at);
        assert_eq!(note.by, "alice");
        assert_eq!(note.reason, "upstream down: wait for ops");
        let unnamed = OperatorNote::from_words("maintenance", "operator", at);
        assert_eq!(unnamed.by, "operator");
        assert_eq!(unnamed.reason, "maintenance");
        let hostile = OperatorNote::from_words("by eve: \u{1b}]0;pwned\u{7}", "cli", at);
        assert!(super::super::text::is_inert(&hostile.reason), "{hostile:?}");
    }
}

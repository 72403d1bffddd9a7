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
/// `None`; a declared source always has a [`Reading`].
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Evidence {
    pub lock: Option<Reading<LockHolder>>,
    /// The lock `resource_free` looks at, when it is a different file from `lock`.
    pub resource_lock: Option<Reading<LockHolder>>,
    pub log: Option<Reading<FileStamp>>,
    /// Why the log counts as missing, naming its path ("'/srv/app/colect.log' does not
    /// exist"): its path names nothing. Said as "missing", never as "empty" or "no progress":
    /// a typo in the path must not read as a quiet job. Not a fault either (the job may not
    /// have started). Already inert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_missing: Option<String>,
    pub progress_file: Option<Reading<LineCount>>,
    pub progress_table: Option<Reading<TableReading>>,
    pub manifest: Option<Reading<ManifestReading>>,
    /// The processes matching `process.cmdline`, from the pass's one scan of `/proc`: found
    /// (one or several), empty (none), or a fault (the scan could not tell).
    pub process: Option<Reading<Vec<MatchedProcess>>>,
    /// The lock mihari keeps for a job declared by `process` alone, held by `mihari run`
    /// while it supervises the job.
    pub kept_lock: Option<Reading<LockHolder>>,
    /// `None` until the job has sent a heartbeat (heartbeats are not declared in the file).
    pub heartbeat: Option<Reading<HeartbeatReading>>,
    pub checks: Vec<CheckOutcome>,
    /// Approval requests of this job still waiting for a human.
    pub pending_approvals: Vec<PendingApproval>,
    /// Whether the event log records a start of this job (filled once the state store exists).
    pub started_before: bool,
    /// What the event log says about this job's runs and restarts.
    pub history: History,
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
    pub broken_rules: Vec<String>,
}

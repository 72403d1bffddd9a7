//! `jobs.yaml` -> validated job specs.
//!
//! This module owns the jobs file: where it is found, how it is parsed (serde-saphyr with
//! strict booleans), and every refusal of SPEC §2. A refusal names the file, line and column,
//! quotes the offending value in 'single quotes' and says what would be accepted. One bad job
//! refuses the whole file: a half-loaded watch list is a silent hole. Nothing here probes the
//! world beyond reading the file and its permissions.

mod cache;
mod load;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::NaiveTime;
use serde::{Deserialize, Serialize};

pub use load::fleet::{Fleet, Host, find_fleet_path, load_fleet, load_fleet_str};
pub use load::{
    ConfigError, find_config_path, load, load_saved, load_str, load_str_by_serde_saphyr,
    quick_reader_reads, settings_of_refused,
};
pub(crate) use load::{is_valid_id, suggest_id};

/// The whole validated jobs file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// The file it was loaded from; relative paths in it were resolved against its folder.
    pub source: PathBuf,
    pub settings: Settings,
    /// Shared, not copied: the dashboard's model holds the same list as its engine (at
    /// 10,000 jobs a copy is about 9 MB).
    pub jobs: std::sync::Arc<[JobSpec]>,
}

/// `settings:`; every key optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Default: `$XDG_STATE_HOME/mihari`, else `~/.local/state/mihari`.
    pub state_dir: PathBuf,
    /// Local time the daily digest is cut. Default 09:00.
    pub digest_at: NaiveTime,
    /// Automatic restarts per job per rolling 24 h. Default 6.
    pub restart_daily_cap: u32,
    /// Minimum gap between two spawns in one workspace. Default 600.
    pub workspace_cooldown_sec: u64,
    /// Restart routes tried before handing to a human. Default 3.
    pub max_hops: u32,
    /// argv run once per immediate escalation, with the message as last argument.
    pub escalate_command: Option<Vec<String>>,
    /// Where the watcher keeps its metrics for node_exporter's textfile collector (a
    /// `.prom` file), rewritten atomically after every change and at least once a minute.
    pub prometheus_textfile: Option<PathBuf>,
}

/// A predicate of `should_run_when`; the job should run when all of them hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Predicate {
    /// done < expected_total.
    NotComplete,
    /// No live process holds `resource_lock` (default: `lock`; for a job declared by
    /// `process` alone: no matching process lives).
    ResourceFree,
    /// The last run `mihari run` recorded for the job did not exit 0: a one-shot job with
    /// nothing to count (an rsync, a dd, a tqdm loop) is due until a run of it succeeds.
    NotSucceeded,
    /// A job that runs on a `schedule` (cron, a timer) missed a run: no run has ended with
    /// exit 0 since its due time + grace, or the last run failed.
    Overdue,
}

impl Predicate {
    pub fn as_str(self) -> &'static str {
        match self {
            Predicate::NotComplete => "not_complete",
            Predicate::ResourceFree => "resource_free",
            Predicate::NotSucceeded => "not_succeeded",
            Predicate::Overdue => "overdue",
        }
    }
}

/// One job, validated. Paths are absolute (relative ones were resolved against the jobs
/// file's folder, `~/` against the home folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: String,
    pub name: Option<String>,
    pub owner: Option<String>,
    /// Cooldown key; `None` falls back to `restart.cwd`.
    pub workspace: Option<PathBuf>,
    pub lock: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub progress_file: Option<PathBuf>,
    pub progress_table: Option<ProgressTable>,
    pub manifest: Option<PathBuf>,
    /// done/total/percent read from the job's own output in `log` (tqdm frames, `step N/M`,
    /// `67%`): most jobs print their progress and write no progress file.
    pub log_progress: Option<LogProgress>,
    /// The holder found by its command line, for a job started elsewhere (a tmux pane,
    /// nohup) that writes no lock.
    pub process: Option<ProcessSpec>,
    /// The lock `mihari run` takes for a job declared by `process` alone:
    /// `state_dir/<id>.run.lock`, so two runs of it can never overlap. `None` when the job
    /// declares `lock` (that is the one taken) or no `process`.
    pub kept_lock: Option<PathBuf>,
    /// Progress older than this while alive is STALLED. Default 300.
    pub stall_sec: u64,
    pub expected_total: Option<u64>,
    /// Non-empty; AND-ed.
    pub should_run_when: Vec<Predicate>,
    /// What `resource_free` looks at; `None` falls back to `lock`.
    pub resource_lock: Option<PathBuf>,
    pub auto_restart: bool,
    pub auto_restart_reason: Option<String>,
    pub auto_restart_blocked_reason: Option<String>,
    pub restart: Option<RestartSpec>,
    pub checks: Vec<CheckSpec>,
    pub timeouts: Timeouts,
    /// `stall_sec: never`: the job is idle by nature (a server that logs only on requests)
    /// and is never STALLED; `stall_sec` then keeps its default and is not used.
    pub stall_never: bool,
    /// `markers:` — files or folders that gate the job's work (SPEC §5), in file order.
    pub markers: Vec<MarkerSpec>,
    /// `io_progress` (default true): positions in the regular files the live holder's tree has
    /// open count as progress (source `io`). Off, the kernel still diagnoses a quiet holder.
    pub io_progress: bool,
    /// `slurm:` — the job runs as a Slurm batch job, and Slurm is its holder (SPEC §12).
    pub slurm: Option<SlurmSpec>,
    /// `schedule:` — when a job that runs at set times (a cron line, a timer) is due: idle
    /// between its runs by plan, overdue when a run is missed (the `overdue` predicate).
    pub schedule: Option<Schedule>,
}

impl JobSpec {
    /// How old progress may get while the job is alive before it is STALLED; `None` for
    /// `stall_sec: never`.
    pub fn stall_limit(&self) -> Option<u64> {
        (!self.stall_never).then_some(self.stall_sec)
    }

    /// The lock `resource_free` looks at: `resource_lock`, else `lock`.
    pub fn resource_lock_path(&self) -> Option<&Path> {
        self.resource_lock.as_deref().or(self.lock.as_deref())
    }

    /// The cooldown key: `workspace`, else `restart.cwd`; `None` means no cooldown.
    pub fn workspace_key(&self) -> Option<&Path> {
        self.workspace
            .as_deref()
            .or_else(|| self.restart.as_ref().and_then(|r| r.cwd.as_deref()))
    }

    /// The lock `mihari run` takes and a restart is verified against: `lock`, else the one
    /// mihari keeps in state_dir for a job declared by `process` alone.
    pub fn run_lock(&self) -> Option<&Path> {
        self.lock.as_deref().or(self.kept_lock.as_deref())
    }

    /// Whether the job declares a source whose time is progress (log, progress_file,
    /// progress_table, manifest). Only a `stall_sec: never` job with a holder may have none:
    /// its holder alone is watched.
    pub fn has_progress_source(&self) -> bool {
        self.log.is_some()
            || self.progress_file.is_some()
            || self.progress_table.is_some()
            || self.manifest.is_some()
    }

    /// The argv a restart runs for a Slurm job: `slurm.submit`, or `scontrol requeue ID` of
    /// the Slurm job `id` that ended; `None` for a job not run by Slurm, or one with neither.
    pub fn slurm_restart_argv(&self, id: Option<u64>) -> Option<Vec<String>> {
        match self.slurm.as_ref()?.restart.as_ref()? {
            SlurmRestart::Submit(argv) => Some(argv.clone()),
            SlurmRestart::Requeue => Some(vec![
                "scontrol".to_string(),
                "requeue".to_string(),
                id?.to_string(),
            ]),
        }
    }

    /// Whether the job has a source that counts done items.
    pub fn has_countable_source(&self) -> bool {
        self.progress_file.is_some() || self.progress_table.is_some() || self.log_progress.is_some()
    }

    /// Whether the job reports a total of its own: a progress table's `total_column`, or
    /// `log_progress` that reads a total (tqdm, fraction, a pattern with a `total` group) or a
    /// percent (done at 100).
    pub fn reports_total(&self) -> bool {
        self.progress_table
            .as_ref()
            .is_some_and(|table| table.total_column.is_some())
            || self
                .log_progress
                .as_ref()
                .is_some_and(LogProgress::reports_total)
    }
}

/// `slurm:` — the Slurm job that holds this job: the newest of its name and user (or the one
/// of its id), read from one `squeue --json` per pass for every such job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmSpec {
    pub job: SlurmJobRef,
    /// Only this user's jobs (by name, as `squeue --user`); `None`: the user mihari runs as.
    pub user: Option<String>,
    /// What `restart` runs: an argv that submits the job again (`sbatch train.sbatch`), or a
    /// requeue of the job it names (`scontrol requeue ID`); `None`: restart it by hand.
    pub restart: Option<SlurmRestart>,
}

/// Which Slurm job a job is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlurmJobRef {
    /// `job_name`: the newest job of that name (and user).
    Name(String),
    /// `job_id`: that job, through its requeues.
    Id(u64),
}

/// How `restart` starts a Slurm job again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlurmRestart {
    /// `submit`: this argv, which prints the new job's id ("Submitted batch job 43").
    Submit(Vec<String>),
    /// `requeue: true`: `scontrol requeue ID` of the job that ended.
    Requeue,
}

/// `progress_table:` — a SQLite table read read-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressTable {
    pub db: PathBuf,
    pub table: String,
    /// `max()` of it is the last progress: unix time (in `time_unit`) or ISO-8601 text.
    pub time_column: String,
    /// What a number in `time_column` counts. Default seconds.
    pub time_unit: TimeUnit,
    /// How text without an offset in `time_column` is read. Default the machine's local zone.
    pub time_zone: TimeZoneName,
    /// A status table updated in place: done is this column of the newest row (by
    /// `time_column`), not the number of rows.
    pub done_column: Option<String>,
    /// With `done_column`: the total the job reports, in the same newest row. It stands in for
    /// `expected_total` when that is not declared.
    pub total_column: Option<String>,
}

impl ProgressTable {
    /// A table read with every optional key at its default: count(*) is done, numbers are
    /// seconds, text without an offset is local time.
    pub fn new(db: impl Into<PathBuf>, table: &str, time_column: &str) -> ProgressTable {
        ProgressTable {
            db: db.into(),
            table: table.to_string(),
            time_column: time_column.to_string(),
            time_unit: TimeUnit::Seconds,
            time_zone: TimeZoneName::Local,
            done_column: None,
            total_column: None,
        }
    }
}

/// `log_progress:` — how done, total and percent are read from the frames of the job's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogProgress {
    /// tqdm's bar: `45%|████▌     | 450/1000 [00:07<00:52,  9.95it/s]` (with its rate and
    /// remaining time), or `450it [00:07, 9.95it/s]` with no total.
    Tqdm,
    /// The last `N/M` of the frame: `epoch 3/10 step 1200/5000` reads 1200 of 5000.
    Fraction,
    /// The last `NN%` of the frame: `67%` (never a compression ratio: `gzip -v`'s `61.8% --
    /// replaced with`, zstd's `: 15.20%   (1.32 MiB => 206 KiB`).
    Percent,
    /// curl's meter: the default one (bytes received of the total, its current speed, time
    /// spent and left) and `-#`'s bar (a percent).
    Curl,
    /// wget's bar (`45%[===>   ] 1.91M  392KB/s  eta 9s`) and the dots it writes to a file
    /// (`1950K .......... 40% 6.15K 19s`).
    Wget,
    /// rsync's `--info=progress2`: the bytes of the whole transfer, its percent, rate and time
    /// left.
    Rsync,
    /// pv's `-n`: a bare percent (or, with `-b`, bytes) a line, with `-t`'s seconds before
    /// it; and its default meter with `-f`.
    Pv,
    /// dd's `status=progress`: bytes copied, seconds and rate; no total (give expected_total).
    Dd,
    /// A regular expression with named groups `done`, `total` and `percent` (at least one of
    /// `done` and `percent`); it compiled when the file was loaded.
    Pattern {
        pattern: String,
        /// It has a `total` or a `percent` group: its readings say when the job is done.
        reports_total: bool,
    },
}

impl LogProgress {
    pub const PRESETS: [LogProgress; 8] = [
        LogProgress::Tqdm,
        LogProgress::Fraction,
        LogProgress::Percent,
        LogProgress::Curl,
        LogProgress::Wget,
        LogProgress::Rsync,
        LogProgress::Pv,
        LogProgress::Dd,
    ];

    /// The preset's name as spelt in the jobs file, or 'pattern'.
    pub fn as_str(&self) -> &'static str {
        match self {
            LogProgress::Tqdm => "tqdm",
            LogProgress::Fraction => "fraction",
            LogProgress::Percent => "percent",
            LogProgress::Curl => "curl",
            LogProgress::Wget => "wget",
            LogProgress::Rsync => "rsync",
            LogProgress::Pv => "pv",
            LogProgress::Dd => "dd",
            LogProgress::Pattern { .. } => "pattern",
        }
    }

    /// Whether the readings carry a total (or a percent, which is done at 100).
    pub fn reports_total(&self) -> bool {
        match self {
            LogProgress::Tqdm
            | LogProgress::Fraction
            | LogProgress::Percent
            | LogProgress::Curl
            | LogProgress::Wget
            | LogProgress::Rsync
            | LogProgress::Pv => true,
            // dd prints the bytes copied, never of how many.
            LogProgress::Dd => false,
            LogProgress::Pattern { reports_total, .. } => *reports_total,
        }
    }
}

/// `schedule:` — a job that runs at set times: every so long, or at the times of a cron
/// expression, each run to end with exit 0 within `grace` of its due time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub cadence: Cadence,
    /// How late after its due time a successful run may end before the job is overdue: the
    /// run's own length and some slack.
    pub grace_sec: u64,
    /// The zone a cron expression's hours are read in (default the machine's, as cron reads
    /// them). Not used by `every`.
    pub time_zone: TimeZoneName,
}

/// How often a scheduled job runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cadence {
    /// `every: 20m`: a run is due this many seconds after the last success ended (a timer
    /// with `OnUnitInactiveSec`, a loop with a sleep).
    Every { sec: u64 },
    /// `cron: "*/20 * * * *"`: the five fields of crontab(5), parsed when the file was loaded.
    Cron { expression: CronExpr },
}

/// A cron expression of `schedule.cron`: the text as written, and its parse, shared by every
/// job that writes the same text. A parse holds about 5 KB (croner keeps a bit for each year
/// it can reach) and takes about 40 µs, so a farm of 10,000 jobs sharing a few expressions
/// keeps a few, and loading its cached form parses a few (each job parsing its own took 50 MB
/// and 0.4 s). Kept as its text in the cached form.
#[derive(Debug, Clone)]
pub struct CronExpr {
    text: String,
    parsed: std::sync::Arc<croner::Cron>,
}

/// The parses of this process, by text: bounded, since a reloaded jobs file may bring new
/// texts (past the bound it starts afresh; jobs keep the parses they hold).
static PARSED_CRONS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<croner::Cron>>>,
> = std::sync::LazyLock::new(Default::default);
const PARSED_CRONS_KEPT: usize = 4096;

impl CronExpr {
    /// Parses `text` (five crontab fields that can match a real day), or reuses the parse of
    /// the same text; the error says what is wrong.
    pub fn parse(text: &str) -> Result<CronExpr, String> {
        let kept = |parsed: std::sync::Arc<croner::Cron>| CronExpr {
            text: text.to_string(),
            parsed,
        };
        let mut parses = PARSED_CRONS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(parsed) = parses.get(text) {
            return Ok(kept(parsed.clone()));
        }
        let parsed = std::sync::Arc::new(crate::core::schedule::parse_cron(text)?);
        if parses.len() >= PARSED_CRONS_KEPT {
            parses.clear();
        }
        parses.insert(text.to_string(), parsed.clone());
        Ok(kept(parsed))
    }

    /// The expression as the jobs file writes it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What croner judges times with.
    pub fn cron(&self) -> &croner::Cron {
        &self.parsed
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &CronExpr) -> bool {
        self.text == other.text
    }
}

impl Serialize for CronExpr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for CronExpr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        CronExpr::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `progress_table.time_unit`: what one step of a numeric time column is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeUnit {
    #[serde(rename = "s")]
    Seconds,
    #[serde(rename = "ms")]
    Milliseconds,
    #[serde(rename = "us")]
    Microseconds,
}

impl TimeUnit {
    pub const ALL: [TimeUnit; 3] = [
        TimeUnit::Seconds,
        TimeUnit::Milliseconds,
        TimeUnit::Microseconds,
    ];

    /// As spelt in the jobs file.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Milliseconds => "ms",
            TimeUnit::Microseconds => "us",
        }
    }

    /// How many of this unit make one second.
    pub fn per_second(self) -> i64 {
        match self {
            TimeUnit::Seconds => 1,
            TimeUnit::Milliseconds => 1_000,
            TimeUnit::Microseconds => 1_000_000,
        }
    }
}

/// `progress_table.time_zone`: the clock on the wall a naive time (no offset) was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeZoneName {
    /// The machine's zone, from `TZ` or `/etc/localtime`: what Python's `datetime.now()` and
    /// SQLite's `datetime('now', 'localtime')` write.
    Local,
    /// What SQLite's `datetime('now')` and `CURRENT_TIMESTAMP` write.
    Utc,
}

impl TimeZoneName {
    pub const ALL: [TimeZoneName; 2] = [TimeZoneName::Local, TimeZoneName::Utc];

    /// As spelt in the jobs file.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeZoneName::Local => "local",
            TimeZoneName::Utc => "utc",
        }
    }
}

/// `process:` — the processes that are the job, found by their command line in one scan of
/// `/proc` per pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// A regular expression over the argv joined by spaces; it compiled when the file was
    /// loaded. Unanchored, as `pgrep -f`: start it with '^' to keep a shell that runs the
    /// command (`sh -c 'python3 train.py'`) from matching too.
    pub cmdline: String,
    /// Only this user's processes (by effective uid, as `pgrep -u`).
    pub user: Option<ProcessUser>,
}

/// `process.user`: a name (looked up when the processes are scanned) or a uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProcessUser {
    Name(String),
    Uid(u32),
}

impl ProcessUser {
    /// As the operator wrote it.
    pub fn shown(&self) -> String {
        match self {
            ProcessUser::Name(name) => name.clone(),
            ProcessUser::Uid(uid) => uid.to_string(),
        }
    }
}

/// `restart:` — how to start the job again. argv, never a shell string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartSpec {
    pub command: Option<Vec<String>>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub routes: Vec<Route>,
}

/// One alternative restart route (SPEC §5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub name: String,
    pub command: Vec<String>,
}

/// One check: RED when it fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckSpec {
    pub name: String,
    pub command: Vec<String>,
    /// How often the watcher and dashboard run it. Default 300.
    pub every_sec: u64,
    /// Killed and reported as a fault after this long. Default 30.
    pub timeout_sec: u64,
}

/// One of `markers:` — a file or folder that gates a job's work: seed 000's `.resumed`, a
/// session marker, a `mkdir` lock. A marker holding a PID or a JSON lock is judged like a
/// lock; a bare one is stale when older than `stale_after_sec` with no live holder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkerSpec {
    pub path: PathBuf,
    pub stale_after_sec: u64,
}

/// `timeouts:` — the four timeout kinds of seed 003 (heartbeat loss is `stall_sec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Timeouts {
    pub queue_sec: Option<u64>,
    pub attempt_sec: Option<u64>,
    pub total_sec: Option<u64>,
}

//! `jobs.yaml` -> validated job specs.
//!
//! This module owns the jobs file: where it is found, how it is parsed (serde-saphyr with
//! strict booleans), and every refusal of SPEC §2. A refusal names the file, line and column,
//! quotes the offending value in 'single quotes' and says what would be accepted. One bad job
//! refuses the whole file: a half-loaded watch list is a silent hole. Nothing here probes the
//! world beyond reading the file and its permissions.

mod load;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::NaiveTime;
use serde::Serialize;

pub use load::{ConfigError, find_config_path, load, load_str};

/// The whole validated jobs file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The file it was loaded from; relative paths in it were resolved against its folder.
    pub source: PathBuf,
    pub settings: Settings,
    pub jobs: Vec<JobSpec>,
}

/// `settings:`; every key optional.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// A predicate of `should_run_when`; the job should run when all of them hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Predicate {
    /// done < expected_total.
    NotComplete,
    /// No live process holds `resource_lock` (default: `lock`).
    ResourceFree,
    /// The last run `mihari run` recorded for the job did not exit 0: a one-shot job with
    /// nothing to count (an rsync, a dd, a tqdm loop) is due until a run of it succeeds.
    NotSucceeded,
}

impl Predicate {
    pub fn as_str(self) -> &'static str {
        match self {
            Predicate::NotComplete => "not_complete",
            Predicate::ResourceFree => "resource_free",
            Predicate::NotSucceeded => "not_succeeded",
        }
    }
}

/// One job, validated. Paths are absolute (relative ones were resolved against the jobs
/// file's folder, `~/` against the home folder).
#[derive(Debug, Clone, PartialEq, Serialize)]
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

    /// Whether the job has a source that counts done items.
    pub fn has_countable_source(&self) -> bool {
        self.progress_file.is_some() || self.progress_table.is_some()
    }
}

/// `progress_table:` — a SQLite table read read-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressTable {
    pub db: PathBuf,
    pub table: String,
    /// `max()` of it is the last progress: unix seconds or ISO-8601 text.
    pub time_column: String,
}

/// `restart:` — how to start the job again. argv, never a shell string.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestartSpec {
    pub command: Option<Vec<String>>,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub routes: Vec<Route>,
}

/// One alternative restart route (SPEC §5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    pub name: String,
    pub command: Vec<String>,
}

/// One check: RED when it fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckSpec {
    pub name: String,
    pub command: Vec<String>,
    /// How often the watcher and dashboard run it. Default 300.
    pub every_sec: u64,
    /// Killed and reported as a fault after this long. Default 30.
    pub timeout_sec: u64,
}

/// `timeouts:` — the four timeout kinds of seed 003 (heartbeat loss is `stall_sec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Timeouts {
    pub queue_sec: Option<u64>,
    pub attempt_sec: Option<u64>,
    pub total_sec: Option<u64>,
}

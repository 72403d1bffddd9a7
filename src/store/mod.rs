//! The state store: one SQLite database in `state_dir` holding the event log, claims,
//! approvals, heartbeats and runs.
//!
//! This module owns the schema (versioned migrations), the files (0600 in a 0700 folder, all
//! the operator's, never a link: [`files`]), and every read and write of it. The event log is
//! append-only, enforced inside the database by triggers (no update, no delete, no id taken
//! twice) that every open checks are still there, so no bug elsewhere can rewrite history. Every write runs in a
//! `BEGIN IMMEDIATE` transaction, so two processes never interleave a read-then-write.
//! Counters such as "restarts in the last 24 h" are derived from events, never kept beside
//! them. It never stores raw paths, log lines or message bodies in the event log: a workspace
//! appears only as a short hash. It decides nothing; the engine and the executor do.

pub mod counts;
pub mod digest;
pub mod files;
pub mod health;
pub mod identity;
pub mod readings;
mod schema;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::core::decision::{Cooldown, cooldown};

/// The database file's name inside `state_dir`.
pub const DB_FILE: &str = "mihari.sqlite";
/// How long a writer waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the store could not do something; says what to do where it can.
#[derive(Debug)]
pub struct StoreError {
    words: String,
    fault: Fault,
}

/// What kind of trouble a store error is: it decides what the operator is told to do (move
/// a damaged store aside, free disk space, fix an owner or a mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The database is damaged or is not a database: SQLite's CORRUPT or NOTADB, or a
    /// quick check that found damage.
    Damaged,
    /// The disk holding the store is full: SQLite's FULL, or no space left where it lives.
    Full,
    /// Another process held the store's lock for longer than the busy timeout.
    Busy,
    /// The store is refused as it stands (an owner, a mode, a link, a missing trigger, a
    /// store replaced or emptied): the words say what to do.
    Refused,
    /// Anything else: a permission, an I/O error, a bug of ours.
    Other,
}

impl StoreError {
    /// An error in `words`, of no particular fault.
    pub fn new(words: impl Into<String>) -> StoreError {
        StoreError {
            words: words.into(),
            fault: Fault::Other,
        }
    }

    /// A refusal: the store is not used as it stands, and `words` say what to do.
    pub fn refused(words: impl Into<String>) -> StoreError {
        StoreError {
            words: words.into(),
            fault: Fault::Refused,
        }
    }

    /// An error of a known fault.
    pub fn with_fault(words: impl Into<String>, fault: Fault) -> StoreError {
        StoreError {
            words: words.into(),
            fault,
        }
    }

    pub fn fault(&self) -> Fault {
        self.fault
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.words)
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let fault = match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Fault::Damaged,
            Some(ErrorCode::DiskFull) => Fault::Full,
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Fault::Busy,
            _ => Fault::Other,
        };
        StoreError::with_fault(format!("state store: {error}"), fault)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Who wrote an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Actor {
    /// A human, through the dashboard or a confirming command.
    Operator,
    /// The machine watcher.
    Watcher,
    /// A job, through `mihari run`, `heartbeat` or `approval request`.
    Job,
    /// A headless command (`mihari claim`, `--yes`).
    Cli,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Operator => "operator",
            Actor::Watcher => "watcher",
            Actor::Job => "job",
            Actor::Cli => "cli",
        }
    }

    fn parse(text: &str) -> Actor {
        match text {
            "operator" => Actor::Operator,
            "watcher" => Actor::Watcher,
            "job" => Actor::Job,
            _ => Actor::Cli,
        }
    }
}

/// The kinds of event SPEC §6 names. Stored as their kebab-case text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Detected,
    MarkerCreated,
    Duplicate,
    Claimed,
    ResumeRequested,
    Spawned,
    Verified,
    Failed,
    /// A restart claim whose claimer died before it spawned anything, settled by recovery:
    /// nothing was tried, so nothing failed, and the same situation may be tried again.
    Abandoned,
    Skipped,
    CooldownSuppressed,
    CapReached,
    Released,
    Refused,
    Confirmed,
    Approved,
    Denied,
    Declined,
    ApprovalRequested,
    Escalated,
    DigestQueued,
    DigestDelivered,
    StateChanged,
    Started,
    Exited,
    WatcherStarted,
    WatcherTakeover,
    /// One `mihari watch --once` pass; its reason carries the interval.
    WatcherPass,
    WatcherStopped,
    /// The operator paused a job on purpose (`mihari pause`); the reason says who and why.
    Paused,
    /// The operator resumed a paused job.
    Resumed,
    /// The operator acknowledged a job's broken rules, with who and why: they end here.
    Acknowledged,
    /// The jobs file was loaded again (saved, or SIGHUP to the watcher); the reason names the
    /// jobs added and removed.
    ConfigReloaded,
    /// A save of the jobs file was refused (file:line:col and why): the last good file stays
    /// in force until it is fixed.
    ConfigRefused,
    /// `mihari run` dropped part of a job's output because its log could not be written
    /// (disk full); the reason says how many bytes and the system's words, never a path.
    OutputLost,
}

impl Kind {
    pub const ALL: [Kind; 35] = [
        Kind::Detected,
        Kind::MarkerCreated,
        Kind::Duplicate,
        Kind::Claimed,
        Kind::ResumeRequested,
        Kind::Spawned,
        Kind::Verified,
        Kind::Failed,
        Kind::Abandoned,
        Kind::Skipped,
        Kind::CooldownSuppressed,
        Kind::CapReached,
        Kind::Released,
        Kind::Refused,
        Kind::Confirmed,
        Kind::Approved,
        Kind::Denied,
        Kind::Declined,
        Kind::ApprovalRequested,
        Kind::Escalated,
        Kind::DigestQueued,
        Kind::DigestDelivered,
        Kind::StateChanged,
        Kind::Started,
        Kind::Exited,
        Kind::WatcherStarted,
        Kind::WatcherTakeover,
        Kind::WatcherPass,
        Kind::WatcherStopped,
        Kind::Paused,
        Kind::Resumed,
        Kind::Acknowledged,
        Kind::ConfigReloaded,
        Kind::ConfigRefused,
        Kind::OutputLost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Detected => "detected",
            Kind::MarkerCreated => "marker-created",
            Kind::Duplicate => "duplicate",
            Kind::Claimed => "claimed",
            Kind::ResumeRequested => "resume-requested",
            Kind::Spawned => "spawned",
            Kind::Verified => "verified",
            Kind::Failed => "failed",
            Kind::Abandoned => "abandoned",
            Kind::Skipped => "skipped",
            Kind::CooldownSuppressed => "cooldown-suppressed",
            Kind::CapReached => "cap-reached",
            Kind::Released => "released",
            Kind::Refused => "refused",
            Kind::Confirmed => "confirmed",
            Kind::Approved => "approved",
            Kind::Denied => "denied",
            Kind::Declined => "declined",
            Kind::ApprovalRequested => "approval-requested",
            Kind::Escalated => "escalated",
            Kind::DigestQueued => "digest-queued",
            Kind::DigestDelivered => "digest-delivered",
            Kind::StateChanged => "state-changed",
            Kind::Started => "started",
            Kind::Exited => "exited",
            Kind::WatcherStarted => "watcher-started",
            Kind::WatcherTakeover => "watcher-takeover",
            Kind::WatcherPass => "watcher-pass",
            Kind::WatcherStopped => "watcher-stopped",
            Kind::Paused => "paused",
            Kind::Resumed => "resumed",
            Kind::Acknowledged => "acknowledged",
            Kind::ConfigReloaded => "config-reloaded",
            Kind::ConfigRefused => "config-refused",
            Kind::OutputLost => "output-lost",
        }
    }

    /// The kind spelled `text`, if it is one.
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// An event to append. Only short, operator-facing words go in `reason`: never a path, a log
/// line or a message body.
#[derive(Debug, Clone, Default)]
pub struct NewEvent {
    pub kind: Option<Kind>,
    pub job: Option<String>,
    pub run: Option<String>,
    pub workspace_hash: Option<String>,
    pub route: Option<String>,
    /// A claim or approval key: a content hash, never raw content.
    pub key: Option<String>,
    pub reason: Option<String>,
}

impl NewEvent {
    pub fn new(kind: Kind) -> Self {
        NewEvent {
            kind: Some(kind),
            ..NewEvent::default()
        }
    }

    pub fn job(mut self, job: &str) -> Self {
        self.job = Some(job.to_string());
        self
    }

    pub fn run(mut self, run: Option<&str>) -> Self {
        self.run = run.map(str::to_string);
        self
    }

    pub fn workspace_hash(mut self, hash: Option<String>) -> Self {
        self.workspace_hash = hash;
        self
    }

    pub fn route(mut self, route: Option<&str>) -> Self {
        self.route = route.map(str::to_string);
        self
    }

    pub fn key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// One event as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub job: Option<String>,
    pub actor: Actor,
    pub session: String,
    pub run: Option<String>,
    pub workspace_hash: Option<String>,
    pub route: Option<String>,
    pub key: Option<String>,
    pub reason: Option<String>,
}

/// Which events to read.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub job: Option<String>,
    pub kind: Option<String>,
    pub since: Option<DateTime<Utc>>,
    /// The newest this many, still returned oldest first.
    pub last: Option<usize>,
}

/// Where a claim stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimState {
    Claimed,
    Spawned,
    Verified,
    Failed,
}

impl ClaimState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Claimed => "claimed",
            ClaimState::Spawned => "spawned",
            ClaimState::Verified => "verified",
            ClaimState::Failed => "failed",
        }
    }

    fn parse(text: &str) -> ClaimState {
        match text {
            "spawned" => ClaimState::Spawned,
            "verified" => ClaimState::Verified,
            "failed" => ClaimState::Failed,
            _ => ClaimState::Claimed,
        }
    }
}

/// A claim as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claim {
    pub key: String,
    pub job: String,
    pub action: String,
    pub state: ClaimState,
    pub session: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub pid: Option<u32>,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    /// When the claimer was about to spawn: a spawn may have happened from then on, even if
    /// no pid was recorded (a claimer killed between the fork and the record).
    pub spawn_started: Option<DateTime<Utc>>,
    /// The run the spawn belongs to, as written into the lock by `mihari run`.
    pub run: Option<String>,
}

/// The answer to a claim: the first claimer wins; everyone else sees who did.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    Won,
    Duplicate(Claim),
}

/// What claiming a restart found: the claim's outcome, or the workspace cooldown holding a
/// new situation back (recorded as `cooldown-suppressed`), with when it opens.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartClaim {
    Claimed(ClaimOutcome),
    Cooling {
        why: String,
        opens_at: DateTime<Utc>,
    },
}

/// An approval request's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Approved,
    Denied,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
        }
    }

    fn parse(text: &str) -> ApprovalState {
        match text {
            "approved" => ApprovalState::Approved,
            "denied" => ApprovalState::Denied,
            _ => ApprovalState::Pending,
        }
    }
}

/// An irreversible step a job asked a human about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    pub key: String,
    pub job: String,
    pub step: String,
    pub summary: String,
    pub state: ApprovalState,
    pub reason: Option<String>,
    pub requested: DateTime<Utc>,
    pub decided: Option<DateTime<Utc>>,
    /// Who asked: the user that ran `mihari approval request` (`None` for older requests).
    pub requested_by: Option<String>,
}

/// How many of a job's newest heartbeats the store keeps: the newest is what the screen, the
/// verdict and the digest use; the rest is a bounded history (a day at one a minute).
pub const HEARTBEATS_KEPT: i64 = 1440;

/// The most older heartbeats one heartbeat removes: a store that grew before heartbeats were
/// pruned (three million rows) is back to the newest within about sixty heartbeats, each
/// taking a tenth of a second more meanwhile (the whole at once took 6 s).
pub const PRUNED_AT_ONCE: i64 = 50_000;

/// A job's heartbeat: progress it reported itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heartbeat {
    pub job: String,
    pub at: DateTime<Utc>,
    pub done: Option<u64>,
    pub total: Option<u64>,
    pub position: Option<String>,
    pub note: Option<String>,
}

/// An approval's wait: when it was asked, and when it was answered (`None`: still open).
pub type ApprovalWait = (DateTime<Utc>, Option<DateTime<Utc>>);

/// An escalation episode: a job in one of the four conditions, from entering it to leaving it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    pub id: i64,
    pub job: String,
    pub kind: String,
    pub started: DateTime<Utc>,
    pub escalated: Option<DateTime<Utc>>,
}

/// A run's restart route history (SPEC §5: a run never goes to a route it has used).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRoutes {
    pub run: String,
    pub job: String,
    pub routes: Vec<String>,
    pub hops: u32,
}

/// The open database. Cheap to open: one per command, or per dashboard.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    session: String,
    actor: Actor,
}

/// Who confirmed the decisions this process records, when they came from a fleet screen on
/// another machine (`--from-fleet OPERATOR@HOST`): set once by the command line, written into
/// every event this process appends, so the host's own log names the person and the machine.
static FLEET_ORIGIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records that this process acts for `operator` on the fleet screen of `host`; the first
/// call wins.
pub fn decided_from_fleet(operator: &str, host: &str) {
    let _ = FLEET_ORIGIN.set(format!(
        "from the fleet: operator '{}' on '{}'",
        crate::core::text::inert(operator),
        crate::core::text::inert(host)
    ));
}

/// Whether this process acts for an operator on a fleet screen (a human confirmed it there).
pub fn fleet_origin() -> Option<&'static str> {
    FLEET_ORIGIN.get().map(String::as_str)
}

/// This process's session id: its PID and start ticks, so a recovery pass can tell whether
/// the session that made a claim is still alive.
pub fn this_session() -> String {
    let pid = std::process::id();
    let ticks = crate::probe::proc::self_start_ticks().unwrap_or(0);
    format!("{pid}.{ticks}")
}

/// The short hash under which a workspace appears in the event log.
pub fn workspace_hash(path: &Path) -> String {
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    hex(&digest[..6])
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn from_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

impl Store {
    /// Opens (creating if needed) the store in `state_dir`, writing as `actor`.
    pub fn open(state_dir: &Path, actor: Actor) -> Result<Store> {
        Self::open_as(state_dir, actor, this_session())
    }

    /// Opens the store with an explicit session id (tests, and sessions that are not this
    /// process).
    pub fn open_as(state_dir: &Path, actor: Actor, session: String) -> Result<Store> {
        files::ensure_private_dir(state_dir)?;
        let path = state_dir.join(DB_FILE);
        let existing = files::inspect(&path, "the state store")?;
        for (suffix, what) in [
            ("-wal", "the state store's WAL file"),
            ("-shm", "the state store's shared-memory file"),
        ] {
            files::inspect(&files::beside(&path, suffix), what)?;
        }
        let recorded = identity::recorded(&path)?;
        identity::before_open(&path, recorded.as_deref(), existing.as_ref())?;
        if existing.is_none() {
            // Created 0600 before SQLite touches it, so it is never readable by others, and
            // never through a link.
            match files::create_private(&path) {
                Ok(_) => {}
                // Another process made it a moment ago: look at it as it is.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    files::inspect(&path, "the state store")?;
                }
                Err(error) => {
                    return Err(StoreError::new(format!(
                        "cannot create the state store '{}': {error}",
                        path.display()
                    )));
                }
            }
        }
        // SQLite gets the folder's real path and may not follow a link: one planted after the
        // checks above is refused rather than written through (its own -wal and -shm opens
        // never follow one either).
        let real = fs::canonicalize(state_dir)
            .map(|dir| dir.join(DB_FILE))
            .map_err(|e| {
                StoreError::new(format!(
                    "cannot resolve the state folder '{}': {e}",
                    state_dir.display()
                ))
            })?;
        let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&real, flags).map_err(|e| {
            StoreError::with_fault(
                format!("cannot open the state store '{}': {e}", path.display()),
                StoreError::from(e).fault(),
            )
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        if let Some(id) = &recorded {
            identity::verify(&conn, &path, id)?;
        }
        // Two processes opening a fresh store at once race for the switch to WAL and the
        // first migration; SQLite answers the loser "busy" at once, whatever the busy
        // timeout. Try again for as long as the busy timeout allows.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        loop {
            match prepare(&conn).and_then(|()| match recorded {
                Some(_) => Ok(()),
                None => identity::settle(&conn, &path),
            }) {
                Ok(()) => break,
                Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(error) => return Err(error),
            }
        }
        schema::check_protection(&conn, &path)?;
        Ok(Store {
            conn,
            path,
            session,
            actor,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn actor(&self) -> Actor {
        self.actor
    }

    /// The same store, writing as another actor.
    pub fn with_actor(mut self, actor: Actor) -> Store {
        self.actor = actor;
        self
    }

    /// Runs `work` in one `BEGIN IMMEDIATE` transaction: it holds the write lock from the
    /// start, so a read inside it stays true until the commit.
    fn write<T>(
        &mut self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = work(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// Appends one event and returns its id.
    pub fn append(&mut self, event: NewEvent) -> Result<i64> {
        self.append_at(event, Utc::now())
    }

    /// Appends one event that happened at `at`: the watcher records what it could not record
    /// at the time (a full disk) with the time it happened, so windows such as "restarts in
    /// the last 24 h" count it where it belongs.
    pub fn append_at(&mut self, event: NewEvent, at: DateTime<Utc>) -> Result<i64> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| insert_event(tx, actor, &session, &event, at))
    }

    /// Reads events, oldest first.
    pub fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let mut sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE 1=1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(job) = &filter.job {
            sql.push_str(" AND job = ?");
            args.push(job.clone().into());
        }
        if let Some(kind) = &filter.kind {
            sql.push_str(" AND kind = ?");
            args.push(kind.clone().into());
        }
        if let Some(since) = filter.since {
            sql.push_str(" AND at_ms >= ?");
            args.push(ms(since).into());
        }
        match filter.last {
            Some(n) => {
                sql = format!("SELECT * FROM ({sql} ORDER BY id DESC LIMIT {n}) ORDER BY id")
            }
            None => sql.push_str(" ORDER BY id"),
        }
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map(rusqlite::params_from_iter(args), event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Whether the event log records a start of `job` (a spawn or a `mihari run`).
    pub fn started_before(&self, job: &str) -> Result<bool> {
        let found: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM events WHERE job = ?1 AND kind IN ('spawned', 'started') LIMIT 1",
                params![job],
                |row| row.get(0),
            )
            .optional()?;
        Ok(found.is_some())
    }

    /// The newest event of one of `kinds` (for `job`, or for any job when `None`).
    pub fn last_event(&self, job: Option<&str>, kinds: &[Kind]) -> Result<Option<Event>> {
        let list = kind_list(kinds);
        // Two spellings, so SQLite can use the (job, kind, id) index when a job is given.
        let which = if job.is_some() {
            "job = ?1"
        } else {
            "?1 IS NULL"
        };
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE kind IN ({list}) AND {which} \
             ORDER BY id DESC LIMIT 1"
        );
        Ok(self
            .conn
            .query_row(&sql, params![job], event_from_row)
            .optional()?)
    }

    /// The newest event of each (job, kind) for `kinds`, over every job: one query for a
    /// whole gather, whatever the number of jobs.
    pub fn newest_per_job(&self, kinds: &[Kind]) -> Result<Vec<Event>> {
        let list = kind_list(kinds);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT max(id) FROM events \
             WHERE kind IN ({list}) AND job IS NOT NULL GROUP BY job, kind)"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map([], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Events of one of `kinds` since `since`, over every job, oldest first.
    pub fn events_since(&self, kinds: &[Kind], since: DateTime<Utc>) -> Result<Vec<Event>> {
        let list = kind_list(kinds);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE kind IN ({list}) AND at_ms >= ?1 ORDER BY id"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map(params![ms(since)], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// When each of `runs` (job, run) first started, for every run given.
    pub fn runs_started(
        &self,
        runs: &[(String, String)],
    ) -> Result<Vec<(String, String, DateTime<Utc>)>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        // SQLite takes a bounded number of parameters: a few hundred runs at a time.
        for chunk in runs.chunks(400) {
            let holes = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT job, run, min(at_ms) FROM events WHERE kind = 'started' \
                 AND run IN ({holes}) GROUP BY job, run"
            );
            let mut statement = self.conn.prepare(&sql)?;
            let rows = statement.query_map(
                rusqlite::params_from_iter(chunk.iter().map(|(_, run)| run)),
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        from_ms(row.get(2)?),
                    ))
                },
            )?;
            for row in rows {
                let row = row?;
                if chunk
                    .iter()
                    .any(|(job, run)| *job == row.0 && *run == row.1)
                {
                    found.push(row);
                }
            }
        }
        Ok(found)
    }

    /// The newest heartbeat of every job: the jobs found by skipping from one to the next
    /// in the index, and each one's newest by one step back from its end, so the cost follows
    /// the jobs, not the heartbeats kept.
    pub fn newest_heartbeats(&self) -> Result<Vec<Heartbeat>> {
        let mut statement = self.conn.prepare(
            "WITH RECURSIVE jobs(job) AS ( \
                 SELECT min(job) FROM heartbeats \
                 UNION ALL \
                 SELECT (SELECT min(job) FROM heartbeats WHERE job > jobs.job) FROM jobs \
                 WHERE jobs.job IS NOT NULL) \
             SELECT h.job, h.at_ms, h.done, h.total, h.position, h.note FROM jobs \
             JOIN heartbeats h ON h.id = \
                 (SELECT id FROM heartbeats WHERE job = jobs.job ORDER BY id DESC LIMIT 1) \
             WHERE jobs.job IS NOT NULL",
        )?;
        let rows = statement.query_map([], heartbeat_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Every approval wait still open or answered since `since`, with its job.
    pub fn approval_waits_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, ApprovalWait)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, requested_ms, decided_ms FROM approvals \
             WHERE decided_ms IS NULL OR decided_ms >= ?1",
        )?;
        let rows = statement.query_map(params![ms(since)], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (
                    from_ms(row.get(1)?),
                    row.get::<_, Option<i64>>(2)?.map(from_ms),
                ),
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// (job, key) pairs that more than one `spawned` event carries since `since`.
    pub fn duplicate_spawns_since(&self, since: DateTime<Utc>) -> Result<Vec<(String, String)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, key FROM events WHERE kind = 'spawned' AND at_ms >= ?1 \
             AND key IS NOT NULL AND job IS NOT NULL GROUP BY job, key HAVING count(*) > 1",
        )?;
        let rows = statement.query_map(params![ms(since)], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The newest `state-changed` event into `state` ("RUNNING") of every job: when each job
    /// was last seen entering it.
    pub fn newest_changes_into(&self, state: &str) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT max(id) FROM events \
             WHERE kind = 'state-changed' AND job IS NOT NULL AND reason LIKE ?1 GROUP BY job)"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map(params![format!("%-> {state}")], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// (job, key, id of its newest spawn) for every key that more than one `spawned` event
    /// carries since `since`: a duplicate spawn, and the event that made it one.
    pub fn duplicate_spawns_at_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, String, i64)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, key, max(id) FROM events WHERE kind = 'spawned' \
             AND at_ms >= ?1 AND key IS NOT NULL AND job IS NOT NULL GROUP BY job, key \
             HAVING count(*) > 1",
        )?;
        let rows = statement.query_map(params![ms(since)], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// How many times each job was ever spawned (restarted) by anyone, by the event log: the
    /// `mihari_job_restarts_total` counter. The log is append-only, so the count only grows.
    pub fn spawn_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, count(*) FROM events WHERE kind = 'spawned' AND job IS NOT NULL \
             GROUP BY job",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((row.get(0)?, row.get::<_, i64>(1)?.max(0) as u64))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// How many restarts of each job (of `job` alone, when given) failed in its current
    /// episode: since it was last seen healthy (`verified`, or `state-changed ... -> RUNNING`)
    /// or acknowledged. One episode's attempts are counted across its claim keys, so a third
    /// failed retry says "attempt 3", not "attempt 1" under a new key.
    pub fn restart_failures_in_episode(&self, job: Option<&str>) -> Result<Vec<(String, u64)>> {
        let mut statement = self.conn.prepare(
            "SELECT f.job, count(*) FROM events f WHERE f.kind = 'failed' \
             AND f.key IS NOT NULL AND f.job IS NOT NULL AND (?1 IS NULL OR f.job = ?1) \
             AND f.id > coalesce((SELECT max(e.id) FROM events e WHERE e.job = f.job \
             AND (e.kind IN ('verified', 'acknowledged') OR (e.kind = 'state-changed' \
             AND e.reason LIKE '%-> RUNNING'))), 0) GROUP BY f.job",
        )?;
        let rows = statement.query_map(params![job], |row| {
            Ok((row.get(0)?, row.get::<_, i64>(1)?.max(0) as u64))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Events of `job` of one of `kinds` since `since`, oldest first.
    pub fn events_of(&self, job: &str, kinds: &[Kind], since: DateTime<Utc>) -> Result<Vec<Event>> {
        let list = kind_list(kinds);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE kind IN ({list}) AND job = ?1 \
             AND at_ms >= ?2 ORDER BY id"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map(params![job, ms(since)], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// When run `run` of `job` first started.
    pub fn run_started(&self, job: &str, run: &str) -> Result<Option<DateTime<Utc>>> {
        let at: Option<i64> = self.conn.query_row(
            "SELECT min(at_ms) FROM events WHERE kind = 'started' AND job = ?1 AND run = ?2",
            params![job, run],
            |row| row.get(0),
        )?;
        Ok(at.map(from_ms))
    }

    /// What run `run` of `job` recorded of itself (`mihari run`'s own events, oldest first):
    /// its `started`, and its `exited`, or the `failed` or `duplicate` that kept it from
    /// starting. This, not whether the lock is held at the moment of looking, says whether a
    /// restart's spawn ran: a run that started and has already exited 0 holds nothing.
    pub fn run_record(&self, job: &str, run: &str) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE job = ?1 AND kind IN ('started', 'exited', \
             'failed', 'duplicate') AND actor = 'job' AND run = ?2 ORDER BY id"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let rows = statement.query_map(params![job, run], event_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The end of the newest run of `job` that exited 0: an `exited` event whose reason is
    /// `exit 0` (with what `mihari run` adds after a ';'). Walks back from the newest end, so it
    /// costs the failures since the last success, never the whole log.
    pub fn last_success(&self, job: &str) -> Result<Option<DateTime<Utc>>> {
        let at: Option<i64> = self
            .conn
            .query_row(
                "SELECT at_ms FROM events WHERE job = ?1 AND kind = 'exited' \
                 AND (reason = 'exit 0' OR reason LIKE 'exit 0;%') ORDER BY id DESC LIMIT 1",
                params![job],
                |row| row.get(0),
            )
            .optional()?;
        Ok(at.map(from_ms))
    }

    /// When the event log first names `job` (its oldest event of any kind): when mihari first
    /// saw it.
    pub fn first_seen(&self, job: &str) -> Result<Option<DateTime<Utc>>> {
        let at: Option<i64> = self.conn.query_row(
            "SELECT min(at_ms) FROM events WHERE job = ?1",
            params![job],
            |row| row.get(0),
        )?;
        Ok(at.map(from_ms))
    }

    /// Every approval request of `job` as (asked, answered) times.
    pub fn approval_waits(&self, job: &str) -> Result<Vec<ApprovalWait>> {
        let mut statement = self
            .conn
            .prepare("SELECT requested_ms, decided_ms FROM approvals WHERE job = ?1")?;
        let rows = statement.query_map(params![job], |row| {
            Ok((
                from_ms(row.get(0)?),
                row.get::<_, Option<i64>>(1)?.map(from_ms),
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Keys that more than one `spawned` event carries since `since`: a duplicate spawn.
    pub fn duplicate_spawns(&self, job: &str, since: DateTime<Utc>) -> Result<Vec<String>> {
        let mut statement = self.conn.prepare(
            "SELECT key FROM events WHERE kind = 'spawned' AND job = ?1 AND at_ms >= ?2 \
             AND key IS NOT NULL GROUP BY key HAVING count(*) > 1",
        )?;
        let rows = statement.query_map(params![job, ms(since)], |row| row.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// How many events of `kind` for `job` (any actor when `actor` is `None`) since `since`.
    pub fn count(
        &self,
        kind: Kind,
        job: Option<&str>,
        actor: Option<Actor>,
        since: DateTime<Utc>,
    ) -> Result<u64> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM events WHERE kind = ?1 AND (?2 IS NULL OR job = ?2) \
             AND (?3 IS NULL OR actor = ?3) AND at_ms >= ?4",
            params![kind.as_str(), job, actor.map(Actor::as_str), ms(since)],
            |row| row.get(0),
        )?;
        Ok(n.max(0) as u64)
    }

    /// The time of the last spawn in the workspace with this hash.
    pub fn last_spawn_in_workspace(&self, hash: &str) -> Result<Option<DateTime<Utc>>> {
        last_spawn_in(&self.conn, hash)
    }

    /// Claims `key` for `job`'s `action`: the first claimer wins and records `claimed`;
    /// every later claimer records `duplicate` and wins nothing. One transaction, so two
    /// processes can never both win.
    pub fn claim(
        &mut self,
        key: &str,
        job: &str,
        action: &str,
        reason: &str,
    ) -> Result<ClaimOutcome> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| claim_in(tx, actor, &session, key, job, action, reason, None))
    }

    /// Claims the restart `key` of `job` (run `run`) under its workspace's cooldown, in one
    /// transaction: a key already claimed is a `duplicate` whatever the cooldown; a new one
    /// is `cooldown-suppressed` while a spawn in the workspace (`hash`) is younger than
    /// `cooldown_sec`, or another restart there has claimed and not yet spawned; otherwise
    /// it is claimed, the `claimed` event carrying the workspace hash. Two restarts in one
    /// workspace can therefore never both pass the cooldown.
    pub fn claim_restart(
        &mut self,
        key: &str,
        job: &str,
        run: &str,
        reason: &str,
        workspace: Option<(&str, u64)>,
    ) -> Result<RestartClaim> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            let now = Utc::now();
            if let Some((hash, cooldown_sec)) = workspace
                && read_claim(tx, key)?.is_none()
                && let Some((why, opens_at)) = workspace_cooling(tx, hash, cooldown_sec, now)?
            {
                insert_event(
                    tx,
                    actor,
                    &session,
                    &NewEvent::new(Kind::CooldownSuppressed)
                        .job(job)
                        .key(key)
                        .workspace_hash(Some(hash.to_string()))
                        .run(Some(run))
                        .reason(why.clone()),
                    now,
                )?;
                return Ok(RestartClaim::Cooling { why, opens_at });
            }
            let hash = workspace.map(|(hash, _)| hash);
            claim_in(tx, actor, &session, key, job, "restart", reason, hash)
                .map(RestartClaim::Claimed)
        })
    }

    /// Moves a claim from `from` to `to`, recording `event` with it (`spawned`, `verified`,
    /// `failed`). Nothing happens, and `false` is returned, when the claim is no longer in
    /// `from`: two recovery passes never both resolve the same claim. A failure keeps the
    /// attempt count and the last error.
    pub fn advance_claim(
        &mut self,
        key: &str,
        from: ClaimState,
        to: ClaimState,
        pid: Option<u32>,
        error: Option<&str>,
        event: NewEvent,
    ) -> Result<bool> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            advance_in(
                tx,
                actor,
                &session,
                ClaimMove {
                    key,
                    from,
                    claimer: None,
                    to,
                    pid,
                    error,
                },
                &[event],
            )
        })
    }

    /// Settles the claim of a claimer that died: moves it from `from` to `to` only while it is
    /// still in `from` AND still `claimer`'s, and records `events` (a `spawned` recovery
    /// found, then its verdict) in the same transaction. A recovery pass working from what it
    /// read a moment ago therefore never records a spawn the living claimer has recorded
    /// meanwhile, nor settles a claim someone else has since taken over.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_orphan(
        &mut self,
        key: &str,
        from: ClaimState,
        claimer: &str,
        to: ClaimState,
        pid: Option<u32>,
        error: Option<&str>,
        events: &[NewEvent],
    ) -> Result<bool> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            advance_in(
                tx,
                actor,
                &session,
                ClaimMove {
                    key,
                    from,
                    claimer: Some(claimer),
                    to,
                    pid,
                    error,
                },
                events,
            )
        })
    }

    /// Opens a failed claim for another attempt, counting it — only when that claim never
    /// spawned anything, so one key never leads to two spawns.
    pub fn retry_claim(&mut self, key: &str, reason: &str) -> Result<bool> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            let now = Utc::now();
            let changed = tx.execute(
                "UPDATE claims SET state = 'claimed', session = ?2, attempts = attempts + 1, \
                 updated_ms = ?3 WHERE key = ?1 AND state = 'failed' AND pid IS NULL \
                 AND spawn_started_ms IS NULL",
                params![key, session, ms(now)],
            )?;
            if changed == 1 {
                let job: String =
                    tx.query_row("SELECT job FROM claims WHERE key = ?1", params![key], |r| {
                        r.get(0)
                    })?;
                insert_event(
                    tx,
                    actor,
                    &session,
                    &NewEvent::new(Kind::Claimed)
                        .job(&job)
                        .key(key)
                        .reason(reason),
                    now,
                )?;
            }
            Ok(changed == 1)
        })
    }

    /// Marks a claim as about to spawn for `run`, before the fork: from here on a claimer
    /// that dies may have spawned, and the claim is never tried again blindly. `false` when
    /// the claim is no longer this session's to spawn.
    pub fn mark_spawning(&mut self, key: &str, run: &str) -> Result<bool> {
        let session = self.session.clone();
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE claims SET spawn_started_ms = ?3, run = ?4, updated_ms = ?3 \
                 WHERE key = ?1 AND session = ?2 AND state = 'claimed' \
                 AND spawn_started_ms IS NULL",
                params![key, session, ms(Utc::now()), run],
            )?;
            Ok(changed == 1)
        })
    }

    pub fn claim_of(&self, key: &str) -> Result<Option<Claim>> {
        read_claim(&self.conn, key)
    }

    /// Claims still `claimed` or `spawned` (not verified, not failed).
    pub fn open_claims(&self) -> Result<Vec<Claim>> {
        let mut statement = self.conn.prepare(
            "SELECT key, job, action, state, session, attempts, last_error, pid, created_ms, updated_ms, \
             spawn_started_ms, run \
             FROM claims WHERE state IN ('claimed', 'spawned') ORDER BY created_ms",
        )?;
        let rows = statement.query_map([], claim_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Records a job's approval request. The same key never makes a second entry: the
    /// existing request is returned as it stands.
    pub fn request_approval(
        &mut self,
        job: &str,
        step: &str,
        key: &str,
        summary: &str,
    ) -> Result<Approval> {
        self.request_approval_by(job, step, key, summary, None)
    }

    /// [`Store::request_approval`], naming who asked (a user name), which the job's detail
    /// shows beside the step.
    pub fn request_approval_by(
        &mut self,
        job: &str,
        step: &str,
        key: &str,
        summary: &str,
        by: Option<&str>,
    ) -> Result<Approval> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            let now = Utc::now();
            let inserted = tx.execute(
                "INSERT INTO approvals (key, job, step, summary, state, requested_ms, \
                 requested_by) VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6) \
                 ON CONFLICT(key) DO NOTHING",
                params![key, job, step, summary, ms(now), by],
            )?;
            if inserted == 1 {
                insert_event(
                    tx,
                    actor,
                    &session,
                    &NewEvent::new(Kind::ApprovalRequested)
                        .job(job)
                        .key(key)
                        .reason(format!("step '{}'", crate::core::text::inert(step))),
                    now,
                )?;
            }
            read_approval(tx, key)?
                .ok_or_else(|| StoreError::new(format!("approval '{key}' vanished")))
        })
    }

    /// Approves or denies a pending request. Refuses (with the current state) when it is not
    /// pending any more: a decision is never made twice.
    pub fn decide_approval(
        &mut self,
        key: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<std::result::Result<Approval, Approval>> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            let Some(current) = read_approval(tx, key)? else {
                return Err(StoreError::new(format!(
                    "no approval request with key '{key}' (see mihari approval list)"
                )));
            };
            if current.state != ApprovalState::Pending {
                return Ok(Err(current));
            }
            let now = Utc::now();
            let state = if approve { "approved" } else { "denied" };
            tx.execute(
                "UPDATE approvals SET state = ?2, reason = ?3, decided_ms = ?4, decided_by = ?5 \
                 WHERE key = ?1 AND state = 'pending'",
                params![key, state, reason, ms(now), actor.as_str()],
            )?;
            let kind = if approve {
                Kind::Approved
            } else {
                Kind::Denied
            };
            let mut event = NewEvent::new(kind).job(&current.job).key(key);
            if let Some(reason) = reason {
                event = event.reason(reason);
            }
            insert_event(tx, actor, &session, &event, now)?;
            let decided = read_approval(tx, key)?
                .ok_or_else(|| StoreError::new(format!("approval '{key}' vanished")))?;
            Ok(Ok(decided))
        })
    }

    pub fn approval(&self, key: &str) -> Result<Option<Approval>> {
        read_approval(&self.conn, key)
    }

    /// Approval requests, newest first; only pending ones when `pending_only`.
    pub fn approvals(&self, pending_only: bool) -> Result<Vec<Approval>> {
        let mut statement = self.conn.prepare(
            "SELECT key, job, step, summary, state, reason, requested_ms, decided_ms, requested_by \
             FROM approvals \
             WHERE (?1 = 0 OR state = 'pending') ORDER BY requested_ms DESC",
        )?;
        let rows = statement.query_map(params![i64::from(pending_only)], approval_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Records a heartbeat: a progress source the job reports itself. Only the job's newest
    /// [`HEARTBEATS_KEPT`] are kept: each heartbeat removes up to [`PRUNED_AT_ONCE`] older
    /// ones in the same transaction, so a store that grew before heartbeats were pruned
    /// shrinks back a little at every heartbeat, never in one long write.
    pub fn heartbeat(&mut self, beat: &Heartbeat) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO heartbeats (job, at_ms, done, total, position, note) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    beat.job,
                    ms(beat.at),
                    beat.done.map(|d| d as i64),
                    beat.total.map(|t| t as i64),
                    beat.position,
                    beat.note
                ],
            )?;
            tx.execute(
                "DELETE FROM heartbeats WHERE id IN ( \
                     SELECT id FROM heartbeats WHERE job = ?1 AND id < ( \
                         SELECT id FROM heartbeats WHERE job = ?1 \
                         ORDER BY id DESC LIMIT 1 OFFSET ?2) \
                     ORDER BY id LIMIT ?3)",
                params![beat.job, HEARTBEATS_KEPT - 1, PRUNED_AT_ONCE],
            )?;
            Ok(())
        })
    }

    /// How many heartbeats of `job` the store holds.
    pub fn heartbeats_kept(&self, job: &str) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM heartbeats WHERE job = ?1",
            params![job],
            |row| row.get(0),
        )?)
    }

    /// The last heartbeat of `job`: the newest recorded, as the screen shows it.
    pub fn last_heartbeat(&self, job: &str) -> Result<Option<Heartbeat>> {
        Ok(self
            .conn
            .query_row(
                "SELECT job, at_ms, done, total, position, note FROM heartbeats WHERE job = ?1 \
                 ORDER BY id DESC LIMIT 1",
                params![job],
                heartbeat_from_row,
            )
            .optional()?)
    }

    /// The routes `run` has used so far, and its hop count.
    pub fn run_routes(&self, run: &str) -> Result<Option<RunRoutes>> {
        Ok(self
            .conn
            .query_row(
                "SELECT run, job, routes, hops FROM runs WHERE run = ?1",
                params![run],
                |row| {
                    let routes: String = row.get(2)?;
                    Ok(RunRoutes {
                        run: row.get(0)?,
                        job: row.get(1)?,
                        routes: serde_json::from_str(&routes).unwrap_or_default(),
                        hops: row.get::<_, i64>(3)?.max(0) as u32,
                    })
                },
            )
            .optional()?)
    }

    /// Records that `run` went to `route`: one more hop in its history.
    pub fn record_route(&mut self, run: &str, job: &str, route: &str) -> Result<RunRoutes> {
        self.write(|tx| {
            let now = ms(Utc::now());
            let existing: Option<String> = tx
                .query_row(
                    "SELECT routes FROM runs WHERE run = ?1",
                    params![run],
                    |r| r.get(0),
                )
                .optional()?;
            let mut routes: Vec<String> = existing
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or_default();
            routes.push(route.to_string());
            let text = serde_json::to_string(&routes).unwrap_or_else(|_| "[]".into());
            tx.execute(
                "INSERT INTO runs (run, job, routes, hops, started_ms, updated_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
                 ON CONFLICT(run) DO UPDATE SET routes = ?3, hops = ?4, updated_ms = ?5",
                params![run, job, text, routes.len() as i64, now],
            )?;
            Ok(RunRoutes {
                run: run.to_string(),
                job: job.to_string(),
                hops: routes.len() as u32,
                routes,
            })
        })
    }

    /// Opens an episode of `kind` for `job` unless one is open: `true` when this call opened
    /// it (the caller escalates), `false` when it was already open (told before).
    pub fn open_episode(&mut self, job: &str, kind: &str, message: &str) -> Result<bool> {
        self.write(|tx| {
            let inserted = tx.execute(
                "INSERT INTO episodes (job, kind, started_ms, message) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT DO NOTHING",
                params![job, kind, ms(Utc::now()), crate::core::text::inert(message)],
            )?;
            Ok(inserted == 1)
        })
    }

    /// Notes that the open episode of (`job`, `kind`) was escalated.
    pub fn mark_escalated(&mut self, job: &str, kind: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE episodes SET escalated_ms = ?3 WHERE job = ?1 AND kind = ?2 \
                 AND ended_ms IS NULL",
                params![job, kind, ms(Utc::now())],
            )?;
            Ok(())
        })
    }

    /// Ends the open episode of (`job`, `kind`): the job left the condition.
    pub fn close_episode(&mut self, job: &str, kind: &str) -> Result<bool> {
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE episodes SET ended_ms = ?3 WHERE job = ?1 AND kind = ?2 \
                 AND ended_ms IS NULL",
                params![job, kind, ms(Utc::now())],
            )?;
            Ok(changed > 0)
        })
    }

    /// The episodes still open.
    pub fn open_episodes(&self) -> Result<Vec<Episode>> {
        let mut statement = self.conn.prepare(
            "SELECT id, job, kind, started_ms, escalated_ms FROM episodes WHERE ended_ms IS NULL \
             ORDER BY id",
        )?;
        let rows = statement.query_map([], |row| {
            Ok(Episode {
                id: row.get(0)?,
                job: row.get(1)?,
                kind: row.get(2)?,
                started: from_ms(row.get(3)?),
                escalated: row.get::<_, Option<i64>>(4)?.map(from_ms),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The last state the event log records for each job (`state-changed` reasons end with
    /// "-> STATE").
    pub fn last_states(&self) -> Result<Vec<(String, String)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, reason FROM events WHERE id IN (SELECT max(id) FROM events \
             WHERE kind = 'state-changed' AND job IS NOT NULL GROUP BY job)",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?))
        })?;
        let mut states = Vec::new();
        for row in rows {
            let (job, reason) = row?;
            if let Some(state) = reason.as_deref().and_then(|r| r.rsplit("-> ").next()) {
                states.push((job, state.trim().to_string()));
            }
        }
        Ok(states)
    }

    /// A bounded quick check of the whole file (`PRAGMA quick_check(1)`, which stops at the
    /// first problem): damage anywhere, even in pages no query of this process would read,
    /// is a [`Fault::Damaged`] error naming the file. It reads every page (about 60 ms for
    /// 50,000 events), so a long-lived reader runs it once, when it opens the store.
    pub fn verify(&self) -> Result<()> {
        let damaged = |words: String| {
            StoreError::with_fault(
                format!(
                    "the state store '{}' is damaged ({words})",
                    self.path.display()
                ),
                Fault::Damaged,
            )
        };
        let first: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |row| row.get(0))
            .map_err(|e| match StoreError::from(e) {
                error if error.fault() == Fault::Damaged => damaged(error.to_string()),
                error => error,
            })?;
        if first == "ok" {
            Ok(())
        } else {
            Err(damaged(format!("quick check: {first}")))
        }
    }

    /// `PRAGMA integrity_check`: "ok" when the database is sound.
    pub fn integrity_check(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))?)
    }

    /// The raw connection, for tests that must prove what the database itself refuses.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// What the operator runs to set a damaged or unwanted store aside: stop the watcher, move
/// the database with its -wal, -shm and identity files into a dated folder; mihari then
/// starts a new store, and the old one can still be looked at.
pub fn move_aside_words(db: &Path) -> String {
    let dir = db.parent().unwrap_or_else(|| Path::new("."));
    let name = db
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| DB_FILE.to_string());
    let aside = dir.join(format!("broken-{}", Utc::now().format("%Y%m%dT%H%M%S")));
    format!(
        "stop mihari watch, then move it aside: mkdir '{}' && mv '{}'* '{}/'; mihari starts a \
         new store",
        aside.display(),
        dir.join(name).display(),
        aside.display()
    )
}

/// The connection's settings and the schema: WAL (readers never block the writer; a
/// dashboard reading never stalls a watcher), normal sync, foreign keys, migrations.
fn prepare(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "journal_mode", "wal")?;
    conn.pragma_update(None, "synchronous", "normal")?;
    conn.pragma_update(None, "foreign_keys", "on")?;
    schema::migrate(conn)
}

/// Whether an error is SQLite's "busy" or "locked": another connection holds the lock.
fn is_busy(error: &StoreError) -> bool {
    error.fault == Fault::Busy
}

/// Claims `key` inside a write transaction: see [`Store::claim`]. `workspace_hash` goes on
/// the `claimed` event of a restart, so the cooldown can see a restart under way.
#[allow(clippy::too_many_arguments)]
fn claim_in(
    tx: &Connection,
    actor: Actor,
    session: &str,
    key: &str,
    job: &str,
    action: &str,
    reason: &str,
    workspace_hash: Option<&str>,
) -> Result<ClaimOutcome> {
    let now = Utc::now();
    let inserted = tx.execute(
        "INSERT INTO claims (key, job, action, state, session, attempts, created_ms, updated_ms) \
         VALUES (?1, ?2, ?3, 'claimed', ?4, 1, ?5, ?5) ON CONFLICT(key) DO NOTHING",
        params![key, job, action, session, ms(now)],
    )?;
    if inserted == 1 {
        insert_event(
            tx,
            actor,
            session,
            &NewEvent::new(Kind::Claimed)
                .job(job)
                .key(key)
                .workspace_hash(workspace_hash.map(str::to_string))
                .reason(reason),
            now,
        )?;
        return Ok(ClaimOutcome::Won);
    }
    let existing = read_claim(tx, key)?
        .ok_or_else(|| StoreError::new(format!("claim '{key}' vanished inside its transaction")))?;
    insert_event(
        tx,
        actor,
        session,
        &NewEvent::new(Kind::Duplicate)
            .job(job)
            .key(key)
            .reason(format!(
                "already claimed by session {} ({})",
                existing.session,
                existing.state.as_str()
            )),
        now,
    )?;
    Ok(ClaimOutcome::Duplicate(existing))
}

/// One claim's move: from which state (and, for recovery, whose claim it must still be) to
/// which, with the pid and error to keep.
struct ClaimMove<'a> {
    key: &'a str,
    from: ClaimState,
    claimer: Option<&'a str>,
    to: ClaimState,
    pid: Option<u32>,
    error: Option<&'a str>,
}

/// Moves a claim inside a write transaction and records `events` only if it moved.
fn advance_in(
    tx: &Connection,
    actor: Actor,
    session: &str,
    change: ClaimMove<'_>,
    events: &[NewEvent],
) -> Result<bool> {
    let now = Utc::now();
    let changed = tx.execute(
        "UPDATE claims SET state = ?3, pid = coalesce(?4, pid), \
         last_error = coalesce(?5, last_error), updated_ms = ?6 \
         WHERE key = ?1 AND state = ?2 AND (?7 IS NULL OR session = ?7)",
        params![
            change.key,
            change.from.as_str(),
            change.to.as_str(),
            change.pid,
            change.error,
            ms(now),
            change.claimer
        ],
    )?;
    if changed == 1 {
        for event in events {
            insert_event(tx, actor, session, event, now)?;
        }
    }
    Ok(changed == 1)
}

/// The time of the last spawn in the workspace with this hash.
fn last_spawn_in(conn: &Connection, hash: &str) -> Result<Option<DateTime<Utc>>> {
    let at: Option<i64> = conn.query_row(
        "SELECT max(at_ms) FROM events WHERE kind = 'spawned' AND workspace_hash = ?1",
        params![hash],
        |row| row.get(0),
    )?;
    Ok(at.map(from_ms))
}

/// How long a restart that is claimed but not yet spawned holds its workspace back before
/// the cooldown is looked at again.
const UNDER_WAY_RECHECK: chrono::Duration = chrono::Duration::seconds(10);

/// Why the workspace with `hash` is cooling at `now`, and when to look again: a spawn there
/// younger than `cooldown_sec`, or a restart there claimed and not yet spawned (it is about
/// to spawn, or its claimer died and recovery will settle it).
fn workspace_cooling(
    tx: &Connection,
    hash: &str,
    cooldown_sec: u64,
    now: DateTime<Utc>,
) -> Result<Option<(String, DateTime<Utc>)>> {
    let last = last_spawn_in(tx, hash)?;
    if let Cooldown::Closed {
        last_spawn,
        opens_at,
        ..
    } = cooldown(Some(hash.to_string()), last, cooldown_sec, now)
    {
        return Ok(Some((
            format!(
                "workspace cooldown: the last spawn there was {} s ago; it opens in {} s",
                (now - last_spawn).num_seconds(),
                (opens_at - now).num_seconds().max(1)
            ),
            opens_at,
        )));
    }
    if cooldown_sec > 0 {
        let under_way: Option<String> = tx
            .query_row(
                "SELECT c.job FROM claims c WHERE c.state = 'claimed' AND c.action = 'restart' \
                 AND EXISTS (SELECT 1 FROM events e WHERE e.kind = 'claimed' AND e.key = c.key \
                 AND e.workspace_hash = ?1) LIMIT 1",
                params![hash],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(other) = under_way {
            return Ok(Some((
                format!(
                    "workspace cooldown: a restart of '{other}' in this workspace is under way"
                ),
                now + UNDER_WAY_RECHECK,
            )));
        }
    }
    Ok(None)
}

fn insert_event(
    tx: &Connection,
    actor: Actor,
    session: &str,
    event: &NewEvent,
    at: DateTime<Utc>,
) -> Result<i64> {
    let kind = event
        .kind
        .ok_or_else(|| StoreError::new("an event needs a kind"))?;
    tx.execute(
        "INSERT INTO events (at_ms, kind, job, actor, session, run, workspace_hash, route, key, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            ms(at),
            kind.as_str(),
            event.job,
            actor.as_str(),
            session,
            event.run,
            event.workspace_hash,
            event.route,
            event.key,
            // SPEC §6: an event never holds raw paths, whatever error text reached it.
            with_origin(event.reason.as_deref())
                .map(|reason| crate::core::text::inert(&crate::core::text::without_paths(&reason))),
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

/// An event's reason, with the fleet operator and host this process acts for, if any.
fn with_origin(reason: Option<&str>) -> Option<String> {
    match (reason, fleet_origin()) {
        (Some(reason), Some(origin)) => Some(format!("{reason} ({origin})")),
        (None, Some(origin)) => Some(origin.to_string()),
        (reason, None) => reason.map(str::to_string),
    }
}

/// The columns [`event_from_row`] reads, in its order.
const EVENT_COLUMNS: &str =
    "id, at_ms, kind, job, actor, session, run, workspace_hash, route, key, reason";

/// `kinds` as an SQL list of string literals (the names are fixed words, never user text).
fn kind_list(kinds: &[Kind]) -> String {
    kinds
        .iter()
        .map(|k| format!("'{}'", k.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A heartbeat from the columns job, at_ms, done, total, position, note.
fn heartbeat_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Heartbeat> {
    Ok(Heartbeat {
        job: row.get(0)?,
        at: from_ms(row.get(1)?),
        done: row.get::<_, Option<i64>>(2)?.map(|d| d.max(0) as u64),
        total: row.get::<_, Option<i64>>(3)?.map(|t| t.max(0) as u64),
        position: row.get(4)?,
        note: row.get(5)?,
    })
}

fn event_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        id: row.get(0)?,
        at: from_ms(row.get(1)?),
        kind: row.get(2)?,
        job: row.get(3)?,
        actor: Actor::parse(&row.get::<_, String>(4)?),
        session: row.get(5)?,
        run: row.get(6)?,
        workspace_hash: row.get(7)?,
        route: row.get(8)?,
        key: row.get(9)?,
        reason: row.get(10)?,
    })
}

fn claim_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Claim> {
    Ok(Claim {
        key: row.get(0)?,
        job: row.get(1)?,
        action: row.get(2)?,
        state: ClaimState::parse(&row.get::<_, String>(3)?),
        session: row.get(4)?,
        attempts: row.get(5)?,
        last_error: row.get(6)?,
        pid: row.get::<_, Option<i64>>(7)?.map(|p| p as u32),
        created: from_ms(row.get(8)?),
        updated: from_ms(row.get(9)?),
        spawn_started: row.get::<_, Option<i64>>(10)?.map(from_ms),
        run: row.get(11)?,
    })
}

fn read_claim(conn: &Connection, key: &str) -> Result<Option<Claim>> {
    Ok(conn
        .query_row(
            "SELECT key, job, action, state, session, attempts, last_error, pid, created_ms, updated_ms, \
             spawn_started_ms, run \
             FROM claims WHERE key = ?1",
            params![key],
            claim_from_row,
        )
        .optional()?)
}

fn approval_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Approval> {
    Ok(Approval {
        key: row.get(0)?,
        job: row.get(1)?,
        step: row.get(2)?,
        summary: row.get(3)?,
        state: ApprovalState::parse(&row.get::<_, String>(4)?),
        reason: row.get(5)?,
        requested: from_ms(row.get(6)?),
        decided: row.get::<_, Option<i64>>(7)?.map(from_ms),
        requested_by: row.get(8)?,
    })
}

fn read_approval(conn: &Connection, key: &str) -> Result<Option<Approval>> {
    Ok(conn
        .query_row(
            "SELECT key, job, step, summary, state, reason, requested_ms, decided_ms, requested_by \
             FROM approvals \
             WHERE key = ?1",
            params![key],
            approval_from_row,
        )
        .optional()?)
}

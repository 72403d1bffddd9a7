//! The job-side commands and the operator's reading of the record: `run`, `heartbeat`,
//! `approval`, `claim`, `events`.
//!
//! These are what a job (or its wrapper script) calls to tell mihari about itself — run me
//! under my lock, here is my progress, may I do this irreversible step, am I the one who
//! does this — and what an operator calls to read the event log. Each entry point loads the
//! jobs file, opens the state store, makes one call into it and maps the answer to an exit
//! code a shell script can branch on. The running of a job lives in
//! [`crate::effect::run`]; the decisions on approvals in [`super::decide`]. Text that came
//! from a job is made inert before it is stored or printed.
//!
//! Exit codes: 0 done (or approved, or the claim won); 1 a duplicate claim; 3 the jobs file,
//! the arguments or the state store refused (the message says what to fix); 10 approval
//! pending; 11 approval denied; `run` adds 71, 73, 75, 126, 127 and the job's own code
//! (see [`crate::effect::run`]).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use clap::{Args, Subcommand};
use sha2::{Digest, Sha256};

use super::check::EXIT_UNKNOWN;
use crate::core::assess::fmt_secs;
use crate::core::text::inert;
use crate::effect::run as run_effect;
use crate::store::{
    Actor, Approval, ApprovalState, ClaimOutcome, Event, EventFilter, Heartbeat, Kind, NewEvent,
    Store, hex,
};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job's id in the jobs file.
    pub job: String,
    /// Run this route's command instead of `restart.command`.
    #[arg(long)]
    pub route: Option<String>,
    /// The run this attempt belongs to (kept across restarts of the same run).
    #[arg(long)]
    pub run_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct HeartbeatArgs {
    /// The job's id in the jobs file.
    pub job: String,
    /// Items done so far.
    #[arg(long)]
    pub done: Option<u64>,
    /// Items in all, when the job knows.
    #[arg(long)]
    pub total: Option<u64>,
    /// The last position reached ("shard 120", "epoch 3 step 400"); at most 256 bytes, a
    /// longer one is cut there.
    #[arg(long)]
    pub position: Option<String>,
    /// A short note for the operator; at most 1024 bytes, a longer one is cut there (and
    /// said on stderr): put the detail in a file and name the file in the note.
    #[arg(long)]
    pub note: Option<String>,
    /// Records the end of a run started elsewhere (a crontab line, a timer, a CI runner) with
    /// its exit code, as `mihari run` records its own: `cmd; mihari heartbeat JOB --exit $?`.
    /// A failure reported while another process holds the job's lock is the run that found
    /// the one before it still going (`flock -n`): recorded as such, not as a failed run.
    #[arg(long, value_name = "CODE", value_parser = clap::value_parser!(u8))]
    pub exit: Option<u8>,
}

/// The longest `--note` kept: a note is a line in the job's detail, stored with every
/// heartbeat (a 120 KB note was stored whole, every second).
pub const NOTE_MAX_BYTES: usize = 1024;

/// The longest `--position` kept.
pub const POSITION_MAX_BYTES: usize = 256;

/// `text` cut to at most `max` bytes on a character boundary, with "…" when cut (the
/// ellipsis within the bound), and whether it was cut.
fn bounded(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}…", &text[..end]), true)
}

#[derive(Debug, Subcommand)]
pub enum ApprovalCommand {
    /// Ask for approval of an irreversible step. Exit 0 approved, 10 pending, 11 denied.
    Request {
        /// The job's id in the jobs file.
        job: String,
        /// The step: delete, overwrite, publish, send, charge, ...
        #[arg(long)]
        step: String,
        /// The request's key, derived from its content by the job.
        #[arg(
            long,
            conflicts_with = "key_from",
            required_unless_present = "key_from"
        )]
        key: Option<String>,
        /// Derive the key as the sha256 of this file's content.
        #[arg(long, value_name = "FILE")]
        key_from: Option<PathBuf>,
        /// One line for the operator: what will happen.
        #[arg(long)]
        summary: String,
    },
    /// The approval requests (pending ones, unless --all).
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Decided ones too.
        #[arg(long)]
        all: bool,
    },
    /// Approve a pending request: asks you to type the job id, unless --yes.
    Approve {
        key: String,
        #[arg(long)]
        yes: bool,
    },
    /// Deny a pending request, with a reason: asks you to type the job id, unless --yes.
    Deny {
        key: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// The key, derived from what is to happen once (a content hash).
    pub key: String,
    /// The job the claim is about, for the record.
    #[arg(long)]
    pub job: Option<String>,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Only this job's events.
    #[arg(long)]
    pub job: Option<String>,
    /// Only events of this kind (started, exited, duplicate, claimed, ...).
    #[arg(long)]
    pub kind: Option<String>,
    /// RFC 3339 time, or an age such as 30m, 2h, 7d.
    #[arg(long)]
    pub since: Option<String>,
    /// The state folder whose store to read (settings.state_dir), instead of the one the
    /// jobs file names: for a jobs file too broken to say.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Only the newest N (still oldest first).
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
}

/// Where a command that only reads the store (`events`, `digest`) finds it, and the digest
/// hour it keeps.
pub(super) struct StoreAt {
    pub state_dir: PathBuf,
    pub digest_at: chrono::NaiveTime,
}

/// The store for `events` and `digest`: the folder `--state-dir` names, else the one the
/// jobs file's settings name. A refused jobs file (a bad edit) does not stop them: the event
/// log is what the operator needs then. Its settings are read on their own (or the default
/// state folder, when it names none), and stderr says the file is refused and which store is
/// read. A store is only ever read where one exists, never created; when none can be found
/// the refusal names the folder looked in and how to name the right one (exit 3).
pub(super) fn store_for_reading(
    config: Option<&Path>,
    state_dir: Option<&Path>,
) -> Result<StoreAt, ExitCode> {
    let found = crate::config::find_config_path(config);
    let loaded = found.clone().and_then(|path| crate::config::load(&path));
    let settings = match &loaded {
        Ok(config) => Some(config.settings.clone()),
        Err(_) => found
            .as_ref()
            .ok()
            .and_then(|path| crate::config::settings_of_refused(path)),
    };
    let digest_at = settings.as_ref().map_or_else(
        || chrono::NaiveTime::from_hms_opt(9, 0, 0).unwrap_or(chrono::NaiveTime::MIN),
        |s| s.digest_at,
    );
    let named = |dir: &Path, how: &str| -> Result<StoreAt, ExitCode> {
        let db = dir.join(crate::store::DB_FILE);
        if db.is_file() {
            Ok(StoreAt {
                state_dir: dir.to_path_buf(),
                digest_at,
            })
        } else {
            Err(refuse(&format!(
                "there is no state store in '{}' ({how}: no '{}' there): name the folder that \
                 holds it with --state-dir DIR (the settings.state_dir of the jobs file the \
                 watcher and the dashboard use)",
                inert(&dir.display().to_string()),
                crate::store::DB_FILE
            )))
        }
    };
    if let Some(dir) = state_dir {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        return named(&dir, "named by --state-dir");
    }
    match (loaded, settings) {
        (Ok(config), _) => Ok(StoreAt {
            state_dir: config.settings.state_dir,
            digest_at,
        }),
        (Err(error), Some(settings)) => {
            let _ = writeln!(io::stderr(), "mihari: {error}");
            let at = named(&settings.state_dir, "the refused file's settings name it");
            if at.is_ok() {
                let _ = writeln!(
                    io::stderr(),
                    "mihari: the jobs file is refused; reading the state store in '{}', the \
                     one its settings name — fix the file and save it again",
                    inert(&settings.state_dir.display().to_string())
                );
            }
            at
        }
        (Err(error), None) => {
            let _ = writeln!(io::stderr(), "mihari: {error}");
            Err(refuse(
                "the jobs file is refused and which state store it names cannot be told from \
                 it: name the store's folder with --state-dir DIR (its settings.state_dir), \
                 or fix the file and save it again",
            ))
        }
    }
}

/// `mihari run JOB [--route NAME] [--run-id ID]`: the job's command under its lock.
///
/// Exit 3 when the jobs file is refused, the job is unknown, or it declares no `lock` or no
/// command (`restart.command`, or the named route); 75 when the job is already running; 73
/// when the lock or the log cannot be opened; 71 when signals cannot be forwarded; 126/127
/// when the command cannot be started; otherwise the job's own exit code, or 128 + the
/// signal that killed it. The job also gets `MIHARI_JOB`, `MIHARI_RUN_ID` and
/// `MIHARI_CONFIG`, so its own `mihari heartbeat` finds the same jobs file and store.
pub fn run(config: Option<&Path>, args: RunArgs) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let plan = match run_effect::plan(
        &config,
        &args.job,
        args.route.as_deref(),
        args.run_id.as_deref(),
        Utc::now(),
    ) {
        Ok(plan) => plan,
        Err(error) => return refuse(&error),
    };
    let mut stderr = io::stderr();
    let store = match Store::open(&config.settings.state_dir, Actor::Job) {
        Ok(store) => Some(store),
        Err(error) => {
            let _ = writeln!(
                stderr,
                "mihari: warning: {error}; running job '{}' without recording it",
                plan.job
            );
            None
        }
    };
    // A paused job runs for nobody: not for a restart, not for a timer that calls `mihari run`
    // every night. Said, recorded, and exit EX_UNAVAILABLE.
    if let Some(mut store) = store {
        match store.last_event(Some(&plan.job), &[Kind::Paused, Kind::Resumed]) {
            Ok(Some(pause)) if pause.kind == Kind::Paused.as_str() => {
                let note = crate::core::OperatorNote::from_words(
                    pause.reason.as_deref().unwrap_or(""),
                    pause.actor.as_str(),
                    pause.at,
                );
                let _ = writeln!(
                    stderr,
                    "mihari: job '{}' is paused (by {} at {}: {}); nothing was run: resume it \
                     first (mihari resume {})",
                    plan.job,
                    note.by,
                    {
                        let zone = crate::probe::zone::Zone::machine();
                        format!(
                            "{} {}",
                            zone.format(note.at, "%Y-%m-%d %H:%M:%S"),
                            zone.short_name(note.at)
                        )
                    },
                    note.reason,
                    plan.job
                );
                let _ = store.append(
                    crate::store::NewEvent::new(Kind::Refused)
                        .job(&plan.job)
                        .reason("run refused: the job is paused"),
                );
                return ExitCode::from(EXIT_PAUSED);
            }
            _ => return ExitCode::from(run_effect::execute(&plan, Some(store), &mut stderr)),
        }
    }
    ExitCode::from(run_effect::execute(&plan, None, &mut stderr))
}

/// `mihari run` of a paused job: nothing runs (`EX_UNAVAILABLE`).
pub const EXIT_PAUSED: u8 = 69;

/// `mihari heartbeat JOB ...`: records the job's own report of its progress. Exit 0, or 3
/// when the job is unknown, a count is past what the store holds, or the state store cannot
/// be written.
pub fn heartbeat(config: Option<&Path>, args: HeartbeatArgs) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Err(error) = run_effect::find_job(&config, &args.job) {
        return refuse(&error);
    }
    // The store keeps counts as SQLite integers: a larger one would read back as 0.
    for (flag, count) in [("--done", args.done), ("--total", args.total)] {
        if let Some(count) = count.filter(|&count| i64::try_from(count).is_err()) {
            return refuse(&format!(
                "{flag} '{count}' is too large: counts go up to {}",
                i64::MAX
            ));
        }
    }
    let mut store = match Store::open(&config.settings.state_dir, Actor::Job) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let at = Utc::now();
    if let Some(code) = args.exit {
        // The end first: with `--exit` alone nothing else is recorded (an end is no progress).
        let event = match code {
            0 => NewEvent::new(Kind::Exited).reason("exit 0"),
            code => match busy_holder(&config, &args.job) {
                Some(holder) => {
                    eprintln!(
                        "mihari: job '{}': exit {code} reported while {holder} holds its lock: \
                         this run found the one before it still going (flock -n), so it is \
                         recorded as a run that did not start, not as a failed run",
                        args.job
                    );
                    NewEvent::new(Kind::Duplicate).reason(format!(
                        "exit {code} reported while {holder} holds the lock: not a run's end"
                    ))
                }
                None => NewEvent::new(Kind::Exited).reason(format!("exit {code}")),
            },
        };
        if let Err(error) = store.append_at(event.job(&args.job), at) {
            return refuse(&format!("the run's end was not recorded: {error}"));
        }
        let only_the_end = args.done.is_none()
            && args.total.is_none()
            && args.position.is_none()
            && args.note.is_none();
        if only_the_end {
            return ExitCode::SUCCESS;
        }
    }
    let kept = |flag: &str, text: Option<&str>, max: usize| {
        let (text, cut) = bounded(&inert(text?), max);
        if cut {
            eprintln!(
                "mihari: {flag} is longer than the {max} bytes kept: it was cut there; put \
                 the detail in a file and name the file in it"
            );
        }
        Some(text)
    };
    let beat = Heartbeat {
        position: kept("--position", args.position.as_deref(), POSITION_MAX_BYTES),
        note: kept("--note", args.note.as_deref(), NOTE_MAX_BYTES),
        job: args.job,
        at,
        done: args.done,
        total: args.total,
    };
    match store.heartbeat(&beat) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => refuse(&format!("the heartbeat was not recorded: {error}")),
    }
}

/// The live process holding `job`'s lock, in words ("pid 4242"), when it is neither this
/// process nor one of its ancestors: a run reported from outside the lock while another holds
/// it. `None` when the job declares no lock, nobody holds it, or it cannot be told (then the
/// end is recorded as reported).
fn busy_holder(config: &crate::config::Config, job: &str) -> Option<String> {
    let lock = config.jobs.iter().find(|j| j.id == job)?.lock.as_deref()?;
    let holder = match crate::probe::lock::read_lock_as(lock, crate::probe::safe_open::Role::Lock) {
        crate::core::Reading::Found(holder) => holder,
        _ => return None,
    };
    let pid = holder
        .pid
        .filter(|_| holder.liveness == crate::core::Liveness::Alive)?;
    // This process and its ancestors: a heartbeat sent from inside the lock (`flock -n LOCK
    // sh -c 'cmd; mihari heartbeat JOB --exit $?'`) ends the run that holds it.
    let mut ancestor = std::process::id();
    for _ in 0..64 {
        if ancestor == pid {
            return None;
        }
        match crate::probe::proc::lookup(ancestor) {
            crate::probe::proc::ProcLookup::Running(stat) if stat.ppid > 0 => ancestor = stat.ppid,
            _ => break,
        }
    }
    Some(format!("pid {pid}"))
}

/// Exit code of `approval request` for an approved step.
pub const EXIT_APPROVED: u8 = 0;
/// Exit code of `approval request` while the operator has not decided: ask again later.
pub const EXIT_PENDING: u8 = 10;
/// Exit code of `approval request` for a denied step: do not do it.
pub const EXIT_DENIED: u8 = 11;

/// `mihari approval ...`: a job's request, and the operator's side.
pub fn approval(config: Option<&Path>, command: ApprovalCommand, out: &mut impl Write) -> ExitCode {
    match command {
        ApprovalCommand::Request {
            job,
            step,
            key,
            key_from,
            summary,
        } => {
            let key = match (key, key_from) {
                (Some(key), None) => KeySource::Given(key),
                (None, Some(file)) => KeySource::File(file),
                _ => return refuse("give exactly one of --key K and --key-from FILE"),
            };
            request_approval(config, &job, &step, key, &summary, out)
        }
        ApprovalCommand::List { json, all } => list_approvals(config, json, all, out),
        ApprovalCommand::Approve { key, yes } => super::decide::approve(config, &key, yes, out),
        ApprovalCommand::Deny { key, reason, yes } => {
            super::decide::deny(config, &key, &reason, yes, out)
        }
    }
}

/// Where an approval request's key comes from.
enum KeySource {
    Given(String),
    /// The sha256 of this file's content: the same content always asks the same question.
    File(PathBuf),
}

/// Records the request (once per key) and answers at once with its state: a pending request
/// holds no process; the job asks again later.
fn request_approval(
    config: Option<&Path>,
    job: &str,
    step: &str,
    key: KeySource,
    summary: &str,
    out: &mut impl Write,
) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Err(error) = run_effect::find_job(&config, job) {
        return refuse(&error);
    }
    if step.trim().is_empty() {
        return refuse("--step '' is empty: name the step (delete, overwrite, publish, ...)");
    }
    if step.len() > STEP_MAX_BYTES {
        return refuse(&format!(
            "--step is {} bytes, more than the {STEP_MAX_BYTES} bytes a step may have: name \
             the step in a word or two (delete, overwrite, publish, ...) and say the rest in \
             --summary",
            step.len()
        ));
    }
    if summary.len() > SUMMARY_MAX_BYTES {
        return refuse(&format!(
            "--summary is {} bytes, more than the {SUMMARY_MAX_BYTES} bytes an operator can \
             read in the approval list and the escalation: put the detail in a file and pass \
             its path in the summary ('delete 12 shards, list in /path/to/list.txt')",
            summary.len()
        ));
    }
    let key = match key {
        KeySource::Given(key) => match checked_key(&key) {
            Ok(key) => key,
            Err(error) => return refuse(&error),
        },
        KeySource::File(path) => match sha256_of_file(&path) {
            Ok(key) => key,
            Err(error) => {
                return refuse(&format!(
                    "cannot take the key from '{}' (--key-from): {error}",
                    inert(&path.display().to_string())
                ));
            }
        },
    };
    let mut store = match Store::open(&config.settings.state_dir, Actor::Job) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let approval = match store.request_approval_by(
        job,
        &inert(step),
        &key,
        &inert(summary),
        Some(&crate::effect::operator_name()),
    ) {
        Ok(approval) => approval,
        Err(error) => return refuse(&format!("the request was not recorded: {error}")),
    };
    if approval.job != job {
        // A key answers one job's question; another job's approval must never let this one
        // delete or publish anything.
        return refuse(&format!(
            "key '{key}' already belongs to a request of job '{}'; derive the key from job \
             '{job}''s own content",
            approval.job
        ));
    }
    let (line, code) = match approval.state {
        ApprovalState::Approved => (
            format!("approved: {job} may {} (key {key})", approval.step),
            EXIT_APPROVED,
        ),
        ApprovalState::Pending => (
            format!(
                "pending: {job} waits for an operator to approve {} (key {key}): mihari \
                 approval approve {key}",
                approval.step
            ),
            EXIT_PENDING,
        ),
        ApprovalState::Denied => (
            format!(
                "denied: {job} must not {} (key {key}): {}",
                approval.step,
                inert(approval.reason.as_deref().unwrap_or("no reason given"))
            ),
            EXIT_DENIED,
        ),
    };
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::from(code),
        // The state is the answer; a closed stdout does not change it.
        Err(_) => ExitCode::from(code),
    }
}

/// A key is printed, typed back by operators and stored: one word of visible characters.
fn checked_key(key: &str) -> Result<String, String> {
    let plain = !key.is_empty()
        && key.len() <= 256
        && key.chars().all(|c| !c.is_whitespace() && !c.is_control())
        && crate::core::text::is_inert(key);
    if plain {
        Ok(key.to_string())
    } else {
        Err(format!(
            "key '{}' is not accepted: use 1 to 256 visible characters without spaces (a \
             content hash, or --key-from FILE)",
            inert(key)
        ))
    }
}

/// The longest `--step`: a step is a word or two (delete, publish, send), shown in every
/// approval line and escalation.
const STEP_MAX_BYTES: usize = 128;

/// The longest `--summary`: one screenful an operator reads before approving. Stored and
/// printed whole, so a longer one would fill the approval list and the escalation message;
/// the detail belongs in a file the summary names.
const SUMMARY_MAX_BYTES: usize = 4096;

/// The largest file `--key-from` hashes. Far above any manifest or list a job asks about,
/// and it bounds the time a request can take (about a second of hashing).
const KEY_FILE_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Lower-case hex sha256 of the content of the regular file at `path`, streamed in pieces.
///
/// Only a regular file: a named pipe would wait for a writer forever and a device such as
/// `/dev/zero` never ends, so the type is looked at before opening (opening a device can have
/// effects), the open does not wait (`O_NONBLOCK`) and the type is looked at again on the
/// opened file (the path may have been swapped in between). At most [`KEY_FILE_MAX_BYTES`]
/// are read, even from a file that grows while it is read.
fn sha256_of_file(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let regular = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            return Err(format!(
                "{}; --key-from takes a regular file (write the content to one and pass its \
                 path, or give --key)",
                crate::probe::files::not_a_file(meta)
            ));
        }
        if meta.len() > KEY_FILE_MAX_BYTES {
            return Err(too_large_for_a_key());
        }
        Ok(())
    };
    regular(&std::fs::metadata(path).map_err(|e| e.to_string())?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    regular(&file.metadata().map_err(|e| e.to_string())?)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    let mut limited = file.take(KEY_FILE_MAX_BYTES + 1);
    loop {
        let read = match limited.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error.to_string()),
        };
        total += read as u64;
        if total > KEY_FILE_MAX_BYTES {
            return Err(too_large_for_a_key());
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex(&hasher.finalize()))
}

fn too_large_for_a_key() -> String {
    format!(
        "it is larger than {} MiB, the most --key-from reads: hash it yourself (sha256sum) \
         and pass --key",
        KEY_FILE_MAX_BYTES / (1024 * 1024)
    )
}

/// `mihari approval list [--json] [--all]`: newest first.
fn list_approvals(config: Option<&Path>, json: bool, all: bool, out: &mut impl Write) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let store = match Store::open(&config.settings.state_dir, Actor::Cli) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let approvals = match store.approvals(!all) {
        Ok(approvals) => approvals,
        Err(error) => return refuse(&error.to_string()),
    };
    let written = if json {
        approvals
            .iter()
            .try_for_each(|a| writeln!(out, "{}", approval_json(a)))
    } else {
        render_approvals(&approvals, all, Utc::now(), out)
    };
    finish(written.and_then(|()| out.flush()))
}

fn approval_json(approval: &Approval) -> serde_json::Value {
    serde_json::json!({
        "key": approval.key,
        "job": approval.job,
        "step": approval.step,
        "summary": approval.summary,
        "state": approval.state.as_str(),
        "reason": approval.reason,
        "requested": rfc3339(approval.requested),
        "requested_by": approval.requested_by,
        "decided": approval.decided.map(rfc3339),
    })
}

/// The approvals as a table: key (whole: the operator types it back), job, step, state,
/// age, who asked ('—' for a request from before mihari kept it), summary.
pub fn render_approvals(
    approvals: &[Approval],
    all: bool,
    now: DateTime<Utc>,
    out: &mut impl Write,
) -> io::Result<()> {
    if approvals.is_empty() {
        let what = if all {
            "no approval requests"
        } else {
            "no pending approval requests"
        };
        return writeln!(out, "{what}");
    }
    let rows: Vec<Vec<String>> = approvals
        .iter()
        .map(|a| {
            let age = (now - a.requested).as_seconds_f64();
            vec![
                inert(&a.key),
                inert(&a.job),
                inert(&a.step),
                a.state.as_str().to_string(),
                fmt_secs(age),
                a.requested_by
                    .as_deref()
                    .map_or_else(|| "—".to_string(), inert),
                inert(&a.summary),
            ]
        })
        .collect();
    write_table(
        &["KEY", "JOB", "STEP", "STATE", "AGE", "ASKED BY", "SUMMARY"],
        &rows,
        out,
    )
}

/// `mihari claim KEY [--job ID]`: exit 0 for the one winner, 1 for every duplicate (the store
/// records it), 3 when the store cannot be opened or written.
pub fn claim(config: Option<&Path>, args: ClaimArgs) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let key = match checked_key(&args.key) {
        Ok(key) => key,
        Err(error) => return refuse(&error),
    };
    let job = match args.job.as_deref() {
        Some(job) => match run_effect::find_job(&config, job) {
            Ok(spec) => spec.id.clone(),
            Err(error) => return refuse(&error),
        },
        None => "-".to_string(),
    };
    let mut store = match Store::open(&config.settings.state_dir, Actor::Cli) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let outcome = store.claim(&key, &job, "claim", "mihari claim");
    let mut stdout = io::stdout();
    match outcome {
        Ok(ClaimOutcome::Won) => {
            let _ = writeln!(stdout, "claimed: {key}");
            ExitCode::SUCCESS
        }
        Ok(ClaimOutcome::Duplicate(existing)) => {
            let _ = writeln!(
                stdout,
                "duplicate: {key} was already claimed by session {} ({}); recorded",
                existing.session,
                existing.state.as_str()
            );
            ExitCode::from(1)
        }
        Err(error) => refuse(&format!("the claim was not recorded: {error}")),
    }
}

/// `mihari events [--json] [--job ID] [--kind K] [--since T]`: the event log, oldest first.
/// Exit 0, or 3 for a refused filter or an unreadable store. `--job` is not checked against
/// the jobs file: a job removed from it still has its history.
pub fn events(config: Option<&Path>, args: EventsArgs, out: &mut impl Write) -> ExitCode {
    let store_at = match store_for_reading(config, args.state_dir.as_deref()) {
        Ok(store_at) => store_at,
        Err(code) => return code,
    };
    let now = Utc::now();
    let since = match args.since.as_deref().map(|text| parse_since(text, now)) {
        None => None,
        Some(Ok(since)) => Some(since),
        Some(Err(error)) => return refuse(&error),
    };
    let kind = match args.kind.as_deref() {
        None => None,
        Some(text) => match Kind::parse(text) {
            Some(kind) => Some(kind.as_str().to_string()),
            None => {
                let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                return refuse(&format!(
                    "--kind '{}' is not a kind of event; the kinds are: {}",
                    inert(text),
                    kinds.join(", ")
                ));
            }
        },
    };
    let store = match Store::open(&store_at.state_dir, Actor::Cli) {
        Ok(store) => store,
        Err(error) => return refuse(&error.to_string()),
    };
    let filter = EventFilter {
        job: args.job,
        kind,
        since,
        last: args.last,
    };
    let events = match store.events(&filter) {
        Ok(events) => events,
        Err(error) => return refuse(&error.to_string()),
    };
    let written = if args.json {
        events
            .iter()
            .try_for_each(|e| writeln!(out, "{}", event_json(e)))
    } else {
        render_events(&events, out)
    };
    finish(written.and_then(|()| out.flush()))
}

/// `--since`: an RFC 3339 time, or an age before `now` such as 90s, 30m, 2h, 7d.
pub fn parse_since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let refused = || {
        format!(
            "--since '{}' is neither an RFC 3339 time (2025-05-01T09:00:00Z) nor an age (90s, \
             30m, 2h, 7d)",
            inert(text)
        )
    };
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let split = text.len().saturating_sub(1);
    let (number, unit) = (text.get(..split).unwrap_or(""), text.get(split..));
    let seconds_per = match unit {
        Some("s") => 1,
        Some("m") => 60,
        Some("h") => 3600,
        Some("d") => 86_400,
        _ => return Err(refused()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refused());
    }
    number
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(seconds_per))
        .and_then(TimeDelta::try_seconds)
        .and_then(|age| now.checked_sub_signed(age))
        .ok_or_else(|| {
            format!(
                "--since '{}' reaches before any time mihari keeps",
                inert(text)
            )
        })
}

fn event_json(event: &Event) -> serde_json::Value {
    serde_json::json!({
        "id": event.id,
        "at": rfc3339(event.at),
        "kind": event.kind,
        "job": event.job,
        "actor": event.actor.as_str(),
        "session": event.session,
        "run": event.run,
        "workspace_hash": event.workspace_hash,
        "route": event.route,
        "key": event.key,
        "reason": event.reason,
    })
}

/// The events as a table: time (in the machine's zone, named in the column's header, to the
/// ms), kind, job, actor, run, route, reason. `--json` keeps RFC 3339 in UTC.
pub fn render_events(events: &[Event], out: &mut impl Write) -> io::Result<()> {
    if events.is_empty() {
        return writeln!(out, "no events");
    }
    let zone = crate::probe::zone::Zone::machine();
    let time_header = format!("TIME {}", zone.name(Utc::now()));
    let cell = |value: &Option<String>| value.as_deref().map_or_else(|| "-".to_string(), inert);
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                zone.format(e.at, "%Y-%m-%d %H:%M:%S%.3f"),
                inert(&e.kind),
                cell(&e.job),
                e.actor.as_str().to_string(),
                cell(&e.run),
                cell(&e.route),
                zone.rewrite_utc_stamps(&cell(&e.reason)),
            ]
        })
        .collect();
    write_table(
        &[
            &time_header,
            "KIND",
            "JOB",
            "ACTOR",
            "RUN",
            "ROUTE",
            "REASON",
        ],
        &rows,
        out,
    )
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn write_table(header: &[&str], rows: &[Vec<String>], out: &mut impl Write) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Prints a refusal and returns exit 3.
pub(super) fn refuse(message: &str) -> ExitCode {
    let _ = writeln!(io::stderr(), "mihari: {message}");
    ExitCode::from(EXIT_UNKNOWN)
}

/// Exit 0 once the output is written; a closed pipe (`mihari events | head`) is not an
/// error.
pub(super) fn finish(written: io::Result<()>) -> ExitCode {
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => refuse(&format!("cannot write the output: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("test time")
            .with_timezone(&Utc)
    }

    #[test]
    fn since_accepts_times_and_ages() {
        let now = at("2025-05-01T12:00:00Z");
        let rows = [
            ("90s", "2025-05-01T11:58:30Z"),
            ("30m", "2025-05-01T11:30:00Z"),
            ("2h", "2025-05-01T10:00:00Z"),
            ("7d", "2025-04-24T12:00:00Z"),
            ("0s", "2025-05-01T12:00:00Z"),
            ("2025-05-01T09:00:00Z", "2025-05-01T09:00:00Z"),
            ("2025-05-01T11:00:00+02:00", "2025-05-01T09:00:00Z"),
        ];
        for (text, expected) in rows {
            assert_eq!(parse_since(text, now), Ok(at(expected)), "{text}");
        }
    }

    #[test]
    fn since_refuses_everything_else_quoting_it() {
        let now = at("2025-05-01T12:00:00Z");
        for text in [
            "",
            "s",
            "10",
            "10w",
            "-5m",
            "1.5h",
            "2 h",
            "yesterday",
            "h2",
            "2025-05-01",
        ] {
            let error = parse_since(text, now).expect_err(text);
            assert!(error.contains(&format!("'{text}'")), "{error}");
        }
        let error = parse_since("99999999999999999d", now).expect_err("overflow");
        assert!(error.contains("reaches before"), "{error}");
    }

    #[test]
    fn keys_are_one_visible_word() {
        assert!(checked_key("ab12-x:y").is_ok());
        for bad in ["", "a b", "a\u{1b}[2Jb", "a\nb", &"x".repeat(257)] {
            assert!(checked_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tables_align_and_make_text_inert() {
        let mut out = Vec::new();
        let rows = vec![
            vec!["a".to_string(), "long value".to_string(), "x".to_string()],
            vec!["bbb".to_string(), "v".to_string(), "y".to_string()],
        ];
        write_table(&["H1", "H2", "H3"], &rows, &mut out).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "H1   H2          H3\na    long value  x\nbbb  v           y\n"
        );
        let approval = Approval {
            key: "k".into(),
            job: "j".into(),
            step: "delete".into(),
            summary: "wipe \u{1b}]0;title\u{7}all".into(),
            state: ApprovalState::Pending,
            reason: None,
            requested: at("2025-05-01T11:59:00Z"),
            decided: None,
            requested_by: None,
        };
        let mut out = Vec::new();
        render_approvals(&[approval], false, at("2025-05-01T12:00:00Z"), &mut out).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("wipe all"), "{text}");
        assert!(text.contains("60 s"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }
}

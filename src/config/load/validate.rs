//! The rules of SPEC §2: raw YAML values -> the validated [`Config`], or the first refusal.
//!
//! This module owns every semantic refusal (ids, `should_run_when` and what its predicates
//! need, progress sources, `auto_restart`, empty commands, repeated names) and every
//! default, and it resolves paths (`~/` against `$HOME`, relative ones against the jobs
//! file's folder). It only computes: it must not touch the file system (no canonicalizing,
//! no existence checks — a log that does not exist yet is evidence, not a config error)
//! and must not read the process environment; the caller passes what it needs in [`Env`].
//! One bad job refuses the whole file: a half-loaded watch list is a silent hole.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

use chrono::NaiveTime;
use serde_saphyr::Spanned;

use super::ConfigError;
use super::diagnose::{Pos, Source, quote};
use super::raw::{
    Argv, EnvMap, Given, RawCheck, RawDuration, RawFile, RawJob, RawLogProgress, RawMarker,
    RawProcess, RawProgressTable, RawRestart, RawRoute, RawSchedule, RawSettings, RawSlurm,
    RawStall, RawTimeouts, RawUser,
};
use crate::config::{
    Cadence, CheckSpec, Config, CronExpr, JobSpec, LogProgress, MarkerSpec, Predicate, ProcessSpec,
    ProcessUser, ProgressTable, RestartSpec, Route, Schedule, Settings, SlurmJobRef, SlurmRestart,
    SlurmSpec, TimeUnit, TimeZoneName, Timeouts,
};
use crate::core::text::is_inert;

const DEFAULT_DIGEST_AT: (u32, u32) = (9, 0);
const DEFAULT_RESTART_DAILY_CAP: u32 = 6;
const DEFAULT_WORKSPACE_COOLDOWN_SEC: u64 = 600;
const DEFAULT_MAX_HOPS: u32 = 3;
const DEFAULT_STALL_SEC: u64 = 300;
const DEFAULT_CHECK_EVERY_SEC: u64 = 300;
const DEFAULT_CHECK_TIMEOUT_SEC: u64 = 30;

/// The predicates `should_run_when` accepts, as spelt in the file.
const PREDICATES: [Predicate; 4] = [
    Predicate::NotComplete,
    Predicate::ResourceFree,
    Predicate::NotSucceeded,
    Predicate::Overdue,
];
/// The keys that give a job evidence of progress. Heartbeats arrive at run time and cannot
/// be declared in the file, so a job must name at least one of these.
const PROGRESS_SOURCES: &str = "log, progress_file, progress_table, manifest (or slurm, whose \
     StdOut is the log)";

/// What validation needs from the process environment, read once by the caller so that
/// validation stays a function of its arguments.
#[derive(Debug, Clone, Default)]
pub(super) struct Env {
    /// `$HOME`, for `~/` and the default `state_dir`.
    pub home: Option<PathBuf>,
    /// `$XDG_STATE_HOME`, when set to an absolute path (the XDG spec says to ignore others).
    pub xdg_state_home: Option<PathBuf>,
}

/// Validates a parsed file. `file` is the absolute path of the jobs file; its folder is
/// where relative paths in it resolve.
pub(super) fn validate(
    raw: Option<Spanned<RawFile>>,
    src: &Source<'_>,
    file: &Path,
    env: &Env,
) -> Result<Config, ConfigError> {
    let Some(raw) = raw else {
        return Err(src.refuse_file(
            "the file is empty (''): a jobs file needs a 'jobs:' list; \
             write 'jobs: []' for a watch list with no jobs yet",
        ));
    };
    let at_top = Pos::of(&raw);
    let raw = raw.value;
    let paths = Paths {
        src,
        base: file.parent().unwrap_or(Path::new("/")),
        env,
    };

    let settings = settings(raw.settings, &paths)?;

    let jobs = match raw.jobs {
        None => {
            return Err(src.refuse(
                at_top,
                format!(
                    "no 'jobs:' key in the file (it starts at {}): add a 'jobs:' list; \
                     write 'jobs: []' for a watch list with no jobs yet",
                    src.quote_at(at_top)
                ),
            ));
        }
        Some(given) => {
            let at = Pos::of(&given);
            match given.value {
                Some(jobs) => jobs,
                None => {
                    return Err(src.refuse(
                        at,
                        format!(
                            "'jobs:' has no value ({}): list the jobs under it, \
                             or write 'jobs: []' for a watch list with no jobs yet",
                            quote(&shown_empty(src, at))
                        ),
                    ));
                }
            }
        }
    };

    let mut first_line_of_id: HashMap<String, u64> = HashMap::new();
    let mut specs = Vec::with_capacity(jobs.len());
    for raw_job in jobs {
        let mut spec = job(raw_job, &paths, &mut first_line_of_id)?;
        if spec.process.is_some() && spec.lock.is_none() {
            spec.kept_lock = Some(kept_lock(&settings.state_dir, &spec.id));
        }
        specs.push(spec);
    }
    Ok(Config {
        source: file.to_path_buf(),
        settings,
        jobs: specs.into(),
    })
}

/// The lock mihari keeps in `state_dir` for a job declared by `process` alone (SPEC §5).
fn kept_lock(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join(format!("{id}.run.lock"))
}

/// Path resolution in one place: `~/` against `$HOME`, relative against the file's folder.
struct Paths<'a> {
    src: &'a Source<'a>,
    base: &'a Path,
    env: &'a Env,
}

impl Paths<'_> {
    /// An absolute path for `key`'s value. Lexical only: `..` is kept (resolving it would
    /// need the file system, and a symlinked folder makes it mean something else).
    fn resolve(&self, raw: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        let at = Pos::of(raw);
        let text = raw.value.as_str();
        if text.trim().is_empty() {
            return Err(self.src.refuse(
                at,
                format!(
                    "{key} {} is empty: write an absolute path, a path starting with '~/', \
                     or one relative to the jobs file's folder; or remove the key",
                    quote(text)
                ),
            ));
        }
        if text.contains('\0') {
            return Err(self.src.refuse(
                at,
                format!(
                    "{key} {} contains a NUL character, which no path can hold",
                    quote(text)
                ),
            ));
        }
        let path = if text == "~" || text.starts_with("~/") {
            let Some(home) = &self.env.home else {
                return Err(self.src.refuse(
                    at,
                    format!(
                        "{key} {} starts with '~/' but $HOME is not set: \
                         write the full path, or set HOME",
                        quote(text)
                    ),
                ));
            };
            home.join(text.trim_start_matches('~').trim_start_matches('/'))
        } else if text.starts_with('~') {
            return Err(self.src.refuse(
                at,
                format!(
                    "{key} {} names another user's home: only '~/' (your own, $HOME) is \
                     expanded; write the full path",
                    quote(text)
                ),
            ));
        } else {
            self.base.join(text)
        };
        Ok(normalize(&path))
    }

    fn resolve_opt(
        &self,
        raw: &Option<Spanned<String>>,
        key: &str,
    ) -> Result<Option<PathBuf>, ConfigError> {
        raw.as_ref().map(|raw| self.resolve(raw, key)).transpose()
    }
}

/// Drops `.` components and doubled separators; keeps `..` (see [`Paths::resolve`]).
fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|component| !matches!(component, Component::CurDir))
        .collect()
}

/// The `settings:` of a file validated alone, its paths resolved as in a whole load: for
/// the commands that read only the store (`events`, `digest`) while a job of the file is
/// refused.
pub(super) fn settings_alone(
    raw: Option<RawSettings>,
    src: &Source<'_>,
    file: &Path,
    env: &Env,
) -> Result<Settings, ConfigError> {
    let paths = Paths {
        src,
        base: file.parent().unwrap_or(Path::new("/")),
        env,
    };
    settings(raw, &paths)
}

fn settings(raw: Option<RawSettings>, paths: &Paths<'_>) -> Result<Settings, ConfigError> {
    let src = paths.src;
    let raw = raw.unwrap_or(RawSettings {
        state_dir: None,
        digest_at: None,
        restart_daily_cap: None,
        workspace_cooldown_sec: None,
        max_hops: None,
        escalate_command: None,
        prometheus_textfile: None,
    });

    let state_dir = match &raw.state_dir {
        Some(state_dir) => paths.resolve(state_dir, "settings.state_dir")?,
        None => default_state_dir(paths.env).ok_or_else(|| {
            src.refuse_file(
                "cannot choose a state_dir: neither $XDG_STATE_HOME nor $HOME is set \
                 (''); set settings.state_dir to an absolute path",
            )
        })?,
    };

    let digest_at = match &raw.digest_at {
        Some(digest_at) => parse_hh_mm(&digest_at.value).ok_or_else(|| {
            src.refuse(
                Pos::of(digest_at),
                format!(
                    "digest_at {} is not a time of day: write HH:MM on the 24-hour clock, \
                     in quotes, like \"09:00\" or \"18:30\"",
                    quote(&digest_at.value)
                ),
            )
        })?,
        None => NaiveTime::from_hms_opt(DEFAULT_DIGEST_AT.0, DEFAULT_DIGEST_AT.1, 0)
            .unwrap_or(NaiveTime::MIN),
    };

    let escalate_command = command(src, raw.escalate_command, "settings.escalate_command")?;

    let prometheus_textfile = match &raw.prometheus_textfile {
        Some(textfile) => {
            let path = paths.resolve(textfile, "settings.prometheus_textfile")?;
            if path.extension().is_none_or(|ext| ext != "prom") {
                return Err(src.refuse(
                    Pos::of(textfile),
                    format!(
                        "prometheus_textfile {} does not end in '.prom': node_exporter's \
                         textfile collector reads only *.prom files, so nothing would be \
                         scraped; name it like /var/lib/node_exporter/textfile/mihari.prom",
                        quote(&textfile.value)
                    ),
                ));
            }
            Some(path)
        }
        None => None,
    };

    Ok(Settings {
        state_dir,
        digest_at,
        restart_daily_cap: raw.restart_daily_cap.unwrap_or(DEFAULT_RESTART_DAILY_CAP),
        workspace_cooldown_sec: raw
            .workspace_cooldown_sec
            .unwrap_or(DEFAULT_WORKSPACE_COOLDOWN_SEC),
        max_hops: raw.max_hops.unwrap_or(DEFAULT_MAX_HOPS),
        escalate_command,
        prometheus_textfile,
    })
}

/// `$XDG_STATE_HOME/mihari`, else `$HOME/.local/state/mihari`.
fn default_state_dir(env: &Env) -> Option<PathBuf> {
    if let Some(xdg) = &env.xdg_state_home {
        return Some(xdg.join("mihari"));
    }
    env.home
        .as_ref()
        .map(|home| home.join(".local/state/mihari"))
}

/// Exactly `HH:MM`, 00:00 to 23:59. Nothing looser: "9:00" or "09:00:00" might mean what
/// the operator thinks, and a digest cut at the wrong hour is silent.
fn parse_hh_mm(text: &str) -> Option<NaiveTime> {
    let bytes = text.as_bytes();
    if bytes.len() != 5 || bytes[2] != b':' {
        return None;
    }
    let digits = [bytes[0], bytes[1], bytes[3], bytes[4]];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let hour = u32::from(digits[0] - b'0') * 10 + u32::from(digits[1] - b'0');
    let minute = u32::from(digits[2] - b'0') * 10 + u32::from(digits[3] - b'0');
    NaiveTime::from_hms_opt(hour, minute, 0)
}

/// A command as given: `None` when the key is absent, the argv when it is a usable list.
/// Refused: no value, an empty list, an empty program name, a NUL in any argument.
fn command(
    src: &Source<'_>,
    raw: Given<Argv>,
    what: &str,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let at = Pos::of(&raw);
    let argv = match raw.value {
        Some(Argv(argv)) if !argv.is_empty() => argv,
        _ => {
            let shown = shown_empty(src, at);
            return Err(src.refuse(
                spanning(at, &shown),
                format!(
                    "{what} is empty ({}): write the argv list, like [\"python3\", \"collect.py\"], \
                     or remove the key",
                    quote(&shown)
                ),
            ));
        }
    };
    if let Some(program) = argv.first()
        && program.value.trim().is_empty()
    {
        return Err(src.refuse(
            Pos::of(program),
            format!(
                "{what} has an empty program name ({}): the first element names the program \
                 to run, like \"python3\"",
                quote(&program.value)
            ),
        ));
    }
    if let Some(arg) = argv.iter().find(|arg| arg.value.contains('\0')) {
        return Err(src.refuse(
            Pos::of(arg),
            format!(
                "{what} has an argument with a NUL character ({}), which no program can receive",
                quote(&arg.value)
            ),
        ));
    }
    Ok(Some(argv.into_iter().map(|arg| arg.value).collect()))
}

/// How an empty value was written, for quoting: `[]`, `~`, `null`, or '' for nothing at all
/// (the library places a missing value at the colon before it).
fn shown_empty(src: &Source<'_>, at: Pos) -> String {
    let rest = src.excerpt(Pos { len: 0, ..at });
    if rest.starts_with('[') {
        match rest.find(']') {
            Some(end) => rest[..=end].to_owned(),
            None => "[]".to_owned(),
        }
    } else if rest.starts_with('~') {
        "~".to_owned()
    } else if rest.starts_with("null") || rest.starts_with("Null") || rest.starts_with("NULL") {
        rest[..4].to_owned()
    } else {
        String::new()
    }
}

/// `at`, widened to cover `shown` (so the caret underlines all of `[]`).
fn spanning(at: Pos, shown: &str) -> Pos {
    match u64::try_from(shown.chars().count()) {
        Ok(len) if len > 0 => Pos { len, ..at },
        _ => at,
    }
}

/// `[a-z0-9][a-z0-9_-]{0,63}`: ids name jobs on the command line, in events and in keys.
pub(crate) fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// A valid id close to an invalid one, to show what would be accepted.
pub(crate) fn suggest_id(id: &str) -> Option<String> {
    let mut out = String::new();
    for c in id.trim().chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let out: String = out
        .trim_start_matches(['_', '-'])
        .chars()
        .take(64)
        .collect();
    let out = out.trim_end_matches('_').to_owned();
    is_valid_id(&out).then_some(out)
}

/// A plain SQL identifier. The probe names the table and column in a query; anything else
/// could be SQL, and a config must not be a way to run it.
fn is_sql_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 128
}

fn job(
    raw: Spanned<RawJob>,
    paths: &Paths<'_>,
    first_line_of_id: &mut HashMap<String, u64>,
) -> Result<JobSpec, ConfigError> {
    let src = paths.src;
    let at_job = Pos::of(&raw);
    let raw = raw.value;

    // The id first: every later message names the job by it.
    let Some(id) = &raw.id else {
        return Err(src.refuse(
            at_job,
            format!(
                "a job has no id (the job starting at {}): add 'id:', 1 to 64 characters \
                 of a-z, 0-9, '_' and '-', starting with a letter or digit",
                src.quote_at(at_job)
            ),
        ));
    };
    let at_id = Pos::of(id);
    if !is_valid_id(&id.value) {
        let hint = suggest_id(&id.value)
            .map(|s| format!(", like '{s}'"))
            .unwrap_or_default();
        return Err(src.refuse(
            at_id,
            format!(
                "job id {} is not accepted: an id is 1 to 64 characters of a-z, 0-9, '_' and \
                 '-', starting with a letter or digit{hint}",
                quote(&id.value)
            ),
        ));
    }
    if let Some(first_line) = first_line_of_id.get(&id.value) {
        return Err(src.refuse(
            at_id,
            format!(
                "job id {} is repeated (first at line {first_line}): ids must be unique; \
                 rename one of the two jobs",
                quote(&id.value)
            ),
        ));
    }
    first_line_of_id.insert(id.value.clone(), at_id.line);
    let job_id = id.value.clone();
    let the_job = format!("job '{job_id}'");

    let workspace = paths.resolve_opt(&raw.workspace, "workspace")?;
    let lock = paths.resolve_opt(&raw.lock, "lock")?;
    let log = paths.resolve_opt(&raw.log, "log")?;
    let progress_file = paths.resolve_opt(&raw.progress_file, "progress_file")?;
    let progress_table = raw
        .progress_table
        .map(|table| progress_table(*table, paths))
        .transpose()?;
    let manifest = paths.resolve_opt(&raw.manifest, "manifest")?;
    let resource_lock = paths.resolve_opt(&raw.resource_lock, "resource_lock")?;
    let process = raw
        .process
        .map(|process| process_spec(*process, src, &the_job))
        .transpose()?;
    let slurm = raw
        .slurm
        .map(|given| slurm_spec(*given, src, &the_job))
        .transpose()?;
    if let Some((_, at_slurm)) = &slurm {
        for (key, declared) in [("lock", raw.lock.is_some()), ("process", process.is_some())] {
            if declared {
                return Err(src.refuse(
                    *at_slurm,
                    format!(
                        "{the_job} declares both slurm (at {}) and {key}: Slurm is the holder \
                         of a job it runs (its own word, from squeue), so a {key} beside it \
                         could only disagree; remove {key}, or remove slurm for a job that runs \
                         here",
                        src.quote_at(*at_slurm)
                    ),
                ));
            }
        }
        let restart_command = raw.restart.as_ref().and_then(|r| {
            r.command.as_ref().map(Pos::of).or_else(|| {
                r.routes
                    .as_ref()
                    .and_then(|routes| routes.first().map(Pos::of))
            })
        });
        if let Some(at) = restart_command {
            return Err(src.refuse(
                at,
                format!(
                    "restart.command (or routes) of {the_job} (at {}) is not used for a Slurm \
                     job: slurm.submit is what restart runs (or slurm.requeue: true); move the \
                     command there, and keep restart for its cwd and env",
                    src.quote_at(at)
                ),
            ));
        }
    }
    // A Slurm job's StdOut is its log when it declares none: what log_progress reads then.
    let log_progress = raw
        .log_progress
        .map(|given| log_progress(*given, src, &the_job, log.is_some() || slurm.is_some()))
        .transpose()?;
    let at_schedule = raw.schedule.as_deref().map(Pos::of);
    let schedule = raw
        .schedule
        .map(|given| schedule(*given, src, &the_job))
        .transpose()?;

    let (stall_sec, stall_never) = match &raw.stall_sec {
        Some(stall) => match stall.value {
            RawStall::Never => (DEFAULT_STALL_SEC, true),
            RawStall::Seconds(seconds) => {
                let given = Spanned {
                    value: seconds,
                    referenced: stall.referenced,
                    defined: stall.defined,
                };
                (positive(src, &given, "stall_sec")?, false)
            }
        },
        None => (DEFAULT_STALL_SEC, false),
    };

    // should_run_when: a job that cannot say when it should run is refused (SPEC §1.4).
    let accepted = PREDICATES.map(Predicate::as_str).join(", ");
    let predicates = match &raw.should_run_when {
        None => {
            return Err(src.refuse(
                at_job,
                format!(
                    "{the_job} has no should_run_when: say when it should run with a \
                     non-empty list of {accepted}, like should_run_when: [not_complete]"
                ),
            ));
        }
        Some(given) => match &given.value {
            Some(list) if !list.is_empty() => list,
            _ => {
                let at = Pos::of(given);
                let shown = shown_empty(src, at);
                return Err(src.refuse(
                    spanning(at, &shown),
                    format!(
                        "should_run_when of {the_job} is empty ({}): list at least one of \
                         {accepted}",
                        quote(&shown)
                    ),
                ));
            }
        },
    };
    let mut should_run_when = Vec::with_capacity(predicates.len());
    for named in predicates {
        let Some(predicate) = PREDICATES.into_iter().find(|p| p.as_str() == named.value) else {
            return Err(src.refuse(
                Pos::of(named),
                format!(
                    "should_run_when of {the_job} names an unknown predicate {}: \
                     accepted: {accepted}",
                    quote(&named.value)
                ),
            ));
        };
        should_run_when.push((predicate, Pos::of(named)));
    }

    // A holder's file positions are progress too (source io), unless io_progress is off.
    let io_progress = raw.io_progress.as_ref().is_none_or(|flag| flag.value);
    let holder_declared = lock.is_some() || process.is_some();
    let has_progress_source = log.is_some()
        || progress_file.is_some()
        || progress_table.is_some()
        || manifest.is_some()
        || (holder_declared && io_progress)
        || slurm.is_some();
    // With the stall judgement off (`stall_sec: never`), a service is watched by its holder
    // alone: no progress is asked of it, so none need be declared. A scheduled job's evidence
    // is the ends of its runs (`mihari run`, `mihari heartbeat --exit`): a cron line that
    // reports them needs nothing more.
    let watched_by_holder = stall_never && holder_declared;
    if !has_progress_source && !watched_by_holder && schedule.is_none() {
        let io_words = match &raw.io_progress {
            Some(flag) if holder_declared => format!(
                " (io_progress {} turns off the positions of the files its holder has open, \
                 the only progress it had)",
                src.quote_at(Pos::of(flag))
            ),
            _ => String::new(),
        };
        let way_out = if stall_never {
            "; with stall_sec: never a holder alone is enough: add lock (its PID file) or \
             process: {cmdline: '...'}"
        } else {
            "; a service idle by nature (a server, a daemon with a PID file) can instead say \
             stall_sec: never beside its lock or process, and be watched by its holder alone"
        };
        return Err(src.refuse(
            at_job,
            format!(
                "{the_job} has no progress source{io_words}: add at least one of \
                 {PROGRESS_SOURCES}, or a lock or process whose open files' positions are \
                 read, so that mihari can tell progress from silence{way_out}"
            ),
        ));
    }

    for (predicate, at) in &should_run_when {
        match predicate {
            Predicate::NotComplete => {
                let table_total = progress_table
                    .as_ref()
                    .is_some_and(|table| table.total_column.is_some());
                let printed_total = log_progress
                    .as_ref()
                    .is_some_and(LogProgress::reports_total);
                if raw.expected_total.is_none()
                    && !table_total
                    && log_progress == Some(LogProgress::Dd)
                {
                    return Err(src.refuse(
                        *at,
                        format!(
                            "should_run_when {} of {the_job} needs expected_total: dd \
                             status=progress prints the bytes copied, never of how many; add \
                             expected_total: N (the bytes when done), or drop not_complete",
                            quote(predicate.as_str())
                        ),
                    ));
                }
                if raw.expected_total.is_none() && !table_total && !printed_total {
                    return Err(src.refuse(
                        *at,
                        format!(
                            "should_run_when {} of {the_job} needs expected_total, the number \
                             of items when done: add expected_total: N (or a progress_table \
                             total_column the job keeps up to date, or log_progress that reads \
                             the total it prints), or drop not_complete",
                            quote(predicate.as_str())
                        ),
                    ));
                }
                if progress_file.is_none() && progress_table.is_none() && log_progress.is_none() {
                    return Err(src.refuse(
                        *at,
                        format!(
                            "should_run_when {} of {the_job} needs a countable source: add \
                             progress_file, progress_table or log_progress (a log without \
                             log_progress and a manifest count nothing)",
                            quote(predicate.as_str())
                        ),
                    ));
                }
            }
            // The event log says whether the last run succeeded: nothing to count is needed.
            Predicate::NotSucceeded => {}
            Predicate::Overdue => {
                if schedule.is_none() {
                    return Err(src.refuse(
                        *at,
                        format!(
                            "should_run_when {} of {the_job} needs schedule, when its runs are \
                             due: add schedule: {{ every: 20m, grace: 5m }} (due so long after \
                             the last success) or schedule: {{ cron: \"*/20 * * * *\", grace: \
                             5m }} (the times of its crontab line)",
                            quote(predicate.as_str())
                        ),
                    ));
                }
            }
            Predicate::ResourceFree => {
                if resource_lock.is_none() && lock.is_none() && process.is_none() && slurm.is_none()
                {
                    return Err(src.refuse(
                        *at,
                        format!(
                            "should_run_when {} of {the_job} has no lock to look at: add \
                             resource_lock (or lock), the lock file of the resource, \
                             process: {{cmdline: '...'}}, the command line of the job, or \
                             slurm: {{job_name: '...'}}, the Slurm job",
                            quote(predicate.as_str())
                        ),
                    ));
                }
            }
        }
    }

    // A schedule says when the job should run: without `overdue` nothing would read it, and a
    // missed run would go untold (with not_succeeded alone, a cron job's first success would
    // read COMPLETE for ever).
    if let Some(at) = at_schedule
        && !should_run_when
            .iter()
            .any(|(predicate, _)| *predicate == Predicate::Overdue)
    {
        return Err(src.refuse(
            at,
            format!(
                "schedule of {the_job} (at {}) is not used by its should_run_when: add overdue \
                 to it (should_run_when: [overdue]) so that a missed or failed run is told, or \
                 remove schedule",
                src.quote_at(at)
            ),
        ));
    }

    let restart = raw
        .restart
        .map(|r| restart(*r, paths, &the_job))
        .transpose()?;

    let auto_restart = raw.auto_restart.as_ref().is_some_and(|a| a.value);
    if let Some(flag) = raw.auto_restart.as_ref().filter(|a| a.value) {
        let reason_given = raw
            .auto_restart_reason
            .as_ref()
            .is_some_and(|reason| !reason.value.trim().is_empty());
        if !reason_given {
            let refusal = match &raw.auto_restart_reason {
                Some(reason) => src.refuse(
                    Pos::of(reason),
                    format!(
                        "auto_restart_reason {} of {the_job} is blank: write the known cause \
                         and the fixed procedure, or set auto_restart: false",
                        quote(&reason.value)
                    ),
                ),
                None => src.refuse(
                    Pos::of(flag),
                    format!(
                        "auto_restart {} of {the_job} lacks auto_restart_reason: write the \
                         known cause and the fixed procedure, or set auto_restart: false",
                        src.quote_at(Pos::of(flag))
                    ),
                ),
            };
            return Err(refusal);
        }
        let slurm_restarts = slurm
            .as_ref()
            .is_some_and(|(spec, _)| spec.restart.is_some());
        if slurm.is_some() && !slurm_restarts {
            return Err(src.refuse(
                Pos::of(flag),
                format!(
                    "auto_restart {} of {the_job} lacks slurm.submit: add the argv that submits \
                     it again, like submit: [\"sbatch\", \"train.sbatch\"] (or requeue: true), \
                     or set auto_restart: false",
                    src.quote_at(Pos::of(flag))
                ),
            ));
        }
        if slurm.is_none() && restart.as_ref().and_then(|r| r.command.as_ref()).is_none() {
            return Err(src.refuse(
                Pos::of(flag),
                format!(
                    "auto_restart {} of {the_job} lacks restart.command: add the argv to run, \
                     like restart: {{ command: [\"python3\", \"collect.py\", \"--resume\"] }}, \
                     or set auto_restart: false",
                    src.quote_at(Pos::of(flag))
                ),
            ));
        }
    }

    let checks = checks(raw.checks.unwrap_or_default(), src, &the_job)?;
    let timeouts = timeouts(raw.timeouts.map(|t| *t), src)?;
    let markers = markers(raw.markers.unwrap_or_default(), paths, &the_job)?;

    Ok(JobSpec {
        id: job_id,
        name: raw.name,
        owner: raw.owner,
        workspace,
        lock,
        log,
        progress_file,
        progress_table,
        manifest,
        log_progress,
        process,
        kept_lock: None,
        stall_sec,
        expected_total: raw.expected_total,
        should_run_when: should_run_when.into_iter().map(|(p, _)| p).collect(),
        resource_lock,
        auto_restart,
        auto_restart_reason: raw.auto_restart_reason.map(|r| r.value),
        auto_restart_blocked_reason: raw.auto_restart_blocked_reason,
        restart,
        checks,
        timeouts,
        stall_never,
        markers,
        io_progress,
        slurm: slurm.map(|(spec, _)| spec),
        schedule,
    })
}

/// `schedule:` — `every` or `cron` (one of the two), `grace`, and the zone a cron expression
/// is read in.
fn schedule(
    raw: Spanned<RawSchedule>,
    src: &Source<'_>,
    the_job: &str,
) -> Result<Schedule, ConfigError> {
    let at = Pos::of(&raw);
    let raw = raw.value;
    let cadence = match (&raw.every, &raw.cron) {
        (Some(_), Some(cron)) => {
            return Err(src.refuse(
                Pos::of(cron),
                format!(
                    "schedule of {the_job} has both every and cron ({}): keep one: every for a \
                     run due so long after the last success, cron for runs at set times",
                    quote(&cron.value)
                ),
            ));
        }
        (None, None) => {
            return Err(src.refuse(
                at,
                format!(
                    "schedule of {the_job} (at {}) names neither every nor cron: add every: 20m \
                     (due so long after the last success) or cron: \"*/20 * * * *\" (the five \
                     fields of its crontab line)",
                    src.quote_at(at)
                ),
            ));
        }
        (Some(every), None) => Cadence::Every {
            sec: duration(src, every, "schedule.every", the_job)?,
        },
        (None, Some(cron)) => match CronExpr::parse(&cron.value) {
            Ok(expression) => Cadence::Cron { expression },
            Err(why) => {
                return Err(src.refuse(
                    Pos::of(cron),
                    format!(
                        "schedule.cron {} of {the_job} is not accepted: {why}; write the five \
                         fields of a crontab line (minute hour day-of-month month day-of-week), \
                         like \"*/20 * * * *\" or \"30 2 * * 1-5\"",
                        quote(&cron.value)
                    ),
                ));
            }
        },
    };
    let Some(grace) = &raw.grace else {
        return Err(src.refuse(
            at,
            format!(
                "schedule of {the_job} (at {}) lacks grace: how late after its due time a run \
                 may end with exit 0 before the job is overdue (the run's usual length and some \
                 slack), like grace: 5m",
                src.quote_at(at)
            ),
        ));
    };
    let grace_sec = duration(src, grace, "schedule.grace", the_job)?;
    let time_zone = one_of(
        src,
        &raw.time_zone,
        "schedule.time_zone",
        &TimeZoneName::ALL.map(|zone| (zone.as_str(), zone)),
        "the zone the cron expression's hours are read in: 'local' is the machine's (TZ, \
         /etc/localtime), as cron reads them",
    )?;
    if let (Some(zone), Cadence::Every { .. }) = (&raw.time_zone, &cadence) {
        return Err(src.refuse(
            Pos::of(zone),
            format!(
                "schedule.time_zone {} of {the_job} is read only with cron: every counts from \
                 the end of the last success, in no zone; remove time_zone",
                quote(&zone.value)
            ),
        ));
    }
    Ok(Schedule {
        cadence,
        grace_sec,
        time_zone: time_zone.unwrap_or(TimeZoneName::Local),
    })
}

/// A duration of `schedule`: a whole number of at least 1 and one unit, `30s`, `20m`, `1h`,
/// `1d`.
fn duration(
    src: &Source<'_>,
    raw: &Spanned<RawDuration>,
    key: &str,
    the_job: &str,
) -> Result<u64, ConfigError> {
    let text = raw.value.0.as_str();
    if let Some(sec) = crate::core::schedule::parse_duration(text) {
        return Ok(sec);
    }
    let hint = match text.parse::<u64>() {
        Ok(n) if n > 0 => format!(" ('{n}' alone has no unit: {n}s is {n} seconds)"),
        _ => String::new(),
    };
    Err(src.refuse(
        Pos::of(raw),
        format!(
            "{key} {} of {the_job} is not accepted: write a whole number of at least 1 and one \
             unit, s, m, h or d, like 30s, 20m, 1h or 1d, at most {}d{hint}",
            quote(text),
            crate::core::schedule::LONGEST_SEC / 86_400
        ),
    ))
}

/// `slurm:`: exactly one of `job_name` and `job_id`, an optional user, and at most one way
/// to restart (`submit`, or `requeue: true`). Returns where the section starts, for the
/// refusals that concern the job around it.
fn slurm_spec(
    raw: Spanned<RawSlurm>,
    src: &Source<'_>,
    the_job: &str,
) -> Result<(SlurmSpec, Pos), ConfigError> {
    let at = Pos::of(&raw);
    let raw = raw.value;
    let job = match (raw.job_name, raw.job_id) {
        (Some(name), Some(id)) => {
            return Err(src.refuse(
                Pos::of(&id),
                format!(
                    "slurm of {the_job} names both job_name {} and job_id {}: keep one (the \
                     name follows each new submission; the id follows one job through its \
                     requeues)",
                    quote(&name.value),
                    quote(&id.value.to_string())
                ),
            ));
        }
        (Some(name), None) => {
            let text = name.value.trim();
            if text.is_empty() || text.chars().any(char::is_control) || text != name.value {
                return Err(src.refuse(
                    Pos::of(&name),
                    format!(
                        "slurm.job_name {} of {the_job} is not a job name: write the name the \
                         job is submitted with (sbatch --job-name), without blanks around it",
                        quote(&name.value)
                    ),
                ));
            }
            SlurmJobRef::Name(name.value)
        }
        (None, Some(id)) if id.value > 0 && id.value <= u64::from(u32::MAX) => {
            SlurmJobRef::Id(id.value)
        }
        (None, Some(id)) => {
            return Err(src.refuse(
                Pos::of(&id),
                format!(
                    "slurm.job_id {} of {the_job} is not a Slurm job id: write the number \
                     sbatch printed, like 4242",
                    quote(&id.value.to_string())
                ),
            ));
        }
        (None, None) => {
            return Err(src.refuse(
                at,
                format!(
                    "slurm of {the_job} (at {}) names no job: write job_name: NAME (the newest \
                     job of that name is the holder) or job_id: ID",
                    src.quote_at(at)
                ),
            ));
        }
    };
    let user = match raw.user {
        Some(user) if is_user_name(&user.value) => Some(user.value),
        Some(user) => {
            return Err(src.refuse(
                Pos::of(&user),
                format!(
                    "slurm.user {} of {the_job} is not a user name: write the user the job runs \
                     as, like alice, or remove it for the user mihari runs as",
                    quote(&user.value)
                ),
            ));
        }
        None => None,
    };
    let at_submit = raw.submit.as_ref().map(Pos::of);
    let submit = command(src, raw.submit, &format!("slurm.submit of {the_job}"))?;
    let requeue = raw.requeue.as_ref().filter(|r| r.value).map(Pos::of);
    let restart = match (submit, requeue) {
        (Some(_), Some(at)) => {
            return Err(src.refuse(
                at,
                format!(
                    "slurm of {the_job} has both submit and requeue {}: keep one (submit \
                     makes a new job; requeue runs the same job id again)",
                    src.quote_at(at)
                ),
            ));
        }
        (Some(_), None) if matches!(job, SlurmJobRef::Id(_)) => {
            return Err(src.refuse(
                at_submit.unwrap_or(at),
                format!(
                    "slurm.submit {} of {the_job} makes a new job with a new id, which job_id \
                     would not follow: name the job by job_name, or restart it with \
                     requeue: true",
                    src.quote_at(at_submit.unwrap_or(at))
                ),
            ));
        }
        (Some(argv), None) => Some(SlurmRestart::Submit(argv)),
        (None, Some(_)) => Some(SlurmRestart::Requeue),
        (None, None) => None,
    };
    Ok((SlurmSpec { job, user, restart }, at))
}

/// A number of seconds where 0 makes no sense (everything would be late at once).
fn positive(src: &Source<'_>, raw: &Spanned<u64>, key: &str) -> Result<u64, ConfigError> {
    if raw.value == 0 {
        return Err(src.refuse(
            Pos::of(raw),
            format!(
                "{key} {} is not accepted: expected a whole number of seconds, at least 1",
                src.quote_at(Pos::of(raw))
            ),
        ));
    }
    Ok(raw.value)
}

fn progress_table(
    raw: Spanned<RawProgressTable>,
    paths: &Paths<'_>,
) -> Result<ProgressTable, ConfigError> {
    let src = paths.src;
    let at = Pos::of(&raw);
    let raw = raw.value;
    let missing = |key: &str| {
        src.refuse(
            at,
            format!(
                "progress_table (at {}) lacks '{key}': it needs db (the SQLite file), table, \
                 and time_column (whose max() is the last progress)",
                src.quote_at(at)
            ),
        )
    };
    let db = paths.resolve(
        raw.db.as_ref().ok_or_else(|| missing("db"))?,
        "progress_table.db",
    )?;
    let mut identifiers = Vec::with_capacity(2);
    for (key, value) in [("table", &raw.table), ("time_column", &raw.time_column)] {
        let value = value.as_ref().ok_or_else(|| missing(key))?;
        if !is_sql_identifier(&value.value) {
            return Err(src.refuse(
                Pos::of(value),
                format!(
                    "progress_table.{key} {} is not a plain SQL name: use letters, digits and \
                     '_', not starting with a digit (mihari puts it into a query)",
                    quote(&value.value)
                ),
            ));
        }
        identifiers.push(value.value.clone());
    }
    let time_column = identifiers.pop().unwrap_or_default();
    let table = identifiers.pop().unwrap_or_default();
    let time_unit = one_of(
        src,
        &raw.time_unit,
        "progress_table.time_unit",
        &TimeUnit::ALL.map(|unit| (unit.as_str(), unit)),
        "seconds, milliseconds or microseconds since 1970",
    )?
    .unwrap_or(TimeUnit::Seconds);
    let time_zone = one_of(
        src,
        &raw.time_zone,
        "progress_table.time_zone",
        &TimeZoneName::ALL.map(|zone| (zone.as_str(), zone)),
        "the zone text without an offset was written in: 'local' is the machine's (TZ, \
         /etc/localtime)",
    )?
    .unwrap_or(TimeZoneName::Local);
    let mut columns = Vec::with_capacity(2);
    for (key, value) in [
        ("done_column", &raw.done_column),
        ("total_column", &raw.total_column),
    ] {
        let Some(value) = value else {
            columns.push(None);
            continue;
        };
        if !is_sql_identifier(&value.value) {
            return Err(src.refuse(
                Pos::of(value),
                format!(
                    "progress_table.{key} {} is not a plain SQL name: use letters, digits and \
                     '_', not starting with a digit (mihari puts it into a query)",
                    quote(&value.value)
                ),
            ));
        }
        columns.push(Some(value.value.clone()));
    }
    let total_column = columns.pop().flatten();
    let done_column = columns.pop().flatten();
    if let (Some(total), None) = (&raw.total_column, &done_column) {
        return Err(src.refuse(
            Pos::of(total),
            format!(
                "progress_table.total_column {} has no done_column beside it: a total is read \
                 from the newest row together with its done; add done_column, or remove \
                 total_column",
                quote(&total.value)
            ),
        ));
    }
    Ok(ProgressTable {
        db,
        table,
        time_column,
        time_unit,
        time_zone,
        done_column,
        total_column,
    })
}

/// A key whose value must be one of a few words (`accepted`, as spelt in the file); `None`
/// when it is absent. `meaning` says what the words choose between, for the refusal.
fn one_of<T: Copy>(
    src: &Source<'_>,
    raw: &Option<Spanned<String>>,
    key: &str,
    accepted: &[(&str, T)],
    meaning: &str,
) -> Result<Option<T>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match accepted.iter().find(|(word, _)| *word == raw.value) {
        Some((_, value)) => Ok(Some(*value)),
        None => {
            let words: Vec<String> = accepted.iter().map(|(w, _)| format!("'{w}'")).collect();
            Err(src.refuse(
                Pos::of(raw),
                format!(
                    "{key} {} is not accepted: write one of {} ({meaning})",
                    quote(&raw.value),
                    words.join(", ")
                ),
            ))
        }
    }
}

/// `process:`: a `cmdline` that compiles as a regular expression, and an optional user.
fn process_spec(
    raw: Spanned<RawProcess>,
    src: &Source<'_>,
    the_job: &str,
) -> Result<ProcessSpec, ConfigError> {
    let at = Pos::of(&raw);
    let raw = raw.value;
    let Some(cmdline) = raw.cmdline else {
        return Err(src.refuse(
            at,
            format!(
                "process of {the_job} (at {}) lacks 'cmdline': a regular expression over the \
                 job's argv joined by spaces, like cmdline: '^python3 .*train\\.py'",
                src.quote_at(at)
            ),
        ));
    };
    let at_cmdline = Pos::of(&cmdline);
    if cmdline.value.trim().is_empty() {
        return Err(src.refuse(
            at_cmdline,
            format!(
                "process.cmdline {} of {the_job} is empty: it would match every process; \
                 write a regular expression for the job's command line, like \
                 '^python3 .*train\\.py'",
                quote(&cmdline.value)
            ),
        ));
    }
    // Parsed here, compiled once for all jobs together when processes are scanned: a
    // thousand patterns compiled one by one would cost more than the scan itself.
    if let Err(error) = regex_syntax::Parser::new().parse(&cmdline.value) {
        return Err(src.refuse(
            at_cmdline,
            format!(
                "process.cmdline {} of {the_job} is not a regular expression ({}): fix it, \
                 and escape what is meant literally, like '\\.' for a dot",
                quote(&cmdline.value),
                regex_error_words(&error)
            ),
        ));
    }
    let user = match raw.user {
        None => None,
        Some(user) => {
            let at_user = Pos::of(&user);
            let refuse = |shown: &str| {
                src.refuse(
                    at_user,
                    format!(
                        "process.user {} of {the_job} is not a user: write a user name, like \
                         alice, or a uid, like 1000",
                        quote(shown)
                    ),
                )
            };
            match user.value {
                RawUser::Uid(uid) => Some(ProcessUser::Uid(
                    u32::try_from(uid).map_err(|_| refuse(&uid.to_string()))?,
                )),
                RawUser::Name(name) if is_user_name(&name) => Some(ProcessUser::Name(name)),
                RawUser::Name(name) => return Err(refuse(&name)),
                RawUser::Other(shown) => return Err(refuse(&shown)),
            }
        }
    };
    Ok(ProcessSpec {
        cmdline: cmdline.value,
        user,
    })
}

/// `log_progress:`: one preset, or one pattern that compiles and has a `done` or a `percent`
/// group; and a `log` to read it from.
fn log_progress(
    raw: Spanned<RawLogProgress>,
    src: &Source<'_>,
    the_job: &str,
    has_log: bool,
) -> Result<LogProgress, ConfigError> {
    let at = Pos::of(&raw);
    let raw = raw.value;
    if !has_log {
        return Err(src.refuse(
            at,
            format!(
                "log_progress of {the_job} (at {}) has no log to read: add log: PATH, the \
                 file the job's output goes to, or remove log_progress",
                src.quote_at(at)
            ),
        ));
    }
    let presets: Vec<(&str, LogProgress)> = LogProgress::PRESETS
        .iter()
        .map(|preset| (preset.as_str(), preset.clone()))
        .collect();
    match (&raw.preset, raw.pattern) {
        (Some(preset), Some(pattern)) => Err(src.refuse(
            Pos::of(&pattern),
            format!(
                "log_progress of {the_job} has both preset {} and pattern {}: keep one \
                 (a pattern replaces the preset)",
                quote(&preset.value),
                quote(&pattern.value)
            ),
        )),
        (None, None) => Err(src.refuse(
            at,
            format!(
                "log_progress of {the_job} (at {}) names neither a preset nor a pattern: \
                 write preset: tqdm (or fraction, percent, curl, wget, rsync, pv, dd), or \
                 pattern: with named groups \
                 done, total, percent, like 'step (?P<done>\\d+)/(?P<total>\\d+)'",
                src.quote_at(at)
            ),
        )),
        (Some(_), None) => {
            let chosen = one_of(
                src,
                &raw.preset,
                "log_progress.preset",
                &presets.iter().map(|(w, p)| (*w, p)).collect::<Vec<_>>(),
                "tqdm's bar, the last N/M of a line, the last NN% of a line, or the meter of \
                 curl, wget, rsync --info=progress2, pv -n or dd status=progress; or write \
                 pattern: instead",
            )?;
            Ok(chosen.cloned().unwrap_or(LogProgress::Tqdm))
        }
        (None, Some(pattern)) => {
            let at_pattern = Pos::of(&pattern);
            let compiled = match regex::Regex::new(&pattern.value) {
                Ok(compiled) => compiled,
                Err(error) => {
                    let words = match &error {
                        regex::Error::Syntax(text) => text
                            .lines()
                            .rev()
                            .find(|line| !line.trim().is_empty())
                            .unwrap_or("does not compile")
                            .trim()
                            .trim_start_matches("error: ")
                            .to_string(),
                        _ => "it is too large to compile".to_string(),
                    };
                    return Err(src.refuse(
                        at_pattern,
                        format!(
                            "log_progress.pattern {} of {the_job} is not a regular expression \
                             ({words}): fix it, and escape what is meant literally, like '\\.' \
                             for a dot",
                            quote(&pattern.value)
                        ),
                    ));
                }
            };
            let names: Vec<&str> = compiled.capture_names().flatten().collect();
            let has = |name: &str| names.contains(&name);
            if !has("done") && !has("percent") {
                return Err(src.refuse(
                    at_pattern,
                    format!(
                        "log_progress.pattern {} of {the_job} has neither a 'done' nor a \
                         'percent' group: name what it reads, like \
                         'step (?P<done>\\d+)/(?P<total>\\d+)' or '(?P<percent>\\d+)%'",
                        quote(&pattern.value)
                    ),
                ));
            }
            Ok(LogProgress::Pattern {
                reports_total: has("total") || has("percent"),
                pattern: pattern.value,
            })
        }
    }
}

/// The regex crate's error in one line: its last line ("error: unclosed group"), without
/// the pattern and caret it prints above it (the refusal has its own).
fn regex_error_words(error: &regex_syntax::Error) -> String {
    let text = error.to_string();
    let last = text
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("does not compile");
    last.trim().trim_start_matches("error: ").to_string()
}

/// A plausible user name: what `useradd` accepts, loosely (letters, digits, '_', '-', '.',
/// a final '$'), never blank.
fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with('-')
        && name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphanumeric() || "_-.".contains(c) || (c == '$' && i == name.len() - 1)
        })
}

fn restart(raw: RawRestart, paths: &Paths<'_>, the_job: &str) -> Result<RestartSpec, ConfigError> {
    let src = paths.src;
    let command = command(src, raw.command, &format!("restart.command of {the_job}"))?;
    let cwd = paths.resolve_opt(&raw.cwd, "restart.cwd")?;
    let env = env(raw.env, src, the_job)?;
    let mut routes = Vec::new();
    let mut first_line_of_route: HashMap<String, u64> = HashMap::new();
    for raw_route in raw.routes.unwrap_or_default() {
        routes.push(route(raw_route, src, the_job, &mut first_line_of_route)?);
    }
    Ok(RestartSpec {
        command,
        cwd,
        env,
        routes,
    })
}

fn env(
    raw: Option<EnvMap>,
    src: &Source<'_>,
    the_job: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut env = BTreeMap::new();
    for (name, value) in raw.map(|EnvMap(pairs)| pairs).unwrap_or_default() {
        if name.value.is_empty() || name.value.contains(['=', '\0']) {
            return Err(src.refuse(
                Pos::of(&name),
                format!(
                    "restart.env of {the_job} has a variable name {} that no environment can \
                     hold: a name is non-empty, without '=' or NUL, like PYTHONUNBUFFERED",
                    quote(&name.value)
                ),
            ));
        }
        if value.value.contains('\0') {
            return Err(src.refuse(
                Pos::of(&value),
                format!(
                    "restart.env {} of {the_job} has a value with a NUL character ({}), \
                     which no environment can hold",
                    quote(&name.value),
                    quote(&value.value)
                ),
            ));
        }
        env.insert(name.value, value.value);
    }
    Ok(env)
}

/// A name that must be given, non-blank, and unique among its siblings in one job
/// (`kind` is "check" or "route").
fn unique_name(
    raw: Option<Spanned<String>>,
    at_entry: Pos,
    src: &Source<'_>,
    kind: &str,
    the_job: &str,
    first_line: &mut HashMap<String, u64>,
) -> Result<String, ConfigError> {
    let Some(name) = raw else {
        return Err(src.refuse(
            at_entry,
            format!(
                "a {kind} of {the_job} has no name (the {kind} starting at {}): add 'name:'",
                src.quote_at(at_entry)
            ),
        ));
    };
    let at = Pos::of(&name);
    if name.value.trim().is_empty() {
        return Err(src.refuse(
            at,
            format!(
                "a {kind} of {the_job} has an empty name ({}): write a short name",
                quote(&name.value)
            ),
        ));
    }
    // A name is shown in terminals, written into events and logs, and passed in argv
    // (`mihari run --route NAME`); a check's result is found again by its name. A name that
    // the sanitizer would change reads one way and matches another: refused, like ids.
    if !is_inert(&name.value) {
        return Err(src.refuse(
            at,
            format!(
                "{kind} name {} of {the_job} holds a control character (a tab, a line \
                 break, an escape sequence, a bidirectional control) or a pile of combining \
                 marks: write it with visible characters only",
                quote(&name.value)
            ),
        ));
    }
    if let Some(line) = first_line.get(&name.value) {
        return Err(src.refuse(
            at,
            format!(
                "{kind} name {} is repeated in {the_job} (first at line {line}): {kind} names \
                 must be unique within a job; rename one",
                quote(&name.value)
            ),
        ));
    }
    first_line.insert(name.value.clone(), at.line);
    Ok(name.value)
}

fn route(
    raw: Spanned<RawRoute>,
    src: &Source<'_>,
    the_job: &str,
    first_line: &mut HashMap<String, u64>,
) -> Result<Route, ConfigError> {
    let at = Pos::of(&raw);
    let raw = raw.value;
    let name = unique_name(raw.name, at, src, "route", the_job, first_line)?;
    let what = format!("the command of route '{name}' of {the_job}");
    let command = command(src, raw.command, &what)?.ok_or_else(|| {
        src.refuse(
            at,
            format!(
                "route '{name}' of {the_job} has no command: add command: [\"program\", \"arg\"]"
            ),
        )
    })?;
    Ok(Route { name, command })
}

fn checks(
    raw: Vec<Spanned<RawCheck>>,
    src: &Source<'_>,
    the_job: &str,
) -> Result<Vec<CheckSpec>, ConfigError> {
    let mut first_line: HashMap<String, u64> = HashMap::new();
    let mut checks = Vec::with_capacity(raw.len());
    for raw_check in raw {
        let at = Pos::of(&raw_check);
        let raw_check = raw_check.value;
        let name = unique_name(raw_check.name, at, src, "check", the_job, &mut first_line)?;
        let what = format!("the command of check '{name}' of {the_job}");
        let command = command(src, raw_check.command, &what)?.ok_or_else(|| {
            src.refuse(
                at,
                format!("check '{name}' of {the_job} has no command: add command: [\"program\", \"arg\"]"),
            )
        })?;
        let every_sec = match &raw_check.every_sec {
            Some(every) => positive(src, every, "every_sec")?,
            None => DEFAULT_CHECK_EVERY_SEC,
        };
        let timeout_sec = match &raw_check.timeout_sec {
            Some(timeout) => positive(src, timeout, "timeout_sec")?,
            None => DEFAULT_CHECK_TIMEOUT_SEC,
        };
        checks.push(CheckSpec {
            name,
            command,
            every_sec,
            timeout_sec,
        });
    }
    Ok(checks)
}

/// `markers:`: each a path (resolved like every path) and a positive `stale_after_sec`, no
/// path twice in one job. The age is required: a bare marker with no age limit would never
/// be judged stale, a silent hole.
fn markers(
    raw: Vec<Spanned<RawMarker>>,
    paths: &Paths<'_>,
    the_job: &str,
) -> Result<Vec<MarkerSpec>, ConfigError> {
    let src = paths.src;
    let mut first_line: HashMap<PathBuf, u64> = HashMap::new();
    let mut markers = Vec::with_capacity(raw.len());
    for raw_marker in raw {
        let at = Pos::of(&raw_marker);
        let raw_marker = raw_marker.value;
        let Some(raw_path) = &raw_marker.path else {
            return Err(src.refuse(
                at,
                format!(
                    "a marker of {the_job} has no path (the marker starting at {}): add \
                     'path:', the file or folder that gates the job's work, like \
                     {{ path: /data/run/.resumed, stale_after_sec: 1800 }}",
                    src.quote_at(at)
                ),
            ));
        };
        let path = paths.resolve(raw_path, "markers.path")?;
        let Some(stale) = &raw_marker.stale_after_sec else {
            return Err(src.refuse(
                at,
                format!(
                    "marker {} of {the_job} lacks stale_after_sec: how old the marker may get \
                     with no live holder before it is stale, in seconds, like \
                     stale_after_sec: 1800",
                    quote(&raw_path.value)
                ),
            ));
        };
        let stale_after_sec = positive(src, stale, "markers.stale_after_sec")?;
        if let Some(line) = first_line.get(&path) {
            return Err(src.refuse(
                Pos::of(raw_path),
                format!(
                    "marker {} is repeated in {the_job} (first at line {line}): list each \
                     marker once",
                    quote(&raw_path.value)
                ),
            ));
        }
        first_line.insert(path.clone(), Pos::of(raw_path).line);
        markers.push(MarkerSpec {
            path,
            stale_after_sec,
        });
    }
    Ok(markers)
}

fn timeouts(raw: Option<RawTimeouts>, src: &Source<'_>) -> Result<Timeouts, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Timeouts::default());
    };
    let seconds = |value: &Option<Spanned<u64>>, key: &str| {
        value.as_ref().map(|v| positive(src, v, key)).transpose()
    };
    Ok(Timeouts {
        queue_sec: seconds(&raw.queue_sec, "timeouts.queue_sec")?,
        attempt_sec: seconds(&raw.attempt_sec, "timeouts.attempt_sec")?,
        total_sec: seconds(&raw.total_sec, "timeouts.total_sec")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_pattern() {
        for ok in ["a", "0", "collect_raw", "gpu-0", &"a".repeat(64)] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in ["", "_a", "-a", "A", "a b", "é", &"a".repeat(65)] {
            assert!(!is_valid_id(bad), "{bad}");
        }
        assert_eq!(suggest_id("Collect Raw").as_deref(), Some("collect_raw"));
    }

    #[test]
    fn digest_at_is_strict_hh_mm() {
        assert_eq!(parse_hh_mm("09:00"), NaiveTime::from_hms_opt(9, 0, 0));
        assert_eq!(parse_hh_mm("23:59"), NaiveTime::from_hms_opt(23, 59, 0));
        for bad in [
            "9:00", "24:00", "12:60", "09:00:00", "0900", "ab:cd", "", "０9:00",
        ] {
            assert_eq!(parse_hh_mm(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_are_normalized_lexically() {
        assert_eq!(normalize(Path::new("/a/./b//c")), PathBuf::from("/a/b/c"));
        assert_eq!(normalize(Path::new("/a/../b")), PathBuf::from("/a/../b"));
    }
}

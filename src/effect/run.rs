//! `mihari run JOB`: a job's command under its lock, watched until it exits.
//!
//! This file owns the whole life of one supervised run: taking the job's lock with
//! `flock(LOCK_EX | LOCK_NB)` (so two runs of one job can never overlap), writing the JSON
//! lock that the probes judge (`pid` and `start_time` of this process, field 22 of
//! `/proc/self/stat`, and this boot's `boot_id`), starting the command in its own process
//! group with its stdout and stderr one pipe that [`super::output`] copies into the job's log
//! (following the log's path through a rotation), forwarding SIGTERM and SIGINT to the job's
//! whole tree while SIGHUP opens the log again instead, recording `started`, `exited`,
//! `failed`, `duplicate` or `output-lost` in the event log, and removing the lock when the job
//! is over — only while the lock still names this process. "Over" means the last process of
//! the job's tree has exited, not only the command it started: `mihari run` is a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so a daemon a launcher left behind, or a worker whose
//! shell was killed, becomes its child, is waited for, and keeps the lock held — no twin can
//! start beside it. A job declared by `process` alone runs under a lock mihari keeps in
//! `state_dir` (`<id>.run.lock`). The log and the lock are opened only through
//! [`crate::probe::safe_open`], the log first: a link, a named pipe or a folder someone else
//! can change at either path refuses the run (exit 73) before the job starts, the lock is
//! written or anything is recorded. The job matters more than the record: when the state
//! store cannot be opened or written, the job still runs and a warning goes to stderr. No
//! store transaction is ever held while the job runs, and no event ever carries a path, a
//! command line or a line of the job's output. It judges nothing about other jobs.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, Flock, FlockArg, fcntl};
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use super::output::{self, Copier, Note};
use crate::config::{Config, JobSpec};
use crate::core::text::inert;
use crate::probe::lock::parse_lock;
use crate::probe::safe_open::{self, Entry, OpenError, Purpose, Role, Write as WriteMode};
use crate::store::{Kind, NewEvent, Store};

/// The job, its route or its run id cannot be run as asked: fix the jobs file or the
/// arguments. The same code as a refused jobs file, so "3" always means "mihari's setup".
pub const EXIT_CONFIG: u8 = 3;
/// The signal handlers or the small runtime could not be set up (`EX_OSERR`).
pub const EXIT_OS_ERROR: u8 = 71;
/// The lock or the log cannot be opened or written (`EX_CANTCREAT`).
pub const EXIT_CANNOT_CREATE: u8 = 73;
/// Another process holds the job's lock (`EX_TEMPFAIL`: try again later).
pub const EXIT_ALREADY_RUNNING: u8 = 75;
/// The command exists but cannot be executed, or its working folder is unusable (as a shell).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as a shell).
pub const EXIT_NOT_FOUND: u8 = 127;

/// A winner of the lock is between `flock` and writing its JSON for a few microseconds; a
/// loser that reads the file in that moment sees it empty. It waits this long, at most, for
/// the PID to appear before saying "pid unknown".
const HOLDER_WAIT: Duration = Duration::from_millis(200);
/// A lock file is a PID and a little JSON; more than this is not one we wrote.
const LOCK_READ_LIMIT: u64 = 64 * 1024;

/// Everything one run needs, resolved from the jobs file before anything is touched.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub job: String,
    /// argv, never a shell string.
    pub argv: Vec<String>,
    /// `restart.cwd`, else the jobs file's folder.
    pub cwd: PathBuf,
    /// `restart.env`, added to mihari's own environment.
    pub env: BTreeMap<String, String>,
    pub lock: PathBuf,
    /// How the lock is opened: a job's own `lock`, or the one mihari keeps in state_dir.
    pub lock_role: Role,
    /// Where stdout and stderr are appended; `None` inherits mihari's own.
    pub log: Option<PathBuf>,
    pub route: Option<String>,
    pub run_id: String,
    /// The workspace as it appears in the event log: a short hash, never the path.
    pub workspace_hash: Option<String>,
    /// The jobs file, absolute, handed to the job as `MIHARI_CONFIG` so that its own
    /// `mihari heartbeat` and `mihari approval request` find the same jobs and state store.
    pub config_file: PathBuf,
}

/// Resolves what `mihari run JOB [--route NAME] [--run-id ID]` will do, or says what is
/// missing from the jobs file. `now` names the run when no run id is given.
pub fn plan(
    config: &Config,
    job_id: &str,
    route: Option<&str>,
    run_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Plan, String> {
    let job = find_job(config, job_id)?;
    let lock_role = if job.lock.is_some() {
        Role::Lock
    } else {
        Role::KeptLock
    };
    let Some(lock) = job.run_lock().map(Path::to_path_buf) else {
        return Err(format!(
            "job '{}' declares no 'lock': add `lock: /path/to/{}.lock` (or `process: \
             {{cmdline: '...'}}`, and mihari keeps a lock for it) to it in '{}' so two runs can \
             never overlap",
            job.id,
            job.id,
            config.source.display()
        ));
    };
    let restart = job.restart.as_ref();
    let argv = match route {
        Some(name) => {
            let routes = restart.map(|r| r.routes.as_slice()).unwrap_or_default();
            match routes.iter().find(|r| r.name == name) {
                Some(found) => found.command.clone(),
                None if routes.is_empty() => {
                    return Err(format!(
                        "job '{}' has no route '{}': it declares no 'restart.routes'",
                        job.id,
                        inert(name)
                    ));
                }
                None => {
                    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
                    return Err(format!(
                        "job '{}' has no route '{}': its routes are '{}'",
                        job.id,
                        inert(name),
                        names.join("', '")
                    ));
                }
            }
        }
        None => match restart.and_then(|r| r.command.clone()) {
            Some(command) => command,
            None => {
                return Err(format!(
                    "job '{}' declares no 'restart.command': add the argv to run, e.g. \
                     `restart: {{command: [\"python3\", \"job.py\"]}}`, in '{}'",
                    job.id,
                    config.source.display()
                ));
            }
        },
    };
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err(format!("job '{}' has an empty command", job.id));
    }
    let config_file = std::path::absolute(&config.source).unwrap_or(config.source.clone());
    let folder = config_file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let cwd = restart.and_then(|r| r.cwd.clone()).unwrap_or(folder);
    let run_id = match run_id {
        Some(given) => checked_run_id(given)?,
        None => format!(
            "{}-{}-{}",
            job.id,
            now.format("%Y%m%dT%H%M%S"),
            std::process::id()
        ),
    };
    Ok(Plan {
        job: job.id.clone(),
        argv,
        cwd,
        env: restart.map(|r| r.env.clone()).unwrap_or_default(),
        lock,
        lock_role,
        log: job.log.clone(),
        route: route.map(str::to_string),
        run_id,
        workspace_hash: job.workspace_key().map(crate::store::workspace_hash),
        config_file,
    })
}

/// The job `id` in `config`, or an error listing the ones there are.
pub fn find_job<'a>(config: &'a Config, id: &str) -> Result<&'a JobSpec, String> {
    config.jobs.iter().find(|j| j.id == id).ok_or_else(|| {
        let ids: Vec<&str> = config.jobs.iter().map(|j| j.id.as_str()).collect();
        let known = if ids.is_empty() {
            "it has no jobs".to_string()
        } else {
            format!("its jobs are '{}'", ids.join("', '"))
        };
        format!(
            "no job '{}' in '{}': {known}",
            inert(id),
            config.source.display()
        )
    })
}

/// A run id goes into the lock and the event log as is, so it must be short and plain.
fn checked_run_id(given: &str) -> Result<String, String> {
    let plain = !given.is_empty()
        && given.len() <= 128
        && given
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-+@".contains(c));
    if plain {
        Ok(given.to_string())
    } else {
        Err(format!(
            "run id '{}' is not accepted: use 1 to 128 letters, digits and . _ : - + @",
            inert(given)
        ))
    }
}

/// The JSON written into the lock: who holds it (this process, by PID and start time, in
/// this boot), what it runs, and for which run.
pub fn lock_json(
    pid: u32,
    start_time: Option<u64>,
    boot_id: Option<&str>,
    argv: &[String],
    run_id: &str,
) -> String {
    let cmdline: Vec<String> = argv.iter().map(|word| inert(word)).collect();
    let mut fields = serde_json::Map::new();
    fields.insert("pid".into(), pid.into());
    if let Some(ticks) = start_time {
        fields.insert("start_time".into(), ticks.into());
    }
    if let Some(boot_id) = boot_id {
        fields.insert("boot_id".into(), boot_id.into());
    }
    fields.insert("cmdline".into(), cmdline.join(" ").into());
    fields.insert("run_id".into(), run_id.into());
    format!("{}\n", serde_json::Value::Object(fields))
}

/// How the job ended, in the event log's words, and the code `mihari run` exits with: the
/// job's own, or 128 + the signal that killed it, as a shell reports it.
pub fn describe_exit(status: ExitStatus) -> (String, u8) {
    if let Some(code) = status.code() {
        return (format!("exit {code}"), (code & 0xff) as u8);
    }
    match status.signal() {
        Some(number) => {
            let name = Signal::try_from(number).map_or_else(
                |_| format!("signal {number}"),
                |signal| signal.as_str().to_string(),
            );
            let core = if status.core_dumped() {
                " (core dumped)"
            } else {
                ""
            };
            (
                format!("killed by {name}{core}"),
                128u8.wrapping_add((number & 0x7f) as u8),
            )
        }
        None => ("ended in an unknown way".to_string(), 1),
    }
}

/// The event log, when there is one. A store that cannot be written costs a warning, never
/// the job.
struct Record<'a, W: Write> {
    store: Option<Store>,
    err: &'a mut W,
}

impl<W: Write> Record<'_, W> {
    fn append(&mut self, event: NewEvent) {
        if let Some(store) = self.store.as_mut()
            && let Err(error) = store.append(event)
        {
            let _ = writeln!(
                self.err,
                "mihari: warning: the event was not recorded ({error}); the job is unaffected"
            );
        }
    }
}

/// Runs `plan` to the end and returns the exit code of `mihari run` (see the `EXIT_*`
/// constants; otherwise the job's own code, or 128 + signal). `store` is `None` when the
/// state store could not be opened: the job runs all the same, unrecorded.
pub fn execute(plan: &Plan, store: Option<Store>, err: &mut impl Write) -> u8 {
    let mut record = Record { store, err };
    let event = |kind| {
        NewEvent::new(kind)
            .job(&plan.job)
            .run(Some(&plan.run_id))
            .route(plan.route.as_deref())
            .workspace_hash(plan.workspace_hash.clone())
    };

    // The runtime and the signal handlers come first: once the lock is ours, a SIGTERM must
    // be forwarded to the job, never kill this process and orphan the lock.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = writeln!(
                record.err,
                "mihari: cannot start the supervisor's runtime: {error}"
            );
            return EXIT_OS_ERROR;
        }
    };
    let _context = runtime.enter();
    let signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(error) => {
            let _ = writeln!(
                record.err,
                "mihari: cannot install the signal handlers that forward SIGTERM, SIGINT and \
                 SIGHUP to the job: {error}"
            );
            return EXIT_OS_ERROR;
        }
    };

    // The log first: a log that cannot be used safely (a link, a named pipe, a folder others
    // can write) refuses the run before the lock is touched or anything is recorded.
    let log = match &plan.log {
        Some(log) => match open_log(log) {
            Ok(file) => Some(file),
            Err(why) => {
                let _ = writeln!(record.err, "mihari: cannot run job '{}': {why}", plan.job);
                return EXIT_CANNOT_CREATE;
            }
        },
        None => None,
    };
    if plan.lock_role == Role::KeptLock
        && let Err(error) = make_state_dir(&plan.lock)
    {
        let _ = writeln!(record.err, "mihari: cannot run job '{}': {error}", plan.job);
        return EXIT_CANNOT_CREATE;
    }
    // A subreaper before anything is spawned: whatever the job leaves behind when its own
    // process exits becomes ours to wait for, not init's.
    if let Err(errno) = nix::sys::prctl::set_child_subreaper(true) {
        let _ = writeln!(
            record.err,
            "mihari: cannot become the job's subreaper (prctl PR_SET_CHILD_SUBREAPER: {errno}): \
             the lock would go while the job's processes still run"
        );
        return EXIT_OS_ERROR;
    }
    let lock = match acquire(&plan.lock, plan.lock_role) {
        Acquired::Held(lock) => lock,
        Acquired::Busy(holder) => {
            let _ = writeln!(
                record.err,
                "mihari: {} already running ({}){}",
                plan.job,
                holder.pid_words(),
                holder.note
            );
            record.append(
                event(Kind::Duplicate).reason(format!("already running ({})", holder.pid_words())),
            );
            return EXIT_ALREADY_RUNNING;
        }
        Acquired::Error(error) => {
            let _ = writeln!(record.err, "mihari: {error}");
            return EXIT_CANNOT_CREATE;
        }
    };
    let pid = std::process::id();
    let content = lock_json(
        pid,
        crate::probe::proc::self_start_ticks(),
        crate::probe::lock::this_boot_id().as_deref(),
        &plan.argv,
        &plan.run_id,
    );
    if let Err(error) = lock.write(&content) {
        let _ = writeln!(
            record.err,
            "mihari: cannot write the lock '{}': {error}",
            plan.lock.display()
        );
        lock.release(pid, record.err);
        return EXIT_CANNOT_CREATE;
    }

    // Written before the effect starts (SPEC §5): the record says a start was attempted even
    // when the spawn fails a moment later.
    record.append(event(Kind::Started).reason(format!("pid {pid}")));

    // The copier starts before the job, so a thread that cannot be started costs only the
    // following of the log: the job is then handed the log itself, as a file.
    let (notes_sender, mut notes) = tokio::sync::mpsc::unbounded_channel();
    let (output, copier) = match (log, &plan.log) {
        (Some(file), Some(path)) => match start_copier(path, file, notes_sender) {
            Ok((write_end, copier)) => (JobOutput::Pipe(write_end), Some(copier)),
            Err((file, error)) => {
                let _ = writeln!(
                    record.err,
                    "mihari: warning: cannot start copying the output of job '{}' into its \
                     log ({error}): the job writes into the log directly this time, so a \
                     rotation without copytruncate leaves it writing into the rotated file",
                    plan.job
                );
                (JobOutput::File(file), None)
            }
        },
        _ => (JobOutput::Inherit, None),
    };
    let prepared = prepare(plan, &lock, output);
    // The command holds the pipe's write end until it is dropped: once the job has it, only
    // the job's tree may, or the copier would never see the end of its output.
    let spawned = prepared.map(|mut command| command.spawn());
    let spawned = match spawned {
        Ok(spawned) => spawned,
        Err((reason, code, message)) => {
            let _ = writeln!(record.err, "mihari: {message}");
            record.append(event(Kind::Failed).reason(reason));
            if let Some(copier) = copier {
                copier.finish();
            }
            lock.release(pid, record.err);
            return code;
        }
    };
    let child = match spawned {
        Ok(child) => child,
        Err(error) => {
            let (reason, code) = spawn_failure(&error);
            let _ = writeln!(
                record.err,
                "mihari: cannot start job '{}' ('{}' in '{}'): {error}",
                plan.job,
                inert(&plan.argv[0]),
                plan.cwd.display()
            );
            record.append(event(Kind::Failed).reason(reason));
            if let Some(copier) = copier {
                copier.finish();
            }
            lock.release(pid, record.err);
            return code;
        }
    };
    let job_pid = child.id();
    // The child is waited for below, with every process its tree leaves behind; the handle
    // only held its PID.
    drop(child);
    let ended = runtime.block_on(supervise(
        job_pid,
        signals,
        &plan.job,
        &mut record,
        copier.as_ref(),
        &mut notes,
        &event,
    ));
    // The tree is over: what it wrote last reaches the log before the exit is recorded and
    // the lock goes, so whoever sees the lock gone reads the job's last words.
    if let Some(copier) = copier {
        let stderr_is_log = copier.stderr_is_log();
        copier.finish();
        while let Ok(note) = notes.try_recv() {
            heard(note, &plan.job, stderr_is_log, &mut record, &event);
        }
    }
    match ended {
        Ok(Ended { status, last_left }) => {
            let (mut reason, code) = describe_exit(status);
            if let Some(after) = last_left {
                reason.push_str(&format!(
                    "; the last process of its tree left {:.1} s after it",
                    after.as_secs_f64()
                ));
            }
            record.append(event(Kind::Exited).reason(reason));
            lock.release(pid, record.err);
            code
        }
        Err(error) => {
            let _ = writeln!(
                record.err,
                "mihari: lost track of job '{}' (cannot wait for it: {error}); the lock is \
                 left in place",
                plan.job
            );
            record.append(event(Kind::Failed).reason("cannot wait for the job"));
            EXIT_OS_ERROR
        }
    }
}

/// Where the job's stdout and stderr go.
enum JobOutput {
    /// No log: mihari's own.
    Inherit,
    /// The write end of the pipe the copier reads into the log.
    Pipe(OwnedFd),
    /// The log itself (the copier could not be started).
    File(File),
}

/// Makes the job's output pipe and starts copying it into `file`, the log opened at `path`:
/// the pipe's write end for the job, and the copier. On failure the log is handed back.
fn start_copier(
    path: &Path,
    file: File,
    notes: tokio::sync::mpsc::UnboundedSender<Note>,
) -> Result<(OwnedFd, Copier), (File, io::Error)> {
    let spare = match file.try_clone() {
        Ok(spare) => spare,
        Err(error) => return Err((file, error)),
    };
    let (read_end, write_end) = match output::pipe() {
        Ok(ends) => ends,
        Err(error) => return Err((spare, error)),
    };
    match Copier::start(read_end, path, file, notes) {
        Ok(copier) => Ok((write_end, copier)),
        Err(error) => Err((spare, error)),
    }
}

/// Says and records what the copier told: output dropped because the log could not be
/// written (recorded once the loss is over, or at the end), or a log path that could not be
/// opened again. A note already in the log is not said twice when stderr is the log.
fn heard<W: Write>(
    note: Note,
    job: &str,
    stderr_is_log: bool,
    record: &mut Record<'_, W>,
    event: &dyn Fn(Kind) -> NewEvent,
) {
    match note {
        Note::Losing { error } => {
            let _ = writeln!(
                record.err,
                "mihari: cannot write the log of job '{job}' ({error}): its output is dropped \
                 and counted until the log can be written again; the job is not held up"
            );
        }
        Note::Lost {
            bytes,
            error,
            noted,
        } => {
            if !(noted && stderr_is_log) {
                let _ = writeln!(
                    record.err,
                    "mihari: {bytes} bytes of the output of job '{job}' were lost: its log could \
                     not be written ({error}){}",
                    if noted {
                        "; a line in the log says where"
                    } else {
                        ""
                    }
                );
            }
            record.append(event(Kind::OutputLost).reason(format!(
                "{bytes} bytes of its output lost: the log could not be written ({error})"
            )));
        }
        Note::CannotReopen { why } => {
            let _ = writeln!(
                record.err,
                "mihari: cannot open the log of job '{job}' again: {why}; its output still goes \
                 to the file it went to"
            );
        }
    }
}

/// The command, ready to spawn: its own process group, its folder and environment, stdin
/// closed, output as `output` says (the log opened before the lock). Errors carry the event
/// reason (no paths), the exit code and the message for the operator (with paths).
fn prepare(
    plan: &Plan,
    lock: &HeldLock,
    output: JobOutput,
) -> Result<std::process::Command, (String, u8, String)> {
    match fs::metadata(&plan.cwd) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err((
                "the working folder is not a folder".into(),
                EXIT_CANNOT_EXECUTE,
                format!(
                    "the working folder '{}' of job '{}' is not a folder: fix restart.cwd",
                    plan.cwd.display(),
                    plan.job
                ),
            ));
        }
        Err(error) => {
            return Err((
                format!("cannot use the working folder: {}", error.kind()),
                EXIT_CANNOT_EXECUTE,
                format!(
                    "cannot use the working folder '{}' of job '{}': {error}; create it or fix \
                     restart.cwd",
                    plan.cwd.display(),
                    plan.job
                ),
            ));
        }
    }
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(&plan.argv[0]);
    command
        .args(&plan.argv[1..])
        .current_dir(&plan.cwd)
        .env("MIHARI_JOB", &plan.job)
        .env("MIHARI_RUN_ID", &plan.run_id)
        .env("MIHARI_CONFIG", &plan.config_file)
        .envs(&plan.env)
        .stdin(Stdio::null())
        // Its own group: a Ctrl-C in mihari's terminal reaches mihari, which forwards it to
        // the whole job (its children too) once, instead of the terminal racing us.
        .process_group(0);
    // stdout and stderr are one descriptor shared, as they were when both were the log: what
    // the job writes to either arrives in the order it wrote it.
    let shared = match output {
        JobOutput::Inherit => None,
        JobOutput::Pipe(write_end) => Some(write_end),
        JobOutput::File(file) => Some(OwnedFd::from(file)),
    };
    if let Some(out) = shared {
        match out.try_clone() {
            Ok(errors) => {
                command.stdout(out).stderr(errors);
            }
            Err(error) => {
                return Err((
                    format!("cannot share the output: {}", error.kind()),
                    EXIT_CANNOT_CREATE,
                    format!("cannot share the output of job '{}': {error}", plan.job),
                ));
            }
        }
    }
    // The job inherits the locked descriptor, as under flock(1): if this supervisor is ever
    // killed outright, the job itself still holds the lock, and a second `mihari run` is
    // refused instead of starting a twin beside it.
    if let Err(errno) = fcntl(lock.file(), FcntlArg::F_SETFD(FdFlag::empty())) {
        return Err((
            "cannot pass the lock to the job".into(),
            EXIT_OS_ERROR,
            format!("cannot pass the lock to job '{}': {errno}", plan.job),
        ));
    }
    Ok(command)
}

/// The event reason and exit code for a command that could not be started, as a shell
/// would report it: 127 not found, 126 anything else that prevents executing it.
fn spawn_failure(error: &io::Error) -> (String, u8) {
    match error.kind() {
        io::ErrorKind::NotFound => ("cannot start: command not found".into(), EXIT_NOT_FOUND),
        io::ErrorKind::PermissionDenied => (
            "cannot start: permission denied".into(),
            EXIT_CANNOT_EXECUTE,
        ),
        kind => (format!("cannot start: {kind}"), EXIT_CANNOT_EXECUTE),
    }
}

/// The signals `mihari run` forwards to the job's tree (SIGHUP only when there is no log to
/// open again), and SIGCHLD, which says a process of the tree has exited and is to be reaped.
struct Forwarded {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    child: tokio::signal::unix::Signal,
    /// SIGXFSZ, caught and never read: a log past the file size limit (`ulimit -f`) makes
    /// the copier's write fail (EFBIG, counted as lost) instead of ending `mihari run` and
    /// leaving the job a pipe nobody reads. A caught signal is back to its default in the job.
    _file_too_large: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// Must run inside the runtime's context. From here on these signals no longer end this
    /// process; they are queued for [`supervise`].
    fn install() -> io::Result<Self> {
        Ok(Forwarded {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
            child: signal(SignalKind::child())?,
            _file_too_large: signal(SignalKind::from_raw(libc::SIGXFSZ))?,
        })
    }
}

/// How a job's tree ended: its own command's status, and how long the last process it left
/// behind outlived it (`None` when nothing did).
struct Ended {
    status: ExitStatus,
    last_left: Option<Duration>,
}

/// Waits for the job's whole tree: the command `job` started and every process that becomes
/// this subreaper's child when its parent dies, reaping each until none is left (ECHILD).
/// Every SIGTERM and SIGINT goes to the job's process group and to every descendant that
/// left it (`setsid`), found in `/proc` by parent PID. SIGHUP opens the log again when the
/// `copier` copies the job's output into it (logrotate's `postrotate` convention), and is
/// forwarded like the others only when there is none. What the copier tells is said and
/// recorded as it comes. Nothing polls: the task sleeps until a signal arrives, a child exits
/// or the copier has news.
async fn supervise<W: Write>(
    job: u32,
    mut signals: Forwarded,
    job_id: &str,
    record: &mut Record<'_, W>,
    copier: Option<&Copier>,
    notes: &mut tokio::sync::mpsc::UnboundedReceiver<Note>,
    event: &dyn Fn(Kind) -> NewEvent,
) -> io::Result<Ended> {
    let stderr_is_log = copier.is_some_and(Copier::stderr_is_log);
    // The job's own status, when it was reaped, and whether processes of its tree outlived it.
    let mut own: Option<(ExitStatus, std::time::Instant, bool)> = None;
    loop {
        // Reap whatever has exited; SIGCHLD is coalesced, so drain until nothing is waiting.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(status) => {
                    if status.pid().map(Pid::as_raw) == i32::try_from(job).ok()
                        && let Some(exit) = exit_status(status)
                    {
                        let left = crate::probe::procscan::descendants_of(std::process::id());
                        own = Some((exit, std::time::Instant::now(), !left.is_empty()));
                        if !left.is_empty() {
                            let pids: Vec<String> = left
                                .iter()
                                .take(5)
                                .map(|(pid, _)| pid.to_string())
                                .collect();
                            let _ = writeln!(
                                record.err,
                                "mihari: job '{job_id}' exited ({}), but {} process{} it \
                                 started still run{} (pid {}): the lock stays held until the \
                                 last has exited",
                                describe_exit(exit).0,
                                left.len(),
                                if left.len() == 1 { "" } else { "es" },
                                if left.len() == 1 { "s" } else { "" },
                                pids.join(", ")
                            );
                        }
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => {
                    return match own {
                        Some((status, at, outlived)) => Ok(Ended {
                            status,
                            last_left: outlived.then(|| at.elapsed()),
                        }),
                        None => Err(io::Error::other("the job's process vanished unreaped")),
                    };
                }
                Err(errno) => return Err(io::Error::from(errno)),
            }
        }
        let forward = tokio::select! {
            Some(()) = signals.child.recv() => continue,
            Some(()) = signals.terminate.recv() => Signal::SIGTERM,
            Some(()) = signals.interrupt.recv() => Signal::SIGINT,
            Some(()) = signals.hangup.recv() => match copier {
                Some(copier) => {
                    copier.reopen();
                    continue;
                }
                None => Signal::SIGHUP,
            },
            Some(note) = notes.recv() => {
                heard(note, job_id, stderr_is_log, record, event);
                continue;
            }
        };
        // The group id is the job's PID (process_group(0)); it cannot name a stranger while
        // the job is unreaped. Once it is reaped, each process is signalled on its own.
        let group = own.is_none().then(|| i32::try_from(job).ok()).flatten();
        signal_tree(forward, group);
    }
}

/// Sends `signal` to the job's group (while its leader is unreaped) and to every descendant of
/// this process outside that group: the daemon a launcher started in its own session too.
fn signal_tree(signal: Signal, group: Option<i32>) {
    if let Some(group) = group {
        // ESRCH: the group has just emptied; the wait says how it ended.
        let _ = killpg(Pid::from_raw(group), signal);
    }
    for (pid, pgrp) in crate::probe::procscan::descendants_of(std::process::id()) {
        if group.is_some_and(|g| i32::try_from(pgrp).ok() == Some(g)) {
            continue;
        }
        if let Ok(pid) = i32::try_from(pid)
            && pid > 0
        {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

/// A reaped child's status as the standard library spells it (for [`describe_exit`]).
fn exit_status(status: WaitStatus) -> Option<ExitStatus> {
    match status {
        WaitStatus::Exited(_, code) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
        WaitStatus::Signaled(_, signal, core) => Some(ExitStatus::from_raw(
            signal as i32 | if core { 0x80 } else { 0 },
        )),
        _ => None,
    }
}

/// Makes the folder of the lock mihari keeps (state_dir), private, when it is missing.
fn make_state_dir(lock: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(folder) = lock.parent() else {
        return Ok(());
    };
    if folder.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)
        .map_err(|error| {
            format!(
                "cannot create the state folder '{}' for its run lock: {error}; set \
                 settings.state_dir to a folder mihari can write",
                folder.display()
            )
        })
}

/// The outcome of trying to take a job's lock.
enum Acquired {
    Held(HeldLock),
    Busy(Holder),
    Error(String),
}

/// Who holds a lock we could not take, as far as its content tells.
struct Holder {
    pid: Option<u32>,
    /// Said after the PID when the holder's own process is gone but something it started
    /// still holds the lock.
    note: String,
}

impl Holder {
    fn pid_words(&self) -> String {
        match self.pid {
            Some(pid) => format!("pid {pid}"),
            None => "pid unknown".to_string(),
        }
    }
}

/// Opens the job's log to append its output, through the one safe open: never through a
/// link, never a named pipe or a device, never in a folder someone else can change, and in
/// a shared sticky folder only the operator's own file with one name. Created 0644 when
/// missing.
pub fn open_log(log: &Path) -> Result<File, String> {
    safe_open::locate(log, Role::Log, Purpose::Write)
        .and_then(|entry| entry.open_write(WriteMode::Append { mode: 0o644 }))
        .map(|opened| opened.file)
        .map_err(|error| match error {
            OpenError::Refused(why) => why,
            OpenError::Missing => format!("cannot open the log '{}'", log.display()),
        })
}

/// The job's lock file, opened and `flock`ed by this process, with its name in the folder
/// that was judged safe.
struct HeldLock {
    flock: Flock<File>,
    entry: Entry,
}

/// Opens (creating, 0644, never truncating: the content belongs to whoever holds it) and
/// `flock`s the lock at `path`, through the one safe open (no link, no pipe, no folder someone
/// else can change, no file of someone else's in a shared folder).
///
/// A lock file is removed when its run ends, so between our `open` and our `flock` the
/// previous holder may have unlinked it: the lock we got is then on a file nobody else will
/// ever open. The name is checked to still name the very file we locked; if not, we retry
/// with the new one. A lock held by someone else on a file whose name is gone (a release
/// removing it) is retried the same way.
fn acquire(path: &Path, role: Role) -> Acquired {
    let entry = match safe_open::locate(path, role, Purpose::Write) {
        Ok(entry) => entry,
        Err(OpenError::Refused(why)) => return Acquired::Error(why),
        Err(OpenError::Missing) => {
            return Acquired::Error(format!("cannot open the lock '{}'", path.display()));
        }
    };
    for _ in 0..16 {
        let file = match entry.open_write(WriteMode::Update { mode: 0o644 }) {
            Ok(opened) => opened.file,
            Err(OpenError::Refused(why)) => return Acquired::Error(why),
            Err(OpenError::Missing) => {
                return Acquired::Error(format!("cannot open the lock '{}'", path.display()));
            }
        };
        let flock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(flock) => flock,
            // `mihari release` holds a lock it is removing: once its name is gone, the next
            // try makes a lock of our own.
            Err((file, Errno::EWOULDBLOCK)) if !entry.names(&file) => continue,
            Err((_, Errno::EWOULDBLOCK)) => return Acquired::Busy(read_holder(&entry)),
            Err((_, errno)) => {
                return Acquired::Error(format!("cannot lock '{}': {errno}", path.display()));
            }
        };
        if entry.names(&flock) {
            return Acquired::Held(HeldLock { flock, entry });
        }
    }
    Acquired::Error(format!(
        "the lock '{}' kept being replaced while taking it; try again",
        path.display()
    ))
}

/// Reads who holds the lock named by `entry`, waiting briefly for a winner that has not
/// written its PID yet.
fn read_holder(entry: &Entry) -> Holder {
    let deadline = std::time::Instant::now() + HOLDER_WAIT;
    loop {
        let text = entry
            .open_read()
            .ok()
            .and_then(|opened| read_limited(&opened.file).ok())
            .unwrap_or_default();
        if let Ok(content) = parse_lock(&text) {
            let gone = matches!(
                crate::probe::proc::lookup(content.pid),
                crate::probe::proc::ProcLookup::Gone | crate::probe::proc::ProcLookup::Zombie(_)
            );
            let note = if gone {
                format!(
                    "; pid {} is gone, but a process it started still holds the lock",
                    content.pid
                )
            } else {
                String::new()
            };
            return Holder {
                pid: Some(content.pid),
                note,
            };
        }
        if std::time::Instant::now() >= deadline {
            return Holder {
                pid: None,
                note: String::new(),
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// At most [`LOCK_READ_LIMIT`] bytes of an open lock, from its start.
fn read_limited(file: &File) -> io::Result<String> {
    let mut bytes = vec![0; LOCK_READ_LIMIT as usize];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    bytes.truncate(filled);
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl HeldLock {
    fn file(&self) -> &File {
        &self.flock
    }

    /// Replaces the lock's content: truncate, write, fsync, so a crash never leaves half a
    /// PID behind. Only ever on the file opened and verified in [`acquire`].
    fn write(&self, content: &str) -> io::Result<()> {
        let file = self.file();
        file.set_len(0)?;
        file.write_all_at(content.as_bytes(), 0)?;
        file.sync_all()
    }

    /// Removes the lock file if its name still names the file we hold and it still names
    /// `pid` (someone may have released and re-taken it), then releases the `flock`. The
    /// order matters: a file is only ever removed while we hold its lock, and only through
    /// the folder judged when it was taken.
    fn release(self, pid: u32, err: &mut impl Write) {
        let path = self.entry.path().display().to_string();
        let named = self.entry.names(self.file());
        let ours = named
            && read_limited(self.file())
                .ok()
                .and_then(|text| parse_lock(&text).ok())
                .is_some_and(|content| content.pid == pid);
        if ours {
            if let Err(error) = self.entry.remove_if_names(self.file())
                && error.kind() != io::ErrorKind::NotFound
            {
                let _ = writeln!(
                    err,
                    "mihari: warning: cannot remove the lock '{path}': {error}; remove it by \
                     hand (mihari release)"
                );
            }
        } else {
            let _ = writeln!(
                err,
                "mihari: warning: the lock '{path}' no longer names pid {pid}; left in place"
            );
        }
        drop(self.flock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn config(yaml: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.yaml");
        std::fs::write(&path, yaml).expect("write jobs");
        let config = crate::config::load(&path).expect("valid jobs file");
        (dir, config)
    }

    const JOBS: &str = "
jobs:
  - id: a
    lock: a.lock
    log: a.log
    workspace: /data/a
    should_run_when: [resource_free]
    restart:
      command: [sh, -c, 'echo a']
      env: { X: '1' }
      routes:
        - { name: local, command: [echo, local] }
  - id: no_lock
    log: b.log
    should_run_when: [resource_free]
    resource_lock: r.lock
    restart: { command: [echo] }
  - id: no_command
    lock: c.lock
    log: c.log
    should_run_when: [resource_free]
";

    #[test]
    fn plan_resolves_command_route_cwd_and_hash() {
        let (dir, config) = config(JOBS);
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let plan = plan(&config, "a", None, None, now).expect("plan");
        assert_eq!(plan.argv, ["sh", "-c", "echo a"]);
        assert_eq!(plan.cwd, dir.path());
        assert_eq!(plan.lock, dir.path().join("a.lock"));
        assert_eq!(plan.env.get("X").map(String::as_str), Some("1"));
        assert_eq!(
            plan.run_id,
            format!("a-20231114T221320-{}", std::process::id())
        );
        assert_eq!(
            plan.workspace_hash,
            Some(crate::store::workspace_hash(Path::new("/data/a")))
        );
        let routed = super::plan(&config, "a", Some("local"), Some("r-1"), now).expect("plan");
        assert_eq!(routed.argv, ["echo", "local"]);
        assert_eq!(routed.run_id, "r-1");
    }

    #[test]
    fn plan_refusals_say_what_is_missing() {
        let (_dir, config) = config(JOBS);
        let now = Utc::now();
        let rows = [
            ("nope", None, None, "no job 'nope'"),
            ("no_lock", None, None, "declares no 'lock'"),
            ("no_command", None, None, "declares no 'restart.command'"),
            ("a", Some("cloud"), None, "its routes are 'local'"),
            (
                "no_command",
                Some("x"),
                None,
                "declares no 'restart.routes'",
            ),
            ("a", None, Some("has space"), "run id 'has space'"),
            ("a", None, Some(""), "run id ''"),
        ];
        for (job, route, run_id, expected) in rows {
            let error = plan(&config, job, route, run_id, now).expect_err(job);
            assert!(error.contains(expected), "{job}: {error}");
        }
    }

    #[test]
    fn lock_json_is_what_parse_lock_reads() {
        let argv = vec!["python3".to_string(), "job\u{1b}[2J.py".to_string()];
        let text = lock_json(
            4242,
            Some(98765),
            Some("0b6c2b1e-7a2d-4c1e-9f3a-5d0e8c7b6a59"),
            &argv,
            "run-1",
        );
        let content = parse_lock(&text).expect("parses");
        assert_eq!(content.pid, 4242);
        assert_eq!(content.start_time, Some(98765));
        assert_eq!(content.cmdline.as_deref(), Some("python3 job.py"));
        assert_eq!(content.run_id.as_deref(), Some("run-1"));
        assert_eq!(
            content.boot_id.as_deref(),
            Some("0b6c2b1e-7a2d-4c1e-9f3a-5d0e8c7b6a59")
        );
        let without = lock_json(7, None, None, &argv, "r");
        assert_eq!(parse_lock(&without).expect("parses").start_time, None);
    }

    #[test]
    fn exits_are_described_like_a_shell() {
        let status = |script: &str| {
            Command::new("sh")
                .args(["-c", script])
                .status()
                .expect("sh runs")
        };
        assert_eq!(describe_exit(status("exit 0")), ("exit 0".into(), 0));
        assert_eq!(describe_exit(status("exit 3")), ("exit 3".into(), 3));
        assert_eq!(
            describe_exit(status("kill -TERM $$")),
            ("killed by SIGTERM".into(), 143)
        );
        assert_eq!(
            describe_exit(status("kill -KILL $$")),
            ("killed by SIGKILL".into(), 137)
        );
    }

    #[test]
    fn spawn_failures_map_to_shell_codes() {
        let not_found = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(spawn_failure(&not_found).1, 127);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_failure(&denied).1, 126);
    }
}

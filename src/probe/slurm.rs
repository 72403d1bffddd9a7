//! Slurm's word on the jobs it runs: one `squeue --json` per pass for every job declared with
//! `slurm:`, read into [`SlurmJob`]s and matched to each job by name (or id) and user.
//!
//! This module owns running `squeue` (bounded by a timeout: a hung controller must not hold a
//! pass), reading its JSON (pure functions, tested on real captured output), filling in
//! Slurm's file name patterns of a job's `StdOut` (%j, %x, %A_%a...), and choosing each job's
//! holder: the newest job of its name and user. With `--json`, Slurm ignores squeue's own
//! filters, so the whole list is read once and mihari filters it. A controller that cannot be
//! reached, a munge error, or JSON of a version this mihari does not read is a fault naming
//! it — never "not running". The client finds its cluster as Slurm's own tools do
//! (`SLURM_CONF` in mihari's environment, inherited by the command). It does not judge: what a
//! state means is `core::slurm`'s.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::config::{JobSpec, SlurmJobRef};
use crate::core::text::inert;
use crate::core::{Reading, SlurmJob};

/// How long `squeue --json` may take before it is killed and the pass goes on with a fault.
/// Slurm 22.05's client gives up on a controller that does not answer after about 9 s.
pub const SQUEUE_TIMEOUT: Duration = Duration::from_secs(12);

/// After a fault, how long the same fault is kept before `squeue` is asked again: while the
/// controller is down, a pass does not wait for it every time.
pub const RETRY_AFTER_FAULT: Duration = Duration::from_secs(30);

/// The versions of `squeue --json` this mihari reads (`meta.plugin.type`): Slurm 21.08 and
/// 22.05. Another one is a fault naming it, never a guess at what its fields mean.
pub const KNOWN_FORMATS: [&str; 2] = ["openapi/v0.0.37", "openapi/v0.0.38"];

/// Bytes of `squeue --json` read at most (a cluster of 100,000 jobs prints about 400 MB).
const MAX_OUTPUT: u64 = 1 << 30;

/// The pass's one reading of `squeue --json`, shared by every job that declares `slurm:`.
#[derive(Debug, Clone, Default)]
pub struct SlurmScan {
    /// `None`: no job declares `slurm:` (squeue was not run).
    listed: Option<Result<Arc<Vec<SlurmJob>>, String>>,
    /// The user mihari runs as: a job's `slurm.user` when it names none.
    me: Option<String>,
}

impl SlurmScan {
    /// A scan of these jobs (or of this fault), as if `squeue` had printed them; for tests.
    pub fn of(listed: Result<Vec<SlurmJob>, String>, me: Option<String>) -> SlurmScan {
        SlurmScan {
            listed: Some(listed.map(Arc::new)),
            me,
        }
    }

    /// Every job Slurm listed, or why it could not be read; `None` when squeue was not run.
    pub fn listed(&self) -> Option<Result<&[SlurmJob], &str>> {
        self.listed.as_ref().map(|listed| match listed {
            Ok(jobs) => Ok(jobs.as_slice()),
            Err(error) => Err(error.as_str()),
        })
    }

    /// `job`'s holder: the newest Slurm job of its name and user (or the one of its id);
    /// empty when Slurm lists none; the scan's fault when it could not be read. `None` for a
    /// job that declares no `slurm:`.
    pub fn reading(&self, job: &JobSpec) -> Option<Reading<SlurmJob>> {
        let spec = job.slurm.as_ref()?;
        let listed = match &self.listed {
            None => {
                return Some(Reading::Fault(
                    "squeue was not asked in this pass".to_string(),
                ));
            }
            Some(Err(error)) => return Some(Reading::Fault(error.clone())),
            Some(Ok(listed)) => listed,
        };
        let user = spec.user.as_deref().or(self.me.as_deref());
        Some(match newest(listed, &spec.job, user) {
            Some(found) => Reading::Found(found.clone()),
            None => Reading::Empty,
        })
    }
}

/// The newest job of `wanted` (by name or id) and `user` (any user when `None`): the one with
/// the highest id, for Slurm numbers new submissions upwards.
pub fn newest<'a>(
    listed: &'a [SlurmJob],
    wanted: &SlurmJobRef,
    user: Option<&str>,
) -> Option<&'a SlurmJob> {
    listed
        .iter()
        .filter(|job| match wanted {
            SlurmJobRef::Name(name) => job.name == *name,
            SlurmJobRef::Id(id) => job.id == *id,
        })
        .filter(|job| user.is_none_or(|user| job.user == user))
        .max_by_key(|job| job.id)
}

/// Runs `squeue --json` and remembers a fault for [`RETRY_AFTER_FAULT`].
#[derive(Debug, Default)]
pub struct SlurmReader {
    last_fault: Option<(Instant, String)>,
}

impl SlurmReader {
    /// Reads Slurm's list when one of `jobs` declares `slurm:` (nothing is run otherwise).
    pub fn scan(&mut self, jobs: &[JobSpec]) -> SlurmScan {
        if !jobs.iter().any(|job| job.slurm.is_some()) {
            return SlurmScan::default();
        }
        let me = current_user();
        if let Some((at, fault)) = &self.last_fault
            && at.elapsed() < RETRY_AFTER_FAULT
        {
            return SlurmScan {
                listed: Some(Err(fault.clone())),
                me,
            };
        }
        let listed = read_squeue(Path::new("squeue"), SQUEUE_TIMEOUT);
        self.last_fault = match &listed {
            Err(error) => Some((
                Instant::now(),
                format!(
                    "{error} (as of {}; asked again every {} s)",
                    Utc::now().format("%H:%M:%S UTC"),
                    RETRY_AFTER_FAULT.as_secs()
                ),
            )),
            Ok(_) => None,
        };
        SlurmScan {
            listed: Some(listed.map(Arc::new)),
            me,
        }
    }
}

/// The name of the user this process runs as (effective uid), as Slurm lists job owners.
fn current_user() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|user| user.name)
}

/// Runs `program --json` (squeue) and reads what it prints, at most `timeout`. Every way it
/// can fail is a fault in words: not installed, killed after the timeout, exited non-zero,
/// errors in its JSON (the controller cannot be reached, munge), a format not known.
pub fn read_squeue(program: &Path, timeout: Duration) -> Result<Vec<SlurmJob>, String> {
    let shown = program.display().to_string();
    let mut child = Command::new(program)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => format!(
                "'{shown}' is not found on PATH: install Slurm's client commands \
                 (slurm-client) on this machine, or run mihari where they are"
            ),
            _ => format!("cannot run '{shown} --json': {error}"),
        })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (sender, outputs) = std::sync::mpsc::channel();
    // Both pipes read to their end on threads of their own (a full pipe would block squeue);
    // the output is done when both are.
    let spawn_reader = |index: usize, pipe: Option<Box<dyn Read + Send>>| {
        let sender = sender.clone();
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut kept);
            }
            let _ = sender.send((index, kept));
        });
    };
    spawn_reader(0, stdout.map(|p| Box::new(p) as Box<dyn Read + Send>));
    spawn_reader(1, stderr.map(|p| Box::new(p) as Box<dyn Read + Send>));
    drop(sender);
    let deadline = Instant::now() + timeout;
    let mut output = [None, None];
    while output.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match outputs.recv_timeout(left) {
            Ok((index, bytes)) => output[index] = Some(bytes),
            Err(_) => break,
        }
    }
    if output.iter().any(Option::is_none) {
        // Its whole group: nothing it started outlives it. Not reaped yet, so the id is ours.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
        return Err(format!(
            "'{shown} --json' did not answer within {} s (killed): is slurmctld reachable \
             from here? ({})",
            timeout.as_secs(),
            cluster_words()
        ));
    }
    let status = child
        .wait()
        .map_err(|error| format!("cannot wait for '{shown} --json': {error}"))?;
    let [stdout, stderr] = output.map(Option::unwrap_or_default);
    let stderr = String::from_utf8_lossy(&stderr);
    if !status.success() {
        return Err(format!(
            "'{shown} --json' failed ({status}){} ({})",
            stderr_words(&stderr),
            cluster_words()
        ));
    }
    parse_squeue(&stdout).map_err(|error| format!("{error}{}", stderr_words(&stderr)))
}

/// Which cluster the client asks: `SLURM_CONF`, or Slurm's own default.
fn cluster_words() -> String {
    match std::env::var_os("SLURM_CONF") {
        Some(conf) => format!("SLURM_CONF is '{}'", inert(&conf.to_string_lossy())),
        None => "SLURM_CONF is not set: Slurm's default configuration".to_string(),
    }
}

/// What squeue said on stderr that explains a failure ("Munge encode failed: ..."): its
/// `error:` lines, the last few, inert; nothing when it said nothing.
fn stderr_words(stderr: &str) -> String {
    let errors: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.split_once("error: ").map(|(_, rest)| rest.trim()))
        .filter(|line| !line.is_empty())
        .collect();
    let chosen: Vec<&str> = if errors.is_empty() {
        stderr
            .lines()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    } else {
        errors.iter().rev().take(3).rev().copied().collect()
    };
    let text = chosen.join("; ");
    if text.trim().is_empty() {
        String::new()
    } else {
        format!("; squeue says: {}", inert(&cut(&text, 400)))
    }
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

/// Reads the JSON `squeue --json` printed. A fault (in words) when it is not JSON, is of a
/// version this mihari does not read, or carries errors — Slurm 22.05 prints an empty job
/// list with an error, and exits 0, when its controller cannot be reached.
pub fn parse_squeue(json: &[u8]) -> Result<Vec<SlurmJob>, String> {
    let value: Value = serde_json::from_slice(json).map_err(|error| {
        format!(
            "squeue --json printed what is not JSON ({error}): {}",
            inert(&cut(&String::from_utf8_lossy(json), 120))
        )
    })?;
    let format = value
        .pointer("/meta/plugin/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let release = value
        .pointer("/meta/Slurm/release")
        .or_else(|| value.pointer("/meta/slurm/release"))
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    if !KNOWN_FORMATS.contains(&format) {
        let format = value
            .pointer("/meta/plugin/data_parser")
            .and_then(Value::as_str)
            .filter(|_| format.is_empty())
            .unwrap_or(format);
        return Err(format!(
            "squeue --json speaks '{}' (Slurm {}), which this mihari does not read (it reads \
             {}, Slurm 21.08 and 22.05): its job states cannot be trusted to mean what they say",
            inert(format),
            inert(release),
            KNOWN_FORMATS.join(", ")
        ));
    }
    if let Some(errors) = value.get("errors").and_then(Value::as_array)
        && !errors.is_empty()
    {
        let said: Vec<String> = errors.iter().map(error_words).collect();
        return Err(format!(
            "squeue cannot list the jobs: {}; is slurmctld running and reachable, and munged \
             running? ({})",
            inert(&cut(&said.join("; "), 400)),
            cluster_words()
        ));
    }
    let jobs = value
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| "squeue --json printed no 'jobs' list".to_string())?;
    jobs.iter().map(job_of).collect()
}

/// One entry of squeue's `errors` list in words: "Failed while looking for jobs (slurm_load_jobs:
/// Unspecified error)".
fn error_words(error: &Value) -> String {
    let field = |name: &str| error.get(name).and_then(Value::as_str).unwrap_or("");
    let description = field("description");
    let detail = [field("source"), field("error")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(": ");
    match (description.is_empty(), detail.is_empty()) {
        (false, false) => format!("{description} ({detail})"),
        (false, true) => description.to_string(),
        (true, false) => detail,
        (true, true) => error.to_string(),
    }
}

/// One job of the list. A field of the wrong type is a fault: the format is not what this
/// mihari reads, whatever its version says.
fn job_of(job: &Value) -> Result<SlurmJob, String> {
    let wrong = |field: &str| {
        format!(
            "squeue --json lists a job whose '{field}' is not what Slurm 22.05 prints: the \
             format is not one this mihari reads"
        )
    };
    let text = |field: &str| -> Result<String, String> {
        job.get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| wrong(field))
    };
    let number = |field: &str| -> Result<Option<i64>, String> {
        match job.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_i64().map(Some).ok_or_else(|| wrong(field)),
        }
    };
    let time = |field: &str| -> Result<Option<DateTime<Utc>>, String> {
        Ok(number(field)?
            .filter(|secs| *secs > 0)
            .and_then(|secs| DateTime::from_timestamp(secs, 0)))
    };
    let id = number("job_id")?
        .and_then(|id| u64::try_from(id).ok())
        .ok_or_else(|| wrong("job_id"))?;
    let state = text("job_state")?;
    let phase = crate::core::slurm::phase_of(&state);
    let reason = text("state_reason")
        .ok()
        .filter(|r| !r.is_empty() && r != "None");
    let array_job = number("array_job_id")?.unwrap_or(0);
    let array = if array_job > 0 {
        match number("array_task_id")? {
            Some(task) => Some(format!("{array_job}_{task}")),
            None => {
                let tasks = text("array_task_string").unwrap_or_default();
                Some(format!("{array_job}_[{}]", inert(&tasks)))
            }
        }
    } else {
        None
    };
    let ended = matches!(phase, crate::core::slurm::SlurmPhase::Ended);
    let mut found = SlurmJob {
        id,
        name: inert(&text("name")?),
        user: inert(&text("user_name").unwrap_or_default()),
        state: inert(&state),
        reason: reason.map(|r| inert(&r)),
        exit_status: number("exit_code")?.and_then(|code| i32::try_from(code).ok()),
        submitted: time("submit_time")?,
        started: time("start_time")?.filter(|_| phase != crate::core::slurm::SlurmPhase::Queued),
        // A running job's end_time is its time limit, not an end.
        ended: time("end_time")?.filter(|_| ended),
        stdout: None,
        node: text("batch_host")
            .ok()
            .filter(|host| !host.is_empty())
            .map(|host| inert(&host)),
        restarts: number("restart_cnt")?
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        array,
    };
    let pattern = text("standard_output").unwrap_or_default();
    let cwd = text("current_working_directory").unwrap_or_default();
    let batch = job
        .get("batch_flag")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if batch {
        let array_task = number("array_task_id")?;
        found.stdout = output_path(
            &pattern,
            Path::new(&cwd),
            &Names {
                job: &found,
                array_job: (array_job > 0).then_some(array_job as u64),
                array_task: array_task.and_then(|t| u64::try_from(t).ok()),
            },
        );
    }
    Ok(found)
}

/// What Slurm's file name patterns are filled in from.
pub struct Names<'a> {
    pub job: &'a SlurmJob,
    pub array_job: Option<u64>,
    pub array_task: Option<u64>,
}

/// The file a batch job's output goes to: its `StdOut` pattern (or Slurm's default,
/// `slurm-%j.out`, `slurm-%A_%a.out` for an array task) with %j, %J, %x, %u, %A, %a, %N, %n,
/// %s, %t and %% filled in as sbatch fills them (a width, as in %5j, pads with zeros), made
/// absolute against the job's working folder. `None` when it cannot be told (a pattern
/// sbatch would fill from something not known here, like the task of a pending array).
pub fn output_path(pattern: &str, cwd: &Path, names: &Names<'_>) -> Option<PathBuf> {
    let pattern = match (pattern.is_empty(), names.array_job) {
        (true, Some(_)) => "slurm-%A_%a.out",
        (true, None) => "slurm-%j.out",
        (false, _) => pattern,
    };
    let mut filled = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            filled.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(digit) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*digit);
            chars.next();
        }
        let width: usize = width.parse().unwrap_or(0).min(10);
        let padded = |n: u64| format!("{n:0width$}");
        let Some(code) = chars.next() else {
            filled.push('%');
            break;
        };
        match code {
            '%' => filled.push('%'),
            'j' | 'J' => filled.push_str(&padded(names.job.id)),
            'A' => filled.push_str(&padded(names.array_job.unwrap_or(names.job.id))),
            'a' => filled.push_str(&padded(names.array_task?)),
            'x' => filled.push_str(&names.job.name),
            'u' => filled.push_str(&names.job.user),
            'N' => filled.push_str(names.job.node.as_deref()?),
            'n' | 't' => filled.push_str(&padded(0)),
            's' => filled.push_str("batch"),
            // A pattern sbatch does not know is kept as written, as sbatch keeps it.
            other => {
                filled.push('%');
                filled.push(other);
            }
        }
    }
    let path = PathBuf::from(filled);
    if path.is_absolute() {
        Some(path)
    } else if cwd.is_absolute() {
        Some(cwd.join(path))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_is_filled_in_as_sbatch_fills_it() {
        let job = SlurmJob {
            id: 13,
            name: "m-pat".into(),
            user: "root".into(),
            state: "COMPLETED".into(),
            reason: None,
            exit_status: Some(0),
            submitted: None,
            started: None,
            ended: None,
            stdout: None,
            node: Some("vm".into()),
            restarts: 0,
            array: None,
        };
        let names = Names {
            job: &job,
            array_job: None,
            array_task: None,
        };
        // Seen on Slurm 22.05: sbatch -o 'p-%J-%s-%N-%n-%t-%u-%x-%5j-%%.out' wrote this file.
        assert_eq!(
            output_path(
                "/o/p-%J-%s-%N-%n-%t-%u-%x-%5j-%%.out",
                Path::new("/w"),
                &names
            ),
            Some(PathBuf::from("/o/p-13-batch-vm-0-0-root-m-pat-00013-%.out"))
        );
        assert_eq!(
            output_path("", Path::new("/w"), &names),
            Some(PathBuf::from("/w/slurm-13.out"))
        );
        assert_eq!(
            output_path("logs/%x.out", Path::new("/w"), &names),
            Some(PathBuf::from("/w/logs/m-pat.out"))
        );
        // Array task 0 of array job 14 had job id 15: sbatch wrote a-14-0-15.out.
        let names = Names {
            job: &SlurmJob {
                id: 15,
                ..job.clone()
            },
            array_job: Some(14),
            array_task: Some(0),
        };
        assert_eq!(
            output_path("/o/a-%A-%a-%j.out", Path::new("/w"), &names),
            Some(PathBuf::from("/o/a-14-0-15.out"))
        );
        let pending = Names {
            array_task: None,
            ..names
        };
        assert_eq!(
            output_path("/o/a-%A-%a.out", Path::new("/w"), &pending),
            None
        );
    }
}

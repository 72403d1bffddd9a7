//! `check --json`'s object (SPEC §8): one line per snapshot, every job in action-list order
//! with its fields, the dispatch hold, the rules of no one job, the store and the watcher.
//! Text from jobs is made inert; times are RFC 3339 in UTC.

use std::io::{self, Write};

use chrono::{SecondsFormat, Utc};
use serde::Serialize;

use crate::core::text::inert;
use crate::core::{Assessment, Bucket, CheckOutcome};
use crate::engine::{Snapshot, WatcherStatus};

#[derive(Serialize)]
struct JsonReport<'a> {
    generated_at: String,
    jobs: Vec<JsonJob<'a>>,
    dispatch_held: bool,
    /// Broken rules that belong to no job.
    rules: Vec<String>,
    store: JsonStore,
    /// Whether a machine watcher watches these jobs (SPEC §8).
    watcher: JsonWatcher,
}

/// The machine watcher as a script sees it: `state` one of `alive`, `passes` (`mihari watch
/// --once` often enough), `stuck` (its process lives, its passes stopped: RED), `gone` (it ran
/// and nothing watches now: RED), `none_yet` or `unknown` (its lock cannot be judged), with
/// what is known of it.
#[derive(Serialize)]
struct JsonWatcher {
    state: &'static str,
    pid: Option<u32>,
    since: Option<String>,
    last_pass_at: Option<String>,
    reason: Option<String>,
}

fn json_watcher(watcher: &WatcherStatus) -> JsonWatcher {
    let at = |t: &chrono::DateTime<Utc>| Some(t.to_rfc3339_opts(SecondsFormat::Millis, true));
    let mut json = JsonWatcher {
        state: "none_yet",
        pid: None,
        since: None,
        last_pass_at: None,
        reason: None,
    };
    match watcher {
        WatcherStatus::Never => {}
        WatcherStatus::Alive {
            pid,
            since,
            last_pass,
        } => {
            json.state = "alive";
            json.pid = Some(*pid).filter(|pid| *pid > 0);
            json.since = at(since);
            json.last_pass_at = at(last_pass);
        }
        WatcherStatus::Stuck { pid, last_pass, .. } => {
            json.state = "stuck";
            json.pid = Some(*pid).filter(|pid| *pid > 0);
            json.last_pass_at = at(last_pass);
            json.reason = watcher.broken_rule(Utc::now()).map(|rule| inert(&rule));
        }
        WatcherStatus::Passes { last, .. } => {
            json.state = "passes";
            json.last_pass_at = at(last);
        }
        WatcherStatus::Gone { why } => {
            json.state = "gone";
            json.reason = Some(inert(why));
        }
        WatcherStatus::Unknown { why } => {
            json.state = "unknown";
            json.reason = Some(inert(why));
        }
    }
    json
}

/// Whether the state store can be used: `ok`; `fault` (check exits 3) or `writes_failing`
/// (the watcher's writes fail: RED), with why.
#[derive(Serialize)]
struct JsonStore {
    state: &'static str,
    reason: Option<String>,
}

#[derive(Serialize)]
struct JsonJob<'a> {
    id: &'a str,
    /// The job's `name` and `owner` from the jobs file (inert), null when not declared.
    name: Option<String>,
    owner: Option<String>,
    state: &'static str,
    bucket: Option<&'static str>,
    liveness: Option<&'static str>,
    pid: Option<u32>,
    progress_age_sec: Option<f64>,
    progress_source: Option<&'static str>,
    done: Option<u64>,
    expected_total: Option<u64>,
    /// How far along, 0 to 100 (done of the total, or the percent the log prints).
    percent: Option<f64>,
    /// Items per second while it runs, as the job prints it (tqdm) or over the samples a
    /// long-running engine kept (a one-off check has none); null when not known.
    rate_per_sec: Option<f64>,
    /// Seconds until done at that rate; 0 once done; null when not known.
    eta_sec: Option<f64>,
    /// The manifest's current phase; null without one.
    phase: Option<String>,
    /// How the last run `mihari run` recorded ended; null when none has ended.
    last_exit: Option<JsonExit>,
    /// For a job with a `schedule`: the moment it is overdue unless a run ends with exit 0
    /// first (its due time plus grace); in the past while it is overdue. Null without a
    /// schedule.
    next_due: Option<String>,
    /// Who paused the job, when and why; null when it is not paused.
    paused: Option<JsonNote>,
    reasons: Vec<String>,
    checks: Vec<JsonCheck<'a>>,
    /// The job's pending approvals, oldest first: what the fleet screen approves or denies.
    approvals: Vec<JsonApproval>,
    /// The job's stale markers, in its `markers:` order: what the fleet screen offers to
    /// release (`release-marker JOB PATH`).
    stale_markers: Vec<JsonMarker>,
    /// The kernel's reading of the live holder's tree; null while it is not looked at (no
    /// live holder, or its other progress is fresh).
    activity: Option<JsonActivity>,
    /// The Slurm job that holds (or last held) a job declared with `slurm:`, as Slurm lists
    /// it; absent for any other job.
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm: Option<JsonSlurm>,
}

/// What the holder's tree is doing (SPEC §8 `activity`): `state` one of progressing, busy,
/// spinning, blocked, waiting, stopped, unreadable; the process it is about; its CPU use;
/// bytes per second through the tree's read and write calls; the file read furthest (or the
/// one written) with its position; and how long it has been in this state.
#[derive(Serialize)]
struct JsonActivity {
    state: &'static str,
    pid: u32,
    comm: String,
    cpu_percent: Option<f64>,
    read_bytes_per_sec: Option<f64>,
    write_bytes_per_sec: Option<f64>,
    wchan: Option<String>,
    asleep_in: Option<String>,
    file: Option<JsonFile>,
    state_sec: Option<f64>,
    /// Whether `state_sec` counts from the first look (it was already so then).
    state_sec_at_least: bool,
    /// Seconds between the two looks compared; null for a first look.
    sampled_over_sec: Option<f64>,
    unreadable: Option<String>,
    words: String,
}

/// A file of the holder's tree and where its descriptor stands.
#[derive(Serialize)]
struct JsonFile {
    path: String,
    position: u64,
    size: u64,
    percent: Option<f64>,
    bytes_per_sec: Option<f64>,
    eta_sec: Option<f64>,
    writing: bool,
}

/// A Slurm job in Slurm's words: its id ("42", "14_1" for an array task), state
/// ("PENDING", "RUNNING", "FAILED"...), the reason Slurm gives (null for "None"), and its end
/// as a run's end (`code`, `signal`, or `ended_as` for TIMEOUT, CANCELLED...; null while it
/// has not ended).
#[derive(Serialize)]
struct JsonSlurm {
    id: String,
    state: String,
    reason: Option<String>,
    exit: Option<JsonSlurmExit>,
    stdout: Option<String>,
}

#[derive(Serialize)]
struct JsonSlurmExit {
    code: Option<i32>,
    signal: Option<String>,
    ended_as: Option<String>,
    /// Slurm's raw `exit_code`: the wait status (768 for an exit 3).
    status: Option<i32>,
}

/// A stale marker: its path and file name, its age, the process it names (null for a bare
/// marker, which no process holds) and the judgment in words, as the dashboard's chooser
/// shows it.
#[derive(Serialize)]
struct JsonMarker {
    path: String,
    name: String,
    age_sec: Option<f64>,
    holder: Option<JsonHolder>,
    words: String,
}

/// The process a marker names: its PID (null when the marker holds none that can be read),
/// its liveness and why.
#[derive(Serialize)]
struct JsonHolder {
    pid: Option<u32>,
    liveness: &'static str,
    why: String,
}

/// A pending approval: its key (what `mihari approval approve KEY` takes), the step, the
/// summary, when it was asked and by whom (null for a request from before that was kept).
#[derive(Serialize)]
struct JsonApproval {
    key: String,
    step: String,
    summary: String,
    requested_at: String,
    requested_by: Option<String>,
}

/// A run's end: `code` when it exited, `signal` ("SIGTERM") when a signal ended it.
#[derive(Serialize)]
struct JsonExit {
    at: String,
    code: Option<i32>,
    signal: Option<String>,
    /// How a scheduler ended it ("TIMEOUT", "CANCELLED" for a Slurm job); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    ended_as: Option<String>,
}

/// An operator's recorded decision: who, when, why.
#[derive(Serialize)]
struct JsonNote {
    by: String,
    at: String,
    reason: String,
}

#[derive(Serialize)]
struct JsonCheck<'a> {
    name: &'a str,
    result: &'static str,
    detail: String,
    at: String,
}

/// The object of SPEC §8: `generated_at`, `jobs` in action-list order, `dispatch_held`.
pub fn render_json(
    snapshot: &Snapshot,
    jobs: &[crate::config::JobSpec],
    out: &mut impl Write,
) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &json_report(snapshot, jobs))?;
    writeln!(out)
}

/// A digest of what [`render_json`] shows of `snapshot`, leaving out what moves with the
/// clock alone (`generated_at`, each job's `progress_age_sec` and `eta_sec`). `check --json
/// --follow` compares it to tell a change from the passing of time: hashing the object as it
/// is serialized costs no copy of it, where rendering it and parsing it back cost two (a few
/// MB at 10,000 jobs, on every wake).
pub fn shown_digest(snapshot: &Snapshot, jobs: &[crate::config::JobSpec]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    /// Serialized bytes go straight into the hash.
    struct Hashing(Sha256);
    impl Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut report = json_report(snapshot, jobs);
    report.generated_at.clear();
    for job in &mut report.jobs {
        job.progress_age_sec = None;
        job.eta_sec = None;
        for marker in &mut job.stale_markers {
            marker.age_sec = None;
        }
        if let Some(activity) = &mut job.activity {
            activity.state_sec = None;
        }
    }
    let mut hashing = Hashing(Sha256::new());
    // Writing into a hash cannot fail, and every value here serializes.
    let _ = serde_json::to_writer(&mut hashing, &report);
    hashing.0.finalize().into()
}

fn json_report<'a>(snapshot: &'a Snapshot, jobs: &[crate::config::JobSpec]) -> JsonReport<'a> {
    // Looked up by id once: a search per row would make a farm's report quadratic.
    let specs: std::collections::HashMap<&str, &crate::config::JobSpec> =
        jobs.iter().map(|job| (job.id.as_str(), job)).collect();
    JsonReport {
        generated_at: snapshot
            .generated_at
            .to_rfc3339_opts(SecondsFormat::Millis, true),
        jobs: snapshot
            .list
            .rows()
            .map(|row| {
                let mut job = json_job(row, snapshot.generated_at);
                if let Some(spec) = specs.get(row.id.as_str()) {
                    job.name = spec.name.as_deref().map(inert);
                    job.owner = spec.owner.as_deref().map(inert);
                }
                job
            })
            .collect(),
        dispatch_held: snapshot.list.dispatch_held.is_some(),
        rules: snapshot.list.rules.iter().map(|r| inert(r)).collect(),
        store: JsonStore {
            state: match (&snapshot.store_fault, &snapshot.store_writes_failing) {
                (Some(_), _) => "fault",
                (None, Some(_)) => "writes_failing",
                (None, None) => "ok",
            },
            reason: snapshot
                .store_fault
                .as_deref()
                .or(snapshot.store_writes_failing.as_deref())
                .map(inert),
        },
        watcher: json_watcher(&snapshot.watcher),
    }
}

fn json_job(row: &Assessment, now: chrono::DateTime<Utc>) -> JsonJob<'_> {
    JsonJob {
        id: &row.id,
        name: None,
        owner: None,
        state: row.state.as_str(),
        bucket: row.bucket.map(Bucket::as_str),
        liveness: row.liveness.map(|l| l.as_str()),
        pid: row.pid,
        progress_age_sec: row.progress_age_sec,
        progress_source: row.progress_source.map(|s| s.as_str()),
        done: row.done,
        expected_total: row.expected_total,
        percent: row.percent.map(|p| (p * 10.0).round() / 10.0),
        rate_per_sec: row
            .rate_per_sec
            .map(|rate| (rate * 1000.0).round() / 1000.0),
        eta_sec: row.eta_sec.map(f64::round),
        phase: row.phase.as_deref().map(inert),
        last_exit: row.last_exit.as_ref().map(|exit| JsonExit {
            at: exit.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            code: exit.code,
            signal: exit.signal.as_deref().map(inert),
            ended_as: exit.ended_as.as_deref().map(inert),
        }),
        next_due: row
            .next_due
            .map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true)),
        paused: row.paused.as_ref().map(|pause| JsonNote {
            by: inert(&pause.by),
            at: pause.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            reason: inert(&pause.reason),
        }),
        reasons: row
            .held
            .iter()
            .chain(row.reasons.iter())
            .map(|r| inert(r))
            .collect(),
        checks: row.checks.iter().map(json_check).collect(),
        approvals: row
            .pending_approvals
            .iter()
            .map(|a| JsonApproval {
                key: inert(&a.key),
                step: inert(&a.step),
                summary: inert(&a.summary),
                requested_at: a.requested.to_rfc3339_opts(SecondsFormat::Millis, true),
                requested_by: a.requested_by.as_deref().map(inert),
            })
            .collect(),
        slurm: row.slurm.as_ref().map(|held| JsonSlurm {
            id: inert(&held.shown_id()),
            state: inert(&held.state),
            reason: held.reason.as_deref().map(inert),
            exit: held
                .run_exit(chrono::DateTime::UNIX_EPOCH)
                .map(|exit| JsonSlurmExit {
                    code: exit.code,
                    signal: exit.signal.as_deref().map(inert),
                    ended_as: exit.ended_as.as_deref().map(inert),
                    status: held.exit_status,
                }),
            stdout: held
                .stdout
                .as_ref()
                .map(|path| inert(&path.display().to_string())),
        }),
        stale_markers: row
            .stale_markers
            .iter()
            .map(|marker| JsonMarker {
                path: inert(&marker.path.display().to_string()),
                name: marker
                    .path
                    .file_name()
                    .map(|name| inert(&name.to_string_lossy()))
                    .unwrap_or_default(),
                age_sec: marker.age_sec.map(f64::round),
                holder: marker
                    .reading
                    .as_ref()
                    .and_then(|r| r.holder.as_ref())
                    .map(|holder| JsonHolder {
                        pid: holder.pid,
                        liveness: holder.liveness.as_str(),
                        why: inert(&holder.why),
                    }),
                words: inert(&marker.words),
            })
            .collect(),
        activity: row.activity.as_deref().map(|reading| {
            let round = |value: f64| (value * 10.0).round() / 10.0;
            JsonActivity {
                state: reading.state.as_str(),
                pid: reading.pid,
                comm: inert(&reading.comm),
                cpu_percent: reading.cpu_percent.map(round),
                read_bytes_per_sec: reading.read_bytes_per_sec.map(f64::round),
                write_bytes_per_sec: reading.write_bytes_per_sec.map(f64::round),
                wchan: reading.wchan.as_deref().map(inert),
                asleep_in: reading.asleep_in.as_deref().map(inert),
                file: reading
                    .input
                    .as_ref()
                    .or(reading.output.as_ref())
                    .map(|file| JsonFile {
                        path: inert(&file.path),
                        position: file.position,
                        size: file.size,
                        percent: file.percent.map(round),
                        bytes_per_sec: file.bytes_per_sec.map(f64::round),
                        eta_sec: file.eta_sec.map(f64::round),
                        writing: file.writing,
                    }),
                state_sec: Some(round(reading.state_sec(now))),
                state_sec_at_least: !reading.since_seen,
                sampled_over_sec: reading.over_sec.map(round),
                unreadable: reading.unreadable.as_deref().map(inert),
                words: inert(&reading.words(now)),
            }
        }),
    }
}

fn json_check(check: &CheckOutcome) -> JsonCheck<'_> {
    JsonCheck {
        name: &check.name,
        result: check.result.as_str(),
        detail: inert(&check.detail),
        at: check.at.to_rfc3339_opts(SecondsFormat::Millis, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;

    /// `--follow` prints a line when what `check` shows changes, not when only the clock
    /// moved: the digest ignores the time and the ages in numbers (an age said in a reason,
    /// "progress 7 s ago", is shown, and counts), and sees a death.
    #[test]
    fn the_shown_digest_ignores_the_clock_and_sees_a_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::write(root.join("a.log"), "step 1\n").expect("log");
        // A live holder: this test process.
        std::fs::write(root.join("a.lock"), format!("{}\n", std::process::id())).expect("lock");
        let yaml = format!(
            "settings:\n  state_dir: {r}/state\njobs:\n  - id: a\n    lock: {r}/a.lock\n    \
             log: {r}/a.log\n    should_run_when: [resource_free]\n    stall_sec: 3600\n",
            r = root.display()
        );
        let config =
            crate::config::load_str(&yaml, &root.join("jobs.yaml")).expect("the jobs file loads");
        let mut engine = Engine::new(config);
        let now = Utc::now();
        let first = engine.refresh(None, now);
        let later = engine.reassess(now + chrono::Duration::milliseconds(300));
        assert_ne!(first.generated_at, later.generated_at);
        assert_eq!(
            shown_digest(&first, &engine.config().jobs),
            shown_digest(&later, &engine.config().jobs)
        );
        // The holder is gone: another state, another digest.
        std::fs::write(root.join("a.lock"), "999999\n").expect("lock");
        let dead = engine.refresh(None, now + chrono::Duration::seconds(8));
        assert_ne!(
            shown_digest(&first, &engine.config().jobs),
            shown_digest(&dead, &engine.config().jobs)
        );
    }
}

//! Table-driven tests of the pure core: one row per boundary of SPEC §4.
//!
//! Every row builds evidence by hand and judges it at a fixed `now`, so each verdict is
//! reproducible to the millisecond. Rows that prevent a known incident say so in their name.

use std::path::PathBuf;

use chrono::{DateTime, Duration, TimeZone, Utc};
use mihari::config::{
    Cadence, JobSpec, LogProgress, Predicate, ProcessSpec, ProgressTable, Schedule, SlurmJobRef,
    SlurmSpec, TimeZoneName, Timeouts,
};
use mihari::core::activity::{
    ActivityReading, ActivityState, FileProgress, OpenFile, ProcessSample, Sample, Track, judge,
    plan,
};
use mihari::core::assess::ProgressSource;
use mihari::core::{
    Bucket, Carried, CheckOutcome, CheckResult, Evidence, Fall, Figure, FileStamp,
    HeartbeatReading, History, LastRun, LineCount, Liveness, LockHolder, LogProgressReading,
    ManifestReading, MatchedProcess, Moved, OperatorNote, Reading, RunExit, SlurmJob, State,
    TableReading, assess, order,
};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 9, 0, 0).unwrap()
}

fn ago(secs: f64) -> DateTime<Utc> {
    now() - Duration::milliseconds((secs * 1000.0) as i64)
}

fn job() -> JobSpec {
    JobSpec {
        id: "collect_raw".into(),
        name: None,
        owner: None,
        workspace: None,
        lock: Some(PathBuf::from("/run/collect.lock")),
        log: Some(PathBuf::from("/var/log/collect.log")),
        progress_file: Some(PathBuf::from("/data/raw/_manifest.jsonl")),
        progress_table: None,
        manifest: None,
        log_progress: None,
        process: None,
        kept_lock: None,
        stall_sec: 300,
        expected_total: Some(5121),
        should_run_when: vec![Predicate::NotComplete, Predicate::ResourceFree],
        resource_lock: None,
        auto_restart: false,
        auto_restart_reason: None,
        auto_restart_blocked_reason: None,
        restart: None,
        checks: vec![],
        timeouts: Timeouts::default(),
        stall_never: false,
        io_progress: true,
        markers: Vec::new(),
        slurm: None,
        schedule: None,
    }
}

fn holder(liveness: Liveness, started_secs_ago: f64) -> Reading<LockHolder> {
    Reading::Found(LockHolder {
        pid: Some(4242),
        recorded_start: Some(98_765),
        cmdline: None,
        run_id: None,
        modified: ago(started_secs_ago),
        liveness,
        why: match liveness {
            Liveness::Alive => "start time matches".into(),
            Liveness::Dead => "no such process".into(),
            Liveness::Unknown => "permission denied reading /proc/4242/stat".into(),
        },
        started_at: (liveness == Liveness::Alive).then(|| ago(started_secs_ago)),
        start_ticks: (liveness == Liveness::Alive).then_some(98_765),
        stopped: false,
    })
}

fn log(secs_ago: f64) -> Option<Reading<FileStamp>> {
    Some(Reading::Found(FileStamp {
        modified: ago(secs_ago),
        len: 100,
        carried: None,
    }))
}

fn progress(secs_ago: f64, done: u64) -> Option<Reading<LineCount>> {
    Some(Reading::Found(LineCount {
        modified: ago(secs_ago),
        done,
    }))
}

fn fault<T>() -> Option<Reading<T>> {
    Some(Reading::Fault(
        "cannot read '/data/raw/_manifest.jsonl': Is a directory".into(),
    ))
}

fn check(result: CheckResult) -> CheckOutcome {
    CheckOutcome {
        name: "no_gaps".into(),
        result,
        detail: "exit 1: gap at shard 120".into(),
        at: now(),
    }
}

/// One row: a name, the job, the evidence, and the expected state and bucket.
struct Row {
    name: &'static str,
    job: JobSpec,
    evidence: Evidence,
    state: State,
    bucket: Option<Bucket>,
    /// Words the first reason must contain.
    says: &'static str,
}

fn alive(log_ago: f64, progress_ago: f64) -> Evidence {
    Evidence {
        lock: Some(holder(Liveness::Alive, 3600.0)),
        log: log(log_ago),
        progress_file: progress(progress_ago, 1200),
        ..Evidence::default()
    }
}

fn not_holding() -> Evidence {
    Evidence {
        lock: Some(Reading::Empty),
        log: Some(Reading::Empty),
        progress_file: Some(Reading::Empty),
        ..Evidence::default()
    }
}

/// A job started in a tmux pane: found by its command line, no lock, no count.
fn process_job() -> JobSpec {
    JobSpec {
        lock: None,
        progress_file: None,
        expected_total: None,
        process: Some(ProcessSpec {
            cmdline: r"^python3 train\.py".into(),
            user: None,
        }),
        kept_lock: Some(PathBuf::from("/state/train.run.lock")),
        should_run_when: vec![Predicate::ResourceFree],
        ..job()
    }
}

/// A one-shot job with nothing to count: due until a run of it exits 0.
fn one_shot_job() -> JobSpec {
    JobSpec {
        progress_file: None,
        expected_total: None,
        should_run_when: vec![Predicate::NotSucceeded],
        ..job()
    }
}

/// A process matching `process.cmdline`, started `started_secs_ago`.
fn matched(pid: u32, stopped: bool) -> MatchedProcess {
    MatchedProcess {
        pid,
        start_ticks: 1000 + u64::from(pid),
        started_at: Some(ago(3600.0)),
        stopped,
        state: if stopped { 'T' } else { 'S' },
        cmdline: "python3 train.py --epochs 90".into(),
    }
}

/// A process-job's evidence: the log written `log_ago`, and what the scan found.
fn scanned(log_ago: f64, found: Reading<Vec<MatchedProcess>>) -> Evidence {
    Evidence {
        log: log(log_ago),
        process: Some(found),
        kept_lock: Some(Box::new(Reading::Empty)),
        ..Evidence::default()
    }
}

/// The last run `mihari run` recorded: started `started_ago`, ended as `words` ("exit 0",
/// "killed by SIGTERM") `ended_ago`, or not ended (`None`).
fn last_run(started_ago: f64, ended: Option<(&str, f64)>) -> History {
    History {
        last_run: Some(LastRun {
            started: Some(ago(started_ago)),
            exit: ended.map(|(words, secs)| RunExit::from_words(words, ago(secs))),
        }),
        ..History::default()
    }
}

/// A job that ran, holds no lock now, logged until it ended.
fn ran(history: History) -> Evidence {
    Evidence {
        lock: Some(Reading::Empty),
        log: log(60.0),
        started_before: true,
        history,
        ..Evidence::default()
    }
}

/// A lock holder as the probe reads it from the empty file util-linux `flock(1)` leaves.
fn flocked_empty() -> Reading<LockHolder> {
    Reading::Found(LockHolder {
        pid: Some(4300),
        recorded_start: None,
        cmdline: Some("sleep 30".into()),
        run_id: None,
        modified: ago(60.0),
        liveness: Liveness::Alive,
        why: "the lock file is empty (as util-linux flock leaves it); pid 4300 holds a FLOCK \
              lock on it"
            .into(),
        started_at: Some(ago(60.0)),
        start_ticks: Some(77),
        stopped: false,
    })
}

/// A job run by Slurm, declared by name alone: Slurm is its holder, its StdOut its log.
fn slurm_job() -> JobSpec {
    JobSpec {
        lock: None,
        log: None,
        progress_file: None,
        expected_total: None,
        should_run_when: vec![Predicate::NotSucceeded],
        timeouts: Timeouts {
            queue_sec: Some(3600),
            ..Timeouts::default()
        },
        slurm: Some(SlurmSpec {
            job: SlurmJobRef::Name("train".into()),
            user: None,
            restart: None,
        }),
        ..job()
    }
}

/// The Slurm job `squeue --json` lists: 42, in `state`, with `reason`, submitted an hour ago;
/// started 50 min ago unless queued; ended 10 min ago with raw status `exit` when it ended.
fn slurm(state: &str, reason: Option<&str>, exit: Option<i32>) -> Evidence {
    let queued = state == "PENDING";
    Evidence {
        slurm: Some(Box::new(Reading::Found(SlurmJob {
            id: 42,
            name: "train".into(),
            user: "alice".into(),
            state: state.into(),
            reason: reason.map(str::to_string),
            exit_status: exit,
            submitted: Some(ago(3600.0)),
            started: (!queued).then(|| ago(3000.0)),
            ended: exit.map(|_| ago(600.0)),
            stdout: Some(PathBuf::from("/shared/train-42.out")),
            node: (!queued).then(|| "node1".to_string()),
            restarts: 0,
            array: None,
        }))),
        ..Evidence::default()
    }
}

fn note(secs_ago: f64, reason: &str) -> OperatorNote {
    OperatorNote {
        at: ago(secs_ago),
        by: "alice".into(),
        reason: reason.into(),
    }
}

/// A job counting to 50 in a progress file.
fn counted_job(should_run_when: Vec<Predicate>) -> JobSpec {
    JobSpec {
        expected_total: Some(50),
        should_run_when,
        ..job()
    }
}

/// A job that ran and counted `done` (its progress file last written before it ended) and
/// whose last run ended as `words` a minute ago.
fn counted_run(done: u64, words: &str) -> Evidence {
    Evidence {
        progress_file: progress(61.0, done),
        ..ran(last_run(120.0, Some((words, 60.0))))
    }
}

/// A job whose only count is the percent its log prints (`percent` preset).
fn percent_job() -> JobSpec {
    JobSpec {
        progress_file: None,
        expected_total: None,
        log_progress: Some(mihari::config::LogProgress::Percent),
        should_run_when: vec![Predicate::NotComplete],
        ..job()
    }
}

/// A run whose log printed `percent` and ended as `words` a minute ago.
fn printed_run(percent: f64, words: &str) -> Evidence {
    Evidence {
        log_progress: Some(Box::new(Reading::Found(mihari::core::LogProgressReading {
            done: None,
            total: None,
            percent: Some(percent),
            rate_per_sec: None,
            remaining_sec: None,
            frame: format!("copying model.bin {percent}%"),
            from: None,
            figure: Figure::Percent,
            moved: None,
            fell: None,
        }))),
        ..ran(last_run(120.0, Some((words, 60.0))))
    }
}

/// A one-shot pipeline with a run manifest.
fn phased_job() -> JobSpec {
    JobSpec {
        manifest: Some(PathBuf::from("/data/run/manifest.json")),
        ..one_shot_job()
    }
}

/// A manifest written `secs_ago` whose phase `failed` says "failed".
fn phases(secs_ago: f64, failed: &str) -> Option<Box<Reading<ManifestReading>>> {
    Some(Box::new(Reading::Found(ManifestReading {
        updated_at: ago(secs_ago),
        run_id: Some("run-1".into()),
        current_phase: Some(failed.into()),
        completed_phases: vec!["loading".into()],
        failed_phases: vec![failed.into()],
    })))
}

/// A live job whose only progress source is a SQLite table.
fn table_only_job() -> JobSpec {
    JobSpec {
        log: None,
        progress_file: None,
        should_run_when: vec![Predicate::ResourceFree],
        ..table_job()
    }
}

fn rows() -> Vec<Row> {
    let resource_job = JobSpec {
        resource_lock: Some(PathBuf::from("/run/gpu0.lock")),
        should_run_when: vec![Predicate::ResourceFree],
        ..job()
    };
    let no_lock_job = JobSpec {
        lock: None,
        should_run_when: vec![Predicate::NotComplete],
        ..job()
    };
    vec![
        Row {
            name: "the 303 s false stall: a coarse progress file must not hide a fresh log",
            job: job(),
            evidence: alive(10.0, 303.0),
            state: State::Running,
            bucket: None,
            says: "progress 10 s ago (log)",
        },
        Row {
            name: "progress exactly stall_sec old is not yet a stall",
            job: job(),
            evidence: alive(300.0, 300.0),
            state: State::Running,
            bucket: None,
            says: "alive",
        },
        Row {
            name: "progress a moment past stall_sec is a stall",
            job: job(),
            evidence: alive(300.001, 400.0),
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "no progress for 301 s (freshest: log; stall_sec 300)",
        },
        Row {
            name: "no reading yet: the age counts from the holder's start (fresh)",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 12.0)),
                log: Some(Reading::Empty),
                progress_file: Some(Reading::Empty),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "progress 12 s ago (holder_start)",
        },
        Row {
            name: "no reading yet: the age counts from the holder's start (stalled)",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 301.0)),
                log: Some(Reading::Empty),
                progress_file: Some(Reading::Empty),
                ..Evidence::default()
            },
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "freshest: holder_start",
        },
        Row {
            name: "a dead holder leaves a stale lock",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                ..alive(1.0, 1.0)
            },
            state: State::DeadLockStale,
            bucket: Some(Bucket::Restart),
            says: "lock held by pid 4242, process gone: no such process",
        },
        Row {
            name: "unknown liveness is never rounded to dead",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Unknown, 100.0)),
                ..alive(1000.0, 1000.0)
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "liveness unknown: permission denied",
        },
        Row {
            name: "a lock that cannot be read is unknown, not absent",
            job: job(),
            evidence: Evidence {
                lock: fault(),
                ..alive(1.0, 1.0)
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "lock: fault",
        },
        Row {
            name: "old readings plus a faulty source are unknown, never a stall",
            job: job(),
            evidence: Evidence {
                progress_file: fault(),
                ..alive(900.0, 0.0)
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot tell a stall from a read failure",
        },
        Row {
            name: "a fresh log with a faulty progress file is running, fault named",
            job: job(),
            evidence: Evidence {
                progress_file: fault(),
                ..alive(5.0, 0.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 5 s ago (log)",
        },
        Row {
            name: "not running, not complete, has run before: restart",
            job: job(),
            evidence: Evidence {
                log: log(60.0),
                progress_file: progress(60.0, 1200),
                ..not_holding()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not running, but should: not_complete (1200 of 5121 done)",
        },
        Row {
            name: "not running, never started: dispatch",
            job: job(),
            evidence: not_holding(),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "not_complete (0 of 5121 done) and resource_free",
        },
        Row {
            name: "a start in the event log makes it a restart",
            job: job(),
            evidence: Evidence {
                started_before: true,
                ..not_holding()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not running, but should",
        },
        Row {
            name: "one item short of expected_total is not complete",
            job: job(),
            evidence: Evidence {
                progress_file: progress(60.0, 5120),
                ..not_holding()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "5120 of 5121 done",
        },
        Row {
            name: "done equal to expected_total is complete",
            job: job(),
            evidence: Evidence {
                progress_file: progress(60.0, 5121),
                ..not_holding()
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 5121 of 5121 done",
        },
        Row {
            name: "the largest count over the countable sources decides done",
            job: JobSpec {
                progress_table: Some(mihari::config::ProgressTable::new(
                    "/data/p.sqlite",
                    "progress",
                    "updated_at",
                )),
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 10),
                progress_table: Some(Reading::Found(TableReading {
                    newest: ago(30.0),
                    rows: 5121,
                    done: None,
                    total: None,
                })),
                ..not_holding()
            },
            state: State::Complete,
            bucket: None,
            says: "complete",
        },
        Row {
            name: "not_complete over a faulty count is unknown, never should-run",
            job: job(),
            evidence: Evidence {
                progress_file: fault(),
                ..not_holding()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot tell whether it should run",
        },
        Row {
            name: "a live holder of the resource keeps it from running",
            job: resource_job.clone(),
            evidence: Evidence {
                resource_lock: Some(Box::new(holder(Liveness::Alive, 100.0))),
                ..not_holding()
            },
            state: State::NotRunning,
            bucket: None,
            says: "resource_free is false: pid 4242 holds it, alive",
        },
        Row {
            name: "a dead holder of the resource frees it",
            job: resource_job.clone(),
            evidence: Evidence {
                resource_lock: Some(Box::new(holder(Liveness::Dead, 100.0))),
                ..not_holding()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "resource_free (pid 4242 held it and is gone",
        },
        Row {
            name: "an unknown holder of the resource is undecidable",
            job: resource_job.clone(),
            evidence: Evidence {
                resource_lock: Some(Box::new(holder(Liveness::Unknown, 100.0))),
                ..not_holding()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "resource_free cannot be evaluated",
        },
        Row {
            name: "a resource lock that cannot be read is undecidable",
            job: resource_job.clone(),
            evidence: Evidence {
                resource_lock: fault().map(Box::new),
                ..not_holding()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "resource_free cannot be evaluated: lock: fault",
        },
        Row {
            name: "a failing check puts a running job in RED",
            job: job(),
            evidence: Evidence {
                checks: vec![check(CheckResult::Fail)],
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: Some(Bucket::Red),
            says: "alive",
        },
        Row {
            name: "a check that could not run is a warning, never a pass",
            job: job(),
            evidence: Evidence {
                checks: vec![check(CheckResult::Fault)],
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: Some(Bucket::Stale),
            says: "alive",
        },
        Row {
            name: "a refused check is a warning, never a pass",
            job: job(),
            evidence: Evidence {
                checks: vec![check(CheckResult::Refusal)],
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: Some(Bucket::Stale),
            says: "alive",
        },
        Row {
            name: "a passing check changes nothing",
            job: job(),
            evidence: Evidence {
                checks: vec![check(CheckResult::Pass)],
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: None,
            says: "alive",
        },
        Row {
            name: "a dead lock outranks a failing check",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                checks: vec![check(CheckResult::Fail)],
                ..alive(1.0, 1.0)
            },
            state: State::DeadLockStale,
            bucket: Some(Bucket::Restart),
            says: "process gone",
        },
        Row {
            name: "a broken rule (the daily cap spent) puts a dead lock in RED",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                history: mihari::core::History {
                    broken_rules: vec!["the daily cap of automatic restarts was spent".into()],
                    ..Default::default()
                },
                ..alive(1.0, 1.0)
            },
            state: State::DeadLockStale,
            bucket: Some(Bucket::Red),
            says: "process gone",
        },
        Row {
            name: "no lock declared: fresh progress counts as running",
            job: no_lock_job.clone(),
            evidence: Evidence {
                lock: None,
                log: log(20.0),
                progress_file: progress(20.0, 10),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "no lock declared",
        },
        Row {
            name: "no lock declared: stale progress and not complete should run",
            job: no_lock_job,
            evidence: Evidence {
                lock: None,
                log: log(400.0),
                progress_file: progress(400.0, 10),
                ..Evidence::default()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not running, but should",
        },
        Row {
            name: "a file stamped in the future is fresh, not negative",
            job: job(),
            evidence: alive(-30.0, -30.0),
            state: State::Running,
            bucket: None,
            says: "progress 0 s ago",
        },
        Row {
            name: "the manifest's updated_at is a progress source",
            job: JobSpec {
                manifest: Some("/data/run/manifest.json".into()),
                ..job()
            },
            evidence: Evidence {
                manifest: Some(Box::new(Reading::Found(ManifestReading {
                    updated_at: ago(7.0),
                    run_id: Some("run-1".into()),
                    current_phase: Some("publish".into()),
                    completed_phases: vec!["loading".into()],
                    failed_phases: Vec::new(),
                }))),
                ..alive(900.0, 900.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 7 s ago (manifest)",
        },
        Row {
            name: "a stopped lock holder (Ctrl-Z) is alive, and said to be stopped",
            job: job(),
            evidence: Evidence {
                lock: Some(match holder(Liveness::Alive, 3600.0) {
                    Reading::Found(h) => Reading::Found(LockHolder { stopped: true, ..h }),
                    other => other,
                }),
                ..alive(10.0, 10.0)
            },
            state: State::Running,
            bucket: None,
            says: "lock held by pid 4242, alive and stopped (state T",
        },
        Row {
            name: "a stopped holder with no progress past stall_sec is a stall, still stopped",
            job: process_job(),
            evidence: scanned(400.0, Reading::Found(vec![matched(5150, true)])),
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "alive and stopped (state T: Ctrl-Z or SIGSTOP",
        },
        Row {
            name: "one process matches process.cmdline: it is the holder",
            job: process_job(),
            evidence: scanned(5.0, Reading::Found(vec![matched(5150, false)])),
            state: State::Running,
            bucket: None,
            says: "process 5150 ('python3 train.py --epochs 90'), alive; progress 5 s ago",
        },
        Row {
            name: "a stopped lock-less job is alive and stopped, not SHOULD_BE_RUNNING",
            job: process_job(),
            evidence: scanned(120.0, Reading::Found(vec![matched(5150, true)])),
            state: State::Running,
            bucket: None,
            says: "alive and stopped",
        },
        Row {
            name: "several processes match process.cmdline: unknown, naming them",
            job: process_job(),
            evidence: scanned(
                5.0,
                Reading::Found(vec![matched(5150, false), matched(5151, true)]),
            ),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "2 processes match process.cmdline, liveness unknown: pid 5150 ('python3 \
                   train.py --epochs 90'), pid 5151 ('python3 train.py --epochs 90', stopped)",
        },
        Row {
            name: "no process matches process.cmdline: not held, resource_free holds",
            job: process_job(),
            evidence: scanned(5.0, Reading::Empty),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "resource_free (no process matches process.cmdline)",
        },
        Row {
            name: "the process scan could not tell: unknown, never SHOULD_BE_RUNNING",
            job: process_job(),
            evidence: scanned(5.0, Reading::Fault("cannot list '/proc': EIO".into())),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot list '/proc'",
        },
        Row {
            name: "no process matches yet, but 'mihari run' holds the lock it keeps: running",
            job: process_job(),
            evidence: Evidence {
                kept_lock: Some(Box::new(holder(Liveness::Alive, 3.0))),
                ..scanned(5.0, Reading::Empty)
            },
            state: State::Running,
            bucket: None,
            says: "'mihari run' pid 4242 (the run lock mihari keeps), alive",
        },
        Row {
            name: "a stale lock beside a live matching process: running, never restarted twice",
            job: JobSpec {
                lock: Some("/run/train.lock".into()),
                kept_lock: None,
                ..process_job()
            },
            evidence: Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                ..scanned(5.0, Reading::Found(vec![matched(5150, false)]))
            },
            state: State::Running,
            bucket: None,
            says: "process 5150",
        },
        Row {
            name: "an empty lock flock'ed by a live process: running, by that process",
            job: job(),
            evidence: Evidence {
                lock: Some(flocked_empty()),
                ..alive(10.0, 10.0)
            },
            state: State::Running,
            bucket: None,
            says: "lock held by pid 4300, alive; progress 10 s ago",
        },
        Row {
            name: "an empty lock nobody locks: not held (never unknown)",
            job: resource_job.clone(),
            evidence: Evidence {
                lock: Some(Reading::Empty),
                resource_lock: Some(Box::new(Reading::Empty)),
                ..alive(500.0, 500.0)
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "resource_free (no lock held)",
        },
        Row {
            name: "a lock written in another boot is dead",
            job: job(),
            evidence: Evidence {
                lock: Some(Reading::Found(LockHolder {
                    liveness: Liveness::Dead,
                    why: "written in another boot (the lock's boot id 'aa', this boot's 'bb'): \
                          pid 4242 ended with that boot"
                        .into(),
                    started_at: None,
                    start_ticks: None,
                    ..match holder(Liveness::Alive, 100.0) {
                        Reading::Found(h) => h,
                        _ => unreachable!(),
                    }
                })),
                ..alive(1.0, 1.0)
            },
            state: State::DeadLockStale,
            bucket: Some(Bucket::Restart),
            says: "process gone: written in another boot",
        },
        // not_succeeded and complete (SPEC §2, §4): one-shot jobs with nothing to count.
        Row {
            name: "not_succeeded with no run recorded is due: DISPATCH",
            job: one_shot_job(),
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: Some(Reading::Empty),
                ..Evidence::default()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "not_succeeded (no run of it is recorded yet)",
        },
        Row {
            name: "the incident: a finished one-shot job (exit 0) is COMPLETE, not RESTART",
            job: one_shot_job(),
            evidence: ran(last_run(120.0, Some(("exit 0", 60.0)))),
            state: State::Complete,
            bucket: None,
            says: "complete: the last run exited 0 at 2026-11-29 08:59:00 UTC",
        },
        Row {
            name: "not_succeeded: a run that exited 1 should be running, with its exit",
            job: one_shot_job(),
            evidence: ran(last_run(120.0, Some(("exit 1", 60.0)))),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not_succeeded (the last run exited 1 at 2026-11-29 08:59:00 UTC)",
        },
        Row {
            name: "not_succeeded: a run killed by a signal should be running, with the signal",
            job: one_shot_job(),
            evidence: ran(last_run(120.0, Some(("killed by SIGTERM", 60.0)))),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run was killed by SIGTERM at 2026-11-29 08:59:00 UTC",
        },
        Row {
            name: "not_succeeded: a run that started and recorded no end has not succeeded",
            job: one_shot_job(),
            evidence: ran(last_run(120.0, None)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run started at 2026-11-29 08:58:00 UTC and recorded no exit",
        },
        Row {
            name: "not_succeeded while its run holds the lock is RUNNING",
            job: one_shot_job(),
            evidence: Evidence {
                history: last_run(120.0, None),
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: None,
            says: "alive; progress 1 s ago",
        },
        Row {
            name: "not_succeeded cannot be judged while the event log cannot be read: UNKNOWN",
            job: one_shot_job(),
            evidence: ran(History {
                unreadable: Some("the state store is damaged".into()),
                ..History::default()
            }),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "not_succeeded cannot be evaluated: the event log cannot be read",
        },
        Row {
            name: "exited 0 at 59 of 260 under not_complete: due, and RED (a broken rule)",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 59),
                ..ran(last_run(120.0, Some(("exit 0", 60.0))))
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Red),
            says: "not_complete (59 of 260 done)",
        },
        Row {
            name: "exited 0 at 59 of 260 under not_succeeded: not COMPLETE, and RED",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotSucceeded],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 59),
                ..ran(last_run(120.0, Some(("exit 0", 60.0))))
            },
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not_succeeded is false: the last run exited 0",
        },
        Row {
            name: "exited 0 at 260 of 260 under not_succeeded is COMPLETE",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotSucceeded],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 260),
                ..ran(last_run(120.0, Some(("exit 0", 60.0))))
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 260 of 260 done",
        },
        Row {
            name: "exited 0 short, then acknowledged: the rule has ended",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 59),
                ..ran(History {
                    acknowledged: Some(note(30.0, "upstream listing was short")),
                    ..last_run(120.0, Some(("exit 0", 60.0)))
                })
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not_complete (59 of 260 done)",
        },
        Row {
            name: "exited 0 short after an acknowledgement: a new rule, RED again",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 59),
                ..ran(History {
                    acknowledged: Some(note(90.0, "an earlier short run")),
                    ..last_run(120.0, Some(("exit 0", 60.0)))
                })
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Red),
            says: "not_complete (59 of 260 done)",
        },
        // An exit outranks a count (SPEC §4): a failed last run is never COMPLETE.
        Row {
            name: "an exit outranks a count: exited 1 after 50 of 50 under not_complete is RED",
            job: counted_job(vec![Predicate::NotComplete]),
            evidence: counted_run(50, "exit 1"),
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not complete: the last run exited 1 after 50 of 50",
        },
        Row {
            name: "exited 1 after 50 of 50 under not_complete and not_succeeded is RED",
            job: counted_job(vec![Predicate::NotComplete, Predicate::NotSucceeded]),
            evidence: counted_run(50, "exit 1"),
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not complete: the last run exited 1 after 50 of 50",
        },
        Row {
            name: "exited 1 after 50 of 50 under not_succeeded alone: due, and RED",
            job: counted_job(vec![Predicate::NotSucceeded]),
            evidence: counted_run(50, "exit 1"),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Red),
            says: "not_succeeded (the last run exited 1",
        },
        Row {
            name: "killed by SIGTERM after its log printed 100% is RED, not COMPLETE",
            job: percent_job(),
            evidence: printed_run(100.0, "killed by SIGTERM"),
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "the last run was killed by SIGTERM after 100%",
        },
        Row {
            name: "exited 1 short of its total is a crash to restart, not a broken rule",
            job: counted_job(vec![Predicate::NotComplete]),
            evidence: counted_run(30, "exit 1"),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not_complete (30 of 50 done)",
        },
        Row {
            name: "exited 0 at 70% of a percent it prints is RED, not COMPLETE",
            job: JobSpec {
                should_run_when: vec![Predicate::NotComplete, Predicate::NotSucceeded],
                ..percent_job()
            },
            evidence: printed_run(70.0, "exit 0"),
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not_succeeded is false: the last run exited 0",
        },
        Row {
            name: "exited 0 at 70% under not_complete: due, and RED",
            job: percent_job(),
            evidence: printed_run(70.0, "exit 0"),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Red),
            says: "not_complete (70% done, as its log prints)",
        },
        Row {
            name: "exited 0 at 100% of a percent it prints is COMPLETE",
            job: percent_job(),
            evidence: printed_run(100.0, "exit 0"),
            state: State::Complete,
            bucket: None,
            says: "complete: 100% done, as its log prints",
        },
        Row {
            name: "a count newer than the failed exit belongs to a later run: COMPLETE",
            job: counted_job(vec![Predicate::NotComplete]),
            evidence: Evidence {
                progress_file: progress(10.0, 50),
                ..counted_run(50, "exit 1")
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 50 of 50 done",
        },
        Row {
            name: "a new run alive after a failed one is judged as running, not RED",
            job: counted_job(vec![Predicate::NotComplete]),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 30.0)),
                progress_file: progress(1.0, 50),
                history: last_run(30.0, None),
                ..counted_run(50, "exit 1")
            },
            state: State::Running,
            bucket: None,
            says: "alive; progress 1 s ago",
        },
        Row {
            name: "exited 1 after 50 of 50, then acknowledged: not RED, and still not COMPLETE",
            job: counted_job(vec![Predicate::NotComplete]),
            evidence: Evidence {
                history: History {
                    acknowledged: Some(note(30.0, "the upload was redone by hand")),
                    ..last_run(120.0, Some(("exit 1", 60.0)))
                },
                ..counted_run(50, "exit 1")
            },
            state: State::NotRunning,
            bucket: None,
            says: "not complete: the last run exited 1 after 50 of 50",
        },
        // A manifest's failed phase (SPEC §4).
        Row {
            name: "a failed phase with exit 0 under not_succeeded is RED naming the phase",
            job: phased_job(),
            evidence: Evidence {
                manifest: phases(60.0, "publish"),
                ..ran(last_run(120.0, Some(("exit 0", 60.0))))
            },
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not complete: phase 'publish' failed",
        },
        Row {
            name: "a failed phase is RED while its pipeline still runs",
            job: phased_job(),
            evidence: Evidence {
                manifest: phases(1.0, "fetch"),
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: Some(Bucket::Red),
            says: "alive; progress 1 s ago",
        },
        Row {
            name: "a failed phase acknowledged after the manifest was written: not RED",
            job: phased_job(),
            evidence: Evidence {
                manifest: phases(60.0, "publish"),
                ..ran(History {
                    acknowledged: Some(note(30.0, "published by hand")),
                    ..last_run(120.0, Some(("exit 0", 60.0)))
                })
            },
            state: State::NotRunning,
            bucket: None,
            says: "not complete: phase 'publish' failed",
        },
        Row {
            name: "a failed phase written again after the acknowledgement: RED again",
            job: phased_job(),
            evidence: Evidence {
                manifest: phases(10.0, "publish"),
                ..ran(History {
                    acknowledged: Some(note(30.0, "published by hand")),
                    ..last_run(120.0, Some(("exit 0", 10.0)))
                })
            },
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not complete: phase 'publish' failed",
        },
        // A fault in every progress source of a live holder (SPEC §4): its age is not known.
        Row {
            name: "the only progress source of a live holder is a fault: UNKNOWN, not aged from its start",
            job: table_only_job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 1.0)),
                progress_table: fault(),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "its progress age is not known: progress_table could not be read",
        },
        Row {
            name: "a fault beside an empty source of a live holder: the age is still not known",
            job: JobSpec {
                log: Some(PathBuf::from("/var/log/collect.log")),
                ..table_only_job()
            },
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 1.0)),
                log: Some(Reading::Empty),
                progress_table: fault(),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "its progress age is not known",
        },
        Row {
            name: "a fault beside a fresh reading: the reading gives the age",
            job: JobSpec {
                log: Some(PathBuf::from("/var/log/collect.log")),
                ..table_only_job()
            },
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 1.0)),
                log: log(2.0),
                progress_table: fault(),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "progress 2 s ago (log)",
        },
        Row {
            name: "stall_sec never: a fault in every source still leaves a live holder RUNNING",
            job: JobSpec {
                stall_never: true,
                ..table_only_job()
            },
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 1.0)),
                progress_table: fault(),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "no progress source could be read; stall_sec never",
        },
        // Complete comes first for a job with no holder declared (SPEC §4).
        Row {
            name: "no holder declared, 30 of 30 done 5 s ago: COMPLETE, not RUNNING",
            job: JobSpec {
                lock: None,
                log: None,
                progress_file: None,
                expected_total: None,
                should_run_when: vec![Predicate::NotComplete],
                ..table_job()
            },
            evidence: Evidence {
                progress_table: table(5.0, 30, Some(30)),
                ..Evidence::default()
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 30 of 30 done",
        },
        Row {
            name: "no holder declared, 29 of 30 done 5 s ago: fresh progress counts as running",
            job: JobSpec {
                lock: None,
                log: None,
                progress_file: None,
                expected_total: None,
                should_run_when: vec![Predicate::NotComplete],
                ..table_job()
            },
            evidence: Evidence {
                progress_table: table(5.0, 29, Some(30)),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "no lock declared; progress 5 s ago (progress_table)",
        },
        // stall_sec: never with no progress source: watched by its holder alone.
        Row {
            name: "stall_sec never and no progress source: a live holder is RUNNING",
            job: JobSpec {
                stall_never: true,
                log: None,
                progress_file: None,
                expected_total: None,
                should_run_when: vec![Predicate::ResourceFree],
                ..job()
            },
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 86_400.0)),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "watched by its holder alone, never STALLED",
        },
        // Broken rules end when the job is next seen healthy (SPEC §4, §5).
        Row {
            name: "a failed restart's rule has ended while the job is RUNNING",
            job: job(),
            evidence: Evidence {
                history: History {
                    broken_rules: vec!["the last restart failed at 08:00: not found".into()],
                    ..History::default()
                },
                ..alive(1.0, 1.0)
            },
            state: State::Running,
            bucket: None,
            says: "alive; progress 1 s ago",
        },
        Row {
            name: "exited 0 short, then seen healthy since (a newer RUNNING): not RED",
            job: JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            },
            evidence: Evidence {
                progress_file: progress(60.0, 59),
                ..ran(History {
                    seen_healthy: Some(ago(30.0)),
                    ..last_run(120.0, Some(("exit 0", 60.0)))
                })
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not_complete (59 of 260 done)",
        },
        // stall_sec: never (SPEC §3): idle by nature, never STALLED.
        Row {
            name: "stall_sec never: alive with progress three hours old is RUNNING",
            job: JobSpec {
                stall_never: true,
                ..job()
            },
            evidence: alive(10_800.0, 10_800.0),
            state: State::Running,
            bucket: None,
            says: "never STALLED",
        },
        Row {
            name: "stall_sec never, no lock declared: old progress still counts as running",
            job: JobSpec {
                stall_never: true,
                lock: None,
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            },
            evidence: Evidence {
                lock: None,
                log: log(86_400.0),
                progress_file: progress(86_400.0, 10),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "no lock declared",
        },
        // PAUSED (SPEC §4): first, whatever else is true, and in no bucket.
        Row {
            name: "paused comes first: a paused dead lock is PAUSED, in no bucket",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                history: History {
                    paused: Some(note(600.0, "upstream maintenance")),
                    ..History::default()
                },
                ..alive(1.0, 1.0)
            },
            state: State::Paused,
            bucket: None,
            says: "paused by alice at 2026-11-29 08:50:00 UTC: upstream maintenance",
        },
        Row {
            name: "paused with a failing check and a broken rule: still PAUSED, not RED",
            job: job(),
            evidence: Evidence {
                checks: vec![check(CheckResult::Fail)],
                history: History {
                    paused: Some(note(600.0, "investigating the gaps")),
                    broken_rules: vec!["the daily cap of automatic restarts was spent".into()],
                    ..History::default()
                },
                ..alive(1.0, 1.0)
            },
            state: State::Paused,
            bucket: None,
            says: "paused by alice",
        },
        Row {
            name: "paused while running: PAUSED, the run stays in the reasons",
            job: job(),
            evidence: Evidence {
                history: History {
                    paused: Some(note(60.0, "hold new shards")),
                    ..History::default()
                },
                ..alive(1.0, 1.0)
            },
            state: State::Paused,
            bucket: None,
            says: "(mihari resume collect_raw)",
        },
        // The kernel's reading (SPEC §3 io).
        Row {
            name: "a file position that moved 10 s ago is progress while the log is 6 min old",
            job: job(),
            evidence: Evidence {
                activity: activity(ActivityState::Progressing, Some(10.0), None),
                ..alive(400.0, 400.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 10 s ago (io); reading 'big.img' at 43.0 %",
        },
        Row {
            name: "a position that last moved past stall_sec ago is stalled",
            job: job(),
            evidence: Evidence {
                activity: activity(ActivityState::Spinning, Some(350.0), None),
                ..alive(400.0, 400.0)
            },
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "no progress for 350 s (freshest: io; stall_sec 300); spinning: 100 % CPU",
        },
        Row {
            name: "a holder blocked in D state names the wait",
            job: job(),
            evidence: Evidence {
                activity: activity(ActivityState::Blocked, None, None),
                ..alive(400.0, 400.0)
            },
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "blocked: pid 4242 ('cat') in D state (uninterruptible) in a read on 'big.img' \
                   for 240 s (wchan __folio_lock)",
        },
        Row {
            name: "a tree whose files cannot be read is unknown, never stalled",
            job: job(),
            evidence: Evidence {
                activity: activity(ActivityState::Unreadable, None, Some("permission denied")),
                ..alive(400.0, 400.0)
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot tell a stall from a read failure",
        },
        Row {
            name: "with io_progress off, an unreadable tree is judged by its other sources",
            job: JobSpec {
                io_progress: false,
                ..job()
            },
            evidence: Evidence {
                activity: Some(Box::new(Reading::Found(ActivityReading {
                    positions: false,
                    ..activity_reading(ActivityState::Unreadable, None, Some("permission denied"))
                }))),
                ..alive(400.0, 400.0)
            },
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "unreadable: cannot read the open files and I/O of pid 4242",
        },
        Row {
            name: "a Slurm job RUNNING that writes its StdOut is alive and running",
            job: slurm_job(),
            evidence: Evidence {
                log: log(5.0),
                ..slurm("RUNNING", None, None)
            },
            state: State::Running,
            bucket: None,
            says: "Slurm job 42 (RUNNING on node1), alive",
        },
        Row {
            name: "a Slurm job RUNNING whose StdOut is quiet past stall_sec is STALLED",
            job: slurm_job(),
            evidence: slurm("RUNNING", None, None),
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "no progress for 50 min (freshest: holder_start",
        },
        Row {
            name: "a Slurm job RUNNING whose StdOut went quiet past stall_sec is STALLED",
            job: slurm_job(),
            evidence: Evidence {
                log: log(900.0),
                ..slurm("RUNNING", None, None)
            },
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "Slurm job 42 (RUNNING on node1), alive, but no progress for",
        },
        Row {
            name: "a Slurm job COMPLETING is alive",
            job: slurm_job(),
            evidence: Evidence {
                log: log(5.0),
                ..slurm("COMPLETING", None, None)
            },
            state: State::Running,
            bucket: None,
            says: "Slurm job 42 (COMPLETING on node1), alive",
        },
        Row {
            name: "a SUSPENDED Slurm job is alive and said suspended",
            job: slurm_job(),
            evidence: Evidence {
                log: log(5.0),
                ..slurm("SUSPENDED", None, None)
            },
            state: State::Running,
            bucket: None,
            says: "suspended: it makes no progress until it is resumed (scontrol resume 42)",
        },
        Row {
            name: "a PENDING Slurm job is queued with Slurm's reason, never due",
            job: slurm_job(),
            evidence: slurm("PENDING", Some("Resources"), None),
            state: State::NotRunning,
            bucket: None,
            says: "queued in Slurm: Slurm job 42 (PENDING: Resources)",
        },
        Row {
            name: "a Slurm job queued past queue_sec is STALE: a queue wait, not a death",
            job: JobSpec {
                timeouts: Timeouts {
                    queue_sec: Some(600),
                    ..Timeouts::default()
                },
                ..slurm_job()
            },
            evidence: slurm("PENDING", Some("JobHeldUser"), None),
            state: State::NotRunning,
            bucket: Some(Bucket::Stale),
            says: "held by its user; it runs after scontrol release",
        },
        Row {
            name: "a Slurm job FAILED with raw status 768 exited 3: not_succeeded holds",
            job: slurm_job(),
            evidence: slurm("FAILED", Some("NonZeroExitCode"), Some(768)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run exited 3",
        },
        Row {
            name: "a Slurm job past its time limit ended as TIMEOUT: never a success",
            job: slurm_job(),
            evidence: slurm("TIMEOUT", Some("TimeLimit"), Some(15)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run ended as TIMEOUT",
        },
        Row {
            name: "a CANCELLED Slurm job with exit 0 is never a success",
            job: slurm_job(),
            evidence: slurm("CANCELLED", None, Some(0)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run ended as CANCELLED",
        },
        Row {
            name: "a COMPLETED Slurm job with exit 0 is complete under not_succeeded",
            job: slurm_job(),
            evidence: slurm("COMPLETED", None, Some(0)),
            state: State::Complete,
            bucket: None,
            says: "complete: the last run exited 0",
        },
        Row {
            name: "a Slurm end older than the last run recorded does not hide it",
            job: slurm_job(),
            evidence: Evidence {
                history: last_run(300.0, Some(("exit 0", 60.0))),
                ..slurm("FAILED", Some("NonZeroExitCode"), Some(256))
            },
            state: State::Complete,
            bucket: None,
            says: "complete: the last run exited 0",
        },
        Row {
            name: "an exit outranks a count for Slurm too: FAILED after 50 of 50 is RED",
            job: JobSpec {
                progress_file: Some(PathBuf::from("/shared/train/done.txt")),
                expected_total: Some(50),
                should_run_when: vec![Predicate::NotComplete],
                ..slurm_job()
            },
            evidence: Evidence {
                progress_file: progress(700.0, 50),
                ..slurm("FAILED", Some("NonZeroExitCode"), Some(256))
            },
            state: State::NotRunning,
            bucket: Some(Bucket::Red),
            says: "not complete: the last run exited 1 after 50 of 50",
        },
        Row {
            name: "a Slurm controller that cannot be reached is UNKNOWN, never not running",
            job: slurm_job(),
            evidence: Evidence {
                slurm: Some(Box::new(Reading::Fault(
                    "squeue cannot list the jobs: Failed while looking for jobs".into(),
                ))),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "slurm: fault: squeue cannot list the jobs",
        },
        Row {
            name: "a Slurm state this mihari does not know is UNKNOWN",
            job: slurm_job(),
            evidence: slurm("RECONFIG_FAIL", None, None),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "is not one this mihari knows",
        },
        Row {
            name: "no Slurm job of that name and no run recorded is due, never started",
            job: slurm_job(),
            evidence: Evidence {
                slurm: Some(Box::new(Reading::Empty)),
                ..Evidence::default()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "no run of it is recorded yet",
        },
        Row {
            name: "a fresh StdOut of an ended Slurm job is no sign it runs",
            job: slurm_job(),
            evidence: Evidence {
                log: log(1.0),
                ..slurm("FAILED", Some("NonZeroExitCode"), Some(256))
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "the last run exited 1",
        },
        Row {
            name: "a Slurm job forgotten by Slurm with its StdOut unknown cannot be counted",
            job: JobSpec {
                log_progress: Some(mihari::config::LogProgress::Tqdm),
                should_run_when: vec![Predicate::NotComplete],
                ..slurm_job()
            },
            evidence: Evidence {
                slurm: Some(Box::new(Reading::Empty)),
                log_progress: Some(Box::new(Reading::Fault(
                    "the job's StdOut is not known: Slurm lists no job of it".into(),
                ))),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "not_complete cannot be evaluated: log_progress: fault",
        },
        Row {
            name: "resource_free of a Slurm job holds when Slurm lists none of it",
            job: JobSpec {
                should_run_when: vec![Predicate::ResourceFree],
                ..slurm_job()
            },
            evidence: Evidence {
                slurm: Some(Box::new(Reading::Empty)),
                ..Evidence::default()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "resource_free (Slurm lists no job of it)",
        },
    ]
}

/// The kernel's reading of holder 4242's tree: `state` for 4 min, a file position that last
/// moved `moved_ago` seconds ago, and the input 'big.img' read to 43 %.
fn activity_reading(
    state: ActivityState,
    moved_ago: Option<f64>,
    unreadable: Option<&str>,
) -> ActivityReading {
    ActivityReading {
        at: now(),
        over_sec: Some(1.0),
        state,
        since: ago(240.0),
        since_seen: true,
        moved_at: moved_ago.map(ago),
        pid: 4242,
        comm: "cat".into(),
        cpu_percent: Some(100.0),
        runnable_percent: Some(100.0),
        read_bytes_per_sec: Some(0.0),
        write_bytes_per_sec: Some(0.0),
        wchan: Some("__folio_lock".into()),
        asleep_in: Some("a read on 'big.img'".into()),
        input: Some(FileProgress {
            path: "/data/big.img".into(),
            position: 43,
            size: 100,
            percent: Some(43.0),
            bytes_per_sec: Some(1.0),
            eta_sec: Some(57.0),
            writing: false,
        }),
        output: None,
        unreadable: unreadable.map(String::from),
        processes: 1,
        positions: true,
    }
}

fn activity(
    state: ActivityState,
    moved_ago: Option<f64>,
    unreadable: Option<&str>,
) -> Option<Box<Reading<ActivityReading>>> {
    Some(Box::new(Reading::Found(activity_reading(
        state, moved_ago, unreadable,
    ))))
}

/// One process of a sample: `cpu` ticks, `runnable` ms, `io` bytes, in `state`.
fn proc_sample(
    pid: u32,
    ppid: u32,
    state: char,
    cpu: u64,
    runnable_ms: u64,
    io: u64,
) -> ProcessSample {
    ProcessSample {
        pid,
        start_ticks: u64::from(pid),
        ppid,
        comm: format!("p{pid}"),
        state,
        cpu_ticks: cpu,
        runnable_ns: Some(runnable_ms * 1_000_000),
        io: Some((io, 0)),
        wchan: (state == 'S').then(|| "pipe_read".to_string()),
        asleep_in: (state == 'S').then(|| "a read on a pipe".to_string()),
        files: Vec::new(),
        unreadable: None,
    }
}

/// `process` having read `read` and written `written` bytes through its calls since it started.
fn through(mut process: ProcessSample, read: u64, written: u64) -> ProcessSample {
    process.io = Some((read, written));
    process
}

fn sample(at_ms: u64, processes: Vec<ProcessSample>) -> Sample {
    Sample {
        at: now() + Duration::milliseconds(at_ms as i64),
        boot_ms: at_ms,
        ticks_per_sec: 100,
        processes,
        positions: true,
    }
}

fn with_file(mut process: ProcessSample, pos: u64, size: u64, read: bool) -> ProcessSample {
    process.files.push(OpenFile {
        fd: 3,
        path: "/data/big.img".into(),
        dev: 1,
        ino: 2,
        pos,
        size,
        read,
        write: !read,
    });
    process
}

/// Each boundary of the judgment of two looks (`core::activity::judge`): what moved, and what a
/// quiet tree is doing, over one second.
#[test]
fn every_boundary_of_the_kernels_reading() {
    let quiet = |state| proc_sample(10, 1, state, 0, 0, 0);
    let rows: Vec<(&str, Vec<ProcessSample>, Vec<ProcessSample>, ActivityState)> = vec![
        (
            "a read position that advanced is progress",
            vec![with_file(quiet('R'), 100, 1000, true)],
            vec![with_file(through(quiet('R'), 500, 0), 600, 1000, true)],
            ActivityState::Progressing,
        ),
        (
            "an output whose own position advanced is progress",
            vec![with_file(quiet('R'), 100, 100, false)],
            vec![with_file(through(quiet('R'), 0, 200), 300, 300, false)],
            ActivityState::Progressing,
        ),
        (
            "a shared descriptor another process moved (the process wrote nothing) is not",
            vec![with_file(quiet('S'), 100, 100, false)],
            vec![with_file(quiet('S'), 900, 900, false)],
            ActivityState::Waiting,
        ),
        (
            "an output others append to (it grew, its position did not) is not",
            vec![with_file(quiet('S'), 100, 100, false)],
            vec![with_file(quiet('S'), 100, 900, false)],
            ActivityState::Waiting,
        ),
        (
            "a full CPU with no bytes through its calls is spinning",
            vec![proc_sample(10, 1, 'R', 0, 0, 0)],
            vec![proc_sample(10, 1, 'R', 100, 1000, 0)],
            ActivityState::Spinning,
        ),
        (
            "runnable all the time on a shared CPU is spinning too",
            vec![proc_sample(10, 1, 'R', 0, 0, 0)],
            vec![proc_sample(10, 1, 'R', 15, 990, 0)],
            ActivityState::Spinning,
        ),
        (
            "a full CPU moving bytes through pipes is busy, not spinning",
            vec![proc_sample(10, 1, 'R', 0, 0, 0)],
            vec![proc_sample(10, 1, 'R', 100, 1000, 1 << 20)],
            ActivityState::Busy,
        ),
        (
            "bytes through a socket with little CPU is busy",
            vec![proc_sample(10, 1, 'S', 0, 0, 0)],
            vec![proc_sample(10, 1, 'S', 1, 10, 64 << 10)],
            ActivityState::Busy,
        ),
        (
            "D state is blocked",
            vec![quiet('D')],
            vec![quiet('D')],
            ActivityState::Blocked,
        ),
        (
            "T state is stopped",
            vec![quiet('T')],
            vec![quiet('T')],
            ActivityState::Stopped,
        ),
        (
            "asleep with nothing moving is waiting, named by the leaf of the tree",
            vec![proc_sample(9, 1, 'S', 0, 0, 0), quiet('S')],
            vec![
                proc_sample(9, 1, 'S', 0, 0, 0),
                proc_sample(10, 9, 'S', 0, 0, 0),
            ],
            ActivityState::Waiting,
        ),
    ];
    for (name, before, after, want) in rows {
        let got = judge(Some(&sample(0, before)), &sample(1000, after), None)
            .unwrap_or_else(|| panic!("{name}: no reading"));
        assert_eq!(got.state, want, "{name}: {got:#?}");
        if want == ActivityState::Waiting {
            assert_eq!(got.pid, 10, "{name}: {got:#?}");
        }
        if want == ActivityState::Progressing {
            assert_eq!(got.moved_at, Some(now() + Duration::seconds(1)), "{name}");
        } else {
            assert_eq!(got.moved_at, None, "{name}: {got:#?}");
        }
    }
    // Unreadable: said so, and its positions are not taken as quiet.
    let mut hidden = quiet('S');
    hidden.unreadable = Some("cannot read '/proc/10/fd': Permission denied".into());
    let got = judge(
        Some(&sample(0, vec![hidden.clone()])),
        &sample(1000, vec![hidden]),
        None,
    )
    .expect("reading");
    assert_eq!(got.state, ActivityState::Unreadable);
    // How long: kept across looks while the state stays; a lower bound on a first look.
    let first = judge(
        Some(&sample(0, vec![quiet('D')])),
        &sample(1000, vec![quiet('D')]),
        None,
    )
    .expect("reading");
    assert!(!first.since_seen);
    let later = judge(
        Some(&sample(1000, vec![quiet('D')])),
        &sample(61_000, vec![quiet('D')]),
        Some(&Track::of(&first)),
    )
    .expect("reading");
    assert_eq!(later.since, now());
    assert!(
        later
            .words(now() + Duration::seconds(61))
            .contains("for at least 61 s"),
        "{}",
        later.words(now() + Duration::seconds(61))
    );
}

/// When the kernel is asked at all: a live holder whose other progress has been quiet for half
/// of stall_sec, looked at every quarter of it (1 s to 60 s); never with `stall_sec: never`.
#[test]
fn a_holder_is_looked_at_only_while_its_other_progress_is_quiet() {
    let holder = Some((4242, 98_765));
    assert_eq!(plan(&job(), holder, Some(149.0)), None);
    let due = plan(&job(), holder, Some(150.0)).expect("quiet for half of stall_sec");
    assert_eq!(due.every_sec, 60.0);
    assert!(
        plan(&job(), holder, None).is_some(),
        "no other reading at all"
    );
    assert_eq!(plan(&job(), None, Some(400.0)), None, "no live holder");
    let quick = JobSpec {
        stall_sec: 2,
        ..job()
    };
    assert_eq!(
        plan(&quick, holder, Some(1.0)).map(|p| p.every_sec),
        Some(1.0)
    );
    let never = JobSpec {
        stall_never: true,
        ..job()
    };
    assert_eq!(plan(&never, holder, Some(4000.0)), None);
}

#[test]
fn exited_0_short_of_its_total_is_a_broken_rule_in_words() {
    let job = JobSpec {
        expected_total: Some(260),
        should_run_when: vec![Predicate::NotComplete],
        ..job()
    };
    let evidence = Evidence {
        progress_file: progress(60.0, 59),
        ..ran(last_run(120.0, Some(("exit 0", 60.0))))
    };
    let got = assess(&job, &evidence, now());
    assert!(
        got.reasons
            .iter()
            .any(|r| r.starts_with("rule broken: exited 0 at 59 of 260")),
        "{:?}",
        got.reasons
    );
    assert_eq!(got.last_exit.as_ref().and_then(|e| e.code), Some(0));
}

#[test]
fn a_paused_job_is_listed_after_the_rest_and_never_holds_dispatch() {
    let paused = Evidence {
        checks: vec![check(CheckResult::Fail)],
        history: History {
            paused: Some(note(60.0, "hold")),
            ..History::default()
        },
        ..alive(1.0, 1.0)
    };
    let list = order(vec![
        named("a_paused", paused),
        named("b_running", alive(1.0, 1.0)),
        named("c_dispatch", not_holding()),
    ]);
    let ids: Vec<&str> = list.rows().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["c_dispatch", "b_running", "a_paused"]);
    assert_eq!(
        list.dispatch_held, None,
        "a paused job's failing check holds nothing"
    );
    let row = list.rows().last().expect("a row");
    assert_eq!(row.paused.as_ref().map(|p| p.by.as_str()), Some("alice"));
}

#[test]
fn every_boundary_of_spec_section_4() {
    let mut failures = Vec::new();
    for row in rows() {
        let got = assess(&row.job, &row.evidence, now());
        let first = got.reasons.first().cloned().unwrap_or_default();
        if got.state != row.state || got.bucket != row.bucket || !first.contains(row.says) {
            failures.push(format!(
                "{}:\n  want {:?} {:?} saying '{}'\n  got  {:?} {:?} {:?}",
                row.name, row.state, row.bucket, row.says, got.state, got.bucket, got.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_303_second_case_reports_the_log_as_the_progress_source() {
    let got = assess(&job(), &alive(10.0, 303.0), now());
    assert_eq!(got.state, State::Running);
    assert_eq!(got.progress_source, Some(ProgressSource::Log));
    assert_eq!(got.progress_age_sec, Some(10.0));
    assert_eq!(got.liveness, Some(Liveness::Alive));
    assert_eq!(got.pid, Some(4242));
    assert_eq!(got.done, Some(1200));
}

#[test]
fn a_fault_is_named_in_reasons_with_the_word_fault_and_its_error() {
    let evidence = Evidence {
        progress_file: fault(),
        ..alive(5.0, 0.0)
    };
    let got = assess(&job(), &evidence, now());
    assert!(
        got.reasons
            .iter()
            .any(|r| r.contains("progress_file: fault") && r.contains("Is a directory")),
        "{:?}",
        got.reasons
    );
    assert_eq!(got.done, None, "a faulty count is not known, and never 0");
}

#[test]
fn failing_check_reason_carries_the_checks_words() {
    let evidence = Evidence {
        checks: vec![check(CheckResult::Fail)],
        ..alive(1.0, 1.0)
    };
    let got = assess(&job(), &evidence, now());
    assert!(
        got.reasons
            .iter()
            .any(|r| r == "check 'no_gaps' failed: exit 1: gap at shard 120")
    );
}

fn named(id: &str, evidence: Evidence) -> mihari::core::Assessment {
    let spec = JobSpec {
        id: id.into(),
        ..job()
    };
    assess(&spec, &evidence, now())
}

#[test]
fn the_action_list_is_always_restart_red_stale_dispatch_then_the_rest() {
    let assessments = vec![
        named("a_running", alive(1.0, 1.0)),
        named("b_dispatch", not_holding()),
        named(
            "c_stalled",
            Evidence {
                ..alive(999.0, 999.0)
            },
        ),
        named(
            "d_red",
            Evidence {
                checks: vec![check(CheckResult::Fail)],
                ..alive(1.0, 1.0)
            },
        ),
        named(
            "e_dead",
            Evidence {
                lock: Some(holder(Liveness::Dead, 9.0)),
                ..alive(1.0, 1.0)
            },
        ),
        named(
            "f_stalled_too",
            Evidence {
                ..alive(999.0, 999.0)
            },
        ),
    ];
    let list = order(assessments);
    let ids: Vec<&str> = list.rows().map(|a| a.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "e_dead",
            "d_red",
            "c_stalled",
            "f_stalled_too",
            "b_dispatch",
            "a_running"
        ]
    );
    assert_eq!(list.dispatch_held.as_deref(), Some("RED: d_red"));
    let dispatch: Vec<_> = list.bucket(Bucket::Dispatch).collect();
    assert!(dispatch[0].held.as_deref().unwrap().contains("held"));
    assert_eq!(list.worst(), Some(Bucket::Restart));
}

#[test]
fn dispatch_is_not_held_while_nothing_is_red() {
    let list = order(vec![
        named("a", not_holding()),
        named("b", alive(999.0, 999.0)),
    ]);
    assert_eq!(list.dispatch_held, None);
    assert!(list.rows().all(|a| a.held.is_none()));
    assert_eq!(list.worst(), Some(Bucket::Stale));
}

/// One row of the evidence boundaries of issue 10: the first reason says why the state is
/// what it is, and another reason names the source's part.
struct Boundary {
    name: &'static str,
    job: JobSpec,
    evidence: Evidence,
    state: State,
    bucket: Option<Bucket>,
    /// Words the first reason must contain.
    says: &'static str,
    /// Words some reason must contain.
    also: &'static str,
}

fn carried(secs_ago: f64, from: Carried) -> Option<Reading<FileStamp>> {
    Some(Reading::Found(FileStamp {
        modified: ago(secs_ago),
        len: 0,
        carried: Some(from),
    }))
}

fn table_job() -> JobSpec {
    JobSpec {
        progress_file: None,
        progress_table: Some(ProgressTable {
            done_column: Some("done".into()),
            total_column: Some("total".into()),
            ..ProgressTable::new("/data/status.sqlite", "status", "updated_at")
        }),
        expected_total: None,
        ..job()
    }
}

fn table(secs_ago: f64, done: u64, total: Option<u64>) -> Option<Reading<TableReading>> {
    Some(Reading::Found(TableReading {
        newest: ago(secs_ago),
        rows: 1,
        done: Some(done),
        total,
    }))
}

fn boundaries() -> Vec<Boundary> {
    let rotated = || Carried::Rotated(PathBuf::from("/var/log/collect.log.1"));
    vec![
        Boundary {
            name: "a time a minute ahead is clock skew: age 0",
            job: job(),
            evidence: alive(-60.0, 400.0),
            state: State::Running,
            bucket: None,
            says: "progress 0 s ago (log)",
            also: "progress 0 s ago",
        },
        Boundary {
            name: "a log stamped more than 60 s ahead is a fault, never age 0",
            job: job(),
            evidence: alive(-61.0, 400.0),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot tell a stall",
            also: "log: fault: its last write is 2026-11-29 09:01:01 (UTC), in the future by 61 s: \
                   clock or time zone?",
        },
        Boundary {
            name: "a frozen writer whose naive local times read 9 h ahead never looks fresh",
            job: table_job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 3600.0)),
                log: log(900.0),
                progress_table: table(-9.0 * 3600.0 + 5.0, 10, Some(260)),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "but progress_table could not be read",
            also: "in time_zone 'local', numbers in time_unit 's') is 2026-11-29 17:59:55 (UTC), in \
                   the future by 9 h 00 min: clock or time zone?",
        },
        Boundary {
            name: "a rotated predecessor fresher than the empty log carries the last write",
            job: job(),
            evidence: Evidence {
                log: carried(2.0, rotated()),
                ..alive(0.0, 400.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 2 s ago (log)",
            also: "log: last write 2 s ago, in '/var/log/collect.log.1' (rotated)",
        },
        Boundary {
            name: "a last write remembered from before the rotation carries it too",
            job: job(),
            evidence: Evidence {
                log: carried(3.0, Carried::Remembered),
                ..alive(0.0, 400.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 3 s ago (log)",
            also: "log: last write 3 s ago, before '/var/log/collect.log' was rotated or replaced",
        },
        Boundary {
            name: "a rotated write from before the holder started belongs to an earlier run",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 12.0)),
                log: carried(400.0, rotated()),
                progress_file: Some(Reading::Empty),
                ..Evidence::default()
            },
            state: State::Running,
            bucket: None,
            says: "progress 12 s ago (holder_start)",
            also: "not counted: the holder started after it",
        },
        Boundary {
            name: "a missing log with a live holder is not a stall: the path may be wrong",
            job: job(),
            evidence: Evidence {
                lock: Some(holder(Liveness::Alive, 400.0)),
                log: Some(Reading::Empty),
                log_missing: Some("'/var/log/collect.log' does not exist".into()),
                progress_file: Some(Reading::Empty),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "but the log is missing: '/var/log/collect.log' does not exist",
            also: "log: missing: '/var/log/collect.log' does not exist",
        },
        Boundary {
            name: "a missing log of a job not started is named missing, not empty",
            job: job(),
            evidence: Evidence {
                log_missing: Some("'/var/log/collect.log' does not exist".into()),
                ..not_holding()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "not running, but should",
            also: "log: missing: '/var/log/collect.log' does not exist",
        },
        Boundary {
            name: "a heartbeat counts toward the progress age",
            job: job(),
            evidence: Evidence {
                heartbeat: Some(Box::new(Reading::Found(HeartbeatReading {
                    at: ago(5.0),
                    done: None,
                    total: None,
                    position: None,
                    note: None,
                }))),
                ..alive(400.0, 400.0)
            },
            state: State::Running,
            bucket: None,
            says: "progress 5 s ago (heartbeat)",
            also: "heartbeat",
        },
        Boundary {
            name: "a status row's done and total decide completion without expected_total",
            job: table_job(),
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                progress_table: table(30.0, 260, Some(260)),
                ..Evidence::default()
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 260 of 260 done",
            also: "complete",
        },
        Boundary {
            name: "a status row short of its total should run",
            job: table_job(),
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                progress_table: table(30.0, 59, Some(260)),
                ..Evidence::default()
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "not_complete (59 of 260 done)",
            also: "not running, but should",
        },
        Boundary {
            name: "a status row with no total yet cannot say whether it is complete",
            job: table_job(),
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                progress_table: table(30.0, 59, None),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "total_column is NULL in its newest row",
            also: "cannot tell whether it should run",
        },
    ]
}

#[test]
fn every_boundary_of_the_evidence_rows_of_issue_10() {
    let mut failures = Vec::new();
    for row in boundaries() {
        let got = assess(&row.job, &row.evidence, now());
        let first = got.reasons.first().cloned().unwrap_or_default();
        let also = got.reasons.iter().any(|r| r.contains(row.also));
        if got.state != row.state || got.bucket != row.bucket || !first.contains(row.says) || !also
        {
            failures.push(format!(
                "{}:\n  want {:?} {:?} saying '{}' and '{}'\n  got  {:?} {:?} {:?}",
                row.name,
                row.state,
                row.bucket,
                row.says,
                row.also,
                got.state,
                got.bucket,
                got.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_total_the_table_reports_is_the_expected_total() {
    let evidence = Evidence {
        lock: Some(Reading::Empty),
        log: log(30.0),
        progress_table: table(30.0, 59, Some(260)),
        ..Evidence::default()
    };
    let got = assess(&table_job(), &evidence, now());
    assert_eq!((got.done, got.expected_total), (Some(59), Some(260)));
    let declared = JobSpec {
        expected_total: Some(300),
        ..table_job()
    };
    let got = assess(&declared, &evidence, now());
    assert_eq!(got.expected_total, Some(300), "a declared total wins");
}

/// The watcher's passes (hardening, round three, item 4): a watcher whose process lived while
/// its only loop hung in open(2) read as alive. One row per boundary of `stuck_for`: a watcher
/// that recorded a pass within five minutes passes; past that it is stuck, and says since when;
/// a last pass ahead of now (a clock stepped back) is not stuck.
#[test]
fn a_watcher_is_stuck_only_past_five_minutes_without_a_recorded_pass() {
    use mihari::core::watch::{PASS_BEAT_SEC, STUCK_AFTER_SEC, stuck_for};
    // A few missed beats, never one.
    const { assert!(STUCK_AFTER_SEC >= 4 * PASS_BEAT_SEC) };
    let rows: &[(&str, f64, Option<i64>)] = &[
        ("just passed", 0.0, None),
        ("one beat ago", PASS_BEAT_SEC as f64, None),
        ("exactly five minutes ago", 300.0, None),
        ("half a second past five minutes", 300.5, Some(300_500)),
        ("seven minutes ago: the incident", 420.0, Some(420_000)),
        ("ahead of now: a clock stepped back", -30.0, None),
    ];
    for &(name, secs_ago, stuck_ms) in rows {
        let got = stuck_for(ago(secs_ago), now()).map(|ago| ago.num_milliseconds());
        assert_eq!(got, stuck_ms, "{name}");
    }
}

/// A watcher's loop that woke for its beat alone passes only when the wall clock moved other
/// than time did: a clock set back a day would otherwise leave the digest's next cut a day
/// late until something happened.
#[test]
fn a_beat_alone_passes_only_when_the_wall_clock_moved_other_than_time_did() {
    use mihari::core::watch::clock_moved;
    use std::time::Duration as Elapsed;
    let rows: &[(&str, i64, u64, bool)] = &[
        ("a minute on both clocks", 60_000, 60_000, false),
        ("a slew of a second", 61_000, 60_000, false),
        ("stepped forward an hour", 3_660_000, 60_000, true),
        ("set back a day", 60_000 - 86_400_000, 60_000, true),
        ("stepped back three seconds", 57_000, 60_000, true),
    ];
    for &(name, wall_ms, elapsed_ms, moved) in rows {
        assert_eq!(
            clock_moved(
                chrono::TimeDelta::milliseconds(wall_ms),
                Elapsed::from_millis(elapsed_ms)
            ),
            moved,
            "{name}"
        );
    }
}

/// A download job reading wget's meter from its log, with no total of its own.
fn meter_job() -> JobSpec {
    JobSpec {
        progress_file: None,
        expected_total: None,
        log_progress: Some(LogProgress::Wget),
        stall_sec: 300,
        should_run_when: vec![Predicate::NotComplete],
        ..job()
    }
}

/// What the log's meter read: `done` bytes at `percent`, its figure last moved between
/// `earliest` and `latest` seconds ago (`None`: not known), the log redrawn `redrawn` seconds
/// ago (`None`: the newest frame is the move), and a per-file fall when `fell`.
fn meter(
    done: Option<u64>,
    percent: f64,
    latest: f64,
    earliest: Option<f64>,
    redrawn: Option<f64>,
    fell: bool,
) -> Option<Box<Reading<LogProgressReading>>> {
    Some(Box::new(Reading::Found(LogProgressReading {
        done,
        total: None,
        percent: Some(percent),
        rate_per_sec: Some(412_000.0),
        remaining_sec: Some(40.0),
        frame: "big.bin  31%[=====>   ]   1.51M  --.-KB/s    eta 27s".into(),
        from: None,
        figure: if done.is_some() {
            Figure::Bytes
        } else {
            Figure::Percent
        },
        moved: Some(Moved {
            latest: ago(latest),
            earliest: earliest.map(ago),
            redrawn_at: redrawn.map(ago),
            value: done.map_or(percent, |d| d as f64),
        }),
        // Per file: rsync --progress's bytes and its percent fall with each new file.
        fell: fell.then_some(match done {
            Some(_) => Fall {
                from: 200_000.0,
                to: 32_768.0,
            },
            None => Fall {
                from: 100.0,
                to: 16.0,
            },
        }),
    })))
}

/// A live holder whose log was last written `log_ago`, with `reading` from its meter.
fn metered(log_ago: f64, reading: Option<Box<Reading<LogProgressReading>>>) -> Evidence {
    Evidence {
        lock: Some(holder(Liveness::Alive, 3600.0)),
        log: log(log_ago),
        log_progress: reading,
        ..Evidence::default()
    }
}

fn meter_boundaries() -> Vec<Boundary> {
    let bytes = Some(1_583_350);
    vec![
        Boundary {
            name: "a meter redrawn 1 s ago over bytes that stood 6 min is STALLED (the frozen \
                   server)",
            job: meter_job(),
            evidence: metered(
                1.0,
                meter(bytes, 31.0, 360.0, Some(361.0), Some(1.0), false),
            ),
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "no progress for 361 s (freshest: log",
            also: "its meter redraws (last 1 s ago) but has read 1,583,350 bytes for 361 s",
        },
        Boundary {
            name: "a meter whose newest frame moved it is RUNNING, aged from the log",
            job: meter_job(),
            evidence: metered(1.0, meter(bytes, 31.0, 1.0, Some(1.0), None, false)),
            state: State::Running,
            bucket: None,
            says: "progress 1 s ago (log)",
            also: "progress 1 s ago",
        },
        Boundary {
            name: "a redrawn meter with no clock and no earlier look is UNKNOWN, never fresh",
            job: meter_job(),
            evidence: metered(1.0, meter(bytes, 31.0, 1.0, None, Some(1.0), false)),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "cannot tell a stall from a slow meter",
            also: "at most 1 s ago, and nothing tells how much earlier",
        },
        Boundary {
            name: "a redrawn meter that moved between two looks within stall_sec is RUNNING",
            job: meter_job(),
            evidence: metered(1.0, meter(bytes, 31.0, 1.0, Some(200.0), Some(1.0), false)),
            state: State::Running,
            bucket: None,
            says: "progress 200 s ago (log)",
            also: "progress 200 s ago",
        },
        Boundary {
            name: "a redrawn meter that moved between two looks either side of stall_sec is \
                   UNKNOWN",
            job: meter_job(),
            evidence: metered(
                1.0,
                meter(bytes, 31.0, 100.0, Some(400.0), Some(1.0), false),
            ),
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "between 100 s and 400 s ago",
            also: "cannot tell a stall from a slow meter",
        },
        Boundary {
            name: "a redrawn meter whose latest possible move is past stall_sec is STALLED, \
                   even with no earliest known",
            job: meter_job(),
            evidence: metered(1.0, meter(bytes, 31.0, 301.0, None, Some(1.0), false)),
            state: State::Stalled,
            bucket: Some(Bucket::Stale),
            says: "no progress for 301 s (freshest: log",
            also: "has read 1,583,350 bytes for at least 301 s",
        },
        Boundary {
            name: "a meter that stood but is followed by other lines is aged by the log's write",
            job: meter_job(),
            evidence: metered(2.0, meter(bytes, 31.0, 600.0, Some(600.0), None, false)),
            state: State::Running,
            bucket: None,
            says: "progress 2 s ago (log)",
            also: "progress 2 s ago",
        },
        Boundary {
            name: "a per-file percent that fell, at 100, is not COMPLETE (rsync --progress \
                   killed at file 20 of 60)",
            job: JobSpec {
                log_progress: Some(LogProgress::Percent),
                ..meter_job()
            },
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                log_progress: meter(None, 100.0, 30.0, Some(30.0), None, true),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "its log's percent fell from 100 % to 16 %",
            also: "for rsync use --info=progress2 and preset rsync",
        },
        Boundary {
            name: "a percent at 100 that never fell is COMPLETE",
            job: JobSpec {
                log_progress: Some(LogProgress::Percent),
                ..meter_job()
            },
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                log_progress: meter(None, 100.0, 30.0, Some(30.0), None, false),
                ..Evidence::default()
            },
            state: State::Complete,
            bucket: None,
            says: "complete: 100% done, as its log prints",
            also: "complete",
        },
        Boundary {
            name: "a byte count that fell (rsync --progress read by preset rsync) is not due \
                   by its percent either",
            job: JobSpec {
                log_progress: Some(LogProgress::Rsync),
                ..meter_job()
            },
            evidence: Evidence {
                lock: Some(Reading::Empty),
                log: log(30.0),
                log_progress: meter(bytes, 40.0, 30.0, Some(30.0), None, true),
                ..Evidence::default()
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "its log's byte count fell from 200,000 bytes to 32,768 bytes",
            also: "not progress",
        },
    ]
}

#[test]
fn every_boundary_of_a_reading_that_must_move_to_be_progress() {
    let mut failures = Vec::new();
    for row in meter_boundaries() {
        let got = assess(&row.job, &row.evidence, now());
        let first = got.reasons.first().cloned().unwrap_or_default();
        let also = got.reasons.iter().any(|r| r.contains(row.also));
        if got.state != row.state || got.bucket != row.bucket || !first.contains(row.says) || !also
        {
            failures.push(format!(
                "{}:\n  want {:?} {:?} saying '{}' and '{}'\n  got  {:?} {:?} {:?}",
                row.name,
                row.state,
                row.bucket,
                row.says,
                row.also,
                got.state,
                got.bucket,
                got.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_meter_with_no_total_gives_the_rate_and_time_left_it_prints() {
    let got = assess(
        &meter_job(),
        &metered(
            1.0,
            meter(Some(1_583_350), 31.0, 1.0, Some(1.0), None, false),
        ),
        now(),
    );
    assert_eq!(got.state, State::Running);
    assert_eq!(got.rate_per_sec, Some(412_000.0));
    assert_eq!(got.eta_sec, Some(40.0));
    assert_eq!(got.percent, Some(31.0));
}

#[test]
fn the_machine_leaves_a_run_that_ended_short_failed_after_its_total_or_in_a_failed_phase_to_a_human()
 {
    use mihari::core::auto::{AutoVerdict, auto_restart};
    let auto = |job: JobSpec| JobSpec {
        auto_restart: true,
        auto_restart_reason: Some("cause known: flaky upstream; procedure: rerun".into()),
        ..job
    };
    let cases = [
        (
            "exited 0 at 59 of 260",
            auto(JobSpec {
                expected_total: Some(260),
                should_run_when: vec![Predicate::NotComplete],
                ..job()
            }),
            Evidence {
                progress_file: progress(61.0, 59),
                ..ran(last_run(120.0, Some(("exit 0", 60.0))))
            },
        ),
        (
            "exited 1 after 50 of 50",
            auto(counted_job(vec![Predicate::NotSucceeded])),
            counted_run(50, "exit 1"),
        ),
        (
            "phase 'publish' failed",
            auto(JobSpec {
                should_run_when: vec![Predicate::NotSucceeded],
                ..phased_job()
            }),
            Evidence {
                manifest: phases(60.0, "publish"),
                ..ran(last_run(120.0, Some(("exit 3", 60.0))))
            },
        ),
    ];
    for (words, job, evidence) in cases {
        let row = assess(&job, &evidence, now());
        assert_eq!(
            row.state,
            State::ShouldBeRunning,
            "{words}: {:?}",
            row.reasons
        );
        assert_eq!(row.bucket, Some(Bucket::Red), "{words}: {:?}", row.reasons);
        match auto_restart(&job, &row, &evidence.history, 6, now()) {
            AutoVerdict::NotAllowed(why) => assert!(why.contains(words), "{why}"),
            other => panic!("{words}: the machine would act: {other:?}"),
        }
    }
    // A crash short of its total stays the machine's to restart.
    let job = auto(counted_job(vec![Predicate::NotComplete]));
    let evidence = counted_run(30, "exit 1");
    let row = assess(&job, &evidence, now());
    assert_eq!(row.restart_by_hand, None, "{:?}", row.reasons);
    assert_eq!(
        auto_restart(&job, &row, &evidence.history, 6, now()),
        AutoVerdict::Now
    );
}

/// The kernel's reading never counts the growth of a file another source judges: a curl meter
/// redrawn into its log under `mihari run` grew the log 78 B/s while the server was frozen,
/// and the io source called that "writing 'fetch.log'", progress — the frozen download read
/// RUNNING again. The log (and its rotated names), the progress file, the manifest, the
/// progress table's database, the lock, the markers and mihari's own state folder are left out.
#[test]
fn the_files_other_sources_judge_are_never_the_kernels_progress() {
    use mihari::core::activity::not_progress;
    let job = JobSpec {
        log: Some(PathBuf::from("/srv/fetch/fetch.log")),
        lock: Some(PathBuf::from("/srv/fetch/fetch.lock")),
        ..job()
    };
    let skipped = not_progress(&job, std::path::Path::new("/var/lib/mihari"));
    let covers = |path: &str| {
        skipped
            .iter()
            .any(|p| path.starts_with(p.to_str().unwrap()))
    };
    for path in [
        "/srv/fetch/fetch.log",
        "/srv/fetch/fetch.log.1",
        "/srv/fetch/fetch.log-20261201",
        "/srv/fetch/fetch.lock",
        "/var/lib/mihari/mihari.sqlite",
        "/var/lib/mihari/mihari.sqlite-wal",
    ] {
        assert!(
            covers(path),
            "{path} is judged elsewhere, never io progress"
        );
    }
    for path in ["/srv/fetch/big.iso", "/var/lib/mihari-data/big.iso"] {
        assert!(!covers(path), "{path} is the job's own work");
    }
}

/// The words a row of the action list carries (`core::why::headline`): one row per bucket and
/// per kind of reason in it. A RED job whose process lives says which check failed (the
/// `gaps` row that read as a green RUNNING), a stalled one what the kernel says it does, and
/// none of them an age, which a live column shows instead.
#[test]
fn every_row_says_why_in_a_few_words_and_no_age() {
    use mihari::core::why::headline;
    let rows: Vec<(&str, Evidence, &str)> = vec![
        (
            "a failing check with a live process",
            Evidence {
                checks: vec![check(CheckResult::Fail)],
                ..alive(1.0, 1.0)
            },
            "check 'no_gaps' failed",
        ),
        (
            "a dead holder and its lock",
            Evidence {
                lock: Some(holder(Liveness::Dead, 100.0)),
                ..alive(100.0, 100.0)
            },
            "pid 4242 dead, lock left",
        ),
        (
            "a stalled holder spinning",
            Evidence {
                activity: activity(ActivityState::Spinning, None, None),
                ..alive(400.0, 400.0)
            },
            "no progress · spinning",
        ),
        (
            "a stalled holder stopped",
            Evidence {
                activity: activity(ActivityState::Stopped, None, None),
                ..alive(400.0, 400.0)
            },
            "no progress · stopped",
        ),
        (
            "a source that cannot be read",
            Evidence {
                progress_file: Some(Reading::Fault("permission denied".into())),
                ..alive(400.0, 400.0)
            },
            "progress_file: fault, cannot tell",
        ),
        (
            "a check that could not run",
            Evidence {
                checks: vec![check(CheckResult::Fault)],
                ..alive(1.0, 1.0)
            },
            "check 'no_gaps': fault",
        ),
        (
            "never started",
            not_holding(),
            "never started: ready to dispatch",
        ),
        ("a running job needs nothing", alive(1.0, 1.0), ""),
    ];
    let an_age = regex::Regex::new(r"\d+ (s|min)\b").unwrap();
    for (name, evidence, want) in rows {
        let row = assess(&job(), &evidence, now());
        let said = headline(&row);
        assert_eq!(said, want, "{name}: {:#?}", row.reasons);
        assert!(!an_age.is_match(&said), "{name}: an age in '{said}'");
    }
}

// ---------------------------------------------------------------------------------------------
// Jobs that run on a schedule (SPEC §2 `schedule` and `overdue`, §4): idle between runs by plan,
// overdue when a run is missed or failed.

/// A job run by a crontab line or a timer, `every` or at the times of `cron`, with `grace`.
fn scheduled(cadence: Cadence, grace_sec: u64) -> JobSpec {
    JobSpec {
        progress_file: None,
        expected_total: None,
        should_run_when: vec![Predicate::Overdue],
        schedule: Some(Schedule {
            cadence,
            grace_sec,
            time_zone: TimeZoneName::Utc,
        }),
        ..job()
    }
}

fn every_20m() -> JobSpec {
    scheduled(Cadence::Every { sec: 1200 }, 300)
}

fn cron(expression: &str, zone: TimeZoneName) -> JobSpec {
    let mut job = scheduled(
        Cadence::Cron {
            expression: mihari::config::CronExpr::parse(expression).expect("parses"),
        },
        300,
    );
    if let Some(schedule) = &mut job.schedule {
        schedule.time_zone = zone;
    }
    job
}

/// Between runs: no holder, its log written when the last run ended. `ended` is how the last
/// run ended and how long ago; `success_ago` when the last success ended.
fn between_runs(ended: Option<(&str, f64)>, success_ago: Option<f64>) -> Evidence {
    Evidence {
        lock: Some(Reading::Empty),
        log: log(ended.map_or(3600.0, |(_, ago)| ago)),
        history: History {
            last_run: ended.map(|(words, secs)| LastRun {
                started: None,
                exit: Some(RunExit::from_words(words, ago(secs))),
            }),
            last_success: success_ago.map(ago),
            ..History::default()
        },
        ..Evidence::default()
    }
}

/// Never run: nothing recorded of it but, maybe, when mihari first saw it.
fn never_run(first_seen_ago: Option<f64>) -> Evidence {
    Evidence {
        lock: Some(Reading::Empty),
        log: Some(Reading::Empty),
        history: History {
            first_seen: first_seen_ago.map(ago),
            ..History::default()
        },
        ..Evidence::default()
    }
}

fn schedule_rows() -> Vec<Row> {
    let no_lock = JobSpec {
        lock: None,
        ..every_20m()
    };
    vec![
        Row {
            name: "every: a run that ended ok 10 min ago is NOT_RUNNING with its next due time",
            job: every_20m(),
            evidence: between_runs(Some(("exit 0", 600.0)), Some(600.0)),
            state: State::NotRunning,
            bucket: None,
            says: "ran 2026-11-29 08:50:00 UTC ok; next due by 2026-11-29 09:15:00 UTC (due every \
                   20 min + 5 min grace)",
        },
        Row {
            name: "every: a second before every + grace it is not overdue",
            job: every_20m(),
            evidence: between_runs(Some(("exit 0", 1499.0)), Some(1499.0)),
            state: State::NotRunning,
            bucket: None,
            says: "next due by 2026-11-29 09:00:01 UTC",
        },
        Row {
            name: "every: at every + grace it is overdue, in RESTART (a cron line that stopped \
                   firing)",
            job: every_20m(),
            evidence: between_runs(Some(("exit 0", 1500.0)), Some(1500.0)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "overdue: the last success was 2026-11-29 08:35:00 UTC, due every 20 min + 5 \
                   min grace",
        },
        Row {
            name: "a failed last run is overdue at once, naming its exit",
            job: every_20m(),
            evidence: between_runs(Some(("exit 1", 60.0)), Some(600.0)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "overdue: the last run exited 1 at 2026-11-29 08:59:00 UTC; the last success \
                   was 2026-11-29 08:50:00 UTC",
        },
        Row {
            name: "a last run killed by a signal is overdue at once, naming the signal",
            job: every_20m(),
            evidence: between_runs(Some(("killed by SIGKILL", 60.0)), None),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "overdue: the last run was killed by SIGKILL at 2026-11-29 08:59:00 UTC; no \
                   success is recorded",
        },
        Row {
            name: "cron: between two times, due by the next time + grace",
            job: cron("*/20 * * * *", TimeZoneName::Utc),
            evidence: between_runs(Some(("exit 0", 1170.0)), Some(1170.0)),
            state: State::NotRunning,
            bucket: None,
            says: "ran 2026-11-29 08:40:30 UTC ok; next due by 2026-11-29 09:05:00 UTC (cron \
                   '*/20 * * * *' in UTC time + 5 min grace)",
        },
        Row {
            name: "cron: a missed time stays overdue while a later time's grace runs",
            job: cron("*/20 * * * *", TimeZoneName::Utc),
            evidence: between_runs(Some(("exit 0", 2370.0)), Some(2370.0)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "overdue: the last success was 2026-11-29 08:20:30 UTC, due at 2026-11-29 \
                   08:40:00 UTC",
        },
        Row {
            name: "a due time kept from before the jobs file changed the schedule is not used",
            job: every_20m(),
            evidence: Evidence {
                history: History {
                    due_after: mihari::core::schedule::DueAfter::of(
                        &scheduled(Cadence::Every { sec: 86_400 }, 300)
                            .schedule
                            .expect("a schedule"),
                        Some(ago(1500.0)),
                        None,
                    )
                    .map(std::sync::Arc::new),
                    ..between_runs(Some(("exit 0", 1500.0)), Some(1500.0)).history
                },
                ..between_runs(Some(("exit 0", 1500.0)), Some(1500.0))
            },
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Restart),
            says: "overdue: the last success was 2026-11-29 08:35:00 UTC, due every 20 min",
        },
        Row {
            name: "never run, first seen 30 min ago: overdue, in DISPATCH (a crontab line that \
                   never fired)",
            job: every_20m(),
            evidence: never_run(Some(1800.0)),
            state: State::ShouldBeRunning,
            bucket: Some(Bucket::Dispatch),
            says: "overdue: no run has ended with exit 0 since mihari first saw it at 2026-11-29 \
                   08:30:00 UTC",
        },
        Row {
            name: "never run, first seen 10 min ago: due one period after mihari first saw it",
            job: every_20m(),
            evidence: never_run(Some(600.0)),
            state: State::NotRunning,
            bucket: None,
            says: "no run recorded yet; due by 2026-11-29 09:15:00 UTC",
        },
        Row {
            name: "never run and never seen by a watcher: not overdue, and says why",
            job: every_20m(),
            evidence: never_run(None),
            state: State::NotRunning,
            bucket: None,
            says: "no record of when mihari first saw it",
        },
        Row {
            name: "an event log that cannot be read is UNKNOWN, never overdue",
            job: every_20m(),
            evidence: Evidence {
                history: History {
                    unreadable: Some("database disk image is malformed".into()),
                    ..History::default()
                },
                ..never_run(Some(1800.0))
            },
            state: State::Unknown,
            bucket: Some(Bucket::Stale),
            says: "overdue cannot be evaluated: the event log cannot be read",
        },
        Row {
            name: "a run that holds the lock past its due time is RUNNING",
            job: every_20m(),
            evidence: Evidence {
                history: between_runs(Some(("exit 0", 3600.0)), Some(3600.0)).history,
                ..alive(2.0, 2.0)
            },
            state: State::Running,
            bucket: None,
            says: "lock held by pid 4242, alive",
        },
        Row {
            name: "a scheduled job that counted its whole total is not COMPLETE between runs",
            job: JobSpec {
                progress_file: Some(PathBuf::from("/data/out.jsonl")),
                expected_total: Some(1200),
                ..every_20m()
            },
            evidence: Evidence {
                progress_file: progress(600.0, 1200),
                ..between_runs(Some(("exit 0", 600.0)), Some(600.0))
            },
            state: State::NotRunning,
            bucket: None,
            says: "ran 2026-11-29 08:50:00 UTC ok",
        },
        Row {
            name: "overdue while its resource is busy: not due, saying both",
            job: JobSpec {
                should_run_when: vec![Predicate::Overdue, Predicate::ResourceFree],
                resource_lock: Some(PathBuf::from("/run/gpu0.lock")),
                ..every_20m()
            },
            evidence: Evidence {
                resource_lock: Some(Box::new(holder(Liveness::Alive, 60.0))),
                ..between_runs(Some(("exit 0", 3600.0)), Some(3600.0))
            },
            state: State::NotRunning,
            bucket: None,
            says: "not due: resource_free is false: pid 4242 holds it, alive; though overdue",
        },
        Row {
            name: "no lock declared: a fresh log written before the run reported its end is not \
                   a run",
            job: no_lock.clone(),
            evidence: Evidence {
                lock: None,
                log: log(5.0),
                ..between_runs(Some(("exit 0", 4.0)), Some(4.0))
            },
            state: State::NotRunning,
            bucket: None,
            says: "ran 2026-11-29 08:59:56 UTC ok",
        },
        Row {
            name: "no lock declared: a log written after the last run's end is a new run",
            job: no_lock,
            evidence: Evidence {
                lock: None,
                log: log(5.0),
                ..between_runs(Some(("exit 0", 60.0)), Some(60.0))
            },
            state: State::Running,
            bucket: None,
            says: "no lock declared; progress 5 s ago (log) counts as running",
        },
    ]
}

#[test]
fn every_boundary_of_a_schedule() {
    let mut failures = Vec::new();
    for row in schedule_rows() {
        let got = assess(&row.job, &row.evidence, now());
        let first = got.reasons.first().cloned().unwrap_or_default();
        if got.state != row.state || got.bucket != row.bucket || !first.contains(row.says) {
            failures.push(format!(
                "{}:\n  want {:?} {:?} saying '{}'\n  got  {:?} {:?} {:?}",
                row.name, row.state, row.bucket, row.says, got.state, got.bucket, got.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn next_due_is_the_moment_a_scheduled_job_turns_overdue_and_none_without_a_schedule() {
    let got = assess(
        &every_20m(),
        &between_runs(Some(("exit 0", 600.0)), Some(600.0)),
        now(),
    );
    assert_eq!(got.next_due, Some(ago(600.0) + Duration::minutes(25)));
    let failed = assess(
        &every_20m(),
        &between_runs(Some(("exit 2", 60.0)), Some(600.0)),
        now(),
    );
    assert_eq!(
        failed.next_due,
        Some(ago(60.0)),
        "due since the failed run ended"
    );
    assert_eq!(assess(&job(), &not_holding(), now()).next_due, None);
    assert_eq!(assess(&every_20m(), &never_run(None), now()).next_due, None);
}

#[test]
fn a_missed_run_is_told_as_a_job_the_machine_cannot_restart_unless_auto_restart_allows_it() {
    use mihari::core::auto::AutoVerdict;
    use mihari::core::escalate::{EscalationKind, conditions};
    let job = JobSpec {
        restart: Some(mihari::config::RestartSpec {
            command: Some(vec!["/usr/local/bin/nightly".into()]),
            cwd: None,
            env: Default::default(),
            routes: vec![],
        }),
        ..every_20m()
    };
    let row = assess(
        &job,
        &between_runs(Some(("exit 0", 3600.0)), Some(3600.0)),
        now(),
    );
    assert_eq!(row.state, State::ShouldBeRunning);
    let jobs = [job];
    let told = conditions(
        [&row],
        &jobs,
        |_| Some(AutoVerdict::NotAllowed("auto_restart is false".into())),
        &[],
    );
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].kind, EscalationKind::Unrestartable);
    assert!(
        told[0].message.contains("missed a run") && told[0].message.contains("overdue"),
        "{}",
        told[0].message
    );
    // The watcher may run it: nothing to tell until a restart of it fails.
    let told = conditions([&row], &jobs, |_| Some(AutoVerdict::Now), &[]);
    assert!(told.is_empty(), "{told:?}");
    // Between runs, nothing at all.
    let idle = assess(
        &jobs[0],
        &between_runs(Some(("exit 0", 60.0)), Some(60.0)),
        now(),
    );
    let told = conditions(
        [&idle],
        &jobs,
        |_| Some(AutoVerdict::NotAllowed("auto_restart is false".into())),
        &[],
    );
    assert!(told.is_empty(), "{told:?}");
}

/// Summer time, as cron runs it, in a zone that has it: TZ=Europe/Berlin goes from 02:00 to
/// 03:00 on 2026-03-29 and from 03:00 back to 02:00 on 2026-10-25. `time_zone: local` reads the
/// machine's zone from TZ, so these rows run in a child test process with TZ set (this process
/// keeps its own environment).
#[test]
fn summer_time_in_berlin_neither_misses_a_skipped_time_nor_runs_a_repeated_one_twice() {
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "schedule_rows_in_berlin",
            "--ignored",
            "--nocapture",
        ])
        .env("TZ", "Europe/Berlin")
        .status()
        .expect("the test binary runs again");
    assert!(status.success(), "the rows under TZ=Europe/Berlin failed");
}

#[test]
#[ignore = "run with TZ=Europe/Berlin by the test above"]
fn schedule_rows_in_berlin() {
    assert_eq!(std::env::var("TZ").as_deref(), Ok("Europe/Berlin"));
    let at = |text: &str| -> DateTime<Utc> { text.parse().expect("an RFC 3339 time") };
    let nightly = cron("30 2 * * *", TimeZoneName::Local);
    // (name, last success, now, state, first reason contains)
    let rows = [
        (
            "spring: 02:30 does not exist on the 29th; the day's run is due when the clock \
             comes out of the gap, 03:00 CEST (01:00 UTC)",
            "2026-03-28T01:30:40Z",
            "2026-03-29T01:04:00Z",
            State::NotRunning,
            "next due by 2026-03-29 01:05:00 UTC",
        ),
        (
            "spring: missed on the change day, it is overdue 5 min after 03:00 CEST",
            "2026-03-28T01:30:40Z",
            "2026-03-29T01:05:00Z",
            State::ShouldBeRunning,
            "due at 2026-03-29 01:00:00 UTC",
        ),
        (
            "spring: the run at 03:00 CEST makes the next one due at 02:30 CEST the day after",
            "2026-03-29T01:00:40Z",
            "2026-03-29T12:00:00Z",
            State::NotRunning,
            "next due by 2026-03-30 00:35:00 UTC",
        ),
        (
            "autumn: after the run at the first 02:30 (CEST), the repeated 02:30 (CET) is not \
             due again",
            "2026-10-25T00:30:40Z",
            "2026-10-25T01:40:00Z",
            State::NotRunning,
            "next due by 2026-10-26 01:35:00 UTC",
        ),
        (
            "winter: 02:30 CET is 01:30 UTC",
            "2026-12-01T01:30:40Z",
            "2026-12-02T01:36:00Z",
            State::ShouldBeRunning,
            "due at 2026-12-02 01:30:00 UTC",
        ),
    ];
    let mut failures = Vec::new();
    for (name, success, when, state, says) in rows {
        let evidence = Evidence {
            lock: Some(Reading::Empty),
            history: History {
                last_run: Some(LastRun {
                    started: None,
                    exit: Some(RunExit::from_words("exit 0", at(success))),
                }),
                last_success: Some(at(success)),
                ..History::default()
            },
            ..Evidence::default()
        };
        let got = assess(&nightly, &evidence, at(when));
        let first = got.reasons.first().cloned().unwrap_or_default();
        if got.state != state || !first.contains(says) {
            failures.push(format!(
                "{name}:\n  want {state:?} saying '{says}'\n  got  {:?} {:?}",
                got.state, got.reasons
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Table-driven tests of the pure core: one row per boundary of SPEC §4.
//!
//! Every row builds evidence by hand and judges it at a fixed `now`, so each verdict is
//! reproducible to the millisecond. Rows that prevent a known incident say so in their name.

use std::path::PathBuf;

use chrono::{DateTime, Duration, TimeZone, Utc};
use mihari::config::{
    JobSpec, Predicate, ProcessSpec, ProgressTable, SlurmJobRef, SlurmSpec, Timeouts,
};
use mihari::core::assess::ProgressSource;
use mihari::core::{
    Bucket, Carried, CheckOutcome, CheckResult, Evidence, FileStamp, HeartbeatReading, History,
    LastRun, LineCount, Liveness, LockHolder, ManifestReading, MatchedProcess, OperatorNote,
    Reading, RunExit, SlurmJob, State, TableReading, assess, order,
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
        markers: Vec::new(),
        slurm: None,
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
            says: "no progress for 50 min 0 s (freshest: holder_start",
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

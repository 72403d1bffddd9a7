//! What a Slurm job's state means to mihari: queued, alive, suspended, ended (and how), in
//! Slurm's own words.
//!
//! A job declared with `slurm:` is held by the newest Slurm job of its name and user (SPEC
//! §12). This module owns the meaning of Slurm's states — PENDING is queued, RUNNING and
//! COMPLETING are alive, SUSPENDED is stopped, and every end (COMPLETED, FAILED with its exit
//! code, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, BOOT_FAIL) is a run's end as
//! `mihari run` records one — and the words the rows say. It is pure: the reading comes from
//! `probe::slurm`, and nothing here runs `squeue` or reads a clock.

use chrono::{DateTime, Utc};

use super::assess::{Verdict, fmt_secs};
use super::evidence::{Evidence, History, LastRun, Reading, RunExit, SlurmJob};
use crate::config::JobSpec;

/// Where a Slurm job is in its life, as mihari judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmPhase {
    /// Waiting in the queue (PENDING, REQUEUED, a requeue hold): not running, and not to be
    /// submitted again — a queue wait is not a death; `timeouts.queue_sec` bounds it.
    Queued,
    /// Running on its nodes (RUNNING, COMPLETING, CONFIGURING, a stage-out...).
    Alive,
    /// Suspended by an administrator or a preemption (SUSPENDED, STOPPED): it holds its
    /// place, but makes no progress until it is resumed.
    Suspended,
    /// It ended: a run's end, as `mihari run` records one.
    Ended,
    /// A state this mihari does not know: never judged as alive, dead or queued.
    Unknown,
}

/// Slurm's states that end a job, with whether the end is a success only when its exit code
/// says so (COMPLETED, FAILED) or never (every other end).
const ENDS: [&str; 11] = [
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
    "SPECIAL_EXIT",
];

/// The phase Slurm's state word (`job_state` of `squeue --json`) means.
pub fn phase_of(state: &str) -> SlurmPhase {
    match state {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
            SlurmPhase::Queued
        }
        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SIGNALING" | "STAGE_OUT" | "RESIZING"
        | "POWER_UP_NODE" | "UPDATE_DB" => SlurmPhase::Alive,
        "SUSPENDED" | "STOPPED" => SlurmPhase::Suspended,
        ended if ENDS.contains(&ended) => SlurmPhase::Ended,
        _ => SlurmPhase::Unknown,
    }
}

impl SlurmJob {
    /// Where the job is in its life.
    pub fn phase(&self) -> SlurmPhase {
        phase_of(&self.state)
    }

    /// "Slurm job 42 (RUNNING on node1)", "Slurm job 43 (PENDING: Resources)": the job and
    /// its state in Slurm's words, as the row and the detail say them.
    pub fn words(&self) -> String {
        let state = match (self.phase(), &self.reason, &self.node) {
            (SlurmPhase::Queued, Some(reason), _) => {
                format!("{}: {}", self.state, reason_words(reason))
            }
            (SlurmPhase::Alive | SlurmPhase::Suspended, _, Some(node)) => {
                format!("{} on {node}", self.state)
            }
            (SlurmPhase::Ended, _, _) => match self.run_exit(DateTime::UNIX_EPOCH) {
                Some(exit) if exit.code.is_some() || exit.signal.is_some() => {
                    format!("{}, {}", self.state, exit.words())
                }
                _ => self.state.clone(),
            },
            _ => self.state.clone(),
        };
        format!("Slurm job {} ({state})", self.shown_id())
    }

    /// The id as Slurm's tools show it: "42", or "14_1" for a task of array job 14.
    pub fn shown_id(&self) -> String {
        match &self.array {
            Some(array) => array.clone(),
            None => self.id.to_string(),
        }
    }

    /// How the job's run ended, in the words an `exited` event of `mihari run` carries (so
    /// that [`RunExit::from_words`] reads them back): "exit 3", "killed by SIGKILL", or
    /// "ended as TIMEOUT" for an end that is no exit of the job's own, never a success.
    /// `None` while it has not ended.
    pub fn end_words(&self) -> Option<String> {
        if self.phase() != SlurmPhase::Ended {
            return None;
        }
        // `exit_code` is the raw wait status: 768 is "exit 3", 9 is "killed by SIGKILL".
        let status = self.exit_status;
        let signal = status.map(|s| s & 0x7f).filter(|s| *s != 0);
        let code = status.filter(|_| signal.is_none()).map(|s| (s >> 8) & 0xff);
        Some(match (self.state.as_str(), code, signal) {
            ("COMPLETED", Some(code), _) => format!("exit {code}"),
            ("FAILED", _, Some(signal)) => format!("killed by {}", signal_name(signal)),
            ("FAILED", Some(code), _) if code != 0 => format!("exit {code}"),
            (state, _, _) => format!("ended as {state}"),
        })
    }

    /// The end as a [`RunExit`] at `at`, when the job has ended: what `not_succeeded` and
    /// "an exit outranks a count" read, as for a run `mihari run` recorded.
    pub fn run_exit(&self, at: DateTime<Utc>) -> Option<RunExit> {
        self.end_words()
            .map(|words| RunExit::from_words(&words, self.ended.unwrap_or(at)))
    }

    /// The words of the `exited` event the watcher records for this end, once: the end as
    /// [`SlurmJob::end_words`] says it, then which Slurm job it was.
    pub fn exited_event_words(&self) -> Option<String> {
        let end = self.end_words()?;
        Some(format!(
            "{end}; Slurm job {} {}{}",
            self.shown_id(),
            self.state,
            self.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ))
    }

    /// The key an ended run is recorded under (the event's run): one job id and requeue count
    /// is one run, so the same end is never recorded twice.
    pub fn run_key(&self) -> String {
        format!("slurm-{}.{}", self.id, self.restarts)
    }
}

/// The history with what Slurm says of the job's runs read in, when it says more than the
/// event log: an end newer than the last run recorded is the last run (so `not_succeeded`,
/// and every rule that reads the last run, read Slurm's end as they read `mihari run`'s),
/// and a running job's start is its attempt's (`timeouts.attempt_sec`). `None` when nothing
/// changes (not a Slurm job, or the event log already says it).
pub fn history_with_slurm(evidence: &Evidence) -> Option<History> {
    let Some(Reading::Found(job)) = evidence.slurm.as_deref() else {
        return None;
    };
    let history = &evidence.history;
    match job.phase() {
        SlurmPhase::Ended => {
            let exit = job.run_exit(job.started.or(job.submitted).unwrap_or_default())?;
            let recorded = history
                .last_run
                .as_ref()
                .and_then(|run| run.exit.as_ref().map(|exit| exit.at).or(run.started));
            if recorded.is_some_and(|at| at >= exit.at) {
                return None;
            }
            Some(History {
                last_run: Some(LastRun {
                    started: job.started,
                    exit: Some(exit),
                }),
                ..history.clone()
            })
        }
        SlurmPhase::Alive | SlurmPhase::Suspended => {
            let started = job.started?;
            if history.attempt_started.is_some_and(|at| at >= started) {
                return None;
            }
            Some(History {
                attempt_started: Some(started),
                run_started: Some(history.run_started.unwrap_or(started).min(started)),
                ..history.clone()
            })
        }
        SlurmPhase::Queued | SlurmPhase::Unknown => None,
    }
}

/// The Slurm job, when it waits in the queue.
pub fn queued(evidence: &Evidence) -> Option<&SlurmJob> {
    match evidence.slurm.as_deref() {
        Some(Reading::Found(job)) if job.phase() == SlurmPhase::Queued => Some(job),
        _ => None,
    }
}

/// `timeouts.queue_sec` for a job Slurm keeps queued (seed 003's queue wait): a wait in the
/// queue is not a death, but an endless one is a stale job. Counted from its submission (a
/// requeue submits it again).
pub fn queue_timeout(job: &JobSpec, evidence: &Evidence, now: DateTime<Utc>) -> Option<String> {
    let limit = job.timeouts.queue_sec?;
    let waiting = queued(evidence)?;
    let waited = (now - waiting.submitted?).num_milliseconds().max(0) as f64 / 1000.0;
    (waited > limit as f64).then(|| {
        format!(
            "timeout: queue_sec exceeded: queued in Slurm for {} (limit {limit} s): {}",
            fmt_secs(waited),
            waiting.words()
        )
    })
}

/// `resource_free` for a Slurm job: free when no job of its name is queued or running.
pub(super) fn resource_free(reading: Option<&Reading<SlurmJob>>) -> Verdict {
    match reading {
        None | Some(Reading::Empty) => Verdict::Holds("Slurm lists no job of it".to_string()),
        Some(Reading::Fault(error)) => Verdict::Undecidable(format!("slurm: fault: {error}")),
        Some(Reading::Found(job)) => match job.phase() {
            SlurmPhase::Ended => Verdict::Holds(format!("{} has ended", job.words())),
            SlurmPhase::Unknown => Verdict::Undecidable(format!(
                "{}: a state this mihari does not know",
                job.words()
            )),
            _ => Verdict::Fails(format!("{} holds it", job.words())),
        },
    }
}

/// Slurm's reason for a queued job, with what a held one waits for.
fn reason_words(reason: &str) -> String {
    match reason {
        "JobHeldUser" => "JobHeldUser: held by its user; it runs after scontrol release".into(),
        "JobHeldAdmin" => {
            "JobHeldAdmin: held by an administrator; it runs after scontrol release".into()
        }
        other => other.to_string(),
    }
}

/// The name of signal `number` ("SIGKILL"), as `mihari run` records a killed run.
fn signal_name(number: i32) -> String {
    let name = match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("signal {number}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(state: &str, exit_status: i32) -> SlurmJob {
        SlurmJob {
            id: 42,
            name: "train".into(),
            user: "alice".into(),
            state: state.into(),
            reason: None,
            exit_status: Some(exit_status),
            submitted: None,
            started: None,
            ended: None,
            stdout: None,
            node: None,
            restarts: 0,
            array: None,
        }
    }

    #[test]
    fn every_end_is_a_run_end_and_only_completed_with_exit_0_succeeds() {
        let rows = [
            ("COMPLETED", 0, "exit 0", true),
            ("FAILED", 768, "exit 3", false),
            ("FAILED", 256, "exit 1", false),
            ("FAILED", 9, "killed by SIGKILL", false),
            ("FAILED", 0, "ended as FAILED", false),
            ("CANCELLED", 0, "ended as CANCELLED", false),
            ("CANCELLED", 15, "ended as CANCELLED", false),
            ("TIMEOUT", 15, "ended as TIMEOUT", false),
            ("OUT_OF_MEMORY", 0, "ended as OUT_OF_MEMORY", false),
            ("NODE_FAIL", 0, "ended as NODE_FAIL", false),
            ("PREEMPTED", 0, "ended as PREEMPTED", false),
            ("BOOT_FAIL", 0, "ended as BOOT_FAIL", false),
        ];
        for (state, status, words, success) in rows {
            let job = ended(state, status);
            assert_eq!(job.phase(), SlurmPhase::Ended, "{state}");
            assert_eq!(job.end_words().as_deref(), Some(words), "{state} {status}");
            let exit = job.run_exit(DateTime::UNIX_EPOCH).expect("an end");
            assert_eq!(exit.succeeded(), success, "{state} {status}");
        }
        for alive in ["PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "WEIRD"] {
            assert_eq!(ended(alive, 0).end_words(), None, "{alive}");
        }
    }
}

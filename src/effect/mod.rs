//! Effects: every side effect on jobs, each in its own file.
//!
//! A decision reaches an effect only through the engine's one way through
//! (`engine::decide`), which re-checks it and records it before calling here; nothing here
//! asks, proposes or decides. Each effect is guarded where it acts: a restart by its
//! content-derived claim key and the workspace cooldown ([`restart`]), a release by
//! re-checking the file's identity right before removing it. `run` is the job-side wrapper
//! (`mihari run`) and `output` its copy of the job's output into the log; `spawn` starts and
//! verifies a restart; `release` removes a dead holder's lock; `recover` resolves claims
//! whose claimer died mid-way.

pub mod notify;
pub mod output;
pub mod recorder;
pub mod recover;
pub mod release;
pub mod run;
pub mod slurm;
pub mod spawn;
pub mod textfile;
pub mod watch_lock;

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::core::decision::{Outcome, OutcomeKind, RestartPlan};
use crate::store::{ClaimOutcome, ClaimState, Event, Kind, NewEvent, RestartClaim, Store};

/// How long a restarted job has to take its lock before the restart counts as failed.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a restart watches its job after it took the lock: a job that ends with a
/// non-zero exit or a signal in this time (a bad argument, a missing file, an import error)
/// has failed to restart, however quickly it took its lock (as supervisord's `startsecs`).
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// The mihari binary a restart spawns as `mihari run`: `$MIHARI_BINARY` when set (for
/// embedding mihari's library in another program), else this executable.
pub fn mihari_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("MIHARI_BINARY").filter(|b| !b.is_empty()) {
        return PathBuf::from(binary);
    }
    match std::env::current_exe() {
        // Replaced on disk while running (an upgrade, `cargo install`): Linux names the old
        // file "... (deleted)"; the new binary at the same path is the one to run.
        Ok(path) => {
            let text = path.to_string_lossy();
            match text.strip_suffix(" (deleted)") {
                Some(original) if Path::new(original).exists() => PathBuf::from(original),
                _ => path,
            }
        }
        Err(_) => PathBuf::from("mihari"),
    }
}

/// Who the operator is, as a decision records it: the user name of this process's real
/// user (`sudo` keeps the one who asked, in `$SUDO_USER`), else its uid.
pub fn operator_name() -> String {
    let uid = nix::unistd::getuid();
    if uid.is_root()
        && let Some(asked) = std::env::var("SUDO_USER").ok().filter(|u| is_user_name(u))
    {
        return asked;
    }
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) if is_user_name(&user.name) => user.name,
        _ => format!("uid {}", uid.as_raw()),
    }
}

/// A user name as POSIX spells them: what a recorded "by NAME:" can be read back from.
fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '$'))
}

/// Carries out a restart that is confirmed and recorded (the engine re-checked it first):
/// its claim and the workspace cooldown, the route, the spawn or the Slurm submit, and the
/// verdict on it — each step recorded as it happens.
pub fn restart(plan: &RestartPlan, config: &Config, store: &mut Store) -> Outcome {
    let workspace_hash = plan.cooldown.workspace_hash().map(str::to_string);
    // The claim and the cooldown in one transaction: a situation already claimed is a
    // duplicate whatever the cooldown, and two restarts in one workspace never both pass it.
    let claimed = store.claim_restart(
        &plan.key,
        &plan.job,
        &plan.run_id,
        &plan.evidence,
        workspace_hash
            .as_deref()
            .map(|hash| (hash, config.settings.workspace_cooldown_sec)),
    );
    let claimed = match claimed {
        Ok(RestartClaim::Cooling { why, .. }) => {
            return Outcome::new(
                OutcomeKind::Suppressed,
                format!("restart of '{}' suppressed: {why}", plan.job),
            );
        }
        Ok(RestartClaim::Claimed(outcome)) => Ok(outcome),
        Err(error) => Err(error),
    };
    match claimed {
        Ok(ClaimOutcome::Won) => {}
        Ok(ClaimOutcome::Duplicate(existing))
            if existing.state == ClaimState::Failed
                && existing.pid.is_none()
                && store
                    .retry_claim(&plan.key, "a new attempt after a claim that never spawned")
                    .unwrap_or(false) => {}
        Ok(ClaimOutcome::Duplicate(existing)) => {
            let error = existing
                .last_error
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default();
            return Outcome::new(
                OutcomeKind::Duplicate,
                format!(
                    "restart of '{}' already claimed by session {} ({}, attempt {}){error}: \
                     nothing was done",
                    plan.job,
                    existing.session,
                    existing.state.as_str(),
                    existing.attempts
                ),
            );
        }
        Err(error) => {
            return Outcome::new(OutcomeKind::Failed, format!("nothing was done: {error}"));
        }
    }
    fault_pause("MIHARI_FAULT_PAUSE_AFTER_CLAIM_MS");

    if let Some(route) = &plan.route
        && let Err(error) = store.record_route(&plan.run_id, &plan.job, route)
    {
        fail(
            store,
            plan,
            None,
            &format!("could not record the route: {error}"),
        );
        return Outcome::new(OutcomeKind::Failed, format!("nothing was spawned: {error}"));
    }
    let Some(job) = config.jobs.iter().find(|j| j.id == plan.job) else {
        let why = "the job is no longer in the jobs file";
        fail(store, plan, None, why);
        return Outcome::new(OutcomeKind::Failed, why);
    };
    // From here a spawn may happen: say so first, so a claimer killed between the fork and
    // the record below is never read as "nothing was spawned".
    match store.mark_spawning(&plan.key, &plan.run_id) {
        Ok(true) => {}
        Ok(false) => {
            return Outcome::new(
                OutcomeKind::Duplicate,
                format!(
                    "restart of '{}': the claim is no longer this session's; nothing was spawned",
                    plan.job
                ),
            );
        }
        Err(error) => {
            fail(
                store,
                plan,
                None,
                &format!("could not record the spawn: {error}"),
            );
            return Outcome::new(OutcomeKind::Failed, format!("nothing was spawned: {error}"));
        }
    }
    if job.slurm.is_some() {
        return restart_slurm(plan, job, store, workspace_hash);
    }
    let child = match spawn::spawn_run(&mihari_binary(), config, job, plan) {
        Ok(child) => child,
        Err(error) => {
            fail(store, plan, None, &error);
            return Outcome::new(
                OutcomeKind::Failed,
                format!("restart of '{}' failed: {error}", plan.job),
            );
        }
    };
    let pid = child.id();
    fault_pause("MIHARI_FAULT_PAUSE_AFTER_FORK_MS");
    let spawned = record_spawned(store, plan, pid, workspace_hash, format!("pid {pid}"));
    if let Err(error) = spawned {
        // The process runs; the record of it failed. Say so loudly rather than guess.
        return Outcome::new(
            OutcomeKind::Failed,
            format!("spawned pid {pid} but could not record it: {error}"),
        );
    }
    fault_pause("MIHARI_FAULT_PAUSE_AFTER_SPAWN_MS");
    let lock = job.run_lock().map(Path::to_path_buf);
    // The verdict on the spawn: the lock held by the new process and still held a moment
    // later, or — for a job that ended meanwhile — how its run's own record says it ended: at
    // once with exit 0 is a finished job, with a failure a restart that did not take.
    let verdict = match spawn::verify(child, lock.as_deref(), GRACE, SETTLE) {
        Ok(spawn::Watched::Holding) => Ok(format!("pid {pid} holds its lock")),
        Ok(spawn::Watched::Ended) => match ran_and_ended(store, plan) {
            Some((started, exited)) => judge_ended_run(Some(pid), &started, &exited, None),
            None => Err(match run_refusal(store, plan) {
                Some(why) => format!("pid {pid} took its lock and could not run the job: {why}"),
                None => format!(
                    "pid {pid} took its lock and ended, and its run recorded no end; see the \
                     job's log"
                ),
            }),
        },
        Err(error) => match ran_and_ended(store, plan) {
            Some((started, exited)) => judge_ended_run(Some(pid), &started, &exited, None),
            None => Err(error),
        },
    };
    settle_claim(store, plan, "restarted", verdict)
}

/// The restart of a job Slurm runs, once claimed: its submit command (or requeue) runs and
/// exits, the id it printed is recorded with the spawn, and the restart is verified when
/// Slurm lists that job — failed when the command fails or Slurm does not list it in time.
fn restart_slurm(
    plan: &RestartPlan,
    job: &crate::config::JobSpec,
    store: &mut Store,
    workspace_hash: Option<String>,
) -> Outcome {
    let requeue = matches!(
        job.slurm.as_ref().and_then(|s| s.restart.as_ref()),
        Some(crate::config::SlurmRestart::Requeue)
    );
    let submitted = match slurm::submit(job, plan) {
        Ok(submitted) => submitted,
        Err(error) => {
            fail(store, plan, None, &error);
            return Outcome::new(
                OutcomeKind::Failed,
                format!("restart of '{}' failed: {error}", plan.job),
            );
        }
    };
    let (pid, id) = (submitted.pid, submitted.id);
    let did = if requeue { "requeued" } else { "submitted" };
    let spawned = record_spawned(
        store,
        plan,
        pid,
        workspace_hash,
        format!("pid {pid} {did} Slurm job {id}"),
    );
    if let Err(error) = spawned {
        return Outcome::new(
            OutcomeKind::Failed,
            format!("{did} Slurm job {id} but could not record it: {error}"),
        );
    }
    let verdict = slurm::verify(id, requeue, GRACE)
        .map_err(|error| format!("{did} Slurm job {id}, but {error}"));
    settle_claim(store, plan, did, verdict)
}

/// Records that a claimed restart spawned `pid` (`spawned`, with `reason`).
fn record_spawned(
    store: &mut Store,
    plan: &RestartPlan,
    pid: u32,
    workspace_hash: Option<String>,
    reason: String,
) -> crate::store::Result<bool> {
    store.advance_claim(
        &plan.key,
        ClaimState::Claimed,
        ClaimState::Spawned,
        Some(pid),
        None,
        NewEvent::new(Kind::Spawned)
            .job(&plan.job)
            .key(&plan.key)
            .run(Some(&plan.run_id))
            .route(plan.route.as_deref())
            .workspace_hash(workspace_hash)
            .reason(reason),
    )
}

/// Settles a spawned restart's claim with the verdict on it — verified, or failed with how
/// many attempts this episode has made — records it and words the outcome ("'job' {did}:
/// how").
fn settle_claim(
    store: &mut Store,
    plan: &RestartPlan,
    did: &str,
    verdict: Result<String, String>,
) -> Outcome {
    let (to, kind, reason) = match &verdict {
        Ok(how) => (ClaimState::Verified, Kind::Verified, how),
        Err(error) => (ClaimState::Failed, Kind::Failed, error),
    };
    let _ = store.advance_claim(
        &plan.key,
        ClaimState::Spawned,
        to,
        None,
        verdict.as_ref().err().map(String::as_str),
        NewEvent::new(kind)
            .job(&plan.job)
            .key(&plan.key)
            .run(Some(&plan.run_id))
            .reason(reason.clone()),
    );
    match verdict {
        Ok(how) => Outcome::new(
            OutcomeKind::Verified,
            format!("'{}' {did}: {how}", plan.job),
        ),
        Err(error) => {
            // The attempts of this episode, across its claim keys: each retry has a key of
            // its own, and each must not say "attempt 1".
            let attempts = store
                .restart_failures_in_episode(Some(&plan.job))
                .ok()
                .and_then(|counts| counts.first().map(|(_, n)| *n))
                .unwrap_or(1)
                .max(1);
            Outcome::new(
                OutcomeKind::Failed,
                format!(
                    "restart of '{}' failed (attempt {attempts}): {error}",
                    plan.job
                ),
            )
        }
    }
}

/// The restart's run's `started` and `exited` events, when its own record says it started
/// and has ended: the verdict on a spawn comes from the run's record, not from a lock it has
/// already let go.
fn ran_and_ended(store: &Store, plan: &RestartPlan) -> Option<(Event, Event)> {
    let record = store.run_record(&plan.job, &plan.run_id).ok()?;
    // The newest start: a restart that continues a run (its dead holder's run id) shares the
    // id with the attempts before it.
    let started = record
        .iter()
        .rev()
        .find(|e| e.kind == Kind::Started.as_str())?;
    let exited = record
        .iter()
        .find(|e| e.id > started.id && e.kind == Kind::Exited.as_str())?;
    Some((started.clone(), exited.clone()))
}

/// Why the restart's run recorded that it could not run the job (the command not found, a
/// refused log), when it did.
fn run_refusal(store: &Store, plan: &RestartPlan) -> Option<String> {
    let record = store.run_record(&plan.job, &plan.run_id).ok()?;
    record
        .last()
        .filter(|e| e.kind == Kind::Failed.as_str() || e.kind == Kind::Duplicate.as_str())
        .map(|e| e.reason.clone().unwrap_or_else(|| e.kind.clone()))
}

/// Pure: the verdict on a restart whose run started and has ended, from its run's record.
/// Exit 0 is a job that finished in a moment: verified. A non-zero exit or a signal is a
/// restart that did not take — failed, "exited 4 within 0.1 s of its start" — when it came
/// within `within` of the start (`None`: the restart watched it end, however long that took).
/// `Ok` holds the words of a verified restart, `Err` those of a failed one.
pub fn judge_ended_run(
    pid: Option<u32>,
    started: &Event,
    exited: &Event,
    within: Option<chrono::Duration>,
) -> Result<String, String> {
    let how = exited
        .reason
        .clone()
        .unwrap_or_else(|| "exited".to_string());
    let exit = crate::core::RunExit::from_words(&how, exited.at);
    let lasted = exited.at - started.at;
    let who = pid.map_or_else(|| "its run".to_string(), |pid| format!("pid {pid}"));
    if exit.succeeded() || within.is_some_and(|limit| lasted > limit) {
        return Ok(format!("{who} took its lock and has already ended ({how})"));
    }
    // In tenths of a second, rounded up: "within 0.1 s", never "within 0.0 s".
    let tenths = (lasted.num_milliseconds().max(0) + 99) / 100;
    Err(format!(
        "{} within {}.{} s of its start ({who}); see the job's log",
        exit.words(),
        tenths / 10,
        tenths % 10
    ))
}

/// Marks a claim failed before anything was spawned.
fn fail(store: &mut Store, plan: &RestartPlan, pid: Option<u32>, why: &str) {
    let _ = store.advance_claim(
        &plan.key,
        ClaimState::Claimed,
        ClaimState::Failed,
        pid,
        Some(why),
        NewEvent::new(Kind::Failed)
            .job(&plan.job)
            .key(&plan.key)
            .run(Some(&plan.run_id))
            .reason(why.to_string()),
    );
}

/// Fault injection for the crash tests: sleeps this many milliseconds when the variable is
/// set, widening the window a `kill -9` has to land in. Unset in normal use.
fn fault_pause(variable: &str) {
    if let Some(ms) = std::env::var(variable)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The folder commands of `config` run in by default: the jobs file's folder.
pub fn config_folder(config: &Config) -> &Path {
    config.source.parent().unwrap_or(Path::new("/"))
}

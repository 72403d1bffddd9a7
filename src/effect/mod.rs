//! Effects: the one executor of decisions, and every side effect on jobs in its own file.
//!
//! A dialog or a command only proposes a [`Decision`]; [`execute`] carries it out, and is the
//! only place that does. Every decision is written to the event log before its effect starts
//! — confirmed, declined, refused or suppressed — and the effect itself is guarded: a restart
//! by its content-derived claim key and the workspace cooldown, a release by re-checking the
//! file's identity right before removing it. `run` is the job-side wrapper (`mihari run`) and
//! `output` its copy of the job's output into the log; `spawn` starts and verifies a restart;
//! `release` removes a dead holder's lock; `recover` resolves claims whose claimer died
//! mid-way.

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
use crate::core::decision::{ApprovalPlan, Decision, NotePlan, RestartPlan, checked_reason};
use crate::core::evidence::OperatorNote;
use crate::store::{Actor, ClaimOutcome, ClaimState, Event, Kind, NewEvent, RestartClaim, Store};

/// What became of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The restart's new process holds the lock.
    Verified,
    Released,
    Approved,
    Denied,
    /// The operator said no.
    Declined,
    /// A rule forbade it (holder alive or unknown, the file changed, no route left...).
    Refused,
    /// The workspace cooldown held it back.
    Suppressed,
    /// Someone else had already claimed it.
    Duplicate,
    /// It was tried and did not work (spawn error, lock not taken within the grace period).
    Failed,
    /// A decision whose whole effect is its record (a pause, a resume, an acknowledgement)
    /// was recorded.
    Recorded,
}

impl OutcomeKind {
    /// Whether the decision's effect happened as intended.
    pub fn succeeded(self) -> bool {
        matches!(
            self,
            OutcomeKind::Verified
                | OutcomeKind::Released
                | OutcomeKind::Approved
                | OutcomeKind::Denied
                | OutcomeKind::Recorded
        )
    }
}

/// A decision's result with its explanation in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub result: OutcomeKind,
    pub message: String,
}

impl Outcome {
    fn new(result: OutcomeKind, message: impl Into<String>) -> Outcome {
        Outcome {
            result,
            message: message.into(),
        }
    }
}

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

/// Carries out a confirmed decision as `actor`, recording everything in the store.
pub fn execute(decision: &Decision, config: &Config, actor: Actor) -> Outcome {
    let mut store = match Store::open(&config.settings.state_dir, actor) {
        Ok(store) => store,
        Err(error) => {
            return Outcome::new(
                OutcomeKind::Failed,
                format!("nothing was done: {error} (every decision is recorded first)"),
            );
        }
    };
    match decision {
        Decision::Restart(plan) => restart(plan, config, &mut store),
        Decision::Release(plan) => {
            if let Err(error) = confirm(&mut store, decision) {
                return error;
            }
            release::release(plan, &mut store)
        }
        Decision::ReleaseMarker(plan) => {
            if let Err(error) = confirm(&mut store, decision) {
                return error;
            }
            release::release_marker(plan, config, &mut store)
        }
        Decision::Approve(plan) => decide(plan, true, &mut store),
        Decision::Deny(plan) => decide(plan, false, &mut store),
        Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
            note(decision, plan, &mut store)
        }
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

/// Carries out a pause, a resume or an acknowledgement: the event is the whole effect, and
/// it is refused (and recorded as refused) when it would say nothing — a pause of a paused
/// job, a resume of a running one, an acknowledgement without a reason.
fn note(decision: &Decision, plan: &NotePlan, store: &mut Store) -> Outcome {
    let verb = decision.verb();
    let refuse = |store: &mut Store, why: String| {
        let _ = store.append(
            NewEvent::new(Kind::Refused)
                .job(&plan.job)
                .key(&plan.key)
                .reason(format!("{verb} refused: {why}")),
        );
        Outcome::new(
            OutcomeKind::Refused,
            format!("{verb} of '{}' refused: {why}", plan.job),
        )
    };
    let reason = checked_reason(&plan.reason);
    if decision.needs_reason() && reason.is_none() {
        return refuse(
            store,
            "a reason is required: say why (--reason)".to_string(),
        );
    }
    // Read again right before recording: another operator may have paused or resumed it.
    let paused = match store.last_event(Some(&plan.job), &[Kind::Paused, Kind::Resumed]) {
        Ok(last) => last.filter(|e| e.kind == Kind::Paused.as_str()),
        Err(error) => {
            return Outcome::new(OutcomeKind::Failed, format!("nothing was done: {error}"));
        }
    };
    let (kind, done) = match decision {
        Decision::Pause(_) => {
            if let Some(pause) = &paused {
                let note = OperatorNote::from_words(
                    pause.reason.as_deref().unwrap_or(""),
                    pause.actor.as_str(),
                    pause.at,
                );
                return refuse(
                    store,
                    format!(
                        "it is already paused (by {} at {}: {})",
                        note.by,
                        note.at.format("%Y-%m-%d %H:%M:%S UTC"),
                        note.reason
                    ),
                );
            }
            (
                Kind::Paused,
                "paused: nobody restarts it and nothing escalates it until `mihari resume`",
            )
        }
        Decision::Resume(_) => {
            if paused.is_none() {
                return refuse(store, "it is not paused".to_string());
            }
            (Kind::Resumed, "resumed: judged again as usual")
        }
        _ => (
            Kind::Acknowledged,
            "acknowledged: its broken rules end here",
        ),
    };
    let words = match &reason {
        Some(reason) => OperatorNote::reason_words(&plan.by, reason),
        None => format!("by {}", plan.by),
    };
    match store.append(NewEvent::new(kind).job(&plan.job).reason(words)) {
        Ok(_) => Outcome::new(OutcomeKind::Recorded, format!("'{}' {done}", plan.job)),
        Err(error) => Outcome::new(
            OutcomeKind::Failed,
            format!("nothing was done: the decision could not be recorded: {error}"),
        ),
    }
}

/// Records that the operator declined a proposed decision.
pub fn decline(decision: &Decision, config: &Config, actor: Actor) -> Outcome {
    let message = format!(
        "{} of '{}' declined: nothing was done",
        decision.verb(),
        decision.job()
    );
    let recorded = Store::open(&config.settings.state_dir, actor).and_then(|mut store| {
        store.append(
            NewEvent::new(Kind::Declined)
                .job(decision.job())
                .key(decision.key())
                .reason(format!("{} declined", decision.verb())),
        )
    });
    match recorded {
        Ok(_) => Outcome::new(OutcomeKind::Declined, message),
        Err(error) => Outcome::new(
            OutcomeKind::Declined,
            format!("{message} (not recorded: {error})"),
        ),
    }
}

/// Records that a decision was refused before it could be proposed, with why.
pub fn refuse(job: &str, verb: &str, why: &str, config: &Config, actor: Actor) -> Outcome {
    let recorded = Store::open(&config.settings.state_dir, actor).and_then(|mut store| {
        store.append(
            NewEvent::new(Kind::Refused)
                .job(job)
                .reason(format!("{verb} refused: {why}")),
        )
    });
    let message = format!("{verb} of '{job}' refused: {why}");
    match recorded {
        Ok(_) => Outcome::new(OutcomeKind::Refused, message),
        Err(error) => Outcome::new(
            OutcomeKind::Refused,
            format!("{message} (not recorded: {error})"),
        ),
    }
}

/// Writes `confirmed` before the effect starts; an error here stops the effect.
fn confirm(store: &mut Store, decision: &Decision) -> std::result::Result<(), Outcome> {
    store
        .append(
            NewEvent::new(Kind::Confirmed)
                .job(decision.job())
                .key(decision.key())
                .reason(format!("{} confirmed", decision.verb())),
        )
        .map(|_| ())
        .map_err(|error| {
            Outcome::new(
                OutcomeKind::Failed,
                format!("nothing was done: the decision could not be recorded: {error}"),
            )
        })
}

fn restart(plan: &RestartPlan, config: &Config, store: &mut Store) -> Outcome {
    // Claims left open by a claimer that died are resolved first, so they cannot block or
    // double this one.
    recover::recover(store, config);
    // A pause made since the restart was proposed wins: nobody restarts a paused job.
    if let Ok(Some(last)) = store.last_event(Some(&plan.job), &[Kind::Paused, Kind::Resumed])
        && last.kind == Kind::Paused.as_str()
    {
        let _ = store.append(
            NewEvent::new(Kind::Refused)
                .job(&plan.job)
                .key(&plan.key)
                .reason("restart refused: the job was paused meanwhile"),
        );
        return Outcome::new(
            OutcomeKind::Refused,
            format!(
                "restart of '{}' refused: it was paused meanwhile (mihari resume {})",
                plan.job, plan.job
            ),
        );
    }
    if let Err(error) = confirm(store, &Decision::Restart(plan.clone())) {
        return error;
    }
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
    let spawned = store.advance_claim(
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
            .reason(format!("pid {pid}")),
    );
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
    match verdict {
        Ok(how) => {
            let _ = store.advance_claim(
                &plan.key,
                ClaimState::Spawned,
                ClaimState::Verified,
                None,
                None,
                NewEvent::new(Kind::Verified)
                    .job(&plan.job)
                    .key(&plan.key)
                    .run(Some(&plan.run_id))
                    .reason(how.clone()),
            );
            Outcome::new(
                OutcomeKind::Verified,
                format!("'{}' restarted: {how}", plan.job),
            )
        }
        Err(error) => {
            let _ = store.advance_claim(
                &plan.key,
                ClaimState::Spawned,
                ClaimState::Failed,
                None,
                Some(&error),
                NewEvent::new(Kind::Failed)
                    .job(&plan.job)
                    .key(&plan.key)
                    .run(Some(&plan.run_id))
                    .reason(error.clone()),
            );
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
    let spawned = store.advance_claim(
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
            .reason(format!("pid {pid} {did} Slurm job {id}")),
    );
    if let Err(error) = spawned {
        return Outcome::new(
            OutcomeKind::Failed,
            format!("{did} Slurm job {id} but could not record it: {error}"),
        );
    }
    match slurm::verify(id, requeue, GRACE) {
        Ok(how) => {
            let _ = store.advance_claim(
                &plan.key,
                ClaimState::Spawned,
                ClaimState::Verified,
                None,
                None,
                NewEvent::new(Kind::Verified)
                    .job(&plan.job)
                    .key(&plan.key)
                    .run(Some(&plan.run_id))
                    .reason(how.clone()),
            );
            Outcome::new(
                OutcomeKind::Verified,
                format!("'{}' {did}: {how}", plan.job),
            )
        }
        Err(error) => {
            let error = format!("{did} Slurm job {id}, but {error}");
            let _ = store.advance_claim(
                &plan.key,
                ClaimState::Spawned,
                ClaimState::Failed,
                None,
                Some(&error),
                NewEvent::new(Kind::Failed)
                    .job(&plan.job)
                    .key(&plan.key)
                    .run(Some(&plan.run_id))
                    .reason(error.clone()),
            );
            Outcome::new(
                OutcomeKind::Failed,
                format!("restart of '{}' failed: {error}", plan.job),
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

fn decide(plan: &ApprovalPlan, approve: bool, store: &mut Store) -> Outcome {
    let verb = if approve { "approve" } else { "deny" };
    match store.decide_approval(&plan.key, approve, plan.reason.as_deref()) {
        Ok(Ok(decided)) => Outcome::new(
            if approve {
                OutcomeKind::Approved
            } else {
                OutcomeKind::Denied
            },
            format!(
                "step '{}' of '{}' {}",
                decided.step,
                decided.job,
                decided.state.as_str()
            ),
        ),
        Ok(Err(current)) => {
            let _ = store.append(
                NewEvent::new(Kind::Refused)
                    .job(&plan.job)
                    .key(&plan.key)
                    .reason(format!(
                        "{verb} refused: already {}",
                        current.state.as_str()
                    )),
            );
            Outcome::new(
                OutcomeKind::Refused,
                format!(
                    "{verb} refused: the request is already {}",
                    current.state.as_str()
                ),
            )
        }
        Err(error) => Outcome::new(OutcomeKind::Failed, format!("nothing was decided: {error}")),
    }
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

//! Decisions as values: what a human (or the watcher) may do about a job, proposed, shown,
//! confirmed, then carried out by the engine's one way through (`engine::decide`), and what
//! became of each ([`Outcome`]).
//!
//! A key press or a command produces a proposed [`Decision`] holding everything the
//! confirmation shows and everything the executor needs: nothing is looked up again between
//! the dialog and the effect except what must be re-checked (the lock's identity, the claim,
//! the cooldown). The rules about what is allowed, the content-derived claim key, the route
//! choice and the cooldown arithmetic are pure functions here; no dialog performs an effect.

use std::path::PathBuf;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::assess::{Assessment, Bucket, State};
use super::evidence::Liveness;
use crate::config::{JobSpec, Route};

/// A decision ready for confirmation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Decision {
    Restart(RestartPlan),
    Release(ReleasePlan),
    /// Remove a stale marker (its holder gone, or bare and past `stale_after_sec`).
    ReleaseMarker(MarkerPlan),
    Approve(ApprovalPlan),
    Deny(ApprovalPlan),
    /// Stop a job on purpose: PAUSED until resumed; nobody restarts it, nothing escalates it.
    Pause(NotePlan),
    Resume(NotePlan),
    /// End a job's broken rules: the operator has looked.
    Acknowledge(NotePlan),
}

impl Decision {
    /// The job the decision is about.
    pub fn job(&self) -> &str {
        match self {
            Decision::Restart(plan) => &plan.job,
            Decision::Release(plan) => &plan.job,
            Decision::ReleaseMarker(plan) => &plan.job,
            Decision::Approve(plan) | Decision::Deny(plan) => &plan.job,
            Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
                &plan.job
            }
        }
    }

    /// The verb, as the operator says it.
    pub fn verb(&self) -> &'static str {
        match self {
            Decision::Restart(_) => "restart",
            Decision::Release(_) => "release",
            Decision::ReleaseMarker(_) => "release marker",
            Decision::Approve(_) => "approve",
            Decision::Deny(_) => "deny",
            Decision::Pause(_) => "pause",
            Decision::Resume(_) => "resume",
            Decision::Acknowledge(_) => "acknowledge",
        }
    }

    /// The operator's decisions recorded with their words, which ask for a reason
    /// (pause, acknowledge) or none (resume): no dialog field asks for a job id.
    pub fn note(&self) -> Option<&NotePlan> {
        match self {
            Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
                Some(plan)
            }
            _ => None,
        }
    }

    /// Whether the operator must give a reason before it is carried out.
    pub fn needs_reason(&self) -> bool {
        matches!(self, Decision::Pause(_) | Decision::Acknowledge(_))
    }

    /// The key the decision is recorded under: the claim key of a restart, the approval key,
    /// or the release's identity hash.
    pub fn key(&self) -> &str {
        match self {
            Decision::Restart(plan) => &plan.key,
            Decision::Release(plan) => &plan.key,
            Decision::ReleaseMarker(plan) => &plan.key,
            Decision::Approve(plan) | Decision::Deny(plan) => &plan.key,
            Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
                &plan.key
            }
        }
    }
}

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

/// The exit code of a decision that was done.
pub const EXIT_DONE: u8 = 0;
/// The exit code of a decision that was not done: declined, refused, suppressed, duplicate.
pub const EXIT_NOT_DONE: u8 = 1;
/// The exit code of a decision that was tried and failed.
pub const EXIT_FAILED: u8 = 2;
/// The exit code of a decision that could not be asked: a name that names nothing, a jobs
/// file or a state store that cannot be used.
pub const EXIT_BAD_INPUT: u8 = 3;

/// A decision's result with its explanation in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub result: OutcomeKind,
    pub message: String,
}

impl Outcome {
    pub fn new(result: OutcomeKind, message: impl Into<String>) -> Outcome {
        Outcome {
            result,
            message: message.into(),
        }
    }

    /// How a command that made this decision exits: 0 done, 1 not done (declined, refused,
    /// suppressed, duplicate), 2 tried and failed.
    pub fn exit_code(&self) -> u8 {
        match self.result {
            kind if kind.succeeded() => EXIT_DONE,
            OutcomeKind::Failed => EXIT_FAILED,
            _ => EXIT_NOT_DONE,
        }
    }
}

/// The lock holder as the dialog shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HolderView {
    pub pid: Option<u32>,
    pub liveness: Liveness,
    pub why: String,
}

/// Where the workspace cooldown stands (SPEC §5: one spawn per workspace per
/// `workspace_cooldown_sec`; the clock moves only when a spawn happens).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Cooldown {
    /// No `workspace` and no `restart.cwd`: no cooldown applies.
    NoWorkspace,
    /// A spawn may happen now.
    Open { workspace_hash: String },
    /// The last spawn in this workspace was too recent.
    Closed {
        workspace_hash: String,
        last_spawn: DateTime<Utc>,
        opens_at: DateTime<Utc>,
    },
}

impl Cooldown {
    pub fn workspace_hash(&self) -> Option<&str> {
        match self {
            Cooldown::NoWorkspace => None,
            Cooldown::Open { workspace_hash } | Cooldown::Closed { workspace_hash, .. } => {
                Some(workspace_hash)
            }
        }
    }
}

/// Where the workspace cooldown stands at `now`, given the last spawn in it.
pub fn cooldown(
    workspace_hash: Option<String>,
    last_spawn: Option<DateTime<Utc>>,
    cooldown_sec: u64,
    now: DateTime<Utc>,
) -> Cooldown {
    let Some(workspace_hash) = workspace_hash else {
        return Cooldown::NoWorkspace;
    };
    let gap = Duration::seconds(cooldown_sec.min(i64::MAX as u64 / 1000) as i64);
    match last_spawn {
        Some(last) if last + gap > now => Cooldown::Closed {
            workspace_hash,
            last_spawn: last,
            opens_at: last + gap,
        },
        _ => Cooldown::Open { workspace_hash },
    }
}

/// Everything a restart needs and the dialog shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestartPlan {
    pub job: String,
    /// The claim key: a hash of the job id, the action and the evidence that called for it.
    pub key: String,
    /// That evidence, in words ("lock held by dead pid 4242, written 09:01:02.123"): what the
    /// key is made of, kept exact; the dialog shows `reason` instead.
    pub evidence: String,
    /// Why the job needs a restart, in the operator's words (the verdict's first reason).
    pub reason: String,
    pub state: State,
    pub bucket: Bucket,
    /// The job's argv on the chosen route.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub route: Option<String>,
    pub run_id: String,
    /// Routes this run has used so far, and the limit.
    pub routes_used: Vec<String>,
    pub max_hops: u32,
    pub holder: Option<HolderView>,
    /// Whether the machine may restart it by itself, and why, in words.
    pub policy: String,
    pub cooldown: Cooldown,
}

/// The identity of a file as it was when the dialog opened; a release removes the file only
/// if it is still exactly this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub len: u64,
    /// sha256 of the content, hex.
    pub content: String,
}

/// Everything a release needs and the dialog shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleasePlan {
    pub job: String,
    pub key: String,
    pub path: PathBuf,
    pub identity: FileIdentity,
    pub holder: HolderView,
}

/// Everything the release of a marker needs and its dialog shows: what happened before it
/// is removed (SPEC §5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkerPlan {
    pub job: String,
    pub key: String,
    pub path: PathBuf,
    /// Its place in the job's `markers:`.
    pub index: usize,
    pub kind: super::evidence::MarkerKind,
    /// The marker as the dialog saw it; removed only if it is still exactly this.
    pub identity: FileIdentity,
    /// Why it is stale, in words ("... is 2 h 05 min old, its holder is gone: pid 4242: ...").
    pub why: String,
    /// "2 h 05 min (stale after 1800 s)".
    pub age: String,
    /// What it holds, inert and cut short.
    pub content: String,
    /// The job's last attempts from the event log, newest last, one line each.
    pub attempts: Vec<String>,
    /// The job's last error from the event log, when one is recorded.
    pub last_error: Option<String>,
}

/// A decision whose whole effect is its record, with the operator's words: a pause, a
/// resume, an acknowledgement of broken rules.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotePlan {
    pub job: String,
    /// The key the decision is recorded under when declined: a hash of what it is about.
    pub key: String,
    /// The job's state when the decision was proposed.
    pub state: State,
    /// What it is about, one line each: the pause a resume ends, the rules an
    /// acknowledgement ends.
    pub about: Vec<String>,
    /// The operator's reason (required for a pause and an acknowledgement).
    pub reason: String,
    /// Who decides: the operator's user name.
    pub by: String,
}

impl NotePlan {
    /// A plan for `verb` on `job` in `state`, about `about`, decided by `by`; the reason is
    /// the operator's to give.
    pub fn new(job: &str, verb: &str, state: State, about: Vec<String>, by: &str) -> NotePlan {
        NotePlan {
            job: job.to_string(),
            key: claim_key(job, verb, &about.join("\n")),
            state,
            about,
            reason: String::new(),
            by: by.to_string(),
        }
    }
}

/// The longest reason an operator's note keeps, in characters: a sentence, not a document.
pub const REASON_LIMIT: usize = 300;

/// The operator's reason as it is recorded: inert, trimmed, at most [`REASON_LIMIT`]
/// characters; `None` when nothing is left of it (a pause and an acknowledgement need one).
pub fn checked_reason(raw: &str) -> Option<String> {
    let text = super::text::inert(raw.trim());
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(text.chars().take(REASON_LIMIT).collect())
}

/// An approval request as the dialog shows it; `reason` is the operator's, for a denial.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalPlan {
    pub job: String,
    pub key: String,
    pub step: String,
    pub summary: String,
    pub reason: Option<String>,
    /// Who asked (a user name, already inert): approving a colleague's deletion is another
    /// decision than approving one's own. `None` for a request made before it was kept.
    pub requested_by: Option<String>,
    /// When it was asked.
    pub requested: DateTime<Utc>,
}

impl Decision {
    /// What the confirmation shows, one line each, as the dialog and the command line print
    /// it. Every value from a job is already inert; paths and argv are quoted.
    /// Why confirming now would do nothing, when it would: a restart whose workspace cooldown
    /// is closed spawns nothing (it records `cooldown-suppressed`). A dialog then says so and
    /// offers no confirm button.
    pub fn wont_happen(&self, now: DateTime<Utc>) -> Option<String> {
        match self {
            Decision::Restart(RestartPlan {
                cooldown: Cooldown::Closed { opens_at, .. },
                ..
            }) => Some(format!(
                "a restart now would spawn nothing: the workspace cooldown keeps two spawns \
                 apart; it opens in {}, at {}",
                super::assess::fmt_secs(
                    ((*opens_at - now).num_milliseconds().max(1000)) as f64 / 1000.0
                ),
                opens_at.format("%Y-%m-%d %H:%M:%S UTC")
            )),
            _ => None,
        }
    }

    pub fn describe(&self, now: DateTime<Utc>) -> Vec<(String, String)> {
        let holder_words = |holder: &HolderView| match holder.pid {
            Some(pid) => format!("pid {pid}, {}: {}", holder.liveness.as_str(), holder.why),
            // A holder with no process here (a Slurm job): its own words.
            None => format!("{}: {}", holder.liveness.as_str(), holder.why),
        };
        match self {
            Decision::Restart(plan) => {
                let argv: Vec<String> = plan.argv.iter().map(|a| format!("'{a}'")).collect();
                let cooldown = match &plan.cooldown {
                    Cooldown::NoWorkspace => "none (no workspace or restart.cwd)".to_string(),
                    Cooldown::Open { .. } => "open: it spawns now".to_string(),
                    Cooldown::Closed {
                        last_spawn,
                        opens_at,
                        ..
                    } => format!(
                        "CLOSED until {}: the last spawn in this workspace was {} ago",
                        opens_at.format("%Y-%m-%d %H:%M:%S UTC"),
                        super::assess::fmt_secs(
                            (now - *last_spawn).num_milliseconds() as f64 / 1000.0
                        )
                    ),
                };
                let route = match &plan.route {
                    Some(route) => format!(
                        "{route} (used by this run: {}; max_hops {})",
                        if plan.routes_used.is_empty() {
                            "none".to_string()
                        } else {
                            plan.routes_used.join(" -> ")
                        },
                        plan.max_hops
                    ),
                    None => "restart.command".to_string(),
                };
                vec![
                    (
                        "job".into(),
                        format!(
                            "{} ({}, {})",
                            plan.job,
                            plan.state.as_str(),
                            plan.bucket.as_str()
                        ),
                    ),
                    ("why".into(), plan.reason.clone()),
                    ("argv".into(), argv.join(" ")),
                    ("cwd".into(), format!("'{}'", plan.cwd.display())),
                    ("route".into(), route),
                    ("run".into(), plan.run_id.clone()),
                    (
                        "holder".into(),
                        plan.holder
                            .as_ref()
                            .map_or("no lock file".to_string(), holder_words),
                    ),
                    ("policy".into(), plan.policy.clone()),
                    ("cooldown".into(), cooldown),
                ]
            }
            Decision::Release(plan) => vec![
                ("job".into(), plan.job.clone()),
                ("lock".into(), format!("'{}'", plan.path.display())),
                ("holder".into(), holder_words(&plan.holder)),
                (
                    "check".into(),
                    "right before removing, the holder is judged again and the file must be \
                     the same (inode, mtime, content); otherwise nothing is removed"
                        .into(),
                ),
            ],
            Decision::ReleaseMarker(plan) => {
                let kind = match plan.kind {
                    super::evidence::MarkerKind::File => "a file",
                    super::evidence::MarkerKind::Folder => "a folder",
                };
                let mut lines = vec![
                    ("job".into(), plan.job.clone()),
                    (
                        "marker".into(),
                        format!("'{}' ({kind})", plan.path.display()),
                    ),
                    ("age".into(), plan.age.clone()),
                    (
                        "content".into(),
                        if plan.content.is_empty() {
                            "(empty)".to_string()
                        } else {
                            format!("'{}'", plan.content)
                        },
                    ),
                    ("why".into(), plan.why.clone()),
                ];
                if plan.attempts.is_empty() {
                    lines.push(("attempts".into(), "none recorded".into()));
                }
                for attempt in &plan.attempts {
                    lines.push(("attempt".into(), attempt.clone()));
                }
                lines.push((
                    "error".into(),
                    plan.last_error
                        .clone()
                        .unwrap_or_else(|| "none recorded".to_string()),
                ));
                lines.push((
                    "check".into(),
                    "right before removing, it is judged again and must be the same (inode, \
                     mtime, content); it is renamed aside, checked, then removed (a folder only \
                     when empty); otherwise nothing is removed"
                        .into(),
                ));
                lines
            }
            Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
                let mut lines = vec![(
                    "job".into(),
                    format!("{} ({})", plan.job, plan.state.as_str()),
                )];
                let label = match self {
                    Decision::Resume(_) => "paused",
                    Decision::Acknowledge(_) => "ends",
                    _ => "now",
                };
                for line in &plan.about {
                    lines.push((label.into(), line.clone()));
                }
                let effect = match self {
                    Decision::Pause(_) => {
                        "PAUSED until resumed: nobody restarts it, nothing escalates it, every \
                         daily digest names it"
                    }
                    Decision::Resume(_) => {
                        "judged again as usual: restarts and escalations as the rules allow"
                    }
                    _ => {
                        "these rules end now (a rule broken again later is RED again); \
                         failing checks are not rules and stay until they pass"
                    }
                };
                lines.push(("effect".into(), effect.into()));
                lines.push(("by".into(), plan.by.clone()));
                if !plan.reason.is_empty() {
                    lines.push(("reason".into(), plan.reason.clone()));
                }
                lines
            }
            Decision::Approve(plan) | Decision::Deny(plan) => {
                let mut lines = vec![
                    ("job".into(), plan.job.clone()),
                    ("step".into(), plan.step.clone()),
                    ("summary".into(), plan.summary.clone()),
                    ("asked by".into(), asked_by_words(plan, now)),
                    ("key".into(), plan.key.clone()),
                ];
                if let Some(reason) = &plan.reason {
                    lines.push(("reason".into(), reason.clone()));
                }
                lines
            }
        }
    }
}

/// Who asked for an approval and when, for its confirmation: the name, or that a request
/// from before mihari kept it does not say.
fn asked_by_words(plan: &ApprovalPlan, now: DateTime<Utc>) -> String {
    let who = match &plan.requested_by {
        Some(by) => by.clone(),
        None => "not recorded (asked before mihari kept who asks)".to_string(),
    };
    let age = super::assess::fmt_secs((now - plan.requested).num_milliseconds() as f64 / 1000.0);
    format!(
        "{who}, at {} ({age} ago)",
        plan.requested.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// Why a restart may not be proposed for this row, or `None` when it may.
pub fn restart_refusal(row: &Assessment) -> Option<String> {
    if let Some(pause) = &row.paused {
        return Some(format!(
            "'{}' is paused (by {} at {}: {}): nobody restarts a paused job; resume it first \
             (mihari resume {})",
            row.id,
            pause.by,
            pause.at.format("%Y-%m-%d %H:%M:%S UTC"),
            pause.reason,
            row.id
        ));
    }
    match row.bucket {
        Some(Bucket::Restart) => None,
        // A job in RED for a broken rule that also needs a restart: the human who has looked
        // may restart it.
        Some(Bucket::Red) if needs_restart(row) => None,
        Some(Bucket::Dispatch) => row
            .held
            .as_ref()
            .map(|held| format!("{held}: dispatching anything new waits until nothing is RED")),
        _ => Some(format!(
            "restart is offered on RESTART and DISPATCH rows; '{}' is {}{}",
            row.id,
            row.state.as_str(),
            faults(row)
        )),
    }
}

/// The faults behind a row, said after a refusal so that the operator sees what to fix (a
/// link planted at the lock, a named pipe at the log) rather than only "UNKNOWN".
fn faults(row: &Assessment) -> String {
    let faults: Vec<&str> = row
        .reasons
        .iter()
        .map(String::as_str)
        .filter(|reason| reason.contains(": fault: "))
        .collect();
    if faults.is_empty() {
        String::new()
    } else {
        format!(" ({})", faults.join("; "))
    }
}

/// Whether the row's state calls for a restart: a dead lock, or a job that ran before and
/// should be running.
pub fn needs_restart(row: &Assessment) -> bool {
    match row.state {
        State::DeadLockStale => true,
        State::ShouldBeRunning => row.started_before,
        _ => false,
    }
}

/// Why a release may not be proposed for this row, or `None` when it may.
pub fn release_refusal(row: &Assessment) -> Option<String> {
    match (row.state, row.liveness) {
        // A paused job's dead lock may be cleaned up: a release starts nothing.
        (State::DeadLockStale | State::Paused, Some(Liveness::Dead)) => None,
        (_, Some(Liveness::Alive)) => Some(format!(
            "the holder of '{}' is alive; a live holder's lock is never released",
            row.id
        )),
        (_, Some(Liveness::Unknown)) => Some(format!(
            "the holder of '{}' is unknown; never released while unknown{}",
            row.id,
            faults(row)
        )),
        _ => Some(format!(
            "release is offered on DEAD_LOCK_STALE rows; '{}' is {}",
            row.id,
            row.state.as_str()
        )),
    }
}

/// The claim key of an action on a job, from the evidence that called for it: two watchers,
/// or a watcher and a dashboard, that see the same death compute the same key.
pub fn claim_key(job: &str, action: &str, evidence: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [job, action, evidence] {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    let digest = hasher.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The route a run goes to next, never one it has used; `Err` with why when it must go to a
/// human instead (no route left, or `max_hops` reached). `Ok(None)` means the job has no
/// routes: the plain `restart.command` runs.
pub fn next_route<'a>(
    routes: &'a [Route],
    used: &[String],
    max_hops: u32,
) -> Result<Option<&'a Route>, String> {
    if routes.is_empty() {
        return Ok(None);
    }
    if used.len() as u64 >= u64::from(max_hops) {
        return Err(format!(
            "this run has used {} route{} ({}), max_hops is {max_hops}: it goes to a human",
            used.len(),
            if used.len() == 1 { "" } else { "s" },
            used.join(" -> ")
        ));
    }
    match routes.iter().find(|r| !used.contains(&r.name)) {
        Some(route) => Ok(Some(route)),
        None => Err(format!(
            "every route has been used by this run ({}): it goes to a human",
            used.join(" -> ")
        )),
    }
}

/// The restart policy in words, as the detail pane and the dialog show it.
pub fn policy_words(job: &JobSpec) -> String {
    if job.auto_restart {
        format!(
            "the machine may restart it by itself: {}",
            job.auto_restart_reason.as_deref().unwrap_or("")
        )
    } else {
        format!(
            "the machine never restarts it by itself ({}): a restart is a human's, like this one",
            job.auto_restart_blocked_reason
                .as_deref()
                .unwrap_or("auto_restart is false, no reason given")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str) -> Route {
        Route {
            name: name.into(),
            command: vec![name.into()],
        }
    }

    #[test]
    fn the_same_evidence_gives_the_same_key_and_other_evidence_another() {
        let a = claim_key("collect", "restart", "dead pid 4242, lock mtime 1");
        assert_eq!(
            a,
            claim_key("collect", "restart", "dead pid 4242, lock mtime 1")
        );
        assert_ne!(
            a,
            claim_key("collect", "restart", "dead pid 4243, lock mtime 1")
        );
        assert_ne!(
            a,
            claim_key("other", "restart", "dead pid 4242, lock mtime 1")
        );
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn a_run_never_goes_back_to_a_route_it_used() {
        let routes = [route("local"), route("cloud-a"), route("cloud-b")];
        assert_eq!(next_route(&routes, &[], 3).unwrap().unwrap().name, "local");
        let used = vec!["local".to_string()];
        assert_eq!(
            next_route(&routes, &used, 3).unwrap().unwrap().name,
            "cloud-a"
        );
        let used = vec!["local".to_string(), "cloud-a".to_string()];
        assert_eq!(
            next_route(&routes, &used, 3).unwrap().unwrap().name,
            "cloud-b"
        );
    }

    #[test]
    fn past_max_hops_or_out_of_routes_it_goes_to_a_human() {
        let routes = [route("local"), route("cloud-a"), route("cloud-b")];
        let used = vec!["local".to_string(), "cloud-a".to_string()];
        let error = next_route(&routes, &used, 2).unwrap_err();
        assert!(error.contains("max_hops is 2"), "{error}");
        let two = [route("local"), route("cloud-a")];
        let error = next_route(&two, &used, 5).unwrap_err();
        assert!(error.contains("every route has been used"), "{error}");
        assert_eq!(next_route(&[], &used, 1).unwrap(), None);
    }

    #[test]
    fn the_cooldown_moves_only_with_spawns() {
        let now = Utc::now();
        let hash = Some("abc".to_string());
        assert_eq!(cooldown(None, None, 600, now), Cooldown::NoWorkspace);
        assert!(matches!(
            cooldown(hash.clone(), None, 600, now),
            Cooldown::Open { .. }
        ));
        let recent = now - Duration::seconds(100);
        match cooldown(hash.clone(), Some(recent), 600, now) {
            Cooldown::Closed { opens_at, .. } => {
                assert_eq!(opens_at, recent + Duration::seconds(600))
            }
            other => panic!("{other:?}"),
        }
        let old = now - Duration::seconds(601);
        assert!(matches!(
            cooldown(hash, Some(old), 600, now),
            Cooldown::Open { .. }
        ));
    }
}

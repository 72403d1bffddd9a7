//! One way through for a decision: proposed, put to the operator, answered, re-checked,
//! recorded, carried out.
//!
//! A front-end only asks and shows (a confirmation is a value): it asks [`propose`] for a
//! [`Decision`], which says itself what will happen or why nothing would
//! ([`Decision::describe`], [`Decision::wont_happen`]), or it gets back why none may be made
//! ([`NoQuestion`]), a refusal already recorded. It puts the decision to the operator however
//! it can (a dialog, a prompt, `--yes`) and hands the operator's [`Answer`] to [`answer`].
//! Everything after that is here: a decline recorded; or the confirmed decision re-checked
//! against what changed since it was proposed, recorded before its effect starts, carried out
//! by `effect`, and its [`Outcome`] with its words and exit code. The command line and the
//! dashboard go this way, and so does the fleet screen, through each host's command line; the
//! watcher, which decides alone, enters at [`execute`]. Nothing here draws, prompts or reads
//! a terminal.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::{Action, Engine};
use crate::config::Config;
use crate::core::decision::{
    ApprovalPlan, Decision, EXIT_BAD_INPUT, NotePlan, Outcome, OutcomeKind, RestartPlan,
    checked_reason,
};
use crate::core::evidence::OperatorNote;
use crate::core::text::inert;
use crate::effect;
use crate::store::{Actor, ApprovalState, Kind, NewEvent, Store};

/// Who answers a proposal, as the event log names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// An operator asked in a dialog or at a prompt.
    Operator,
    /// A command told to go ahead without asking (`--yes`): a headless command, or the
    /// operator of the fleet screen that sent it.
    Ahead,
}

impl Asker {
    /// Who a confirmed decision is recorded as.
    fn actor(self) -> Actor {
        match self {
            Asker::Ahead if crate::store::fleet_origin().is_none() => Actor::Cli,
            Asker::Ahead | Asker::Operator => Actor::Operator,
        }
    }
}

/// The operator's answer to a proposed decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Carry it out: the dialog's button, `y` or the job id at a prompt, or `--yes`.
    Confirmed,
    /// The operator said no (Cancel, Esc, anything else at a prompt).
    Declined,
    /// Nobody could be asked (no terminal and no `--yes`): nothing is done, and it is
    /// recorded as declined.
    NoTerminal,
}

/// What the operator asks for.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// `action` on `job`; `reason` is the operator's words for a pause or an acknowledgement
    /// given ahead (`--reason`), else a dialog asks for them.
    Job {
        action: Action,
        job: &'a str,
        reason: Option<&'a str>,
    },
    /// Approving (or denying) the pending request `key` of `job`, one of several the operator
    /// chose among.
    Pending {
        action: Action,
        job: &'a str,
        key: &'a str,
    },
    /// Releasing the stale marker at `path` of `job` (its full path, or its file name when
    /// that names one marker), else its only stale one; with `first_stale`, the first of
    /// several.
    Marker {
        job: &'a str,
        path: Option<&'a Path>,
        first_stale: bool,
    },
}

/// Why no decision is put to the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoQuestion {
    /// A rule refuses it (no restart command, a live holder, a request already decided):
    /// recorded as refused, with its words.
    Refused(Outcome),
    /// What was asked for names nothing (no such job, no such request), or the state store
    /// cannot be used: nothing is recorded, and the words say what to do.
    BadInput(String),
}

impl NoQuestion {
    /// What the operator reads.
    pub fn words(&self) -> &str {
        match self {
            NoQuestion::Refused(outcome) => &outcome.message,
            NoQuestion::BadInput(words) => words,
        }
    }

    /// How a command that asked exits: 1 refused, 3 bad input.
    pub fn exit_code(&self) -> u8 {
        match self {
            NoQuestion::Refused(outcome) => outcome.exit_code(),
            NoQuestion::BadInput(_) => EXIT_BAD_INPUT,
        }
    }
}

/// The engine a decision about `job` starts from, for a command that runs once: the job
/// known, the state store usable (every decision is recorded before its effect: without a
/// store nothing happens), every job judged with its checks, as the dashboard judges them.
pub fn engine_for(config: Config, job: &str) -> Result<Engine, NoQuestion> {
    if !config.jobs.iter().any(|j| j.id == job) {
        return Err(NoQuestion::BadInput(format!(
            "no job '{}' in '{}'",
            inert(job),
            config.source.display()
        )));
    }
    if let Err(error) = Store::open(&config.settings.state_dir, Actor::Operator) {
        let words = super::store_error_words(&config.settings.state_dir, &error);
        return Err(NoQuestion::BadInput(words));
    }
    let mut engine = Engine::new(config);
    // Checks decide RED, and RED holds dispatch.
    engine.run_checks(None);
    engine.refresh(None, Utc::now());
    Ok(engine)
}

/// Proposes what `request` asks for, as the engine sees the jobs at `now`: the decision to
/// put to the operator, or the refusal, recorded as `asker`'s.
pub fn propose(
    engine: &Engine,
    request: Request,
    asker: Asker,
    now: DateTime<Utc>,
) -> Result<Decision, NoQuestion> {
    let (job, verb, proposed) = match request {
        Request::Job {
            action,
            job,
            reason,
        } => {
            let proposed = engine.propose(action, job, now).map(|decision| {
                let reason = reason.and_then(checked_reason).unwrap_or_default();
                match decision {
                    Decision::Pause(plan) => Decision::Pause(NotePlan { reason, ..plan }),
                    Decision::Acknowledge(plan) => {
                        Decision::Acknowledge(NotePlan { reason, ..plan })
                    }
                    decision => decision,
                }
            });
            (job, action.verb(), proposed)
        }
        Request::Pending { action, job, key } => (
            job,
            action.verb(),
            engine.propose_approval(action, job, key, now),
        ),
        Request::Marker {
            job,
            path,
            first_stale,
        } => (
            job,
            Action::ReleaseMarker.verb(),
            engine.propose_marker(job, path, first_stale, now),
        ),
    };
    proposed.map_err(|why| refused(job, verb, &why, engine.config(), asker))
}

/// Proposes approving the request `key` (or denying it, with `deny_reason`) as the state
/// store holds it, whatever job asked: what `mihari approval` decides from a shell.
pub fn propose_by_key(
    config: &Config,
    key: &str,
    deny_reason: Option<&str>,
    asker: Asker,
) -> Result<Decision, NoQuestion> {
    let store = Store::open(&config.settings.state_dir, asker.actor())
        .map_err(|error| NoQuestion::BadInput(error.to_string()))?;
    let request = match store.approval(key) {
        Ok(Some(request)) => request,
        Ok(None) => {
            return Err(NoQuestion::BadInput(format!(
                "no approval request with key '{}' (see mihari approval list)",
                inert(key)
            )));
        }
        Err(error) => return Err(NoQuestion::BadInput(error.to_string())),
    };
    drop(store);
    let verb = if deny_reason.is_some() {
        "deny"
    } else {
        "approve"
    };
    if request.state != ApprovalState::Pending {
        let why = format!("the request is already {}", request.state.as_str());
        return Err(refused(&request.job, verb, &why, config, asker));
    }
    let plan = ApprovalPlan {
        job: request.job.clone(),
        key: request.key.clone(),
        step: inert(&request.step),
        summary: inert(&request.summary),
        reason: deny_reason.map(inert),
        requested_by: request.requested_by.as_deref().map(inert),
        requested: request.requested,
    };
    Ok(match deny_reason {
        Some(_) => Decision::Deny(plan),
        None => Decision::Approve(plan),
    })
}

/// Carries out the operator's `answer` to `decision`, asked of `asker`: a decline recorded,
/// or the decision executed as theirs.
pub fn answer(decision: &Decision, answer: Answer, asker: Asker, config: &Config) -> Outcome {
    match answer {
        Answer::Confirmed => execute(decision, config, asker.actor()),
        Answer::Declined | Answer::NoTerminal => decline(decision, config),
    }
}

/// Carries out a confirmed decision as `actor`: re-checked where the world may have moved
/// since it was proposed, recorded before its effect starts, then the effect. The one
/// executor: the watcher's restarts come here too.
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
            // The lock's identity is re-checked by the release itself, right before it
            // removes anything.
            effect::release::release(plan, &mut store)
        }
        Decision::ReleaseMarker(plan) => {
            if let Err(error) = confirm(&mut store, decision) {
                return error;
            }
            effect::release::release_marker(plan, config, &mut store)
        }
        Decision::Approve(plan) => decide_approval(plan, true, &mut store),
        Decision::Deny(plan) => decide_approval(plan, false, &mut store),
        Decision::Pause(plan) | Decision::Resume(plan) | Decision::Acknowledge(plan) => {
            note(decision, plan, &mut store)
        }
    }
}

/// A confirmed restart: claims left by a claimer that died resolved, a pause made meanwhile
/// honoured, `confirmed` recorded, then the effect from its claim on.
fn restart(plan: &RestartPlan, config: &Config, store: &mut Store) -> Outcome {
    // Claims left open by a claimer that died are resolved first, so they cannot block or
    // double this one.
    effect::recover::recover(store, config);
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
    effect::restart(plan, config, store)
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
fn decline(decision: &Decision, config: &Config) -> Outcome {
    let message = format!(
        "{} of '{}' declined: nothing was done",
        decision.verb(),
        decision.job()
    );
    let recorded =
        Store::open(&config.settings.state_dir, Actor::Operator).and_then(|mut store| {
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

/// Records that a decision was refused before it could be proposed, with why, as `asker`'s.
fn refused(job: &str, verb: &str, why: &str, config: &Config, asker: Asker) -> NoQuestion {
    let recorded = Store::open(&config.settings.state_dir, asker.actor()).and_then(|mut store| {
        store.append(
            NewEvent::new(Kind::Refused)
                .job(job)
                .reason(format!("{verb} refused: {why}")),
        )
    });
    let message = format!("{verb} of '{job}' refused: {why}");
    NoQuestion::Refused(match recorded {
        Ok(_) => Outcome::new(OutcomeKind::Refused, message),
        Err(error) => Outcome::new(
            OutcomeKind::Refused,
            format!("{message} (not recorded: {error})"),
        ),
    })
}

/// Writes `confirmed` before the effect starts; an error here stops the effect.
fn confirm(store: &mut Store, decision: &Decision) -> Result<(), Outcome> {
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

/// Approves or denies a pending request: the store's decision is the whole effect, refused
/// (and recorded so) when another answer came first.
fn decide_approval(plan: &ApprovalPlan, approve: bool, store: &mut Store) -> Outcome {
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

//! The human decisions from a shell: `restart`, `release`, `release-marker`, `pause`,
//! `resume`, `ack`, `approval approve|deny`.
//!
//! Each command proposes the same decision the dashboard's dialog would, prints what the
//! dialog shows, asks on the terminal (or takes `--yes`), and hands the decision to the one
//! executor. Nothing here performs an effect. Exit codes: 0 done, 1 not done (declined,
//! refused, suppressed, duplicate), 2 tried and failed, 3 bad config or store.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use chrono::Utc;

use crate::config::Config;
use crate::core::decision::{ApprovalPlan, Decision, checked_reason};
use crate::core::decision::{Outcome, OutcomeKind};
use crate::core::text::inert;
use crate::engine::decide as effect;
use crate::engine::{Action, Engine};
use crate::store::{Actor, ApprovalState, Store};

pub const EXIT_DONE: u8 = 0;
pub const EXIT_NOT_DONE: u8 = 1;
pub const EXIT_FAILED: u8 = 2;
pub const EXIT_BAD_INPUT: u8 = 3;

/// How the operator confirms: typing `y`, or typing the job id (approvals).
enum Ask {
    YesNo,
    TypeJobId,
}

/// `mihari restart JOB [--yes]`.
pub fn restart(config: Option<&Path>, job: &str, yes: bool, out: &mut impl Write) -> ExitCode {
    on_job(config, Action::Restart, job, None, yes, out)
}

/// `mihari release JOB [--yes]`.
pub fn release(config: Option<&Path>, job: &str, yes: bool, out: &mut impl Write) -> ExitCode {
    on_job(config, Action::Release, job, None, yes, out)
}

/// `mihari pause JOB --reason R [--yes]`, `mihari resume JOB [--yes]`, `mihari ack JOB
/// --reason R [--yes]`: the decisions recorded with the operator's words.
pub fn note(
    config: Option<&Path>,
    action: Action,
    job: &str,
    reason: Option<&str>,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    if matches!(action, Action::Pause | Action::Acknowledge)
        && reason.and_then(checked_reason).is_none()
    {
        let _ = writeln!(
            io::stderr(),
            "mihari: {} '{}' needs a reason: pass --reason 'why', in words the next operator \
             will understand",
            action.verb(),
            inert(job)
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    on_job(config, action, job, reason, yes, out)
}

/// `mihari release-marker JOB [PATH] [--yes]`: PATH is the marker's full path (or a path
/// relative to the current folder, or its file name); without it, the job's only stale one.
pub fn release_marker(
    config: Option<&Path>,
    job: &str,
    path: Option<&Path>,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let (config, engine) = match prepared(config, job, yes) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    // A bare name is matched against the markers' file names; a relative path is taken from
    // the current folder, written as the jobs file's paths are (without '.' parts).
    let absolute = path.map(|path| {
        let joined = match std::env::current_dir() {
            Ok(here) if path.is_relative() && path.components().count() > 1 => here.join(path),
            _ => path.to_path_buf(),
        };
        joined
            .components()
            .filter(|part| !matches!(part, std::path::Component::CurDir))
            .collect::<std::path::PathBuf>()
    });
    match engine.propose_marker(job, absolute.as_deref(), false, Utc::now()) {
        Ok(decision) => confirm_and_execute(&decision, &config, yes, Ask::YesNo, out),
        Err(why) => finish(
            effect::refuse(job, "release marker", &why, &config, actor(yes)),
            out,
        ),
    }
}

/// The jobs file loaded, the job known, the store usable, every job judged with its checks:
/// what a decision from a shell starts from.
fn prepared(config: Option<&Path>, job: &str, yes: bool) -> Result<(Config, Engine), ExitCode> {
    let config = super::load_config(config)?;
    if !config.jobs.iter().any(|j| j.id == job) {
        let _ = writeln!(
            io::stderr(),
            "mihari: no job '{}' in '{}'",
            inert(job),
            config.source.display()
        );
        return Err(ExitCode::from(EXIT_BAD_INPUT));
    }
    // Every decision is recorded before its effect: without a usable store, nothing happens.
    if let Err(error) = Store::open(&config.settings.state_dir, actor(yes)) {
        let words = crate::engine::store_error_words(&config.settings.state_dir, &error);
        let _ = writeln!(io::stderr(), "mihari: {words}");
        return Err(ExitCode::from(EXIT_BAD_INPUT));
    }
    let mut engine = Engine::new(config.clone());
    // Checks decide RED, and RED holds dispatch: judge with them, as the dashboard does.
    engine.run_checks(None);
    engine.refresh(None, Utc::now());
    Ok((config, engine))
}

fn on_job(
    config: Option<&Path>,
    action: Action,
    job: &str,
    reason: Option<&str>,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let (config, engine) = match prepared(config, job, yes) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    let now = Utc::now();
    let decision = match engine.propose(action, job, now) {
        Ok(Decision::Pause(mut plan)) => {
            plan.reason = reason.and_then(checked_reason).unwrap_or_default();
            Decision::Pause(plan)
        }
        Ok(Decision::Acknowledge(mut plan)) => {
            plan.reason = reason.and_then(checked_reason).unwrap_or_default();
            Decision::Acknowledge(plan)
        }
        Ok(decision) => decision,
        Err(why) => {
            let verb = action.verb();
            let outcome = effect::refuse(job, verb, &why, &config, actor(yes));
            return finish(outcome, out);
        }
    };
    confirm_and_execute(&decision, &config, yes, Ask::YesNo, out)
}

/// `mihari approval approve KEY [--yes]`.
pub fn approve(config: Option<&Path>, key: &str, yes: bool, out: &mut impl Write) -> ExitCode {
    on_approval(config, key, None, yes, out)
}

/// `mihari approval deny KEY --reason R [--yes]`.
pub fn deny(
    config: Option<&Path>,
    key: &str,
    reason: &str,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    on_approval(config, key, Some(reason), yes, out)
}

fn on_approval(
    config: Option<&Path>,
    key: &str,
    deny_reason: Option<&str>,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let store = match Store::open(&config.settings.state_dir, actor(yes)) {
        Ok(store) => store,
        Err(error) => {
            let _ = writeln!(io::stderr(), "mihari: {error}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let request = match store.approval(key) {
        Ok(Some(request)) => request,
        Ok(None) => {
            let _ = writeln!(
                io::stderr(),
                "mihari: no approval request with key '{}' (see mihari approval list)",
                inert(key)
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(error) => {
            let _ = writeln!(io::stderr(), "mihari: {error}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    drop(store);
    let plan = ApprovalPlan {
        job: request.job.clone(),
        key: request.key.clone(),
        step: inert(&request.step),
        summary: inert(&request.summary),
        reason: deny_reason.map(inert),
        requested_by: request.requested_by.as_deref().map(inert),
        requested: request.requested,
    };
    if request.state != ApprovalState::Pending {
        let verb = if deny_reason.is_some() {
            "deny"
        } else {
            "approve"
        };
        let why = format!("the request is already {}", request.state.as_str());
        return finish(
            effect::refuse(&request.job, verb, &why, &config, actor(yes)),
            out,
        );
    }
    let decision = match deny_reason {
        Some(_) => Decision::Deny(plan),
        None => Decision::Approve(plan),
    };
    confirm_and_execute(&decision, &config, yes, Ask::TypeJobId, out)
}

/// Who decides: `--yes` is a headless command (cli); answering a prompt is the operator.
/// A `--yes` sent by a fleet screen is the operator who confirmed it there.
fn actor(yes: bool) -> Actor {
    if yes && crate::store::fleet_origin().is_none() {
        Actor::Cli
    } else {
        Actor::Operator
    }
}

/// Prints what the decision will do, asks (unless `yes`), then executes or records the
/// decline.
fn confirm_and_execute(
    decision: &Decision,
    config: &Config,
    yes: bool,
    ask: Ask,
    out: &mut impl Write,
) -> ExitCode {
    let _ = writeln!(out, "{} '{}':", decision.verb(), decision.job());
    // Times in the machine's zone, as on the dashboard.
    let zone = crate::probe::zone::Zone::machine();
    for (label, value) in decision.describe(Utc::now()) {
        let _ = writeln!(
            out,
            "  {label:<9} {}",
            zone.rewrite_utc_stamps(&inert(&value))
        );
    }
    let _ = out.flush();
    if !yes {
        let stdin = io::stdin();
        if !stdin.is_terminal() {
            let _ = writeln!(
                io::stderr(),
                "mihari: no terminal to ask on: pass --yes to {} without asking",
                decision.verb()
            );
            return finish(effect::decline(decision, config), out);
        }
        let prompt = match ask {
            Ask::YesNo => format!("{} '{}'? [y/N] ", decision.verb(), decision.job()),
            Ask::TypeJobId => format!(
                "type the job id '{}' to {}, anything else cancels: ",
                decision.job(),
                decision.verb()
            ),
        };
        let _ = write!(out, "{prompt}");
        let _ = out.flush();
        let mut answer = String::new();
        let _ = stdin.lock().read_line(&mut answer);
        let answer = answer.trim();
        let confirmed = match ask {
            Ask::YesNo => matches!(answer, "y" | "Y" | "yes"),
            Ask::TypeJobId => answer == decision.job(),
        };
        if !confirmed {
            return finish(effect::decline(decision, config), out);
        }
    }
    finish(effect::execute(decision, config, actor(yes)), out)
}

fn finish(outcome: Outcome, out: &mut impl Write) -> ExitCode {
    let _ = writeln!(out, "{}", inert(&outcome.message));
    ExitCode::from(match outcome.result {
        kind if kind.succeeded() => EXIT_DONE,
        OutcomeKind::Failed => EXIT_FAILED,
        _ => EXIT_NOT_DONE,
    })
}

//! The human decisions from a shell: `restart`, `release`, `release-marker`, `pause`,
//! `resume`, `ack`, `approval approve|deny`.
//!
//! Each command only asks and shows: it asks the engine's one way through
//! ([`crate::engine::decide`]) for the same decision the dashboard's dialog would propose,
//! prints what it will do, asks on the terminal (or takes `--yes`), and hands the answer back
//! to the engine, which carries it out and says what became of it. Exit codes: 0 done, 1 not
//! done (declined, refused, suppressed, duplicate), 2 tried and failed, 3 bad config or store.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use chrono::Utc;

use crate::core::decision::{Decision, EXIT_BAD_INPUT, Outcome, checked_reason};
use crate::core::text::inert;
use crate::engine::Action;
use crate::engine::decide::{self, Answer, Asker, NoQuestion, Request};

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
    let engine = match prepared(config, job) {
        Ok(engine) => engine,
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
    let request = Request::Marker {
        job,
        path: absolute.as_deref(),
        first_stale: false,
    };
    let proposed = decide::propose(&engine, request, asker(yes), Utc::now());
    ask_and_answer(proposed, engine.config(), yes, out)
}

/// The jobs file loaded, the job known, the store usable, every job judged with its checks:
/// what a decision from a shell starts from.
fn prepared(config: Option<&Path>, job: &str) -> Result<crate::engine::Engine, ExitCode> {
    let config = super::load_config(config)?;
    decide::engine_for(config, job).map_err(|no| said(&no))
}

/// Says on stderr why nothing is asked; its exit code.
fn said(no: &NoQuestion) -> ExitCode {
    let _ = writeln!(io::stderr(), "mihari: {}", no.words());
    ExitCode::from(no.exit_code())
}

fn on_job(
    config: Option<&Path>,
    action: Action,
    job: &str,
    reason: Option<&str>,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let engine = match prepared(config, job) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let request = Request::Job {
        action,
        job,
        reason,
    };
    let proposed = decide::propose(&engine, request, asker(yes), Utc::now());
    ask_and_answer(proposed, engine.config(), yes, out)
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
    let proposed = decide::propose_by_key(&config, key, deny_reason, asker(yes));
    ask_and_answer(proposed, &config, yes, out)
}

/// Who answers: `--yes` went ahead without asking; else the operator at the prompt.
fn asker(yes: bool) -> Asker {
    if yes { Asker::Ahead } else { Asker::Operator }
}

/// Prints what the proposed decision will do (or why none is proposed), asks (unless
/// `yes`), and hands the answer to the engine; prints what became of it.
fn ask_and_answer(
    proposed: Result<Decision, NoQuestion>,
    config: &crate::config::Config,
    yes: bool,
    out: &mut impl Write,
) -> ExitCode {
    let decision = match proposed {
        Ok(decision) => decision,
        Err(NoQuestion::Refused(outcome)) => return finish(&outcome, out),
        Err(no) => return said(&no),
    };
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
    let answer = if yes {
        Answer::Confirmed
    } else {
        asked(&decision, out)
    };
    finish(&decide::answer(&decision, answer, asker(yes), config), out)
}

/// The operator's answer at the terminal: `y` confirms, or for an approval or a denial (never
/// a single key press) the job id typed out.
fn asked(decision: &Decision, out: &mut impl Write) -> Answer {
    let type_job_id = matches!(decision, Decision::Approve(_) | Decision::Deny(_));
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        let _ = writeln!(
            io::stderr(),
            "mihari: no terminal to ask on: pass --yes to {} without asking",
            decision.verb()
        );
        return Answer::NoTerminal;
    }
    let prompt = if type_job_id {
        format!(
            "type the job id '{}' to {}, anything else cancels: ",
            decision.job(),
            decision.verb()
        )
    } else {
        format!("{} '{}'? [y/N] ", decision.verb(), decision.job())
    };
    let _ = write!(out, "{prompt}");
    let _ = out.flush();
    let mut answer = String::new();
    let _ = stdin.lock().read_line(&mut answer);
    let answer = answer.trim();
    let confirmed = if type_job_id {
        answer == decision.job()
    } else {
        matches!(answer, "y" | "Y" | "yes")
    };
    if confirmed {
        Answer::Confirmed
    } else {
        Answer::Declined
    }
}

fn finish(outcome: &Outcome, out: &mut impl Write) -> ExitCode {
    let _ = writeln!(out, "{}", inert(&outcome.message));
    ExitCode::from(outcome.exit_code())
}

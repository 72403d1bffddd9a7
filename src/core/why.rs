//! A row's reason: why a job sits where it does in the action list, in the few words one line
//! of a screen has room for ("check 'no_gaps' failed", "pid 4242 dead, lock left", "no
//! progress · spinning").
//!
//! The full reasons stay in [`Assessment::reasons`] (the detail pane and `check` show them);
//! this picks, from the same verdict, the one that explains the job's bucket, so that a RED
//! job whose process is alive says what failed rather than that it runs. It names no age and
//! no clock time: a row's age column is live, and words frozen at the moment of judgment would
//! contradict it a minute later. Pure: a function of the assessment alone.

use super::assess::{Assessment, Bucket, State};
use super::evidence::{CheckResult, Liveness};

/// The reason a row of the action list carries, in a few words; empty for a job that needs
/// nothing and has nothing to say beyond its state.
pub fn headline(row: &Assessment) -> String {
    if let Some(pause) = &row.paused {
        return format!("paused by {}: {}", pause.by, pause.reason);
    }
    match row.bucket {
        Some(Bucket::Red) => red(row),
        Some(Bucket::Restart) => restart(row),
        Some(Bucket::Stale) => stale(row),
        Some(Bucket::Dispatch) => match &row.held {
            Some(_) => "never started; held while RED".to_string(),
            None => "never started: ready to dispatch".to_string(),
        },
        None => at_rest(row),
    }
}

/// RED: the failed check, the broken rule, or what stops the machine; never the liveness of
/// its process.
fn red(row: &Assessment) -> String {
    if let Some(check) = row
        .checks
        .iter()
        .find(|check| check.result == CheckResult::Fail)
    {
        return format!("check '{}' failed", check.name);
    }
    if let Some(rule) = row
        .reasons
        .iter()
        .find_map(|reason| reason.strip_prefix("rule broken: "))
    {
        return first_clause(rule);
    }
    if let Some(why) = &row.restart_by_hand {
        return first_clause(why);
    }
    first_reason(row)
}

/// RESTART: a dead holder and its lock, or a job that should run and does not.
fn restart(row: &Assessment) -> String {
    match row.state {
        State::DeadLockStale => match row.pid {
            Some(pid) => format!("pid {pid} dead, lock left"),
            None => "holder dead, lock left".to_string(),
        },
        State::ShouldBeRunning => match &row.last_exit {
            Some(exit) => format!("{}; should be running", exit.words()),
            None => "should be running and is not".to_string(),
        },
        _ => first_reason(row),
    }
}

/// STALE: what the kernel says a quiet holder is doing, what cannot be read, or which check,
/// timeout or marker wants a look.
fn stale(row: &Assessment) -> String {
    match row.state {
        State::Stalled => match &row.activity {
            Some(activity) => format!("no progress · {}", activity.state.as_str()),
            None => "no progress".to_string(),
        },
        State::Unknown => {
            if let Some(source) = row.reasons.iter().find_map(|r| fault_source(r)) {
                format!("{source}: fault, cannot tell")
            } else if row.liveness == Some(Liveness::Unknown) {
                "liveness unknown".to_string()
            } else {
                first_reason(row)
            }
        }
        _ => {
            if let Some(check) = row
                .checks
                .iter()
                .find(|c| matches!(c.result, CheckResult::Fault | CheckResult::Refusal))
            {
                return format!("check '{}': {}", check.name, check.result.as_str());
            }
            // A timeout or a marker: the reason after the one that explains the state.
            row.reasons
                .iter()
                .skip(1)
                .find(|r| r.contains("timeout") || r.contains("marker"))
                .map(|r| first_clause(r))
                .unwrap_or_else(|| first_reason(row))
        }
    }
}

/// A job that needs nothing: its phase, or what its holder is doing, or what its state says.
fn at_rest(row: &Assessment) -> String {
    match row.state {
        State::Running => {
            if let Some(phase) = &row.phase {
                format!("phase {phase}")
            } else if let Some(activity) = &row.activity {
                activity.state.as_str().to_string()
            } else {
                String::new()
            }
        }
        State::Complete => match &row.last_exit {
            Some(exit) => format!("done; {}", exit.words()),
            None => "done".to_string(),
        },
        _ => first_reason(row),
    }
}

/// The source a "SOURCE: fault: ..." reason names.
fn fault_source(reason: &str) -> Option<&str> {
    let (source, _) = reason.split_once(": fault:")?;
    (!source.contains(' ') || source.starts_with("lock")).then_some(source)
}

/// The first reason, up to its first clause.
fn first_reason(row: &Assessment) -> String {
    row.reasons
        .first()
        .map(|r| first_clause(r))
        .unwrap_or_default()
}

/// Words up to the first ';' (the rest is detail the detail pane shows).
fn first_clause(words: &str) -> String {
    words.split(';').next().unwrap_or(words).trim().to_string()
}

//! What interrupts a human at once, and only that (SPEC §7, lesson 7).
//!
//! Four kinds: something only a human can move (a restart needed but not allowed); an
//! irreversible step about to happen (a job asking approval to delete, publish, send...);
//! a rule found broken (a failing check, the daily cap spent, a duplicate spawn, no watcher);
//! a job stopped that the machine cannot restart (a scheduled job that missed its run, unless
//! `auto_restart` lets the watcher run it). Everything else waits for the daily digest.
//! A condition is escalated once per episode: it starts when the job enters the condition and
//! ends when the job leaves it. A paused job escalates nothing. Pure: this module lists the
//! conditions that hold now; the watcher and the dashboard remember which were already told.

use serde::Serialize;

use super::assess::Assessment;

use super::auto::AutoVerdict;
use crate::config::JobSpec;

/// The four kinds of immediate escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EscalationKind {
    /// Only a human can move it: a restart is needed and the machine may not do it.
    HumanOnly,
    /// An irreversible step is about to happen: a job waits for approval.
    Irreversible,
    /// A rule is found broken: a failing check, the cap spent, a duplicate spawn, no watcher.
    BrokenRule,
    /// A job has stopped and the machine cannot restart it.
    Unrestartable,
}

impl EscalationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EscalationKind::HumanOnly => "human-only",
            EscalationKind::Irreversible => "irreversible",
            EscalationKind::BrokenRule => "broken-rule",
            EscalationKind::Unrestartable => "unrestartable",
        }
    }

    pub fn parse(text: &str) -> Option<EscalationKind> {
        [
            EscalationKind::HumanOnly,
            EscalationKind::Irreversible,
            EscalationKind::BrokenRule,
            EscalationKind::Unrestartable,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// One condition that warrants interrupting a human now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// The job, or "(watcher)" for a rule that belongs to no job.
    pub job: String,
    pub kind: EscalationKind,
    /// One line for the operator (already inert).
    pub message: String,
}

/// The pseudo-job of rules that belong to no job.
pub const NO_JOB: &str = "(watcher)";

/// The conditions that hold for `rows` now. `verdict` is the machine's restart answer for a
/// job (from [`super::auto`]); `rules` are broken rules that belong to no job.
pub fn conditions<'a>(
    rows: impl IntoIterator<Item = &'a Assessment>,
    jobs: &[JobSpec],
    verdict: impl Fn(&str) -> Option<AutoVerdict>,
    rules: &[String],
) -> Vec<Condition> {
    let mut found = Vec::new();
    // Looked up by id once: a search per row would make this quadratic in the jobs.
    let by_id: std::collections::HashMap<&str, &JobSpec> =
        jobs.iter().map(|j| (j.id.as_str(), j)).collect();
    for row in rows {
        let Some(&job) = by_id.get(row.id.as_str()) else {
            continue;
        };
        // Paused on purpose: nothing about it interrupts anyone until it is resumed; the
        // daily digest names it instead, so the pause is never a silent hole.
        if row.state == super::assess::State::Paused {
            continue;
        }
        let add = |found: &mut Vec<Condition>, kind, message: String| {
            found.push(Condition {
                job: row.id.clone(),
                kind,
                message,
            })
        };
        for approval in &row.pending_approvals {
            add(
                &mut found,
                EscalationKind::Irreversible,
                format!(
                    "{} asks approval for step '{}': {} (mihari approval approve {})",
                    row.id, approval.step, approval.summary, approval.key
                ),
            );
        }
        // A failing check or a broken rule is told whatever the row's bucket: a dead lock
        // with a failing check is a RESTART row, and its check still failed.
        let broken: Vec<&String> = row
            .reasons
            .iter()
            .filter(|r| {
                (r.starts_with("check '") && r.contains("' failed")) || r.starts_with("rule broken")
            })
            .collect();
        if let Some(first) = broken.first() {
            let more = if broken.len() > 1 {
                format!(" (and {} more)", broken.len() - 1)
            } else {
                String::new()
            };
            add(
                &mut found,
                EscalationKind::BrokenRule,
                format!("{}: {first}{more}", row.id),
            );
        }
        // A scheduled job that missed its run (or whose last run failed) has stopped, and what
        // would run it again is not the machine's: kind 4, unless auto_restart lets the
        // watcher run it (then a restart that fails is a broken rule, as for any job).
        let missed = row.state == super::assess::State::ShouldBeRunning && row.next_due.is_some();
        if super::decision::needs_restart(row) || missed {
            match verdict(&row.id) {
                Some(AutoVerdict::NotAllowed(why)) if missed => add(
                    &mut found,
                    EscalationKind::Unrestartable,
                    format!(
                        "{} missed a run and the machine may not run it: {}; {why} (mihari \
                         restart {}, or look at what starts it: its crontab line, its timer)",
                        row.id,
                        row.reasons.first().map_or("overdue", String::as_str),
                        row.id
                    ),
                ),
                Some(AutoVerdict::NotAllowed(why)) => add(
                    &mut found,
                    EscalationKind::HumanOnly,
                    format!(
                        "{} is {} and needs a restart only a human may do: {why} \
                         (mihari restart {})",
                        row.id,
                        row.state.as_str(),
                        row.id
                    ),
                ),
                Some(AutoVerdict::CapSpent { restarts, cap, .. }) => add(
                    &mut found,
                    EscalationKind::BrokenRule,
                    format!(
                        "{} is {}: the daily cap of {cap} automatic restarts is spent \
                         ({restarts} in 24 h); look for the cause",
                        row.id,
                        row.state.as_str()
                    ),
                ),
                Some(AutoVerdict::Now | AutoVerdict::Wait(_) | AutoVerdict::UnderWay) => {
                    // The machine restarts it; a failed restart is a broken rule (RED).
                }
                Some(AutoVerdict::NotNeeded) | None => {
                    if job.restart.is_none() {
                        add(
                            &mut found,
                            EscalationKind::Unrestartable,
                            format!(
                                "{} is {} and declares no restart.command: it must be \
                                 started by hand",
                                row.id,
                                row.state.as_str()
                            ),
                        );
                    }
                }
            }
        }
    }
    for rule in rules {
        found.push(Condition {
            job: NO_JOB.to_string(),
            kind: EscalationKind::BrokenRule,
            message: rule.clone(),
        });
    }
    found
}

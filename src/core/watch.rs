//! The watcher's judgment between two passes: what changed, what to restart, whom to tell
//! now and what to save for the digest.
//!
//! [`Brain`] remembers the last state of each job and the escalation episodes already told,
//! and turns each new action list into a [`Pass`]: state changes to record, jobs the machine
//! may restart now, jobs whose daily cap is spent, new escalation episodes (each told once)
//! and ended ones, and digest items. It performs nothing: the watcher records, restarts and
//! escalates what a pass says. Pure, with the clock passed in, so a whole scripted day runs
//! in a test in milliseconds.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::assess::{Assessment, State};
use super::auto::{AutoVerdict, auto_restart};
use super::escalate::{Condition, EscalationKind, NO_JOB, conditions};
use super::evidence::History;
use super::order::ActionList;
use crate::config::JobSpec;

/// How often, at least, a long-running watcher records that its loop still turns (a pass,
/// recorded as the watch lock's modification time), even when nothing happens for hours.
pub const PASS_BEAT_SEC: i64 = 60;

/// Past this since its last recorded pass, a watcher whose process lives is stuck: five beats
/// missed, far more than any pass takes.
pub const STUCK_AFTER_SEC: i64 = 300;

/// How far the wall clock may move from the time that passed before a pass hears of it.
pub const CLOCK_SLIP_SEC: i64 = 2;

/// Whether the wall clock moved (`wall`) other than the time that passed (`elapsed`, on the
/// monotonic clock) by more than [`CLOCK_SLIP_SEC`]: set by hand, or stepped. A turn of the
/// loop for its beat alone passes then, so the digest's cut hears of it.
pub fn clock_moved(wall: chrono::TimeDelta, elapsed: std::time::Duration) -> bool {
    let elapsed = chrono::TimeDelta::from_std(elapsed).unwrap_or(chrono::TimeDelta::MAX);
    (wall - elapsed).abs() > chrono::TimeDelta::seconds(CLOCK_SLIP_SEC)
}

/// How long a watcher whose last pass was recorded at `last_pass` has been stuck at `now`:
/// `Some(since the last pass)` past [`STUCK_AFTER_SEC`], `None` while it passes often enough.
/// A last pass ahead of `now` (a clock stepped back) is not stuck.
pub fn stuck_for(last_pass: DateTime<Utc>, now: DateTime<Utc>) -> Option<chrono::TimeDelta> {
    let ago = now - last_pass;
    (ago > chrono::TimeDelta::seconds(STUCK_AFTER_SEC)).then_some(ago)
}

/// A digest category, spelled as the store spells it.
pub mod category {
    pub const STALL_SEEN: &str = "stall-seen";
    pub const MACHINE_RESTART: &str = "machine-restart";
    pub const SUPPRESSED: &str = "suppressed";
    pub const COMPLETED: &str = "completed";
    pub const TIMEOUT: &str = "timeout";
}

/// What one pass asks the watcher to do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pass {
    /// (job, the state before — `None` when never recorded —, the state now).
    pub state_changes: Vec<(String, Option<State>, State)>,
    /// Jobs the machine may restart now.
    pub restarts: Vec<String>,
    /// When each job waiting out its backoff may be restarted.
    pub waits: Vec<(String, DateTime<Utc>)>,
    /// Jobs that need a restart while their daily cap is spent.
    pub capped: Vec<String>,
    /// Conditions newly entered: escalate each once.
    pub escalate: Vec<Condition>,
    /// Episodes that ended: the job left the condition.
    pub ended: Vec<(String, EscalationKind)>,
    /// (job, category, text) for the daily digest.
    pub digest: Vec<(Option<String>, &'static str, String)>,
}

/// The watcher's memory between passes.
#[derive(Debug, Clone, Default)]
pub struct Brain {
    states: BTreeMap<String, State>,
    episodes: BTreeSet<(String, EscalationKind)>,
    timeouts: BTreeMap<String, BTreeSet<String>>,
    /// Jobs the machine could not restart (a refused restart: no route left...), by job,
    /// until they leave the RESTART bucket.
    unrestartable: BTreeMap<String, String>,
}

impl Brain {
    /// A brain that remembers what the event log says: the last recorded state of each job
    /// and the episodes still open, so a restarted watcher neither records every state again
    /// nor tells anyone twice.
    pub fn restored(
        states: impl IntoIterator<Item = (String, State)>,
        episodes: impl IntoIterator<Item = (String, EscalationKind)>,
    ) -> Brain {
        let episodes: BTreeSet<(String, EscalationKind)> = episodes.into_iter().collect();
        // A job the machine could not restart stays so until it no longer needs a restart:
        // a new watcher process neither tries it again nor tells anyone twice.
        let unrestartable = episodes
            .iter()
            .filter(|(_, kind)| *kind == EscalationKind::Unrestartable)
            .map(|(job, _)| {
                (
                    job.clone(),
                    "an automatic restart was refused earlier (see mihari events)".to_string(),
                )
            })
            .collect();
        Brain {
            states: states.into_iter().collect(),
            episodes,
            unrestartable,
            ..Brain::default()
        }
    }

    /// Remembers timeouts already queued for the digest (job, the item's words), so a new
    /// watcher process (every `--once` pass is one) does not queue them again.
    pub fn with_timeouts_told(mut self, told: impl IntoIterator<Item = (String, String)>) -> Brain {
        for (job, words) in told {
            self.timeouts
                .entry(job)
                .or_default()
                .insert(timeout_kind(&words).to_string());
        }
        self
    }

    /// Notes that the machine tried to restart `job` and may not (a refusal such as "every
    /// route has been used"): a human must move it, told once. Returns the condition when
    /// this opens its episode, to be told now rather than at the next pass (a `--once` pass
    /// may not have one).
    pub fn cannot_restart(&mut self, job: &str, why: &str) -> Option<Condition> {
        self.unrestartable.insert(job.to_string(), why.to_string());
        self.episodes
            .insert((job.to_string(), EscalationKind::Unrestartable))
            .then(|| unrestartable(job, why))
    }

    /// Notes a broken rule that belongs to no job, found between passes (the store took no
    /// write): the condition when this opens its episode, to be told now rather than at the
    /// next pass. The next passes keep the episode open while their `rules` carry it.
    pub fn rule_broken(&mut self, rule: &str) -> Option<Condition> {
        self.episodes
            .insert((NO_JOB.to_string(), EscalationKind::BrokenRule))
            .then(|| Condition {
                job: NO_JOB.to_string(),
                kind: EscalationKind::BrokenRule,
                message: rule.to_string(),
            })
    }

    /// Judges one action list at `now`. `history` gives each job's event-log history;
    /// `under_way` says whether the machine's restart of a job is still in flight; `rules`
    /// are broken rules that belong to no job.
    #[allow(clippy::too_many_arguments)]
    pub fn pass(
        &mut self,
        list: &ActionList,
        jobs: &[JobSpec],
        history: &dyn Fn(&str) -> History,
        under_way: &dyn Fn(&str) -> bool,
        cap: u32,
        rules: &[String],
        now: DateTime<Utc>,
    ) -> Pass {
        let mut pass = Pass::default();
        let mut verdicts: BTreeMap<String, AutoVerdict> = BTreeMap::new();
        // Looked up by id once: a search per row would make each pass quadratic in the jobs.
        let by_id: std::collections::HashMap<&str, &JobSpec> =
            jobs.iter().map(|j| (j.id.as_str(), j)).collect();
        for row in list.rows() {
            let Some(&job) = by_id.get(row.id.as_str()) else {
                continue;
            };
            self.note_state(row, &mut pass);
            self.note_timeouts(row, &mut pass);
            if !super::decision::needs_restart(row) {
                self.unrestartable.remove(&row.id);
            }
            let verdict = if under_way(&row.id) {
                AutoVerdict::UnderWay
            } else {
                auto_restart(job, row, &history(&row.id), cap, now)
            };
            match &verdict {
                AutoVerdict::Now if !self.unrestartable.contains_key(&row.id) => {
                    pass.restarts.push(row.id.clone())
                }
                AutoVerdict::Wait(at) => pass.waits.push((row.id.clone(), *at)),
                AutoVerdict::CapSpent { frees_at, .. } => {
                    pass.capped.push(row.id.clone());
                    // Nothing else may happen before the cap frees: the watcher looks then.
                    pass.waits.push((row.id.clone(), *frees_at));
                }
                _ => {}
            }
            verdicts.insert(row.id.clone(), verdict);
        }
        let mut now_holding = conditions(list.rows(), jobs, |id| verdicts.get(id).cloned(), rules);
        for (job, why) in &self.unrestartable {
            now_holding.push(unrestartable(job, why));
        }
        let holding: BTreeSet<(String, EscalationKind)> = now_holding
            .iter()
            .map(|c| (c.job.clone(), c.kind))
            .collect();
        for condition in now_holding {
            if self
                .episodes
                .insert((condition.job.clone(), condition.kind))
            {
                pass.escalate.push(condition);
            }
        }
        let ended: Vec<(String, EscalationKind)> = self
            .episodes
            .iter()
            .filter(|e| !holding.contains(e))
            .cloned()
            .collect();
        for episode in ended {
            self.episodes.remove(&episode);
            pass.ended.push(episode);
        }
        pass
    }

    fn note_state(&mut self, row: &Assessment, pass: &mut Pass) {
        let before = self.states.insert(row.id.clone(), row.state);
        if before == Some(row.state) {
            return;
        }
        pass.state_changes.push((row.id.clone(), before, row.state));
        let from = before.map_or("(first seen)", State::as_str);
        let first_reason = row.reasons.first().cloned().unwrap_or_default();
        match row.state {
            State::Stalled => pass.digest.push((
                Some(row.id.clone()),
                category::STALL_SEEN,
                // What the kernel says comes first: a digest line is cut at 200 characters.
                match (row.activity.as_deref(), row.progress_age_sec) {
                    (Some(activity), Some(age)) => format!(
                        "{from} -> STALLED: stalled {}, {}; {first_reason}",
                        super::assess::fmt_secs(age),
                        activity.headline()
                    ),
                    _ => format!("{from} -> STALLED: {first_reason}"),
                },
            )),
            State::Complete if before.is_some() => {
                pass.digest
                    .push((Some(row.id.clone()), category::COMPLETED, first_reason))
            }
            _ => {}
        }
    }

    fn note_timeouts(&mut self, row: &Assessment, pass: &mut Pass) {
        let now: BTreeSet<String> = row
            .reasons
            .iter()
            .filter(|r| r.starts_with("timeout:"))
            .map(|r| timeout_kind(r).to_string())
            .collect();
        let seen = self.timeouts.entry(row.id.clone()).or_default();
        for kind in now.difference(seen) {
            let words = row
                .reasons
                .iter()
                .find(|r| r.starts_with(kind.as_str()))
                .cloned()
                .unwrap_or_else(|| kind.clone());
            pass.digest
                .push((Some(row.id.clone()), category::TIMEOUT, words));
        }
        *seen = now;
    }
}

/// The digest's line for each job that stays paused, as (job, words): every daily digest
/// names a paused job — who paused it, since when and why — for as long as it stays paused.
pub fn paused_digest(list: &ActionList) -> Vec<(String, String)> {
    list.rows()
        .filter_map(|row| {
            let pause = row.paused.as_ref()?;
            Some((
                row.id.clone(),
                format!(
                    "still paused (by {} since {}): {}",
                    pause.by,
                    pause.at.format("%Y-%m-%d %H:%M UTC"),
                    pause.reason
                ),
            ))
        })
        .collect()
}

/// The condition of a job the machine cannot restart.
fn unrestartable(job: &str, why: &str) -> Condition {
    Condition {
        job: job.to_string(),
        kind: EscalationKind::Unrestartable,
        message: format!("{job} is stopped and the machine cannot restart it: {why}"),
    }
}

/// Which timeout a reason (or its digest item) speaks of: its words up to "exceeded".
fn timeout_kind(reason: &str) -> &str {
    reason.split(" exceeded").next().unwrap_or(reason)
}

//! The recovery pass: restart claims whose claimer died between claiming and finishing.
//!
//! A restart is claimed before it spawns, so a claimer killed mid-way leaves its claim
//! `claimed` (perhaps about to spawn) or `spawned` (not verified). Left alone, such a claim
//! would block every later restart of the same situation as a duplicate. This pass settles
//! each open restart claim whose session (PID + start time) is gone, judging by the record
//! the spawned run keeps of itself — its `started` event, under the run id the claim names —
//! and only then by whether the lock is held now: a run that started and already exited 0
//! holds nothing, and was still a restart that worked. A claim that never spawned is
//! abandoned (nothing was tried, so nothing failed); one whose spawn may still be starting is
//! left until the grace period has passed. Claims that are not restarts (`mihari claim KEY`)
//! belong to whoever made them and are never touched. A claim of a live session is left to
//! its owner. Every settlement is one transaction that holds only while the claim is still
//! as it was read, so a recovery pass and the living claimer never both record a spawn.

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::core::{Liveness, Reading};
use crate::probe::lock::read_lock;
use crate::probe::proc::{ProcLookup, lookup};
use crate::store::{Claim, ClaimState, Event, Kind, NewEvent, Store};

/// The action of the claims this pass settles; every other claim is someone else's.
pub const RESTART_ACTION: &str = "restart";

/// What a recovery pass did, and when it wants to look again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovery {
    /// One line per claim settled ("job: why").
    pub settled: Vec<String>,
    /// Claims left open because their spawn may still be starting: (job, when to look again).
    pub waiting: Vec<(String, DateTime<Utc>)>,
}

/// What recovery makes of one orphaned restart claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Its spawn may still be starting: look again at this moment.
    Wait(DateTime<Utc>),
    Settle(Settlement),
}

/// How an orphaned claim is settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    pub to: ClaimState,
    /// The event that records it: `verified`, `failed`, or `abandoned`.
    pub kind: Kind,
    /// The spawned `mihari run`'s pid, when known.
    pub pid: Option<u32>,
    /// Whether a `spawned` event must be recorded first (the claimer died before it could).
    pub record_spawn: bool,
    pub why: String,
}

/// Settles the open restart claims of dead sessions.
pub fn recover(store: &mut Store, config: &Config) -> Recovery {
    let mut recovery = Recovery::default();
    let Ok(open) = store.open_claims() else {
        return recovery;
    };
    fault_pause("MIHARI_FAULT_PAUSE_IN_RECOVERY_MS");
    for claim in open {
        if claim.action != RESTART_ACTION || session_alive(&claim.session) != Some(false) {
            continue;
        }
        let record = match claim.run.as_deref() {
            Some(run) => match store.run_record(&claim.job, run) {
                Ok(record) => record,
                // Unreadable now: settle nothing on half the facts.
                Err(_) => continue,
            },
            None => Vec::new(),
        };
        let holder = holds_lock(&claim, config);
        let settlement = match judge_orphan(&claim, &record, holder, Utc::now()) {
            Verdict::Wait(at) => {
                recovery.waiting.push((claim.job.clone(), at));
                continue;
            }
            Verdict::Settle(settlement) => settlement,
        };
        let mut events = Vec::new();
        if settlement.record_spawn {
            let pid = settlement
                .pid
                .map_or_else(|| "pid unknown".to_string(), |pid| format!("pid {pid}"));
            events.push(
                NewEvent::new(Kind::Spawned)
                    .job(&claim.job)
                    .key(&claim.key)
                    .run(claim.run.as_deref())
                    .reason(format!("{pid}, recorded by recovery")),
            );
        }
        events.push(
            NewEvent::new(settlement.kind)
                .job(&claim.job)
                .key(&claim.key)
                .run(claim.run.as_deref())
                .reason(settlement.why.clone()),
        );
        let error = (settlement.to == ClaimState::Failed).then_some(settlement.why.as_str());
        let settled = store.settle_orphan(
            &claim.key,
            claim.state,
            &claim.session,
            settlement.to,
            settlement.pid,
            error,
            &events,
        );
        if settled.unwrap_or(false) {
            recovery
                .settled
                .push(format!("{}: {}", claim.job, settlement.why));
        }
    }
    recovery
}

/// How long after a claimer began to spawn its run may still be on its way to recording a
/// start; until then an orphan with no record is waited for, not failed.
pub const SPAWN_GRACE: chrono::Duration = chrono::Duration::seconds(10);

/// Pure: what to make of a restart claim whose claimer died, from the run's own record
/// (`record`: `mihari run`'s events for the claim's run), the pid of the claim's spawn if it
/// holds the job's lock now (`holder`), and the time.
pub fn judge_orphan(
    claim: &Claim,
    record: &[Event],
    holder: Option<u32>,
    now: DateTime<Utc>,
) -> Verdict {
    let claimer = &claim.session;
    let record_spawn = claim.state == ClaimState::Claimed;
    if claim.state == ClaimState::Claimed && claim.spawn_started.is_none() {
        return Verdict::Settle(Settlement {
            to: ClaimState::Failed,
            kind: Kind::Abandoned,
            pid: None,
            record_spawn: false,
            why: format!(
                "its claimer (session {claimer}) died between claiming and spawning; nothing \
                 was spawned, so the same situation may be tried again"
            ),
        });
    }
    let run = claim.run.as_deref().unwrap_or("?");
    // The spawned `mihari run` wrote its record as itself: its session names its pid.
    let run_pid = record
        .first()
        .and_then(|e| e.session.split_once('.'))
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
        .or(claim.pid);
    if let Some(started) = record.iter().find(|e| e.kind == Kind::Started.as_str()) {
        let pid = run_pid;
        let ended = record
            .iter()
            .find(|e| e.id > started.id && e.kind == Kind::Exited.as_str());
        // A run that failed within the settle window did not take, whoever looks.
        if let Some(exited) = ended
            && let Err(why) = super::judge_ended_run(
                pid,
                started,
                exited,
                chrono::Duration::from_std(super::SETTLE).ok(),
            )
        {
            return Verdict::Settle(Settlement {
                to: ClaimState::Failed,
                kind: Kind::Failed,
                pid,
                record_spawn,
                why: format!("the restarted run {run} {why}"),
            });
        }
        let exited = ended
            .and_then(|e| e.reason.clone())
            .map(|how| format!(", and has since ended ({how})"))
            .unwrap_or_default();
        let pid_words = pid.map(|p| format!(" as pid {p}")).unwrap_or_default();
        return Verdict::Settle(Settlement {
            to: ClaimState::Verified,
            kind: Kind::Verified,
            pid,
            record_spawn,
            why: format!(
                "verified by recovery: run {run} started{pid_words} at {}{exited}",
                started.at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
        });
    }
    if let Some(pid) = holder {
        return Verdict::Settle(Settlement {
            to: ClaimState::Verified,
            kind: Kind::Verified,
            pid: Some(pid),
            record_spawn,
            why: format!("verified by recovery: pid {pid} holds the lock"),
        });
    }
    if let Some(refused) = record
        .iter()
        .find(|e| e.kind == Kind::Failed.as_str() || e.kind == Kind::Duplicate.as_str())
    {
        return Verdict::Settle(Settlement {
            to: ClaimState::Failed,
            kind: Kind::Failed,
            pid: run_pid,
            record_spawn,
            why: format!(
                "the restarted run {run} did not start: {}",
                refused.reason.as_deref().unwrap_or(refused.kind.as_str())
            ),
        });
    }
    let began = claim.spawn_started.unwrap_or(claim.updated);
    if now < began + SPAWN_GRACE {
        return Verdict::Wait(began + SPAWN_GRACE);
    }
    let why = match claim.pid {
        Some(pid) => format!(
            "its claimer (session {claimer}) died after spawning pid {pid}, and run {run} \
             never recorded a start: a human must look before it runs again"
        ),
        None => format!(
            "its claimer (session {claimer}) died while spawning, and run {run} never recorded \
             a start nor holds the lock: a human must look before it runs again"
        ),
    };
    Verdict::Settle(Settlement {
        to: ClaimState::Failed,
        kind: Kind::Failed,
        pid: claim.pid,
        record_spawn: false,
        why,
    })
}

/// Whether the session "PID.start_ticks" is still the same live process: `None` when it
/// cannot be told (then the claim is left alone, never rounded to dead).
pub fn session_alive(session: &str) -> Option<bool> {
    let (pid, ticks) = session.split_once('.')?;
    let pid: u32 = pid.parse().ok()?;
    let ticks: u64 = ticks.parse().ok()?;
    match lookup(pid) {
        ProcLookup::Running(stat) => Some(stat.start_ticks == ticks),
        ProcLookup::Gone | ProcLookup::Zombie(_) => Some(false),
        ProcLookup::Denied(_) | ProcLookup::Fault(_) => None,
    }
}

/// The process holding the claim's job lock now, if it is the claim's spawn: the PID the
/// claim recorded, or a `mihari run` of the claim's run (a spawn the claimer never recorded).
fn holds_lock(claim: &Claim, config: &Config) -> Option<u32> {
    let lock = config
        .jobs
        .iter()
        .find(|j| j.id == claim.job)
        .and_then(|j| j.run_lock())?;
    let Reading::Found(holder) = read_lock(lock) else {
        return None;
    };
    if holder.liveness != Liveness::Alive {
        return None;
    }
    let ours = match (claim.pid, &claim.run) {
        (Some(pid), _) => holder.pid == Some(pid),
        (None, Some(run)) => holder.run_id.as_deref() == Some(run.as_str()),
        (None, None) => false,
    };
    if ours { holder.pid } else { None }
}

/// Fault injection for the tests: sleeps this many milliseconds when the variable is set,
/// widening the window between reading the open claims and settling them.
fn fault_pause(variable: &str) {
    if let Some(ms) = std::env::var(variable)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Actor;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
    }

    fn claim(state: ClaimState, spawn_started: Option<i64>, pid: Option<u32>) -> Claim {
        Claim {
            key: "k".into(),
            job: "collect".into(),
            action: RESTART_ACTION.into(),
            state,
            session: "4242.99".into(),
            attempts: 1,
            last_error: None,
            pid,
            created: at(0),
            updated: at(spawn_started.unwrap_or(0)),
            spawn_started: spawn_started.map(at),
            run: spawn_started.map(|_| "run-7".to_string()),
        }
    }

    fn event(id: i64, kind: Kind, reason: &str, secs: i64) -> Event {
        Event {
            id,
            at: at(secs),
            kind: kind.as_str().into(),
            job: Some("collect".into()),
            actor: Actor::Job,
            session: "5151.1".into(),
            run: Some("run-7".into()),
            workspace_hash: None,
            route: None,
            key: None,
            reason: Some(reason.into()),
        }
    }

    fn settled(verdict: Verdict) -> Settlement {
        match verdict {
            Verdict::Settle(settlement) => settlement,
            Verdict::Wait(at) => panic!("waits until {at}"),
        }
    }

    /// One row of the table: what recovery finds, and what it must make of it.
    struct Row {
        claim: Claim,
        record: Vec<Event>,
        holder: Option<u32>,
        to: ClaimState,
        kind: Kind,
        record_spawn: bool,
        pid: Option<u32>,
        words: &'static str,
    }

    #[test]
    fn the_runs_own_record_decides_before_the_lock_does() {
        let started = event(10, Kind::Started, "pid 5151", 1);
        let exited = event(11, Kind::Exited, "exit 0", 3);
        let rows = [
            // Never began to spawn: nothing was tried.
            Row {
                claim: claim(ClaimState::Claimed, None, None),
                record: vec![],
                holder: None,
                to: ClaimState::Failed,
                kind: Kind::Abandoned,
                record_spawn: false,
                pid: None,
                words: "nothing was spawned",
            },
            // Killed between the fork and its record; the run started and exited 0.
            Row {
                claim: claim(ClaimState::Claimed, Some(0), None),
                record: vec![started.clone(), exited.clone()],
                holder: None,
                to: ClaimState::Verified,
                kind: Kind::Verified,
                record_spawn: true,
                pid: Some(5151),
                words: "has since ended (exit 0)",
            },
            // Killed while verifying; the run started, exited, and holds nothing now.
            Row {
                claim: claim(ClaimState::Spawned, Some(0), Some(5151)),
                record: vec![started, exited],
                holder: None,
                to: ClaimState::Verified,
                kind: Kind::Verified,
                record_spawn: false,
                pid: Some(5151),
                words: "started as pid 5151",
            },
            // Killed while verifying; the run exited 4 a second after its start: it did not
            // take, and the claim fails with the exit in its words.
            Row {
                claim: claim(ClaimState::Spawned, Some(0), Some(5151)),
                record: vec![
                    event(10, Kind::Started, "pid 5151", 1),
                    event(11, Kind::Exited, "exit 4", 2),
                ],
                holder: None,
                to: ClaimState::Failed,
                kind: Kind::Failed,
                record_spawn: false,
                pid: Some(5151),
                words: "exited 4 within 1.0 s of its start",
            },
            // A failure long after its start is the run's own end, not a restart that did
            // not take: verified, and the exit is judged as any run's.
            Row {
                claim: claim(ClaimState::Spawned, Some(0), Some(5151)),
                record: vec![
                    event(10, Kind::Started, "pid 5151", 1),
                    event(11, Kind::Exited, "killed by SIGTERM", 50),
                ],
                holder: None,
                to: ClaimState::Verified,
                kind: Kind::Verified,
                record_spawn: false,
                pid: Some(5151),
                words: "has since ended (killed by SIGTERM)",
            },
            // Still running and holding the lock, its start unrecorded (no store then).
            Row {
                claim: claim(ClaimState::Spawned, Some(0), Some(5151)),
                record: vec![],
                holder: Some(5151),
                to: ClaimState::Verified,
                kind: Kind::Verified,
                record_spawn: false,
                pid: Some(5151),
                words: "holds the lock",
            },
            // The run found the job already running.
            Row {
                claim: claim(ClaimState::Claimed, Some(0), None),
                record: vec![event(12, Kind::Duplicate, "already running (pid 77)", 1)],
                holder: None,
                to: ClaimState::Failed,
                kind: Kind::Failed,
                record_spawn: true,
                pid: Some(5151),
                words: "did not start: already running",
            },
            // No record at all, long after: a human must look.
            Row {
                claim: claim(ClaimState::Claimed, Some(0), None),
                record: vec![],
                holder: None,
                to: ClaimState::Failed,
                kind: Kind::Failed,
                record_spawn: false,
                pid: None,
                words: "never recorded a start",
            },
        ];
        for row in rows {
            let got = settled(judge_orphan(&row.claim, &row.record, row.holder, at(60)));
            assert_eq!(
                (got.to, got.kind, got.record_spawn, got.pid),
                (row.to, row.kind, row.record_spawn, row.pid),
                "{:?} {:?}: {got:?}",
                row.claim,
                row.record
            );
            assert!(got.why.contains(row.words), "{}", got.why);
        }
    }

    #[test]
    fn a_spawn_that_may_still_be_starting_is_waited_for() {
        let orphan = claim(ClaimState::Claimed, Some(0), None);
        assert_eq!(
            judge_orphan(&orphan, &[], None, at(3)),
            Verdict::Wait(at(0) + SPAWN_GRACE)
        );
        // At the end of the grace period it is settled.
        assert_eq!(
            settled(judge_orphan(&orphan, &[], None, at(10))).to,
            ClaimState::Failed
        );
    }
}

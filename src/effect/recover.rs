//! The recovery pass: claims whose claimer died between claiming and finishing.
//!
//! A claim is made before a spawn, so a claimer killed mid-way leaves it `claimed` (nothing
//! spawned) or `spawned` (not verified). Left alone, such a claim would block every later
//! restart of the same situation as a duplicate. This pass resolves each open claim whose
//! session (PID + start time) is gone: `claimed` becomes failed — nothing was spawned, so the
//! same key may be tried again once — and `spawned` becomes verified if the spawned process
//! holds the job's lock, failed otherwise. A claim of a live session is left to its owner.

use crate::config::Config;
use crate::core::{Liveness, Reading};
use crate::probe::lock::read_lock;
use crate::probe::proc::{ProcLookup, lookup};
use crate::store::{Claim, ClaimState, Kind, NewEvent, Store};

/// Resolves the open claims of dead sessions; returns one line per claim resolved.
pub fn recover(store: &mut Store, config: &Config) -> Vec<String> {
    let Ok(open) = store.open_claims() else {
        return Vec::new();
    };
    let mut resolved = Vec::new();
    for claim in open {
        if session_alive(&claim.session) != Some(false) {
            continue;
        }
        let holder = holds_lock(&claim, config);
        let (to, why) = match (claim.state, claim.spawn_started, holder) {
            (ClaimState::Claimed, None, _) => (
                ClaimState::Failed,
                format!(
                    "its claimer (session {}) died between claiming and spawning; nothing \
                     was spawned",
                    claim.session
                ),
            ),
            (_, _, Some(pid)) => {
                if claim.state == ClaimState::Claimed {
                    // Spawned, never recorded: the record says so now.
                    let _ = store.append(
                        NewEvent::new(Kind::Spawned)
                            .job(&claim.job)
                            .key(&claim.key)
                            .run(claim.run.as_deref())
                            .reason(format!("pid {pid}, recorded by recovery")),
                    );
                }
                (
                    ClaimState::Verified,
                    format!("verified by recovery: pid {pid} holds the lock"),
                )
            }
            (ClaimState::Claimed, Some(_), None) => (
                ClaimState::Failed,
                format!(
                    "its claimer (session {}) died while spawning; a spawn may have happened, \
                     and nothing holds the lock now: a human must look before it runs again",
                    claim.session
                ),
            ),
            _ => (
                ClaimState::Failed,
                format!(
                    "its claimer (session {}) died after spawning pid {}, which does not hold \
                     the lock",
                    claim.session,
                    claim.pid.unwrap_or(0)
                ),
            ),
        };
        let kind = if to == ClaimState::Verified {
            Kind::Verified
        } else {
            Kind::Failed
        };
        let error = (to == ClaimState::Failed).then_some(why.as_str());
        let done = store.advance_claim(
            &claim.key,
            claim.state,
            to,
            holder,
            error,
            NewEvent::new(kind)
                .job(&claim.job)
                .key(&claim.key)
                .reason(why.clone()),
        );
        if done.unwrap_or(false) {
            resolved.push(format!("{}: {why}", claim.job));
        }
    }
    resolved
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
        .and_then(|j| j.lock.as_deref())?;
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

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
        let (to, why) = match claim.state {
            ClaimState::Claimed => (
                ClaimState::Failed,
                format!(
                    "its claimer (session {}) died between claiming and spawning; nothing \
                     was spawned",
                    claim.session
                ),
            ),
            _ => match holds_lock(&claim, config) {
                true => (
                    ClaimState::Verified,
                    format!(
                        "verified by recovery: pid {} holds the lock",
                        claim.pid.unwrap_or(0)
                    ),
                ),
                false => (
                    ClaimState::Failed,
                    format!(
                        "its claimer (session {}) died after spawning pid {}, which does not \
                         hold the lock",
                        claim.session,
                        claim.pid.unwrap_or(0)
                    ),
                ),
            },
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
            None,
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

/// Whether the claim's spawned process holds its job's lock now.
fn holds_lock(claim: &Claim, config: &Config) -> bool {
    let Some(pid) = claim.pid else {
        return false;
    };
    let Some(lock) = config
        .jobs
        .iter()
        .find(|j| j.id == claim.job)
        .and_then(|j| j.lock.as_deref())
    else {
        return false;
    };
    matches!(read_lock(lock), Reading::Found(holder)
        if holder.pid == Some(pid) && holder.liveness == Liveness::Alive)
}

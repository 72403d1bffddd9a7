//! Whether the machine may restart a job by itself, now (SPEC §1 lesson 5, §5).
//!
//! Only when the jobs file says `auto_restart: true` with its reason and a command, the job
//! is DEAD_LOCK_STALE or SHOULD_BE_RUNNING (never UNKNOWN, never STALLED), no rule about how
//! its last run ended asks a human to look first (exited 0 short of its total, failed after
//! reaching it, a failed phase: `Assessment::restart_by_hand`), the daily cap is
//! not spent (counted from the event log over a rolling 24 h, so it survives a watcher
//! restart) and the backoff has passed: the first restart at once, then 10 s doubling to
//! 5 min, reset after 10 min without a restart. "It keeps failing" is a signal to look for
//! the cause, not to try harder. Pure: the history and the clock are arguments.

use chrono::{DateTime, Duration, Utc};

use super::assess::{Assessment, State};
use super::evidence::History;
use crate::config::JobSpec;

/// The first wait between two automatic restarts.
pub const BACKOFF_FIRST: Duration = Duration::seconds(10);
/// The longest wait between two automatic restarts.
pub const BACKOFF_MAX: Duration = Duration::minutes(5);
/// A job that has gone this long without an automatic restart starts its backoff afresh.
pub const BACKOFF_RESET: Duration = Duration::minutes(10);

/// The machine's answer for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoVerdict {
    /// `auto_restart` is false: only a human restarts it.
    NotAllowed(String),
    /// The job needs no restart (running, complete, stalled, unknown...).
    NotNeeded,
    /// Restart it now.
    Now,
    /// Restart it at this moment, when its backoff has passed.
    Wait(DateTime<Utc>),
    /// The daily cap is spent: a human must look for the cause. It frees when the oldest of
    /// the day's restarts turns a day old (`frees_at`), and the watcher looks again then.
    CapSpent {
        restarts: usize,
        cap: u32,
        frees_at: DateTime<Utc>,
    },
    /// The machine's restart of it is under way (spawned, its run not yet seen holding the
    /// lock): nothing more to decide or to tell until that restart's outcome is known. The
    /// spawn that spent the cap is not yet a run that failed.
    UnderWay,
}

/// Decides whether `job`, judged as `row`, may be restarted by the machine at `now`.
pub fn auto_restart(
    job: &JobSpec,
    row: &Assessment,
    history: &History,
    cap: u32,
    now: DateTime<Utc>,
) -> AutoVerdict {
    let wants_restart = match row.state {
        State::DeadLockStale => true,
        // Nothing new is dispatched while something is RED.
        State::ShouldBeRunning => row.held.is_none(),
        _ => false,
    };
    if !wants_restart {
        return AutoVerdict::NotNeeded;
    }
    // How its last run ended asks a human to look first (exited 0 short of its total, failed
    // after reaching it, a failed phase): restarting it by itself would hide that.
    if let Some(why) = &row.restart_by_hand {
        return AutoVerdict::NotAllowed(why.clone());
    }
    if !job.auto_restart {
        return AutoVerdict::NotAllowed(
            job.auto_restart_blocked_reason
                .clone()
                .unwrap_or_else(|| "auto_restart is false".to_string()),
        );
    }
    let day_ago = now - Duration::hours(24);
    let recent: Vec<DateTime<Utc>> = history
        .auto_spawns_24h
        .iter()
        .copied()
        .filter(|at| *at > day_ago && *at <= now)
        .collect();
    if recent.len() as u64 >= u64::from(cap) {
        let oldest = recent.iter().min().copied().unwrap_or(now);
        return AutoVerdict::CapSpent {
            restarts: recent.len(),
            cap,
            frees_at: oldest + Duration::hours(24) + Duration::milliseconds(1),
        };
    }
    match next_allowed(&recent) {
        Some(at) if at > now => AutoVerdict::Wait(at),
        _ => AutoVerdict::Now,
    }
}

/// When the next automatic restart may go, given the earlier ones (oldest first): at once
/// after none, or after a quiet [`BACKOFF_RESET`]; otherwise the last one plus a wait that
/// doubles with each restart of the current streak.
pub fn next_allowed(spawns: &[DateTime<Utc>]) -> Option<DateTime<Utc>> {
    let last = *spawns.last()?;
    // The streak: restarts each within BACKOFF_RESET of the one before, ending at the last.
    let mut streak = 1u32;
    for pair in spawns.windows(2).rev() {
        if pair[1] - pair[0] < BACKOFF_RESET {
            streak += 1;
        } else {
            break;
        }
    }
    let wait = backoff(streak);
    Some(last + wait).filter(|at| *at < last + BACKOFF_RESET)
}

/// The wait after the `n`th restart of a streak: 10 s, 20 s, 40 s ... up to 5 min.
pub fn backoff(n: u32) -> Duration {
    let doubled = BACKOFF_FIRST
        .num_seconds()
        .saturating_mul(1i64 << n.saturating_sub(1).min(16));
    Duration::seconds(doubled.min(BACKOFF_MAX.num_seconds()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap() + Duration::seconds(secs)
    }

    #[test]
    fn the_backoff_doubles_from_ten_seconds_to_five_minutes() {
        let waits: Vec<i64> = (1..=7).map(|n| backoff(n).num_seconds()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn the_first_restart_goes_at_once_and_the_next_ones_wait() {
        assert_eq!(next_allowed(&[]), None);
        assert_eq!(next_allowed(&[t(0)]), Some(t(10)));
        assert_eq!(next_allowed(&[t(0), t(10)]), Some(t(30)));
        assert_eq!(next_allowed(&[t(0), t(10), t(30)]), Some(t(70)));
    }

    #[test]
    fn ten_quiet_minutes_reset_the_backoff() {
        // A restart long after the streak starts a new one.
        assert_eq!(next_allowed(&[t(0), t(10), t(30), t(2000)]), Some(t(2010)));
        // A wait reaching past the reset means no wait at all.
        let long: Vec<DateTime<Utc>> = (0..8).map(|i| t(i * 290)).collect();
        assert!(next_allowed(&long).is_some());
    }
}

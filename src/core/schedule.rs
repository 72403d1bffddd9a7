//! When a job that runs on a schedule is due, and whether it is overdue (SPEC §2 `schedule`,
//! the `overdue` predicate; §4, the schedule paragraph).
//!
//! A scheduled job is idle between its runs by plan. It is due again `every` after the end of
//! its last success, or at the first time of its cron expression after that end; it is
//! overdue when `grace` has passed since that due time and no run has ended with exit 0 since,
//! or at once when the last run failed. The due time is a pure function of the schedule, the
//! ends of the runs the event log holds and `now`, computed once per judgment. A job with no
//! success recorded counts from the moment mihari first saw it (the oldest event of the job in
//! its event log: the watcher records its first sight of every job), so a cron line that never
//! fires is noticed too, one period after the job was first watched. Cron hours are read in
//! the job's zone; summer time is as croner walks it: a time skipped when the clock goes
//! forward is due when the clock comes out of the gap (as Debian's cron runs it), and a time
//! repeated when it goes back is due once. The one thing read from outside is the machine's
//! zone, for `time_zone: local`, as chrono's `Local` reads `TZ` and `/etc/localtime`. Nothing
//! here reads a file, a process or the clock.

use chrono::{DateTime, Duration, Local, TimeZone, Utc};
use serde::Serialize;

use super::evidence::RunExit;
use crate::config::{Cadence, Schedule, TimeZoneName};

/// The longest duration a schedule accepts, in seconds (ten years): longer ones are typos.
pub const LONGEST_SEC: u64 = 3650 * 86_400;

/// What a duration is written with, and how many seconds one of it is.
const UNITS: [(char, u64); 4] = [('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];

/// Reads a duration as the jobs file writes it: a whole number of at least 1 and one unit,
/// `30s`, `20m`, `1h`, `1d`. `None` for anything else (a bare number, `1h30m`, `1.5h`, `0m`).
pub fn parse_duration(text: &str) -> Option<u64> {
    let unit = text.chars().last()?;
    let (_, per) = UNITS.iter().find(|(name, _)| *name == unit)?;
    let number = &text[..text.len() - 1];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds = number.parse::<u64>().ok()?.checked_mul(*per)?;
    (1..=LONGEST_SEC).contains(&seconds).then_some(seconds)
}

/// A duration in the reasons' words: "20 min", "5 min", "1 h", "1 d", "90 s".
pub fn duration_words(sec: u64) -> String {
    match sec {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// Parses a cron expression of five fields, as crontab(5) writes them (minute, hour, day of
/// month, month, day of week; names, ranges, steps and lists; `@hourly` and the like), and
/// refuses one that never matches. The error says what is wrong, in croner's words.
pub fn parse_cron(text: &str) -> Result<croner::Cron, String> {
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build();
    let cron = parser
        .parse(text)
        .map_err(|error| error.to_string().trim_end_matches('.').to_string())?;
    // A pattern that names no real day (the 31st of February) has no next time at all.
    let from = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
    if let Some(from) = from
        && cron.find_next_occurrence(&from, true).is_err()
    {
        return Err("it never matches a real day".to_string());
    }
    Ok(cron)
}

/// Where a scheduled job stands at one judgment.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// The moment the job is overdue unless a run ends with exit 0 before it ("next due by"):
    /// the due time plus grace, or the failed run's end when the last run failed. In the past
    /// (or now) exactly when `overdue`. `None` for a job with no run and no record of when
    /// mihari first saw it: nothing to count from yet.
    pub by: Option<DateTime<Utc>>,
    /// Whether a run was missed or failed: `should_run_when: [overdue]` holds.
    pub overdue: bool,
    /// In words, with times as "2026-11-29 12:00:00 UTC" stamps (a screen rewrites them in its
    /// zone): "ran ... ok; next due by ..." or "overdue: the last success was ...".
    pub words: String,
}

/// A scheduled job's first due time after what it counts from, and what it was computed for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DueAfter {
    pub schedule: Schedule,
    /// The end of the last success, else when mihari first saw the job.
    pub anchor: DateTime<Utc>,
    pub due: Result<DateTime<Utc>, String>,
}

impl DueAfter {
    /// Computes the first due time of `schedule` after the anchor of these runs (the last
    /// success's end, else the first sight); `None` when there is none to count from.
    pub fn of(
        schedule: &Schedule,
        last_success: Option<DateTime<Utc>>,
        first_seen: Option<DateTime<Utc>>,
    ) -> Option<DueAfter> {
        let anchor = last_success.or(first_seen)?;
        Some(DueAfter {
            schedule: schedule.clone(),
            anchor,
            due: next_due_after(schedule, anchor),
        })
    }

    /// Whether this was computed for `schedule` counting from `anchor`.
    pub fn is_for(&self, schedule: &Schedule, anchor: DateTime<Utc>) -> bool {
        self.anchor == anchor && self.schedule == *schedule
    }
}

/// The runs of a job that decide when it is due, as the event log holds them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runs<'a> {
    /// The end of the newest run that exited 0.
    pub last_success: Option<DateTime<Utc>>,
    /// How the newest run ended (success or not).
    pub last_exit: Option<&'a RunExit>,
    /// When mihari first saw the job: what a job with no success counts from.
    pub first_seen: Option<DateTime<Utc>>,
    /// The due time after the anchor, computed before: used when it is for this schedule and
    /// anchor.
    pub known: Option<&'a DueAfter>,
}

/// Judges a scheduled job at `now`: when it is due, and whether it is overdue. An error (a
/// cron expression with no time after the anchor) is a fault, never "overdue".
pub fn judge(schedule: &Schedule, runs: Runs<'_>, now: DateTime<Utc>) -> Result<Due, String> {
    let stamp = |at: DateTime<Utc>| at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let grace = Duration::seconds(schedule.grace_sec as i64);
    let plan = plan_words(schedule);
    // A run that failed after the last success: the job is due again at once. Any end (a code
    // other than 0, a signal, an end of unknown kind) that is not a success is a failure.
    if let Some(exit) = runs.last_exit
        && !exit.succeeded()
        && runs.last_success.is_none_or(|success| exit.at > success)
    {
        let success = match runs.last_success {
            Some(at) => format!("the last success was {}", stamp(at)),
            None => "no success is recorded".to_string(),
        };
        return Ok(Due {
            by: Some(exit.at),
            overdue: true,
            words: format!(
                "overdue: the last run {} at {}; {success} ({plan})",
                exit.words(),
                stamp(exit.at)
            ),
        });
    }
    // What the next due time counts from: the last success's end, else mihari's first sight.
    let (anchor, first_seen) = match (runs.last_success, runs.first_seen) {
        (Some(success), _) => (success, None),
        (None, Some(seen)) => (seen, Some(seen)),
        (None, None) => {
            return Ok(Due {
                by: None,
                overdue: false,
                words: format!(
                    "no run recorded yet, and no record of when mihari first saw it: not \
                     overdue until one period after a watcher first sees it ({plan})"
                ),
            });
        }
    };
    let due = match runs.known.filter(|known| known.is_for(schedule, anchor)) {
        Some(known) => known.due.clone()?,
        None => next_due_after(schedule, anchor)?,
    };
    let by = due + grace;
    let overdue = now >= by;
    let words = match (overdue, first_seen) {
        (false, None) => format!(
            "ran {} ok; next due by {} ({plan})",
            stamp(anchor),
            stamp(by)
        ),
        (false, Some(seen)) => format!(
            "no run recorded yet; due by {} ({plan}, counted from {}, when mihari first saw \
             it)",
            stamp(by),
            stamp(seen)
        ),
        (true, None) => format!(
            "overdue: the last success was {}, {}",
            stamp(anchor),
            due_words(schedule, due, &plan)
        ),
        (true, Some(seen)) => format!(
            "overdue: no run has ended with exit 0 since mihari first saw it at {}, {}",
            stamp(seen),
            due_words(schedule, due, &plan)
        ),
    };
    Ok(Due {
        by: Some(by),
        overdue,
        words,
    })
}

/// The schedule in words: "due every 20 min + 5 min grace", "cron '*/20 * * * *' in local
/// time + 5 min grace".
fn plan_words(schedule: &Schedule) -> String {
    let grace = duration_words(schedule.grace_sec);
    match &schedule.cadence {
        Cadence::Every { sec } => format!("due every {} + {grace} grace", duration_words(*sec)),
        Cadence::Cron { expression } => format!(
            "cron '{}' in {} time + {grace} grace",
            expression.as_str(),
            match schedule.time_zone {
                TimeZoneName::Local => "local",
                TimeZoneName::Utc => "UTC",
            }
        ),
    }
}

/// How an overdue job's due time came: "due every 20 min + 5 min grace", "due at ... (cron
/// '...' in local time + 5 min grace)".
fn due_words(schedule: &Schedule, due: DateTime<Utc>, plan: &str) -> String {
    match schedule.cadence {
        Cadence::Every { .. } => plan.to_string(),
        Cadence::Cron { .. } => format!("due at {} ({plan})", due.format("%Y-%m-%d %H:%M:%S UTC")),
    }
}

/// The first due time after `anchor`: `anchor + every`, or the first time of the cron
/// expression strictly after it, in the schedule's zone.
pub fn next_due_after(schedule: &Schedule, anchor: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    match &schedule.cadence {
        Cadence::Every { sec } => Ok(anchor + Duration::seconds(*sec as i64)),
        Cadence::Cron { expression } => match schedule.time_zone {
            TimeZoneName::Utc => next_in(expression.cron(), &Utc, anchor),
            TimeZoneName::Local => next_in(expression.cron(), &Local, anchor),
        },
    }
}

/// The first time of `cron` strictly after `anchor`, its fields read on the wall clock of
/// `zone`.
fn next_in<Tz: TimeZone>(
    cron: &croner::Cron,
    zone: &Tz,
    anchor: DateTime<Utc>,
) -> Result<DateTime<Utc>, String> {
    cron.find_next_occurrence(&anchor.with_timezone(zone), false)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|error| {
            format!(
                "cron '{}' has no time after {}: {error}",
                cron.pattern.as_str(),
                anchor.format("%Y-%m-%d %H:%M:%S UTC")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_one_unit_and_a_whole_number() {
        assert_eq!(parse_duration("30s"), Some(30));
        assert_eq!(parse_duration("20m"), Some(1200));
        assert_eq!(parse_duration("1h"), Some(3600));
        assert_eq!(parse_duration("1d"), Some(86_400));
        for bad in [
            "", "30", "m", "0m", "1h30m", "1.5h", "-5m", "+5m", " 5m", "5 m", "5M", "5min", "3651d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn cron_takes_five_fields_that_can_match() {
        assert!(parse_cron("*/20 * * * *").is_ok());
        assert!(parse_cron("@hourly").is_ok());
        assert!(parse_cron("0 0 29 2 *").is_ok());
        for bad in [
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
            "0 0 31 2 *",
            "*/0 * * * *",
        ] {
            assert!(parse_cron(bad).is_err(), "{bad}");
        }
    }
}

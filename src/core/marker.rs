//! Markers judged: which of a job's markers are stale, which only a human may look at, and
//! which may be released.
//!
//! A pure function of the job, its marker readings and `now` (SPEC §5): a marker holding a PID
//! or a JSON lock is judged like a lock — its holder dead is stale, alive is fine, unknown is
//! never released; a bare marker (a folder, an empty file nobody locks, a file holding
//! anything else) is stale when older than `stale_after_sec`. A fault is never "no marker",
//! and a modification time in the future is never an age of 0. Nothing here reads a file or
//! the clock.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::assess::fmt_secs;
use super::evidence::{Evidence, Liveness, MarkerKind, MarkerReading, Reading};
use crate::config::{JobSpec, MarkerSpec};

/// What one marker comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerState {
    /// Not there: nothing gates the job.
    Absent,
    /// There, and as it should be: a live holder, or younger than `stale_after_sec`.
    Fine,
    /// Its holder is gone, or it is bare and older than `stale_after_sec`: it may be released.
    Stale,
    /// Its holder cannot be judged (permission denied, a lock nobody can read, a time in the
    /// future): STALE for a human to look at, never released.
    Unknown,
    /// It cannot be looked at (a link, a named pipe, a folder someone else can change): STALE,
    /// never released.
    Fault,
}

impl MarkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerState::Absent => "absent",
            MarkerState::Fine => "fine",
            MarkerState::Stale => "stale",
            MarkerState::Unknown => "unknown",
            MarkerState::Fault => "fault",
        }
    }

    /// Whether it puts the job in STALE.
    pub fn needs_a_look(self) -> bool {
        matches!(
            self,
            MarkerState::Stale | MarkerState::Unknown | MarkerState::Fault
        )
    }
}

/// One marker of a job, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgedMarker {
    /// Its place in the job's `markers:`.
    pub index: usize,
    pub path: PathBuf,
    pub stale_after_sec: u64,
    pub state: MarkerState,
    /// Its age at the judgment, when it is there and its time is not in the future.
    pub age_sec: Option<f64>,
    /// The judgment in words, naming the marker: "marker '/data/run/.resumed' is 2 h 05 min
    /// old, its holder is gone: pid 4242: no such process".
    pub words: String,
    pub reading: Option<MarkerReading>,
}

/// The command that releases the marker at `path` of job `id`, as the operator types it:
/// naming the path (quoted for a POSIX shell) when `name_the_path`, because the job has
/// several stale markers and the bare command would be refused.
pub fn release_command(id: &str, path: &std::path::Path, name_the_path: bool) -> String {
    let path = super::text::inert(&path.display().to_string());
    if name_the_path {
        format!(
            "mihari release-marker {id} '{}'",
            path.replace('\'', r"'\''")
        )
    } else {
        format!("mihari release-marker {id}")
    }
}

/// Every declared marker of `job`, judged at `now`.
pub fn judge_markers(job: &JobSpec, evidence: &Evidence, now: DateTime<Utc>) -> Vec<JudgedMarker> {
    job.markers
        .iter()
        .enumerate()
        .map(|(index, spec)| judge_marker(index, spec, evidence.markers.get(index), now))
        .collect()
}

/// One marker, the `index`-th of its job, judged at `now` from its reading (`None`: not read).
pub fn judge_marker(
    index: usize,
    spec: &MarkerSpec,
    reading: Option<&Reading<MarkerReading>>,
    now: DateTime<Utc>,
) -> JudgedMarker {
    let named = format!(
        "marker '{}'",
        super::text::inert(&spec.path.display().to_string())
    );
    let (state, age_sec, words, found) = match reading {
        None | Some(Reading::Empty) => (
            MarkerState::Absent,
            None,
            format!("{named} is not there"),
            None,
        ),
        Some(Reading::Fault(error)) => (
            MarkerState::Fault,
            None,
            format!(
                "{named}: fault: {error}; cannot tell whether it is stale, and it is never \
                 released while it cannot be looked at"
            ),
            None,
        ),
        Some(Reading::Found(marker)) => {
            let (state, age, words) = judge_one(&named, spec.stale_after_sec, marker, now);
            (state, age, words, Some(marker.clone()))
        }
    };
    JudgedMarker {
        index,
        path: spec.path.clone(),
        stale_after_sec: spec.stale_after_sec,
        state,
        age_sec,
        words,
        reading: found,
    }
}

fn judge_one(
    named: &str,
    stale_after_sec: u64,
    marker: &MarkerReading,
    now: DateTime<Utc>,
) -> (MarkerState, Option<f64>, String) {
    if let Some(ahead) = super::times::in_the_future(marker.modified, now) {
        return (
            MarkerState::Unknown,
            None,
            format!(
                "{named}: its modification time {} (UTC) is {ahead}; cannot tell its age, \
                 never released while unknown",
                marker.modified.format("%Y-%m-%d %H:%M:%S")
            ),
        );
    }
    let age = (now - marker.modified).num_milliseconds().max(0) as f64 / 1000.0;
    let aged = fmt_secs(age);
    let what = match marker.kind {
        MarkerKind::File => "",
        MarkerKind::Folder => " (a folder)",
    };
    match &marker.holder {
        Some(holder) => {
            let who = holder
                .pid
                .map_or_else(|| "its holder".to_string(), |pid| format!("pid {pid}"));
            match holder.liveness {
                Liveness::Dead => (
                    MarkerState::Stale,
                    Some(age),
                    format!(
                        "{named}{what} is {aged} old, its holder is gone: {who}: {}",
                        holder.why
                    ),
                ),
                Liveness::Alive => (
                    MarkerState::Fine,
                    Some(age),
                    format!("{named}{what} is held by {who}, alive"),
                ),
                Liveness::Unknown => (
                    MarkerState::Unknown,
                    Some(age),
                    format!(
                        "{named}{what} is {aged} old, its holder is unknown: {}; never \
                         released while unknown",
                        holder.why
                    ),
                ),
            }
        }
        None if age > stale_after_sec as f64 => (
            MarkerState::Stale,
            Some(age),
            format!(
                "{named}{what} is {aged} old (stale_after_sec {stale_after_sec}) and no process \
                 holds it"
            ),
        ),
        None => (
            MarkerState::Fine,
            Some(age),
            format!("{named}{what} is {aged} old (stale after {stale_after_sec} s)"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::evidence::LockHolder;

    fn at(secs_ago: i64, now: DateTime<Utc>) -> DateTime<Utc> {
        now - chrono::Duration::seconds(secs_ago)
    }

    fn holder(liveness: Liveness) -> LockHolder {
        LockHolder {
            pid: Some(4242),
            recorded_start: None,
            cmdline: None,
            run_id: None,
            modified: DateTime::UNIX_EPOCH,
            liveness,
            why: "no such process".to_string(),
            started_at: None,
            start_ticks: None,
            stopped: false,
        }
    }

    fn found(
        kind: MarkerKind,
        secs_ago: i64,
        holder: Option<LockHolder>,
        now: DateTime<Utc>,
    ) -> Reading<MarkerReading> {
        Reading::Found(MarkerReading {
            kind,
            modified: at(secs_ago, now),
            size: 0,
            holder,
            content: String::new(),
        })
    }

    /// One row per boundary: a marker's reading -> its state and the words that say why.
    #[test]
    fn each_marker_reading_comes_to_one_state() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let spec = MarkerSpec {
            path: PathBuf::from("/data/run/.resumed"),
            stale_after_sec: 1800,
        };
        let rows: Vec<(&str, Option<Reading<MarkerReading>>, MarkerState, &str)> = vec![
            ("not read", None, MarkerState::Absent, "is not there"),
            (
                "not there",
                Some(Reading::Empty),
                MarkerState::Absent,
                "is not there",
            ),
            (
                "a link at its path",
                Some(Reading::Fault(
                    "'/data/run/.resumed' is a symbolic link".into(),
                )),
                MarkerState::Fault,
                "fault: '/data/run/.resumed' is a symbolic link",
            ),
            (
                "bare, one second under its age",
                Some(found(MarkerKind::File, 1799, None, now)),
                MarkerState::Fine,
                "stale after 1800 s",
            ),
            (
                "bare, one second past its age",
                Some(found(MarkerKind::File, 1801, None, now)),
                MarkerState::Stale,
                "(stale_after_sec 1800) and no process holds it",
            ),
            (
                "a bare folder past its age",
                Some(found(MarkerKind::Folder, 7200, None, now)),
                MarkerState::Stale,
                "(a folder) is 2 h 00 min old",
            ),
            (
                "its holder gone, however young",
                Some(found(
                    MarkerKind::File,
                    1,
                    Some(holder(Liveness::Dead)),
                    now,
                )),
                MarkerState::Stale,
                "its holder is gone: pid 4242: no such process",
            ),
            (
                "its holder alive, however old",
                Some(found(
                    MarkerKind::File,
                    86_400,
                    Some(holder(Liveness::Alive)),
                    now,
                )),
                MarkerState::Fine,
                "held by pid 4242, alive",
            ),
            (
                "its holder unknown",
                Some(found(
                    MarkerKind::File,
                    86_400,
                    Some(holder(Liveness::Unknown)),
                    now,
                )),
                MarkerState::Unknown,
                "never released while unknown",
            ),
            (
                "written an hour in the future: never an age of 0",
                Some(found(MarkerKind::File, -3600, None, now)),
                MarkerState::Unknown,
                "in the future",
            ),
        ];
        for (name, reading, state, says) in rows {
            let judged = judge_marker(0, &spec, reading.as_ref(), now);
            assert_eq!(judged.state, state, "{name}: {}", judged.words);
            assert!(judged.words.contains(says), "{name}: {}", judged.words);
            assert!(
                judged.words.contains("marker '/data/run/.resumed'"),
                "{name}: the marker is named: {}",
                judged.words
            );
            assert_eq!(
                state.needs_a_look(),
                matches!(
                    state,
                    MarkerState::Stale | MarkerState::Unknown | MarkerState::Fault
                ),
                "{name}"
            );
        }
    }
}

//! Locks and the liveness of their holders.
//!
//! This module owns reading a lock file (a bare PID, or JSON as `mihari run` writes it) and
//! judging whether the process it names still holds it: alive, dead or unknown. The judgement
//! is a pure function ([`judge_lock`]) of the lock's text, its modification time, what `/proc`
//! says about the PID and a tick-to-wall-clock conversion, so every boundary is table-tested
//! without processes. It must never round "cannot tell" down to dead: a dead verdict can lead
//! to a restart, and restarting a healthy job runs it twice. It never deletes or writes locks.

use std::path::Path;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use super::proc::{self, PID_MAX_LIMIT, ProcLookup};
use super::safe_open::Role;
use crate::core::text::inert;
use crate::core::{Liveness, LockHolder, Reading};

/// A lock is a PID and a little JSON; anything longer is not a lock we understand, and
/// reading it whole could be expensive.
const LOCK_READ_LIMIT: u64 = 64 * 1024;

/// How much later than the lock's mtime a holder may appear to have started and still be the
/// one that wrote it. Both clocks are coarse: the start time is truncated to a clock tick
/// (10 ms at the usual `USER_HZ` of 100), and the mtime comes from the kernel's coarse clock,
/// up to a jiffy (1-10 ms) behind. A job that writes its lock the moment it starts therefore
/// often appears to have started a few milliseconds after writing it.
pub const CLOCK_SLACK: TimeDelta = TimeDelta::milliseconds(50);

/// Past this, a bare-PID holder that started after the lock was written did not write it: the
/// PID was reused. Between [`CLOCK_SLACK`] and this the answer is unknown: a step of the
/// real-time clock since the lock was written (NTP at boot) shifts the reconstructed start
/// time by the size of the step, and a wrongly dead verdict restarts a healthy job.
pub const REUSE_MARGIN: TimeDelta = TimeDelta::seconds(2);

/// What a lock file says, once parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockContent {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` when the lock was written (JSON locks only).
    pub start_time: Option<u64>,
    /// Already inert.
    pub cmdline: Option<String>,
    /// Already inert.
    pub run_id: Option<String>,
}

/// Parses a lock's text: a bare PID ("1234", surrounding whitespace allowed) or a JSON
/// object `{"pid": 1234, "start_time": 98765, "cmdline": "...", "run_id": "..."}` (other keys
/// ignored). The error says what is wrong in words, without quoting the content (the caller
/// quotes a truncated, inert excerpt).
pub fn parse_lock(text: &str) -> Result<LockContent, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the lock file is empty".to_string());
    }
    if trimmed.starts_with('{') {
        return parse_json_lock(trimmed);
    }
    if !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a PID and not a JSON object".to_string());
    }
    let pid = trimmed
        .parse::<u64>()
        .map_err(|_| "the PID is out of range".to_string())?;
    Ok(LockContent {
        pid: checked_pid(pid)?,
        start_time: None,
        cmdline: None,
        run_id: None,
    })
}

fn parse_json_lock(text: &str) -> Result<LockContent, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let Value::Object(fields) = value else {
        return Err("not a JSON object".to_string());
    };
    let pid = match fields.get("pid") {
        Some(value) => whole_number(value).ok_or("'pid' is not a whole number")?,
        None => return Err("no 'pid' in the JSON lock".to_string()),
    };
    let start_time = match fields.get("start_time") {
        None | Some(Value::Null) => None,
        Some(value) => Some(whole_number(value).ok_or("'start_time' is not a whole number")?),
    };
    let cmdline = match fields.get("cmdline") {
        Some(Value::String(text)) => Some(inert(text)),
        Some(Value::Array(words)) => Some(inert(
            &words
                .iter()
                .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" "),
        )),
        _ => None,
    };
    let run_id = match fields.get("run_id") {
        Some(Value::String(text)) => Some(inert(text)),
        Some(Value::Number(number)) => Some(number.to_string()),
        _ => None,
    };
    Ok(LockContent {
        pid: checked_pid(pid)?,
        start_time,
        cmdline,
        run_id,
    })
}

/// A non-negative integer, as a JSON number or a string of digits.
fn whole_number(value: &Value) -> Option<u64> {
    match value {
        Value::Number(number) => number.as_u64(),
        Value::String(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse().ok()
        }
        _ => None,
    }
}

fn checked_pid(pid: u64) -> Result<u32, String> {
    match u32::try_from(pid) {
        Ok(pid) if pid != 0 && pid <= PID_MAX_LIMIT => Ok(pid),
        _ => Err(format!("PID {pid} is out of range")),
    }
}

/// Judges a lock from its text, its mtime, a PID lookup and a tick-to-wall conversion. Pure
/// when `lookup` and `wall_of` are: the real probe passes [`proc::lookup`] and the clocks.
///
/// - unparsable content, an empty file, PID 0 or out of range: unknown, quoting the content;
/// - no such process, or a zombie: dead;
/// - a recorded start time that differs from the process's: dead (the PID was reused);
/// - no recorded start time, and the process started more than [`REUSE_MARGIN`] after the
///   lock was last written: dead (the PID was reused, it cannot have written this lock);
///   between [`CLOCK_SLACK`] and [`REUSE_MARGIN`] after: unknown;
/// - permission denied, a hidden process, anything undecidable: unknown;
/// - otherwise alive, with the holder's start time.
pub fn judge_lock(
    text: &str,
    modified: DateTime<Utc>,
    lookup: impl FnOnce(u32) -> ProcLookup,
    wall_of: impl Fn(u64) -> Result<DateTime<Utc>, String>,
) -> LockHolder {
    let content = match parse_lock(text) {
        Ok(content) => content,
        Err(error) => {
            return LockHolder {
                pid: None,
                recorded_start: None,
                cmdline: None,
                run_id: None,
                modified,
                liveness: Liveness::Unknown,
                why: format!("cannot parse the lock ({error}): '{}'", quote(text)),
                started_at: None,
                start_ticks: None,
            };
        }
    };
    let process = lookup(content.pid);
    let verdict = judge_holder(&content, modified, &process, &wall_of);
    let start_ticks = match (&process, verdict.liveness) {
        (ProcLookup::Running(stat), Liveness::Alive) => Some(stat.start_ticks),
        _ => None,
    };
    LockHolder {
        pid: Some(content.pid),
        recorded_start: content.start_time,
        cmdline: content.cmdline,
        run_id: content.run_id,
        modified,
        liveness: verdict.liveness,
        // Already built from inert parts; passed through again because a `why` is shown as
        // is, and one missed path is all it takes.
        why: inert(&verdict.why),
        started_at: verdict.started_at,
        start_ticks,
    }
}

/// The liveness part of a [`LockHolder`].
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub liveness: Liveness,
    pub why: String,
    pub started_at: Option<DateTime<Utc>>,
}

/// Pure: the liveness of a parsed lock's holder, given what `/proc` says about its PID.
pub fn judge_holder(
    lock: &LockContent,
    modified: DateTime<Utc>,
    process: &ProcLookup,
    wall_of: &dyn Fn(u64) -> Result<DateTime<Utc>, String>,
) -> Verdict {
    let pid = lock.pid;
    let verdict = |liveness, why: String, started_at| Verdict {
        liveness,
        why,
        started_at,
    };
    let stat = match process {
        ProcLookup::Running(stat) => stat,
        ProcLookup::Gone => {
            return verdict(Liveness::Dead, "no such process".into(), None);
        }
        ProcLookup::Zombie(_) => {
            return verdict(
                Liveness::Dead,
                format!("zombie: process {pid} has exited and waits to be reaped"),
                None,
            );
        }
        ProcLookup::Denied(error) => {
            return verdict(
                Liveness::Unknown,
                format!("cannot see process {pid}: {error}"),
                None,
            );
        }
        ProcLookup::Fault(error) => {
            return verdict(
                Liveness::Unknown,
                format!("cannot look up process {pid}: {error}"),
                None,
            );
        }
    };
    let started = wall_of(stat.start_ticks);
    if let Some(recorded) = lock.start_time {
        return if recorded == stat.start_ticks {
            verdict(
                Liveness::Alive,
                format!("process {pid} is running and its start time matches ({recorded})"),
                started.ok(),
            )
        } else {
            verdict(
                Liveness::Dead,
                format!(
                    "start time differs: lock says {recorded}, process {pid} started at {}: \
                     the PID was reused",
                    stat.start_ticks
                ),
                None,
            )
        };
    }
    let started = match started {
        Ok(started) => started,
        Err(error) => {
            return verdict(
                Liveness::Unknown,
                format!("process {pid} is running but its start time is unknown: {error}"),
                None,
            );
        }
    };
    let after = started - modified;
    if after > REUSE_MARGIN {
        verdict(
            Liveness::Dead,
            format!(
                "process {pid} started at {}, {:.1} s after the lock was written at {}: \
                 the PID was reused",
                started.format("%Y-%m-%d %H:%M:%S%.3fZ"),
                after.as_seconds_f64(),
                modified.format("%Y-%m-%d %H:%M:%S%.3fZ"),
            ),
            None,
        )
    } else if after > CLOCK_SLACK {
        verdict(
            Liveness::Unknown,
            format!(
                "process {pid} started {:.3} s after the lock was written: too close to tell \
                 whether it wrote it (a lock with 'start_time' would say)",
                after.as_seconds_f64()
            ),
            None,
        )
    } else {
        verdict(
            Liveness::Alive,
            format!(
                "process {pid} is running and did not start after the lock was written (no \
                 start time recorded)"
            ),
            Some(started),
        )
    }
}

/// Reads a job's lock at `path` and judges its holder's liveness: empty when the lock does not
/// exist, a fault when it cannot be read (a directory, a link, a folder others can write,
/// permission denied), otherwise the holder with its liveness.
pub fn read_lock(path: &Path) -> Reading<LockHolder> {
    read_lock_as(path, Role::Lock)
}

/// [`read_lock`] for a lock of another kind (a resource lock, the watch lock), which decides
/// the rules it is opened by ([`super::safe_open`]).
pub fn read_lock_as(path: &Path, role: Role) -> Reading<LockHolder> {
    let super::files::SmallFile {
        meta,
        modified,
        bytes,
    } = match super::files::read_small(path, role, LOCK_READ_LIMIT) {
        Ok(file) => file,
        Err(reading) => return super::files::absent(reading),
    };
    if bytes.len() as u64 > LOCK_READ_LIMIT {
        return Reading::Found(LockHolder {
            pid: None,
            recorded_start: None,
            cmdline: None,
            run_id: None,
            modified,
            liveness: Liveness::Unknown,
            why: format!(
                "the lock is larger than {} KiB, not a PID lock: '{}'",
                LOCK_READ_LIMIT / 1024,
                quote(&String::from_utf8_lossy(&bytes))
            ),
            started_at: None,
            start_ticks: None,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    // The clocks are read after the lookup (inside `start_wall`), so a process that started
    // a moment ago is never "after now".
    let mut holder = judge_lock(&text, modified, proc::lookup, proc::start_wall);
    if holder.liveness == Liveness::Dead {
        use std::os::unix::fs::MetadataExt;
        match flocked(meta.dev(), meta.ino()) {
            Some(true) => {
                // `mihari run` hands the locked descriptor to the job: when the wrapper is
                // killed outright, the job still holds the flock. Not dead: never released,
                // never restarted beside it.
                holder.liveness = Liveness::Unknown;
                holder.why = format!(
                    "{}, but the lock file is still flock'ed by a live process (the job \
                     outlived its wrapper)",
                    holder.why
                );
                holder.started_at = None;
            }
            Some(false) => {}
            None => {
                holder.liveness = Liveness::Unknown;
                holder.why = format!(
                    "{}, but /proc/locks cannot be read to tell whether the file is still \
                     flock'ed",
                    holder.why
                );
            }
        }
    }
    Reading::Found(holder)
}

/// Whether some process holds a `flock` on the file (device, inode), from `/proc/locks`;
/// `None` when that cannot be read.
pub fn flocked(dev: u64, ino: u64) -> Option<bool> {
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    Some(flock_in_table(&table, dev, ino))
}

/// Pure: whether `/proc/locks` text lists a FLOCK on (device, inode). The device is written
/// as "major:minor" in hex, the inode in decimal.
pub fn flock_in_table(table: &str, dev: u64, ino: u64) -> bool {
    let wanted = format!(
        "{:02x}:{:02x}:{ino}",
        nix::libc::major(dev),
        nix::libc::minor(dev)
    );
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF"; a "->" marks a waiter.
        let fields: Vec<&str> = fields.into_iter().filter(|f| *f != "->").collect();
        fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&wanted.as_str())
    })
}

/// Lock content for a message: at most 60 characters, inert, with '…' when cut.
fn quote(text: &str) -> String {
    let trimmed = text.trim();
    let mut cut: String = trimmed.chars().take(60).collect();
    if cut.len() < trimmed.len() {
        cut.push('…');
    }
    inert(&cut)
}

#[cfg(test)]
mod flock_tests {
    use super::flock_in_table;

    #[test]
    fn a_flock_on_the_inode_is_found_and_others_are_not() {
        let dev = nix::libc::makedev(0xfe, 0x00);
        let table = "1: POSIX  ADVISORY  READ 19530 fe:00:10338734 128 128\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fe:00:777 0 EOF\n\
                     3: -> FLOCK  ADVISORY  WRITE 4243 fe:00:888 0 EOF\n";
        assert!(flock_in_table(table, dev, 777));
        assert!(flock_in_table(table, dev, 888));
        assert!(
            !flock_in_table(table, dev, 10338734),
            "a POSIX lock is not a flock"
        );
        assert!(!flock_in_table(table, dev, 999));
        assert!(!flock_in_table(table, nix::libc::makedev(8, 1), 777));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::proc::ProcStat;

    fn at(secs: i64, millis: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("in range")
            + TimeDelta::milliseconds(millis)
    }

    fn running(start_ticks: u64) -> ProcLookup {
        ProcLookup::Running(ProcStat {
            pid: 4242,
            comm: "job".into(),
            state: 'S',
            ppid: 1,
            start_ticks,
        })
    }

    /// Ticks are hundredths of a second after `at(0, 0)`.
    fn wall(ticks: u64) -> Result<DateTime<Utc>, String> {
        Ok(at(0, 0) + TimeDelta::milliseconds(ticks as i64 * 10))
    }

    #[test]
    fn parses_bare_and_json_locks() {
        /// The PID and recorded start time, or `Err(())` for content that must not parse.
        type Parsed = Result<(u32, Option<u64>), ()>;
        let rows: &[(&str, Parsed)] = &[
            ("4242", Ok((4242, None))),
            ("  4242\n", Ok((4242, None))),
            (r#"{"pid": 4242}"#, Ok((4242, None))),
            (
                r#"{"pid": 4242, "start_time": 98765}"#,
                Ok((4242, Some(98765))),
            ),
            (
                r#"{"pid": "4242", "start_time": "98765"}"#,
                Ok((4242, Some(98765))),
            ),
            (
                r#"{"pid": 4242, "start_time": null, "x": [1]}"#,
                Ok((4242, None)),
            ),
            ("", Err(())),
            ("  \n", Err(())),
            ("0", Err(())),
            ("-1", Err(())),
            ("4194305", Err(())),
            ("99999999999999999999999", Err(())),
            ("42 43", Err(())),
            ("pid=42", Err(())),
            ("{", Err(())),
            ("[4242]", Err(())),
            (r#"{"start_time": 1}"#, Err(())),
            (r#"{"pid": -3}"#, Err(())),
            (r#"{"pid": 4.5}"#, Err(())),
            (r#"{"pid": 42, "start_time": "soon"}"#, Err(())),
        ];
        for (text, expected) in rows {
            let got = parse_lock(text)
                .map(|c| (c.pid, c.start_time))
                .map_err(|_| ());
            assert_eq!(&got, expected, "lock text {text:?}");
        }
    }

    #[test]
    fn json_fields_are_made_inert() {
        let lock = parse_lock(
            r#"{"pid": 7, "cmdline": "python \u001b]0;x\u0007train.py", "run_id": "r\u001b[31m1"}"#,
        )
        .expect("parses");
        assert_eq!(lock.cmdline.as_deref(), Some("python train.py"));
        assert_eq!(lock.run_id.as_deref(), Some("r1"));
    }

    /// One row per boundary of the liveness rules.
    #[test]
    fn liveness_table() {
        struct Row {
            name: &'static str,
            text: &'static str,
            modified: DateTime<Utc>,
            process: ProcLookup,
            liveness: Liveness,
            why_has: &'static str,
        }
        let rows = [
            Row {
                name: "bare pid, started long before the lock was written",
                text: "4242",
                modified: at(60, 0),
                process: running(100),
                liveness: Liveness::Alive,
                why_has: "did not start after the lock was written",
            },
            Row {
                name: "bare pid, started exactly when the lock was written",
                text: "4242",
                modified: at(1, 0),
                process: running(100),
                liveness: Liveness::Alive,
                why_has: "running",
            },
            Row {
                name: "bare pid, started 10 ms after the mtime: coarse clocks, alive",
                text: "4242",
                modified: at(1, 0),
                process: running(101),
                liveness: Liveness::Alive,
                why_has: "running",
            },
            Row {
                name: "bare pid, started 50 ms after the mtime: the edge of the slack",
                text: "4242",
                modified: at(1, 0),
                process: running(105),
                liveness: Liveness::Alive,
                why_has: "running",
            },
            Row {
                name: "bare pid, started 60 ms after the mtime: unknown",
                text: "4242",
                modified: at(1, 0),
                process: running(106),
                liveness: Liveness::Unknown,
                why_has: "too close to tell",
            },
            Row {
                name: "bare pid, started just inside the margin",
                text: "4242",
                modified: at(1, 0),
                process: running(300),
                liveness: Liveness::Unknown,
                why_has: "too close to tell",
            },
            Row {
                name: "bare pid, started just past the margin: the reused PID",
                text: "4242",
                modified: at(1, 0),
                process: running(301),
                liveness: Liveness::Dead,
                why_has: "the PID was reused",
            },
            Row {
                name: "bare pid, started an hour after the lock was written",
                text: "4242\n",
                modified: at(0, 0),
                process: running(360_000),
                liveness: Liveness::Dead,
                why_has: "after the lock was written",
            },
            Row {
                name: "json start time matches, even though the lock is old",
                text: r#"{"pid": 4242, "start_time": 100}"#,
                modified: at(-3600, 0),
                process: running(100),
                liveness: Liveness::Alive,
                why_has: "start time matches (100)",
            },
            Row {
                name: "json start time differs by one tick",
                text: r#"{"pid": 4242, "start_time": 100}"#,
                modified: at(60, 0),
                process: running(101),
                liveness: Liveness::Dead,
                why_has: "start time differs: lock says 100, process 4242 started at 101",
            },
            Row {
                name: "json without start time falls back to the mtime rule",
                text: r#"{"pid": 4242, "cmdline": "job"}"#,
                modified: at(0, 0),
                process: running(360_000),
                liveness: Liveness::Dead,
                why_has: "the PID was reused",
            },
            Row {
                name: "no such process",
                text: "4242",
                modified: at(0, 0),
                process: ProcLookup::Gone,
                liveness: Liveness::Dead,
                why_has: "no such process",
            },
            Row {
                name: "zombie",
                text: r#"{"pid": 4242, "start_time": 100}"#,
                modified: at(0, 0),
                process: ProcLookup::Zombie(ProcStat {
                    pid: 4242,
                    comm: "job".into(),
                    state: 'Z',
                    ppid: 1,
                    start_ticks: 100,
                }),
                liveness: Liveness::Dead,
                why_has: "zombie",
            },
            Row {
                name: "hidden process (hidepid, EPERM)",
                text: "4242",
                modified: at(0, 0),
                process: ProcLookup::Denied("EPERM".into()),
                liveness: Liveness::Unknown,
                why_has: "cannot see process 4242",
            },
            Row {
                name: "proc fault",
                text: "4242",
                modified: at(0, 0),
                process: ProcLookup::Fault("EIO".into()),
                liveness: Liveness::Unknown,
                why_has: "cannot look up process 4242",
            },
            Row {
                name: "garbage content",
                text: "hello\u{1b}[2J world",
                modified: at(0, 0),
                process: ProcLookup::Gone,
                liveness: Liveness::Unknown,
                why_has: "'hello world'",
            },
            Row {
                name: "empty file",
                text: "",
                modified: at(0, 0),
                process: ProcLookup::Gone,
                liveness: Liveness::Unknown,
                why_has: "empty",
            },
            Row {
                name: "pid 0 never reaches a lookup",
                text: "0",
                modified: at(0, 0),
                process: ProcLookup::Gone,
                liveness: Liveness::Unknown,
                why_has: "out of range",
            },
        ];
        for row in rows {
            let holder = judge_lock(row.text, row.modified, |_| row.process.clone(), wall);
            assert_eq!(
                holder.liveness, row.liveness,
                "{}: {}",
                row.name, holder.why
            );
            assert!(
                holder.why.contains(row.why_has),
                "{}: why {:?} should contain {:?}",
                row.name,
                holder.why,
                row.why_has
            );
            assert!(crate::core::text::is_inert(&holder.why), "{}", row.name);
            assert_eq!(holder.modified, row.modified);
            if holder.liveness == Liveness::Alive {
                assert!(holder.started_at.is_some(), "{}", row.name);
            }
        }
    }

    #[test]
    fn unknown_start_wall_time_is_unknown_not_dead() {
        let holder = judge_lock(
            "4242",
            at(0, 0),
            |_| running(100),
            |_| Err("no clock".into()),
        );
        assert_eq!(holder.liveness, Liveness::Unknown);
        // A JSON lock does not need the wall clock to decide.
        let holder = judge_lock(
            r#"{"pid": 4242, "start_time": 100}"#,
            at(0, 0),
            |_| running(100),
            |_| Err("no clock".into()),
        );
        assert_eq!(holder.liveness, Liveness::Alive);
        assert_eq!(holder.started_at, None);
    }

    #[test]
    fn lookup_is_not_called_for_unparsable_locks() {
        let holder = judge_lock("0", at(0, 0), |_| panic!("must not look up pid 0"), wall);
        assert_eq!(holder.pid, None);
    }

    #[test]
    fn long_content_is_quoted_truncated() {
        let text = "x".repeat(500);
        let holder = judge_lock(&text, at(0, 0), |_| ProcLookup::Gone, wall);
        assert!(holder.why.len() < 200, "{}", holder.why);
        assert!(holder.why.contains('…'));
    }
}

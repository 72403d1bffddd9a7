//! Locks and the liveness of their holders.
//!
//! This module owns reading a lock file (a bare PID, or JSON as `mihari run` writes it) and
//! judging whether the process it names still holds it: alive, dead or unknown. The judgement
//! is a pure function ([`judge_lock`]) of the lock's text, its modification time, what `/proc`
//! says about the PID and a tick-to-wall-clock conversion, so every boundary is table-tested
//! without processes. It must never round "cannot tell" down to dead: a dead verdict can lead
//! to a restart, and restarting a healthy job runs it twice. It never deletes or writes locks.
//!
//! Two more rules come from jobs not written for mihari. A lock file with no PID in it (the
//! empty file util-linux `flock(1)` leaves) is held by whoever holds a flock or POSIX lock on
//! it, found through `/proc/locks` and the holders' descriptors ([`judge_empty_lock`]), and
//! not held when nobody does: empty is not unknown. A JSON lock that names the boot it was
//! written in (`boot_id`) and names another one is dead: its holder ended with that boot.

use std::path::Path;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use super::proc::{self, PID_MAX_LIMIT, ProcLookup};
use super::safe_open::Role;
use crate::core::evidence::EMPTY_LOCK_WORDS;
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
    /// `/proc/sys/kernel/random/boot_id` of the boot the lock was written in (JSON locks
    /// only): a PID and start ticks mean nothing in another boot.
    pub boot_id: Option<String>,
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), for the locks `mihari run` and the
/// watcher write and for judging them; `None` when it cannot be read.
pub fn this_boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|text| text.trim().to_string())
                .filter(|id| is_boot_id(id))
        })
        .clone()
}

/// A boot id as the kernel writes it: a UUID, hex digits and dashes.
fn is_boot_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
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
        boot_id: None,
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
    let boot_id = match fields.get("boot_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if is_boot_id(text.trim()) => Some(text.trim().to_string()),
        Some(_) => return Err("'boot_id' is not a boot id".to_string()),
    };
    Ok(LockContent {
        pid: checked_pid(pid)?,
        start_time,
        cmdline,
        run_id,
        boot_id,
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

/// Judges a lock from its text, its mtime, this boot's id, a PID lookup and a tick-to-wall
/// conversion. Pure when `lookup` and `wall_of` are: the real probe passes [`this_boot_id`],
/// [`proc::lookup`] and the clocks.
///
/// - unparsable content, an empty file, PID 0 or out of range: unknown, quoting the content
///   (the probe judges an empty file by its locks instead, see [`judge_empty_lock`]);
/// - a `boot_id` that is not this boot's: dead, without looking the PID up;
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
    this_boot: Option<&str>,
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
                stopped: false,
            };
        }
    };
    if let (Some(written), Some(now)) = (content.boot_id.as_deref(), this_boot)
        && written != now
    {
        return LockHolder {
            pid: Some(content.pid),
            recorded_start: content.start_time,
            cmdline: content.cmdline,
            run_id: content.run_id,
            modified,
            liveness: Liveness::Dead,
            why: inert(&format!(
                "written in another boot (the lock's boot id '{written}', this boot's \
                 '{now}'): pid {} ended with that boot",
                content.pid
            )),
            started_at: None,
            start_ticks: None,
            stopped: false,
        };
    }
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
        stopped: verdict.stopped,
    }
}

/// The liveness part of a [`LockHolder`].
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub liveness: Liveness,
    pub why: String,
    pub started_at: Option<DateTime<Utc>>,
    /// The process is stopped (T or t); only ever true with `Alive`.
    pub stopped: bool,
}

/// Pure: the liveness of a parsed lock's holder, given what `/proc` says about its PID.
pub fn judge_holder(
    lock: &LockContent,
    modified: DateTime<Utc>,
    process: &ProcLookup,
    wall_of: &dyn Fn(u64) -> Result<DateTime<Utc>, String>,
) -> Verdict {
    let pid = lock.pid;
    let stopped = matches!(process, ProcLookup::Running(stat) if matches!(stat.state, 'T' | 't'));
    let verdict = |liveness, why: String, started_at| Verdict {
        liveness,
        why,
        started_at,
        stopped: stopped && liveness == Liveness::Alive,
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
    match super::files::read_small(path, role, LOCK_READ_LIMIT) {
        Ok(file) => judge_lock_file(file),
        Err(reading) => super::files::absent(reading),
    }
}

/// How much of a lock (or a marker holding one) is read: [`LOCK_READ_LIMIT`].
pub const READ_LIMIT: u64 = LOCK_READ_LIMIT;

/// Judges a lock file already read (at most [`READ_LIMIT`] bytes and one more): its PID or
/// JSON, or, when it is empty, the locks on it. A marker holding a lock is judged by this
/// too, so that it is judged exactly like a lock.
pub fn judge_lock_file(file: super::files::SmallFile) -> Reading<LockHolder> {
    let super::files::SmallFile {
        meta,
        modified,
        bytes,
    } = file;
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
            stopped: false,
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    use std::os::unix::fs::MetadataExt;
    if text.trim().is_empty() {
        let table = std::fs::read_to_string("/proc/locks").ok();
        let mut reading = judge_empty_lock(
            modified,
            table.as_deref(),
            meta.dev(),
            meta.ino(),
            |hint| super::procscan::lock_holders(meta.dev(), meta.ino(), hint),
            proc::start_wall,
        );
        if let Reading::Found(holder) = &mut reading
            && let Some(pid) = holder.pid.filter(|_| holder.liveness == Liveness::Alive)
        {
            holder.cmdline = super::procscan::shown_cmdline_of(pid);
        }
        return reading;
    }
    // The clocks are read after the lookup (inside `start_wall`), so a process that started
    // a moment ago is never "after now".
    let this_boot = this_boot_id();
    let mut holder = judge_lock(
        &text,
        modified,
        this_boot.as_deref(),
        proc::lookup,
        proc::start_wall,
    );
    if holder.liveness == Liveness::Dead && !holder.why.starts_with("written in another boot") {
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

/// One lock `/proc/locks` lists on a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedLock {
    /// FLOCK, POSIX, OFDLCK, LEASE...
    pub kind: String,
    /// The PID that took it, as `/proc/locks` shows it: for a flock, the process that called
    /// `flock`, which may have exited while a child that inherited the descriptor holds it; -1
    /// for an open-file-description lock; 0 when it is in another PID namespace.
    pub pid: i64,
}

/// The "major:minor:inode" a line of `/proc/locks` (or a `lock:` line of fdinfo) names a
/// file by: the device in hex, the inode in decimal.
pub fn lock_token(dev: u64, ino: u64) -> String {
    format!(
        "{:02x}:{:02x}:{ino}",
        nix::libc::major(dev),
        nix::libc::minor(dev)
    )
}

/// Pure: the locks `/proc/locks` text lists as held on (device, inode): flock, POSIX and
/// open-file-description locks, not the processes waiting for one ("->").
pub fn locks_on(table: &str, dev: u64, ino: u64) -> Vec<ListedLock> {
    let wanted = lock_token(dev, ino);
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) == Some(&"->") {
                return None;
            }
            // "1: FLOCK  ADVISORY  WRITE 12345 fe:00:1234567 0 EOF"
            let kind = *fields.get(1)?;
            if !matches!(kind, "FLOCK" | "POSIX" | "OFDLCK") || fields.get(5) != Some(&&*wanted) {
                return None;
            }
            Some(ListedLock {
                kind: kind.to_string(),
                pid: fields.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

/// Judges a lock file with no PID in it by the locks on it. Pure when `find` and `wall_of`
/// are: the probe passes the text of `/proc/locks` (`None` when it cannot be read),
/// [`super::procscan::lock_holders`] and the clocks.
///
/// - `/proc/locks` unreadable: unknown;
/// - no lock on the file: not held (`Empty`): the job is not running;
/// - a lock, and a live process that holds it (its descriptor carries the lock): alive, that
///   process (the oldest, when several share it, as `flock(1)` and the command it runs do);
/// - a lock, but no live holder can be seen: unknown, saying why. Never free.
pub fn judge_empty_lock(
    modified: DateTime<Utc>,
    table: Option<&str>,
    dev: u64,
    ino: u64,
    find: impl FnOnce(Option<u32>) -> super::procscan::LockSearch,
    wall_of: impl Fn(u64) -> Result<DateTime<Utc>, String>,
) -> Reading<LockHolder> {
    let holder = |pid, liveness, why: String| LockHolder {
        pid,
        recorded_start: None,
        cmdline: None,
        run_id: None,
        modified,
        liveness,
        why: inert(&why),
        started_at: None,
        start_ticks: None,
        stopped: false,
    };
    let Some(table) = table else {
        return Reading::Found(holder(
            None,
            Liveness::Unknown,
            "the lock file is empty, and /proc/locks cannot be read to tell whether a process \
             holds a lock on it"
                .to_string(),
        ));
    };
    let listed = locks_on(table, dev, ino);
    let Some(first) = listed.first() else {
        return Reading::Empty;
    };
    let hint = listed
        .iter()
        .find_map(|lock| u32::try_from(lock.pid).ok().filter(|&pid| pid > 0));
    let search = find(hint);
    let kind = first.kind.as_str();
    match search.holders.split_first() {
        Some((&(pid, ticks, state), others)) => {
            let sharing = if others.is_empty() {
                String::new()
            } else {
                let pids: Vec<String> = others.iter().map(|(p, _, _)| p.to_string()).collect();
                format!(" (shared with pid {})", pids.join(", "))
            };
            let taker = match hint {
                Some(taker) if taker != pid => {
                    format!("; pid {taker}, which took it, is gone, and pid {pid} inherited it")
                }
                _ => String::new(),
            };
            let mut found = holder(
                Some(pid),
                Liveness::Alive,
                format!(
                    "{EMPTY_LOCK_WORDS} (as util-linux flock leaves it); pid {pid} holds a \
                     {kind} lock on it{sharing}{taker}"
                ),
            );
            found.started_at = wall_of(ticks).ok();
            found.start_ticks = Some(ticks);
            found.stopped = matches!(state, 'T' | 't');
            Reading::Found(found)
        }
        None => {
            let taker = hint.map_or_else(String::new, |pid| format!(" (taken by pid {pid})"));
            let unseen = match search.unseen {
                0 => "no process visible here has it open (a process in another PID namespace?)"
                    .to_string(),
                n => format!(
                    "the open files of {n} process{} could not be looked at",
                    if n == 1 { "" } else { "es" }
                ),
            };
            Reading::Found(holder(
                hint,
                Liveness::Unknown,
                format!(
                    "the lock file is empty and /proc/locks lists a {kind} lock on it{taker}, \
                     but its holder cannot be found: {unseen}; a locked file is never called free"
                ),
            ))
        }
    }
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
    let wanted = lock_token(dev, ino);
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

    /// The boot the table's rows are judged in.
    const THIS_BOOT: &str = "1c2d3e4f-0000-4000-8000-00000000aaaa";

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
                name: "json lock written in this boot: judged by its start time",
                text: r#"{"pid": 4242, "start_time": 100, "boot_id": "1c2d3e4f-0000-4000-8000-00000000aaaa"}"#,
                modified: at(0, 0),
                process: running(100),
                liveness: Liveness::Alive,
                why_has: "start time matches",
            },
            Row {
                name: "json lock written in another boot: dead, even with a matching start",
                text: r#"{"pid": 4242, "start_time": 100, "boot_id": "9f8e7d6c-0000-4000-8000-00000000bbbb"}"#,
                modified: at(0, 0),
                process: running(100),
                liveness: Liveness::Dead,
                why_has: "written in another boot",
            },
            Row {
                name: "json lock from another boot whose pid is gone: dead, named by the boot",
                text: r#"{"pid": 4242, "boot_id": "9f8e7d6c-0000-4000-8000-00000000bbbb"}"#,
                modified: at(0, 0),
                process: ProcLookup::Gone,
                liveness: Liveness::Dead,
                why_has: "this boot's '1c2d3e4f",
            },
            Row {
                name: "json lock with a boot id that is not one: unknown",
                text: r#"{"pid": 4242, "boot_id": "x; rm -rf"}"#,
                modified: at(0, 0),
                process: running(100),
                liveness: Liveness::Unknown,
                why_has: "'boot_id' is not a boot id",
            },
            Row {
                name: "stopped holder (Ctrl-Z): alive",
                text: r#"{"pid": 4242, "start_time": 100}"#,
                modified: at(0, 0),
                process: ProcLookup::Running(ProcStat {
                    pid: 4242,
                    comm: "job".into(),
                    state: 'T',
                    ppid: 1,
                    start_ticks: 100,
                }),
                liveness: Liveness::Alive,
                why_has: "start time matches",
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
            let holder = judge_lock(
                row.text,
                row.modified,
                Some(THIS_BOOT),
                |_| row.process.clone(),
                wall,
            );
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
    fn a_stopped_holder_is_said_to_be_stopped() {
        let stopped = |state| {
            ProcLookup::Running(ProcStat {
                pid: 4242,
                comm: "job".into(),
                state,
                ppid: 1,
                start_ticks: 100,
            })
        };
        for (state, expected) in [('T', true), ('t', true), ('S', false), ('R', false)] {
            let holder = judge_lock(
                r#"{"pid": 4242, "start_time": 100}"#,
                at(0, 0),
                None,
                |_| stopped(state),
                wall,
            );
            assert_eq!(holder.stopped, expected, "state {state}");
        }
    }

    #[test]
    fn a_lock_from_another_boot_is_dead_without_a_lookup() {
        let holder = judge_lock(
            r#"{"pid": 4242, "start_time": 100, "boot_id": "aa-bb"}"#,
            at(0, 0),
            Some("cc-dd"),
            |_| panic!("a PID of another boot means nothing here"),
            wall,
        );
        assert_eq!(holder.liveness, Liveness::Dead, "{}", holder.why);
        // This boot unknown: judged as before, by the process.
        let holder = judge_lock(
            r#"{"pid": 4242, "start_time": 100, "boot_id": "aa-bb"}"#,
            at(0, 0),
            None,
            |_| running(100),
            wall,
        );
        assert_eq!(holder.liveness, Liveness::Alive, "{}", holder.why);
    }

    /// One row per boundary of the empty-lock rule (util-linux `flock(1)` leaves the file
    /// empty): the locks `/proc/locks` lists, and who holds them.
    #[test]
    fn empty_lock_table() {
        use crate::probe::procscan::LockSearch;
        let dev = nix::libc::makedev(0xfe, 0x01);
        let flock = "1: FLOCK  ADVISORY  WRITE 500 fe:01:777 0 EOF\n";
        let posix = "1: POSIX  ADVISORY  WRITE 501 fe:01:777 0 EOF\n";
        let elsewhere = "1: FLOCK  ADVISORY  WRITE 500 fe:01:778 0 EOF\n\
                         2: -> FLOCK  ADVISORY  WRITE 502 fe:01:777 0 EOF\n";
        let found = |holders: Vec<(u32, u64, char)>| LockSearch { holders, unseen: 0 };
        struct Row {
            name: &'static str,
            table: Option<&'static str>,
            search: LockSearch,
            /// `None`: not held (Empty); else the liveness and the pid.
            expect: Option<(Liveness, Option<u32>)>,
            why_has: &'static str,
        }
        let rows = [
            Row {
                name: "no lock on the file: not held, never unknown",
                table: Some(""),
                search: found(vec![]),
                expect: None,
                why_has: "",
            },
            Row {
                name: "a lock on another inode, a waiter on ours: not held",
                table: Some(elsewhere),
                search: found(vec![]),
                expect: None,
                why_has: "",
            },
            Row {
                name: "flock(1) holds it: alive, its pid",
                table: Some(flock),
                search: found(vec![(500, 90, 'S')]),
                expect: Some((Liveness::Alive, Some(500))),
                why_has: "pid 500 holds a FLOCK lock",
            },
            Row {
                name: "flock(1) is gone, the child it started holds it: alive, the child",
                table: Some(flock),
                search: found(vec![(600, 95, 'S'), (601, 99, 'S')]),
                expect: Some((Liveness::Alive, Some(600))),
                why_has: "pid 500, which took it, is gone, and pid 600 inherited it",
            },
            Row {
                name: "a POSIX lock (fcntl): alive, its owner",
                table: Some(posix),
                search: found(vec![(501, 91, 'S')]),
                expect: Some((Liveness::Alive, Some(501))),
                why_has: "POSIX",
            },
            Row {
                name: "the holder is stopped: alive and stopped",
                table: Some(flock),
                search: found(vec![(500, 90, 'T')]),
                expect: Some((Liveness::Alive, Some(500))),
                why_has: "holds",
            },
            Row {
                name: "locked, but no holder can be seen: unknown, never free",
                table: Some(flock),
                search: LockSearch {
                    holders: vec![],
                    unseen: 3,
                },
                expect: Some((Liveness::Unknown, Some(500))),
                why_has: "of 3 processes could not be looked at",
            },
            Row {
                name: "/proc/locks cannot be read: unknown",
                table: None,
                search: found(vec![]),
                expect: Some((Liveness::Unknown, None)),
                why_has: "/proc/locks cannot be read",
            },
        ];
        for row in rows {
            let search = row.search.clone();
            let reading = judge_empty_lock(at(0, 0), row.table, dev, 777, |_| search, wall);
            match (row.expect, &reading) {
                (None, Reading::Empty) => {}
                (Some((liveness, pid)), Reading::Found(holder)) => {
                    assert_eq!(holder.liveness, liveness, "{}: {}", row.name, holder.why);
                    assert_eq!(holder.pid, pid, "{}", row.name);
                    assert!(
                        holder.why.contains(row.why_has),
                        "{}: {:?} should contain {:?}",
                        row.name,
                        holder.why,
                        row.why_has
                    );
                    assert_eq!(
                        holder.stopped,
                        row.search.holders.first().is_some_and(|h| h.2 == 'T'),
                        "{}",
                        row.name
                    );
                    if liveness == Liveness::Alive {
                        assert!(holder.start_ticks.is_some(), "{}", row.name);
                    }
                }
                (expect, got) => panic!("{}: expected {expect:?}, got {got:?}", row.name),
            }
        }
    }

    #[test]
    fn unknown_start_wall_time_is_unknown_not_dead() {
        let holder = judge_lock(
            "4242",
            at(0, 0),
            None,
            |_| running(100),
            |_| Err("no clock".into()),
        );
        assert_eq!(holder.liveness, Liveness::Unknown);
        // A JSON lock does not need the wall clock to decide.
        let holder = judge_lock(
            r#"{"pid": 4242, "start_time": 100}"#,
            at(0, 0),
            None,
            |_| running(100),
            |_| Err("no clock".into()),
        );
        assert_eq!(holder.liveness, Liveness::Alive);
        assert_eq!(holder.started_at, None);
    }

    #[test]
    fn lookup_is_not_called_for_unparsable_locks() {
        let holder = judge_lock(
            "0",
            at(0, 0),
            None,
            |_| panic!("must not look up pid 0"),
            wall,
        );
        assert_eq!(holder.pid, None);
    }

    #[test]
    fn long_content_is_quoted_truncated() {
        let text = "x".repeat(500);
        let holder = judge_lock(&text, at(0, 0), None, |_| ProcLookup::Gone, wall);
        assert!(holder.why.len() < 200, "{}", holder.why);
        assert!(holder.why.contains('…'));
    }
}

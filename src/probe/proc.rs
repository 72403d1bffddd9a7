//! `/proc/<pid>/stat`: a process's identity as PID plus start time in clock ticks since boot.
//!
//! This module owns reading and parsing `/proc/<pid>/stat`, telling a running process from a
//! zombie, a gone one and one the system will not show us, and turning a start time in clock
//! ticks into wall-clock time with sub-second precision. It does not judge locks (see
//! [`super::lock`]) and it never sends a real signal: the only `kill` it makes is signal 0,
//! which asks "does this PID exist?" and changes nothing.

use std::io::{self, Read};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{Pid, SysconfVar, sysconf};

use crate::core::text::inert;

/// The largest PID Linux can hand out (`PID_MAX_LIMIT`, 2^22). A recorded PID above it cannot
/// be a process, and asking `kill` about it would only confuse.
pub const PID_MAX_LIMIT: u32 = 4_194_304;

/// What `/proc/<pid>/stat` says about a process, the fields mihari uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// The command name (field 2) as the kernel stores it, at most 15 bytes, already inert.
    pub comm: String,
    /// Field 3: R running, S sleeping, D disk wait, T stopped, t traced, Z zombie, X dead...
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 22: when the process started, in clock ticks since boot. Together with the PID
    /// this is the process's identity: a reused PID has a different start time.
    pub start_ticks: u64,
}

/// Parses the text of `/proc/<pid>/stat`.
///
/// The command name sits in parentheses and may itself contain spaces and ')' (a process can
/// name itself `a) b`), so the fixed fields are read after the LAST ')'.
pub fn parse_stat(text: &str) -> Result<ProcStat, String> {
    let open = text
        .find('(')
        .ok_or_else(|| format!("no '(' in '{}'", excerpt(text)))?;
    let close = text
        .rfind(')')
        .filter(|&close| close > open)
        .ok_or_else(|| format!("no ')' in '{}'", excerpt(text)))?;
    let pid = text[..open]
        .trim()
        .parse::<u32>()
        .map_err(|e| format!("pid '{}': {e}", excerpt(text[..open].trim())))?;
    let comm = inert(&text[open + 1..close]);
    // After the comm: field 3 (state) is index 0, field 4 (ppid) index 1, field 22 index 19.
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |index: usize, name: &str| {
        rest.get(index)
            .copied()
            .ok_or_else(|| format!("no {name} field (field {}) in the stat line", index + 3))
    };
    let state_text = field(0, "state")?;
    let mut state_chars = state_text.chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => return Err(format!("state '{}' is not one letter", inert(state_text))),
    };
    let ppid_text = field(1, "ppid")?;
    let ppid = ppid_text
        .parse::<u32>()
        .map_err(|e| format!("ppid '{}': {e}", inert(ppid_text)))?;
    let start_text = field(19, "start time")?;
    let start_ticks = start_text
        .parse::<u64>()
        .map_err(|e| format!("start time '{}': {e}", inert(start_text)))?;
    Ok(ProcStat {
        pid,
        comm,
        state,
        ppid,
        start_ticks,
    })
}

/// What the system says about a PID. Five answers, because "cannot tell" must never be
/// rounded to "gone": that would release a lock a live process holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcLookup {
    /// The process exists and is not a zombie (stopped and traced processes are running too:
    /// they hold their locks and will continue).
    Running(ProcStat),
    /// The process has exited and waits to be reaped: it holds nothing any more.
    Zombie(ProcStat),
    /// No process has this PID.
    Gone,
    /// The process exists but we may not look at it (`/proc` mounted with `hidepid`, or
    /// `kill` answered EPERM).
    Denied(String),
    /// Something else went wrong; the text says what.
    Fault(String),
}

/// More than a `/proc/<pid>/stat` line ever holds (its command name is at most 64 bytes).
const STAT_LIMIT: usize = 4096;

/// Looks up `pid` in `/proc`, confirming "not there" with signal 0 so that a hidden process is
/// never reported as gone.
pub fn lookup(pid: u32) -> ProcLookup {
    let Some(raw_pid) = valid_pid(pid) else {
        return ProcLookup::Fault(format!("pid '{pid}' is out of range"));
    };
    let path = format!("/proc/{pid}/stat");
    // One read: a stat line is a few hundred bytes, and `/proc` hands it over whole.
    let mut bytes = Vec::with_capacity(STAT_LIMIT);
    match read_into(&path, &mut bytes, STAT_LIMIT) {
        Ok(()) => match parse_stat(&String::from_utf8_lossy(&bytes)) {
            Ok(stat) => match stat.state {
                'Z' => ProcLookup::Zombie(stat),
                'X' | 'x' => ProcLookup::Gone,
                _ => ProcLookup::Running(stat),
            },
            Err(error) => ProcLookup::Fault(format!("cannot parse '{path}': {error}")),
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => confirm_gone(raw_pid),
        // Reading the stat of a process that exits between open and read answers ESRCH.
        Err(error) if error.raw_os_error() == Some(Errno::ESRCH as i32) => ProcLookup::Gone,
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            ProcLookup::Denied(format!("cannot read '{path}': {error}"))
        }
        Err(error) => ProcLookup::Fault(format!("cannot read '{path}': {error}")),
    }
}

/// Reads at most `limit` bytes of a `/proc` file into `buffer` (cleared first). A `/proc`
/// file hands over all it has in one read when there is room for it, so a read that leaves
/// room is the last: a scan of a thousand processes saves a thousand empty reads.
pub fn read_into(path: &str, buffer: &mut Vec<u8>, limit: usize) -> io::Result<()> {
    buffer.clear();
    let mut file = std::fs::File::open(path)?;
    let mut chunk = 4096.min(limit);
    loop {
        let start = buffer.len();
        buffer.resize(start + chunk, 0);
        let read = loop {
            match file.read(&mut buffer[start..]) {
                Ok(read) => break read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    buffer.truncate(start);
                    return Err(error);
                }
            }
        };
        buffer.truncate(start + read);
        if read < chunk || buffer.len() >= limit {
            return Ok(());
        }
        chunk = (limit - buffer.len()).min(buffer.len());
    }
}

/// `/proc/<pid>` is missing: ask the kernel directly, because `hidepid` hides other users'
/// processes from `/proc` while they are very much alive.
fn confirm_gone(pid: i32) -> ProcLookup {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => ProcLookup::Gone,
        Err(Errno::EPERM) => ProcLookup::Denied(format!(
            "process {pid} exists but is hidden from /proc and belongs to another user"
        )),
        Ok(()) => ProcLookup::Denied(format!(
            "process {pid} answers signal 0 but has no /proc entry (is /proc mounted with hidepid?)"
        )),
        Err(errno) => ProcLookup::Fault(format!("cannot ask about process {pid}: {errno}")),
    }
}

/// The PID as `pid_t`, if it could be a process. 0 and negative values must never reach
/// `kill`: there they mean "my process group" and "every process I may signal".
fn valid_pid(pid: u32) -> Option<i32> {
    if pid == 0 || pid > PID_MAX_LIMIT {
        return None;
    }
    i32::try_from(pid).ok()
}

/// The start time of `pid` in clock ticks since boot, if it exists and is not a zombie.
pub fn start_ticks(pid: u32) -> Option<u64> {
    match lookup(pid) {
        ProcLookup::Running(stat) => Some(stat.start_ticks),
        _ => None,
    }
}

/// This process's start time in clock ticks since boot, for `mihari run` to record in the
/// locks it writes. `None` only when `/proc/self/stat` cannot be read (no `/proc`): the lock
/// is then written without a start time rather than with a wrong one.
pub fn self_start_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text).ok().map(|stat| stat.start_ticks)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, `USER_HZ`), the unit of field 22.
pub fn clock_ticks_per_second() -> Result<u64, String> {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => Ok(ticks as u64),
        Ok(other) => Err(format!("sysconf(_SC_CLK_TCK) answered '{other:?}'")),
        Err(errno) => Err(format!("sysconf(_SC_CLK_TCK) failed: {errno}")),
    }
}

/// The two clocks a start time in ticks needs, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootClocks {
    /// `CLOCK_REALTIME` now.
    pub realtime: DateTime<Utc>,
    /// `CLOCK_BOOTTIME` now: time since boot, including suspend, the clock field 22 counts in.
    pub since_boot: Duration,
    /// `sysconf(_SC_CLK_TCK)`.
    pub ticks_per_second: u64,
}

impl BootClocks {
    /// Reads both clocks now. Boot time from `/proc/stat` (`btime`) is whole seconds and
    /// would blur the start of a process by up to a second; the clocks are nanoseconds.
    pub fn now() -> Result<Self, String> {
        let ticks_per_second = clock_ticks_per_second()?;
        let boot = clock_gettime(ClockId::CLOCK_BOOTTIME)
            .map_err(|e| format!("clock_gettime(CLOCK_BOOTTIME) failed: {e}"))?;
        let real = clock_gettime(ClockId::CLOCK_REALTIME)
            .map_err(|e| format!("clock_gettime(CLOCK_REALTIME) failed: {e}"))?;
        let since_boot = Duration::from(boot);
        let realtime = DateTime::from_timestamp(real.tv_sec(), real.tv_nsec() as u32)
            .ok_or_else(|| format!("the real-time clock is out of range ({})", real.tv_sec()))?;
        Ok(BootClocks {
            realtime,
            since_boot,
            ticks_per_second,
        })
    }

    /// The wall-clock time of `ticks` since boot: now minus how long ago that was.
    pub fn wall_of(&self, ticks: u64) -> Result<DateTime<Utc>, String> {
        wall_from_ticks(ticks, self.ticks_per_second, self.realtime, self.since_boot)
    }
}

/// Pure: `realtime - (since_boot - ticks / ticks_per_second)`, in nanoseconds.
pub fn wall_from_ticks(
    ticks: u64,
    ticks_per_second: u64,
    realtime: DateTime<Utc>,
    since_boot: Duration,
) -> Result<DateTime<Utc>, String> {
    if ticks_per_second == 0 {
        return Err("clock ticks per second is 0".to_string());
    }
    let whole = ticks / ticks_per_second;
    let part = ticks % ticks_per_second;
    let started_after_boot =
        Duration::from_secs(whole) + Duration::from_nanos(part * 1_000_000_000 / ticks_per_second);
    let ago = since_boot.checked_sub(started_after_boot).ok_or_else(|| {
        format!(
            "start time '{ticks}' ticks is after now ({:.2} s since boot)",
            since_boot.as_secs_f64()
        )
    })?;
    let ago = TimeDelta::from_std(ago).map_err(|e| format!("start time '{ticks}': {e}"))?;
    realtime
        .checked_sub_signed(ago)
        .ok_or_else(|| format!("start time '{ticks}' is out of range"))
}

/// Wall-clock start time of a process from its start ticks, using the clocks now.
pub fn start_wall(ticks: u64) -> Result<DateTime<Utc>, String> {
    BootClocks::now()?.wall_of(ticks)
}

/// The first 60 characters of outside text, inert, for error messages.
fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(60).collect();
    inert(&cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(comm: &str, state: char, start: u64) -> String {
        format!(
            "4242 ({comm}) {state} 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {start} \
             8216576 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
        )
    }

    #[test]
    fn plain_stat_line() {
        let stat = parse_stat(&stat_line("sleep", 'S', 98765)).expect("parses");
        assert_eq!(
            stat,
            ProcStat {
                pid: 4242,
                comm: "sleep".into(),
                state: 'S',
                ppid: 1,
                start_ticks: 98765
            }
        );
    }

    #[test]
    fn comm_with_spaces_and_parentheses_is_read_up_to_the_last_paren() {
        let stat = parse_stat(&stat_line("a) b (c) Z 9", 'T', 12)).expect("parses");
        assert_eq!(stat.comm, "a) b (c) Z 9");
        assert_eq!(stat.state, 'T');
        assert_eq!(stat.start_ticks, 12);
    }

    #[test]
    fn comm_with_control_bytes_is_made_inert() {
        let stat = parse_stat(&stat_line("x\u{1b}]0;t\u{7}y", 'R', 1)).expect("parses");
        assert_eq!(stat.comm, "xy");
    }

    #[test]
    fn broken_lines_are_errors_not_panics() {
        for text in [
            "",
            "4242",
            "4242 (sleep",
            "4242 sleep) S 1",
            "4242 (sleep) S",
            "4242 (sleep) SS 1 2",
            "x (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
            "1 (s) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -5",
            "1 (s) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18",
        ] {
            assert!(parse_stat(text).is_err(), "{text:?} should not parse");
        }
    }

    #[test]
    fn wall_time_keeps_sub_second_precision() {
        let now = DateTime::from_timestamp(1_700_000_000, 500_000_000).expect("in range");
        // Booted 1000 s ago; the process started 250.37 s after boot.
        let wall = wall_from_ticks(25_037, 100, now, Duration::from_secs(1000)).expect("in range");
        let expected = now - TimeDelta::milliseconds(1_000_000 - 250_370);
        assert_eq!(wall, expected);
    }

    #[test]
    fn start_after_now_is_an_error() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("in range");
        assert!(wall_from_ticks(200_000, 100, now, Duration::from_secs(10)).is_err());
        assert!(wall_from_ticks(1, 0, now, Duration::from_secs(10)).is_err());
    }

    #[test]
    fn out_of_range_pids_never_reach_kill() {
        assert!(matches!(lookup(0), ProcLookup::Fault(_)));
        assert!(matches!(lookup(u32::MAX), ProcLookup::Fault(_)));
        assert!(matches!(lookup(PID_MAX_LIMIT + 1), ProcLookup::Fault(_)));
    }

    #[test]
    fn this_process_is_running_and_started_in_the_past() {
        let me = std::process::id();
        let ProcLookup::Running(stat) = lookup(me) else {
            panic!("this test process should be running");
        };
        assert_eq!(Some(stat.start_ticks), self_start_ticks());
        assert_eq!(start_ticks(me), Some(stat.start_ticks));
        let started = start_wall(stat.start_ticks).expect("converts");
        assert!(started <= Utc::now());
        assert!(Utc::now() - started < TimeDelta::hours(1));
    }
}

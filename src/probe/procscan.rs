//! One walk of `/proc`: the processes a job is found by (`process.cmdline`), the descendants
//! of a process, and the processes that hold a lock on a file.
//!
//! This module owns reading `/proc/<pid>/stat`, `cmdline`, `status` and `fd`/`fdinfo` for
//! many processes at once. A pass reads `/proc` ONCE for every job that declares `process`
//! ([`ProcessTable::read`]) and matches all their patterns against it in one go (a
//! [`regex::RegexSet`], so a thousand jobs cost one search per process, not a thousand). It
//! skips kernel threads (they have no command line), zombies and the calling process itself. It
//! never signals anything and never judges: a match is evidence, `core::assess` decides what
//! one, none or several mean. A process that exits while it is being read is simply not
//! there; one that cannot be read is counted, so "none matches" is never said when a process
//! that might have matched could not be looked at.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;

use regex::RegexSet;

use super::proc::{BootClocks, parse_stat};
use crate::config::{JobSpec, ProcessUser};
use crate::core::text::inert;
use crate::core::{MatchedProcess, Reading};

/// A command line longer than this is matched on its first 64 KiB: argv can be megabytes
/// long, and a pass must stay bounded.
const CMDLINE_LIMIT: usize = 64 * 1024;
/// How much of a matched command line is kept to show the operator.
const SHOWN_CMDLINE: usize = 80;

/// One process as the scan saw it.
#[derive(Debug, Clone)]
pub struct ScannedProcess {
    pub pid: u32,
    pub ppid: u32,
    /// Field 5 of the stat line: the process group.
    pub pgrp: u32,
    /// Field 3: R, S, D, T (stopped), t (traced), I...
    pub state: char,
    pub start_ticks: u64,
    /// The argv joined by spaces (NULs between arguments become spaces), lossily UTF-8,
    /// at most [`CMDLINE_LIMIT`] bytes of it. Not inert: only matched, never shown as is.
    pub cmdline: String,
    /// The effective uid, read from `status` only when a `user:` filter asks.
    uid: OnceCell<Option<u32>>,
}

impl ScannedProcess {
    /// The effective uid (the second field of `Uid:` in `/proc/<pid>/status`), as `ps -u`
    /// and `pgrep -u` select by it; `None` when the process is gone or cannot be read.
    pub fn uid(&self) -> Option<u32> {
        *self.uid.get_or_init(|| read_uid(self.pid))
    }

    /// Whether the process is stopped: Ctrl-Z, SIGSTOP (T) or stopped by a debugger (t).
    pub fn stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }
}

/// Every user process alive at one moment, read from `/proc` once.
#[derive(Debug, Default)]
pub struct ProcessTable {
    pub processes: Vec<ScannedProcess>,
    /// Processes listed in `/proc` whose stat or command line could not be read (permission
    /// denied, an I/O error): any of them might have matched.
    pub unreadable: Vec<(u32, String)>,
    clocks: Option<BootClocks>,
}

impl ProcessTable {
    /// Reads every process in `/proc` but kernel threads, zombies and this process. An error
    /// only when `/proc` itself cannot be listed.
    pub fn read() -> Result<ProcessTable, String> {
        Self::read_with(true)
    }

    /// [`ProcessTable::read`] without the command lines (kernel threads are kept too): for a
    /// walk that needs only parents and groups.
    fn read_with(cmdlines: bool) -> Result<ProcessTable, String> {
        let me = std::process::id();
        let listing =
            fs::read_dir("/proc").map_err(|error| format!("cannot list '/proc': {error}"))?;
        let mut table = ProcessTable {
            clocks: BootClocks::now().ok(),
            ..ProcessTable::default()
        };
        let mut path = String::with_capacity(32);
        let mut buffer = Vec::with_capacity(4096);
        for entry in listing.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            path.clear();
            path.push_str("/proc/");
            path.push_str(name.to_str().unwrap_or_default());
            let base = path.len();
            path.push_str("/stat");
            match super::proc::read_into(&path, &mut buffer, 4096) {
                Ok(()) => {}
                Err(error) if gone(&error) => continue,
                Err(error) => {
                    table.unreadable.push((pid, error.to_string()));
                    continue;
                }
            }
            // The fields after the command name, without building the name itself.
            let Some(parsed) = quick_stat(&buffer) else {
                continue;
            };
            if matches!(parsed.state, 'Z' | 'X' | 'x') {
                continue;
            }
            let cmdline = if cmdlines {
                path.truncate(base);
                path.push_str("/cmdline");
                match super::proc::read_into(&path, &mut buffer, CMDLINE_LIMIT) {
                    Ok(()) => joined_argv(&buffer),
                    Err(error) if gone(&error) => continue,
                    Err(error) => {
                        table.unreadable.push((pid, error.to_string()));
                        continue;
                    }
                }
            } else {
                String::new()
            };
            // Kernel threads have no command line; neither does a process in its last moment.
            if cmdlines && cmdline.is_empty() {
                continue;
            }
            table.processes.push(ScannedProcess {
                pid,
                ppid: parsed.ppid,
                pgrp: parsed.pgrp,
                state: parsed.state,
                start_ticks: parsed.start_ticks,
                cmdline,
                uid: OnceCell::new(),
            });
        }
        Ok(table)
    }

    /// The process with this PID, if the scan saw it.
    pub fn get(&self, pid: u32) -> Option<&ScannedProcess> {
        self.processes.iter().find(|p| p.pid == pid)
    }

    /// What a matched process looks like in the evidence.
    fn matched(&self, process: &ScannedProcess) -> MatchedProcess {
        MatchedProcess {
            pid: process.pid,
            start_ticks: process.start_ticks,
            started_at: self
                .clocks
                .and_then(|clocks| clocks.wall_of(process.start_ticks).ok()),
            stopped: process.stopped(),
            state: process.state,
            cmdline: shown_cmdline(&process.cmdline),
        }
    }
}

/// Every job's `process` matched against one scan: per job id, the live processes that match
/// (empty: none), or a fault saying why that cannot be told.
#[derive(Debug, Default)]
pub struct ProcessScan {
    by_job: HashMap<String, Reading<Vec<MatchedProcess>>>,
}

impl ProcessScan {
    /// The reading for `job`, or `None` when the job declares no `process` (or was not in the
    /// scan).
    pub fn reading(&self, job: &JobSpec) -> Option<Reading<Vec<MatchedProcess>>> {
        self.by_job.get(&job.id).cloned()
    }
}

/// The patterns of every job that declares `process`, compiled into one set, kept between
/// passes while the jobs do not change.
#[derive(Debug, Default)]
pub struct Matcher {
    patterns: Vec<String>,
    compiled: Option<Compiled>,
}

/// The set, with which declared job each of its patterns belongs to, and the jobs whose
/// pattern parsed but cannot be compiled (too large), with why.
#[derive(Debug)]
struct Compiled {
    set: RegexSet,
    job_of: Vec<usize>,
    refused: Vec<(usize, String)>,
}

impl Compiled {
    /// One set of every pattern; when that fails (a size limit), every pattern on its own,
    /// so that only the jobs whose pattern is too large say so.
    fn new(patterns: &[String]) -> Compiled {
        if let Ok(set) = RegexSet::new(patterns) {
            return Compiled {
                set,
                job_of: (0..patterns.len()).collect(),
                refused: Vec::new(),
            };
        }
        let mut job_of = Vec::new();
        let mut refused = Vec::new();
        for (index, pattern) in patterns.iter().enumerate() {
            match regex::Regex::new(pattern) {
                Ok(_) => job_of.push(index),
                Err(error) => refused.push((
                    index,
                    inert(&format!(
                        "process.cmdline '{}' cannot be compiled ({}): make it simpler",
                        shown_cmdline(pattern),
                        error.to_string().lines().last().unwrap_or("too large")
                    )),
                )),
            }
        }
        let kept: Vec<&String> = job_of.iter().map(|&i| &patterns[i]).collect();
        let set = RegexSet::new(kept).unwrap_or_else(|_| RegexSet::empty());
        Compiled {
            set,
            job_of,
            refused,
        }
    }
}

impl Matcher {
    /// Matches every job of `jobs` that declares `process` against one fresh read of `/proc`;
    /// reads nothing when none does.
    pub fn scan(&mut self, jobs: &[JobSpec]) -> ProcessScan {
        let declared: Vec<&JobSpec> = jobs.iter().filter(|j| j.process.is_some()).collect();
        if declared.is_empty() {
            return ProcessScan::default();
        }
        let table = match ProcessTable::read() {
            Ok(table) => table,
            Err(error) => {
                let error = inert(&error);
                return ProcessScan {
                    by_job: declared
                        .iter()
                        .map(|job| (job.id.clone(), Reading::Fault(error.clone())))
                        .collect(),
                };
            }
        };
        self.match_table(&declared, &table)
    }

    /// Pure but for the uid lookups of a `user:` filter: every declared job matched against
    /// `table`.
    pub fn match_table(&mut self, declared: &[&JobSpec], table: &ProcessTable) -> ProcessScan {
        let patterns: Vec<String> = declared
            .iter()
            .filter_map(|job| job.process.as_ref())
            .map(|process| process.cmdline.as_str().to_string())
            .collect();
        if self.compiled.is_none() || self.patterns != patterns {
            self.compiled = Some(Compiled::new(&patterns));
            self.patterns = patterns;
        }
        let Some(compiled) = &self.compiled else {
            return ProcessScan::default();
        };
        let mut hits: Vec<Vec<&ScannedProcess>> = vec![Vec::new(); declared.len()];
        for process in &table.processes {
            // Most processes match nothing: one quick search says so before the set asks
            // which patterns match.
            if !compiled.set.is_match(&process.cmdline) {
                continue;
            }
            for index in compiled.set.matches(&process.cmdline).iter() {
                hits[compiled.job_of[index]].push(process);
            }
        }
        let mut users: HashMap<String, Result<u32, String>> = HashMap::new();
        let mut by_job = HashMap::with_capacity(declared.len());
        for (index, (job, hits)) in declared.iter().zip(hits).enumerate() {
            if let Some((_, why)) = compiled.refused.iter().find(|(i, _)| *i == index) {
                by_job.insert(job.id.clone(), Reading::Fault(why.clone()));
                continue;
            }
            let Some(process) = &job.process else {
                continue;
            };
            let wanted_uid = match &process.user {
                None => None,
                Some(ProcessUser::Uid(uid)) => Some(*uid),
                Some(ProcessUser::Name(name)) => {
                    match users.entry(name.clone()).or_insert_with(|| uid_of(name)) {
                        Ok(uid) => Some(*uid),
                        Err(error) => {
                            by_job.insert(job.id.clone(), Reading::Fault(error.clone()));
                            continue;
                        }
                    }
                }
            };
            let mut matched = Vec::new();
            let mut unknown_owner = Vec::new();
            for hit in hits {
                // The owner is read only when a user is asked for: one more file per process.
                let Some(wanted) = wanted_uid else {
                    matched.push(table.matched(hit));
                    continue;
                };
                match hit.uid() {
                    Some(uid) if uid == wanted => matched.push(table.matched(hit)),
                    Some(_) => {}
                    None => unknown_owner.push(hit.pid),
                }
            }
            matched.sort_by_key(|m| (m.start_ticks, m.pid));
            let reading = if !matched.is_empty() {
                Reading::Found(matched)
            } else if !unknown_owner.is_empty() {
                Reading::Fault(format!(
                    "process{} {} match{} process.cmdline but {} owner cannot be read: cannot \
                     tell whether {} the user's",
                    plural(unknown_owner.len()),
                    pid_list(&unknown_owner),
                    if unknown_owner.len() == 1 { "es" } else { "" },
                    if unknown_owner.len() == 1 {
                        "its"
                    } else {
                        "their"
                    },
                    if unknown_owner.len() == 1 {
                        "it is"
                    } else {
                        "they are"
                    },
                ))
            } else if !table.unreadable.is_empty() {
                let pids: Vec<u32> = table.unreadable.iter().map(|(pid, _)| *pid).collect();
                Reading::Fault(inert(&format!(
                    "no process matches process.cmdline, but {} process{} could not be read \
                     ({}: {}): cannot tell that none matches",
                    pids.len(),
                    plural(pids.len()),
                    pid_list(&pids),
                    table.unreadable[0].1
                )))
            } else {
                Reading::Empty
            };
            by_job.insert(job.id.clone(), reading);
        }
        ProcessScan { by_job }
    }
}

/// Every process descended from `root` (children, their children, and so on), read from
/// `/proc` by parent PID, with its process group: the tree `mihari run` signals. Kernel
/// threads are never anyone's descendant but kthreadd's, so none is ever included.
pub fn descendants_of(root: u32) -> Vec<(u32, u32)> {
    let Ok(table) = ProcessTable::read_with(false) else {
        return Vec::new();
    };
    descendants_in(&table, root)
        .into_iter()
        .map(|p| (p.pid, p.pgrp))
        .collect()
}

/// Pure: the processes of `table` below `root`, breadth first.
pub fn descendants_in(table: &ProcessTable, root: u32) -> Vec<&ScannedProcess> {
    let mut children: HashMap<u32, Vec<&ScannedProcess>> = HashMap::new();
    for process in &table.processes {
        children.entry(process.ppid).or_default().push(process);
    }
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([root]);
    while let Some(parent) = queue.pop_front() {
        for child in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.pid) {
                found.push(*child);
                queue.push_back(child.pid);
            }
        }
    }
    found
}

/// What a search for the processes holding a lock on one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSearch {
    /// Processes with the file open whose open file carries the lock, as (pid, start ticks,
    /// state), oldest first.
    pub holders: Vec<(u32, u64, char)>,
    /// Processes whose descriptors could not be looked at (another user's, with this user
    /// not root): one of them may be the holder.
    pub unseen: usize,
}

/// The processes that hold a lock on the file (`dev`, `ino`): those with a descriptor open on
/// it whose `/proc/<pid>/fdinfo` lists a `lock:` line for it. A `flock` belongs to the open
/// file, which every child inherits: when `flock(1)` (whose PID `/proc/locks` shows) has
/// exited, the child it started still holds the lock, and only the descriptors tell. `hint`,
/// the PID `/proc/locks` names, is looked at first; the whole of `/proc` only when it does
/// not hold the lock (it has exited, or its PID was reused).
pub fn lock_holders(dev: u64, ino: u64, hint: Option<u32>) -> LockSearch {
    let token = super::lock::lock_token(dev, ino);
    let mut search = LockSearch {
        holders: Vec::new(),
        unseen: 0,
    };
    if let Some(pid) = hint.filter(|&pid| pid != std::process::id()) {
        match holds_lock(pid, dev, ino, &token) {
            Ok(Some(found)) => {
                search.holders.push(found);
                return search;
            }
            Ok(None) => {}
            Err(()) => search.unseen += 1,
        }
    }
    let Ok(listing) = fs::read_dir("/proc") else {
        search.unseen += 1;
        return search;
    };
    for entry in listing.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if Some(pid) == hint || pid == std::process::id() {
            continue;
        }
        match holds_lock(pid, dev, ino, &token) {
            Ok(Some(found)) => search.holders.push(found),
            Ok(None) => {}
            Err(()) => search.unseen += 1,
        }
    }
    search.holders.sort_by_key(|&(pid, ticks, _)| (ticks, pid));
    search
}

/// Whether `pid` has a descriptor on (`dev`, `ino`) that carries a lock: its (pid, start
/// ticks, state); `Err` when its descriptors cannot be looked at.
fn holds_lock(pid: u32, dev: u64, ino: u64, token: &str) -> Result<Option<(u32, u64, char)>, ()> {
    let folder = format!("/proc/{pid}/fd");
    let listing = match fs::read_dir(&folder) {
        Ok(listing) => listing,
        Err(error) if gone(&error) => return Ok(None),
        Err(_) => return Err(()),
    };
    for entry in listing.flatten() {
        let Ok(meta) = fs::metadata(entry.path()) else {
            continue;
        };
        if meta.dev() != dev || meta.ino() != ino {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        let Ok(text) = fs::read_to_string(info) else {
            continue;
        };
        let locked = text.lines().any(|line| {
            line.starts_with("lock:") && line.split_whitespace().any(|field| field == token)
        });
        if !locked {
            continue;
        }
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return Ok(None);
        };
        return match parse_stat(&stat) {
            Ok(stat) if !matches!(stat.state, 'Z' | 'X' | 'x') => {
                Ok(Some((pid, stat.start_ticks, stat.state)))
            }
            _ => Ok(None),
        };
    }
    Ok(None)
}

/// The command line of `pid` as shown to the operator: joined, inert, cut.
pub fn shown_cmdline_of(pid: u32) -> Option<String> {
    let mut buffer = Vec::new();
    super::proc::read_into(&format!("/proc/{pid}/cmdline"), &mut buffer, CMDLINE_LIMIT).ok()?;
    let joined = joined_argv(&buffer);
    (!joined.is_empty()).then(|| shown_cmdline(&joined))
}

/// The first [`SHOWN_CMDLINE`] characters of a command line, inert, with '…' when cut.
pub fn shown_cmdline(cmdline: &str) -> String {
    let mut cut: String = cmdline.chars().take(SHOWN_CMDLINE).collect();
    if cut.len() < cmdline.len() {
        cut.push('…');
    }
    inert(&cut)
}

/// `/proc/<pid>/cmdline` bytes as the argv joined by spaces: NULs between arguments become
/// spaces, the final NUL goes.
pub fn joined_argv(bytes: &[u8]) -> String {
    let trimmed = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    let mut joined = trimmed.to_vec();
    for byte in &mut joined {
        if *byte == 0 {
            *byte = b' ';
        }
    }
    String::from_utf8(joined).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The fields of a stat line the scan keeps.
struct QuickStat {
    state: char,
    ppid: u32,
    pgrp: u32,
    start_ticks: u64,
}

/// Pure: state, parent, group and start ticks from the bytes of `/proc/<pid>/stat`, read
/// after the LAST ')' (a command name may hold one); `None` for a line that is not one.
fn quick_stat(bytes: &[u8]) -> Option<QuickStat> {
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state_text = fields.next()?;
    let mut chars = state_text.chars();
    let state = chars.next()?;
    if chars.next().is_some() {
        return None;
    }
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 is the 20th after the name; three were taken.
    let start_ticks = fields.nth(16)?.parse().ok()?;
    Some(QuickStat {
        state,
        ppid,
        pgrp,
        start_ticks,
    })
}

/// A process that has exited between the listing and the read.
fn gone(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH)
}

/// The effective uid in `/proc/<pid>/status`.
fn read_uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The uid of user `name`, or why there is none.
fn uid_of(name: &str) -> Result<u32, String> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        Ok(None) => Err(format!(
            "process.user '{}' is not a user on this machine: fix process.user in the jobs \
             file, or create the user",
            inert(name)
        )),
        Err(errno) => Err(format!(
            "cannot look up process.user '{}': {errno}",
            inert(name)
        )),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "es" }
}

/// "4242, 4243 and 2 more".
fn pid_list(pids: &[u32]) -> String {
    let shown: Vec<String> = pids.iter().take(5).map(u32::to_string).collect();
    match pids.len() {
        0..=5 => shown.join(", "),
        more => format!("{} and {} more", shown.join(", "), more - 5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, ppid: u32, cmdline: &str) -> ScannedProcess {
        ScannedProcess {
            pid,
            ppid,
            pgrp: pid,
            state: 'S',
            start_ticks: u64::from(pid),
            cmdline: cmdline.to_string(),
            uid: OnceCell::new(),
        }
    }

    #[test]
    fn argv_is_joined_by_spaces() {
        assert_eq!(
            joined_argv(b"python3\0train.py\0--lr\x000.1\0"),
            "python3 train.py --lr 0.1"
        );
        assert_eq!(joined_argv(b""), "");
        // A process that rewrote its argv (setproctitle) has no NULs, maybe no final one.
        assert_eq!(joined_argv(b"postgres: writer"), "postgres: writer");
    }

    #[test]
    fn shown_command_lines_are_cut_and_inert() {
        assert_eq!(shown_cmdline("a\u{1b}[2Jb"), "ab");
        let long = "x".repeat(200);
        let shown = shown_cmdline(&long);
        assert!(
            shown.ends_with('…') && shown.chars().count() == 81,
            "{shown}"
        );
    }

    #[test]
    fn descendants_follow_parents_down_the_tree() {
        let table = ProcessTable {
            processes: vec![
                process(10, 1, "mihari run"),
                process(11, 10, "sh"),
                process(12, 11, "python3"),
                process(13, 10, "daemon"),
                process(20, 1, "stranger"),
                process(21, 20, "stranger child"),
            ],
            ..ProcessTable::default()
        };
        let mut pids: Vec<u32> = descendants_in(&table, 10).iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, [11, 12, 13]);
        assert!(descendants_in(&table, 12).is_empty());
    }

    #[test]
    fn the_quick_stat_reads_what_parse_stat_reads() {
        let line = "4242 (a) b) T 7 40 40 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 \
                    8216576 200";
        let quick = quick_stat(line.as_bytes()).expect("parses");
        let full = parse_stat(line).expect("parses");
        assert_eq!(quick.state, full.state);
        assert_eq!(quick.ppid, full.ppid);
        assert_eq!(quick.pgrp, 40);
        assert_eq!(quick.start_ticks, full.start_ticks);
        assert!(quick_stat(b"4242 (sleep) S 1").is_none());
        assert!(quick_stat(b"4242 sleep S 1 2 3").is_none());
    }
}

//! The kernel's reading of a live holder, judged: is a file moving, and if not, what is the
//! process tree doing — spinning, blocked, waiting, stopped — and since when.
//!
//! A job that prints nothing (a `sha256sum` over 4 GiB, a `dd`, a silent training step) still
//! moves the positions of the files it reads and writes, and a job that is stuck is stuck in a
//! way the kernel can name. This module turns two looks at `/proc` (a [`Sample`] each, taken by
//! `probe::activity`) into an [`ActivityReading`]: a position that advanced in a regular file is
//! progress (source `io`); CPU time, bytes through pipes and sockets and the scheduler state
//! never are — they diagnose a quiet holder. It also says when a holder is worth a look at all
//! ([`plan`]): only while it is alive and its other progress is quiet, at a pace tied to
//! `stall_sec`. Pure: the samples carry their own clock readings; nothing here reads `/proc`.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::assess::fmt_secs;
use crate::config::JobSpec;

/// One process of a holder's tree, as one look at `/proc` saw it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessSample {
    pub pid: u32,
    /// With the PID, its identity (field 22 of its stat line).
    pub start_ticks: u64,
    pub ppid: u32,
    /// Its command name (field 2), inert.
    pub comm: String,
    /// Field 3: R, S, D, T, t, I...
    pub state: char,
    /// utime + stime (fields 14 and 15), in clock ticks.
    pub cpu_ticks: u64,
    /// Nanoseconds its main thread has been on a CPU or waiting in a run queue for one (the
    /// first two fields of `/proc/PID/schedstat`): a spinning loop on a busy machine gets
    /// little CPU but is runnable all the time.
    pub runnable_ns: Option<u64>,
    /// `rchar` and `wchar` of `/proc/PID/io`: every byte through read and write calls, to
    /// files, pipes, sockets and devices alike; `None` when it cannot be read.
    pub io: Option<(u64, u64)>,
    /// `/proc/PID/wchan`: the kernel function it sleeps in (`None` when running or not shown).
    pub wchan: Option<String>,
    /// The system call it is asleep in and on what, from `/proc/PID/syscall` and its
    /// descriptor ("a read on a pipe"); `None` when not asleep or not known.
    pub asleep_in: Option<String>,
    /// Its regular files open, with their positions (empty when positions are not read).
    pub files: Vec<OpenFile>,
    /// Why its descriptors or its I/O could not be read (another user's process, mihari
    /// not root), inert; `None` when all of it was read.
    pub unreadable: Option<String>,
}

/// A regular file a process has open, and where its descriptor stands in it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpenFile {
    pub fd: u32,
    /// Where the descriptor points, as `/proc/PID/fd/N` says (inert; " (deleted)" kept).
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    /// `pos:` of `/proc/PID/fdinfo/N`.
    pub pos: u64,
    /// The file's size.
    pub size: u64,
    /// Opened for reading (O_RDONLY or O_RDWR).
    pub read: bool,
    /// Opened for writing (O_WRONLY or O_RDWR).
    pub write: bool,
}

/// One look at a holder's process tree.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    /// Wall-clock time of the look.
    pub at: DateTime<Utc>,
    /// `CLOCK_BOOTTIME` at the look, in milliseconds: what spans between looks are measured
    /// in (the wall clock may be set meanwhile).
    pub boot_ms: u64,
    /// `sysconf(_SC_CLK_TCK)`, the unit of CPU time.
    pub ticks_per_sec: u64,
    /// The holder first, then its descendants.
    pub processes: Vec<ProcessSample>,
    /// Whether file positions were read (`io_progress`).
    pub positions: bool,
}

/// What a holder's tree is doing, in one word (`check --json`'s `activity.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityState {
    /// A position moved in a regular file it reads or writes: progress.
    Progressing,
    /// On a CPU, or moving bytes through pipes, sockets or devices, with no file moved.
    Busy,
    /// On a CPU most of the time, with no file moved and nothing read or written.
    Spinning,
    /// In uninterruptible sleep (D): waiting on the kernel, a disk or a dead mount.
    Blocked,
    /// Asleep (S), waiting for something: a pipe, a socket, a futex, a child.
    Waiting,
    /// Stopped (T, t): SIGSTOP, Ctrl-Z, a debugger.
    Stopped,
    /// Its files or I/O cannot be read (another user's process).
    Unreadable,
}

impl ActivityState {
    pub const ALL: [ActivityState; 7] = [
        ActivityState::Progressing,
        ActivityState::Busy,
        ActivityState::Spinning,
        ActivityState::Blocked,
        ActivityState::Waiting,
        ActivityState::Stopped,
        ActivityState::Unreadable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActivityState::Progressing => "progressing",
            ActivityState::Busy => "busy",
            ActivityState::Spinning => "spinning",
            ActivityState::Blocked => "blocked",
            ActivityState::Waiting => "waiting",
            ActivityState::Stopped => "stopped",
            ActivityState::Unreadable => "unreadable",
        }
    }
}

/// A file of the tree and how it moves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileProgress {
    /// Inert.
    pub path: String,
    pub position: u64,
    pub size: u64,
    /// position of size, 0 to 100, for a file being read; `None` for one being written.
    pub percent: Option<f64>,
    /// How fast the position moved between the two looks; `None` on a first look.
    pub bytes_per_sec: Option<f64>,
    /// Seconds until the position reaches the size at that pace (a file being read).
    pub eta_sec: Option<f64>,
    /// Written (it grows), not read.
    pub writing: bool,
}

/// The kernel's reading of a holder's tree, judged over two looks (or one, the first time).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActivityReading {
    /// When the last look was taken.
    pub at: DateTime<Utc>,
    /// Seconds between the two looks compared; `None` for a first look (no rates yet).
    pub over_sec: Option<f64>,
    pub state: ActivityState,
    /// Since when it has been in this state, as far as the looks tell.
    pub since: DateTime<Utc>,
    /// `false` when it was already so at the first look: `since` is then a lower bound.
    pub since_seen: bool,
    /// When a file position was last seen to move: the `io` progress reading. `None` when
    /// none has been seen to move, or positions are not read (`io_progress: false`).
    pub moved_at: Option<DateTime<Utc>>,
    /// The process the state is about, and its command name.
    pub pid: u32,
    pub comm: String,
    /// Its CPU use over the looks, in percent of one core.
    pub cpu_percent: Option<f64>,
    /// The share of the time between the looks it was on a CPU or waiting for one, in percent.
    pub runnable_percent: Option<f64>,
    /// Bytes per second through read and write calls, over the whole tree.
    pub read_bytes_per_sec: Option<f64>,
    pub write_bytes_per_sec: Option<f64>,
    pub wchan: Option<String>,
    /// What it is asleep in ("a read on a pipe").
    pub asleep_in: Option<String>,
    /// The input read furthest (what gives percent, rate and ETA), when one is open.
    pub input: Option<FileProgress>,
    /// The output file that grew the most between the looks, when one did.
    pub output: Option<FileProgress>,
    /// Why part of the tree could not be read; then a quiet position is not known to be quiet.
    pub unreadable: Option<String>,
    /// How many processes the tree has.
    pub processes: usize,
    /// Whether positions were read (`io_progress`).
    pub positions: bool,
}

/// What a long-running engine keeps of a holder's activity between looks.
#[derive(Debug, Clone, PartialEq)]
pub struct Track {
    pub state: ActivityState,
    pub since: DateTime<Utc>,
    pub since_seen: bool,
    pub moved_at: Option<DateTime<Utc>>,
}

impl Track {
    /// What a reading says to keep.
    pub fn of(reading: &ActivityReading) -> Track {
        Track {
            state: reading.state,
            since: reading.since,
            since_seen: reading.since_seen,
            moved_at: reading.moved_at,
        }
    }
}

/// Whether (and how) to look at a holder now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub pid: u32,
    pub start_ticks: u64,
    /// Seconds between two looks: a quarter of `stall_sec`, from 1 s to 60 s.
    pub every_sec: f64,
    /// Whether file positions are read (`io_progress`).
    pub positions: bool,
}

/// The files whose growth is never the kernel's progress for `job`: those a source of their own
/// judges — the log (and the names its rotation gives it), the progress file, the manifest, the
/// progress table's database (and its journal), the lock and the markers — and mihari's own
/// bookkeeping in `state_dir`. A meter that redraws into its log grows the log while not a byte
/// of work is done; that is the log's to judge (a reading must move), not a moving position.
/// Each is a prefix of the paths it covers (`run.log` covers `run.log.1` and `run.log-20261201`).
pub fn not_progress(job: &JobSpec, state_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut paths: Vec<std::path::PathBuf> = [
        job.log.as_deref(),
        job.progress_file.as_deref(),
        job.manifest.as_deref(),
        job.progress_table.as_ref().map(|table| table.db.as_path()),
        job.lock.as_deref(),
        job.kept_lock.as_deref(),
    ]
    .into_iter()
    .flatten()
    .map(std::path::Path::to_path_buf)
    .collect();
    paths.extend(job.markers.iter().map(|marker| marker.path.clone()));
    // The folder itself, ending in '/': a file beside it whose name starts the same is not in it.
    let mut folder = state_dir.as_os_str().to_os_string();
    folder.push("/");
    paths.push(folder.into());
    paths
}

/// The least and most time between two looks at a quiet holder.
pub const LOOK_EVERY_MIN_SEC: f64 = 1.0;
pub const LOOK_EVERY_MAX_SEC: f64 = 60.0;

/// Whether `job`'s holder is worth a look: it is alive (`holder`, its PID and start ticks),
/// the job can stall (`stall_sec` is not `never`), and its other progress is quiet — older
/// than half of `stall_sec` (`age_sec`, over every source but this one, or since the holder
/// started). A holder whose log moves is never sampled: nothing the kernel says would change
/// its verdict.
pub fn plan(job: &JobSpec, holder: Option<(u32, u64)>, age_sec: Option<f64>) -> Option<Plan> {
    let limit = job.stall_limit()? as f64;
    let (pid, start_ticks) = holder?;
    if age_sec.is_some_and(|age| age < limit / 2.0) {
        return None;
    }
    Some(Plan {
        pid,
        start_ticks,
        every_sec: (limit / 4.0).clamp(LOOK_EVERY_MIN_SEC, LOOK_EVERY_MAX_SEC),
        positions: job.io_progress,
    })
}

/// CPU percent at or above which a process with no file moved and no bytes through its calls
/// is spinning.
const SPINNING_CPU: f64 = 50.0;
/// CPU percent at or above which a process counts as busy.
const BUSY_CPU: f64 = 10.0;
/// Bytes per second through read and write calls below which a process is said to move none
/// (a loop that reads a tiny status file now and then is still spinning).
const QUIET_BYTES_PER_SEC: f64 = 1024.0;

/// Judges the tree over two looks (`before`, when there is one, and `after`), with what was
/// kept of earlier looks (`track`). Returns `None` when `after` holds no process.
pub fn judge(
    before: Option<&Sample>,
    after: &Sample,
    track: Option<&Track>,
) -> Option<ActivityReading> {
    let root = after.processes.first()?;
    let over_sec = before
        .map(|b| after.boot_ms.saturating_sub(b.boot_ms) as f64 / 1000.0)
        .filter(|secs| *secs > 0.0);
    let earlier = |p: &ProcessSample| -> Option<&ProcessSample> {
        before?
            .processes
            .iter()
            .find(|q| q.pid == p.pid && q.start_ticks == p.start_ticks)
    };
    let cpu_of = |p: &ProcessSample| -> Option<f64> {
        let (secs, was) = (over_sec?, earlier(p)?);
        let ticks = p.cpu_ticks.saturating_sub(was.cpu_ticks) as f64;
        Some(ticks / after.ticks_per_sec.max(1) as f64 / secs * 100.0)
    };
    let runnable_of = |p: &ProcessSample| -> Option<f64> {
        let (secs, was) = (over_sec?, earlier(p)?);
        let ns = p.runnable_ns?.saturating_sub(was.runnable_ns?) as f64;
        Some((ns / 1e9 / secs * 100.0).min(100.0))
    };
    let io_of = |p: &ProcessSample| -> Option<(f64, f64)> {
        let (secs, was) = (over_sec?, earlier(p)?);
        let ((r1, w1), (r0, w0)) = (p.io?, was.io?);
        Some((
            r1.saturating_sub(r0) as f64 / secs,
            w1.saturating_sub(w0) as f64 / secs,
        ))
    };

    // Bytes this process itself read and wrote between the looks (rchar, wchar), when both
    // looks could read its `/proc/PID/io`. A descriptor shared with another process (a stdout
    // inherited from the shell or test harness that started it) moves when that process
    // writes: only what the process moved itself is its progress.
    let own_bytes = |p: &ProcessSample| -> Option<(u64, u64)> {
        let was = earlier(p)?;
        let ((r1, w1), (r0, w0)) = (p.io?, was.io?);
        Some((r1.saturating_sub(r0), w1.saturating_sub(w0)))
    };

    // Files: what moved, the input read furthest, the output that grew the most.
    let mut moved = false;
    let mut input: Option<(bool, FileProgress)> = None;
    let mut output: Option<(u64, FileProgress)> = None;
    for process in &after.processes {
        let was = earlier(process);
        let own = own_bytes(process);
        for file in &process.files {
            let old = was.and_then(|w| {
                w.files
                    .iter()
                    .find(|f| f.fd == file.fd && f.dev == file.dev && f.ino == file.ino)
            });
            let advanced = old.map_or(0, |o| file.pos.saturating_sub(o.pos));
            // No more than the process read (or wrote) itself through its calls.
            let advanced = match own {
                Some((read, written)) => advanced.min(if file.read { read } else { written }),
                None => advanced,
            };
            let rate = over_sec
                .filter(|_| old.is_some())
                .map(|secs| advanced as f64 / secs);
            if file.read && file.size > 0 {
                let percent = (file.pos as f64 * 100.0 / file.size as f64).min(100.0);
                let eta = rate
                    .filter(|r| *r > 0.0)
                    .map(|r| file.size.saturating_sub(file.pos) as f64 / r);
                let candidate = FileProgress {
                    path: file.path.clone(),
                    position: file.pos,
                    size: file.size,
                    percent: Some(percent),
                    bytes_per_sec: rate,
                    eta_sec: eta,
                    writing: false,
                };
                let better = match &input {
                    None => true,
                    Some((was_moving, best)) => {
                        (advanced > 0, file.pos) > (*was_moving, best.position)
                    }
                };
                if better {
                    input = Some((advanced > 0, candidate));
                }
                moved |= advanced > 0;
            } else if file.write && advanced > 0 {
                // Its own descriptor's position: a file others append to (a shared stdout)
                // grows without this process writing a byte.
                moved = true;
                let growth = advanced;
                if output.as_ref().is_none_or(|(best, _)| growth > *best) {
                    output = Some((
                        growth,
                        FileProgress {
                            path: file.path.clone(),
                            position: file.pos,
                            size: file.size,
                            percent: None,
                            bytes_per_sec: over_sec.map(|secs| growth as f64 / secs),
                            eta_sec: None,
                            writing: true,
                        },
                    ));
                }
            }
        }
    }
    let moved = moved && after.positions;

    // The tree's bytes through calls, over every process seen both times.
    let (mut read_rate, mut write_rate) = (None::<f64>, None::<f64>);
    for process in &after.processes {
        if let Some((r, w)) = io_of(process) {
            *read_rate.get_or_insert(0.0) += r;
            *write_rate.get_or_insert(0.0) += w;
        }
    }

    // Which process the state is about, and the state, in order of what tells the most.
    let has_children = |pid: u32| after.processes.iter().any(|p| p.ppid == pid);
    let waits_for_child = |p: &ProcessSample| {
        p.asleep_in.as_deref().is_some_and(|w| w.contains("child"))
            || p.wchan.as_deref() == Some("do_wait")
    };
    // How much it wants a CPU: what it got, or the time it was runnable when the machine's
    // CPUs are shared (a loop that gets 15 % of a busy core is still a loop).
    let busiest = after
        .processes
        .iter()
        .filter_map(|p| {
            let cpu = cpu_of(p)?;
            Some((cpu.max(runnable_of(p).unwrap_or(0.0)), p))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let unreadable = after.processes.iter().find(|p| p.unreadable.is_some());
    let (state, focus): (ActivityState, &ProcessSample) = if moved {
        (ActivityState::Progressing, root)
    } else if let Some(p) = after.processes.iter().find(|p| p.state == 'D') {
        (ActivityState::Blocked, p)
    } else if let Some(p) = after
        .processes
        .iter()
        .find(|p| matches!(p.state, 'T' | 't'))
    {
        (ActivityState::Stopped, p)
    } else if let Some(p) = unreadable.filter(|_| after.positions) {
        (ActivityState::Unreadable, p)
    } else if let Some((_, p)) = busiest.filter(|(cpu, _)| *cpu >= SPINNING_CPU)
        && io_of(p).is_some_and(|(r, w)| r + w < QUIET_BYTES_PER_SEC)
    {
        (ActivityState::Spinning, p)
    } else if let Some((_, p)) = busiest.filter(|(cpu, _)| *cpu >= BUSY_CPU) {
        (ActivityState::Busy, p)
    } else if let Some(p) = after.processes.iter().find(|p| {
        io_of(p).is_some_and(|(r, w)| r + w >= QUIET_BYTES_PER_SEC)
            || (over_sec.is_none() && p.state == 'R')
    }) {
        (ActivityState::Busy, p)
    } else if let Some(p) = unreadable {
        (ActivityState::Unreadable, p)
    } else {
        // Asleep: the process whose wait says the most — not one waiting for its child, the
        // one furthest down the tree.
        let focus = after
            .processes
            .iter()
            .rev()
            .find(|p| !waits_for_child(p) && !has_children(p.pid))
            .or_else(|| after.processes.iter().rev().find(|p| !waits_for_child(p)))
            .unwrap_or(root);
        (ActivityState::Waiting, focus)
    };
    let (since, since_seen) = match track {
        Some(kept) if kept.state == state => (kept.since, kept.since_seen),
        Some(_) => (after.at, true),
        None => (before.map_or(after.at, |b| b.at), false),
    };
    let moved_at = if moved {
        Some(after.at)
    } else {
        track.and_then(|kept| kept.moved_at)
    };
    Some(ActivityReading {
        at: after.at,
        over_sec,
        state,
        since,
        since_seen,
        moved_at: moved_at.filter(|_| after.positions),
        pid: focus.pid,
        comm: focus.comm.clone(),
        cpu_percent: cpu_of(focus),
        runnable_percent: runnable_of(focus),
        read_bytes_per_sec: read_rate,
        write_bytes_per_sec: write_rate,
        wchan: focus.wchan.clone(),
        asleep_in: focus.asleep_in.clone(),
        input: input.map(|(_, file)| file).filter(|_| after.positions),
        output: output.map(|(_, file)| file).filter(|_| after.positions),
        unreadable: unreadable.and_then(|p| p.unreadable.clone()),
        processes: after.processes.len(),
        positions: after.positions,
    })
}

impl ActivityReading {
    /// Seconds it has been in its state at `now`.
    pub fn state_sec(&self, now: DateTime<Utc>) -> f64 {
        ((now - self.since).num_milliseconds().max(0) as f64) / 1000.0
    }

    /// How long it has been so, in words: "for 6 min", or "for at least 6 min" when it was
    /// already so at the first look.
    fn for_how_long(&self, now: DateTime<Utc>) -> String {
        let secs = fmt_secs(self.state_sec(now).max(self.over_sec.unwrap_or(0.0)));
        if self.since_seen {
            format!("for {secs}")
        } else {
            format!("for at least {secs}")
        }
    }

    /// "pid 4242 ('cat')".
    fn who(&self) -> String {
        format!("pid {} ('{}')", self.pid, self.comm)
    }

    /// The reading in the operator's words, for the row and the detail: what moves
    /// ("reading 'big.img' at 43 % ..."), or the diagnosis of a quiet holder ("spinning: 100 %
    /// CPU in pid 4242 ('python3'), no file moved and nothing read or written, for 6 min").
    pub fn words(&self, now: DateTime<Utc>) -> String {
        let cpu = match (self.cpu_percent, self.runnable_percent) {
            (Some(cpu), Some(runnable)) if runnable >= cpu + 20.0 => format!(
                "{cpu:.0} % CPU (runnable {runnable:.0} % of the time: the CPUs are shared)"
            ),
            (Some(cpu), _) => format!("{cpu:.0} % CPU"),
            (None, _) => "CPU not measured yet".to_string(),
        };
        let wchan = self
            .wchan
            .as_deref()
            .map(|w| format!("wchan {w}"))
            .unwrap_or_else(|| "wchan not shown".to_string());
        let asleep = self
            .asleep_in
            .as_deref()
            .map(|what| format!(" in {what}"))
            .unwrap_or_default();
        match self.state {
            ActivityState::Progressing => match (&self.input, &self.output) {
                (Some(input), _) if input.bytes_per_sec.is_some_and(|r| r > 0.0) => {
                    input_words(input)
                }
                (_, Some(output)) => output_words(output, self.over_sec),
                (Some(input), None) => input_words(input),
                (None, None) => "a file position moved".to_string(),
            },
            ActivityState::Spinning => format!(
                "spinning: {cpu} in {}, no file moved and nothing read or written, {}",
                self.who(),
                self.for_how_long(now)
            ),
            ActivityState::Busy => format!(
                "busy: {cpu} in {}, {} through pipes, sockets or devices, no file moved, {}",
                self.who(),
                self.bytes_words(),
                self.for_how_long(now)
            ),
            ActivityState::Blocked => format!(
                "blocked: {} in D state (uninterruptible){asleep} {} ({wchan})",
                self.who(),
                self.for_how_long(now)
            ),
            ActivityState::Waiting => format!(
                "waiting: {} asleep{} {} ({wchan})",
                self.who(),
                if asleep.is_empty() {
                    " on something the kernel does not name".to_string()
                } else {
                    asleep.clone()
                },
                self.for_how_long(now)
            ),
            ActivityState::Stopped => format!(
                "stopped: {} in state T {} (SIGSTOP, Ctrl-Z or a debugger; kill -CONT {} \
                 lets it go on)",
                self.who(),
                self.for_how_long(now),
                self.pid
            ),
            ActivityState::Unreadable => format!(
                "unreadable: cannot read the open files and I/O of {}: {}; run mihari as \
                 root or as its user (or set io_progress: false)",
                self.who(),
                self.unreadable.as_deref().unwrap_or("permission denied")
            ),
        }
    }

    /// The diagnosis in a few words, for the digest's line of a stall: "spinning (100 % CPU,
    /// pid 4242 'python3')", "blocked in D state (wchan __folio_lock, pid 4242 'cat')".
    pub fn headline(&self) -> String {
        let who = format!("pid {} '{}'", self.pid, self.comm);
        match self.state {
            ActivityState::Progressing => "a file moving".to_string(),
            ActivityState::Spinning | ActivityState::Busy => format!(
                "{} ({}{who})",
                self.state.as_str(),
                self.cpu_percent
                    .map(|cpu| format!("{cpu:.0} % CPU, "))
                    .unwrap_or_default()
            ),
            ActivityState::Blocked => format!(
                "blocked in D state ({}{who})",
                self.wchan
                    .as_deref()
                    .map(|w| format!("wchan {w}, "))
                    .unwrap_or_default()
            ),
            ActivityState::Waiting => format!(
                "waiting in {} ({who})",
                self.asleep_in
                    .as_deref()
                    .unwrap_or("a sleep the kernel does not name")
            ),
            ActivityState::Stopped => format!("stopped ({who})"),
            ActivityState::Unreadable => format!("unreadable ({who} is not this user's)"),
        }
    }

    /// "reading 1.2 MiB/s and writing 0 B/s".
    fn bytes_words(&self) -> String {
        match (self.read_bytes_per_sec, self.write_bytes_per_sec) {
            (Some(r), Some(w)) => format!(
                "reading {}/s and writing {}/s",
                bytes_words(r as u64),
                bytes_words(w as u64)
            ),
            _ => "bytes not measured yet".to_string(),
        }
    }
}

/// "reading 'big.img' at 43.0 % (1.7 GiB of 4.0 GiB, 180.2 MiB/s, 13 s left)".
fn input_words(input: &FileProgress) -> String {
    let mut parts = vec![format!(
        "{} of {}",
        bytes_words(input.position),
        bytes_words(input.size)
    )];
    if let Some(rate) = input.bytes_per_sec {
        parts.push(format!("{}/s", bytes_words(rate as u64)));
    }
    if let Some(eta) = input.eta_sec {
        parts.push(format!("{} left", fmt_secs(eta)));
    }
    format!(
        "reading '{}' at {:.1} % ({})",
        file_name(&input.path),
        input.percent.unwrap_or(0.0),
        parts.join(", ")
    )
}

/// "writing 'out.gz' (12.0 MiB, growing 3.1 MiB/s)".
fn output_words(output: &FileProgress, over_sec: Option<f64>) -> String {
    let pace = match (output.bytes_per_sec, over_sec) {
        (Some(rate), Some(_)) => format!(", growing {}/s", bytes_words(rate as u64)),
        _ => String::new(),
    };
    format!(
        "writing '{}' ({}{pace})",
        file_name(&output.path),
        bytes_words(output.size.max(output.position))
    )
}

/// The last part of a path, as the row shows it (the detail and JSON keep the whole path).
pub fn file_name(path: &str) -> &str {
    let trimmed = path.strip_suffix(" (deleted)").unwrap_or(path);
    match trimmed.rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => name,
        _ => trimmed,
    }
}

/// Bytes as `progress` shows them: "512 B", "1.5 KiB", "4.0 GiB".
pub fn bytes_words(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// When the next look at a holder is due, `every_sec` after `at`.
pub fn next_look(at: DateTime<Utc>, every_sec: f64) -> DateTime<Utc> {
    at + Duration::milliseconds((every_sec * 1000.0) as i64)
}

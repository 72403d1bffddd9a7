//! The event sources that wake the dashboard and the watcher: file changes and holder exits.
//!
//! This module owns two kinds of waiting that cost nothing while nothing happens. Files are
//! followed through inotify (see [`super::folders`]) on the PARENT folder of every path, never on the
//! file itself, so that rotation, an atomic replace and delete-and-recreate are all seen; a
//! parent that does not exist yet is followed through its nearest existing ancestor. Lock
//! holders are waited on through pidfds, all polled by one background thread that blocks with
//! no timeout. Everything seen goes to one sink closure as a [`Trigger`]; this module does not
//! gather, judge or redraw, it only says "look again". It must never busy-loop, never panic on
//! a background thread, never wait on a process whose identity (PID and start time) it has not
//! confirmed, and never call the sink from inside [`Triggers::watch_paths`] or
//! [`Triggers::watch_holders`] (a sink that locks what the caller holds would deadlock).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::{self, JoinHandle};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

pub use super::folders::FILE_THREAD_NAME;
use super::folders::FolderWatches;
use crate::core::text::inert;
use crate::probe::proc::{self, PID_MAX_LIMIT, ProcLookup};

/// Where triggers go. Called from background threads (the file thread and the holder thread), so it
/// must be quick and must not block: the dashboard forwards into a channel.
pub type Sink = Arc<dyn Fn(Trigger) + Send + Sync>;

/// A reason to gather again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Something happened to this path (created, written, renamed to/from, removed). The path
    /// is absolute, as [`std::path::absolute`] makes it. It may also be a folder on the way to
    /// a watched path (the folder was created, removed or renamed): gather, then call
    /// [`Triggers::watch_paths`] again so the folder itself gets watched.
    Changed(PathBuf),
    /// Events may have been lost (inotify's queue overflowed, the file thread could not read, or
    /// the holder thread could not wait any longer): gather everything again.
    Rescan,
    /// The process (pid, start_ticks) that was being waited on has exited, or the PID now
    /// belongs to a different process.
    HolderExited { pid: u32, start_ticks: u64 },
    /// A job wrote on: this path feeds only logs and progress (never made here: the live
    /// loop's sink tells it from [`Trigger::Changed`]). Gathered as a change is, and in a storm
    /// of them the passes are spaced by their cost.
    Grew(PathBuf),
}

impl Trigger {
    /// Whether a pass for it may wait for the loop's pace: a file change or lost events may
    /// (a storm of writes is gathered a few times a second, not once per write); a holder's
    /// exit may not — a death is shown at once.
    pub fn can_wait(&self) -> bool {
        matches!(
            self,
            Trigger::Changed(_) | Trigger::Grew(_) | Trigger::Rescan
        )
    }

    /// Whether a pass for it may wait longer than the pace, as a storm's cost asks: only a
    /// job writing on may.
    pub fn may_space(&self) -> bool {
        matches!(self, Trigger::Grew(_))
    }
}

/// File watches and holder waits, feeding one sink. Dropping it stops both threads, closes
/// every pidfd and the inotify instance (an event already in flight on the file thread may
/// still reach the sink).
pub struct Triggers {
    /// The folder watches; they also keep which watched folders events said were removed,
    /// renamed or recreated (their watch no longer follows the path).
    folders: FolderWatches,
    /// Folders watched now, with the identity they had when the watch was added.
    watched: HashMap<PathBuf, Identity>,
    /// For each path of the last [`Triggers::watch_paths`], the folder it was followed through.
    routes: HashMap<PathBuf, Route>,
    /// Paths of the last [`Triggers::watch_paths`] whose folder could not be watched: once it
    /// can be, what appeared meanwhile is reported as for a path that moved to a new folder.
    unrouted: HashSet<PathBuf>,
    /// Holders the caller listed and that are being waited on (or were reported exited).
    holders: HashSet<(u32, u64)>,
    waiter: Waiter,
}

impl fmt::Debug for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Triggers")
            .field("watched", &self.watched.keys().collect::<Vec<_>>())
            .field("holders", &self.holders)
            .finish_non_exhaustive()
    }
}

/// A folder's (device, inode): the same path with a different identity is a different folder,
/// and a watch on the old one says nothing about the new one.
type Identity = (u64, u64);

/// The folder a path is followed through, and its identity at the time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    /// Shared by every file of the folder: a farm's thousands of files sit in a few.
    folder: Arc<Path>,
    identity: Identity,
}

impl Triggers {
    /// Starts the file thread and the holder thread; nothing is watched yet.
    pub fn new(sink: Sink) -> Result<Self, String> {
        let folders = FolderWatches::start(sink.clone())?;
        let waiter = Waiter::start(sink)?;
        Ok(Triggers {
            folders,
            watched: HashMap::new(),
            routes: HashMap::new(),
            unrouted: HashSet::new(),
            holders: HashSet::new(),
            waiter,
        })
    }

    /// Watch the PARENT folder of every path, non-recursively (so rotation, atomic replace,
    /// delete+recreate are all followed: the file itself is never watched). When a parent does
    /// not exist yet, watch its nearest existing ancestor so its creation is seen (the caller
    /// calls watch_paths again after every gather, so the real parent gets watched once it
    /// exists). Idempotent; folders no longer needed are unwatched.
    ///
    /// When a path comes to be followed through a different folder than on the last call (its
    /// parent appeared, or was replaced), whatever already exists one step further is reported
    /// as [`Trigger::Changed`] (through the holder thread, never from inside this call): it may
    /// have been created before the new watch was in place, and would otherwise go unseen.
    ///
    /// Returns folders that could not be watched, with the error (e.g. the inotify watch
    /// limit), so the caller can show it. They are tried again on the next call. Folders are
    /// watched in path order.
    pub fn watch_paths<P: AsRef<Path>>(&mut self, paths: &[P]) -> Vec<(PathBuf, String)> {
        let mut failures = Vec::new();
        let lost = self.folders.take_lost();

        let mut routes: HashMap<PathBuf, Route> = HashMap::with_capacity(paths.len());
        // In path order, so which folders get the last watches under the limit does not change
        // from one call to the next.
        let mut wanted: BTreeMap<Arc<Path>, Identity> = BTreeMap::new();
        // A farm's thousands of files sit in a few folders: each folder is looked at once per
        // call, not once per file (a reload points the watches again on every save).
        let mut looked = HashMap::new();
        for path in paths {
            match route_for(path.as_ref(), &mut looked) {
                Ok((target, route)) => {
                    wanted.insert(route.folder.clone(), route.identity);
                    routes.insert(target, route);
                }
                Err(failure) => failures.push(failure),
            }
        }

        let stale: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|(folder, identity)| {
                wanted.get(folder.as_path()) != Some(*identity) || lost.contains(*folder)
            })
            .map(|(folder, _)| folder.clone())
            .collect();
        for folder in stale {
            self.folders.unwatch(&folder);
            self.watched.remove(&folder);
        }
        for (folder, identity) in &wanted {
            if self.watched.contains_key(&**folder) {
                continue;
            }
            match self.folders.watch(folder) {
                Ok(()) => {
                    self.watched.insert(folder.to_path_buf(), *identity);
                }
                Err(why) => failures.push((folder.to_path_buf(), why)),
            }
        }

        let mut unrouted = HashSet::new();
        for (target, route) in &routes {
            if !self.watched.contains_key(&*route.folder) {
                unrouted.insert(target.clone());
                continue;
            }
            let rerouted = match self.routes.get(target) {
                Some(old) => old != route,
                None => self.unrouted.contains(target),
            } || lost.contains(&*route.folder);
            if !rerouted {
                continue;
            }
            if let Some(next) = next_step(&route.folder, target)
                && std::fs::symlink_metadata(&next).is_ok()
            {
                self.emit_later(Trigger::Changed(next));
            }
        }
        routes.retain(|target, _| !unrouted.contains(target));
        self.routes = routes;
        self.unrouted = unrouted;
        failures
    }

    /// Wait for each holder's exit without polling: `pidfd_open(pid)`, THEN confirm via
    /// `/proc/<pid>/stat` that the process still has `start_ticks` (so the pidfd is the right
    /// process and not a PID reused in between), THEN wait for it to become readable.
    /// Idempotent per (pid, start_ticks); holders no longer listed stop being waited on (their
    /// pidfd is closed). If the process is already gone or the start time differs at
    /// confirmation, [`Trigger::HolderExited`] is emitted at once (through the holder thread).
    ///
    /// Returns the holders that could not be waited on (pidfd unsupported, EPERM, a `/proc`
    /// that hides the process...), so the caller can fall back to a slow poll. They are tried
    /// again on the next call.
    pub fn watch_holders(&mut self, holders: &[(u32, u64)]) -> Vec<(u32, u64)> {
        let listed: HashSet<(u32, u64)> = holders.iter().copied().collect();
        let dropped: Vec<(u32, u64)> = self.holders.difference(&listed).copied().collect();
        for holder in dropped {
            self.holders.remove(&holder);
            self.waiter.send(Command::Forget(holder));
        }

        let mut unwaitable = Vec::new();
        let mut seen = HashSet::new();
        for &holder in holders {
            if !seen.insert(holder) || self.holders.contains(&holder) {
                continue;
            }
            if self.waiter.is_broken() {
                unwaitable.push(holder);
                continue;
            }
            let (pid, start_ticks) = holder;
            match open_holder(pid, start_ticks) {
                HolderWait::Opened(pidfd) => {
                    if self.waiter.send(Command::Wait { holder, pidfd }) {
                        self.holders.insert(holder);
                    } else {
                        unwaitable.push(holder);
                    }
                }
                HolderWait::Exited => {
                    self.holders.insert(holder);
                    self.emit_later(Trigger::HolderExited { pid, start_ticks });
                }
                HolderWait::Unwaitable => unwaitable.push(holder),
            }
        }
        unwaitable
    }

    /// Hands `trigger` to the holder thread, which calls the sink. Only if that thread is gone
    /// is the sink called here: losing the trigger would be worse.
    fn emit_later(&self, trigger: Trigger) {
        if !self.waiter.send(Command::Emit(trigger.clone())) {
            emit(&self.waiter.sink, trigger);
        }
    }
}

/// Calls the sink, containing a panic in it: a sink that panics loses that one trigger, it
/// does not take a background thread down with it.
pub(super) fn emit(sink: &Sink, trigger: Trigger) {
    let _ = catch_unwind(AssertUnwindSafe(|| sink(trigger)));
}

/// What one look at a folder found: a folder (its identity), something else or nothing
/// there (look higher), or why it cannot be looked at.
type FolderLook = Result<Option<Identity>, String>;

/// The absolute form of `path` and the folder to follow it through: its parent when that is a
/// folder, else the nearest ancestor that is one. `looked` keeps what each folder was found
/// to be during one pass, so the many files of one folder cost one `stat`.
fn route_for(
    path: &Path,
    looked: &mut HashMap<Arc<Path>, FolderLook>,
) -> Result<(PathBuf, Route), (PathBuf, String)> {
    let target = std::path::absolute(path).map_err(|error| {
        (
            path.to_path_buf(),
            inert(&format!(
                "cannot make '{}' absolute to watch it: {error}; use an absolute path",
                path.display()
            )),
        )
    })?;
    let mut folder = target.parent().ok_or_else(|| {
        (
            target.clone(),
            inert(&format!(
                "'{}' has no parent folder to watch",
                target.display()
            )),
        )
    })?;
    loop {
        let (shared, look) = match looked.get_key_value(folder) {
            Some((shared, look)) => (shared.clone(), look.clone()),
            None => {
                let look = look_at_folder(folder);
                let shared: Arc<Path> = Arc::from(folder);
                looked.insert(shared.clone(), look.clone());
                (shared, look)
            }
        };
        match look {
            Ok(Some(identity)) => {
                let route = Route {
                    folder: shared,
                    identity,
                };
                return Ok((target, route));
            }
            Ok(None) => {}
            Err(error) => return Err((folder.to_path_buf(), error)),
        }
        folder = folder.parent().ok_or_else(|| {
            (
                target.clone(),
                inert(&format!(
                    "no folder above '{}' exists to watch",
                    target.display()
                )),
            )
        })?;
    }
}

/// One `stat` of `folder`: its identity when it is a folder; nothing when something else or
/// nothing is there (a file where a folder should be is watched from above, to see it
/// replaced); why, when it cannot be looked at.
fn look_at_folder(folder: &Path) -> FolderLook {
    match std::fs::metadata(folder) {
        Ok(meta) if meta.is_dir() => Ok(Some((meta.dev(), meta.ino()))),
        Ok(_) => Ok(None),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(inert(&format!(
            "cannot look at '{}' to watch it: {error}",
            folder.display()
        ))),
    }
}

/// The path one step below `folder` towards `target` (the target itself when `folder` is its
/// parent).
fn next_step(folder: &Path, target: &Path) -> Option<PathBuf> {
    let below = target.strip_prefix(folder).ok()?;
    let first = below.components().next()?;
    Some(folder.join(first))
}

/// What opening a holder for waiting found.
enum HolderWait {
    /// A pidfd for the process, confirmed to be the one with the recorded start time.
    Opened(OwnedFd),
    /// The process has exited, or the PID now belongs to another process.
    Exited,
    /// The process cannot be waited on here; the caller must look at it another way.
    Unwaitable,
}

/// pidfd_open, then confirm the identity. The order matters: a pidfd refers to whatever
/// process had the PID when it was opened, so the start time is checked after opening; if it
/// matches, the pidfd is the recorded process and no PID reuse can slip in.
fn open_holder(pid: u32, start_ticks: u64) -> HolderWait {
    let Some(raw_pid) = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0 && pid <= PID_MAX_LIMIT)
    else {
        return HolderWait::Unwaitable;
    };
    let flags: libc::c_uint = 0;
    // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1; it
    // touches no memory of ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, flags) };
    if raw < 0 {
        let error = io::Error::last_os_error();
        return if error.raw_os_error() == Some(libc::ESRCH) {
            HolderWait::Exited
        } else {
            HolderWait::Unwaitable
        };
    }
    let Ok(raw) = RawFd::try_from(raw) else {
        return HolderWait::Unwaitable;
    };
    // SAFETY: `raw` was just returned by pidfd_open, is open, and is owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
    match proc::lookup(pid) {
        ProcLookup::Running(stat) if stat.start_ticks == start_ticks => HolderWait::Opened(pidfd),
        ProcLookup::Running(_) | ProcLookup::Zombie(_) | ProcLookup::Gone => HolderWait::Exited,
        ProcLookup::Denied(_) | ProcLookup::Fault(_) => HolderWait::Unwaitable,
    }
}

/// What the holder thread is told to do.
enum Command {
    /// Wait on this pidfd; report the holder when it becomes readable.
    Wait { holder: (u32, u64), pidfd: OwnedFd },
    /// Stop waiting on this holder and close its pidfd.
    Forget((u32, u64)),
    /// Pass this trigger to the sink.
    Emit(Trigger),
}

/// The one background thread that waits on every pidfd, and how to reach it: commands go
/// through a channel, and a byte on a socket pair wakes its `poll`.
struct Waiter {
    sink: Sink,
    commands: Option<Sender<Command>>,
    wake: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    /// Set by the thread when it could not wait any longer; holders then go to the caller's
    /// slow poll.
    broken: Arc<AtomicBool>,
}

/// The holder thread's name, as `/proc/<pid>/task/<tid>/comm` shows it (at most 15 bytes).
pub const HOLDER_THREAD_NAME: &str = "mihari-holders";

impl Waiter {
    fn start(sink: Sink) -> Result<Self, String> {
        let (wake, wake_rx) = UnixStream::pair()
            .and_then(|(a, b)| {
                a.set_nonblocking(true)?;
                b.set_nonblocking(true)?;
                Ok((a, b))
            })
            .map_err(|error| format!("cannot make the holder thread's wake-up socket: {error}"))?;
        let (commands, commands_rx) = mpsc::channel();
        let broken = Arc::new(AtomicBool::new(false));
        let thread = thread::Builder::new()
            .name(HOLDER_THREAD_NAME.to_string())
            .spawn({
                let sink = sink.clone();
                let broken = broken.clone();
                move || wait_for_holders(&sink, &wake_rx, &commands_rx, &broken)
            })
            .map_err(|error| format!("cannot start the holder thread: {error}"))?;
        Ok(Waiter {
            sink,
            commands: Some(commands),
            wake: Some(wake),
            thread: Some(thread),
            broken,
        })
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Queues `command` and wakes the thread. False when the thread is gone.
    fn send(&self, command: Command) -> bool {
        let (Some(commands), Some(wake)) = (&self.commands, &self.wake) else {
            return false;
        };
        if commands.send(command).is_err() {
            return false;
        }
        let mut wake: &UnixStream = wake;
        match wake.write_all(&[1]) {
            Ok(()) => true,
            // A full socket means the thread has wake-ups queued already.
            Err(error) => error.kind() == io::ErrorKind::WouldBlock,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // Closing the channel, then the socket, wakes the thread with end-of-file; it drains
        // what is queued and returns, closing every pidfd it holds.
        self.commands.take();
        self.wake.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The holder thread: poll every pidfd and the wake-up socket, with no timeout, so it uses
/// no CPU while nothing exits and nothing is asked of it.
fn wait_for_holders(
    sink: &Sink,
    wake: &UnixStream,
    commands: &Receiver<Command>,
    broken: &AtomicBool,
) {
    let mut waiting: HashMap<(u32, u64), OwnedFd> = HashMap::new();
    loop {
        let mut polled = Vec::with_capacity(waiting.len());
        let (woken, ready) = {
            let mut fds = Vec::with_capacity(waiting.len() + 1);
            fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
            for (holder, pidfd) in &waiting {
                polled.push(*holder);
                fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    // Cannot wait any more (out of memory, too many fds): say so once and stop,
                    // rather than spin on an error that will repeat.
                    broken.store(true, Ordering::Release);
                    emit(sink, Trigger::Rescan);
                    return;
                }
            }
            // Flags nix does not know still mean something happened.
            let fired = |fd: &PollFd<'_>| fd.any().unwrap_or(true);
            let woken = fds.first().is_some_and(fired);
            let ready: Vec<bool> = fds.iter().skip(1).map(fired).collect();
            (woken, ready)
        };

        // Commands first: a holder forgotten before it exited must not be reported, even when
        // its exit and the wake-up arrive in the same poll.
        if woken && !drain_wake(wake) {
            apply_commands(sink, commands, &mut waiting);
            return;
        }
        if !apply_commands(sink, commands, &mut waiting) {
            return;
        }
        for (holder, fired) in polled.into_iter().zip(ready) {
            if fired && waiting.remove(&holder).is_some() {
                let (pid, start_ticks) = holder;
                emit(sink, Trigger::HolderExited { pid, start_ticks });
            }
        }
    }
}

/// Reads every queued wake-up byte. False at end-of-file (the owner is gone) or on an error
/// that would make the socket readable forever.
fn drain_wake(mut wake: &UnixStream) -> bool {
    let mut bytes = [0u8; 64];
    loop {
        match wake.read(&mut bytes) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return true,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Applies every queued command. False when the owner has gone (the channel is closed).
fn apply_commands(
    sink: &Sink,
    commands: &Receiver<Command>,
    waiting: &mut HashMap<(u32, u64), OwnedFd>,
) -> bool {
    loop {
        match commands.try_recv() {
            Ok(Command::Wait { holder, pidfd }) => {
                waiting.insert(holder, pidfd);
            }
            Ok(Command::Forget(holder)) => {
                waiting.remove(&holder);
            }
            Ok(Command::Emit(trigger)) => emit(sink, trigger),
            Err(TryRecvError::Empty) => return true,
            Err(TryRecvError::Disconnected) => return false,
        }
    }
}

//! Folder watches: one inotify instance, read by one thread of its own.
//!
//! A watch asks the kernel for every change to what a folder holds — a write, a close after
//! writing, a new name, a name gone, a rename, new metadata, the folder itself moved or
//! removed — and never for an open or a read. A gather opens and reads the very files it
//! follows: were opens reported, every gather would wake this thread once per file it read,
//! and wake every other process watching the same folders (the dashboard beside the watcher)
//! as often. In a write storm on a thousand logs that tripled the events read here. The
//! `notify` crate asks for opens on every watch and has no way to ask for less, so mihari
//! reads inotify through the `inotify` crate (the one `notify` itself reads it through).
//!
//! One folder reached by two paths (a symlinked folder) is one watch in the kernel; its
//! events are reported under every path it is watched by.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use inotify::{EventMask, Events, Inotify, WatchDescriptor, WatchMask, Watches};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::triggers::{Sink, Trigger, emit};
use crate::core::text::inert;

/// The reading thread's name, as `/proc/<pid>/task/<tid>/comm` shows it (at most 15 bytes).
pub const FILE_THREAD_NAME: &str = "mihari-files";

/// What every watch asks for: changes only (see the module's words), and only on a folder.
const CHANGES: WatchMask = WatchMask::ATTRIB
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// Events after which the thing at a path may no longer be the thing that was there: a
/// watched folder they name must be watched again.
const MOVES: EventMask = EventMask::CREATE
    .union(EventMask::DELETE)
    .union(EventMask::MOVED_FROM)
    .union(EventMask::MOVED_TO)
    .union(EventMask::DELETE_SELF)
    .union(EventMask::MOVE_SELF)
    .union(EventMask::UNMOUNT)
    .union(EventMask::IGNORED);

/// How much one read takes: a storm's events for a thousand files in one or two reads.
const READ_BUFFER: usize = 64 * 1024;

/// How long the thread rests after a read that brought a storm ([`STORM_READ`] events or
/// more) before it looks again: what follows waits in the kernel's queue and is read a few
/// bursts at a time. In a storm of ten thousand writes a second written in a hundred bursts,
/// each wake-up cost more than the events it read, and the loop gathers them at most ten times
/// a second anyway. A read of a few events — an editor's save, a rotation, a lock taken, the
/// store written after a change — never rests, so the change after it is read at once.
const REST: std::time::Duration = std::time::Duration::from_millis(25);

/// How many events one wake-up must read to be a storm: many files changing at once. One file
/// written fast is a few (the kernel merges a file's repeated writes while unread).
const STORM_READ: usize = 64;

/// The watches, shared by their owner (who adds and removes them) and the reading thread (who
/// names each event's paths by them).
#[derive(Debug, Default)]
struct Shared {
    /// The folders of each watch, by its number.
    folders: HashMap<i32, Vec<Arc<Path>>>,
    /// Each watched folder's watch.
    watch_of: HashMap<Arc<Path>, WatchDescriptor>,
    /// Watched folders that events said were removed, renamed, replaced or unmounted: their
    /// watch no longer follows the path.
    lost: HashSet<PathBuf>,
    /// Why the reading thread stopped, when it did: nothing is watched any more.
    stopped: Option<String>,
}

/// The folder watches and their reading thread. Dropping it stops the thread and closes the
/// inotify instance.
pub(super) struct FolderWatches {
    watches: Watches,
    shared: Arc<Mutex<Shared>>,
    /// Closed on drop: the thread reads end-of-file and returns.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl FolderWatches {
    /// Makes the inotify instance and starts its reading thread; nothing is watched yet.
    pub(super) fn start(sink: Sink) -> Result<Self, String> {
        let inotify = Inotify::init().map_err(|error| {
            let hint = if error.raw_os_error() == Some(libc::EMFILE) {
                "; the inotify instance limit is reached: raise fs.inotify.max_user_instances"
            } else {
                ""
            };
            inert(&format!("cannot start watching files: {error}{hint}"))
        })?;
        let (stop, stopped) = UnixStream::pair()
            .map_err(|error| format!("cannot make the file thread's stop socket: {error}"))?;
        let watches = inotify.watches();
        let shared = Arc::new(Mutex::new(Shared::default()));
        let thread = thread::Builder::new()
            .name(FILE_THREAD_NAME.to_string())
            .spawn({
                let shared = shared.clone();
                move || read_folders(&sink, inotify, &stopped, &shared)
            })
            .map_err(|error| format!("cannot start the file thread: {error}"))?;
        Ok(FolderWatches {
            watches,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Watches `folder` (idempotent). The error says why not, and what to do about the watch
    /// limit.
    pub(super) fn watch(&mut self, folder: &Arc<Path>) -> Result<(), String> {
        // Held across the add, so the thread cannot read the new watch's first event before
        // it knows which folder it is.
        let mut shared = lock(&self.shared);
        if let Some(why) = &shared.stopped {
            return Err(inert(&format!(
                "cannot watch '{}': file watching stopped ({why})",
                folder.display()
            )));
        }
        let wd = self
            .watches
            .add(&**folder, CHANGES)
            .map_err(|error| watch_error(folder, &error))?;
        let list = shared
            .folders
            .entry(wd.get_watch_descriptor_id())
            .or_default();
        if !list.contains(folder) {
            list.push(folder.clone());
        }
        shared.watch_of.insert(folder.clone(), wd);
        Ok(())
    }

    /// Stops watching `folder`; the kernel's watch goes once no other path reaches it.
    pub(super) fn unwatch(&mut self, folder: &Path) {
        let mut shared = lock(&self.shared);
        let Some(wd) = shared.watch_of.remove(folder) else {
            return;
        };
        let id = wd.get_watch_descriptor_id();
        let emptied = shared.folders.get_mut(&id).is_none_or(|list| {
            list.retain(|watched| **watched != *folder);
            list.is_empty()
        });
        if emptied {
            shared.folders.remove(&id);
            // A folder already gone took its watch with it: "not watched" is fine.
            let _ = self.watches.remove(wd);
        }
    }

    /// The watched folders events said were moved or removed since the last call.
    pub(super) fn take_lost(&self) -> HashSet<PathBuf> {
        std::mem::take(&mut lock(&self.shared).lost)
    }
}

impl Drop for FolderWatches {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Locks the shared watches. A poisoned lock still holds valid maps (every update leaves them
/// whole), so it is used as is rather than panicking.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

fn watch_error(folder: &Path, error: &io::Error) -> String {
    let hint = if error.raw_os_error() == Some(libc::ENOSPC) {
        "; the inotify watch limit is reached: raise fs.inotify.max_user_watches"
    } else {
        ""
    };
    inert(&format!(
        "cannot watch '{}': {error}{hint}",
        folder.display()
    ))
}

/// The reading thread: waits in `poll` with no timeout (no CPU while nothing changes), reads
/// every queued event, hands the sink a trigger for each path named, and after a storm's read
/// rests for [`REST`] (still listening for the stop) before it waits again. Returns when its
/// owner closes the stop socket; on an error that would repeat, it says so (a rescan, and
/// every later watch refused with why, so the caller polls those folders) and returns.
fn read_folders(sink: &Sink, mut inotify: Inotify, stopped: &UnixStream, shared: &Mutex<Shared>) {
    let mut buffer = vec![0u8; READ_BUFFER];
    let give_up = |why: String| {
        lock(shared).stopped = Some(why);
        emit(sink, Trigger::Rescan);
    };
    loop {
        let (readable, stop) = {
            let mut fds = [
                PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
                PollFd::new(stopped.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(error) => return give_up(format!("cannot wait for file events: {error}")),
            }
            // Flags nix does not know still mean something happened.
            let fired = |fd: &PollFd<'_>| fd.any().unwrap_or(true);
            (fired(&fds[0]), fired(&fds[1]))
        };
        // The stop socket is only ever closed: its owner is gone.
        if stop {
            return;
        }
        if !readable {
            continue;
        }
        let mut read = 0;
        loop {
            match inotify.read_events(&mut buffer) {
                Ok(events) => {
                    let (triggers, events) = sort(events, shared);
                    read += events;
                    for trigger in triggers {
                        emit(sink, trigger);
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return give_up(format!("cannot read file events: {error}")),
            }
        }
        if read >= STORM_READ && stop_within(stopped, REST) {
            return;
        }
    }
}

/// Waits up to `rest` for the stop socket: whether it was closed meanwhile.
fn stop_within(stopped: &UnixStream, rest: std::time::Duration) -> bool {
    let timeout = PollTimeout::try_from(rest).unwrap_or(PollTimeout::ZERO);
    let mut fds = [PollFd::new(stopped.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) | Err(Errno::EINTR) => false,
        Ok(_) => true,
        // Cannot wait on it: the next poll of both says what is wrong.
        Err(_) => false,
    }
}

/// The triggers one read's events make, and how many events it read: a change of each path
/// named (under every path its
/// folder is watched by), and a rescan for a queue that overflowed. Watched folders named by a
/// move are noted lost; a watch the kernel dropped (its folder removed, or its file system
/// unmounted) is forgotten.
fn sort(events: Events<'_>, shared: &Mutex<Shared>) -> (Vec<Trigger>, usize) {
    let mut triggers = Vec::new();
    let mut read = 0;
    let mut shared = lock(shared);
    for event in events {
        read += 1;
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            triggers.push(Trigger::Rescan);
            continue;
        }
        let id = event.wd.get_watch_descriptor_id();
        let Some(folders) = shared.folders.get(&id) else {
            // A watch removed since: its events are no news.
            continue;
        };
        let mut lost = Vec::new();
        for folder in folders {
            let path = match event.name {
                Some(name) => folder.join(name),
                None => folder.to_path_buf(),
            };
            if event.mask.intersects(MOVES) && shared.watch_of.contains_key(path.as_path()) {
                lost.push(path.clone());
            }
            triggers.push(Trigger::Changed(path));
        }
        shared.lost.extend(lost);
        if event.mask.contains(EventMask::IGNORED)
            && let Some(folders) = shared.folders.remove(&id)
        {
            for folder in folders {
                shared.watch_of.remove(&folder);
            }
        }
    }
    (triggers, read)
}

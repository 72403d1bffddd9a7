//! The machine watcher's lock: one watcher per state_dir.
//!
//! The lock is `state_dir/watch.lock`, held with an exclusive `flock` for the watcher's whole
//! life and holding JSON with its PID, start time (field 22 of `/proc/self/stat`) and boot id, so the
//! dashboard can tell a live watcher from a dead one and a reused PID from the same process.
//! A lock left by a watcher that died (or whose PID was reused) is taken over, and the caller
//! records the takeover; a live holder makes the newcomer step aside, named. The file is
//! opened only through [`crate::probe::safe_open`]: a link, a named pipe or a file that is not
//! the operator's own at that path is refused and left as it is, never truncated. Its
//! modification time is the watcher's last pass ([`WatchLock::beat`]).

use std::fs::File;
use std::io::{Read, Seek, Write as _};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::core::{Liveness, Reading};
use crate::probe::lock::{parse_lock, read_lock_as};
use crate::probe::safe_open::{self, Entry, OpenError, Purpose, Role, Write};

/// A held watch lock; dropping it removes the file and releases the lock.
pub struct WatchLock {
    entry: Entry,
    flock: Option<Flock<File>>,
}

/// What trying to take the watch lock found.
pub enum Acquired {
    /// Ours now; with a note when it was taken over from a dead or reused holder.
    Taken(WatchLock, Option<String>),
    /// Another watcher holds it.
    Busy { pid: Option<u32>, why: String },
}

/// How long a newcomer keeps trying while the flock is held but no live watcher is named in
/// the file: a killed watcher's flock goes only when its last thread has exited, a moment
/// after its PID already shows as gone, and a winner writes its JSON just after its flock.
const NOT_ALIVE_GRACE: Duration = Duration::from_secs(3);

/// Tries to take the watch lock in `state_dir` (which must exist).
///
/// A leaving watcher removes the file while still holding the flock, so a newcomer that
/// opened it just before may lock a file nobody else will open: after locking, the path must
/// still name the very file locked, or the newcomer tries again with the new one.
pub fn acquire(state_dir: &Path) -> Result<Acquired, String> {
    let path = state_dir.join(crate::engine::record_watch_lock_name());
    // Through the one safe open: never a link (a planted `watch.lock -> ~/precious.conf` is
    // refused, never truncated), never a file that is not the operator's own.
    let refused = |error: OpenError| match error {
        OpenError::Refused(why) => why,
        OpenError::Missing => format!("cannot open the watch lock '{}'", path.display()),
    };
    let entry = safe_open::locate(&path, Role::WatchLock, Purpose::Write).map_err(refused)?;
    let deadline = Instant::now() + NOT_ALIVE_GRACE;
    loop {
        let mut file = match entry.open_write(Write::Update { mode: 0o600 }) {
            Ok(opened) => opened.file,
            Err(error) => return Err(refused(error)),
        };
        let mut previous = String::new();
        let _ = (&mut file).take(64 * 1024).read_to_string(&mut previous);
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(flock) => {
                if entry.names(&flock) {
                    return take(flock, entry, &previous);
                }
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = read_lock_as(&path, Role::WatchLock);
                let alive = matches!(&holder, Reading::Found(h) if h.liveness == Liveness::Alive);
                if alive || Instant::now() >= deadline {
                    return Ok(busy(&path, holder));
                }
            }
            Err((_, errno)) => {
                return Err(format!(
                    "cannot lock the watch lock '{}': {errno}",
                    path.display()
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the watch lock '{}' kept being replaced while taking it; try again",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The refusal for a newcomer, naming the holder as far as the file tells.
fn busy(path: &Path, holder: Reading<crate::core::LockHolder>) -> Acquired {
    match holder {
        Reading::Found(holder) => Acquired::Busy {
            pid: holder.pid,
            why: format!(
                "another watcher holds '{}' (pid {}, {}): one watcher per state_dir",
                path.display(),
                holder.pid.map_or("?".to_string(), |p| p.to_string()),
                holder.liveness.as_str()
            ),
        },
        _ => Acquired::Busy {
            pid: None,
            why: format!("another watcher holds '{}'", path.display()),
        },
    }
}

/// Writes our PID into the lock just taken; says what it took over from.
fn take(mut flock: Flock<File>, entry: Entry, previous: &str) -> Result<Acquired, String> {
    let path = entry.path().to_path_buf();
    // The flock is ours; whatever the file says was left by a watcher that is gone.
    let takeover = match parse_lock(previous) {
        Ok(old) => {
            let judged = match read_lock_as(&path, Role::WatchLock) {
                Reading::Found(holder) => holder,
                _ => return Err(format!("the watch lock '{}' vanished", path.display())),
            };
            let how = match judged.liveness {
                Liveness::Dead => judged.why.clone(),
                // It holds no flock, so it is not a watcher: its PID was reused or it
                // never locked.
                _ => format!("process {} holds no lock on it", old.pid),
            };
            Some(format!(
                "took over the watch lock of pid {}: {how}",
                old.pid
            ))
        }
        Err(_) => None,
    };
    let mut content = serde_json::json!({
        "pid": std::process::id(),
        "start_time": crate::probe::proc::self_start_ticks().unwrap_or(0),
        "cmdline": "mihari watch",
    });
    // A watch lock left by a watcher of another boot is dead however its PID is reused now.
    if let Some(boot_id) = crate::probe::lock::this_boot_id() {
        content["boot_id"] = boot_id.into();
    }
    let file: &mut File = &mut flock;
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(content.to_string().as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write the watch lock '{}': {e}", path.display()))?;
    Ok(Acquired::Taken(
        WatchLock {
            entry,
            flock: Some(flock),
        },
        takeover,
    ))
}

impl WatchLock {
    /// Records a pass: the lock's modification time is now. `check` and the dashboard tell a
    /// watcher whose process lives but whose loop stopped turning by it
    /// ([`crate::core::watch::stuck_for`]). Touches the inode only, never the content.
    pub fn beat(&self) -> std::io::Result<()> {
        let Some(flock) = &self.flock else {
            return Ok(());
        };
        let now = nix::sys::time::TimeSpec::UTIME_NOW;
        nix::sys::stat::futimens(flock.as_fd(), &now, &now).map_err(std::io::Error::from)
    }
}

impl Drop for WatchLock {
    fn drop(&mut self) {
        // Remove while still holding the flock, so no newcomer locks a file about to vanish;
        // and only while the name still names the file we hold.
        if let Some(flock) = &self.flock {
            let _ = self.entry.remove_if_names(flock);
        }
        drop(self.flock.take());
    }
}

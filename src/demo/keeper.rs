//! The demo's keeper: every process the demo starts, and every process those start, ends
//! when the demo ends, and none of them lingers as a zombie while it runs.
//!
//! The demo process makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process of
//! its tree whose parent dies becomes the demo's own child instead of init's, so nothing it
//! started can leave the tree — not even a restart the dashboard spawned detached in a
//! session of its own. The demo is the tree's reaper at the top: the dashboard runs as its
//! child, and while it runs the demo does nothing but wait for any child, reaping each the
//! moment it ends. At the end it signals its own children, round by round (first SIGTERM, so
//! `mihari run` records how its job ended and removes its lock, then SIGKILL): a child of its
//! own is reaped by no one else, so its PID can never be a stranger's when it is signalled,
//! and each round's orphans are the next round's children. Every process it starts also
//! carries `MIHARI_DEMO=<sandbox>` in its environment; a last look through `/proc` ends any
//! that still runs outside the tree (signalled through a pidfd, so a reused PID is never
//! hit). SIGTERM, SIGINT and SIGHUP do not end the demo at once: they are noted, passed on
//! to the dashboard, and end the demo the ordinary way. It signals only the demo's own
//! processes and judges nothing.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, killpg, sigaction};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::probe::procscan::ProcessTable;

/// The environment variable that marks a process as the demo's: its value is the sandbox.
pub const MARK: &str = "MIHARI_DEMO";

/// How long the demo's processes have to end on SIGTERM before they are killed.
const GENTLE: Duration = Duration::from_secs(2);
/// How long the demo keeps killing and reaping before it names what is left.
const FIRM: Duration = Duration::from_secs(5);
/// How long the dashboard has to end once a stop signal was passed on to it.
const DASHBOARD_GRACE: Duration = Duration::from_secs(5);

/// The last stop signal the demo received (0: none yet). Set by the handler, read between
/// waits.
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop(signal: libc::c_int) {
    STOP.store(signal, Ordering::SeqCst);
}

/// What ending the demo's processes did.
#[derive(Debug, Default)]
pub struct Ending {
    /// Processes of the tree that were running when the end began.
    pub ended: usize,
    /// Processes that carried the mark outside the tree, ended through their pidfd.
    pub strays: usize,
    /// What was still running when the keeper gave up: (pid, command line).
    pub left: Vec<(u32, String)>,
}

/// Keeps the demo's processes: see the module's documentation.
pub struct Keeper {
    sandbox: PathBuf,
    ended: bool,
}

impl Keeper {
    /// Makes this process the subreaper of everything it starts and notes stop signals from
    /// now on. `sandbox` is the mark its processes carry.
    pub fn start(sandbox: &Path) -> Result<Keeper, String> {
        nix::sys::prctl::set_child_subreaper(true).map_err(|error| {
            format!(
                "cannot keep the demo's processes in its own tree (PR_SET_CHILD_SUBREAPER): \
                 {error}; the demo needs Linux 3.4 or newer"
            )
        })?;
        // No SA_RESTART: a wait is interrupted, so the signal is acted on at once.
        let action = SigAction::new(
            SigHandler::Handler(note_stop),
            SaFlags::empty(),
            SigSet::empty(),
        );
        for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
            unsafe { sigaction(signal, &action) }
                .map_err(|error| format!("cannot handle {signal}: {error}"))?;
        }
        Ok(Keeper {
            sandbox: sandbox.to_path_buf(),
            ended: false,
        })
    }

    /// Marks `command` as the demo's: its process, and all it starts, carry the mark.
    pub fn mark<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command.env(MARK, &self.sandbox)
    }

    /// The stop signal received so far, if any.
    pub fn stop_asked(&self) -> Option<Signal> {
        Signal::try_from(STOP.load(Ordering::SeqCst)).ok()
    }

    /// Reaps every child that has ended, without waiting. True when no child is left at all.
    pub fn reap(&self) -> bool {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return false,
                Ok(_) | Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => return true,
                Err(_) => return false,
            }
        }
    }

    /// Sleeps for `how_long`, reaping children as they end. False when a stop signal came.
    pub fn pause(&self, how_long: Duration) -> bool {
        let until = Instant::now() + how_long;
        while Instant::now() < until {
            if self.stop_asked().is_some() {
                return false;
            }
            self.reap();
            thread::sleep(
                Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
            );
        }
        self.reap();
        self.stop_asked().is_none()
    }

    /// Waits for the child `pid` to end, reaping every other child the moment it ends. A stop
    /// signal is passed on to it as SIGTERM; it has a few seconds to end before SIGKILL.
    /// Its exit code (128 + the signal when killed), or `None` when it was not a child.
    pub fn wait_for(&self, pid: u32) -> Option<u8> {
        let target = Pid::from_raw(i32::try_from(pid).ok()?);
        let mut told_at: Option<Instant> = None;
        loop {
            if told_at.is_none() && self.stop_asked().is_some() {
                let _ = kill(target, Signal::SIGTERM);
                told_at = Some(Instant::now());
            }
            if told_at.is_some_and(|at| at.elapsed() > DASHBOARD_GRACE) {
                let _ = kill(target, Signal::SIGKILL);
            }
            // Blocking until a child ends or a signal arrives; polling once the dashboard
            // was told to end.
            let flags = told_at.map(|_| WaitPidFlag::WNOHANG);
            match waitpid(Pid::from_raw(-1), flags) {
                Ok(WaitStatus::Exited(child, code)) if child == target => {
                    return Some(u8::try_from(code & 0xff).unwrap_or(1));
                }
                Ok(WaitStatus::Signaled(child, signal, _)) if child == target => {
                    return Some(128u8.saturating_add(signal as i32 as u8));
                }
                Ok(WaitStatus::StillAlive) => thread::sleep(Duration::from_millis(20)),
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return None,
            }
        }
    }

    /// Ends every process of the demo and reaps it: see the module's documentation.
    pub fn end_all(&mut self) -> Ending {
        self.ended = true;
        let me = std::process::id();
        let mut ending = Ending {
            ended: crate::probe::procscan::descendants_of(me).len(),
            ..Ending::default()
        };
        // Gently first; SIGCONT so a stopped process gets the SIGTERM too.
        self.signal_children(&[Signal::SIGTERM, Signal::SIGCONT]);
        let gentle = Instant::now() + GENTLE;
        while !self.reap() && Instant::now() < gentle {
            thread::sleep(Duration::from_millis(20));
        }
        let firm = Instant::now() + FIRM;
        loop {
            self.signal_children(&[Signal::SIGKILL]);
            thread::sleep(Duration::from_millis(10));
            if self.reap() {
                break;
            }
            if Instant::now() >= firm {
                let table = ProcessTable::read().unwrap_or_default();
                ending.left = crate::probe::procscan::descendants_in(&table, me)
                    .into_iter()
                    .map(|p| (p.pid, crate::probe::procscan::shown_cmdline(&p.cmdline)))
                    .collect();
                break;
            }
        }
        ending.strays = end_marked(&self.sandbox);
        ending
    }

    /// Sends `signals` to every live child of this process, and to the process group each
    /// leads. A child is never reaped by anyone but this process, so its PID (and its group)
    /// cannot be a stranger's.
    fn signal_children(&self, signals: &[Signal]) {
        let me = std::process::id();
        let Ok(table) = ProcessTable::read() else {
            return;
        };
        for child in table.processes.iter().filter(|p| p.ppid == me) {
            let Ok(raw) = i32::try_from(child.pid) else {
                continue;
            };
            for &signal in signals {
                if child.pgrp == child.pid {
                    let _ = killpg(Pid::from_raw(raw), signal);
                }
                let _ = kill(Pid::from_raw(raw), signal);
            }
        }
    }
}

impl Drop for Keeper {
    /// An early return (an error while the sandbox was built) ends the processes too.
    fn drop(&mut self) {
        if !self.ended {
            self.end_all();
        }
    }
}

/// Processes that work on the sandbox but are not the demo's, to be named, never signalled: a
/// watcher the operator started on its jobs file, and the runs it restarted (their argv names
/// the jobs file, or they run in a job's folder). This process and its ancestors (the shell
/// the demo was started from may sit in the sandbox) are not counted.
pub fn others_on(sandbox: &Path) -> Vec<(u32, String)> {
    let Ok(table) = ProcessTable::read() else {
        return Vec::new();
    };
    let mut ancestors = vec![std::process::id()];
    let mut parent = std::os::unix::process::parent_id();
    while parent > 1 && !ancestors.contains(&parent) {
        ancestors.push(parent);
        parent = table.get(parent).map_or(0, |p| p.ppid);
    }
    let jobs_file = sandbox.join("jobs.yaml");
    let jobs_file = jobs_file.to_string_lossy();
    let folders = sandbox.join("jobs");
    table
        .processes
        .iter()
        .filter(|p| !ancestors.contains(&p.pid))
        .filter(|p| {
            p.cmdline.contains(&*jobs_file)
                || fs::read_link(format!("/proc/{}/cwd", p.pid))
                    .is_ok_and(|cwd| cwd.starts_with(&folders))
        })
        .map(|p| (p.pid, crate::probe::procscan::shown_cmdline(&p.cmdline)))
        .collect()
}

/// Ends, with SIGKILL through a pidfd, every process but this one whose environment carries
/// `MIHARI_DEMO=<sandbox>`; the number ended.
fn end_marked(sandbox: &Path) -> usize {
    let me = std::process::id();
    let mut wanted = format!("{MARK}=").into_bytes();
    wanted.extend_from_slice(sandbox.as_os_str().as_encoded_bytes());
    let Ok(listing) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut ended = 0;
    for entry in listing.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // The pidfd first, then the environment: what is read is this process's, and the
        // signal can reach no other.
        let Some(pidfd) = pidfd_open(pid) else {
            continue;
        };
        let marked = fs::read(entry.path().join("environ"))
            .is_ok_and(|environ| environ.split(|&b| b == 0).any(|entry| entry == wanted));
        if marked && pidfd_kill(&pidfd) {
            ended += 1;
        }
    }
    ended
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let raw = i32::try_from(raw).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `raw` was just returned by pidfd_open, is open, and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn pidfd_kill(pidfd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal takes a descriptor, a signal, a null siginfo and flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    sent == 0
}

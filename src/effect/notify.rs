//! Telling a human: `escalate_command`, at most [`MAX_RUNNING`] at a time.
//!
//! The watcher decides what to escalate and records it (`escalated`) the moment it decides;
//! this module only carries the messages out. Each run is argv (no shell) with the message as
//! its last argument, in a process group of its own, and has [`TIMEOUT`] before its group is
//! killed; when it ends, whatever it left in its group is killed too. While [`MAX_RUNNING`]
//! runs are out, new messages queue, and when one ends, everything queued goes out as one
//! message ("12 more need a human: a, b, c, …"): a flood of escalations and a notifier that
//! hangs cost a handful of processes, never one per escalation. When the notifier is stopped
//! or dropped (the watcher stops), every run still out ends with its group. It records
//! nothing and decides nothing: the caller hears what each run came to (through the report
//! given to [`Notifier::new`]) and records the failures.

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use crate::core::escalate::EscalationKind;

/// How many runs of `escalate_command` may be out at once. A notifier sends one message; a
/// few at once let a slow one not hold up the next, and more would only pile up processes
/// behind a notifier that hangs.
pub const MAX_RUNNING: usize = 4;

/// How long one run may take before its group is killed and the failure reported.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// How long a stopped run has to end on SIGTERM before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// How many jobs a message told together names; the rest are counted.
const NAMED_TOGETHER: usize = 8;

/// One escalation to tell: what kind, about which job, and the one line to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: EscalationKind,
    /// The job, or `None` for a rule that belongs to no job.
    pub job: Option<String>,
    /// The whole message, as `escalate_command` receives it.
    pub message: String,
}

/// What one run of `escalate_command` came to, with the escalations it told.
#[derive(Debug)]
pub struct Finished {
    /// The run, to hand back to [`Notifier::finished`].
    pub run: u64,
    /// One escalation, or every one it told together.
    pub notices: Vec<Notice>,
    pub result: Result<(), String>,
}

type Report = Arc<dyn Fn(Finished) + Send + Sync>;

/// A run that is out: its id, and its process group while its leader is not reaped (the
/// group id cannot be taken by anyone else until then, so killing it never hits a stranger).
struct Run {
    id: u64,
    group: Arc<Mutex<Option<Pid>>>,
}

/// `escalate_command`'s runs: the ones out and the notices queued behind them.
pub struct Notifier {
    command: Vec<String>,
    report: Report,
    running: Vec<Run>,
    queued: Vec<Notice>,
    next_run: u64,
}

impl Notifier {
    /// A notifier running `command`; `report` hears, from another thread, what each run came
    /// to. The caller then hands the run back with [`Notifier::finished`], which frees its
    /// place for what is queued.
    pub fn new(command: Vec<String>, report: impl Fn(Finished) + Send + Sync + 'static) -> Self {
        Notifier {
            command,
            report: Arc::new(report),
            running: Vec::new(),
            queued: Vec::new(),
            next_run: 0,
        }
    }

    /// Sends `notice` now, or queues it while [`MAX_RUNNING`] runs are out.
    pub fn tell(&mut self, notice: Notice) {
        self.queued.push(notice);
        self.start_queued();
    }

    /// Run `run` has been reported and handled: its place goes to what is queued.
    pub fn finished(&mut self, run: u64) {
        self.running.retain(|r| r.id != run);
        self.start_queued();
    }

    /// Whether nothing is out and nothing is queued.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.queued.is_empty()
    }

    /// How many runs are out.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Ends every run still out, with everything in its group: SIGTERM, then SIGKILL after
    /// [`STOP_GRACE`]. Queued notices are dropped (their escalations are recorded already).
    /// Returns how many runs were ended.
    pub fn stop(&mut self) -> usize {
        self.queued.clear();
        let out: Vec<Run> = std::mem::take(&mut self.running);
        let ended = signal_groups(&out, Signal::SIGTERM);
        wait_until_reaped(&out, STOP_GRACE);
        signal_groups(&out, Signal::SIGKILL);
        wait_until_reaped(&out, STOP_GRACE);
        ended
    }

    /// Starts what is queued while there is room: one notice as it is, several as one
    /// message that tells them together.
    fn start_queued(&mut self) {
        while self.running.len() < MAX_RUNNING && !self.queued.is_empty() {
            let notices = std::mem::take(&mut self.queued);
            let message = match notices.as_slice() {
                [one] => one.message.clone(),
                many => together(many),
            };
            let run = self.next_run;
            self.next_run += 1;
            match spawn(&self.command, &message) {
                Ok(child) => {
                    let group = Arc::new(Mutex::new(Some(Pid::from_raw(child.id() as i32))));
                    self.running.push(Run {
                        id: run,
                        group: group.clone(),
                    });
                    let pid = Pid::from_raw(child.id() as i32);
                    let report = self.report.clone();
                    let program = self.command[0].clone();
                    let waiter = thread::Builder::new()
                        .name("mihari-notify".to_string())
                        .spawn(move || {
                            let result = wait(child, &group, &program);
                            report(Finished {
                                run,
                                notices,
                                result,
                            });
                        });
                    if let Err(error) = waiter {
                        // No thread to wait for it: end it now rather than leave it unwatched.
                        let _ = killpg(pid, Signal::SIGKILL);
                        let _ = nix::sys::wait::waitpid(pid, None);
                        self.running.retain(|r| r.id != run);
                        (self.report)(Finished {
                            run,
                            notices: Vec::new(),
                            result: Err(format!("cannot wait for it: {error}")),
                        });
                    }
                }
                Err(error) => (self.report)(Finished {
                    run,
                    notices,
                    result: Err(error),
                }),
            }
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `signal` to the group of each run whose leader is not reaped yet; how many.
fn signal_groups(runs: &[Run], signal: Signal) -> usize {
    let mut sent = 0;
    for run in runs {
        // The lock is held while signalling: the leader cannot be reaped (and its group id
        // freed for someone else) in between.
        let slot = lock(&run.group);
        if let Some(group) = *slot {
            let _ = killpg(group, signal);
            sent += 1;
        }
    }
    sent
}

/// Waits, at most `grace`, until each run's own thread has reaped its leader.
fn wait_until_reaped(runs: &[Run], grace: Duration) {
    let deadline = Instant::now() + grace;
    while runs.iter().any(|run| lock(&run.group).is_some()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
}

/// The one message for escalations told together: how many, and the jobs they are about.
fn together(notices: &[Notice]) -> String {
    let mut jobs: Vec<&str> = Vec::new();
    for notice in notices {
        let job = notice
            .job
            .as_deref()
            .unwrap_or(crate::core::escalate::NO_JOB);
        if !jobs.contains(&job) {
            jobs.push(job);
        }
    }
    let mut named = jobs[..jobs.len().min(NAMED_TOGETHER)].join(", ");
    if jobs.len() > NAMED_TOGETHER {
        named.push_str(&format!(" and {} more", jobs.len() - NAMED_TOGETHER));
    }
    format!(
        "mihari: {} more need a human: {named} (mihari check shows each)",
        notices.len()
    )
}

/// Starts `command` with `message` as its last argument, in a process group of its own.
fn spawn(command: &[String], message: &str) -> Result<Child, String> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| "escalate_command is empty".to_string())?;
    Command::new(program)
        .args(args)
        .arg(message)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run '{program}': {e}"))
}

/// Waits for a run to end, at most [`TIMEOUT`], kills its group (everything it left behind,
/// or all of it on a timeout) while the leader is unreaped, then reaps the leader.
fn wait(mut child: Child, group: &Mutex<Option<Pid>>, program: &str) -> Result<(), String> {
    let exited = wait_for_exit(child.id() as i32, TIMEOUT);
    let status = {
        let mut slot = lock(group);
        if let Some(pgid) = *slot {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let status = child.wait();
        *slot = None;
        status
    };
    match (exited, status) {
        (Err(error), _) => Err(format!("cannot wait for '{program}': {error}")),
        (Ok(false), _) => Err(format!(
            "'{program}' timed out after {} s (killed with its process group)",
            TIMEOUT.as_secs()
        )),
        (Ok(true), Ok(status)) if status.success() => Ok(()),
        (Ok(true), Ok(status)) => Err(format!("'{program}' exited with {status}")),
        (Ok(true), Err(error)) => Err(format!("cannot wait for '{program}': {error}")),
    }
}

/// Whether the child `pid` exited within `timeout`, without reaping it: through a pidfd
/// when the kernel has them (no polling), else by looking every 20 ms.
fn wait_for_exit(pid: i32, timeout: Duration) -> Result<bool, Errno> {
    let deadline = Instant::now() + timeout;
    if let Some(pidfd) = pidfd_open(pid) {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let millis = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(millis)) {
                Ok(0) if left.is_zero() => return Ok(false),
                Ok(0) | Err(Errno::EINTR) => {}
                Ok(_) => return Ok(true),
                Err(error) => return Err(error),
            }
        }
    }
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::StillAlive) if Instant::now() >= deadline => return Ok(false),
            Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                thread::sleep(Duration::from_millis(20));
            }
            Ok(_) => return Ok(true),
            Err(error) => return Err(error),
        }
    }
}

/// A pidfd for our own child `pid` (unreaped, so the PID cannot name anyone else), or `None`
/// where the kernel has no pidfds.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    let flags: libc::c_uint = 0;
    // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1; it
    // touches no memory of ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    let raw = RawFd::try_from(raw).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `raw` was just returned by pidfd_open, is open, and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The lock around a run's group; a thread that panicked holding it left a plain value.
fn lock(group: &Mutex<Option<Pid>>) -> std::sync::MutexGuard<'_, Option<Pid>> {
    group.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(job: &str) -> Notice {
        Notice {
            kind: EscalationKind::BrokenRule,
            job: Some(job.to_string()),
            message: format!("mihari: {job}: check 'gaps' failed"),
        }
    }

    #[test]
    fn notices_told_together_name_their_jobs_once_and_count_the_rest() {
        let mut notices: Vec<Notice> = (0..12).map(|i| notice(&format!("j{i}"))).collect();
        notices.push(notice("j0"));
        notices.push(Notice {
            job: None,
            ..notice("x")
        });
        assert_eq!(
            together(&notices),
            "mihari: 14 more need a human: j0, j1, j2, j3, j4, j5, j6, j7 and 5 more \
             (mihari check shows each)"
        );
        assert_eq!(
            together(&notices[..2]),
            "mihari: 2 more need a human: j0, j1 (mihari check shows each)"
        );
    }
}

//! Running a job's checks: argv, no shell, a timeout, and an answer in layers.
//!
//! A check passes (exit 0), fails (exit non-zero: the job goes RED), faults (not found, timed
//! out, crashed on a signal) or is refused (permission denied). A fault or a refusal is never
//! reported as a pass. Each check runs in its own process group, and the whole group is
//! killed when the check ends or times out, so nothing it started outlives it — not even a
//! grandchild that holds its output open. Its output is read on the calling thread, with
//! `poll(2)` on its two pipes and a pidfd, so one run costs no thread and leaves no
//! descriptor behind. How many may run at once is bounded by the open-file limit and the
//! cores ([`in_flight_limit`]); the engine keeps to it. This module runs checks; it does not
//! decide when they are due or what their result means for the job.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use crate::config::CheckSpec;
use crate::core::text::inert;
use crate::core::{CheckOutcome, CheckResult};

/// How much of a check's output is kept for its detail line.
const OUTPUT_KEPT: usize = 16 * 1024;

/// After the check has ended and its group was killed, how long its pipes may stay open: a
/// process that left the group (setsid) can hold them, and is not waited for longer.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Without a pidfd (a kernel before 5.3), how often the wait looks whether the check ended.
const EXIT_LOOK_EVERY: Duration = Duration::from_millis(50);

/// File descriptors one check in flight holds at most: its two pipes (both ends while it
/// starts), the pipe that reports a failed exec, and its pidfd.
const FDS_PER_CHECK: usize = 8;

/// How many checks may be in flight at once: half of the open-file limit (the rest is the
/// store's, the watches' and the probes') at [`FDS_PER_CHECK`] each, and no more than 16 per
/// core (a check mostly waits on its process). 2,000 checks started at once under `ulimit
/// -n 1024` gave 1,662 "Too many open files" faults; bounded, every check still runs.
pub fn in_flight_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the one struct it is given.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let files = if read && limit.rlim_cur != libc::RLIM_INFINITY {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    // Asked once a process: finding it reads the cgroup's files, and the loop asks at every
    // wake-up.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    (files / 2 / FDS_PER_CHECK).min(16 * cores).max(1)
}

/// Runs one check in `cwd` and waits for it, at most `timeout_sec`.
pub fn run_check(spec: &CheckSpec, cwd: &Path) -> CheckOutcome {
    let (result, detail) = run(spec, cwd);
    CheckOutcome {
        name: inert(&spec.name),
        result,
        detail: truncate(&inert(&detail), 200),
        at: Utc::now(),
    }
}

fn run(spec: &CheckSpec, cwd: &Path) -> (CheckResult, String) {
    let Some((program, args)) = spec.command.split_first() else {
        return (CheckResult::Fault, "empty command".to_string());
    };
    let spawned = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return spawn_failure(program, cwd, &error),
    };
    let mut output = Output::new(&mut child);
    let timeout = Duration::from_secs(spec.timeout_sec);
    // A timeout too far to add to the clock is as good as none.
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
    let ended = output.until_exit(&child, deadline);
    // The whole group, whether the check ended or timed out: whatever it started must not
    // outlive it. Its leader is not reaped yet (a zombie at most), so the group's id cannot
    // have been reused and the signal reaches no stranger.
    let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
    let status = child.wait();
    output.drain(Instant::now() + DRAIN_GRACE);
    let text = output.text();
    match (ended, status) {
        (Err(error), _) => (
            CheckResult::Fault,
            format!("could not wait for it: {error}"),
        ),
        (Ok(false), _) => (
            CheckResult::Fault,
            format!("timed out after {} s, killed", spec.timeout_sec),
        ),
        (Ok(true), Ok(status)) => judge_exit(status, &text),
        (Ok(true), Err(error)) => (
            CheckResult::Fault,
            format!("could not wait for it: {error}"),
        ),
    }
}

/// A check's two output pipes, read as they fill (so a chatty check never blocks on a full
/// pipe), keeping at most [`OUTPUT_KEPT`] bytes of each.
struct Output {
    pipes: [Option<OwnedFd>; 2],
    kept: [Vec<u8>; 2],
}

impl Output {
    fn new(child: &mut Child) -> Output {
        let pipes = [
            child.stdout.take().map(OwnedFd::from),
            child.stderr.take().map(OwnedFd::from),
        ];
        for pipe in pipes.iter().flatten() {
            // Non-blocking: a read after poll never waits for more than is there.
            if let Ok(flags) = fcntl(pipe, FcntlArg::F_GETFL) {
                let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
                let _ = fcntl(pipe, FcntlArg::F_SETFL(flags));
            }
        }
        Output {
            pipes,
            kept: [Vec::new(), Vec::new()],
        }
    }

    /// Reads until the child has exited (`Ok(true)`) or `deadline` passes (`Ok(false)`),
    /// sleeping in `poll` on the pipes and a pidfd of the child: nothing spins.
    fn until_exit(&mut self, child: &Child, deadline: Instant) -> io::Result<bool> {
        let pid = Pid::from_raw(child.id() as i32);
        let pidfd = pidfd_open(pid);
        loop {
            if has_exited(pid)? {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let wait = match pidfd {
                Some(_) => left,
                None => left.min(EXIT_LOOK_EVERY),
            };
            self.poll_once(pidfd.as_ref(), wait)?;
        }
    }

    /// Reads what is left once the check is over, until both pipes are closed or `deadline`.
    fn drain(&mut self, deadline: Instant) {
        while self.pipes.iter().any(Option::is_some) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.poll_once(None, left).is_err() {
                break;
            }
        }
        // Dropping the read ends: a writer that outlived its group gets EPIPE, not our fds.
        self.pipes = [None, None];
    }

    /// One `poll` on the open pipes (and `pidfd`), at most `wait`, then one read from each
    /// pipe that is ready; a pipe at its end is closed.
    fn poll_once(&mut self, pidfd: Option<&OwnedFd>, wait: Duration) -> io::Result<()> {
        let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd> = self
                .pipes
                .iter()
                .flatten()
                .chain(pidfd)
                .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
                .collect();
            if fds.is_empty() {
                std::thread::sleep(wait);
                return Ok(());
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(errno) => return Err(io::Error::from(errno)),
            }
            fds.iter()
                .map(|fd| fd.revents().is_some_and(|events| !events.is_empty()))
                .collect()
        };
        let mut ready = ready.into_iter();
        for (slot, kept) in self.pipes.iter_mut().zip(self.kept.iter_mut()) {
            if let Some(pipe) = slot
                && ready.next() == Some(true)
                && !read_available(pipe, kept)
            {
                *slot = None;
            }
        }
        Ok(())
    }

    /// Stdout, then stderr: the last line said is usually the one that explains.
    fn text(&self) -> String {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&self.kept[0]),
            String::from_utf8_lossy(&self.kept[1])
        )
    }
}

/// Reads what the pipe holds now into `kept` (its last [`OUTPUT_KEPT`] bytes); `false` when
/// the pipe is at its end (or broken) and should be closed.
fn read_available(pipe: &OwnedFd, kept: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 8192];
    loop {
        match nix::unistd::read(pipe, &mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > OUTPUT_KEPT {
                    kept.drain(..kept.len() - OUTPUT_KEPT);
                }
            }
            Err(Errno::EAGAIN) => return true,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Whether the child has exited, without reaping it (`WNOWAIT`): its group must still be
/// killed while its id is reserved.
fn has_exited(pid: Pid) -> io::Result<bool> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::StillAlive) => Ok(false),
        Ok(_) => Ok(true),
        Err(Errno::EINTR) => Ok(false),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// A pidfd for our own unreaped child (it cannot be another process), readable once it
/// exits; `None` where the kernel has no `pidfd_open`.
fn pidfd_open(pid: Pid) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    let raw = i32::try_from(raw).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `raw` was just returned by pidfd_open, is open, and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn spawn_failure(program: &str, cwd: &Path, error: &std::io::Error) -> (CheckResult, String) {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::NotFound if !cwd.is_dir() => (
            CheckResult::Fault,
            format!(
                "cannot run it: its folder '{}' does not exist",
                cwd.display()
            ),
        ),
        ErrorKind::NotFound => (
            CheckResult::Fault,
            format!("not found: '{program}' (is it installed and on PATH?)"),
        ),
        ErrorKind::PermissionDenied => (
            CheckResult::Refusal,
            format!("permission denied: '{program}' (is it executable by this user?)"),
        ),
        _ => (
            CheckResult::Fault,
            format!("cannot run '{program}': {error}"),
        ),
    }
}

fn judge_exit(status: ExitStatus, output: &str) -> (CheckResult, String) {
    // Cut after it is made inert, as a log line is: a last line longer than what was kept
    // starts inside it, perhaps inside an escape sequence whose payload must not show.
    let said = crate::probe::tail::shown_line(last_line(output).as_bytes());
    let with_output = |head: String| {
        if said.is_empty() {
            head
        } else {
            format!("{head}: {said}")
        }
    };
    if status.success() {
        (CheckResult::Pass, with_output("exit 0".to_string()))
    } else if let Some(code) = status.code() {
        (CheckResult::Fail, with_output(format!("exit {code}")))
    } else {
        let signal = status.signal().unwrap_or(0);
        let name = Signal::try_from(signal)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {signal}"));
        (
            CheckResult::Fault,
            with_output(format!("crashed: killed by {name}")),
        )
    }
}

/// The last non-blank line a check printed: usually the one that says what is wrong.
fn last_line(output: &str) -> &str {
    output
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("")
}

fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max_chars - 1).collect();
        cut.push('…');
        cut
    }
}

//! Running a job's checks: argv, no shell, a timeout, and an answer in layers.
//!
//! A check passes (exit 0), fails (exit non-zero: the job goes RED), faults (not found, timed
//! out, crashed on a signal) or is refused (permission denied). A fault or a refusal is never
//! reported as a pass. Each check runs in its own process group so that a timeout kills
//! everything it started, not only the first process. This module runs checks; it does not
//! decide when they are due or what their result means for the job.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use chrono::Utc;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::config::CheckSpec;
use crate::core::text::inert;
use crate::core::{CheckOutcome, CheckResult};

/// How much of a check's output is kept for its detail line.
const OUTPUT_KEPT: usize = 16 * 1024;

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
    let pid = child.id();
    let output = collect_output(&mut child);

    let (sender, receiver) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let status = child.wait();
        let _ = sender.send(());
        status
    });
    let timeout = Duration::from_secs(spec.timeout_sec);
    let timed_out = receiver.recv_timeout(timeout).is_err();
    if timed_out {
        // The whole group: a check that forked must not leave its children behind.
        let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    let status = waiter.join();
    // A grandchild that outlives the check may hold its pipes open; never wait on it long.
    let text = output
        .recv_timeout(Duration::from_secs(1))
        .unwrap_or_default();
    if timed_out {
        return (
            CheckResult::Fault,
            format!("timed out after {} s, killed", spec.timeout_sec),
        );
    }
    match status {
        Ok(Ok(status)) => judge_exit(status, &text),
        Ok(Err(error)) => (
            CheckResult::Fault,
            format!("could not wait for it: {error}"),
        ),
        Err(_) => (CheckResult::Fault, "its waiter thread panicked".to_string()),
    }
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
    let said = last_line(output);
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

/// Reads stdout and stderr on their own threads (so a chatty check never blocks on a full
/// pipe), keeping at most [`OUTPUT_KEPT`] bytes of each, stderr last.
fn collect_output(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            thread::spawn(move || {
                let mut kept = Vec::new();
                if let Some(mut pipe) = pipe {
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = pipe.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        kept.extend_from_slice(&buf[..n]);
                        if kept.len() > OUTPUT_KEPT {
                            kept.drain(..kept.len() - OUTPUT_KEPT);
                        }
                    }
                }
                String::from_utf8_lossy(&kept).into_owned()
            })
        };
        let out = read(stdout.map(|p| Box::new(p) as Box<dyn Read + Send>));
        let err = read(stderr.map(|p| Box::new(p) as Box<dyn Read + Send>));
        let out = out.join().unwrap_or_default();
        let err = err.join().unwrap_or_default();
        let _ = sender.send(format!("{out}\n{err}"));
    });
    receiver
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

//! Starting a restart: `mihari run JOB` detached in its own session, and verifying that the
//! new process takes the job's lock within a grace period and is still running a moment
//! later (a job that ends at once with a failure has not been restarted).
//!
//! The spawned process is `mihari run`, not the job's command directly, so that the lock, the
//! signal forwarding and the exit record are the same whoever starts a job. What it says
//! itself goes to the job's log, where it copies the job's own output too (and follows the log
//! through a rotation, its own words with it). This module starts and watches one process; it records nothing itself (the
//! executor does, before and after).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::{Config, JobSpec};
use crate::core::decision::RestartPlan;
use crate::core::{Liveness, Reading};
use crate::probe::lock::read_lock;

/// Spawns `mihari --config FILE run JOB --run-id R [--route NAME]` in a new session, output
/// appended to the job's log.
pub fn spawn_run(
    binary: &Path,
    config: &Config,
    job: &JobSpec,
    plan: &RestartPlan,
) -> Result<Child, String> {
    // Both streams into the log, appended; without a log, nowhere. Opened as `mihari run`
    // opens it (never a link, a named pipe or a file in a folder others can change), so a
    // planted log refuses the restart here, before anything is spawned.
    let (output, errors) = match &job.log {
        Some(log) => {
            let file = super::run::open_log(log)
                .map_err(|why| format!("cannot open the job's log for its output: {why}"))?;
            let second = file
                .try_clone()
                .map_err(|error| format!("cannot share the log handle: {error}"))?;
            (Stdio::from(file), Stdio::from(second))
        }
        None => (Stdio::null(), Stdio::null()),
    };
    let mut command = Command::new(binary);
    command
        .arg("--config")
        .arg(&config.source)
        .args(["run", &job.id, "--run-id", &plan.run_id]);
    if let Some(route) = &plan.route {
        command.args(["--route", route]);
    }
    command
        .current_dir(&plan.cwd)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(errors);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent; it only makes
    // the child the leader of a new session (and process group), detached from our terminal.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    command.spawn().map_err(|error| {
        format!(
            "cannot start '{}' for the restart: {error}",
            binary.display()
        )
    })
}

/// What became of a spawned `mihari run` while the restart watched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// It holds the job's lock (or, for a job without one, is alive) and was still running
    /// when the watch ended, `settle` after it took the lock.
    Holding,
    /// It ended while watched: before taking the lock, or within `settle` after. How its job
    /// ended is in its run's own record (`mihari run` writes `started` and `exited`).
    Ended,
}

/// Watches the spawned process: until it holds the job's lock (alive, same PID), at most
/// `grace`; then `settle` longer, for a job that ends at once (a bad argument, a missing
/// file, an import error) has not been restarted however quickly it took its lock. The child
/// is reaped in the background afterwards, so it never lingers as a zombie of a long-running
/// dashboard.
pub fn verify(
    mut child: Child,
    lock: Option<&Path>,
    grace: Duration,
    settle: Duration,
) -> Result<Watched, String> {
    let pid = child.id();
    let deadline = Instant::now() + grace;
    let mut holding_since: Option<Instant> = None;
    let verdict = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break match holding_since {
                    Some(_) => Ok(Watched::Ended),
                    None => Err(format!(
                        "pid {pid} exited ({status}) before holding the lock; see the job's log"
                    )),
                };
            }
            Ok(None) => {}
            Err(error) => break Err(format!("cannot watch pid {pid}: {error}")),
        }
        if let Some(since) = holding_since {
            if since.elapsed() >= settle {
                break Ok(Watched::Holding);
            }
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        let holds = match lock {
            // Without a lock there is nothing to verify against: alive through the settle
            // window counts.
            None => true,
            Some(lock) => matches!(
                read_lock(lock),
                Reading::Found(holder) if holder.pid == Some(pid) && holder.liveness == Liveness::Alive
            ),
        };
        if holds {
            holding_since = Some(Instant::now());
            continue;
        }
        if Instant::now() >= deadline {
            break Err(format!(
                "pid {pid} did not hold the lock within {} s",
                grace.as_secs()
            ));
        }
        thread::sleep(Duration::from_millis(20));
    };
    thread::spawn(move || {
        let _ = child.wait();
    });
    verdict
}

//! Restarting a job Slurm runs: its `submit` argv (`sbatch train.sbatch`) or `scontrol requeue
//! ID`, then verifying that Slurm lists the job it made.
//!
//! The executor claims and records (before and after, as for any restart); this module only
//! runs the one command, reads the new job's id from what it printed ("Submitted batch job
//! 43", or sbatch --parsable's "43"), and asks `squeue --json` until the job is listed — for a
//! requeue, listed again in a state that is not an end. It never retries and never submits
//! twice: a failure is said and left to the claim's record.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{JobSpec, SlurmRestart};
use crate::core::decision::RestartPlan;
use crate::core::slurm::SlurmPhase;
use crate::core::text::inert;

/// How long the submit command may take (sbatch asks the controller once).
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(60);

/// What the submit command did.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The command's pid (it has exited).
    pub pid: u32,
    /// The Slurm job id it submitted (or requeued).
    pub id: u64,
}

/// Runs the plan's argv (in its cwd, with the job's `restart.env`), waits for it, and reads
/// the id of the job it submitted. An exit that is not 0, a timeout, or no id in its output
/// is an error in words, quoting what it said.
pub fn submit(job: &JobSpec, plan: &RestartPlan) -> Result<Submitted, String> {
    let Some((program, args)) = plan.argv.split_first() else {
        return Err("the submit command is empty".to_string());
    };
    let shown = inert(&plan.argv.join(" "));
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&plan.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(restart) = &job.restart {
        command.envs(&restart.env);
    }
    let child = command
        .spawn()
        .map_err(|error| format!("cannot run '{shown}' in '{}': {error}", plan.cwd.display()))?;
    let pid = child.id();
    // Its output read to the end while it runs (a chatty script never blocks on a full
    // pipe), on a thread of its own, so that the wait is bounded.
    let (sender, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    let output = match waited.recv_timeout(SUBMIT_TIMEOUT) {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => return Err(format!("cannot wait for '{shown}': {error}")),
        Err(_) => {
            // Its whole group; the thread above reaps it.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            return Err(format!(
                "'{shown}' did not finish within {} s (killed): whether it submitted \
                 anything is not known; look with squeue before trying again",
                SUBMIT_TIMEOUT.as_secs()
            ));
        }
    };
    let status = output.status;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let said_words = inert(said.trim());
    if !status.success() {
        return Err(format!("'{shown}' failed ({status}): {said_words}"));
    }
    let id = match job.slurm.as_ref().and_then(|s| s.restart.as_ref()) {
        Some(SlurmRestart::Requeue) => plan.argv.get(2).and_then(|id| id.parse().ok()),
        _ => submitted_id(&said),
    };
    match id {
        Some(id) => Ok(Submitted { pid, id }),
        None => Err(format!(
            "'{shown}' exited 0 but printed no job id ('{said_words}'): look with squeue \
             whether it submitted the job; a submit command must print sbatch's 'Submitted \
             batch job N' (or its --parsable 'N')"
        )),
    }
}

/// The job id a submit command printed: sbatch's "Submitted batch job 43", or a line that is
/// only "43" (or "43;cluster") as `sbatch --parsable` prints it.
pub fn submitted_id(said: &str) -> Option<u64> {
    said.lines().rev().find_map(|line| {
        let line = line.trim();
        if let Some((_, rest)) = line.split_once("Submitted batch job ") {
            return rest.split_whitespace().next()?.parse().ok();
        }
        let first = line.split(';').next()?;
        (!first.is_empty() && first.chars().all(|c| c.is_ascii_digit()))
            .then(|| first.parse().ok())
            .flatten()
    })
}

/// Waits until Slurm lists job `id` (for a requeue: in a state that is not an end), at most
/// `grace`, asking `squeue --json` every half second. The verdict in words: what Slurm says
/// of it, or why it is not verified.
pub fn verify(id: u64, requeue: bool, grace: Duration) -> Result<String, String> {
    let deadline = Instant::now() + grace;
    loop {
        let timeout = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(2));
        let last = match crate::probe::slurm::read_squeue(Path::new("squeue"), timeout) {
            Ok(listed) => match listed.iter().find(|job| job.id == id) {
                Some(job) if !requeue || job.phase() != SlurmPhase::Ended => {
                    return Ok(format!("{} is listed", job.words()));
                }
                Some(job) => format!("Slurm still lists {} as ended", job.words()),
                None => format!("Slurm does not list job {id}"),
            },
            Err(error) => error,
        };
        if Instant::now() >= deadline {
            return Err(format!("not verified within {} s: {last}", grace.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_jobs_id_is_read_from_what_sbatch_prints() {
        assert_eq!(submitted_id("Submitted batch job 43\n"), Some(43));
        assert_eq!(submitted_id("43\n"), Some(43));
        assert_eq!(submitted_id("43;cluster-a\n"), Some(43));
        assert_eq!(
            submitted_id("sbatch: warning: x\nSubmitted batch job 7 on cluster b\n"),
            Some(7)
        );
        assert_eq!(
            submitted_id("sbatch: error: Batch job submission failed"),
            None
        );
        assert_eq!(submitted_id(""), None);
    }
}

//! `mihari demo`: a sandbox of real, simulated jobs covering every state and bucket.
//!
//! The sandbox is a folder (a temp dir, or `--dir`) with a jobs file and, under `jobs/`, a
//! folder of its own for each job: its files and its restart's working folder, so one job's
//! restart never holds another's back by the workspace cooldown. Each job is played by a
//! real process (`mihari sim worker`) or by what a real process left behind: a lock whose
//! holder was killed, a log that ends in a traceback, a process frozen with SIGSTOP.
//! Thresholds are in seconds so states change while you watch. The demo owns its processes
//! ([`keeper`]): the dashboard runs as its child, every process the demo or the dashboard
//! starts (a restart too) is reaped as it ends and ended when the demo ends. The demo starts
//! no watcher (one would restart `crashed` within seconds and race the operator's own
//! restarts) and says so, with the command that starts one.

pub mod keeper;
pub mod sim;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::config;
use crate::engine::WatcherStatus;
use crate::render::{CheckFormat, assess_and_render, status_code};
use keeper::{Ending, Keeper};

/// The file that marks a folder as a demo sandbox, so `--dir` never writes into a folder
/// that holds something else.
const MARKER: &str = ".mihari-demo";

/// How long the demo lets its jobs run before the first assessment: long enough for the
/// frozen job to pass its 2 s `stall_sec`.
const SETTLE: Duration = Duration::from_millis(3200);

/// Runs the demo: the dashboard on the sandbox when `dashboard`, else one printed check.
pub fn run(dir: Option<&Path>, dashboard: bool, out: &mut impl Write) -> ExitCode {
    let shown = if dashboard {
        Shown::Dashboard
    } else {
        Shown::Check(CheckFormat::Table)
    };
    match run_demo(dir, shown, out) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "mihari demo: {error}");
            ExitCode::from(3)
        }
    }
}

/// What the demo shows of its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The live dashboard, until the operator quits.
    Dashboard,
    /// One assessment, printed after the jobs had a few seconds to run.
    Check(CheckFormat),
}

/// Builds the sandbox, starts its jobs, shows them, and ends every process it started.
pub fn run_demo(
    dir: Option<&Path>,
    shown: Shown,
    out: &mut impl Write,
) -> Result<ExitCode, String> {
    let sandbox = Sandbox::create(dir)?;
    let jobs_file = sandbox.path().join("jobs.yaml");
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the mihari binary to play the jobs: {e}"))?;
    fs::write(&jobs_file, jobs_yaml(&exe, sandbox.path()))
        .map_err(|e| format!("cannot write '{}': {e}", jobs_file.display()))?;
    let fleet_file = sandbox.path().join("fleet.yaml");
    fs::write(&fleet_file, fleet_yaml(&exe, &jobs_file))
        .map_err(|e| format!("cannot write '{}': {e}", fleet_file.display()))?;
    let config = config::load(&jobs_file).map_err(|e| e.to_string())?;
    let ids: Vec<&str> = config.jobs.iter().map(|job| job.id.as_str()).collect();
    // From here on every process the demo starts is kept, and ended if anything below fails.
    let mut keeper = Keeper::start(sandbox.path())?;
    let started = start_crew(&keeper, &exe, sandbox.path(), &ids)
        .map_err(|e| format!("cannot start the simulated jobs: {e}"))?;
    record_decisions(&keeper, &exe, &jobs_file)?;
    let format = match shown {
        Shown::Dashboard => {
            let code = show_dashboard(&keeper, &exe, &jobs_file)?;
            let ending = keeper.end_all();
            let _ = say_ending(out, &sandbox, &ending, None);
            if matches!(sandbox, Sandbox::Kept(_)) {
                let _ = writeln!(out, "{}", fleet_hint(&fleet_file));
            }
            return Ok(ExitCode::from(if ending.left.is_empty() {
                code
            } else {
                1
            }));
        }
        Shown::Check(format) => format,
    };
    if format == CheckFormat::Table {
        let _ = writeln!(
            out,
            "mihari demo: {started} simulated jobs in '{}'; letting them run for {} s...",
            sandbox.path().display(),
            SETTLE.as_secs_f32()
        );
    }
    if !keeper.pause(SETTLE) {
        let ending = keeper.end_all();
        let _ = say_ending(out, &sandbox, &ending, None);
        return Err("stopped by a signal before the check".to_string());
    }

    let (snapshot, written) = assess_and_render(config.clone(), format, out);
    written.map_err(|e| format!("cannot write the report: {e}"))?;
    let ending = keeper.end_all();
    if format == CheckFormat::Table {
        let _ = writeln!(out);
        let _ = say_ending(out, &sandbox, &ending, Some(&snapshot.watcher));
        if matches!(sandbox, Sandbox::Kept(_)) {
            let _ = writeln!(out, "{}", fleet_hint(&fleet_file));
        }
    }
    if !ending.left.is_empty() {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::from(status_code(&snapshot)))
}

/// Runs the dashboard on the sandbox as the demo's child (so the demo can reap and end
/// everything it starts), greeted with whether a watcher runs; its exit code.
fn show_dashboard(keeper: &Keeper, exe: &Path, jobs_file: &Path) -> Result<u8, String> {
    if let Some(signal) = keeper.stop_asked() {
        return Err(format!("stopped by {signal} before the dashboard opened"));
    }
    let mut command = Command::new(exe);
    command
        .args(["sim", "screen", "--config"])
        .arg(jobs_file)
        .arg("--greeting")
        .arg(greeting(jobs_file));
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent. Should the
    // demo be killed outright, the dashboard ends (and gives the terminal back) with it.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
    let dashboard = keeper
        .mark(&mut command)
        .spawn()
        .map_err(|e| format!("cannot open the dashboard: {e}"))?;
    // Reaped by the keeper, never through the handle.
    let pid = dashboard.id();
    drop(dashboard);
    Ok(keeper.wait_for(pid).unwrap_or(1))
}

/// What the dashboard says first, on its status line (in place of the key bar until the
/// first key): how to quit, that no watcher runs, and how to start one on the sandbox. The
/// command comes early: at 80 columns it is whole for a temp sandbox.
fn greeting(jobs_file: &Path) -> String {
    format!(
        "q quits · no watcher: mihari watch --config {} starts one (the demo starts none: \
         one would restart 'crashed' by itself)",
        jobs_file.display()
    )
}

/// Says what ending the demo did: how many processes ended, what could not be ended (on
/// stderr), whether a watcher ran (`watcher`, after a check) and where the sandbox is.
fn say_ending(
    out: &mut impl Write,
    sandbox: &Sandbox,
    ending: &Ending,
    watcher: Option<&WatcherStatus>,
) -> std::io::Result<()> {
    if !ending.left.is_empty() {
        let named: Vec<String> = ending
            .left
            .iter()
            .map(|(pid, cmdline)| format!("pid {pid} ('{cmdline}')"))
            .collect();
        let _ = writeln!(
            std::io::stderr(),
            "mihari demo: could not end {}: look at them with ps, and end them with kill -9",
            named.join(", ")
        );
    }
    let ended = ending.ended + ending.strays;
    let processes = if ended == 1 {
        "process was"
    } else {
        "processes were"
    };
    match watcher {
        None => {}
        Some(WatcherStatus::Never | WatcherStatus::Gone { .. }) => writeln!(
            out,
            "no watcher ran in the sandbox: the demo starts none (one would restart 'crashed' \
             by itself within seconds)"
        )?,
        Some(status) => writeln!(
            out,
            "a watcher ran in the sandbox: {}",
            status.words_in(crate::probe::zone::Zone::machine())
        )?,
    }
    match sandbox {
        Sandbox::Kept(path) => writeln!(
            out,
            "all demo processes ended ({ended} {processes} running); the sandbox stays in '{}': \
             mihari check --config {jobs} looks at it, mihari watch --config {jobs} watches it",
            path.display(),
            jobs = path.join("jobs.yaml").display()
        ),
        Sandbox::Temporary(_) => writeln!(
            out,
            "all demo processes ended ({ended} {processes} running); sandbox removed"
        ),
    }?;
    let others = keeper::others_on(sandbox.path());
    if !others.is_empty() {
        let named: Vec<String> = others
            .iter()
            .map(|(pid, cmdline)| format!("pid {pid} ('{cmdline}')"))
            .collect();
        writeln!(
            out,
            "still at work on the sandbox, not started by the demo (a watcher you started, or \
             what it restarted), so left running: {}; end them with kill PID",
            named.join(", ")
        )?;
    }
    Ok(())
}

/// A fleet of this machine twice: `here` (mihari run directly) and `localhost` (over ssh), both
/// on the demo's jobs file, to try `mihari fleet` with.
fn fleet_yaml(exe: &Path, jobs_file: &Path) -> String {
    let text = |path: &Path| serde_json::to_string(&path.display().to_string()).unwrap_or_default();
    format!(
        "# mihari fleet --fleet {fleet}/fleet.yaml        (the fleet screen)\n\
         # mihari fleet --fleet {fleet}/fleet.yaml check  (one merged check)\n\
         # 'localhost' needs `ssh localhost` to log in without a password (a key). Its asks\n\
         # share one ssh connection (ControlMaster); share_ssh: false gives each its own.\n\
         hosts:\n  - name: here\n    config: {jobs}\n    mihari: {exe}\n\
         \x20 - name: localhost\n    ssh: [ssh, -o, BatchMode=yes, -o, ConnectTimeout=5, localhost]\n\
         \x20   config: {jobs}\n    mihari: {exe}\n",
        fleet = jobs_file
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        jobs = text(jobs_file),
        exe = text(exe),
    )
}

/// How to try the fleet on the sandbox that stays: the screen and the merged check.
fn fleet_hint(fleet_file: &Path) -> String {
    format!(
        "try a fleet of this machine (directly as 'here', and over ssh as 'localhost', which \
         needs `ssh localhost` to log in with a key; without one it shows RED): the fleet \
         screen, mihari fleet --fleet {f} (keys as on the dashboard; q quits); one merged \
         check, mihari fleet --fleet {f} check",
        f = fleet_file.display()
    )
}

/// What the demo does through mihari's own commands, as an operator would: `mihari run` a
/// one-shot job to its end (exit 0: COMPLETE by `not_succeeded`, with nothing to count),
/// `mihari pause` a job with a reason (PAUSED, listed after the action list), and two
/// `mihari approval request`s of one job (the approve key chooses between them).
fn record_decisions(keeper: &Keeper, exe: &Path, jobs_file: &Path) -> Result<(), String> {
    let mihari = |args: &[&str]| {
        keeper
            .mark(&mut Command::new(exe))
            .arg("--config")
            .arg(jobs_file)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run 'mihari {}': {e}", args.join(" ")))
    };
    let ran = mihari(&["run", "oneshot"])?;
    if !ran.success() {
        return Err(format!("the one-shot job 'oneshot' did not exit 0 ({ran})"));
    }
    let paused = mihari(&[
        "pause",
        "reindex",
        "--reason",
        "search cluster upgrade until Monday; do not start the reindex",
        "--yes",
    ])?;
    if !paused.success() {
        return Err(format!("the job 'reindex' could not be paused ({paused})"));
    }
    // Two questions from one job, as a publishing pipeline asks them: the approve key
    // chooses between them. Exit 10 is "pending".
    for (step, key, summary) in [
        (
            "publish",
            "demo-publish-issue-42",
            "publish issue 42 (3 articles) to the main feed",
        ),
        (
            "delete",
            "demo-delete-drafts",
            "delete the 12 superseded drafts of issue 41",
        ),
    ] {
        let asked = mihari(&[
            "approval",
            "request",
            "phases",
            "--step",
            step,
            "--key",
            key,
            "--summary",
            summary,
        ])?;
        if asked.code() != Some(10) {
            return Err(format!(
                "the job 'phases' could not ask for approval to {step} ({asked})"
            ));
        }
    }
    Ok(())
}

/// The sandbox folder: a temp dir removed at the end, or the operator's `--dir`, kept.
enum Sandbox {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl Sandbox {
    fn create(dir: Option<&Path>) -> Result<Self, String> {
        let Some(dir) = dir else {
            let temp = tempfile::Builder::new()
                .prefix("mihari-demo-")
                .tempdir()
                .map_err(|e| format!("cannot make a temp dir: {e}"))?;
            return Ok(Sandbox::Temporary(temp));
        };
        let fresh = !dir.exists();
        if !fresh {
            let mut entries =
                fs::read_dir(dir).map_err(|e| format!("cannot read '{}': {e}", dir.display()))?;
            let empty = entries.next().is_none();
            if !empty && !dir.join(MARKER).exists() {
                return Err(format!(
                    "'{}' is not empty and is not a demo sandbox; give an empty or new folder",
                    dir.display()
                ));
            }
            // Leftovers of an earlier demo in this folder would confuse this one.
            for name in ["jobs.yaml", "crashed.log", "done.progress", "table.sqlite"] {
                let _ = fs::remove_file(dir.join(name));
            }
            let _ = fs::remove_dir_all(dir.join("jobs"));
            // An earlier demo's event log would carry its runs and pauses into this one.
            let _ = fs::remove_dir_all(dir.join("state"));
        }
        fs::create_dir_all(dir).map_err(|e| format!("cannot create '{}': {e}", dir.display()))?;
        if fresh {
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        }
        fs::write(dir.join(MARKER), "made by mihari demo\n")
            .map_err(|e| format!("cannot write in '{}': {e}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("cannot resolve '{}': {e}", dir.display()))?;
        Ok(Sandbox::Kept(dir))
    }

    fn path(&self) -> &Path {
        match self {
            Sandbox::Temporary(temp) => temp.path(),
            Sandbox::Kept(path) => path,
        }
    }
}

/// The folder of the job `id` in the sandbox, made when missing: its files, and the working
/// folder of its restart.
fn job_folder(root: &Path, id: &str) -> std::io::Result<PathBuf> {
    let folder = root.join("jobs").join(id);
    fs::create_dir_all(&folder)?;
    Ok(folder)
}

/// Starts the simulated jobs (and leaves what the others left behind); how many of them it
/// left running (the one it killed at once is not counted).
fn start_crew(keeper: &Keeper, exe: &Path, root: &Path, ids: &[&str]) -> std::io::Result<usize> {
    let mut started = 0;
    let mut worker = |args: &[&str]| {
        started += 1;
        start_worker(keeper, exe, args)
    };
    let folders = |id: &str| job_folder(root, id);
    let text = |path: PathBuf| path.to_string_lossy().into_owned();
    // Every job has a folder, those played by no process too (a restart runs there).
    for id in ids {
        folders(id)?;
    }
    let at = |id: &str, file: &str| text(root.join("jobs").join(id).join(file));

    // A coarse progress file older than stall_sec beside a fresh log: the freshest source decides.
    worker(&[
        "--lock",
        &at("fetch", "fetch.lock"),
        "--log",
        &at("fetch", "fetch.log"),
        "--progress",
        &at("fetch", "fetch.progress"),
        "--log-every-ms",
        "250",
        "--progress-every-ms",
        "4000",
        "--total",
        "5121",
        "--start-at",
        "1800",
    ])?;
    // Alive but frozen with SIGSTOP: STALLED once stall_sec (2 s) passes.
    let frozen = worker(&[
        "--lock",
        &at("frozen", "frozen.lock"),
        "--log",
        &at("frozen", "frozen.log"),
        "--progress",
        &at("frozen", "frozen.progress"),
        "--log-every-ms",
        "100",
        "--progress-every-ms",
        "100",
        "--total",
        "800",
    ])?;
    // Killed without cleanup: its lock names a dead process.
    let dead = worker(&[
        "--lock",
        &at("dead_lock", "dead.lock"),
        "--log",
        &at("dead_lock", "dead.log"),
        "--progress",
        &at("dead_lock", "dead.progress"),
        "--log-every-ms",
        "100",
        "--progress-every-ms",
        "50",
        "--total",
        "400",
    ])?;
    // Ran, then crashed: lock removed, traceback in the log, not complete.
    worker(&[
        "--lock",
        &at("crashed", "crashed.lock"),
        "--log",
        &at("crashed", "crashed.log"),
        "--progress",
        &at("crashed", "crashed.progress"),
        "--progress-every-ms",
        "20",
        "--total",
        "1000",
        "--crash-after-ms",
        "400",
    ])?;
    // Ran to the end.
    worker(&[
        "--lock",
        &at("complete", "complete.lock"),
        "--log",
        &at("complete", "complete.log"),
        "--progress",
        &at("complete", "complete.progress"),
        "--progress-every-ms",
        "5",
        "--total",
        "120",
        "--finish",
    ])?;
    // Running, but its check finds gaps: RED, and dispatch is held.
    worker(&[
        "--lock",
        &at("gaps", "gaps.lock"),
        "--log",
        &at("gaps", "gaps.log"),
        "--progress",
        &at("gaps", "gaps.progress"),
        "--log-every-ms",
        "400",
        "--progress-every-ms",
        "300",
        "--total",
        "3000",
        "--start-at",
        "120",
    ])?;
    // Progress in a SQLite table.
    worker(&[
        "--lock",
        &at("table", "table.lock"),
        "--table",
        &at("table", "table.sqlite"),
        "--progress-every-ms",
        "300",
        "--total",
        "2000",
    ])?;
    // A phased pipeline part-way through its manifest.
    worker(&[
        "--lock",
        &at("phases", "phases.lock"),
        "--log",
        &at("phases", "phases.log"),
        "--manifest",
        &at("phases", "phases.manifest.json"),
        "--progress-every-ms",
        "1500",
        "--log-every-ms",
        "700",
        "--total",
        "7",
    ])?;
    // A log full of escape sequences.
    worker(&[
        "--lock",
        &at("hostile", "hostile.lock"),
        "--log",
        &at("hostile", "hostile.log"),
        "--log-every-ms",
        "300",
        "--hostile",
        "--total",
        "10",
    ])?;
    // Alive, logging, but its progress file is a folder: a fault, never "no progress".
    fs::create_dir_all(root.join("jobs/broken/broken.progress"))?;
    worker(&[
        "--lock",
        &at("broken", "broken.lock"),
        "--log",
        &at("broken", "broken.log"),
        "--log-every-ms",
        "300",
        "--total",
        "10",
    ])?;
    // Started by hand (as in a tmux pane): no lock at all, found by its command line.
    worker(&[
        "--log",
        &at("notebook", "notebook.log"),
        "--log-every-ms",
        "500",
        "--total",
        "100000",
    ])?;
    // A tqdm loop: its progress is only the bar it redraws with carriage returns.
    worker(&[
        "--lock",
        &at("tqdm_train", "tqdm.lock"),
        "--log",
        &at("tqdm_train", "tqdm.log"),
        "--style",
        "tqdm",
        "--log-every-ms",
        "200",
        "--progress-every-ms",
        "150",
        "--total",
        "2000",
    ])?;
    // A training loop that prints `epoch E/N step S/M` lines and nothing else.
    worker(&[
        "--lock",
        &at("steps", "steps.lock"),
        "--log",
        &at("steps", "steps.log"),
        "--style",
        "steps",
        "--log-every-ms",
        "300",
        "--progress-every-ms",
        "100",
        "--total",
        "5000",
    ])?;
    // A lock written by something else, which nobody can parse: liveness unknown.
    let jobs = root.join("jobs");
    fs::write(
        jobs.join("mystery/mystery.lock"),
        "held by the nightly backup, ask ops\n",
    )?;
    fs::write(jobs.join("mystery/mystery.log"), "backup window opened\n")?;

    wait_for(&jobs.join("dead_lock/dead.progress"), 3)?;
    kill_and_reap(dead);
    started -= 1;
    // A resume marker its killed writer left behind, naming it: a stale marker to release
    // (M in the dashboard, mihari release-marker resumer).
    fs::copy(
        jobs.join("dead_lock/dead.lock"),
        jobs.join("resumer/resumer.resuming"),
    )?;
    fs::write(
        jobs.join("resumer/resumer.log"),
        "resuming from shard 212\n",
    )?;
    wait_for(&jobs.join("frozen/frozen.progress"), 2)?;
    let _ = kill(Pid::from_raw(frozen as i32), Signal::SIGSTOP);
    Ok(started)
}

/// Kills a worker with SIGKILL, so it cannot clean up its lock, and reaps it: its lock now
/// names a dead process, not a zombie.
fn kill_and_reap(pid: u32) {
    let pid = Pid::from_raw(pid as i32);
    if kill(pid, Signal::SIGKILL).is_ok() {
        let _ = waitpid(pid, None);
    }
}

/// Starts `mihari sim worker` in its own process group, marked as the demo's; its PID. The
/// keeper reaps it when it ends.
fn start_worker(keeper: &Keeper, exe: &Path, args: &[&str]) -> std::io::Result<u32> {
    let child = keeper
        .mark(&mut Command::new(exe))
        .args(["sim", "worker", "--parent", &std::process::id().to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    // Reaped by the keeper, never through the handle (dropping it waits for nothing).
    Ok(child.id())
}

/// Waits until the file at `path` has at least `lines` lines (the worker got going).
fn wait_for(path: &Path, lines: usize) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = fs::read(path).map(|b| b.iter().filter(|&&c| c == b'\n').count());
        if seen.is_ok_and(|n| n >= lines) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::other(format!(
                "'{}' did not get going within 10 s",
                path.display()
            )));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The sandbox's jobs file: every state and bucket of SPEC §4, thresholds in seconds. Restart
/// commands leave the lock to `mihari run`, which a restart runs them under, in the job's own
/// folder (its workspace: a restart of one job is never held by another's cooldown).
fn jobs_yaml(exe: &Path, sandbox: &Path) -> String {
    let exe = exe.display();
    // The notebook's pattern names this sandbox's own log: two demos on one machine (or a
    // demo beside a test of it) never match each other's notebook process.
    let notebook =
        regex::escape(&sandbox.join("jobs/notebook").display().to_string()).replace('\'', "''");
    format!(
        r#"# The mihari demo sandbox. Every job is played by a real process or what one left.
settings:
  state_dir: ./state
jobs:
  - id: fetch
    name: Bulk fetch, its fast log keeping a slow progress file honest
    owner: data-team
    lock: jobs/fetch/fetch.lock
    log: jobs/fetch/fetch.log
    progress_file: jobs/fetch/fetch.progress
    stall_sec: 3
    expected_total: 5121
    should_run_when: [not_complete, resource_free]
    auto_restart_blocked_reason: server-side error not yet understood
    restart:
      command: ["{exe}", "sim", "worker", "--log", "fetch.log", "--progress", "fetch.progress"]
      cwd: jobs/fetch
  - id: frozen
    name: Training run frozen with SIGSTOP
    owner: ml-team
    lock: jobs/frozen/frozen.lock
    log: jobs/frozen/frozen.log
    progress_file: jobs/frozen/frozen.progress
    stall_sec: 2
    expected_total: 800
    should_run_when: [not_complete]
  - id: dead_lock
    name: Export killed without cleanup
    owner: data-team
    lock: jobs/dead_lock/dead.lock
    log: jobs/dead_lock/dead.log
    progress_file: jobs/dead_lock/dead.progress
    stall_sec: 5
    expected_total: 400
    should_run_when: [not_complete]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "dead.log", "--progress", "dead.progress", "--total", "400"]
      cwd: jobs/dead_lock
  - id: crashed
    name: Crawler that crashed after running
    owner: data-team
    lock: jobs/crashed/crashed.lock
    log: jobs/crashed/crashed.log
    progress_file: jobs/crashed/crashed.progress
    stall_sec: 5
    expected_total: 1000
    should_run_when: [not_complete, resource_free]
    auto_restart: true
    auto_restart_reason: "cause known: upstream 503s; procedure: rerun, it resumes from the progress file"
    restart:
      command: ["{exe}", "sim", "worker", "--log", "crashed.log", "--progress", "crashed.progress", "--total", "1000"]
      cwd: jobs/crashed
  - id: never_started
    name: Next batch, never started
    owner: batch-team
    lock: jobs/never_started/next.lock
    log: jobs/never_started/next.log
    progress_file: jobs/never_started/next.progress
    expected_total: 500
    should_run_when: [not_complete, resource_free]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "next.log", "--progress", "next.progress", "--total", "500"]
      cwd: jobs/never_started
  - id: complete
    name: Yesterday's export
    owner: batch-team
    lock: jobs/complete/complete.lock
    log: jobs/complete/complete.log
    progress_file: jobs/complete/complete.progress
    expected_total: 120
    should_run_when: [not_complete]
  - id: gaps
    name: Sensor ingest with a failing gap check
    owner: ingest-team
    lock: jobs/gaps/gaps.lock
    log: jobs/gaps/gaps.log
    progress_file: jobs/gaps/gaps.progress
    stall_sec: 5
    expected_total: 3000
    should_run_when: [not_complete]
    checks:
      - name: no_gaps
        command: ["{exe}", "sim", "check", "--fail", "gap: shards 120-135 missing"]
        every_sec: 10
        timeout_sec: 5
  - id: table
    name: Labelling queue (SQLite progress table)
    owner: ml-team
    lock: jobs/table/table.lock
    progress_table:
      db: jobs/table/table.sqlite
      table: progress
      time_column: updated_at
    stall_sec: 5
    expected_total: 2000
    should_run_when: [not_complete]
  - id: phases
    name: Publishing pipeline (run manifest)
    owner: content-team
    lock: jobs/phases/phases.lock
    log: jobs/phases/phases.log
    manifest: jobs/phases/phases.manifest.json
    stall_sec: 5
    should_run_when: [resource_free]
  - id: hostile
    name: Job whose log is full of escape sequences
    owner: unknown
    lock: jobs/hostile/hostile.lock
    log: jobs/hostile/hostile.log
    stall_sec: 5
    should_run_when: [resource_free]
  - id: broken
    name: Job whose progress file is a folder
    owner: data-team
    lock: jobs/broken/broken.lock
    log: jobs/broken/broken.log
    progress_file: jobs/broken/broken.progress
    stall_sec: 5
    expected_total: 100
    should_run_when: [not_complete]
  - id: mystery
    name: Lock written by another tool
    owner: ops
    lock: jobs/mystery/mystery.lock
    log: jobs/mystery/mystery.log
    should_run_when: [resource_free]
  - id: idle
    name: GPU job waiting for the fetcher's lock
    owner: ml-team
    lock: jobs/idle/idle.lock
    log: jobs/idle/idle.log
    resource_lock: jobs/fetch/fetch.lock
    should_run_when: [resource_free]
  - id: tqdm_train
    name: A tqdm loop (progress only in its carriage-return frames)
    owner: ml-team
    lock: jobs/tqdm_train/tqdm.lock
    log: jobs/tqdm_train/tqdm.log
    log_progress: {{preset: tqdm}}
    stall_sec: 5
    should_run_when: [not_complete]
  - id: steps
    name: Training loop that prints epoch/step lines
    owner: ml-team
    lock: jobs/steps/steps.lock
    log: jobs/steps/steps.log
    log_progress:
      pattern: 'step (?P<done>\d+)/(?P<total>\d+)'
    stall_sec: 5
    should_run_when: [not_complete]
  - id: resumer
    name: Resume step whose writer was killed (a stale marker to release)
    owner: data-team
    log: jobs/resumer/resumer.log
    markers:
      - path: jobs/resumer/resumer.resuming
        stale_after_sec: 3600
    should_run_when: [not_succeeded]
  - id: notebook
    name: Notebook job started by hand in a tmux pane (no lock, found by its command line)
    owner: ml-team
    process:
      cmdline: 'sim worker .*--log {notebook}/notebook\.log( |$)'
    log: jobs/notebook/notebook.log
    stall_sec: 5
    should_run_when: [resource_free]
  - id: oneshot
    name: One-shot copy with nothing to count (like an rsync), run by mihari run
    owner: batch-team
    lock: jobs/oneshot/oneshot.lock
    log: jobs/oneshot/oneshot.log
    should_run_when: [not_succeeded]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "oneshot.log", "--progress-every-ms", "10", "--total", "5", "--finish"]
      cwd: jobs/oneshot
  - id: reindex
    name: Search reindex, paused by an operator
    owner: search-team
    lock: jobs/reindex/reindex.lock
    log: jobs/reindex/reindex.log
    should_run_when: [resource_free]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "reindex.log", "--total", "50"]
      cwd: jobs/reindex
"#
    )
}

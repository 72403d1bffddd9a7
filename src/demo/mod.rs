//! `mihari demo`: a sandbox of real, simulated jobs covering every state and bucket.
//!
//! The sandbox is a folder (a temp dir, or `--dir`) with a jobs file and the files of a
//! dozen jobs. Each job is played by a real process (`mihari sim worker`) or by what a real
//! process left behind: a lock whose holder was killed, a log that ends in a traceback, a
//! process frozen with SIGSTOP. Thresholds are in seconds so states change while you watch.
//! The demo owns its processes: every one of them ends when the demo ends.

pub mod sim;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::config;
use crate::render::{CheckFormat, assess_and_render, status_code};

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
    let mut crew = Crew::default();
    crew.start(&exe, sandbox.path())
        .map_err(|e| format!("cannot start the simulated jobs: {e}"))?;
    record_decisions(&exe, &jobs_file)?;
    let format = match shown {
        Shown::Dashboard => {
            let config = config::load(&jobs_file).map_err(|e| e.to_string())?;
            let code = crate::tui::run_with(config);
            drop(crew);
            if matches!(sandbox, Sandbox::Kept(_)) {
                let _ = writeln!(out, "{}", fleet_hint(&fleet_file));
            }
            return Ok(code);
        }
        Shown::Check(format) => format,
    };
    if format == CheckFormat::Table {
        let _ = writeln!(
            out,
            "mihari demo: {} simulated jobs in '{}'; letting them run for {} s...",
            crew.children.len(),
            sandbox.path().display(),
            SETTLE.as_secs_f32()
        );
    }
    thread::sleep(SETTLE);

    let config = config::load(&jobs_file).map_err(|e| e.to_string())?;
    let (snapshot, written) = assess_and_render(config, format, out);
    written.map_err(|e| format!("cannot write the report: {e}"))?;
    drop(crew);
    if format == CheckFormat::Table {
        let _ = match &sandbox {
            Sandbox::Kept(path) => writeln!(
                out,
                "\nall demo processes ended; the sandbox stays in '{}' \
                 (mihari check --config {}/jobs.yaml)",
                path.display(),
                path.display()
            ),
            Sandbox::Temporary(_) => writeln!(out, "\nall demo processes ended; sandbox removed"),
        };
        if matches!(sandbox, Sandbox::Kept(_)) {
            let _ = writeln!(out, "{}", fleet_hint(&fleet_file));
        }
    }
    Ok(ExitCode::from(status_code(&snapshot)))
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
fn record_decisions(exe: &Path, jobs_file: &Path) -> Result<(), String> {
    let mihari = |args: &[&str]| {
        Command::new(exe)
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

/// The demo's processes. Dropping the crew kills and reaps every one of them.
#[derive(Default)]
struct Crew {
    children: Vec<Child>,
}

impl Crew {
    fn start(&mut self, exe: &Path, root: &Path) -> std::io::Result<()> {
        let jobs = root.join("jobs");
        fs::create_dir_all(&jobs)?;
        let at = |name: &str| jobs.join(name).to_string_lossy().into_owned();

        // The seed's 303 s case, in seconds: a fast log keeps a slow progress file honest.
        self.worker(
            exe,
            &[
                "--lock",
                &at("seed303.lock"),
                "--log",
                &at("seed303.log"),
                "--progress",
                &at("seed303.progress"),
                "--log-every-ms",
                "250",
                "--progress-every-ms",
                "4000",
                "--total",
                "5121",
                "--start-at",
                "1800",
            ],
        )?;
        // Alive but frozen with SIGSTOP: STALLED once stall_sec (2 s) passes.
        let frozen = self.worker(
            exe,
            &[
                "--lock",
                &at("frozen.lock"),
                "--log",
                &at("frozen.log"),
                "--progress",
                &at("frozen.progress"),
                "--log-every-ms",
                "100",
                "--progress-every-ms",
                "100",
                "--total",
                "800",
            ],
        )?;
        // Killed without cleanup: its lock names a dead process.
        let dead = self.worker(
            exe,
            &[
                "--lock",
                &at("dead.lock"),
                "--log",
                &at("dead.log"),
                "--progress",
                &at("dead.progress"),
                "--log-every-ms",
                "100",
                "--progress-every-ms",
                "50",
                "--total",
                "400",
            ],
        )?;
        // Ran, then crashed: lock removed, traceback in the log, not complete.
        self.worker(
            exe,
            &[
                "--lock",
                &at("crashed.lock"),
                "--log",
                &at("crashed.log"),
                "--progress",
                &at("crashed.progress"),
                "--progress-every-ms",
                "20",
                "--total",
                "1000",
                "--crash-after-ms",
                "400",
            ],
        )?;
        // Ran to the end.
        self.worker(
            exe,
            &[
                "--lock",
                &at("complete.lock"),
                "--log",
                &at("complete.log"),
                "--progress",
                &at("complete.progress"),
                "--progress-every-ms",
                "5",
                "--total",
                "120",
                "--finish",
            ],
        )?;
        // Running, but its check finds gaps: RED, and dispatch is held.
        self.worker(
            exe,
            &[
                "--lock",
                &at("gaps.lock"),
                "--log",
                &at("gaps.log"),
                "--progress",
                &at("gaps.progress"),
                "--log-every-ms",
                "400",
                "--progress-every-ms",
                "300",
                "--total",
                "3000",
                "--start-at",
                "120",
            ],
        )?;
        // Progress in a SQLite table.
        self.worker(
            exe,
            &[
                "--lock",
                &at("table.lock"),
                "--table",
                &at("table.sqlite"),
                "--progress-every-ms",
                "300",
                "--total",
                "2000",
            ],
        )?;
        // A phased pipeline part-way through its manifest.
        self.worker(
            exe,
            &[
                "--lock",
                &at("phases.lock"),
                "--log",
                &at("phases.log"),
                "--manifest",
                &at("phases.manifest.json"),
                "--progress-every-ms",
                "1500",
                "--log-every-ms",
                "700",
                "--total",
                "7",
            ],
        )?;
        // A log full of escape sequences.
        self.worker(
            exe,
            &[
                "--lock",
                &at("hostile.lock"),
                "--log",
                &at("hostile.log"),
                "--log-every-ms",
                "300",
                "--hostile",
                "--total",
                "10",
            ],
        )?;
        // Alive, logging, but its progress file is a folder: a fault, never "no progress".
        fs::create_dir_all(jobs.join("broken.progress"))?;
        self.worker(
            exe,
            &[
                "--lock",
                &at("broken.lock"),
                "--log",
                &at("broken.log"),
                "--log-every-ms",
                "300",
                "--total",
                "10",
            ],
        )?;
        // Started by hand (as in a tmux pane): no lock at all, found by its command line.
        self.worker(
            exe,
            &[
                "--log",
                &at("notebook.log"),
                "--log-every-ms",
                "500",
                "--total",
                "100000",
            ],
        )?;
        // A tqdm loop: its progress is only the bar it redraws with carriage returns.
        self.worker(
            exe,
            &[
                "--lock",
                &at("tqdm.lock"),
                "--log",
                &at("tqdm.log"),
                "--style",
                "tqdm",
                "--log-every-ms",
                "200",
                "--progress-every-ms",
                "150",
                "--total",
                "2000",
            ],
        )?;
        // A training loop that prints `epoch E/N step S/M` lines and nothing else.
        self.worker(
            exe,
            &[
                "--lock",
                &at("steps.lock"),
                "--log",
                &at("steps.log"),
                "--style",
                "steps",
                "--log-every-ms",
                "300",
                "--progress-every-ms",
                "100",
                "--total",
                "5000",
            ],
        )?;
        // A lock written by something else, which nobody can parse: liveness unknown.
        fs::write(
            jobs.join("mystery.lock"),
            "held by the nightly backup, ask ops\n",
        )?;
        fs::write(jobs.join("mystery.log"), "backup window opened\n")?;

        wait_for(&jobs.join("dead.progress"), 3)?;
        self.kill_and_reap(dead);
        // A resume marker its killed writer left behind, naming it: a stale marker to release
        // (M in the dashboard, mihari release-marker resumer).
        fs::copy(jobs.join("dead.lock"), jobs.join("resumer.resuming"))?;
        fs::write(jobs.join("resumer.log"), "resuming from shard 212\n")?;
        wait_for(&jobs.join("frozen.progress"), 2)?;
        let _ = kill(Pid::from_raw(frozen as i32), Signal::SIGSTOP);
        Ok(())
    }

    /// Kills a worker with SIGKILL, so it cannot clean up its lock, and reaps it: its lock
    /// now names a dead process, not a zombie.
    fn kill_and_reap(&mut self, pid: u32) {
        if let Some(at) = self.children.iter().position(|c| c.id() == pid) {
            let mut child = self.children.remove(at);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts `mihari sim worker` in its own process group and returns its PID.
    fn worker(&mut self, exe: &Path, args: &[&str]) -> std::io::Result<u32> {
        let child = Command::new(exe)
            .args(["sim", "worker", "--parent", &std::process::id().to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        for child in &mut self.children {
            let group = Pid::from_raw(child.id() as i32);
            let _ = killpg(group, Signal::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
/// commands leave the lock to `mihari run`, which a restart runs them under.
fn jobs_yaml(exe: &Path, sandbox: &Path) -> String {
    let exe = exe.display();
    // The notebook's pattern names this sandbox's own log: two demos on one machine (or a
    // demo beside a test of it) never match each other's notebook process.
    let notebook = regex::escape(&sandbox.join("jobs").display().to_string()).replace('\'', "''");
    format!(
        r#"# The mihari demo sandbox. Every job is played by a real process or what one left.
settings:
  state_dir: ./state
jobs:
  - id: seed303
    name: Bulk fetch (the 303 s case, in seconds)
    owner: data-team
    lock: jobs/seed303.lock
    log: jobs/seed303.log
    progress_file: jobs/seed303.progress
    stall_sec: 3
    expected_total: 5121
    should_run_when: [not_complete, resource_free]
    auto_restart_blocked_reason: server-side error not yet understood
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/seed303.log", "--progress", "jobs/seed303.progress"]
      cwd: .
  - id: frozen
    name: Training run frozen with SIGSTOP
    owner: ml-team
    lock: jobs/frozen.lock
    log: jobs/frozen.log
    progress_file: jobs/frozen.progress
    stall_sec: 2
    expected_total: 800
    should_run_when: [not_complete]
  - id: dead_lock
    name: Export killed without cleanup
    owner: data-team
    lock: jobs/dead.lock
    log: jobs/dead.log
    progress_file: jobs/dead.progress
    stall_sec: 5
    expected_total: 400
    should_run_when: [not_complete]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/dead.log", "--progress", "jobs/dead.progress", "--total", "400"]
      cwd: .
  - id: crashed
    name: Crawler that crashed after running
    owner: data-team
    lock: jobs/crashed.lock
    log: jobs/crashed.log
    progress_file: jobs/crashed.progress
    stall_sec: 5
    expected_total: 1000
    should_run_when: [not_complete, resource_free]
    auto_restart: true
    auto_restart_reason: "cause known: upstream 503s; procedure: rerun, it resumes from the progress file"
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/crashed.log", "--progress", "jobs/crashed.progress", "--total", "1000"]
      cwd: .
  - id: never_started
    name: Next batch, never started
    owner: batch-team
    lock: jobs/next.lock
    log: jobs/next.log
    progress_file: jobs/next.progress
    expected_total: 500
    should_run_when: [not_complete, resource_free]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/next.log", "--progress", "jobs/next.progress", "--total", "500"]
      cwd: .
  - id: complete
    name: Yesterday's export
    owner: batch-team
    lock: jobs/complete.lock
    log: jobs/complete.log
    progress_file: jobs/complete.progress
    expected_total: 120
    should_run_when: [not_complete]
  - id: gaps
    name: Sensor ingest with a failing gap check
    owner: ingest-team
    lock: jobs/gaps.lock
    log: jobs/gaps.log
    progress_file: jobs/gaps.progress
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
    lock: jobs/table.lock
    progress_table:
      db: jobs/table.sqlite
      table: progress
      time_column: updated_at
    stall_sec: 5
    expected_total: 2000
    should_run_when: [not_complete]
  - id: phases
    name: Publishing pipeline (run manifest)
    owner: content-team
    lock: jobs/phases.lock
    log: jobs/phases.log
    manifest: jobs/phases.manifest.json
    stall_sec: 5
    should_run_when: [resource_free]
  - id: hostile
    name: Job whose log is full of escape sequences
    owner: unknown
    lock: jobs/hostile.lock
    log: jobs/hostile.log
    stall_sec: 5
    should_run_when: [resource_free]
  - id: broken
    name: Job whose progress file is a folder
    owner: data-team
    lock: jobs/broken.lock
    log: jobs/broken.log
    progress_file: jobs/broken.progress
    stall_sec: 5
    expected_total: 100
    should_run_when: [not_complete]
  - id: mystery
    name: Lock written by another tool
    owner: ops
    lock: jobs/mystery.lock
    log: jobs/mystery.log
    should_run_when: [resource_free]
  - id: idle
    name: GPU job waiting for the fetcher's lock
    owner: ml-team
    lock: jobs/idle.lock
    log: jobs/idle.log
    resource_lock: jobs/seed303.lock
    should_run_when: [resource_free]
  - id: tqdm_train
    name: A tqdm loop (progress only in its carriage-return frames)
    owner: ml-team
    lock: jobs/tqdm.lock
    log: jobs/tqdm.log
    log_progress: {{preset: tqdm}}
    stall_sec: 5
    should_run_when: [not_complete]
  - id: steps
    name: Training loop that prints epoch/step lines
    owner: ml-team
    lock: jobs/steps.lock
    log: jobs/steps.log
    log_progress:
      pattern: 'step (?P<done>\d+)/(?P<total>\d+)'
    stall_sec: 5
    should_run_when: [not_complete]
  - id: resumer
    name: Resume step whose writer was killed (a stale marker to release)
    owner: data-team
    log: jobs/resumer.log
    markers:
      - path: jobs/resumer.resuming
        stale_after_sec: 3600
    should_run_when: [not_succeeded]
  - id: notebook
    name: Notebook job started by hand in a tmux pane (no lock, found by its command line)
    owner: ml-team
    process:
      cmdline: 'sim worker .*--log {notebook}/notebook\.log( |$)'
    log: jobs/notebook.log
    stall_sec: 5
    should_run_when: [resource_free]
  - id: oneshot
    name: One-shot copy with nothing to count (like an rsync), run by mihari run
    owner: batch-team
    lock: jobs/oneshot.lock
    log: jobs/oneshot.log
    should_run_when: [not_succeeded]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/oneshot.log", "--progress-every-ms", "10", "--total", "5", "--finish"]
      cwd: .
  - id: reindex
    name: Search reindex, paused by an operator
    owner: search-team
    lock: jobs/reindex.lock
    log: jobs/reindex.log
    should_run_when: [resource_free]
    restart:
      command: ["{exe}", "sim", "worker", "--log", "jobs/reindex.log", "--total", "50"]
      cwd: .
"#
    )
}

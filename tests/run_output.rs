//! `mihari run` owns the job's output: the job's stdout and stderr are a pipe it copies into
//! the job's log, following the log's path through rotations, on real tools.
//!
//! Each test runs the real binary over real processes in its own temp dir: a job printing
//! `step N/20` rotated twice by the real `/usr/sbin/logrotate` with `create` (no
//! copytruncate, no signal) and read by a fresh `mihari check --json` through it and at its
//! end; logrotate's `postrotate kill -HUP` of the lock's pid; a real tqdm bar compared byte
//! for byte with the same bar written to a file; a daemon that outlives its launcher; a log
//! on a real tmpfs filled to the last byte; SIGTERM to the whole tree; a delete and a planted
//! link at the log's path; the descriptors the job holds.

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mihari::store::{Actor, Event, EventFilter, Store};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

const LOGROTATE: &str = "/usr/sbin/logrotate";
const PYTHON: &str = "/usr/bin/python3";

fn require(tool: &str, package: &str) {
    assert!(
        Path::new(tool).exists(),
        "{tool} is missing: install the Debian package '{package}' (the CI installs it)"
    );
}

/// A temp folder with a jobs file (one job, `job`), its state folder and a `logs` folder.
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        fs::create_dir(root.join("logs")).expect("logs folder");
        Sandbox { _dir: dir, root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn log(&self) -> PathBuf {
        self.path("logs/job.log")
    }

    /// The log renamed by rotation `n` (`job.log.1`, `job.log.2`).
    fn rotated(&self, n: u32) -> PathBuf {
        self.path(&format!("logs/job.log.{n}"))
    }

    fn lock(&self) -> PathBuf {
        self.path("job.lock")
    }

    /// Writes the jobs file: job `job` runs `command` (a YAML flow list) with `extra` keys
    /// (`should_run_when: [resource_free]` unless they say otherwise).
    fn job(&self, command: &str, extra: &str) {
        let when = if extra.contains("should_run_when") {
            ""
        } else {
            "    should_run_when: [resource_free]\n"
        };
        let text = format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: job\n    lock: {}\n    log: {}\n\
             {when}{extra}    restart:\n      command: {command}\n",
            self.path("state").display(),
            self.lock().display(),
            self.log().display(),
        );
        let path = self.path("jobs.yaml");
        fs::write(&path, text).expect("jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    fn mihari(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mihari"));
        command
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .stdin(Stdio::null());
        command
    }

    /// `mihari run job` in the background, its stderr kept.
    fn start(&self) -> Running {
        let child = self
            .mihari()
            .args(["run", "job"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mihari run starts");
        Running(Some(child))
    }

    /// A fresh `mihari check --json`: the job's row.
    fn check(&self) -> Value {
        let output = self
            .mihari()
            .args(["check", "--json"])
            .output()
            .expect("mihari check runs");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        report["jobs"][0].clone()
    }

    fn events(&self) -> Vec<Event> {
        Store::open(&self.path("state"), Actor::Cli)
            .expect("the state store opens")
            .events(&EventFilter::default())
            .expect("events")
    }

    fn read(&self, path: &Path) -> String {
        String::from_utf8_lossy(&fs::read(path).unwrap_or_default()).into_owned()
    }

    /// Runs the real logrotate, forced, on the log with `directives`.
    fn logrotate(&self, directives: &str) {
        require(LOGROTATE, "logrotate");
        let conf = self.path("logrotate.conf");
        fs::write(
            &conf,
            format!("{} {{\n{directives}\n}}\n", self.log().display()),
        )
        .expect("logrotate.conf");
        let output = Command::new(LOGROTATE)
            .arg("-f")
            .arg("-s")
            .arg(self.path("logrotate.state"))
            .arg(&conf)
            .output()
            .expect("logrotate runs");
        assert!(
            output.status.success(),
            "logrotate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A background `mihari run`, stopped (SIGTERM, then SIGKILL to its job's group) if a test
/// fails before it ends.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).expect("signal mihari run");
    }

    /// Waits for the end: (exit code, stderr).
    fn finish(mut self) -> (i32, String) {
        let mut child = self.0.take().expect("still running");
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let status = child.wait().expect("mihari run ends");
        (status.code().unwrap_or(-1), stderr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let job = job_pid_of(child.id());
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(job) = job {
                let _ = nix::sys::signal::killpg(Pid::from_raw(job as i32), Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The PID of the job `mihari run` started (its first child), if it still runs.
fn job_pid_of(supervisor: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
        && !fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
        })
}

/// Waits until `ready` holds, or fails the test after 30 s saying what it waited for.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn inode(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path).ok().map(|m| m.ino())
}

fn reasons(row: &Value) -> String {
    row["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// What `step N/20` printed every 0.3 s writes in all: each line once, in order.
fn all_steps() -> String {
    (1..=20).map(|n| format!("step {n}/20\n")).collect()
}

const STEPS: &str = "[sh, -c, 'for n in $(seq 1 20); do echo \"step $n/20\"; sleep 0.3; done']";
const STEPS_KEYS: &str =
    "    log_progress: {preset: fraction}\n    stall_sec: 5\n    should_run_when: [not_complete]\n";

/// Waits until the log at the path (a new file after a rotation) holds a line.
fn wait_for_a_line_in_the_new_log(sandbox: &Sandbox, rotated_inode: Option<u64>) {
    wait_for("a line in the new log", || {
        inode(&sandbox.log()) != rotated_inode && sandbox.read(&sandbox.log()).contains('\n')
    });
}

/// The incident: logrotate's default `create` left the job writing into `job.log.1`, then
/// `job.log.2`; it read STALLED while it printed `step 12/20`, and RESTART "its log prints no
/// progress yet" after it had ended 20/20 with exit 0.
#[test]
fn logrotate_create_without_copytruncate_keeps_the_job_running_and_complete_at_its_end() {
    let sandbox = Sandbox::new();
    sandbox.job(STEPS, STEPS_KEYS);
    let running = sandbox.start();
    for (rotation, after) in [(1, "step 4/20"), (2, "step 10/20")] {
        wait_for(after, || sandbox.read(&sandbox.log()).contains(after));
        let rotated_inode = inode(&sandbox.log());
        sandbox.logrotate("  create\n  rotate 5");
        assert_eq!(
            inode(&sandbox.rotated(1)),
            rotated_inode,
            "rotation {rotation}: logrotate renamed the log"
        );
        wait_for_a_line_in_the_new_log(&sandbox, rotated_inode);
        let row = sandbox.check();
        assert_eq!(
            row["state"],
            "RUNNING",
            "rotation {rotation}: {}",
            reasons(&row)
        );
        assert!(row["done"].as_u64().unwrap_or(0) >= 4, "{row}");
    }
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    let row = sandbox.check();
    assert_eq!(row["state"], "COMPLETE", "{}", reasons(&row));
    assert_eq!(
        (row["done"].as_u64(), row["expected_total"].as_u64()),
        (Some(20), Some(20))
    );
    // Nothing lost, nothing twice: the three files hold the job's output, in order.
    let whole = [sandbox.rotated(2), sandbox.rotated(1), sandbox.log()]
        .iter()
        .map(|path| sandbox.read(path))
        .collect::<String>();
    assert_eq!(whole, all_steps());
    assert!(!sandbox.read(&sandbox.log()).is_empty());
}

/// The README's old advice, rename + create and `kill -HUP` of the lock's pid, killed the job
/// ("killed by SIGHUP"): the HUP now opens the log again and never reaches the job.
#[test]
fn a_postrotate_hup_to_the_locks_pid_reopens_the_log_and_leaves_the_job_alive() {
    require("/usr/bin/jq", "jq");
    let sandbox = Sandbox::new();
    sandbox.job(STEPS, STEPS_KEYS);
    let running = sandbox.start();
    wait_for("step 3/20", || {
        sandbox.read(&sandbox.log()).contains("step 3/20")
    });
    let job = job_pid_of(running.pid()).expect("the job runs");
    let rotated_inode = inode(&sandbox.log());
    sandbox.logrotate(&format!(
        "  create\n  rotate 5\n  postrotate\n    kill -HUP \"$(jq -r .pid '{}')\"\n  endscript",
        sandbox.lock().display()
    ));
    wait_for_a_line_in_the_new_log(&sandbox, rotated_inode);
    assert!(alive(job), "the HUP reached the job");
    let row = sandbox.check();
    assert_eq!(row["state"], "RUNNING", "{}", reasons(&row));
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    let exited: Vec<_> = sandbox
        .events()
        .into_iter()
        .filter(|e| e.kind == "exited")
        .filter_map(|e| e.reason)
        .collect();
    assert_eq!(exited, ["exit 0"]);
    let whole = sandbox.read(&sandbox.rotated(1)) + &sandbox.read(&sandbox.log());
    assert_eq!(whole, all_steps());
    assert_eq!(sandbox.check()["state"], "COMPLETE");
}

/// SIGHUP to `mihari run` by hand: the job (which would exit 8 on a HUP) runs on, and the log
/// is opened again at once — here a path logrotate left empty (`nocreate`).
#[test]
fn sighup_opens_the_log_again_and_never_reaches_the_job() {
    let sandbox = Sandbox::new();
    sandbox.job(
        r#"[sh, -c, 'echo ready; trap "echo got-HUP; exit 8" HUP; trap "echo got-TERM; exit 7" TERM; while true; do sleep 0.1; done']"#,
        "",
    );
    let running = sandbox.start();
    wait_for("ready", || sandbox.read(&sandbox.log()).contains("ready"));
    sandbox.logrotate("  nocreate\n  rotate 5");
    assert!(!sandbox.log().exists(), "nocreate leaves the path empty");
    running.signal(Signal::SIGHUP);
    wait_for("the log opened again on SIGHUP", || sandbox.log().exists());
    running.signal(Signal::SIGTERM);
    let (code, stderr) = running.finish();
    assert_eq!(code, 7, "the job ended on SIGTERM, not on SIGHUP: {stderr}");
    assert_eq!(sandbox.read(&sandbox.rotated(1)), "ready\n");
    // The shell may say "Terminated" of its `sleep` first: the group got the SIGTERM too.
    let after = sandbox.read(&sandbox.log());
    assert!(
        after.ends_with("got-TERM\n") && !after.contains("HUP"),
        "{after}"
    );
}

/// What descriptor `fd` of process `pid` is (`pipe:[N]`, a path), if it is open.
fn fd_target(pid: u32, fd: &str) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .map(|target| target.display().to_string())
}

/// Every descriptor of `pid`, with what it is.
fn fds(pid: u32) -> Vec<(String, String)> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| {
                    let fd = entry.file_name().to_string_lossy().into_owned();
                    fd_target(pid, &fd).map(|target| (fd, target))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The job sees what it saw before but a pipe: stdin `/dev/null`, stdout and stderr one
/// descriptor shared (so their order is kept), its own process group in mihari's session,
/// and nothing of mihari's but the lock it inherits — not the pipe's read end, not the
/// copier's wake-up pipe (a write end of those left in the job would hold the log open past
/// the job's end).
#[test]
fn the_job_sees_one_pipe_for_stdout_and_stderr_and_nothing_else_of_mihari() {
    let sandbox = Sandbox::new();
    sandbox.job(r#"[sh, -c, 'echo up; exec sleep 30']"#, "");
    let running = sandbox.start();
    wait_for("up", || sandbox.read(&sandbox.log()).contains("up"));
    let supervisor = running.pid();
    let job = job_pid_of(supervisor).expect("the job runs");
    wait_for("the job's exec", || {
        fs::read_to_string(format!("/proc/{job}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    assert_eq!(fd_target(job, "0").as_deref(), Some("/dev/null"));
    let out = fd_target(job, "1").expect("stdout");
    assert!(out.starts_with("pipe:"), "{out}");
    assert_eq!(fd_target(job, "2"), Some(out.clone()), "one pipe for both");
    let stat = |pid: u32| -> Vec<String> {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let after = &text[text.rfind(')').expect("comm") + 1..];
        after.split_whitespace().map(str::to_string).collect()
    };
    // Fields 5 (pgrp) and 6 (session), counted from 3 after the command name.
    assert_eq!(stat(job)[2], job.to_string(), "leads its own group");
    assert_eq!(stat(job)[3], stat(supervisor)[3], "in mihari's session");
    // Of what mihari run holds (and this test does not), the job has only its output pipe
    // (as fds 1 and 2) and the lock.
    let ours: Vec<String> = fds(std::process::id())
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let mihari: Vec<String> = fds(supervisor)
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !ours.contains(t))
        .collect();
    let shared: Vec<(String, String)> = fds(job)
        .into_iter()
        .filter(|(_, t)| mihari.contains(t))
        .collect();
    let mut names: Vec<&str> = shared.iter().map(|(fd, _)| fd.as_str()).collect();
    names.sort();
    let lock = sandbox.lock().display().to_string();
    assert!(
        shared
            .iter()
            .all(|(fd, t)| (t == &out && (fd == "1" || fd == "2")) || t == &lock),
        "the job holds more of mihari's than its output and lock: {shared:?}"
    );
    assert_eq!(names.len(), 3, "{shared:?}");
    running.signal(Signal::SIGTERM);
    running.finish();
}

/// The loop tqdm users run, deterministic: no rate or time in the bar, a frame per step.
const TQDM_LOOP: &str = r#"
import sys, time
from tqdm import tqdm
print("starting", flush=True)
for _ in tqdm(range(40), file=sys.stderr, mininterval=0, miniters=1, ncols=60,
              bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}"):
    time.sleep(0.005)
sys.stdout.buffer.write(b"raw \x1b[31mred\x1b[0m \xff\xfe\r\nno newline at the end")
sys.stdout.flush()
"#;

#[test]
fn a_tqdm_bar_reaches_the_log_byte_for_byte() {
    require(PYTHON, "python3");
    let sandbox = Sandbox::new();
    let script = sandbox.path("bar.py");
    fs::write(&script, TQDM_LOOP).expect("the loop");
    // The same loop with its stdout and stderr a file, as before `mihari run` owned them.
    let direct = sandbox.path("direct.log");
    let file = File::create(&direct).expect("direct log");
    let status = Command::new(PYTHON)
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file)
        .status()
        .expect("python runs");
    assert!(status.success(), "the loop runs (python3-tqdm installed?)");
    let expected = fs::read(&direct).expect("direct output");
    assert!(
        expected.iter().filter(|&&b| b == b'\r').count() > 40,
        "tqdm drew its frames with carriage returns: {}",
        String::from_utf8_lossy(&expected)
    );

    sandbox.job(&format!("['{PYTHON}', '{}']", script.display()), "");
    let (code, stderr) = sandbox.start().finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fs::read(sandbox.log()).expect("the log"),
        expected,
        "under mihari run:\n{}\nwritten directly:\n{}",
        sandbox.read(&sandbox.log()),
        String::from_utf8_lossy(&expected)
    );
}

/// A launcher that daemonizes (`setsid ... &`) and exits: the daemon keeps the pipe, so its
/// lines reach the log, and the run ends with its last process.
#[test]
fn a_daemonizing_child_keeps_logging_after_its_parent_exits() {
    let sandbox = Sandbox::new();
    sandbox.job(
        "[sh, -c, 'setsid sh -c \"sleep 0.5; echo daemon-first; sleep 0.5; echo daemon-last\" & echo launcher-done']",
        "",
    );
    let running = sandbox.start();
    wait_for("the launcher's line", || {
        sandbox.read(&sandbox.log()).contains("launcher-done")
    });
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        sandbox.read(&sandbox.log()),
        "launcher-done\ndaemon-first\ndaemon-last\n"
    );
    // The daemon, and its `sleep` when it has started one: "still runs" or "still run".
    assert!(stderr.contains("it started still run"), "{stderr}");
}

/// A restart hands `mihari run` the log as its own stderr: what it says itself follows the log
/// through a rotation too, rather than landing in the rotated file.
#[test]
fn mihari_runs_own_words_follow_the_log_when_its_stderr_is_the_log() {
    let sandbox = Sandbox::new();
    sandbox.job(
        "[sh, -c, 'echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; while [ ! -e go2 ]; do sleep 0.05; done; setsid sh -c \"sleep 0.5; echo daemon-last\" & echo launcher-done']",
        "",
    );
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(sandbox.log())
        .expect("the log");
    let mut child = sandbox
        .mihari()
        .args(["run", "job"])
        .stdout(log.try_clone().expect("dup"))
        .stderr(log)
        .spawn()
        .expect("mihari run starts");
    wait_for("first", || sandbox.read(&sandbox.log()).contains("first"));
    sandbox.logrotate("  create\n  rotate 5");
    fs::write(sandbox.path("go"), "").expect("go");
    wait_for("second, in the new log", || {
        sandbox.read(&sandbox.log()).contains("second")
    });
    fs::write(sandbox.path("go2"), "").expect("go2");
    let status = child.wait().expect("mihari run ends");
    assert_eq!(status.code(), Some(0));
    assert_eq!(sandbox.read(&sandbox.rotated(1)), "first\n");
    let new = sandbox.read(&sandbox.log());
    assert!(
        new.starts_with("second\n")
            && new.contains("launcher-done\n")
            && new.contains("exited (exit 0), but ")
            && new.contains("it started still run")
            && new.ends_with("daemon-last\n"),
        "{new}"
    );
}

/// SIGTERM still goes to the whole tree — the job's group and a daemon in its own session —
/// and what they say on their way out reaches the log.
#[test]
fn sigterm_still_reaches_the_whole_tree_and_its_last_words_reach_the_log() {
    let sandbox = Sandbox::new();
    sandbox.job(
        r#"[sh, -c, 'setsid sh -c "trap \"echo daemon-got-term; exit 0\" TERM; echo daemon-up; while true; do sleep 0.1; done" & trap "echo job-got-term; exit 7" TERM; echo job-up; while true; do sleep 0.1; done']"#,
        "",
    );
    let running = sandbox.start();
    wait_for("both up", || {
        let log = sandbox.read(&sandbox.log());
        log.contains("job-up") && log.contains("daemon-up")
    });
    running.signal(Signal::SIGTERM);
    let (code, stderr) = running.finish();
    assert_eq!(code, 7, "{stderr}");
    let log = sandbox.read(&sandbox.log());
    assert!(
        log.contains("job-got-term") && log.contains("daemon-got-term"),
        "{log}"
    );
}

/// `rm` of the log while the job prints: the next lines make the file again, at once.
#[test]
fn a_deleted_log_is_made_again_by_the_next_lines() {
    let sandbox = Sandbox::new();
    sandbox.job(STEPS, STEPS_KEYS);
    let running = sandbox.start();
    wait_for("step 2/20", || {
        sandbox.read(&sandbox.log()).contains("step 2/20")
    });
    fs::remove_file(sandbox.log()).expect("rm the log");
    wait_for("the log made again", || {
        sandbox.read(&sandbox.log()).contains('\n')
    });
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(sandbox.read(&sandbox.log()).ends_with("step 20/20\n"));
}

/// A link planted at the log's path after a rotation is never followed: the output stays in
/// the rotated file, the file the link points to is untouched, and mihari says why.
#[test]
fn a_link_planted_at_the_log_path_is_never_followed() {
    let sandbox = Sandbox::new();
    sandbox.job(STEPS, STEPS_KEYS);
    let precious = sandbox.path("precious.txt");
    fs::write(&precious, "keep me\n").expect("precious");
    let running = sandbox.start();
    wait_for("step 2/20", || {
        sandbox.read(&sandbox.log()).contains("step 2/20")
    });
    fs::rename(sandbox.log(), sandbox.rotated(1)).expect("rename");
    std::os::unix::fs::symlink(&precious, sandbox.log()).expect("plant a link");
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fs::read_to_string(&precious).expect("precious"),
        "keep me\n"
    );
    assert_eq!(sandbox.read(&sandbox.rotated(1)), all_steps());
    assert!(
        stderr.contains("cannot open the log of job 'job' again") && stderr.contains("link"),
        "{stderr}"
    );
}

/// A tmpfs mounted on the sandbox's `logs` folder, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (and a message) where this user may not mount.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .ok()?;
        if output.status.success() {
            Some(Tmpfs(at.to_path_buf()))
        } else {
            eprintln!(
                "skipped: cannot mount a tmpfs to fill ({}); run as root",
                String::from_utf8_lossy(&output.stderr).trim()
            );
            None
        }
    }

    /// Fills it to the last page with `name`.
    fn fill(&self, name: &str) {
        use std::io::Write;
        let mut file = File::create(self.0.join(name)).expect("filler");
        let page = [b'x'; 4096];
        while file.write_all(&page).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Lines a job prints into a full disk: 20,000 of 100 bytes, far more than a pipe holds, so
/// a copier that stopped draining would hold the job up before it got to `printed`.
const LINES: u64 = 20_000;

const FULL_DISK_JOB: &str = r#"
import fcntl, os, struct, sys, termios, time
for n in range(20000):
    sys.stdout.write(f"{n:08d} " + "x" * 90 + "\n")
sys.stdout.flush()
deadline = time.time() + 60
# Printed once the copier has taken it all: nothing of it is left in the pipe.
def in_pipe():
    return struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\0\0\0\0"))[0]
while in_pipe() > 0 and time.time() < deadline:
    time.sleep(0.01)
open("printed", "w").close()
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.02)
print("after-the-disk-was-freed", flush=True)
"#;

#[test]
fn a_full_disk_does_not_block_the_job_and_the_loss_is_counted_and_recorded() {
    require(PYTHON, "python3");
    let sandbox = Sandbox::new();
    let Some(disk) = Tmpfs::mount(&sandbox.path("logs"), "256k") else {
        return;
    };
    fs::write(sandbox.log(), "").expect("the log, empty");
    disk.fill("filler");
    let script = sandbox.path("job.py");
    fs::write(&script, FULL_DISK_JOB).expect("the job");
    sandbox.job(&format!("['{PYTHON}', '{}']", script.display()), "");
    let running = sandbox.start();
    // Not held up: it printed everything into the full disk and went on.
    wait_for("the job to print everything", || {
        sandbox.path("printed").exists()
    });
    // The job says so once its pipe is empty (a CI run under load once freed the disk while
    // 526 lines still sat in it); the copier holds what it read for a millisecond or so to
    // gather its neighbours before it writes, which this pause leaves it.
    std::thread::sleep(Duration::from_millis(200));
    fs::remove_file(sandbox.path("logs/filler")).expect("free the disk");
    fs::write(sandbox.path("go"), "").expect("go");
    let (code, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");

    let lost = LINES * 100;
    let words = "the log could not be written (No space left on device)";
    assert_eq!(
        sandbox.read(&sandbox.log()),
        format!(
            "mihari: {lost} bytes of the job's output were lost here: {words}\n\
             after-the-disk-was-freed\n"
        )
    );
    assert!(
        stderr.contains("cannot write the log of job 'job' (No space left on device)")
            && stderr.contains(&format!(
                "{lost} bytes of the output of job 'job' were lost"
            )),
        "{stderr}"
    );
    let events = sandbox.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["started", "output-lost", "exited"]);
    assert_eq!(
        events[1].reason.as_deref(),
        Some(format!("{lost} bytes of its output lost: {words}").as_str())
    );
    let root = sandbox.root.display().to_string();
    for event in &events {
        let reason = event.reason.as_deref().unwrap_or_default();
        assert!(
            !reason.contains(&root) && !reason.contains("xxxx"),
            "{reason}"
        );
    }
    drop(disk);
}

/// A log past the file size limit (`ulimit -f`, which a pipe does not have) loses what does
/// not fit, counted, and neither `mihari run` nor the job dies of SIGXFSZ.
#[test]
fn a_log_past_the_file_size_limit_loses_bytes_counted_and_kills_nobody() {
    let sandbox = Sandbox::new();
    // 200,000 lines of 12 bytes; `ulimit -f 2048` (blocks of 512 bytes) allows 1 MiB, in which the state store fits.
    sandbox.job(
        "[sh, -c, 'for n in $(seq 100000 299999); do echo \"line $n\"; done; echo ran-to-the-end >&2']",
        "",
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 2048 && exec \"$0\" --config \"$1\" run job")
        .arg(env!("CARGO_BIN_EXE_mihari"))
        .arg(sandbox.path("jobs.yaml"))
        .stdin(Stdio::null())
        .output()
        .expect("mihari run under ulimit -f 2048");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(fs::metadata(sandbox.log()).expect("the log").len(), 1 << 20);
    let lost = 200_000 * 12 + "ran-to-the-end\n".len() - (1 << 20);
    assert!(
        stderr.contains(&format!(
            "{lost} bytes of the output of job 'job' were lost: its log could not be written \
             (File too large)"
        )),
        "{stderr}"
    );
    let kinds: Vec<String> = sandbox.events().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["started", "output-lost", "exited"]);
}

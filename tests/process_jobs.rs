//! Jobs with no lock at all (started in a tmux pane, by nohup), found by their command line
//! (`process: {cmdline, user}`): real processes are started with argv no other process has,
//! and `mihari check --json` must name the one that matches, say "not held" when none does,
//! UNKNOWN naming them when several do, "stopped" for one stopped with SIGSTOP (it showed
//! SHOULD_BE_RUNNING), and keep to one user's processes with `user:` — with a real second
//! user. A pattern that does not compile is refused at load, naming file:line:col.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

#[path = "common/users.rs"]
mod users;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A folder with a jobs file; jobs are added as YAML mappings.
struct Sandbox {
    dir: tempfile::TempDir,
    jobs: Vec<String>,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("tempdir"),
            jobs: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A job `id` found by `process` (a YAML flow mapping), with a log and resource_free.
    fn job(&mut self, id: &str, process: &str) -> &mut Self {
        self.jobs.push(format!(
            "  - id: {id}\n    log: {id}.log\n    process: {process}\n    \
             should_run_when: [resource_free]\n    restart:\n      command: [sleep, '60']\n"
        ));
        self
    }

    fn write(&self) -> PathBuf {
        let text = format!(
            "settings:\n  state_dir: state\njobs:\n{}",
            self.jobs.concat()
        );
        let path = self.path("jobs.yaml");
        fs::write(&path, text).expect("write jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    fn mihari(&self, args: &[&str]) -> (i32, String, String) {
        let output = Command::new(BIN)
            .arg("--config")
            .arg(self.write())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// `mihari check --json`: every job's row by id.
    fn rows(&self) -> Vec<Value> {
        let (_, stdout, stderr) = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
        report["jobs"].as_array().expect("jobs").clone()
    }

    fn row(&self, id: &str) -> Value {
        self.rows()
            .into_iter()
            .find(|row| row["id"] == id)
            .unwrap_or_else(|| panic!("no row for {id}"))
    }
}

/// Processes the test started, killed and reaped when it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `sleep N` whose N no other process on the machine has: its argv is unique.
fn unique_seconds() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}",
        1_000_000_000u64 + u64::from(std::process::id()) * 1000 + u64::from(n)
    )
}

fn sleep(seconds: &str) -> Child {
    Command::new("sleep")
        .arg(seconds)
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep starts")
}

/// The pattern that matches exactly `sleep SECONDS`.
fn pattern(seconds: &str) -> String {
    format!("{{cmdline: '^sleep {seconds}$'}}")
}

fn reasons(row: &Value) -> String {
    row["reasons"].to_string()
}

fn wait_for_state(pid: u32, want: char) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .next()
                    .map(String::from)
            });
        if state.as_deref() == Some(&want.to_string()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} never reached {want}: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn one_matching_process_is_the_holder_with_its_pid() {
    let seconds = unique_seconds();
    let procs = Procs(vec![sleep(&seconds)]);
    let mut sandbox = Sandbox::new();
    sandbox.job("train", &pattern(&seconds));
    let row = sandbox.row("train");
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["liveness"], "alive", "{row:#}");
    assert_eq!(
        row["pid"].as_u64(),
        Some(u64::from(procs.0[0].id())),
        "{row:#}"
    );
}

#[test]
fn no_matching_process_is_not_held_and_should_run() {
    let mut sandbox = Sandbox::new();
    sandbox.job("train", &pattern(&unique_seconds()));
    let row = sandbox.row("train");
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    assert_eq!(row["pid"], Value::Null, "{row:#}");
    assert!(
        reasons(&row).contains("no process matches process.cmdline"),
        "{}",
        reasons(&row)
    );
}

#[test]
fn two_matching_processes_are_unknown_naming_both() {
    let seconds = unique_seconds();
    let procs = Procs(vec![sleep(&seconds), sleep(&seconds)]);
    let mut sandbox = Sandbox::new();
    sandbox.job("train", &pattern(&seconds));
    let row = sandbox.row("train");
    assert_eq!(row["state"], "UNKNOWN", "{row:#}");
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let said = reasons(&row);
    for child in &procs.0 {
        assert!(said.contains(&format!("pid {}", child.id())), "{said}");
    }
    assert!(said.contains(&format!("'sleep {seconds}'")), "{said}");
}

#[test]
fn a_process_stopped_with_sigstop_is_alive_and_said_to_be_stopped() {
    let seconds = unique_seconds();
    let procs = Procs(vec![sleep(&seconds)]);
    let pid = procs.0[0].id();
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("SIGSTOP");
    wait_for_state(pid, 'T');
    let mut sandbox = Sandbox::new();
    sandbox.job("train", &pattern(&seconds));
    let row = sandbox.row("train");
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["pid"].as_u64(), Some(u64::from(pid)), "{row:#}");
    assert!(reasons(&row).contains("stopped"), "{}", reasons(&row));
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
}

/// The second user's uid.
fn other_user() -> Option<u32> {
    users::other_user().map(|(uid, _)| uid)
}

#[test]
fn a_user_filter_keeps_to_that_users_processes() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: starting another user's process needs root");
        return;
    }
    let Some(uid) = other_user() else {
        return;
    };
    let seconds = unique_seconds();
    let theirs = Command::new("sleep")
        .arg(&seconds)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep as mihari-other");
    let procs = Procs(vec![theirs, sleep(&seconds)]);
    let mut sandbox = Sandbox::new();
    sandbox
        .job(
            "theirs",
            &format!("{{cmdline: '^sleep {seconds}$', user: mihari-other}}"),
        )
        .job(
            "mine",
            &format!("{{cmdline: '^sleep {seconds}$', user: 0}}"),
        )
        .job("anyone", &pattern(&seconds));
    let rows = sandbox.rows();
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).expect("row").clone();
    assert_eq!(row("theirs")["state"], "RUNNING", "{:#}", row("theirs"));
    assert_eq!(
        row("theirs")["pid"].as_u64(),
        Some(u64::from(procs.0[0].id()))
    );
    assert_eq!(row("mine")["state"], "RUNNING", "{:#}", row("mine"));
    assert_eq!(
        row("mine")["pid"].as_u64(),
        Some(u64::from(procs.0[1].id()))
    );
    assert_eq!(row("anyone")["state"], "UNKNOWN", "{:#}", row("anyone"));
}

#[test]
fn a_user_that_does_not_exist_is_a_fault_not_not_running() {
    let mut sandbox = Sandbox::new();
    sandbox.job(
        "train",
        &format!(
            "{{cmdline: '^sleep {}$', user: no-such-user-here}}",
            unique_seconds()
        ),
    );
    let row = sandbox.row("train");
    assert_eq!(row["state"], "UNKNOWN", "{row:#}");
    assert!(
        reasons(&row).contains("'no-such-user-here'"),
        "{}",
        reasons(&row)
    );
}

#[test]
fn kernel_threads_and_mihari_itself_never_match() {
    let mut sandbox = Sandbox::new();
    // Kernel threads have no command line; the `mihari --config THIS/jobs.yaml check --json`
    // this sandbox runs is this very check (the path keeps other tests' checks out).
    let itself = format!(
        "{{cmdline: 'mihari --config {} check --json'}}",
        regex::escape(&sandbox.path("jobs.yaml").display().to_string())
    );
    sandbox
        .job("kernel", "{cmdline: 'kthreadd|kworker|ksoftirqd'}")
        .job("itself", &itself);
    for id in ["kernel", "itself"] {
        let row = sandbox.row(id);
        assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    }
}

#[test]
fn a_cmdline_that_is_not_a_regular_expression_is_refused_with_its_position() {
    let mut sandbox = Sandbox::new();
    sandbox.job("train", "{cmdline: '^python3 (train.py'}");
    let (code, _, stderr) = sandbox.mihari(&["check"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("jobs.yaml:6:"), "{stderr}");
    assert!(
        stderr.contains("process.cmdline '^python3 (train.py'"),
        "{stderr}"
    );
    assert!(stderr.contains("not a regular expression"), "{stderr}");
    assert!(stderr.contains("unclosed group"), "{stderr}");
}

#[test]
fn resource_free_with_process_alone_is_accepted() {
    let mut sandbox = Sandbox::new();
    sandbox.job("train", &pattern(&unique_seconds()));
    let (code, _, stderr) = sandbox.mihari(&["check"]);
    assert_ne!(code, 3, "{stderr}");
}

#[test]
fn mihari_run_keeps_a_lock_in_state_dir_for_a_job_declared_by_process_alone() {
    let seconds = unique_seconds();
    let mut sandbox = Sandbox::new();
    sandbox.jobs.push(format!(
        "  - id: train\n    log: train.log\n    process: {}\n    \
         should_run_when: [resource_free]\n    restart:\n      command: [sleep, '{seconds}']\n",
        pattern(&seconds)
    ));
    let config = sandbox.write();
    let run = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["run", "train"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mihari run starts");
    let mut procs = Procs(vec![run]);
    let kept = sandbox.path("state/train.run.lock");
    let deadline = Instant::now() + Duration::from_secs(15);
    while sandbox.row("train")["state"] != "RUNNING" {
        assert!(
            Instant::now() < deadline,
            "never RUNNING: {:#}",
            sandbox.row("train")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = fs::read_to_string(&kept).expect("the kept lock");
    let lock = mihari::probe::lock::parse_lock(&text).expect("a JSON lock");
    assert_eq!(lock.pid, procs.0[0].id());
    assert!(lock.boot_id.is_some(), "{text}");
    // A second run is refused: the lock mihari keeps is held.
    let (code, _, stderr) = sandbox.mihari(&["run", "train"]);
    assert_eq!(code, 75, "{stderr}");
    // Stopping the run stops the job and removes the kept lock.
    kill(Pid::from_raw(procs.0[0].id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let _ = procs.0[0].wait();
    assert!(!kept.exists(), "the kept lock is removed when the run ends");
    procs.0.clear();
    assert_eq!(sandbox.row("train")["state"], "SHOULD_BE_RUNNING");
}

//! One-shot jobs on real tools, run by the real `mihari run` and `mihari restart`: a tqdm
//! loop, an `rsync -a`, a `dd` that finish are COMPLETE (`not_succeeded`), `check` exits 0
//! and a watcher with `auto_restart` does not run finished work again; a run that exits 3,
//! or that a SIGTERM kills, is SHOULD_BE_RUNNING with its exit in the reasons; and a run that
//! exits 0 at 59 of its 260 items is RED, "exited 0 at 59 of 260".
//!
//! The incident: a job with nothing to count that exited 0 showed SHOULD_BE_RUNNING /
//! RESTART, `check` exited 2, and with auto_restart the watcher re-ran finished work until
//! the cap, then reported a broken rule.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// Debian's python, which has tqdm (the `python3` on PATH may not).
const PYTHON: &str = "/usr/bin/python3";

/// A private folder with a jobs file, its state_dir inside it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// A sandbox whose jobs file lists `jobs` (YAML, each starting with `  - id:`).
    fn new(jobs: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let sandbox = Sandbox { dir };
        sandbox.write_jobs(jobs);
        sandbox
    }

    fn write_jobs(&self, jobs: &str) {
        let path = self.path("jobs.yaml");
        fs::write(
            &path,
            format!("settings:\n  state_dir: state\njobs:\n{jobs}"),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs")
    }

    /// `mihari check --json`: its exit code and the job objects by id.
    fn check(&self) -> (i32, Vec<Value>) {
        let output = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json is JSON ({e}):\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        let jobs = report["jobs"].as_array().expect("jobs").clone();
        (output.status.code().expect("an exit code"), jobs)
    }

    fn job(&self, id: &str) -> Value {
        let (_, jobs) = self.check();
        jobs.into_iter()
            .find(|j| j["id"] == id)
            .unwrap_or_else(|| panic!("no job {id} in check --json"))
    }

    /// The kinds of the event log's events of `job`, oldest first.
    fn kinds_of(&self, job: &str) -> Vec<String> {
        let output = self.mihari(&["events", "--json", "--job", job]);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|event| event["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// Fails with the whole object when `job` is not in `state` and `bucket`.
fn assert_judged(job: &Value, state: &str, bucket: Value) {
    assert_eq!(job["state"], state, "{job:#}");
    assert_eq!(job["bucket"], bucket, "{job:#}");
}

fn reasons(job: &Value) -> String {
    job["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

fn tool(path: &str) -> &str {
    assert!(
        Path::new(path).exists(),
        "this test needs '{path}' (see docs/architecture.md: what the tests need)"
    );
    path
}

/// The three one-shot jobs of the incident, each with nothing to count.
fn one_shot_jobs(extra: &str) -> String {
    let python = tool(PYTHON);
    let rsync = tool("/usr/bin/rsync");
    let loop_py =
        "from tqdm import tqdm\nimport time\nfor _ in tqdm(range(40)):\n    time.sleep(0.005)\n";
    format!(
        "  - id: tqdm_loop\n    lock: tqdm.lock\n    log: tqdm.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      \
         command: [{python}, -c, {loop:?}]\n{extra}\
         \x20 - id: rsync_copy\n    lock: rsync.lock\n    log: rsync.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      \
         command: [{rsync}, -a, src/, dst/]\n{extra}\
         \x20 - id: dd_zero\n    lock: dd.lock\n    log: dd.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      \
         command: [sh, -c, 'echo ran >> dd.runs; exec dd if=/dev/zero of=out bs=1M count=20']\n{extra}",
        loop = loop_py,
    )
}

/// Source files for the rsync job.
fn rsync_source(sandbox: &Sandbox) {
    fs::create_dir_all(sandbox.path("src/nested")).expect("src");
    fs::write(sandbox.path("src/a.txt"), "alpha\n").expect("a");
    fs::write(sandbox.path("src/nested/b.txt"), "beta\n").expect("b");
}

#[test]
fn a_finished_tqdm_loop_rsync_and_dd_are_complete_and_check_exits_0() {
    let sandbox = Sandbox::new(&one_shot_jobs(""));
    rsync_source(&sandbox);
    // Nothing has run: each is due (DISPATCH), with the reason in words.
    let tqdm = sandbox.job("tqdm_loop");
    assert_judged(&tqdm, "SHOULD_BE_RUNNING", "DISPATCH".into());
    assert!(
        reasons(&tqdm).contains("no run of it is recorded yet"),
        "{tqdm:#}"
    );
    assert_eq!(tqdm["last_exit"], Value::Null);

    // The real runs: two under `mihari run`, one through a human's `mihari restart`.
    for job in ["tqdm_loop", "dd_zero"] {
        let ran = sandbox.mihari(&["run", job]);
        assert_eq!(
            ran.status.code(),
            Some(0),
            "{job}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
    }
    let restarted = sandbox.mihari(&["restart", "rsync_copy", "--yes"]);
    assert_eq!(
        restarted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&restarted.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sandbox.kinds_of("rsync_copy").iter().any(|k| k == "exited") {
        assert!(Instant::now() < deadline, "rsync never exited");
        thread::sleep(Duration::from_millis(50));
    }
    // They did their work.
    assert_eq!(
        fs::read_to_string(sandbox.path("dst/nested/b.txt")).expect("rsync copied"),
        "beta\n"
    );
    assert_eq!(
        fs::metadata(sandbox.path("out")).expect("dd wrote").len(),
        20 * 1024 * 1024
    );
    assert!(
        fs::read_to_string(sandbox.path("tqdm.log"))
            .expect("tqdm's output in the log")
            .contains("40/40"),
        "tqdm ran to its end"
    );

    let (code, jobs) = sandbox.check();
    for job in &jobs {
        assert_judged(job, "COMPLETE", Value::Null);
        assert!(
            reasons(job).contains("complete: the last run exited 0"),
            "{job:#}"
        );
        assert_eq!(job["last_exit"]["code"], 0, "{job:#}");
        assert_eq!(job["last_exit"]["signal"], Value::Null, "{job:#}");
        assert!(job["last_exit"]["at"].is_string(), "{job:#}");
    }
    assert_eq!(code, 0, "finished one-shot jobs need nothing: {jobs:#?}");
}

#[test]
fn a_watcher_with_auto_restart_does_not_run_finished_work_again() {
    let auto = "    auto_restart: true\n    auto_restart_reason: 'cause known: a crash; \
                procedure: run it again'\n";
    let sandbox = Sandbox::new(&one_shot_jobs(auto));
    rsync_source(&sandbox);
    for job in ["tqdm_loop", "rsync_copy", "dd_zero"] {
        let ran = sandbox.mihari(&["run", job]);
        assert_eq!(ran.status.code(), Some(0), "{job}");
    }
    for _ in 0..3 {
        let pass = sandbox.mihari(&["watch", "--once", "--interval", "300"]);
        assert_eq!(
            pass.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&pass.stdout)
        );
    }
    for job in ["tqdm_loop", "rsync_copy", "dd_zero"] {
        let kinds = sandbox.kinds_of(job);
        assert!(
            !kinds.iter().any(|k| k == "spawned" || k == "claimed"),
            "{job} was run again: {kinds:?}"
        );
    }
    assert_eq!(
        fs::read_to_string(sandbox.path("dd.runs")).expect("dd ran"),
        "ran\n",
        "dd ran once, and only once"
    );
}

#[test]
fn a_run_that_exits_3_should_be_running_with_its_exit_in_the_reasons() {
    let sandbox = Sandbox::new(
        "  - id: exits_3\n    lock: e.lock\n    log: e.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      command: [sh, -c, 'exit 3']\n",
    );
    let ran = sandbox.mihari(&["run", "exits_3"]);
    assert_eq!(ran.status.code(), Some(3));
    let (code, jobs) = sandbox.check();
    let job = &jobs[0];
    assert_judged(job, "SHOULD_BE_RUNNING", "RESTART".into());
    assert!(
        reasons(job).contains("not_succeeded (the last run exited 3 at "),
        "{job:#}"
    );
    assert_eq!(job["last_exit"]["code"], 3, "{job:#}");
    assert_eq!(code, 2);
}

#[test]
fn a_run_killed_by_sigterm_should_be_running_with_the_signal_in_the_reasons() {
    let sandbox = Sandbox::new(
        "  - id: killed\n    lock: k.lock\n    log: k.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      \
         command: [sh, -c, 'echo $$ > worker.pid; exec sleep 60']\n",
    );
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(sandbox.path("jobs.yaml"))
        .args(["run", "killed"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mihari run");
    // The worker (sleep, exec'd from sh) writes its PID; something outside kills it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let worker = loop {
        if let Some(pid) = fs::read_to_string(sandbox.path("worker.pid"))
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the worker never started");
        thread::sleep(Duration::from_millis(20));
    };
    assert_judged(&sandbox.job("killed"), "RUNNING", Value::Null);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the worker");
    let status = run.wait().expect("mihari run ends");
    assert_eq!(status.code(), Some(128 + 15));
    let (code, jobs) = sandbox.check();
    let job = &jobs[0];
    assert_judged(job, "SHOULD_BE_RUNNING", "RESTART".into());
    assert!(
        reasons(job).contains("the last run was killed by SIGTERM at "),
        "{job:#}"
    );
    assert_eq!(job["last_exit"]["code"], Value::Null, "{job:#}");
    assert_eq!(job["last_exit"]["signal"], "SIGTERM", "{job:#}");
    assert_eq!(code, 2);
}

#[test]
fn a_run_that_exits_0_at_59_of_260_is_red_until_acknowledged() {
    let sandbox = Sandbox::new(
        "  - id: short\n    lock: s.lock\n    log: s.log\n    progress_file: items.jsonl\n    \
         expected_total: 260\n    should_run_when: [not_complete]\n    restart:\n      \
         command: [sh, -c, 'for i in $(seq 59); do echo item-$i >> items.jsonl; done']\n",
    );
    let ran = sandbox.mihari(&["run", "short"]);
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(
        fs::read_to_string(sandbox.path("items.jsonl"))
            .expect("items")
            .lines()
            .count(),
        59
    );
    let (code, jobs) = sandbox.check();
    let job = &jobs[0];
    assert_eq!(job["bucket"], "RED", "{job:#}");
    assert!(reasons(job).contains("exited 0 at 59 of 260"), "{job:#}");
    assert_eq!(code, 2);

    let acked = sandbox.mihari(&[
        "ack",
        "short",
        "--reason",
        "upstream listing was cut short; rerun tomorrow",
        "--yes",
    ]);
    assert_eq!(
        acked.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&acked.stdout),
        String::from_utf8_lossy(&acked.stderr)
    );
    let job = sandbox.job("short");
    assert_judged(&job, "SHOULD_BE_RUNNING", "RESTART".into());
    assert!(!reasons(&job).contains("rule broken"), "{job:#}");
}

#[test]
fn not_succeeded_needs_nothing_to_count() {
    // No progress_file, no expected_total: accepted, and judged from the event log alone.
    let sandbox = Sandbox::new(
        "  - id: copy\n    lock: c.lock\n    log: c.log\n    \
         should_run_when: [not_succeeded]\n    restart:\n      command: [/bin/true]\n",
    );
    let (code, jobs) = sandbox.check();
    assert_ne!(code, 3, "refused: {jobs:#?}");
    assert_judged(&jobs[0], "SHOULD_BE_RUNNING", "DISPATCH".into());
}

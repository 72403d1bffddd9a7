//! An exit outranks a count, on real tools under the real `mihari run`, `mihari restart` and
//! `mihari watch --once`:
//!
//! - a tqdm loop that reaches 50/50 and then raises is RED ("exited 1 after 50 of 50: the
//!   last run failed"), never COMPLETE — under `[not_complete]` and under
//!   `[not_complete, not_succeeded]`; `check` exits 2;
//! - rsync killed with SIGTERM after its last small file showed 100 % is RED, never COMPLETE;
//! - a run that exits 0 at 70 of 100 (tqdm) or at 70 % (a printed percent) is RED, and a
//!   watcher with `auto_restart: true` never runs it again: a human decides;
//! - which run the count belongs to: a new run that is alive after a failed one is RUNNING,
//!   and once it exits 0 the job is COMPLETE;
//! - a manifest pipeline that exits 0 with `"publish": "failed"` is RED naming the phase,
//!   until acknowledged;
//! - a restart whose command exits 4 at once (or is killed at once) is a failed restart:
//!   recorded `failed` with the exit, `mihari restart` exits 2, the row is RED and names it.
//!
//! The incidents: each of these read COMPLETE "needs nothing", or `verified`, or was re-run by
//! the watcher every pass.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// Debian's python, which has tqdm (the `python3` on PATH may not).
const PYTHON: &str = "/usr/bin/python3";
const RSYNC: &str = "/usr/bin/rsync";

/// A private folder with a jobs file, its state_dir inside it; any `mihari run` it started in
/// the background is ended when it is dropped.
struct Sandbox {
    dir: tempfile::TempDir,
    background: Vec<Child>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for run in &mut self.background {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(run.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = run.wait();
        }
    }
}

impl Sandbox {
    /// A sandbox whose jobs file lists `jobs` (YAML, each starting with `  - id:`).
    fn new(jobs: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let path = dir.path().join("jobs.yaml");
        fs::write(
            &path,
            format!("settings:\n  state_dir: state\n  workspace_cooldown_sec: 0\njobs:\n{jobs}"),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        Sandbox {
            dir,
            background: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        fs::write(self.path(name), text).expect("write");
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs")
    }

    /// `mihari run JOB` in the background, its output dropped.
    fn run_in_background(&mut self, job: &str) {
        let child = Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(["run", job])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari run");
        self.background.push(child);
    }

    /// `mihari check --json`: its exit code and the job objects.
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

    /// The (kind, reason) of the event log's events of `job`, oldest first.
    fn events_of(&self, job: &str) -> Vec<(String, String)> {
        let output = self.mihari(&["events", "--json", "--job", job]);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|event| {
                (
                    event["kind"].as_str().unwrap_or_default().to_string(),
                    event["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    fn kinds_of(&self, job: &str) -> Vec<String> {
        self.events_of(job)
            .into_iter()
            .map(|(kind, _)| kind)
            .collect()
    }

    /// Waits (bounded) until `job`'s row satisfies `done`, and returns it.
    fn wait_for(&self, job: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let row = self.job(job);
            if done(&row) {
                return row;
            }
            assert!(Instant::now() < deadline, "{what} never came: {row:#}");
            thread::sleep(Duration::from_millis(50));
        }
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

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A tqdm loop over 50 items that then raises while `fail` exists, and stays alive while
/// `hold` exists; each run appends a line to `runs`.
const TQDM_50: &str = "import os, time\nfrom tqdm import tqdm\nopen('runs', 'a').write('run\\n')\n\
                       for _ in tqdm(range(50)):\n    time.sleep(0.002)\n\
                       while os.path.exists('hold'):\n    time.sleep(0.02)\n\
                       if os.path.exists('fail'):\n    raise RuntimeError('upload failed after the loop')\n";

/// A job running the python `code` under `mihari run`, its tqdm bar read by `log_progress`.
fn tqdm_job(id: &str, code: &str, should_run_when: &str, extra: &str) -> String {
    let python = tool(PYTHON);
    format!(
        "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    \
         log_progress: {{preset: tqdm}}\n    should_run_when: {should_run_when}\n{extra}    \
         restart:\n      command: [{python}, -c, {code:?}]\n"
    )
}

const AUTO: &str = "    auto_restart: true\n    auto_restart_reason: 'cause known: a flaky \
                    upstream; procedure: run it again'\n";

#[test]
fn a_tqdm_loop_that_raises_after_50_of_50_is_red_never_complete() {
    let mut jobs = tqdm_job("loop", TQDM_50, "[not_complete]", "");
    jobs.push_str(&tqdm_job(
        "loop_ns",
        TQDM_50,
        "[not_complete, not_succeeded]",
        "",
    ));
    let sandbox = Sandbox::new(&jobs);
    sandbox.write("fail", "");
    for job in ["loop", "loop_ns"] {
        let ran = sandbox.mihari(&["run", job]);
        assert_eq!(ran.status.code(), Some(1), "{job}: {}", text(&ran));
        assert!(
            fs::read_to_string(sandbox.path(&format!("{job}.log")))
                .expect("the log")
                .contains("50/50"),
            "{job}: tqdm reached its total before it raised"
        );
    }
    let (code, jobs) = sandbox.check();
    for job in &jobs {
        assert_ne!(job["state"], "COMPLETE", "{job:#}");
        assert_eq!(job["bucket"], "RED", "{job:#}");
        assert!(
            reasons(job).contains("exited 1 after 50 of 50: the last run failed"),
            "{job:#}"
        );
        assert_eq!(job["last_exit"]["code"], 1, "{job:#}");
        assert_eq!(job["done"], 50, "{job:#}");
    }
    assert_eq!(code, 2, "a RED job is critical: {jobs:#?}");
}

#[test]
fn which_run_the_count_belongs_to_a_live_run_is_running_and_its_exit_0_is_complete() {
    let mut sandbox = Sandbox::new(&tqdm_job("loop", TQDM_50, "[not_complete]", ""));
    sandbox.write("fail", "");
    let ran = sandbox.mihari(&["run", "loop"]);
    assert_eq!(ran.status.code(), Some(1), "{}", text(&ran));
    assert_eq!(sandbox.job("loop")["bucket"], "RED");

    // The next run counts 50 of 50 too, and stays alive: it is judged as running, not by the
    // exit of the run before it.
    fs::remove_file(sandbox.path("fail")).expect("no more failure");
    sandbox.write("hold", "");
    sandbox.run_in_background("loop");
    let running = sandbox.wait_for("loop", "the new run holding its lock", |row| {
        row["liveness"] == "alive"
    });
    assert_judged(&running, "RUNNING", Value::Null);
    assert!(!reasons(&running).contains("rule broken"), "{running:#}");

    // It ends with exit 0: the newer success is the job's end, the old failure is not.
    fs::remove_file(sandbox.path("hold")).expect("let it end");
    let mut run = sandbox.background.pop().expect("the run");
    assert_eq!(run.wait().expect("mihari run ends").code(), Some(0));
    let (code, jobs) = sandbox.check();
    assert_judged(&jobs[0], "COMPLETE", Value::Null);
    assert!(
        reasons(&jobs[0]).contains("complete: 50 of 50 done"),
        "{jobs:#?}"
    );
    assert_eq!(jobs[0]["last_exit"]["code"], 0);
    assert_eq!(code, 0);
}

#[test]
fn rsync_killed_by_sigterm_after_its_last_file_showed_100_percent_is_red_never_complete() {
    let rsync = tool(RSYNC);
    // --bwlimit makes rsync linger after its last file's 100 % line (it sleeps to keep the
    // rate): the SIGTERM lands there, after the log says 100 %, before rsync is done.
    let sandbox = Sandbox::new(&format!(
        "  - id: copy\n    lock: copy.lock\n    log: copy.log\n    \
         log_progress: {{preset: percent}}\n    should_run_when: [not_complete]\n    \
         restart:\n      command: [sh, -c, 'echo $$ > rsync.pid; exec {rsync} -a --progress \
         --bwlimit=1 src/ dst/']\n"
    ));
    fs::create_dir(sandbox.path("src")).expect("src");
    for name in ["a.bin", "b.bin", "c.bin", "d.bin"] {
        sandbox.write(&format!("src/{name}"), &"x".repeat(4000));
    }
    let mut run = Command::new(BIN)
        .arg("--config")
        .arg(sandbox.path("jobs.yaml"))
        .args(["run", "copy"])
        .current_dir(sandbox.path(""))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mihari run");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = fs::read_to_string(sandbox.path("copy.log")).unwrap_or_default();
        // rsync's line for its last file: 100 %, nothing left to check.
        if log.contains("to-chk=0/") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rsync never showed its last file: {log}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let pid: i32 = fs::read_to_string(sandbox.path("rsync.pid"))
        .expect("rsync's pid")
        .trim()
        .parse()
        .expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM rsync");
    let status = run.wait().expect("mihari run ends");
    // rsync answers SIGTERM with its exit code 20 ("received SIGINT, SIGTERM, or SIGHUP").
    assert_eq!(status.code(), Some(20), "rsync ended before the SIGTERM");
    let (code, jobs) = sandbox.check();
    let job = &jobs[0];
    assert_ne!(job["state"], "COMPLETE", "{job:#}");
    assert_eq!(job["bucket"], "RED", "{job:#}");
    assert!(
        reasons(job).contains("exited 20 after 100%: the last run failed"),
        "{job:#}"
    );
    assert_eq!(code, 2);
}

#[test]
fn a_run_that_exits_0_at_70_percent_is_red_and_a_watcher_never_runs_it_again() {
    let short = "import time\nfrom tqdm import tqdm\nopen('runs', 'a').write('run\\n')\n\
                 bar = tqdm(total=100)\nfor _ in range(70):\n    time.sleep(0.002)\n    \
                 bar.update(1)\nbar.close()\n";
    let mut jobs = tqdm_job("tqdm70", short, "[not_complete]", AUTO);
    jobs.push_str(&format!(
        "  - id: pct70\n    lock: pct70.lock\n    log: pct70.log\n    \
         log_progress: {{preset: percent}}\n    should_run_when: [not_complete]\n{AUTO}    \
         restart:\n      command: [sh, -c, 'echo run >> pct.runs; echo copying model.bin 70%']\n"
    ));
    let sandbox = Sandbox::new(&jobs);
    for job in ["tqdm70", "pct70"] {
        let ran = sandbox.mihari(&["run", job]);
        assert_eq!(ran.status.code(), Some(0), "{job}: {}", text(&ran));
    }
    let (code, jobs) = sandbox.check();
    let tqdm = jobs.iter().find(|j| j["id"] == "tqdm70").expect("tqdm70");
    let pct = jobs.iter().find(|j| j["id"] == "pct70").expect("pct70");
    assert_eq!(tqdm["bucket"], "RED", "{tqdm:#}");
    assert!(reasons(tqdm).contains("exited 0 at 70 of 100"), "{tqdm:#}");
    assert_eq!(pct["bucket"], "RED", "{pct:#}");
    assert!(reasons(pct).contains("exited 0 at 70%"), "{pct:#}");
    assert_eq!(code, 2);

    // auto_restart is true and the job is due, yet the machine leaves it to a human.
    for _ in 0..2 {
        let pass = sandbox.mihari(&["watch", "--once", "--interval", "300"]);
        assert_eq!(pass.status.code(), Some(2), "{}", text(&pass));
    }
    for job in ["tqdm70", "pct70"] {
        let kinds = sandbox.kinds_of(job);
        assert!(
            !kinds.iter().any(|k| k == "spawned" || k == "claimed"),
            "{job} was run again: {kinds:?}"
        );
    }
    assert_eq!(
        fs::read_to_string(sandbox.path("runs")).expect("runs"),
        "run\n"
    );
    assert_eq!(
        fs::read_to_string(sandbox.path("pct.runs")).expect("runs"),
        "run\n"
    );
    // A human decides: acknowledged, it is due again, and the watcher may restart it.
    let acked = sandbox.mihari(&[
        "ack",
        "tqdm70",
        "--reason",
        "the source had only 70 items today",
        "--yes",
    ]);
    assert_eq!(acked.status.code(), Some(0), "{}", text(&acked));
    let job = sandbox.job("tqdm70");
    assert_judged(&job, "SHOULD_BE_RUNNING", "RESTART".into());
}

#[test]
fn a_manifest_pipeline_whose_publish_phase_failed_is_red_naming_the_phase() {
    let python = tool(PYTHON);
    let pipeline = "import json, datetime, os\nopen('runs', 'a').write('run\\n')\n\
                    result = 'failed' if os.path.exists('fail') else True\n\
                    m = {'run_id': 'run-1', 'current_phase': 'publish', 'phase_results': \
                    {'fetch': True, 'build': True, 'publish': result}, \
                    'updated_at': datetime.datetime.now().isoformat()}\n\
                    open('manifest.json', 'w').write(json.dumps(m))\n\
                    print('publish: 403 from the bucket')\n";
    let sandbox = Sandbox::new(&format!(
        "  - id: pipeline\n    lock: p.lock\n    log: p.log\n    manifest: manifest.json\n    \
         should_run_when: [not_succeeded]\n{AUTO}    restart:\n      \
         command: [{python}, -c, {pipeline:?}]\n"
    ));
    sandbox.write("fail", "");
    let ran = sandbox.mihari(&["run", "pipeline"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let (code, jobs) = sandbox.check();
    let job = &jobs[0];
    assert_ne!(job["state"], "COMPLETE", "{job:#}");
    assert_eq!(job["bucket"], "RED", "{job:#}");
    assert!(reasons(job).contains("phase 'publish' failed"), "{job:#}");
    assert_eq!(code, 2);
    let pass = sandbox.mihari(&["watch", "--once", "--interval", "300"]);
    assert_eq!(pass.status.code(), Some(2), "{}", text(&pass));
    assert!(
        !sandbox.kinds_of("pipeline").iter().any(|k| k == "spawned"),
        "the watcher ran it again"
    );

    // Acknowledged: no longer RED, and still not called COMPLETE while the phase says failed.
    let acked = sandbox.mihari(&[
        "ack",
        "pipeline",
        "--reason",
        "bucket permissions fixed by hand",
        "--yes",
    ]);
    assert_eq!(acked.status.code(), Some(0), "{}", text(&acked));
    let job = sandbox.job("pipeline");
    assert_judged(&job, "NOT_RUNNING", Value::Null);
    assert!(reasons(&job).contains("phase 'publish' failed"), "{job:#}");

    // A run whose every phase succeeds is the end of it.
    fs::remove_file(sandbox.path("fail")).expect("fixed");
    let ran = sandbox.mihari(&["run", "pipeline"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let (code, jobs) = sandbox.check();
    assert_judged(&jobs[0], "COMPLETE", Value::Null);
    assert_eq!(code, 0);
}

#[test]
fn a_restart_whose_command_exits_4_at_once_has_failed_and_is_red() {
    // One sandbox each: the first one's RED would hold the second one's dispatch.
    for (command, words) in [
        (
            r#"[sh, -c, 'echo "unknown flag --resum" >&2; exit 4']"#,
            "exited 4 within ",
        ),
        ("[sh, -c, 'kill -TERM $$']", "was killed by SIGTERM within "),
    ] {
        let sandbox = Sandbox::new(&format!(
            "  - id: job\n    lock: j.lock\n    log: j.log\n    \
             should_run_when: [resource_free]\n    restart:\n      command: {command}\n"
        ));
        let restarted = sandbox.mihari(&["restart", "job", "--yes"]);
        let said = text(&restarted);
        assert_eq!(restarted.status.code(), Some(2), "{said}");
        assert!(said.contains("restart of 'job' failed"), "{said}");
        assert!(said.contains(words), "{said}");
        assert!(!said.contains("restarted"), "{said}");

        let events = sandbox.events_of("job");
        assert!(
            !events.iter().any(|(kind, _)| kind == "verified"),
            "{events:?}"
        );
        let failed = events
            .iter()
            .find(|(kind, _)| kind == "failed")
            .unwrap_or_else(|| panic!("no failed event: {events:?}"));
        assert!(failed.1.contains(words), "{events:?}");
        assert!(failed.1.contains(" s of its start"), "{events:?}");

        let (code, jobs) = sandbox.check();
        let row = &jobs[0];
        assert_eq!(row["bucket"], "RED", "{row:#}");
        assert!(
            reasons(row).contains("rule broken: the last restart failed"),
            "{row:#}"
        );
        assert!(reasons(row).contains(words), "{row:#}");
        assert_eq!(code, 2);
    }
}

//! The job-side commands run as the real binary: `mihari run` over real processes, locks,
//! logs and signals; `heartbeat`, `approval` and `claim` against a real state store; and
//! `events` reading it back. Every jobs file and state folder lives in its own temp dir.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mihari::store::{Actor, Event, EventFilter, Store};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A temp folder with a jobs file, its state folder and the files its jobs use.
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

    fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    /// Adds a job; `yaml` is its mapping, one key per line, without the leading dash.
    fn job(&mut self, yaml: &str) -> &mut Self {
        self.jobs.push(yaml.trim().to_string());
        self
    }

    /// A job `id` that runs `command` (YAML flow list) under `id.lock`, logging to `id.log`.
    fn simple_job(&mut self, id: &str, command: &str) -> &mut Self {
        let yaml = format!(
            "id: {id}\nlock: {id}.lock\nlog: {id}.log\nworkspace: /data/{id}\n\
             should_run_when: [resource_free]\nrestart:\n  command: {command}"
        );
        self.job(&yaml)
    }

    fn config(&self) -> PathBuf {
        self.config_with_state(&self.state_dir())
    }

    fn config_with_state(&self, state_dir: &Path) -> PathBuf {
        let mut text = format!("settings:\n  state_dir: {}\njobs:\n", state_dir.display());
        for job in &self.jobs {
            for (i, line) in job.lines().enumerate() {
                text.push_str(if i == 0 { "  - " } else { "    " });
                text.push_str(line);
                text.push('\n');
            }
        }
        let path = self.path("jobs.yaml");
        fs::write(&path, text).expect("write jobs file");
        // The jobs file names commands that will run: only its owner may write it.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mihari"));
        command
            .arg("--config")
            .arg(self.config())
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Runs `mihari ARGS` to the end: (exit code, stdout, stderr).
    fn mihari(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.command(args).output().expect("mihari runs");
        outcome(output)
    }

    /// Starts `mihari run JOB` in the background.
    fn spawn_run(&self, job: &str) -> Running {
        let child = self
            .command(&["run", job])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mihari run starts");
        Running(Some(child))
    }

    fn store(&self) -> Store {
        Store::open(&self.state_dir(), Actor::Cli).expect("the state store opens")
    }

    fn events(&self) -> Vec<Event> {
        self.store()
            .events(&EventFilter::default())
            .expect("events read")
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.path(name)).unwrap_or_default()
    }
}

fn outcome(output: Output) -> (i32, String, String) {
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A background `mihari run`, killed if a test fails before it ends.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid() as i32), signal).expect("signal mihari run");
    }

    fn finish(mut self) -> (i32, String, String) {
        let child = self.0.take().expect("still running");
        outcome(child.wait_with_output().expect("mihari run ends"))
    }
}

impl Drop for Running {
    /// A failed test must not leave its job behind: SIGTERM is forwarded to the job (which
    /// lives in its own process group), SIGKILL only if that is not enough.
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The PID of the job `mihari run` started (its only child).
fn job_pid_of(supervisor: u32) -> u32 {
    let children = fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
        .expect("children of mihari run");
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("one child")
}

/// Waits until `ready` holds, or fails the test after 20 s saying what it waited for.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`, read here independently of
/// mihari's own parser. Fields from 3 on follow the last ')' of the command name.
fn stat_field(pid: u32, n: usize) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process exists");
    let after_comm = &text[text.rfind(')').expect("a comm") + 1..];
    after_comm
        .split_whitespace()
        .nth(n - 3)
        .expect("the field")
        .to_string()
}

/// Field 22: the start time in clock ticks since boot.
fn stat_start_time(pid: u32) -> u64 {
    stat_field(pid, 22).parse().expect("a number")
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

/// No column of any event may hold a path or a piece of a command line.
fn assert_no_paths_or_commands(events: &[Event], forbidden: &[&str]) {
    for event in events {
        let columns = [
            Some(event.kind.as_str()),
            event.job.as_deref(),
            Some(event.session.as_str()),
            event.run.as_deref(),
            event.workspace_hash.as_deref(),
            event.route.as_deref(),
            event.key.as_deref(),
            event.reason.as_deref(),
        ];
        for column in columns.into_iter().flatten() {
            for word in forbidden {
                assert!(
                    !column.contains(word),
                    "event {} ({}) holds '{word}': {column:?}",
                    event.id,
                    event.kind
                );
            }
        }
    }
}

/// A job that says hello into its log and runs until SIGTERM, which it answers with exit 7.
const TERMINABLE: &str = r#"[sh, -c, 'echo hello-from-job; trap "echo got-term; exit 7" TERM; while true; do sleep 0.1; done']"#;

#[test]
fn the_lock_names_the_mihari_run_process_by_pid_and_start_time() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("trainer", TERMINABLE);
    let running = sandbox.spawn_run("trainer");
    let lock_path = sandbox.path("trainer.lock");
    wait_for("the lock's JSON", || {
        serde_json::from_str::<Value>(&sandbox.read("trainer.lock")).is_ok()
    });
    let lock: Value = serde_json::from_str(&sandbox.read("trainer.lock")).expect("JSON");
    assert_eq!(lock["pid"].as_u64(), Some(u64::from(running.pid())));
    assert_eq!(
        lock["start_time"].as_u64(),
        Some(stat_start_time(running.pid())),
        "start_time is field 22 of /proc/<pid>/stat"
    );
    assert!(
        lock["cmdline"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c echo hello-from-job")),
        "{lock}"
    );
    let run_id = lock["run_id"].as_str().expect("a run id").to_string();
    assert!(run_id.starts_with("trainer-"), "{run_id}");
    let mode = fs::metadata(&lock_path).expect("lock").permissions().mode() & 0o777;
    assert_eq!(mode & !0o644, 0, "lock mode {mode:o}");
    // The job runs in its own process group, led by itself, apart from mihari's. (The lock
    // is written just before the job starts: wait for the job's first words.)
    wait_for("the log's hello", || {
        sandbox.read("trainer.log").contains("hello-from-job")
    });
    let job_pid = job_pid_of(running.pid());
    assert_eq!(
        stat_field(job_pid, 5),
        job_pid.to_string(),
        "leads its own group"
    );
    assert_ne!(stat_field(running.pid(), 5), job_pid.to_string());
    // mihari's own parser reads what it wrote, and judges the holder alive.
    let holder = match mihari::probe::lock::read_lock(&lock_path) {
        mihari::core::Reading::Found(holder) => holder,
        other => panic!("lock not found: {other:?}"),
    };
    assert_eq!(
        holder.liveness,
        mihari::core::Liveness::Alive,
        "{}",
        holder.why
    );

    running.signal(Signal::SIGTERM);
    let (code, _, stderr) = running.finish();
    assert_eq!(code, 7, "{stderr}");
    let events = sandbox.events();
    assert!(events.iter().all(|e| e.run.as_deref() == Some(&run_id)));
}

#[test]
fn output_is_appended_to_the_log() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("writer", "[sh, -c, 'echo out-line; echo err-line >&2']");
    fs::write(sandbox.path("writer.log"), "an earlier run\n").expect("seed the log");
    let (code, stdout, stderr) = sandbox.mihari(&["run", "writer"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("out-line"), "went to the log, not stdout");
    assert_eq!(
        sandbox.read("writer.log"),
        "an earlier run\nout-line\nerr-line\n"
    );
    sandbox.mihari(&["run", "writer"]);
    assert_eq!(
        sandbox.read("writer.log"),
        "an earlier run\nout-line\nerr-line\nout-line\nerr-line\n"
    );
}

#[test]
fn a_second_run_of_the_same_job_exits_75_and_records_a_duplicate() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("trainer", TERMINABLE);
    let running = sandbox.spawn_run("trainer");
    wait_for("the log's hello", || {
        sandbox.read("trainer.log").contains("hello-from-job")
    });
    let pid = running.pid();

    let (code, _, stderr) = sandbox.mihari(&["run", "trainer"]);
    assert_eq!(code, 75, "{stderr}");
    assert!(
        stderr.contains(&format!("mihari: trainer already running (pid {pid})")),
        "{stderr}"
    );
    // The refused attempt neither started the command nor touched the holder's lock.
    assert_eq!(
        sandbox
            .read("trainer.log")
            .matches("hello-from-job")
            .count(),
        1
    );
    let lock: Value = serde_json::from_str(&sandbox.read("trainer.lock")).expect("JSON");
    assert_eq!(lock["pid"].as_u64(), Some(u64::from(pid)));

    let events = sandbox.events();
    let duplicate = events
        .iter()
        .find(|e| e.kind == "duplicate")
        .expect("a duplicate event");
    assert_eq!(duplicate.actor, Actor::Job);
    assert_eq!(duplicate.job.as_deref(), Some("trainer"));
    assert_eq!(
        duplicate.reason.as_deref(),
        Some(format!("already running (pid {pid})").as_str())
    );

    running.signal(Signal::SIGTERM);
    assert_eq!(running.finish().0, 7);
}

#[test]
fn sigterm_reaches_the_job_its_exit_is_recorded_and_the_lock_removed() {
    let mut sandbox = Sandbox::new();
    let log = sandbox.path("trainer.log");
    sandbox.simple_job("trainer", TERMINABLE);
    let running = sandbox.spawn_run("trainer");
    wait_for("the log's hello", || {
        sandbox.read("trainer.log").contains("hello-from-job")
    });

    running.signal(Signal::SIGTERM);
    let (code, _, stderr) = running.finish();
    assert_eq!(code, 7, "the job's own exit code: {stderr}");
    assert!(sandbox.read("trainer.log").contains("got-term"));
    assert!(
        !sandbox.path("trainer.lock").exists(),
        "the lock is removed"
    );

    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "exited"]);
    assert_eq!(events[1].reason.as_deref(), Some("exit 7"));
    assert_no_paths_or_commands(
        &events,
        &[
            &sandbox.dir.path().display().to_string(),
            &log.display().to_string(),
            "hello-from-job",
            "sh -c",
            "trap",
        ],
    );
}

/// SIGHUP is not forwarded: it opens the log again (tests/run_output.rs).
#[test]
fn sigint_is_forwarded_to_the_whole_process_group() {
    let mut sandbox = Sandbox::new();
    // The job's own child (`sleep`) is in its group too: it gets the signal as well.
    sandbox.simple_job(
        "job",
        r#"[sh, -c, 'echo ready; trap "echo got-INT; exit 9" INT; while true; do sleep 0.1; done']"#,
    );
    let running = sandbox.spawn_run("job");
    wait_for("ready", || sandbox.read("job.log").contains("ready"));
    running.signal(Signal::SIGINT);
    let (exit, _, stderr) = running.finish();
    assert_eq!(exit, 9, "{stderr}");
    assert!(sandbox.read("job.log").contains("got-INT"));
    assert!(!sandbox.path("job.lock").exists());
}

#[test]
fn a_job_killed_by_a_signal_exits_128_plus_the_signal() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("victim", "[sh, -c, 'kill -KILL $$']");
    let (code, _, stderr) = sandbox.mihari(&["run", "victim"]);
    assert_eq!(code, 128 + 9, "{stderr}");
    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "exited"]);
    assert_eq!(events[1].reason.as_deref(), Some("killed by SIGKILL"));
}

#[test]
fn a_normal_exit_removes_the_lock_and_records_started_and_exited() {
    let mut sandbox = Sandbox::new();
    sandbox
        .simple_job("ok", "[sh, -c, 'echo done']")
        .simple_job("three", "[sh, -c, 'exit 3']");
    let (code, _, stderr) = sandbox.mihari(&["run", "ok"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!sandbox.path("ok.lock").exists());
    let (code, _, stderr) = sandbox.mihari(&["run", "three"]);
    assert_eq!(code, 3, "the job's own code: {stderr}");
    assert!(!sandbox.path("three.lock").exists());

    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "exited", "started", "exited"]);
    let (started, exited) = (&events[0], &events[1]);
    assert_eq!(started.actor, Actor::Job);
    assert_eq!(started.job.as_deref(), Some("ok"));
    assert!(
        started
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("pid ")),
        "{started:?}"
    );
    assert_eq!(
        started.workspace_hash.as_deref(),
        Some(mihari::store::workspace_hash(Path::new("/data/ok")).as_str())
    );
    assert_eq!(started.route, None);
    assert_eq!(exited.reason.as_deref(), Some("exit 0"));
    assert_eq!(exited.run, started.run);
    assert_eq!(events[3].reason.as_deref(), Some("exit 3"));
    assert_no_paths_or_commands(
        &events,
        &[
            &sandbox.dir.path().display().to_string(),
            "echo done",
            "/data/ok",
        ],
    );
}

#[test]
fn a_route_and_a_run_id_are_used_and_recorded() {
    let mut sandbox = Sandbox::new();
    sandbox.job(
        "id: routed\nlock: routed.lock\nlog: routed.log\nshould_run_when: [resource_free]\n\
         restart:\n  command: [sh, -c, 'echo from-default']\n  routes:\n    \
         - { name: local, command: [sh, -c, 'echo from-local $MIHARI_RUN_ID'] }",
    );
    let (code, _, stderr) =
        sandbox.mihari(&["run", "routed", "--route", "local", "--run-id", "r-42"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(sandbox.read("routed.log"), "from-local r-42\n");
    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "exited"]);
    for event in &events {
        assert_eq!(event.run.as_deref(), Some("r-42"));
        assert_eq!(event.route.as_deref(), Some("local"));
    }

    let (code, _, stderr) = sandbox.mihari(&["run", "routed", "--route", "cloud"]);
    assert_eq!(code, 3);
    assert!(
        stderr.contains("no route 'cloud'") && stderr.contains("'local'"),
        "{stderr}"
    );
}

#[test]
fn a_command_not_found_is_failed_127_and_leaves_no_lock() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("ghost", "[no-such-command-for-mihari, --flag]");
    let (code, _, stderr) = sandbox.mihari(&["run", "ghost"]);
    assert_eq!(code, 127, "{stderr}");
    assert!(stderr.contains("no-such-command-for-mihari"), "{stderr}");
    assert!(!sandbox.path("ghost.lock").exists());
    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "failed"]);
    assert_eq!(
        events[1].reason.as_deref(),
        Some("cannot start: command not found")
    );
    assert_no_paths_or_commands(
        &events,
        &[&sandbox.dir.path().display().to_string(), "no-such-command"],
    );
}

#[test]
fn a_command_that_cannot_be_executed_is_failed_126() {
    let mut sandbox = Sandbox::new();
    let script = sandbox.path("not-executable.sh");
    fs::write(&script, "#!/bin/sh\necho never\n").expect("write script");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).expect("chmod");
    sandbox.simple_job("noexec", &format!("['{}']", script.display()));
    let (code, _, stderr) = sandbox.mihari(&["run", "noexec"]);
    assert_eq!(code, 126, "{stderr}");
    assert!(!sandbox.path("noexec.lock").exists());
    let events = sandbox.events();
    assert_eq!(kinds(&events), ["started", "failed"]);
    assert_no_paths_or_commands(&events, &["not-executable", "/tmp"]);
}

#[test]
fn a_job_outliving_its_killed_supervisor_still_holds_the_lock() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("orphan", TERMINABLE);
    let running = sandbox.spawn_run("orphan");
    wait_for("the log's hello", || {
        sandbox.read("orphan.log").contains("hello-from-job")
    });
    let supervisor = running.pid();
    let job = job_pid_of(supervisor);
    // SIGKILL cannot be forwarded: mihari run dies, the job (its own group) runs on.
    running.signal(Signal::SIGKILL);
    running.finish();
    let (code, _, stderr) = sandbox.mihari(&["run", "orphan"]);
    // Clean up before asserting, so a failure leaves nothing running.
    let _ = nix::sys::signal::killpg(Pid::from_raw(job as i32), Signal::SIGKILL);
    assert_eq!(
        code, 75,
        "the job inherited the flock: no twin starts: {stderr}"
    );
    assert!(
        stderr.contains(&format!("already running (pid {supervisor})"))
            && stderr.contains("still holds the lock"),
        "{stderr}"
    );
    assert_eq!(
        sandbox.read("orphan.log").matches("hello-from-job").count(),
        1
    );
}

#[test]
fn a_lock_taken_over_by_someone_else_is_left_in_place() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("trainer", TERMINABLE);
    let running = sandbox.spawn_run("trainer");
    wait_for("the log's hello", || {
        sandbox.read("trainer.log").contains("hello-from-job")
    });
    // Someone (an operator's script) rewrote the lock: it is no longer ours to remove.
    fs::write(sandbox.path("trainer.lock"), "{\"pid\": 1}\n").expect("rewrite the lock");
    running.signal(Signal::SIGTERM);
    let (code, _, stderr) = running.finish();
    assert_eq!(code, 7);
    assert!(stderr.contains("no longer names pid"), "{stderr}");
    assert_eq!(sandbox.read("trainer.lock"), "{\"pid\": 1}\n");
}

#[test]
fn a_stale_lock_left_by_a_dead_run_is_taken_over() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("again", "[sh, -c, 'echo ran']");
    // A run that was killed outright leaves its lock; nobody holds the flock any more.
    fs::write(
        sandbox.path("again.lock"),
        "{\"pid\": 4194304, \"start_time\": 1}\n",
    )
    .expect("stale lock");
    let (code, _, stderr) = sandbox.mihari(&["run", "again"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(sandbox.read("again.log"), "ran\n");
    assert!(!sandbox.path("again.lock").exists());
}

#[test]
fn a_job_without_lock_or_command_is_refused_with_exit_3() {
    let mut sandbox = Sandbox::new();
    sandbox
        .job("id: nolock\nlog: a.log\nresource_lock: r.lock\nshould_run_when: [resource_free]\nrestart: {command: [echo]}")
        .job("id: nocommand\nlock: b.lock\nlog: b.log\nshould_run_when: [resource_free]");
    let rows = [
        ("nolock", "declares no 'lock'"),
        ("nocommand", "declares no 'restart.command'"),
        ("unknown", "no job 'unknown'"),
    ];
    for (job, expected) in rows {
        let (code, _, stderr) = sandbox.mihari(&["run", job]);
        assert_eq!(code, 3, "{job}: {stderr}");
        assert!(stderr.contains(expected), "{job}: {stderr}");
    }
    assert!(!sandbox.path("b.lock").exists());
}

#[test]
fn the_job_runs_even_when_the_state_store_cannot_be_opened() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("hardy", "[sh, -c, 'echo still-ran']");
    let not_a_folder = sandbox.path("state-is-a-file");
    fs::write(&not_a_folder, "").expect("write");
    sandbox.config_with_state(&not_a_folder);
    let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
        .arg("--config")
        .arg(sandbox.path("jobs.yaml"))
        .args(["run", "hardy"])
        .output()
        .expect("runs");
    let (code, _, stderr) = outcome(output);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning"), "{stderr}");
    assert_eq!(sandbox.read("hardy.log"), "still-ran\n");
    assert!(!sandbox.path("hardy.lock").exists());
}

#[test]
fn heartbeat_stores_what_it_is_given() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("trainer", "[true]");
    let before = Utc::now();
    let (code, _, stderr) = sandbox.mihari(&[
        "heartbeat",
        "trainer",
        "--done",
        "120",
        "--total",
        "5121",
        "--position",
        "shard \u{1b}[31m120",
        "--note",
        "fine\u{7}",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let beat = sandbox
        .store()
        .last_heartbeat("trainer")
        .expect("reads")
        .expect("a heartbeat");
    assert_eq!(beat.done, Some(120));
    assert_eq!(beat.total, Some(5121));
    assert_eq!(beat.position.as_deref(), Some("shard 120"));
    assert_eq!(beat.note.as_deref(), Some("fine\u{2407}"));
    assert!(beat.at >= before - chrono::TimeDelta::milliseconds(1) && beat.at <= Utc::now());

    let (code, _, stderr) = sandbox.mihari(&["heartbeat", "trainer"]);
    assert_eq!(code, 0, "{stderr}");
    let beat = sandbox
        .store()
        .last_heartbeat("trainer")
        .expect("reads")
        .expect("one");
    assert_eq!((beat.done, beat.total, beat.position), (None, None, None));

    let (code, _, stderr) = sandbox.mihari(&["heartbeat", "nobody"]);
    assert_eq!(code, 3);
    assert!(
        stderr.contains("no job 'nobody'") && stderr.contains("'trainer'"),
        "{stderr}"
    );
}

/// Round three, item 9: heartbeats were never pruned (three million made every `check` read
/// all of them) and `--note` had no bound (a 120 KB note was stored whole, every second). A
/// job keeps its newest 1,440; each heartbeat prunes a bounded number of older ones; a note is
/// cut at 1024 bytes and said on stderr; the newest is what `check` shows.
#[test]
fn heartbeats_are_pruned_to_the_newest_and_a_long_note_is_cut() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("trainer", "[true]");
    let (code, _, stderr) = sandbox.mihari(&["heartbeat", "trainer", "--done", "0"]);
    assert_eq!(code, 0, "{stderr}");
    // Twelve thousand older heartbeats, written by sqlite3 itself, as a store that grew
    // before heartbeats were pruned holds them.
    let db = sandbox.state_dir().join("mihari.sqlite");
    let seeded = Command::new("sqlite3")
        .arg(&db)
        .arg(
            "INSERT INTO heartbeats (job, at_ms, done) \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12000) \
             SELECT 'trainer', 1700000000000 + i * 1000, i FROM n;",
        )
        .output()
        .expect("sqlite3 runs (apt-get install -y sqlite3)");
    assert!(
        seeded.status.success(),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    assert_eq!(sandbox.store().heartbeats_kept("trainer").unwrap(), 12_001);
    let note = "x".repeat(120 * 1024);
    for done in [12_001, 12_002, 12_003] {
        let (code, _, stderr) = sandbox.mihari(&[
            "heartbeat",
            "trainer",
            "--done",
            &done.to_string(),
            "--note",
            &note,
        ]);
        assert_eq!(code, 0, "the progress is recorded: {stderr}");
        assert!(
            stderr.contains("--note is longer than the 1024 bytes kept: it was cut there"),
            "{stderr}"
        );
    }
    assert_eq!(
        sandbox.store().heartbeats_kept("trainer").unwrap(),
        1440,
        "the newest 1,440 are kept"
    );
    let beat = sandbox
        .store()
        .last_heartbeat("trainer")
        .expect("reads")
        .expect("one");
    assert_eq!(beat.done, Some(12_003));
    let kept = beat.note.expect("the note");
    assert!(kept.len() <= 1024 && kept.ends_with('…'), "{}", kept.len());
    let (_, json, _) = sandbox.mihari(&["check", "--json"]);
    let report: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(report["jobs"][0]["done"], 12_003, "{report}");
}

fn approval_lines(sandbox: &Sandbox, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["approval", "list", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = sandbox.mihari(&all);
    assert_eq!(code, 0, "{stderr}");
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn an_approval_request_is_pending_once_then_approved() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("cleaner", "[true]");
    let request = [
        "approval",
        "request",
        "cleaner",
        "--step",
        "delete",
        "--key",
        "k-1",
        "--summary",
        "delete 12 old shards",
    ];
    let (code, stdout, stderr) = sandbox.mihari(&request);
    assert_eq!(code, 10, "{stderr}");
    assert!(stdout.starts_with("pending"), "{stdout}");
    let (code, stdout, _) = sandbox.mihari(&request);
    assert_eq!(code, 10, "{stdout}");

    let listed = approval_lines(&sandbox, &[]);
    assert_eq!(listed.len(), 1, "the same key makes one entry: {listed:?}");
    let entry = &listed[0];
    assert_eq!(entry["key"], "k-1");
    assert_eq!(entry["job"], "cleaner");
    assert_eq!(entry["step"], "delete");
    assert_eq!(entry["summary"], "delete 12 old shards");
    assert_eq!(entry["state"], "pending");
    assert_eq!(entry["decided"], Value::Null);
    assert!(
        entry["requested"]
            .as_str()
            .is_some_and(|t| DateTime::parse_from_rfc3339(t).is_ok())
    );

    let (code, table, _) = sandbox.mihari(&["approval", "list"]);
    assert_eq!(code, 0);
    for word in [
        "KEY",
        "AGE",
        "k-1",
        "cleaner",
        "delete",
        "pending",
        "delete 12 old shards",
    ] {
        assert!(table.contains(word), "{word} in {table}");
    }
    let requested = sandbox
        .events()
        .into_iter()
        .filter(|e| e.kind == "approval-requested")
        .count();
    assert_eq!(requested, 1);

    let mut operator = Store::open(&sandbox.state_dir(), Actor::Operator).expect("opens");
    operator
        .decide_approval("k-1", true, None)
        .expect("decides")
        .expect("was pending");
    let (code, stdout, stderr) = sandbox.mihari(&request);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("approved"), "{stdout}");
    assert!(approval_lines(&sandbox, &[]).is_empty(), "nothing pending");
    assert_eq!(approval_lines(&sandbox, &["--all"]).len(), 1);
}

#[test]
fn a_denied_request_exits_11_with_the_reason() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("mailer", "[true]");
    let request = [
        "approval",
        "request",
        "mailer",
        "--step",
        "send",
        "--key",
        "mail-7",
        "--summary",
        "send 3000 mails",
    ];
    assert_eq!(sandbox.mihari(&request).0, 10);
    let mut operator = Store::open(&sandbox.state_dir(), Actor::Operator).expect("opens");
    operator
        .decide_approval("mail-7", false, Some("the list is stale"))
        .expect("decides")
        .expect("was pending");
    let (code, stdout, _) = sandbox.mihari(&request);
    assert_eq!(code, 11);
    assert!(
        stdout.starts_with("denied") && stdout.contains("the list is stale"),
        "{stdout}"
    );
    let listed = approval_lines(&sandbox, &["--all"]);
    assert_eq!(listed[0]["state"], "denied");
    assert_eq!(listed[0]["reason"], "the list is stale");
    assert!(listed[0]["decided"].is_string());
}

#[test]
fn key_from_a_file_is_the_sha256_of_its_content() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("publisher", "[true]");
    let content = b"release notes v2\nwith a second line\n";
    let file = sandbox.path("release.txt");
    fs::write(&file, content).expect("write");
    let expected: String = Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let file_arg = file.display().to_string();
    let request = [
        "approval",
        "request",
        "publisher",
        "--step",
        "publish",
        "--key-from",
        &file_arg,
        "--summary",
        "publish v2",
    ];
    let (code, stdout, stderr) = sandbox.mihari(&request);
    assert_eq!(code, 10, "{stderr}");
    assert!(stdout.contains(&expected), "{stdout}");
    assert_eq!(sandbox.mihari(&request).0, 10);
    let listed = approval_lines(&sandbox, &[]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["key"], expected.as_str());

    // Other content asks another question.
    fs::write(&file, b"release notes v3\n").expect("write");
    assert_eq!(sandbox.mihari(&request).0, 10);
    assert_eq!(approval_lines(&sandbox, &[]).len(), 2);

    let missing = sandbox.path("missing.txt").display().to_string();
    let (code, _, stderr) = sandbox.mihari(&[
        "approval",
        "request",
        "publisher",
        "--step",
        "publish",
        "--key-from",
        &missing,
        "--summary",
        "x",
    ]);
    assert_eq!(code, 3);
    assert!(stderr.contains("missing.txt"), "{stderr}");
}

/// Runs `mihari ARGS` with a guard: a command that hangs (the bug this guards against) is
/// killed after 30 s and reported, instead of hanging the test suite.
fn mihari_guarded(sandbox: &Sandbox, args: &[&str]) -> (i32, String, String) {
    let mut child = sandbox
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mihari runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mihari {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outcome(child.wait_with_output().expect("output"))
}

/// Approval inputs that never end or are absurdly large (issue 9, item 15): `--key-from
/// /dev/zero` read forever, `--key-from` a named pipe with no writer waited forever, and a
/// 120 KB summary was stored and printed whole. Each is now refused at once with exit 3 (a
/// refused argument), says what to do, and stores nothing.
#[test]
fn approval_inputs_that_never_end_or_are_too_large_are_refused_and_store_nothing() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("publisher", "[true]");
    let fifo = sandbox.path("key.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let huge = sandbox.path("huge.bin");
    fs::File::create(&huge)
        .and_then(|f| f.set_len(65 * 1024 * 1024))
        .expect("a sparse 65 MiB file");
    let folder = sandbox.path("a-folder");
    fs::create_dir(&folder).expect("mkdir");
    let long_summary = "x".repeat(120 * 1024);
    let long_step = "s".repeat(10 * 1024);
    let (fifo, huge, folder) = (
        fifo.display().to_string(),
        huge.display().to_string(),
        folder.display().to_string(),
    );
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--key-from", "/dev/zero", "--summary", "s"],
            &["'/dev/zero'", "a device", "regular file"],
        ),
        (
            &["--key-from", &fifo, "--summary", "s"],
            &["key.fifo", "a named pipe", "regular file"],
        ),
        (
            &["--key-from", &folder, "--summary", "s"],
            &["a-folder", "a directory", "regular file"],
        ),
        (
            &["--key-from", &huge, "--summary", "s"],
            &["huge.bin", "64 MiB"],
        ),
        (
            &["--key", "k-1", "--summary", &long_summary],
            &[
                "--summary",
                "4096 bytes",
                "122880",
                "put the detail in a file",
            ],
        ),
        (
            &["--key", "k-1", "--summary", "s", "--step", &long_step],
            &["--step", "128 bytes"],
        ),
    ];
    for (extra, phrases) in cases {
        let mut args = vec!["approval", "request", "publisher"];
        if !extra.contains(&"--step") {
            args.extend(["--step", "publish"]);
        }
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = mihari_guarded(&sandbox, &args);
        let shown: Vec<&str> = extra.iter().map(|a| &a[..a.len().min(40)]).collect();
        let context = format!("{shown:?}: exit {code}\nstdout: {stdout}\nstderr: {stderr}");
        assert_eq!(code, 3, "{context}");
        for phrase in phrases {
            assert!(stderr.contains(phrase), "missing {phrase:?}: {context}");
        }
        assert!(stdout.is_empty(), "{context}");
        assert!(
            stderr.len() < 1024,
            "the refusal does not echo the input: {context}"
        );
        assert!(
            sandbox
                .store()
                .approvals(false)
                .expect("approvals")
                .is_empty(),
            "{context}"
        );
    }
    // At the limits, the request is taken.
    let limit_summary = "y".repeat(4096);
    let (code, _, stderr) = mihari_guarded(
        &sandbox,
        &[
            "approval",
            "request",
            "publisher",
            "--step",
            "publish",
            "--key",
            "k-2",
            "--summary",
            &limit_summary,
        ],
    );
    assert_eq!(code, 10, "{stderr}");
}

#[test]
fn claim_exits_0_once_then_1_and_records_the_duplicate() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("worker", "[true]");
    let (code, _, stderr) = sandbox.mihari(&["claim", "spawn-abc", "--job", "worker"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        sandbox.mihari(&["claim", "spawn-abc", "--job", "worker"]).0,
        1
    );
    assert_eq!(sandbox.mihari(&["claim", "spawn-abc"]).0, 1);
    let events = sandbox.events();
    assert_eq!(kinds(&events), ["claimed", "duplicate", "duplicate"]);
    assert!(events.iter().all(|e| e.key.as_deref() == Some("spawn-abc")));
    assert!(events.iter().all(|e| e.actor == Actor::Cli));
}

#[test]
fn claim_exits_3_when_the_store_cannot_be_opened() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("worker", "[true]");
    let not_a_folder = sandbox.path("state-is-a-file");
    fs::write(&not_a_folder, "").expect("write");
    let config = sandbox.config_with_state(&not_a_folder);
    let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
        .arg("--config")
        .arg(config)
        .args(["claim", "k"])
        .output()
        .expect("runs");
    let (code, _, stderr) = outcome(output);
    assert_eq!(code, 3);
    assert!(stderr.contains("state-is-a-file"), "{stderr}");
}

fn event_lines(sandbox: &Sandbox, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["events", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = sandbox.mihari(&all);
    assert_eq!(code, 0, "{stderr}");
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn events_print_json_lines_and_filter_by_job_kind_and_since() {
    let mut sandbox = Sandbox::new();
    sandbox
        .simple_job("alpha", "[sh, -c, 'exit 0']")
        .simple_job("beta", "[sh, -c, 'exit 0']");
    assert_eq!(sandbox.mihari(&["run", "alpha", "--run-id", "a-1"]).0, 0);
    assert_eq!(sandbox.mihari(&["claim", "k-alpha", "--job", "alpha"]).0, 0);
    std::thread::sleep(Duration::from_millis(20));
    let between = Utc::now();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(sandbox.mihari(&["run", "beta"]).0, 0);

    let all = event_lines(&sandbox, &[]);
    assert_eq!(all.len(), 5, "{all:?}");
    for line in &all {
        for field in [
            "id",
            "at",
            "kind",
            "job",
            "actor",
            "session",
            "run",
            "workspace_hash",
            "route",
            "key",
            "reason",
        ] {
            assert!(line.get(field).is_some(), "no '{field}' in {line}");
        }
        let at = line["at"].as_str().expect("at is text");
        assert!(DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
        assert!(
            at.ends_with('Z') && at.len() == 24,
            "UTC with milliseconds: {at}"
        );
    }
    assert_eq!(all[0]["kind"], "started");
    assert_eq!(all[0]["run"], "a-1");
    assert_eq!(all[0]["actor"], "job");
    assert_eq!(all[2]["kind"], "claimed");
    assert_eq!(all[2]["key"], "k-alpha");
    assert_eq!(all[2]["actor"], "cli");
    let ids: Vec<i64> = all.iter().filter_map(|l| l["id"].as_i64()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");

    let alpha = event_lines(&sandbox, &["--job", "alpha"]);
    assert_eq!(alpha.len(), 3);
    assert!(alpha.iter().all(|l| l["job"] == "alpha"));
    let exited = event_lines(&sandbox, &["--kind", "exited"]);
    assert_eq!(exited.len(), 2);
    assert!(exited.iter().all(|l| l["kind"] == "exited"));
    let both = event_lines(&sandbox, &["--job", "beta", "--kind", "exited"]);
    assert_eq!(both.len(), 1);

    let since = between.to_rfc3339();
    let recent = event_lines(&sandbox, &["--since", &since]);
    assert_eq!(recent.len(), 2, "{recent:?}");
    assert!(recent.iter().all(|l| l["job"] == "beta"));
    assert_eq!(event_lines(&sandbox, &["--since", "1h"]).len(), 5);
    assert_eq!(
        event_lines(&sandbox, &["--since", "2099-01-01T00:00:00Z"]).len(),
        0
    );

    let (code, table, _) = sandbox.mihari(&["events", "--job", "alpha"]);
    assert_eq!(code, 0);
    let header = table.lines().next().expect("a header");
    for column in ["TIME", "KIND", "JOB", "ACTOR", "RUN", "ROUTE", "REASON"] {
        assert!(header.contains(column), "{header}");
    }
    assert_eq!(table.lines().count(), 4, "{table}");
}

#[test]
fn events_refuse_a_bad_since_or_kind_with_exit_3() {
    let mut sandbox = Sandbox::new();
    sandbox.simple_job("alpha", "[true]");
    for bad in ["yesterday", "10w", "-5m", "1.5h", "2025-13-01T00:00:00Z"] {
        let arg = format!("--since={bad}");
        let (code, stdout, stderr) = sandbox.mihari(&["events", &arg]);
        assert_eq!(code, 3, "{bad}");
        assert!(stdout.is_empty());
        assert!(stderr.contains(&format!("'{bad}'")), "{stderr}");
        assert!(
            stderr.contains("RFC 3339") && stderr.contains("30m"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = sandbox.mihari(&["events", "--kind", "explode"]);
    assert_eq!(code, 3);
    assert!(stderr.contains("'explode'"), "{stderr}");
    assert!(
        stderr.contains("started") && stderr.contains("duplicate"),
        "{stderr}"
    );
}

//! `mihari check` run as a real binary over real situations: real processes (alive, killed,
//! frozen with SIGSTOP, a PID that looks reused), real files with set modification times, a
//! real SQLite database, and real checks. Every state and bucket of SPEC §4 appears.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use assert_cmd::cargo::CommandCargoExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// A `sleep` process that is killed and reaped when dropped.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Self {
        Sleeper(
            Command::new("sleep")
                .arg("120")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep runs"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn start_ticks(&self) -> u64 {
        mihari::probe::proc::start_ticks(self.pid()).expect("start ticks of a live process")
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A folder of situations and the jobs file that declares them.
struct Situation {
    dir: tempfile::TempDir,
    jobs: Vec<String>,
    keep: Vec<Sleeper>,
}

impl Situation {
    fn new() -> Self {
        Situation {
            dir: tempfile::tempdir().unwrap(),
            jobs: Vec::new(),
            keep: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path(name);
        fs::write(&path, content).unwrap();
        path
    }

    /// Writes a file and sets its modification time `secs_ago` seconds in the past.
    fn write_aged(&self, name: &str, content: &str, secs_ago: u64) -> PathBuf {
        let path = self.write(name, content);
        age(&path, secs_ago);
        path
    }

    fn job(&mut self, yaml: &str) {
        self.jobs.push(yaml.to_string());
    }

    fn config(&self) -> PathBuf {
        let mut text = format!(
            "settings:\n  state_dir: {}\njobs:\n",
            self.path("state").display()
        );
        if self.jobs.is_empty() {
            text = text.replace("jobs:\n", "jobs: []\n");
        }
        for job in &self.jobs {
            for (i, line) in job.trim().lines().enumerate() {
                text.push_str(if i == 0 { "  - " } else { "    " });
                text.push_str(line.strip_prefix("    ").unwrap_or(line));
                text.push('\n');
            }
        }
        self.write("jobs.yaml", &text)
    }

    fn check(&self, args: &[&str]) -> (i32, String, String) {
        let output = Command::cargo_bin("mihari")
            .unwrap()
            .arg("check")
            .args(args)
            .arg("--config")
            .arg(self.config())
            .output()
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn check_json(&self) -> (i32, Value) {
        let (code, stdout, stderr) = self.check(&["--json"]);
        let value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
        (code, value)
    }
}

fn age(path: &Path, secs_ago: u64) {
    let when = SystemTime::now() - Duration::from_secs(secs_ago);
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

fn lines(n: usize) -> String {
    (0..n).map(|i| format!("{{\"i\":{i}}}\n")).collect()
}

fn by_id(report: &Value) -> BTreeMap<String, Value> {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap().to_string(), j.clone()))
        .collect()
}

/// Builds one situation for every state and bucket, with real processes.
fn every_state() -> Situation {
    let mut s = Situation::new();

    // RUNNING: a live holder (JSON lock with its real start time), a fresh log, and the
    // seed's coarse progress file 303 s old with stall_sec 300.
    let running = Sleeper::start();
    s.write(
        "running.lock",
        &format!(
            "{{\"pid\":{},\"start_time\":{}}}",
            running.pid(),
            running.start_ticks()
        ),
    );
    s.write_aged("running.log", "fetched 30\n", 10);
    s.write_aged("running.progress", &lines(1200), 303);
    s.job(&format!(
        "id: running\n    lock: {}\n    log: {}\n    progress_file: {}\n    stall_sec: 300\n    \
         expected_total: 5121\n    should_run_when: [not_complete]",
        s.path("running.lock").display(),
        s.path("running.log").display(),
        s.path("running.progress").display()
    ));

    // STALLED: alive but frozen with SIGSTOP, nothing written for 1000 s.
    let frozen = Sleeper::start();
    kill(Pid::from_raw(frozen.pid() as i32), Signal::SIGSTOP).unwrap();
    s.write("frozen.lock", &format!("{}\n", frozen.pid()));
    s.write_aged("frozen.log", "epoch 3\n", 1000);
    s.write_aged("frozen.progress", &lines(10), 1000);
    s.job(&format!(
        "id: frozen\n    lock: {}\n    log: {}\n    progress_file: {}\n    stall_sec: 300\n    \
         expected_total: 100\n    should_run_when: [not_complete]",
        s.path("frozen.lock").display(),
        s.path("frozen.log").display(),
        s.path("frozen.progress").display()
    ));

    // DEAD_LOCK_STALE: the holder was killed; its lock stays.
    let mut dead = Sleeper::start();
    let dead_pid = dead.pid();
    dead.0.kill().unwrap();
    dead.0.wait().unwrap();
    s.write("dead.lock", &format!("{dead_pid}\n"));
    s.write_aged("dead.progress", &lines(5), 60);
    s.job(&format!(
        "id: dead\n    lock: {}\n    progress_file: {}\n    expected_total: 100\n    \
         should_run_when: [not_complete]",
        s.path("dead.lock").display(),
        s.path("dead.progress").display()
    ));

    // DEAD_LOCK_STALE by PID reuse: a live process whose start time differs from the lock's.
    let reused = Sleeper::start();
    s.write(
        "reused.lock",
        &format!(
            "{{\"pid\":{},\"start_time\":{}}}",
            reused.pid(),
            reused.start_ticks().saturating_sub(500)
        ),
    );
    s.write_aged("reused.log", "x\n", 5);
    s.job(&format!(
        "id: reused\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]",
        s.path("reused.lock").display(),
        s.path("reused.log").display()
    ));

    // DEAD_LOCK_STALE by PID reuse, bare PID: the process started after the lock was written.
    let late = Sleeper::start();
    let late_lock = s.write("late.lock", &format!("{}\n", late.pid()));
    age(&late_lock, 3600);
    s.write_aged("late.log", "x\n", 5);
    s.job(&format!(
        "id: late\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]",
        late_lock.display(),
        s.path("late.log").display()
    ));

    // UNKNOWN: a lock nobody can parse.
    s.write("mystery.lock", "held by the nightly backup\n");
    s.write_aged("mystery.log", "x\n", 5);
    s.job(&format!(
        "id: mystery\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]",
        s.path("mystery.lock").display(),
        s.path("mystery.log").display()
    ));

    // UNKNOWN with a fault: alive, old log, and the progress file is a folder.
    let faulty = Sleeper::start();
    s.write("faulty.lock", &format!("{}\n", faulty.pid()));
    s.write_aged("faulty.log", "x\n", 1000);
    fs::create_dir(s.path("faulty.progress")).unwrap();
    s.job(&format!(
        "id: faulty\n    lock: {}\n    log: {}\n    progress_file: {}\n    stall_sec: 300\n    \
         expected_total: 100\n    should_run_when: [not_complete]",
        s.path("faulty.lock").display(),
        s.path("faulty.log").display(),
        s.path("faulty.progress").display()
    ));

    // SHOULD_BE_RUNNING, has run before: RESTART.
    s.write_aged("crashed.log", "Traceback...\n", 120);
    s.write_aged("crashed.progress", &lines(40), 120);
    s.job(&format!(
        "id: crashed\n    lock: {}\n    log: {}\n    progress_file: {}\n    expected_total: 100\n    \
         should_run_when: [not_complete, resource_free]",
        s.path("crashed.lock").display(),
        s.path("crashed.log").display(),
        s.path("crashed.progress").display()
    ));

    // SHOULD_BE_RUNNING, never started: DISPATCH (held, because something is RED).
    s.job(&format!(
        "id: fresh\n    lock: {}\n    log: {}\n    progress_file: {}\n    expected_total: 100\n    \
         should_run_when: [not_complete]",
        s.path("fresh.lock").display(),
        s.path("fresh.log").display(),
        s.path("fresh.progress").display()
    ));

    // COMPLETE.
    s.write_aged("complete.progress", &lines(100), 500);
    s.job(&format!(
        "id: complete\n    lock: {}\n    progress_file: {}\n    expected_total: 100\n    \
         should_run_when: [not_complete]",
        s.path("complete.lock").display(),
        s.path("complete.progress").display()
    ));

    // NOT_RUNNING: the resource it needs is held by a live process.
    s.job(&format!(
        "id: waiting\n    lock: {}\n    log: {}\n    resource_lock: {}\n    \
         should_run_when: [resource_free]",
        s.path("waiting.lock").display(),
        s.path("waiting.log").display(),
        s.path("running.lock").display()
    ));

    // RED: running, with a failing check.
    let red = Sleeper::start();
    s.write("red.lock", &format!("{}\n", red.pid()));
    s.write_aged("red.log", "ok\n", 2);
    s.job(&format!(
        "id: red\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n    checks:\n      \
         - name: no_gaps\n        command: [\"sh\", \"-c\", \"echo gap at shard 120; exit 1\"]",
        s.path("red.lock").display(),
        s.path("red.log").display()
    ));

    // RUNNING from a SQLite progress table written moments ago.
    let table = Sleeper::start();
    s.write("table.lock", &format!("{}\n", table.pid()));
    let db = rusqlite::Connection::open(s.path("table.sqlite")).unwrap();
    db.execute_batch(
        "CREATE TABLE progress (item INTEGER, updated_at TEXT);
         INSERT INTO progress VALUES (1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-900 seconds'));
         INSERT INTO progress VALUES (2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-4 seconds'));",
    )
    .unwrap();
    drop(db);
    s.job(&format!(
        "id: table\n    lock: {}\n    progress_table:\n      db: {}\n      table: progress\n      \
         time_column: updated_at\n    stall_sec: 60\n    expected_total: 10\n    \
         should_run_when: [not_complete]",
        s.path("table.lock").display(),
        s.path("table.sqlite").display()
    ));

    s.keep = vec![running, frozen, reused, late, faulty, red, table];
    s
}

#[test]
fn check_json_produces_every_state_and_bucket_on_real_situations() {
    let s = every_state();
    let (code, report) = s.check_json();
    let jobs = by_id(&report);
    let expect = [
        ("running", "RUNNING", Value::Null, "alive"),
        ("frozen", "STALLED", "STALE".into(), "alive"),
        ("dead", "DEAD_LOCK_STALE", "RESTART".into(), "dead"),
        ("reused", "DEAD_LOCK_STALE", "RESTART".into(), "dead"),
        ("late", "DEAD_LOCK_STALE", "RESTART".into(), "dead"),
        ("mystery", "UNKNOWN", "STALE".into(), "unknown"),
        ("faulty", "UNKNOWN", "STALE".into(), "alive"),
        ("crashed", "SHOULD_BE_RUNNING", "RESTART".into(), ""),
        ("fresh", "SHOULD_BE_RUNNING", "DISPATCH".into(), ""),
        ("complete", "COMPLETE", Value::Null, ""),
        ("waiting", "NOT_RUNNING", Value::Null, ""),
        ("red", "RUNNING", "RED".into(), "alive"),
        ("table", "RUNNING", Value::Null, "alive"),
    ];
    for (id, state, bucket, liveness) in expect {
        let job = &jobs[id];
        assert_eq!(job["state"], state, "{id}: {job:#}");
        assert_eq!(job["bucket"], bucket, "{id}: {job:#}");
        let want_liveness = if liveness.is_empty() {
            Value::Null
        } else {
            liveness.into()
        };
        assert_eq!(job["liveness"], want_liveness, "{id}: {job:#}");
    }
    assert_eq!(code, 2, "RESTART and RED are critical");
    assert_eq!(report["dispatch_held"], true);

    // The seed's case: the log, not the 303 s progress file, decides the age.
    assert_eq!(jobs["running"]["progress_source"], "log");
    assert!(jobs["running"]["progress_age_sec"].as_f64().unwrap() < 60.0);
    assert_eq!(jobs["running"]["done"], 1200);
    assert_eq!(jobs["running"]["expected_total"], 5121);
    // The progress table decides the table job's age.
    assert_eq!(jobs["table"]["progress_source"], "progress_table");
    assert_eq!(jobs["table"]["done"], 2);
    // A faulty source is named with the word fault and its error, and never taken as empty.
    let faulty = jobs["faulty"]["reasons"].to_string();
    assert!(faulty.contains("progress_file: fault"), "{faulty}");
    assert!(faulty.to_lowercase().contains("directory"), "{faulty}");
    assert_eq!(jobs["faulty"]["done"], Value::Null);
    // The reused PIDs are dead, never alive.
    assert!(
        jobs["reused"]["reasons"]
            .to_string()
            .contains("start time differs")
    );
    assert!(
        jobs["late"]["reasons"]
            .to_string()
            .contains("after the lock was written")
    );
    // The failing check is reported with its words.
    assert_eq!(jobs["red"]["checks"][0]["result"], "fail");
    assert!(
        jobs["red"]["checks"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("gap at shard 120")
    );
    assert!(
        jobs["fresh"]["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("held")
    );
}

#[test]
fn check_json_lists_jobs_in_action_list_order_with_the_spec_fields() {
    let s = every_state();
    let (_, report) = s.check_json();
    let keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 6, "{keys:?}");
    for key in [
        "generated_at",
        "jobs",
        "dispatch_held",
        "rules",
        "store",
        "watcher",
    ] {
        assert!(keys.contains(&key), "missing {key}");
    }
    assert_eq!(report["store"]["state"], "ok", "{:#}", report["store"]);
    let rank = |bucket: &Value| match bucket.as_str() {
        Some("RESTART") => 0,
        Some("RED") => 1,
        Some("STALE") => 2,
        Some("DISPATCH") => 3,
        _ => 4,
    };
    let ranks: Vec<i32> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| rank(&j["bucket"]))
        .collect();
    let mut sorted = ranks.clone();
    sorted.sort();
    assert_eq!(ranks, sorted, "jobs are not in action-list order");
    for job in report["jobs"].as_array().unwrap() {
        for field in [
            "id",
            "state",
            "bucket",
            "liveness",
            "pid",
            "progress_age_sec",
            "progress_source",
            "done",
            "expected_total",
            "reasons",
            "checks",
        ] {
            assert!(job.get(field).is_some(), "{} lacks {field}", job["id"]);
        }
    }
}

#[test]
fn check_table_is_readable_in_action_list_order() {
    let s = every_state();
    let (code, stdout, _) = s.check(&[]);
    assert_eq!(code, 2);
    let at = |heading: &str| {
        stdout
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading} in\n{stdout}"))
    };
    assert!(at("\nRESTART (4)") < at("\nRED (1)"));
    assert!(at("\nRED (1)") < at("\nSTALE (3)"));
    assert!(at("\nSTALE (3)") < at("\nDISPATCH (1)"));
    assert!(at("\nDISPATCH (1)") < at("\nNOTHING TO DO"));
    assert!(stdout.contains("dispatch held: RED: red"));
    assert!(stdout.contains("notice: no watcher yet"));
    assert!(stdout.contains("process gone"));
}

#[test]
fn exit_codes_follow_the_nagios_convention() {
    // 0: nothing needs a human.
    let mut ok = Situation::new();
    ok.write_aged("done.progress", &lines(3), 10);
    ok.job(&format!(
        "id: done\n    progress_file: {}\n    expected_total: 3\n    should_run_when: [not_complete]",
        ok.path("done.progress").display()
    ));
    assert_eq!(ok.check(&[]).0, 0);

    // 1: only STALE or DISPATCH.
    let mut warn = Situation::new();
    warn.write("m.lock", "garbage");
    warn.write_aged("m.log", "x\n", 3);
    warn.job(&format!(
        "id: m\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]",
        warn.path("m.lock").display(),
        warn.path("m.log").display()
    ));
    assert_eq!(warn.check(&[]).0, 1);

    // 0 for a jobs file with no jobs.
    let empty = Situation::new();
    let (code, stdout, _) = empty.check(&[]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("no jobs declared"));
}

#[test]
fn a_bad_jobs_file_exits_3_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.yaml");
    fs::write(
        &path,
        "jobs:\n  - id: collect\n    log: /tmp/x.log\n    should_run_when: [resource_free]\n    auto_restart: yes\n",
    )
    .unwrap();
    let output = Command::cargo_bin("mihari")
        .unwrap()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:5:19", path.display())),
        "{stderr}"
    );
    assert!(stderr.contains("'yes'"), "{stderr}");
}

#[test]
fn a_missing_jobs_file_exits_3_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::cargo_bin("mihari")
        .unwrap()
        .args(["check", "--config"])
        .arg(dir.path().join("nope.yaml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nope.yaml"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn the_config_is_found_through_mihari_config_then_xdg_config_home() {
    let mut s = Situation::new();
    s.write_aged("done.progress", &lines(3), 10);
    s.job(&format!(
        "id: via_env\n    progress_file: {}\n    expected_total: 3\n    should_run_when: [not_complete]",
        s.path("done.progress").display()
    ));
    let config = s.config();
    let run = |envs: &[(&str, &Path)]| {
        let mut cmd = Command::cargo_bin("mihari").unwrap();
        cmd.args(["check", "--json"]).env_remove("MIHARI_CONFIG");
        for (key, value) in envs {
            cmd.env(key, value);
        }
        cmd.output().unwrap()
    };
    let out = run(&[("MIHARI_CONFIG", &config)]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("via_env"));

    let xdg = tempfile::tempdir().unwrap();
    fs::create_dir(xdg.path().join("mihari")).unwrap();
    fs::copy(&config, xdg.path().join("mihari/jobs.yaml")).unwrap();
    let out = run(&[("XDG_CONFIG_HOME", xdg.path())]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("via_env"));
}

#[test]
fn check_prometheus_exposes_every_state_under_names_promtool_accepts() {
    let s = every_state();
    let (code, stdout, _) = s.check(&["--prometheus"]);
    assert_eq!(code, 2);
    for series in [
        "mihari_job_state{job_id=\"running\",state=\"RUNNING\"} 1",
        "mihari_job_state{job_id=\"dead\",state=\"DEAD_LOCK_STALE\"} 1",
        "mihari_job_attention{job_id=\"dead\",bucket=\"RESTART\"} 1",
        "mihari_job_attention{job_id=\"running\",bucket=\"RESTART\"} 0",
        "mihari_dispatch_held 1",
        "mihari_job_restarts_total{job_id=\"running\"} 0",
        "mihari_job_done_items{job_id=\"running\"} 1200",
        "mihari_job_expected_items{job_id=\"running\"} 5121",
    ] {
        assert!(stdout.contains(series), "'{series}' in:\n{stdout}");
    }
    assert!(stdout.contains("mihari_job_last_progress_timestamp_seconds{job_id=\"running\"} "));
    // Every state and bucket at once, as promtool sees it (Debian's `prometheus`).
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (apt-get install -y prometheus)");
    std::io::Write::write_all(
        &mut promtool.stdin.take().expect("stdin"),
        stdout.as_bytes(),
    )
    .expect("write");
    let said = promtool.wait_with_output().expect("promtool ends");
    assert!(
        said.status.success() && said.stdout.is_empty() && said.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&said.stdout),
        String::from_utf8_lossy(&said.stderr)
    );
}

#[test]
fn every_invalid_fixture_exits_3_naming_file_line_column_and_a_quoted_value() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for entry in fs::read_dir(&fixtures).unwrap() {
        let fixture = entry.unwrap().path();
        // A private copy: the refusal must be about the content, not the checkout's modes.
        let path = dir.path().join(fixture.file_name().unwrap());
        fs::copy(&fixture, &path).unwrap();
        let output = Command::cargo_bin("mihari")
            .unwrap()
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{}: {stderr}",
            path.display()
        );
        let rest = stderr
            .strip_prefix(&format!("mihari: {}:", path.display()))
            .unwrap_or_else(|| panic!("{}: no file name first: {stderr}", path.display()));
        let mut parts = rest.splitn(3, ':');
        let line = parts.next().unwrap_or("");
        let column = parts.next().unwrap_or("");
        assert!(
            line.parse::<u64>().is_ok() && column.parse::<u64>().is_ok(),
            "{}: no line:column: {stderr}",
            path.display()
        );
        assert!(
            stderr.matches('\'').count() >= 2,
            "{}: no quoted value: {stderr}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} fixtures");
}

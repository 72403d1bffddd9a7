//! `stall_sec: never` for services that are idle by nature: a real HTTP server that logs only
//! on requests stays RUNNING under `mihari run`, while the same server with `stall_sec: 1`
//! goes STALLED; the jobs file accepts a positive number or `never` and refuses anything
//! else with its file, line and column; with `stall_sec: never` a service watched by its holder
//! alone (`sleep infinity` under `mihari run`, a daemon with a pidfile and no log) needs no
//! progress source, and without it the refusal names `stall_sec: never` as the way out.
//!
//! The incident: an idle HTTP server went STALLED, and there was no way out of it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mihari::config::load_str;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
const PYTHON: &str = "/usr/bin/python3";

struct Servers {
    dir: tempfile::TempDir,
    runs: Vec<Child>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for run in &mut self.runs {
            // SIGTERM to `mihari run`, which forwards it to the server and removes the lock.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(run.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = run.wait();
        }
    }
}

impl Servers {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn check(&self) -> Vec<Value> {
        let output = Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(["check", "--json"])
            .output()
            .expect("mihari check");
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        report["jobs"].as_array().expect("jobs").clone()
    }
}

#[test]
fn an_idle_http_server_with_stall_sec_never_is_never_stalled() {
    assert!(Path::new(PYTHON).exists(), "this test needs {PYTHON}");
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    let server = format!("[{PYTHON}, -m, http.server, --bind, 127.0.0.1, '0']");
    let jobs = format!(
        "settings:\n  state_dir: state\njobs:\n\
         \x20 - id: web_never\n    lock: never.lock\n    log: never.log\n    stall_sec: never\n    \
         should_run_when: [resource_free]\n    restart:\n      command: {server}\n\
         \x20 - id: web_1s\n    lock: one.lock\n    log: one.log\n    stall_sec: 1\n    \
         should_run_when: [resource_free]\n    restart:\n      command: {server}\n"
    );
    let path = dir.path().join("jobs.yaml");
    fs::write(&path, jobs).expect("jobs");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut servers = Servers {
        dir,
        runs: Vec::new(),
    };
    for job in ["web_never", "web_1s"] {
        let run = Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .args(["run", job])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari run");
        servers.runs.push(run);
    }
    // Both held, then long enough for a 1 s stall_sec to pass with no request served.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !servers.check().iter().all(|j| j["liveness"] == "alive") {
        assert!(
            Instant::now() < deadline,
            "the servers never took their locks"
        );
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(2500));
    let jobs = servers.check();
    let never = jobs
        .iter()
        .find(|j| j["id"] == "web_never")
        .expect("web_never");
    let one = jobs.iter().find(|j| j["id"] == "web_1s").expect("web_1s");
    assert_eq!(one["state"], "STALLED", "{one:#}");
    assert_eq!(never["state"], "RUNNING", "{never:#}");
    assert_eq!(never["bucket"], Value::Null, "{never:#}");
    let words = never["reasons"][0].as_str().unwrap_or_default();
    assert!(words.contains("never STALLED"), "{never:#}");
}

#[test]
fn stall_sec_accepts_a_positive_number_or_never_and_refuses_anything_else() {
    let path = Path::new("/etc/mihari/jobs.yaml");
    let job = |stall: &str| {
        format!(
            "jobs:\n  - id: web\n    lock: /run/web.lock\n    log: /var/log/web.log\n    \
             stall_sec: {stall}\n    should_run_when: [resource_free]\n"
        )
    };
    let never = load_str(&job("never"), path).expect("never is accepted");
    assert!(never.jobs[0].stall_never);
    assert_eq!(never.jobs[0].stall_limit(), None);
    let seconds = load_str(&job("45"), path).expect("a number is accepted");
    assert_eq!(seconds.jobs[0].stall_limit(), Some(45));
    for (bad, quoted) in [
        ("sometimes", "'sometimes'"),
        ("Never", "'Never'"),
        ("\"\"", "''"),
        ("1.5", "'1.5'"),
        ("true", "'true'"),
    ] {
        let err = load_str(&job(bad), path).expect_err(bad);
        let shown = err.to_string();
        assert!(
            shown.starts_with("/etc/mihari/jobs.yaml:5:16: "),
            "{bad}: {shown}"
        );
        assert!(err.summary().contains(quoted), "{bad}: {shown}");
        assert!(
            err.summary().contains("at least 1, or never"),
            "{bad}: {shown}"
        );
    }
    for (bad, phrase) in [("0", "at least 1"), ("-5", "expected a whole number")] {
        let err = load_str(&job(bad), path).expect_err(bad);
        assert!(err.summary().contains(phrase), "{bad}: {err}");
    }
}

/// Waits (bounded) until every job of `servers` is held by a live process.
fn wait_until_held(servers: &Servers) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = servers.check();
        if jobs.iter().all(|j| j["liveness"] == "alive") {
            return jobs;
        }
        assert!(Instant::now() < deadline, "never held: {jobs:#?}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_service_watched_by_its_holder_alone_is_accepted_with_stall_sec_never() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    // A daemon that writes a pidfile and no log, started before mihari looks.
    let mut daemon = Command::new("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep");
    fs::write(dir.path().join("daemon.pid"), format!("{}\n", daemon.id())).expect("pidfile");
    let jobs = "settings:\n  state_dir: state\njobs:\n\
                \x20 - id: idle\n    lock: idle.lock\n    stall_sec: never\n    \
                should_run_when: [resource_free]\n    restart:\n      command: [sleep, infinity]\n\
                \x20 - id: daemon\n    lock: daemon.pid\n    stall_sec: never\n    \
                should_run_when: [resource_free]\n";
    let path = dir.path().join("jobs.yaml");
    fs::write(&path, jobs).expect("jobs");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    let run = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .args(["run", "idle"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mihari run");
    let servers = Servers {
        dir,
        runs: vec![run],
    };
    let jobs = wait_until_held(&servers);
    let _ = daemon.kill();
    let _ = daemon.wait();
    for job in &jobs {
        assert_eq!(job["state"], "RUNNING", "{job:#}");
        assert_eq!(job["bucket"], Value::Null, "{job:#}");
        let words = job["reasons"][0].as_str().unwrap_or_default();
        assert!(words.contains("watched by its holder alone"), "{job:#}");
        assert!(words.contains("never STALLED"), "{job:#}");
    }
}

#[test]
fn without_stall_sec_never_a_job_with_no_progress_source_is_refused_and_told_the_way_out() {
    let path = Path::new("/etc/mihari/jobs.yaml");
    let refused = |stall: &str, holder: &str| {
        load_str(
            &format!("jobs:\n  - id: web\n{holder}{stall}    should_run_when: [not_succeeded]\n"),
            path,
        )
        .expect_err("refused")
    };
    // With io_progress off, a lock is no progress source of its own.
    let err = refused("", "    lock: /run/web.pid\n    io_progress: false\n");
    assert!(
        err.to_string().starts_with("/etc/mihari/jobs.yaml:2:5: "),
        "{err}"
    );
    assert!(err.summary().contains("has no progress source"), "{err}");
    assert!(
        err.summary()
            .contains("stall_sec: never beside its lock or process"),
        "{err}"
    );
    // stall_sec: never with nothing to hold it: a holder is what is missing.
    let err = refused("    stall_sec: never\n", "");
    assert!(
        err.summary()
            .contains("with stall_sec: never a holder alone is enough"),
        "{err}"
    );
    // With a holder, accepted; by process as well as by lock.
    let process = load_str(
        "jobs:\n  - id: web\n    process: {cmdline: '^nginx: master'}\n    stall_sec: never\n    \
         should_run_when: [resource_free]\n",
        path,
    )
    .expect("a process holder is enough");
    assert!(process.jobs[0].stall_never);
}

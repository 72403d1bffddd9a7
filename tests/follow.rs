//! `mihari check --json --follow` on real processes and files: a line at once, a new one
//! when a holder dies (pidfd, not polling), none for a write that changes nothing shown, a
//! heartbeat line while nothing changes, and a clean end on SIGTERM or when its reader goes.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A job held by a live `sleep`, in a fresh folder.
fn sandbox() -> (tempfile::TempDir, Killed) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sleeper = Command::new("sleep").arg("300").spawn().expect("sleep");
    let ticks = mihari::probe::proc::start_ticks(sleeper.id()).expect("ticks");
    let root = dir.path();
    fs::write(
        root.join("w.lock"),
        format!("{{\"pid\": {}, \"start_time\": {ticks}}}", sleeper.id()),
    )
    .expect("lock");
    fs::write(root.join("w.log"), "step 1\n").expect("log");
    fs::write(
        root.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {r}/state\njobs:\n  - id: w\n    lock: {r}/w.lock\n\
             \x20   log: {r}/w.log\n    should_run_when: [not_succeeded]\n    stall_sec: 3600\n",
            r = root.display()
        ),
    )
    .expect("jobs");
    (dir, Killed(sleeper))
}

/// Starts the follower; its lines arrive on the receiver as they are printed.
fn follow(root: &Path, heartbeat_ms: Option<u64>) -> (Killed, mpsc::Receiver<Value>) {
    let mut command = Command::cargo_bin("mihari").expect("binary");
    command
        .arg("--config")
        .arg(root.join("jobs.yaml"))
        .args(["check", "--json", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(ms) = heartbeat_ms {
        command.env("MIHARI_FOLLOW_HEARTBEAT_MS", ms.to_string());
    }
    let mut child = command.spawn().expect("follow");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let value: Value = serde_json::from_str(&line).expect("each line is one JSON object");
            if send.send(value).is_err() {
                break;
            }
        }
    });
    (Killed(child), lines)
}

fn state(line: &Value) -> String {
    line["jobs"][0]["state"].as_str().unwrap_or("?").to_string()
}

#[test]
fn a_death_is_a_new_line_at_once_and_a_write_that_changes_nothing_shown_is_none() {
    let (dir, mut sleeper) = sandbox();
    let (mut follower, lines) = follow(dir.path(), None);
    let first = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("a first line");
    assert_eq!(state(&first), "RUNNING", "{first}");
    assert!(first["watcher"]["state"].is_string(), "{first}");

    // A write to the log: the age changes, nothing else shown does.
    fs::write(dir.path().join("w.log"), "step 1\nstep 2\n").expect("append");
    assert!(
        lines.recv_timeout(Duration::from_millis(1500)).is_err(),
        "no line for a change nothing shows"
    );

    let killed = Instant::now();
    sleeper.0.kill().expect("kill the holder");
    sleeper.0.wait().expect("reap");
    let next = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a line for the death");
    assert_eq!(state(&next), "DEAD_LOCK_STALE", "{next}");
    println!("death -> line in {:?}", killed.elapsed());

    kill(Pid::from_raw(follower.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let status = follower.0.wait().expect("the follower ends");
    assert_eq!(status.code(), Some(0), "SIGTERM ends the stream cleanly");
}

#[test]
fn the_first_line_already_holds_the_checks_results() {
    let (dir, _sleeper) = sandbox();
    let jobs = dir.path().join("jobs.yaml");
    let text = fs::read_to_string(&jobs).expect("read")
        + "    checks:\n      - name: gaps\n        command: [\"sh\", \"-c\", \"exit 1\"]\n";
    fs::write(&jobs, text).expect("write");
    let (_follower, lines) = follow(dir.path(), None);
    let first = lines.recv_timeout(Duration::from_secs(20)).expect("first");
    assert_eq!(first["jobs"][0]["bucket"], "RED", "{first}");
    assert_eq!(first["dispatch_held"], true, "{first}");
}

#[test]
fn a_quiet_host_still_gets_a_line_every_heartbeat() {
    let (dir, _sleeper) = sandbox();
    let (_follower, lines) = follow(dir.path(), Some(400));
    let first = lines.recv_timeout(Duration::from_secs(20)).expect("first");
    let mut stamps = vec![first["generated_at"].as_str().expect("time").to_string()];
    for _ in 0..3 {
        let line = lines
            .recv_timeout(Duration::from_secs(5))
            .expect("a heartbeat line while nothing changes");
        assert_eq!(state(&line), "RUNNING");
        stamps.push(line["generated_at"].as_str().expect("time").to_string());
    }
    let mut sorted = stamps.clone();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        stamps.len(),
        "each heartbeat is a fresh reading: {stamps:?}"
    );
}

#[test]
fn the_stream_ends_when_its_reader_goes() {
    let (dir, _sleeper) = sandbox();
    let mut child = Command::cargo_bin("mihari")
        .expect("binary")
        .arg("--config")
        .arg(dir.path().join("jobs.yaml"))
        .args(["check", "--json", "--follow"])
        // The default 30 s heartbeat: the end must not wait for the next line.
        .env_remove("MIHARI_FOLLOW_HEARTBEAT_MS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("follow");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("one line");
    drop(stdout);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the follower outlived its reader"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn follow_without_json_is_refused() {
    let (dir, _sleeper) = sandbox();
    let output = Command::cargo_bin("mihari")
        .expect("binary")
        .arg("--config")
        .arg(dir.path().join("jobs.yaml"))
        .args(["check", "--follow"])
        .output()
        .expect("check");
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--json"));
}

//! A lock taken while a long-running engine makes its first gather.
//!
//! `check --json --follow` (as the watcher) used to gather everything and only then put its
//! watches in place: a `mihari run` started beside it that took its lock in between was
//! never seen — its log went on moving, so the job read SHOULD_BE_RUNNING "not running, but
//! should" for as long as it ran (a watcher would have tried to start it again). Seen on a
//! real curl download started at the same moment as the engine; here a farm of 800 quiet
//! jobs makes the first gather long enough to land in, every time.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A jobs file of one job that prints a count every 10 ms under `mihari run`, and `quiet`
/// jobs that never run.
fn farm(dir: &Path, quiet: usize) {
    let mut text = String::from(
        "settings:\n  state_dir: state\njobs:\n  - id: fetch\n    lock: fetch.lock\n    \
         log: fetch.log\n    expected_total: 1000000\n    \
         log_progress: { pattern: 'line (?P<done>\\d+)' }\n    \
         should_run_when: [not_complete]\n    restart:\n      command: [\"sh\", \"-c\", \
         \"i=0; while :; do i=$((i+1)); echo line $i; sleep 0.01; done\"]\n",
    );
    for n in 0..quiet {
        text.push_str(&format!(
            "  - id: quiet{n}\n    lock: quiet/q{n}.lock\n    log: quiet/q{n}.log\n    \
             should_run_when: [resource_free]\n"
        ));
    }
    fs::create_dir_all(dir.join("quiet")).unwrap();
    let jobs = dir.join("jobs.yaml");
    fs::write(&jobs, text).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).unwrap();
}

struct Ended(Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_lock_taken_during_the_first_gather_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    farm(dir.path(), 800);
    let jobs = dir.path().join("jobs.yaml");
    // The run starts this long after the engine: somewhere in its first gather.
    for delay_ms in [0, 20, 50, 100, 200] {
        let _ = fs::remove_dir_all(dir.path().join("state"));
        let _ = fs::remove_file(dir.path().join("fetch.lock"));
        let _ = fs::remove_file(dir.path().join("fetch.log"));
        let mut follow = Command::new(BIN)
            .arg("--config")
            .arg(&jobs)
            .args(["check", "--json", "--follow"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("check --follow starts");
        let stdout = follow.stdout.take().unwrap();
        let _follow = Ended(follow);
        thread::sleep(Duration::from_millis(delay_ms));
        let _run = Ended(
            Command::new(BIN)
                .arg("--config")
                .arg(&jobs)
                .args(["run", "fetch"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("mihari run starts"),
        );
        let (send, states) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(report) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let fetch = report["jobs"]
                    .as_array()
                    .and_then(|jobs| jobs.iter().find(|j| j["id"] == "fetch").cloned());
                if let Some(fetch) = fetch
                    && send.send(fetch).is_err()
                {
                    break;
                }
            }
        });
        // Held and moving: RUNNING within seconds, whatever came first.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = Value::Null;
        loop {
            if last["state"] == "RUNNING" && last["liveness"] == "alive" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the run started {delay_ms} ms after the engine was never seen holding its \
                 lock: {last:#}"
            );
            if let Ok(fetch) = states.recv_timeout(Duration::from_millis(500)) {
                last = fetch;
            }
        }
    }
}

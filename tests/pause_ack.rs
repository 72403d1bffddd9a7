//! Broken rules that end, and pauses, with real processes and the real commands: a failed
//! restart's RED ends when the job is next seen healthy or when the operator acknowledges
//! it (`mihari ack`), the attempts of one episode count across restarts, and a paused job
//! (`mihari pause`) is restarted by nobody, escalated by nothing, and named in the digest.
//!
//! The incidents: a RED for "the last restart failed" that no healthy run and no human could
//! clear; every retry of one episode saying "attempt 1"; no way to stop a job on purpose
//! without the watcher restarting it and paging someone.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mihari::store::digest::DigestCategory;
use mihari::store::{Actor, EventFilter, Store};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

struct Sandbox {
    dir: tempfile::TempDir,
    /// Processes started by hand (as in a tmux pane), killed when the test ends.
    by_hand: Vec<Child>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for child in &mut self.by_hand {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sandbox {
    fn new(settings: &str, job: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let path = dir.path().join("jobs.yaml");
        fs::write(
            &path,
            format!("settings:\n  state_dir: state\n{settings}jobs:\n{job}"),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        Sandbox {
            dir,
            by_hand: Vec::new(),
        }
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

    /// `mihari ARGS`, with its exit code and what it printed.
    fn said(&self, args: &[&str]) -> (i32, String) {
        let output = self.mihari(args);
        (
            output.status.code().expect("an exit code"),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    }

    /// `mihari check --json`: its exit code and the one job's object.
    fn check(&self) -> (i32, Value) {
        let output = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (
            output.status.code().expect("an exit code"),
            report["jobs"][0].clone(),
        )
    }

    fn store(&self) -> Store {
        Store::open(&self.path("state"), Actor::Cli).expect("the store")
    }

    fn events(&self, kind: &str) -> Vec<mihari::store::Event> {
        self.store()
            .events(&EventFilter {
                kind: Some(kind.into()),
                ..Default::default()
            })
            .expect("events")
    }

    /// Starts the job by hand, outside mihari (as someone would in a tmux pane): a shell
    /// that writes its PID into the lock and keeps logging.
    fn start_by_hand(&mut self) -> u32 {
        let child = Command::new("sh")
            .arg("-c")
            .arg("echo $$ > t.lock; while true; do echo working >> t.log; sleep 0.2; done")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        let pid = child.id();
        self.by_hand.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::read_to_string(self.path("t.lock")).map_or(true, |t| t.trim() != pid.to_string())
        {
            assert!(Instant::now() < deadline, "the job never wrote its lock");
            thread::sleep(Duration::from_millis(20));
        }
        pid
    }

    /// Kills the job started by hand with SIGKILL and reaps it: its lock stays behind.
    fn kill_by_hand(&mut self) {
        for mut child in self.by_hand.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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

/// A trainer whose restart command has a typo: every restart fails.
const TRAINER: &str = "  - id: trainer\n    lock: t.lock\n    log: t.log\n    \
                       should_run_when: [resource_free]\n    restart:\n      \
                       command: [/nonexistent/trainer, --resume]\n";

#[test]
fn the_attempts_of_one_episode_count_across_restarts() {
    let sandbox = Sandbox::new("", TRAINER);
    for attempt in 1..=3 {
        let (code, said) = sandbox.said(&["restart", "trainer", "--yes"]);
        assert_eq!(code, 2, "{said}");
        assert!(
            said.contains(&format!("failed (attempt {attempt})")),
            "restart {attempt}: {said}"
        );
    }
    let (code, job) = sandbox.check();
    assert_eq!(code, 2);
    assert_eq!(job["bucket"], "RED", "{job:#}");
    assert!(
        reasons(&job).contains("(attempt 3 of this episode)"),
        "{job:#}"
    );
}

#[test]
fn a_failed_restart_ends_when_the_job_is_next_seen_healthy() {
    let mut sandbox = Sandbox::new("", TRAINER);
    let (code, said) = sandbox.said(&["restart", "trainer", "--yes"]);
    assert_eq!(code, 2, "{said}");
    let (_, job) = sandbox.check();
    assert_eq!(job["bucket"], "RED", "{job:#}");
    assert!(reasons(&job).contains("the last restart failed"), "{job:#}");

    // Someone starts it by hand: alive and progressing, it is healthy, and not RED.
    sandbox.start_by_hand();
    let (code, job) = sandbox.check();
    assert_eq!(job["state"], "RUNNING", "{job:#}");
    assert_eq!(job["bucket"], Value::Null, "{job:#}");
    assert_eq!(code, 0, "{job:#}");
    // The watcher records that it was seen healthy.
    let (code, said) = sandbox.said(&["watch", "--once", "--interval", "300"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        sandbox.events("state-changed").iter().any(|e| e
            .reason
            .as_deref()
            .is_some_and(|r| r.ends_with("-> RUNNING"))),
        "no state-changed -> RUNNING recorded"
    );

    // It dies later: a restart is needed, but the old failure has ended — not RED.
    sandbox.kill_by_hand();
    let (code, job) = sandbox.check();
    assert_eq!(job["state"], "DEAD_LOCK_STALE", "{job:#}");
    assert_eq!(job["bucket"], "RESTART", "{job:#}");
    assert!(!reasons(&job).contains("rule broken"), "{job:#}");
    assert_eq!(code, 2);
}

#[test]
fn acknowledging_a_broken_rule_ends_it_and_the_next_failure_is_a_new_episode() {
    let sandbox = Sandbox::new("", TRAINER);
    for _ in 0..2 {
        sandbox.said(&["restart", "trainer", "--yes"]);
    }
    let (_, job) = sandbox.check();
    assert_eq!(job["bucket"], "RED", "{job:#}");

    // A reason is required.
    let (code, said) = sandbox.said(&["ack", "trainer", "--reason", "  ", "--yes"]);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("needs a reason"), "{said}");

    let (code, said) = sandbox.said(&[
        "ack",
        "trainer",
        "--reason",
        "typo in restart.command; fixed in tonight's deploy",
        "--yes",
    ]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("acknowledged"), "{said}");
    let acked = sandbox.events("acknowledged");
    assert_eq!(acked.len(), 1);
    let words = acked[0].reason.clone().unwrap_or_default();
    assert!(words.starts_with("by "), "who: {words}");
    assert!(words.ends_with(": typo in restart.command; fixed in tonight's deploy"));
    let (_, job) = sandbox.check();
    assert_eq!(job["bucket"], "RESTART", "{job:#}");
    assert!(!reasons(&job).contains("rule broken"), "{job:#}");

    // Nothing left to acknowledge.
    let (code, said) = sandbox.said(&["ack", "trainer", "--reason", "again", "--yes"]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("no broken rule to acknowledge"), "{said}");

    // A rule broken again later is RED again, and its episode counts from 1.
    let (code, said) = sandbox.said(&["restart", "trainer", "--yes"]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("failed (attempt 1)"), "{said}");
    let (_, job) = sandbox.check();
    assert_eq!(job["bucket"], "RED", "{job:#}");
}

/// A dead process's PID: the lock it left names nobody alive.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("true");
    child.wait().expect("reaped");
    child.id()
}

#[test]
fn a_paused_job_is_not_restarted_escalated_or_forgotten() {
    let sandbox = Sandbox::new(
        "  digest_at: \"00:00\"\n  escalate_command: [\"sh\", \"-c\", \"printf '%s\\\\n' \\\"$0\\\" >> escalations.txt\"]\n",
        "  - id: crawler\n    lock: c.lock\n    log: c.log\n    \
         should_run_when: [resource_free]\n    auto_restart: true\n    \
         auto_restart_reason: 'cause known: OOM kills; procedure: start it again'\n    \
         restart:\n      command: [sh, -c, 'echo started >> c.runs; exec sleep 30']\n",
    );
    // Killed without cleanup: a dead lock, which the watcher would restart at once.
    fs::write(sandbox.path("c.lock"), format!("{}\n", dead_pid())).expect("lock");
    fs::write(sandbox.path("c.log"), "crawling\n").expect("log");
    let (code, job) = sandbox.check();
    assert_eq!(job["state"], "DEAD_LOCK_STALE", "{job:#}");
    assert_eq!(code, 2);

    let (code, said) = sandbox.said(&[
        "pause",
        "crawler",
        "--reason",
        "upstream maintenance until 18:00",
        "--yes",
    ]);
    assert_eq!(code, 0, "{said}");
    let (code, job) = sandbox.check();
    assert_eq!(job["state"], "PAUSED", "{job:#}");
    assert_eq!(job["bucket"], Value::Null, "{job:#}");
    assert_eq!(job["paused"]["reason"], "upstream maintenance until 18:00");
    assert!(
        job["paused"]["by"]
            .as_str()
            .is_some_and(|by| !by.is_empty())
    );
    assert!(job["paused"]["at"].is_string());
    assert!(reasons(&job).starts_with("paused by "), "{job:#}");
    assert_eq!(code, 0, "a paused job needs nothing: {job:#}");

    // Nobody restarts it: not a human...
    let (code, said) = sandbox.said(&["restart", "crawler", "--yes"]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("is paused"), "{said}");
    assert!(said.contains("mihari resume crawler"), "{said}");
    // ...not a timer calling `mihari run` (nothing runs: exit 69, EX_UNAVAILABLE)...
    let (code, said) = sandbox.said(&["run", "crawler"]);
    assert_eq!(code, 69, "{said}");
    assert!(
        said.contains("is paused") && said.contains("nothing was run"),
        "{said}"
    );
    assert!(!sandbox.path("c.runs").exists(), "a paused job ran");
    // ...nor the watcher, which tells nobody either, and names it in the digest it cuts.
    sandbox
        .store()
        .queue_digest_at(
            chrono::Utc::now() - chrono::Duration::days(2),
            None,
            DigestCategory::Other,
            "an older item, so this pass cuts a digest",
        )
        .expect("queue");
    let (code, said) = sandbox.said(&["watch", "--once", "--interval", "300"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        sandbox.events("spawned").is_empty(),
        "a paused job was restarted"
    );
    assert!(!sandbox.path("c.runs").exists(), "a paused job ran");
    assert!(
        fs::read_to_string(sandbox.path("escalations.txt"))
            .map_or(true, |t| !t.contains("crawler")),
        "a paused job was escalated"
    );
    let digests = sandbox.store().digests(true).expect("digests");
    assert_eq!(digests.len(), 1, "the pass cut a digest");
    let named: Vec<&str> = digests[0]
        .items
        .iter()
        .filter(|i| i.category == DigestCategory::Paused && i.job.as_deref() == Some("crawler"))
        .map(|i| i.text.as_str())
        .collect();
    assert_eq!(named.len(), 1, "{:?}", digests[0].items);
    assert!(
        named[0].starts_with("still paused (by ")
            && named[0].ends_with(": upstream maintenance until 18:00"),
        "{named:?}"
    );

    // A second pause says nothing new; a resume gives it back to the rules.
    let (code, said) = sandbox.said(&["pause", "crawler", "--reason", "again", "--yes"]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("already paused"), "{said}");
    let (code, said) = sandbox.said(&["resume", "crawler", "--yes"]);
    assert_eq!(code, 0, "{said}");
    let (code, job) = sandbox.check();
    assert_eq!(job["state"], "DEAD_LOCK_STALE", "{job:#}");
    assert_eq!(job["paused"], Value::Null, "{job:#}");
    assert_eq!(code, 2);
    let (code, said) = sandbox.said(&["resume", "crawler", "--yes"]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("not paused"), "{said}");
}

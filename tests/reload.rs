//! The jobs file is followed (SPEC §8): the dashboard in tmux and a real `mihari watch` load
//! a save of it, whether the editor writes in place or renames a new file over it; a save
//! that is refused keeps the last good file in force and says so (the header, the event log,
//! an escalation from the watcher); SIGHUP reloads the watcher instead of stopping it.
//!
//! Needs tmux: `.ci/run` installs it (`apt-get install -y tmux`) when it is missing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use mihari::store::{Actor, EventFilter, Store};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

mod common;
use common::tmux::Tmux;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A job stanza with a log of its own, written by the test.
fn stanza(id: &str) -> String {
    format!(
        "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    should_run_when: [resource_free]\n"
    )
}

fn jobs_file(settings: &str, ids: &[&str]) -> String {
    let mut text = format!("settings:\n  state_dir: state\n{settings}jobs:\n");
    for id in ids {
        text.push_str(&stanza(id));
    }
    text
}

/// Writes `text` over `path` as `sed -i` and vim do: a new file renamed over the old one.
fn save_by_rename(path: &Path, text: &str) {
    let temp = path.with_extension("yaml.new");
    fs::write(&temp, text).unwrap();
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o600)).unwrap();
    fs::rename(&temp, path).unwrap();
}

/// Writes `text` into `path` in place, as an editor that keeps the inode does.
fn save_in_place(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

fn events(state: &Path, kind: &str) -> Vec<mihari::store::Event> {
    match Store::open(state, Actor::Cli) {
        Ok(store) => store
            .events(&EventFilter {
                kind: Some(kind.to_string()),
                ..EventFilter::default()
            })
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the action list shows a row for job `id` (the status line may name it).
fn shows_row(screen: &str, id: &str) -> bool {
    screen
        .lines()
        .any(|line| line.split_whitespace().nth(1) == Some(id))
}

#[test]
fn the_dashboard_follows_the_jobs_file_and_keeps_the_last_good_one_when_a_save_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    for id in ["alpha", "beta", "gamma"] {
        fs::write(dir.path().join(format!("{id}.log")), "working\n").unwrap();
    }
    fs::write(&jobs, jobs_file("", &["alpha"])).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).unwrap();
    let command = format!("{BIN} --config {}; sleep 60", jobs.display());
    let tmux = Tmux::start("dash", 160, 40, &command);
    tmux.wait_for(&["alpha", "1 jobs"], Duration::from_secs(20));

    // A job appended in place appears.
    save_in_place(&jobs, &jobs_file("", &["alpha", "beta"]));
    tmux.wait_for(&["beta", "2 jobs"], Duration::from_secs(10));

    // A bad line: refused, said in the header with file:line:col, and the jobs stay.
    let bad = format!(
        "{}    stall_sec: soon\n",
        jobs_file("", &["alpha", "beta", "gamma"])
    );
    save_in_place(&jobs, &bad);
    let line = bad.lines().count();
    let screen = tmux.wait_for(
        &[
            &format!("jobs.yaml:{line}:"),
            "refused — still watching the last good file",
        ],
        Duration::from_secs(10),
    );
    assert!(
        screen.contains("alpha") && screen.contains("beta") && screen.contains("2 jobs"),
        "the last good jobs must stay in force:\n{screen}"
    );
    assert!(
        !shows_row(&screen, "gamma"),
        "a job of the refused save must not be watched:\n{screen}"
    );

    // Fixed, saved by rename (vim, sed -i): loaded, and the refusal is gone.
    save_by_rename(&jobs, &jobs_file("", &["alpha", "gamma"]));
    tmux.wait_for(&["gamma", "2 jobs"], Duration::from_secs(10));
    wait_until(
        "the refusal leaves the header",
        Duration::from_secs(10),
        || !tmux.capture().contains("refused — still watching"),
    );
    let screen = tmux.capture();
    assert!(!shows_row(&screen, "beta"), "beta was removed:\n{screen}");

    // Recorded in the event log, with no watcher running: by the dashboard.
    let state = dir.path().join("state");
    let refused = events(&state, "config-refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let reason = refused[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!("jobs.yaml:{line}:")) && reason.contains("last good file"),
        "{reason}"
    );
    let reloaded = events(&state, "config-reloaded");
    let reasons: Vec<String> = reloaded.iter().filter_map(|e| e.reason.clone()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("added 'beta'")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("added 'gamma'") && r.contains("removed 'beta'")),
        "{reasons:?}"
    );
}

/// The watcher as a child of the test, stopped with SIGTERM when dropped.
struct Watcher {
    child: Child,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

#[test]
fn sighup_reloads_the_watcher_and_a_refused_save_is_escalated() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    let told = dir.path().join("told.txt");
    let notifier = dir.path().join("notify.sh");
    fs::write(
        &notifier,
        format!("#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\n", told.display()),
    )
    .unwrap();
    fs::set_permissions(&notifier, fs::Permissions::from_mode(0o755)).unwrap();
    let settings = format!("  escalate_command: ['{}']\n", notifier.display());
    for id in ["alpha", "beta"] {
        fs::write(dir.path().join(format!("{id}.log")), "working\n").unwrap();
    }
    fs::write(&jobs, jobs_file(&settings, &["alpha"])).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).unwrap();
    let state: PathBuf = dir.path().join("state");
    let mut watcher = Watcher {
        child: Command::new(BIN)
            .arg("--config")
            .arg(&jobs)
            .arg("watch")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    };
    wait_until("the watcher starts", Duration::from_secs(20), || {
        !events(&state, "watcher-started").is_empty()
    });

    // SIGHUP: reloaded and recorded, and the watcher keeps running.
    kill(Pid::from_raw(watcher.child.id() as i32), Signal::SIGHUP).unwrap();
    wait_until("SIGHUP is recorded", Duration::from_secs(10), || {
        !events(&state, "config-reloaded").is_empty()
    });
    thread::sleep(Duration::from_millis(300));
    assert!(
        watcher.child.try_wait().unwrap().is_none(),
        "SIGHUP must reload the watcher, not stop it"
    );
    assert!(events(&state, "watcher-stopped").is_empty());

    // A save adding a job is loaded: the new job's state is recorded.
    save_by_rename(&jobs, &jobs_file(&settings, &["alpha", "beta"]));
    wait_until("beta is watched", Duration::from_secs(10), || {
        events(&state, "state-changed")
            .iter()
            .any(|e| e.job.as_deref() == Some("beta"))
    });

    // A refused save: recorded, escalated through escalate_command, the watcher stays up.
    save_in_place(
        &jobs,
        &format!(
            "{}    stall_sec: soon\n",
            jobs_file(&settings, &["alpha", "beta"])
        ),
    );
    wait_until("the refusal is recorded", Duration::from_secs(10), || {
        !events(&state, "config-refused").is_empty()
    });
    wait_until("the refusal is escalated", Duration::from_secs(10), || {
        fs::read_to_string(&told).is_ok_and(|t| t.contains("refused"))
    });
    let escalated = events(&state, "escalated");
    assert!(!escalated.is_empty(), "no escalated event");
    assert!(watcher.child.try_wait().unwrap().is_none());
}

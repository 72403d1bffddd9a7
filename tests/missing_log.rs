//! A typo'd log path says "missing" and names the path — in `check`, in `check --json` and in
//! the dashboard's detail — and is never called "empty" or "no progress" (SPEC §3, the log
//! row). It is not a fault either: a job that has not started has no log yet.
//!
//! The jobs are real: a folder with the log at `logs/collect.log` and the jobs file saying
//! `logs/colect.log`, a real `sleep` holding the lock when the job is to look alive.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use chrono::Utc;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use mihari::engine::Engine;
use mihari::tui::model::{Model, Msg, update};
use mihari::tui::theme::Theme;
use mihari::tui::view::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::Value;

/// A `sleep` that holds the job's lock; killed and reaped when dropped.
struct Holder(Child);

impl Holder {
    fn start() -> Holder {
        Holder(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep runs"),
        )
    }

    fn lock_json(&self) -> String {
        let pid = self.0.id();
        let ticks = mihari::probe::proc::start_ticks(pid).expect("the holder's start ticks");
        format!("{{\"pid\":{pid},\"start_time\":{ticks}}}")
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The job's folder: the real log is `logs/collect.log`, the jobs file says `colect.log`.
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    _holder: Option<Holder>,
}

impl Sandbox {
    /// With `alive`, a live holder started more than stall_sec (1 s) ago holds the lock.
    fn new(alive: bool) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        for folder in ["logs", "run", "state"] {
            fs::create_dir(root.join(folder)).expect("folder");
        }
        fs::write(root.join("logs/collect.log"), "fetched 12 of 400\n").expect("the real log");
        let holder = alive.then(|| {
            let holder = Holder::start();
            fs::write(root.join("run/collect.lock"), holder.lock_json()).expect("the lock");
            // Older than stall_sec: an age from the holder's start would be a stall.
            thread::sleep(Duration::from_millis(1500));
            holder
        });
        let text = "settings:\n  state_dir: state\njobs:\n  - id: collect\n    \
                    lock: run/collect.lock\n    log: logs/colect.log\n    stall_sec: 1\n    \
                    should_run_when: [resource_free]\n";
        fs::write(root.join("jobs.yaml"), text).expect("jobs file");
        fs::set_permissions(root.join("jobs.yaml"), fs::Permissions::from_mode(0o600))
            .expect("chmod");
        Sandbox {
            _dir: dir,
            root,
            _holder: holder,
        }
    }

    fn typo(&self) -> String {
        format!(
            "'{}' does not exist",
            self.root.join("logs/colect.log").display()
        )
    }

    fn check(&self, args: &[&str]) -> String {
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(self.root.join("jobs.yaml"))
            .arg("check")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("mihari check runs");
        assert!(
            matches!(output.status.code(), Some(0..=2)),
            "check could not assess: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn json_row(&self) -> Value {
        let report: Value =
            serde_json::from_str(&self.check(&["--json"])).expect("check --json prints JSON");
        report["jobs"][0].clone()
    }
}

fn reasons(row: &Value) -> Vec<String> {
    row["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect()
}

#[test]
fn check_names_a_missing_log_and_its_path() {
    let sandbox = Sandbox::new(false);
    let table = sandbox.check(&[]);
    assert!(
        table.contains(&format!("log: missing: {}", sandbox.typo())),
        "{table}"
    );
    assert!(!table.contains("empty"), "{table}");
}

#[test]
fn check_json_names_a_missing_log_distinct_from_empty_and_from_a_fault() {
    let sandbox = Sandbox::new(false);
    let row = sandbox.json_row();
    let reasons = reasons(&row);
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with(&format!("log: missing: {}", sandbox.typo()))),
        "{reasons:?}"
    );
    assert!(
        !reasons
            .iter()
            .any(|r| r.contains("empty") || r.contains("fault")),
        "{reasons:?}"
    );
    // Not a fault: a job that has not started yet is due, not unknown.
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{reasons:?}");
}

#[test]
fn a_live_job_whose_log_is_missing_is_never_no_progress() {
    let sandbox = Sandbox::new(true);
    let row = sandbox.json_row();
    let reasons = reasons(&row);
    assert_ne!(row["state"], "STALLED", "{reasons:?}");
    assert!(
        !reasons.iter().any(|r| r.contains("no progress")),
        "{reasons:?}"
    );
    assert!(
        reasons[0].contains(&format!("the log is missing: {}", sandbox.typo())),
        "{reasons:?}"
    );
}

/// The dashboard's detail over a real engine's snapshot and a real tail read, through
/// ratatui's TestBackend.
#[test]
fn the_dashboards_detail_says_missing_with_the_path() {
    let sandbox = Sandbox::new(false);
    let config = mihari::config::load(&sandbox.root.join("jobs.yaml")).expect("loads");
    let jobs = config.jobs.clone();
    let now = Utc::now();
    let snapshot = Engine::new(config).snapshot(now);
    let mut model = Model::new(jobs, sandbox.root.join("jobs.yaml"), Theme::plain(), now);
    update(&mut model, Msg::Resize(160, 50));
    update(&mut model, Msg::Snapshot(snapshot));
    let log = sandbox.root.join("logs/colect.log");
    update(
        &mut model,
        Msg::Tail {
            job: "collect".into(),
            lines: mihari::probe::tail::tail_lines(&log, 20),
            earlier: None,
        },
    );
    update(
        &mut model,
        Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
    );
    let mut terminal = Terminal::new(TestBackend::new(160, 50)).expect("terminal");
    terminal.draw(|frame| view(&model, frame)).expect("draws");
    let screen = terminal.backend().to_string();
    // What the detail says of the log (its evidence row, its reasons, its tail).
    for line in screen.lines().filter(|line| line.contains("log")) {
        assert!(!line.contains("empty"), "the detail says empty: {screen}");
    }
    // The screen is made of cells; the path may wrap, so look for its parts on one line.
    assert!(
        screen
            .lines()
            .any(|line| line.contains("log") && line.contains("missing:")),
        "{screen}"
    );
    assert!(screen.contains("colect.log' does not exist"), "{screen}");
}

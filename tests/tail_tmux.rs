//! The log tail on a real dashboard in tmux: a real tqdm run under `mihari run` that prints
//! 320 lines and a carriage-return bar, then crashes with a traceback. The detail opens on
//! the newest lines (the traceback's last line in view, no scrolling), each line is its last
//! frame (no '␍'-joined blob), the detail shows the run's exit, `l` scrolls back through the
//! log, and after the writer rotates the log the traceback is still found, under where it
//! is: "earlier lines, in 'run.log.1'".
//!
//! The incident: the tail showed the oldest of 40 lines at the top of the pane, the newest
//! below the fold, and a tqdm bar as one line of three hundred frames joined by '␍'.
//!
//! Needs tmux and Debian's python3-tqdm (`.ci/run` installs them when missing).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::tmux::Tmux;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
const PYTHON: &str = "/usr/bin/python3";

/// 320 lines, a tqdm bar of 300 steps redrawn with '\r', and a crash at step 150.
const CRASHING_RUN: &str = "import sys\nfrom tqdm import tqdm\n\
    for i in range(320): print(f'info line {i} of the preamble', flush=True)\n\
    def load(): return 1 / 0\n\
    for i in tqdm(range(300), mininterval=0, miniters=1):\n\
    \x20   if i == 150: load()\n";

#[test]
fn the_tail_opens_on_its_newest_lines_one_frame_each_and_finds_a_rotated_traceback() {
    assert!(
        Command::new(PYTHON)
            .args(["-c", "import tqdm"])
            .status()
            .is_ok_and(|s| s.success()),
        "this test needs tqdm for '{PYTHON}' (Debian: python3-tqdm)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    let jobs = dir.path().join("jobs.yaml");
    fs::write(
        &jobs,
        format!(
            "settings:\n  state_dir: state\njobs:\n  - id: train\n    lock: train.lock\n    \
             log: run.log\n    log_progress: {{ preset: tqdm }}\n    \
             should_run_when: [not_complete]\n    restart:\n      \
             command: [{PYTHON}, -c, {CRASHING_RUN:?}]\n"
        ),
    )
    .expect("jobs");
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");
    let ran = Command::new(BIN)
        .arg("--config")
        .arg(&jobs)
        .args(["run", "train"])
        .stdin(Stdio::null())
        .output()
        .expect("mihari run");
    assert_eq!(ran.status.code(), Some(1), "the run crashed");
    let log_path = dir.path().join("run.log");
    let log = fs::read_to_string(&log_path).expect("the log");
    assert!(
        log.matches('\r').count() >= 150,
        "tqdm redrew its bar: {log}"
    );
    assert!(log.lines().count() > 320, "{log}");

    let command = format!("{BIN} --config {}; sleep 60", jobs.display());
    let tmux = Tmux::start("tail", 80, 24, &command);
    tmux.wait_for(&["SHOULD_BE_RUNNING"], Duration::from_secs(20));
    tmux.keys(&["Enter"]);
    // The detail opens with the newest lines in view: the traceback's last line, the bar as
    // its last frame, and the run's exit.
    let screen = tmux.wait_for(
        &[
            "ZeroDivisionError",
            "/300 [",
            "exited 1",
            "Log tail (newest last)",
        ],
        Duration::from_secs(10),
    );
    assert!(!screen.contains('␍'), "frames are never joined:\n{screen}");
    assert!(
        !screen.contains("info line 0 "),
        "the oldest lines are not what opens:\n{screen}"
    );

    // `l`: the log fills the detail; up goes back through it, G returns to the newest.
    tmux.keys(&["l"]);
    tmux.wait_for(&["ZeroDivisionError"], Duration::from_secs(5));
    tmux.keys(&["PageUp", "PageUp"]);
    let back = tmux.wait_for(&["scrolled up", "info line 28"], Duration::from_secs(5));
    assert!(!back.contains("ZeroDivisionError"), "{back}");
    tmux.keys(&["G"]);
    tmux.wait_for(&["ZeroDivisionError"], Duration::from_secs(5));
    tmux.keys(&["l"]);

    // The writer rotates its log (as RotatingFileHandler does: rename, then a new file) and
    // writes one line: the traceback is still found, under where it is.
    let rotated = dir.path().join("run.log.1");
    fs::rename(&log_path, &rotated).expect("rotate");
    fs::write(&log_path, "restarted after the crash\n").expect("the new log");
    let screen = tmux.wait_for(
        &[
            "earlier lines in 'run.log.1'",
            "ZeroDivisionError",
            "restarted after the crash",
            "since the rotation",
        ],
        Duration::from_secs(15),
    );
    assert!(!screen.contains('␍'), "{screen}");
    tmux.keys(&["q"]);
}

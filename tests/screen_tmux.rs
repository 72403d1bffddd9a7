//! The operator's screen at 3 a.m., in a real tmux, on the demo's real jobs and on jobs files
//! of real processes: what the first screen says without a key, at 80x24, 120x40 and 60x20.
//! One test per thing the screen once got wrong: a RED job that looked healthy, approvals
//! under NO ACTION, a list head scrolled away, a dialog button that did nothing, a form that
//! swallowed the job id, cut words, a log view that drifted, marks with no legend and ages in
//! two spellings, and nothing to say what changed while nobody looked.
//!
//! Needs tmux: `.ci/run` installs it (`apt-get install -y tmux`) when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::tmux::{SESSION, Tmux};

const MIHARI: &str = env!("CARGO_BIN_EXE_mihari");

/// The demo in a `width`x`height` pane, its sandbox under `parent`; waits for its first
/// screen to show every bucket.
fn demo(name: &str, parent: &Path, width: u16, height: u16, env: &str) -> (Tmux, PathBuf) {
    let sandbox = parent.join("sandbox");
    let command = format!(
        "{env} {MIHARI} demo --dir {}; echo DEMO-EXITED-$?; sleep 60",
        sandbox.display()
    );
    let tmux = Tmux::start(name, width, height, &command);
    // The list is drawn (at 60x20 the demo's greeting pushes DISPATCH below the fold).
    tmux.wait_for(&["RESTART", "DEAD_LOCK_STALE"], Duration::from_secs(30));
    (tmux, sandbox)
}

/// The pane with its colours (`capture-pane -e`).
fn capture_colours(tmux: &Tmux) -> String {
    String::from_utf8_lossy(
        &tmux
            .run(&["capture-pane", "-e", "-p", "-t", SESSION])
            .stdout,
    )
    .into_owned()
}

fn quit(tmux: &Tmux) {
    tmux.keys(&["Escape", "Escape", "q"]);
    tmux.wait_for(&["EXITED-0"], Duration::from_secs(15));
}

/// Types `text` literally, one character at a time.
fn type_text(tmux: &Tmux, text: &str) {
    for c in text.chars() {
        tmux.run(&["send-keys", "-t", SESSION, "-l", &c.to_string()]);
        thread::sleep(Duration::from_millis(60));
    }
}

/// Item 1: the RED job `gaps` (its process alive, its check failing) used to show a green
/// ▶ RUNNING with nothing on its row saying why.
#[test]
fn a_red_job_whose_process_lives_wears_red_and_says_which_check_failed_80x24() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, _) = demo("red", parent.path(), 80, 24, "");
    tmux.wait_for(&["JOB", "STATE", "AGE", "WHY"], Duration::from_secs(30));
    // The row itself says why, whole (in the demo's first seconds, while every age is short,
    // a narrow ETA column may still fit and cut the reason's last letters with a '…').
    let deadline = Instant::now() + Duration::from_secs(30);
    let row = loop {
        let screen = tmux.capture();
        let row = screen
            .lines()
            .find(|l| l.contains(" gaps ") && l.contains("RUNNING"))
            .map(str::to_string);
        match row {
            Some(row) if row.contains("check 'no_gaps' failed") => break row,
            _ if Instant::now() >= deadline => {
                panic!("the row of gaps never said why, whole:\n{screen}")
            }
            _ => thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(row.contains("✖ gaps"), "RED's mark, not ▶: {row}");
    let coloured = capture_colours(&tmux);
    let row = coloured
        .lines()
        .find(|l| l.contains("gaps") && l.contains("RUNNING"))
        .unwrap_or_else(|| panic!("no row for gaps:\n{coloured}"));
    // RED is light red (91, or colour 9 as tmux writes it); green (32, colour 2) is for jobs
    // that need nothing.
    assert!(
        row.contains("[91m") || row.contains("38;5;9m"),
        "the row is not red: {row:?}"
    );
    assert!(
        !row.contains("[32m") && !row.contains("38;5;2m"),
        "a RED row shows green: {row:?}"
    );
    quit(&tmux);
}

/// Item 2: `phases` had two irreversible steps waiting and sat under NO ACTION, "needs
/// nothing".
#[test]
fn pending_approvals_are_a_group_above_the_action_list_120x40() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, _) = demo("approvals", parent.path(), 120, 40, "");
    let screen = tmux.wait_for(&["⚑ APPROVALS 2 · a decides"], Duration::from_secs(30));
    let at = |s: &str| {
        screen
            .find(s)
            .unwrap_or_else(|| panic!("no {s} in:\n{screen}"))
    };
    assert!(
        at("⚑ APPROVALS 2 · a decides") < at("\nRESTART "),
        "{screen}"
    );
    let asked: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("⚑ phases") && l.contains("step '"))
        .collect();
    assert_eq!(asked.len(), 2, "{screen}");
    // Its detail never says it needs nothing.
    tmux.keys(&["Enter"]);
    let detail = tmux.wait_for(&["detail: phases"], Duration::from_secs(10));
    assert!(detail.contains("approvals wait for a human"), "{detail}");
    assert!(!detail.contains("needs nothing"), "{detail}");
    quit(&tmux);
}

/// Item 3: after PgDn, RESTART scrolled off the top while the header still counted it.
#[test]
fn a_list_scrolled_down_announces_the_buckets_above_it_60x20() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, _) = demo("head", parent.path(), 60, 20, "");
    tmux.keys(&["PageDown", "PageDown"]);
    let screen = tmux.wait_for(&["↑ ", " above"], Duration::from_secs(10));
    let above = screen
        .lines()
        .find(|l| l.contains("↑ ") && l.contains(" above"))
        .unwrap();
    // Every section above is counted (shortened names when the full ones do not fit).
    assert!(
        above.contains("APPR") && (above.contains("RESTART") || above.contains("RST")),
        "{above}"
    );
    // And back at the top, nothing is announced.
    tmux.keys(&["g"]);
    thread::sleep(Duration::from_millis(400));
    assert!(!tmux.capture().contains(" above"), "{}", tmux.capture());
    quit(&tmux);
}

/// Item 4: with the workspace cooldown closed, the restart dialog said "spawns nothing" and
/// still offered `[ Restart ]`.
#[test]
fn a_closed_cooldown_is_said_and_no_restart_button_is_offered_80x24() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(
        &jobs,
        format!(
            "settings:\n  state_dir: state\n  workspace_cooldown_sec: 600\njobs:\n  - id: collect\n    \
             lock: collect.lock\n    log: collect.log\n    progress_file: collect.progress\n    \
             expected_total: 100\n    should_run_when: [not_complete]\n    restart:\n      \
             command: [\"sh\", \"-c\", \"exec sleep 60\", \"{}\"]\n      cwd: .\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let dead_lock = || {
        let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = sleeper.id();
        let ticks = mihari::probe::proc::start_ticks(pid).unwrap();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        std::fs::write(
            dir.path().join("collect.lock"),
            format!("{{\"pid\":{pid},\"start_time\":{ticks},\"run_id\":\"run-1\"}}"),
        )
        .unwrap();
    };
    dead_lock();
    std::fs::write(dir.path().join("collect.progress"), "{\"i\":1}\n").unwrap();
    std::fs::write(dir.path().join("collect.log"), "worked a while\n").unwrap();
    // A first restart spawns: the workspace's cooldown is closed for ten minutes.
    let first = Command::new(MIHARI)
        .args(["restart", "collect", "--yes", "--config"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let lock = std::fs::read_to_string(dir.path().join("collect.lock")).unwrap();
    let holder: serde_json::Value = serde_json::from_str(&lock).unwrap();
    let holder = holder["pid"].as_i64().unwrap() as i32;
    // The holder's whole session (`mihari run` and the command it runs, which keeps the
    // lock's open file).
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(member) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let member = nix::unistd::Pid::from_raw(member);
        if nix::unistd::getsid(Some(member)).map(|s| s.as_raw()) == Ok(holder) {
            let _ = nix::sys::signal::kill(member, nix::sys::signal::Signal::SIGKILL);
        }
    }
    thread::sleep(Duration::from_millis(500));
    dead_lock();

    let command = format!(
        "{MIHARI} --config {}; echo DASHBOARD-EXITED-$?; sleep 60",
        jobs.display()
    );
    let tmux = Tmux::start("cooldown", 80, 24, &command);
    tmux.wait_for(&["DEAD_LOCK_STALE"], Duration::from_secs(30));
    tmux.keys(&["r"]);
    let dialog = tmux.wait_for(
        &["restart 'collect'?", "would spawn nothing", "[ Cancel ]"],
        Duration::from_secs(15),
    );
    assert!(!dialog.contains("[ Restart ]"), "{dialog}");
    assert!(!dialog.contains("policy    blocked"), "{dialog}");
    assert!(!dialog.contains(" key "), "no claim key: {dialog}");
    // Tab has nowhere to go but Cancel; Enter closes it, and nothing was spawned.
    tmux.keys(&["Tab", "Enter"]);
    thread::sleep(Duration::from_millis(500));
    assert!(!tmux.capture().contains("restart 'collect'?"));
    let kinds = Command::new(MIHARI)
        .args(["events", "--json", "--kind", "spawned", "--config"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&kinds.stdout).lines().count(),
        1,
        "only the first restart spawned"
    );
    quit(&tmux);
}

/// Item 5: Enter in the empty job-id field moved the focus to the denial's reason, where the
/// id typed next went, and Approve was refused.
#[test]
fn enter_in_the_empty_job_id_stays_there_and_says_what_is_missing_80x24() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, sandbox) = demo("form", parent.path(), 80, 24, "");
    // The cursor starts on the first approval of the APPROVALS group: `a` decides it.
    tmux.wait_for(&["⚑ APPROVALS 2"], Duration::from_secs(30));
    tmux.keys(&["g", "a"]);
    tmux.wait_for(
        &["approve 'phases'?", "┌ type the job id"],
        Duration::from_secs(10),
    );
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for(
        &["type the job id 'phases' here first"],
        Duration::from_secs(5),
    );
    assert!(screen.contains("┌ type the job id"), "{screen}");
    type_text(&tmux, "phases");
    let screen = tmux.wait_for(&["│ phases▏"], Duration::from_secs(5));
    assert!(screen.contains("reason, if you deny: ▏"), "{screen}");
    tmux.keys(&["Tab", "Tab", "Tab", "Tab", "Enter"]);
    tmux.wait_for(&["⚑ APPROVALS 1"], Duration::from_secs(20));
    let events = Command::new(MIHARI)
        .args(["events", "--json", "--kind", "approved", "--config"])
        .arg(sandbox.join("jobs.yaml"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&events.stdout).contains("phases"),
        "{events:?}"
    );
    quit(&tmux);
}

/// Item 6: at 80 columns with a watcher, DISPATCH and APPROVALS vanished from the header; at
/// 60 only "RES" was left. A long message was cut mid-word.
#[test]
fn the_header_keeps_every_count_at_60_columns_and_a_long_message_wraps_whole() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, sandbox) = demo("narrow", parent.path(), 60, 20, "");
    // A watcher, whose words are the longest in the header.
    let mut watcher = Command::new(MIHARI)
        .args(["watch", "--config"])
        .arg(sandbox.join("jobs.yaml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let screen = tmux.wait_for(&["watcher"], Duration::from_secs(30));
    let header = screen.lines().next().unwrap();
    for count in ["RST ", "RED ", "STL ", "DSP ", "⚑ APPR "] {
        assert!(header.contains(count), "{count} missing: {header}");
    }
    // `x` on a job whose lock is not left: the refusal, wrapped, never cut mid-word.
    tmux.keys(&["/", "gaps", "Enter", "x"]);
    let screen = tmux.wait_for(
        &["release of 'gaps' refused", "never released"],
        Duration::from_secs(10),
    );
    let status: Vec<&str> = screen.lines().rev().take(3).collect();
    assert!(
        !status.iter().any(|l| l.trim_end().ends_with('…')),
        "the message was cut:\n{screen}"
    );
    // L shows the last message whole.
    tmux.keys(&["L"]);
    tmux.wait_for(&["the last message"], Duration::from_secs(5));
    let _ = watcher.kill();
    let _ = watcher.wait();
    quit(&tmux);
}

/// Item 7: the log view drifted while scrolled up, showed about 200 lines with no path, and
/// `/` edited the job filter.
#[test]
fn the_log_view_stays_still_names_its_path_searches_and_hands_over_to_the_pager_80x24() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, sandbox) = demo("log", parent.path(), 80, 24, "PAGER=less");
    tmux.keys(&["/", "gaps", "Enter", "l"]);
    let path = sandbox.join("jobs/gaps/gaps.log").display().to_string();
    tmux.wait_for(&["log of gaps: '", "fetched"], Duration::from_secs(10));
    let screen = tmux.capture();
    assert!(
        screen.contains(&path[..path.len().min(40)]),
        "{path} not named:\n{screen}"
    );
    // Scrolled up, the lines stay put while the job writes more.
    tmux.keys(&["k", "k", "k"]);
    thread::sleep(Duration::from_millis(300));
    // The log's lines in view (the header above may grow or shrink with a banner).
    let log_lines = |screen: String| -> Vec<String> {
        screen
            .lines()
            .filter(|l| l.contains("Z ") && l.contains("items"))
            .map(String::from)
            .collect()
    };
    let before = log_lines(tmux.capture());
    tmux.wait_for(&["new lines below"], Duration::from_secs(15));
    let after = log_lines(tmux.capture());
    assert_eq!(before, after, "the log drifted while scrolled up");
    // / searches the log, not the job filter.
    tmux.keys(&["/"]);
    type_text(&tmux, "fetched 1");
    tmux.keys(&["Enter"]);
    thread::sleep(Duration::from_millis(400));
    assert!(
        !tmux.capture().contains("filter 'fetched"),
        "{}",
        tmux.capture()
    );
    // o: less at the end of the log; q: back in the log view.
    tmux.keys(&["o"]);
    tmux.wait_for(&["(END)"], Duration::from_secs(10));
    tmux.keys(&["q"]);
    tmux.wait_for(&["log of gaps: '"], Duration::from_secs(10));
    quit(&tmux);
}

/// Item 8: no legend for ‖ ⊘ ⚑, RESTART and DISPATCH shared ↻, and `check` said "194 s" where
/// the screen said "3m".
#[test]
fn every_mark_has_a_legend_and_an_age_reads_as_check_writes_it_120x40() {
    let parent = tempfile::tempdir().unwrap();
    let (tmux, sandbox) = demo("legend", parent.path(), 120, 40, "");
    let screen = tmux.wait_for(&["↻ dead_lock", "➜ never_started"], Duration::from_secs(30));
    let frozen = screen.lines().find(|l| l.contains("frozen")).unwrap();
    assert!(
        regex::Regex::new(r"\b\d+ s\b").unwrap().is_match(frozen),
        "{frozen}"
    );
    tmux.keys(&["?", "Tab"]);
    let legend = tmux.wait_for(&["marks (Tab: the keys)"], Duration::from_secs(5));
    for mark in ["⚑", "↻", "✖", "‖", "➜", "▶", "✔", "⊘", "●"] {
        assert!(
            legend
                .lines()
                .any(|l| l.trim_start_matches('│').trim_start().starts_with(mark)
                    || l.contains(&format!("│ {mark}"))),
            "{mark} has no legend:\n{legend}"
        );
    }
    let check = Command::new(MIHARI)
        .args(["check", "--config"])
        .arg(sandbox.join("jobs.yaml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        regex::Regex::new(r"\d+ s").unwrap().is_match(&said) && !said.contains("m ago"),
        "{said}"
    );
    quit(&tmux);
}

/// Item 9: nothing said what changed while nobody looked, and `check --json` had no name or
/// owner.
#[test]
fn a_row_that_changed_while_nobody_looked_is_marked_after_a_restart_of_the_dashboard() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(
        &jobs,
        "settings:\n  state_dir: state\njobs:\n  - id: worker\n    name: The worker\n    \
         owner: night-shift\n    lock: worker.lock\n    log: worker.log\n    stall_sec: 3600\n    \
         should_run_when: [resource_free]\n  - id: quiet\n    lock: quiet.lock\n    \
         should_run_when: [resource_free]\n",
    )
    .unwrap();
    let mut sleeper = Command::new("sleep").arg("300").spawn().unwrap();
    let pid = sleeper.id();
    let ticks = mihari::probe::proc::start_ticks(pid).unwrap();
    std::fs::write(
        dir.path().join("worker.lock"),
        format!("{{\"pid\":{pid},\"start_time\":{ticks}}}"),
    )
    .unwrap();
    std::fs::write(dir.path().join("worker.log"), "working\n").unwrap();
    let json = Command::new(MIHARI)
        .args(["check", "--json", "--config"])
        .arg(&jobs)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let worker = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["id"] == "worker")
        .unwrap();
    assert_eq!(worker["name"], "The worker", "{report}");
    assert_eq!(worker["owner"], "night-shift", "{report}");

    let command = format!(
        "{MIHARI} --config {}; echo DASHBOARD-EXITED-$?; sleep 60",
        jobs.display()
    );
    let tmux = Tmux::start("looked", 80, 24, &command);
    tmux.wait_for(&["worker", "RUNNING"], Duration::from_secs(30));
    // A key: the operator has the screen in front of them; quitting keeps what they saw.
    tmux.keys(&["j", "q"]);
    tmux.wait_for(&["DASHBOARD-EXITED-0"], Duration::from_secs(10));
    assert!(dir.path().join("state/dashboard-looked.json").exists());
    drop(tmux);

    // While no dashboard is open, the worker dies and leaves its lock.
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let tmux = Tmux::start("looked-again", 80, 24, &command);
    let screen = tmux.wait_for(&["DEAD_LOCK_STALE"], Duration::from_secs(30));
    let row = screen.lines().find(|l| l.contains("worker")).unwrap();
    assert!(row.starts_with('●'), "the changed row is not marked: {row}");
    let quiet = screen.lines().find(|l| l.contains("quiet")).unwrap();
    assert!(
        !quiet.starts_with('●'),
        "an unchanged row is marked: {quiet}"
    );
    tmux.keys(&["e"]);
    tmux.wait_for(&["since you last looked"], Duration::from_secs(10));
    quit(&tmux);
}

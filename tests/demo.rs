//! `mihari demo` for real: it builds its sandbox, runs its simulated jobs, shows every state
//! and bucket of SPEC §4, and leaves no process behind.

use std::fs;
use std::path::Path;
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

/// PIDs of live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn the_demo_shows_every_state_and_bucket_and_ends_its_processes() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("sandbox");
    let output = Command::cargo_bin("mihari")
        .unwrap()
        .args(["demo", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stdout}\n{stderr}");
    for state in [
        "RUNNING",
        "STALLED",
        "DEAD_LOCK_STALE",
        "UNKNOWN",
        "SHOULD_BE_RUNNING",
        "COMPLETE",
        "NOT_RUNNING",
        "PAUSED",
    ] {
        assert!(
            stdout.contains(&format!(" {state} ")),
            "no {state} in\n{stdout}"
        );
    }
    for bucket in ["\nRESTART (", "\nRED (", "\nSTALE (", "\nDISPATCH ("] {
        assert!(stdout.contains(bucket), "no {bucket:?} in\n{stdout}");
    }
    assert!(stdout.contains("dispatch held: RED: gaps"), "{stdout}");
    assert!(stdout.contains("progress_file: fault"), "{stdout}");
    // A one-shot job with nothing to count, run by the real `mihari run`, finished: COMPLETE.
    let oneshot = stdout
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("oneshot "))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(oneshot.contains(" COMPLETE "), "{stdout}");
    assert!(
        oneshot.contains("complete: the last run exited 0"),
        "{stdout}"
    );
    // A job started by hand with no lock, found by its command line: RUNNING, by its pid.
    let notebook = stdout
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("notebook "))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(notebook.contains(" RUNNING "), "{stdout}");
    assert!(
        notebook.contains("matches process.cmdline") || notebook.contains("process "),
        "{stdout}"
    );
    // Progress read from what jobs print: a tqdm bar's carriage-return frames, step lines.
    let row = |id: &str| {
        stdout
            .lines()
            .skip_while(|line| !line.trim_start().starts_with(&format!("{id} ")))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let tqdm = row("tqdm_train");
    assert!(
        tqdm.contains(" RUNNING ") && tqdm.contains("/2000 "),
        "the tqdm job's done/total comes from its frames:\n{stdout}"
    );
    let steps = row("steps");
    assert!(
        steps.contains(" RUNNING ") && steps.contains("/5000 "),
        "the step lines give done/total:\n{stdout}"
    );
    // A stale marker its killed writer left, in STALE, with the command that releases it.
    let stale = stdout
        .split("\nSTALE (")
        .nth(1)
        .and_then(|rest| rest.split("\nDISPATCH (").next())
        .unwrap_or_default();
    assert!(
        stale.contains("resumer ") && stale.contains("mihari release-marker resumer"),
        "{stdout}"
    );
    // A job paused by `mihari pause`, listed after the action list with who, when and why.
    let paused = stdout.split("\nPAUSED (1)\n").nth(1).unwrap_or_default();
    assert!(paused.trim_start().starts_with("reindex "), "{stdout}");
    assert!(paused.contains("paused by "), "{stdout}");
    assert!(paused.contains("search cluster upgrade"), "{stdout}");
    // Two questions from one job wait for a human: the approve key chooses between them.
    assert!(stdout.contains("approvals pending: 2"), "{stdout}");
    let phases = stdout
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("phases "))
        .take(4)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        phases.contains("step 'publish'") && phases.contains("step 'delete'"),
        "{stdout}"
    );
    assert!(
        mihari::core::text::is_inert(&stdout.replace('\n', "")),
        "escape sequences leaked"
    );
    // The sandbox was kept (--dir) and holds a jobs file mihari accepts.
    assert!(mihari::config::load(&dir.join("jobs.yaml")).is_ok());
    // ... and a fleet file to try `mihari fleet` with, named in what it printed.
    let fleet = mihari::config::load_fleet(&dir.join("fleet.yaml")).expect("the fleet file loads");
    assert_eq!(
        fleet
            .hosts
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>(),
        ["here", "localhost"]
    );
    // Both ways: the fleet screen, and one merged check.
    for shown in [
        "mihari fleet --fleet {}/fleet.yaml (keys",
        "mihari fleet --fleet {}/fleet.yaml check",
    ] {
        assert!(
            stdout.contains(&shown.replace("{}", &dir.display().to_string())),
            "{stdout}"
        );
    }
    // Every simulated job ended with the demo.
    let left = processes_mentioning(&dir.to_string_lossy());
    assert!(left.is_empty(), "demo processes left running: {left:?}");
}

#[test]
fn the_demo_refuses_a_folder_that_is_not_its_own() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("precious.txt"), "keep me").unwrap();
    let output = Command::cargo_bin("mihari")
        .unwrap()
        .args(["demo", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a demo sandbox"));
    assert_eq!(
        fs::read_to_string(dir.path().join("precious.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn jobs_example_yaml_loads() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs.example.yaml");
    let config = mihari::config::load_str(&fs::read_to_string(&example).unwrap(), &example)
        .unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = config.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "collect_raw",
            "label_status",
            "nightly_sync",
            "docs_server",
            "train_model",
            "nightly_export"
        ]
    );
    // The job a crontab line runs: due at 02:30 local time, 45 min of grace, told overdue.
    let nightly = &config.jobs[5];
    let schedule = nightly.schedule.as_ref().expect("a schedule");
    assert_eq!(schedule.grace_sec, 45 * 60);
    assert_eq!(
        nightly.should_run_when,
        [mihari::config::Predicate::Overdue]
    );
    // The training run that only prints: its progress is read from its log's tqdm frames.
    assert_eq!(
        config.jobs[4].log_progress,
        Some(mihari::config::LogProgress::Tqdm)
    );
    // The status-row job shows done_column and total_column standing in for expected_total.
    let status = &config.jobs[1];
    let table = status.progress_table.as_ref().expect("its table");
    assert_eq!(table.total_column.as_deref(), Some("total"));
    assert_eq!(status.expected_total, None);
    assert_eq!(
        config.jobs[2].should_run_when,
        [mihari::config::Predicate::NotSucceeded]
    );
    // collect_raw shows markers: a file and a mkdir lock, each with its age limit.
    let markers: Vec<u64> = config.jobs[0]
        .markers
        .iter()
        .map(|m| m.stale_after_sec)
        .collect();
    assert_eq!(markers, [1800, 86400]);
    assert_eq!(
        config.jobs[3].stall_limit(),
        None,
        "docs_server: stall_sec never"
    );
}

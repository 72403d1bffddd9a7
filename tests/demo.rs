//! `mihari demo` for real: it builds its sandbox, runs its simulated jobs, shows every state
//! and bucket of SPEC §4, and leaves no process behind — not even one its dashboard
//! restarted — and no zombie while it runs.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

mod common;
use common::tmux::Tmux;

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

/// One process as `/proc` shows it.
struct Seen {
    pid: u32,
    ppid: u32,
    state: char,
    start: u64,
    cmdline: String,
    cwd: Option<PathBuf>,
    environ: String,
}

fn processes() -> Vec<Seen> {
    let mut seen = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let after: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if after.len() < 20 {
            continue;
        }
        let text = |name: &str| {
            String::from_utf8_lossy(&fs::read(entry.path().join(name)).unwrap_or_default())
                .replace('\0', " ")
        };
        seen.push(Seen {
            pid,
            ppid: after[1].parse().unwrap_or(0),
            state: after[0].chars().next().unwrap_or('?'),
            start: after[19].parse().unwrap_or(0),
            cmdline: text("cmdline"),
            cwd: fs::read_link(entry.path().join("cwd")).ok(),
            environ: text("environ"),
        });
    }
    seen
}

/// Every process whose command line, working folder or environment names `sandbox`.
fn naming(sandbox: &Path) -> Vec<String> {
    let needle = sandbox.to_string_lossy();
    processes()
        .into_iter()
        .filter(|p| p.state != 'Z')
        .filter(|p| {
            p.cmdline.contains(&*needle)
                || p.environ.contains(&*needle)
                || p.cwd.as_ref().is_some_and(|cwd| cwd.starts_with(sandbox))
        })
        .map(|p| format!("pid {} ({}) in {:?}", p.pid, p.cmdline, p.cwd))
        .collect()
}

/// The processes below `root`, by parent PID.
fn tree(root: u32) -> Vec<Seen> {
    let all = processes();
    let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
    for (at, p) in all.iter().enumerate() {
        children.entry(p.ppid).or_default().push(at);
    }
    let mut found = BTreeSet::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for &at in children.get(&parent).into_iter().flatten() {
            if found.insert(at) {
                queue.push(all[at].pid);
            }
        }
    }
    all.into_iter()
        .enumerate()
        .filter(|(at, _)| found.contains(at))
        .map(|(_, p)| p)
        .collect()
}

/// Zombies in the tree below `root` that stay zombies for a second: a child that ended and
/// that nobody reaps (one caught between its exit and its parent's wait is not one).
fn lingering_zombies(root: u32) -> Vec<String> {
    let zombies = |root| -> BTreeSet<(u32, u64, u32)> {
        tree(root)
            .into_iter()
            .filter(|p| p.state == 'Z')
            .map(|p| (p.pid, p.start, p.ppid))
            .collect()
    };
    let first = zombies(root);
    thread::sleep(Duration::from_secs(1));
    zombies(root)
        .intersection(&first)
        .map(|(pid, _, ppid)| format!("pid {pid} (parent {ppid})"))
        .collect()
}

/// The PID of `mihari demo --dir SANDBOX`.
fn demo_pid(sandbox: &Path) -> u32 {
    let wanted = format!("demo --dir {} ", sandbox.display());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(p) = processes()
            .into_iter()
            .find(|p| p.state != 'Z' && p.cmdline.contains(&wanted))
        {
            return p.pid;
        }
        assert!(Instant::now() < deadline, "no 'mihari {wanted}' runs");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The demo in a tmux pane, started from a script outside the sandbox so that nothing but
/// the demo's own processes names it.
fn demo_in_tmux(name: &str) -> (tempfile::TempDir, PathBuf, Tmux, u32) {
    let parent = tempfile::tempdir().unwrap();
    let sandbox = parent.path().join("sandbox");
    let script = parent.path().join("run-demo.sh");
    fs::write(
        &script,
        format!(
            "'{}' demo --dir '{}'\necho DEMO-EXITED-$?\nsleep 60\n",
            env!("CARGO_BIN_EXE_mihari"),
            sandbox.display()
        ),
    )
    .unwrap();
    // Tall enough for the demo's 19 jobs and the detail under them.
    let tmux = Tmux::start(name, 160, 52, &format!("sh '{}'", script.display()));
    tmux.wait_for(
        &["DEAD_LOCK_STALE", "STALLED", "COMPLETE"],
        Duration::from_secs(30),
    );
    let demo = demo_pid(&sandbox);
    (parent, sandbox, tmux, demo)
}

/// Restarts `job` through the dashboard's dialog and waits until its new holder is verified;
/// what the dialog showed.
fn restart_from_the_dashboard(tmux: &Tmux, job: &str) -> String {
    tmux.keys(&["Escape", "Escape", "/", job, "Enter", "r"]);
    let dialog = tmux.wait_for(&[&format!("restart '{job}'?")], Duration::from_secs(10));
    assert!(
        !dialog.contains("workspace cooldown") && dialog.contains("[ Restart ]"),
        "the restart of '{job}' is held back:\n{dialog}"
    );
    tmux.keys(&["Tab", "Enter"]);
    tmux.wait_for(
        &[&format!("'{job}' restarted"), "holds its lock"],
        Duration::from_secs(20),
    );
    dialog
}

/// The incident: quitting the demo left `mihari run dead_lock` and its worker running (a
/// restart is spawned detached, in a session of its own), every job shared one workspace so
/// a second restart was held by a cooldown meant for another job, and workers that had ended
/// sat as zombies.
#[test]
fn quitting_the_demo_ends_what_its_dashboard_restarted_and_no_restart_holds_another() {
    let (_parent, sandbox, tmux, demo) = demo_in_tmux("restarts");
    // It says whether a watcher runs in it, and how to start one on its sandbox.
    let jobs = sandbox.join("jobs.yaml");
    tmux.wait_for(
        &[
            "no watcher yet",
            "no watcher: mihari watch --config",
            &format!("mihari watch --config {}", jobs.display()),
        ],
        Duration::from_secs(10),
    );
    // The crashed and the complete job's workers have ended: reaped, not zombies.
    let zombies = lingering_zombies(demo);
    assert!(zombies.is_empty(), "zombies under the demo: {zombies:?}");

    restart_from_the_dashboard(&tmux, "dead_lock");
    let restarted: Vec<String> = tree(demo)
        .into_iter()
        .filter(|p| p.cwd.as_deref() == Some(&sandbox.join("jobs/dead_lock")))
        .map(|p| p.cmdline)
        .collect();
    assert!(
        restarted.iter().any(|c| c.contains("run dead_lock"))
            && restarted
                .iter()
                .any(|c| c.contains("sim worker --log dead.log")),
        "the restart runs in dead_lock's own folder, in the demo's tree: {restarted:?}"
    );
    // Another job's restart right after: its own workspace, no cooldown.
    restart_from_the_dashboard(&tmux, "crashed");
    let zombies = lingering_zombies(demo);
    assert!(zombies.is_empty(), "zombies under the demo: {zombies:?}");

    tmux.keys(&["Escape", "Escape", "q"]);
    let screen = tmux.wait_for(&["DEMO-EXITED-0"], Duration::from_secs(20));
    assert!(screen.contains("all demo processes ended"), "{screen}");
    let left = naming(&sandbox);
    assert!(left.is_empty(), "demo processes left running: {left:#?}");
    // Each restarted run was ended gently: `mihari run` recorded how, and removed its lock.
    let events = Command::cargo_bin("mihari")
        .unwrap()
        .arg("--config")
        .arg(&jobs)
        .args(["events", "--kind", "exited"])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&events.stdout);
    for job in ["dead_lock", "crashed"] {
        assert!(
            events
                .lines()
                .any(|line| line.contains(job) && line.contains("SIGTERM")),
            "{events}"
        );
    }
    assert!(!sandbox.join("jobs/dead_lock/dead.lock").exists());
}

/// A closed terminal (the tmux window killed: SIGHUP to the demo and its dashboard) ends the
/// demo the ordinary way: nothing it or its dashboard started is left.
#[test]
fn closing_the_demos_terminal_ends_what_its_dashboard_restarted() {
    let (_parent, sandbox, tmux, demo) = demo_in_tmux("hangup");
    restart_from_the_dashboard(&tmux, "dead_lock");
    drop(tmux);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{demo}")).exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
    let left = naming(&sandbox);
    assert!(left.is_empty(), "demo processes left running: {left:#?}");
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
            "train_llm",
            "nightly_export"
        ]
    );
    // The job on a Slurm cluster: no lock, no log (its StdOut is), restarted by sbatch.
    let slurm = config.jobs[5]
        .slurm
        .as_ref()
        .expect("train_llm runs on Slurm");
    assert_eq!(
        slurm.job,
        mihari::config::SlurmJobRef::Name("train-llm".into())
    );
    assert_eq!(
        config.jobs[5].slurm_restart_argv(None),
        Some(vec!["sbatch".to_string(), "train.sbatch".to_string()])
    );
    // The job a crontab line runs: due at 02:30 local time, 45 min of grace, told overdue.
    let nightly = &config.jobs[6];
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

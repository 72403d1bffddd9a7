//! End to end: the real binary's demo inside tmux. Keys are sent, the pane is captured, and
//! the demo must show every state, follow the keys, keep hostile log lines inert (the pane's
//! title never changes), and end every process it started when the operator quits.
//!
//! Needs tmux: `.ci/run` installs it (`apt-get install -y tmux`) when it is missing.

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

mod common;
use common::tmux::Tmux;

fn live_processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // The simulated jobs, not the shell tmux runs the demo in.
        if !zombie && cmdline.contains("sim worker") && cmdline.contains(needle) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn the_demo_dashboard_in_tmux_shows_every_state_follows_keys_and_cleans_up() {
    let parent = tempfile::tempdir().unwrap();
    let sandbox = parent.path().join("sandbox");
    let binary = env!("CARGO_BIN_EXE_mihari");
    let command = format!(
        "{binary} demo --dir {}; echo DEMO-EXITED-$?; sleep 60",
        sandbox.display()
    );
    // Tall enough for the demo's 19 jobs and the detail under them.
    let tmux = Tmux::start("wide", 120, 52, &command);
    let title_before = tmux.title();

    // Every state and bucket, live: the frozen job turns STALLED a few seconds in.
    tmux.wait_for(
        &[
            "RUNNING",
            "STALLED",
            "DEAD_LOCK_STALE",
            "UNKNOWN",
            "SHOULD_BE_RUNNING",
            "COMPLETE",
            "NOT_RUNNING",
            "\nRESTART ",
            "\nRED ",
            "\nSTALE ",
            "\nDISPATCH ",
            "held while RED: gaps",
            "no watcher yet",
            "⚑ APPROVALS 2",
        ],
        Duration::from_secs(30),
    );

    // The help lists the keys, and any key closes it.
    tmux.keys(&["?"]);
    tmux.wait_for(
        &["keys", "filter by id, owner or state"],
        Duration::from_secs(5),
    );
    tmux.keys(&["Escape"]);

    // Filter to the hostile job and open its detail: its log is shown, inert.
    tmux.keys(&["/", "hostile", "Enter"]);
    tmux.wait_for(&["filter 'hostile'"], Duration::from_secs(5));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for(
        &["detail: hostile", "title change attempt", "bell␇"],
        Duration::from_secs(10),
    );
    assert!(!screen.contains('\u{1b}'), "an escape reached the pane");
    assert!(!screen.contains("YOU HAVE BEEN PWNED"), "{screen}");
    assert_eq!(
        tmux.title(),
        title_before,
        "a log line changed the terminal title"
    );

    // Back to the list, clear the filter, and find the fault in the broken job's detail.
    tmux.keys(&["Escape", "Escape"]);
    tmux.keys(&["/", "broken", "Enter", "Enter"]);
    tmux.wait_for(
        &["detail: broken", "progress_file  fault", "not a file"],
        Duration::from_secs(10),
    );

    // A restart through the dialog: Cancel is focused first; Tab, Enter restarts it, and
    // the new holder is verified; the events view shows the record.
    tmux.keys(&["Escape", "Escape", "/", "dead_lock", "Enter", "r"]);
    tmux.wait_for(
        &[
            "restart 'dead_lock'?",
            "[ Cancel ]",
            "[ Restart ]",
            "argv",
            "holder",
        ],
        Duration::from_secs(10),
    );
    tmux.keys(&["Tab", "Enter"]);
    tmux.wait_for(&["holds its lock"], Duration::from_secs(20));
    tmux.keys(&["e"]);
    tmux.wait_for(
        &[
            "events: job dead_lock",
            "confirmed",
            "claimed",
            "spawned",
            "verified",
        ],
        Duration::from_secs(10),
    );
    tmux.keys(&["Escape"]);

    // q quits, the terminal is given back, and every simulated job is gone.
    tmux.keys(&["q"]);
    tmux.wait_for(&["DEMO-EXITED-0"], Duration::from_secs(10));
    let left = live_processes_mentioning(&sandbox.to_string_lossy());
    assert!(left.is_empty(), "demo processes left running: {left:?}");
    assert!(Path::new(&sandbox).join("jobs.yaml").exists());
}

#[test]
fn the_dashboard_fits_80x24_and_quits_on_ctrl_c() {
    let parent = tempfile::tempdir().unwrap();
    let sandbox = parent.path().join("sandbox");
    let binary = env!("CARGO_BIN_EXE_mihari");
    let command = format!(
        "{binary} demo --dir {}; echo DEMO-EXITED-$?; sleep 60",
        sandbox.display()
    );
    let tmux = Tmux::start("small", 80, 24, &command);
    tmux.wait_for(
        &["RESTART", "DEAD_LOCK_STALE", "q quit"],
        Duration::from_secs(30),
    );
    // Past the two approvals at the head of the list, the first RESTART job.
    tmux.keys(&["j", "j", "Enter"]);
    tmux.wait_for(
        &["detail: dead_lock", "Reasons", "Evidence"],
        Duration::from_secs(5),
    );
    tmux.keys(&["C-c"]);
    tmux.wait_for(&["DEMO-EXITED-0"], Duration::from_secs(10));
    let left = live_processes_mentioning(&sandbox.to_string_lossy());
    assert!(left.is_empty(), "demo processes left running: {left:?}");
}

/// `mihari ARGS --config JOBS` with `TZ=Asia/Tokyo` for it alone: (exit code, stdout).
fn mihari_in_tokyo(jobs: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mihari"))
        .arg("--config")
        .arg(jobs)
        .args(args)
        .env("TZ", "Asia/Tokyo")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mihari runs");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn two_pending_approvals_are_listed_and_the_second_is_chosen_approved_and_recorded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(
        &jobs,
        "settings:\n  state_dir: state\njobs:\n  - id: publisher\n    lock: publisher.lock\n    \
         log: publisher.log\n    should_run_when: [resource_free]\n",
    )
    .unwrap();
    std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.path().join("publisher.log"), "waiting for a human\n").unwrap();
    for (step, key, summary) in [
        (
            "publish",
            "k-first-publish",
            "publish 3 articles to the main feed",
        ),
        ("delete", "k-second-delete", "delete 12 raw shards"),
    ] {
        let (code, said) = mihari_in_tokyo(
            &jobs,
            &[
                "approval",
                "request",
                "publisher",
                "--step",
                step,
                "--key",
                key,
                "--summary",
                summary,
            ],
        );
        assert_eq!(code, 10, "a new request is pending: {said}");
        // Two requests in the same millisecond would have no order to show.
        thread::sleep(Duration::from_millis(20));
    }
    let (_, listed) = mihari_in_tokyo(&jobs, &["approval", "list", "--json"]);
    let requested: Vec<(String, chrono::DateTime<chrono::Utc>)> = listed
        .lines()
        .flat_map(|l| {
            let value: serde_json::Value = serde_json::from_str(l).expect("json");
            match value {
                serde_json::Value::Array(items) => items,
                one => vec![one],
            }
        })
        .map(|a| {
            let at = chrono::DateTime::parse_from_rfc3339(a["requested"].as_str().unwrap())
                .unwrap()
                .with_timezone(&chrono::Utc);
            (a["key"].as_str().unwrap().to_string(), at)
        })
        .collect();
    assert_eq!(requested.len(), 2, "{listed}");
    let tokyo = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let asked_at = |key: &str| {
        let at = requested.iter().find(|(k, _)| k == key).unwrap().1;
        at.with_timezone(&tokyo).format("%H:%M:%S").to_string()
    };

    let command = format!(
        "TZ=Asia/Tokyo {} --config {}; echo DASHBOARD-EXITED-$?; sleep 60",
        env!("CARGO_BIN_EXE_mihari"),
        jobs.display()
    );
    let tmux = Tmux::start("approvals", 120, 40, &command);
    // The header names the zone once; the detail lists both, oldest first, with who asked
    // and when in Tokyo's time.
    tmux.wait_for(
        &["publisher", "⚑ APPROVALS 2", "JST (+09:00)"],
        Duration::from_secs(30),
    );
    tmux.keys(&["Enter"]);
    let first_at = format!("at {} (", asked_at("k-first-publish"));
    let second_at = format!("at {} (", asked_at("k-second-delete"));
    let screen = tmux.wait_for(
        &[
            "Approvals pending: 2",
            "1 ⚑ step 'publish': publish 3 articles to the main feed · asked by ",
            "2 ⚑ step 'delete': delete 12 raw shards · asked by ",
            "key k-first-publish",
            "key k-second-delete",
            &first_at,
            &second_at,
        ],
        Duration::from_secs(10),
    );
    assert_eq!(screen.matches("JST (+09:00)").count(), 1, "{screen}");

    // On the job's own row (the cursor starts on the first approval, which `a` would decide
    // at once), a: the chooser, not the first one's dialog; 2 chooses the second; the same
    // confirmation dialog follows, asking for the typed job id.
    tmux.keys(&["Escape", "G", "a"]);
    tmux.wait_for(
        &[
            "which request of 'publisher'?",
            "› 1 step 'publish'",
            "  2 step 'delete'",
        ],
        Duration::from_secs(10),
    );
    tmux.keys(&["2"]);
    let dialog = tmux.wait_for(
        &["approve 'publisher'?", "k-second-delete", "[ Approve ]"],
        Duration::from_secs(10),
    );
    assert!(!dialog.contains("which request"), "{dialog}");
    for c in "publisher".chars() {
        tmux.run(&["send-keys", "-t", "demo", "-l", &c.to_string()]);
    }
    tmux.keys(&["Tab", "Tab", "Tab", "Tab", "Enter"]);
    tmux.wait_for(&["Approval pending (a to decide)"], Duration::from_secs(20));

    // The event log records the second one approved; the first is still pending.
    let (_, approved) = mihari_in_tokyo(&jobs, &["events", "--json", "--kind", "approved"]);
    let approved: Vec<serde_json::Value> = approved
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(approved.len(), 1, "{approved:?}");
    assert_eq!(approved[0]["key"], "k-second-delete");
    assert_eq!(approved[0]["actor"], "operator");
    let (_, pending) = mihari_in_tokyo(&jobs, &["approval", "list", "--json"]);
    assert!(pending.contains("k-first-publish"), "{pending}");
    assert!(!pending.contains("k-second-delete"), "{pending}");
    let (_, report) = mihari_in_tokyo(&jobs, &["check", "--json"]);
    assert!(
        report.contains("(mihari approval approve k-first-publish)")
            && !report.contains("k-second-delete"),
        "check names the first as pending, and only it: {report}"
    );

    // The events view shows the approval at its time in Tokyo.
    let approved_at = chrono::DateTime::parse_from_rfc3339(approved[0]["at"].as_str().unwrap())
        .unwrap()
        .with_timezone(&tokyo)
        .format("%m-%d %H:%M:%S approved")
        .to_string();
    tmux.keys(&["e"]);
    tmux.wait_for(
        &["events: job publisher", &approved_at],
        Duration::from_secs(10),
    );
    tmux.keys(&["Escape"]);

    tmux.keys(&["q"]);
    tmux.wait_for(&["DASHBOARD-EXITED-0"], Duration::from_secs(10));
}

#[test]
fn the_marker_key_shows_what_happened_then_removes_the_stale_marker_only_when_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join(".resumed");
    std::fs::write(&marker, "resumed by worker-3 at step 1200\n").unwrap();
    let aged = Command::new("touch")
        .arg("-d")
        .arg("2 hours ago")
        .arg(&marker)
        .status()
        .unwrap();
    assert!(aged.success());
    let config = dir.path().join("jobs.yaml");
    std::fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: resumer\n    log: {}\n    \
             should_run_when: [not_succeeded]\n    markers:\n      - {{ path: '{}', \
             stale_after_sec: 1800 }}\n",
            dir.path().join("state").display(),
            dir.path().join("resumer.log").display(),
            marker.display()
        ),
    )
    .unwrap();
    let binary = env!("CARGO_BIN_EXE_mihari");
    let command = format!(
        "{binary} --config {}; echo DASHBOARD-EXITED-$?; sleep 60",
        config.display()
    );
    let tmux = Tmux::start("marker", 100, 32, &command);
    tmux.wait_for(&["STALE", "resumer", "q quit"], Duration::from_secs(30));
    tmux.keys(&["Enter"]);
    tmux.wait_for(&["Markers", "M releases it"], Duration::from_secs(10));

    // The dialog shows what happened; Cancel has the focus: Enter removes nothing.
    tmux.keys(&["M"]);
    let screen = tmux.wait_for(
        &[
            "release marker 'resumer'?",
            "age",
            "2 h",
            "resumed by worker-3",
            "[ Release ]",
        ],
        Duration::from_secs(10),
    );
    assert!(screen.contains("[ Cancel ]"), "{screen}");
    tmux.keys(&["Enter"]);
    tmux.wait_for(&["declined"], Duration::from_secs(10));
    assert!(marker.exists(), "Cancel removed the marker");

    // Tab to Release, Enter: removed, and said.
    tmux.keys(&["M"]);
    tmux.wait_for(&["release marker 'resumer'?"], Duration::from_secs(10));
    tmux.keys(&["Tab", "Enter"]);
    tmux.wait_for(&["was removed"], Duration::from_secs(10));
    assert!(!marker.exists(), "the confirmed release left the marker");
    tmux.keys(&["q"]);
    tmux.wait_for(&["DASHBOARD-EXITED-0"], Duration::from_secs(10));

    let events = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("events")
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&events.stdout);
    for kind in ["declined", "confirmed", "released"] {
        assert!(events.contains(kind), "no {kind} in:\n{events}");
    }
}

/// Two stale markers of one job: M opens a chooser among them (as `a` does among
/// approvals), not the first one's dialog; the second is chosen, shown and released, and
/// the first stays. The detail's reasons name each marker's path in the command they
/// suggest; with one left, the bare command again.
#[test]
fn the_marker_key_chooses_among_several_stale_markers() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.marker");
    let second = dir.path().join("second.marker");
    for (path, content) in [
        (&first, "left by worker-1\n"),
        (&second, "left by worker-2\n"),
    ] {
        std::fs::write(path, content).unwrap();
        let aged = Command::new("touch")
            .arg("-d")
            .arg("2 hours ago")
            .arg(path)
            .status()
            .unwrap();
        assert!(aged.success());
    }
    let config = dir.path().join("jobs.yaml");
    std::fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: resumer\n    log: {}\n    \
             should_run_when: [not_succeeded]\n    markers:\n      - {{ path: '{}', \
             stale_after_sec: 1800 }}\n      - {{ path: '{}', stale_after_sec: 1800 }}\n",
            dir.path().join("state").display(),
            dir.path().join("resumer.log").display(),
            first.display(),
            second.display()
        ),
    )
    .unwrap();
    let binary = env!("CARGO_BIN_EXE_mihari");
    let command = format!(
        "{binary} --config {}; echo DASHBOARD-EXITED-$?; sleep 60",
        config.display()
    );
    let tmux = Tmux::start("markers", 160, 44, &command);
    tmux.wait_for(&["STALE", "resumer", "q quit"], Duration::from_secs(30));
    tmux.keys(&["Enter"]);
    tmux.wait_for(
        &[
            "Markers",
            &format!("release-marker resumer '{}'", second.display()),
        ],
        Duration::from_secs(10),
    );

    tmux.keys(&["M"]);
    let chooser = tmux.wait_for(
        &[
            "which marker of 'resumer'?",
            &format!("› 1 marker '{}'", first.display()),
            &format!("  2 marker '{}'", second.display()),
        ],
        Duration::from_secs(10),
    );
    assert!(
        !chooser.contains("[ Release ]"),
        "a chooser, not a dialog: {chooser}"
    );
    // Esc decides nothing.
    tmux.keys(&["Escape"]);
    tmux.wait_for(&["no marker chosen"], Duration::from_secs(10));
    assert!(first.exists() && second.exists());

    // Down, Enter: the second one's dialog, with its content; Tab to Release, Enter.
    tmux.keys(&["M"]);
    tmux.wait_for(&["which marker of 'resumer'?"], Duration::from_secs(10));
    tmux.keys(&["Down", "Enter"]);
    let dialog = tmux.wait_for(
        &[
            "release marker 'resumer'?",
            "left by worker-2",
            "[ Release ]",
        ],
        Duration::from_secs(10),
    );
    assert!(!dialog.contains("which marker"), "{dialog}");
    tmux.keys(&["Tab", "Enter"]);
    tmux.wait_for(&["was removed"], Duration::from_secs(10));
    assert!(!second.exists(), "the chosen marker is released");
    assert!(first.exists(), "the other one is left alone");

    // One stale marker left: M goes straight to its dialog, and the reason is the bare
    // command again.
    let detail = tmux.wait_for(
        &["release it (mihari release-marker", "resumer)"],
        Duration::from_secs(10),
    );
    assert!(!detail.contains("release-marker resumer '"), "{detail}");
    tmux.keys(&["M"]);
    tmux.wait_for(
        &["release marker 'resumer'?", "left by worker-1"],
        Duration::from_secs(10),
    );
    tmux.keys(&["Escape"]);
    tmux.keys(&["q"]);
    tmux.wait_for(&["DASHBOARD-EXITED-0"], Duration::from_secs(10));
}

/// The dashboard and the fleet screen end cleanly on SIGTERM and SIGHUP (a closed tmux
/// window, a `kill`, a logout): exit 0 with the terminal given back (the alternate screen
/// left, the shell's own lines visible again), not killed mid-frame.
#[test]
fn sigterm_and_sighup_end_the_dashboard_and_the_fleet_screen_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.yaml");
    std::fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: quiet\n    log: {}\n    \
             should_run_when: [not_succeeded]\n",
            dir.path().join("state").display(),
            dir.path().join("quiet.log").display()
        ),
    )
    .unwrap();
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet,
        format!(
            "hosts:\n  - name: here\n    config: '{}'\n    mihari: '{}'\n",
            config.display(),
            env!("CARGO_BIN_EXE_mihari")
        ),
    )
    .unwrap();
    let binary = env!("CARGO_BIN_EXE_mihari");
    for (name, args, shown, signal) in [
        (
            "sig-tui",
            format!("--config {}", config.display()),
            "quiet",
            "TERM",
        ),
        (
            "sig-fleet",
            format!("fleet --fleet {}", fleet.display()),
            "here",
            "HUP",
        ),
    ] {
        let command = format!(
            "echo BEFORE-THE-SCREEN; {binary} {args} & pid=$!; echo $pid > {pidfile}; \
             wait $pid; echo SCREEN-EXITED-$?; sleep 60",
            pidfile = dir.path().join(format!("{name}.pid")).display()
        );
        let tmux = Tmux::start(name, 120, 30, &command);
        tmux.wait_for(&[shown, "q quit"], Duration::from_secs(30));
        let pid = std::fs::read_to_string(dir.path().join(format!("{name}.pid"))).unwrap();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), pid.trim()])
            .status()
            .unwrap();
        assert!(sent.success());
        let screen = tmux.wait_for(&["SCREEN-EXITED-0"], Duration::from_secs(10));
        assert!(
            screen.contains("BEFORE-THE-SCREEN") && !screen.contains("q quit"),
            "{name}: the terminal is the shell's again:\n{screen}"
        );
    }
}

//! End to end: the real binary's demo inside tmux. Keys are sent, the pane is captured, and
//! the demo must show every state, follow the keys, keep hostile log lines inert (the pane's
//! title never changes), and end every process it started when the operator quits.
//!
//! Needs tmux: `.ci/run` installs it (`apt-get install -y tmux`) when it is missing.

use std::path::Path;
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

/// A tmux server of this test's own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str, width: u16, height: u16, command: &str) -> Tmux {
        let found = Command::new("tmux").arg("-V").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "tmux is needed for this test: apt-get install -y tmux"
        );
        let tmux = Tmux {
            socket: format!("mihari-test-{}-{name}", std::process::id()),
        };
        let out = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "demo",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            command,
        ]);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "demo"]).stdout)
            .into_owned()
    }

    /// Sends keys one at a time, as a person would: two escapes sent together could read as
    /// one Alt-Escape.
    fn keys(&self, keys: &[&str]) {
        for key in keys {
            self.run(&["send-keys", "-t", "demo", key]);
            thread::sleep(Duration::from_millis(150));
        }
    }

    fn title(&self) -> String {
        let out = self.run(&["display-message", "-p", "-t", "demo", "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until the pane shows everything in `wanted`, or fails with what it showed.
    fn wait_for(&self, wanted: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.capture();
            if wanted.iter().all(|w| screen.contains(w)) {
                return screen;
            }
            if Instant::now() > deadline {
                let missing: Vec<&&str> = wanted.iter().filter(|w| !screen.contains(**w)).collect();
                panic!("the pane never showed {missing:?}; it showed:\n{screen}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

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
    let tmux = Tmux::start("wide", 120, 40, &command);
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
    tmux.keys(&["j", "Enter"]);
    tmux.wait_for(&["detail: ", "Reasons", "Evidence"], Duration::from_secs(5));
    tmux.keys(&["C-c"]);
    tmux.wait_for(&["DEMO-EXITED-0"], Duration::from_secs(10));
    let left = live_processes_mentioning(&sandbox.to_string_lossy());
    assert!(left.is_empty(), "demo processes left running: {left:?}");
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

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
            "JOBS FILE REFUSED",
            "the last good file stays in force",
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

/// A watcher of the jobs file `jobs` started as a child of the test, its stderr in `stderr`.
fn start_watcher(jobs: &Path, stderr: &Path) -> Watcher {
    Watcher {
        child: Command::new(BIN)
            .arg("--config")
            .arg(jobs)
            .arg("watch")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(stderr).unwrap())
            .spawn()
            .unwrap(),
    }
}

/// Hardening, round three, item 12: 1 of 30 truncate-and-write saves was read while empty
/// and refused (`config-refused`, a page), and 43 of 100 at 100 saves a second. A real writer
/// (python, `open(path, 'w')`: truncate, then write) saves two valid files in turn, hundreds
/// of times, against a running watcher: it loads them, and refuses none.
#[test]
fn saves_in_place_as_fast_as_a_script_makes_them_are_never_refused_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    let state = dir.path().join("state");
    for id in ["alpha", "beta"] {
        fs::write(dir.path().join(format!("{id}.log")), "working\n").unwrap();
    }
    let one = jobs_file("", &["alpha"]);
    let two = jobs_file("", &["alpha", "beta"]);
    fs::write(&jobs, &one).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).unwrap();
    let watcher = start_watcher(&jobs, &dir.path().join("watch.stderr"));
    wait_until("the watcher starts", Duration::from_secs(20), || {
        !events(&state, "watcher-started").is_empty()
    });
    let saves = 300;
    let writer = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, time\n\
             path, one, two, saves = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n\
             for n in range(saves):\n\
             \x20   with open(path, 'w') as f:\n\
             \x20       f.write(two if n % 2 == 0 else one)\n\
             \x20   time.sleep(0.01)\n",
        )
        .arg(&jobs)
        .arg(&one)
        .arg(&two)
        .arg(saves.to_string())
        .status()
        .unwrap();
    assert!(writer.success(), "the writer failed");
    // The last save is `one`: once it is in force, every save has been read.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let loads = events(&state, "config-reloaded");
        let last = loads.last().and_then(|e| e.reason.clone());
        if last
            .as_deref()
            .is_some_and(|reason| reason.contains("1 job"))
        {
            break;
        }
        if Instant::now() >= deadline {
            let stderr = fs::read_to_string(dir.path().join("watch.stderr")).unwrap_or_default();
            panic!(
                "the last save (1 job) was never loaded: {} loads, the last {:?}, {} refused; \
                 the watcher said:\n{stderr}",
                loads.len(),
                last,
                events(&state, "config-refused").len()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
    let reloaded = events(&state, "config-reloaded").len();
    let refused = events(&state, "config-refused");
    assert!(
        refused.is_empty(),
        "{} of {saves} valid saves were refused ({reloaded} loaded): {:?}",
        refused.len(),
        refused.first().and_then(|e| e.reason.clone())
    );
    assert!(reloaded > 0, "no save was loaded");
    drop(watcher);
}

/// The tracee strace started: its only child.
fn child_of(parent: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether a thread of `pid` has been in system call `number` for two looks 200 ms apart.
fn held_in(pid: u32, number: i64) -> bool {
    let in_it = || -> Vec<String> {
        fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|task| {
                        fs::read_to_string(task.path().join("syscall")).is_ok_and(|text| {
                            text.split_whitespace().next() == Some(&number.to_string())
                        })
                    })
                    .map(|task| task.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = in_it();
    if first.is_empty() {
        return false;
    }
    thread::sleep(Duration::from_millis(200));
    in_it().iter().any(|task| first.contains(task))
}

/// Hardening, round three, item 4: the reload looked at the jobs file, then opened it; a named
/// pipe swapped in between (renameat2 RENAME_EXCHANGE) blocked the watcher's only loop in
/// open(2) for ever, while `check` still said "watcher alive". strace holds the watcher's
/// open of the jobs file for 3 s (delay injection, as the attacker widened the gap), the test
/// swaps a named pipe in meanwhile: the watcher refuses it, says what it is, and loads the
/// file again when it is swapped back.
#[test]
fn a_named_pipe_swapped_in_while_a_reload_opens_the_file_never_hangs_the_watcher() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIPPED: strace is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    let pipe = dir.path().join("pipe.yaml");
    let state = dir.path().join("state");
    for id in ["alpha", "beta"] {
        fs::write(dir.path().join(format!("{id}.log")), "working\n").unwrap();
    }
    fs::write(&jobs, jobs_file("", &["alpha"])).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).unwrap();
    nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Every open of the jobs file after the first (the start's) waits 3 s.
    let strace = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(&jobs)
        .args(["-e", "trace=open,openat", "-e"])
        .arg("inject=open,openat:delay_enter=3000000:when=2+")
        .arg(BIN)
        .arg("--config")
        .arg(&jobs)
        .arg("watch")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(dir.path().join("watch.stderr")).unwrap())
        .spawn()
        .unwrap();
    let strace = Traced(strace);
    wait_until("the watcher starts", Duration::from_secs(30), || {
        !events(&state, "watcher-started").is_empty()
    });
    let watcher = child_of(strace.0.id()).expect("the watcher under strace");
    // A save; its reload is held in the open, and the pipe is swapped in meanwhile.
    save_in_place(&jobs, &jobs_file("", &["alpha", "beta"]));
    wait_until("the reload opens the file", Duration::from_secs(10), || {
        held_in(watcher, libc::SYS_openat)
    });
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &jobs,
        nix::fcntl::AT_FDCWD,
        &pipe,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
    wait_until("the named pipe is refused", Duration::from_secs(30), || {
        events(&state, "config-refused").iter().any(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.contains("named pipe"))
        })
    });
    // Swapped back: the save is loaded, the watcher was never stuck.
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        &jobs,
        nix::fcntl::AT_FDCWD,
        &pipe,
        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
    )
    .unwrap();
    wait_until("the save is loaded", Duration::from_secs(30), || {
        events(&state, "config-reloaded")
            .iter()
            .any(|e| e.reason.as_deref().is_some_and(|r| r.contains("beta")))
    });
    drop(strace);
}

/// A program started under strace; dropped, the traced program is killed first (a watcher
/// stuck in open(2) would keep strace waiting for it for ever), then strace.
struct Traced(Child);

impl Drop for Traced {
    fn drop(&mut self) {
        if let Some(tracee) = child_of(self.0.id()) {
            let _ = kill(Pid::from_raw(tracee as i32), Signal::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Item 4 too: with the jobs file a named pipe, `mihari events` and `mihari digest` read its
/// settings to find the store, and hung for ever in open(2). They come back, naming it.
#[test]
fn events_and_digest_never_hang_on_a_jobs_file_that_is_a_named_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.yaml");
    nix::unistd::mkfifo(&jobs, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for args in [&["events"][..], &["digest"], &["check"]] {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(&jobs)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mihari {args:?} hung on a jobs file that is a named pipe");
            }
            thread::sleep(Duration::from_millis(50));
        }
        let output = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "mihari {args:?}: {said}");
        assert!(said.contains("named pipe"), "mihari {args:?}: {said}");
    }
}

//! Log rotation never makes a healthy slow writer look stalled (SPEC §3, the log row).
//!
//! Every test runs a real writer under the real `mihari run` (so the lock and its holder are
//! the ones an operator gets), writing one line every few seconds with a `stall_sec` a little
//! longer than that, and waits until the holder is older than `stall_sec`: from then on an age
//! that fell back to the holder's start would say STALLED. It then rotates the log right after
//! a write — with the real `/usr/sbin/logrotate -f -s STATE CONF` (copytruncate; create with a
//! postrotate HUP to a writer that reopens on HUP; copytruncate keeping no copy) or inside a
//! real Python `logging.handlers.RotatingFileHandler` — and asks at once, before the next
//! write: a fresh `mihari check --json`, or the long-running engine ([`Live`], driven as the
//! dashboard and the watcher drive it). The writer must stay RUNNING, and the reasons must say
//! where the last write was found.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use chrono::Utc;
use mihari::engine::Snapshot;
use mihari::engine::live::{Arrivals, Live};
use mihari::engine::triggers::{Sink, Trigger};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// Seconds between two lines of the writer.
const EVERY_SEC: u64 = 4;
/// The job's stall_sec: longer than the gap between two lines, so a healthy writer is never
/// stalled; shorter than the holder's age when the log is rotated.
const STALL_SEC: u64 = 7;

const LOGROTATE: &str = "/usr/sbin/logrotate";
const PYTHON: &str = "/usr/bin/python3";

/// The writer, in the three ways real programs write a log.
const WRITER: &str = r#"
import logging, logging.handlers, os, signal, sys, time

mode, log, pidfile, every = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
with open(pidfile, "w") as f:
    f.write(str(os.getpid()))
n = 0
if mode == "stdout":
    # Its output is the log `mihari run` opened for it, appending: what copytruncate expects.
    while True:
        n += 1
        print(f"line {n}", flush=True)
        time.sleep(every)
elif mode == "hup":
    # A daemon that reopens its log on SIGHUP, as logrotate's postrotate asks it to.
    reopen = [False]
    signal.signal(signal.SIGHUP, lambda *_: reopen.__setitem__(0, True))
    out = open(log, "a")
    while True:
        if reopen[0]:
            out.close()
            out = open(log, "a")
            reopen[0] = False
        n += 1
        out.write(f"line {n}\n")
        out.flush()
        time.sleep(every)
else:
    handler = logging.handlers.RotatingFileHandler(log, maxBytes=150, backupCount=3)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger("writer")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    while True:
        n += 1
        logger.info("processed item %d", n)
        time.sleep(every)
"#;

fn require(tool: &str, package: &str) {
    assert!(
        Path::new(tool).exists(),
        "{tool} is missing: install the Debian package '{package}' (the CI installs it)"
    );
}

/// A folder with the jobs file, the writer, the logrotate files and the state folder.
struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        require(LOGROTATE, "logrotate");
        require(PYTHON, "python3");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        for folder in ["logs", "run", "state"] {
            fs::create_dir(root.join(folder)).expect("folder");
        }
        fs::write(root.join("writer.py"), WRITER).expect("the writer");
        Sandbox { _dir: dir, root }
    }

    fn log(&self) -> PathBuf {
        self.root.join("logs/app.log")
    }

    fn pidfile(&self) -> PathBuf {
        self.root.join("run/writer.pid")
    }

    /// The jobs file for a writer in `mode`.
    fn config(&self, mode: &str) -> PathBuf {
        let text = format!(
            "settings:\n  state_dir: state\njobs:\n  - id: writer\n    lock: run/writer.lock\n    \
             log: logs/app.log\n    stall_sec: {STALL_SEC}\n    should_run_when: [resource_free]\n    \
             restart:\n      command: [\"{PYTHON}\", \"{}\", \"{mode}\", \"{}\", \"{}\", \"{EVERY_SEC}\"]\n",
            self.root.join("writer.py").display(),
            self.log().display(),
            self.pidfile().display()
        );
        let path = self.root.join("jobs.yaml");
        fs::write(&path, text).expect("jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    /// `mihari run writer`, until the writer has written its first line.
    fn start(&self, mode: &str) -> Running {
        let child = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(self.config(mode))
            .args(["run", "writer"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari run starts");
        let running = Running {
            child,
            started: Instant::now(),
        };
        wait_for("the writer's first line", Duration::from_secs(20), || {
            fs::metadata(self.log()).is_ok_and(|m| m.len() > 0) && self.pidfile().exists()
        });
        running
    }

    /// A logrotate configuration for the log, with `directives` inside its block.
    fn logrotate_conf(&self, directives: &str) -> PathBuf {
        let path = self.root.join("logrotate.conf");
        fs::write(
            &path,
            format!("{} {{\n{directives}\n}}\n", self.log().display()),
        )
        .expect("logrotate.conf");
        path
    }

    /// Runs the real logrotate, forced, with its own state file.
    fn logrotate(&self, conf: &Path) {
        let output = Command::new(LOGROTATE)
            .arg("-f")
            .arg("-s")
            .arg(self.root.join("logrotate.state"))
            .arg(conf)
            .output()
            .expect("logrotate runs");
        assert!(
            output.status.success(),
            "logrotate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Waits for the writer's next line, so that the next one is a whole interval away.
    fn just_after_a_write(&self) {
        let before = fs::metadata(self.log()).map(|m| (m.ino(), m.len())).ok();
        wait_for(
            "the writer's next line",
            Duration::from_secs(EVERY_SEC * 3),
            || fs::metadata(self.log()).map(|m| (m.ino(), m.len())).ok() != before,
        );
    }

    /// A fresh `mihari check --json`: the writer's row.
    fn check(&self) -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(self.root.join("jobs.yaml"))
            .args(["check", "--json"])
            .stdin(Stdio::null())
            .output()
            .expect("mihari check runs");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        report["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|job| job["id"] == "writer"))
            .cloned()
            .expect("the writer's row")
    }
}

/// `mihari run` and its writer; stopped (SIGTERM, forwarded to the writer) when dropped.
struct Running {
    child: Child,
    started: Instant,
}

impl Running {
    /// Waits until the holder is older than stall_sec: an age that fell back to its start
    /// would be a stall from now on.
    fn older_than_stall_sec(&self) {
        let wanted = Duration::from_secs(STALL_SEC) + Duration::from_millis(1500);
        if let Some(left) = wanted.checked_sub(self.started.elapsed()) {
            thread::sleep(left);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, patience: Duration, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + patience;
    while !done() {
        assert!(Instant::now() < give_up, "{what}: not within {patience:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn reasons(row: &Value) -> String {
    row["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

fn assert_running(row: &Value, when: &str) {
    assert_eq!(
        row["state"],
        "RUNNING",
        "{when}: the writer is healthy; reasons: {}",
        reasons(row)
    );
}

#[test]
fn copytruncate_keeps_a_slow_writer_running_in_a_fresh_check() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("stdout");
    writer.older_than_stall_sec();
    let conf = sandbox.logrotate_conf("  copytruncate\n  rotate 3");
    sandbox.just_after_a_write();
    sandbox.logrotate(&conf);
    assert_eq!(fs::metadata(sandbox.log()).map(|m| m.len()).ok(), Some(0));
    let row = sandbox.check();
    assert_running(&row, "just after copytruncate");
    assert_eq!(row["progress_source"], "log", "{}", reasons(&row));
    let log1 = format!("'{}.1' (rotated)", sandbox.log().display());
    assert!(reasons(&row).contains(&log1), "{}", reasons(&row));

    // The writer goes on in the truncated log: its own time again, nothing carried.
    sandbox.just_after_a_write();
    let row = sandbox.check();
    assert_running(&row, "after the next write");
    assert!(!reasons(&row).contains("rotated"), "{}", reasons(&row));
}

#[test]
fn create_and_a_postrotate_hup_keep_a_slow_writer_running_in_a_fresh_check() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("hup");
    writer.older_than_stall_sec();
    let conf = sandbox.logrotate_conf(&format!(
        "  create\n  rotate 3\n  postrotate\n    kill -HUP \"$(cat '{}')\"\n  endscript",
        sandbox.pidfile().display()
    ));
    sandbox.just_after_a_write();
    let rotated_ino = fs::metadata(sandbox.log()).expect("the log").ino();
    sandbox.logrotate(&conf);
    let log1 = PathBuf::from(format!("{}.1", sandbox.log().display()));
    assert_eq!(
        fs::metadata(&log1).map(|m| m.ino()).ok(),
        Some(rotated_ino),
        "logrotate renamed the log"
    );
    let row = sandbox.check();
    assert_running(&row, "just after create + HUP");
    assert!(
        reasons(&row).contains(&format!("'{}' (rotated)", log1.display())),
        "{}",
        reasons(&row)
    );

    // The writer reopened on the HUP: its next line is in the new log.
    sandbox.just_after_a_write();
    assert!(fs::metadata(sandbox.log()).expect("the new log").len() > 0);
    let row = sandbox.check();
    assert_running(&row, "after the writer reopened");
}

#[test]
fn rotating_file_handler_keeps_a_slow_writer_running_in_a_fresh_check() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("rotating");
    writer.older_than_stall_sec();
    let log1 = PathBuf::from(format!("{}.1", sandbox.log().display()));
    // Three rotations by the handler itself, each asked about at once.
    for rotation in 1..=3 {
        let before = fs::metadata(&log1).map(|m| m.ino()).ok();
        wait_for(
            "the handler's next rollover",
            Duration::from_secs(EVERY_SEC * 8),
            || fs::metadata(&log1).map(|m| m.ino()).ok() != before,
        );
        let row = sandbox.check();
        assert_running(&row, &format!("after rollover {rotation}"));
    }
}

/// A [`Live`] with its trigger channel, driven like the real loops.
struct Rig {
    live: Live,
    triggers: Receiver<Trigger>,
    snapshot: Snapshot,
}

impl Rig {
    fn new(sandbox: &Sandbox) -> Rig {
        let config =
            mihari::config::load(&sandbox.root.join("jobs.yaml")).unwrap_or_else(|e| panic!("{e}"));
        let (sender, triggers) = mpsc::channel();
        let sink: Sink = Arc::new(move |trigger| {
            let _ = sender.send(trigger);
        });
        let mut live = Live::new(config, sink).expect("start Live");
        let snapshot = live.start(Utc::now());
        Rig {
            live,
            triggers,
            snapshot,
        }
    }

    /// Turns the loop until `until`, calling `seen` with every snapshot made.
    fn run_until(&mut self, until: Instant, mut seen: impl FnMut(&Snapshot)) {
        while Instant::now() < until {
            let now = Utc::now();
            let deadline = self.live.deadline(&self.snapshot, now);
            let mut wait = until.saturating_duration_since(Instant::now());
            if let Some(at) = deadline {
                wait = wait.min((at - now).to_std().unwrap_or(Duration::ZERO));
            }
            let mut arrivals = Arrivals::default();
            match self.triggers.recv_timeout(wait) {
                Ok(trigger) => self.live.note(&mut arrivals, trigger),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!("the trigger channel closed"),
            }
            while let Ok(more) = self.triggers.try_recv() {
                self.live.note(&mut arrivals, more);
            }
            let now = Utc::now();
            let reached = deadline.is_some_and(|at| at <= now);
            if let Some(fresh) = self.live.apply(arrivals, reached, now) {
                self.snapshot = fresh;
                seen(&self.snapshot);
            }
        }
    }
}

/// What the engine said of the writer in one snapshot: its state and its reasons.
fn verdict(snapshot: &Snapshot) -> (String, String) {
    let row = snapshot.assessment_of("writer").expect("the writer's row");
    (row.state.as_str().to_string(), row.reasons.join(" | "))
}

/// Rotates the log (by `rotate`) while the engine runs, and checks every snapshot from then
/// until just before the writer's next line: all RUNNING, and at least one saying `carried`.
fn engine_follows(sandbox: &Sandbox, rotate: impl FnOnce(), carried: &str) {
    let mut rig = Rig::new(sandbox);
    // Up to date with the writer before the rotation.
    sandbox.just_after_a_write();
    rig.run_until(Instant::now() + Duration::from_millis(300), |_| {});
    let rotated_at = Instant::now();
    rotate();
    let mut verdicts = Vec::new();
    rig.run_until(
        rotated_at + Duration::from_secs(EVERY_SEC) - Duration::from_millis(500),
        |snapshot| verdicts.push(verdict(snapshot)),
    );
    assert!(
        !verdicts.is_empty(),
        "the engine made no snapshot after the rotation"
    );
    for (state, reasons) in &verdicts {
        assert_eq!(state, "RUNNING", "after the rotation: {reasons}");
    }
    assert!(
        verdicts
            .iter()
            .any(|(_, reasons)| reasons.contains(carried)),
        "no snapshot said '{carried}': {verdicts:?}"
    );
}

#[test]
fn the_engine_keeps_a_slow_writer_running_across_copytruncate() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("stdout");
    writer.older_than_stall_sec();
    let conf = sandbox.logrotate_conf("  copytruncate\n  rotate 3");
    engine_follows(&sandbox, || sandbox.logrotate(&conf), "(rotated)");
}

/// No copy is kept (`rotate 0`): only what the engine remembers of the log carries the write.
#[test]
fn the_engine_remembers_the_last_write_when_the_rotation_keeps_no_copy() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("stdout");
    writer.older_than_stall_sec();
    let conf = sandbox.logrotate_conf("  copytruncate\n  rotate 0");
    engine_follows(
        &sandbox,
        || {
            sandbox.logrotate(&conf);
            assert!(
                !PathBuf::from(format!("{}.1", sandbox.log().display())).exists(),
                "rotate 0 keeps no copy"
            );
        },
        "remembered",
    );
}

#[test]
fn the_engine_keeps_a_slow_writer_running_across_create_and_hup() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("hup");
    writer.older_than_stall_sec();
    let conf = sandbox.logrotate_conf(&format!(
        "  create\n  rotate 3\n  postrotate\n    kill -HUP \"$(cat '{}')\"\n  endscript",
        sandbox.pidfile().display()
    ));
    engine_follows(&sandbox, || sandbox.logrotate(&conf), "(rotated)");
}

#[test]
fn the_engine_keeps_a_rotating_file_handler_writer_running() {
    let sandbox = Sandbox::new();
    let writer = sandbox.start("rotating");
    writer.older_than_stall_sec();
    let mut rig = Rig::new(&sandbox);
    let log1 = PathBuf::from(format!("{}.1", sandbox.log().display()));
    let mut verdicts = Vec::new();
    let mut rollovers = 0;
    let mut last = fs::metadata(&log1).map(|m| m.ino()).ok();
    let give_up = Instant::now() + Duration::from_secs(EVERY_SEC * 12);
    while rollovers < 2 {
        assert!(
            Instant::now() < give_up,
            "the handler did not roll over twice"
        );
        rig.run_until(Instant::now() + Duration::from_millis(200), |snapshot| {
            verdicts.push(verdict(snapshot))
        });
        let now = fs::metadata(&log1).map(|m| m.ino()).ok();
        if now != last {
            rollovers += 1;
            last = now;
        }
    }
    assert!(!verdicts.is_empty(), "the engine made no snapshot");
    for (state, reasons) in &verdicts {
        assert_eq!(state, "RUNNING", "{reasons}");
    }
}

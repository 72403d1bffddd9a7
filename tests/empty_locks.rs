//! Empty lock files, as util-linux `flock(1)` leaves them: the real `/usr/bin/flock` takes the
//! lock, and `mihari check --json` must say who holds it — flock, or the command it runs once
//! flock itself is gone — and "not held" once nobody does. It was UNKNOWN forever ("the lock
//! file is empty"), whatever ran. A POSIX lock (`fcntl`, Python's `fcntl.lockf`) is read the
//! same way.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mihari::core::{Liveness, Reading};
use mihari::probe::lock::read_lock;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;

const FLOCK: &str = "/usr/bin/flock";

/// A folder with a jobs file whose one job `sync` is held through an empty `sync.lock`.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        assert!(
            Path::new(FLOCK).exists(),
            "{FLOCK} is missing: install util-linux"
        );
        let sandbox = Sandbox {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let text = "settings:\n  state_dir: state\njobs:\n  - id: sync\n    lock: sync.lock\n    \
                    log: sync.log\n    should_run_when: [resource_free]\n";
        let path = sandbox.path("jobs.yaml");
        fs::write(&path, text).expect("write jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn lock(&self) -> PathBuf {
        self.path("sync.lock")
    }

    /// `mihari check --json`: the job's row.
    fn row(&self) -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(["check", "--json"])
            .stdin(Stdio::null())
            .output()
            .expect("mihari check runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        report["jobs"][0].clone()
    }

    /// Starts `flock [-n] sync.lock ARGS...` in a process group of its own (so the test can
    /// kill flock and everything it started), and waits until the lock is taken.
    fn flock(&self, args: &[&str]) -> Group {
        let child = Command::new(FLOCK)
            .arg("-n")
            .arg(self.lock())
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .expect("flock starts");
        let group = Group(child);
        wait_until(
            "the flock to be taken",
            || matches!(read_lock(&self.lock()), Reading::Found(h) if h.liveness == Liveness::Alive),
        );
        group
    }
}

/// A process group the test started: killed (every member) and reaped when dropped.
struct Group(Child);

impl Group {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Kills only the leader (flock itself) and reaps it: what it started lives on.
    fn kill_leader(&mut self) {
        let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }

    /// Kills the whole group and waits until no member is left.
    fn kill_all(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
        let group = self.pid() as i32;
        wait_until("every process of the group to be gone", || {
            killpg(Pid::from_raw(group), None).is_err()
        });
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The PIDs of the processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            let ppid: u32 = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

fn reasons(row: &Value) -> String {
    row["reasons"].to_string()
}

#[test]
fn flock_n_leaves_an_empty_lock_held_by_flock_or_its_command_and_running() {
    let sandbox = Sandbox::new();
    let mut group = sandbox.flock(&["sleep", "30"]);
    assert_eq!(
        fs::read(sandbox.lock()).expect("the lock file").len(),
        0,
        "flock(1) leaves the lock file empty"
    );
    let row = sandbox.row();
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["liveness"], "alive", "{row:#}");
    let pid = row["pid"].as_u64().expect("a holder pid") as u32;
    let mut holders = children_of(group.pid());
    holders.push(group.pid());
    assert!(
        holders.contains(&pid),
        "pid {pid} is neither flock nor its sleep ({holders:?})"
    );
    assert!(reasons(&row).contains("empty"), "{}", reasons(&row));

    // Killed, all of it: nobody holds the lock, so the job is not running — never UNKNOWN.
    group.kill_all();
    assert!(sandbox.lock().exists(), "flock(1) leaves the file behind");
    let row = sandbox.row();
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    assert_eq!(row["pid"], Value::Null, "{row:#}");
}

#[test]
fn an_empty_lock_whose_flock_exited_is_held_by_the_child_that_inherited_it() {
    let sandbox = Sandbox::new();
    // flock starts sh, which starts one sleep in the background and becomes another: both
    // inherit the locked descriptor.
    let mut group = sandbox.flock(&["sh", "-c", "sleep 30 & exec sleep 31"]);
    wait_until("both sleeps to run", || {
        children_of(group.pid()).len() == 1 && children_of(children_of(group.pid())[0]).len() == 1
    });
    group.kill_leader();
    // flock is gone (the PID /proc/locks names); the two sleeps still hold the lock.
    let row = sandbox.row();
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    let pid = row["pid"].as_u64().expect("a holder pid") as u32;
    assert_ne!(pid, group.pid(), "flock itself is gone: {row:#}");
    let cmdline = fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(cmdline.starts_with("sleep"), "pid {pid} is '{cmdline}'");
    assert!(reasons(&row).contains("inherited"), "{}", reasons(&row));

    group.kill_all();
    let row = sandbox.row();
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
}

#[test]
fn an_empty_lock_nobody_locks_is_not_held() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.lock(), "").expect("an empty lock");
    assert_eq!(read_lock(&sandbox.lock()), Reading::Empty);
    let row = sandbox.row();
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
}

#[test]
fn a_stopped_flock_holder_is_alive_and_said_to_be_stopped() {
    let sandbox = Sandbox::new();
    let group = sandbox.flock(&["sleep", "30"]);
    killpg(Pid::from_raw(group.pid() as i32), Signal::SIGSTOP).expect("SIGSTOP");
    wait_until("the group to stop", || {
        fs::read_to_string(format!("/proc/{}/stat", group.pid())).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('T'))
        })
    });
    let row = sandbox.row();
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert!(reasons(&row).contains("stopped"), "{}", reasons(&row));
    let _ = killpg(Pid::from_raw(group.pid() as i32), Signal::SIGCONT);
}

#[test]
fn an_empty_lock_with_a_posix_lock_on_it_is_held_by_its_owner() {
    let sandbox = Sandbox::new();
    let python = "/usr/bin/python3";
    assert!(
        Path::new(python).exists(),
        "{python} is missing: install python3"
    );
    let script = "import fcntl, sys, time\n\
                  f = open(sys.argv[1], 'a')\n\
                  fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
                  time.sleep(30)\n";
    let child = Command::new(python)
        .args(["-c", script])
        .arg(sandbox.lock())
        .process_group(0)
        .spawn()
        .expect("python3 starts");
    let mut owner = Group(child);
    wait_until("the POSIX lock to be taken", || {
        fs::read_to_string("/proc/locks").is_ok_and(|t| {
            t.lines()
                .any(|l| l.contains("POSIX") && l.contains(&format!(" {} ", owner.pid())))
        })
    });
    let row = sandbox.row();
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["pid"].as_u64(), Some(u64::from(owner.pid())), "{row:#}");
    owner.kill_all();
    let row = sandbox.row();
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
}

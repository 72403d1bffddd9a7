//! A user at its process limit (`ulimit -u`, a container's pids limit) cannot start a thread:
//! a pass over a farm reads its locks on several threads, and a check runs on a thread of its
//! own. Neither may end `mihari check` (or the watcher, or the dashboard): what a thread would
//! have done is done on the calling one, and the verdict is the same.
//!
//! The test runs the real binary as the unprivileged `mihari-other` with `RLIMIT_NPROC` at 1,
//! so that user can start no thread at all, on 300 jobs (above the size from which locks are
//! read on threads) whose locks name a live `sleep`, one of them with a check (whose command
//! cannot be started there either: that is a fault in its verdict, never a pass).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

#[path = "common/users.rs"]
mod users;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
const JOBS: usize = 300;

use users::other_user;

struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mihari check --json` as `uid`/`gid` with `RLIMIT_NPROC` at `nproc` (none when `None`).
fn check_as(bin: &Path, jobs: &Path, (uid, gid): (u32, u32), nproc: Option<u64>) -> Value {
    let mut command = Command::new(bin);
    command
        .arg("--config")
        .arg(jobs)
        .args(["check", "--json"])
        .env("HOME", "/nonexistent")
        .env_remove("MIHARI_CONFIG")
        .env_remove("XDG_CACHE_HOME")
        .current_dir("/")
        .uid(uid)
        .gid(gid)
        .stdin(Stdio::null());
    if let Some(limit) = nproc {
        // SAFETY: runs in the child between fork and exec, after the switch to `uid`, and
        // only calls setrlimit(2), which is async-signal-safe and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                let bound = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &bound) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let output = command.output().expect("run mihari check as mihari-other");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code().is_some_and(|code| code <= 2),
        "no verdict (exit {:?}): {said}",
        output.status.code()
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {said}"))
}

/// Each job's id and state, in the report's order.
fn states(report: &Value) -> Vec<(String, String)> {
    report["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|job| {
            (
                job["id"].as_str().unwrap_or_default().to_string(),
                job["state"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_user_that_can_start_no_thread_still_gets_every_verdict_of_a_farm() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running mihari as another user needs root");
        return;
    }
    let Some(user) = other_user() else {
        return;
    };
    // A folder that user may enter and read, holding the jobs and a copy of the binary (a
    // clone made under `mktemp -d` keeps the built one out of its reach).
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("mihari");
    fs::copy(BIN, &bin).expect("copy the binary");
    let holder = Holder(
        Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("start sleep"),
    );
    let pid = holder.0.id();
    let root = dir.path();
    fs::create_dir(root.join("jobs")).unwrap();
    let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
    for n in 0..JOBS {
        let id = format!("job{n:03}");
        fs::write(root.join(format!("jobs/{id}.lock")), format!("{pid}\n")).unwrap();
        fs::write(root.join(format!("jobs/{id}.log")), "started\n").unwrap();
        fs::write(root.join(format!("jobs/{id}.progress")), "1\n2\n").unwrap();
        yaml.push_str(&format!(
            "  - id: {id}\n    lock: jobs/{id}.lock\n    log: jobs/{id}.log\n    \
             progress_file: jobs/{id}.progress\n    expected_total: 10\n    \
             should_run_when: [not_complete]\n"
        ));
        if n == 7 {
            yaml.push_str("    checks:\n      - name: disk\n        command: [\"true\"]\n");
        }
    }
    let jobs = root.join("jobs.yaml");
    fs::write(&jobs, yaml).unwrap();
    for entry in fs::read_dir(root.join("jobs")).unwrap().flatten() {
        fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o644)).unwrap();
    }
    fs::set_permissions(root.join("jobs"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o644)).unwrap();

    let free = check_as(&bin, &jobs, user, None);
    let limited = check_as(&bin, &jobs, user, Some(1));
    assert_eq!(states(&free).len(), JOBS);
    let job7 = |report: &Value| {
        report["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|job| job["id"] == "job007").cloned())
            .expect("job007")
    };
    // Every lock read, every holder judged: the same states, each job once.
    let sorted = |report: &Value| {
        let mut states = states(report);
        states.sort();
        states
    };
    assert_eq!(sorted(&limited), sorted(&free));
    assert!(
        states(&limited).iter().all(|(_, state)| state == "RUNNING"),
        "{:?}",
        states(&limited)
    );
    // The check ran here instead of on a thread; its command could not be started either (a
    // new process is refused too), and that is said as a fault, never as a pass.
    let said = job7(&limited)["reasons"].to_string();
    assert!(
        said.contains("check 'disk': fault: cannot run 'true'") && said.contains("not a pass"),
        "{said}"
    );
    assert!(
        !job7(&free)["reasons"].to_string().contains("fault"),
        "{}",
        job7(&free)
    );
}

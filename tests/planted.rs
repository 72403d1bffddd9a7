//! Planted files at a job's paths, with a real second user, real symlinks, real named pipes and
//! the real binary (issue 9, items 1, 2 and 11).
//!
//! - Another user who can write the folder of a job's lock or log plants
//!   `job.lock -> precious.txt` (a file the operator owns): `run`, `check`, `check --json`,
//!   `restart --yes` and `release --yes` leave the target's bytes as they were, never print
//!   them, and say what to do. A folder the other user owns and a 0777 folder are refused for
//!   the files mihari writes; a sticky 1777 folder (like /tmp) stays usable, and a link
//!   planted there is refused as a link. A link in the operator's own folder is refused too.
//! - `state_dir/watch.lock -> precious.conf`: `watch` overwrites nothing, and a watch lock
//!   that belongs to another user is refused.
//! - A named pipe where a log, a progress file or a lock should be: every command comes back
//!   with the path and what it is, and the watcher keeps working beside it.
//!
//! The tests run as root: the second user is `mihari-other`, created when missing. Where it
//! cannot be created, the tests that need it say so on stderr and pass. The bounds on how
//! long a command may take are generous guards against a hang, never a measurement.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};

#[path = "common/users.rs"]
mod users;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
/// Far past anything these commands need; a command still running then is hung.
const HANG: Duration = Duration::from_secs(60);
/// The operator's bytes that must survive, and never be shown.
const PRECIOUS: &str = "the operator's precious bytes: secret-7f3a, do not show\n";
/// A fragment of [`PRECIOUS`] short enough to be inside any 60-character quote of it.
const SECRET: &str = "precious bytes";

// ---------------------------------------------------------------------------------------------
// Helpers

/// The second user's uid and gid, as nix gives them.
fn other_user() -> Option<(Uid, Gid)> {
    users::other_user().map(|(uid, gid)| (Uid::from_raw(uid), Gid::from_raw(gid)))
}

/// A private folder (root, 0711: the second user may pass through, not write) holding the
/// jobs file, the state folder and the operator's precious file.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("a temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod");
        let sandbox = Sandbox { dir };
        fs::write(sandbox.precious(), PRECIOUS).expect("write the precious file");
        fs::set_permissions(sandbox.precious(), fs::Permissions::from_mode(0o600)).expect("chmod");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn precious(&self) -> PathBuf {
        self.path("precious.txt")
    }

    /// A folder in the sandbox with `mode`, owned by `owner` (root when `None`).
    fn folder(&self, name: &str, mode: u32, owner: Option<(Uid, Gid)>) -> PathBuf {
        let path = self.path(name);
        fs::create_dir(&path).expect("mkdir");
        if let Some((uid, gid)) = owner {
            nix::unistd::chown(&path, Some(uid), Some(gid)).expect("chown");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    /// One job `j` with its lock and log where given; `extra` is more YAML for the job.
    fn jobs(&self, lock: &Path, log: &Path, extra: &str) -> PathBuf {
        let path = self.path("jobs.yaml");
        let text = format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: j\n    lock: {}\n    log: {}\n    \
             should_run_when: [resource_free]\n    restart:\n      command: [sh, -c, 'echo \
             the job ran']\n{extra}",
            self.path("state").display(),
            lock.display(),
            log.display()
        );
        fs::write(&path, text).expect("write the jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        path
    }

    /// The precious file is exactly as written, and still a plain file of the operator's.
    fn assert_precious_intact(&self, what: &str) {
        let bytes = fs::read(self.precious()).expect("read the precious file");
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            PRECIOUS,
            "{what}: the precious file was changed"
        );
        let meta = fs::symlink_metadata(self.precious()).expect("stat");
        assert!(meta.is_file(), "{what}: the precious file was replaced");
    }
}

/// `link -> target`, made by the second user when given (the link then belongs to them).
fn plant_link(target: &Path, link: &Path, by: Option<(Uid, Gid)>) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
    if let Some((uid, gid)) = by {
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            link,
            Some(uid),
            Some(gid),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .expect("lchown");
    }
}

/// The planted link is still there, still a link to `target`.
fn assert_link_kept(link: &Path, target: &Path, what: &str) {
    let read = fs::read_link(link).unwrap_or_else(|e| panic!("{what}: the link is gone: {e}"));
    assert_eq!(read, target, "{what}: the link was changed");
}

/// What one run of the binary said.
struct Said {
    code: Option<i32>,
    out: String,
}

/// Runs `mihari --config CONFIG ARGS`, killing it (and failing) if it is still running after
/// [`HANG`].
fn mihari(config: &Path, args: &[&str]) -> Said {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mihari");
    wait_bounded(&mut child, args);
    let output = child.wait_with_output().expect("collect its output");
    Said {
        code: output.status.code(),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

fn wait_bounded(child: &mut Child, args: &[&str]) {
    let deadline = Instant::now() + HANG;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mihari {args:?} hung");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The output never shows the precious content, and names `path` with `words`.
fn assert_refusal(said: &Said, path: &Path, words: &[&str], what: &str) {
    assert!(
        !said.out.contains(SECRET),
        "{what}: the target's content was shown:\n{}",
        said.out
    );
    let shown = format!("'{}'", path.display());
    assert!(
        said.out.contains(&shown),
        "{what}: the path {shown} is not named:\n{}",
        said.out
    );
    for word in words {
        assert!(
            said.out.contains(word),
            "{what}: {word:?} is not said:\n{}",
            said.out
        );
    }
}

/// A JSON lock naming a process that has exited and been reaped.
fn dead_lock(path: &Path) {
    let mut sleeper = Command::new("sleep").arg("60").spawn().expect("sleep");
    let pid = sleeper.id();
    let ticks = mihari::probe::proc::start_ticks(pid).expect("start ticks");
    sleeper.kill().expect("kill");
    sleeper.wait().expect("reap");
    fs::write(
        path,
        format!("{{\"pid\":{pid},\"start_time\":{ticks},\"run_id\":\"old\"}}\n"),
    )
    .expect("write the dead lock");
}

// ---------------------------------------------------------------------------------------------
// Item 1: links at a job's lock or log

/// Every command meets `lock -> precious.txt` in `folder`, and refuses with `words`.
fn every_command_refuses_a_planted_lock(sandbox: &Sandbox, folder: &Path, words: &[&str]) {
    let lock = folder.join("job.lock");
    let log = sandbox.path("job.log");
    let config = sandbox.jobs(&lock, &log, "");
    for args in [
        &["run", "j"][..],
        &["check"],
        &["check", "--json"],
        &["restart", "j", "--yes"],
        &["release", "j", "--yes"],
    ] {
        let said = mihari(&config, args);
        let what = format!("mihari {args:?} with {}", folder.display());
        sandbox.assert_precious_intact(&what);
        assert_link_kept(&lock, &sandbox.precious(), &what);
        assert_refusal(&said, &lock, words, &what);
        if args[0] == "run" {
            assert_eq!(said.code, Some(73), "{what}:\n{}", said.out);
            assert!(
                !fs::read_to_string(&log)
                    .unwrap_or_default()
                    .contains("the job ran"),
                "{what}: the job ran"
            );
        }
    }
}

#[test]
fn a_lock_planted_in_a_folder_another_user_owns_is_never_followed() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("theirs", 0o755, Some(other));
    plant_link(&sandbox.precious(), &folder.join("job.lock"), Some(other));
    every_command_refuses_a_planted_lock(&sandbox, &folder, &["mihari-other"]);
}

#[test]
fn a_lock_planted_in_a_folder_anyone_can_write_is_never_followed() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("open", 0o777, None);
    plant_link(&sandbox.precious(), &folder.join("job.lock"), Some(other));
    every_command_refuses_a_planted_lock(&sandbox, &folder, &["0777", "chmod"]);
}

#[test]
fn a_lock_planted_in_a_sticky_folder_is_refused_as_a_link() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("sticky", 0o1777, None);
    plant_link(&sandbox.precious(), &folder.join("job.lock"), Some(other));
    every_command_refuses_a_planted_lock(&sandbox, &folder, &["symbolic link", "'lock'"]);
}

#[test]
fn a_symlinked_lock_in_the_operators_own_folder_is_refused_too() {
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("mine", 0o700, None);
    plant_link(&sandbox.precious(), &folder.join("job.lock"), None);
    every_command_refuses_a_planted_lock(&sandbox, &folder, &["symbolic link", "'lock'"]);
}

/// Every command meets `log -> precious.txt` in `folder` beside a dead lock in the
/// operator's own folder: nothing is appended to the target, nothing of it is shown.
fn every_command_leaves_a_planted_log_alone(sandbox: &Sandbox, folder: &Path, words: &[&str]) {
    let log = folder.join("job.log");
    let lock = sandbox.path("job.lock");
    let config = sandbox.jobs(&lock, &log, "");
    for args in [
        &["run", "j"][..],
        &["restart", "j", "--yes"],
        &["check"],
        &["check", "--json"],
    ] {
        dead_lock(&lock);
        let said = mihari(&config, args);
        let what = format!("mihari {args:?} with the log in {}", folder.display());
        sandbox.assert_precious_intact(&what);
        assert_link_kept(&log, &sandbox.precious(), &what);
        assert!(
            !said.out.contains(SECRET),
            "{what}: the target's content was shown:\n{}",
            said.out
        );
        match args[0] {
            "check" => assert_refusal(&said, &log, &["symbolic link"], &what),
            "run" => {
                assert_eq!(said.code, Some(73), "{what}:\n{}", said.out);
                assert_refusal(&said, &log, words, &what);
            }
            _ => assert_refusal(&said, &log, words, &what),
        }
    }
}

#[test]
fn a_log_planted_in_a_folder_another_user_owns_gets_nothing_appended() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("theirs", 0o755, Some(other));
    plant_link(&sandbox.precious(), &folder.join("job.log"), Some(other));
    every_command_leaves_a_planted_log_alone(&sandbox, &folder, &["mihari-other"]);
}

#[test]
fn a_log_planted_in_a_folder_anyone_can_write_gets_nothing_appended() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("open", 0o777, None);
    plant_link(&sandbox.precious(), &folder.join("job.log"), Some(other));
    every_command_leaves_a_planted_log_alone(&sandbox, &folder, &["0777", "chmod"]);
}

#[test]
fn a_log_planted_in_a_sticky_folder_is_refused_as_a_link() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("sticky", 0o1777, None);
    plant_link(&sandbox.precious(), &folder.join("job.log"), Some(other));
    every_command_leaves_a_planted_log_alone(&sandbox, &folder, &["symbolic link", "'log'"]);
}

#[test]
fn a_manifest_planted_as_a_link_is_never_shown() {
    let sandbox = Sandbox::new();
    let manifest = sandbox.path("_manifest.json");
    plant_link(&sandbox.precious(), &manifest, None);
    let config = sandbox.jobs(
        &sandbox.path("job.lock"),
        &sandbox.path("job.log"),
        &format!("    manifest: {}\n", manifest.display()),
    );
    for args in [&["check"][..], &["check", "--json"]] {
        let said = mihari(&config, args);
        assert_refusal(&said, &manifest, &["symbolic link", "'manifest'"], "check");
    }
    sandbox.assert_precious_intact("check with a planted manifest");
}

#[test]
fn a_sticky_folder_like_tmp_stays_usable() {
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("sticky", 0o1777, None);
    let (lock, log) = (folder.join("job.lock"), folder.join("job.log"));
    let config = sandbox.jobs(&lock, &log, "");
    let said = mihari(&config, &["run", "j"]);
    assert_eq!(said.code, Some(0), "{}", said.out);
    assert_eq!(
        fs::read_to_string(&log).expect("the log"),
        "the job ran\n",
        "{}",
        said.out
    );
    assert!(!lock.exists(), "the lock is removed when the run ends");
    let said = mihari(&config, &["check", "--json"]);
    assert!(!said.out.contains("fault"), "{}", said.out);
}

#[test]
fn a_lock_another_user_made_in_a_sticky_folder_is_not_taken() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("sticky", 0o1777, None);
    let lock = folder.join("job.lock");
    fs::write(&lock, "").expect("write");
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o666)).expect("chmod");
    nix::unistd::chown(&lock, Some(other.0), Some(other.1)).expect("chown");
    let config = sandbox.jobs(&lock, &sandbox.path("job.log"), "");
    let said = mihari(&config, &["run", "j"]);
    assert_eq!(said.code, Some(73), "{}", said.out);
    assert_refusal(
        &said,
        &lock,
        &["mihari-other"],
        "a foreign lock in a sticky folder",
    );
    assert_eq!(
        fs::read(&lock).expect("read").len(),
        0,
        "the lock was written"
    );
}

#[test]
fn a_hard_link_to_the_operators_file_in_a_sticky_folder_is_not_written() {
    let sandbox = Sandbox::new();
    let folder = sandbox.folder("sticky", 0o1777, None);
    let log = folder.join("job.log");
    fs::hard_link(sandbox.precious(), &log).expect("link");
    let config = sandbox.jobs(&sandbox.path("job.lock"), &log, "");
    let said = mihari(&config, &["run", "j"]);
    assert_eq!(said.code, Some(73), "{}", said.out);
    assert_refusal(&said, &log, &["name"], "a hard link in a sticky folder");
    sandbox.assert_precious_intact("a hard link in a sticky folder");
}

// ---------------------------------------------------------------------------------------------
// Item 2: the watch lock

#[test]
fn a_watch_lock_planted_as_a_link_is_never_overwritten() {
    let sandbox = Sandbox::new();
    let state = sandbox.folder("state", 0o700, None);
    let watch_lock = state.join("watch.lock");
    plant_link(&sandbox.precious(), &watch_lock, None);
    let config = sandbox.jobs(&sandbox.path("job.lock"), &sandbox.path("job.log"), "");
    for args in [&["watch", "--once"][..], &["check"]] {
        let said = mihari(&config, args);
        let what = format!("mihari {args:?}");
        sandbox.assert_precious_intact(&what);
        assert_link_kept(&watch_lock, &sandbox.precious(), &what);
        assert_refusal(&said, &watch_lock, &["symbolic link"], &what);
    }
}

#[test]
fn a_watch_lock_that_belongs_to_another_user_is_refused() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let state = sandbox.folder("state", 0o700, None);
    let watch_lock = state.join("watch.lock");
    fs::write(&watch_lock, "theirs\n").expect("write");
    nix::unistd::chown(&watch_lock, Some(other.0), Some(other.1)).expect("chown");
    let config = sandbox.jobs(&sandbox.path("job.lock"), &sandbox.path("job.log"), "");
    let said = mihari(&config, &["watch", "--once"]);
    assert_ne!(said.code, Some(0), "{}", said.out);
    assert_refusal(
        &said,
        &watch_lock,
        &["mihari-other"],
        "a foreign watch lock",
    );
    assert_eq!(fs::read_to_string(&watch_lock).expect("read"), "theirs\n");
}

// ---------------------------------------------------------------------------------------------
// Item 11: named pipes

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

#[test]
fn a_named_pipe_at_the_log_never_hangs_run_restart_or_check() {
    let sandbox = Sandbox::new();
    let (lock, log) = (sandbox.path("job.lock"), sandbox.path("job.log"));
    mkfifo(&log);
    let config = sandbox.jobs(&lock, &log, "");
    let said = mihari(&config, &["run", "j"]);
    assert_eq!(said.code, Some(73), "{}", said.out);
    assert_refusal(&said, &log, &["named pipe"], "run");
    assert!(!lock.exists(), "run took the lock though it could not log");
    dead_lock(&lock);
    let said = mihari(&config, &["restart", "j", "--yes"]);
    assert_refusal(&said, &log, &["named pipe"], "restart");
    let said = mihari(&config, &["check"]);
    assert_refusal(&said, &log, &["named pipe"], "check");
}

#[test]
fn a_named_pipe_at_the_lock_never_hangs_run_check_or_release() {
    let sandbox = Sandbox::new();
    let lock = sandbox.path("job.lock");
    mkfifo(&lock);
    let config = sandbox.jobs(&lock, &sandbox.path("job.log"), "");
    let said = mihari(&config, &["run", "j"]);
    assert_eq!(said.code, Some(73), "{}", said.out);
    assert_refusal(&said, &lock, &["named pipe"], "run");
    for args in [&["check"][..], &["release", "j", "--yes"]] {
        let said = mihari(&config, args);
        assert_refusal(&said, &lock, &["named pipe"], &format!("{args:?}"));
    }
    let meta = fs::symlink_metadata(&lock).expect("still there");
    assert!(meta.file_type().is_fifo_like(), "the pipe was replaced");
}

/// `FileType::is_fifo` without the import at every use.
trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[test]
fn a_named_pipe_at_the_progress_file_is_a_fault_with_its_path() {
    let sandbox = Sandbox::new();
    let progress = sandbox.path("job.progress");
    mkfifo(&progress);
    let config = sandbox.jobs(
        &sandbox.path("job.lock"),
        &sandbox.path("job.log"),
        &format!(
            "    progress_file: {}\n    expected_total: 10\n",
            progress.display()
        ),
    );
    let said = mihari(&config, &["check", "--json"]);
    assert_refusal(&said, &progress, &["named pipe"], "check --json");
}

#[test]
fn the_watcher_keeps_working_beside_a_named_pipe_at_a_log() {
    let sandbox = Sandbox::new();
    let (lock, log) = (sandbox.path("job.lock"), sandbox.path("job.log"));
    mkfifo(&log);
    let (lock2, log2) = (sandbox.path("two.lock"), sandbox.path("two.log"));
    let config = sandbox.path("jobs.yaml");
    let job = |id: &str, lock: &Path, log: &Path| {
        format!(
            "  - id: {id}\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n    \
             auto_restart: true\n    auto_restart_reason: harmless\n    restart:\n      \
             command: [sh, -c, 'echo {id} ran; sleep 60']\n",
            lock.display(),
            log.display()
        )
    };
    fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\n  workspace_cooldown_sec: 0\njobs:\n{}{}",
            sandbox.path("state").display(),
            job("j", &lock, &log),
            job("two", &lock2, &log2)
        ),
    )
    .expect("write the jobs file");
    dead_lock(&lock);
    // The second job is running (a live holder) until the first one's restart has failed.
    let mut holder = Command::new("sleep").arg("600").spawn().expect("sleep");
    let ticks = mihari::probe::proc::start_ticks(holder.id()).expect("start ticks");
    fs::write(
        &lock2,
        format!("{{\"pid\":{},\"start_time\":{ticks}}}\n", holder.id()),
    )
    .expect("write the live lock");
    let mut watcher = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("watch")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watcher");
    // The pipe's job fails to restart, named; then a second job that needs a restart gets one.
    let failed = wait_for(|| !events(&sandbox, "failed").is_empty());
    let _ = holder.kill();
    let _ = holder.wait();
    let second = wait_for(|| {
        fs::read_to_string(&log2)
            .unwrap_or_default()
            .contains("two ran")
    });
    let _ = watcher.kill();
    let _ = watcher.wait();
    for pid in holders(&[&lock, &lock2]) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(failed, "no failed restart:\n{}", events(&sandbox, ""));
    assert!(
        second,
        "the watcher stopped working:\n{}",
        events(&sandbox, "")
    );
}

fn wait_for(ready: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + HANG;
    while !ready() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The reasons of the events of `kind` (every event when empty), one a line.
fn events(sandbox: &Sandbox, kind: &str) -> String {
    let Ok(store) = mihari::store::Store::open(&sandbox.path("state"), mihari::store::Actor::Cli)
    else {
        return String::new();
    };
    let filter = mihari::store::EventFilter {
        kind: (!kind.is_empty()).then(|| kind.to_string()),
        ..Default::default()
    };
    store
        .events(&filter)
        .unwrap_or_default()
        .iter()
        .map(|e| format!("{} {}", e.kind, e.reason.clone().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The PIDs named in these locks, to end what the watcher started.
fn holders(locks: &[&Path]) -> Vec<i32> {
    locks
        .iter()
        .filter_map(|lock| fs::read_to_string(lock).ok())
        .filter_map(|text| mihari::probe::lock::parse_lock(&text).ok())
        .map(|content| content.pid as i32)
        .collect()
}

#[test]
fn the_sandbox_is_private_to_the_operator() {
    // The baseline every test above stands on: the jobs file loads here.
    let sandbox = Sandbox::new();
    let meta = fs::metadata(sandbox.dir.path()).expect("stat");
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    let config = sandbox.jobs(&sandbox.path("job.lock"), &sandbox.path("job.log"), "");
    let said = mihari(&config, &["check"]);
    assert!(said.code.is_some_and(|c| c != 3), "{}", said.out);
}

// ---------------------------------------------------------------------------------------------
// Hardening, round three, item 1: files another user planted in a folder others can write

/// A process of the second user's (a `sleep`), killed and reaped when dropped.
struct Theirs(Child);

impl Theirs {
    fn start(other: (Uid, Gid)) -> Theirs {
        use std::os::unix::process::CommandExt;
        Theirs(
            Command::new("sleep")
                .arg("120")
                .uid(other.0.as_raw())
                .gid(other.1.as_raw())
                .spawn()
                .expect("start the other user's sleep"),
        )
    }

    /// The lock `mihari run` would write for it: pid and start ticks, as the attacker can.
    fn lock_json(&self) -> String {
        let pid = self.0.id();
        let ticks = mihari::probe::proc::start_ticks(pid).expect("start ticks");
        format!("{{\"pid\":{pid},\"start_time\":{ticks}}}\n")
    }
}

impl Drop for Theirs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `content` at `path` as the second user's file (made, then given to them).
fn plant_file(path: &Path, content: &str, other: (Uid, Gid)) {
    let _ = fs::remove_file(path);
    fs::write(path, content).expect("plant");
    nix::unistd::chown(path, Some(other.0), Some(other.1)).expect("chown");
}

/// The job `j` of a `check --json` report.
fn job_of(said: &Said) -> serde_json::Value {
    let start = said.out.find('{').unwrap_or(0);
    let report: serde_json::Value = serde_json::Deserializer::from_str(&said.out[start..])
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON report:\n{}", said.out));
    report["jobs"][0].clone()
}

#[test]
fn a_lock_and_a_log_another_user_planted_in_a_sticky_folder_are_no_evidence_of_health() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let shared = sandbox.folder("shared", 0o1777, None);
    let lock = shared.join("job.lock");
    let log = shared.join("job.log");
    let theirs = Theirs::start(other);
    let config = sandbox.jobs(&lock, &log, "");
    for (content, what) in [
        (theirs.lock_json(), "a JSON lock naming their live process"),
        ("1\n".to_string(), "a bare lock naming pid 1"),
    ] {
        plant_file(&lock, &content, other);
        plant_file(&log, "working\n", other);
        let said = mihari(&config, &["check", "--json"]);
        let job = job_of(&said);
        assert_ne!(
            said.code,
            Some(0),
            "{what}: check says all is well:\n{}",
            said.out
        );
        assert_ne!(job["state"], "RUNNING", "{what}: {job}");
        assert_ne!(job["liveness"], "alive", "{what}: {job}");
        let reasons = job["reasons"].to_string();
        for path in [&lock, &log] {
            let named = format!("'{}' is owned by 'mihari-other'", path.display());
            assert!(reasons.contains(&named), "{what}: {named} not said: {job}");
        }
        assert!(reasons.contains("not evidence of health"), "{what}: {job}");
        let table = mihari(&config, &["check"]);
        assert!(
            !table.out.contains("RUNNING"),
            "{what}: the table says RUNNING:\n{}",
            table.out
        );
        assert!(
            table.out.contains("folder others can write"),
            "{what}:\n{}",
            table.out
        );
    }
    // The operator's own lock and log in the same folder are evidence as ever.
    for path in [&lock, &log] {
        nix::unistd::chown(path, Some(Uid::from_raw(0)), Some(Gid::from_raw(0))).expect("chown");
    }
    let said = mihari(&config, &["check", "--json"]);
    assert_eq!(job_of(&said)["liveness"], "alive", "{}", said.out);
}

#[test]
fn a_marker_another_user_planted_in_a_sticky_folder_is_a_fault_naming_its_owner() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let shared = sandbox.folder("shared", 0o1777, None);
    let theirs = Theirs::start(other);
    for (marker, is_folder) in [
        (shared.join("job.marker"), false),
        (shared.join("job.d"), true),
    ] {
        if is_folder {
            fs::create_dir(&marker).expect("mkdir");
            nix::unistd::chown(&marker, Some(other.0), Some(other.1)).expect("chown");
        } else {
            plant_file(&marker, &theirs.lock_json(), other);
        }
        let extra = format!(
            "    markers:\n      - {{ path: {}, stale_after_sec: 60 }}\n",
            marker.display()
        );
        let config = sandbox.jobs(&sandbox.path("job.lock"), &sandbox.path("job.log"), &extra);
        let said = mihari(&config, &["check"]);
        let named = format!("'{}' is owned by 'mihari-other'", marker.display());
        assert!(said.out.contains(&named), "{named} not said:\n{}", said.out);
        let said = mihari(&config, &["release-marker", "j", "--yes"]);
        assert!(
            marker.exists(),
            "the planted marker was removed:\n{}",
            said.out
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Hardening, round three, item 2: a jobs file or a fleet file another user owns

/// Runs `command` bounded by [`HANG`], as [`mihari`] does.
fn said_by(command: &mut Command, what: &str) -> Said {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mihari");
    wait_bounded(&mut child, &[what]);
    let output = child.wait_with_output().expect("collect its output");
    Said {
        code: output.status.code(),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

#[test]
fn a_jobs_file_another_user_owns_is_refused_however_it_is_named_and_runs_nothing() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let shared = sandbox.folder("shared", 0o1777, None);
    let cache = sandbox.folder("cache", 0o700, None);
    let ran = sandbox.path("ran");
    let theirs = shared.join("jobs.yaml");
    fs::write(
        &theirs,
        format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: j\n    lock: {}\n    log: {}\n    \
             should_run_when: [resource_free]\n    checks:\n      - name: c\n        \
             command: [touch, {}]\n",
            sandbox.path("state").display(),
            sandbox.path("job.lock").display(),
            sandbox.path("job.log").display(),
            ran.display()
        ),
    )
    .expect("write their jobs file");
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o644)).expect("chmod");
    let link = sandbox.path("mine.yaml");
    std::os::unix::fs::symlink(&theirs, &link).expect("symlink");
    let run = |config: &Path, by_env: bool, args: &[&str]| {
        let mut command = Command::new(BIN);
        command
            .env("XDG_CACHE_HOME", &cache)
            .env("MIHARI_CONFIG_CACHE_MIN_BYTES", "0");
        if by_env {
            command.env("MIHARI_CONFIG", config);
        } else {
            command
                .env_remove("MIHARI_CONFIG")
                .arg("--config")
                .arg(config);
        }
        said_by(command.args(args), "a jobs file")
    };
    // Cached as the operator's own first: the kept parse must not outlive the owner's change.
    let said = run(&theirs, false, &["check"]);
    assert_ne!(said.code, Some(3), "the operator's own file:\n{}", said.out);
    let _ = fs::remove_file(&ran);
    nix::unistd::chown(&theirs, Some(other.0), Some(other.1)).expect("chown");
    for (config, by_env, how) in [
        (&theirs, false, "--config with their file"),
        (&link, false, "--config with a link to it"),
        (&link, true, "$MIHARI_CONFIG with a link to it"),
    ] {
        for args in [&["check"][..], &["watch", "--once"], &["events"]] {
            let said = run(config, by_env, args);
            let what = format!("{how}, mihari {args:?}");
            assert!(
                !ran.exists(),
                "{what}: their check command ran:\n{}",
                said.out
            );
            if args[0] != "events" {
                assert_eq!(said.code, Some(3), "{what}:\n{}", said.out);
            }
            assert!(
                said.out.contains("belongs to user 'mihari-other'"),
                "{what}: the owner is not named:\n{}",
                said.out
            );
        }
    }
}

#[test]
fn a_fleet_file_another_user_owns_runs_no_ssh_argv() {
    let Some(other) = other_user() else { return };
    let sandbox = Sandbox::new();
    let shared = sandbox.folder("shared", 0o1777, None);
    let ran = sandbox.path("ran");
    let theirs = shared.join("fleet.yaml");
    fs::write(
        &theirs,
        format!(
            "hosts:\n  - name: here\n    ssh: [sh, -c, 'touch {}', sh]\n",
            ran.display()
        ),
    )
    .expect("write their fleet file");
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o644)).expect("chmod");
    nix::unistd::chown(&theirs, Some(other.0), Some(other.1)).expect("chown");
    let link = sandbox.path("fleet.yaml");
    std::os::unix::fs::symlink(&theirs, &link).expect("symlink");
    for fleet in [&theirs, &link] {
        let mut command = Command::new(BIN);
        command
            .arg("fleet")
            .arg("--fleet")
            .arg(fleet)
            .args(["check", "--json"]);
        let said = said_by(&mut command, "fleet check");
        assert!(
            !ran.exists(),
            "{}: their ssh argv ran:\n{}",
            fleet.display(),
            said.out
        );
        assert_eq!(said.code, Some(3), "{}", said.out);
        assert!(
            said.out.contains("belongs to user 'mihari-other'"),
            "the owner is not named:\n{}",
            said.out
        );
    }
}

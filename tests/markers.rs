//! Markers and `mihari release-marker` with real files and real processes (issue 11, item 6):
//! a marker holding a live process's PID is refused, one whose process has exited is STALE and
//! released; a JSON lock as `mihari run` writes it is judged like a lock; an empty marker past
//! its `stale_after_sec` is STALE, and one a live `flock` holds is not; an old empty folder (a
//! `mkdir` lock) is released, one with files in it is not; a link, a named pipe and a folder
//! others can write at a marker's path are faults, never followed, never removed. What the
//! release shows first — age, content made inert, the job's last attempts and last error — is
//! printed before anything is asked, and every release and refusal is in the event log.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "common/users.rs"]
mod users;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// Processes killed when the test ends, passed or not.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A private folder with one job `j` whose markers are given as YAML.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(markers: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("a temp dir");
        let sandbox = Sandbox { dir };
        let text = format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: j\n    log: {}\n    lock: {}\n    \
             should_run_when: [not_succeeded]\n    restart:\n      command: [sh, -c, 'echo \
             trying; exit 3']\n    markers:\n{markers}",
            sandbox.path("state").display(),
            sandbox.path("j.log").display(),
            sandbox.path("j.lock").display(),
        );
        fs::write(sandbox.config(), text).expect("write the jobs file");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> PathBuf {
        self.path("jobs.yaml")
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.config())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run mihari")
    }

    fn row(&self) -> Value {
        let out = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("no JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr))
        });
        report["jobs"][0].clone()
    }

    fn events(&self) -> String {
        text(&self.mihari(&["events"]).stdout)
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn said(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

fn reasons(row: &Value) -> String {
    row["reasons"].to_string()
}

fn marker(path: &Path, stale_after_sec: u64) -> String {
    format!(
        "      - {{ path: '{}', stale_after_sec: {stale_after_sec} }}\n",
        path.display()
    )
}

/// Sets a file's modification time `secs` seconds into the past, with the real `touch`.
fn age(path: &Path, secs: u64) {
    let status = Command::new("touch")
        .arg("-h")
        .arg("-d")
        .arg(format!("{secs} seconds ago"))
        .arg(path)
        .status()
        .expect("touch");
    assert!(status.success());
}

fn sleeper() -> Child {
    Command::new("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep starts")
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks, as `mihari run` records it.
fn start_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = stat.rsplit(')').next().expect("fields");
    rest.split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("ticks")
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot_id")
        .trim()
        .to_string()
}

#[test]
fn a_live_holder_is_refused_and_once_its_process_exits_the_marker_is_stale_and_released() {
    let mut procs = Procs(vec![sleeper()]);
    let pid = procs.0[0].id();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".resumed");
    fs::write(&path, format!("{pid}\n")).unwrap();
    let sandbox = Sandbox::new(&marker(&path, 1));
    // Older than its stale_after_sec (it cannot be older than its holder: that is a reused
    // PID), but its holder lives: not stale.
    thread::sleep(Duration::from_millis(1200));
    let row = sandbox.row();
    assert!(!reasons(&row).contains("stale;"), "{row:#}");

    let out = sandbox.mihari(&["release-marker", "j", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("no marker of 'j' is stale"),
        "{}",
        said(&out)
    );
    let out = sandbox.mihari(&["release-marker", "j", ".resumed", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains(&format!("held by pid {pid}, alive")),
        "{}",
        said(&out)
    );
    assert!(path.exists(), "a live holder's marker was removed");
    assert!(
        sandbox.events().contains("release marker refused"),
        "{}",
        sandbox.events()
    );

    // Its process exits: the marker is stale, named, and released.
    let mut child = procs.0.remove(0);
    child.kill().unwrap();
    child.wait().unwrap();
    let row = sandbox.row();
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let why = reasons(&row);
    assert!(
        why.contains(&format!("marker '{}'", path.display())),
        "{why}"
    );
    assert!(
        why.contains(&format!("its holder is gone: pid {pid}")),
        "{why}"
    );
    let out = sandbox.mihari(&["release-marker", "j", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!path.exists(), "the stale marker is still there");
    assert!(
        sandbox.events().contains("released"),
        "{}",
        sandbox.events()
    );
    let row = sandbox.row();
    assert!(!reasons(&row).contains("marker '"), "{row:#}");
}

#[test]
fn a_json_lock_marker_is_judged_like_a_lock() {
    let procs = Procs(vec![sleeper()]);
    let pid = procs.0[0].id();
    let ticks = start_ticks(pid);
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.json");
    let reused = dir.path().join("reused.json");
    let other_boot = dir.path().join("other-boot.json");
    let boot = boot_id();
    fs::write(
        &live,
        format!(r#"{{"pid": {pid}, "start_time": {ticks}, "boot_id": "{boot}", "run_id": "r1"}}"#),
    )
    .unwrap();
    fs::write(
        &reused,
        format!(
            r#"{{"pid": {pid}, "start_time": {}, "boot_id": "{boot}"}}"#,
            ticks + 1
        ),
    )
    .unwrap();
    fs::write(
        &other_boot,
        format!(
            r#"{{"pid": {pid}, "start_time": {ticks}, "boot_id": "00000000-0000-0000-0000-000000000000"}}"#
        ),
    )
    .unwrap();
    let sandbox = Sandbox::new(&format!(
        "{}{}{}",
        marker(&live, 60),
        marker(&reused, 60),
        marker(&other_boot, 60)
    ));
    let why = reasons(&sandbox.row());
    assert!(
        !why.contains(&format!("marker '{}'", live.display())),
        "{why}"
    );
    assert!(
        why.contains(&format!("marker '{}'", reused.display())),
        "{why}"
    );
    assert!(why.contains("start time differs"), "{why}");
    assert!(
        why.contains(&format!("marker '{}'", other_boot.display())),
        "{why}"
    );

    let out = sandbox.mihari(&["release-marker", "j", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "two are stale: name one. {}",
        said(&out)
    );
    assert!(
        said(&out).contains("name the one to release"),
        "{}",
        said(&out)
    );
    let out = sandbox.mihari(&["release-marker", "j", &live.display().to_string(), "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(live.exists());
    for stale in [&reused, &other_boot] {
        let out = sandbox.mihari(&["release-marker", "j", &stale.display().to_string(), "--yes"]);
        assert_eq!(out.status.code(), Some(0), "{}", said(&out));
        assert!(!stale.exists(), "{}", stale.display());
    }
    drop(procs);
}

#[test]
fn an_empty_marker_past_its_age_is_stale_and_one_a_live_flock_holds_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.marker");
    let young = dir.path().join("young.marker");
    let locked = dir.path().join("locked.marker");
    for path in [&old, &young, &locked] {
        fs::write(path, "").unwrap();
    }
    age(&old, 7200);
    age(&locked, 7200);
    // util-linux flock(1) holds an empty file while its command runs.
    let procs = Procs(vec![
        Command::new("flock")
            .arg(&locked)
            .args(["sleep", "300"])
            .stdin(Stdio::null())
            .spawn()
            .expect("flock"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .contains(&format!(
            ":{} ",
            fs::metadata(&locked)
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .unwrap()
        ))
    {
        assert!(Instant::now() < deadline, "flock never took the lock");
        thread::sleep(Duration::from_millis(20));
    }
    let sandbox = Sandbox::new(&format!(
        "{}{}{}",
        marker(&old, 1800),
        marker(&young, 1800),
        marker(&locked, 1800)
    ));
    let row = sandbox.row();
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let why = reasons(&row);
    assert!(
        why.contains(&format!("marker '{}' is 2 h", old.display())),
        "{why}"
    );
    assert!(
        why.contains("(stale_after_sec 1800) and no process holds it"),
        "{why}"
    );
    assert!(
        !why.contains(&format!("marker '{}'", young.display())),
        "{why}"
    );
    assert!(
        !why.contains(&format!("marker '{}'", locked.display())),
        "{why}"
    );

    for (path, words) in [(&young, "not stale yet"), (&locked, "alive")] {
        let out = sandbox.mihari(&["release-marker", "j", &path.display().to_string(), "--yes"]);
        assert_eq!(out.status.code(), Some(1), "{}", said(&out));
        assert!(said(&out).contains(words), "{}", said(&out));
        assert!(path.exists());
    }
    let out = sandbox.mihari(&["release-marker", "j", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!old.exists());
    drop(procs);
}

#[test]
fn an_old_empty_folder_is_released_and_one_with_files_in_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("run.lock.d");
    let full = dir.path().join("session.d");
    fs::create_dir(&empty).unwrap();
    fs::create_dir(&full).unwrap();
    fs::write(full.join("notes.txt"), "keep me").unwrap();
    age(&empty, 7200);
    age(&full, 7200);
    let sandbox = Sandbox::new(&format!("{}{}", marker(&empty, 60), marker(&full, 60)));
    let why = reasons(&sandbox.row());
    assert!(why.contains("(a folder) is 2 h"), "{why}");
    let out = sandbox.mihari(&["release-marker", "j", &full.display().to_string(), "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("only when it is empty"),
        "{}",
        said(&out)
    );
    assert!(said(&out).contains("'notes.txt'"), "{}", said(&out));
    assert!(full.join("notes.txt").exists());
    let out = sandbox.mihari(&["release-marker", "j", "run.lock.d", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!empty.exists());
}

#[test]
fn what_happened_is_shown_before_anything_is_removed_and_a_decline_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".resumed");
    // Content a job wrote, with an escape sequence that must reach no terminal as one.
    fs::write(
        &path,
        "resumed at step 1200 \u{1b}]0;pwned\u{7} by worker-3\n",
    )
    .unwrap();
    age(&path, 7200);
    let sandbox = Sandbox::new(&marker(&path, 1800));
    // Two real runs that fail: the job's last attempts and its last error.
    for _ in 0..2 {
        let out = sandbox.mihari(&["run", "j"]);
        assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    }
    // No terminal to ask on, no --yes: everything is shown, nothing is removed.
    let out = sandbox.mihari(&["release-marker", "j"]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(shown.contains("age       2 h"), "{shown}");
    assert!(shown.contains("stale after 1800 s"), "{shown}");
    assert!(shown.contains("resumed at step 1200"), "{shown}");
    assert!(shown.contains("by worker-3"), "{shown}");
    assert!(
        !shown.contains('\u{1b}'),
        "an escape sequence reached the terminal: {shown:?}"
    );
    assert!(shown.contains("attempt   "), "{shown}");
    assert!(shown.contains("exited: exit 3"), "{shown}");
    assert!(shown.contains("error     "), "{shown}");
    assert!(said(&out).contains("pass --yes"), "{}", said(&out));
    assert!(path.exists(), "a declined release removed the marker");
    let events = sandbox.events();
    assert!(events.contains("declined"), "{events}");
    assert!(events.contains("release marker declined"), "{events}");
}

#[test]
fn a_link_a_named_pipe_and_a_folder_others_can_write_are_faults_never_followed_or_removed() {
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("precious.txt");
    fs::write(&precious, "the operator's bytes\n").unwrap();
    age(&precious, 7200);
    let link = dir.path().join("link.marker");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let fifo = dir.path().join("fifo.marker");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let open = dir.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let planted = open.join("planted.marker");
    fs::write(&planted, "").unwrap();
    age(&planted, 7200);
    let sandbox = Sandbox::new(&format!(
        "{}{}{}",
        marker(&link, 60),
        marker(&fifo, 60),
        marker(&planted, 60)
    ));
    let row = sandbox.row();
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let why = reasons(&row);
    assert!(why.contains("is a symbolic link"), "{why}");
    assert!(why.contains("is a named pipe"), "{why}");
    assert!(why.contains("cannot trust the marker"), "{why}");
    assert!(!why.contains("the operator's bytes"), "{why}");
    for path in [&link, &fifo, &planted] {
        let out = sandbox.mihari(&["release-marker", "j", &path.display().to_string(), "--yes"]);
        assert_eq!(out.status.code(), Some(1), "{}", said(&out));
        assert!(
            fs::symlink_metadata(path).is_ok(),
            "{} was removed",
            path.display()
        );
    }
    assert_eq!(
        fs::read_to_string(&precious).unwrap(),
        "the operator's bytes\n"
    );
    assert_eq!(fs::read_link(&link).unwrap(), precious);
}

/// The second user's uid.
fn other_user() -> Option<u32> {
    users::other_user().map(|(uid, _)| uid)
}

#[test]
fn a_marker_in_a_folder_another_user_owns_is_a_fault_and_never_removed() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: giving a folder to another user needs root");
        return;
    }
    let Some(uid) = other_user() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).unwrap();
    let theirs = dir.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    let planted = theirs.join(".resumed");
    fs::write(&planted, "").unwrap();
    age(&planted, 7200);
    let id = nix::unistd::Uid::from_raw(uid);
    let gid = nix::unistd::Gid::from_raw(uid);
    nix::unistd::chown(&planted, Some(id), Some(gid)).unwrap();
    nix::unistd::chown(&theirs, Some(id), Some(gid)).unwrap();
    let sandbox = Sandbox::new(&marker(&planted, 60));
    let row = sandbox.row();
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let why = reasons(&row);
    assert!(why.contains("belongs to user 'mihari-other'"), "{why}");
    assert!(
        !why.contains("stale;"),
        "judged stale through a folder it cannot trust: {why}"
    );
    let out = sandbox.mihari(&["release-marker", "j", ".resumed", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("mihari-other"), "{}", said(&out));
    assert!(
        planted.exists(),
        "a marker in another user's folder was removed"
    );
}

/// Two stale markers of one job: the bare `release-marker j` would be refused ("name the one
/// to release"), so each marker's reason suggests the command naming its own path; a job
/// with one stale marker keeps the bare command.
#[test]
fn several_stale_markers_each_suggest_the_command_naming_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.marker");
    let second = dir.path().join("second marker");
    for path in [&first, &second] {
        fs::write(path, "").unwrap();
        age(path, 7200);
    }
    let sandbox = Sandbox::new(&format!(
        "{}{}",
        marker(&first, 1800),
        marker(&second, 1800)
    ));
    let row = sandbox.row();
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    let why = reasons(&row);
    assert!(
        why.contains(&format!("(mihari release-marker j '{}')", first.display())),
        "{why}"
    );
    assert!(
        why.contains(&format!("(mihari release-marker j '{}')", second.display())),
        "{why}"
    );
    assert!(!why.contains("(mihari release-marker j)"), "{why}");
    // The suggestion works as printed (the path with a space is quoted for the shell).
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{BIN} --config '{}' release-marker j '{}' --yes",
            sandbox.config().display(),
            second.display()
        ))
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(!second.exists() && first.exists());

    // One left stale: the bare command is enough again.
    let why = reasons(&sandbox.row());
    assert!(why.contains("(mihari release-marker j)"), "{why}");
}

/// `check --nagios` names the stale marker on the job's STALE line (its path and age), not
/// the state's own words, which say nothing of why the job is STALE.
#[test]
fn check_nagios_names_the_stale_marker_on_the_stale_line() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.marker");
    fs::write(&old, "").unwrap();
    age(&old, 7200);
    let sandbox = Sandbox::new(&marker(&old, 1800));
    let out = sandbox.mihari(&["check", "--nagios"]);
    let text = text(&out.stdout);
    let line = text
        .lines()
        .find(|line| line.starts_with("STALE j: "))
        .unwrap_or_else(|| panic!("a STALE line for j: {}", said(&out)));
    assert!(
        line.contains(&format!(" - marker '{}' is 2 h", old.display())),
        "{line}"
    );
    assert!(line.contains("stale_after_sec 1800"), "{line}");
}

//! Line counts kept between processes (`state_dir/line-counts`) are reused only while they are
//! provably still right.
//!
//! Every test runs the real `mihari check --json` twice or more on a real progress file,
//! changing the file in between the way real writers and tools do (an append, a truncate and
//! rewrite to the same size, a replace by rename, a real `logrotate -f` copytruncate), and
//! asserts the count the second process gives is the file's real line count. The cache file
//! itself is then attacked: tampered with, a link, someone else's, open to others — each
//! must be ignored, never trusted. The first test shows a kept count is what a new process
//! starts from (a planted count, in the operator's own private file, is believed): the
//! others would pass without the cache at all otherwise.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mihari::store::counts::{self, FILE, KeptCount};
use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, chown};

#[path = "common/users.rs"]
mod users;

const LOGROTATE: &str = "/usr/sbin/logrotate";

struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let text = "settings:\n  state_dir: state\njobs:\n  - id: trainer\n    \
                    progress_file: out/trainer.progress\n    stall_sec: never\n    \
                    expected_total: 1000000\n    should_run_when: [not_complete]\n";
        fs::create_dir(root.join("out")).expect("out");
        let jobs = root.join("jobs.yaml");
        fs::write(&jobs, text).expect("jobs file");
        fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");
        Sandbox { _dir: dir, root }
    }

    fn progress(&self) -> PathBuf {
        self.root.join("out/trainer.progress")
    }

    fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    fn cache(&self) -> PathBuf {
        self.state().join(FILE)
    }

    /// A new `mihari check --json` process: the job's done, as it says it (0 for none).
    fn done(&self) -> u64 {
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(self.root.join("jobs.yaml"))
            .args(["check", "--json"])
            .stdin(Stdio::null())
            .output()
            .expect("mihari check runs");
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("check's JSON ({e}): {output:?}"));
        report["jobs"][0]["done"].as_u64().unwrap_or(0)
    }

    /// What the cache says of the progress file, read as a new process reads it.
    fn kept(&self) -> Option<KeptCount> {
        counts::load(&self.state()).get(&self.progress()).copied()
    }

    /// Replaces the kept count of the progress file with `lines`, everything else as it
    /// was: a count that is wrong only in its number, written as mihari writes it.
    fn plant(&self, lines: u64) {
        let mut all = counts::load(&self.state());
        all.get_mut(&self.progress()).expect("a kept count").lines = lines;
        counts::save(
            &self.state(),
            all.iter().map(|(path, kept)| (path.as_path(), kept)),
        )
        .expect("saved");
    }
}

fn lines(n: usize, width: usize) -> String {
    (0..n).map(|i| format!("{i:0width$}\n")).collect()
}

fn append(path: &Path, text: &str) {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open to append");
    file.write_all(text.as_bytes()).expect("append");
}

fn set_mtime(path: &Path, secs: i64, nsecs: i64) {
    let at = TimeSpec::new(secs, nsecs);
    utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &at,
        &at,
        UtimensatFlags::FollowSymlink,
    )
    .expect("utimensat");
}

/// The second user's uid and gid, as nix gives them.
fn other_user() -> Option<(Uid, Gid)> {
    users::other_user().map(|(uid, gid)| (Uid::from_raw(uid), Gid::from_raw(gid)))
}

#[test]
fn a_kept_count_is_what_the_next_process_starts_from_and_the_file_is_private() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    let meta = fs::symlink_metadata(sandbox.cache()).expect("the counts are kept");
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o777, 0o600, "the cache is private");
    let kept = sandbox.kept().expect("the progress file's count is kept");
    assert_eq!((kept.lines, kept.offset), (1000, 10_000));
    // Believed, unread: the next process starts from the count it finds.
    sandbox.plant(4242);
    assert_eq!(sandbox.done(), 4242);
}

#[test]
fn an_append_between_two_processes_is_counted_from_where_the_first_stopped() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    // A planted count shows the second process reads only what was appended.
    sandbox.plant(5000);
    append(&sandbox.progress(), &lines(7, 9));
    append(&sandbox.progress(), "half a li");
    assert_eq!(sandbox.done(), 5007);
    append(&sandbox.progress(), "ne\n");
    assert_eq!(sandbox.done(), 5008);
    // The real count, from a file nobody planted anything in.
    fs::remove_file(sandbox.cache()).expect("rm cache");
    assert_eq!(sandbox.done(), 1008);
    append(&sandbox.progress(), &lines(2, 9));
    assert_eq!(sandbox.done(), 1010);
}

#[test]
fn a_rewrite_to_the_same_size_is_counted_afresh_with_a_new_mtime_or_the_same_one() {
    let sandbox = Sandbox::new();
    let path = sandbox.progress();
    // 1,000 lines of 10 bytes, then 500 lines of 20 bytes: the same 10,000 bytes.
    fs::write(&path, lines(1000, 9)).expect("progress");
    set_mtime(&path, 1_700_000_000, 0);
    assert_eq!(sandbox.done(), 1000);
    fs::write(&path, lines(500, 19)).expect("rewritten, truncating");
    set_mtime(&path, 1_700_000_060, 0);
    assert_eq!(sandbox.done(), 500);
    // The same size and the very mtime that was counted: only the bytes tell.
    fs::write(&path, lines(1000, 9)).expect("rewritten again");
    set_mtime(&path, 1_700_000_060, 0);
    assert_eq!(sandbox.done(), 1000);
}

#[test]
fn a_truncated_file_that_grew_back_past_the_count_is_counted_afresh() {
    let sandbox = Sandbox::new();
    let path = sandbox.progress();
    fs::write(&path, lines(100, 9)).expect("progress");
    assert_eq!(sandbox.done(), 100);
    // Truncated in place (same inode) and written past the old offset between two runs.
    fs::write(&path, lines(60, 29)).expect("truncated and rewritten");
    assert_eq!(sandbox.done(), 60);
}

#[test]
fn a_file_replaced_by_rename_is_counted_afresh() {
    let sandbox = Sandbox::new();
    let path = sandbox.progress();
    fs::write(&path, lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    let before = fs::metadata(&path).expect("meta").ino();
    let next = sandbox.root.join("out/trainer.progress.new");
    // A longer file with the same last bytes: only its inode says it is another file.
    let mut text = lines(1500, 4);
    text.push_str(&lines(1000, 9)[5000..]);
    fs::write(&next, &text).expect("the new file");
    fs::rename(&next, &path).expect("renamed over");
    assert_ne!(fs::metadata(&path).expect("meta").ino(), before);
    assert_eq!(sandbox.done(), 2000);
}

#[test]
fn logrotate_copytruncate_between_two_processes_is_counted_afresh() {
    assert!(
        Path::new(LOGROTATE).exists(),
        "{LOGROTATE} is missing: apt-get install logrotate"
    );
    let sandbox = Sandbox::new();
    let path = sandbox.progress();
    fs::write(&path, lines(300, 9)).expect("progress");
    assert_eq!(sandbox.done(), 300);
    let conf = sandbox.root.join("logrotate.conf");
    fs::write(
        &conf,
        format!("{} {{\n  copytruncate\n  rotate 2\n}}\n", path.display()),
    )
    .expect("logrotate.conf");
    let rotate = || {
        let output = Command::new(LOGROTATE)
            .arg("-f")
            .arg("-s")
            .arg(sandbox.root.join("logrotate.state"))
            .arg(&conf)
            .output()
            .expect("logrotate runs");
        assert!(
            output.status.success(),
            "logrotate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    rotate();
    assert_eq!(fs::metadata(&path).expect("meta").len(), 0, "truncated");
    assert!(sandbox.root.join("out/trainer.progress.1").exists());
    // The writer carries on (appending): fewer lines than before, then more.
    append(&path, &lines(3, 9));
    assert_eq!(sandbox.done(), 3);
    rotate();
    append(&path, &lines(400, 9));
    assert_eq!(sandbox.done(), 400);
}

#[test]
fn a_tampered_cache_is_ignored() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    let mut bytes = fs::read(sandbox.cache()).expect("cache");
    // The count sits just before the block checksum and the file's closing SHA-256.
    let at = bytes.len() - 32 - 16;
    bytes[at] ^= 0x55;
    fs::write(sandbox.cache(), &bytes).expect("tampered");
    assert_eq!(sandbox.done(), 1000);
    // Cut short, or not a cache at all.
    fs::write(sandbox.cache(), &bytes[..bytes.len() / 2]).expect("cut");
    assert_eq!(sandbox.done(), 1000);
    fs::write(sandbox.cache(), b"mihari line counts 1\nnonsense").expect("nonsense");
    assert_eq!(sandbox.done(), 1000);
    // And the next process writes a good one again.
    assert_eq!(sandbox.kept().map(|k| k.lines), Some(1000));
}

#[test]
fn a_cache_that_is_a_link_is_never_read_nor_written_through() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    sandbox.plant(4242);
    // The planted (wrong) counts moved away, and linked to from where the cache goes.
    let elsewhere = sandbox.root.join("planted-counts");
    fs::rename(sandbox.cache(), &elsewhere).expect("moved");
    std::os::unix::fs::symlink(&elsewhere, sandbox.cache()).expect("symlink");
    let planted = fs::read(&elsewhere).expect("planted");
    append(&sandbox.progress(), &lines(1, 9));
    assert_eq!(sandbox.done(), 1001);
    assert_eq!(
        fs::read(&elsewhere).expect("still there"),
        planted,
        "the link's target was written through"
    );
    assert!(
        fs::symlink_metadata(sandbox.cache())
            .expect("cache")
            .is_file(),
        "the link is replaced by a file of mihari's own"
    );
}

#[test]
fn a_cache_owned_by_someone_else_or_open_to_others_is_ignored() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(1000, 9)).expect("progress");
    assert_eq!(sandbox.done(), 1000);
    sandbox.plant(4242);
    fs::set_permissions(sandbox.cache(), fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(sandbox.done(), 1000, "a cache others can read is ignored");
    let Some((uid, gid)) = other_user() else {
        return;
    };
    sandbox.plant(4242);
    chown(&sandbox.cache(), Some(uid), Some(gid)).expect("chown");
    assert_eq!(sandbox.done(), 1000, "mihari-other's cache is ignored");
}

#[test]
fn a_cache_that_cannot_be_written_is_said_with_its_path() {
    let sandbox = Sandbox::new();
    fs::write(sandbox.progress(), lines(10, 9)).expect("progress");
    fs::create_dir_all(sandbox.cache()).expect("a folder where the cache goes");
    fs::write(sandbox.cache().join("x"), "x").expect("not empty");
    assert_eq!(sandbox.done(), 10);
    let error = counts::save(&sandbox.state(), std::iter::empty()).expect_err("cannot replace");
    assert!(
        error.contains(&format!("'{}'", sandbox.cache().display())),
        "{error}"
    );
}

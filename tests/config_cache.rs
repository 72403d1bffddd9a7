//! The cache of a large jobs file's validated form, through the real binary: a farm is
//! parsed once, every later load gives what a fresh parse gives, any change to the file is
//! seen (even one that keeps its size and modification time), and a cache that is not the
//! operator's own, is open to others, is a link or is garbage is never used.
//!
//! Each test points `XDG_CACHE_HOME` at a folder of its own and lowers the size from which a
//! jobs file is cached (`MIHARI_CONFIG_CACHE_MIN_BYTES=0`), so a small farm will do.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
const JOBS: usize = 300;

struct Farm {
    dir: tempfile::TempDir,
}

impl Farm {
    /// `JOBS` jobs, each with a lock, a log and a progress file; job `n` expects `1000 + n`.
    fn new() -> Farm {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("jobs")).unwrap();
        fs::create_dir_all(root.join("cache")).unwrap();
        fs::set_permissions(root.join("cache"), fs::Permissions::from_mode(0o700)).unwrap();
        let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
        for n in 0..JOBS {
            yaml.push_str(&format!(
                "  - id: job{n:04}\n    lock: jobs/job{n:04}.lock\n    log: jobs/job{n:04}.log\n    \
                 progress_file: jobs/job{n:04}.progress\n    expected_total: {}\n    \
                 should_run_when: [not_complete]\n",
                1000 + n
            ));
            fs::write(root.join(format!("jobs/job{n:04}.progress")), "1\n2\n").unwrap();
            fs::write(root.join(format!("jobs/job{n:04}.log")), "started\n").unwrap();
        }
        fs::write(root.join("jobs.yaml"), yaml).unwrap();
        Farm { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `mihari check --json` with the cache on (`cached`) or off.
    fn check(&self, cached: bool) -> (Value, Output) {
        let min = if cached { "0" } else { "18446744073709551615" };
        let output = Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(["check", "--json"])
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("MIHARI_CONFIG_CACHE_MIN_BYTES", min)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (report, output)
    }

    /// `mihari check --json` on `jobs` with the cache on, run by the binary `bin`: it must
    /// give a verdict (exit 0, 1 or 2).
    fn check_with(&self, bin: &Path, jobs: &Path) {
        let output = Command::new(bin)
            .arg("--config")
            .arg(jobs)
            .args(["check", "--json"])
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("MIHARI_CONFIG_CACHE_MIN_BYTES", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(output.status.code().is_some_and(|c| c < 3), "{output:?}");
    }

    /// The cache files written so far.
    fn caches(&self) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(self.path("cache/mihari")) else {
            return Vec::new();
        };
        entries.flatten().map(|e| e.path()).collect()
    }

    fn only_cache(&self) -> PathBuf {
        let caches = self.caches();
        assert_eq!(caches.len(), 1, "{caches:?}");
        caches[0].clone()
    }
}

/// What a report says of every job, without what moves with the clock.
fn verdicts(report: &Value) -> Vec<(String, String, Value)> {
    report["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no jobs in {report}"))
        .iter()
        .map(|job| {
            (
                job["id"].as_str().unwrap().to_string(),
                job["state"].as_str().unwrap().to_string(),
                job["expected_total"].clone(),
            )
        })
        .collect()
}

fn expected_total_of(report: &Value, id: &str) -> Value {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["id"] == id)
        .map(|job| job["expected_total"].clone())
        .unwrap_or(Value::Null)
}

/// Sets a file's modification time back to `(secs, nanos)`, as `touch -d` would.
fn set_mtime(path: &Path, secs: i64, nanos: i64) {
    let times = [
        nix::sys::time::TimeSpec::new(secs, nanos),
        nix::sys::time::TimeSpec::new(secs, nanos),
    ];
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &times[0],
        &times[1],
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .unwrap();
}

#[test]
fn a_farm_is_parsed_once_and_every_later_load_gives_what_a_fresh_parse_gives() {
    let farm = Farm::new();
    let (fresh, fresh_output) = farm.check(false);
    assert!(farm.caches().is_empty(), "cached with the cache off");
    let (first, _) = farm.check(true);
    let cache = farm.only_cache();
    let meta = fs::metadata(&cache).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "the cache is private");
    let folder = fs::metadata(cache.parent().unwrap()).unwrap();
    assert_eq!(folder.mode() & 0o777, 0o700, "its folder is private");
    let (second, output) = farm.check(true);
    assert_eq!(verdicts(&second), verdicts(&fresh));
    assert_eq!(verdicts(&first), verdicts(&fresh));
    assert_eq!(verdicts(&fresh).len(), JOBS);
    assert_eq!(output.status.code(), fresh_output.status.code());
}

#[test]
fn an_edit_that_keeps_the_size_and_the_modification_time_is_seen() {
    let farm = Farm::new();
    farm.check(true);
    let jobs = farm.path("jobs.yaml");
    let before = fs::metadata(&jobs).unwrap();
    let text = fs::read_to_string(&jobs).unwrap();
    // Same length: 1007 -> 9007 for job0007.
    let edited = text.replacen("expected_total: 1007\n", "expected_total: 9007\n", 1);
    assert_ne!(edited, text);
    fs::write(&jobs, &edited).unwrap();
    set_mtime(&jobs, before.mtime(), before.mtime_nsec());
    let after = fs::metadata(&jobs).unwrap();
    assert_eq!(
        (after.len(), after.mtime(), after.mtime_nsec()),
        (before.len(), before.mtime(), before.mtime_nsec())
    );
    let (report, _) = farm.check(true);
    assert_eq!(expected_total_of(&report, "job0007"), 9007, "{report}");
    // And a rename over it (a new inode, as editors save).
    let replacement = farm.path("jobs.yaml.new");
    fs::write(
        &replacement,
        edited.replacen("expected_total: 9007\n", "expected_total: 8007\n", 1),
    )
    .unwrap();
    fs::rename(&replacement, &jobs).unwrap();
    let (report, _) = farm.check(true);
    assert_eq!(expected_total_of(&report, "job0007"), 8007, "{report}");
}

/// The cache with job0007's expected total rewritten in it, its key untouched.
fn tamper(cache: &Path) {
    let text = fs::read_to_string(cache).unwrap();
    let (key, body) = text.split_once('\n').unwrap();
    let body = body.replacen("\"expected_total\":1007", "\"expected_total\":666", 1);
    assert!(body.contains("\"expected_total\":666"));
    let perms = fs::metadata(cache).unwrap().permissions();
    fs::write(cache, format!("{key}\n{body}")).unwrap();
    fs::set_permissions(cache, perms).unwrap();
}

#[test]
fn a_cache_that_is_open_to_others_or_someone_elses_is_never_used() {
    let farm = Farm::new();
    farm.check(true);
    let cache = farm.only_cache();
    tamper(&cache);
    for mode in [0o644, 0o660, 0o666] {
        fs::set_permissions(&cache, fs::Permissions::from_mode(mode)).unwrap();
        let (report, _) = farm.check(true);
        assert_eq!(
            expected_total_of(&report, "job0007"),
            1007,
            "a cache of mode {mode:o} was used"
        );
        // It was replaced by a private one, parsed afresh.
        tamper(&farm.only_cache());
    }
    // Someone else's, private as it may be.
    let cache = farm.only_cache();
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o600)).unwrap();
    let other = Command::new("sh")
        .args([
            "-c",
            "id -u mihari-other >/dev/null 2>&1 || useradd --system --no-create-home mihari-other; \
             id -u mihari-other",
        ])
        .output()
        .unwrap();
    let Ok(uid) = String::from_utf8_lossy(&other.stdout).trim().parse::<u32>() else {
        eprintln!("skipped the other user's cache: cannot create a user here");
        return;
    };
    nix::unistd::chown(&cache, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
    let (report, _) = farm.check(true);
    assert_eq!(
        expected_total_of(&report, "job0007"),
        1007,
        "another user's cache was used"
    );
}

#[test]
fn a_link_or_garbage_where_the_cache_is_is_never_used() {
    let farm = Farm::new();
    farm.check(true);
    let cache = farm.only_cache();
    // A link to a tampered copy.
    let elsewhere = farm.path("planted.json");
    fs::copy(&cache, &elsewhere).unwrap();
    tamper(&elsewhere);
    fs::remove_file(&cache).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &cache).unwrap();
    let (report, _) = farm.check(true);
    assert_eq!(
        expected_total_of(&report, "job0007"),
        1007,
        "a link was followed"
    );
    assert!(
        fs::read_to_string(&elsewhere).unwrap().contains("666"),
        "what the link points to was written"
    );
    assert!(
        !fs::symlink_metadata(&cache)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Garbage: ignored, and replaced by a cache that works.
    fs::write(&cache, "{\"format\": not json\n").unwrap();
    let (report, _) = farm.check(true);
    assert_eq!(expected_total_of(&report, "job0007"), 1007);
    let (again, _) = farm.check(true);
    assert_eq!(verdicts(&again), verdicts(&report));
}

#[test]
fn a_jobs_file_refused_since_it_was_cached_is_refused() {
    let farm = Farm::new();
    farm.check(true);
    assert_eq!(farm.caches().len(), 1);
    let jobs = farm.path("jobs.yaml");
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o666)).unwrap();
    let (_, output) = farm.check(true);
    assert_eq!(
        output.status.code(),
        Some(3),
        "a file others can write was used"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("writable by"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every farm loaded from a temporary folder (a test's, a bench's) used to leave its cache
/// for good: hundreds of megabytes after a day of work. A cache whose jobs file is gone is
/// removed at the next write, at most the newest eight are kept, and a copy of the binary
/// (another mihari) keeps a cache of its own instead of replacing this one's.
#[test]
fn caches_of_jobs_files_that_are_gone_are_removed_and_at_most_eight_are_kept() {
    let farm = Farm::new();
    // Twelve other jobs files, each loaded once: twelve caches.
    let mut others = Vec::new();
    for n in 0..12 {
        let other = farm.path(&format!("other{n:02}.yaml"));
        fs::copy(farm.path("jobs.yaml"), &other).unwrap();
        farm.check_with(Path::new(BIN), &other);
        others.push(other);
    }
    assert_eq!(farm.caches().len(), 8, "{:?}", farm.caches());
    // Gone: the caches of the files removed go at the next write; the farm's own is written.
    for other in &others {
        fs::remove_file(other).unwrap();
    }
    let (report, _) = farm.check(true);
    assert_eq!(expected_total_of(&report, "job0007"), 1007);
    let cache = farm.only_cache();
    // Another binary: a cache of its own, and this one's stays and is still used.
    let copy = farm.path("mihari-copy");
    fs::copy(BIN, &copy).unwrap();
    farm.check_with(&copy, &farm.path("jobs.yaml"));
    assert_eq!(farm.caches().len(), 2, "{:?}", farm.caches());
    assert!(cache.exists(), "the other binary replaced this one's cache");
}

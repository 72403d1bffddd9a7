//! `mihari events` and `mihari digest` while the jobs file is refused (a bad edit): the event
//! log is exactly what the operator needs then. They read the store the refused file's own
//! settings name (or the default state folder when it names none); when the file is too
//! broken to tell which store it names, they say which store they cannot find and how to name
//! it (`--state-dir`), and with it they work. Real files, the real binary, a real store.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("a temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        Sandbox { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write_jobs(&self, text: &str) {
        let jobs = self.path("jobs.yaml");
        fs::write(&jobs, text).expect("write the jobs file");
        fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600)).expect("chmod");
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .env("HOME", self.dir.path())
            .env_remove("XDG_STATE_HOME")
            .env_remove("MIHARI_CONFIG")
            .env("XDG_CACHE_HOME", self.path("cache"))
            .stdin(Stdio::null())
            .output()
            .expect("mihari runs")
    }

    /// Records an event the operator will look for: an approval request of job `j`.
    fn request(&self) {
        let out = self.mihari(&[
            "approval",
            "request",
            "j",
            "--step",
            "publish",
            "--key",
            "k-1",
            "--summary",
            "publish it",
        ]);
        assert_eq!(out.status.code(), Some(10), "{}", said(&out));
    }
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const GOOD: &str = "settings:\n  state_dir: state\njobs:\n  - id: j\n    log: j.log\n    \
                    should_run_when: [not_succeeded]\n";

/// A typo in a job (an unknown key): the file is refused, its settings still name the store.
#[test]
fn events_and_digest_read_the_store_a_refused_files_settings_name() {
    let sandbox = Sandbox::new();
    sandbox.write_jobs(GOOD);
    sandbox.request();
    sandbox.write_jobs(&format!("{GOOD}  - id: k\n    colour: red\n"));
    let check = sandbox.mihari(&["check"]);
    assert_eq!(
        check.status.code(),
        Some(3),
        "the file is refused: {}",
        said(&check)
    );

    let out = sandbox.mihari(&["events"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("approval-requested"),
        "{}",
        said(&out)
    );
    let warning = stderr(&out);
    assert!(
        warning.contains("jobs.yaml:8:5"),
        "names the refusal: {warning}"
    );
    assert!(
        warning.contains(&format!("'{}'", sandbox.path("state").display())),
        "names the store it read: {warning}"
    );

    let out = sandbox.mihari(&["events", "--json", "--kind", "approval-requested"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", said(&out));

    let out = sandbox.mihari(&["digest", "--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(stderr(&out).contains("jobs.yaml:8:5"), "{}", said(&out));
}

/// A save that is not YAML at all and names a state_dir: which store it names cannot be
/// told, so nothing is guessed; the refusal says how to name the store, and with it the
/// events are there.
#[test]
fn a_file_too_broken_to_name_its_store_says_how_to_name_it() {
    let sandbox = Sandbox::new();
    sandbox.write_jobs(GOOD);
    sandbox.request();
    sandbox.write_jobs(&format!("{GOOD}  - id: 'k\n"));

    let out = sandbox.mihari(&["events"]);
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    let words = stderr(&out);
    assert!(words.contains("jobs.yaml:"), "the refusal itself: {words}");
    assert!(
        words.contains("--state-dir"),
        "how to name the store: {words}"
    );
    assert!(stdout(&out).is_empty(), "{}", said(&out));

    let state = sandbox.path("state");
    let out = sandbox.mihari(&["events", "--state-dir", &state.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("approval-requested"),
        "{}",
        said(&out)
    );
    let out = sandbox.mihari(&["digest", "--state-dir", &state.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));

    // A folder with no store in it is named as such, never created.
    let elsewhere = sandbox.path("elsewhere");
    let out = sandbox.mihari(&["events", "--state-dir", &elsewhere.display().to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", said(&out));
    assert!(
        stderr(&out).contains(&format!("'{}'", elsewhere.display())),
        "{}",
        said(&out)
    );
    assert!(!elsewhere.exists(), "no store is made where none was");
}

/// A file that names no state_dir uses the default one (`~/.local/state/mihari`), refused
/// or not: the events are read from there.
#[test]
fn a_refused_file_that_names_no_store_reads_the_default_one() {
    let sandbox = Sandbox::new();
    let plain = "jobs:\n  - id: j\n    log: j.log\n    should_run_when: [not_succeeded]\n";
    sandbox.write_jobs(plain);
    sandbox.request();
    assert!(Path::new(&sandbox.path(".local/state/mihari")).is_dir());
    sandbox.write_jobs(&format!("{plain}  - id: 'k\n"));
    let out = sandbox.mihari(&["events"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        stdout(&out).contains("approval-requested"),
        "{}",
        said(&out)
    );
    assert!(
        stderr(&out).contains(&sandbox.path(".local/state/mihari").display().to_string()),
        "{}",
        said(&out)
    );
}

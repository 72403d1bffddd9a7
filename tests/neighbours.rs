//! Bad neighbours: what other programs on the machine do to the files mihari reads, with real
//! files, real processes, real SQLite locks and real mounts, and the real binary.
//!
//! - A progress table whose database a writer keeps locked: a rollback-journal database under
//!   `BEGIN EXCLUSIVE` and a WAL database under `locking_mode=EXCLUSIVE` block readers, and
//!   must show as a fault that says "locked" within the probe's busy timeout — never a hang,
//!   never "no progress". A WAL database with a long write transaction and a reader that
//!   blocks checkpoints does not block readers at all: the last committed rows are read.
//! - A 10 GiB log (sparse): the tail reads a bounded number of bytes from its end, and `check`
//!   only stats it. A 10 GiB progress file is counted in full once (ignored by default: it
//!   reads 10 GiB of holes; run it with `--ignored` to see what it costs here).
//! - Locks that name PID 1: a bare "1", JSON with a wrong start time, JSON with its real one.
//!   Release and restart refuse while it is alive.
//! - A jobs file on a read-only filesystem loads; a state folder that cannot be written
//!   (under a regular file, on a read-only filesystem, under /proc) stops `watch` at once
//!   with what to do, leaves `check` working with a notice, and makes `restart` fail without
//!   spawning anything.
//!
//! Mounts need root (or CAP_SYS_ADMIN): where mounting is not permitted, the tests that need
//! one say why on stderr and pass. Wall-clock bounds here are generous sanity bounds against a
//! hang (many times the expected figure); the figures themselves are in `benches/perf.rs`.

use std::collections::HashSet;
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use mihari::core::Reading;
use mihari::engine::Engine;
use mihari::engine::live::{Arrivals, Live};
use mihari::engine::triggers::Trigger;
use mihari::probe::tail::{MAX_READ_BYTES, tail_lines_counted};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");
/// A pass over a locked database waits at most the probe's busy timeout (250 ms).
const LOCKED_CHECK_BOUND: Duration = Duration::from_secs(2);
const GIB: u64 = 1 << 30;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A temporary folder with a jobs file in it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            dir: tempfile::tempdir().expect("a temp dir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path(name);
        fs::write(&path, content).expect("write");
        path
    }

    /// Writes `jobs.yaml` (mode 0644) with `state_dir` and the jobs given as YAML list items.
    fn jobs_file(&self, state_dir: &Path, jobs: &str) -> PathBuf {
        write_jobs_file(&self.path("jobs.yaml"), state_dir, jobs)
    }
}

fn write_jobs_file(path: &Path, state_dir: &Path, jobs: &str) -> PathBuf {
    let list = if jobs.is_empty() { " []\n" } else { "\n" };
    let text = format!(
        "settings:\n  state_dir: {}\njobs:{list}{jobs}",
        state_dir.display()
    );
    fs::write(path, text).expect("write the jobs file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod 0644");
    path.to_path_buf()
}

/// One run of the binary: exit code, output, and how long it took.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

fn mihari(config: &Path, args: &[&str]) -> Run {
    let started = Instant::now();
    let output = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mihari");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// The job `id` in a `check --json` report.
fn job<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["id"] == id))
        .unwrap_or_else(|| panic!("no job '{id}' in {report:#}"))
}

/// A progress table job without a lock: it is RUNNING while its newest row is fresh.
fn table_job(id: &str, db: &Path) -> String {
    format!(
        "  - id: {id}\n    progress_table:\n      db: {}\n      table: progress\n      \
         time_column: updated_at\n    stall_sec: 3600\n    expected_total: 1000000\n    \
         should_run_when: [not_complete]\n",
        db.display()
    )
}

/// A database with a `progress` table holding `rows` rows written now.
fn progress_db(path: &Path, wal: bool, rows: usize) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("open the job's database");
    if wal {
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .expect("WAL");
        assert_eq!(mode, "wal");
    }
    conn.execute_batch("CREATE TABLE progress (item INTEGER, updated_at TEXT)")
        .expect("create the table");
    for item in 0..rows {
        insert_row(&conn, item);
    }
    conn
}

fn insert_row(conn: &rusqlite::Connection, item: usize) {
    conn.execute(
        "INSERT INTO progress VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        [item as i64],
    )
    .expect("insert a progress row");
}

/// Asserts the job's table is a fault that says the database is locked (or busy), and that it
/// was not taken for "no progress".
fn assert_locked_fault(report: &Value, id: &str) {
    let row = job(report, id);
    let reasons = row["reasons"].to_string().to_lowercase();
    assert!(reasons.contains("progress_table: fault"), "{row:#}");
    assert!(
        reasons.contains("locked") || reasons.contains("busy"),
        "{row:#}"
    );
    assert_eq!(
        row["done"],
        Value::Null,
        "a fault is never zero done: {row:#}"
    );
    assert_eq!(row["state"], "UNKNOWN", "never SHOULD_BE_RUNNING: {row:#}");
}

/// A sparse file of `len` bytes of holes followed by `lines`.
fn sparse_file(path: &Path, len: u64, lines: &str) {
    let file = File::create(path).expect("create");
    file.set_len(len).expect("set_len");
    file.write_all_at(lines.as_bytes(), len)
        .expect("write the lines at the end");
}

fn numbered_lines(prefix: &str, n: usize) -> String {
    (0..n).map(|i| format!("{prefix} {i}\n")).collect()
}

/// A filesystem mounted read-only at a folder, unmounted when dropped.
struct ReadOnlyMount {
    at: PathBuf,
}

impl ReadOnlyMount {
    /// Mounts a tmpfs (mode 0755) at `at`, lets `fill` write into it, then remounts it
    /// read-only. Where tmpfs cannot be mounted, `fill` writes into `at` itself, which is then
    /// bind-mounted onto itself read-only. `Err` says why neither was possible.
    fn new(at: &Path, fill: impl FnOnce(&Path)) -> Result<ReadOnlyMount, String> {
        fs::create_dir_all(at).map_err(|e| format!("mkdir {}: {e}", at.display()))?;
        let guard = || ReadOnlyMount {
            at: at.to_path_buf(),
        };
        match mount(&["-t", "tmpfs", "-o", "mode=0755,size=16m", "none"], at) {
            Ok(()) => {
                let mounted = guard();
                fill(at);
                mount(&["-o", "remount,ro"], at)?;
                Ok(mounted)
            }
            Err(tmpfs) => {
                fill(at);
                mount(&["--bind", &at.display().to_string()], at)
                    .map_err(|bind| format!("{tmpfs}; {bind}"))?;
                let mounted = guard();
                mount(&["-o", "remount,bind,ro"], at)?;
                Ok(mounted)
            }
        }
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}

fn mount(args: &[&str], at: &Path) -> Result<(), String> {
    let output = Command::new("mount")
        .args(args)
        .arg(at)
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mount {} {}: {}",
            args.join(" "),
            at.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Waits at most `limit` for `child` to exit; kills it and panics if it does not.
fn exit_within(mut child: std::process::Child, limit: Duration) -> (i32, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the watcher") {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read;
                let _ = pipe.read_to_string(&mut stderr);
            }
            return (status.code().unwrap_or(-1), stderr);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}: it must stop at startup");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// A progress table locked by a writer

#[test]
fn a_rollback_journal_table_under_begin_exclusive_is_a_locked_fault_within_the_busy_timeout() {
    let s = Sandbox::new();
    let db = s.path("progress.sqlite");
    let writer = progress_db(&db, false, 3);
    let config = s.jobs_file(&s.path("state"), &table_job("table", &db));

    // Another connection takes the exclusive lock and keeps it for the whole test.
    writer
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("BEGIN EXCLUSIVE");
    insert_row(&writer, 99);

    let run = mihari(&config, &["check", "--json"]);
    eprintln!("check over a table under BEGIN EXCLUSIVE: {:?}", run.took);
    assert!(
        run.took < LOCKED_CHECK_BOUND,
        "check took {:?} on a locked database",
        run.took
    );
    assert!(matches!(run.code, 1 | 2), "{}", run.stderr);
    assert_locked_fault(&run.json(), "table");

    // Once the writer lets go, the same table reads again.
    writer.execute_batch("COMMIT").expect("COMMIT");
    let run = mihari(&config, &["check", "--json"]);
    let row = job(&run.json(), "table").clone();
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["done"], 4, "{row:#}");
}

#[test]
fn a_wal_table_with_a_long_write_and_a_checkpoint_blocking_reader_still_reads_at_once() {
    let s = Sandbox::new();
    let db = s.path("progress.sqlite");
    let writer = progress_db(&db, true, 2);
    let config = s.jobs_file(&s.path("state"), &table_job("table", &db));

    // A long write transaction, not committed ...
    writer
        .execute_batch("BEGIN IMMEDIATE")
        .expect("BEGIN IMMEDIATE");
    for item in 2..500 {
        insert_row(&writer, item);
    }
    // ... and a reader holding an old snapshot, so no checkpoint can complete.
    let reader = rusqlite::Connection::open(&db).expect("reader");
    reader.execute_batch("BEGIN").expect("BEGIN");
    let seen: i64 = reader
        .query_row("SELECT count(*) FROM progress", [], |row| row.get(0))
        .expect("read");
    assert_eq!(seen, 2);

    let run = mihari(&config, &["check", "--json"]);
    eprintln!("check over a WAL table with a long write: {:?}", run.took);
    assert!(run.took < LOCKED_CHECK_BOUND, "check took {:?}", run.took);
    let row = job(&run.json(), "table").clone();
    // WAL readers never wait: the committed rows are read, the open write is not.
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["done"], 2, "{row:#}");
    assert_eq!(row["progress_source"], "progress_table", "{row:#}");
    drop(reader);
    writer.execute_batch("ROLLBACK").expect("ROLLBACK");
}

#[test]
fn a_wal_table_held_in_exclusive_locking_mode_is_a_locked_fault_within_the_busy_timeout() {
    let s = Sandbox::new();
    let db = s.path("progress.sqlite");
    let writer = progress_db(&db, true, 2);
    let config = s.jobs_file(&s.path("state"), &table_job("table", &db));

    // In exclusive locking mode the first write takes the lock and never gives it back: this
    // is what does block WAL readers.
    writer
        .execute_batch("PRAGMA locking_mode=EXCLUSIVE; BEGIN IMMEDIATE;")
        .expect("exclusive locking mode");
    insert_row(&writer, 2);
    writer.execute_batch("COMMIT").expect("COMMIT");

    let run = mihari(&config, &["check", "--json"]);
    eprintln!(
        "check over a WAL table in exclusive locking mode: {:?}",
        run.took
    );
    assert!(run.took < LOCKED_CHECK_BOUND, "check took {:?}", run.took);
    assert_locked_fault(&run.json(), "table");
}

#[test]
fn refreshing_a_job_whose_table_is_locked_returns_within_a_second_in_engine_and_live() {
    let s = Sandbox::new();
    let db = s.path("progress.sqlite");
    let writer = progress_db(&db, false, 3);
    let jobs = format!(
        "{}  - id: other\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n",
        table_job("table", &db),
        s.path("other.lock").display(),
        s.write("other.log", "fine\n").display()
    );
    let config = mihari::config::load(&s.jobs_file(&s.path("state"), &jobs)).expect("load");
    writer
        .execute_batch("BEGIN EXCLUSIVE")
        .expect("BEGIN EXCLUSIVE");

    // The engine: a first gather of everything, then the locked job alone.
    let mut engine = Engine::new(config.clone());
    let started = Instant::now();
    let snapshot = engine.refresh(None, Utc::now());
    let first = started.elapsed();
    let only: HashSet<String> = ["table".to_string()].into();
    let started = Instant::now();
    let snapshot_again = engine.refresh(Some(&only), Utc::now());
    let again = started.elapsed();
    eprintln!("Engine::refresh with a locked table: first {first:?}, that job {again:?}");
    assert!(
        first < Duration::from_secs(1),
        "first gather took {first:?}"
    );
    assert!(
        again < Duration::from_secs(1),
        "refreshing the job took {again:?}"
    );
    for snapshot in [&snapshot, &snapshot_again] {
        match snapshot
            .evidence_of("table")
            .and_then(|e| e.progress_table.as_ref())
        {
            Some(Reading::Fault(error)) => assert!(error.contains("locked"), "{error}"),
            other => panic!("expected a locked fault, got {other:?}"),
        }
    }

    // The live loop's bookkeeping: a change to the database wakes a gather of that job.
    let mut live = Live::new(config, Arc::new(|_| {})).expect("live");
    let started = Instant::now();
    live.start(Utc::now());
    let start = started.elapsed();
    let mut arrivals = Arrivals::default();
    live.note(&mut arrivals, Trigger::Changed(db.clone()));
    let started = Instant::now();
    let snapshot = live
        .apply(arrivals, false, Utc::now())
        .expect("a changed database calls for a snapshot");
    let applied = started.elapsed();
    eprintln!("Live with a locked table: start {start:?}, a change to it {applied:?}");
    assert!(start < Duration::from_secs(1), "start took {start:?}");
    assert!(
        applied < Duration::from_secs(1),
        "the change took {applied:?}"
    );
    let row = snapshot.assessment_of("table").expect("the table job");
    assert_eq!(row.state.as_str(), "UNKNOWN");
    writer.execute_batch("ROLLBACK").expect("ROLLBACK");
}

// ---------------------------------------------------------------------------------------------
// Huge files

#[test]
fn a_10_gib_sparse_log_is_tailed_from_its_end_and_only_stat_ed_by_check() {
    let s = Sandbox::new();
    let log = s.path("huge.log");
    sparse_file(&log, 10 * GIB, &numbered_lines("epoch", 300));

    let started = Instant::now();
    let (reading, bytes_read) = tail_lines_counted(&log, 200);
    let took = started.elapsed();
    eprintln!("tail of 200 lines of a 10 GiB log: {took:?}, {bytes_read} bytes read");
    let Reading::Found(lines) = reading else {
        panic!("expected lines, got {reading:?}");
    };
    assert_eq!(lines.len(), 200);
    assert_eq!(lines[0], "epoch 100");
    assert_eq!(lines[199], "epoch 299");
    // 200 short lines sit in the last few KiB: that is all that may be read, and never more
    // than the read budget.
    let text_bytes = numbered_lines("epoch", 300).len() as u64;
    assert!(
        bytes_read <= text_bytes.max(8192) + 8192,
        "read {bytes_read}"
    );
    assert!(bytes_read <= MAX_READ_BYTES);

    let config = s.jobs_file(
        &s.path("state"),
        &format!(
            "  - id: huge\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n",
            s.path("huge.lock").display(),
            log.display()
        ),
    );
    let run = mihari(&config, &["check", "--json"]);
    eprintln!("check over a job with a 10 GiB log: {:?}", run.took);
    assert!(
        run.took < Duration::from_secs(5),
        "check took {:?}",
        run.took
    );
    let row = job(&run.json(), "huge").clone();
    assert_eq!(row["progress_source"], "log", "{row:#}");
}

/// A 10 GiB progress file is counted in full the first time (holes hold no newlines, but
/// they must still be read), then incrementally. Ignored by default: on a 2-core VM the first
/// count reads 10 GiB of holes in about 25 s with a cold page cache (about 1.5 s warm, as
/// `wc -l` does) and fills the page cache with zero pages.
#[test]
#[ignore = "reads 10 GiB of holes; run with --ignored to measure it"]
fn a_10_gib_sparse_progress_file_is_counted_once_in_full() {
    let s = Sandbox::new();
    let progress = s.path("huge.progress");
    sparse_file(&progress, 10 * GIB, &numbered_lines("{\"item\":", 300));
    let config = s.jobs_file(
        &s.path("state"),
        &format!(
            "  - id: huge\n    progress_file: {}\n    expected_total: 1000\n    \
             should_run_when: [not_complete]\n",
            progress.display()
        ),
    );
    let run = mihari(&config, &["check", "--json"]);
    eprintln!(
        "check over a job with a 10 GiB sparse progress file: {:?}",
        run.took
    );
    let row = job(&run.json(), "huge").clone();
    assert_eq!(row["done"], 300, "{row:#}");
    assert!(
        run.took < Duration::from_secs(300),
        "check took {:?}",
        run.took
    );
}

// ---------------------------------------------------------------------------------------------
// Locks that name PID 1

#[test]
fn locks_naming_pid_1_are_judged_sanely_and_never_released_or_restarted_while_alive() {
    let s = Sandbox::new();
    let Some(ticks) = mihari::probe::proc::start_ticks(1) else {
        eprintln!("skipped: PID 1 is not visible here");
        return;
    };
    s.write("bare.lock", "1\n");
    s.write(
        "wrong.lock",
        &format!("{{\"pid\":1,\"start_time\":{}}}", ticks + 7),
    );
    s.write(
        "real.lock",
        &format!("{{\"pid\":1,\"start_time\":{ticks}}}"),
    );
    let mut jobs = String::new();
    for id in ["bare", "wrong", "real"] {
        // Were anything ever spawned, it would only leave a marker behind.
        jobs.push_str(&format!(
            "  - id: {id}\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n    \
             restart:\n      command: [\"touch\", \"{}\"]\n",
            s.path(&format!("{id}.lock")).display(),
            s.path(&format!("{id}.log")).display(),
            s.path(&format!("{id}.spawned")).display(),
        ));
    }
    let config = s.jobs_file(&s.path("state"), &jobs);

    let run = mihari(&config, &["check", "--json"]);
    assert!(matches!(run.code, 0..=2), "{}", run.stderr);
    let report = run.json();
    let bare = job(&report, "bare");
    assert!(
        matches!(bare["liveness"].as_str(), Some("alive" | "unknown")),
        "{bare:#}"
    );
    assert_eq!(job(&report, "wrong")["liveness"], "dead");
    assert_eq!(job(&report, "wrong")["state"], "DEAD_LOCK_STALE");
    assert_eq!(job(&report, "real")["liveness"], "alive");
    assert_ne!(job(&report, "real")["state"], "DEAD_LOCK_STALE");

    for id in ["bare", "real"] {
        let release = mihari(&config, &["release", id, "--yes"]);
        assert_eq!(release.code, 1, "release {id}: {}", release.stdout);
        assert!(release.stdout.contains("refused"), "{}", release.stdout);
        assert!(
            s.path(&format!("{id}.lock")).exists(),
            "{id}'s lock was removed"
        );

        let restart = mihari(&config, &["restart", id, "--yes"]);
        assert_eq!(restart.code, 1, "restart {id}: {}", restart.stdout);
        assert!(restart.stdout.contains("refused"), "{}", restart.stdout);
        assert!(
            !s.path(&format!("{id}.spawned")).exists(),
            "{id} was spawned"
        );
    }
    // PID 1 itself is untouched, whatever was decided about its locks.
    assert_eq!(mihari::probe::proc::start_ticks(1), Some(ticks));
}

// ---------------------------------------------------------------------------------------------
// Read-only filesystems and state folders that cannot be written

#[test]
fn a_jobs_file_on_a_read_only_filesystem_loads() {
    let s = Sandbox::new();
    let log = s.write("job.log", "fine\n");
    let lock = s.path("job.lock");
    let at = s.path("ro");
    let state = s.path("state");
    let mounted = ReadOnlyMount::new(&at, |dir| {
        write_jobs_file(
            &dir.join("jobs.yaml"),
            &state,
            &format!(
                "  - id: job\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n",
                lock.display(),
                log.display()
            ),
        );
    });
    let _mounted = match mounted {
        Ok(mounted) => mounted,
        Err(why) => {
            eprintln!("skipped: cannot mount a read-only filesystem here: {why}");
            return;
        }
    };
    assert!(
        fs::write(at.join("probe"), "x").is_err(),
        "the mount is writable"
    );
    let run = mihari(&at.join("jobs.yaml"), &["check"]);
    assert!(matches!(run.code, 0..=2), "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("job"), "{}", run.stdout);
}

/// What a state folder that cannot be written does to `watch`, `check` and `restart`.
fn assert_state_dir_unusable(s: &Sandbox, state: &Path, name_in_message: &str) {
    let config = s.jobs_file(
        state,
        &format!(
            "  - id: job\n    lock: {}\n    log: {}\n    should_run_when: [resource_free]\n    \
             restart:\n      command: [\"touch\", \"{}\"]\n",
            s.path("job.lock").display(),
            s.path("job.log").display(),
            s.path("job.spawned").display()
        ),
    );
    let what = state.display();

    // The watcher stops at startup, naming the folder and what to do.
    let watcher = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("watch")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the watcher");
    let (code, stderr) = exit_within(watcher, Duration::from_secs(20));
    assert_eq!(code, 3, "{what}: {stderr}");
    assert!(stderr.contains(name_in_message), "{what}: {stderr}");
    assert!(stderr.contains("settings.state_dir"), "{what}: {stderr}");

    // check still assesses, and says the store is unavailable: a notice when there is no
    // store to read, UNKNOWN when one exists and cannot be read (what it holds is not known).
    let run = mihari(&config, &["check"]);
    if state.join("mihari.sqlite").exists() {
        assert_eq!(run.code, 3, "{what}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stdout
                .contains("UNKNOWN: the state store cannot be used"),
            "{what}: {}",
            run.stdout
        );
    } else {
        assert!(
            matches!(run.code, 0..=2),
            "{what}: {}{}",
            run.stdout,
            run.stderr
        );
        assert!(
            run.stdout.contains("notice: state store") && run.stdout.contains("unavailable"),
            "{what}: {}",
            run.stdout
        );
    }
    assert!(
        run.stdout.contains(name_in_message),
        "{what}: {}",
        run.stdout
    );
    assert!(
        run.stdout.contains("SHOULD_BE_RUNNING"),
        "{what}: {}",
        run.stdout
    );

    // restart cannot record its decision, so it does nothing, and says so: a bad store is
    // exit 3, naming the folder.
    let restart = mihari(&config, &["restart", "job", "--yes"]);
    assert_eq!(
        restart.code, 3,
        "{what}: {}{}",
        restart.stdout, restart.stderr
    );
    assert!(
        restart.stderr.contains("state folder") || restart.stderr.contains("state_dir"),
        "{what}: {}",
        restart.stderr
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !s.path("job.spawned").exists(),
        "{what}: something was spawned"
    );
}

#[test]
fn a_state_dir_under_a_regular_file_stops_the_watcher_but_not_check() {
    let s = Sandbox::new();
    s.write("file", "not a folder\n");
    let state = s.path("file/state");
    assert_state_dir_unusable(&s, &state, &state.display().to_string());
}

#[test]
fn a_state_dir_under_proc_stops_the_watcher_but_not_check() {
    let s = Sandbox::new();
    let state = PathBuf::from(format!("/proc/mihari-neighbours-{}", std::process::id()));
    assert_state_dir_unusable(&s, &state, &state.display().to_string());
}

#[test]
fn a_state_dir_on_a_read_only_filesystem_stops_the_watcher_but_not_check() {
    let s = Sandbox::new();
    let at = s.path("ro");
    let config_for_setup = s.path("setup.yaml");
    let mounted = ReadOnlyMount::new(&at, |dir| {
        // One state folder that does not exist yet, and one whose store was made before the
        // filesystem went read-only (an earlier watcher's).
        let kept = dir.join("kept");
        write_jobs_file(&config_for_setup, &kept, "");
        let made = mihari(&config_for_setup, &["check"]);
        assert_eq!(made.code, 0, "{}", made.stderr);
        assert!(kept.join("mihari.sqlite").exists());
    });
    let _mounted = match mounted {
        Ok(mounted) => mounted,
        Err(why) => {
            eprintln!("skipped: cannot mount a read-only filesystem here: {why}");
            return;
        }
    };
    let missing = at.join("missing");
    assert_state_dir_unusable(&s, &missing, &missing.display().to_string());
    let kept = at.join("kept");
    assert_state_dir_unusable(&s, &kept, &kept.display().to_string());
}

//! Times in real SQLite progress tables, written by the real `sqlite3` and read by the real
//! binary (SPEC §3: the progress_table row and the Times paragraph).
//!
//! - Naive local text written under `TZ=Asia/Tokyo` (SQLite's `datetime('now', 'localtime')`,
//!   what Python's `datetime.now()` writes too) is read in the machine's zone: fresh when
//!   mihari runs with `TZ=Asia/Tokyo`, and 9 h in the future — a fault, never age 0 — when it
//!   runs with `TZ=UTC`. A frozen writer of such text used to look fresh forever.
//! - Numbers in milliseconds and microseconds, read with `time_unit`.
//! - A status row updated in place: done and total from the newest row, not count(*), and the
//!   total stands in for `expected_total`.
//! - A table that keeps being written while its newest time is frozen stays STALLED.
//!
//! `TZ` is set for the processes the tests start, never for the test process itself.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use serde_json::Value;

const SQLITE3: &str = "/usr/bin/sqlite3";
const TOKYO: &str = "/usr/share/zoneinfo/Asia/Tokyo";

/// A `sleep` that holds the jobs' locks; killed and reaped when dropped.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Sandbox {
    _dir: tempfile::TempDir,
    root: PathBuf,
    jobs: Vec<String>,
    holder: Option<Holder>,
}

impl Sandbox {
    fn new() -> Sandbox {
        assert!(
            Path::new(SQLITE3).exists(),
            "{SQLITE3} is missing: install the Debian package 'sqlite3' (the CI installs it)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        for folder in ["run", "state"] {
            fs::create_dir(root.join(folder)).expect("folder");
        }
        Sandbox {
            _dir: dir,
            root,
            jobs: Vec::new(),
            holder: None,
        }
    }

    /// Runs `sql` with the real sqlite3 on `db`, with `TZ` set for sqlite3 alone.
    fn sqlite3(&self, db: &str, tz: &str, sql: &str) -> String {
        let output = Command::new(SQLITE3)
            .arg(self.root.join(db))
            .arg(sql)
            .env("TZ", tz)
            .output()
            .expect("sqlite3 runs");
        assert!(
            output.status.success(),
            "sqlite3 failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// A live holder of `run/ID.lock` for each job that asks for one, started `age` ago.
    fn hold(&mut self, age: Duration) {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep runs");
        self.holder = Some(Holder(child));
        thread::sleep(age);
    }

    fn lock_json(&self) -> String {
        let pid = self.holder.as_ref().expect("a holder").0.id();
        let ticks = mihari::probe::proc::start_ticks(pid).expect("the holder's start ticks");
        format!("{{\"pid\":{pid},\"start_time\":{ticks}}}")
    }

    /// Adds a job reading `table` in `db`; `extra` is more of its keys (YAML lines, indented
    /// four spaces); `held` writes its lock for the holder.
    fn job(&mut self, id: &str, db: &str, table: &str, extra: &str, held: bool) {
        if held {
            fs::write(self.root.join(format!("run/{id}.lock")), self.lock_json()).expect("lock");
        }
        self.jobs.push(format!(
            "  - id: {id}\n    lock: run/{id}.lock\n    progress_table:\n      db: {db}\n      \
             table: {table}\n{extra}"
        ));
    }

    fn check(&self, tz: &str) -> Value {
        let path = self.root.join("jobs.yaml");
        fs::write(
            &path,
            format!(
                "settings:\n  state_dir: state\njobs:\n{}",
                self.jobs.join("")
            ),
        )
        .expect("jobs file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(&path)
            .args(["check", "--json"])
            .env("TZ", tz)
            .stdin(Stdio::null())
            .output()
            .expect("mihari check runs");
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json printed no JSON ({e}), exit {:?}: {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            )
        })
    }
}

fn row<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["id"] == id))
        .unwrap_or_else(|| panic!("no row for '{id}' in {report:#}"))
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

fn age(row: &Value) -> f64 {
    row["progress_age_sec"].as_f64().unwrap_or(f64::NAN)
}

#[test]
fn naive_local_text_written_in_tokyo_is_read_in_the_machines_zone() {
    assert!(
        Path::new(TOKYO).exists(),
        "{TOKYO} is missing: install the Debian package 'tzdata'"
    );
    let mut sandbox = Sandbox::new();
    let table = "CREATE TABLE progress (item INTEGER PRIMARY KEY, updated_at TEXT);";
    sandbox.sqlite3(
        "fresh.sqlite",
        "Asia/Tokyo",
        &format!(
            "{table} INSERT INTO progress (updated_at) VALUES (datetime('now', 'localtime'));"
        ),
    );
    sandbox.sqlite3(
        "frozen.sqlite",
        "Asia/Tokyo",
        &format!(
            "{table} INSERT INTO progress (updated_at) VALUES \
             (datetime('now', '-10 minutes', 'localtime'));"
        ),
    );
    // The writer wrote naive local text: nine hours ahead of SQLite's own UTC.
    let ahead = sandbox.sqlite3(
        "fresh.sqlite",
        "UTC",
        "SELECT round((julianday(max(updated_at)) - julianday('now')) * 24) FROM progress;",
    );
    assert_eq!(ahead, "9.0", "the text is Tokyo's wall clock");

    // Older than stall_sec 2: an age taken from the holder's start would be a stall.
    sandbox.hold(Duration::from_millis(2500));
    let keys = "      time_column: updated_at\n    should_run_when: [resource_free]\n";
    sandbox.job(
        "fresh",
        "fresh.sqlite",
        "progress",
        &format!("{keys}    stall_sec: 300\n"),
        true,
    );
    sandbox.job(
        "frozen",
        "frozen.sqlite",
        "progress",
        &format!("{keys}    stall_sec: 300\n"),
        true,
    );
    sandbox.job(
        "frozen_short",
        "frozen.sqlite",
        "progress",
        &format!("{keys}    stall_sec: 2\n"),
        true,
    );

    let tokyo = sandbox.check("Asia/Tokyo");
    let fresh = row(&tokyo, "fresh");
    assert_eq!(fresh["state"], "RUNNING", "{}", reasons(fresh));
    assert_eq!(
        fresh["progress_source"],
        "progress_table",
        "{}",
        reasons(fresh)
    );
    assert!(
        age(fresh) < 600.0,
        "read in Tokyo, it is fresh: {}",
        reasons(fresh)
    );
    let frozen = row(&tokyo, "frozen");
    assert_eq!(
        frozen["state"],
        "STALLED",
        "a writer frozen 10 min ago: {}",
        reasons(frozen)
    );
    assert!(
        (590.0..3600.0).contains(&age(frozen)),
        "{}",
        reasons(frozen)
    );

    let utc = sandbox.check("UTC");
    let fresh = row(&utc, "fresh");
    assert!(
        reasons(fresh).contains("progress_table: fault:")
            && reasons(fresh).contains("in the future by 9 h 00 min: clock or time zone?"),
        "{}",
        reasons(fresh)
    );
    assert_ne!(
        fresh["progress_source"],
        "progress_table",
        "{}",
        reasons(fresh)
    );
    let frozen = row(&utc, "frozen_short");
    assert_eq!(
        frozen["state"],
        "UNKNOWN",
        "a fault makes the stall undecidable, and is never fresh: {}",
        reasons(frozen)
    );
    assert!(
        reasons(frozen).contains("in the future by 8 h 50 min"),
        "{}",
        reasons(frozen)
    );
}

#[test]
fn milliseconds_and_microseconds_are_read_in_time_unit() {
    let mut sandbox = Sandbox::new();
    sandbox.sqlite3(
        "events.sqlite",
        "UTC",
        "CREATE TABLE events (id INTEGER PRIMARY KEY, at_ms INTEGER, at_us INTEGER); \
         INSERT INTO events (at_ms, at_us) VALUES \
         (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), \
          CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER));",
    );
    sandbox.hold(Duration::ZERO);
    let keys = "    stall_sec: 300\n    should_run_when: [resource_free]\n";
    sandbox.job(
        "ms",
        "events.sqlite",
        "events",
        &format!("      time_column: at_ms\n      time_unit: ms\n{keys}"),
        true,
    );
    sandbox.job(
        "us",
        "events.sqlite",
        "events",
        &format!("      time_column: at_us\n      time_unit: us\n{keys}"),
        true,
    );
    sandbox.job(
        "ms_as_seconds",
        "events.sqlite",
        "events",
        &format!("      time_column: at_ms\n{keys}"),
        true,
    );
    let report = sandbox.check("UTC");
    for id in ["ms", "us"] {
        let row = row(&report, id);
        assert_eq!(row["state"], "RUNNING", "{id}: {}", reasons(row));
        assert_eq!(
            row["progress_source"],
            "progress_table",
            "{id}: {}",
            reasons(row)
        );
        assert!(age(row) < 600.0, "{id}: {}", reasons(row));
    }
    let wrong = row(&report, "ms_as_seconds");
    assert!(
        reasons(wrong).contains("set progress_table.time_unit to 'ms' or 'us'"),
        "{}",
        reasons(wrong)
    );
}

#[test]
fn a_status_row_updated_in_place_gives_done_and_total_from_the_newest_row() {
    let mut sandbox = Sandbox::new();
    // One row updated in place, and an older row of an earlier run with larger numbers.
    sandbox.sqlite3(
        "status.sqlite",
        "UTC",
        "CREATE TABLE status (id INTEGER PRIMARY KEY, done INTEGER, total INTEGER, \
         updated_at INTEGER); \
         INSERT INTO status VALUES (1, 0, 260, strftime('%s', 'now')); \
         INSERT INTO status VALUES (2, 999, 999, strftime('%s', 'now') - 3600);",
    );
    for done in [12, 40, 59] {
        sandbox.sqlite3(
            "status.sqlite",
            "UTC",
            &format!(
                "UPDATE status SET done = {done}, updated_at = strftime('%s', 'now') WHERE id = 1;"
            ),
        );
    }
    // Not holding: its lock does not exist. No expected_total: the table's total is it.
    sandbox.job(
        "labels",
        "status.sqlite",
        "status",
        "      time_column: updated_at\n      done_column: done\n      total_column: total\n    \
         should_run_when: [not_complete]\n",
        false,
    );
    let report = sandbox.check("UTC");
    let labels = row(&report, "labels");
    assert_eq!(
        (labels["done"].as_u64(), labels["expected_total"].as_u64()),
        (Some(59), Some(260))
    );
    assert_eq!(labels["state"], "SHOULD_BE_RUNNING", "{}", reasons(labels));
    assert!(
        reasons(labels).contains("59 of 260 done"),
        "{}",
        reasons(labels)
    );

    sandbox.sqlite3(
        "status.sqlite",
        "UTC",
        "UPDATE status SET done = 260, updated_at = strftime('%s', 'now') WHERE id = 1;",
    );
    let report = sandbox.check("UTC");
    let labels = row(&report, "labels");
    assert_eq!(labels["state"], "COMPLETE", "{}", reasons(labels));
    assert!(
        reasons(labels).contains("complete: 260 of 260 done"),
        "{}",
        reasons(labels)
    );
}

#[test]
fn a_table_written_on_while_its_newest_time_is_frozen_stays_stalled() {
    let mut sandbox = Sandbox::new();
    let insert = "INSERT INTO items (fetched_at) VALUES (strftime('%s', 'now') - 600), \
                  (strftime('%s', 'now') - 600), (strftime('%s', 'now') - 600);";
    sandbox.sqlite3(
        "items.sqlite",
        "UTC",
        &format!("CREATE TABLE items (id INTEGER PRIMARY KEY, fetched_at INTEGER); {insert}"),
    );
    sandbox.hold(Duration::ZERO);
    sandbox.job(
        "fetch",
        "items.sqlite",
        "items",
        "      time_column: fetched_at\n    stall_sec: 300\n    expected_total: 1000\n    \
         should_run_when: [not_complete]\n",
        true,
    );
    for (round, done) in [(1, 3), (2, 6)] {
        let report = sandbox.check("UTC");
        let fetch = row(&report, "fetch");
        assert_eq!(
            fetch["state"],
            "STALLED",
            "round {round}: {}",
            reasons(fetch)
        );
        assert_eq!(fetch["done"].as_u64(), Some(done), "{}", reasons(fetch));
        assert!(age(fetch) >= 590.0, "{}", reasons(fetch));
        // The file changes and rows are added, but the newest time does not move.
        sandbox.sqlite3("items.sqlite", "UTC", insert);
    }
}

#[test]
fn a_table_3_hours_in_the_future_is_unknown_never_aged_from_the_holders_start() {
    let mut sandbox = Sandbox::new();
    sandbox.sqlite3(
        "ahead.sqlite",
        "UTC",
        "CREATE TABLE progress (id INTEGER PRIMARY KEY, updated_at INTEGER); \
         INSERT INTO progress (updated_at) VALUES (strftime('%s', 'now') + 3 * 3600);",
    );
    // A live holder that started a moment ago: aged from its start, the job looked fresh
    // ("progress 1 s ago (holder_start)") while its only progress source was a fault.
    sandbox.hold(Duration::from_millis(1000));
    sandbox.job(
        "ahead",
        "ahead.sqlite",
        "progress",
        "      time_column: updated_at\n    should_run_when: [resource_free]\n",
        true,
    );
    let report = sandbox.check("UTC");
    let ahead = row(&report, "ahead");
    assert_eq!(ahead["state"], "UNKNOWN", "{}", reasons(ahead));
    assert_eq!(ahead["bucket"], "STALE", "{}", reasons(ahead));
    assert_eq!(ahead["liveness"], "alive", "{}", reasons(ahead));
    assert_eq!(ahead["progress_age_sec"], Value::Null, "{}", reasons(ahead));
    assert_eq!(ahead["progress_source"], Value::Null, "{}", reasons(ahead));
    assert!(
        reasons(ahead).contains("its progress age is not known"),
        "{}",
        reasons(ahead)
    );
    assert!(
        reasons(ahead).contains("progress_table: fault:")
            && reasons(ahead).contains("in the future by 3 h 00 min"),
        "the fault is named: {}",
        reasons(ahead)
    );
    assert!(
        !reasons(ahead).contains("holder_start"),
        "{}",
        reasons(ahead)
    );
}

#[test]
fn a_status_table_at_30_of_30_with_no_holder_declared_is_complete_not_running() {
    let mut sandbox = Sandbox::new();
    for (db, done) in [("done.sqlite", 30), ("part.sqlite", 10)] {
        sandbox.sqlite3(
            db,
            "UTC",
            &format!(
                "CREATE TABLE status (id INTEGER PRIMARY KEY, updated_at INTEGER, done INTEGER, \
                 total INTEGER); INSERT INTO status (updated_at, done, total) VALUES \
                 (strftime('%s', 'now') - 5, {done}, 30);"
            ),
        );
    }
    // No lock, no process: fresh progress counts as running only while it is not complete.
    for (id, db) in [("finished", "done.sqlite"), ("going", "part.sqlite")] {
        sandbox.jobs.push(format!(
            "  - id: {id}\n    progress_table:\n      db: {db}\n      table: status\n      \
             time_column: updated_at\n      done_column: done\n      total_column: total\n    \
             should_run_when: [not_complete]\n"
        ));
    }
    let report = sandbox.check("UTC");
    let finished = row(&report, "finished");
    assert_eq!(finished["state"], "COMPLETE", "{}", reasons(finished));
    assert_eq!(finished["bucket"], Value::Null, "{}", reasons(finished));
    assert!(
        reasons(finished).contains("complete: 30 of 30 done"),
        "{}",
        reasons(finished)
    );
    let going = row(&report, "going");
    assert_eq!(going["state"], "RUNNING", "{}", reasons(going));
    assert!(
        reasons(going).contains("no lock declared"),
        "{}",
        reasons(going)
    );
}

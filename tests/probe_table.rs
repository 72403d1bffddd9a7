//! `probe::table::read_progress_table` on real SQLite databases made in the test: every time
//! representation a job might use, the empty and missing cases, the faults, and a WAL database
//! with a writer working on it at the same time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use mihari::config::{ProgressTable, TimeZoneName};
use mihari::core::{Reading, TableReading};
use mihari::probe::table::read_progress_table;
use rusqlite::Connection;

fn spec(db: &Path, table: &str, column: &str) -> ProgressTable {
    ProgressTable::new(db, table, column)
}

/// A table whose naive text is UTC, as SQLite's own `datetime('now')` writes it: the default
/// zone is the machine's, which these tests must not depend on.
fn utc_spec(db: &Path) -> ProgressTable {
    ProgressTable {
        time_zone: TimeZoneName::Utc,
        ..spec(db, "progress", "done_at")
    }
}

fn noon() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
        .single()
        .expect("valid")
}

/// A database with table `progress(item, done_at)` holding `values` as `done_at`.
fn db_with(
    dir: &Path,
    name: &str,
    column_type: &str,
    values: &[rusqlite::types::Value],
) -> PathBuf {
    let path = dir.join(name);
    let conn = Connection::open(&path).expect("create db");
    conn.execute_batch(&format!(
        "CREATE TABLE progress (item INTEGER PRIMARY KEY, done_at {column_type});"
    ))
    .expect("create table");
    for value in values {
        conn.execute("INSERT INTO progress (done_at) VALUES (?1)", [value])
            .expect("insert");
    }
    path
}

fn found(reading: Reading<TableReading>) -> TableReading {
    match reading {
        Reading::Found(reading) => reading,
        other => panic!("expected a reading, got {other:?}"),
    }
}

#[test]
fn every_time_representation_reads_as_utc() {
    use rusqlite::types::Value::{Integer, Real, Text};
    let dir = tempfile::tempdir().expect("tempdir");
    let ms = chrono::TimeDelta::milliseconds;
    let rows: Vec<(&str, &str, Vec<rusqlite::types::Value>, DateTime<Utc>)> = vec![
        (
            "unix seconds",
            "INTEGER",
            vec![Integer(1_714_564_000), Integer(1_714_564_800), Integer(5)],
            noon(),
        ),
        (
            "real seconds with a fraction",
            "REAL",
            vec![Real(1_714_564_800.25), Real(1_714_564_000.0)],
            noon() + ms(250),
        ),
        (
            "ISO text with an offset",
            "TEXT",
            vec![
                Text("2024-05-01T21:00:00+09:00".into()),
                Text("2024-05-01T20:00:00+09:00".into()),
            ],
            noon(),
        ),
        (
            "ISO text with Z and fractions",
            "TEXT",
            vec![Text("2024-05-01T12:00:00.500Z".into())],
            noon() + ms(500),
        ),
        (
            "naive text from datetime('now') is UTC",
            "TEXT",
            vec![
                Text("2024-05-01 11:59:59".into()),
                Text("2024-05-01 12:00:00".into()),
            ],
            noon(),
        ),
        (
            "naive text with a T and microseconds",
            "TEXT",
            vec![Text("2024-05-01T12:00:00.000250".into())],
            noon() + chrono::TimeDelta::microseconds(250),
        ),
        (
            "digits as text are unix seconds",
            "TEXT",
            vec![Text("1714564800".into())],
            noon(),
        ),
    ];
    for (i, (name, column_type, values, newest)) in rows.into_iter().enumerate() {
        let count = values.len() as u64;
        let db = db_with(dir.path(), &format!("{i}.db"), column_type, &values);
        let reading = found(read_progress_table(&utc_spec(&db)));
        assert_eq!(reading.newest, newest, "{name}");
        assert_eq!(reading.rows, count, "{name}");
    }
}

#[test]
fn the_time_column_of_sqlites_own_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(dir.path(), "p.db", "TEXT", &[]);
    let conn = Connection::open(&db).expect("open");
    conn.execute(
        "INSERT INTO progress (done_at) VALUES (datetime('now')), (strftime('%Y-%m-%d %H:%M:%f', 'now'))",
        [],
    )
    .expect("insert");
    let reading = found(read_progress_table(&utc_spec(&db)));
    let age = Utc::now() - reading.newest;
    assert!(
        age >= chrono::TimeDelta::zero() && age < chrono::TimeDelta::minutes(1),
        "{age}"
    );
    assert_eq!(reading.rows, 2);
}

#[test]
fn an_empty_table_and_a_missing_database_are_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(dir.path(), "p.db", "INTEGER", &[]);
    assert_eq!(
        read_progress_table(&spec(&db, "progress", "done_at")),
        Reading::Empty
    );
    let missing = dir.path().join("not-yet.db");
    assert_eq!(
        read_progress_table(&spec(&missing, "progress", "done_at")),
        Reading::Empty
    );
    assert!(!missing.exists(), "reading must not create the database");
}

#[test]
fn rows_whose_times_are_all_null_are_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(
        dir.path(),
        "p.db",
        "INTEGER",
        &[rusqlite::types::Value::Null, rusqlite::types::Value::Null],
    );
    assert_eq!(
        read_progress_table(&spec(&db, "progress", "done_at")),
        Reading::Empty
    );
}

#[test]
fn a_missing_table_or_column_is_a_fault_with_sqlites_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(
        dir.path(),
        "p.db",
        "INTEGER",
        &[rusqlite::types::Value::Integer(1_714_564_800)],
    );
    let reading = read_progress_table(&spec(&db, "progres", "done_at"));
    let error = reading.fault().expect("a fault");
    assert!(error.contains("no such table"), "{error}");

    // SQLite would take an unknown "done" for the string 'done'; the probe must not.
    let reading = read_progress_table(&spec(&db, "progress", "done"));
    let error = reading.fault().expect("a fault");
    assert!(error.contains("no such column"), "{error}");
}

#[test]
fn hostile_identifiers_are_quoted_not_executed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("p.db");
    let conn = Connection::open(&db).expect("create");
    conn.execute_batch(
        "CREATE TABLE \"odd \"\"name\"\"\" (\"at\"\"x\" INTEGER); \
         INSERT INTO \"odd \"\"name\"\"\" VALUES (1714564800);",
    )
    .expect("create");
    let reading = found(read_progress_table(&spec(&db, "odd \"name\"", "at\"x")));
    assert_eq!(reading.newest, noon());
    let reading = read_progress_table(&spec(&db, "x\"; DROP TABLE y; --", "at"));
    assert!(reading.fault().is_some());
}

#[test]
fn values_that_are_not_times_are_faults_quoting_them() {
    use rusqlite::types::Value::{Blob, Integer, Text};
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<(&str, Vec<rusqlite::types::Value>, &str)> = vec![
        ("garbage text", vec![Text("soon\u{1b}[2J".into())], "'soon'"),
        ("a blob", vec![Blob(vec![1, 2, 3])], "blob"),
        (
            "milliseconds",
            vec![Integer(1_714_564_800_000)],
            "'1714564800000'",
        ),
        (
            "text sorts above numbers in max()",
            vec![Integer(1_714_564_800), Text("n/a".into())],
            "'n/a'",
        ),
    ];
    for (i, (name, values, needle)) in rows.into_iter().enumerate() {
        let db = db_with(dir.path(), &format!("{i}.db"), "", &values);
        let reading = read_progress_table(&spec(&db, "progress", "done_at"));
        let error = reading
            .fault()
            .unwrap_or_else(|| panic!("{name}: {reading:?}"));
        assert!(error.contains(needle), "{name}: {error}");
        assert!(mihari::core::text::is_inert(error), "{name}: {error:?}");
    }
}

#[test]
fn not_a_database_is_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("p.db");
    std::fs::write(
        &db,
        b"this is not a database, it is a text file\n".repeat(100),
    )
    .expect("write");
    assert!(
        read_progress_table(&spec(&db, "progress", "done_at"))
            .fault()
            .is_some()
    );
    let dir_db = dir.path().join("dir.db");
    std::fs::create_dir(&dir_db).expect("mkdir");
    let reading = read_progress_table(&spec(&dir_db, "progress", "done_at"));
    assert!(
        reading.fault().is_some_and(|e| e.contains("directory")),
        "{reading:?}"
    );
}

#[test]
fn a_wal_database_reads_the_committed_rows_while_a_writer_holds_a_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(dir.path(), "p.db", "INTEGER", &[]);
    let writer = Connection::open(&db).expect("writer");
    let mode: String = writer
        .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
        .expect("wal");
    assert_eq!(mode, "wal");
    writer
        .execute("INSERT INTO progress (done_at) VALUES (1714564800)", [])
        .expect("commit one row");
    writer.execute_batch("BEGIN IMMEDIATE").expect("begin");
    writer
        .execute("INSERT INTO progress (done_at) VALUES (1714999999)", [])
        .expect("uncommitted row");

    // The reader sees the committed row only, and does not wait for the writer.
    let reading = found(read_progress_table(&spec(&db, "progress", "done_at")));
    assert_eq!((reading.newest, reading.rows), (noon(), 1));

    writer.execute_batch("COMMIT").expect("commit");
    let reading = found(read_progress_table(&spec(&db, "progress", "done_at")));
    assert_eq!(reading.rows, 2);
}

#[test]
fn a_rollback_journal_writer_holding_an_exclusive_lock_is_a_fault_not_a_hang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(
        dir.path(),
        "p.db",
        "INTEGER",
        &[rusqlite::types::Value::Integer(1_714_564_800)],
    );
    let writer = Connection::open(&db).expect("writer");
    writer.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let reading = read_progress_table(&spec(&db, "progress", "done_at"));
    let error = reading.fault().expect("a fault while locked");
    assert!(error.contains("locked"), "{error}");
    writer.execute_batch("COMMIT").expect("unlock");
    assert_eq!(
        found(read_progress_table(&spec(&db, "progress", "done_at"))).rows,
        1
    );
}

#[test]
fn a_wal_database_read_while_another_thread_keeps_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = db_with(dir.path(), "p.db", "INTEGER", &[]);
    {
        let conn = Connection::open(&db).expect("open");
        conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get::<_, String>(0))
            .expect("wal");
        conn.execute("INSERT INTO progress (done_at) VALUES (1714564800)", [])
            .expect("insert");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let conn = Connection::open(&db).expect("writer");
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .expect("timeout");
            let mut at = 1_714_564_800i64;
            while !stop.load(Ordering::Relaxed) {
                at += 1;
                let tx = conn.unchecked_transaction().expect("begin");
                for _ in 0..50 {
                    tx.execute("INSERT INTO progress (done_at) VALUES (?1)", [at])
                        .expect("insert");
                }
                tx.commit().expect("commit");
            }
            at
        })
    };
    let mut last_rows = 0;
    let mut last_newest = noon();
    for _ in 0..200 {
        let reading = found(read_progress_table(&spec(&db, "progress", "done_at")));
        assert!(reading.rows >= last_rows, "rows went backwards");
        assert!(reading.newest >= last_newest, "time went backwards");
        assert_eq!(
            (reading.rows - 1) % 50,
            0,
            "a reader saw half a transaction"
        );
        last_rows = reading.rows;
        last_newest = reading.newest;
    }
    stop.store(true, Ordering::Relaxed);
    let final_at = writer.join().expect("writer thread");
    let reading = found(read_progress_table(&spec(&db, "progress", "done_at")));
    assert_eq!(reading.newest.timestamp(), final_at);
}

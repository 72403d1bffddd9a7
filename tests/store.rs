//! The state store on real SQLite files: permissions, WAL, the append-only event log enforced
//! by the database itself, claims, approvals, heartbeats, routes and migrations.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Barrier};
use std::thread;

use chrono::{Duration, Utc};
use mihari::store::{
    Actor, ApprovalState, ClaimOutcome, ClaimState, EventFilter, Heartbeat, Kind, NewEvent, Store,
};

#[path = "common/users.rs"]
mod users;

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Actor::Cli).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_store_is_created_0600_in_a_0700_folder_in_wal_mode() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("state/nested");
    let store = open(&dir);
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(store.path()), 0o600);
    let journal: String = store
        .connection()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    let version: i64 = store
        .connection()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 8);
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_state_folder_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let error = Store::open(dir.path(), Actor::Cli).unwrap_err().to_string();
    assert!(error.contains("writable by group or others"), "{error}");
    assert!(error.contains("chmod 700"), "{error}");
}

#[test]
fn the_event_log_refuses_update_and_delete_inside_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store
        .append(
            NewEvent::new(Kind::Detected)
                .job("collect")
                .reason("lock holder gone"),
        )
        .unwrap();
    let update = store
        .connection()
        .execute("UPDATE events SET reason = 'rewritten'", [])
        .unwrap_err()
        .to_string();
    assert!(update.contains("append-only"), "{update}");
    let delete = store
        .connection()
        .execute("DELETE FROM events", [])
        .unwrap_err()
        .to_string();
    assert!(delete.contains("append-only"), "{delete}");
    let events = store.events(&EventFilter::default()).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason.as_deref(), Some("lock holder gone"));
}

#[test]
fn events_carry_the_spec_columns_and_filter_by_job_kind_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open_as(dir.path(), Actor::Operator, "4242.98765".into()).unwrap();
    store
        .append(
            NewEvent::new(Kind::Spawned)
                .job("collect")
                .run(Some("run-1"))
                .workspace_hash(Some(mihari::store::workspace_hash("/data/raw".as_ref())))
                .route(Some("local"))
                .reason("operator confirmed"),
        )
        .unwrap();
    store
        .append(NewEvent::new(Kind::Declined).job("other"))
        .unwrap();
    let all = store.events(&EventFilter::default()).unwrap();
    let spawned = &all[0];
    assert_eq!(spawned.kind, "spawned");
    assert_eq!(spawned.actor, Actor::Operator);
    assert_eq!(spawned.session, "4242.98765");
    assert_eq!(spawned.run.as_deref(), Some("run-1"));
    assert_eq!(spawned.route.as_deref(), Some("local"));
    let hash = spawned.workspace_hash.clone().unwrap();
    assert_eq!(hash.len(), 12, "a short hash, never the path");
    assert!(!hash.contains('/'));
    assert!((Utc::now() - spawned.at).num_seconds() < 60);

    let only = |filter: EventFilter| store.events(&filter).unwrap().len();
    assert_eq!(
        only(EventFilter {
            job: Some("collect".into()),
            ..Default::default()
        }),
        1
    );
    assert_eq!(
        only(EventFilter {
            kind: Some("declined".into()),
            ..Default::default()
        }),
        1
    );
    assert_eq!(
        only(EventFilter {
            since: Some(Utc::now() + Duration::seconds(5)),
            ..Default::default()
        }),
        0
    );
    assert_eq!(
        only(EventFilter {
            last: Some(1),
            ..Default::default()
        }),
        1
    );
    assert!(store.started_before("collect").unwrap());
    assert!(!store.started_before("other").unwrap());
    assert_eq!(
        store
            .count(
                Kind::Spawned,
                Some("collect"),
                None,
                Utc::now() - Duration::hours(24)
            )
            .unwrap(),
        1
    );
    assert!(store.last_spawn_in_workspace(&hash).unwrap().is_some());
}

#[test]
fn the_first_claimer_wins_and_the_others_record_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Store::open_as(dir.path(), Actor::Cli, "1.1".into()).unwrap();
    let mut second = Store::open_as(dir.path(), Actor::Watcher, "2.2".into()).unwrap();
    assert_eq!(
        first
            .claim("k1", "collect", "restart", "dead pid 4242")
            .unwrap(),
        ClaimOutcome::Won
    );
    match second
        .claim("k1", "collect", "restart", "dead pid 4242")
        .unwrap()
    {
        ClaimOutcome::Duplicate(claim) => {
            assert_eq!(claim.session, "1.1");
            assert_eq!(claim.state, ClaimState::Claimed);
        }
        other => panic!("{other:?}"),
    }
    let kinds: Vec<String> = first
        .events(&EventFilter::default())
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["claimed", "duplicate"]);

    // A claim that failed before spawning may be tried again, counted.
    assert!(
        first
            .advance_claim(
                "k1",
                ClaimState::Claimed,
                ClaimState::Failed,
                None,
                Some("the claimer died before spawning"),
                NewEvent::new(Kind::Failed).job("collect").key("k1"),
            )
            .unwrap()
    );
    assert!(first.retry_claim("k1", "second attempt").unwrap());
    assert_eq!(first.claim_of("k1").unwrap().unwrap().attempts, 2);
    assert!(!first.retry_claim("k1", "not failed now").unwrap());
    assert_eq!(first.open_claims().unwrap().len(), 1);

    // One that spawned and then failed is never tried again: one key, one spawn at most.
    let mut advance = |from: ClaimState, to: ClaimState, pid: Option<u32>| {
        first
            .advance_claim(
                "k1",
                from,
                to,
                pid,
                Some("did not take the lock within 10 s"),
                NewEvent::new(Kind::Failed).job("collect").key("k1"),
            )
            .unwrap()
    };
    assert!(advance(ClaimState::Claimed, ClaimState::Spawned, Some(777)));
    assert!(advance(ClaimState::Spawned, ClaimState::Failed, None));
    assert!(
        !advance(ClaimState::Spawned, ClaimState::Failed, None),
        "a claim is resolved once"
    );
    let claim = first.claim_of("k1").unwrap().unwrap();
    assert_eq!(claim.state, ClaimState::Failed);
    assert_eq!(claim.pid, Some(777));
    assert_eq!(
        claim.last_error.as_deref(),
        Some("did not take the lock within 10 s")
    );
    assert!(!first.retry_claim("k1", "third attempt").unwrap());
}

#[test]
fn claims_from_many_threads_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path());
    let threads = 16;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let dir = dir.path().to_path_buf();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut store = Store::open_as(&dir, Actor::Cli, format!("{i}.0")).unwrap();
                barrier.wait();
                store
                    .claim("same-key", "collect", "restart", "race")
                    .unwrap()
            })
        })
        .collect();
    let winners = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|o| *o == ClaimOutcome::Won)
        .count();
    assert_eq!(winners, 1);
    let store = open(dir.path());
    let duplicates = store
        .events(&EventFilter {
            kind: Some("duplicate".into()),
            ..Default::default()
        })
        .unwrap()
        .len();
    assert_eq!(duplicates, threads - 1);
}

#[test]
fn an_approval_request_is_made_once_and_decided_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let first = store
        .request_approval("publish", "publish", "abc", "publish 3 articles")
        .unwrap();
    assert_eq!(first.state, ApprovalState::Pending);
    let again = store
        .request_approval("publish", "publish", "abc", "a different summary")
        .unwrap();
    assert_eq!(
        again.summary, "publish 3 articles",
        "the same key never makes a second entry"
    );
    assert_eq!(store.approvals(false).unwrap().len(), 1);
    assert_eq!(store.approvals(true).unwrap().len(), 1);

    let decided = store
        .decide_approval("abc", false, Some("wrong feed"))
        .unwrap();
    let decided = decided.expect("pending, so decided");
    assert_eq!(decided.state, ApprovalState::Denied);
    assert_eq!(decided.reason.as_deref(), Some("wrong feed"));
    let twice = store.decide_approval("abc", true, None).unwrap();
    assert_eq!(twice.unwrap_err().state, ApprovalState::Denied);
    assert!(store.approvals(true).unwrap().is_empty());
    assert!(store.decide_approval("nope", true, None).is_err());
    let kinds: Vec<String> = store
        .events(&EventFilter::default())
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["approval-requested", "denied"]);
}

#[test]
fn heartbeats_and_routes_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    for done in [10, 20] {
        store
            .heartbeat(&Heartbeat {
                job: "train".into(),
                at: Utc::now(),
                done: Some(done),
                total: Some(100),
                position: Some(format!("epoch {done}")),
                note: None,
            })
            .unwrap();
    }
    let last = store.last_heartbeat("train").unwrap().unwrap();
    assert_eq!(last.done, Some(20));
    assert_eq!(last.position.as_deref(), Some("epoch 20"));
    assert!(store.last_heartbeat("other").unwrap().is_none());

    store.record_route("run-1", "collect", "local").unwrap();
    let routes = store.record_route("run-1", "collect", "cloud-a").unwrap();
    assert_eq!(routes.routes, ["local", "cloud-a"]);
    assert_eq!(routes.hops, 2);
    assert_eq!(store.run_routes("run-1").unwrap().unwrap().hops, 2);
}

#[test]
fn a_store_newer_than_this_binary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .connection()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    drop(store);
    let error = Store::open(dir.path(), Actor::Cli).unwrap_err().to_string();
    assert!(error.contains("newer than this mihari"), "{error}");
}

#[test]
fn reasons_are_made_inert_before_they_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store
        .append(NewEvent::new(Kind::Refused).reason("bad \u{1b}]0;title\u{7} reason"))
        .unwrap();
    let reason = store.events(&EventFilter::default()).unwrap()[0]
        .reason
        .clone()
        .unwrap();
    assert!(mihari::core::text::is_inert(&reason), "{reason:?}");
}

#[test]
fn processes_opening_a_fresh_store_at_once_all_succeed() {
    // Each round: a fresh folder, and several processes opening the store in it together.
    let binary = env!("CARGO_BIN_EXE_mihari");
    for round in 0..15 {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs.yaml");
        fs::write(
            &jobs,
            "settings:\n  state_dir: state\njobs:\n  - id: a\n    log: a.log\n    should_run_when: [resource_free]\n    lock: a.lock\n",
        )
        .unwrap();
        let children: Vec<_> = (0..6)
            .map(|i| {
                std::process::Command::new(binary)
                    .arg("--config")
                    .arg(&jobs)
                    .args(["claim", &format!("k{i}")])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// SPEC §6: an event never holds raw paths. Error text that names a file (a log that cannot
/// be opened, a binary not found) keeps only the file's last part.
#[test]
fn an_events_reason_never_holds_a_raw_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let folder = dir.path().display().to_string();
    store
        .append(NewEvent::new(Kind::Failed).job("collect").reason(format!(
            "cannot open the job's log '{folder}/logs/collect.log' for its output: \
                 Permission denied; cannot start {folder}/bin/mihari"
        )))
        .unwrap();
    let events = store.events(&EventFilter::default()).unwrap();
    let reason = events[0].reason.clone().unwrap();
    assert!(!reason.contains(&folder), "{reason}");
    assert_eq!(
        reason,
        "cannot open the job's log '…/collect.log' for its output: Permission denied; \
         cannot start …/mihari"
    );
}

// Who owns the store, and what it is (ISSUE 9, items 2 and 3)

use users::other_user;

fn chown(path: &std::path::Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

fn refusal(dir: &std::path::Path) -> String {
    match Store::open(dir, Actor::Cli) {
        Ok(_) => panic!("the store in '{}' was opened", dir.display()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_state_folder_owned_by_another_user_is_refused() {
    let Some(other) = other_user() else { return };
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("state");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    // The other user's folder holds a link to a file of ours, waiting for a store to be
    // written through it.
    let precious = parent.path().join("precious.conf");
    fs::write(&precious, "").unwrap();
    std::os::unix::fs::symlink(&precious, dir.join("mihari.sqlite")).unwrap();
    chown(&dir, other);
    let error = refusal(&dir);
    assert!(error.contains("owned by"), "{error}");
    assert!(error.contains(&format!("'{}'", dir.display())), "{error}");
    assert!(error.contains("chown"), "{error}");
    assert_eq!(fs::read(&precious).unwrap(), b"", "the target was written");
}

#[test]
fn a_store_file_owned_by_another_user_is_refused() {
    let Some(other) = other_user() else { return };
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let db = dir.path().join("mihari.sqlite");
    chown(&db, other);
    let error = refusal(dir.path());
    assert!(error.contains("owned by"), "{error}");
    assert!(error.contains(&format!("'{}'", db.display())), "{error}");

    // Its WAL file too: SQLite would write the next commit into another user's file.
    chown(&db, (0, 0));
    let store = open(dir.path());
    let mut wal = db.clone().into_os_string();
    wal.push("-wal");
    let wal = std::path::PathBuf::from(wal);
    assert!(wal.exists(), "a WAL file while the store is open");
    chown(&wal, other);
    drop(store);
    // Closing the last connection checkpoints and may remove the WAL; plant one again.
    if !wal.exists() {
        fs::write(&wal, "").unwrap();
        fs::set_permissions(&wal, fs::Permissions::from_mode(0o600)).unwrap();
        chown(&wal, other);
    }
    let error = refusal(dir.path());
    assert!(error.contains("owned by"), "{error}");
    assert!(error.contains(&format!("'{}'", wal.display())), "{error}");
}

#[test]
fn a_store_file_that_is_a_symlink_is_refused_and_its_target_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // A link to nothing yet: opening through it would create a store where it points.
    let target = elsewhere.path().join("planted.sqlite");
    std::os::unix::fs::symlink(&target, dir.path().join("mihari.sqlite")).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("symbolic link"), "{error}");
    assert!(!target.exists(), "a store was written through the link");

    // A link to an empty file of ours: SQLite would make it a database.
    let empty = elsewhere.path().join("notes.txt");
    fs::write(&empty, "").unwrap();
    fs::remove_file(dir.path().join("mihari.sqlite")).unwrap();
    std::os::unix::fs::symlink(&empty, dir.path().join("mihari.sqlite")).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("symbolic link"), "{error}");
    assert_eq!(fs::read(&empty).unwrap(), b"", "the target was written");

    // A link where the WAL goes.
    fs::remove_file(dir.path().join("mihari.sqlite")).unwrap();
    drop(open(dir.path()));
    let wal = dir.path().join("mihari.sqlite-wal");
    let _ = fs::remove_file(&wal);
    std::os::unix::fs::symlink(&empty, &wal).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("symbolic link"), "{error}");
    assert!(error.contains(&format!("'{}'", wal.display())), "{error}");
    assert_eq!(fs::read(&empty).unwrap(), b"", "the target was written");
}

#[test]
fn a_store_file_others_can_read_or_write_is_refused_with_the_chmod_to_run() {
    for mode in [0o666, 0o640, 0o604, 0o620] {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()));
        let db = dir.path().join("mihari.sqlite");
        fs::set_permissions(&db, fs::Permissions::from_mode(mode)).unwrap();
        let error = refusal(dir.path());
        assert!(
            error.contains(&format!("chmod 600 '{}'", db.display())),
            "mode {mode:o}: {error}"
        );
        assert!(
            error.contains(&format!("{mode:o}")),
            "mode {mode:o}: {error}"
        );
        fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();
        drop(open(dir.path()));
    }
}

// The event log stays append-only (ISSUE 9, item 4)

/// Every statement that could rewrite or remove an event, on the first event (id 1).
const REWRITES: [&str; 7] = [
    "INSERT OR REPLACE INTO events (id, at_ms, kind, actor, session, reason) \
     VALUES (1, 0, 'detected', 'cli', 's', 'rewritten')",
    "REPLACE INTO events (id, at_ms, kind, actor, session, reason) \
     VALUES (1, 0, 'detected', 'cli', 's', 'rewritten')",
    "INSERT INTO events (id, at_ms, kind, actor, session, reason) \
     VALUES (1, 0, 'detected', 'cli', 's', 'x') ON CONFLICT(id) DO UPDATE SET reason = 'rewritten'",
    "INSERT INTO events (id, at_ms, kind, actor, session, reason) \
     VALUES (1, 0, 'detected', 'cli', 's', 'x') ON CONFLICT DO NOTHING",
    "UPDATE events SET reason = 'rewritten' WHERE id = 1",
    "UPDATE OR REPLACE events SET id = 2 WHERE id = 1",
    "DELETE FROM events WHERE id = 1",
];

fn one_event_store(dir: &std::path::Path) -> Store {
    let mut store = open(dir);
    store
        .append(
            NewEvent::new(Kind::Spawned)
                .job("collect")
                .reason("as it happened"),
        )
        .unwrap();
    store
}

fn only_event_is_intact(store: &Store) {
    let events = store.events(&EventFilter::default()).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].id, 1);
    assert_eq!(events[0].kind, "spawned");
    assert_eq!(events[0].reason.as_deref(), Some("as it happened"));
}

#[test]
fn no_statement_rewrites_an_event_through_rusqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = one_event_store(dir.path());
    for sql in REWRITES {
        let error = store
            .connection()
            .execute(sql, [])
            .expect_err(sql)
            .to_string();
        assert!(error.contains("append-only"), "{sql}: {error}");
    }
    only_event_is_intact(&store);
}

#[test]
fn no_statement_rewrites_an_event_through_the_sqlite3_shell() {
    let dir = tempfile::tempdir().unwrap();
    drop(one_event_store(dir.path()));
    let db = dir.path().join("mihari.sqlite");
    for sql in REWRITES {
        let out = match std::process::Command::new("sqlite3")
            .arg(&db)
            .arg(sql)
            .output()
        {
            Ok(out) => out,
            Err(error) => {
                eprintln!("skipped: cannot run sqlite3: {error}");
                return;
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sql}: it ran");
        assert!(stderr.contains("append-only"), "{sql}: {stderr}");
    }
    only_event_is_intact(&open(dir.path()));
}

#[test]
fn a_store_whose_protecting_trigger_was_dropped_or_changed_is_refused() {
    for trigger in [
        "events_never_updated",
        "events_never_deleted",
        "events_ids_never_reused",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = one_event_store(dir.path());
        store
            .connection()
            .execute_batch(&format!("DROP TRIGGER {trigger}"))
            .unwrap();
        drop(store);
        let error = refusal(dir.path());
        assert!(error.contains(&format!("'{trigger}'")), "{error}");
        assert!(error.contains("missing"), "{error}");
        // The fix it names, run as printed, makes the store usable again.
        let fix = error
            .split("put the trigger back: ")
            .nth(1)
            .and_then(|rest| rest.split("; otherwise").next())
            .unwrap_or_else(|| panic!("no fix in: {error}"));
        let ran = std::process::Command::new("sh").args(["-c", fix]).output();
        match ran {
            Ok(out) if out.status.success() => {
                only_event_is_intact(&open(dir.path()));
                let conn = rusqlite::Connection::open(dir.path().join("mihari.sqlite")).unwrap();
                conn.execute_batch(&format!("DROP TRIGGER {trigger}"))
                    .unwrap();
            }
            Ok(out) => panic!("{fix}: {}", String::from_utf8_lossy(&out.stderr)),
            Err(error) => eprintln!("not run: {fix}: {error}"),
        }

        // The same name over a trigger that lets everything through.
        let conn = rusqlite::Connection::open(dir.path().join("mihari.sqlite")).unwrap();
        let event = if trigger == "events_ids_never_reused" {
            "INSERT"
        } else if trigger == "events_never_updated" {
            "UPDATE"
        } else {
            "DELETE"
        };
        conn.execute_batch(&format!(
            "CREATE TRIGGER {trigger} BEFORE {event} ON events BEGIN SELECT 1; END;"
        ))
        .unwrap();
        drop(conn);
        let error = refusal(dir.path());
        assert!(error.contains(&format!("'{trigger}'")), "{error}");
        assert!(error.contains("not as mihari made it"), "{error}");
    }
}

#[test]
fn a_trigger_mihari_did_not_make_on_the_event_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = one_event_store(dir.path());
    // It would make every new event vanish without an error.
    store
        .connection()
        .execute_batch(
            "CREATE TRIGGER events_quietly_dropped BEFORE INSERT ON events \
             BEGIN SELECT RAISE(IGNORE); END;",
        )
        .unwrap();
    drop(store);
    let error = refusal(dir.path());
    assert!(error.contains("'events_quietly_dropped'"), "{error}");
    assert!(
        error.contains("DROP TRIGGER events_quietly_dropped"),
        "{error}"
    );
}

// A store emptied, removed or replaced under mihari (ISSUE 9, item 6)

/// A store with history: a watcher that ran, a spawn, an open claim.
fn store_with_history(dir: &std::path::Path) {
    let mut store = open(dir);
    store
        .append(NewEvent::new(Kind::WatcherStarted).reason("pid 4242"))
        .unwrap();
    store
        .append(NewEvent::new(Kind::Spawned).job("collect"))
        .unwrap();
    store
        .claim("k1", "collect", "restart", "dead lock")
        .unwrap();
}

#[test]
fn a_fresh_state_folder_starts_silently_and_records_the_stores_identity() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("state");
    drop(open(&dir));
    let id_file = dir.join("mihari.sqlite.id");
    let id = fs::read_to_string(&id_file).unwrap();
    assert_eq!(id.trim().len(), 32, "{id:?}");
    assert_eq!(
        fs::metadata(&id_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Every later open agrees with it.
    drop(open(&dir));
    assert_eq!(fs::read_to_string(&id_file).unwrap(), id);
}

#[test]
fn a_store_emptied_under_mihari_is_refused_instead_of_started_over() {
    let dir = tempfile::tempdir().unwrap();
    store_with_history(dir.path());
    let db = dir.path().join("mihari.sqlite");
    fs::File::create(&db).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("empty"), "{error}");
    assert!(error.contains(&format!("'{}'", db.display())), "{error}");
    assert!(error.contains("claims"), "{error}");
    assert_eq!(
        fs::metadata(&db).unwrap().len(),
        0,
        "the store was made again"
    );

    // Starting over deliberately: the command the refusal names.
    let fix = error
        .split("move it aside: ")
        .nth(1)
        .and_then(|rest| rest.split("; mihari starts").next())
        .unwrap_or_else(|| panic!("no command in: {error}"));
    let out = std::process::Command::new("sh")
        .args(["-c", fix])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{fix}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh = open(dir.path());
    assert!(fresh.events(&EventFilter::default()).unwrap().is_empty());
}

#[test]
fn a_store_removed_under_mihari_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    store_with_history(dir.path());
    let db = dir.path().join("mihari.sqlite");
    fs::remove_file(&db).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("is gone"), "{error}");
    assert!(!db.exists(), "the store was made again");
    // Removing the identity file is the deliberate start over.
    let id_file = dir.path().join("mihari.sqlite.id");
    assert!(
        error.contains(&format!("rm '{}'", id_file.display())),
        "{error}"
    );
    fs::remove_file(&id_file).unwrap();
    drop(open(dir.path()));
}

#[test]
fn a_store_replaced_by_another_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    store_with_history(dir.path());
    let other = tempfile::tempdir().unwrap();
    drop(open(other.path()));
    let db = dir.path().join("mihari.sqlite");
    // Another mihari store, then a database that is not mihari's at all.
    fs::copy(other.path().join("mihari.sqlite"), &db).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("replaced by another database"), "{error}");
    let plain = rusqlite::Connection::open(other.path().join("plain.sqlite")).unwrap();
    plain.execute_batch("CREATE TABLE notes (x)").unwrap();
    drop(plain);
    fs::copy(other.path().join("plain.sqlite"), &db).unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();
    let error = refusal(dir.path());
    assert!(error.contains("replaced by another database"), "{error}");
    // That database is left as it was found: no tables of ours, no switch to WAL.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["notes"]);
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "delete");
}

#[test]
fn a_store_from_before_identities_is_adopted_silently() {
    let dir = tempfile::tempdir().unwrap();
    store_with_history(dir.path());
    let id_file = dir.path().join("mihari.sqlite.id");
    fs::remove_file(&id_file).unwrap();
    let store = open(dir.path());
    assert_eq!(store.events(&EventFilter::default()).unwrap().len(), 3);
    assert!(id_file.exists());
}

#[test]
fn threads_opening_a_fresh_store_at_once_all_succeed_with_one_identity() {
    for round in 0..30 {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(dir.path().join("state"));
        let barrier = Arc::new(Barrier::new(8));
        let opened: Vec<_> = (0..8)
            .map(|_| {
                let (state, barrier) = (state.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    Store::open(&state, Actor::Cli)
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        for handle in opened {
            if let Err(error) = handle.join().unwrap() {
                panic!("round {round}: {error}");
            }
        }
        let id = fs::read_to_string(state.join("mihari.sqlite.id")).unwrap();
        assert_eq!(id.trim().len(), 32, "round {round}");
    }
}

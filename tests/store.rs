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
    assert_eq!(version, 4);
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

//! The exactly-once guarantee under a real race: 50 `mihari claim` processes on one key at
//! once, 200 rounds with a fresh key each, all on one state store. Every round must have
//! exactly one winner (exit 0) and 49 duplicates (exit 1), and the event log must say the
//! same: one `claimed` and 49 `duplicate` events for that key. Two watchers, or a watcher and
//! a dashboard, that see the same death compute the same key: this is their collision.
//!
//! Round 0 starts on no database at all, so the racers also race to create it. From round 1
//! on, the test holds the database's write lock while it starts the racers and a moment
//! longer: they pile up inside their claim, waiting, and all move at once when it lets go —
//! a barrier made of the very lock the claim depends on.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mihari::store::{Actor, Store};

const ROUNDS: usize = 200;
const RACERS: usize = 50;
/// How long the gate stays shut after the last racer was started: long enough for the racers
/// to reach their claim on this 2-core machine, far below the store's 10 s busy timeout.
const GATE_HOLD: Duration = Duration::from_millis(50);

#[test]
fn fifty_claimers_of_one_key_make_one_winner_two_hundred_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state_dir = dir.path().join("state");
    let config = dir.path().join("jobs.yaml");
    fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\njobs:\n  - id: racer\n    lock: {}\n    \
             should_run_when: [resource_free]\n    log: {}\n",
            state_dir.display(),
            dir.path().join("racer.lock").display(),
            dir.path().join("racer.log").display()
        ),
    )
    .expect("write jobs file");
    fs::set_permissions(&config, fs::Permissions::from_mode(0o600)).expect("chmod");

    let nonce = std::process::id();
    let started = Instant::now();
    let mut store: Option<Store> = None;
    for round in 0..ROUNDS {
        let key = format!("race-{nonce}-{round}");
        let gate = store.as_ref().map(|store| {
            let conn = store.connection();
            conn.execute_batch("BEGIN IMMEDIATE")
                .expect("the gate shuts");
            conn
        });
        // Spawn them all first, then wait: they run at once, contending for one row.
        let racers: Vec<Child> = (0..RACERS)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_mihari"))
                    .arg("--config")
                    .arg(&config)
                    .args(["claim", &key, "--job", "racer"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("mihari claim starts")
            })
            .collect();
        if let Some(conn) = gate {
            std::thread::sleep(GATE_HOLD);
            conn.execute_batch("COMMIT").expect("the gate opens");
        }
        let (mut winners, mut duplicates) = (0, 0);
        for racer in racers {
            let output = racer.wait_with_output().expect("mihari claim ends");
            match output.status.code() {
                Some(0) => winners += 1,
                Some(1) => duplicates += 1,
                other => panic!(
                    "round {round}: a claimer ended with {other:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                ),
            }
        }
        assert_eq!(
            (winners, duplicates),
            (1, RACERS - 1),
            "round {round}: exit codes"
        );

        let store = store
            .get_or_insert_with(|| Store::open(&state_dir, Actor::Cli).expect("the store opens"));
        let count = |kind: &str| -> i64 {
            store
                .connection()
                .query_row(
                    "SELECT count(*) FROM events WHERE key = ?1 AND kind = ?2",
                    rusqlite::params![key, kind],
                    |row| row.get(0),
                )
                .expect("counts")
        };
        assert_eq!(count("claimed"), 1, "round {round}: claimed events");
        assert_eq!(
            count("duplicate"),
            (RACERS - 1) as i64,
            "round {round}: duplicate events"
        );
        let claim = store.claim_of(&key).expect("reads").expect("one claim");
        assert_eq!(claim.job, "racer");
    }
    let elapsed = started.elapsed();
    println!(
        "claim race: {ROUNDS} rounds x {RACERS} processes in {:.1} s ({:.1} ms per round)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / ROUNDS as f64
    );
}

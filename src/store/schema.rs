//! The store's schema, as numbered migrations applied in order.
//!
//! `PRAGMA user_version` records how far a database has been migrated; each migration runs
//! once, in its own `BEGIN IMMEDIATE` transaction, so two processes opening a fresh store at
//! the same time cannot both apply it. A database newer than this binary is refused rather
//! than guessed at. Migrations are only ever appended, never edited.

use rusqlite::{Connection, TransactionBehavior};

use std::collections::HashMap;
use std::path::Path;

use super::{Result, StoreError};

/// Every migration, in order; the database's `user_version` is how many have run.
const MIGRATIONS: [&str; 8] = [
    // 1: the event log (append-only), claims, approvals, heartbeats, runs.
    "
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        job TEXT,
        actor TEXT NOT NULL CHECK (actor IN ('operator', 'watcher', 'job', 'cli')),
        session TEXT NOT NULL,
        run TEXT,
        workspace_hash TEXT,
        route TEXT,
        key TEXT,
        reason TEXT
    );
    CREATE INDEX events_by_job ON events (job, at_ms);
    CREATE INDEX events_by_kind ON events (kind, at_ms);
    CREATE INDEX events_by_workspace ON events (workspace_hash, kind, at_ms);
    CREATE TRIGGER events_never_updated BEFORE UPDATE ON events
    BEGIN
        SELECT RAISE(ABORT, 'the event log is append-only: an event is never updated');
    END;
    CREATE TRIGGER events_never_deleted BEFORE DELETE ON events
    BEGIN
        SELECT RAISE(ABORT, 'the event log is append-only: an event is never deleted');
    END;
    CREATE TABLE claims (
        key TEXT PRIMARY KEY,
        job TEXT NOT NULL,
        action TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('claimed', 'spawned', 'verified', 'failed')),
        session TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 1,
        last_error TEXT,
        pid INTEGER,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    CREATE TABLE approvals (
        key TEXT PRIMARY KEY,
        job TEXT NOT NULL,
        step TEXT NOT NULL,
        summary TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
        reason TEXT,
        requested_ms INTEGER NOT NULL,
        decided_ms INTEGER,
        decided_by TEXT
    );
    CREATE TABLE heartbeats (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        done INTEGER,
        total INTEGER,
        position TEXT,
        note TEXT
    );
    CREATE INDEX heartbeats_by_job ON heartbeats (job, at_ms);
    CREATE TABLE runs (
        run TEXT PRIMARY KEY,
        job TEXT NOT NULL,
        routes TEXT NOT NULL DEFAULT '[]',
        hops INTEGER NOT NULL DEFAULT 0,
        started_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    );
    ",
    // 2: escalation episodes and the daily digest.
    "
    CREATE TABLE episodes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job TEXT NOT NULL,
        kind TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        ended_ms INTEGER,
        escalated_ms INTEGER,
        message TEXT NOT NULL
    );
    CREATE UNIQUE INDEX episodes_open ON episodes (job, kind) WHERE ended_ms IS NULL;
    CREATE TABLE digests (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cut_ms INTEGER NOT NULL,
        delivered_ms INTEGER
    );
    CREATE TABLE digest_items (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        job TEXT,
        category TEXT NOT NULL,
        text TEXT NOT NULL,
        digest_id INTEGER REFERENCES digests (id)
    );
    CREATE INDEX digest_items_by_digest ON digest_items (digest_id, at_ms);
    ",
    // 3: a claim remembers that its spawn had started (and for which run), so a claimer
    // killed between the fork and the record never lets the same key spawn again.
    "
    ALTER TABLE claims ADD COLUMN spawn_started_ms INTEGER;
    ALTER TABLE claims ADD COLUMN run TEXT;
    ",
    // 4: the newest event of a kind for one job, found without reading them all.
    "
    CREATE INDEX events_by_job_kind ON events (job, kind, id);
    ",
    // 5: an event's id is never taken again. INSERT OR REPLACE, REPLACE INTO or an upsert on
    // an existing id would remove the old event without firing the delete trigger.
    "
    CREATE TRIGGER events_ids_never_reused BEFORE INSERT ON events
    WHEN EXISTS (SELECT 1 FROM events WHERE id = NEW.id)
    BEGIN
        SELECT RAISE(ABORT, 'the event log is append-only: an event id is never reused');
    END;
    ",
    // 6: the store's identity, also kept beside it: a store emptied or replaced under mihari
    // is refused rather than started over.
    "
    CREATE TABLE identity (store_id TEXT NOT NULL);
    ",
    // 7: who asked for an approval (the user that ran `mihari approval request`), shown in
    // the job's detail beside the step, so an operator choosing among several knows whose
    // question each one is. NULL for requests made before it was kept.
    "
    ALTER TABLE approvals ADD COLUMN requested_by TEXT;
    ",
    // 8: a job's newest heartbeats, found (and the older ones pruned) without reading them
    // all: three million heartbeats made every `check` read all of them.
    "
    CREATE INDEX heartbeats_newest ON heartbeats (job, id);
    ",
];

/// The triggers that keep the event log append-only, as the migrations above create them:
/// every open checks that each is there, word for word, and that no other trigger sits on
/// the event log (one that drops new events with RAISE(IGNORE) would hide them).
const PROTECTING: [(&str, &str); 3] = [
    (
        "events_never_updated",
        "CREATE TRIGGER events_never_updated BEFORE UPDATE ON events BEGIN SELECT \
         RAISE(ABORT, 'the event log is append-only: an event is never updated'); END",
    ),
    (
        "events_never_deleted",
        "CREATE TRIGGER events_never_deleted BEFORE DELETE ON events BEGIN SELECT \
         RAISE(ABORT, 'the event log is append-only: an event is never deleted'); END",
    ),
    (
        "events_ids_never_reused",
        "CREATE TRIGGER events_ids_never_reused BEFORE INSERT ON events WHEN EXISTS \
         (SELECT 1 FROM events WHERE id = NEW.id) BEGIN SELECT RAISE(ABORT, 'the event log \
         is append-only: an event id is never reused'); END",
    ),
];

/// Brings the database up to the newest schema.
pub fn migrate(conn: &Connection) -> Result<()> {
    let known = MIGRATIONS.len() as i64;
    loop {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version > known {
            return Err(StoreError::refused(format!(
                "the state store is at schema version {version}, newer than this mihari \
                 knows ({known}): upgrade mihari"
            )));
        }
        if version == known {
            return Ok(());
        }
        // `unchecked_transaction`: the connection is shared, not borrowed mutably here.
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let current: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if current == version {
            tx.execute_batch(MIGRATIONS[version as usize])?;
            tx.pragma_update(None, "user_version", version + 1)?;
        }
        tx.commit()?;
    }
}

/// Refuses a store whose event log has lost a protecting trigger, has one that is not as
/// mihari made it, or carries a trigger mihari did not make, naming it and what to do.
/// `db` names the file for the operator.
pub fn check_protection(conn: &Connection, db: &Path) -> Result<()> {
    let mut statement = conn.prepare(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'",
    )?;
    let found: HashMap<String, String> = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<String>>(1)?.unwrap_or_default(),
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let unprotected = |problem: String, fix: String| {
        StoreError::refused(format!(
            "the event log in '{}' is no longer protected: {problem}, so something other than \
             mihari changed the database and its history may have been rewritten. Look at it \
             (sqlite3 '{}' .schema); {fix}",
            db.display(),
            db.display()
        ))
    };
    for (name, sql) in PROTECTING {
        let put_back = format!(
            "if you trust it, put the trigger back: sqlite3 '{}' \"{sql};\"; otherwise {}",
            db.display(),
            super::move_aside_words(db)
        );
        match found.get(name) {
            None => {
                return Err(unprotected(
                    format!("its trigger '{name}' is missing"),
                    put_back,
                ));
            }
            Some(text) if words(text) != words(sql) => {
                return Err(unprotected(
                    format!("its trigger '{name}' is not as mihari made it"),
                    format!(
                        "if you trust it, replace the trigger: sqlite3 '{}' \"DROP TRIGGER \
                         {name}; {sql};\"; otherwise {}",
                        db.display(),
                        super::move_aside_words(db)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(name) = found
        .keys()
        .find(|name| PROTECTING.iter().all(|(known, _)| known != name))
    {
        return Err(unprotected(
            format!("a trigger mihari did not make, '{name}', sits on it"),
            format!(
                "if you trust it, remove that trigger: sqlite3 '{}' \"DROP TRIGGER {name};\"; \
                 otherwise {}",
                db.display(),
                super::move_aside_words(db)
            ),
        ));
    }
    Ok(())
}

/// SQL text with its whitespace folded, so a definition compares by its words.
fn words(sql: &str) -> String {
    sql.trim_end_matches(';')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protecting triggers are written twice, in their migrations and in [`PROTECTING`];
    /// a fresh database must match the list word for word.
    #[test]
    fn the_protecting_triggers_match_their_migrations() {
        let conn = Connection::open_in_memory().expect("a database");
        migrate(&conn).expect("migrate");
        check_protection(&conn, Path::new("memory")).expect("protected");
    }
}

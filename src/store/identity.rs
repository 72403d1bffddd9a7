//! The store's identity: a random id kept twice, inside the database and in a small file
//! beside it (`mihari.sqlite.id`, 0600), so a store emptied, removed or replaced under mihari
//! is told apart from a state_dir that never had one.
//!
//! A fresh state_dir starts silently; so does a store made before identities existed, or one
//! whose identity file was removed on purpose (the documented way to start over with the
//! database that is there). A store that vanished, was truncated to nothing, or is another
//! database while the identity file says which store was kept there is refused, loudly: its
//! history, cap counts, claims and the record of a running watcher would otherwise vanish
//! without a word. The file is written whole or not at all (a hard link of a finished file),
//! never through a link. This module decides nothing else.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Result, StoreError, files, move_aside_words};

/// The identity file of the database `db`: its name with `.id` appended.
pub fn file_of(db: &Path) -> PathBuf {
    files::beside(db, ".id")
}

/// The id the identity file beside `db` records, if there is one; refused when it is not a
/// file mihari wrote (someone else's, a link, open to others, or not an id).
pub fn recorded(db: &Path) -> Result<Option<String>> {
    let path = file_of(db);
    if files::inspect(&path, "the state store's identity file")?.is_none() {
        return Ok(None);
    }
    let mut text = String::new();
    let read = files::open_private(&path).and_then(|file| file.take(256).read_to_string(&mut text));
    if let Err(error) = read {
        return Err(StoreError::new(format!(
            "cannot read the state store's identity file '{}': {error}",
            path.display()
        )));
    }
    let id = text.trim();
    if !is_id(id) {
        return Err(StoreError::refused(format!(
            "the state store's identity file '{}' does not hold a store id: it is not one \
             mihari wrote; remove it to have mihari adopt the store that is there: rm '{}'",
            path.display(),
            path.display()
        )));
    }
    Ok(Some(id.to_string()))
}

/// Before SQLite opens `db` (whose metadata is `existing`, `None` when it does not exist):
/// refuses a store that is gone or empty while its identity file says one was kept there,
/// and a WAL file left without its database (SQLite would replay it into a new store).
pub fn before_open(
    db: &Path,
    recorded: Option<&str>,
    existing: Option<&fs::Metadata>,
) -> Result<()> {
    let id_file = file_of(db);
    let lost = "its history, cap counts, claims and the record of a running watcher went \
                with it";
    match (recorded, existing) {
        (Some(id), None) => Err(StoreError::refused(format!(
            "the state store '{}' is gone, but '{}' says store {id} was kept there: {lost}. \
             If it was moved, put it back (with its -wal file); to start over with a new \
             store deliberately, remove the identity file: rm '{}'",
            db.display(),
            id_file.display(),
            id_file.display()
        ))),
        (Some(id), Some(meta)) if meta.len() == 0 => Err(StoreError::refused(format!(
            "the state store '{}' is empty (0 bytes), but '{}' says store {id} was kept \
             there: it was emptied under mihari, and {lost}. Restore it from a backup, or \
             start over deliberately: {}",
            db.display(),
            id_file.display(),
            move_aside_words(db)
        ))),
        (None, None) => {
            let wal = files::beside(db, "-wal");
            match fs::symlink_metadata(&wal) {
                Ok(meta) if meta.len() > 0 => Err(StoreError::refused(format!(
                    "the state store's WAL file '{}' is there without its database '{}': \
                     SQLite would replay it into a new store. {}",
                    wal.display(),
                    db.display(),
                    move_aside_words(db)
                ))),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// The schema version from which every store keeps its identity inside.
const IDENTITY_SINCE: i64 = 6;

/// Before anything is written to the database: when an identity file names a store, the
/// database must be that store. Read only, so a database that is not ours is left as found.
pub fn verify(conn: &Connection, db: &Path, recorded: &str) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    // A store that wrote an identity file keeps the id inside too; an older schema (or
    // none) cannot be it.
    let inside: Option<String> = if version >= IDENTITY_SINCE {
        conn.query_row("SELECT store_id FROM identity LIMIT 1", [], |row| {
            row.get(0)
        })
        .optional()?
    } else {
        None
    };
    match inside {
        Some(inside) if inside == recorded => Ok(()),
        inside => Err(replaced(db, recorded, inside.as_deref())),
    }
}

/// After the migrations, for a store without an identity file: adopts the database's id, or
/// gives it a new one, written into the database first and then beside it, so a crash
/// between the two leaves a store that is adopted at the next open.
pub fn settle(conn: &Connection, db: &Path) -> Result<()> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let inside: Option<String> = tx
        .query_row("SELECT store_id FROM identity LIMIT 1", [], |row| {
            row.get(0)
        })
        .optional()?;
    let id = match inside {
        Some(inside) => inside,
        None => {
            let id: String =
                tx.query_row("SELECT lower(hex(randomblob(16)))", [], |row| row.get(0))?;
            tx.execute("INSERT INTO identity (store_id) VALUES (?1)", params![id])?;
            id
        }
    };
    tx.commit()?;
    match write_once(&file_of(db), &id) {
        Ok(true) => Ok(()),
        // Another opener of the same fresh store wrote it a moment ago: the same id.
        Ok(false) => match recorded(db)? {
            Some(theirs) if theirs == id => Ok(()),
            theirs => Err(replaced(db, theirs.as_deref().unwrap_or("?"), Some(&id))),
        },
        Err(error) => Err(StoreError::new(format!(
            "cannot write the state store's identity file '{}': {error}",
            file_of(db).display()
        ))),
    }
}

/// The refusal of a database that is not the store the identity file names.
fn replaced(db: &Path, recorded: &str, inside: Option<&str>) -> StoreError {
    let id_file = file_of(db);
    let found = match inside {
        Some(id) => format!("store {id}"),
        None => "a database without mihari's identity".to_string(),
    };
    StoreError::refused(format!(
        "the state store '{}' is not the one mihari kept there: '{}' says store {recorded}, \
         the database is {found}; it was replaced by another database, and the history, cap \
         counts, claims and the record of a running watcher of store {recorded} are not in it. \
         Put the right database back, or adopt this one deliberately: rm '{}'",
        db.display(),
        id_file.display(),
        id_file.display()
    ))
}

/// Writes `id` to `path` whole or not at all: a finished private file, hard-linked into
/// place (which never replaces a file, and never follows a link). `false` when a file was
/// there already (another opener of the same fresh store wrote it).
fn write_once(path: &Path, id: &str) -> std::io::Result<bool> {
    // One name per call: threads of one process may open a fresh store at the same time.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = files::beside(path, &format!(".{}.{call}.partial", std::process::id()));
    let _ = fs::remove_file(&partial);
    let written = files::create_private(&partial).and_then(|mut file| {
        file.write_all(format!("{id}\n").as_bytes())?;
        file.sync_all()
    });
    let linked = written.and_then(|()| match fs::hard_link(&partial, path) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error),
    });
    let _ = fs::remove_file(&partial);
    linked
}

/// Whether `text` is a store id: 32 lower-case hex digits.
fn is_id(text: &str) -> bool {
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

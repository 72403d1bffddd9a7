//! The digest queue in the state store: items queued as the watcher sees them, cut into one
//! digest a day, marked delivered once someone has read it.
//!
//! This module owns the `digests` and `digest_items` tables. Queuing records a
//! `digest-queued` event and marking read records `digest-delivered`, each in the same
//! transaction as the change, so the event log never disagrees with the queue. A cut is one
//! transaction too: two watchers cutting at once make one digest, and the second finds
//! nothing left to cut. Item text is made inert and short here whatever the caller passed;
//! keeping paths and log lines out of it is still the caller's duty. It decides nothing —
//! when to cut is the watcher's call, how to group and what to call out is
//! [`crate::core::digest`]'s.

use std::collections::HashMap;

use chrono::{DateTime, Local, NaiveTime, Utc};
use rusqlite::params;

pub use crate::core::digest::{Digest, DigestCategory, DigestItem};

use super::{Kind, NewEvent, Result, Store, from_ms, insert_event, ms};
use crate::core::digest::short_text;

/// The next cut after `after`: `digest_at` on this machine's local wall clock (DST
/// handled as [`crate::core::digest::next_cut_in`] describes).
pub fn next_cut(after: DateTime<Utc>, digest_at: NaiveTime) -> DateTime<Utc> {
    crate::core::digest::next_cut_in(after, digest_at, &Local)
}

/// `planned`, never later than the next `digest_at` after `now` on this machine's wall clock
/// ([`crate::core::digest::next_cut_bounded`]).
pub fn next_cut_bounded(
    planned: DateTime<Utc>,
    now: DateTime<Utc>,
    digest_at: NaiveTime,
) -> DateTime<Utc> {
    crate::core::digest::next_cut_bounded(planned, now, digest_at, &Local)
}

impl Store {
    /// Queues an item for the next digest, timed now. Returns the item's id.
    pub fn queue_digest(
        &mut self,
        job: Option<&str>,
        category: DigestCategory,
        text: &str,
    ) -> Result<i64> {
        self.queue_digest_at(Utc::now(), job, category, text)
    }

    /// Queues an item timed `at` (the watcher's clock, which its tests control), and records
    /// `digest-queued` with the category as its reason.
    pub fn queue_digest_at(
        &mut self,
        at: DateTime<Utc>,
        job: Option<&str>,
        category: DigestCategory,
        text: &str,
    ) -> Result<i64> {
        let (actor, session) = (self.actor, self.session.clone());
        let text = short_text(text);
        self.write(|tx| {
            tx.execute(
                "INSERT INTO digest_items (at_ms, job, category, text) VALUES (?1, ?2, ?3, ?4)",
                params![ms(at), job, category.as_str(), text],
            )?;
            let id = tx.last_insert_rowid();
            let mut event = NewEvent::new(Kind::DigestQueued).reason(category.as_str());
            event.job = job.map(str::to_string);
            insert_event(tx, actor, &session, &event, at)?;
            Ok(id)
        })
    }

    /// Cuts a digest at `at`: every item not yet in a digest and queued at or before `at`
    /// goes into a new one. `None`, and nothing created, when there is nothing to put in it,
    /// so a second cut (or a second watcher's) never makes an empty digest.
    pub fn cut_digest(&mut self, at: DateTime<Utc>) -> Result<Option<i64>> {
        self.write(|tx| {
            let waiting: i64 = tx.query_row(
                "SELECT count(*) FROM digest_items WHERE digest_id IS NULL AND at_ms <= ?1",
                params![ms(at)],
                |row| row.get(0),
            )?;
            if waiting == 0 {
                return Ok(None);
            }
            tx.execute("INSERT INTO digests (cut_ms) VALUES (?1)", params![ms(at)])?;
            let id = tx.last_insert_rowid();
            tx.execute(
                "UPDATE digest_items SET digest_id = ?1 WHERE digest_id IS NULL AND at_ms <= ?2",
                params![id, ms(at)],
            )?;
            Ok(Some(id))
        })
    }

    /// When the newest digest was cut; `None` before the first cut.
    pub fn last_cut(&self) -> Result<Option<DateTime<Utc>>> {
        let cut: Option<i64> =
            self.conn
                .query_row("SELECT max(cut_ms) FROM digests", [], |row| row.get(0))?;
        Ok(cut.map(from_ms))
    }

    /// Cut digests, newest first, each with its items oldest first; only the undelivered
    /// ones unless `include_delivered`.
    pub fn digests(&self, include_delivered: bool) -> Result<Vec<Digest>> {
        let mut statement = self.conn.prepare(
            "SELECT id, cut_ms, delivered_ms FROM digests \
             WHERE ?1 <> 0 OR delivered_ms IS NULL ORDER BY cut_ms DESC, id DESC",
        )?;
        let rows = statement.query_map(params![i64::from(include_delivered)], |row| {
            Ok(Digest {
                id: row.get(0)?,
                cut: from_ms(row.get(1)?),
                delivered: row.get::<_, Option<i64>>(2)?.map(from_ms),
                items: Vec::new(),
            })
        })?;
        let mut digests = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        if digests.is_empty() {
            return Ok(digests);
        }
        // One read for every item; a cut digest's items never change, so reading them after
        // the digests cannot disagree with them.
        let mut by_digest: HashMap<i64, Vec<DigestItem>> = HashMap::new();
        let mut statement = self.conn.prepare(
            "SELECT i.digest_id, i.id, i.at_ms, i.job, i.category, i.text FROM digest_items i \
             JOIN digests d ON d.id = i.digest_id \
             WHERE ?1 <> 0 OR d.delivered_ms IS NULL ORDER BY i.at_ms, i.id",
        )?;
        let rows = statement.query_map(params![i64::from(include_delivered)], |row| {
            Ok((row.get::<_, i64>(0)?, item_from_columns(row, 1)?))
        })?;
        for row in rows {
            let (digest, item) = row?;
            by_digest.entry(digest).or_default().push(item);
        }
        for digest in &mut digests {
            digest.items = by_digest.remove(&digest.id).unwrap_or_default();
        }
        Ok(digests)
    }

    /// The texts of the items of `category` queued since `since`, cut or not, by job.
    pub fn digest_texts_since(
        &self,
        category: DigestCategory,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, String)>> {
        let mut statement = self.conn.prepare(
            "SELECT job, text FROM digest_items WHERE category = ?1 AND at_ms >= ?2 \
             AND job IS NOT NULL ORDER BY id",
        )?;
        let rows = statement.query_map(
            rusqlite::params![category.as_str(), since.timestamp_millis()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The items queued but not cut into a digest yet, oldest first.
    pub fn pending_digest(&self) -> Result<Vec<DigestItem>> {
        let mut statement = self.conn.prepare(
            "SELECT id, at_ms, job, category, text FROM digest_items WHERE digest_id IS NULL \
             ORDER BY at_ms, id",
        )?;
        let rows = statement.query_map([], |row| item_from_columns(row, 0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Marks a digest read (the dashboard's mark-read) and records `digest-delivered`. Once
    /// only: `false` when it was delivered already or no such digest exists, so two screens
    /// marking the same digest record one delivery.
    pub fn mark_digest_delivered(&mut self, id: i64) -> Result<bool> {
        let (actor, session) = (self.actor, self.session.clone());
        self.write(|tx| {
            let now = Utc::now();
            let changed = tx.execute(
                "UPDATE digests SET delivered_ms = ?2 WHERE id = ?1 AND delivered_ms IS NULL",
                params![id, ms(now)],
            )?;
            if changed == 1 {
                let event = NewEvent::new(Kind::DigestDelivered).reason(format!("digest #{id}"));
                insert_event(tx, actor, &session, &event, now)?;
            }
            Ok(changed == 1)
        })
    }
}

/// Reads `id, at_ms, job, category, text` starting at column `first`. A category this
/// binary does not know (a newer mihari wrote it) reads as `other` rather than failing the
/// whole digest.
fn item_from_columns(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<DigestItem> {
    let category: String = row.get(first + 3)?;
    Ok(DigestItem {
        id: row.get(first)?,
        at: from_ms(row.get(first + 1)?),
        job: row.get(first + 2)?,
        category: DigestCategory::parse(&category).unwrap_or(DigestCategory::Other),
        text: row.get(first + 4)?,
    })
}

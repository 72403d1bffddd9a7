//! SQLite progress tables, read-only, and the time-text parsing probes share.
//!
//! This module owns one query per pass — `max(time_column)` and `count(*)`, with the
//! `done_column` and `total_column` of the newest row when the table is a status row updated
//! in place — on a connection opened read-only with a short busy timeout, and turning that max
//! into a UTC time: unix time in the declared `time_unit` (integer, real, or digits as text) or
//! ISO-8601 text, where text without an offset is read in the declared `time_zone`. It must
//! never write to the job's database, never create it, never wait long on a writer's lock, and
//! never take a value it cannot read as a time (or as a count) for "no progress": that is a
//! fault that quotes the value.

use std::io;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::config::{ProgressTable, TimeUnit, TimeZoneName};
use crate::core::text::inert;
use crate::core::{Reading, TableReading};

/// How long a read waits on a writer holding a lock the read needs. In WAL mode readers
/// never wait; in rollback-journal mode a writer's commit blocks readers briefly. A pass must
/// not hang on a job's database, so a longer wait is a fault ("database is locked").
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(250);

/// Unix seconds beyond this (the year 5138) are almost surely milliseconds or microseconds.
/// Taken as seconds they would put the last progress thousands of years in the future and a
/// stalled job would look fresh forever, so they are a fault instead.
const MAX_UNIX_SECONDS: f64 = 1e11;

/// A time read in milliseconds or microseconds that lands before this (2001-09-09) was almost
/// surely written in a coarser unit: seconds read as milliseconds land in January 1970, and
/// the job would look stalled for half a century. A fault instead, naming the key.
const MIN_UNIX_SECONDS_IN_FINE_UNITS: f64 = 1e9;

/// `max(time_column)` and `count(*)` of the table (and, with `done_column`, done and total from
/// the newest row). Empty when the database file does not exist, the table has no rows, or
/// every time is NULL.
pub fn read_progress_table(spec: &ProgressTable) -> Reading<TableReading> {
    let db = spec.db.as_path();
    let db_modified = match std::fs::metadata(db) {
        Ok(meta) if meta.is_file() => super::files::modified_utc(&meta).ok(),
        Ok(meta) => return super::fault(db, super::files::not_a_file(&meta)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Reading::Empty,
        Err(error) => return super::fault(db, error),
    };
    // Read-only and without URI parsing: a path is only ever a path, and nothing is created.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(db, flags) {
        Ok(conn) => conn,
        Err(error) => return super::fault(db, error),
    };
    if let Err(error) = conn.busy_timeout(BUSY_TIMEOUT) {
        return super::fault(db, error);
    }
    let sql = newest_row_sql(
        &spec.table,
        &spec.time_column,
        spec.done_column.as_deref(),
        spec.total_column.as_deref(),
    );
    // Naive local times in the hour a DST change repeats are read as the reading nearest the
    // database's own modification time: the writer wrote it then.
    let near = db_modified.unwrap_or_else(Utc::now);
    let row = conn.query_row(&sql, [], |row| {
        let rows: i64 = row.get(1)?;
        let newest = match row.get_ref(0)? {
            ValueRef::Null => None,
            value => Some(time_of_value(value, spec.time_unit, spec.time_zone, near)),
        };
        let done = match &spec.done_column {
            Some(column) => Some(count_of_value(row.get_ref(2)?, column)),
            None => None,
        };
        let total = match &spec.total_column {
            Some(column) => Some(count_of_value(row.get_ref(3)?, column)),
            None => None,
        };
        Ok((newest, rows, done, total))
    });
    let what = format!("{}.{}", spec.table, spec.time_column);
    let cannot = |error: &dyn std::fmt::Display| {
        Reading::Fault(inert(&format!(
            "cannot read '{what}' in '{}': {error}",
            db.display()
        )))
    };
    let (newest, rows, done, total) = match row {
        Ok((_, 0, _, _) | (None, _, _, _)) => return Reading::Empty,
        Ok((Some(Ok(newest)), rows, done, total)) => (newest, rows, done, total),
        Ok((Some(Err(error)), ..)) => return cannot(&error),
        Err(error) => return cannot(&error),
    };
    let in_newest_row = |value: Option<Result<Option<u64>, String>>| -> Result<_, String> {
        match value {
            None => Ok(None),
            Some(Ok(count)) => Ok(count),
            Some(Err(error)) => Err(format!(
                "{error} in the newest row (by '{}') of '{}' in '{}'",
                spec.time_column,
                spec.table,
                db.display()
            )),
        }
    };
    let done = match in_newest_row(done) {
        Ok(None) if spec.done_column.is_some() => {
            return Reading::Fault(inert(&format!(
                "cannot read done: '{}' is NULL in the newest row (by '{}') of '{}' in '{}'",
                spec.done_column.as_deref().unwrap_or_default(),
                spec.time_column,
                spec.table,
                db.display()
            )));
        }
        Ok(done) => done,
        Err(error) => return Reading::Fault(inert(&format!("cannot read done: {error}"))),
    };
    // A NULL total is a total not known yet: the job has not said how many there are.
    let total = match in_newest_row(total) {
        Ok(total) => total,
        Err(error) => return Reading::Fault(inert(&format!("cannot read the total: {error}"))),
    };
    Reading::Found(TableReading {
        newest,
        rows: u64::try_from(rows).unwrap_or(0),
        done,
        total,
    })
}

/// The query: `max(time_column)`, `count(*)`, and the done and total columns (NULL when not
/// declared). SQLite takes bare columns beside a single `max()` from the row that holds the
/// max, so done and total come from the newest row in the same one scan. Every name is quoted
/// as an identifier and qualified with the table alias: SQLite takes an unknown double-quoted
/// bare name for a string literal (so a missing column would silently read as the text of its
/// own name), but never a qualified one.
pub fn newest_row_sql(
    table: &str,
    column: &str,
    done_column: Option<&str>,
    total_column: Option<&str>,
) -> String {
    let bare = |name: Option<&str>| {
        name.map_or("NULL".to_string(), |name| {
            format!("\"t\".{}", quote_identifier(name))
        })
    };
    format!(
        "SELECT max(\"t\".{}), count(*), {}, {} FROM {} AS \"t\"",
        quote_identifier(column),
        bare(done_column),
        bare(total_column),
        quote_identifier(table)
    )
}

/// A done or total value as a count: a whole, non-negative number (an integer, a real with
/// no fraction, or digits as text); `None` for NULL.
fn count_of_value(value: ValueRef<'_>, column: &str) -> Result<Option<u64>, String> {
    let shown = |text: &str| format!("'{column}' is '{}', not a count", excerpt(text));
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) => u64::try_from(n)
            .map(Some)
            .map_err(|_| shown(&n.to_string())),
        ValueRef::Real(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n < 1.8e19 => {
            Ok(Some(n as u64))
        }
        ValueRef::Real(n) => Err(shown(&n.to_string())),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            text.trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| shown(&text))
        }
        ValueRef::Blob(bytes) => Err(format!(
            "'{column}' is a {}-byte blob, not a count",
            bytes.len()
        )),
    }
}

/// `name` as a SQLite identifier: in double quotes, embedded double quotes doubled. The whole
/// name is one identifier: "main.progress" names a table with a dot in its name.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A column value as a UTC time: numbers (and digits as text) in `unit`, text without an
/// offset in `zone`.
fn time_of_value(
    value: ValueRef<'_>,
    unit: TimeUnit,
    zone: TimeZoneName,
    near: DateTime<Utc>,
) -> Result<DateTime<Utc>, String> {
    match value {
        ValueRef::Integer(count) => unix_time(count as f64, unit, &count.to_string()),
        ValueRef::Real(count) => unix_time(count, unit, &count.to_string()),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            if let Some((whole, fraction)) = split_decimal(text.trim()) {
                let count: f64 = format!("{whole}.{fraction}")
                    .parse()
                    .map_err(|_| format!("'{}' is not a number", excerpt(&text)))?;
                return unix_time(count, unit, &text);
            }
            match parse_time_text(&text) {
                Some(TimeText::Zoned(time)) => Ok(time.to_utc()),
                Some(TimeText::Unix(time)) => Ok(time),
                Some(TimeText::Naive(naive)) => naive_in(naive, zone, near).ok_or_else(|| {
                    format!(
                        "'{}' does not exist in the local time zone (skipped by a daylight \
                         saving change)",
                        excerpt(&text)
                    )
                }),
                None => Err(format!(
                    "'{}' is neither unix time nor ISO-8601 time",
                    excerpt(&text)
                )),
            }
        }
        ValueRef::Blob(bytes) => Err(format!(
            "the newest value is a {}-byte blob, not a time",
            bytes.len()
        )),
        ValueRef::Null => Err("the newest value is NULL".to_string()),
    }
}

/// A naive time read in `zone`.
fn naive_in(
    naive: NaiveDateTime,
    zone: TimeZoneName,
    near: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match zone {
        TimeZoneName::Utc => Some(naive.and_utc()),
        TimeZoneName::Local => super::manifest::local_to_utc(naive, &chrono::Local, near),
    }
}

/// `count` of `unit` since 1970 as a time, refusing a count that is surely in another unit.
fn unix_time(count: f64, unit: TimeUnit, shown: &str) -> Result<DateTime<Utc>, String> {
    let secs = count / unit.per_second() as f64;
    if unit != TimeUnit::Seconds && secs.is_finite() && secs.abs() < MIN_UNIX_SECONDS_IN_FINE_UNITS
    {
        return Err(format!(
            "'{}' read in time_unit '{}' is before 2001: if the table holds seconds, set \
             progress_table.time_unit to 's'",
            excerpt(shown),
            unit.as_str()
        ));
    }
    if unit == TimeUnit::Seconds && secs.is_finite() && secs.abs() >= MAX_UNIX_SECONDS {
        return Err(format!(
            "'{}' is not unix seconds: if the table holds milliseconds or microseconds, set \
             progress_table.time_unit to 'ms' or 'us'",
            excerpt(shown)
        ));
    }
    unix_seconds(secs, shown)
}

/// Unix seconds, with fractions kept to the nanosecond.
fn unix_seconds(secs: f64, shown: &str) -> Result<DateTime<Utc>, String> {
    if !secs.is_finite() || secs.abs() >= MAX_UNIX_SECONDS {
        return Err(format!(
            "'{}' is not unix seconds (milliseconds?)",
            excerpt(shown)
        ));
    }
    let whole = secs.floor();
    let nanos = ((secs - whole) * 1e9).round().min(999_999_999.0) as u32;
    DateTime::from_timestamp(whole as i64, nanos)
        .ok_or_else(|| format!("'{}' is out of range", excerpt(shown)))
}

/// A time written as text: with its offset, or naive (no offset), in which case the caller
/// decides what the clock on the wall was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeText {
    Zoned(DateTime<FixedOffset>),
    Naive(NaiveDateTime),
    /// Digits only: unix seconds.
    Unix(DateTime<Utc>),
}

impl TimeText {
    /// SQLite's convention: `datetime('now')` writes naive UTC.
    pub fn to_utc_assuming_naive_is_utc(self) -> DateTime<Utc> {
        match self {
            TimeText::Zoned(time) => time.to_utc(),
            TimeText::Naive(time) => time.and_utc(),
            TimeText::Unix(time) => time,
        }
    }
}

/// Parses ISO-8601 / RFC 3339 time text: "2024-05-01T12:00:00+09:00", "...Z", with a space
/// for the 'T', with or without fractions; naive "2024-05-01 12:00:00[.fff]" and
/// "2024-05-01T12:00:00[.ffffff]" (also without seconds); or digits only, as unix seconds
/// (optionally with a fraction).
pub fn parse_time_text(text: &str) -> Option<TimeText> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Some((whole, fraction)) = split_decimal(text) {
        let secs: f64 = format!("{whole}.{fraction}").parse().ok()?;
        return unix_seconds(secs, text).ok().map(TimeText::Unix);
    }
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Some(TimeText::Zoned(time));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f%:z",
        "%Y-%m-%d %H:%M:%S%.f%:z",
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%d %H:%M:%S%.f%z",
        "%Y-%m-%dT%H:%M%:z",
        "%Y-%m-%d %H:%M%:z",
    ] {
        if let Ok(time) = DateTime::parse_from_str(text, format) {
            return Some(TimeText::Zoned(time));
        }
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(time) = NaiveDateTime::parse_from_str(text, format) {
            return Some(TimeText::Naive(time));
        }
    }
    None
}

/// "1715000000" or "1715000000.25" as (whole, fraction) digit strings.
fn split_decimal(text: &str) -> Option<(&str, &str)> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && digits(fraction)).then_some((whole, fraction))
}

/// The first 60 characters of outside text, inert, for messages.
pub(crate) fn excerpt(text: &str) -> String {
    let mut cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    inert(&cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(text: &str) -> Option<DateTime<Utc>> {
        parse_time_text(text).map(TimeText::to_utc_assuming_naive_is_utc)
    }

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("valid")
    }

    #[test]
    fn time_text_table() {
        let noon = at(2024, 5, 1, 12, 0, 0);
        let ms = chrono::TimeDelta::milliseconds;
        let rows: &[(&str, Option<DateTime<Utc>>)] = &[
            ("2024-05-01T12:00:00Z", Some(noon)),
            ("2024-05-01T21:00:00+09:00", Some(noon)),
            ("2024-05-01 21:00:00+09:00", Some(noon)),
            ("2024-05-01T21:00:00.250+0900", Some(noon + ms(250))),
            ("2024-05-01T12:00:00", Some(noon)),
            (
                "2024-05-01T12:00:00.123456",
                Some(noon + ms(123) + chrono::TimeDelta::microseconds(456)),
            ),
            ("2024-05-01 12:00:00", Some(noon)),
            ("2024-05-01 12:00:00.5", Some(noon + ms(500))),
            ("2024-05-01 12:00", Some(noon)),
            (" 2024-05-01 12:00:00 ", Some(noon)),
            ("1714564800", Some(noon)),
            ("1714564800.5", Some(noon + ms(500))),
            ("", None),
            ("yesterday", None),
            ("2024-13-01 12:00:00", None),
            ("2024-05-01", None),
            ("1714564800000", None),
            ("-5", None),
            ("1.2.3", None),
        ];
        for (text, expected) in rows {
            assert_eq!(&utc(text), expected, "{text:?}");
        }
    }

    #[test]
    fn identifiers_are_quoted_whole() {
        assert_eq!(quote_identifier("progress"), "\"progress\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
        assert_eq!(
            newest_row_sql("x\"; DROP TABLE y; --", "t", None, None),
            "SELECT max(\"t\".\"t\"), count(*), NULL, NULL FROM \"x\"\"; DROP TABLE y; --\" AS \"t\""
        );
        assert_eq!(
            newest_row_sql("status", "at", Some("done"), Some("to\"tal")),
            "SELECT max(\"t\".\"at\"), count(*), \"t\".\"done\", \"t\".\"to\"\"tal\" FROM \"status\" AS \"t\""
        );
    }

    #[test]
    fn unix_seconds_keep_fractions_and_refuse_milliseconds() {
        let time = unix_seconds(1_714_564_800.25, "x").expect("in range");
        assert_eq!(time.timestamp_subsec_millis(), 250);
        assert!(unix_seconds(1.7e12, "1700000000000").is_err());
        assert!(unix_seconds(f64::NAN, "NaN").is_err());
    }
}

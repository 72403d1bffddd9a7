//! SQLite progress tables, read-only, and the time-text parsing probes share.
//!
//! This module owns one query per pass — `max(time_column)` and `count(*)` — on a connection
//! opened read-only with a short busy timeout, and turning that max into a UTC time: unix
//! seconds (integer, real, or digits as text) or ISO-8601 text. It must never write to the
//! job's database, never create it, never wait long on a writer's lock, and never take a value
//! it cannot read as a time for "no progress": that is a fault that quotes the value.

use std::io;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::config::ProgressTable;
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

/// `max(time_column)` and `count(*)` of the table. Empty when the database file does not
/// exist, the table has no rows, or every time is NULL.
pub fn read_progress_table(spec: &ProgressTable) -> Reading<TableReading> {
    let db = spec.db.as_path();
    match std::fs::metadata(db) {
        Ok(meta) if meta.is_file() => {}
        Ok(meta) => return super::fault(db, super::files::not_a_file(&meta)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Reading::Empty,
        Err(error) => return super::fault(db, error),
    }
    // Read-only and without URI parsing: a path is only ever a path, and nothing is created.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(db, flags) {
        Ok(conn) => conn,
        Err(error) => return super::fault(db, error),
    };
    if let Err(error) = conn.busy_timeout(BUSY_TIMEOUT) {
        return super::fault(db, error);
    }
    let sql = max_and_count_sql(&spec.table, &spec.time_column);
    let row = conn.query_row(&sql, [], |row| {
        let rows: i64 = row.get(1)?;
        let newest = match row.get_ref(0)? {
            ValueRef::Null => None,
            value => Some(time_of_value(value)),
        };
        Ok((newest, rows))
    });
    let what = format!("{}.{}", spec.table, spec.time_column);
    match row {
        Ok((_, 0) | (None, _)) => Reading::Empty,
        Ok((Some(Ok(newest)), rows)) => Reading::Found(TableReading {
            newest,
            rows: u64::try_from(rows).unwrap_or(0),
        }),
        Ok((Some(Err(error)), _)) => Reading::Fault(inert(&format!(
            "cannot read '{what}' in '{}': {error}",
            db.display()
        ))),
        Err(error) => Reading::Fault(inert(&format!(
            "cannot read '{what}' in '{}': {error}",
            db.display()
        ))),
    }
}

/// The query, with both names quoted as identifiers. The column is qualified with the table
/// alias: SQLite takes an unknown double-quoted bare name for a string literal (so a missing
/// column would silently read as the text of its own name), but never a qualified one.
pub fn max_and_count_sql(table: &str, column: &str) -> String {
    format!(
        "SELECT max(\"t\".{}), count(*) FROM {} AS \"t\"",
        quote_identifier(column),
        quote_identifier(table)
    )
}

/// `name` as a SQLite identifier: in double quotes, embedded double quotes doubled. The whole
/// name is one identifier: "main.progress" names a table with a dot in its name.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A column value as a UTC time.
fn time_of_value(value: ValueRef<'_>) -> Result<DateTime<Utc>, String> {
    match value {
        ValueRef::Integer(secs) => unix_seconds(secs as f64, &secs.to_string()),
        ValueRef::Real(secs) => unix_seconds(secs, &secs.to_string()),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            parse_time_text(&text)
                .map(|time| time.to_utc_assuming_naive_is_utc())
                .ok_or_else(|| {
                    format!(
                        "'{}' is neither unix seconds nor ISO-8601 time",
                        excerpt(&text)
                    )
                })
        }
        ValueRef::Blob(bytes) => Err(format!(
            "the newest value is a {}-byte blob, not a time",
            bytes.len()
        )),
        ValueRef::Null => Err("the newest value is NULL".to_string()),
    }
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
            max_and_count_sql("x\"; DROP TABLE y; --", "t"),
            "SELECT max(\"t\".\"t\"), count(*) FROM \"x\"\"; DROP TABLE y; --\" AS \"t\""
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

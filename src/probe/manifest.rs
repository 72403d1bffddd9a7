//! Run manifests of phased pipelines (seed 004): which run, which phase, which phases are done.
//!
//! This module owns reading the manifest a pipeline rewrites before and after every phase —
//! `{"run_id", "current_phase", "phase_results": {phase: true}, "updated_at"}` — and turning it
//! into a [`ManifestReading`]. Parsing ([`parse_manifest`]) is pure and apart from the file
//! I/O ([`read_manifest`]). It never writes the manifest, never guesses a time it cannot read
//! (a present but unreadable `updated_at` is a fault, not the mtime), and makes every string
//! it keeps inert.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::table::{TimeText, excerpt, parse_time_text};
use crate::core::text::inert;
use crate::core::{ManifestReading, Reading};

/// A manifest is a few hundred bytes; past this it is not one, and reading it whole every
/// pass would cost more than the answer is worth.
const MANIFEST_READ_LIMIT: u64 = 4 * 1024 * 1024;

/// Reads the run manifest at `path`. Empty when it does not exist (the seed deletes it at
/// cleanup); a fault when it cannot be read or is not a valid manifest (a half-written file
/// included: the seed rewrites it in place).
pub fn read_manifest(path: &Path) -> Reading<ManifestReading> {
    let super::files::SmallFile {
        modified, bytes, ..
    } = match super::files::read_small(path, super::safe_open::Role::Manifest, MANIFEST_READ_LIMIT)
    {
        Ok(file) => file,
        Err(reading) => return super::files::absent(reading),
    };
    if bytes.len() as u64 > MANIFEST_READ_LIMIT {
        return super::fault(
            path,
            format!(
                "larger than {} MiB: not a run manifest",
                MANIFEST_READ_LIMIT >> 20
            ),
        );
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => return super::fault(path, format!("not UTF-8 text: {error}")),
    };
    match parse_manifest(&text, modified) {
        Ok(reading) => Reading::Found(reading),
        Err(error) => super::fault(path, error),
    }
}

/// Parses a manifest's text. `mtime` stands in for a missing or null `updated_at`. A naive
/// `updated_at` is local time, as Python's `datetime.now().isoformat()` writes it.
pub fn parse_manifest(text: &str, mtime: DateTime<Utc>) -> Result<ManifestReading, String> {
    parse_manifest_in(text, mtime, &chrono::Local)
}

/// [`parse_manifest`] with the time zone naive times are read in, so tests need not depend on
/// the machine's zone.
pub fn parse_manifest_in<Tz: TimeZone>(
    text: &str,
    mtime: DateTime<Utc>,
    zone: &Tz,
) -> Result<ManifestReading, String> {
    let body = text.trim_start();
    if !body.is_empty() && !body.starts_with('{') {
        // serde would read a JSON list into the struct field by field; a manifest is an object.
        return Err(format!(
            "the manifest is not a JSON object: '{}'",
            excerpt(body)
        ));
    }
    let raw: RawManifest =
        serde_json::from_str(text).map_err(|e| inert(&format!("invalid manifest JSON: {e}")))?;
    let updated_at = match raw.updated_at {
        None => mtime,
        Some(Value::String(text)) => match parse_time_text(&text) {
            Some(TimeText::Zoned(time)) => time.to_utc(),
            Some(TimeText::Unix(time)) => time,
            Some(TimeText::Naive(time)) => local_to_utc(time, zone, mtime).ok_or_else(|| {
                format!(
                    "'updated_at' '{}' does not exist in the local time zone",
                    excerpt(&text)
                )
            })?,
            None => {
                return Err(format!(
                    "'updated_at' '{}' is not ISO-8601 time",
                    excerpt(&text)
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "'updated_at' is {}, not ISO-8601 text",
                describe(&other)
            ));
        }
    };
    let mut completed_phases = Vec::new();
    let mut failed_phases = Vec::new();
    for (phase, result) in raw.phase_results.0 {
        if is_completed(&result) {
            completed_phases.push(inert(&phase));
        } else if is_failed(&result) {
            failed_phases.push(inert(&phase));
        }
    }
    Ok(ManifestReading {
        updated_at,
        run_id: label(raw.run_id, "run_id")?,
        current_phase: label(raw.current_phase, "current_phase")?,
        completed_phases,
        failed_phases,
    })
}

/// A phase is completed when its result is JSON `true`, and only then. Python's truthiness
/// would also count "failed", 1 or {"error": ...}; a watcher that reports a failed phase as
/// done is worse than one that reports it as not done.
pub fn is_completed(result: &Value) -> bool {
    result == &Value::Bool(true)
}

/// A phase has failed when its result says so as pipelines write it: `false`, the text
/// `"failed"` or `"error"` (in any case), or an object whose `ok` is `false`
/// (`{"ok": false, "error": "..."}`). Anything else that is not `true` (null, a number,
/// `"pending"`) is neither done nor failed: not yet decided.
pub fn is_failed(result: &Value) -> bool {
    match result {
        Value::Bool(ok) => !ok,
        Value::String(text) => {
            let text = text.trim();
            text.eq_ignore_ascii_case("failed") || text.eq_ignore_ascii_case("error")
        }
        Value::Object(fields) => fields.get("ok") == Some(&Value::Bool(false)),
        _ => false,
    }
}

/// A naive local time as UTC. In the hour a DST change repeats, the reading closest to the
/// file's mtime is the one the writer meant (it wrote the file then); a time skipped by DST
/// was never written by `datetime.now()` and is an error. Progress tables read naive local
/// text the same way.
pub(super) fn local_to_utc<Tz: TimeZone>(
    naive: NaiveDateTime,
    zone: &Tz,
    mtime: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match zone.from_local_datetime(&naive) {
        LocalResult::Single(time) => Some(time.to_utc()),
        LocalResult::Ambiguous(early, late) => Some(nearest(early.to_utc(), late.to_utc(), mtime)),
        LocalResult::None => None,
    }
}

/// Of two readings of an ambiguous local time, the one closer to `mtime` (the earlier on a tie).
fn nearest(early: DateTime<Utc>, late: DateTime<Utc>, mtime: DateTime<Utc>) -> DateTime<Utc> {
    if (early - mtime).abs() <= (late - mtime).abs() {
        early
    } else {
        late
    }
}

/// `run_id` or `current_phase`: text (or a number written as text), inert; absent or null is
/// `None`; anything else is an error.
fn label(value: Option<Value>, name: &str) -> Result<Option<String>, String> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(inert(&text))),
        Some(Value::Number(number)) => Ok(Some(number.to_string())),
        Some(other) => Err(format!("'{name}' is {}, not text", describe(&other))),
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The fields mihari reads; others are ignored. `Option<Value>` reads both a missing field and
/// `null` as `None`.
#[derive(Deserialize)]
struct RawManifest {
    #[serde(default)]
    run_id: Option<Value>,
    #[serde(default)]
    current_phase: Option<Value>,
    #[serde(default)]
    phase_results: PhaseResults,
    #[serde(default)]
    updated_at: Option<Value>,
}

/// `phase_results` in the order the manifest lists it (the order the phases ran), which a
/// `serde_json::Map` without the crate-wide `preserve_order` feature would sort away.
#[derive(Default)]
struct PhaseResults(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for PhaseResults {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PhaseResultsVisitor)
    }
}

struct PhaseResultsVisitor;

impl<'de> Visitor<'de> for PhaseResultsVisitor {
    type Value = PhaseResults;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'phase_results' as an object of phase -> result")
    }

    fn visit_unit<E: de::Error>(self) -> Result<PhaseResults, E> {
        Ok(PhaseResults::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PhaseResults, A::Error> {
        let mut phases: Vec<(String, Value)> = Vec::new();
        // Where each phase sits in `phases`: a linear search per key made a 4 MiB manifest
        // of distinct phases quadratic (minutes of work on every read).
        let mut place: HashMap<String, usize> = HashMap::new();
        while let Some((phase, result)) = map.next_entry::<String, Value>()? {
            // A repeated key: the last value wins, as in Python's json, at its first place.
            match place.get(&phase).and_then(|&at| phases.get_mut(at)) {
                Some(entry) => entry.1 = result,
                None => {
                    place.insert(phase.clone(), phases.len());
                    phases.push((phase, result));
                }
            }
        }
        Ok(PhaseResults(phases))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    fn mtime() -> DateTime<Utc> {
        DateTime::from_timestamp(1_714_564_800, 0).expect("in range")
    }

    fn tokyo() -> FixedOffset {
        FixedOffset::east_opt(9 * 3600).expect("in range")
    }

    fn parse(text: &str) -> Result<ManifestReading, String> {
        parse_manifest_in(text, mtime(), &tokyo())
    }

    #[test]
    fn seed_manifest_part_way() {
        let reading = parse(
            r#"{
  "run_id": "20240501-abc",
  "current_phase": "article_generation",
  "phase_results": {
    "loading": true,
    "topic_selection": true,
    "topic_dedup": true
  },
  "updated_at": "2024-05-01T21:00:00.123456"
}"#,
        )
        .expect("parses");
        assert_eq!(reading.run_id.as_deref(), Some("20240501-abc"));
        assert_eq!(reading.current_phase.as_deref(), Some("article_generation"));
        assert_eq!(
            reading.completed_phases,
            ["loading", "topic_selection", "topic_dedup"]
        );
        // Naive 21:00 in Tokyo is 12:00 UTC.
        assert_eq!(
            reading.updated_at,
            mtime() + chrono::TimeDelta::microseconds(123_456)
        );
    }

    #[test]
    fn phase_order_is_the_manifests_not_alphabetical() {
        let reading = parse(
            r#"{"run_id": "r", "phase_results": {"zeta": true, "alpha": true, "mid": true}}"#,
        )
        .expect("parses");
        assert_eq!(reading.completed_phases, ["zeta", "alpha", "mid"]);
    }

    #[test]
    fn only_true_completes_a_phase() {
        let reading = parse(
            r#"{"phase_results": {"a": true, "b": false, "c": "failed", "d": 1, "e": null,
                "f": {"ok": true}, "g": true}}"#,
        )
        .expect("parses");
        assert_eq!(reading.completed_phases, ["a", "g"]);
        assert_eq!(reading.failed_phases, ["b", "c"]);
    }

    #[test]
    fn a_failed_phase_is_false_failed_error_or_ok_false_and_nothing_else() {
        let reading = parse(
            r#"{"phase_results": {"fetch": true, "a": false, "b": "failed", "c": "ERROR",
                "d": {"ok": false, "error": "quota"}, "e": {"ok": true}, "f": "pending",
                "g": null, "h": 0, "i": {"error": "no ok field"}, "j": " Failed "}}"#,
        )
        .expect("parses");
        assert_eq!(reading.completed_phases, ["fetch"]);
        assert_eq!(reading.failed_phases, ["a", "b", "c", "d", "j"]);
    }

    #[test]
    fn null_and_missing_fields() {
        let reading = parse(r#"{"run_id": "r", "current_phase": null, "phase_results": {}}"#)
            .expect("parses");
        assert_eq!(reading.current_phase, None);
        assert_eq!(
            reading.updated_at,
            mtime(),
            "missing updated_at is the mtime"
        );
        let reading = parse(r#"{"updated_at": null, "phase_results": null}"#).expect("parses");
        assert_eq!(reading.updated_at, mtime());
        assert_eq!(reading.run_id, None);
        assert!(reading.completed_phases.is_empty());
    }

    #[test]
    fn updated_at_with_an_offset_ignores_the_local_zone() {
        let reading = parse(r#"{"updated_at": "2024-05-01T14:00:00+02:00"}"#).expect("parses");
        assert_eq!(reading.updated_at, mtime());
    }

    #[test]
    fn errors_quote_what_was_wrong() {
        let rows = [
            ("", "invalid manifest JSON"),
            ("{\"run_id\": \"r\", \"phase_res", "invalid manifest JSON"),
            ("[1, 2]", "not a JSON object"),
            (r#"["r", "p", {}, null]"#, "not a JSON object"),
            ("{\"updated_at\": \"last tuesday\"}", "'last tuesday'"),
            ("{\"updated_at\": 12}", "a number"),
            ("{\"run_id\": [1]}", "'run_id' is a list"),
            ("{\"current_phase\": {}}", "'current_phase' is an object"),
            ("{\"phase_results\": [\"a\"]}", "phase_results"),
        ];
        for (text, needle) in rows {
            let error = parse(text).expect_err(text);
            assert!(error.contains(needle), "{text:?}: {error:?}");
        }
    }

    #[test]
    fn outside_text_is_made_inert() {
        let reading = parse(
            r#"{"run_id": "r\u001b]0;pwned\u0007", "current_phase": "p\u202e",
                "phase_results": {"x\u001b[2Jy": true}}"#,
        )
        .expect("parses");
        assert_eq!(reading.run_id.as_deref(), Some("r"));
        assert_eq!(reading.current_phase.as_deref(), Some("p�"));
        assert_eq!(reading.completed_phases, ["xy"]);
        let error = parse("{\"updated_at\": \"\\u001b]0;t\\u0007x\"}").expect_err("bad time");
        assert!(crate::core::text::is_inert(&error), "{error:?}");
    }

    #[test]
    fn repeated_dst_hour_picks_the_reading_nearest_the_mtime() {
        let hour = chrono::TimeDelta::hours(1);
        let early = mtime() - hour;
        let late = mtime();
        assert_eq!(
            nearest(early, late, mtime() + chrono::TimeDelta::seconds(5)),
            late
        );
        assert_eq!(nearest(early, late, early), early);
        assert_eq!(
            nearest(early, late, early + hour / 2),
            early,
            "a tie takes the earlier"
        );
    }
}

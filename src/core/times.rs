//! Times that evidence carries, judged against the moment of judgment: how far ahead of `now`
//! a reading may be before it is a fault, and the words for one that is.
//!
//! A reading stamped in the future used to count as age 0, so a frozen writer whose table
//! holds naive local times read as UTC (nine hours ahead in Tokyo) looked fresh forever. A
//! small lead is only clock skew between writers (a file server, a second process's clock);
//! past [`FUTURE_TOLERANCE_SEC`] it is a wrong clock or a wrong time zone, and the reading is
//! a fault, never an age. Pure: `now` is an argument.

use chrono::{DateTime, Utc};

use super::assess::fmt_secs;

/// How far in the future a reading may be and still be taken as "now" (clock skew).
pub const FUTURE_TOLERANCE_SEC: i64 = 60;

/// When `at` is more than [`FUTURE_TOLERANCE_SEC`] after `now`: "in the future by 9 h 00 min:
/// clock or time zone?".
pub fn in_the_future(at: DateTime<Utc>, now: DateTime<Utc>) -> Option<String> {
    let ahead_ms = (at - now).num_milliseconds();
    if ahead_ms <= FUTURE_TOLERANCE_SEC * 1000 {
        return None;
    }
    Some(format!(
        "in the future by {}: clock or time zone?",
        fmt_ahead(ahead_ms as f64 / 1000.0)
    ))
}

/// A lead in words, to the second below 1000 s and to the nearest minute above: a naive time
/// read in the wrong zone is whole hours ahead less the seconds since it was written, and
/// "8 h 59 min" would hide the "9 h" that names the zone.
fn fmt_ahead(secs: f64) -> String {
    if secs < 1000.0 {
        fmt_secs(secs)
    } else {
        fmt_secs((secs / 60.0).round() * 60.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_minute_ahead_is_skew_and_more_is_a_fault() {
        let now = Utc.with_ymd_and_hms(2026, 11, 29, 9, 0, 0).unwrap();
        let secs = chrono::Duration::milliseconds;
        assert_eq!(in_the_future(now + secs(60_000), now), None);
        assert_eq!(in_the_future(now - secs(3_600_000), now), None);
        assert_eq!(
            in_the_future(now + secs(61_000), now).as_deref(),
            Some("in the future by 61 s: clock or time zone?")
        );
        assert_eq!(
            in_the_future(now + secs(9 * 3_600_000 - 4_000), now).as_deref(),
            Some("in the future by 9 h 00 min: clock or time zone?")
        );
    }
}

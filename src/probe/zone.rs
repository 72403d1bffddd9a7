//! The time zone people read times in: the machine's (`TZ`, else `/etc/localtime`, as chrono's
//! `Local` and the C library read them), or UTC.
//!
//! The dashboard, `check`'s table, the events table, the approval list and the digest show
//! local times and name the zone once in their header ("times in JST (+09:00)"); JSON stays
//! RFC 3339 in UTC (SPEC §8) and never goes through here. A [`Zone`] is a value handed to the
//! code that formats, so a snapshot test passes [`Zone::Utc`] and draws the same screen on any
//! machine. Reading the zone's abbreviation asks the C library (`localtime_r`'s `tm_zone`),
//! because chrono knows offsets but not the names operators know their zone by. Nothing here
//! judges a job or writes anything.

use chrono::{DateTime, Local, Offset, TimeZone, Utc};

/// Where times are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// UTC, for snapshot tests and for machines whose zone is UTC.
    Utc,
    /// The machine's zone, as `TZ` or `/etc/localtime` say.
    Local,
}

impl Zone {
    /// The machine's zone: what every human-readable output uses.
    pub fn machine() -> Zone {
        Zone::Local
    }

    /// `at` in this zone, written with chrono's `fmt` (no zone in it: the header names it).
    pub fn format(self, at: DateTime<Utc>, fmt: &str) -> String {
        match self {
            Zone::Utc => at.format(fmt).to_string(),
            Zone::Local => at.with_timezone(&Local).format(fmt).to_string(),
        }
    }

    /// Seconds east of UTC at `at` (a zone with summer time has two).
    pub fn offset_sec(self, at: DateTime<Utc>) -> i32 {
        match self {
            Zone::Utc => 0,
            Zone::Local => Local
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
        }
    }

    /// The zone's name at `at` as operators know it: "JST (+09:00)", "CEST (+02:00)", "UTC";
    /// "UTC+04:00" for a zone whose only abbreviation is its offset.
    pub fn name(self, at: DateTime<Utc>) -> String {
        let offset = self.offset_sec(at);
        let sign = if offset < 0 { '-' } else { '+' };
        let hhmm = format!(
            "{sign}{:02}:{:02}",
            offset.unsigned_abs() / 3600,
            offset.unsigned_abs() % 3600 / 60
        );
        let abbreviation = match self {
            Zone::Utc => Some("UTC".to_string()),
            Zone::Local => abbreviation(at),
        }
        .filter(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_alphabetic()));
        match abbreviation {
            Some(name) if name == "UTC" && offset == 0 => name,
            Some(name) => format!("{name} ({hhmm})"),
            None => format!("UTC{hhmm}"),
        }
    }

    /// The zone's abbreviation alone at `at` ("JST", "UTC", "UTC+04:00"), where a line has no
    /// room for the offset.
    pub fn short_name(self, at: DateTime<Utc>) -> String {
        let name = self.name(at);
        name.split(" (").next().unwrap_or(&name).to_string()
    }

    /// The words a header names the zone with, once: "times in JST (+09:00)".
    pub fn header(self, at: DateTime<Utc>) -> String {
        format!("times in {}", self.name(at))
    }

    /// `text` with every "2026-11-29 08:59:00 UTC" in it written in this zone ("2026-11-29
    /// 17:59:00 JST"). Reasons are judged by the pure core, which knows no zone and stamps
    /// UTC; the same words go to JSON unchanged, and a person's screen gets them here.
    pub fn rewrite_utc_stamps(self, text: &str) -> String {
        if self == Zone::Utc || !text.contains(" UTC") {
            return text.to_string();
        }
        static STAMP: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            regex::Regex::new(r"\b(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC\b")
                .expect("the stamp pattern compiles")
        });
        STAMP
            .replace_all(text, |caps: &regex::Captures<'_>| {
                match chrono::NaiveDateTime::parse_from_str(&caps[1], "%Y-%m-%d %H:%M:%S") {
                    Ok(naive) => {
                        let at = naive.and_utc();
                        format!(
                            "{} {}",
                            self.format(at, "%Y-%m-%d %H:%M:%S"),
                            self.short_name(at)
                        )
                    }
                    Err(_) => caps[0].to_string(),
                }
            })
            .into_owned()
    }
}

/// The local zone's abbreviation at `at` ("JST", "CEST"), from the C library; `None` when it
/// has none to give.
fn abbreviation(at: DateTime<Utc>) -> Option<String> {
    let time: libc::time_t = at.timestamp();
    // SAFETY: `tm` is a plain C struct that localtime_r fills; an all-zero value is a valid
    // starting point. localtime_r is the thread-safe form, and `tm_zone`, when set, points at
    // a NUL-terminated string the C library keeps for the life of the process.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&time, &mut tm).is_null() || tm.tm_zone.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr(tm.tm_zone)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_is_named_once_without_an_offset() {
        let at = Utc::now();
        assert_eq!(Zone::Utc.name(at), "UTC");
        assert_eq!(Zone::Utc.header(at), "times in UTC");
        let noon = DateTime::from_timestamp(1_764_590_400, 0).expect("time");
        assert_eq!(Zone::Utc.format(noon, "%Y-%m-%d %H:%M"), "2025-12-01 12:00");
    }
}

//! The meters real tools print, read frame by frame: curl, wget, rsync, pv and dd.
//!
//! Each format here was taken from the tool itself, run on this machine (the captures are
//! `tests/fixtures/meters/*.log`), not from memory. This module owns turning one frame (the
//! text between two '\r' or '\n') into a [`Frame`]: the figure that must move (bytes, or a
//! percent), the total where the tool prints one, its rate and time left where it prints
//! them, and the tool's own clock (the time it has been running) where it prints one, with
//! every unit as that tool means it (curl's `k` and wget's `K` are 1024, dd's `kB` is 1000).
//! It reads no file and judges nothing: [`super::log_progress`] searches the frames and
//! compares them.

use std::sync::OnceLock;

use regex::{Captures, Regex};

use crate::core::{Figure, LogProgressReading};

/// One frame read: what it says, and the clock the tool printed in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub reading: LogProgressReading,
    /// Seconds the tool says it has been running when it drew this frame (curl's "Time
    /// Spent", dd's seconds, tqdm's elapsed, `pv -t`'s timer): what tells how long a figure
    /// has stood still from the frames alone.
    pub clock: Option<f64>,
}

/// A reading with nothing but its figures; the caller fills in the rest.
pub fn reading(
    done: Option<u64>,
    total: Option<u64>,
    percent: Option<f64>,
    figure: Figure,
) -> LogProgressReading {
    LogProgressReading {
        done,
        total,
        percent,
        rate_per_sec: None,
        remaining_sec: None,
        frame: String::new(),
        from: None,
        figure,
        moved: None,
        fell: None,
    }
}

fn compiled(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("a meter pattern compiles"))
}

/// A size with a unit letter as a tool prints it: `4882k`, `1.91M`, `488KiB`, `1,200,000`,
/// in steps of `base` (1024 or 1000). `None` for anything else (`--.-`).
pub fn size(number: &str, unit: &str, base: f64) -> Option<f64> {
    let value = number.replace(',', "").parse::<f64>().ok()?;
    let letter = unit.trim().chars().next().map(|c| c.to_ascii_uppercase());
    let power = match letter {
        None | Some('B') => 0,
        Some('K') => 1,
        Some('M') => 2,
        Some('G') => 3,
        Some('T') => 4,
        Some('P') => 5,
        Some('E') => 6,
        Some(_) => return None,
    };
    let scaled = value * base.powi(power);
    (scaled.is_finite() && scaled >= 0.0).then_some(scaled)
}

/// `H:MM:SS` or `MM:SS` in seconds; `None` for `--:--:--`.
pub fn clock_seconds(text: &str) -> Option<f64> {
    let mut seconds = 0u64;
    for part in text.trim().split(':') {
        seconds = seconds
            .checked_mul(60)?
            .checked_add(part.parse::<u64>().ok()?)?;
    }
    Some(seconds as f64)
}

/// `1m 5s`, `1m5s`, `2h 3m`, `4d 02h`, `7.6s` in seconds, as wget and curl print them.
fn spelled_seconds(text: &str) -> Option<f64> {
    static PART: OnceLock<Regex> = OnceLock::new();
    let part = compiled(&PART, r"(\d+(?:\.\d+)?)\s*([dhms])");
    let mut total = 0.0;
    let mut any = false;
    for found in part.captures_iter(text) {
        let value: f64 = found[1].parse().ok()?;
        total += value
            * match &found[2] {
                "d" => 86_400.0,
                "h" => 3600.0,
                "m" => 60.0,
                _ => 1.0,
            };
        any = true;
    }
    any.then_some(total)
}

/// curl's time columns: `0:00:11`, `--:--:--`, or `  4d 02h` past 99 hours.
fn curl_time(text: &str) -> Option<f64> {
    if text.contains('d') {
        spelled_seconds(text)
    } else {
        clock_seconds(text)
    }
}

/// curl's meter. The default one has twelve columns (`% Total`, `Total`, `% Received`,
/// `Received`, `% Xferd`, `Xferd`, the two average speeds, time total, spent and left, and
/// the current speed), sizes in steps of 1024 (`4882k`, `12.3M`). With no length from the
/// server it prints the bytes so far as the total and `0` as the percent received: then no
/// total is known. An upload's figure is the bytes sent. `-#` draws `####    45.6%`, and
/// nothing while no byte arrives.
pub fn curl(frame: &str) -> Option<Frame> {
    static METER: OnceLock<Regex> = OnceLock::new();
    static BAR: OnceLock<Regex> = OnceLock::new();
    const SIZE: &str = r"(\d+(?:\.\d+)?)([kMGTPE]?)";
    const TIME: &str = r"(--:--:--|\d+:\d{2}:\d{2}|\d+d\s\d{2}h)";
    let meter = compiled(
        &METER,
        &format!(
            r"^\s*\d{{1,3}}\s+{SIZE}\s+(\d{{1,3}})\s+{SIZE}\s+\d{{1,3}}\s+{SIZE}\s+{SIZE}\s+{SIZE}\s+{TIME}\s+{TIME}\s+{TIME}\s+{SIZE}\s*$"
        ),
    );
    if let Some(found) = meter.captures(frame) {
        let at = |i: usize, j: usize| size(&found[i], &found[j], 1024.0);
        let total = at(1, 2)?;
        let mut moved_percent: u32 = found[3].parse().ok()?;
        let mut received = at(4, 5)?;
        // An upload (`-T`) receives nothing: its figure is the bytes sent ("Xferd"), whose
        // percent is the first column.
        let sent = at(6, 7)?;
        if received == 0.0 && sent > 0.0 {
            received = sent;
            moved_percent = frame.split_whitespace().next()?.parse().ok()?;
        }
        let known = moved_percent > 0 || received < total;
        let mut reading = reading(
            Some(received.round() as u64),
            known.then(|| total.round() as u64).filter(|&t| t > 0),
            None,
            Figure::Bytes,
        );
        reading.rate_per_sec = at(15, 16);
        reading.remaining_sec = curl_time(&found[14]).filter(|_| known);
        return Some(Frame {
            reading,
            clock: curl_time(&found[13]),
        });
    }
    let bar = compiled(&BAR, r"^\s*#*\s+(\d{1,3}(?:\.\d)?)%\s*$");
    let found = bar.captures(frame)?;
    let percent: f64 = found[1].parse().ok()?;
    (0.0..=100.0).contains(&percent).then(|| Frame {
        reading: reading(None, None, Some(percent), Figure::Percent),
        clock: None,
    })
}

/// wget's meters. The bar (`--progress=bar`, on a terminal or with `:force`): `NAME
/// 45%[===>    ] 1.91M  392KB/s  eta 9s`, `--.-KB/s` when nothing arrived of late, `in 20s`
/// on the last frame, and no percent when the length is not known. The dots it writes to a
/// file (`-o`, or output that is not a terminal): `1950K .......... 40% 6.15K 19s`, one line
/// per 50 KiB (`dot:binary` 384 KiB, `dot:mega` 3 MiB), `=20s` on the last. Sizes and rates
/// are in steps of 1024.
pub fn wget(frame: &str) -> Option<Frame> {
    static BAR: OnceLock<Regex> = OnceLock::new();
    static DOTS: OnceLock<Regex> = OnceLock::new();
    let bar = compiled(
        &BAR,
        r"(?:(\d{1,3})%)?\[[ =>+<-]*\]\s+(\d+(?:[.,]\d+)?)([KMGT]?)\s+(--\.-|\d+(?:[.,]\d+)?)([KMGT]?)B/s(?:\s+(?:eta\s+((?:\d+[dhms]\s?)+)|in\s+((?:\d+(?:\.\d+)?[dhms]\s?)+)))?",
    );
    if let Some(found) = bar.captures_iter(frame).last() {
        return wget_bar(&found);
    }
    let dots = compiled(
        &DOTS,
        r"^\s*(\d+)([KMG]?)\s+([. ]*\.)\s+(?:(\d{1,3})%\s+)?(\d+(?:[.,]\d+)?)([KMG]?)(?:\s+((?:\d+[dhms])+)|=((?:\d+(?:\.\d+)?[dhms])+))?\s*$",
    );
    let found = dots.captures(frame)?;
    let offset = size(&found[1], &found[2], 1024.0)?;
    let dotted = &found[3];
    let first_cluster = dotted.split(' ').next().map_or(0, str::len);
    // Each style's dot: `default` 1 KiB in clusters of 10, `binary` 8 KiB in 16, `mega` 64 KiB
    // in 8 (`giga`, 1 MiB in 8, reads as mega: an underestimate, its percent is exact).
    let dot = match first_cluster {
        16 => 8192.0,
        8 => 65536.0,
        _ => 1024.0,
    };
    let count = dotted.chars().filter(|&c| c == '.').count() as f64;
    let percent = found.get(4).and_then(|m| m.as_str().parse::<f64>().ok());
    let mut reading = reading(
        Some((offset + count * dot).round() as u64),
        None,
        percent,
        Figure::Bytes,
    );
    reading.rate_per_sec = size(&found[5], &found[6], 1024.0);
    reading.remaining_sec = match (found.get(7), found.get(8)) {
        (Some(eta), _) => spelled_seconds(eta.as_str()),
        (None, Some(_)) => Some(0.0),
        _ => None,
    };
    Some(Frame {
        reading,
        clock: None,
    })
}

fn wget_bar(found: &Captures<'_>) -> Option<Frame> {
    let percent = found.get(1).and_then(|m| m.as_str().parse::<f64>().ok());
    let done = size(&found[2].replace(',', "."), &found[3], 1024.0)?;
    let mut reading = reading(Some(done.round() as u64), None, percent, Figure::Bytes);
    reading.rate_per_sec = size(&found[4].replace(',', "."), &found[5], 1024.0);
    reading.remaining_sec = match (found.get(6), found.get(7)) {
        (Some(eta), _) => spelled_seconds(eta.as_str()),
        (None, Some(_)) => Some(0.0),
        _ => None,
    };
    Some(Frame {
        reading,
        clock: None,
    })
}

/// rsync's progress line: `1,200,000  13%  3.43MB/s  0:00:00 (xfr#4, to-chk=26/31)`. Under
/// `--info=progress2` the bytes and the percent are the whole transfer's; under `--progress`
/// they are the current file's (its 100 % is one file done, and the bytes fall with the next
/// file: that fall is what tells the two apart). The time is what is left while a file is
/// being sent, and the time taken on the line that ends a file (`xfr#`). Rates are in steps
/// of 1024; with `-h` the bytes carry a letter in steps of 1000.
pub fn rsync(frame: &str) -> Option<Frame> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = compiled(
        &LINE,
        r"^\s*(\d[\d,]*(?:\.\d+)?)([KMGTP]?)\s+(\d{1,3})%\s+(\d+(?:\.\d+)?)([kKMGT]?)B/s\s+(\d+:\d{2}:\d{2})(\s+\((?:xfr#\d+,\s*)?(?:to|ir)-chk=\d+/\d+\))?",
    );
    let found = line.captures(frame)?;
    let done = size(&found[1], &found[2], 1000.0)?;
    let percent: f64 = found[3].parse().ok()?;
    let mut reading = reading(
        Some(done.round() as u64),
        None,
        Some(percent),
        Figure::Bytes,
    );
    reading.rate_per_sec = size(&found[4], &found[5], 1024.0);
    let ended_a_file = found.get(7).is_some();
    let time = clock_seconds(&found[6]);
    reading.remaining_sec = if ended_a_file {
        (percent >= 100.0).then_some(0.0)
    } else {
        time
    };
    Some(Frame {
        reading,
        clock: None,
    })
}

/// pv's output. `-n`: one bare number a line — a percent, or bytes with `-b` (a number over
/// 100 is bytes) — after `-t`'s seconds (`1.0893 34`); pv writes one every second whether or
/// not anything moved. With `-f` to a file, its default meter: `976KiB 0:00:02 [0.00 B/s]
/// [====>   ] 33% ETA 0:00:04`, sizes in steps of 1024.
pub fn pv(frame: &str) -> Option<Frame> {
    static NUMERIC: OnceLock<Regex> = OnceLock::new();
    static METER: OnceLock<Regex> = OnceLock::new();
    let numeric = compiled(&NUMERIC, r"^\s*(?:(\d+\.\d+)\s+)?(\d+)\s*$");
    if let Some(found) = numeric.captures(frame) {
        let clock = found.get(1).and_then(|m| m.as_str().parse::<f64>().ok());
        let number: u64 = found[2].parse().ok()?;
        let reading = if number <= 100 {
            reading(None, None, Some(number as f64), Figure::Percent)
        } else {
            reading(Some(number), None, None, Figure::Bytes)
        };
        return Some(Frame { reading, clock });
    }
    let meter = compiled(
        &METER,
        r"^\s*(\d+(?:\.\d+)?)\s?([KMGTPE]?i?B)\s+(\d+:\d{2}:\d{2})\s+\[\s*(\d+(?:\.\d+)?)\s?([KMGTPE]?i?B)/s\s*\](?:\s*\[[^\]]*\]\s*(\d{1,3})%)?(?:\s+ETA\s+(\d+:\d{2}:\d{2}))?",
    );
    let found = meter.captures(frame)?;
    let done = size(&found[1], &found[2], 1024.0)?;
    let percent = found.get(6).and_then(|m| m.as_str().parse::<f64>().ok());
    let mut reading = reading(Some(done.round() as u64), None, percent, Figure::Bytes);
    reading.rate_per_sec = size(&found[4], &found[5], 1024.0);
    reading.remaining_sec = found
        .get(7)
        .and_then(|m| clock_seconds(m.as_str()))
        .or_else(|| percent.filter(|p| *p >= 100.0).map(|_| 0.0));
    Some(Frame {
        reading,
        clock: clock_seconds(&found[3]),
    })
}

/// dd's `status=progress` (and its summary): `3014656 bytes (3.0 MB, 2.9 MiB) copied, 3 s,
/// 1.0 MB/s` — the bytes copied, the seconds it has run (its clock) and the rate in steps of
/// 1000. dd knows no total; it draws nothing while a read waits.
pub fn dd(frame: &str) -> Option<Frame> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = compiled(
        &LINE,
        r"^\s*(\d+) bytes?(?: \([^)]*\))? copied, (\d+(?:[.,]\d+)?) s, (\d+(?:[.,]\d+)?) ([kMGTPE]?)B/s",
    );
    let found = line.captures(frame)?;
    let done: u64 = found[1].parse().ok()?;
    let mut reading = reading(Some(done), None, None, Figure::Bytes);
    reading.rate_per_sec = size(&found[3].replace(',', "."), &found[4], 1000.0);
    Some(Frame {
        reading,
        clock: found[2].replace(',', ".").parse::<f64>().ok(),
    })
}

/// Whether the percent at `start..end` of `frame` is a compression ratio rather than how far
/// a job is: `gzip -v`'s `61.8% -- replaced with f.gz` (or `-- created`), zstd's `f : 15.20%
/// (1.32 MiB => 206 KiB, f.zst)` and its `Read: 5 MiB / 9 MiB ==> 20%`, bzip2's `57.35%
/// saved`.
pub fn is_ratio(frame: &str, start: usize, end: usize) -> bool {
    let before = frame[..start].trim_end();
    let after = frame[end..].trim_start();
    before.ends_with("==>")
        || after.starts_with("--")
        || after.starts_with("saved")
        || (after.starts_with('(') && after.contains("=>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_in_each_tools_steps() {
        assert_eq!(size("4882", "k", 1024.0), Some(4_999_168.0));
        assert_eq!(size("1,200,000", "", 1000.0), Some(1_200_000.0));
        assert_eq!(size("1.5", "MiB", 1024.0), Some(1_572_864.0));
        assert_eq!(size("--.-", "K", 1024.0), None);
        assert_eq!(spelled_seconds("1m 5s"), Some(65.0));
        assert_eq!(spelled_seconds("7.6s"), Some(7.6));
        assert_eq!(curl_time("  4d 02h"), Some(352_800.0));
        assert_eq!(curl_time("--:--:--"), None);
    }

    #[test]
    fn ratios_are_told_from_progress() {
        let gzip = "gz/part1.csv:\t 58.3% -- replaced with gz/part1.csv.gz";
        let at = gzip.find("58.3%").expect("there");
        assert!(is_ratio(gzip, at, at + 5));
        let zstd = "Read:   512 KiB /   247 MiB ==> 20%";
        let at = zstd.find("20%").expect("there");
        assert!(is_ratio(zstd, at, at + 3));
        let xz = "  100 %      1,234.5 KiB / 5,678.9 KiB = 0.217";
        let at = xz.find("100 %").expect("there");
        assert!(!is_ratio(xz, at, at + 5));
    }
}

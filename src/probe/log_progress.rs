//! `log_progress`: done, total and percent read from what the job prints.
//!
//! Most jobs write no progress file: tqdm redraws a bar with '\r' on stderr, a training loop
//! prints `epoch 3/10 step 1200/5000`, a download prints `67%`. This module owns reading
//! that back: the last [`WINDOW_BYTES`] of the log (never more, whatever the log's size),
//! split into frames at '\r' and '\n' as a terminal would draw them, and searched from the
//! newest frame backwards; the first frame that matches wins, so a "saving checkpoint" line
//! printed after the last step does not hide it. When the log holds no matching frame (it
//! was just rotated), its rotated predecessor (`run.log.1`, `run.log-YYYYMMDD`) is read the
//! same way. Every file is opened through [`super::safe_open`] with the log's rules. A log
//! that cannot be read is a fault, never "no progress"; this module never judges a reading.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

use super::safe_open::{self, OpenError, Role};
use crate::config::LogProgress;
use crate::core::text::inert;
use crate::core::{LogProgressReading, Reading};

/// How much of the end of a log is searched for a matching frame: a tqdm bar is about 80
/// bytes, so this holds hundreds of frames and a few screens of lines printed after the last
/// one, while a log of any size costs one read of this size.
pub const WINDOW_BYTES: u64 = 64 * 1024;

/// The most characters of the matching frame kept for the detail pane.
const FRAME_CHARS: usize = 200;

/// The compiled patterns of every job, kept across passes: a pattern is compiled once per
/// process, not once per look.
#[derive(Debug, Default)]
pub struct LogProgressReader {
    compiled: HashMap<String, Result<Regex, String>>,
}

impl LogProgressReader {
    /// The newest frame of the log at `log` (or, when it has none, of its rotated
    /// predecessor) that `spec` reads progress from.
    pub fn read(&mut self, log: &Path, spec: &LogProgress) -> Reading<LogProgressReading> {
        let today = chrono::Local::now().date_naive();
        self.read_on(log, spec, today)
    }

    /// [`LogProgressReader::read`], with the local date dated predecessors are named after.
    pub fn read_on(
        &mut self,
        log: &Path,
        spec: &LogProgress,
        today: chrono::NaiveDate,
    ) -> Reading<LogProgressReading> {
        let matcher = match spec {
            LogProgress::Tqdm => Matcher::Tqdm,
            LogProgress::Fraction => Matcher::Fraction,
            LogProgress::Percent => Matcher::Percent,
            LogProgress::Pattern { pattern, .. } => {
                let compiled = self
                    .compiled
                    .entry(pattern.clone())
                    .or_insert_with(|| Regex::new(pattern).map_err(|error| error.to_string()));
                match compiled {
                    Ok(regex) => Matcher::Pattern(regex),
                    // Refused at load; only a jobs file edited under a running process gets here.
                    Err(error) => {
                        return Reading::Fault(inert(&format!(
                            "log_progress.pattern does not compile: {error}"
                        )));
                    }
                }
            }
        };
        match newest_match(log, &matcher) {
            Ok(Some(found)) => return Reading::Found(found),
            Ok(None) => {}
            Err(fault) => return super::files::absent(fault),
        }
        // Nothing in the log itself: after a rotation the last frames are in its predecessor.
        for candidate in super::rotation::predecessors(log, today) {
            if candidate.extension().is_some_and(|ext| ext == "gz") {
                continue;
            }
            if let Ok(Some(mut found)) = newest_match(&candidate, &matcher) {
                found.from = Some(candidate);
                return Reading::Found(found);
            }
        }
        Reading::Empty
    }
}

/// What a frame is matched against.
enum Matcher<'a> {
    Tqdm,
    Fraction,
    Percent,
    Pattern(&'a Regex),
}

/// The newest matching frame of the file at `path`: `None` when nothing is there or no frame
/// matches; a fault when it cannot be read.
fn newest_match(
    path: &Path,
    matcher: &Matcher<'_>,
) -> Result<Option<LogProgressReading>, Unreadable> {
    let Some(window) = read_window(path)? else {
        return Ok(None);
    };
    Ok(newest_frame(&window.bytes, window.from_start, matcher))
}

/// Why a file could not be read: a fault (or, never here, an empty reading) of no value.
type Unreadable = Reading<std::convert::Infallible>;

/// The end of a file, and whether it starts the file.
struct Window {
    bytes: Vec<u8>,
    from_start: bool,
}

/// The last [`WINDOW_BYTES`] of the file at `path`; `None` when nothing is there.
fn read_window(path: &Path) -> Result<Option<Window>, Unreadable> {
    let opened = match safe_open::read(path, Role::Log) {
        Ok(opened) => opened,
        Err(OpenError::Missing) => return Ok(None),
        Err(error) => return Err(super::files::refused(error)),
    };
    let mut len = opened.meta.len();
    // A log truncated between the look and the read answers a short read: read again from
    // its new end once before calling it a fault.
    for _ in 0..2 {
        let want = len.min(WINDOW_BYTES);
        let start = len - want;
        let mut bytes = vec![0u8; usize::try_from(want).unwrap_or(0)];
        match opened.file.read_exact_at(&mut bytes, start) {
            Ok(()) => {
                return Ok(Some(Window {
                    bytes,
                    from_start: start == 0,
                }));
            }
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                len = match opened.file.metadata() {
                    Ok(meta) => meta.len(),
                    Err(error) => return Err(super::fault(path, error)),
                };
            }
            Err(error) => return Err(super::fault(path, error)),
        }
    }
    Err(super::fault(
        path,
        "it shrank while being read twice in a row",
    ))
}

/// The newest frame of `window` that `matcher` reads. A window that does not start the file
/// may start inside a frame: that first piece is left out, as it may be cut.
fn newest_frame(
    window: &[u8],
    from_start: bool,
    matcher: &Matcher<'_>,
) -> Option<LogProgressReading> {
    let mut rest = window;
    let oldest = if from_start {
        0
    } else {
        memchr::memchr2(b'\r', b'\n', window).map_or(window.len(), |at| at + 1)
    };
    loop {
        let (frame, before) = match memchr::memrchr2(b'\r', b'\n', rest) {
            Some(at) if at >= oldest => (&rest[at + 1..], Some(&rest[..at])),
            _ => (&rest[oldest.min(rest.len())..], None),
        };
        if !frame.iter().all(u8::is_ascii_whitespace) {
            let text = String::from_utf8_lossy(frame);
            if let Some(mut found) = read_frame(&text, matcher) {
                let shown = inert(text.trim());
                found.frame = shown.chars().take(FRAME_CHARS).collect();
                return Some(found);
            }
        }
        rest = before?;
    }
}

/// What one frame says, if `matcher` reads anything in it.
fn read_frame(frame: &str, matcher: &Matcher<'_>) -> Option<LogProgressReading> {
    let parsed = match matcher {
        Matcher::Tqdm => tqdm(frame),
        Matcher::Fraction => fraction(frame),
        Matcher::Percent => percent(frame),
        Matcher::Pattern(regex) => pattern(regex, frame),
    }?;
    let percent = match (parsed.done, parsed.total) {
        (Some(done), Some(total)) if total > 0 => Some(done as f64 * 100.0 / total as f64),
        _ => parsed.percent,
    };
    Some(LogProgressReading { percent, ..parsed })
}

fn reading(done: Option<u64>, total: Option<u64>, percent: Option<f64>) -> LogProgressReading {
    LogProgressReading {
        done,
        total,
        percent,
        rate_per_sec: None,
        remaining_sec: None,
        frame: String::new(),
        from: None,
    }
}

/// tqdm's bar, as `tqdm.format_meter` draws it: `{desc}: 45%|{bar}| 450/1000 [00:07<00:52,
/// 9.95it/s{postfix}]`, or `450it [00:07, 9.95it/s]` without a total; numbers may carry an SI
/// suffix (`unit_scale`), the rate may be inverted (`1.23s/it`) or unknown (`?it/s`).
fn tqdm(frame: &str) -> Option<LogProgressReading> {
    static TQDM: OnceLock<Regex> = OnceLock::new();
    let regex = TQDM.get_or_init(|| {
        Regex::new(concat!(
            r"(?:(?P<percent>\d{1,3})%\|[^|]*\|\s*)?",
            r"(?P<done>\d+(?:\.\d+)?[kMGTPEZY]?)(?:/(?P<total>\d+(?:\.\d+)?[kMGTPEZY]?))?",
            r"\s*[^\s\[\d]*\s*",
            r"\[(?P<elapsed>\d+(?::\d{2}){1,2})(?:<(?P<remaining>\d+(?::\d{2}){1,2}|\?))?,\s*",
            r"(?P<rate>\d+(?:\.\d+)?[kMGTPEZY]?|\?)\s*(?P<unit>[^\s\],/]*)/(?P<per>[^\s\],]+)",
        ))
        .expect("the tqdm pattern compiles")
    });
    let found = regex.captures_iter(frame).last()?;
    let number = |name: &str| found.name(name).and_then(|m| scaled(m.as_str()));
    let done = number("done").map(|n| n.round() as u64);
    let total = number("total").map(|n| n.round() as u64).filter(|&t| t > 0);
    let printed = found
        .name("percent")
        .and_then(|m| m.as_str().parse::<f64>().ok());
    let mut parsed = reading(done, total, printed);
    let per = found.name("per").map_or("", |m| m.as_str());
    let unit = found.name("unit").map_or("", |m| m.as_str());
    parsed.rate_per_sec = number("rate").and_then(|value| {
        if per == "s" {
            Some(value)
        } else if unit == "s" && value > 0.0 {
            Some(1.0 / value)
        } else {
            None
        }
    });
    parsed.remaining_sec = found
        .name("remaining")
        .and_then(|m| clock_seconds(m.as_str()));
    Some(parsed)
}

/// The last `N/M` of the frame that is not part of a longer run of numbers and slashes (a
/// date like 2026/12/01) or of a decimal.
fn fraction(frame: &str) -> Option<LogProgressReading> {
    static FRACTION: OnceLock<Regex> = OnceLock::new();
    let regex =
        FRACTION.get_or_init(|| Regex::new(r"(\d+)/(\d+)").expect("the fraction pattern compiles"));
    let bytes = frame.as_bytes();
    let standalone = |start: usize, end: usize| {
        let before = start.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(end).copied();
        !matches!(before, Some(b'/' | b'.' | b'0'..=b'9')) && !matches!(after, Some(b'/' | b'.'))
    };
    let found = regex
        .captures_iter(frame)
        .filter(|c| {
            let whole = c.get(0).expect("group 0 is the match");
            standalone(whole.start(), whole.end())
        })
        .last()?;
    let done = found[1].parse::<u64>().ok()?;
    let total = found[2].parse::<u64>().ok().filter(|&t| t > 0)?;
    Some(reading(Some(done), Some(total), None))
}

/// The last `NN%` of the frame, at most 100.
fn percent(frame: &str) -> Option<LogProgressReading> {
    static PERCENT: OnceLock<Regex> = OnceLock::new();
    let regex = PERCENT.get_or_init(|| {
        Regex::new(r"(\d{1,3}(?:\.\d+)?)\s?%").expect("the percent pattern compiles")
    });
    let bytes = frame.as_bytes();
    let found = regex
        .captures_iter(frame)
        .filter(|c| {
            let start = c.get(0).expect("group 0 is the match").start();
            !matches!(
                start.checked_sub(1).map(|i| bytes[i]),
                Some(b'.' | b'0'..=b'9')
            )
        })
        .filter_map(|c| c[1].parse::<f64>().ok())
        .filter(|p| (0.0..=100.0).contains(p))
        .last()?;
    Some(reading(None, None, Some(found)))
}

/// The last match of the operator's pattern in the frame, read by its named groups.
fn pattern(regex: &Regex, frame: &str) -> Option<LogProgressReading> {
    regex
        .captures_iter(frame)
        .filter_map(|found| {
            let number = |name: &str| found.name(name).and_then(|m| scaled(m.as_str().trim()));
            let done = number("done").map(|n| n.round() as u64);
            let total = number("total").map(|n| n.round() as u64).filter(|&t| t > 0);
            let percent = number("percent").filter(|p| (0.0..=100.0).contains(p));
            (done.is_some() || percent.is_some()).then(|| reading(done, total, percent))
        })
        .last()
}

/// A number as tqdm's `unit_scale` prints it: `450`, `9.95`, `1.00M`, `2.5k`.
fn scaled(text: &str) -> Option<f64> {
    let (digits, factor) = match text.char_indices().last()? {
        (at, suffix @ ('k' | 'M' | 'G' | 'T' | 'P' | 'E' | 'Z' | 'Y')) => {
            let power = "kMGTPEZY".find(suffix).unwrap_or(0) as i32 + 1;
            (&text[..at], 1000f64.powi(power))
        }
        _ => (text, 1.0),
    };
    let value = digits.replace(',', "").parse::<f64>().ok()?;
    (value.is_finite() && value >= 0.0).then_some(value * factor)
}

/// `MM:SS` or `H:MM:SS` in seconds, as tqdm's `format_interval` prints them.
fn clock_seconds(text: &str) -> Option<f64> {
    let mut seconds = 0u64;
    for part in text.split(':') {
        seconds = seconds
            .checked_mul(60)?
            .checked_add(part.parse::<u64>().ok()?)?;
    }
    Some(seconds as f64)
}

/// Where a reading came from, for the detail pane: the log, or its predecessor.
pub fn source_words(log: &Path, from: Option<&PathBuf>) -> String {
    match from {
        Some(path) => inert(&format!("'{}' (rotated)", path.display())),
        None => inert(&format!("'{}'", log.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(text: &str, matcher: Matcher<'_>) -> Option<LogProgressReading> {
        newest_frame(text.as_bytes(), true, &matcher)
    }

    #[test]
    fn tqdm_frames_are_read_with_their_rate_and_remaining_time() {
        type Row<'a> = (&'a str, Option<u64>, Option<u64>, Option<f64>, Option<f64>);
        let rows: [Row<'_>; 7] = [
            (
                " 45%|████▌     | 450/1000 [00:07<00:52,  9.95it/s]",
                Some(450),
                Some(1000),
                Some(9.95),
                Some(52.0),
            ),
            (
                "train:   0%|          | 0/5000 [00:00<?, ?it/s]",
                Some(0),
                Some(5000),
                None,
                None,
            ),
            (
                "100%|##########| 260/260 [1:02:03<00:00,  1.25s/it, loss=0.31]",
                Some(260),
                Some(260),
                Some(0.8),
                Some(0.0),
            ),
            ("450it [00:07, 61.2it/s]", Some(450), None, Some(61.2), None),
            (
                " 50%|█████     | 1.00M/2.00M [00:01<00:01, 1.00MB/s]",
                Some(1_000_000),
                Some(2_000_000),
                Some(1_000_000.0),
                Some(1.0),
            ),
            (
                "epoch 3:  45%|████▌     | 450/1000 [00:07<00:52,  9.95it/s]",
                Some(450),
                Some(1000),
                Some(9.95),
                Some(52.0),
            ),
            ("saving checkpoint", None, None, None, None),
        ];
        for (frame, done, total, rate, remaining) in rows {
            let found = tqdm(frame);
            assert_eq!(found.as_ref().and_then(|f| f.done), done, "{frame}");
            assert_eq!(found.as_ref().and_then(|f| f.total), total, "{frame}");
            let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() < 1e-6 * b.max(1.0),
                (None, None) => true,
                _ => false,
            };
            assert!(
                close(found.as_ref().and_then(|f| f.rate_per_sec), rate),
                "{frame}"
            );
            assert!(
                close(found.as_ref().and_then(|f| f.remaining_sec), remaining),
                "{frame}"
            );
        }
    }

    #[test]
    fn the_newest_matching_frame_wins_over_a_later_line() {
        let log = "start\n\r  0%|   | 0/10 [00:00<?, ?it/s]\r 30%|███   | 3/10 [00:03<00:07,  1.00it/s]\
                   \r 70%|███████   | 7/10 [00:07<00:03,  1.00it/s]\nsaving checkpoint\n";
        let found = frames(log, Matcher::Tqdm).expect("a frame");
        assert_eq!((found.done, found.total), (Some(7), Some(10)));
        assert!(found.frame.starts_with("70%"), "{}", found.frame);
    }

    #[test]
    fn fraction_and_percent_take_the_last_of_a_frame() {
        let found = frames(
            "epoch 3/10 step 1200/5000 loss 0.3\nsaving\n",
            Matcher::Fraction,
        )
        .expect("a fraction");
        assert_eq!((found.done, found.total), (Some(1200), Some(5000)));
        assert_eq!(frames("written 2026/12/01\n", Matcher::Fraction), None);
        let found = frames(
            "downloading 12%\r downloading 67%\rmerging\n",
            Matcher::Percent,
        )
        .expect("a percent");
        assert_eq!(found.percent, Some(67.0));
        assert_eq!(found.done, None);
        assert_eq!(
            frames("load 1.5%\n", Matcher::Percent).and_then(|f| f.percent),
            Some(1.5)
        );
    }

    #[test]
    fn a_window_that_starts_inside_a_frame_leaves_that_piece_out() {
        // "…90/100" could be the end of "190/100" cut in half.
        let found = newest_frame(b"90/100\nno more\n", false, &Matcher::Fraction);
        assert_eq!(found, None);
    }

    #[test]
    fn scaled_numbers_and_clocks() {
        assert_eq!(scaled("450"), Some(450.0));
        assert_eq!(scaled("2.5k"), Some(2500.0));
        assert_eq!(scaled("?"), None);
        assert_eq!(clock_seconds("00:52"), Some(52.0));
        assert_eq!(clock_seconds("1:02:03"), Some(3723.0));
        assert_eq!(clock_seconds("?"), None);
    }
}

//! `log_progress`: done, total and percent read from what the job prints, and when that
//! reading last moved.
//!
//! Most jobs write no progress file: tqdm redraws a bar with '\r' on stderr, a training loop
//! prints `epoch 3/10 step 1200/5000`, curl and wget redraw a meter every second. This module
//! owns reading that back: the last [`WINDOW_BYTES`] of the log (never more, whatever the
//! log's size), split into frames at '\r' and '\n' as a terminal would draw them, and
//! searched from the newest frame backwards; the newest frame that matches is the reading, so
//! a "saving checkpoint" line printed after the last step does not hide it. When the log
//! holds no matching frame (it was just rotated), its rotated predecessor (`run.log.1`,
//! `run.log-YYYYMMDD`) is read the same way. Every file is opened through
//! [`super::safe_open`] with the log's rules. A log that cannot be read is a fault, never "no
//! progress"; this module never judges a reading.
//!
//! A meter that redraws moves the log's modification time while not one byte arrives, so
//! this module also owns *when the reading last moved* ([`Moved`]): from the frames in the
//! window (the newest frame is the first to show its figure, or the tool's own clock says how
//! long the figure has stood), and from what earlier looks saw ([`KeptReading`], kept across
//! passes by a long-running process and across processes in `state_dir` by the engine). What
//! neither can tell is left unknown, never guessed fresh. A figure that falls (a per-file
//! figure, a ratio) is noted as a [`Fall`].

use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use regex::Regex;

use super::meters::{self, Frame, reading};
use super::safe_open::{self, OpenError, Role};
use crate::config::LogProgress;
use crate::core::text::inert;
use crate::core::{Fall, Figure, LogProgressReading, Moved, Reading};

/// How much of the end of a log is searched for a matching frame: a tqdm bar is about 80
/// bytes, so this holds hundreds of frames and a few screens of lines printed after the last
/// one, while a log of any size costs one read of this size.
pub const WINDOW_BYTES: u64 = 64 * 1024;

/// The most characters of the matching frame kept for the detail pane.
const FRAME_CHARS: usize = 200;

/// What an earlier look saw of one log's reading under one preset: enough to tell, at the
/// next look, whether the figure moved since, and since when it has not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeptReading {
    pub dev: u64,
    pub ino: u64,
    /// The log's length at that look: a shorter log is another file.
    pub len: u64,
    pub figure: Figure,
    pub value: f64,
    /// When the figure last moved, as bounded then.
    pub latest: DateTime<Utc>,
    pub earliest: Option<DateTime<Utc>>,
    /// The log's modification time at that look: a figure that differs at the next look
    /// moved after it.
    pub seen: DateTime<Utc>,
    /// A fall seen, and the log's length then: it is forgotten once the log has grown a
    /// window past it, as a fall in the frames scrolls out of the window.
    pub fall: Option<(f64, f64, u64)>,
}

/// Which log and which way of reading it a [`KeptReading`] is for.
pub type KeptKey = (PathBuf, String);

/// The compiled patterns of every job and what each log's reading was at the last look, kept
/// across passes: a pattern is compiled once per process, and a meter's figure is compared
/// with the one seen before.
#[derive(Debug, Default)]
pub struct LogProgressReader {
    compiled: HashMap<String, Result<Regex, String>>,
    kept: HashMap<KeptKey, KeptReading>,
    changed: bool,
}

impl LogProgressReader {
    /// The newest frame of the log at `log` (or, when it has none, of its rotated
    /// predecessor) that `spec` reads progress from.
    pub fn read(&mut self, log: &Path, spec: &LogProgress) -> Reading<LogProgressReading> {
        let today = chrono::Local::now().date_naive();
        self.read_on(log, spec, today)
    }

    /// Starts from what an earlier process kept (`store::readings::load`); what this process
    /// has seen itself wins.
    pub fn adopt(&mut self, kept: HashMap<KeptKey, KeptReading>) {
        for (key, reading) in kept {
            self.kept.entry(key).or_insert(reading);
        }
    }

    /// What every look so far saw, to keep for the next process.
    pub fn kept(&self) -> &HashMap<KeptKey, KeptReading> {
        &self.kept
    }

    /// Whether anything kept changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
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
            LogProgress::Curl => Matcher::Meter(meters::curl),
            LogProgress::Wget => Matcher::Meter(meters::wget),
            LogProgress::Rsync => Matcher::Meter(meters::rsync),
            LogProgress::Pv => Matcher::Meter(meters::pv),
            LogProgress::Dd => Matcher::Meter(meters::dd),
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
        let key: KeptKey = (
            log.to_path_buf(),
            match spec {
                LogProgress::Pattern { pattern, .. } => format!("pattern {pattern}"),
                preset => preset.as_str().to_string(),
            },
        );
        match newest_match(log, &matcher) {
            Ok(Some(found)) => return Reading::Found(self.remember(key, found)),
            Ok(None) => {}
            Err(fault) => return super::files::absent(fault),
        }
        // Nothing in the log itself: after a rotation the last frames are in its predecessor.
        for candidate in super::rotation::predecessors(log, today) {
            if candidate.extension().is_some_and(|ext| ext == "gz") {
                continue;
            }
            if let Ok(Some(found)) = newest_match(&candidate, &matcher) {
                let mut found = found.reading;
                found.from = Some(candidate);
                // The log's own time stands then: the frames are the predecessor's.
                found.moved = None;
                return Reading::Found(found);
            }
        }
        Reading::Empty
    }

    /// The reading of a look, its bounds narrowed by what the last look at the same file saw,
    /// and kept for the next one.
    fn remember(&mut self, key: KeptKey, found: Found) -> LogProgressReading {
        let Found {
            mut reading,
            value,
            file,
        } = found;
        let Some(mut moved) = reading.moved.take() else {
            return reading;
        };
        let before = self.kept.get(&key).copied().filter(|kept| {
            (kept.dev, kept.ino) == (file.dev, file.ino)
                && file.len >= kept.len
                && kept.figure == reading.figure
        });
        let mut fall = None;
        if let Some(kept) = before {
            if kept.value == value {
                // Not moved since that look: it moved no later than that look said.
                let latest = moved.latest.min(kept.latest);
                let earliest = match (moved.earliest, kept.earliest) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                if earliest.is_none_or(|earliest| earliest <= latest) {
                    moved.latest = latest;
                    moved.earliest = earliest;
                }
            } else if moved.earliest.is_none_or(|earliest| earliest < kept.seen) {
                // Moved since that look: after what it saw was written.
                moved.earliest = Some(kept.seen.min(moved.latest));
            }
            if value < kept.value && reading.total.is_none() {
                fall = Some((kept.value, value, file.len));
            }
            fall = fall.or(kept
                .fall
                .filter(|&(_, _, at)| file.len.saturating_sub(at) < WINDOW_BYTES));
        }
        if reading.fell.is_none()
            && let Some((from, to, _)) = fall
        {
            reading.fell = Some(Fall { from, to });
        }
        let now_kept = KeptReading {
            dev: file.dev,
            ino: file.ino,
            len: file.len,
            figure: reading.figure,
            value,
            latest: moved.latest,
            earliest: moved.earliest,
            seen: file.modified,
            fall: fall.or(reading
                .fell
                .as_ref()
                .map(|fell| (fell.from, fell.to, file.len))),
        };
        if before != Some(now_kept) {
            self.kept.insert(key, now_kept);
            self.changed = true;
        }
        reading.moved = Some(moved);
        reading
    }
}

/// What a frame is matched against.
enum Matcher<'a> {
    Tqdm,
    Fraction,
    Percent,
    /// A real tool's meter ([`meters`]).
    Meter(fn(&str) -> Option<Frame>),
    Pattern(&'a Regex),
}

/// The file a window was read from, as it was looked at.
#[derive(Debug, Clone, Copy)]
struct FileFacts {
    dev: u64,
    ino: u64,
    len: u64,
    modified: DateTime<Utc>,
}

/// A look's reading, its figure's value, and the file it was read from.
struct Found {
    reading: LogProgressReading,
    value: f64,
    file: FileFacts,
}

/// The newest matching frame of the file at `path`, with when its figure moved as the window
/// shows it: `None` when nothing is there or no frame matches; a fault when it cannot be read.
fn newest_match(path: &Path, matcher: &Matcher<'_>) -> Result<Option<Found>, Unreadable> {
    let Some(window) = read_window(path)? else {
        return Ok(None);
    };
    let Some(scan) = scan(&window.bytes, window.from_start, matcher) else {
        return Ok(None);
    };
    let file = window.file;
    Ok(Some(Found {
        value: scan.value,
        reading: scan.into_reading(file.modified),
        file,
    }))
}

/// Why a file could not be read: a fault (or, never here, an empty reading) of no value.
type Unreadable = Reading<std::convert::Infallible>;

/// The end of a file, and whether it starts the file.
struct Window {
    bytes: Vec<u8>,
    from_start: bool,
    file: FileFacts,
}

/// The last [`WINDOW_BYTES`] of the file at `path`; `None` when nothing is there.
fn read_window(path: &Path) -> Result<Option<Window>, Unreadable> {
    let opened = match safe_open::read(path, Role::Log) {
        Ok(opened) => opened,
        Err(OpenError::Missing) => return Ok(None),
        Err(error) => return Err(super::files::refused(error)),
    };
    let modified = match super::files::modified_utc(&opened.meta) {
        Ok(modified) => modified,
        Err(error) => return Err(super::fault(path, error)),
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
                    file: FileFacts {
                        dev: opened.meta.dev(),
                        ino: opened.meta.ino(),
                        len,
                        modified,
                    },
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

/// What the frames of one window say: the newest reading, and how its figure got there.
#[derive(Debug)]
struct Scan {
    newest: LogProgressReading,
    value: f64,
    /// How many matching frames, from the newest back, show the same value.
    run: usize,
    /// The tool's clock from the oldest frame of that run to the newest, when both print one.
    run_clock: Option<f64>,
    /// The tool's clock from the frame before the run (another value) to the newest.
    before_clock: Option<f64>,
    /// The run's oldest frame is the first frame of the file: the value was first drawn there.
    run_starts_file: bool,
    /// Text that is not a frame of the meter follows the newest frame: the log's last write
    /// is that text, not a redraw.
    text_after: bool,
    fell: Option<Fall>,
}

impl Scan {
    /// The reading, with when it moved as far as these frames tell, the log last written at
    /// `modified`. The newest frame is taken as drawn at `modified` when nothing follows it.
    fn into_reading(self, modified: DateTime<Utc>) -> LogProgressReading {
        let mut reading = self.newest;
        let seconds = |s: f64| chrono::Duration::milliseconds((s * 1000.0).round() as i64);
        let moved = if self.text_after || self.run == 1 {
            Moved {
                latest: modified,
                earliest: Some(modified),
                redrawn_at: None,
                value: self.value,
            }
        } else {
            let latest = self.run_clock.map_or(modified, |s| modified - seconds(s));
            let earliest = match self.before_clock {
                Some(s) => Some(modified - seconds(s)),
                None if self.run_starts_file && self.run_clock.is_some() => Some(latest),
                None => None,
            };
            Moved {
                latest,
                earliest: earliest.map(|e| e.min(latest)),
                redrawn_at: Some(modified),
                value: self.value,
            }
        };
        reading.moved = Some(moved);
        reading.fell = self.fell;
        reading
    }
}

/// The frames of `window`, newest first: each frame's text. A window that does not start the
/// file may start inside a frame: that first piece is left out, as it may be cut.
fn frames_newest_first(window: &[u8], from_start: bool) -> impl Iterator<Item = &[u8]> {
    let oldest = if from_start {
        0
    } else {
        memchr::memchr2(b'\r', b'\n', window).map_or(window.len(), |at| at + 1)
    };
    let mut rest = Some(window);
    std::iter::from_fn(move || {
        let current = rest?;
        let (frame, before) = match memchr::memrchr2(b'\r', b'\n', current) {
            Some(at) if at >= oldest => (&current[at + 1..], Some(&current[..at])),
            _ => (&current[oldest.min(current.len())..], None),
        };
        rest = before;
        Some(frame)
    })
}

/// The value a reading's figure has: the count or bytes done, else the percent.
fn value_of(reading: &LogProgressReading) -> Option<f64> {
    reading.done.map(|done| done as f64).or(reading.percent)
}

/// How many matching frames, at most, are searched for a fall once the newest figure's run is
/// known: a per-file figure falls with every file, a few frames apart, and a healthy meter
/// must not cost a parse of every frame of the window at every look.
const FALL_FRAMES: usize = 128;

/// Reads the frames of `window` that `matcher` reads, newest first, into a [`Scan`]: back to
/// the frame before the newest figure's run, and, for a figure with no total, on to a fall
/// (at most [`FALL_FRAMES`] frames).
fn scan(window: &[u8], from_start: bool, matcher: &Matcher<'_>) -> Option<Scan> {
    let mut matched = 0usize;
    let mut scan: Option<Scan> = None;
    let mut text_after = false;
    // The newer of two neighbouring matching frames, as the walk goes back.
    let mut newer: Option<(f64, Figure, bool)> = None;
    let mut newest_clock = None;
    let mut run_open = true;
    let mut frames = frames_newest_first(window, from_start).peekable();
    while let Some(frame) = frames.next() {
        if let Some(found) = &scan
            && !run_open
            && (found.newest.total.is_some() || found.fell.is_some() || matched >= FALL_FRAMES)
        {
            break;
        }
        let is_first_of_file = from_start && frames.peek().is_none();
        if frame.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let text = String::from_utf8_lossy(frame);
        let Some(parsed) = read_frame(&text, matcher) else {
            if scan.is_none() {
                text_after = true;
            }
            continue;
        };
        let Some(value) = value_of(&parsed.reading) else {
            continue;
        };
        matched += 1;
        let figure = parsed.reading.figure;
        let no_total = parsed.reading.total.is_none();
        let Some(found) = scan.as_mut() else {
            let mut newest = parsed.reading;
            let shown = inert(text.trim());
            newest.frame = shown.chars().take(FRAME_CHARS).collect();
            newest_clock = parsed.clock;
            scan = Some(Scan {
                newest,
                value,
                run: 1,
                run_clock: None,
                before_clock: None,
                run_starts_file: is_first_of_file,
                text_after,
                fell: None,
            });
            newer = Some((value, figure, no_total));
            continue;
        };
        let since = |clock: Option<f64>| match (newest_clock, clock) {
            (Some(newest), Some(then)) if newest >= then => Some(newest - then),
            _ => None,
        };
        if run_open && value == found.value && figure == found.newest.figure {
            found.run += 1;
            // The oldest frame of the run that prints a clock: curl draws `--:--:--` for its
            // time spent in its first second, and a download frozen within it keeps the
            // figure of such a frame; the clocked frames after it still say how long it
            // stood, at least.
            if let Some(clock) = since(parsed.clock) {
                found.run_clock = Some(clock);
            }
            found.run_starts_file = is_first_of_file;
        } else if run_open {
            run_open = false;
            found.before_clock = since(parsed.clock);
        }
        // A figure with no total that goes down from this frame to the next: per file, or a
        // ratio. The newest fall is the one named.
        if let Some((newer_value, newer_figure, newer_no_total)) = newer
            && found.fell.is_none()
            && newer_figure == figure
            && newer_no_total
            && no_total
            && newer_value < value
        {
            found.fell = Some(Fall {
                from: value,
                to: newer_value,
            });
        }
        newer = Some((value, figure, no_total));
    }
    scan
}

/// What one frame says, if `matcher` reads anything in it.
fn read_frame(frame: &str, matcher: &Matcher<'_>) -> Option<Frame> {
    let parsed = match matcher {
        Matcher::Tqdm => tqdm(frame),
        Matcher::Fraction => fraction(frame).map(untimed),
        Matcher::Percent => percent(frame).map(untimed),
        Matcher::Meter(read) => read(frame),
        Matcher::Pattern(regex) => pattern(regex, frame).map(untimed),
    }?;
    let reading = parsed.reading;
    let percent = match (reading.done, reading.total) {
        (Some(done), Some(total)) if total > 0 => Some(done as f64 * 100.0 / total as f64),
        _ => reading.percent,
    };
    Some(Frame {
        reading: LogProgressReading { percent, ..reading },
        clock: parsed.clock,
    })
}

/// A frame that prints no clock.
fn untimed(reading: LogProgressReading) -> Frame {
    Frame {
        reading,
        clock: None,
    }
}

/// tqdm's bar, as `tqdm.format_meter` draws it: `{desc}: 45%|{bar}| 450/1000 [00:07<00:52,
/// 9.95it/s{postfix}]`, or `450it [00:07, 9.95it/s]` without a total; numbers may carry an SI
/// suffix (`unit_scale`), the rate may be inverted (`1.23s/it`) or unknown (`?it/s`).
fn tqdm(frame: &str) -> Option<Frame> {
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
    let mut parsed = reading(done, total, printed, Figure::Items);
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
        .and_then(|m| meters::clock_seconds(m.as_str()));
    Some(Frame {
        reading: parsed,
        clock: found
            .name("elapsed")
            .and_then(|m| meters::clock_seconds(m.as_str())),
    })
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
    Some(reading(Some(done), Some(total), None, Figure::Items))
}

/// The last `NN%` of the frame, at most 100, that is not a compression ratio
/// ([`meters::is_ratio`]): a line of `gzip -v` or of zstd's summary is no frame of progress.
fn percent(frame: &str) -> Option<LogProgressReading> {
    static PERCENT: OnceLock<Regex> = OnceLock::new();
    let regex = PERCENT.get_or_init(|| {
        Regex::new(r"(\d{1,3}(?:\.\d+)?)\s?%").expect("the percent pattern compiles")
    });
    let bytes = frame.as_bytes();
    let found = regex
        .captures_iter(frame)
        .filter(|c| {
            let whole = c.get(0).expect("group 0 is the match");
            let start = whole.start();
            !matches!(
                start.checked_sub(1).map(|i| bytes[i]),
                Some(b'.' | b'0'..=b'9')
            ) && !meters::is_ratio(frame, start, whole.end())
        })
        .filter_map(|c| c[1].parse::<f64>().ok())
        .filter(|p| (0.0..=100.0).contains(p))
        .last()?;
    Some(reading(None, None, Some(found), Figure::Percent))
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
            let figure = if done.is_some() {
                Figure::Items
            } else {
                Figure::Percent
            };
            (done.is_some() || percent.is_some()).then(|| reading(done, total, percent, figure))
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

/// Where a reading came from, for the detail pane: the log, or its predecessor.
pub fn source_words(log: &Path, from: Option<&PathBuf>) -> String {
    match from {
        Some(path) => inert(&format!("'{}' (rotated)", path.display())),
        None => inert(&format!("'{}'", log.display())),
    }
}

/// How much of a log's end is read to tell whether its last line is a redrawn meter: a few
/// dozen frames of a tqdm bar or a curl meter.
pub const METER_WINDOW_BYTES: u64 = 4 * 1024;

/// Whether the last line of `tail` (the end of a log; a `\n` that ends it is not a new line) is
/// a progress meter redrawn in place: at least two frames with text, separated by carriage
/// returns, as tqdm, curl and wget draw them. A line printed once, or lines ending in
/// `\r\n` (a Windows log), are not.
pub fn redraws_a_meter(tail: &[u8]) -> bool {
    let tail = tail.strip_suffix(b"\n").unwrap_or(tail);
    let line = match memchr::memrchr(b'\n', tail) {
        Some(at) => &tail[at + 1..],
        None => tail,
    };
    line.split(|byte| *byte == b'\r')
        .filter(|frame| !frame.iter().all(u8::is_ascii_whitespace))
        .take(2)
        .count()
        == 2
}

/// [`redraws_a_meter`] of the last [`METER_WINDOW_BYTES`] of the log at `path`, opened with the
/// log's rules; `false` when it cannot be read (the log's own reading says why).
pub fn log_redraws_a_meter(path: &Path) -> bool {
    let Ok(opened) = safe_open::read(path, Role::Log) else {
        return false;
    };
    let len = opened.meta.len();
    let want = len.min(METER_WINDOW_BYTES);
    let mut bytes = vec![0u8; usize::try_from(want).unwrap_or(0)];
    match opened.file.read_at(&mut bytes, len - want) {
        Ok(read) => redraws_a_meter(&bytes[..read]),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(text: &str, matcher: Matcher<'_>) -> Option<LogProgressReading> {
        scan(text.as_bytes(), true, &matcher).map(|scan| scan.newest)
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
            let found = tqdm(frame).map(|f| f.reading);
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

    /// curl against a server frozen 0.3 s in (captured here, curl 8): the figure stood from
    /// a frame drawn in curl's first second, whose time spent is `--:--:--`.
    #[test]
    fn a_curl_download_frozen_in_its_first_second_stood_as_long_as_its_clock_says() {
        let log = "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n\
                   \x20                                Dload  Upload   Total   Spent    Left  Speed\n\
                   \r  0     0    0     0    0     0      0      0 --:--:-- --:--:-- --:--:--     0\
                   \r  0  381M    0  292k    0     0   450k      0  0:14:27 --:--:--  0:14:27  449k\
                   \r  0  381M    0  292k    0     0   165k      0  0:39:26  0:00:01  0:39:25  165k\
                   \r  0  381M    0  292k    0     0   102k      0  1:03:17  0:00:02  1:03:15  102k\
                   \r  0  381M    0  292k    0     0  60081      0  1:50:57  0:00:04  1:50:53     0\
                   \r  0  381M    0  292k    0     0  42024      0  2:38:38  0:00:06  2:38:32     0";
        let found = scan(log.as_bytes(), true, &Matcher::Meter(meters::curl)).unwrap();
        assert_eq!(found.run, 5);
        assert_eq!(found.run_clock, Some(5.0));
        // The frame before the run prints no clock: how much earlier it moved is not known.
        assert_eq!(found.before_clock, None);
        let modified = Utc::now();
        let moved = found.into_reading(modified).moved.unwrap();
        assert_eq!(moved.latest, modified - chrono::Duration::seconds(5));
        assert_eq!(moved.earliest, None);
    }

    #[test]
    fn a_window_that_starts_inside_a_frame_leaves_that_piece_out() {
        // "…90/100" could be the end of "190/100" cut in half.
        let found = scan(b"90/100\nno more\n", false, &Matcher::Fraction);
        assert!(found.is_none());
    }

    #[test]
    fn scaled_numbers_and_clocks() {
        assert_eq!(scaled("450"), Some(450.0));
        assert_eq!(scaled("2.5k"), Some(2500.0));
        assert_eq!(scaled("?"), None);
        assert_eq!(meters::clock_seconds("00:52"), Some(52.0));
        assert_eq!(meters::clock_seconds("1:02:03"), Some(3723.0));
        assert_eq!(meters::clock_seconds("?"), None);
    }
}

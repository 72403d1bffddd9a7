//! The log tail the dashboard's detail pane shows: the last lines of a file, read backwards.
//!
//! This module owns reading the end of a log: chunks from the end towards the start until
//! enough lines are found, decoded lossily and made inert line by line. A log can be gigabytes
//! and a single "line" can be a progress bar redrawn with '\r' for hours without a newline, so
//! it must never read the whole file: the bytes it reads are capped ([`MAX_READ_BYTES`]) and
//! each line shows at most [`MAX_LINE_BYTES`], cut after it is made inert so that a cut never
//! falls inside an escape sequence. It must never hang on a named pipe, never open a device,
//! never show what a link at the log's path points to, never let a control character or an
//! escape sequence through, and never treat a file it cannot read as an empty one.
//!
//! A carriage return starts a new frame, as on a terminal: each line is shown as its last
//! frame (what follows its last '\r', the '\r's that end it left aside), so a tqdm bar redrawn
//! three hundred times is one line reading "100%|██████████| 300/300", not three hundred
//! frames joined by '␍'.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::core::Reading;
use crate::core::text::{inert, is_mark};

use super::files::not_a_file;

/// How many bytes one read takes from the end: a screenful of ordinary log lines fits in one
/// or two reads.
pub const CHUNK_BYTES: usize = 8 * 1024;

/// The most bytes one call reads. Past it, the lines whose start was not reached are left
/// out: the pane shows fewer lines rather than the call reading a huge file.
pub const MAX_READ_BYTES: u64 = 256 * 1024;

/// The most bytes of one line that are shown. A longer line is shown as
/// [`TRUNCATED_MARK`] followed by the end of its inert text: the end of a line is what a
/// terminal would show last (a progress bar), and it is all a backwards reader can know
/// without reading the line whole.
pub const MAX_LINE_BYTES: usize = 4 * 1024;

/// How much of a long line is kept before its cut, to tell whether the cut falls inside an
/// escape sequence: the line's last [`MAX_LINE_BYTES`] + this many bytes are made inert
/// first, and only then cut. A sequence that starts within it is dropped whole; one that
/// starts earlier is found by its terminator (see [`shown_line`]).
pub const LOOKBEHIND_BYTES: usize = 4 * 1024;

/// The end of a long line that is made inert before it is cut.
const WINDOW_BYTES: usize = MAX_LINE_BYTES + LOOKBEHIND_BYTES;

/// Put in front of a line that was cut to its last [`MAX_LINE_BYTES`] bytes.
pub const TRUNCATED_MARK: char = '…';

/// The last `max_lines` lines of the file at `path`, oldest first.
///
/// A trailing line without its final '\n' (still being written) is included. Each line is
/// shown as its last carriage-return frame: the '\r's at its end ("\r\n" files) are dropped,
/// and only what follows the last '\r' before them is shown; every other control character
/// and escape sequence is made inert. Invalid UTF-8 becomes U+FFFD. Empty when the file does not exist
/// or has zero bytes; a fault when it is a link or not a regular file (a directory, a named
/// pipe, a device) or cannot be read.
pub fn tail_lines(path: &Path, max_lines: usize) -> Reading<Vec<String>> {
    tail_lines_counted(path, max_lines).0
}

/// The lines that come before a log's own, in the file its writer rotated it to.
#[derive(Debug, Clone, PartialEq)]
pub struct EarlierLines {
    /// The rotated predecessor (`run.log.1`, `run.log-YYYYMMDD`).
    pub path: std::path::PathBuf,
    /// Its last lines, oldest first, shown as [`tail_lines`] shows them.
    pub lines: Vec<String>,
}

/// The last `max_lines` lines of the log at `path` and, when it holds fewer (its writer just
/// rotated it: logrotate, Python's `RotatingFileHandler`), the rest from its rotated
/// predecessor, so that a crash traceback rotated away is still found, with where it is. A
/// compressed predecessor is never opened; every one is opened with the log's rules.
pub fn log_tail(path: &Path, max_lines: usize) -> (Reading<Vec<String>>, Option<EarlierLines>) {
    let today = chrono::Local::now().date_naive();
    let own = tail_lines(path, max_lines);
    let have = match &own {
        Reading::Found(lines) => lines.len(),
        Reading::Empty => 0,
        Reading::Fault(_) => return (own, None),
    };
    if have >= max_lines {
        return (own, None);
    }
    let earlier = super::rotation::predecessors(path, today)
        .into_iter()
        .filter(|candidate| candidate.extension().is_none_or(|ext| ext != "gz"))
        .find_map(|candidate| match tail_lines(&candidate, max_lines - have) {
            Reading::Found(lines) => Some(EarlierLines {
                path: candidate,
                lines,
            }),
            _ => None,
        });
    (own, earlier)
}

/// [`tail_lines`], also answering how many bytes of the file were read, so that tests (and a
/// curious benchmark) can see that a huge file costs a bounded read.
pub fn tail_lines_counted(path: &Path, max_lines: usize) -> (Reading<Vec<String>>, u64) {
    // The one safe open looks before opening (opening a device can have effects, a named pipe
    // has nothing to tail), never follows a link (its target's content is never shown), and
    // opens O_NONBLOCK | O_NOCTTY, so a path swapped for a pipe meanwhile cannot hang it.
    let file = match super::safe_open::read(path, super::safe_open::Role::Log) {
        Ok(opened) => opened.file,
        Err(error) => return (super::files::refused(error), 0),
    };
    let mut bytes_read = 0;
    // A file truncated while it is being read answers a short read: read it once more from
    // its new end before calling it a fault.
    for attempt in 0..2 {
        let meta = match file.metadata() {
            Ok(meta) => meta,
            Err(error) => return (super::fault(path, error), bytes_read),
        };
        if !meta.is_file() {
            return (super::fault(path, not_a_file(&meta)), bytes_read);
        }
        if meta.len() == 0 {
            return (Reading::Empty, bytes_read);
        }
        let mut tail = Tail::new(max_lines);
        let outcome = tail.read_from(&file, meta.len());
        bytes_read += tail.bytes_read;
        match outcome {
            Ok(()) => return (Reading::Found(tail.into_lines()), bytes_read),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof && attempt == 0 => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
                return (
                    super::fault(path, "it shrank while being read twice in a row"),
                    bytes_read,
                );
            }
            Err(error) => return (super::fault(path, error), bytes_read),
        }
    }
    (
        super::fault(path, "it shrank while being read twice in a row"),
        bytes_read,
    )
}

/// One backwards pass over a file: complete lines found so far (newest first) and the line
/// being assembled from its end towards its start.
struct Tail {
    max_lines: usize,
    /// Finished lines, newest first.
    newest_first: Vec<String>,
    line: PartialLine,
    bytes_read: u64,
}

impl Tail {
    fn new(max_lines: usize) -> Self {
        Tail {
            max_lines,
            newest_first: Vec::with_capacity(max_lines.min(1024)),
            line: PartialLine::default(),
            bytes_read: 0,
        }
    }

    /// Reads `file` (of length `len`) backwards until `max_lines` lines are complete, the
    /// start of the file is reached, or the read budget is spent.
    fn read_from(&mut self, file: &File, len: u64) -> io::Result<()> {
        if self.max_lines == 0 {
            return Ok(());
        }
        let mut buffer = [0u8; CHUNK_BYTES];
        let mut pos = len;
        let mut at_end = true;
        while pos > 0 {
            let budget = MAX_READ_BYTES.saturating_sub(self.bytes_read);
            if budget == 0 {
                self.finish_cut_short();
                return Ok(());
            }
            let want = (CHUNK_BYTES as u64).min(pos).min(budget) as usize;
            let start = pos - want as u64;
            let chunk = &mut buffer[..want];
            file.read_exact_at(chunk, start)?;
            self.bytes_read += want as u64;
            let mut rest: &[u8] = chunk;
            if at_end {
                // The newline that ends the last line ends it; it does not start an empty one.
                if let Some((b'\n', before)) = rest.split_last() {
                    rest = before;
                }
                at_end = false;
            }
            // Most chunks of a log are printable ASCII and newlines: checked once here, their
            // lines need no checking, decoding or making inert each.
            let plain = plain_text(rest);
            while let Some(newline) = memchr::memrchr(b'\n', rest) {
                let piece = &rest[newline + 1..];
                let shown = if self.line.seen == 0 && piece.len() <= MAX_LINE_BYTES {
                    // The whole line is in this chunk and short enough to show whole (most
                    // lines): it goes straight to text, with no partial line in between.
                    match plain {
                        Some(text) => text[newline + 1..rest.len()].to_owned(),
                        None => shown_text(last_frame(piece)),
                    }
                } else {
                    self.line.prepend(piece);
                    std::mem::take(&mut self.line).render()
                };
                self.newest_first.push(shown);
                if self.newest_first.len() == self.max_lines {
                    return Ok(());
                }
                rest = &rest[..newline];
            }
            self.line.prepend(rest);
            pos = start;
            // The oldest line wanted is already known: its last frame was found, or it is too
            // long to be shown but as its last bytes wherever it starts, so there is no need to
            // look for its start.
            if self.newest_first.len() + 1 == self.max_lines && self.line.is_determined() {
                let line = std::mem::take(&mut self.line);
                self.newest_first.push(line.render());
                return Ok(());
            }
        }
        // The start of the file starts the first line.
        let line = std::mem::take(&mut self.line);
        self.newest_first.push(line.render());
        Ok(())
    }

    /// The budget ran out inside a line whose start was not reached. When it is known to be
    /// too long it renders exactly as it would have; otherwise it is left out (unless it is
    /// all there is), because its shown text would depend on where the budget happened to end.
    fn finish_cut_short(&mut self) {
        let line = std::mem::take(&mut self.line);
        if line.is_determined() {
            self.newest_first.push(line.render());
        } else if self.newest_first.is_empty() {
            self.newest_first.push(line.render_cut());
        }
    }

    fn into_lines(mut self) -> Vec<String> {
        self.newest_first.reverse();
        self.newest_first
    }
}

/// The line being assembled backwards: its last bytes before the '\r's that end it (at most
/// the window a long line is cut from), how many such '\r's there are, and how long it is.
#[derive(Default)]
struct PartialLine {
    /// The line's last bytes, in file order, without the '\r's at its end.
    kept: Vec<u8>,
    /// How many bytes of the line have been seen, kept or not.
    seen: u64,
    /// The '\r's at the line's end, counted and not kept: a line that ends in thousands of
    /// them still keeps its last frame.
    trailing_cr: u64,
}

/// The window a long line is cut from.
const KEEP_BYTES: usize = WINDOW_BYTES;

impl PartialLine {
    /// Adds `bytes`, which come just before everything added so far.
    fn prepend(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let mut bytes = bytes;
        if self.kept.is_empty() && self.seen == bytes.len() as u64 + self.trailing_cr {
            let frames = bytes
                .iter()
                .rposition(|&b| b != b'\r')
                .map_or(0, |at| at + 1);
            self.trailing_cr += (bytes.len() - frames) as u64;
            bytes = &bytes[..frames];
        }
        let room = KEEP_BYTES.saturating_sub(self.kept.len());
        if room == 0 || bytes.is_empty() {
            return;
        }
        let take = &bytes[bytes.len().saturating_sub(room)..];
        // Copied whole, never byte by byte: a line found inside one chunk is one copy.
        let mut kept = Vec::with_capacity(take.len() + self.kept.len());
        kept.extend_from_slice(take);
        kept.extend_from_slice(&self.kept);
        self.kept = kept;
    }

    /// The last frame, when its start is among the kept bytes (a '\r' is kept before it).
    fn known_frame(&self) -> Option<&[u8]> {
        memchr::memrchr(b'\r', &self.kept).map(|at| &self.kept[at + 1..])
    }

    /// The length without the '\r's at its end, as far as seen: the real line is at least
    /// this long.
    fn shown_len(&self) -> u64 {
        self.seen - self.trailing_cr
    }

    /// How it is shown no longer depends on where the line starts: its last frame starts
    /// among the kept bytes, or it is longer than the window a long line is cut from.
    fn is_determined(&self) -> bool {
        self.known_frame().is_some() || self.shown_len() > WINDOW_BYTES as u64
    }

    /// The line as shown, when its start was reached or it is determined.
    fn render(self) -> String {
        if let Some(frame) = self.known_frame() {
            return shown_line(frame);
        }
        let len = self.shown_len();
        if len > MAX_LINE_BYTES as u64 {
            let whole = len <= WINDOW_BYTES as u64;
            format!("{TRUNCATED_MARK}{}", shown_end(&self.kept, whole))
        } else {
            shown_text(&self.kept)
        }
    }

    /// A line whose start was not reached and that is not determined: marked as cut,
    /// because more of it comes before.
    fn render_cut(self) -> String {
        format!("{TRUNCATED_MARK}{}", shown_end(&self.kept, false))
    }
}

/// A line's last carriage-return frame: what follows its last '\r', the '\r's that end it
/// left aside (a terminal's cursor went back to the start, and nothing was drawn after).
pub fn last_frame(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&b| b != b'\r')
        .map_or(0, |at| at + 1);
    let line = &line[..end];
    match memchr::memrchr(b'\r', line) {
        Some(at) => &line[at + 1..],
        None => line,
    }
}

/// `bytes` as text when it holds only printable ASCII and newlines: nothing in it needs to be
/// made inert. No early exit, so the check runs over whole vectors of bytes.
fn plain_text(bytes: &[u8]) -> Option<&str> {
    let plain = bytes.iter().fold(true, |all, &byte| {
        all & (byte.wrapping_sub(b' ') <= b'~' - b' ' || byte == b'\n')
    });
    if plain {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// A whole line as shown: decoded and made inert. Most log lines are printable ASCII, which
/// holds nothing to make inert: such a line is copied as it is, which keeps a 200-line tail
/// close to what `tail -n 200` costs.
fn shown_text(line: &[u8]) -> String {
    match plain_text(line) {
        Some(text) if !text.contains('\n') => text.to_owned(),
        _ => inert(&String::from_utf8_lossy(line)),
    }
}

/// How one line of a log (without its '\n') is shown: its last frame ([`last_frame`]),
/// whole and inert when it has at most [`MAX_LINE_BYTES`] bytes, otherwise [`TRUNCATED_MARK`] and the end
/// of the line's inert text, at most [`MAX_LINE_BYTES`] bytes of it.
///
/// The cut is made after the text is made inert, so it always falls on a character outside
/// every escape sequence: a cut inside a hyperlink or a colour never shows the rest of the
/// sequence as text. Only the line's last [`MAX_LINE_BYTES`] + [`LOOKBEHIND_BYTES`] bytes
/// are made inert (all a backwards reader keeps); when the line is longer, the first of
/// them may be inside a sequence that started earlier, so what could be the end of one is
/// skipped (see [`resume_at`]).
pub fn shown_line(line: &[u8]) -> String {
    let line = last_frame(line);
    if line.len() <= MAX_LINE_BYTES {
        return shown_text(line);
    }
    let window = &line[line.len().saturating_sub(WINDOW_BYTES)..];
    let whole = line.len() <= WINDOW_BYTES;
    format!("{TRUNCATED_MARK}{}", shown_end(window, whole))
}

/// The end of a long line as shown, from `window`, its last bytes: made inert, then cut to
/// at most [`MAX_LINE_BYTES`] bytes at a character that takes a cell of its own (never
/// between a letter and its marks). `whole` says that the window starts the line.
fn shown_end(window: &[u8], whole: bool) -> String {
    let mut start = 0;
    if !whole {
        // A window that starts inside a multi-byte character moves past its continuation
        // bytes (at most three): the text must not start with a U+FFFD not in the file.
        let limit = window.len().min(3);
        while start < limit && window[start] & 0xC0 == 0x80 {
            start += 1;
        }
    }
    let text = String::from_utf8_lossy(&window[start..]);
    let from = if whole { 0 } else { resume_at(&text) };
    let safe = inert(&text[from..]);
    let mut cut = safe.len().saturating_sub(MAX_LINE_BYTES);
    while !safe.is_char_boundary(cut) {
        cut += 1;
    }
    while let Some(mark) = safe[cut..].chars().next().filter(|&c| is_mark(c)) {
        cut += mark.len_utf8();
    }
    safe[cut..].to_string()
}

/// Where text that may start inside an escape sequence can be read from. A control string
/// (OSC, DCS, ...) runs to the first BEL, ESC or ST, so when the first of them is a BEL or
/// an ST, everything up to it may be a payload and is skipped; otherwise a leading run of
/// CSI parameters and its final byte (what a cut inside a colour leaves: `;196m`) is
/// skipped. At worst a few characters of plain text are dropped: never is a payload shown.
fn resume_at(text: &str) -> usize {
    let ends = ['\u{7}', '\u{1b}', '\u{9c}'];
    if let Some(at) = text.find(ends) {
        let rest = &text[at..];
        if rest.starts_with('\u{7}') || rest.starts_with('\u{9c}') {
            return at + rest.chars().next().map_or(1, char::len_utf8);
        }
        if rest.starts_with("\u{1b}\\") {
            return at + 2;
        }
    }
    let bytes = text.as_bytes();
    let from = usize::from(bytes.first() == Some(&b'['));
    let parameters = bytes[from..]
        .iter()
        .take_while(|b| (0x20..=0x3f).contains(*b))
        .count();
    match bytes.get(from + parameters) {
        Some(final_byte) if (0x40..=0x7e).contains(final_byte) => from + parameters + 1,
        _ => 0,
    }
}

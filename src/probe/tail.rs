//! The log tail the dashboard's detail pane shows: the last lines of a file, read backwards.
//!
//! This module owns reading the end of a log: chunks from the end towards the start until
//! enough lines are found, decoded lossily and made inert line by line. A log can be gigabytes
//! and a single "line" can be a progress bar redrawn with '\r' for hours without a newline, so
//! it must never read the whole file: the bytes it reads are capped ([`MAX_READ_BYTES`]) and
//! each line keeps at most [`MAX_LINE_BYTES`]. It must never hang on a named pipe, never
//! open a device, never show what a link at the log's path points to, never let a control
//! character or an escape sequence through, and never treat a file it cannot read as an empty
//! one.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::core::Reading;
use crate::core::text::inert;

use super::files::not_a_file;

/// How many bytes one read takes from the end: a screenful of ordinary log lines fits in one
/// or two reads.
pub const CHUNK_BYTES: usize = 8 * 1024;

/// The most bytes one call reads. Past it, the lines whose start was not reached are left
/// out: the pane shows fewer lines rather than the call reading a huge file.
pub const MAX_READ_BYTES: u64 = 256 * 1024;

/// The most bytes of one line that are shown. A longer line is shown as
/// [`TRUNCATED_MARK`] followed by its last bytes: the end of a line is what a terminal would
/// show last (a progress bar), and it is all a backwards reader can know without reading the
/// line whole.
pub const MAX_LINE_BYTES: usize = 4 * 1024;

/// Put in front of a line that was cut to its last [`MAX_LINE_BYTES`] bytes.
pub const TRUNCATED_MARK: char = '…';

/// The last `max_lines` lines of the file at `path`, oldest first.
///
/// A trailing line without its final '\n' (still being written) is included. A '\r' at the
/// end of a line ("\r\n" files) is dropped; every other control character and escape
/// sequence is made inert. Invalid UTF-8 becomes U+FFFD. Empty when the file does not exist
/// or has zero bytes; a fault when it is a link or not a regular file (a directory, a named
/// pipe, a device) or cannot be read.
pub fn tail_lines(path: &Path, max_lines: usize) -> Reading<Vec<String>> {
    tail_lines_counted(path, max_lines).0
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
                        None => shown_text(piece.strip_suffix(b"\r").unwrap_or(piece)),
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
            // The oldest line wanted is already known to be too long: it will be shown as its
            // last bytes wherever it starts, so there is no need to look for its start.
            if self.newest_first.len() + 1 == self.max_lines && self.line.is_known_too_long() {
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
        if line.is_known_too_long() {
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

/// The line being assembled backwards: its last bytes (at most what will be shown, plus one
/// for a '\r' that will be dropped) and how long it is so far.
#[derive(Default)]
struct PartialLine {
    /// The line's last bytes, in file order.
    kept: Vec<u8>,
    /// How many bytes of the line have been seen, kept or not.
    seen: u64,
}

/// One more than shown, for a final '\r' that is dropped.
const KEEP_BYTES: usize = MAX_LINE_BYTES + 1;

impl PartialLine {
    /// Adds `bytes`, which come just before everything added so far.
    fn prepend(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
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

    /// The length without a final '\r', as far as seen: the real line is at least this long.
    fn shown_len(&self) -> u64 {
        self.seen - u64::from(self.kept.last() == Some(&b'\r'))
    }

    fn is_known_too_long(&self) -> bool {
        self.shown_len() > MAX_LINE_BYTES as u64
    }

    /// The line as shown, when its start was reached or it is known to be too long.
    fn render(mut self) -> String {
        let too_long = self.is_known_too_long();
        if self.kept.last() == Some(&b'\r') {
            self.kept.pop();
        }
        if too_long {
            format!("{TRUNCATED_MARK}{}", shown_tail(&self.kept))
        } else {
            shown_text(&self.kept)
        }
    }

    /// A line whose start was not reached and that is shorter than a truncated line: marked
    /// as cut, because more of it comes before.
    fn render_cut(mut self) -> String {
        if self.kept.last() == Some(&b'\r') {
            self.kept.pop();
        }
        format!("{TRUNCATED_MARK}{}", shown_tail(&self.kept))
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

/// The last [`MAX_LINE_BYTES`] bytes of `line`, decoded and made inert. A cut that falls inside
/// a multi-byte character moves forward past its continuation bytes (at most three), so the
/// shown text does not start with a U+FFFD that is not in the file.
///
/// Only ever called for a line that was cut, so the first kept byte is always a cut point,
/// even when exactly [`MAX_LINE_BYTES`] bytes were kept (a final '\r' was dropped).
fn shown_tail(line: &[u8]) -> String {
    let mut start = line.len().saturating_sub(MAX_LINE_BYTES);
    let limit = (start + 3).min(line.len());
    while start < limit && line[start] & 0xC0 == 0x80 {
        start += 1;
    }
    inert(&String::from_utf8_lossy(&line[start..]))
}

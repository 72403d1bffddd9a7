//! Incremental line counting of progress files.
//!
//! A progress file gains one newline-terminated line per unit of work, and can grow to
//! gigabytes. This module owns counting those lines, and remembering per file (device, inode,
//! birth time, offset, count, the last bytes counted) so that the next pass reads only what
//! was appended. When the file shrank (truncation, copytruncate), was replaced (rotation, an
//! atomic rename, delete and recreate) or no longer holds the bytes it held, it counts again
//! from zero. It must never report a count it did not read, never let a failed read change
//! what it remembers, and never panic on what it finds on disk.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::core::{LineCount, Reading};

/// The read buffer. Measured with `cargo bench --bench progress_count` (1 GiB of JSONL in the
/// page cache, 2-core VM): 64 KiB 7.9 GiB/s, 256 KiB 9.9, 1 MiB 13.6, 4 MiB 13.6, 16 MiB 5.5
/// (past the cache, every read evicts what it counts). 1 MiB is the smallest of the fastest.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// How many bytes before the remembered offset are kept and compared on the next pass: a
/// file truncated and rewritten past the old offset between two passes keeps its inode and
/// grows, and only its content shows it is not the file that was counted.
const TAIL_BYTES: usize = 64;

/// What counting a span of a file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Newline bytes in the span: lines that ended in it.
    pub lines: u64,
    /// The offset just past the last byte actually read.
    pub end: u64,
}

/// Counts the newlines of `file` from `offset` to its end, reading through `buf`.
///
/// A final line without '\n' is not counted, and nothing is lost by that: the offset returned
/// is past the bytes actually read, so when the line is finished later its '\n' is counted
/// then. A file that grows while it is read is counted up to where reading stopped.
pub fn count_lines_from(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<Tally> {
    count_span(file, offset, u64::MAX, buf, None)
}

/// Counts newlines in `[from, until)`, or up to the end of the file if it is shorter, keeping
/// the last [`TAIL_BYTES`] bytes read in `tail` when given.
fn count_span(
    file: &File,
    from: u64,
    until: u64,
    buf: &mut [u8],
    mut tail: Option<&mut Vec<u8>>,
) -> io::Result<Tally> {
    if buf.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the count buffer is empty",
        ));
    }
    let mut lines = 0u64;
    let mut pos = from;
    while pos < until {
        let want = usize::try_from(until - pos).map_or(buf.len(), |left| left.min(buf.len()));
        let read = match file.read_at(&mut buf[..want], pos) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        let chunk = &buf[..read];
        lines += memchr::memchr_iter(b'\n', chunk).count() as u64;
        if let Some(tail) = tail.as_deref_mut() {
            remember_tail(tail, chunk);
        }
        pos += read as u64;
    }
    Ok(Tally { lines, end: pos })
}

fn remember_tail(tail: &mut Vec<u8>, chunk: &[u8]) {
    tail.extend_from_slice(&chunk[chunk.len().saturating_sub(TAIL_BYTES)..]);
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
}

/// Which file was counted, and how far.
#[derive(Debug, Clone)]
struct Counted {
    dev: u64,
    ino: u64,
    /// The birth time (statx), where the filesystem keeps one: an inode number freed by a
    /// delete is often handed straight to the next file created, the birth time is not.
    born: Option<SystemTime>,
    offset: u64,
    lines: u64,
    /// The last bytes before `offset`.
    tail: Vec<u8>,
}

/// Remembers, per progress file, where it stopped counting, so that each pass reads only the
/// bytes appended since the last one.
pub struct LineCounter {
    seen: HashMap<PathBuf, Counted>,
    buf: Vec<u8>,
    buffer_bytes: usize,
    bytes_read: u64,
}

/// Without the read buffer: a debug print of the prober must not dump a megabyte of zeros.
impl std::fmt::Debug for LineCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineCounter")
            .field("seen", &self.seen)
            .field("buffer_bytes", &self.buffer_bytes)
            .field("bytes_read", &self.bytes_read)
            .finish_non_exhaustive()
    }
}

impl Default for LineCounter {
    fn default() -> Self {
        Self::with_buffer_bytes(DEFAULT_BUFFER_BYTES)
    }
}

impl LineCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A counter reading through a buffer of `bytes` (at least 4 KiB), for the bench's sweep.
    pub fn with_buffer_bytes(bytes: usize) -> Self {
        LineCounter {
            seen: HashMap::new(),
            buf: Vec::new(),
            buffer_bytes: bytes.max(4096),
            bytes_read: 0,
        }
    }

    /// Counts newline-terminated lines of `path`, continuing from the last count when it is
    /// still the same file and has not shrunk. Empty when the file does not exist or holds no
    /// complete line; a fault when it is not a regular file or cannot be read, and then what
    /// was remembered about it is left as it was.
    pub fn count(&mut self, path: &Path) -> Reading<LineCount> {
        // Through the one safe open: a FIFO where the progress file should be faults, never
        // hangs, and a device is never opened.
        let super::safe_open::Opened { file, meta } =
            match super::safe_open::read(path, super::safe_open::Role::Progress) {
                Ok(opened) => opened,
                Err(super::safe_open::OpenError::Missing) => {
                    self.seen.remove(path);
                    return Reading::Empty;
                }
                Err(error) => return super::files::refused(error),
            };
        let modified = match super::files::modified_utc(&meta) {
            Ok(modified) => modified,
            Err(error) => return super::fault(path, error),
        };
        let (dev, ino, born, len) = (meta.dev(), meta.ino(), meta.created().ok(), meta.len());
        let (from, lines_before, mut tail) = match self.seen.get(path) {
            Some(seen)
                if seen.dev == dev
                    && seen.ino == ino
                    && seen.born == born
                    && seen.offset <= len
                    && still_holds(&file, seen) =>
            {
                (seen.offset, seen.lines, seen.tail.clone())
            }
            _ => (0, 0, Vec::new()),
        };
        if self.buf.len() != self.buffer_bytes {
            self.buf = vec![0; self.buffer_bytes];
        }
        // Up to the length stat'ed with the mtime, so the reading is one consistent moment;
        // what is appended meanwhile is counted on the next pass.
        let tally = match count_span(&file, from, len, &mut self.buf, Some(&mut tail)) {
            Ok(tally) => tally,
            Err(error) => return super::fault(path, error),
        };
        self.bytes_read += tally.end - from;
        let done = lines_before + tally.lines;
        self.seen.insert(
            path.to_path_buf(),
            Counted {
                dev,
                ino,
                born,
                offset: tally.end,
                lines: done,
                tail,
            },
        );
        if done == 0 {
            Reading::Empty
        } else {
            Reading::Found(LineCount { modified, done })
        }
    }

    /// Total bytes read for counting since this counter was made: the evidence, in tests and
    /// the bench, that a pass read only what was appended.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The offset counting reached in `path`, if it is remembered.
    pub fn offset(&self, path: &Path) -> Option<u64> {
        self.seen.get(path).map(|seen| seen.offset)
    }
}

/// Whether the bytes just before the remembered offset are still the ones counted.
fn still_holds(file: &File, seen: &Counted) -> bool {
    let Some(at) = seen.offset.checked_sub(seen.tail.len() as u64) else {
        return false;
    };
    let mut now = [0u8; TAIL_BYTES];
    let now = &mut now[..seen.tail.len()];
    file.read_exact_at(now, at).is_ok() && now == seen.tail.as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(content: &[u8], offset: u64, buffer: usize) -> Tally {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p");
        std::fs::write(&path, content).expect("write");
        let file = File::open(&path).expect("open");
        count_lines_from(&file, offset, &mut vec![0; buffer]).expect("count")
    }

    #[test]
    fn counts_only_newline_terminated_lines() {
        assert_eq!(tally(b"", 0, 8), Tally { lines: 0, end: 0 });
        assert_eq!(tally(b"a", 0, 8), Tally { lines: 0, end: 1 });
        assert_eq!(tally(b"a\n", 0, 8), Tally { lines: 1, end: 2 });
        assert_eq!(tally(b"a\nb\nc", 0, 8), Tally { lines: 2, end: 5 });
        assert_eq!(tally(b"\n\n\n", 0, 8), Tally { lines: 3, end: 3 });
    }

    #[test]
    fn buffer_boundaries_do_not_matter() {
        let content: Vec<u8> = (0..1000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        for buffer in [1, 2, 3, 7, 64, 4096] {
            assert_eq!(tally(&content, 0, buffer).lines, 1000, "buffer {buffer}");
        }
        assert_eq!(tally(&content, 7, 3).lines, 999);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_across_chunks() {
        let mut tail = Vec::new();
        remember_tail(&mut tail, b"abc");
        remember_tail(&mut tail, &[b'x'; 100]);
        assert_eq!(tail, vec![b'x'; TAIL_BYTES]);
        remember_tail(&mut tail, b"yz");
        assert_eq!(&tail[TAIL_BYTES - 2..], b"yz");
        assert_eq!(tail.len(), TAIL_BYTES);
    }
}

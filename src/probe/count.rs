//! Incremental line counting of progress files.
//!
//! A progress file gains one newline-terminated line per unit of work, and can grow to
//! gigabytes. This module owns counting those lines, and remembering per file (device, inode,
//! birth time, size and modification time, offset, count, a checksum of the block before the
//! offset) so that the next pass — or, through the counts `store::counts` keeps, the next
//! process — reads only what was appended. When the file shrank (truncation, copytruncate),
//! was replaced (rotation, an atomic rename, delete and recreate), was rewritten to the same
//! size or no longer holds the bytes it held, it counts again from zero. It must never report a count it did not read, never let a failed read change
//! what it remembers, and never panic on what it finds on disk.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::core::{LineCount, Reading};
use crate::store::counts::KeptCount;

/// The read buffer. Measured with `cargo bench --bench progress_count` (1 GiB of JSONL in the
/// page cache, 2-core VM): 64 KiB 7.9 GiB/s, 256 KiB 9.9, 1 MiB 13.6, 4 MiB 13.6, 16 MiB 5.5
/// (past the cache, every read evicts what it counts). 1 MiB is the smallest of the fastest.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// How many bytes before the remembered offset are checked on the next pass: a file truncated
/// and rewritten past the old offset between two passes keeps its inode and grows, and only
/// its content shows it is not the file that was counted. One page: one read.
const BLOCK_BYTES: usize = 4096;

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
    count_span(file, offset, u64::MAX, buf)
}

/// Counts newlines in `[from, until)`, or up to the end of the file if it is shorter.
fn count_span(file: &File, from: u64, until: u64, buf: &mut [u8]) -> io::Result<Tally> {
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
        pos += read as u64;
    }
    Ok(Tally { lines, end: pos })
}

/// Which file was counted, and how far: what a count must still match to be continued, in
/// this process or (through `store::counts`) in the next one.
type Counted = KeptCount;

/// Remembers, per progress file, where it stopped counting, so that each pass reads only the
/// bytes appended since the last one, and a new process only what was appended since the
/// last process kept its counts.
pub struct LineCounter {
    seen: HashMap<PathBuf, Counted>,
    buf: Vec<u8>,
    buffer_bytes: usize,
    bytes_read: u64,
    /// Whether `seen` changed since [`LineCounter::take_changed`] last said so.
    changed: bool,
}

/// Without the read buffer: a debug print of the prober must not dump a megabyte of zeros.
impl std::fmt::Debug for LineCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineCounter")
            .field("seen", &self.seen.len())
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
            changed: false,
        }
    }

    /// Starts from counts an earlier process kept (`store::counts::load`). Each is checked
    /// against its file before it is used, exactly as one of this process's own.
    pub fn adopt(&mut self, kept: HashMap<PathBuf, KeptCount>) {
        for (path, count) in kept {
            self.seen.entry(path).or_insert(count);
        }
    }

    /// Every count remembered, to be kept for the next process.
    pub fn counts(&self) -> impl ExactSizeIterator<Item = (&Path, &KeptCount)> {
        self.seen
            .iter()
            .map(|(path, count)| (path.as_path(), count))
    }

    /// Whether any count changed since the last call: whether there is anything new to keep.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
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
                    self.changed |= self.seen.remove(path).is_some();
                    return Reading::Empty;
                }
                Err(error) => return super::files::refused(error),
            };
        let modified = match super::files::modified_utc(&meta) {
            Ok(modified) => modified,
            Err(error) => return super::fault(path, error),
        };
        let now = Counted {
            dev: meta.dev(),
            ino: meta.ino(),
            born: meta.created().ok().and_then(|born| {
                let since = born.duration_since(SystemTime::UNIX_EPOCH).ok()?;
                Some((i64::try_from(since.as_secs()).ok()?, since.subsec_nanos()))
            }),
            mtime: (meta.mtime(), meta.mtime_nsec() as u32),
            offset: meta.len(),
            lines: 0,
            block: 0,
        };
        let seen = self.seen.get(path).copied();
        if let Some(seen) = seen.filter(|seen| seen.offset == now.offset && seen.mtime == now.mtime)
            && continues(&file, &seen, &now)
        {
            // Nothing appended, nothing rewritten: the count stands without reading.
            return found(modified, seen.lines);
        }
        let (from, lines_before) = match seen {
            Some(seen) if seen.offset < now.offset && continues(&file, &seen, &now) => {
                (seen.offset, seen.lines)
            }
            _ => (0, 0),
        };
        if self.buf.len() != self.buffer_bytes {
            self.buf = vec![0; self.buffer_bytes];
        }
        // Up to the length stat'ed with the mtime, so the reading is one consistent moment;
        // what is appended meanwhile is counted on the next pass.
        let tally = match count_span(&file, from, now.offset, &mut self.buf) {
            Ok(tally) => tally,
            Err(error) => return super::fault(path, error),
        };
        self.bytes_read += tally.end - from;
        let done = lines_before + tally.lines;
        let block = match block_sum(&file, tally.end) {
            Ok(block) => block,
            Err(error) => return super::fault(path, error),
        };
        self.seen.insert(
            path.to_path_buf(),
            Counted {
                offset: tally.end,
                lines: done,
                block,
                // A file that changed while it was read is read again next time.
                mtime: if tally.end == now.offset {
                    now.mtime
                } else {
                    (i64::MIN, 0)
                },
                ..now
            },
        );
        self.changed = true;
        found(modified, done)
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

fn found(modified: chrono::DateTime<chrono::Utc>, done: u64) -> Reading<LineCount> {
    if done == 0 {
        Reading::Empty
    } else {
        Reading::Found(LineCount { modified, done })
    }
}

/// Whether the file open now is the one `seen` counted, still holding the bytes it counted as
/// far as can be told cheaply: the same device, inode and birth, at least as long, and the
/// same block just before where counting stopped. A truncation, a replacement (a new inode),
/// a copytruncate that grew back and a rewrite all fail one of these.
fn continues(file: &File, seen: &Counted, now: &Counted) -> bool {
    seen.dev == now.dev
        && seen.ino == now.ino
        && seen.born == now.born
        && seen.offset <= now.offset
        && block_sum(file, seen.offset).is_ok_and(|sum| sum == seen.block)
}

/// The checksum of the [`BLOCK_BYTES`] (or fewer, at the start of a file) just before
/// `offset`. Any change to those bytes changes it (FNV-1a over 64-bit words with a final
/// mix: not a defence against someone forging a file, who could write it anyway).
pub fn block_sum(file: &File, offset: u64) -> io::Result<u64> {
    let mut block = [0u8; BLOCK_BYTES];
    let len = offset.min(BLOCK_BYTES as u64) as usize;
    let block = &mut block[..len];
    file.read_exact_at(block, offset - len as u64)?;
    let mut sum = 0xcbf2_9ce4_8422_2325u64 ^ len as u64;
    let mut words = block.chunks_exact(8);
    for word in words.by_ref() {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        sum = (sum ^ word)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }
    for &byte in words.remainder() {
        sum = (sum ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    sum ^= sum >> 33;
    sum = sum.wrapping_mul(0xff51_afd7_ed55_8ccd);
    Ok(sum ^ (sum >> 33))
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
}

//! File modification times as evidence (the log), and the file-kind and mtime helpers the
//! other probes share.
//!
//! This module owns one `lstat` per call: a regular file's modification time (nanoseconds) and
//! length. It never opens or reads the file, so a huge log costs nothing, and it never treats
//! a directory, a device or a link where a file should be as "nothing yet": that is a fault.
//! Opening goes through [`super::safe_open`], never around it.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use chrono::{DateTime, Utc};

use super::safe_open::{self, OpenError, Role};
use crate::core::{FileStamp, Reading};

/// The log's own modification time and length, with no rotation carried (the prober's reading
/// is [`super::rotation::LogMemory::read`]); empty when it does not exist or is zero bytes;
/// a fault when it is a link, not a regular file, or cannot be stat'ed (permission denied, a
/// path through a file, ...).
pub fn stamp(path: &Path) -> Reading<FileStamp> {
    let meta = match safe_open::look(path, Role::Log) {
        Ok(meta) => meta,
        Err(error) => return refused(error),
    };
    if meta.len() == 0 {
        return Reading::Empty;
    }
    match modified_utc(&meta) {
        Ok(modified) => Reading::Found(FileStamp {
            modified,
            len: meta.len(),
            carried: None,
        }),
        Err(error) => super::fault(path, error),
    }
}

/// What a path that could not be opened reads as: empty when nothing is there, else a fault
/// with the refusal's words (which name the path).
pub fn refused<T>(error: OpenError) -> Reading<T> {
    match error {
        OpenError::Missing => Reading::Empty,
        OpenError::Refused(why) => Reading::Fault(crate::core::text::inert(&why)),
    }
}

/// The modification time with its nanoseconds (`st_mtim`). Two writes within the same second
/// are different progress; whole seconds would hide the second one.
pub fn modified_utc(meta: &Metadata) -> Result<DateTime<Utc>, String> {
    let nanos = u32::try_from(meta.mtime_nsec()).unwrap_or(0);
    DateTime::from_timestamp(meta.mtime(), nanos)
        .ok_or_else(|| format!("modification time '{}' is out of range", meta.mtime()))
}

/// Names what a non-regular file is, for a fault ("it is a directory, not a file").
pub fn not_a_file(meta: &Metadata) -> String {
    format!("it is {}, not a file", safe_open::kind_words(meta.mode()))
}

/// A small regular file read whole: its metadata, its modification time and up to
/// `limit + 1` bytes (so the caller can tell "too large").
pub struct SmallFile {
    pub meta: std::fs::Metadata,
    pub modified: DateTime<Utc>,
    pub bytes: Vec<u8>,
}

/// Reads a small regular file for a probe: `Empty` when it does not exist, a fault when it
/// is not a regular file, is a link at a lock's path, or cannot be read. Opened through
/// [`safe_open::read`], so a FIFO where the file should be faults instead of hanging the
/// whole pass.
pub fn read_small(
    path: &Path,
    role: Role,
    limit: u64,
) -> Result<SmallFile, Reading<std::convert::Infallible>> {
    use std::io::Read;
    let safe_open::Opened { file, meta } = safe_open::read(path, role).map_err(refused)?;
    let modified = modified_utc(&meta).map_err(|error| super::fault(path, error))?;
    // Room for the whole file and one byte more: a file that has not grown since its `fstat`
    // comes back in one read, short of the room, and needs no second read to find its end.
    let room = meta.len().min(limit).saturating_add(1);
    let mut bytes = Vec::with_capacity(usize::try_from(room).unwrap_or(usize::MAX));
    let mut file = file.take(limit + 1);
    loop {
        let start = bytes.len();
        if start == bytes.capacity() {
            bytes.reserve(4096);
        }
        let spare = bytes.capacity() - start;
        bytes.resize(start + spare, 0);
        let read = loop {
            match file.read(&mut bytes[start..]) {
                Ok(read) => break read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(super::fault(path, error)),
            }
        };
        bytes.truncate(start + read);
        let whole = read == 0 || (read < spare && bytes.len() as u64 == meta.len());
        if whole || bytes.len() as u64 > limit {
            break;
        }
    }
    Ok(SmallFile {
        meta,
        modified,
        bytes,
    })
}

/// Turns the `Empty` or fault of [`read_small`] into a reading of any type.
pub fn absent<T>(reading: Reading<std::convert::Infallible>) -> Reading<T> {
    match reading {
        Reading::Empty => Reading::Empty,
        Reading::Fault(error) => Reading::Fault(error),
        Reading::Found(never) => match never {},
    }
}

//! File modification times as evidence (the log), and the file-kind and mtime helpers the
//! other probes share.
//!
//! This module owns one `stat` per call: a regular file's modification time (nanoseconds) and
//! length. It never opens or reads the file, so a huge log costs nothing, and it never treats
//! a directory or a device where a file should be as "nothing yet": that is a fault.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use chrono::{DateTime, Utc};

use crate::core::{FileStamp, Reading};

/// The file's modification time and length; empty when it does not exist or is zero bytes;
/// a fault when it is not a regular file or cannot be stat'ed (permission denied, a path
/// through a file, ...).
pub fn stamp(path: &Path) -> Reading<FileStamp> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Reading::Empty,
        Err(error) => return super::fault(path, error),
    };
    if !meta.is_file() {
        return super::fault(path, not_a_file(&meta));
    }
    if meta.len() == 0 {
        return Reading::Empty;
    }
    match modified_utc(&meta) {
        Ok(modified) => Reading::Found(FileStamp {
            modified,
            len: meta.len(),
        }),
        Err(error) => super::fault(path, error),
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
    let kind = meta.file_type();
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "something other than a regular file"
    };
    format!("it is {what}, not a file")
}

/// A small regular file read whole: its metadata, its modification time and up to
/// `limit + 1` bytes (so the caller can tell "too large").
pub struct SmallFile {
    pub meta: std::fs::Metadata,
    pub modified: DateTime<Utc>,
    pub bytes: Vec<u8>,
}

/// Reads a small regular file for a probe: `Empty` when it does not exist, a fault when it
/// is not a regular file or cannot be read. Opened with O_NONBLOCK, so a FIFO where the file
/// should be faults instead of hanging the whole pass.
pub fn read_small(path: &Path, limit: u64) -> Result<SmallFile, Reading<std::convert::Infallible>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::File::options()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(Reading::Empty),
        Err(error) => return Err(super::fault(path, error)),
    };
    let meta = file.metadata().map_err(|error| super::fault(path, error))?;
    if !meta.is_file() {
        return Err(super::fault(path, not_a_file(&meta)));
    }
    let modified = modified_utc(&meta).map_err(|error| super::fault(path, error))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| super::fault(path, error))?;
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

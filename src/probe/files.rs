//! File modification times as evidence (the log). Stub: the real probe replaces it.

use std::path::Path;

use crate::core::{FileStamp, Reading};

/// The file's modification time and length; empty when it does not exist or is zero bytes;
/// a fault when it is not a regular file or cannot be read.
pub fn stamp(path: &Path) -> Reading<FileStamp> {
    let _ = path;
    Reading::Empty
}

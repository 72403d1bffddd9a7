//! Markers: the files and folders that gate a job's work (seed 000's `.resumed`, session
//! markers, `mkdir` locks), as evidence.
//!
//! This module owns looking at a job's `markers` through the one safe open, judged like locks
//! ([`super::safe_open::Role::Marker`]): a link at a marker's path, a named pipe, a device or
//! a folder someone else can change is a fault naming the path, never followed or opened. A
//! file that holds a PID or a JSON lock is judged exactly like a lock
//! ([`super::lock::judge_lock_file`]), an empty one by the locks on it; a folder, and a file
//! holding anything else, are bare markers. It never removes or writes a marker
//! (`effect::release` does) and never judges staleness (`core::marker` does).

use std::path::Path;

use super::files::{self, SmallFile};
use super::lock;
use super::safe_open::{self, OpenError, Purpose, Role};
use crate::core::text::inert;
use crate::core::{MarkerKind, MarkerReading, Reading};

/// How much of what a marker holds is shown.
const SHOWN: usize = 160;
/// How many names of a folder marker are shown.
const SHOWN_NAMES: usize = 5;

/// Reads the marker at `path`: empty when nothing is there, a fault when it cannot be looked
/// at safely, else what it is, when it was written, and its holder.
pub fn read_marker(path: &Path) -> Reading<MarkerReading> {
    let entry = match safe_open::locate(path, Role::Marker, Purpose::Read) {
        Ok(entry) => entry,
        Err(error) => return files::refused(error),
    };
    let stat = match entry.stat_nofollow() {
        Ok(stat) => stat,
        Err(error) => return files::refused(error),
    };
    let modified = chrono::DateTime::from_timestamp(
        stat.st_mtime,
        u32::try_from(stat.st_mtime_nsec).unwrap_or(0),
    )
    .unwrap_or(chrono::DateTime::UNIX_EPOCH);
    match stat.st_mode & libc::S_IFMT {
        libc::S_IFDIR => match entry.folder_names(SHOWN_NAMES) {
            Ok((names, count)) => Reading::Found(MarkerReading {
                kind: MarkerKind::Folder,
                modified,
                size: count,
                holder: None,
                content: folder_words(&names, count),
            }),
            Err(error) => files::refused(error),
        },
        libc::S_IFREG => match files::read_small(path, Role::Marker, lock::READ_LIMIT) {
            Ok(file) => file_marker(file),
            Err(reading) => files::absent(reading),
        },
        mode => files::refused(safe_open::not_regular(path, Role::Marker, mode)),
    }
}

/// A file marker: judged like a lock when it holds a PID or a JSON lock (or nothing: then
/// the locks on it say who holds it), bare otherwise.
fn file_marker(file: SmallFile) -> Reading<MarkerReading> {
    let text = String::from_utf8_lossy(&file.bytes).into_owned();
    let content = shown(&text);
    let size = file.meta.len();
    let modified = file.modified;
    let trimmed = text.trim();
    let like_a_lock = trimmed.is_empty()
        || trimmed.bytes().all(|b| b.is_ascii_digit())
        || (trimmed.starts_with('{') && trimmed.contains("\"pid\""));
    let holder = if like_a_lock {
        match lock::judge_lock_file(file) {
            Reading::Found(holder) => Some(holder),
            // An empty file no process locks: a bare marker.
            Reading::Empty => None,
            Reading::Fault(error) => return Reading::Fault(error),
        }
    } else {
        None
    };
    Reading::Found(MarkerReading {
        kind: MarkerKind::File,
        modified,
        size,
        holder,
        content,
    })
}

/// What a file holds, inert, on one line, cut to [`SHOWN`] characters.
fn shown(text: &str) -> String {
    let one_line = text.trim().replace(['\n', '\r'], " ");
    let inert_text = inert(&one_line);
    let mut cut: String = inert_text.chars().take(SHOWN).collect();
    if cut.chars().count() < inert_text.chars().count() {
        cut.push('…');
    }
    cut
}

fn folder_words(names: &[String], count: u64) -> String {
    if count == 0 {
        return "an empty folder".to_string();
    }
    let shown: Vec<String> = names.iter().map(|n| format!("'{}'", inert(n))).collect();
    let more = count.saturating_sub(names.len() as u64);
    format!(
        "a folder holding {count} entr{}: {}{}",
        if count == 1 { "y" } else { "ies" },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// Why a marker could not be looked at, as a fault's words (for the release's re-check).
pub fn refusal_words(error: OpenError, path: &Path) -> String {
    match error {
        OpenError::Missing => format!("the marker '{}' is gone", path.display()),
        OpenError::Refused(why) => why,
    }
}

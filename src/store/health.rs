//! Whether the machine watcher's writes to the store succeed, told to every other process
//! through a small file in `state_dir` (`watch.health`), because a store that cannot be
//! written cannot carry the news itself.
//!
//! The watcher makes the file when it starts, full size, so that rewriting it later in
//! place needs no new space: it is still written on a full disk. Readers (`check`, the
//! dashboard) believe it only while its writer is the live watcher. The file is mihari's
//! own, 0600, never opened through a link. This module decides nothing: the engine turns a
//! failing report into a RED rule.

use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files;

/// The file's name inside `state_dir`.
pub const HEALTH_FILE: &str = "watch.health";
/// The file's fixed size: every report is padded to it, so a rewrite never grows the file.
const SIZE: usize = 1024;

/// What the watcher says of its writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteHealth {
    /// The watcher that wrote this.
    pub pid: u32,
    /// When its writes started failing; `None` while they succeed.
    pub failing_since: Option<DateTime<Utc>>,
    /// Writes that failed since then.
    pub failed: u64,
    /// What it keeps in memory to record when it can.
    pub kept: usize,
    /// What it could not keep (over its bound), lost.
    pub lost: u64,
    /// Why, in the operator's words, naming the file or folder and what to do.
    pub cause: Option<String>,
}

impl WriteHealth {
    /// The broken rule while writes fail (RED): what failed since when, why, and what the
    /// watcher keeps to record later.
    pub fn rule(&self) -> Option<String> {
        let since = self.failing_since?;
        let lost = if self.lost > 0 {
            format!("; {} did not fit in memory and are lost", self.lost)
        } else {
            String::new()
        };
        Some(format!(
            "store writes failing: {} write{} of the watcher (pid {}) could not be recorded \
             since {}: {}; it keeps {} in memory and records them as soon as it can{lost}",
            self.failed,
            if self.failed == 1 { "" } else { "s" },
            self.pid,
            since.format("%Y-%m-%d %H:%M:%S UTC"),
            self.cause.as_deref().unwrap_or("the store takes no write"),
            self.kept
        ))
    }
}

/// The file, open for the watcher to rewrite in place.
#[derive(Debug)]
pub struct HealthFile {
    file: fs::File,
}

/// Where the health file of `state_dir` is.
pub fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join(HEALTH_FILE)
}

impl HealthFile {
    /// Makes (or takes over) the file in `state_dir`, full size, saying `health`.
    pub fn create(state_dir: &Path, health: &WriteHealth) -> io::Result<HealthFile> {
        let path = path_in(state_dir);
        files::inspect(&path, "the watcher's health file")
            .map_err(|e| io::Error::other(e.to_string()))?;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        let mut health_file = HealthFile { file };
        health_file.write(health)?;
        Ok(health_file)
    }

    /// Rewrites the report in place, padded to the fixed size.
    pub fn write(&mut self, health: &WriteHealth) -> io::Result<()> {
        let mut health = health.clone();
        let mut text = serde_json::to_string(&health).map_err(io::Error::other)?;
        // A long cause is cut, never the report.
        while text.len() + 1 > SIZE {
            let cause = health.cause.take().unwrap_or_default();
            let keep = cause
                .chars()
                .count()
                .saturating_sub(text.len() + 1 - SIZE + 1);
            health.cause = Some(format!("{}…", cause.chars().take(keep).collect::<String>()));
            text = serde_json::to_string(&health).map_err(io::Error::other)?;
        }
        let mut bytes = text.into_bytes();
        bytes.push(b'\n');
        bytes.resize(SIZE, b' ');
        self.file.write_all_at(&bytes, 0)?;
        self.file.sync_data()
    }
}

/// What the health file of `state_dir` says, when there is one that mihari wrote.
pub fn read(state_dir: &Path) -> Option<WriteHealth> {
    let path = path_in(state_dir);
    files::inspect(&path, "the watcher's health file").ok()??;
    let file = files::open_private(&path).ok()?;
    let mut bytes = vec![0u8; SIZE];
    let n = file.read_at(&mut bytes, 0).ok()?;
    bytes.truncate(n);
    serde_json::from_slice(bytes.trim_ascii()).ok()
}

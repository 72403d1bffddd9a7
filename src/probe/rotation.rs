//! The log's stamp across a rotation, and a missing log said as missing.
//!
//! logrotate (copytruncate, or rename + create and a HUP that makes the writer reopen) and
//! Python's `RotatingFileHandler` leave an empty log behind: a healthy writer that wrote one
//! second before the rotation must not look as if it never wrote. This module owns carrying
//! the last write across it: when the log is empty, gone, shrunk or replaced, the newest of
//! the log itself, its rotated predecessor (`app.log.1`, `app.log.1.gz`, `app.log-YYYYMMDD`
//! and its `.gz` for today and yesterday, as logrotate's `dateext` names them) and — in a
//! long-running process — the log's own last reading remembered from an earlier pass. Every
//! predecessor is only looked at, with the log's own rules ([`safe_open::look`]): a link or
//! anything but a regular file there is passed over, never followed. It never lists a
//! folder (a log folder can hold thousands of files), never opens a predecessor, and never
//! makes a predecessor's time count while the log shows a newer one.
//!
//! After a copytruncate the copy's modification time is the rotation's (logrotate does not
//! keep it): a process that remembers the log knows better and takes the remembered last
//! write when the copy holds exactly what it last saw; a fresh `mihari check` can only say
//! the last write was at or before the rotation.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Days, Utc};

use super::files::modified_utc;
use super::safe_open::{self, OpenError, Role};
use crate::core::text::inert;
use crate::core::{Carried, FileStamp, Reading};

/// The log's reading, and whether its path names nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct LogReading {
    pub stamp: Reading<FileStamp>,
    /// "'/srv/app/colect.log' does not exist", when nothing is at the path. Inert.
    pub missing: Option<String>,
}

/// What one log looked like the last time it held something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    modified: DateTime<Utc>,
}

/// The last non-empty reading of every log, kept across passes by the [`super::Prober`] of a
/// long-running process (the dashboard, the watcher); a `mihari check` starts with none.
#[derive(Debug, Default)]
pub struct LogMemory {
    seen: HashMap<PathBuf, Seen>,
}

impl LogMemory {
    /// Reads the log at `path`, carrying its last write across a rotation.
    pub fn read(&mut self, path: &Path) -> LogReading {
        let today = chrono::Local::now().date_naive();
        self.read_on(path, today)
    }

    /// [`LogMemory::read`], with the local date that dated predecessors are named after.
    pub fn read_on(&mut self, path: &Path, today: chrono::NaiveDate) -> LogReading {
        let own = match safe_open::look(path, Role::Log) {
            Ok(meta) => Some(meta),
            Err(OpenError::Missing) => None,
            Err(error) => {
                return LogReading {
                    stamp: super::files::refused(error),
                    missing: None,
                };
            }
        };
        let previous = self.seen.get(path).copied();
        let mut newest: Option<(DateTime<Utc>, Option<Carried>)> = None;
        let mut len = 0;
        if let Some(meta) = own.as_ref().filter(|meta| meta.len() > 0) {
            let modified = match modified_utc(meta) {
                Ok(modified) => modified,
                Err(error) => {
                    return LogReading {
                        stamp: super::fault(path, error),
                        missing: None,
                    };
                }
            };
            len = meta.len();
            let now_seen = Seen {
                dev: meta.dev(),
                ino: meta.ino(),
                len,
                modified,
            };
            // A storm reads the same logs again and again: their entries are updated in place,
            // not made anew.
            match self.seen.get_mut(path) {
                Some(seen) => *seen = now_seen,
                None => {
                    self.seen.insert(path.to_path_buf(), now_seen);
                }
            }
            // The same file, grown or not, or a first look at a log that holds something: its
            // own time is the last write, and nothing else needs a look.
            let steady = previous.is_none_or(|p| {
                (p.dev, p.ino) == (now_seen.dev, now_seen.ino) && now_seen.len >= p.len
            });
            if steady {
                return LogReading {
                    stamp: Reading::Found(FileStamp {
                        modified,
                        len,
                        carried: None,
                    }),
                    missing: None,
                };
            }
            newest = Some((modified, None));
        }
        // Empty, gone, shrunk or replaced: the last write may be in the rotated file.
        for candidate in predecessors(path, today) {
            let Ok(meta) = safe_open::look(&candidate, Role::Log) else {
                continue;
            };
            // An empty predecessor holds no write (a rotated empty log, `ifempty`).
            if meta.len() == 0 {
                continue;
            }
            let Ok(mut at) = modified_utc(&meta) else {
                continue;
            };
            // A copy of exactly what was last seen (copytruncate): its time is the copy's,
            // the last write is the one remembered.
            if let Some(p) = previous
                && (meta.dev(), meta.ino()) != (p.dev, p.ino)
                && meta.len() == p.len
                && at > p.modified
            {
                at = p.modified;
            }
            if newest.as_ref().is_none_or(|(best, _)| at > *best) {
                newest = Some((at, Some(Carried::Rotated(candidate))));
            }
        }
        if let Some(p) = previous
            && newest.as_ref().is_none_or(|(best, _)| p.modified > *best)
        {
            newest = Some((p.modified, Some(Carried::Remembered)));
        }
        let missing = own.is_none().then(|| missing_words(path));
        let stamp = match newest {
            Some((modified, carried)) => Reading::Found(FileStamp {
                modified,
                len,
                carried,
            }),
            None => Reading::Empty,
        };
        LogReading { stamp, missing }
    }
}

/// The names a rotation gives the log's last file, in the log's folder: `NAME.1` (logrotate's
/// default, `RotatingFileHandler`), `NAME.1.gz` (`compress`), and `NAME-YYYYMMDD` with its
/// `.gz` for today and yesterday (logrotate's `dateext`; the rotation that ran at midnight,
/// or with `dateyesterday`, is named after yesterday).
pub fn predecessors(log: &Path, today: chrono::NaiveDate) -> Vec<PathBuf> {
    let Some(name) = log.file_name() else {
        return Vec::new();
    };
    let sibling = |suffix: &str| {
        let mut sibling = name.to_os_string();
        sibling.push(suffix);
        log.with_file_name(sibling)
    };
    let mut names = vec![sibling(".1"), sibling(".1.gz")];
    for day in [Some(today), today.checked_sub_days(Days::new(1))]
        .into_iter()
        .flatten()
    {
        let dated = format!("-{}", day.format("%Y%m%d"));
        names.push(sibling(&dated));
        names.push(sibling(&format!("{dated}.gz")));
    }
    names
}

/// The log a file a rotation renamed belongs to, by the name the rotation gave it: `NAME.N`
/// (logrotate's numbered generations, `RotatingFileHandler`'s backups) and `NAME-YYYYMMDD`
/// (logrotate's `dateext`) are files of `NAME`; `None` for any other name. The inverse of
/// [`predecessors`], older generations included (`NAME.2`, which [`LogMemory`] does not
/// read): whether a file so named was really rotated is for the caller to tell.
pub fn rotated_from(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let (stem, suffix) = name
        .rsplit_once('.')
        .filter(|(_, n)| (1..=4).contains(&n.len()))
        .or_else(|| name.rsplit_once('-').filter(|(_, date)| date.len() == 8))?;
    if stem.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(path.with_file_name(stem))
}

/// "'/srv/app/logs/colect.log' does not exist", and "(nor does its folder '/srv/app/logz')"
/// when the folder is missing too: a typo in a folder name is the likelier one then.
fn missing_words(path: &Path) -> String {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    let words = match folder {
        Some(folder) if std::fs::symlink_metadata(folder).is_err() => format!(
            "'{}' does not exist (nor does its folder '{}')",
            path.display(),
            folder.display()
        ),
        _ => format!("'{}' does not exist", path.display()),
    };
    inert(&words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predecessor_names_follow_logrotate_and_python() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 1).expect("a date");
        let names: Vec<String> = predecessors(Path::new("/srv/app.log"), day)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "/srv/app.log.1",
                "/srv/app.log.1.gz",
                "/srv/app.log-20261201",
                "/srv/app.log-20261201.gz",
                "/srv/app.log-20261130",
                "/srv/app.log-20261130.gz",
            ]
        );
    }

    #[test]
    fn a_rotated_name_belongs_to_its_log() {
        for (rotated, log) in [
            ("/srv/app.log.1", Some("/srv/app.log")),
            ("/srv/app.log.2", Some("/srv/app.log")),
            ("/srv/app.log.12", Some("/srv/app.log")),
            ("/srv/app.log-20261201", Some("/srv/app.log")),
            ("/srv/app-20261201", Some("/srv/app")),
            ("/srv/app.log", None),
            ("/srv/app.log.1.gz", None),
            ("/srv/run-2", None),
            ("/srv/.1", None),
            ("/srv/app.log.x1", None),
        ] {
            assert_eq!(
                rotated_from(Path::new(rotated)),
                log.map(PathBuf::from),
                "{rotated}"
            );
        }
    }

    #[test]
    fn a_link_at_the_predecessor_is_passed_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("app.log");
        std::fs::write(&log, "").expect("write");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "fresh\n").expect("write");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("app.log.1")).expect("link");
        let reading = LogMemory::default().read(&log);
        assert_eq!(reading.stamp, Reading::Empty);
        assert_eq!(reading.missing, None);
    }
}

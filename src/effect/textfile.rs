//! The watcher's metrics file for node_exporter's textfile collector
//! (`settings.prometheus_textfile`, SPEC §11): rewritten after every change and at least once
//! a minute, always whole.
//!
//! A scrape must never read half a file, so each version is written to a temp file in the
//! same folder — a hidden name not ending in `.prom`, which the collector skips — and renamed
//! over the old one. The temp file is created exclusively (`O_EXCL`, never following a link),
//! so nothing planted at its name is ever written through; the rename replaces the name
//! itself, never what a link there points to.
//!
//! The folder is judged before every write ([`refusal`]), by the rule mihari's other files
//! follow: a folder another user owns, or that group or others can write without the sticky
//! bit, is refused — anyone there could replace the metrics node_exporter serves. In a shared
//! sticky folder (`/tmp`-like) the file must be the watcher's own: another user's file at the
//! name cannot be replaced there, and node_exporter would go on serving it. A refusal names
//! the owner and what to do, on stderr, in `check`'s rules and in the watcher's escalations.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the file may go unwritten while nothing changes: node_exporter's
/// `node_textfile_mtime_seconds` then tells a quiet host from a dead watcher.
pub const REWRITE_EVERY: Duration = Duration::from_secs(60);

/// The least time between two versions: a job that logs a line every millisecond changes
/// its progress timestamp as often, and a scrape every 15 s needs no more than this.
pub const AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// The metrics file and when it was last written.
#[derive(Debug)]
pub struct Textfile {
    path: PathBuf,
    temp: PathBuf,
    written: Option<Instant>,
    /// The text last written (or tried), to tell a change from a pass that changed nothing.
    last: String,
    /// A change not written yet because the last version is younger than [`AT_MOST_EVERY`].
    pending: bool,
    /// The last failure said on stderr, so a failure that lasts is said once.
    failing: Option<String>,
}

impl Textfile {
    pub fn new(path: &Path) -> Textfile {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        Textfile {
            path: path.to_path_buf(),
            temp,
            written: None,
            last: String::new(),
            pending: false,
            failing: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the file must be written next: a change held back, else the minute's rewrite.
    pub fn due(&self) -> Instant {
        match self.written {
            None => Instant::now(),
            Some(at) if self.pending => at + AT_MOST_EVERY,
            Some(at) => at + REWRITE_EVERY,
        }
    }

    /// Offers the metrics of a pass: written when they changed (at most once per
    /// [`AT_MOST_EVERY`]; a change held back is written at [`Textfile::due`]) and when a
    /// minute passed since the last version.
    pub fn offer(&mut self, text: String) -> Result<(), String> {
        self.offer_at(text, Instant::now())
    }

    /// [`Textfile::offer`] at `now`.
    fn offer_at(&mut self, text: String, now: Instant) -> Result<(), String> {
        let changed = text != self.last;
        let age = self.written.map(|at| now.duration_since(at));
        let write = match age {
            None => true,
            Some(age) => {
                age >= REWRITE_EVERY || ((changed || self.pending) && age >= AT_MOST_EVERY)
            }
        };
        if !write {
            self.pending |= changed;
            if changed {
                self.last = text;
            }
            return Ok(());
        }
        self.pending = false;
        let result = self.write_at(&text, now);
        self.last = text;
        result
    }

    /// Replaces the file with `text`. A failure is said on stderr when it starts and when it
    /// ends (not at every pass), and answered, so a caller may record it.
    pub fn write(&mut self, text: &str) -> Result<(), String> {
        self.write_at(text, Instant::now())
    }

    fn write_at(&mut self, text: &str, now: Instant) -> Result<(), String> {
        let result = self.replace(text);
        self.written = Some(now);
        match (&result, &self.failing) {
            (Err(error), Some(told)) if told == error => {}
            (Err(error), _) => {
                eprintln!("mihari watch: {error}");
                self.failing = Some(error.clone());
            }
            (Ok(()), Some(_)) => {
                eprintln!(
                    "mihari watch: the metrics textfile '{}' is written again",
                    self.path.display()
                );
                self.failing = None;
            }
            (Ok(()), None) => {}
        }
        result
    }

    fn replace(&self, text: &str) -> Result<(), String> {
        if let Some(refused) = refusal(&self.path) {
            return Err(refused);
        }
        self.replace_file(text).map_err(|error| {
            format!(
                "cannot write the metrics textfile '{}': {}",
                self.path.display(),
                words(&error)
            )
        })
    }

    fn replace_file(&self, text: &str) -> io::Result<()> {
        match fs::remove_file(&self.temp) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.temp)?;
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .and_then(|()| fs::rename(&self.temp, &self.path));
        if written.is_err() {
            let _ = fs::remove_file(&self.temp);
        }
        written
    }
}

/// Why the metrics textfile at `path` must not be written, in words naming who else could
/// change it and what to do; `None` when its folder is fit (or missing: the write says so).
pub fn refusal(path: &Path) -> Option<String> {
    use crate::probe::safe_open::{FolderWriter, folder_writer, user_name};
    use std::os::unix::fs::MetadataExt;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let meta = fs::metadata(folder).ok()?;
    let watcher = nix::unistd::geteuid().as_raw();
    let elsewhere = "point settings.prometheus_textfile to a folder only the watcher's user or \
                     root can write";
    if let Some(writer) = folder_writer(meta.uid(), meta.mode(), watcher) {
        let fix = match writer {
            FolderWriter::Owner(_) => elsewhere.to_string(),
            FolderWriter::GroupOrOthers { .. } => {
                format!("chmod g-w,o-w '{}', or {elsewhere}", folder.display())
            }
        };
        return Some(format!(
            "the metrics textfile '{}' is not written: {}, so the metrics node_exporter \
             serves could be anyone's; {fix}",
            path.display(),
            writer.describe(folder)
        ));
    }
    // A sticky folder others may add to: the name must be the watcher's own file (root
    // may replace anyone's).
    let file = fs::symlink_metadata(path).ok()?;
    let shared = meta.mode() & 0o022 != 0;
    if shared && watcher != 0 && file.uid() != watcher {
        return Some(format!(
            "the metrics textfile '{}' belongs to user '{}', not to the watcher's user '{}': \
             the sticky folder '{}' keeps it from being replaced, and node_exporter serves it \
             instead of mihari's metrics; have its owner or root remove it, or {elsewhere}",
            path.display(),
            user_name(file.uid()),
            user_name(watcher),
            folder.display()
        ));
    }
    None
}

/// An I/O error in the operator's words, with what to do for the usual ones.
fn words(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENOSPC) => "the disk is full".to_string(),
        Some(libc::EACCES | libc::EPERM) => {
            "permission denied: let the watcher's user write its folder".to_string()
        }
        Some(libc::ENOENT) => "its folder does not exist: create it".to_string(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_planted_at_the_temp_name_is_never_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let precious = dir.path().join("precious.txt");
        fs::write(&precious, "keep me").expect("write");
        let path = dir.path().join("mihari.prom");
        let mut textfile = Textfile::new(&path);
        std::os::unix::fs::symlink(&precious, &textfile.temp).expect("plant");
        textfile.write("mihari_watcher_up 1\n").expect("written");
        assert_eq!(fs::read_to_string(&precious).expect("read"), "keep me");
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            "mihari_watcher_up 1\n"
        );
        assert!(!textfile.temp.exists(), "no temp file is left behind");
    }

    #[test]
    fn a_change_is_written_at_most_once_a_second_and_nothing_new_once_a_minute() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mihari.prom");
        let mut textfile = Textfile::new(&path);
        let read = || fs::read_to_string(&path).expect("read");
        let t0 = Instant::now();
        textfile.offer_at("a 1\n".into(), t0).expect("first");
        assert_eq!(read(), "a 1\n", "the first pass is written at once");
        textfile
            .offer_at("a 2\n".into(), t0 + Duration::from_millis(300))
            .expect("held");
        assert_eq!(read(), "a 1\n", "a change 300 ms later is held back");
        assert_eq!(textfile.due(), t0 + AT_MOST_EVERY, "and due a second after");
        textfile
            .offer_at("a 2\n".into(), t0 + AT_MOST_EVERY)
            .expect("due");
        assert_eq!(read(), "a 2\n", "the held change is written when due");
        let t1 = t0 + AT_MOST_EVERY;
        assert_eq!(textfile.due(), t1 + REWRITE_EVERY);
        fs::write(&path, "tampered\n").expect("write");
        textfile
            .offer_at("a 2\n".into(), t1 + Duration::from_secs(30))
            .expect("same");
        assert_eq!(
            read(),
            "tampered\n",
            "nothing new is not rewritten before the minute"
        );
        textfile
            .offer_at("a 2\n".into(), t1 + REWRITE_EVERY)
            .expect("minute");
        assert_eq!(
            read(),
            "a 2\n",
            "a minute on, the same text is written again"
        );
    }

    #[test]
    fn a_missing_folder_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut textfile = Textfile::new(&dir.path().join("nope/mihari.prom"));
        let error = textfile.write("x 1\n").expect_err("no folder");
        assert!(error.contains("its folder does not exist"), "{error}");
    }
}

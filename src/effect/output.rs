//! `mihari run`'s copy of the job's output into its log: the job's stdout and stderr are one
//! pipe, and one thread here reads it in large chunks and appends every byte, as it came, to
//! the file the log's path names now.
//!
//! This file owns that pipe's read end and the open log. It follows the path: when the path
//! names another file (logrotate's rename + create, an atomic replace) or nothing any more
//! (a delete), the next bytes go to the file opened again at the path, through the same safe
//! open the log always had ([`super::run::open_log`]) — so a rotation needs neither
//! `copytruncate` nor a signal; [`Copier::reopen`] (SIGHUP) opens it again at once. A write
//! that fails (disk full) never holds the job up: the pipe is still drained, the bytes lost
//! are counted, and a line in the log says how many once it can be written again. It must
//! not change a byte of what the job wrote (no prefix, no timestamp, partial lines and
//! carriage-return frames as they are), never hold the pipe's write end (its end of file
//! means the job's whole tree closed it), never stop reading while the job may still write
//! (a reader gone is SIGPIPE for the job), and never record anything itself: it tells the
//! supervisor in [`Note`]s, which says and records them.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use tokio::sync::mpsc::UnboundedSender;

/// One read takes at most this much of the pipe: more than a pipe holds by default (64 KiB),
/// so a job printing fast is drained in one read per wake-up. Allocated once.
const CHUNK: usize = 256 * 1024;
/// How often, at most, the log's path is looked at (one `lstat`) while output arrives: a
/// rotation is followed within this long of its new file appearing. A quiet job costs
/// nothing; a job printing without pause costs one `lstat` per interval (see the README's
/// performance table for what it measured).
const FOLLOW_EVERY: Duration = Duration::from_millis(50);
/// A log renamed away whose path names nothing yet is given this long for its rotator to
/// create the new one (logrotate's `create` comes right after its rename, and refuses a file
/// someone made in between); the bytes meanwhile go to the renamed file. A log deleted
/// outright is made again at once.
const MISSING_GRACE: Duration = Duration::from_secs(1);
/// After the path could not be opened again, it is tried again no sooner than this.
const REOPEN_RETRY: Duration = Duration::from_secs(1);
/// After a small read, the copier lets the next bytes gather this long before it reads them:
/// a job writing a line at a time, fast, is then copied a few hundred lines per wake-up
/// instead of one, for a tenth of the CPU (see the README's performance table). A pipe holds
/// 64 KiB: only a job printing more than that in this long, just after a quiet moment, ever
/// waits on it, and for no longer than this.
const GATHER: Duration = Duration::from_millis(1);
/// A read this small says the job writes little at a time: the next one is gathered.
const SMALL_READ: usize = 16 * 1024;
/// Once the job's tree has ended, what is left in the pipe is read for at most this long:
/// only a process outside the tree that was handed the pipe could keep it coming.
const FINISH_LIMIT: Duration = Duration::from_secs(2);

/// What the copier tells the supervisor, to say on its stderr and record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Writing the log has started to fail (`error`, the system's words): the job's output is
    /// being dropped and counted.
    Losing { error: String },
    /// `bytes` of the job's output were dropped while the log could not be written; `noted`
    /// when the line saying so is in the log.
    Lost {
        bytes: u64,
        error: String,
        noted: bool,
    },
    /// The log's path could not be opened again (`why` names it and what to do): the output
    /// still goes to the file it went to.
    CannotReopen { why: String },
}

/// A pipe for the job's output: `(read, write)`, both closed on exec; the write end is handed
/// to the job as its stdout and stderr.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    // Only the reading side is non-blocking: the job's writes block as they would on a file
    // (and only while the pipe is full).
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((read, write))
}

/// What the supervisor asks of the copier, read by its thread after each wake-up.
#[derive(Default)]
struct Asked {
    reopen: AtomicBool,
    finish: AtomicBool,
}

/// The thread copying the job's output into its log, and the way to wake it.
pub struct Copier {
    asked: Arc<Asked>,
    /// Write end of the copier's wake-up pipe: one byte after each request.
    wake: OwnedFd,
    thread: JoinHandle<()>,
    stderr_is_log: bool,
}

impl Copier {
    /// Starts copying what arrives on `read` into `log` (already opened, safely, at `path`).
    /// Notes go to `notes`. Fails only when the thread or its wake-up pipe cannot be made.
    pub fn start(
        read: OwnedFd,
        path: &Path,
        log: File,
        notes: UnboundedSender<Note>,
    ) -> io::Result<Copier> {
        let (wake_read, wake) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let meta = log.metadata()?;
        let id = (meta.dev(), meta.ino());
        // A restart hands `mihari run` the log as its own stdout and stderr: those follow the
        // log too, so what it says itself lands where the job's output does.
        let stdout_is_log = names_file(libc::STDOUT_FILENO, id);
        let stderr_is_log = names_file(libc::STDERR_FILENO, id);
        let asked = Arc::new(Asked::default());
        let sink = Sink {
            path: path.to_path_buf(),
            file: log,
            id,
            checked: Instant::now(),
            missing_since: None,
            reopen_failed: None,
            last_refusal: None,
            at_line_start: meta.len() == 0,
            losing: None,
            stdout_is_log,
            stderr_is_log,
            notes,
        };
        let pump = Pump {
            read,
            wake: wake_read,
            asked: Arc::clone(&asked),
            sink,
        };
        let thread = std::thread::Builder::new()
            .name("job-output".into())
            .spawn(move || pump.run())?;
        Ok(Copier {
            asked,
            wake,
            thread,
            stderr_is_log,
        })
    }

    /// Whether `mihari run`'s own stderr is the job's log (a restart): a note the copier put
    /// in the log need not be said there again.
    pub fn stderr_is_log(&self) -> bool {
        self.stderr_is_log
    }

    /// Opens the log's path again now (SIGHUP, logrotate's `postrotate` convention).
    pub fn reopen(&self) {
        self.asked.reopen.store(true, Ordering::Release);
        self.wake_up();
    }

    /// The job's tree has ended: copies what is left in the pipe and waits for the thread.
    pub fn finish(self) {
        self.asked.finish.store(true, Ordering::Release);
        self.wake_up();
        let _ = self.thread.join();
    }

    fn wake_up(&self) {
        // A full wake-up pipe already wakes the thread: EAGAIN is fine.
        let _ = nix::unistd::write(&self.wake, &[1]);
    }
}

/// Whether descriptor `fd` of this process is the file `id` (device, inode).
fn names_file(fd: i32, id: (u64, u64)) -> bool {
    // SAFETY: the descriptor is only looked at, for the length of this call; it is one of
    // this process's standard ones, open for its whole life (or not open: fstat says EBADF).
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    nix::sys::stat::fstat(borrowed)
        .is_ok_and(|stat| (stat.st_dev, stat.st_ino) == id && stat.st_nlink > 0)
}

/// The copying thread's state: the pipe, its wake-up, and where the bytes go.
struct Pump {
    read: OwnedFd,
    wake: OwnedFd,
    asked: Arc<Asked>,
    sink: Sink,
}

impl Pump {
    fn run(mut self) {
        let mut buffer = vec![0u8; CHUNK];
        let mut finishing: Option<Instant> = None;
        let mut last_read = 0;
        loop {
            if self.asked.reopen.swap(false, Ordering::AcqRel) {
                self.sink.reopen(true);
            }
            match nix::unistd::read(&self.read, &mut buffer) {
                // Every write end is closed: the job's whole tree is done with its output.
                Ok(0) => break,
                Ok(read) => {
                    last_read = read;
                    self.sink.append(&buffer[..read]);
                    if finishing.is_some_and(|since| since.elapsed() >= FINISH_LIMIT) {
                        break;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    if finishing.is_some() {
                        break;
                    }
                    let wrote = self.wait(PollTimeout::NONE);
                    if self.asked.finish.load(Ordering::Acquire) {
                        finishing = Some(Instant::now());
                    } else if wrote && last_read < SMALL_READ {
                        std::thread::sleep(GATHER);
                    }
                }
                // Never seen on a pipe; the job must not lose its reader over it.
                Err(_) => {
                    self.wait(PollTimeout::from(100u16));
                }
            }
        }
        self.sink.end();
    }

    /// Sleeps until the pipe has bytes (or is closed) or the supervisor asks something;
    /// `true` when it was the job that wrote (and nothing was asked).
    fn wait(&mut self, timeout: PollTimeout) -> bool {
        let mut fds = [
            PollFd::new(self.read.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
        ];
        let _ = poll(&mut fds, timeout);
        let [job, asked] = fds.map(|fd| fd.revents().unwrap_or(PollFlags::empty()));
        let mut drained = [0u8; 64];
        while let Ok(n) = nix::unistd::read(&self.wake, &mut drained) {
            if n == 0 {
                break;
            }
        }
        job == PollFlags::POLLIN && asked.is_empty()
    }
}

/// Bytes dropped since the log last took a write, and the error that dropped them.
struct Loss {
    bytes: u64,
    error: String,
}

/// The log as the copier writes it: the open file, what the path named when it was opened,
/// and what was lost.
struct Sink {
    path: PathBuf,
    file: File,
    /// Device and inode of `file`: the path still names it while `lstat` says the same.
    id: (u64, u64),
    checked: Instant,
    /// Since when the path has named nothing while `file` still has a name elsewhere.
    missing_since: Option<Instant>,
    reopen_failed: Option<Instant>,
    /// The last refusal said, so that a path refused again is not said again.
    last_refusal: Option<String>,
    /// The last byte written was a newline (or nothing was written): a note needs no
    /// newline of its own before it.
    at_line_start: bool,
    losing: Option<Loss>,
    stdout_is_log: bool,
    stderr_is_log: bool,
    notes: UnboundedSender<Note>,
}

impl Sink {
    /// Appends one chunk of the job's output, after looking at the path when it is time.
    fn append(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        if now.duration_since(self.checked) >= FOLLOW_EVERY {
            self.checked = now;
            self.follow(now);
        }
        if self.losing.is_some() && !self.note_loss() {
            self.lose(bytes.len(), None);
            return;
        }
        self.write(bytes);
    }

    /// Writes `bytes` whole, or counts what could not be written.
    fn write(&mut self, bytes: &[u8]) {
        let mut done = 0;
        let mut failure = None;
        while done < bytes.len() {
            match (&self.file).write(&bytes[done..]) {
                Ok(0) => {
                    failure = Some("the log took no bytes".to_string());
                    break;
                }
                Ok(written) => done += written,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    failure = Some(error_words(&error));
                    break;
                }
            }
        }
        if let Some(&last) = bytes[..done].last() {
            self.at_line_start = last == b'\n';
        }
        if let Some(error) = failure {
            self.lose(bytes.len() - done, Some(error));
        }
    }

    /// Counts `bytes` as lost; the first loss of an episode is told with its `error`.
    fn lose(&mut self, bytes: usize, error: Option<String>) {
        match &mut self.losing {
            Some(loss) => loss.bytes += bytes as u64,
            None => {
                let error = error.unwrap_or_else(|| "unknown error".to_string());
                let _ = self.notes.send(Note::Losing {
                    error: error.clone(),
                });
                self.losing = Some(Loss {
                    bytes: bytes as u64,
                    error,
                });
            }
        }
    }

    /// Writes the line that says how much was lost, where it was lost; `true` when it is in
    /// the log whole (the loss is over and told).
    fn note_loss(&mut self) -> bool {
        let Some(loss) = &self.losing else {
            return true;
        };
        let text = format!(
            "{}mihari: {} bytes of the job's output were lost here: the log could not be \
             written ({})\n",
            if self.at_line_start { "" } else { "\n" },
            loss.bytes,
            loss.error
        );
        match (&self.file).write(text.as_bytes()) {
            Ok(written) if written == text.len() => {
                self.at_line_start = true;
                if let Some(loss) = self.losing.take() {
                    let _ = self.notes.send(Note::Lost {
                        bytes: loss.bytes,
                        error: loss.error,
                        noted: true,
                    });
                }
                true
            }
            Ok(written) => {
                // Part of the line went in: the next one starts on a line of its own.
                if written > 0 {
                    self.at_line_start = false;
                }
                false
            }
            Err(_) => false,
        }
    }

    /// Looks at the path: when it names another file, or has named nothing for a while (or
    /// the file was deleted outright), the path is opened again.
    fn follow(&mut self, now: Instant) {
        match fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.id => self.missing_since = None,
            // Replaced (rename + create, an atomic rename over it, a link planted there: the
            // safe open refuses that one).
            Ok(_) => self.reopen(false),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let deleted = self.file.metadata().is_ok_and(|meta| meta.nlink() == 0);
                let since = *self.missing_since.get_or_insert(now);
                if deleted || now.duration_since(since) >= MISSING_GRACE {
                    self.reopen(false);
                }
            }
            // Cannot look (its folder made unreadable): the output stays where it goes.
            Err(_) => {}
        }
    }

    /// Opens the log's path again and writes there from now on. `forced` (SIGHUP) skips the
    /// wait after a failed attempt.
    fn reopen(&mut self, forced: bool) {
        let now = Instant::now();
        if !forced
            && self
                .reopen_failed
                .is_some_and(|at| now.duration_since(at) < REOPEN_RETRY)
        {
            return;
        }
        match super::run::open_log(&self.path) {
            Ok(file) => {
                let Ok(meta) = file.metadata() else {
                    return;
                };
                if self.stdout_is_log {
                    let _ = nix::unistd::dup2_stdout(&file);
                }
                if self.stderr_is_log {
                    let _ = nix::unistd::dup2_stderr(&file);
                }
                if (meta.dev(), meta.ino()) != self.id && meta.len() == 0 {
                    self.at_line_start = true;
                }
                self.id = (meta.dev(), meta.ino());
                self.file = file;
                self.checked = now;
                self.missing_since = None;
                self.reopen_failed = None;
                self.last_refusal = None;
            }
            Err(why) => {
                self.reopen_failed = Some(now);
                if self.last_refusal.as_deref() != Some(why.as_str()) {
                    self.last_refusal = Some(why.clone());
                    let _ = self.notes.send(Note::CannotReopen { why });
                }
            }
        }
    }

    /// The pipe is done: a loss not yet told is told now (in the log when it can take it).
    fn end(mut self) {
        if self.losing.is_some()
            && !self.note_loss()
            && let Some(loss) = self.losing.take()
        {
            let _ = self.notes.send(Note::Lost {
                bytes: loss.bytes,
                error: loss.error,
                noted: false,
            });
        }
    }
}

/// The system's words for a failed write ("No space left on device"): never a path.
fn error_words(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => Errno::from_raw(code).desc().to_string(),
        None => error.kind().to_string(),
    }
}

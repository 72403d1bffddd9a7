//! One running process, looked at whole, for `mihari adopt`: its argv, working folder, owner,
//! program, start time and where its standard output and error go.
//!
//! This module owns reading `/proc/<pid>/{stat,cmdline,cwd,exe,status,fd,fdinfo}` for a
//! process the operator names, and telling apart a process that is not there (or is a
//! zombie, or a kernel thread with no argv) from one the system will not let this user
//! inspect; and finding the processes on the other end of a pipe its output goes into (the
//! `tee` of `python3 t.py | tee t.log`, or the producer a `tee` copies). It never signals,
//! opens or writes anything of the process's: an output is judged by `stat` through
//! `/proc/<pid>/fd/N` (the open file itself, whatever its name says now), never opened. It
//! does not decide what the operator should write in a jobs file: `cli::adopt` does.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::proc::{self, ProcLookup};

/// How much of a command line is read: far past any real argv (Linux's own limit is 2 MiB of
/// argv and environment together, but no honest job needs a jobs file entry that long).
const CMDLINE_LIMIT: usize = 256 * 1024;

/// A running process as `mihari adopt` needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Portrait {
    pub pid: u32,
    /// Each argument exactly as the process holds it (not made inert: the stanza must run the
    /// same program with the same arguments; the caller quotes it).
    pub argv: Vec<Vec<u8>>,
    /// Its working folder; `deleted` when the folder was removed since it started.
    pub cwd: Target,
    /// The program file it runs (`/proc/<pid>/exe`), when readable.
    pub exe: Option<PathBuf>,
    /// Effective uid and its user name, when it has one.
    pub uid: u32,
    pub user: Option<String>,
    /// Its parent: a pipeline's member whose parent also writes into the pipe is not the
    /// pipeline's own member but that one's child.
    pub ppid: u32,
    pub start_ticks: u64,
    pub started_at: Option<DateTime<Utc>>,
    /// Standard input (fd 0), standard output (fd 1) and standard error (fd 2).
    pub stdin: Output,
    pub stdout: Output,
    pub stderr: Output,
    /// The regular files it holds open for writing on its other descriptors (3 and up), in
    /// descriptor order: where a `tee` copies what it reads.
    pub written: Vec<WrittenFile>,
}

/// A regular file a process holds open for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub fd: u32,
    pub file: Target,
    /// Its command line names it (`tee -a t.log`): the file it was told to write, not one it
    /// opened for itself.
    pub named: bool,
}

/// The processes whose standard descriptors are on one pipe: those that write into it (fd 1
/// or 2) and those that read it (fd 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipeEnds {
    pub writers: Vec<PipeEnd>,
    pub readers: Vec<PipeEnd>,
    /// Processes whose descriptors this user may not look at: one may be on the pipe.
    pub unseen: usize,
}

/// One process on a pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipeEnd {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
}

/// A path a process holds open by a link in `/proc` (its cwd, an open file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub path: PathBuf,
    /// The kernel says " (deleted)": the name is gone, the process still holds the thing.
    pub deleted: bool,
}

/// Where one of a process's standard outputs goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A regular file, by the name it was opened under.
    File(Target),
    /// A terminal (`/dev/pts/3`): the output is on a screen, nowhere to read it back.
    Terminal(PathBuf),
    /// `/dev/null`: the output is thrown away.
    Null,
    /// A pipe or a socket (`pipe:[4242]`): another process reads it (a pipeline, a
    /// supervisor, the journal).
    Pipe(String),
    /// Something else (another device, an anonymous inode), named as the kernel names it.
    Other(String),
    /// The descriptor is closed.
    Closed,
}

/// Why a process cannot be looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such process (or it is hidden from this user by `hidepid`), or it has exited and is
    /// a zombie, or it is a kernel thread: nothing to adopt. The words say which.
    NotThere(String),
    /// It exists, but this user may not see its working folder or open files.
    Denied(String),
}

/// Looks at process `pid` whole, or says why it cannot.
pub fn inspect(pid: u32) -> Result<Portrait, Refusal> {
    let stat = match proc::lookup(pid) {
        ProcLookup::Running(stat) => stat,
        ProcLookup::Zombie(_) => {
            return Err(Refusal::NotThere(format!(
                "process {pid} has exited (it is a zombie waiting for its parent): there is \
                 nothing left to adopt"
            )));
        }
        ProcLookup::Gone => {
            return Err(Refusal::NotThere(format!(
                "no process {pid} is running (or it is hidden from you by /proc's hidepid): \
                 look the PID up again, e.g. pgrep -af NAME"
            )));
        }
        ProcLookup::Denied(why) => return Err(denied(pid, None, &why)),
        ProcLookup::Fault(why) => return Err(Refusal::NotThere(why)),
    };
    let mut bytes = Vec::new();
    match proc::read_into(&format!("/proc/{pid}/cmdline"), &mut bytes, CMDLINE_LIMIT) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            return Err(denied(pid, None, &error.to_string()));
        }
        Err(error) => {
            return Err(Refusal::NotThere(format!(
                "cannot read the command line of process {pid}: {error}"
            )));
        }
    }
    if bytes.len() >= CMDLINE_LIMIT {
        return Err(Refusal::NotThere(format!(
            "the command line of process {pid} is longer than {} KiB: too long to write in a \
             jobs file",
            CMDLINE_LIMIT / 1024
        )));
    }
    let argv = split_argv(&bytes);
    if argv.is_empty() {
        return Err(Refusal::NotThere(format!(
            "process {pid} ('{}') has no command line: it is a kernel thread (or is exiting), \
             not a job mihari can restart",
            stat.comm
        )));
    }
    let (uid, user) = owner(pid);
    let cwd = match link(pid, "cwd") {
        Ok(target) => target,
        Err(error) => return Err(denied(pid, user.as_deref(), &error.to_string())),
    };
    let stdin = output(pid, 0).map_err(|e| denied(pid, user.as_deref(), &e.to_string()))?;
    let stdout = output(pid, 1).map_err(|e| denied(pid, user.as_deref(), &e.to_string()))?;
    let stderr = output(pid, 2).map_err(|e| denied(pid, user.as_deref(), &e.to_string()))?;
    let written =
        written_files(pid, &argv).map_err(|e| denied(pid, user.as_deref(), &e.to_string()))?;
    let exe = link(pid, "exe").ok().map(|target| target.path);
    Ok(Portrait {
        pid,
        argv,
        cwd,
        exe,
        uid,
        user,
        ppid: stat.ppid,
        start_ticks: stat.start_ticks,
        started_at: proc::start_wall(stat.start_ticks).ok(),
        stdin,
        stdout,
        stderr,
        written,
    })
}

/// The regular files `pid` holds open for writing on descriptors 3 and up (its `fdinfo`
/// flags say how each was opened), each told whether its argv names it. A process that
/// exits meanwhile holds none.
fn written_files(pid: u32, argv: &[Vec<u8>]) -> io::Result<Vec<WrittenFile>> {
    let listing = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(listing) => listing,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut fds: Vec<u32> = listing
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    fds.sort_unstable();
    // The files its arguments name, by identity: `t.log` relative to its working folder is
    // the same file as the '/srv/t.log' its descriptor shows.
    let named: Vec<(u64, u64)> = argv
        .iter()
        .skip(1)
        .take(64)
        .filter_map(|arg| {
            use std::os::unix::ffi::OsStrExt;
            let arg = Path::new(std::ffi::OsStr::from_bytes(arg));
            let path = if arg.is_absolute() {
                arg.to_path_buf()
            } else {
                Path::new(&format!("/proc/{pid}/cwd")).join(arg)
            };
            std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
        })
        .collect();
    let mut written = Vec::new();
    for fd in fds {
        let Ok(file) = link(pid, &format!("fd/{fd}")) else {
            continue;
        };
        if !file.path.is_absolute() {
            continue;
        }
        let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        if !meta.file_type().is_file() || !open_for_writing(pid, fd) {
            continue;
        }
        written.push(WrittenFile {
            fd,
            file,
            named: named.contains(&(meta.dev(), meta.ino())),
        });
    }
    Ok(written)
}

/// Whether descriptor `fd` of `pid` was opened to write (`O_WRONLY` or `O_RDWR` in the
/// octal `flags:` of its fdinfo).
fn open_for_writing(pid: u32, fd: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("flags:"))
                .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        })
        .is_some_and(|flags| flags & 0o3 != 0)
}

/// The processes with a standard descriptor on `pipe` (as the kernel names it,
/// 'pipe:[4242]'): one walk of `/proc`, this process left out. A process whose descriptors
/// cannot be looked at is counted in `unseen`, never taken as off the pipe.
pub fn pipe_ends(pipe: &str) -> PipeEnds {
    let mut ends = PipeEnds::default();
    let me = std::process::id();
    let Ok(listing) = std::fs::read_dir("/proc") else {
        ends.unseen += 1;
        return ends;
    };
    for entry in listing.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let on_pipe = |fd: u32| match std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) {
            Ok(target) => Ok(target.as_os_str() == pipe),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) if error.kind() == io::ErrorKind::PermissionDenied => Err(()),
            Err(_) => Ok(false),
        };
        let (reads, writes) = match (on_pipe(0), on_pipe(1), on_pipe(2)) {
            (Ok(reads), Ok(out), Ok(err)) => (reads, out || err),
            _ => {
                ends.unseen += 1;
                continue;
            }
        };
        if !reads && !writes {
            continue;
        }
        let ProcLookup::Running(stat) = proc::lookup(pid) else {
            continue;
        };
        let end = PipeEnd {
            pid,
            ppid: stat.ppid,
            start_ticks: stat.start_ticks,
        };
        if reads {
            ends.readers.push(end);
        }
        if writes {
            ends.writers.push(end);
        }
    }
    ends
}

/// The refusal for a process this user may not inspect, saying what to do.
fn denied(pid: u32, user: Option<&str>, error: &str) -> Refusal {
    let whose = match user {
        Some(user) => format!(" (it belongs to user '{user}')"),
        None => String::new(),
    };
    let as_whom = match user {
        Some(user) => format!("run it as '{user}' or with sudo"),
        None => "run it as the process's owner or with sudo".to_string(),
    };
    Refusal::Denied(format!(
        "cannot inspect process {pid}{whose}: its working folder and open files are hidden \
         from you ({error}); {as_whom}: sudo mihari adopt {pid}"
    ))
}

/// `/proc/<pid>/cmdline` split into its arguments: NUL-terminated, the last terminator
/// optional (a process that rewrote its argv may leave none).
fn split_argv(bytes: &[u8]) -> Vec<Vec<u8>> {
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes.split(|b| *b == 0).map(<[u8]>::to_vec).collect()
}

/// The effective uid (`Uid:` line of `status`, second field) and its name.
fn owner(pid: u32) -> (u32, Option<String>) {
    let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1))
                .and_then(|uid| uid.parse::<u32>().ok())
        })
        .or_else(|| {
            std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid())
        })
        .unwrap_or(u32::MAX);
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|user| user.name);
    (uid, name)
}

/// The target of `/proc/<pid>/<name>`, with the kernel's " (deleted)" taken off.
fn link(pid: u32, name: &str) -> io::Result<Target> {
    let read = std::fs::read_link(format!("/proc/{pid}/{name}"))?;
    use std::os::unix::ffi::OsStrExt;
    let text = read.as_os_str().as_bytes();
    Ok(match text.strip_suffix(b" (deleted)") {
        Some(kept) => Target {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(kept)),
            deleted: true,
        },
        None => Target {
            path: read,
            deleted: false,
        },
    })
}

/// Where fd `fd` of `pid` goes. Judged by `stat` of `/proc/<pid>/fd/N`, which is the open
/// file itself: a name that was since replaced by another file does not fool it.
fn output(pid: u32, fd: u32) -> io::Result<Output> {
    let target = match link(pid, &format!("fd/{fd}")) {
        Ok(target) => target,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Output::Closed),
        Err(error) => return Err(error),
    };
    let shown = target.path.display().to_string();
    if !target.path.is_absolute() {
        // "pipe:[4242]", "socket:[17]", "anon_inode:[eventfd]".
        return Ok(
            if shown.starts_with("pipe:") || shown.starts_with("socket:") {
                Output::Pipe(shown)
            } else {
                Output::Other(shown)
            },
        );
    }
    let meta = match std::fs::metadata(format!("/proc/{pid}/fd/{fd}")) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Output::Closed),
        Err(error) => return Err(error),
    };
    let kind = meta.file_type();
    Ok(if kind.is_file() {
        Output::File(target)
    } else if target.path == std::path::Path::new("/dev/null") {
        Output::Null
    } else if kind.is_char_device() && is_terminal(&target.path) {
        Output::Terminal(target.path)
    } else if kind.is_fifo() || kind.is_socket() {
        Output::Pipe(shown)
    } else {
        Output::Other(shown)
    })
}

/// A terminal's device name: a pseudo-terminal, a console, a serial line.
fn is_terminal(path: &std::path::Path) -> bool {
    let text = path.display().to_string();
    text.starts_with("/dev/pts/")
        || text.starts_with("/dev/tty")
        || text == "/dev/console"
        || text.starts_with("/dev/pty")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_splits_at_nuls_with_or_without_the_last_one() {
        assert_eq!(
            split_argv(b"python3\0train.py\0\0x\0"),
            vec![
                b"python3".to_vec(),
                b"train.py".to_vec(),
                Vec::new(),
                b"x".to_vec()
            ]
        );
        assert_eq!(
            split_argv(b"postgres: writer"),
            vec![b"postgres: writer".to_vec()]
        );
        assert!(split_argv(b"").is_empty());
    }

    #[test]
    fn this_very_process_can_be_looked_at() {
        let me = inspect(std::process::id()).expect("inspect self");
        assert!(!me.argv.is_empty());
        assert_eq!(me.cwd.path, std::env::current_dir().unwrap());
    }
}

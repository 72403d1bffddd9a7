//! One look at a live holder's process tree in `/proc`: CPU time, scheduler state, wchan, the
//! system call it sleeps in, bytes through its calls, and the regular files it has open with
//! their positions — what `core::activity` judges.
//!
//! This module owns reading `/proc/PID/{stat,io,wchan,syscall,fd,fdinfo}` and the children
//! lists of a tree. It reads only what the kernel keeps about the process, never the files
//! themselves: a file's size is asked with `AT_STATX_DONT_SYNC`, which a network or FUSE file
//! system answers from what it has cached, so a holder stuck on a dead mount cannot make the
//! look hang with it. It never signals, never judges, and never reads a command line (that takes
//! the process's memory lock, which a process in D state may hold). A part it may not read
//! (another user's process) is said so in the sample, never left out silently.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use chrono::Utc;

use crate::core::activity::{OpenFile, ProcessSample, Sample};
use crate::core::text::inert;

/// The most processes of one tree looked at: a `make -j` tree is not the job's progress.
const TREE_LIMIT: usize = 64;
/// The most regular files of one process looked at.
const FILES_LIMIT: usize = 256;

/// Looks at the tree of `pid` (whose identity is `start_ticks`) once. `positions`: read the
/// regular files' positions (`io_progress`). `Err` when the holder is gone or is no longer
/// the same process (then there is nothing of it to look at). A file whose path starts with one
/// of `not_progress` ([`crate::core::activity::not_progress`]) is left out: its growth is judged
/// elsewhere, or is mihari's own.
pub fn look(
    pid: u32,
    start_ticks: u64,
    positions: bool,
    not_progress: &[PathBuf],
) -> Result<Sample, String> {
    let ticks_per_sec = super::proc::clock_ticks_per_second()?;
    let boot_ms = boot_ms()?;
    let at = Utc::now();
    let mut processes = Vec::new();
    let root =
        process(pid, positions, not_progress).ok_or_else(|| format!("process {pid} is gone"))?;
    if root.start_ticks != start_ticks {
        return Err(format!(
            "process {pid} is another process now (started at {} ticks, not {start_ticks})",
            root.start_ticks
        ));
    }
    processes.push(root);
    let mut next = 0;
    while next < processes.len() && processes.len() < TREE_LIMIT {
        let parent = processes[next].pid;
        next += 1;
        for child in children(parent) {
            if processes.len() >= TREE_LIMIT {
                break;
            }
            if processes.iter().any(|p| p.pid == child) {
                continue;
            }
            if let Some(found) = process(child, positions, not_progress)
                && found.ppid == parent
            {
                processes.push(found);
            }
        }
    }
    Ok(Sample {
        at,
        boot_ms,
        ticks_per_sec,
        processes,
        positions,
    })
}

/// `CLOCK_BOOTTIME` in milliseconds.
fn boot_ms() -> Result<u64, String> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_err(|e| format!("clock_gettime(CLOCK_BOOTTIME) failed: {e}"))?;
    Ok(now.tv_sec() as u64 * 1000 + now.tv_nsec() as u64 / 1_000_000)
}

/// The children of `pid`, from each of its threads' `children` list (a child belongs to the
/// thread that made it). A kernel without those lists gives none: the holder alone is looked at.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(text) = fs::read_to_string(&path) {
            found.extend(
                text.split_ascii_whitespace()
                    .filter_map(|n| n.parse::<u32>().ok()),
            );
        }
    }
    found
}

/// One process, or `None` when it is gone (or a zombie: it holds nothing any more).
fn process(pid: u32, positions: bool, not_progress: &[PathBuf]) -> Option<ProcessSample> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (comm, state, ppid, cpu_ticks, start_ticks) = stat_fields(&text)?;
    if matches!(state, 'Z' | 'X' | 'x') {
        return None;
    }
    let mut unreadable = None;
    let io = match fs::read_to_string(format!("/proc/{pid}/io")) {
        Ok(text) => io_fields(&text),
        Err(error) => {
            unreadable.get_or_insert_with(|| denied(pid, "io", &error));
            None
        }
    };
    let runnable_ns = fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|text| schedstat_runnable(&text));
    let asleep = matches!(state, 'S' | 'D');
    let wchan = if asleep {
        fs::read_to_string(format!("/proc/{pid}/wchan"))
            .ok()
            .map(|w| inert(w.trim()))
            .filter(|w| !w.is_empty() && w != "0")
    } else {
        None
    };
    let asleep_in = if asleep {
        fs::read_to_string(format!("/proc/{pid}/syscall"))
            .ok()
            .and_then(|text| asleep_in(pid, &text))
            .map(|call| match wchan.as_deref() {
                // An open of a FIFO waits until some process opens its other end.
                Some("wait_for_partner" | "fifo_open") if call == "an open" => {
                    "an open of a pipe (a FIFO no process has opened for writing)".to_string()
                }
                _ => call,
            })
    } else {
        None
    };
    let files = if positions {
        match open_files(pid, not_progress) {
            Ok(files) => files,
            Err(error) => {
                unreadable = Some(denied(pid, "fd", &error));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    Some(ProcessSample {
        pid,
        start_ticks,
        ppid,
        comm,
        state,
        cpu_ticks,
        runnable_ns,
        io,
        wchan,
        asleep_in,
        files,
        unreadable,
    })
}

/// Why a part of `/proc/PID` could not be read, in words.
fn denied(pid: u32, part: &str, error: &io::Error) -> String {
    let whose = if error.kind() == io::ErrorKind::PermissionDenied {
        " (another user's process: only root or its user may read it)"
    } else {
        ""
    };
    inert(&format!("cannot read '/proc/{pid}/{part}': {error}{whose}"))
}

/// Pure: (comm, state, ppid, utime + stime, start ticks) of a stat line, read after the LAST
/// ')' (a command name may hold one).
pub fn stat_fields(text: &str) -> Option<(String, char, u32, u64, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')').filter(|&c| c > open)?;
    let comm = inert(&text[open + 1..close]);
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let mut state = rest.first()?.chars();
    let letter = state.next()?;
    if state.next().is_some() {
        return None;
    }
    let ppid = rest.get(1)?.parse().ok()?;
    // Fields 14 and 15 (utime, stime) and 22 (start time) are the 12th, 13th and 20th after
    // the name.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    let start = rest.get(19)?.parse().ok()?;
    Some((comm, letter, ppid, utime + stime, start))
}

/// Pure: time on a CPU plus time waiting for one, in nanoseconds, from `/proc/PID/schedstat`.
pub fn schedstat_runnable(text: &str) -> Option<u64> {
    let mut fields = text.split_ascii_whitespace();
    let on_cpu: u64 = fields.next()?.parse().ok()?;
    let waiting: u64 = fields.next()?.parse().ok()?;
    Some(on_cpu.saturating_add(waiting))
}

/// Pure: `rchar` and `wchar` of `/proc/PID/io`.
pub fn io_fields(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().parse::<u64>().ok())
    };
    Some((field("rchar:")?, field("wchar:")?))
}

/// Pure: `pos:` and `flags:` (octal) of `/proc/PID/fdinfo/N`.
pub fn fdinfo_fields(text: &str) -> Option<(u64, u32)> {
    let mut pos = None;
    let mut flags = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("pos:") {
            pos = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("flags:") {
            flags = u32::from_str_radix(rest.trim(), 8).ok();
        }
    }
    Some((pos?, flags?))
}

/// The regular files `pid` has open, with positions and sizes, but those under `not_progress`;
/// an error when its descriptors cannot be listed.
fn open_files(pid: u32, not_progress: &[PathBuf]) -> io::Result<Vec<OpenFile>> {
    let folder = format!("/proc/{pid}/fd");
    let mut files = Vec::new();
    for entry in fs::read_dir(&folder)?.flatten() {
        if files.len() >= FILES_LIMIT {
            break;
        }
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let link = entry.path();
        let Ok(target) = fs::read_link(&link) else {
            continue;
        };
        let target = target.as_os_str().as_bytes();
        // Pipes, sockets, anonymous inodes, devices and the kernel's own files are no one's
        // progress: only regular files on a file system count.
        if !target.starts_with(b"/")
            || [&b"/dev/"[..], b"/proc/", b"/sys/", b"/memfd:"]
                .iter()
                .any(|prefix| target.starts_with(prefix))
        {
            continue;
        }
        if not_progress
            .iter()
            .any(|path| target.starts_with(path.as_os_str().as_bytes()))
        {
            continue;
        }
        let Some((mode, size, dev, ino)) = statx_cached(&link) else {
            continue;
        };
        if mode & libc::S_IFMT != libc::S_IFREG {
            continue;
        }
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let Some((pos, flags)) = fdinfo_fields(&info) else {
            continue;
        };
        let access = flags & libc::O_ACCMODE as u32;
        files.push(OpenFile {
            fd,
            path: inert(&String::from_utf8_lossy(target)),
            dev,
            ino,
            pos,
            size,
            read: access == libc::O_RDONLY as u32 || access == libc::O_RDWR as u32,
            write: access == libc::O_WRONLY as u32 || access == libc::O_RDWR as u32,
        });
    }
    Ok(files)
}

/// (mode, size, dev, ino) of what `/proc/PID/fd/N` points to, as the file system has it
/// cached (`AT_STATX_DONT_SYNC`): never a round trip to a server that may not answer.
fn statx_cached(link: &std::path::Path) -> Option<(u32, u64, u64, u64)> {
    let path = CString::new(link.as_os_str().as_bytes()).ok()?;
    let mut buffer = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `path` is a valid C string and `buffer` is a statx the call fills.
    let result = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_SIZE | libc::STATX_INO,
            buffer.as_mut_ptr(),
        )
    };
    if result != 0 {
        return None;
    }
    // SAFETY: statx returned 0, so it filled the buffer.
    let stat = unsafe { buffer.assume_init() };
    let dev = libc::makedev(stat.stx_dev_major, stat.stx_dev_minor);
    Some((u32::from(stat.stx_mode), stat.stx_size, dev, stat.stx_ino))
}

/// What `pid` is asleep in, from `/proc/PID/syscall` ("NR arg0 arg1 ... sp pc") and, for a
/// call on a descriptor, what the descriptor is: "a read on a pipe", "a futex".
fn asleep_in(pid: u32, text: &str) -> Option<String> {
    let mut fields = text.split_ascii_whitespace();
    let number: i64 = fields.next()?.parse().ok()?;
    let arg0 = fields
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    let (call, on_fd) = call_words(number)?;
    let on = match (on_fd, arg0) {
        (true, Some(fd)) if fd < 1 << 20 => descriptor_words(pid, fd),
        _ => None,
    };
    Some(match on {
        Some(what) => format!("{call} on {what}"),
        None => call.to_string(),
    })
}

/// A system call in words, and whether its first argument is a descriptor.
fn call_words(number: i64) -> Option<(&'static str, bool)> {
    let n = number;
    let reads = [
        libc::SYS_read,
        libc::SYS_readv,
        libc::SYS_pread64,
        libc::SYS_preadv,
        libc::SYS_recvfrom,
        libc::SYS_recvmsg,
        libc::SYS_recvmmsg,
    ];
    let writes = [
        libc::SYS_write,
        libc::SYS_writev,
        libc::SYS_pwrite64,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
    ];
    let polls = [
        libc::SYS_ppoll,
        libc::SYS_pselect6,
        libc::SYS_epoll_pwait,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait,
    ];
    let opens = [
        libc::SYS_openat,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open,
    ];
    Some(if reads.contains(&n) {
        ("a read", true)
    } else if writes.contains(&n) {
        ("a write", true)
    } else if polls.contains(&n) {
        ("a poll or select", false)
    } else if opens.contains(&n) {
        ("an open", false)
    } else if n == libc::SYS_futex {
        ("a futex (a lock or a condition of its threads)", false)
    } else if n == libc::SYS_wait4 || n == libc::SYS_waitid {
        ("a wait for a child", false)
    } else if n == libc::SYS_nanosleep || n == libc::SYS_clock_nanosleep {
        ("a sleep", false)
    } else if n == libc::SYS_accept || n == libc::SYS_accept4 {
        ("an accept", true)
    } else if n == libc::SYS_connect {
        ("a connect", true)
    } else if n == libc::SYS_flock {
        ("a flock", true)
    } else if n == libc::SYS_fcntl {
        ("a file lock (fcntl)", true)
    } else if n == libc::SYS_rt_sigsuspend || n == libc::SYS_rt_sigtimedwait {
        ("a wait for a signal", false)
    } else {
        return None;
    })
}

/// What descriptor `fd` of `pid` is: "a pipe", "a socket", "the FIFO 'x'", "'data.bin'".
fn descriptor_words(pid: u32, fd: u64) -> Option<String> {
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = fs::read_link(&link).ok()?;
    let text = target.to_string_lossy();
    if text.starts_with("pipe:") {
        return Some("a pipe".to_string());
    }
    if text.starts_with("socket:") {
        return Some("a socket".to_string());
    }
    if let Some(kind) = text.strip_prefix("anon_inode:") {
        return Some(inert(&format!("an {}", kind.trim_matches(['[', ']']))));
    }
    if text.starts_with("/dev/pts/") || text.starts_with("/dev/tty") {
        return Some("a terminal".to_string());
    }
    let name = crate::core::activity::file_name(&text).to_string();
    match statx_cached(std::path::Path::new(&link)) {
        Some((mode, ..)) if mode & libc::S_IFMT == libc::S_IFIFO => {
            Some(inert(&format!("a pipe (the FIFO '{name}')")))
        }
        _ => Some(inert(&format!("'{name}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_paren() {
        let line = "4242 (a) b) D 7 40 40 0 -1 4194560 100 0 0 0 120 30 0 0 20 0 1 0 98765 \
                    8216576 200";
        let (comm, state, ppid, cpu, start) = stat_fields(line).expect("parses");
        assert_eq!(
            (comm.as_str(), state, ppid, cpu, start),
            ("a) b", 'D', 7, 150, 98765)
        );
        assert!(stat_fields("4242 (cat) S 1").is_none());
    }

    #[test]
    fn fdinfo_and_io_fields_are_read() {
        let info = "pos:\t1048576\nflags:\t0100002\nmnt_id:\t45\nino:\t2\n";
        assert_eq!(fdinfo_fields(info), Some((1_048_576, 0o100002)));
        assert_eq!(fdinfo_fields("flags:\t0100000\n"), None);
        let io = "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 0\nread_bytes: 0\n";
        assert_eq!(io_fields(io), Some((6976, 12)));
        assert_eq!(io_fields("rchar: x\n"), None);
    }
}

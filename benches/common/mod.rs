//! What the benches share: lock holders, the real dashboard in a pseudo-terminal read back
//! through a terminal emulator, latency samples and small formatting helpers. Each bench
//! includes it with `#[path]`; no bench uses all of it.
#![allow(dead_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::pty::{Winsize, openpty};

use mihari::probe::proc::start_ticks;

/// The pseudo-terminal's size.
pub const COLS: u16 = 120;
pub const ROWS: u16 = 40;
const NONZERO_COLS: NonZeroU16 = NonZeroU16::new(COLS).unwrap();
const NONZERO_ROWS: NonZeroU16 = NonZeroU16::new(ROWS).unwrap();

// ---------------------------------------------------------------------------------------------
// Lock holders and files

/// Every `sleep` the bench started; dropping it kills and reaps each one.
#[derive(Default)]
pub struct Holders {
    pub children: Vec<Child>,
}

impl Holders {
    /// Starts a `sleep 36000` and returns its PID and start time (field 22 of its stat).
    pub fn spawn(&mut self) -> Result<(u32, u64), String> {
        let child = Command::new("sleep")
            .arg("36000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start sleep: {e}"))?;
        let pid = child.id();
        self.children.push(child);
        let ticks = start_ticks(pid).ok_or_else(|| format!("sleep {pid} has no start time"))?;
        Ok((pid, ticks))
    }

    /// Starts `sleep SECONDS` with an argv of the caller's choosing (a process found by its
    /// command line) and returns its PID, without waiting for its stat.
    pub fn spawn_sleep(&mut self, seconds: &str) -> Result<u32, String> {
        let child = Command::new("sleep")
            .arg(seconds)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start sleep: {e}"))?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// SIGKILLs the holder `pid` and reaps it; returns how long the kernel took to let the
    /// bench reap it (the floor of "a process died").
    pub fn kill(&mut self, pid: u32) -> Result<Duration, String> {
        let at = self
            .children
            .iter()
            .position(|c| c.id() == pid)
            .ok_or_else(|| format!("{pid} is not one of ours"))?;
        let mut child = self.children.swap_remove(at);
        let started = Instant::now();
        let killed = child.kill();
        let reaped = child.wait();
        let took = started.elapsed();
        killed.map_err(|e| format!("kill {pid}: {e}"))?;
        reaped.map_err(|e| format!("waitpid {pid}: {e}"))?;
        Ok(took)
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// A lock as `mihari run` writes it: the PID and its start time in clock ticks.
pub fn json_lock(pid: u32, ticks: u64) -> String {
    format!("{{\"pid\":{pid},\"start_time\":{ticks}}}\n")
}

pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), String> {
    fs::write(path, bytes).map_err(|e| format!("cannot write '{}': {e}", path.display()))
}

pub fn append(path: &Path, bytes: &[u8]) -> Result<(), String> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|e| format!("cannot append to '{}': {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The dashboard in a pty

/// The running `mihari tui`, its pty master, and the screen it has drawn so far.
pub struct Dashboard {
    pub child: Child,
    pub master: File,
    pub parser: vt100::Parser,
    /// Set once reading the master fails (the dashboard and its pty are gone).
    pub closed: bool,
    /// Bytes of output read so far.
    pub output_bytes: usize,
    /// Every burst of output: when it arrived and how many bytes.
    pub bursts: Vec<(Instant, usize)>,
}

impl Dashboard {
    /// Starts `mihari tui --config CONFIG` as the session leader of a new 120x40 pty.
    pub fn spawn(exe: &Path, config: &Path) -> Result<Dashboard, String> {
        let config = config.display().to_string();
        Self::spawn_args(exe, &["tui", "--config", &config])
    }

    /// Starts `mihari ARGS` (a dashboard: `tui ...`, `fleet ...`) as the session leader of a
    /// new 120x40 pty.
    pub fn spawn_args(exe: &Path, args: &[&str]) -> Result<Dashboard, String> {
        let size = Winsize {
            ws_row: ROWS,
            ws_col: COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(&size, None).map_err(|e| format!("openpty: {e}"))?;
        // Neither end may leak into the `sleep`s started later (a leaked slave keeps the pty
        // open after the dashboard exits); the child gets the slave as 0, 1 and 2 by dup2.
        for fd in [&pty.master, &pty.slave] {
            fcntl(fd.as_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
                .map_err(|e| format!("fcntl FD_CLOEXEC: {e}"))?;
        }
        fcntl(pty.master.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
            .map_err(|e| format!("fcntl O_NONBLOCK: {e}"))?;
        let stdio = |fd: &OwnedFd| -> Result<Stdio, String> {
            fd.try_clone()
                .map(Stdio::from)
                .map_err(|e| format!("dup: {e}"))
        };
        let mut command = Command::new(exe);
        command
            .args(args)
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR")
            .stdin(stdio(&pty.slave)?)
            .stdout(stdio(&pty.slave)?)
            .stderr(stdio(&pty.slave)?);
        // SAFETY: the closure runs in the child between fork and exec, so it may only make
        // async-signal-safe calls: setsid(2) and ioctl(2) are, and it allocates nothing
        // (errors are OS error codes). Fd 0 is already the pty slave at this point, so
        // TIOCSCTTY makes it the new session's controlling terminal.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid().map_err(io::Error::from)?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start '{}': {e}", exe.display()))?;
        drop(pty.slave);
        Ok(Dashboard {
            child,
            master: File::from(pty.master),
            parser: vt100::Parser::new(NONZERO_ROWS, NONZERO_COLS, 0),
            closed: false,
            output_bytes: 0,
            bursts: Vec::new(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads all there is into the screen, without waiting. True when something was read.
    pub fn read_available(&mut self) -> bool {
        let arrived = Instant::now();
        let mut buf = [0u8; 64 * 1024];
        let mut total = 0;
        loop {
            match self.master.read(&mut buf) {
                Ok(0) => {
                    self.closed = true;
                    break;
                }
                Ok(n) => {
                    self.parser.process(&buf[..n]);
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // EIO: the slave side is closed, the dashboard has exited.
                Err(_) => {
                    self.closed = true;
                    break;
                }
            }
        }
        self.output_bytes += total;
        if total > 0 {
            self.bursts.push((arrived, total));
        }
        total > 0
    }

    /// Waits at most `timeout` for output, then reads all there is into the screen.
    pub fn pump(&mut self, timeout: Duration) -> Result<bool, String> {
        if self.closed {
            std::thread::sleep(timeout);
            return Ok(false);
        }
        if !wait_readable(&[self.master.as_fd()], timeout)? {
            return Ok(false);
        }
        Ok(self.read_available())
    }

    /// Reads output until `wanted` holds for the screen, at most `timeout`. Returns the
    /// moment it was first seen to hold, or `None` on timeout.
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        wanted: impl Fn(&vt100::Screen) -> bool,
    ) -> Result<Option<Instant>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if wanted(self.parser.screen()) {
                return Ok(Some(Instant::now()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.pump(left)?;
        }
    }

    /// Keeps reading the dashboard's output for `how_long`, so it never blocks on a full pty.
    pub fn drain_for(&mut self, how_long: Duration) -> Result<(), String> {
        let until = Instant::now() + how_long;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            self.pump(left)?;
        }
    }

    pub fn send(&mut self, keys: &[u8]) -> Result<(), String> {
        self.master
            .write_all(keys)
            .map_err(|e| format!("cannot type into the pty: {e}"))
    }

    /// The screen as text, for error messages.
    pub fn dump(&self) -> String {
        self.parser
            .screen()
            .rows(0, COLS)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sends `q` and waits up to 5 s for the dashboard to exit; kills it otherwise.
    pub fn quit(mut self) -> Result<String, String> {
        self.send(b"q")?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Ok(format!("quit on 'q' ({status})"));
            }
            self.pump(Duration::from_millis(20))?;
        }
        let _ = self.child.kill();
        let status = self.child.wait().map_err(|e| e.to_string())?;
        Ok(format!("did NOT quit within 5 s of 'q', killed ({status})"))
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits at most `timeout` until one of `fds` is readable.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<bool, String> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    match poll(
        &mut polled,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(format!("poll: {e}")),
    }
}

/// Drains several dashboards at once for `how_long`.
pub fn drain_all(dashboards: &mut [&mut Dashboard], how_long: Duration) -> Result<(), String> {
    let until = Instant::now() + how_long;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let open: Vec<BorrowedFd<'_>> = dashboards
            .iter()
            .filter(|d| !d.closed)
            .map(|d| d.master.as_fd())
            .collect();
        if open.is_empty() {
            std::thread::sleep(left);
            return Ok(());
        }
        if wait_readable(&open, left)? {
            for dash in dashboards.iter_mut() {
                if !dash.closed {
                    dash.read_available();
                }
            }
        }
    }
}

/// The words of a screen row: runs of letters, digits, `_` and `-` (ids and states).
pub fn words(row: &str) -> impl Iterator<Item = &str> {
    row.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
}

/// Whether some row of the screen holds both `id` and `state` as whole words.
pub fn row_shows(screen: &vt100::Screen, id: &str, state: &str) -> bool {
    screen.rows(0, COLS).any(|row| {
        let mut has_id = false;
        let mut has_state = false;
        for word in words(&row) {
            has_id |= word == id;
            has_state |= word == state;
        }
        has_id && has_state
    })
}

pub fn screen_contains(screen: &vt100::Screen, text: &str) -> bool {
    screen.rows(0, COLS).any(|row| row.contains(text))
}

/// utime + stime of the whole process (every thread), in clock ticks: fields 14 and 15 of
/// `/proc/<pid>/stat`, counted after the last ')' (the command name may hold anything).
pub fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("no ')' in stat")?;
    // After ')' comes field 3 (state); field N is at index N - 3.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("stat field {n} missing"))
    };
    Ok(field(14)? + field(15)?)
}

/// The peak resident set size of `pid` (VmHWM), in bytes.
pub fn vm_hwm_bytes(pid: u32) -> Result<u64, String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| "no VmHWM in status".to_string())
}

/// Latency samples of one measure, and how many changes never showed within [`GIVE_UP`].
#[derive(Default)]
pub struct Latencies {
    pub samples: Vec<Duration>,
    pub missed: usize,
}

impl Latencies {
    pub fn record(&mut self, started: Instant, seen: Option<Instant>) {
        match seen {
            Some(seen) => self.samples.push(seen.saturating_duration_since(started)),
            None => self.missed += 1,
        }
    }

    /// min, median, p99 (nearest rank) and max; a missed change counts as slower than all.
    pub fn summary(&self) -> Option<[Duration; 4]> {
        let mut sorted = self.samples.clone();
        sorted.sort();
        sorted.extend(std::iter::repeat_n(Duration::MAX, self.missed));
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        let p99 = (n * 99).div_ceil(100).max(1) - 1;
        Some([sorted[0], sorted[(n - 1) / 2], sorted[p99], sorted[n - 1]])
    }

    pub fn count(&self) -> usize {
        self.samples.len() + self.missed
    }

    pub fn merged(parts: &[&Latencies]) -> Latencies {
        let mut all = Latencies::default();
        for part in parts {
            all.samples.extend(&part.samples);
            all.missed += part.missed;
        }
        all
    }

    pub fn p99(&self) -> Option<Duration> {
        self.summary().map(|s| s[2])
    }

    pub fn median(&self) -> Option<Duration> {
        self.summary().map(|s| s[1])
    }
}

// ---------------------------------------------------------------------------------------------
// Small things

pub fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

pub fn median_u64(values: &mut [u64]) -> u64 {
    values.sort();
    values[values.len() / 2]
}

pub fn ms(d: Duration) -> String {
    if d == Duration::MAX {
        "missed".to_string()
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

pub fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

pub fn env_u64(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Ok(text) => text.parse().map_err(|e| format!("{name} '{text}': {e}")),
        Err(_) => Ok(default),
    }
}

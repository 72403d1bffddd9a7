//! One `mihari --config C check --json --follow` per host, over the fleet file's ssh, kept
//! running: every line it prints is handed on as it arrives, and when it ends (ssh said
//! something, the remote mihari was killed, the connection dropped) or cannot start, that is
//! handed on too and the stream is started again after a backoff (1 s, doubling to 30 s; back
//! to 1 s once a stream has delivered a line).
//!
//! This owns the processes and nothing else: it does not judge a silence (the screen does,
//! against the interval each line carries) and draws nothing. A stream the screen finds silent
//! is killed here, whole (its process group), and so ends and starts again like any other.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Host;
use crate::core::text::inert;

/// What a host's stream did.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// One line of the host's `check --json --follow`, as it printed it.
    Line(String),
    /// The stream ended, or never started; why, in words ("ssh said: ...").
    Ended(String),
}

/// The running stream of one host, to kill when it has gone silent.
#[derive(Clone, Default)]
pub struct Handle {
    group: Arc<Mutex<Option<i32>>>,
}

impl Handle {
    /// Kills the stream's whole process group (ssh and whatever it started here); the stream
    /// then ends and is started again after its backoff.
    pub fn kill(&self) {
        if let Some(pgid) = self.group.lock().ok().and_then(|g| *g) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The longest wait before a stream is started again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Starts following `host` on a thread of its own; `deliver` gets every [`Heard`] and answers
/// `false` once nobody listens any more, which ends the thread at its next event.
pub fn follow(host: Host, deliver: impl Fn(Heard) -> bool + Send + 'static) -> Handle {
    let handle = Handle::default();
    let group = handle.group.clone();
    std::thread::spawn(move || {
        let mut backoff = Duration::from_secs(1);
        loop {
            let (heard_a_line, ended) = run_once(&host, &group, &deliver);
            let Some(ended) = ended else {
                return;
            };
            if !deliver(Heard::Ended(ended)) {
                return;
            }
            if heard_a_line {
                backoff = Duration::from_secs(1);
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    });
    handle
}

/// Runs the stream once, to its end: whether it delivered a line, and why it ended (`None`
/// when nobody listens any more).
fn run_once(
    host: &Host,
    group: &Mutex<Option<i32>>,
    deliver: &impl Fn(Heard) -> bool,
) -> (bool, Option<String>) {
    // Kept while the stream runs: when this stream makes its destination's shared
    // connection, the others wait for it until it answers.
    let (ssh, _opening) = super::share::reach(host);
    let argv = super::remote::argv_over(&ssh, host, &["check", "--json", "--follow"]);
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return (
                false,
                Some(format!(
                    "stream cannot start: cannot run '{}': {error}",
                    inert(&argv[0])
                )),
            );
        }
    };
    if let Ok(mut g) = group.lock() {
        *g = Some(child.id() as i32);
    }
    let stderr = child.stderr.take().map(|mut stderr| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        })
    });
    let mut heard = false;
    let mut listening = true;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            heard = true;
            if !deliver(Heard::Line(line)) {
                listening = false;
                break;
            }
        }
    }
    // A stream that closed its output is over: it is given a moment to exit with its own
    // code, then whatever is left of it goes.
    let pgid = child.id() as i32;
    let mut status = None;
    for _ in 0..100 {
        match child.try_wait() {
            Ok(Some(done)) => {
                status = Some(done);
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break,
        }
    }
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    );
    if status.is_none() {
        status = child.wait().ok();
    }
    if let Ok(mut g) = group.lock() {
        *g = None;
    }
    if !listening {
        return (heard, None);
    }
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let short = |line: &str| {
        inert(line.strip_prefix("mihari: ").unwrap_or(line))
            .chars()
            .take(300)
            .collect::<String>()
    };
    let code = status.and_then(|s| s.code());
    // ssh's own complaint is its last line; mihari's refusal is its first (file:line:col and
    // why; the quoted source and a caret follow it).
    let why = match (host.ssh.is_empty(), code) {
        (false, Some(255)) => match lines.last() {
            Some(said) => format!("stream ended: ssh said: {}", short(said)),
            None => "stream ended: ssh failed (exit 255)".to_string(),
        },
        (_, Some(code)) => match lines.first() {
            Some(said) => format!("stream ended (exit {code}): {}", short(said)),
            None => format!("stream ended (exit {code})"),
        },
        (_, None) => match lines.last() {
            Some(said) => format!("stream ended (killed): {}", short(said)),
            None => "stream ended (killed)".to_string(),
        },
    };
    (heard, Some(why))
}

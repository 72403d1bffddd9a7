//! One `mihari --config C check --json --follow` per host, over the fleet file's ssh, kept
//! running: every line it prints is handed on as it arrives, and when it ends (ssh said
//! something, the remote mihari was killed, the connection dropped) or cannot start, that is
//! handed on too and the stream is started again after a backoff (1 s, doubling to 30 s; back
//! to 1 s once a stream has delivered a line).
//!
//! This owns the processes and nothing else: it does not judge a silence (the screen does,
//! against the interval each line carries) and draws nothing. A stream the screen finds silent
//! is killed here, whole (its process group), and so ends and starts again like any other.
//! What a stream sends is bounded: a line longer than [`MAX_LINE`] ends the stream ("line
//! longer than 32 MB: cut off"), and of its stderr only the head and the tail are kept, a
//! flood being said once as a note.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::remote::{MAX_LINE, Said, flood_words, size_words};
use crate::config::Host;
use crate::core::text::inert;

/// What a host's stream did.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// One line of the host's `check --json --follow`, as it printed it.
    Line(String),
    /// The stream ended, or never started; why, in words ("ssh said: ...").
    Ended(String),
    /// The stream goes on, but sent more than is kept ("stderr longer than ...").
    Note(String),
}

/// The running stream of one host, to kill when it has gone silent.
#[derive(Clone, Default)]
pub struct Handle {
    group: Arc<Mutex<Option<i32>>>,
    /// Set once the screen is done with the stream: it is not started again.
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

/// Every host's stream, stopped when this is dropped — when the screen quits, and when it
/// ends by a panic too, so no ssh is left running after mihari.
pub struct Streams(pub Vec<Handle>);

impl Drop for Streams {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.stop();
        }
    }
}

impl Handle {
    /// Ends the stream for good: killed whole, and never started again.
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.kill();
    }

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
    let stopped = handle.stopped.clone();
    std::thread::spawn(move || {
        let mut backoff = Duration::from_secs(1);
        loop {
            if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let (heard_a_line, ended) = run_once(&host, &group, &stopped, &deliver);
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
    stopped: &std::sync::atomic::AtomicBool,
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
    let pgid = child.id() as i32;
    let kill = || {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    if let Ok(mut g) = group.lock() {
        *g = Some(pgid);
    }
    // Stopped while it was starting: it goes at once.
    if stopped.load(std::sync::atomic::Ordering::SeqCst) {
        kill();
    }
    let stderr_heard = Arc::new(AtomicU64::new(0));
    let stderr = child.stderr.take().map(|stderr| {
        let heard = stderr_heard.clone();
        std::thread::spawn(move || Said::read(stderr, Some(&heard)))
    });
    let mut heard = false;
    let mut listening = true;
    let mut cut_off = None;
    let mut flood_told = false;
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        while let Ok(true) = next_line(&mut reader, &mut line) {
            if line.len() > MAX_LINE {
                // A host that sends one endless line is not followed into it: the stream is
                // ended, and started again after its backoff.
                cut_off = Some(format!(
                    "line longer than {}: cut off",
                    size_words(MAX_LINE)
                ));
                kill();
                break;
            }
            if !flood_told && let Some(words) = flood_words(stderr_heard.load(Ordering::Relaxed)) {
                flood_told = true;
                if !deliver(Heard::Note(words)) {
                    listening = false;
                    break;
                }
            }
            let text = String::from_utf8_lossy(&line);
            if text.trim().is_empty() {
                continue;
            }
            heard = true;
            if !deliver(Heard::Line(text.into_owned())) {
                listening = false;
                break;
            }
        }
    }
    // A stream that closed its output is over: it is given a moment to exit with its own
    // code, then whatever is left of it goes.
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
    kill();
    if status.is_none() {
        status = child.wait().ok();
    }
    if let Ok(mut g) = group.lock() {
        *g = None;
    }
    if !listening {
        return (heard, None);
    }
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let stderr = said.text();
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
    if let Some(cut_off) = cut_off {
        return (heard, Some(format!("stream ended: {cut_off}")));
    }
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

/// Reads the next line (without its newline) into `line`, keeping at most one byte more than
/// [`MAX_LINE`]: a longer line is left unread past that, for the caller to cut off. `false`
/// at the end of the stream with nothing read.
fn next_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    line.clear();
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let room = MAX_LINE + 1 - line.len();
        match available.iter().position(|b| *b == b'\n') {
            Some(at) if at <= room => {
                line.extend_from_slice(&available[..at]);
                reader.consume(at + 1);
                return Ok(true);
            }
            _ => {
                let take = available.len().min(room);
                line.extend_from_slice(&available[..take]);
                reader.consume(take);
                if line.len() > MAX_LINE {
                    return Ok(true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_whole_up_to_the_bound_and_a_longer_one_is_cut_there() {
        let mut text = b"{\"jobs\": []}\nsecond".to_vec();
        let mut reader = BufReader::new(&text[..]);
        let mut line = Vec::new();
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line, b"{\"jobs\": []}");
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line, b"second");
        assert!(!next_line(&mut reader, &mut line).unwrap());
        text = vec![b'x'; MAX_LINE + 4096];
        text.push(b'\n');
        let mut reader = BufReader::new(&text[..]);
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line.len(), MAX_LINE + 1, "one byte past the bound, no more");
    }
}

//! Running the host's own `mihari` over the fleet file's ssh argv, bounded in time.
//!
//! ssh joins the remote command's words with spaces and hands them to the remote shell, so
//! every word is quoted for a POSIX shell here: a config path with spaces or `$` reaches the
//! host's mihari as one argument, unexpanded. A host with no `ssh` is this machine: its
//! mihari runs directly, with no shell. Each run is its own process group, killed whole when
//! the host does not answer in time, so no ssh is left behind. The asks to one destination
//! share one ssh connection when the argv leaves that to mihari ([`super::share`]).
//!
//! What a host sends is bounded, for a host may be broken or hostile: an answer longer than
//! [`MAX_ANSWER`] is cut off (the run is killed and the host said to have sent too much), and
//! of what it says on stderr only the first and last [`STDERR_KEPT`] bytes are kept, the rest
//! read and dropped. Every word mihari sends after the subcommand's options follows `--`, so
//! a job id or a key that starts with `-` reaches the host's mihari as a word, never as an
//! option.

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::config::Host;

/// What a host's mihari answered: its exit code and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Why a host gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nothing within the host's timeout: the whole run was killed.
    TimedOut(Duration),
    /// The ssh (or the local mihari) could not be started at all.
    NotStarted(String),
    /// The answer grew past [`MAX_ANSWER`]: the whole run was killed.
    CutOff,
}

/// The longest answer kept from one ask: a `check --json` of a farm of 10,000 jobs is about
/// 9 MB, so a host sending more is broken, or hostile.
pub const MAX_ANSWER: usize = 64 << 20;

/// The longest line kept from a host's stream (one `check --json` object per line).
pub const MAX_LINE: usize = 32 << 20;

/// How much of the start and of the end of a host's stderr is kept: what mihari shows of it
/// is its first line (mihari's refusal) and its last (ssh's complaint).
pub const STDERR_KEPT: usize = 32 << 10;

/// `bytes` in words: "64 MB", "32 KB".
pub fn size_words(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MB", bytes >> 20)
    } else {
        format!("{} KB", bytes >> 10)
    }
}

/// What a program said on stderr, bounded: its first and last [`STDERR_KEPT`] bytes, and how
/// much it said in all.
#[derive(Debug, Default)]
pub struct Said {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Said {
    /// Reads `stream` to its end, keeping only the head and the tail; `heard` counts the
    /// bytes as they come, for a caller that tells of a flood before the end.
    pub fn read(mut stream: impl Read, heard: Option<&std::sync::atomic::AtomicU64>) -> Said {
        let mut said = Said::default();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            said.total += n as u64;
            if let Some(heard) = heard {
                heard.store(said.total, Ordering::Relaxed);
            }
            let mut bytes = &chunk[..n];
            let room = STDERR_KEPT.saturating_sub(said.head.len());
            let first = bytes.len().min(room);
            said.head.extend_from_slice(&bytes[..first]);
            bytes = &bytes[first..];
            said.tail.extend(bytes);
            let over = said.tail.len().saturating_sub(STDERR_KEPT);
            said.tail.drain(..over);
        }
        said
    }

    /// The text kept: the head, then (when something was dropped between) the tail from its
    /// first whole line.
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if !self.tail.is_empty() {
            let tail: Vec<u8> = self.tail.iter().copied().collect();
            let dropped = self.total > (self.head.len() + tail.len()) as u64;
            let tail = match (dropped, tail.iter().position(|b| *b == b'\n')) {
                (true, Some(at)) => &tail[at + 1..],
                _ => &tail[..],
            };
            if dropped {
                text.push('\n');
            }
            text.push_str(&String::from_utf8_lossy(tail));
        }
        text
    }

    /// Words for a host that said more on stderr than is kept, or `None`.
    pub fn flooded(&self) -> Option<String> {
        flood_words(self.total)
    }
}

/// "stderr longer than 64 KB (12 MB): only its first and last 32 KB kept", once `total`
/// bytes are more than is kept.
pub fn flood_words(total: u64) -> Option<String> {
    (total > 2 * STDERR_KEPT as u64).then(|| {
        format!(
            "stderr longer than {} ({}): only its first and last {} kept",
            size_words(2 * STDERR_KEPT),
            size_words(usize::try_from(total).unwrap_or(usize::MAX)),
            size_words(STDERR_KEPT)
        )
    })
}

/// The argv that runs `mihari [--config C] ARGS...` on `host`, over its argv as written.
pub fn argv(host: &Host, args: &[&str]) -> Vec<String> {
    argv_over(&host.ssh, host, args)
}

/// The same over `ssh` (the host's argv, or it with the shared connection's options).
pub fn argv_over(ssh: &[String], host: &Host, args: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = vec![host.mihari.clone()];
    if let Some(config) = &host.config {
        // One word: a path that starts with `-` stays the option's value.
        words.push(format!("--config={config}"));
    }
    words.extend(args.iter().map(|arg| (*arg).to_string()));
    if ssh.is_empty() {
        return words;
    }
    let mut argv = ssh.to_vec();
    argv.extend(words.iter().map(|word| shell_quote(word)));
    argv
}

/// `word` for a POSIX shell: single-quoted unless it is plainly safe.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '@' | '=')
        });
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Runs `mihari ARGS` on `host` and waits for it, at most the host's timeout (the wait for
/// another ask's shared connection to the same destination included).
pub fn run(host: &Host, args: &[&str]) -> Result<Answer, NoAnswer> {
    let started = Instant::now();
    let (ssh, _opening) = super::share::reach(host);
    let argv = argv_over(&ssh, host, args);
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().map_err(|error| {
        NoAnswer::NotStarted(format!(
            "cannot run '{}': {error}",
            crate::core::text::inert(&argv[0])
        ))
    })?;
    let pgid = child.id() as i32;
    let too_long = Arc::new(AtomicBool::new(false));
    let stdout = child.stdout.take().map(|stream| {
        let too_long = too_long.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            // One byte more than kept tells an answer that is too long.
            let read = stream
                .take(MAX_ANSWER as u64 + 1)
                .read_to_end(&mut bytes)
                .is_ok();
            if read && bytes.len() > MAX_ANSWER {
                too_long.store(true, Ordering::SeqCst);
                bytes = Vec::new();
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    });
    let stderr = child
        .stderr
        .take()
        .map(|stream| std::thread::spawn(move || Said::read(stream, None).text()));
    let deadline = started + host.timeout;
    let status = loop {
        if too_long.load(Ordering::SeqCst) {
            break None;
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let Some(status) = status else {
        // The whole group: ssh, and whatever it started here (a ProxyCommand).
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
        if too_long.load(Ordering::SeqCst) {
            return Err(NoAnswer::CutOff);
        }
        return Err(NoAnswer::TimedOut(host.timeout));
    };
    let stdout = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    if too_long.load(Ordering::SeqCst) {
        return Err(NoAnswer::CutOff);
    }
    Ok(Answer {
        code: status.code(),
        stdout,
        stderr: stderr.and_then(|t| t.join().ok()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(ssh: &[&str]) -> Host {
        Host {
            name: "gpu1".into(),
            ssh: ssh.iter().map(|s| s.to_string()).collect(),
            config: Some("/srv/my jobs/$HOME.yaml".into()),
            mihari: "/usr/local/bin/mihari".into(),
            timeout: Duration::from_secs(1),
            share_ssh: false,
        }
    }

    #[test]
    fn over_ssh_every_remote_word_is_quoted_for_the_remote_shell() {
        assert_eq!(
            argv(&host(&["ssh", "ops@gpu1"]), &["check", "--json"]),
            [
                "ssh",
                "ops@gpu1",
                "/usr/local/bin/mihari",
                "'--config=/srv/my jobs/$HOME.yaml'",
                "check",
                "--json"
            ]
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn this_machine_runs_mihari_directly_with_no_shell() {
        assert_eq!(
            argv(&host(&[]), &["check"]),
            [
                "/usr/local/bin/mihari",
                "--config=/srv/my jobs/$HOME.yaml",
                "check"
            ]
        );
    }

    #[test]
    fn only_the_head_and_the_tail_of_a_flood_on_stderr_are_kept() {
        let mut flood = b"mihari: the first line\n".to_vec();
        flood.extend(std::iter::repeat_n(b'x', 10 << 20));
        flood.extend(b"\nssh: the last line\n");
        let said = Said::read(&flood[..], None);
        let text = said.text();
        assert!(text.len() <= 2 * STDERR_KEPT, "{}", text.len());
        assert!(text.starts_with("mihari: the first line\n"));
        assert!(text.ends_with("\nssh: the last line\n"), "{text:.80}");
        assert_eq!(
            said.flooded().as_deref(),
            Some("stderr longer than 64 KB (10 MB): only its first and last 32 KB kept")
        );
        let short = Said::read(&b"a\nb\n"[..], None);
        assert_eq!((short.text().as_str(), short.flooded()), ("a\nb\n", None));
    }

    #[test]
    fn a_host_that_does_not_answer_in_time_is_killed_whole() {
        let mut slow = host(&["sh", "-c", "sleep 30 & sleep 30", "ignored"]);
        slow.timeout = Duration::from_millis(200);
        let started = Instant::now();
        assert_eq!(
            run(&slow, &["check"]),
            Err(NoAnswer::TimedOut(Duration::from_millis(200)))
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

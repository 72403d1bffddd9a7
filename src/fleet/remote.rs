//! Running the host's own `mihari` over the fleet file's ssh argv, bounded in time.
//!
//! ssh joins the remote command's words with spaces and hands them to the remote shell, so
//! every word is quoted for a POSIX shell here: a config path with spaces or `$` reaches the
//! host's mihari as one argument, unexpanded. A host with no `ssh` is this machine: its
//! mihari runs directly, with no shell. Each run is its own process group, killed whole when
//! the host does not answer in time, so no ssh is left behind. The asks to one destination
//! share one ssh connection when the argv leaves that to mihari ([`super::share`]).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
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
}

/// The argv that runs `mihari [--config C] ARGS...` on `host`, over its argv as written.
pub fn argv(host: &Host, args: &[&str]) -> Vec<String> {
    argv_over(&host.ssh, host, args)
}

/// The same over `ssh` (the host's argv, or it with the shared connection's options).
pub fn argv_over(ssh: &[String], host: &Host, args: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = vec![host.mihari.clone()];
    if let Some(config) = &host.config {
        words.push("--config".to_string());
        words.push(config.clone());
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
    let reader = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut stream) = stream {
                let _ = stream.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = started + host.timeout;
    let status = loop {
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
        return Err(NoAnswer::TimedOut(host.timeout));
    };
    Ok(Answer {
        code: status.code(),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
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
                "--config",
                "'/srv/my jobs/$HOME.yaml'",
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
                "--config",
                "/srv/my jobs/$HOME.yaml",
                "check"
            ]
        );
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

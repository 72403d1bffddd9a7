//! `mihari adopt PID [--id ID]`: a job stanza for a process already running, to paste under
//! `jobs:`.
//!
//! This module owns turning what [`crate::probe::inspect`] saw of a process into YAML that
//! loads as it is: a `process.cmdline` that matches exactly that argv (regex-escaped and
//! anchored), the file its output goes to as `log`, its argv and working folder as `restart`,
//! every string quoted so that spaces, quotes, `#`, `: ` and unicode survive, and comments on
//! what only the operator can decide. Before printing, the stanza is loaded by the real jobs
//! file loader and its pattern is matched against the process's own command line: a stanza
//! that would not load, or would not find its process, is never printed. It writes nothing
//! but the stanza, and never copies the process's environment (it may hold secrets).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chrono::Utc;

use crate::config::LogProgress;
use crate::core::Reading;
use crate::core::text::inert;
use crate::probe::inspect::{self, Output, Portrait, Refusal, Target};

/// Printed.
pub const EXIT_PRINTED: u8 = 0;
/// `--id` is not a valid id, or is already taken in the jobs file.
pub const EXIT_BAD_ID: u8 = 3;
/// The argv cannot be written in a jobs file (not UTF-8 text).
pub const EXIT_DATA: u8 = 65;
/// No such process: not running, a zombie, a kernel thread (sysexits `EX_NOINPUT`).
pub const EXIT_NO_PROCESS: u8 = 66;
/// A bug: the stanza would not load, or its pattern would not match its process.
pub const EXIT_SOFTWARE: u8 = 70;
/// The process cannot be inspected by this user (sysexits `EX_NOPERM`).
pub const EXIT_DENIED: u8 = 77;

/// Programs that run another one: the job is named after what they run.
const RUNNERS: [&str; 22] = [
    "python", "python2", "python3", "pypy", "pypy3", "bash", "sh", "dash", "zsh", "node", "nodejs",
    "perl", "ruby", "php", "rscript", "java", "deno", "bun", "nohup", "env", "nice", "setsid",
];

/// `mihari adopt PID [--id ID]`.
pub fn run(config: Option<&Path>, pid: u32, id: Option<&str>, out: &mut impl Write) -> ExitCode {
    let portrait = match inspect::inspect(pid) {
        Ok(portrait) => portrait,
        Err(Refusal::NotThere(why)) => return refuse(&why, EXIT_NO_PROCESS),
        Err(Refusal::Denied(why)) => return refuse(&why, EXIT_DENIED),
    };
    let taken = taken_ids(config);
    let id = match id {
        Some(id) if !crate::config::is_valid_id(id) => {
            let hint = crate::config::suggest_id(id)
                .map(|s| format!(", like '{s}'"))
                .unwrap_or_default();
            return refuse(
                &format!(
                    "--id '{}' is not accepted: an id is 1 to 64 characters of a-z, 0-9, '_' \
                     and '-', starting with a letter or digit{hint}",
                    inert(id)
                ),
                EXIT_BAD_ID,
            );
        }
        Some(id) if taken.iter().any(|t| t == id) => {
            return refuse(
                &format!("--id '{id}' is already a job in the jobs file: choose another with --id"),
                EXIT_BAD_ID,
            );
        }
        Some(id) => id.to_string(),
        None => free_id(&default_id(&portrait.argv), &taken),
    };
    let stanza = match stanza(&portrait, &id, Utc::now()) {
        Ok(stanza) => stanza,
        Err(why) => return refuse(&why, EXIT_DATA),
    };
    if let Err(why) = self_check(&stanza, &portrait) {
        return refuse(
            &format!(
                "the stanza for process {pid} failed its own check ({why}): this is a bug in mihari adopt; please report it"
            ),
            EXIT_SOFTWARE,
        );
    }
    let _ = out.write_all(stanza.as_bytes());
    let _ = out.flush();
    ExitCode::from(EXIT_PRINTED)
}

fn refuse(why: &str, code: u8) -> ExitCode {
    let _ = writeln!(io::stderr(), "mihari: adopt: {}", inert(why));
    ExitCode::from(code)
}

/// The ids of the jobs file, when one is named (or found) and loads: a default id is made
/// unique among them. Not loading is no reason to refuse: the stanza stands on its own.
fn taken_ids(config: Option<&Path>) -> Vec<String> {
    crate::config::find_config_path(config)
        .and_then(|path| crate::config::load(&path))
        .map(|config| config.jobs.iter().map(|job| job.id.clone()).collect())
        .unwrap_or_default()
}

/// `base`, or `base_2`, `base_3`... the first one not taken.
fn free_id(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_string();
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let room = 64 - suffix.len();
            format!("{}{suffix}", &base[..base.len().min(room)])
        })
        .find(|id| !taken.iter().any(|t| t == id))
        .unwrap_or_else(|| base.to_string())
}

/// An id from the program's name: the script a runner runs (`python3 -u train.py` is
/// `train`, `python3 -m http.server` is `http_server`), else the program itself, made a
/// valid id; `adopted` when nothing usable is left.
pub fn default_id(argv: &[Vec<u8>]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    let mut at = 0;
    let mut name = String::new();
    while let Some(word) = words.get(at) {
        let program = base_name(word);
        name = program.clone();
        let runner = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        if !RUNNERS.contains(&runner.to_ascii_lowercase().as_str()) {
            break;
        }
        // A runner: name the job after what it runs.
        let mut next = at + 1;
        let mut found = None;
        while let Some(arg) = words.get(next) {
            match arg.as_str() {
                "-c" | "-e" | "--eval" => break,
                "-m" => {
                    found = words
                        .get(next + 1)
                        .map(|module| (module.replace('.', "_"), true));
                    break;
                }
                _ if arg.starts_with('-') || (arg.contains('=') && runner == "env") => next += 1,
                _ => {
                    found = Some((arg.clone(), false));
                    break;
                }
            }
        }
        match found {
            Some((module, true)) => {
                name = module;
                break;
            }
            // A script fed through a file descriptor (`bash <(curl ...)`, `bash /dev/fd/3`)
            // has no name of its own: the job is named after its runner.
            Some((script, false)) if is_descriptor_path(&script) => break,
            Some(_) => at = next,
            None => break,
        }
    }
    let stem = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && ext.len() <= 4 => stem.to_string(),
        _ => name,
    };
    crate::config::suggest_id(&stem).unwrap_or_else(|| "adopted".to_string())
}

/// A path that names an open file descriptor or standard input, not a file with a name.
fn is_descriptor_path(path: &str) -> bool {
    ["/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"]
        .iter()
        .any(|prefix| path.starts_with(prefix))
        || matches!(path, "/dev/stdin" | "-")
}

fn base_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// The argv as UTF-8 text, or why it cannot be written in a jobs file.
fn text_argv(portrait: &Portrait) -> Result<Vec<String>, String> {
    portrait
        .argv
        .iter()
        .enumerate()
        .map(|(i, arg)| {
            String::from_utf8(arg.clone()).map_err(|_| {
                format!(
                    "argument {} of process {} ('{}') is not UTF-8 text: a jobs file cannot \
                     hold it; write the stanza by hand with an argv that names the same files",
                    i,
                    portrait.pid,
                    inert(&String::from_utf8_lossy(arg))
                )
            })
        })
        .collect()
}

/// The pattern that matches exactly this argv, as the process scan joins it (by spaces).
pub fn exact_pattern(argv: &[String]) -> String {
    format!("^{}$", regex::escape(&argv.join(" ")))
}

/// `text` as a YAML scalar that reads back as exactly `text`: single-quoted (only `'`
/// doubled) when it has no control character, else double-quoted with escapes.
pub fn yaml_quoted(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return format!("'{}'", text.replace('\'', "''"));
    }
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if needs_escape(c) && (c as u32) < 0x100 => {
                quoted.push_str(&format!("\\x{:02X}", c as u32))
            }
            c if needs_escape(c) => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// What a YAML single-quoted scalar cannot hold as it is (line breaks fold, control
/// characters are not printable in YAML, a byte-order mark is taken away).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{feff}' | '\u{fffe}' | '\u{ffff}' | '\u{2028}' | '\u{2029}'
        )
}

/// A path for the jobs file, or `None` when it is not text.
fn path_text(path: &Path) -> Option<String> {
    path.to_str().map(str::to_string)
}

/// The stanza, indented to go under `jobs:`; the comments say what the operator decides.
pub fn stanza(portrait: &Portrait, id: &str, now: chrono::DateTime<Utc>) -> Result<String, String> {
    let argv = text_argv(portrait)?;
    let pid = portrait.pid;
    let mut lines: Vec<String> = Vec::new();
    let mut say = |line: String| lines.push(line);
    let owner = portrait
        .user
        .clone()
        .unwrap_or_else(|| format!("uid {}", portrait.uid));
    say(format!(
        "  # Adopted by 'mihari adopt {pid}' at {} UTC: process {pid} of user '{}'{}{}.",
        now.format("%Y-%m-%d %H:%M:%S"),
        inert(&owner),
        portrait
            .started_at
            .map(|at| format!(", started {} UTC", at.format("%Y-%m-%d %H:%M:%S")))
            .unwrap_or_default(),
        portrait
            .exe
            .as_deref()
            .map(|exe| format!(", program '{}'", inert(&exe.display().to_string())))
            .unwrap_or_default(),
    ));
    say("  # Paste it under 'jobs:' in your jobs file, then decide what each DECIDE asks.".into());
    say(format!("  - id: {id}"));
    say("    # Found by its exact command line (regex-escaped, anchored) and its user: a".into());
    say(
        "    # twin started with the same arguments matches too, and mihari then says which".into(),
    );
    say(
        "    # processes match instead of guessing. Loosen the pattern if its arguments change."
            .into(),
    );
    say("    process:".into());
    say(format!(
        "      cmdline: {}",
        yaml_quoted(&exact_pattern(&argv))
    ));
    match &portrait.user {
        Some(user) if is_plain_user(user) => say(format!("      user: {user}")),
        _ => say(format!("      user: {}", portrait.uid)),
    }
    for line in log_lines(portrait, id) {
        say(line);
    }
    say(
        "    # DECIDE: when it should run. resource_free holds whenever no process matches the"
            .into(),
    );
    say(
        "    # pattern above: a job that should always be running. For one that ends when it"
            .into(),
    );
    say(
        "    # is done, add not_succeeded (it is due until a 'mihari run' of it exits 0), or"
            .into(),
    );
    say("    # not_complete with expected_total and a progress_file that counts its items.".into());
    say("    should_run_when: [resource_free]".into());
    say("    # DECIDE: how long it may go without writing its log before it is STALLED, in".into());
    say("    # seconds; 'never' for a server that is idle by nature.".into());
    say("    stall_sec: 300".into());
    say(
        "    # DECIDE: may the watcher restart it by itself? Only when the cause of its stops is"
            .into(),
    );
    say(
        "    # known and the command below is the fix: then write true and auto_restart_reason."
            .into(),
    );
    say("    auto_restart: false".into());
    say("    restart:".into());
    say(
        "      # Its argv as it runs now. Its environment is not copied (it may hold secrets):"
            .into(),
    );
    say(
        "      # add what it needs under 'env:'. A restart runs it under 'mihari run', output"
            .into(),
    );
    say("      # appended to the log above.".into());
    if let Some(fed) = argv.iter().find(|arg| is_descriptor_path(arg)) {
        say(format!(
            "      # DECIDE: it reads '{}', a file descriptor its parent opened: a restart",
            inert(fed)
        ));
        say("      # cannot read it again. Save the script to a file and run that instead.".into());
    }
    let quoted: Vec<String> = argv.iter().map(|arg| yaml_quoted(arg)).collect();
    say(format!("      command: [{}]", quoted.join(", ")));
    match path_text(&portrait.cwd.path) {
        Some(cwd) => {
            if portrait.cwd.deleted {
                say(
                    "      # Its working folder was deleted since it started: make it again, or"
                        .into(),
                );
                say("      # choose another.".into());
            }
            say(format!("      cwd: {}", yaml_quoted(&cwd)));
        }
        None => {
            say("      # Its working folder's name is not UTF-8 text: write 'cwd:' by hand.".into())
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(text)
}

/// A user name the jobs file takes as it is.
fn is_plain_user(user: &str) -> bool {
    !user.is_empty()
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        && !user.bytes().all(|b| b.is_ascii_digit())
}

/// Where an output goes, in words, for a comment.
fn output_words(output: &Output) -> String {
    match output {
        Output::File(target) => format!(
            "the file '{}'{}",
            inert(&target.path.display().to_string()),
            if target.deleted {
                " (deleted since)"
            } else {
                ""
            }
        ),
        Output::Terminal(tty) => format!("a terminal ('{}')", tty.display()),
        Output::Null => "/dev/null (thrown away)".to_string(),
        Output::Pipe(what) => format!("a pipe or socket ('{}')", inert(what)),
        Output::Other(what) => format!("'{}', not a file", inert(what)),
        Output::Closed => "nowhere (closed)".to_string(),
    }
}

/// The `log:` key and its comments: the regular file fd 1 (else fd 2) writes to; when
/// neither is a file, a log in its working folder that a restart will write.
fn log_lines(portrait: &Portrait, id: &str) -> Vec<String> {
    fn file(output: &Output) -> Option<(String, &Target)> {
        match output {
            Output::File(target) => path_text(&target.path).map(|p| (p, target)),
            _ => None,
        }
    }
    let mut lines = Vec::new();
    let (stdout, stderr) = (&portrait.stdout, &portrait.stderr);
    let out = file(stdout).map(|(p, t)| (p, t, "standard output"));
    let err = file(stderr).map(|(p, t)| (p, t, "standard error"));
    let progress_of = |chosen: &Option<(String, &Target, &str)>| {
        chosen
            .as_ref()
            .and_then(|(path, _, _)| printed_progress(Path::new(path)))
    };
    // Two files: the one it prints progress to (tqdm writes to standard error), else the one
    // written last, else standard output.
    let (chosen, progress) = match (&out, &err) {
        (Some(_), Some(_)) if stdout != stderr => {
            let (out_progress, err_progress) = (progress_of(&out), progress_of(&err));
            let err_first = match (&out_progress, &err_progress) {
                (None, Some(_)) => true,
                (Some(_), _) => false,
                (None, None) => {
                    written_at(&err.as_ref().expect("a file").0)
                        > written_at(&out.as_ref().expect("a file").0)
                }
            };
            if err_first {
                (err, err_progress)
            } else {
                (out, out_progress)
            }
        }
        _ => {
            let chosen = out.or(err);
            let progress = progress_of(&chosen);
            (chosen, progress)
        }
    };
    match chosen {
        Some((path, target, which)) => {
            if stdout == stderr {
                lines.push("    # Its standard output and error both go to this file.".to_string());
            } else {
                lines.push(format!("    # Its {which} goes to this file."));
                let (other, other_output) = if which == "standard output" {
                    ("standard error", stderr)
                } else {
                    ("standard output", stdout)
                };
                lines.push(format!(
                    "    # Its {other} goes to {}: mihari reads one log; choose the one where it",
                    output_words(other_output)
                ));
                lines.push("    # reports progress (tqdm writes to standard error).".to_string());
            }
            if target.deleted {
                lines.push(
                    "    # The file was deleted since it was opened: the process writes into a"
                        .to_string(),
                );
                lines.push(
                    "    # file with no name, and this path is 'missing' until a restart makes it."
                        .to_string(),
                );
            }
            lines.push(format!("    log: {}", yaml_quoted(&path)));
            if let Some((preset, frame)) = progress {
                lines.push(format!(
                    "    # DECIDE: its log prints progress that preset '{preset}' reads, as in"
                ));
                lines.push(format!("    #   {frame}"));
                lines.push(
                    "    # keep log_progress if that is its progress, or write a pattern (README)."
                        .to_string(),
                );
                lines.push("    log_progress:".to_string());
                lines.push(format!("      preset: {preset}"));
            }
        }
        None => {
            let folder = path_text(&portrait.cwd.path)
                .filter(|cwd| cwd != "/" && !portrait.cwd.deleted)
                .unwrap_or_else(|| "/tmp".to_string());
            let log = PathBuf::from(folder).join(format!("{id}.log"));
            lines.push(format!(
                "    # Its standard output goes to {}, and its standard error to {}:",
                output_words(stdout),
                output_words(stderr)
            ));
            lines.push(
                "    # no file holds what it prints, so mihari sees no progress from it now. This"
                    .to_string(),
            );
            lines.push(
                "    # log is 'missing' until a restart under 'mihari run' appends its output here;"
                    .to_string(),
            );
            lines.push("    # DECIDE: where that log should be.".to_string());
            lines.push(format!(
                "    log: {}",
                yaml_quoted(&log.display().to_string())
            ));
        }
    }
    lines
}

/// The preset (tqdm and the tools' meters first: their frames also hold a fraction or a
/// percent) that reads progress from what the log at `path` printed last, and the frame it
/// read, inert and short.
fn printed_progress(path: &Path) -> Option<(&'static str, String)> {
    let mut reader = crate::probe::log_progress::LogProgressReader::default();
    [
        LogProgress::Tqdm,
        LogProgress::Curl,
        LogProgress::Wget,
        LogProgress::Rsync,
        LogProgress::Dd,
        LogProgress::Fraction,
        LogProgress::Percent,
    ]
    .into_iter()
    .map(|spec| (spec.as_str(), spec))
    .find_map(|(name, spec)| match reader.read(path, &spec) {
        Reading::Found(found) if found.from.is_none() => {
            let frame: String = found.frame.trim().chars().take(72).collect();
            Some((name, frame))
        }
        _ => None,
    })
}

/// When the file at `path` was last written; the epoch when it cannot be told.
fn written_at(path: &str) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// The stanza loads as the jobs file loader reads it, and its pattern matches the process's
/// own command line as the process scan joins it.
fn self_check(stanza: &str, portrait: &Portrait) -> Result<(), String> {
    let file = format!("settings:\n  state_dir: /nonexistent/mihari-adopt-check\njobs:\n{stanza}");
    let config = crate::config::load_str(&file, Path::new("/nonexistent/jobs.yaml"))
        .map_err(|error| format!("it does not load: {error}"))?;
    let job = config.jobs.first().ok_or("it holds no job")?;
    let pattern = job
        .process
        .as_ref()
        .map(|process| process.cmdline.clone())
        .ok_or("it has no process.cmdline")?;
    let regex = regex::Regex::new(&pattern).map_err(|e| format!("its pattern: {e}"))?;
    let mut bytes = Vec::new();
    for arg in &portrait.argv {
        bytes.extend_from_slice(arg);
        bytes.push(0);
    }
    let joined = crate::probe::procscan::joined_argv(&bytes);
    if !regex.is_match(&joined) {
        return Err(format!("its pattern does not match '{}'", inert(&joined)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_id_is_named_after_what_a_runner_runs() {
        let rows: [(&[&str], &str); 11] = [
            (
                &["/usr/bin/python3", "-u", "/srv/train.py", "--lr", "1"],
                "train",
            ),
            (&["python3.11", "-m", "http.server", "8000"], "http_server"),
            (&["/bin/bash", "-c", "while true; do date; done"], "bash"),
            (&["nohup", "python3", "collect_raw.py"], "collect_raw"),
            (&["/usr/sbin/rsync", "-a", "src/", "dst/"], "rsync"),
            (&["Fetch Data"], "fetch_data"),
            (&["./データ"], "adopted"),
            (&["sh", "./run nightly.sh"], "run_nightly"),
            (&["env", "A=1", "node", "server.js"], "server"),
            (&["bash", "/dev/fd/63"], "bash"),
            (
                &["/usr/bin/python3", "/proc/self/fd/3", "--n", "2"],
                "python3",
            ),
        ];
        for (words, id) in rows {
            assert_eq!(default_id(&argv(words)), id, "{words:?}");
        }
    }

    #[test]
    fn a_taken_id_gets_a_number() {
        let taken = vec!["train".to_string(), "train_2".to_string()];
        assert_eq!(free_id("train", &taken), "train_3");
        assert_eq!(free_id("other", &taken), "other");
    }

    #[test]
    fn yaml_quoting_reads_back_exactly() {
        for text in [
            "plain",
            "with space",
            "it's",
            "say \"hi\"",
            "# not a comment",
            "key: value",
            "- dash",
            "ünïcødé 日本語 ✓",
            "tab\there",
            "line\nbreak",
            "back\\slash",
            "bell\u{7}",
            "",
            "*alias &anchor !tag %dir @at `tick` {a: b} [1]",
        ] {
            let yaml = format!("value: {}\n", yaml_quoted(text));
            let read: std::collections::BTreeMap<String, String> =
                serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(read["value"], text, "{yaml}");
        }
    }

    #[test]
    fn the_pattern_matches_only_the_exact_argv() {
        let pattern = exact_pattern(&["python3".into(), "a.py".into(), "--x=1 (2)".into()]);
        let regex = regex::Regex::new(&pattern).unwrap();
        assert!(regex.is_match("python3 a.py --x=1 (2)"));
        assert!(!regex.is_match("python3 a.py --x=1 (2) more"));
        assert!(!regex.is_match("python3 aXpy --x=1 (2)"));
        assert!(!regex.is_match("sh -c python3 a.py --x=1 (2)"));
    }
}

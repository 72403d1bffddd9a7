//! `mihari adopt PID [--id ID]`: a job stanza for a process already running, to paste under
//! `jobs:`.
//!
//! This module owns turning what [`crate::probe::inspect`] saw of a process into YAML that
//! loads as it is: a `process.cmdline` that matches that argv (regex-escaped and anchored; an
//! interpreter found by its name whatever its folder and version, so a venv's or pyenv's
//! `python` started again as `python3` is still found), the file its output is meant to go
//! to as `log` (through a pipe to the `tee` that writes it, and by the log's own name when a
//! rotation renamed the file it writes), its argv and working folder as `restart`, a
//! `should_run_when` that is not due for ever once a run started by hand ends, every string
//! quoted so that spaces, quotes, `#`, `: `, unicode and invisible controls survive, and
//! comments on what only the operator can decide. Named a pipeline's `tee`, it adopts the
//! process whose output `tee` copies. Before printing, the stanza is loaded by the real jobs
//! file loader and its pattern is matched against the process's own command line: a stanza
//! that would not load, or would not find its process, is never printed. It writes nothing
//! but the stanza, and never copies the process's environment (it may hold secrets).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chrono::{DateTime, Utc};

use crate::config::LogProgress;
use crate::core::Reading;
use crate::core::text::{inert, is_bidi_control};
use crate::probe::inspect::{self, Output, PipeEnd, Portrait, Refusal, Target};
use crate::probe::rotation;

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

/// Interpreters: a job they run is found by the interpreter's name whatever its folder and
/// version (`/srv/app/.venv/bin/python`, `~/.pyenv/versions/3.11.7/bin/python3`,
/// `/usr/bin/python3.11`), so the same script started again by another of them is found.
const INTERPRETERS: [&str; 15] = [
    "python", "pypy", "node", "nodejs", "perl", "ruby", "php", "bash", "sh", "dash", "zsh", "java",
    "deno", "bun", "rscript",
];

/// Programs that copy another program's output into files (`python3 t.py | tee t.log`):
/// named to adopt, the job is the program whose output they copy.
const SINKS: [&str; 4] = ["tee", "ts", "rotatelogs", "cronolog"];

/// How many pipes are followed between a job and the file its output ends in
/// (`python3 t.py | ts | tee t.log` is two).
const PIPE_HOPS: usize = 4;

/// `mihari adopt PID [--id ID]`.
pub fn run(config: Option<&Path>, pid: u32, id: Option<&str>, out: &mut impl Write) -> ExitCode {
    let named = match inspect::inspect(pid) {
        Ok(portrait) => portrait,
        Err(Refusal::NotThere(why)) => return refuse(&why, EXIT_NO_PROCESS),
        Err(Refusal::Denied(why)) => return refuse(&why, EXIT_DENIED),
    };
    // A pipeline's tee is not the job: the process whose output it copies is.
    let (portrait, copier) = match producer_of(&named) {
        Producer::Found(producer) => match inspect::inspect(producer) {
            Ok(portrait) => (portrait, Some(named)),
            // It ended meanwhile: what is left to adopt is the one named.
            Err(Refusal::NotThere(_)) => (named, None),
            Err(Refusal::Denied(why)) => {
                return refuse(
                    &format!(
                        "process {pid} ('{}') copies the output of process {producer}, the \
                         job itself: {why}",
                        shown_argv(&named.argv)
                    ),
                    EXIT_DENIED,
                );
            }
        },
        Producer::Hidden(pipe) => {
            return refuse(
                &format!(
                    "process {pid} ('{}') copies what it reads from '{pipe}', and the process \
                     writing into that pipe, the job itself, is hidden from you (another \
                     user's, or in another container); run it as that user or with sudo: \
                     sudo mihari adopt {pid}",
                    shown_argv(&named.argv)
                ),
                EXIT_DENIED,
            );
        }
        Producer::Itself => (named, None),
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
    let log = choose_log(&portrait, &id);
    let stanza = match stanza(&portrait, &log, copier.as_ref(), &id, Utc::now()) {
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

/// Whose output a sink copies.
enum Producer {
    /// The process named is no sink reading a pipe: it is the job.
    Itself,
    /// The process on the other side of the pipe, the job.
    Found(u32),
    /// Nobody this user may see writes into the pipe (`'pipe:[4242]'`): another user's
    /// process may.
    Hidden(String),
}

/// Whose output the named process copies, when it is a sink ([`SINKS`]) reading a pipe:
/// the writer on the other side (same pipe inode in `/proc/PID/fd`), through other sinks
/// (`python3 t.py | ts | tee t.log`).
fn producer_of(named: &Portrait) -> Producer {
    let mut sink = named.clone();
    let mut producer = Producer::Itself;
    for _ in 0..PIPE_HOPS {
        let program = sink
            .argv
            .first()
            .map(|p| base_name(&String::from_utf8_lossy(p)))
            .unwrap_or_default();
        if !SINKS.contains(&program.as_str()) {
            break;
        }
        let Output::Pipe(pipe) = &sink.stdin else {
            break;
        };
        let ends = inspect::pipe_ends(pipe);
        let Some(writer) = pipeline_member(&ends.writers) else {
            if ends.unseen > 0 {
                return Producer::Hidden(pipe.clone());
            }
            break;
        };
        producer = Producer::Found(writer);
        match inspect::inspect(writer) {
            Ok(next) => sink = next,
            Err(_) => break,
        }
    }
    producer
}

/// The pipeline's own member among the processes on one end of a pipe: the one whose parent
/// is not there too (`bash run.sh | tee t.log`: bash, not the python it runs with the same
/// output), the oldest when there are several.
fn pipeline_member(ends: &[PipeEnd]) -> Option<u32> {
    ends.iter()
        .filter(|end| !ends.iter().any(|other| other.pid == end.ppid))
        .min_by_key(|end| (end.start_ticks, end.pid))
        .map(|end| end.pid)
}

/// An argv joined by spaces as it is shown in a comment: inert, and cut.
fn shown_argv(argv: &[Vec<u8>]) -> String {
    let mut bytes = Vec::new();
    for arg in argv {
        bytes.extend_from_slice(arg);
        bytes.push(0);
    }
    crate::probe::procscan::shown_cmdline(&crate::probe::procscan::joined_argv(&bytes))
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

/// The pattern that finds this process: [`exact_pattern`], but an interpreter
/// ([`INTERPRETERS`]) is matched by its name in any folder and with any version
/// (`^(\S*/)?python[0-9.]* t\.py$`), so the script started again through a venv, pyenv or
/// plainly as `python3` is found; its arguments stay exact, so a sibling run with another
/// argument is not.
pub fn process_pattern(argv: &[String]) -> String {
    let Some((program, arguments)) = argv.split_first() else {
        return exact_pattern(argv);
    };
    let name = base_name(program);
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let interpreter = !family.is_empty()
        && INTERPRETERS.contains(&family.to_ascii_lowercase().as_str())
        && !program.chars().any(char::is_whitespace);
    if !interpreter {
        return exact_pattern(argv);
    }
    let mut pattern = format!(r"^(\S*/)?{}[0-9.]*", regex::escape(family));
    for argument in arguments {
        pattern.push(' ');
        pattern.push_str(&regex::escape(argument));
    }
    pattern.push('$');
    pattern
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
/// characters are not printable in YAML, a byte-order mark is taken away), and what must
/// not reach the operator's terminal or editor as it is: a bidi control (U+202E shows
/// 'txt.exe' as 'exe.txt') or a line separator is written as its escape, `\u202E`.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

/// A path for the jobs file, or `None` when it is not text.
fn path_text(path: &Path) -> Option<String> {
    path.to_str().map(str::to_string)
}

/// The stanza, indented to go under `jobs:`; the comments say what the operator decides.
/// `copier` is the process named when it was the `tee` of the job's pipeline.
pub fn stanza(
    portrait: &Portrait,
    log: &LogChoice,
    copier: Option<&Portrait>,
    id: &str,
    now: DateTime<Utc>,
) -> Result<String, String> {
    let argv = text_argv(portrait)?;
    let pid = portrait.pid;
    let mut lines: Vec<String> = Vec::new();
    let owner = portrait
        .user
        .clone()
        .unwrap_or_else(|| format!("uid {}", portrait.uid));
    let adopted = copier.map_or(pid, |copier| copier.pid);
    lines.push(format!(
        "  # Adopted by 'mihari adopt {adopted}' at {} UTC: process {pid} of user '{}'{}{}.",
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
    if let Some(copier) = copier {
        comment(
            &mut lines,
            "  ",
            &format!(
                "Process {} ('{}') copies the output of process {pid} ('{}') into its log: \
                 the job is process {pid}, and this stanza is for it.",
                copier.pid,
                shown_argv(&copier.argv),
                shown_argv(&portrait.argv)
            ),
        );
    }
    lines.push(
        "  # Paste it under 'jobs:' in your jobs file, then decide what each DECIDE asks.".into(),
    );
    lines.push(format!("  - id: {id}"));
    let pattern = process_pattern(&argv);
    if pattern == exact_pattern(&argv) {
        lines.push(
            "    # Found by its exact command line (regex-escaped, anchored) and its user: a"
                .into(),
        );
    } else {
        lines.push(
            "    # Found by its interpreter's name in any folder and of any version (a venv,"
                .into(),
        );
        lines.push(
            "    # pyenv), then exactly its arguments (regex-escaped, anchored), and its user: a"
                .into(),
        );
    }
    lines.push(
        "    # twin started with the same arguments matches too, and mihari then says which".into(),
    );
    lines.push(
        "    # processes match instead of guessing. Loosen the pattern if its arguments change."
            .into(),
    );
    lines.push("    process:".into());
    lines.push(format!("      cmdline: {}", yaml_quoted(&pattern)));
    match &portrait.user {
        Some(user) if is_plain_user(user) => lines.push(format!("      user: {user}")),
        _ => lines.push(format!("      user: {}", portrait.uid)),
    }
    lines.extend(log_lines(log));
    if log.progress.is_some() {
        for line in [
            "    # DECIDE: when it should run. Its log prints how far it is: not_complete is due",
            "    # while that is short of its total, so a run that ends at its total is COMPLETE",
            "    # and one that ends short is due again (RESTART). resource_free would be due",
            "    # whenever no process matches, even once the work is done.",
            "    should_run_when: [not_complete]",
        ] {
            lines.push(line.to_string());
        }
    } else {
        comment(
            &mut lines,
            "    ",
            "DECIDE: when it should run. Started outside 'mihari run' (by hand, nohup, cron), \
             this run leaves mihari no exit to judge: with not_succeeded it is due (RESTART) \
             once it ends, until a run under 'mihari run' exits 0 (a restart from mihari runs \
             it so, and records how it ends); from then on it is COMPLETE. If its work is done \
             when this run ends, take the job out of the jobs file. A server that should \
             always be running wants [resource_free] (due whenever no process matches the \
             pattern above) and stall_sec: never; for a job that ends, resource_free would \
             be due for ever once it is done.",
        );
        lines.push("    should_run_when: [not_succeeded]".to_string());
    }
    let without = if log.path.is_some() {
        "writing its log"
    } else {
        "moving a file"
    };
    lines.push(format!(
        "    # DECIDE: how long it may go without {without} before it is STALLED, in"
    ));
    for line in [
        "    # seconds; 'never' for a server that is idle by nature.",
        "    stall_sec: 300",
        "    # DECIDE: may the watcher restart it by itself? Only when the cause of its stops is",
        "    # known and the command below is the fix: then write true and auto_restart_reason.",
        "    auto_restart: false",
        "    restart:",
        "      # Its argv as it runs now. Its environment is not copied (it may hold secrets):",
        "      # add what it needs under 'env:'. A restart runs it under 'mihari run', output",
    ] {
        lines.push(line.to_string());
    }
    lines.push(if log.path.is_some() {
        "      # appended to the log above.".to_string()
    } else {
        "      # appended to its log once it declares one.".to_string()
    });
    if let Some(fed) = argv.iter().find(|arg| is_descriptor_path(arg)) {
        lines.push(format!(
            "      # DECIDE: it reads '{}', a file descriptor its parent opened: a restart",
            inert(fed)
        ));
        lines.push(
            "      # cannot read it again. Save the script to a file and run that instead.".into(),
        );
    }
    let quoted: Vec<String> = argv.iter().map(|arg| yaml_quoted(arg)).collect();
    lines.push(format!("      command: [{}]", quoted.join(", ")));
    match path_text(&portrait.cwd.path) {
        Some(cwd) => {
            if portrait.cwd.deleted {
                lines.push(
                    "      # Its working folder was deleted since it started: make it again, or"
                        .into(),
                );
                lines.push("      # choose another.".into());
            }
            lines.push(format!("      cwd: {}", yaml_quoted(&cwd)));
        }
        None => lines.push(
            "      # Its working folder's name is not UTF-8 text: write 'cwd:' by hand.".into(),
        ),
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(text)
}

/// `text` as comment lines at `indent`, wrapped at spaces to stay within a screen's width.
fn comment(lines: &mut Vec<String>, indent: &str, text: &str) {
    const WIDTH: usize = 92;
    let mut line = format!("{indent}#");
    for word in text.split(' ').filter(|word| !word.is_empty()) {
        if line.chars().count() + 1 + word.chars().count() > WIDTH && line.len() > indent.len() + 1
        {
            lines.push(std::mem::replace(&mut line, format!("{indent}#")));
        }
        line.push(' ');
        line.push_str(word);
    }
    if line.len() > indent.len() + 1 {
        lines.push(line);
    }
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
        Output::Terminal(tty) => format!("a terminal ('{}')", inert(&tty.display().to_string())),
        Output::Null => "/dev/null (thrown away)".to_string(),
        Output::Pipe(what) => format!("a pipe or socket ('{}')", inert(what)),
        Output::Other(what) => format!("'{}', not a file", inert(what)),
        Output::Closed => "nowhere (closed)".to_string(),
    }
}

/// The log adopt proposes, and what the comments above it say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogChoice {
    /// The path for `log:`; `None` for a process whose output no file holds.
    pub path: Option<String>,
    /// The comment lines above it, indented and marked, ready to print.
    pub notes: Vec<String>,
    /// The preset that reads progress from the log's last frames, and the frame it read.
    pub progress: Option<(&'static str, String)>,
}

/// A regular file a job's output goes into, and who holds it open.
struct Written {
    /// The process that writes it (the job, or the `tee` its output goes through) and the
    /// descriptor it writes it on.
    holder: u32,
    fd: u32,
    holder_started: Option<DateTime<Utc>>,
    file: Target,
    /// What the job sends there: "standard output", "standard error", or both.
    which: &'static str,
    /// The processes its output goes through on its way, as "process N ('tee t.log')".
    through: Vec<String>,
}

/// The `log:` for `portrait` and its comments: the regular file fd 1 (else fd 2) writes to,
/// else the file the pipe they go into ends in (a `tee`'s), under the log's own name when a
/// rotation renamed it; when there is none, a log in its working folder that a restart will
/// write.
pub fn choose_log(portrait: &Portrait, id: &str) -> LogChoice {
    let Some(written) = output_file(portrait) else {
        // A silent process: no log is proposed that would only read 'missing'. The kernel's
        // reading is its progress (the positions of the files it has open), and says what it
        // does while quiet.
        let folder = path_text(&portrait.cwd.path)
            .filter(|cwd| cwd != "/" && !portrait.cwd.deleted)
            .unwrap_or_else(|| "/tmp".to_string());
        let later = PathBuf::from(folder).join(format!("{id}.log"));
        let mut notes = Vec::new();
        comment(
            &mut notes,
            "    ",
            &format!(
                "Its standard output goes to {}, and its standard error to {}: no file holds \
                 what it prints, so no log is proposed. Its progress is the kernel's reading: \
                 the positions of the files it has open (\"reading 'big.img' at 43 %\"), and, \
                 while none moves, what it is doing (spinning, blocked, waiting, stopped). \
                 DECIDE: to keep its output from the next run on, add log: '{}' (a restart \
                 under 'mihari run' appends its output there).",
                output_words(&portrait.stdout),
                output_words(&portrait.stderr),
                inert(&later.display().to_string())
            ),
        );
        return LogChoice {
            path: None,
            notes,
            progress: None,
        };
    };
    let open_path = path_text(&written.file.path).unwrap_or_default();
    let open = inert(&open_path);
    let (path, notes) = match rotated_away(&written) {
        Some((log, read)) => {
            let log_text = inert(&log.display().to_string());
            let mut notes = output_notes(portrait, &written, &format!("'{open}'"));
            let mut words = format!(
                "That file{} was renamed by a rotation of the log '{log_text}' while it ran \
                 (renamed, and a new one made), and it still writes into the renamed file.",
                if written.file.deleted {
                    ", deleted since,"
                } else {
                    ""
                }
            );
            if written.file.deleted {
                words.push_str(
                    " mihari cannot see what it writes there: it will look STALLED until it \
                     is restarted.",
                );
            } else if read {
                words.push_str(&format!(
                    " mihari reads a rotated log as such (the newest write of '{log_text}' \
                     and of '{open}'), so the log is '{log_text}'; the next rotation moves \
                     its file out of sight."
                ));
            } else {
                words.push_str(&format!(
                    " mihari reads '{log_text}' and its last rotation, not '{open}': it will \
                     look STALLED until it is restarted."
                ));
            }
            words.push_str(
                " DECIDE: rotate this log with copytruncate, or restart it under 'mihari run', \
                 which opens the log again after a rotation.",
            );
            comment(&mut notes, "    ", &words);
            (log.display().to_string(), notes)
        }
        None => {
            let mut notes = output_notes(portrait, &written, "this file");
            if written.file.deleted {
                for line in [
                    "    # The file was deleted since it was opened: the process writes into a",
                    "    # file with no name, and this path is 'missing' until a restart makes it.",
                ] {
                    notes.push(line.to_string());
                }
            }
            (open_path, notes)
        }
    };
    let progress = printed_progress(Path::new(&path));
    LogChoice {
        path: Some(path),
        notes,
        progress,
    }
}

/// The `log:` key, its comments and its `log_progress`.
fn log_lines(log: &LogChoice) -> Vec<String> {
    let mut lines = log.notes.clone();
    if let Some(path) = &log.path {
        lines.push(format!("    log: {}", yaml_quoted(path)));
    }
    if let Some((preset, frame)) = &log.progress {
        lines.push(format!(
            "    # DECIDE: its log prints progress that preset '{preset}' reads, as in"
        ));
        lines.push(format!("    #   {frame}"));
        lines.push(
            "    # keep log_progress if that is its progress, or write a pattern (docs/jobs-file.md)."
                .to_string(),
        );
        lines.push("    log_progress:".to_string());
        lines.push(format!("      preset: {preset}"));
    }
    lines
}

/// The regular file the job's output goes into: its own standard output or error (of two
/// files, the one a preset reads progress from, tqdm writing to standard error, else the one
/// written last), else the file the pipe they go into ends in.
fn output_file(portrait: &Portrait) -> Option<Written> {
    let (stdout, stderr) = (&portrait.stdout, &portrait.stderr);
    let own = |output: &Output, fd: u32, which: &'static str| match output {
        Output::File(target) if path_text(&target.path).is_some() => Some(Written {
            holder: portrait.pid,
            fd,
            holder_started: portrait.started_at,
            file: target.clone(),
            which,
            through: Vec::new(),
        }),
        _ => None,
    };
    match (
        own(stdout, 1, "standard output"),
        own(stderr, 2, "standard error"),
    ) {
        (Some(out), Some(err)) if stdout != stderr => {
            let progress_of = |w: &Written| printed_progress(&w.file.path);
            let err_first = match (progress_of(&out), progress_of(&err)) {
                (None, Some(_)) => true,
                (Some(_), _) => false,
                (None, None) => written_at(&err.file.path) > written_at(&out.file.path),
            };
            Some(if err_first { err } else { out })
        }
        (Some(out), _) => Some(out),
        (None, Some(err)) => Some(err),
        (None, None) => {
            // Through a pipe: standard output first; standard error when it is another pipe.
            let mut carried = carried_through(stdout, "standard output");
            if carried.is_none() && stderr != stdout {
                carried = carried_through(stderr, "standard error");
            }
            carried
        }
    }
}

/// The comments on where the job's outputs go, `here` naming the file [`output_file`] chose.
fn output_notes(portrait: &Portrait, written: &Written, here: &str) -> Vec<String> {
    let (stdout, stderr) = (&portrait.stdout, &portrait.stderr);
    let mut notes = Vec::new();
    let other = if written.which == "standard output" {
        ("standard error", stderr)
    } else {
        ("standard output", stdout)
    };
    if !written.through.is_empty() {
        let (which, go, them) = if stdout == stderr {
            ("standard output and error", "go", "them")
        } else {
            (written.which, "goes", "it")
        };
        comment(
            &mut notes,
            "    ",
            &format!(
                "Its {which} {go} through a pipe to {}, which writes {them} into {here}. A \
                 restart under 'mihari run' appends its output to this log itself.",
                written.through.join(", then "),
            ),
        );
        if stdout != stderr {
            comment(
                &mut notes,
                "    ",
                &format!("Its {} goes to {}.", other.0, output_words(other.1)),
            );
        }
    } else if stdout == stderr {
        comment(
            &mut notes,
            "    ",
            &format!("Its standard output and error both go to {here}."),
        );
    } else {
        comment(
            &mut notes,
            "    ",
            &format!(
                "Its {} goes to {here}. Its {} goes to {}: mihari reads one log; choose the \
                 one where it reports progress (tqdm writes to standard error).",
                written.which,
                other.0,
                output_words(other.1)
            ),
        );
    }
    notes
}

/// The file an output that goes into a pipe ends in: the file the process reading the pipe
/// was told to write (`tee t.log`), else its standard output when that is a file (`grep x >
/// t.log`), else on through the next pipe (`ts | tee t.log`), up to [`PIPE_HOPS`] pipes.
fn carried_through(output: &Output, which: &'static str) -> Option<Written> {
    let Output::Pipe(first) = output else {
        return None;
    };
    let mut pipe = first.clone();
    let mut through = Vec::new();
    for _ in 0..PIPE_HOPS {
        if !pipe.starts_with("pipe:") {
            return None;
        }
        let reader = pipeline_member(&inspect::pipe_ends(&pipe).readers)?;
        let portrait = inspect::inspect(reader).ok()?;
        through.push(format!(
            "process {reader} ('{}')",
            shown_argv(&portrait.argv)
        ));
        let file = match (portrait.written.iter().find(|w| w.named), &portrait.stdout) {
            (Some(named), _) => Some((named.fd, named.file.clone())),
            (None, Output::File(target)) => Some((1, target.clone())),
            _ => None,
        };
        if let Some((fd, file)) = file.filter(|(_, file)| path_text(&file.path).is_some()) {
            return Some(Written {
                holder: reader,
                fd,
                holder_started: portrait.started_at,
                file,
                which,
                through,
            });
        }
        match &portrait.stdout {
            Output::Pipe(next) => pipe = next.clone(),
            _ => return None,
        }
    }
    None
}

/// When the file was renamed by a rotation while its writer ran (logrotate's rename +
/// create, `RotatingFileHandler`): the log it belongs to — a regular file now, another one,
/// made since the writer started — and whether mihari reads the renamed file as that log's
/// rotated predecessor. A file merely named like a rotation (`run.log.2` chosen by hand,
/// with an older `run.log` beside it) is not one.
fn rotated_away(written: &Written) -> Option<(PathBuf, bool)> {
    use std::os::unix::fs::MetadataExt;
    let log = rotation::rotated_from(&written.file.path)?;
    let meta = crate::probe::safe_open::look(&log, crate::probe::safe_open::Role::Log).ok()?;
    if !meta.is_file() {
        return None;
    }
    if let Ok(open) = std::fs::metadata(format!("/proc/{}/fd/{}", written.holder, written.fd))
        && (open.dev(), open.ino()) == (meta.dev(), meta.ino())
    {
        return None;
    }
    let made: DateTime<Utc> = meta.created().or_else(|_| meta.modified()).ok()?.into();
    // The start is known to the second: a log made a moment before it is not newer.
    if let Some(started) = written.holder_started
        && made < started - chrono::Duration::seconds(1)
    {
        return None;
    }
    let today = chrono::Local::now().date_naive();
    let read =
        !written.file.deleted && rotation::predecessors(&log, today).contains(&written.file.path);
    Some((log, read))
}

/// The preset (tqdm and the tools' meters first: their frames also hold a fraction or a
/// percent) that reads progress from what the log at `path` printed last (or, just after a
/// rotation, its predecessor), and the frame it read, inert and short.
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
        Reading::Found(found) => {
            let frame: String = found.frame.trim().chars().take(72).collect();
            Some((name, frame))
        }
        _ => None,
    })
}

/// When the file at `path` was last written; the epoch when it cannot be told.
fn written_at(path: &Path) -> std::time::SystemTime {
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
            "invoice\u{202e}fdp.exe",
            "\u{200e}\u{200f}\u{202a}\u{202b}\u{202c}\u{202d}\u{2066}\u{2067}\u{2068}\u{2069}",
            "line\u{2028}sep\u{2029}para",
        ] {
            let yaml = format!("value: {}\n", yaml_quoted(text));
            assert!(
                !yaml.chars().any(is_bidi_control),
                "a bidi control or line separator is printed as it is: {yaml:?}"
            );
            let read: std::collections::BTreeMap<String, String> =
                serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"));
            assert_eq!(read["value"], text, "{yaml}");
        }
    }

    #[test]
    fn an_interpreter_is_matched_in_any_folder_and_version_and_its_arguments_exactly() {
        let words = |text: &str| text.split(' ').map(str::to_string).collect::<Vec<_>>();
        // (the argv adopted, a command line, whether the pattern finds it)
        let rows = [
            (
                "/home/u/.pyenv/versions/3.11.7/bin/python3 t.py",
                "python3 t.py",
                true,
            ),
            (
                "/srv/app/.venv/bin/python t.py",
                "/usr/bin/python3.11 t.py",
                true,
            ),
            ("python3 t.py", "/srv/app/.venv/bin/python t.py", true),
            ("python3 t.py --lr 1", "python3 t.py --lr 2", false),
            ("python3 t.py", "python3 t.py --resume", false),
            ("python3 t.py", "sh -c python3 t.py", false),
            ("python3 t.py", "/usr/bin/python3-config t.py", false),
            ("python3 t.py", "python3 xt.py", false),
            ("/usr/bin/bash run.sh", "bash run.sh", true),
            ("/usr/bin/bash run.sh", "/usr/bin/dash run.sh", false),
            ("/opt/tool/collect --all", "/opt/tool/collect --all", true),
            ("/opt/tool/collect --all", "collect --all", false),
        ];
        for (adopted, seen, found) in rows {
            let pattern = process_pattern(&words(adopted));
            let regex = regex::Regex::new(&pattern).unwrap();
            assert!(
                regex.is_match(adopted),
                "{pattern} misses its own {adopted}"
            );
            assert_eq!(regex.is_match(seen), found, "{pattern} on {seen}");
        }
        // A program whose folder has a space in it is matched exactly.
        let spaced = vec!["/opt/my app/python3".to_string(), "t.py".to_string()];
        assert_eq!(process_pattern(&spaced), exact_pattern(&spaced));
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

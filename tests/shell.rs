//! `mihari completions`, `mihari man` and the systemd units in `assets/`, tested from the
//! outside: the real binary, the real `bash` (and `man`, `zsh`, `fish`, `systemd-analyze`
//! when this machine has them — each of those parts is skipped, saying so, when it does not).
//!
//! The list of subcommands is read from the clap definition at test time, so a subcommand
//! added later (`watch`) is covered without touching this file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use clap::CommandFactory;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// Runs the real binary with `args`, its output captured.
fn mihari(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the mihari binary runs")
}

/// Runs `args`, asserting exit 0 and no stderr, and returns stdout.
fn mihari_ok(args: &[&str]) -> String {
    let output = mihari(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "mihari {args:?} exited {:?}: {stderr}",
        output.status
    );
    assert!(
        stderr.is_empty(),
        "mihari {args:?} wrote to stderr: {stderr}"
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// The names of the subcommands a person can type: hidden ones (the demo's `sim`) are not
/// promised anywhere.
fn visible_subcommands() -> Vec<String> {
    let names: Vec<String> = mihari::cli::Cli::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_owned())
        .collect();
    assert!(
        names.iter().any(|name| name == "check"),
        "the clap definition lists its subcommands: {names:?}"
    );
    names
}

/// Whether `program` can be found on PATH, for the parts that use optional tools.
fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn skipping(what: &str) {
    eprintln!("skipped: {what}");
}

/// Writes `text` into a fresh temp file named `name` and returns the folder holding it.
fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("the temp file is written");
    (dir, path)
}

// ---------------------------------------------------------------------------------------
// completions
// ---------------------------------------------------------------------------------------

#[test]
fn bash_completions_parse_and_offer_every_subcommand() {
    let script = mihari_ok(&["completions", "bash"]);
    let words: Vec<&str> = script
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .collect();
    for name in visible_subcommands() {
        assert!(
            words.contains(&name.as_str()),
            "bash completions do not mention '{name}'"
        );
    }

    let (_dir, path) = temp_file("mihari.bash", &script);
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash runs");
    assert!(
        syntax.status.success(),
        "bash -n refuses the completions: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );

    // Completing `mihari <TAB>` in a real bash offers every subcommand.
    let completed = Command::new("bash")
        .arg("-c")
        .arg(
            r#"source "$1" || exit 9
               COMP_WORDS=(mihari ""); COMP_CWORD=1; COMP_LINE="mihari "; COMP_POINT=7
               _mihari mihari "" mihari
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(&path)
        .output()
        .expect("bash runs");
    assert!(
        completed.status.success(),
        "completing in bash failed: {}",
        String::from_utf8_lossy(&completed.stderr)
    );
    let offered = String::from_utf8_lossy(&completed.stdout);
    let offered: Vec<&str> = offered.lines().collect();
    for name in visible_subcommands() {
        assert!(
            offered.contains(&name.as_str()),
            "`mihari <TAB>` does not offer '{name}': {offered:?}"
        );
    }
}

#[test]
fn other_shells_get_completions_their_shell_accepts() {
    // (shell, the program that checks syntax and its flag, when it has one)
    let shells = [
        ("zsh", Some(("zsh", "-n"))),
        ("fish", Some(("fish", "--no-execute"))),
        ("elvish", None),
        ("powershell", None),
    ];
    for (shell, checker) in shells {
        let script = mihari_ok(&["completions", shell]);
        assert!(
            script.contains("mihari") && script.len() > 200,
            "{shell} completions are empty or do not name mihari"
        );
        let Some((program, flag)) = checker else {
            continue;
        };
        if !have(program) {
            skipping(&format!(
                "{program} {flag} on the {shell} completions: no {program}"
            ));
            continue;
        }
        let (_dir, path) = temp_file(&format!("mihari.{shell}"), &script);
        let syntax = Command::new(program)
            .arg(flag)
            .arg(&path)
            .output()
            .expect("runs");
        assert!(
            syntax.status.success(),
            "{program} {flag} refuses the completions: {}",
            String::from_utf8_lossy(&syntax.stderr)
        );
    }
}

#[test]
fn an_unknown_shell_is_refused_by_the_parser() {
    let output = mihari(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    assert!(output.stdout.is_empty());
}

// ---------------------------------------------------------------------------------------
// man
// ---------------------------------------------------------------------------------------

/// Splits a roff request line into its arguments, honouring double quotes.
fn roff_args(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    args.push(std::mem::take(&mut current));
                }
                started = false;
            }
            _ => {
                current.push(c);
                started = true;
            }
        }
    }
    if started {
        args.push(current);
    }
    args
}

#[test]
fn man_is_roff_with_a_complete_title_line() {
    let roff = mihari_ok(&["man"]);
    assert!(roff.starts_with('.'), "roff starts with a request");
    let title = roff.find("\n.TH ").expect("a .TH title line");
    let first_section = roff.find("\n.SH ").expect("a .SH section");
    assert!(title < first_section, ".TH comes before any section");

    // Regression: clap_mangen writes an empty date as nothing, which shifted the source into
    // the date's place and the manual into the source's.
    let version = env!("CARGO_PKG_VERSION");
    for line in roff.lines().filter(|line| line.starts_with(".TH ")) {
        let args = roff_args(line);
        assert_eq!(
            args.len(),
            6,
            "`.TH title section date source manual`: {line}"
        );
        assert!(args[1].starts_with("mihari"), "{line}");
        assert_eq!(args[2], "1", "{line}");
        assert_eq!(args[4], format!("mihari {version}"), "{line}");
    }
}

#[test]
fn man_lists_every_subcommand_and_gives_each_its_page() {
    let roff = mihari_ok(&["man"]);
    let root_page = roff
        .split("\n.TH ")
        .nth(1)
        .expect("the root page comes first");
    assert!(
        root_page.starts_with("mihari 1 "),
        "the root page comes first"
    );
    assert!(root_page.contains(".SH SUBCOMMANDS"));
    for name in visible_subcommands() {
        assert!(
            // roff escapes every hyphen: `release-marker` is listed as `release\-marker`.
            root_page.contains(&format!("mihari\\-{}(1)", name.replace('-', "\\-"))),
            "the root page does not list '{name}'"
        );
        assert!(
            roff.contains(&format!("\n.TH mihari-{name} 1 ")),
            "no page of its own for '{name}'"
        );
    }
    for hidden in mihari::cli::Cli::command()
        .get_subcommands()
        .filter(|sub| sub.is_hide_set())
    {
        let name = hidden.get_name();
        assert!(
            !roff.contains(&format!("mihari\\-{name}(")),
            "the hidden '{name}' is in the man page"
        );
    }
    assert!(
        !roff.contains("mihari\\-help("),
        "the implicit help subcommand gets no page"
    );
}

#[test]
fn man_renders_with_the_real_man() {
    if !have("man") {
        skipping("rendering with `man -l -`: no man on this machine");
        return;
    }
    let roff = mihari_ok(&["man"]);
    let mut man = Command::new("man")
        .args(["-l", "-"])
        .env("MANWIDTH", "80")
        .env_remove("MANPAGER")
        .env_remove("PAGER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("man runs");
    {
        use std::io::Write;
        let mut stdin = man.stdin.take().expect("man's stdin");
        stdin
            .write_all(roff.as_bytes())
            .expect("man reads the page");
    }
    let rendered = man.wait_with_output().expect("man finishes");
    let stderr = String::from_utf8_lossy(&rendered.stderr);
    assert!(rendered.status.success(), "man -l - failed: {stderr}");
    assert!(
        !stderr.contains("warning") && !stderr.contains("error"),
        "man complained: {stderr}"
    );
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(text.contains("SUBCOMMANDS"), "{text}");
    for name in visible_subcommands() {
        assert!(
            text.contains(&format!("mihari-{name}(1)")),
            "'{name}' in {text}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// write errors
// ---------------------------------------------------------------------------------------

/// `mihari man | head -c1`: the reader leaves at once. That is the reader's choice, not a
/// failure, and never a panic.
#[test]
fn a_reader_that_goes_away_is_not_a_failure() {
    for args in [&["man"][..], &["completions", "bash"][..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mihari runs");
        // Closing the only read end before the child writes makes its write fail with EPIPE
        // (should it write first, the text fits in the pipe and the outcome is the same).
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("stderr is read");
        let status = child.wait().expect("mihari exits");
        assert!(
            !stderr.contains("panicked"),
            "mihari {args:?} panicked: {stderr}"
        );
        assert_eq!(status.code(), Some(0), "mihari {args:?}: {stderr}");
    }
}

/// `mihari completions bash > file` on a full disk must not pass for installed.
#[test]
fn a_full_disk_is_exit_1_with_a_message() {
    if !Path::new("/dev/full").exists() {
        skipping("writing to /dev/full: no /dev/full");
        return;
    }
    for args in [&["man"][..], &["completions", "bash"][..]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full opens");
        let output = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(full)
            .output()
            .expect("mihari runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "mihari {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("cannot write"), "{stderr}");
    }
}

// ---------------------------------------------------------------------------------------
// systemd units
// ---------------------------------------------------------------------------------------

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// A unit file as (section, key) -> values, in order; a key may repeat (`ExecStart=` twice).
type Unit = BTreeMap<(String, String), Vec<String>>;

/// Parses a unit file strictly enough to catch a typo that systemd would ignore with only a
/// warning: every line is blank, a comment, a `[Section]` or `Key=value` inside a section.
fn parse_unit(name: &str) -> Unit {
    let text = std::fs::read_to_string(assets().join(name)).expect("the unit file exists");
    let mut unit = Unit::new();
    let mut section: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        let at = format!("{name}:{}", number + 1);
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(!line.ends_with('\\'), "{at}: keep values on one line");
        if let Some(inner) = line.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .unwrap_or_else(|| panic!("{at}: '{line}'"));
            section = Some(inner.to_owned());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{at}: not Key=value: '{line}'"));
        let key = key.trim();
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()),
            "{at}: key '{key}'"
        );
        let section = section
            .clone()
            .unwrap_or_else(|| panic!("{at}: outside a section"));
        unit.entry((section, key.to_owned()))
            .or_default()
            .push(value.trim().to_owned());
    }
    unit
}

/// The single value of `section.key`, failing the test when it is missing or repeated.
fn value<'u>(unit: &'u Unit, section: &str, key: &str) -> &'u str {
    match unit.get(&(section.to_owned(), key.to_owned())) {
        Some(values) if values.len() == 1 => &values[0],
        other => panic!("[{section}] {key}= should appear once, found {other:?}"),
    }
}

fn has(unit: &Unit, section: &str, key: &str) -> bool {
    unit.contains_key(&(section.to_owned(), key.to_owned()))
}

/// A systemd time span of the forms this project uses ("300", "30s", "5min", "2min 30s").
fn seconds(span: &str) -> u64 {
    span.split_whitespace()
        .map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            let number: u64 = digits.parse().unwrap_or_else(|_| panic!("span '{span}'"));
            match &part[digits.len()..] {
                "" | "s" | "sec" => number,
                "m" | "min" => number * 60,
                "h" => number * 3600,
                unit => panic!("unit '{unit}' in '{span}'"),
            }
        })
        .sum()
}

const UNITS: [&str; 3] = [
    "mihari-watch.service",
    "mihari-watch-once.service",
    "mihari-watch.timer",
];

#[test]
fn every_service_runs_the_watcher_and_leaves_jobs_alone() {
    for name in UNITS.iter().filter(|name| name.ends_with(".service")) {
        let unit = parse_unit(name);
        let exec = value(&unit, "Service", "ExecStart");
        assert!(exec.contains("mihari watch"), "{name}: ExecStart={exec}");
        // Jobs live in the home folder and /tmp, and the watcher reads every holder's /proc.
        for forbidden in ["ProtectHome", "PrivateTmp", "ProtectProc", "ProcSubset"] {
            assert!(
                !has(&unit, "Service", forbidden),
                "{name} sets {forbidden}="
            );
        }
        // Regression guard: with the default KillMode=control-group, stopping the watcher (or
        // a --once pass ending) would kill every job it had restarted.
        assert_eq!(value(&unit, "Service", "KillMode"), "process", "{name}");
        assert_eq!(value(&unit, "Service", "NoNewPrivileges"), "true", "{name}");
    }
}

#[test]
fn the_long_running_service_restarts_on_failure() {
    let unit = parse_unit("mihari-watch.service");
    assert_eq!(value(&unit, "Service", "Restart"), "on-failure");
    assert_eq!(value(&unit, "Service", "RestartSec"), "5");
    let exec = value(&unit, "Service", "ExecStart");
    assert!(!exec.contains("--once"), "ExecStart={exec}");
    // `systemctl reload` sends SIGHUP, which reloads the jobs file rather than stopping it.
    assert_eq!(
        value(&unit, "Service", "ExecReload"),
        "/bin/kill -HUP $MAINPID"
    );
    assert_eq!(value(&unit, "Install", "WantedBy"), "default.target");
}

#[test]
fn the_timer_runs_one_pass_as_often_as_the_pass_says() {
    let once = parse_unit("mihari-watch-once.service");
    assert_eq!(value(&once, "Service", "Type"), "oneshot");
    let exec = value(&once, "Service", "ExecStart");
    assert!(exec.contains("--once"), "ExecStart={exec}");
    // A WARNING (1) or CRITICAL (2) verdict is not a unit failure; UNKNOWN (3) is.
    let success: Vec<&str> = value(&once, "Service", "SuccessExitStatus")
        .split_whitespace()
        .collect();
    assert!(
        success.contains(&"1") && success.contains(&"2"),
        "{success:?}"
    );
    assert!(
        !success.contains(&"3"),
        "3 (cannot assess) must stay a failure"
    );

    let timer = parse_unit("mihari-watch.timer");
    assert_eq!(value(&timer, "Timer", "Unit"), "mihari-watch-once.service");
    assert_eq!(value(&timer, "Install", "WantedBy"), "timers.target");
    assert!(has(&timer, "Timer", "OnBootSec"));
    let every = seconds(value(&timer, "Timer", "OnUnitActiveSec"));

    let words: Vec<&str> = exec.split_whitespace().collect();
    let interval = words
        .iter()
        .position(|word| *word == "--interval")
        .and_then(|at| words.get(at + 1))
        .unwrap_or_else(|| panic!("--interval SEC in ExecStart={exec}"));
    assert_eq!(
        seconds(interval),
        every,
        "--interval must say how often the timer fires, or absence is misjudged"
    );
}

/// `systemd-analyze verify` when this machine has it. It needs a user runtime folder and
/// looks for the binary named in ExecStart, so both are faked in a temp HOME; when it cannot
/// start its manager at all (no systemd in a container), the check is skipped.
#[test]
fn systemd_accepts_the_units_when_it_is_here() {
    if !have("systemd-analyze") {
        skipping("systemd-analyze verify: not installed");
        return;
    }
    let temp = tempfile::tempdir().expect("a temp dir");
    let home = temp.path().join("home");
    let runtime = temp.path().join("run");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).expect("a fake ~/.cargo/bin");
    std::fs::create_dir_all(&runtime).expect("a runtime dir");
    std::os::unix::fs::symlink(BIN, bin.join("mihari")).expect("the binary is linked");
    let files: Vec<PathBuf> = UNITS.iter().map(|name| assets().join(name)).collect();
    let output = Command::new("systemd-analyze")
        .args(["--user", "--man=no", "verify"])
        .args(&files)
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("Failed to initialize manager") || stderr.contains("unrecognized option") {
        skipping(&format!("systemd-analyze verify cannot run here: {stderr}"));
        return;
    }
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

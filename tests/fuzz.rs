//! Fuzzing, with proptest on stable Rust: every parser that reads text from outside mihari
//! is fed hostile input many thousands of times, and must answer (Ok or a refusal) without
//! panicking, hanging or letting a control character through to the terminal.
//!
//! What is fuzzed, and what must hold:
//!
//! 1. the jobs-file loader (`config::load_str`): arbitrary strings, arbitrary bytes decoded
//!    lossily, mutations of the real jobs files (the valid fixtures and `jobs.example.yaml`,
//!    read at test time: ranges deleted, lines doubled, dropped and swapped, YAML tokens such
//!    as anchors, aliases, merge keys, tags, brackets, tabs, long scalars, NUL and other
//!    controls inserted), and collections nested up to 12,000 deep. Each load runs on a
//!    watched thread, so a load still running after 30 s fails its case with its input
//!    instead of stalling the run. A refusal names the path and a line:column inside the
//!    file, and its message (its snippet's line breaks aside) is inert.
//! 2. an alias bomb ("billion laughs", plain and through merge keys): refused, in a child
//!    process (this test binary, filtered to `alias_bomb_probe`) whose peak RSS (VmHWM)
//!    stays under 64 MiB and whose load takes under 5 s (a sanity bound, not a benchmark).
//! 3. the lock parser and the pure liveness judge, with arbitrary `/proc` answers, mtimes
//!    and a start-time clock that may fail: the why is inert, a PID of 0 or above
//!    `PID_MAX_LIMIT` is never looked up and never alive, "cannot see" is never dead.
//! 4. the run-manifest parser (the machine's zone and a fixed one), on arbitrary text and on
//!    JSON trees with the manifest's keys mixed in: every string it keeps is inert.
//! 5. the `/proc/<pid>/stat` parser, on arbitrary text and on a real stat line whose command
//!    name is replaced by anything (spaces and ')' included): it still reads the right fields.
//! 6. the heartbeat and approval store API (one store per run, in a temp dir) with hostile
//!    job ids, keys, steps, summaries, positions, notes and reasons: no error, no panic,
//!    what is written reads back, `PRAGMA integrity_check` passes, and every string an
//!    engine reading that store shows is inert (the approval keys of the jobs in the file
//!    are those `mihari approval request` accepts, as they are in use); then
//!    `mihari heartbeat` and `mihari approval request` as the real binary with arbitrary
//!    values: exit 0, 3, 10 or 11, never a panic.
//! 7. the text sanitizer `inert`: on arbitrary Unicode and on a grammar of terminal sequences
//!    (CSI, OSC, DCS, SOS, PM, APC in 7- and 8-bit forms, terminated or not, lone ESC, bidi
//!    controls, C0 and C1): nothing that could drive a terminal survives, it is idempotent,
//!    it leaves inert text alone, and it never grows text more than threefold.
//!
//! Each target's case count is set for a debug `cargo test` that finishes well under a minute
//! on two cores. For a longer campaign, multiply every count with `MIHARI_FUZZ_CASES`:
//!
//! ```sh
//! MIHARI_FUZZ_CASES=10 cargo test --release --test fuzz
//! ```
//!
//! A failure prints the minimal input proptest shrank it to, and proptest records its seed
//! in `tests/fuzz.proptest-regressions`, so the next run tries it first.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Debug;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset, TimeDelta, Utc};
use mihari::config::{Config, ConfigError, load_str};
use mihari::core::text::{inert, is_inert};
use mihari::core::{Evidence, Reading};
use mihari::engine::{Engine, Snapshot};
use mihari::probe::lock::{judge_lock, parse_lock};
use mihari::probe::manifest::{parse_manifest, parse_manifest_in};
use mihari::probe::proc::{PID_MAX_LIMIT, ProcLookup, ProcStat, parse_stat};
use mihari::store::{Actor, Heartbeat, Store};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{RngAlgorithm, TestCaseError, TestRunner};
use serde_json::Value;

// ---- case counts ----

/// Every base case count is multiplied by this (`MIHARI_FUZZ_CASES`, default 1).
fn multiplier() -> u32 {
    std::env::var("MIHARI_FUZZ_CASES")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&times| times > 0)
        .unwrap_or(1)
}

/// A proptest configuration running `base` cases times the multiplier; a failure's seed is
/// kept in `tests/fuzz.proptest-regressions`. XorShift rather than the default ChaCha: in a
/// debug build ChaCha makes generating the input cost ten times more than testing it.
fn cases(base: u32) -> ProptestConfig {
    ProptestConfig {
        source_file: Some(file!()),
        rng_algorithm: RngAlgorithm::XorShift,
        ..ProptestConfig::with_cases(base.saturating_mul(multiplier()))
    }
}

/// Runs `test` on `cases` values of `strategy` (for targets that need set-up and tear-down
/// around the whole run); a failure panics with proptest's minimal input.
fn fuzz<S>(
    config: ProptestConfig,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let mut runner = TestRunner::new(config);
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("{failure}");
    }
}

// ---- hostile text ----

const BIDI: [char; 12] = [
    '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}',
    '\u{2069}', '\u{200e}', '\u{200f}', '\u{061c}',
];

/// Characters that matter to YAML, JSON and terminals.
const SYNTAX: [char; 28] = [
    '\u{1b}', '[', ']', '\\', '\u{7}', ';', '\n', '\r', '\t', '\0', '\'', '"', '{', '}', ':', '-',
    '#', '&', '*', '!', '|', '>', '%', '@', '`', ' ', ',', '?',
];

/// Non-ASCII characters of every UTF-8 length, and the odd ones.
const WIDE: [char; 10] = [
    'é',
    '日',
    '🦀',
    '\u{feff}',
    '\u{fffd}',
    '\u{2028}',
    '\u{2029}',
    '\u{85}',
    '\u{a0}',
    '\u{10ffff}',
];

fn char_in(range: std::ops::Range<u32>) -> impl Strategy<Value = char> {
    range.prop_map(|code| char::from_u32(code).unwrap_or('\u{fffd}'))
}

/// One character, weighted toward controls, bidi controls and syntax.
fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => any::<char>(),
        2 => char_in(0..0x20),
        1 => Just('\u{7f}'),
        2 => char_in(0x80..0xa0),
        2 => prop::sample::select(BIDI.to_vec()),
        3 => prop::sample::select(SYNTAX.to_vec()),
        1 => prop::sample::select(WIDE.to_vec()),
        3 => char_in(0x20..0x7f),
    ]
}

fn nasty_string(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(nasty_char(), 0..max_chars).prop_map(String::from_iter)
}

/// A terminal sequence or a piece of plain text, in the forms `inert` must recognise.
fn terminal_piece() -> impl Strategy<Value = String> {
    let csi = (
        prop::sample::select(vec!["\u{1b}[", "\u{9b}"]),
        "[0-9;:<=>?]{0,12}",
        "[ -/]{0,3}",
        prop_oneof![
            3 => char_in(0x40..0x7f).prop_map(String::from),
            1 => Just(String::new()),
            1 => nasty_char().prop_map(String::from),
        ],
    )
        .prop_map(|(intro, params, middle, last)| format!("{intro}{params}{middle}{last}"));
    let control_string = (
        prop::sample::select(vec![
            "\u{1b}]", "\u{1b}P", "\u{1b}X", "\u{1b}^", "\u{1b}_", "\u{9d}", "\u{90}", "\u{98}",
            "\u{9e}", "\u{9f}",
        ]),
        nasty_string(20),
        prop::sample::select(vec!["\u{7}", "\u{1b}\\", "\u{9c}", "", "\u{1b}"]),
    )
        .prop_map(|(intro, payload, end)| format!("{intro}{payload}{end}"));
    prop_oneof![
        3 => "[ -~]{0,10}",
        1 => any::<String>(),
        3 => csi,
        3 => control_string,
        1 => Just("\u{1b}".to_string()),
        1 => nasty_char().prop_map(|c| format!("\u{1b}{c}")),
        2 => prop::sample::select(BIDI.to_vec()).prop_map(String::from),
        2 => char_in(0..0x20).prop_map(String::from),
        1 => Just("\u{7f}".to_string()),
        2 => char_in(0x80..0xa0).prop_map(String::from),
    ]
}

/// Text built from terminal sequences, sometimes ending in a lone ESC.
fn terminal_text() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(terminal_piece(), 0..24),
        any::<bool>(),
    )
        .prop_map(|(pieces, esc)| {
            let mut text = pieces.concat();
            if esc {
                text.push('\u{1b}');
            }
            text
        })
}

/// Anything a job could write into a field: short nasty text, terminal sequences, or long.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => nasty_string(48),
        3 => terminal_text(),
        1 => (nasty_string(6), 1usize..3000).prop_map(|(unit, times)| unit.repeat(times)),
    ]
}

/// Whether `text` is inert once its line breaks are taken out (a refusal's snippet spans
/// three lines).
fn inert_but_for_newlines(text: &str) -> bool {
    is_inert(&text.replace('\n', ""))
}

// ---- 1. the jobs-file loader ----

const JOBS_PATH: &str = "/etc/mihari/jobs.yaml";

/// The real jobs files the mutations start from, read at test time.
static SEEDS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths: Vec<PathBuf> = fs::read_dir(root.join("tests/fixtures/valid"))
        .expect("the valid fixtures")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.push(root.join("jobs.example.yaml"));
    paths.sort();
    let seeds: Vec<String> = paths
        .iter()
        .map(|path| fs::read_to_string(path).expect("a seed jobs file"))
        .collect();
    assert!(seeds.len() >= 2, "no seed jobs files in {paths:?}");
    seeds
});

/// Longest a single load may take before it counts as a hang. Far above any real load (a
/// few milliseconds); only there so a hang fails the case with its input.
const HANG: Duration = Duration::from_secs(30);

/// `load_str` on a watched thread: a panic in it is re-raised here, a hang fails the case.
fn load_watched(text: &str) -> Result<Result<Config, ConfigError>, TestCaseError> {
    let (done, finished) = mpsc::channel();
    let owned = text.to_owned();
    let loader = thread::spawn(move || {
        let result = load_str(&owned, Path::new(JOBS_PATH));
        let _ = done.send(());
        result
    });
    match finished.recv_timeout(HANG) {
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "load_str did not finish within {HANG:?}"
        ))),
        _ => match loader.join() {
            Ok(result) => Ok(result),
            Err(panic) => std::panic::resume_unwind(panic),
        },
    }
}

/// Loads `text` and checks the refusal's shape when it is refused.
fn check_load(text: &str) -> Result<(), TestCaseError> {
    match load_watched(text)? {
        Ok(_) => Ok(()),
        Err(err) => check_refusal(text, &err),
    }
}

/// A refusal names the path and a line:column inside the file, and shows nothing that could
/// drive a terminal.
fn check_refusal(text: &str, err: &ConfigError) -> Result<(), TestCaseError> {
    let shown = err.to_string();
    let Some((line, column)) = err.position else {
        return Err(TestCaseError::fail(format!(
            "a refusal without line:column: {shown:?}"
        )));
    };
    prop_assert!(line >= 1 && column >= 1, "position {line}:{column}");
    // YAML ends a line at "\r\n", "\r" or "\n".
    let lines = text.replace("\r\n", "\n").split(['\r', '\n']).count() as u64;
    prop_assert!(
        line <= lines,
        "line {line} is past the end of a {lines}-line file: {shown:?}"
    );
    let prefix = format!("{JOBS_PATH}:{line}:{column}: ");
    prop_assert!(shown.starts_with(&prefix), "{shown:?}");
    prop_assert!(
        inert_but_for_newlines(&err.message),
        "control characters in {:?}",
        err.message
    );
    prop_assert!(is_inert(err.summary()), "{:?}", err.summary());
    Ok(())
}

/// One edit of a jobs file.
#[derive(Debug, Clone)]
enum Edit {
    DeleteRange(Index, usize),
    DuplicateLine(Index),
    DeleteLine(Index),
    SwapLines(Index, Index),
    Insert(Index, String),
    ReplaceChar(Index, String),
    Indent(Index, usize),
}

/// YAML tokens and values that take parsers down rare paths.
const TOKENS: [&str; 44] = [
    "&a ",
    "*a",
    "&a [*a, *a]",
    "<<: ",
    "<<: *a",
    "<<: [*a, *a]",
    "[",
    "]",
    "{",
    "}",
    "- ",
    ": ",
    "? ",
    "!!binary ",
    "!!str ",
    "!!int ",
    "!!map ",
    "!custom ",
    "!<tag:x> ",
    "\t",
    "---\n",
    "...\n",
    "|",
    ">-",
    "#",
    "'",
    "\"",
    "\\",
    "%YAML 1.2\n",
    "%TAG ! tag:x:\n",
    "\0",
    "\u{1b}[31m",
    "\u{202e}",
    "\u{feff}",
    "\r",
    "\n",
    "~",
    "null",
    "yes",
    "0x1F",
    "1e400",
    "-1",
    "99999999999999999999999",
    ".inf",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(TOKENS.to_vec()).prop_map(str::to_owned),
        2 => nasty_string(8),
        1 => (prop::sample::select(vec!["x", "é", "日", "🦀", "\\u0000"]), 1usize..40_000)
            .prop_map(|(unit, times)| unit.repeat(times)),
        1 => (1usize..200).prop_map(|depth| "[".repeat(depth)),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => (any::<Index>(), 1usize..200).prop_map(|(at, len)| Edit::DeleteRange(at, len)),
        2 => any::<Index>().prop_map(Edit::DuplicateLine),
        2 => any::<Index>().prop_map(Edit::DeleteLine),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        5 => (any::<Index>(), token()).prop_map(|(at, text)| Edit::Insert(at, text)),
        2 => (any::<Index>(), token()).prop_map(|(at, text)| Edit::ReplaceChar(at, text)),
        1 => (any::<Index>(), 0usize..9).prop_map(|(at, by)| Edit::Indent(at, by)),
    ]
}

/// The byte offset of the `at`-th character boundary of `text` (its end included).
fn boundary(text: &str, at: &Index) -> usize {
    let count = text.chars().count() + 1;
    let nth = at.index(count);
    text.char_indices()
        .map(|(offset, _)| offset)
        .chain(std::iter::once(text.len()))
        .nth(nth)
        .unwrap_or(text.len())
}

fn apply(seed: &str, edits: &[Edit]) -> String {
    let mut text = seed.to_owned();
    for edit in edits {
        match edit {
            Edit::DeleteRange(at, len) => {
                let start = boundary(&text, at);
                let end = text[start..]
                    .char_indices()
                    .map(|(offset, _)| start + offset)
                    .nth(*len)
                    .unwrap_or(text.len());
                text.replace_range(start..end, "");
            }
            Edit::Insert(at, token) => {
                let at = boundary(&text, at);
                text.insert_str(at, token);
            }
            Edit::ReplaceChar(at, token) => {
                let start = boundary(&text, at);
                let end = text[start..]
                    .chars()
                    .next()
                    .map_or(start, |c| start + c.len_utf8());
                text.replace_range(start..end, token);
            }
            Edit::DuplicateLine(at) | Edit::DeleteLine(at) | Edit::Indent(at, _) => {
                let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
                let i = at.index(lines.len());
                match edit {
                    Edit::DuplicateLine(_) => {
                        let line = lines[i].clone();
                        lines.insert(i, line);
                    }
                    Edit::DeleteLine(_) => {
                        lines.remove(i);
                    }
                    Edit::Indent(_, by) => lines[i].insert_str(0, &" ".repeat(*by)),
                    _ => {}
                }
                text = lines.join("\n");
            }
            Edit::SwapLines(a, b) => {
                let mut lines: Vec<&str> = text.split('\n').collect();
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                lines.swap(a, b);
                text = lines.join("\n");
            }
        }
    }
    text
}

/// A real jobs file, mutated.
fn mutated_jobs_file() -> impl Strategy<Value = String> {
    (any::<Index>(), prop::collection::vec(edit(), 1..6)).prop_map(|(seed, edits)| {
        let seed = &SEEDS[seed.index(SEEDS.len())];
        apply(seed, &edits)
    })
}

/// Collections nested far deeper than any parser's stack should follow.
fn deeply_nested() -> impl Strategy<Value = String> {
    let flow = (
        prop::sample::select(vec!["", "jobs: ", "jobs:\n  - ", "settings: ", "a: &a "]),
        prop::sample::select(vec![
            "[", "{", "{a: ", "[{", "{? ", "[- ", "!!seq [", "&x [",
        ]),
        1usize..12_000,
        prop::sample::select(vec!["", "x", "*x"]),
        any::<bool>(),
    )
        .prop_map(|(prefix, open, depth, middle, close)| {
            let mut text = format!("{prefix}{}{middle}", open.repeat(depth));
            if close {
                let closer: String = open
                    .chars()
                    .rev()
                    .filter_map(|c| match c {
                        '[' => Some(']'),
                        '{' => Some('}'),
                        _ => None,
                    })
                    .collect();
                text.push_str(&closer.repeat(depth));
            }
            text
        });
    let block_sequence =
        (1usize..8_000).prop_map(|depth| format!("jobs: {}x\n", "- ".repeat(depth)));
    let block_mapping = (1usize..1_200).prop_map(|depth| {
        let mut text = String::from("jobs:\n");
        for level in 0..depth {
            text.push_str(&" ".repeat(level + 1));
            text.push_str("k:\n");
        }
        text
    });
    prop_oneof![4 => flow, 1 => block_sequence, 1 => block_mapping]
}

proptest! {
    #![proptest_config(cases(3_000))]

    #[test]
    fn loader_answers_arbitrary_strings(text in any::<String>()) {
        check_load(&text)?;
    }

    #[test]
    fn loader_answers_hostile_strings(text in prop::collection::vec(nasty_char(), 0..250)
        .prop_map(String::from_iter))
    {
        check_load(&text)?;
    }

    #[test]
    fn loader_answers_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        check_load(&String::from_utf8_lossy(&bytes))?;
    }
}

proptest! {
    #![proptest_config(cases(1_500))]

    #[test]
    fn loader_answers_mutated_jobs_files(text in mutated_jobs_file()) {
        check_load(&text)?;
    }
}

proptest! {
    #![proptest_config(cases(300))]

    #[test]
    fn loader_answers_deep_nesting(text in deeply_nested()) {
        check_load(&text)?;
    }
}

// ---- 2. the alias bomb, in a child process ----

/// The bombs the child can load, by name.
fn bomb(name: &str) -> String {
    const LEVELS: usize = 9;
    const WIDTH: usize = 9;
    let aliases = |level: usize| vec![format!("*a{}", level - 1); WIDTH].join(", ");
    match name {
        // Nine levels of nine aliases: 9^9 (387 million) "lol"s fully expanded.
        "classic" => {
            let mut text = format!("a0: &a0 [{}]\n", ["\"lol\""; WIDTH].join(", "));
            for level in 1..LEVELS {
                text.push_str(&format!("a{level}: &a{level} [{}]\n", aliases(level)));
            }
            text.push_str(&format!("jobs: *a{}\n", LEVELS - 1));
            text
        }
        // The same through merge keys, where every expansion is a well-typed job.
        "merge" => {
            let mut text = String::from(
                "jobs:\n  - &a0 {id: a, log: /l, lock: /k, should_run_when: [resource_free]}\n",
            );
            for level in 1..LEVELS {
                text.push_str(&format!("  - &a{level} {{<<: [{}]}}\n", aliases(level)));
            }
            text
        }
        // The classic bomb as the first thing the jobs list holds.
        "classic-in-jobs" => {
            let mut text = format!("jobs:\n  - &a0 [{}]\n", ["\"lol\""; WIDTH].join(", "));
            for level in 1..LEVELS {
                text.push_str(&format!("  - &a{level} [{}]\n", aliases(level)));
            }
            text
        }
        // One wide job (a 100 KB name) aliased two thousand times: 200 MB if expanded.
        "wide" => {
            let mut text = format!(
                "jobs:\n  - &a {{id: a, log: /l, lock: /k, should_run_when: [resource_free], \
                 name: {}}}\n",
                "lol".repeat(33_000)
            );
            text.push_str(&"  - *a\n".repeat(2_000));
            text
        }
        other => panic!("no bomb named {other:?}"),
    }
}

/// What the child reported: whether the load was refused, how long it took, its peak RSS.
#[derive(Debug)]
struct BombReport {
    refused: bool,
    millis: u128,
    peak_kib: u64,
    message: String,
}

/// Runs `alias_bomb_probe` in a child (this test binary) on the bomb `name`.
fn bomb_in_child(name: &str) -> BombReport {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "alias_bomb_probe",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MIHARI_FUZZ_BOMB", name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the probe");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait for the probe").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the {name} bomb's child did not finish within 60 s");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let output = child.wait_with_output().expect("the probe's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let field = |key: &str| {
        stdout
            .lines()
            .find_map(|line| {
                line.split_once(key)
                    .map(|(_, value)| value.trim().to_owned())
            })
            .unwrap_or_else(|| {
                panic!(
                    "no {key} from the probe:\n{stdout}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })
    };
    BombReport {
        refused: field("BOMB_REFUSED=") == "true",
        millis: field("BOMB_MILLIS=").parse().expect("millis"),
        peak_kib: field("BOMB_PEAK_KIB=").parse().expect("kib"),
        message: field("BOMB_MESSAGE="),
    }
}

/// The CPU time this process has used (user and system), in milliseconds.
fn cpu_millis() -> u128 {
    // SAFETY: getrusage writes into the struct it is given, and RUSAGE_SELF always exists.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let millis = |t: libc::timeval| t.tv_sec as u128 * 1000 + t.tv_usec as u128 / 1000;
    millis(usage.ru_utime) + millis(usage.ru_stime)
}

/// The peak resident set of this process, from `/proc/self/status`.
fn peak_rss_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// The child side of [`bomb_in_child`]; does nothing in a normal test run.
#[test]
fn alias_bomb_probe() {
    let Ok(name) = std::env::var("MIHARI_FUZZ_BOMB") else {
        return;
    };
    let text = bomb(&name);
    // CPU time, not wall time: what an alias bomb costs is work, and on a loaded machine (a
    // whole suite on two cores) the wall clock measured the other processes' turns (16 s for
    // 0.4 s of work).
    let started = cpu_millis();
    let result = load_str(&text, Path::new(JOBS_PATH));
    let millis = cpu_millis().saturating_sub(started);
    let peak = peak_rss_kib();
    println!("BOMB_REFUSED={}", result.is_err());
    println!("BOMB_MILLIS={millis}");
    println!("BOMB_PEAK_KIB={peak}");
    let message = match &result {
        Ok(config) => format!("loaded {} jobs", config.jobs.len()),
        Err(err) => err.summary().to_owned(),
    };
    println!("BOMB_MESSAGE={}", inert(&message));
}

/// Peak RSS a bomb's child may reach: the test binary itself takes a few MiB.
const BOMB_PEAK_KIB: u64 = 64 * 1024;

#[test]
fn alias_bombs_are_refused_quickly_in_bounded_memory() {
    for name in ["classic", "classic-in-jobs", "merge", "wide"] {
        let report = bomb_in_child(name);
        eprintln!("bomb {name}: {report:?}");
        assert!(report.refused, "the {name} bomb was loaded: {report:?}");
        assert!(
            report.peak_kib < BOMB_PEAK_KIB,
            "the {name} bomb's child peaked at {} KiB: {report:?}",
            report.peak_kib
        );
        assert!(
            report.millis < 5_000,
            "the {name} bomb took {} ms of CPU to refuse: {report:?}",
            report.millis
        );
        assert!(is_inert(&report.message), "{report:?}");
    }
}

// ---- 3. locks and liveness ----

/// Any time chrono can hold, biased toward now-ish times where the rules' margins are.
fn any_time() -> impl Strategy<Value = DateTime<Utc>> {
    let (min, max) = (
        DateTime::<Utc>::MIN_UTC.timestamp_millis(),
        DateTime::<Utc>::MAX_UTC.timestamp_millis(),
    );
    prop_oneof![
        1 => (min..=max).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap_or_default()),
        3 => (-10_000i64..10_000).prop_map(|ms| base_time() + TimeDelta::milliseconds(ms)),
    ]
}

fn base_time() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
}

/// A JSON value for a lock's field: numbers of every kind, digits as text, and the rest.
fn json_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0u64..8).prop_map(Value::from),
        2 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        2 => "[0-9]{0,25}".prop_map(Value::from),
        2 => hostile_text().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => prop::collection::vec(hostile_text().prop_map(Value::from), 0..4).prop_map(Value::from),
    ]
}

/// Lock text: anything, bare PIDs (in and out of range, padded), and JSON locks.
fn lock_text() -> impl Strategy<Value = String> {
    let json = prop::collection::vec(
        (
            prop::sample::select(vec!["pid", "start_time", "cmdline", "run_id", "other"]),
            json_scalar(),
        ),
        0..6,
    )
    .prop_map(|fields| {
        let object: serde_json::Map<String, Value> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Value::Object(object).to_string()
    });
    prop_oneof![
        2 => hostile_text(),
        2 => ("[ \t\n]{0,2}", "[0-9]{1,25}", "[ \t\n]{0,2}").prop_map(|(a, d, b)| format!("{a}{d}{b}")),
        1 => prop::sample::select(vec!["0", "00", "4194304", "4194305", "4294967296", "-1", "+1"])
            .prop_map(str::to_owned),
        3 => json,
    ]
}

fn proc_stat() -> impl Strategy<Value = ProcStat> {
    (
        any::<u32>(),
        hostile_text(),
        any::<char>(),
        any::<u32>(),
        prop_oneof![2 => 0u64..8, 1 => any::<u64>()],
    )
        .prop_map(|(pid, comm, state, ppid, start_ticks)| ProcStat {
            pid,
            comm,
            state,
            ppid,
            start_ticks,
        })
}

fn proc_lookup() -> impl Strategy<Value = ProcLookup> {
    prop_oneof![
        3 => proc_stat().prop_map(ProcLookup::Running),
        1 => proc_stat().prop_map(ProcLookup::Zombie),
        1 => Just(ProcLookup::Gone),
        1 => hostile_text().prop_map(ProcLookup::Denied),
        1 => hostile_text().prop_map(ProcLookup::Fault),
    ]
}

/// What the tick-to-wall conversion answers: a time, or an error in any words.
fn wall_answer() -> impl Strategy<Value = Result<DateTime<Utc>, String>> {
    prop_oneof![3 => any_time().prop_map(Ok), 1 => hostile_text().prop_map(Err)]
}

/// The PID of a bare-PID lock (digits and surrounding whitespace), however large.
fn bare_pid(text: &str) -> Option<u128> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(trimmed.parse::<u128>().unwrap_or(u128::MAX))
}

proptest! {
    #![proptest_config(cases(10_000))]

    #[test]
    fn lock_parser_answers_anything(text in lock_text()) {
        if let Ok(lock) = parse_lock(&text) {
            prop_assert!((1..=PID_MAX_LIMIT).contains(&lock.pid), "{lock:?}");
            prop_assert!(lock.cmdline.as_deref().is_none_or(is_inert), "{lock:?}");
            prop_assert!(lock.run_id.as_deref().is_none_or(is_inert), "{lock:?}");
        }
        if let Some(pid) = bare_pid(&text) {
            let in_range = (1..=u128::from(PID_MAX_LIMIT)).contains(&pid);
            prop_assert_eq!(parse_lock(&text).is_ok(), in_range, "pid {}", pid);
        }
    }

}

proptest! {
    #![proptest_config(cases(5_000))]

    #[test]
    fn liveness_judge_answers_anything(
        text in lock_text(),
        modified in any_time(),
        process in proc_lookup(),
        wall in wall_answer(),
    ) {
        let looked_up = Cell::new(None);
        let answer = process.clone();
        let holder = judge_lock(
            &text,
            modified,
            Some("1c2d3e4f-0000-4000-8000-00000000aaaa"),
            |pid| {
                looked_up.set(Some(pid));
                answer
            },
            |_| wall.clone(),
        );
        prop_assert!(is_inert(&holder.why), "why {:?}", holder.why);
        prop_assert!(holder.cmdline.as_deref().is_none_or(is_inert), "{holder:?}");
        prop_assert!(holder.run_id.as_deref().is_none_or(is_inert), "{holder:?}");
        prop_assert_eq!(holder.modified, modified);
        if let Some(pid) = looked_up.get() {
            prop_assert!((1..=PID_MAX_LIMIT).contains(&pid), "looked up pid {}", pid);
        }
        if let Some(pid) = bare_pid(&text)
            && (pid == 0 || pid > u128::from(PID_MAX_LIMIT))
        {
            prop_assert_eq!(holder.liveness, mihari::core::Liveness::Unknown);
            prop_assert_eq!(holder.pid, None);
            prop_assert_eq!(looked_up.get(), None);
        }
        if holder.liveness == mihari::core::Liveness::Alive {
            prop_assert!(matches!(process, ProcLookup::Running(_)), "alive from {process:?}");
            prop_assert!(
                holder.pid.is_some_and(|pid| (1..=PID_MAX_LIMIT).contains(&pid)),
                "alive with pid {:?}",
                holder.pid
            );
        }
        if holder.pid.is_some() && matches!(process, ProcLookup::Denied(_) | ProcLookup::Fault(_)) {
            prop_assert_eq!(holder.liveness, mihari::core::Liveness::Unknown);
        }
    }
}

// ---- 4. run manifests ----

/// Time text in every shape `updated_at` is read in, with fields out of range.
fn time_text() -> impl Strategy<Value = String> {
    let iso = (
        prop_oneof![3 => 1900i64..2100, 1 => -300_000i64..300_000],
        0u32..14,
        0u32..33,
        0u32..26,
        0u32..62,
        0u32..62,
        prop::sample::select(vec!["", ".5", ".123456", ".1234567891234", "."]),
        prop::sample::select(vec![
            "", "Z", "+09:00", "-23:59", "+24:00", "+0530", "+99:99", "z", " +01:00",
        ]),
        prop::sample::select(vec!["T", " ", "t"]),
        any::<bool>(),
    )
        .prop_map(|(y, mo, d, h, mi, s, frac, zone, sep, with_seconds)| {
            if with_seconds {
                format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{frac}{zone}")
            } else {
                format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}{zone}")
            }
        });
    prop_oneof![
        4 => iso,
        2 => ("[0-9]{1,25}", prop::option::of("[0-9]{0,14}"))
            .prop_map(|(whole, frac)| match frac {
                Some(frac) => format!("{whole}.{frac}"),
                None => whole,
            }),
        1 => hostile_text(),
    ]
}

/// An arbitrary JSON tree.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        hostile_text().prop_map(Value::from),
        time_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::vec((hostile_text(), inner), 0..5)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// A manifest-like object: the manifest's keys with values of every type, plus others.
fn manifest_json() -> impl Strategy<Value = String> {
    let phases = prop_oneof![
        3 => prop::collection::vec(
            (hostile_text(), prop_oneof![3 => Just(Value::Bool(true)), 1 => json_value()]),
            0..8,
        )
        .prop_map(|fields| {
            // Written out by hand so repeated phase names stay repeated.
            let body: Vec<String> = fields
                .iter()
                .map(|(phase, result)| format!("{}: {result}", Value::from(phase.as_str())))
                .collect();
            format!("{{{}}}", body.join(", "))
        }),
        1 => json_value().prop_map(|v| v.to_string()),
    ];
    let label = prop_oneof![
        3 => hostile_text().prop_map(|t| Value::from(t).to_string()),
        2 => json_value().prop_map(|v| v.to_string()),
        1 => prop::sample::select(vec![
            "1e400", "-1e400", "123456789012345678901234567890", "-0", "1.5e-400", "18446744073709551616",
        ])
        .prop_map(str::to_owned),
    ];
    let updated = prop_oneof![
        4 => time_text().prop_map(|t| Value::from(t).to_string()),
        1 => json_value().prop_map(|v| v.to_string()),
    ];
    (
        prop::option::of(label.clone()),
        prop::option::of(label),
        prop::option::of(phases),
        prop::option::of(updated),
        prop::collection::vec((hostile_text(), json_value()), 0..3),
        any::<bool>(),
    )
        .prop_map(|(run_id, phase, phases, updated, others, whitespace)| {
            let mut fields: Vec<String> = Vec::new();
            for (key, value) in [
                ("run_id", run_id),
                ("current_phase", phase),
                ("phase_results", phases),
                ("updated_at", updated),
            ] {
                if let Some(value) = value {
                    fields.push(format!("\"{key}\": {value}"));
                }
            }
            for (key, value) in others {
                fields.push(format!("{}: {value}", Value::from(key)));
            }
            let text = format!("{{{}}}", fields.join(", "));
            if whitespace {
                format!(" \n\t{text}\n")
            } else {
                text
            }
        })
}

/// Manifests nested past serde_json's recursion limit, in each field.
fn deep_manifest() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "run_id",
            "current_phase",
            "phase_results",
            "updated_at",
            "x",
        ]),
        prop::sample::select(vec!["[", "{\"a\":", "[{\"b\":"]),
        1usize..5_000,
        any::<bool>(),
    )
        .prop_map(|(key, open, depth, close)| {
            let inner = if key == "phase_results" {
                format!("{{\"p\": {}1", open.repeat(depth))
            } else {
                format!("{}1", open.repeat(depth))
            };
            let mut text = format!("{{\"{key}\": {inner}");
            if close {
                let closer: String = open
                    .chars()
                    .rev()
                    .filter_map(|c| match c {
                        '[' => Some(']'),
                        '{' => Some('}'),
                        _ => None,
                    })
                    .collect();
                text.push_str(&closer.repeat(depth));
                if key == "phase_results" {
                    text.push('}');
                }
                text.push('}');
            }
            text
        })
}

fn check_manifest(text: &str, mtime: DateTime<Utc>, offset: i32) -> Result<(), TestCaseError> {
    let zone = FixedOffset::east_opt(offset).unwrap_or(FixedOffset::east_opt(0).expect("UTC"));
    for answer in [
        parse_manifest(text, mtime),
        parse_manifest_in(text, mtime, &zone),
    ] {
        match answer {
            Ok(reading) => {
                prop_assert!(
                    reading.run_id.as_deref().is_none_or(is_inert),
                    "{reading:?}"
                );
                prop_assert!(
                    reading.current_phase.as_deref().is_none_or(is_inert),
                    "{reading:?}"
                );
                prop_assert!(
                    reading.completed_phases.iter().all(|p| is_inert(p)),
                    "{reading:?}"
                );
            }
            Err(error) => prop_assert!(is_inert(&error), "error {error:?}"),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(5_000))]

    #[test]
    fn manifest_parser_answers_arbitrary_text(
        text in prop_oneof![hostile_text(), any::<String>()],
        mtime in any_time(),
        offset in -86_399i32..86_400,
    ) {
        check_manifest(&text, mtime, offset)?;
    }
}

proptest! {
    #![proptest_config(cases(1_500))]

    #[test]
    fn manifest_parser_answers_manifest_like_json(
        text in manifest_json(),
        mtime in any_time(),
        offset in -86_399i32..86_400,
    ) {
        check_manifest(&text, mtime, offset)?;
    }
}

proptest! {
    #![proptest_config(cases(500))]

    #[test]
    fn manifest_parser_answers_deep_nesting(text in deep_manifest(), mtime in any_time()) {
        check_manifest(&text, mtime, 0)?;
    }
}

/// What `phase_results` means, the slow and obvious way: phases in the order they first
/// appear, each with its last value, completed only when that value is `true`.
fn completed_the_slow_way(phases: &[(String, Value)]) -> Vec<String> {
    let mut firsts: Vec<&str> = Vec::new();
    for (phase, _) in phases {
        if !firsts.contains(&phase.as_str()) {
            firsts.push(phase);
        }
    }
    firsts
        .into_iter()
        .filter(|phase| {
            phases
                .iter()
                .rev()
                .find(|(name, _)| name == phase)
                .is_some_and(|(_, result)| *result == Value::Bool(true))
        })
        .map(inert)
        .collect()
}

proptest! {
    #![proptest_config(cases(2_000))]

    #[test]
    fn manifest_phases_keep_first_place_and_last_value(phases in prop::collection::vec(
        (
            prop_oneof![3 => "[a-d]", 1 => hostile_text()],
            prop_oneof![2 => any::<bool>().prop_map(Value::from), 1 => json_scalar()],
        ),
        0..12,
    )) {
        let body: Vec<String> = phases
            .iter()
            .map(|(phase, result)| format!("{}: {result}", Value::from(phase.as_str())))
            .collect();
        let text = format!("{{\"phase_results\": {{{}}}}}", body.join(", "));
        let reading = parse_manifest(&text, base_time()).map_err(TestCaseError::fail)?;
        prop_assert_eq!(reading.completed_phases, completed_the_slow_way(&phases));
    }
}

/// Regression: `phase_results` looked for each phase among those already read, so a
/// manifest of many distinct phases (well within the 4 MiB read limit) took time quadratic in
/// their number: about 50 s in a release build for 4 MiB, on every read of the file. This
/// one, 150,000 phases, took minutes in a debug build; it finishes in about a second now.
/// The test finishing is the evidence; no time is asserted.
#[test]
fn a_manifest_of_many_distinct_phases_is_read_in_linear_time() {
    let phases = 150_000;
    let mut text = String::from("{\"run_id\": \"r\", \"phase_results\": {");
    for i in 0..phases {
        text.push_str(&format!("\"phase-{i}\": {}, ", i % 2 == 0));
    }
    text.push_str("\"phase-1\": true}}");
    let reading = parse_manifest(&text, base_time()).expect("a valid manifest");
    assert_eq!(reading.completed_phases.len(), phases / 2 + 1);
    assert_eq!(
        reading.completed_phases[..3],
        ["phase-0", "phase-1", "phase-2"]
    );
}

// ---- 5. /proc/<pid>/stat ----

/// This process's own stat line, the shape every mutation starts from.
static SELF_STAT: LazyLock<String> =
    LazyLock::new(|| fs::read_to_string("/proc/self/stat").expect("/proc/self/stat"));

/// A stat line with `comm` in place of the real command name.
fn stat_with_comm(comm: &str) -> String {
    let line = SELF_STAT.as_str();
    let open = line.find('(').expect("'(' in the stat line");
    let close = line.rfind(')').expect("')' in the stat line");
    format!("{}({comm}){}", &line[..open], &line[close + 1..])
}

proptest! {
    #![proptest_config(cases(5_000))]

    #[test]
    fn stat_parser_answers_arbitrary_text(text in prop_oneof![hostile_text(), any::<String>()]) {
        if let Ok(stat) = parse_stat(&text) {
            prop_assert!(is_inert(&stat.comm), "{stat:?}");
        }
    }

    #[test]
    fn stat_parser_reads_any_command_name(comm in prop_oneof![
        hostile_text(),
        "[a-z) (]{0,20}",
        Just(") R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 (".to_string()),
    ]) {
        let real = parse_stat(&SELF_STAT).expect("this process's stat line parses");
        let stat = parse_stat(&stat_with_comm(&comm)).map_err(TestCaseError::fail)?;
        prop_assert_eq!(stat.pid, real.pid);
        prop_assert_eq!(stat.start_ticks, real.start_ticks);
        prop_assert_eq!(stat.ppid, real.ppid);
        prop_assert_eq!(stat.comm, inert(&comm));
    }

}

proptest! {
    #![proptest_config(cases(3_000))]

    #[test]
    fn stat_parser_answers_mutated_stat_lines(
        comm in hostile_text(),
        edits in prop::collection::vec(edit(), 0..4),
    ) {
        let text = apply(&stat_with_comm(&comm), &edits);
        if let Ok(stat) = parse_stat(&text) {
            prop_assert!(is_inert(&stat.comm), "{stat:?}");
        }
    }
}

// ---- 6. heartbeats and approvals ----

/// The jobs of the fuzzed store's jobs file; other job ids are arbitrary.
const STORE_JOBS: [&str; 2] = ["fz-a", "fz-b"];

/// A jobs file with [`STORE_JOBS`], its state in `state_dir`.
fn store_jobs_file(dir: &Path, state_dir: &Path) -> String {
    let mut text = format!("settings:\n  state_dir: {}\njobs:\n", state_dir.display());
    for id in STORE_JOBS {
        text.push_str(&format!(
            "  - id: {id}\n    lock: {dir}/{id}.lock\n    log: {dir}/{id}.log\n    \
             should_run_when: [resource_free]\n",
            dir = dir.display()
        ));
    }
    text
}

/// What `mihari approval request --key` accepts (mirrors the CLI's own check): approvals of
/// the jobs in the file come through it.
fn cli_accepts_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 256
        && key.chars().all(|c| !c.is_whitespace() && !c.is_control())
        && is_inert(key)
}

fn job_id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(STORE_JOBS.to_vec()).prop_map(str::to_owned),
        1 => hostile_text(),
    ]
}

fn approval_key() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "[0-9a-f]{64}",
        2 => "[!-~]{1,40}",
        1 => "[a-z]{1,3}",
        2 => hostile_text(),
    ]
}

/// One call into the store.
#[derive(Debug, Clone)]
enum StoreOp {
    Heartbeat {
        job: String,
        at_ms: i64,
        done: Option<u64>,
        total: Option<u64>,
        position: Option<String>,
        note: Option<String>,
    },
    LastHeartbeat(String),
    Request {
        job: String,
        step: String,
        key: String,
        summary: String,
    },
    Approvals(bool),
    Decide {
        /// A key asked before (by index), or a new one.
        key: Result<Index, String>,
        approve: bool,
        reason: Option<String>,
    },
}

/// A count a heartbeat can carry. The store keeps counts as SQLite integers (i64); the CLI
/// refuses larger ones (see `heartbeat_counts_past_i64_are_refused`).
fn count() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(prop_oneof![
        3 => 0u64..100_000,
        1 => 0..=i64::MAX as u64,
        1 => Just(i64::MAX as u64),
    ])
}

fn store_op() -> impl Strategy<Value = StoreOp> {
    let (min, max) = (
        DateTime::<Utc>::MIN_UTC.timestamp_millis(),
        DateTime::<Utc>::MAX_UTC.timestamp_millis(),
    );
    let now = Utc::now().timestamp_millis();
    let at_ms = prop_oneof![3 => (now - 600_000)..(now + 1_000), 1 => min..=max];
    prop_oneof![
        4 => (
            job_id(),
            at_ms,
            count(),
            count(),
            prop::option::of(hostile_text()),
            prop::option::of(hostile_text()),
        )
            .prop_map(|(job, at_ms, done, total, position, note)| StoreOp::Heartbeat {
                job,
                at_ms,
                done,
                total,
                position,
                note,
            }),
        1 => job_id().prop_map(StoreOp::LastHeartbeat),
        4 => (job_id(), hostile_text(), approval_key(), hostile_text()).prop_map(
            |(job, step, key, summary)| StoreOp::Request {
                job,
                step,
                key,
                summary,
            }
        ),
        1 => any::<bool>().prop_map(StoreOp::Approvals),
        3 => (
            prop_oneof![3 => any::<Index>().prop_map(Ok), 1 => approval_key().prop_map(Err)],
            any::<bool>(),
            prop::option::of(hostile_text()),
        )
            .prop_map(|(key, approve, reason)| StoreOp::Decide {
                key,
                approve,
                reason,
            }),
    ]
}

/// The fuzzed store, the engine reading it, and what the harness knows was written.
struct StoreHarness {
    store: Store,
    engine: Engine,
    /// The newest heartbeat time written per job, to know which beat must read back.
    newest_beat: HashMap<String, i64>,
    keys: Vec<String>,
    calls: u64,
}

impl StoreHarness {
    fn run(&mut self, op: StoreOp) -> Result<(), TestCaseError> {
        self.calls += 1;
        match op {
            StoreOp::Heartbeat {
                job,
                at_ms,
                done,
                total,
                position,
                note,
            } => {
                let at = DateTime::from_timestamp_millis(at_ms).unwrap_or_default();
                let beat = Heartbeat {
                    job: job.clone(),
                    at,
                    done,
                    total,
                    position,
                    note,
                };
                self.store.heartbeat(&beat).map_err(fail)?;
                let newest = self.newest_beat.entry(job.clone()).or_insert(at_ms);
                if at_ms >= *newest {
                    *newest = at_ms;
                    let back = self.store.last_heartbeat(&job).map_err(fail)?;
                    prop_assert_eq!(back.as_ref(), Some(&beat), "the heartbeat read back");
                }
            }
            StoreOp::LastHeartbeat(job) => {
                let beat = self.store.last_heartbeat(&job).map_err(fail)?;
                prop_assert_eq!(beat.is_some(), self.newest_beat.contains_key(&job));
            }
            StoreOp::Request {
                job,
                step,
                key,
                summary,
            } => {
                // The jobs in the file ask through the CLI, which refuses other keys.
                let key = if STORE_JOBS.contains(&job.as_str()) && !cli_accepts_key(&key) {
                    mihari::store::hex(key.as_bytes())
                        .chars()
                        .take(64)
                        .collect()
                } else {
                    key
                };
                let asked = self
                    .store
                    .request_approval(&job, &step, &key, &summary)
                    .map_err(fail)?;
                prop_assert_eq!(&asked.key, &key);
                if !self.keys.contains(&key) {
                    prop_assert_eq!(&asked.job, &job);
                    prop_assert_eq!(&asked.step, &step);
                    prop_assert_eq!(&asked.summary, &summary);
                    self.keys.push(key);
                }
            }
            StoreOp::Approvals(pending_only) => {
                let listed = self.store.approvals(pending_only).map_err(fail)?;
                if !pending_only {
                    prop_assert_eq!(listed.len(), self.keys.len());
                }
            }
            StoreOp::Decide {
                key,
                approve,
                reason,
            } => {
                let key = match key {
                    Ok(index) if !self.keys.is_empty() => {
                        self.keys[index.index(self.keys.len())].clone()
                    }
                    Ok(_) => "no-such-key".to_owned(),
                    Err(key) => key,
                };
                let known = self.keys.contains(&key);
                match self.store.decide_approval(&key, approve, reason.as_deref()) {
                    Ok(Ok(decided)) => {
                        prop_assert!(known);
                        prop_assert_eq!(decided.reason.as_deref(), reason.as_deref());
                    }
                    Ok(Err(standing)) => {
                        prop_assert!(known);
                        prop_assert!(standing.state != mihari::store::ApprovalState::Pending);
                    }
                    Err(error) => prop_assert!(!known, "deciding a known key failed: {error}"),
                }
            }
        }
        // A refresh reads every pending approval once per job, so it costs more as the
        // store fills: about a hundred refreshes per run, however long, see every kind of
        // record on screen without making a long campaign quadratic.
        if self.calls.is_multiple_of(50 * u64::from(multiplier())) {
            check_snapshot(&self.engine.refresh(None, Utc::now()))?;
        }
        Ok(())
    }
}

fn fail(error: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

/// Every string the engine's snapshot shows is inert.
fn check_snapshot(snapshot: &Snapshot) -> Result<(), TestCaseError> {
    let mut shown: Vec<(&str, &str)> = Vec::new();
    for notice in &snapshot.notices {
        shown.push(("notice", notice));
    }
    for rule in &snapshot.list.rules {
        shown.push(("rule", rule));
    }
    if let Some(held) = &snapshot.list.dispatch_held {
        shown.push(("dispatch held", held));
    }
    for row in snapshot.list.rows() {
        for reason in &row.reasons {
            shown.push(("reason", reason));
        }
        if let Some(held) = &row.held {
            shown.push(("held", held));
        }
        for approval in &row.pending_approvals {
            shown.push(("pending key", &approval.key));
            shown.push(("pending step", &approval.step));
            shown.push(("pending summary", &approval.summary));
        }
    }
    for (_, evidence) in &snapshot.evidence {
        push_evidence(evidence, &mut shown);
    }
    for (what, text) in shown {
        prop_assert!(is_inert(text), "{} is not inert: {:?}", what, text);
    }
    Ok(())
}

fn push_evidence<'a>(evidence: &'a Evidence, shown: &mut Vec<(&'static str, &'a str)>) {
    match evidence.heartbeat.as_deref() {
        Some(Reading::Found(beat)) => {
            if let Some(position) = &beat.position {
                shown.push(("heartbeat position", position));
            }
            if let Some(note) = &beat.note {
                shown.push(("heartbeat note", note));
            }
        }
        Some(Reading::Fault(error)) => shown.push(("heartbeat fault", error)),
        _ => {}
    }
    for approval in &evidence.pending_approvals {
        shown.push(("evidence key", &approval.key));
        shown.push(("evidence step", &approval.step));
        shown.push(("evidence summary", &approval.summary));
    }
    for rule in &evidence.history.broken_rules {
        shown.push(("broken rule", rule));
    }
}

#[test]
fn store_answers_hostile_heartbeats_and_approvals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state_dir = dir.path().join("state");
    let text = store_jobs_file(dir.path(), &state_dir);
    let config = load_str(&text, &dir.path().join("jobs.yaml")).expect("the store's jobs file");
    let harness = RefCell::new(StoreHarness {
        store: Store::open(&state_dir, Actor::Job).expect("open the store"),
        engine: Engine::new(config),
        newest_beat: HashMap::new(),
        keys: Vec::new(),
        calls: 0,
    });
    fuzz(cases(800), prop::collection::vec(store_op(), 1..6), |ops| {
        let mut harness = harness.borrow_mut();
        for op in ops {
            harness.run(op)?;
        }
        Ok(())
    });
    let mut harness = harness.into_inner();
    let snapshot = harness.engine.refresh(None, Utc::now());
    if let Err(failure) = check_snapshot(&snapshot) {
        panic!("{failure}");
    }
    assert_eq!(
        harness.store.integrity_check().expect("integrity_check"),
        "ok"
    );
    let pending = snapshot
        .list
        .rows()
        .map(|row| row.pending_approvals.len())
        .sum::<usize>();
    eprintln!(
        "store: {} calls, {} approvals ({pending} pending for the file's jobs)",
        harness.calls,
        harness.keys.len()
    );
}

/// A value for a CLI flag: anything a shell can pass (no NUL), sometimes long.
fn cli_text() -> impl Strategy<Value = String> {
    hostile_text().prop_map(|text| text.replace('\0', "").chars().take(4_000).collect())
}

/// One `mihari heartbeat` or `mihari approval request` command line, after `--config FILE`.
fn cli_args() -> impl Strategy<Value = Vec<String>> {
    let job = prop_oneof![
        3 => prop::sample::select(STORE_JOBS.to_vec()).prop_map(str::to_owned),
        1 => cli_text(),
    ];
    let heartbeat = (
        job.clone(),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(cli_text()),
        prop::option::of(cli_text()),
    )
        .prop_map(|(job, done, total, position, note)| {
            let mut args = vec!["heartbeat".to_owned()];
            if let Some(done) = done {
                args.push(format!("--done={done}"));
            }
            if let Some(total) = total {
                args.push(format!("--total={total}"));
            }
            if let Some(position) = position {
                args.push(format!("--position={position}"));
            }
            if let Some(note) = note {
                args.push(format!("--note={note}"));
            }
            args.extend(["--".to_owned(), job]);
            args
        });
    let key = prop_oneof![
        3 => approval_key().prop_map(|key| format!("--key={}", key.replace('\0', ""))),
        // clap itself refuses an empty path (exit 2, a usage error).
        1 => cli_text().prop_map(|path| format!("--key-from=./{path}")),
    ];
    let request = (job, cli_text(), key, cli_text()).prop_map(|(job, step, key, summary)| {
        vec![
            "approval".to_owned(),
            "request".to_owned(),
            format!("--step={step}"),
            key,
            format!("--summary={summary}"),
            "--".to_owned(),
            job,
        ]
    });
    prop_oneof![heartbeat, request]
}

#[test]
fn cli_answers_hostile_heartbeats_and_approval_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state_dir = dir.path().join("state");
    let jobs_file = dir.path().join("jobs.yaml");
    fs::write(&jobs_file, store_jobs_file(dir.path(), &state_dir)).expect("write the jobs file");
    fs::set_permissions(&jobs_file, fs::Permissions::from_mode(0o600)).expect("chmod");
    let seen: RefCell<HashMap<i32, u32>> = RefCell::new(HashMap::new());
    fuzz(cases(200), cli_args(), |args| {
        let output = Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(&jobs_file)
            .args(&args)
            .env_remove("MIHARI_CONFIG")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .map_err(fail)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        prop_assert!(!stderr.contains("panicked"), "a panic: {stderr}");
        prop_assert!(
            matches!(code, Some(0 | 3 | 10 | 11)),
            "exit {:?}; stderr: {}",
            code,
            stderr
        );
        *seen.borrow_mut().entry(code.unwrap_or(-1)).or_default() += 1;
        Ok(())
    });
    let store = Store::open(&state_dir, Actor::Cli).expect("open the store");
    assert_eq!(store.integrity_check().expect("integrity_check"), "ok");
    for approval in store.approvals(false).expect("approvals") {
        for text in [
            &approval.key,
            &approval.step,
            &approval.summary,
            &approval.job,
        ] {
            assert!(is_inert(text), "stored from the CLI: {approval:?}");
        }
    }
    eprintln!("cli exit codes: {:?}", seen.borrow());
}

/// Regression: `mihari heartbeat --done` and `--total` took any u64, and the store keeps
/// counts as SQLite integers, so a count past i64::MAX was stored negative and read back as
/// 0 (found by the store fuzz above). The CLI refuses it now, with exit 3, and records
/// nothing; i64::MAX itself still reads back exactly.
#[test]
fn heartbeat_counts_past_i64_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state_dir = dir.path().join("state");
    let jobs_file = dir.path().join("jobs.yaml");
    fs::write(&jobs_file, store_jobs_file(dir.path(), &state_dir)).expect("write the jobs file");
    fs::set_permissions(&jobs_file, fs::Permissions::from_mode(0o600)).expect("chmod");
    let heartbeat = |flag: &str, count: u64| {
        Command::new(env!("CARGO_BIN_EXE_mihari"))
            .arg("--config")
            .arg(&jobs_file)
            .args(["heartbeat", "fz-a", flag, &count.to_string()])
            .env_remove("MIHARI_CONFIG")
            .output()
            .expect("run mihari heartbeat")
    };
    for flag in ["--done", "--total"] {
        let refused = heartbeat(flag, i64::MAX as u64 + 1);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("too large"),
            "{stderr}"
        );
    }
    let store = Store::open(&state_dir, Actor::Cli).expect("open the store");
    assert_eq!(store.last_heartbeat("fz-a").expect("read"), None);

    let largest = heartbeat("--done", i64::MAX as u64);
    assert_eq!(largest.status.code(), Some(0), "{largest:?}");
    let beat = store
        .last_heartbeat("fz-a")
        .expect("read")
        .expect("a heartbeat");
    assert_eq!(beat.done, Some(i64::MAX as u64));
}

// ---- 7. the sanitizer ----

/// The properties `inert` promises, for any input.
fn check_inert(raw: &str) -> Result<(), TestCaseError> {
    let out = inert(raw);
    for c in out.chars() {
        let code = c as u32;
        prop_assert!(code >= 0x20, "C0 {:?} survived in {:?}", c, out);
        prop_assert!(c != '\u{7f}', "DEL survived in {:?}", out);
        prop_assert!(
            !(0x80..0xa0).contains(&code),
            "C1 {:?} survived in {:?}",
            c,
            out
        );
        prop_assert!(!BIDI.contains(&c), "bidi {:?} survived in {:?}", c, out);
    }
    prop_assert!(is_inert(&out));
    prop_assert_eq!(inert(&out), out.clone(), "not idempotent");
    prop_assert!(out.chars().count() <= raw.chars().count());
    // Each character becomes at most one character: itself, or a 3-byte picture or '�'.
    let bound: usize = raw.chars().map(|c| c.len_utf8().max(3)).sum();
    prop_assert!(out.len() <= bound, "{} bytes from {:?}", out.len(), raw);
    prop_assert!(out.len() <= 3 * raw.len());
    if is_inert(raw) {
        prop_assert_eq!(&out, raw, "inert text was changed");
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(10_000))]

    #[test]
    fn inert_holds_for_arbitrary_unicode(raw in any::<String>()) {
        check_inert(&raw)?;
    }

}

proptest! {
    #![proptest_config(cases(6_000))]

    #[test]
    fn inert_holds_for_terminal_sequences(raw in terminal_text()) {
        check_inert(&raw)?;
    }
}

proptest! {
    #![proptest_config(cases(5_000))]

    #[test]
    fn inert_leaves_printable_ascii_alone(raw in "[ -~]{0,200}") {
        prop_assert_eq!(inert(&raw), raw);
    }
}

/// Combining marks (acute, dot below, enclosing keycap), a zero-width joiner and a variation
/// selector: characters drawn in the cell before them.
const MARKS: [char; 5] = ['\u{301}', '\u{323}', '\u{20e3}', '\u{200d}', '\u{fe0f}'];

proptest! {
    #![proptest_config(cases(3_000))]

    /// A pile of marks on a character is cut to `MAX_MARKS`, and nothing else changes: the
    /// characters, their order, and the first marks of each pile.
    #[test]
    fn inert_keeps_at_most_two_marks_per_character(
        cells in prop::collection::vec(
            (
                prop::option::of(prop::sample::select(vec!['a', 'é', '日', ' ', '🦀'])),
                prop::collection::vec(prop::sample::select(MARKS.to_vec()), 0..12),
            ),
            0..40,
        ),
    ) {
        let mut raw = String::new();
        let mut want = String::new();
        for (base, marks) in &cells {
            if let Some(base) = base {
                raw.push(*base);
                want.push(*base);
            } else if !raw.is_empty() {
                // No base: the marks join the previous pile, and so does its cut.
                continue;
            }
            raw.extend(marks.iter());
            want.extend(marks.iter().take(mihari::core::text::MAX_MARKS));
        }
        prop_assert_eq!(inert(&raw), want.clone());
        prop_assert!(is_inert(&want));
        check_inert(&raw)?;
    }
}

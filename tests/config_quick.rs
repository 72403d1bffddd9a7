//! The quick reader of plain YAML (the loader's fast path) held to serde-saphyr: every file
//! either reads to the very same jobs, or is refused with the very same words and position —
//! the fixtures, the example, a farm as a script writes it, and a matrix of awkward values
//! put in every kind of place a jobs file has. A farm of plain YAML must be read by the quick
//! reader (a fallback nobody sees would bring back the 0.3 s it saves).

use std::fs;
use std::path::{Path, PathBuf};

use mihari::config::{load_str, load_str_by_serde_saphyr, quick_reader_reads};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind);
    let mut files: Vec<PathBuf> = fs::read_dir(folder)
        .expect("fixtures")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The two readers agree on `text`: the same jobs, or the same refusal.
fn agree(text: &str, path: &Path) {
    let quick = load_str(text, path);
    let full = load_str_by_serde_saphyr(text, path);
    match (&quick, &full) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the same jobs from:\n{text}"),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "the same refusal of:\n{text}")
        }
        _ => panic!(
            "the readers disagree on:\n{text}\nquick: {:?}\nserde-saphyr: {:?}",
            quick.map(|c| c.jobs.len()),
            full.map(|c| c.jobs.len())
        ),
    }
}

#[test]
fn every_fixture_and_the_example_read_the_same_as_serde_saphyr_reads_them() {
    let mut files = fixtures("invalid");
    files.extend(fixtures("valid"));
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs.example.yaml"));
    assert!(files.len() > 70, "{} files", files.len());
    for file in files {
        let text = fs::read_to_string(&file).expect("read");
        agree(&text, &file);
    }
}

/// A farm as a script writes it (the bench's 10,000-job file, in small).
fn farm(jobs: usize) -> String {
    let mut yaml = String::from("settings:\n  state_dir: ./state\njobs:\n");
    for n in 0..jobs {
        yaml.push_str(&format!(
            "  - id: job{n:04}\n    owner: team{}\n    lock: jobs/job{n:04}.lock\n    \
             log: jobs/job{n:04}.log\n    progress_file: jobs/job{n:04}.progress\n    \
             stall_sec: 86400\n    expected_total: 100000000\n    \
             should_run_when: [not_complete]\n",
            n % 7
        ));
    }
    yaml
}

#[test]
fn the_example_is_read_by_the_quick_reader() {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs.example.yaml"))
        .expect("the example");
    assert!(quick_reader_reads(&text), "jobs.example.yaml is plain YAML");
}

#[test]
fn a_farm_of_plain_yaml_is_read_by_the_quick_reader_to_the_same_jobs() {
    let text = farm(300);
    let path = Path::new("/srv/farm/jobs.yaml");
    assert!(quick_reader_reads(&text), "the farm is plain YAML");
    agree(&text, path);
    let config = load_str(&text, path).expect("loads");
    assert_eq!(config.jobs.len(), 300);
    assert_eq!(
        config.jobs[7].lock.as_deref(),
        Some(Path::new("/srv/farm/jobs/job0007.lock"))
    );
    // Jobs declared by their command line, as the process-scan bench writes them.
    let mut text = String::from("settings:\n  state_dir: state\njobs:\n");
    for i in 0..50 {
        text.push_str(&format!(
            "  - id: proc{i:04}\n    log: shared.log\n    process: {{cmdline: '^sleep \
             360000\\.{i:06}$'}}\n    stall_sec: 86400\n    should_run_when: [resource_free]\n"
        ));
    }
    assert!(quick_reader_reads(&text), "the process farm is plain YAML");
    agree(&text, path);
}

/// One job with every kind of place a value can be; `{}` is where the awkward value goes.
const PLACES: [&str; 18] = [
    "    name: {}\n",
    "    owner: {}\n",
    "    log: {}\n",
    "    stall_sec: {}\n",
    "    expected_total: {}\n",
    "    should_run_when: [{}]\n",
    "    process: {cmdline: {}}\n",
    "    process:\n      cmdline: x\n      user: {}\n",
    "    auto_restart: {}\n    auto_restart_reason: r\n    restart:\n      command: [a]\n",
    "    io_progress: {}\n",
    "    restart:\n      command: [{}, b]\n",
    "    restart:\n      command: [a]\n      env: {X: {}}\n",
    "    restart:\n      command:\n        - {}\n",
    "    markers:\n      - {path: m, stale_after_sec: {}}\n",
    "    name: >-\n      {}\n",
    "    auto_restart_blocked_reason: |\n      {}\n      and a second line\n",
    "    should_run_when: [overdue]\n    schedule: {every: {}, grace: 5m}\n",
    "    should_run_when: [overdue]\n    schedule:\n      cron: '0 3 * * *'\n      grace: {}\n",
];

const VALUES: [&str; 50] = [
    "45m",
    "30s",
    "1d",
    "0m",
    "1e3m",
    "12mm",
    "plain",
    "'single'",
    "\"double\"",
    "'it''s'",
    "\"say \\\"hi\\\"\"",
    "\"back\\\\slash\"",
    "\"tab\\there\"",
    "yes",
    "no",
    "on",
    "off",
    "True",
    "true",
    "false",
    "~",
    "null",
    "Null",
    "''",
    "\"\"",
    "0",
    "7",
    "007",
    "0x1F",
    "0o17",
    "1e3",
    "1.5",
    "-1",
    "+1",
    ".5",
    ".inf",
    "99999999999999999999",
    "~/data/x.log",
    "./rel/x",
    "/abs/x",
    "$HOME/x",
    "a # comment",
    "a#b",
    "a: b",
    "[x]",
    "{}",
    "&anchor v",
    "*alias",
    "!!str 5",
    "日本語",
];

#[test]
fn awkward_values_in_every_place_read_the_same_as_serde_saphyr_reads_them() {
    let path = Path::new("/srv/jobs.yaml");
    let mut quick_read = 0;
    for place in PLACES {
        for value in VALUES {
            let text = format!(
                "jobs:\n  - id: one\n    lock: /run/one.lock\n    \
                 should_run_when: [resource_free]\n{}",
                place.replace("{}", value)
            )
            // A place that sets should_run_when itself keeps only its own.
            .replacen(
                "    should_run_when: [resource_free]\n    should_run_when",
                "    should_run_when",
                1,
            );
            agree(&text, path);
            if quick_reader_reads(&text) {
                quick_read += 1;
            }
        }
    }
    // Most of the matrix is plain enough to be read quickly; the rest was declined.
    assert!(quick_read > 100, "{quick_read} read by the quick reader");
}

#[test]
fn shapes_around_the_values_read_the_same_as_serde_saphyr_reads_them() {
    let path = Path::new("/srv/jobs.yaml");
    for text in [
        // A list at its key's own indentation, comments everywhere, a blank line.
        "# head\nsettings:  # s\n  state_dir: /s\n\njobs:\n- id: a  # c\n  log: /l\n  \
         should_run_when: [resource_free]\n  lock: /k\n",
        // `-` alone, the job below it.
        "jobs:\n  -\n    id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n",
        // A value over two lines, a folded block, an anchor shared by two jobs.
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    name: two\n      lines\n    \
         should_run_when: [resource_free]\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    name: >-\n      folded\n    \
         should_run_when: [resource_free]\n",
        "jobs:\n  - &j\n    id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n  \
         - <<: *j\n    id: b\n",
        // Repeated keys, a key under a value, wrong indentation, a second document.
        "jobs:\n  - id: a\n    id: b\n    log: /l\n    should_run_when: [resource_free]\n",
        "jobs:\n  - id: a\n    log: /l\n      lock: /k\n    should_run_when: [resource_free]\n",
        "jobs:\n  - id: a\n   log: /l\n    should_run_when: [resource_free]\n",
        "jobs: []\n---\njobs: []\n",
        "jobs: []\n",
        "jobs:\n",
        "settings:\n  state_dir: /s\n",
        "",
        "# only a comment\n",
        "- a\n- b\n",
        "jobs: [\n]\n",
        "jobs:\r\n  - id: a\r\n",
        "\u{feff}jobs: []\n",
        "jobs: []  \n",
        "jobs: [] #c\n",
        "jobs: []#c\n",
        // Block scalars: folded and literal, stripped and clipped, a `#` line and `: ` in
        // the text, a comment after the header, blank lines after it, inside it, a line
        // more indented, an indentation digit, keep chomping.
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         auto_restart_blocked_reason: >-   # why\n      cause known: 503s\n      # still text\n\n\n  \
         - id: b\n    log: /l\n    lock: /k2\n    should_run_when: [resource_free]\n    \
         name: |\n      one\n      two  \n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: >\n      folded\n      lines\n    owner: o\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: |-\n      one\n\n      two\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: >-\n      one\n        deeper\n      two\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: >2\n        two spaces kept\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: |+\n      kept\n\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: >-\n",
        "jobs:\n  - id: a\n    log: /l\n    lock: /k\n    should_run_when: [resource_free]\n    \
         name: >-#c\n      x\n",
    ] {
        agree(text, path);
    }
}

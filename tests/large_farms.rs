//! Large farms: a jobs file of ten thousand honest jobs loads, while what bounds the work of
//! reading YAML still refuses an alias bomb — and every refusal speaks the operator's words.
//!
//! The incident: a jobs file of 8,000 jobs was refused with "Nodes { nodes: 100001 }", a
//! debug value in a message for a human. The budget must bound what aliases expand to, not
//! the honest size of a file; and no library value may reach the operator as `{ ... }`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use mihari::config::{load, load_str};

/// `count` jobs as a farm's generator writes them: every job shares one restart stanza
/// through a YAML anchor, as people do to keep such a file short.
fn farm(count: usize) -> String {
    let mut text = String::from("settings:\n  state_dir: ./state\njobs:\n");
    for i in 0..count {
        text.push_str(&format!(
            "  - id: shard-{i:05}\n    name: Shard {i} of the nightly crawl\n    owner: crawl-team\n    \
             lock: /srv/crawl/run/shard-{i:05}.lock\n    log: /srv/crawl/log/shard-{i:05}.log\n    \
             progress_file: /srv/crawl/out/shard-{i:05}.jsonl\n    stall_sec: 600\n    \
             expected_total: 2500\n    should_run_when: [not_complete, resource_free]\n"
        ));
        if i == 0 {
            text.push_str(
                "    restart: &restart\n      command: [python3, crawl.py, --resume]\n      \
                 cwd: /srv/crawl\n      env: { PYTHONUNBUFFERED: \"1\" }\n",
            );
        } else {
            text.push_str("    restart: *restart\n");
        }
    }
    text
}

/// A private folder holding `text` as a private jobs file, as `load` requires.
fn jobs_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
    let path = dir.path().join("jobs.yaml");
    fs::write(&path, text).expect("write jobs");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    (dir, path)
}

#[test]
fn a_farm_of_ten_thousand_jobs_loads() {
    for count in [8_000, 10_000, 12_000] {
        let text = farm(count);
        let (_dir, path) = jobs_file(&text);
        let config = load(&path).unwrap_or_else(|err| panic!("{count} jobs refused: {err}"));
        assert_eq!(config.jobs.len(), count);
        let last = config.jobs.last().expect("jobs");
        assert_eq!(last.id, format!("shard-{:05}", count - 1));
        let restart = last.restart.as_ref().expect("the aliased restart stanza");
        assert_eq!(
            restart.command.as_deref(),
            Some(&["python3".to_string(), "crawl.py".into(), "--resume".into()][..])
        );
    }
}

/// The hostile files of the budget: each must still be refused.
fn hostile() -> Vec<(&'static str, String)> {
    let mut laughs = String::from("jobs:\n  - &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for level in 1..10 {
        let aliases = vec![format!("*a{}", level - 1); 10].join(", ");
        laughs.push_str(&format!("  - &a{level} [{aliases}]\n"));
    }
    let mut merged = String::from(
        "jobs:\n  - &a0 {id: a, log: /l, lock: /k, should_run_when: [resource_free]}\n",
    );
    for level in 1..10 {
        let aliases = vec![format!("*a{}", level - 1); 10].join(", ");
        merged.push_str(&format!("  - &a{level} {{<<: [{aliases}]}}\n"));
    }
    let deep = format!("jobs: {}{}\n", "[".repeat(40), "]".repeat(40));
    let wide = format!(
        "jobs:\n  - &a {{id: a, log: /l, lock: /k, should_run_when: [resource_free], name: {}}}\n{}",
        "lol".repeat(33_000),
        "  - *a\n".repeat(2_000)
    );
    // What bounds a bomb must not grow with the file: padding it buys nothing.
    let padded = format!("{}{merged}", "# padding, not jobs\n".repeat(500_000));
    vec![
        ("billion laughs", laughs),
        ("a merge bomb behind ten megabytes of comments", padded),
        ("billion laughs through merge keys", merged),
        ("forty levels deep", deep),
        ("a wide job aliased two thousand times", wide),
    ]
}

/// The headline without what it quotes from the file ('...'): what mihari itself says.
fn own_words(headline: &str) -> String {
    headline
        .split('\'')
        .step_by(2)
        .collect::<Vec<&str>>()
        .join("'…'")
}

/// Fails when `headline` shows a library value instead of words: `{ ... }`, `a=b`, or a
/// Rust name of the library's.
fn assert_in_words(name: &str, headline: &str) {
    let own = own_words(headline);
    assert!(
        !own.contains('{') && !own.contains('}') && !own.contains('='),
        "{name}: a debug value reached the operator:\n{headline}"
    );
    for internal in [
        "Nodes",
        "Depth",
        "Events",
        "Aliases",
        "ScalarBytes",
        "Budget",
        "total_replayed_events",
        "budget breached",
    ] {
        assert!(
            !own.contains(internal),
            "{name}: '{internal}' is the library's, not words:\n{headline}"
        );
    }
}

#[test]
fn alias_bombs_and_deep_nesting_are_still_refused_in_words() {
    for (name, text) in hostile() {
        let err = load_str(&text, Path::new("/etc/mihari/jobs.yaml"))
            .expect_err(&format!("the {name} file was loaded"));
        assert_in_words(name, err.summary());
        assert!(
            err.summary().contains("refused") || err.summary().contains("not accepted"),
            "{name}: the headline must say it is refused:\n{err}"
        );
    }
}

#[test]
fn a_refusal_printed_by_mihari_ends_its_caret_line_with_a_newline() {
    for (name, text) in hostile() {
        let (_dir, path) = jobs_file(&text);
        let output = Command::cargo_bin("mihari")
            .expect("the mihari binary")
            .arg("--config")
            .arg(&path)
            .arg("check")
            .output()
            .expect("mihari runs");
        assert_eq!(output.status.code(), Some(3), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.ends_with('\n'), "{name}: {stderr:?}");
        let lines: Vec<&str> = stderr.lines().collect();
        let caret = lines.last().expect("a refusal");
        assert!(
            caret.trim_start().starts_with('|') && caret.ends_with('^'),
            "{name}: the refusal must end with its caret line:\n{stderr}"
        );
        assert_in_words(name, lines[0]);
    }
}

//! Check and route names with a tab or an escape in them (issue 9, item 14): a failing check
//! named "no<TAB>gaps" was stored under its sanitized name and looked up under the name as
//! written, so it was never reported and its job stayed "nothing to do". Such names are now
//! refused when the jobs file is loaded, at the name's line and column, and results are
//! matched by the name as written wherever a name comes from (a library caller can still
//! build any name).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use chrono::Utc;
use mihari::config::load_str;
use mihari::core::text::is_inert;
use mihari::engine::Engine;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A jobs file in `dir` with one job, `collect`, whose one check is named `name` (written
/// as a YAML double-quoted string, so "\t" and "\e" are the real characters) and fails.
fn jobs_file(dir: &Path, name: &str) -> std::path::PathBuf {
    let text = format!(
        "settings:\n  state_dir: state\njobs:\n  - id: collect\n    log: collect.log\n    \
         lock: collect.lock\n    should_run_when: [resource_free]\n    checks:\n      \
         - name: \"{name}\"\n        command: [\"false\"]\n"
    );
    let path = dir.join("jobs.yaml");
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(dir.join("collect.log"), "working\n").unwrap();
    path
}

/// `mihari check` on a real jobs file whose failing check is named with a tab, an escape
/// sequence or a newline: the job must not read as fine. The file is refused with the
/// name's position and the name quoted inertly, so nothing runs unwatched.
#[test]
fn a_failing_check_named_with_a_tab_or_an_escape_is_never_silently_fine() {
    for (written, quoted) in [
        ("no\\tgaps", "'no gaps'"),
        ("\\e[31mgaps\\e[0m", "'gaps'"),
        ("\\e]0;owned\\agaps", "'gaps'"),
        ("two\\nlines", "'two\u{240a}lines'"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = jobs_file(dir.path(), written);
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .arg("check")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let context = format!("name {written}:\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert_eq!(out.status.code(), Some(3), "{context}");
        assert!(
            stderr.contains(&format!("{}:9:15: ", path.display())),
            "the refusal names file:line:col: {context}"
        );
        let headline = stderr.lines().next().unwrap_or("");
        assert!(headline.contains(quoted), "{context}");
        assert!(headline.contains("control character"), "{context}");
        assert!(
            is_inert(headline.trim_start_matches("mihari: ")),
            "{context}"
        );
        assert!(!stdout.contains("nothing to do"), "{context}");
    }
}

/// The engine matches a check's result to its job by the name as written, not by the
/// sanitized name it shows: a name with a tab (built in code, where the loader's refusal
/// does not apply) still turns its failing check into a RED job that says so.
#[test]
fn a_check_result_is_matched_by_the_name_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = jobs_file(dir.path(), "gaps");
    let text = fs::read_to_string(&path).unwrap();
    let mut config = load_str(&text, &path).expect("a valid jobs file");
    let mut jobs = config.jobs.to_vec();
    jobs[0].checks[0].name = "no\tgaps\u{1b}[31m".to_string();
    jobs[0].checks[0].command = vec!["false".to_string()];
    config.jobs = jobs.into();
    let mut engine = Engine::new(config);
    engine.run_checks(None);
    let snapshot = engine.snapshot(Utc::now());
    let row = snapshot
        .assessment_of("collect")
        .expect("the job is assessed");
    assert!(
        row.reasons
            .iter()
            .any(|r| r.starts_with("check 'no gaps' failed")),
        "{:?}",
        row.reasons
    );
    assert!(row.reasons.iter().all(|r| is_inert(r)), "{:?}", row.reasons);
}

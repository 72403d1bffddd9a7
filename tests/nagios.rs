//! `mihari check --nagios`: the Monitoring Plugins output (SPEC §11) that Nagios, Icinga and
//! NRPE read as it is — a short first line `MIHARI STATUS - summary | perfdata`, then one
//! line per job that needs a human, with check's exit codes. Run on real situations: a dead
//! holder, a failing check whose output holds a `|`, a pending approval, a quiet host.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;

fn mihari(root: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("mihari")
        .expect("binary")
        .arg("--config")
        .arg(root.join("jobs.yaml"))
        .args(args)
        .env("HOME", root)
        .env_remove("MIHARI_CONFIG")
        .env("XDG_CACHE_HOME", root.join("cache"))
        .output()
        .expect("mihari runs")
}

fn jobs(root: &Path, jobs: &str) {
    fs::write(
        root.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {}/state\njobs:\n{jobs}",
            root.display()
        ),
    )
    .expect("jobs file");
}

/// The perfdata of a first line: `label=value;;;0` for each.
fn perfdata(first: &str) -> Vec<(String, u64)> {
    let (_, data) = first.split_once(" | ").expect("perfdata after ' | '");
    data.split(' ')
        .map(|item| {
            let (label, rest) = item.split_once('=').expect("label=value");
            let value = rest.strip_suffix(";;;0").expect("';;;0' after the value");
            (label.to_string(), value.parse().expect("a count"))
        })
        .collect()
}

#[test]
fn a_dead_holder_and_a_failing_check_are_critical_with_one_line_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::write(
        root.join("collect.lock"),
        "{\"pid\": 999999, \"start_time\": 1}",
    )
    .expect("lock");
    fs::write(root.join("audit.log"), "ok\n").expect("log");
    jobs(
        root,
        &format!(
            "  - id: collect\n    lock: {r}/collect.lock\n    log: {r}/collect.log\n\
             \x20   should_run_when: [not_succeeded]\n\
             \x20 - id: audit\n    log: {r}/audit.log\n    should_run_when: [not_succeeded]\n\
             \x20   checks:\n      - name: gaps\n\
             \x20       command: [\"sh\", \"-c\", \"echo 'rows | missing'; exit 1\"]\n",
            r = root.display()
        ),
    );
    let output = mihari(root, &["check", "--nagios"]);
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("MIHARI CRITICAL - 1 restart, 1 red | "),
        "{text}"
    );
    assert_eq!(
        perfdata(lines[0]),
        [
            ("restart".to_string(), 1),
            ("red".to_string(), 1),
            ("stale".to_string(), 0),
            ("dispatch".to_string(), 0),
            ("approvals".to_string(), 0),
        ]
    );
    assert!(
        lines[1].starts_with("RESTART collect: DEAD_LOCK_STALE - "),
        "one line per job, in the fixed order:\n{text}"
    );
    assert!(
        lines[2].starts_with("RED audit: RUNNING - check 'gaps' failed: exit 1: rows / missing"),
        "a RED row says what made it RED:\n{text}"
    );
    assert_eq!(lines.len(), 3, "{text}");
    for line in &lines[1..] {
        assert!(
            !line.contains('|'),
            "a '|' from a job would start perfdata: {line}"
        );
    }
}

#[test]
fn a_pending_approval_is_a_warning_and_a_quiet_host_is_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    jobs(
        root,
        &format!(
            "  - id: deploy\n    log: {r}/deploy.log\n    should_run_when: [not_succeeded]\n",
            r = root.display()
        ),
    );
    // deploy was never started: DISPATCH, a warning.
    let output = mihari(root, &["check", "--nagios"]);
    assert_eq!(output.status.code(), Some(1));
    let first = String::from_utf8(output.stdout).expect("utf-8");
    assert!(
        first.starts_with("MIHARI WARNING - 1 dispatch | restart=0;;;0 red=0;;;0 stale=0;;;0 dispatch=1;;;0 approvals=0;;;0\nDISPATCH deploy: SHOULD_BE_RUNNING"),
        "{first}"
    );

    // Paused, it needs nothing: OK, and a pending approval makes it a warning again.
    let pause = mihari(
        root,
        &["pause", "deploy", "--reason", "maintenance", "--yes"],
    );
    assert_eq!(pause.status.code(), Some(0), "{pause:?}");
    let output = mihari(root, &["check", "--nagios"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).expect("utf-8"),
        "MIHARI OK - 1 job, nothing to do | restart=0;;;0 red=0;;;0 stale=0;;;0 dispatch=0;;;0 approvals=0;;;0\n"
    );
    let ask = mihari(
        root,
        &[
            "approval",
            "request",
            "deploy",
            "--step",
            "drop",
            "--key",
            "k",
            "--summary",
            "drop | the table",
        ],
    );
    assert_eq!(ask.status.code(), Some(10), "{ask:?}");
    let output = mihari(root, &["check", "--nagios"]);
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(
        text.starts_with("MIHARI WARNING - 1 approval pending | "),
        "{text}"
    );
    assert!(text.ends_with("approvals=1;;;0\nAPPROVAL deploy: step 'drop' waits for a human (drop / the table) - mihari approval list\n"), "{text}");
}

#[test]
fn a_bad_jobs_file_is_unknown_with_exit_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::write(root.join("jobs.yaml"), "jobs: [").expect("jobs file");
    let output = mihari(root, &["check", "--nagios"]);
    assert_eq!(output.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("MIHARI UNKNOWN - ") && stdout.contains("jobs.yaml:1:"),
        "Nagios shows stdout only: {stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("jobs.yaml:1:"),
        "stderr names file:line:col"
    );
}

/// A typo in a service definition must read as UNKNOWN (3) with a line Nagios shows, not as
/// clap's usage exit 2, which a plugin's caller takes for CRITICAL and pages someone.
#[test]
fn a_usage_error_under_nagios_is_unknown_with_exit_3_and_a_first_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    jobs(root, "  - id: a\n    log: /nonexistent/a.log\n");
    for args in [
        &["check", "--nagios", "--follow"][..],
        &["check", "--nagios", "--json"][..],
        &["check", "--nagios", "--bogus"][..],
    ] {
        let output = mihari(root, args);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.starts_with("MIHARI UNKNOWN - usage: ") && stdout.lines().count() == 1,
            "{args:?}: {stdout}"
        );
        assert!(
            !output.stderr.is_empty(),
            "clap's own message stays on stderr"
        );
    }
    // Without --nagios a usage error keeps clap's code, and --follow stays --json's alone.
    let output = mihari(root, &["check", "--prometheus", "--follow"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

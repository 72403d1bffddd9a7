//! Checks run for real: argv with no shell, a timeout, and results in layers.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use mihari::config::CheckSpec;
use mihari::core::CheckResult;
use mihari::probe::checks::run_check;

fn spec(command: &[&str], timeout_sec: u64) -> CheckSpec {
    CheckSpec {
        name: "no_gaps".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        every_sec: 300,
        timeout_sec,
    }
}

fn here() -> &'static Path {
    Path::new("/")
}

#[test]
fn exit_zero_is_a_pass() {
    let got = run_check(&spec(&["true"], 5), here());
    assert_eq!(got.result, CheckResult::Pass, "{got:?}");
}

#[test]
fn exit_non_zero_is_a_fail_with_the_last_line_it_printed() {
    let got = run_check(
        &spec(
            &[
                "sh",
                "-c",
                "echo scanning; echo 'gap at shard 120' >&2; exit 3",
            ],
            5,
        ),
        here(),
    );
    assert_eq!(got.result, CheckResult::Fail);
    assert_eq!(got.detail, "exit 3: gap at shard 120");
}

#[test]
fn a_missing_program_is_a_fault_not_a_pass() {
    let got = run_check(&spec(&["/nonexistent/check_gaps"], 5), here());
    assert_eq!(got.result, CheckResult::Fault);
    assert!(got.detail.contains("not found"), "{}", got.detail);
}

#[test]
fn a_program_that_may_not_run_is_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("check.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let got = run_check(&spec(&[script.to_str().unwrap()], 5), dir.path());
    assert_eq!(got.result, CheckResult::Refusal, "{got:?}");
    assert!(got.detail.contains("permission denied"));
}

#[test]
fn a_check_past_its_timeout_is_killed_and_a_fault() {
    let started = Instant::now();
    let got = run_check(&spec(&["sleep", "30"], 1), here());
    assert_eq!(got.result, CheckResult::Fault);
    assert!(got.detail.contains("timed out after 1 s"), "{}", got.detail);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the sleep was not killed"
    );
}

#[test]
fn a_timeout_kills_the_checks_children_too() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
    let got = run_check(&spec(&["sh", "-c", &script], 1), here());
    assert_eq!(got.result, CheckResult::Fault);
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed with its group; it may linger as a zombie of the reaped shell only briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}")).exists()
        && !fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    {
        assert!(
            Instant::now() < deadline,
            "child {pid} of the check survived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_crash_on_a_signal_is_a_fault() {
    let got = run_check(&spec(&["sh", "-c", "kill -SEGV $$"], 5), here());
    assert_eq!(got.result, CheckResult::Fault);
    assert!(
        got.detail.contains("crashed: killed by SIGSEGV"),
        "{}",
        got.detail
    );
}

#[test]
fn a_grandchild_holding_the_pipe_does_not_hang_the_check() {
    let started = Instant::now();
    let got = run_check(&spec(&["sh", "-c", "sleep 20 & echo fine"], 5), here());
    assert_eq!(got.result, CheckResult::Pass);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn hostile_output_is_made_inert() {
    let got = run_check(
        &spec(&["printf", "\\033]0;pwned\\007\\033[2Jgap\\n"], 5),
        here(),
    );
    assert_eq!(got.result, CheckResult::Pass);
    assert!(
        mihari::core::text::is_inert(&got.detail),
        "{:?}",
        got.detail
    );
    assert_eq!(got.detail, "exit 0: gap");
}

/// A check's last line longer than the output kept (16 KiB) starts inside it — here inside
/// a clipboard sequence (OSC 52) whose payload is 20,000 bytes. Its detail is cut after it is
/// made inert, as a log line is, so the payload never shows as text.
#[test]
fn a_last_line_cut_inside_an_escape_sequence_never_shows_its_payload() {
    let script = "printf '\\033]52;c;'; head -c 20000 /dev/zero | tr '\\0' A; \
                  printf '\\007 gap at shard 120\\n'; exit 1";
    let got = run_check(&spec(&["sh", "-c", script], 5), here());
    assert_eq!(got.result, CheckResult::Fail, "{got:?}");
    assert!(got.detail.ends_with("gap at shard 120"), "{}", got.detail);
    assert!(!got.detail.contains("AAAA"), "{}", got.detail);
}

/// Round three, item 10: a one-shot `check` started every check at once, one thread each:
/// 2,000 jobs with one check each under `ulimit -n 1024` gave 1,662 "Too many open files"
/// faults. Here 1,000 under `ulimit -n 256`, the same squeeze: every check runs and passes,
/// and a check that fails is still a failure.
#[test]
fn a_thousand_checks_under_a_small_open_file_limit_all_run_and_are_judged() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "settings:\n  state_dir: {}/state\njobs:\n",
        dir.path().display()
    );
    let jobs = 1000;
    for i in 0..jobs {
        // The last job's check fails: a failure stays a failure.
        let command = if i == jobs - 1 { "false" } else { "true" };
        yaml.push_str(&format!(
            "  - id: j{i:04}\n    log: {d}/j.log\n    should_run_when: [not_succeeded]\n    \
             checks:\n      - {{name: ok, command: [{command}]}}\n",
            d = dir.path().display()
        ));
    }
    fs::write(dir.path().join("j.log"), "line\n").unwrap();
    let config = dir.path().join("jobs.yaml");
    fs::write(&config, yaml).unwrap();
    fs::set_permissions(&config, fs::Permissions::from_mode(0o600)).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mihari"));
    command
        .arg("--config")
        .arg(&config)
        .args(["check", "--json"]);
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().expect("mihari check");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let mut results = std::collections::BTreeMap::<String, usize>::new();
    let mut faults = Vec::new();
    for job in report["jobs"].as_array().expect("jobs") {
        for check in job["checks"].as_array().expect("checks") {
            let result = check["result"].as_str().unwrap_or("?").to_string();
            if result != "pass" && faults.len() < 3 {
                faults.push(check.to_string());
            }
            *results.entry(result).or_default() += 1;
        }
    }
    assert_eq!(
        results,
        [("fail".to_string(), 1), ("pass".to_string(), jobs - 1)].into(),
        "{faults:?}"
    );
}

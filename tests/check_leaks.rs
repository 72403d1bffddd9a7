//! A check that leaves a grandchild holding its output (issue 9, item 13): run many times by
//! the real code, it must leave nothing behind — no process of its group, no thread and no
//! file descriptor of ours.
//!
//! One test in its own binary, so that no other test's threads or descriptors come and go
//! while this one counts them in `/proc/self`.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use mihari::config::CheckSpec;
use mihari::core::CheckResult;
use mihari::probe::checks::run_check;

/// How many times each check runs: one leak per run shows as this many.
const RUNS: usize = 12;

fn spec(script: &str, timeout_sec: u64) -> CheckSpec {
    CheckSpec {
        name: "leaves_a_child".into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        every_sec: 300,
        timeout_sec,
    }
}

fn threads() -> usize {
    fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

fn fds() -> usize {
    fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Processes (not zombies) whose command line is exactly `argv`.
fn running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect()
}

/// Waits a moment for `settled` (a killed process takes a moment to go), at most a few
/// seconds: a guard, not a measurement.
fn settles(settled: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !settled() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn a_check_that_leaves_a_grandchild_leaks_no_process_thread_or_descriptor() {
    // Distinct durations mark the grandchildren of this test, and nothing else on the machine.
    let passing = spec("sleep 611.25 & echo ok", 5);
    let timing_out = spec("sleep 612.25 & echo started; sleep 30", 1);
    let here = Path::new("/");
    // One run first: whatever the first run sets up for good (a lazily made thread pool, a
    // cached descriptor) is not a leak.
    run_check(&spec("true", 5), here);
    let (threads_before, fds_before) = (threads(), fds());

    for _ in 0..RUNS {
        let got = run_check(&passing, here);
        assert_eq!(got.result, CheckResult::Pass, "{got:?}");
        assert_eq!(got.detail, "exit 0: ok");
        let got = run_check(&timing_out, here);
        assert_eq!(got.result, CheckResult::Fault, "{got:?}");
        assert!(got.detail.contains("timed out"), "{}", got.detail);
    }

    for argv in [["sleep", "611.25"], ["sleep", "612.25"]] {
        assert!(
            settles(|| running(&argv).is_empty()),
            "grandchildren {argv:?} of the check survived: {:?}",
            running(&argv)
        );
    }
    assert!(
        settles(|| threads() <= threads_before),
        "threads: {threads_before} before {RUNS} runs, {} after",
        threads()
    );
    assert!(
        settles(|| fds() <= fds_before),
        "descriptors: {fds_before} before {RUNS} runs, {} after",
        fds()
    );
}

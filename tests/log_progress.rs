//! `log_progress` on real output: a real tqdm loop under the real `mihari run`, training logs
//! of `epoch 3/10 step 1200/5000` lines, downloads printing `67%`, each with carriage returns
//! and hundreds of lines, read back through `mihari check --json` (done, expected_total,
//! percent, rate_per_sec, eta_sec, not_complete and COMPLETE); heartbeats' `--done/--total`;
//! a rotated log; a log that cannot be read; and the other fields check --json gained with
//! them (`phase`, `last_exit`, `paused`).
//!
//! The incident: most real jobs never write a progress file — they print. done/total, rate
//! and ETA were blank for every one of them, and a job that printed its last step and then
//! "saving checkpoint" could never be COMPLETE.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// Debian's python, which has tqdm (the `python3` on PATH may not).
const PYTHON: &str = "/usr/bin/python3";

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(jobs: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let sandbox = Sandbox { dir };
        let path = sandbox.path("jobs.yaml");
        fs::write(
            &path,
            format!("settings:\n  state_dir: state\njobs:\n{jobs}"),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn mihari(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("mihari runs")
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari starts")
    }

    fn job(&self, id: &str) -> Value {
        let output = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json is JSON ({e}):\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        report["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no job {id} in check --json: {report:#}"))
    }
}

fn reasons(job: &Value) -> String {
    job["reasons"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

fn python() -> &'static str {
    assert!(
        Path::new(PYTHON).exists(),
        "this test needs '{PYTHON}' with tqdm (Debian: python3-tqdm)"
    );
    let has_tqdm = Command::new(PYTHON)
        .args(["-c", "import tqdm"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_tqdm,
        "this test needs tqdm for '{PYTHON}' (Debian: python3-tqdm)"
    );
    PYTHON
}

/// A tqdm loop of `total` steps, `delay` seconds each, that prints a line after every 50 steps
/// and "saving checkpoint" at its end, as training scripts do.
fn tqdm_script(total: u32, delay: f64) -> String {
    format!(
        "import sys, time\nfrom tqdm import tqdm\n\
         for i in tqdm(range({total}), mininterval=0.05, miniters=1):\n    \
         time.sleep({delay})\n    \
         if i % 50 == 49: tqdm.write(f'step {{i + 1}} written')\n\
         print('saving checkpoint', flush=True)\n"
    )
}

fn tqdm_job(id: &str, script: &str) -> String {
    let python = python();
    format!(
        "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    \
         log_progress: {{ preset: tqdm }}\n    \
         should_run_when: [not_complete]\n    restart:\n      \
         command: [{python}, -c, {script:?}]\n"
    )
}

/// Waits until `ready` holds for the job's check --json object, and returns it.
fn wait_for(sandbox: &Sandbox, id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = sandbox.job(id);
        if ready(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "never {what}: {job:#}");
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_real_tqdm_loop_under_mihari_run_shows_done_total_rate_and_eta_then_is_complete() {
    let sandbox = Sandbox::new(&tqdm_job("train", &tqdm_script(300, 0.03)));
    let before = sandbox.job("train");
    assert_eq!(before["state"], "SHOULD_BE_RUNNING", "{before:#}");
    assert_eq!(
        before["done"], 0,
        "nothing printed yet is nothing done: {before:#}"
    );

    let mut run = sandbox.spawn(&["run", "train"]);
    let running = wait_for(&sandbox, "train", "RUNNING at 60+ of 300", |job| {
        job["state"] == "RUNNING" && job["done"].as_u64().is_some_and(|d| (60..300).contains(&d))
    });
    // The total tqdm prints stands in for expected_total, which the job does not declare.
    assert_eq!(running["expected_total"], 300, "{running:#}");
    let rate = running["rate_per_sec"].as_f64().expect("tqdm's rate");
    assert!(rate > 1.0 && rate < 1000.0, "{running:#}");
    let eta = running["eta_sec"].as_f64().expect("tqdm's remaining time");
    assert!(eta > 0.0 && eta < 60.0, "{running:#}");
    let percent = running["percent"].as_f64().expect("a percent");
    assert!(percent > 0.0 && percent < 100.0, "{running:#}");
    assert_eq!(running["last_exit"], Value::Null, "no run has ended yet");

    assert!(run.wait().expect("mihari run ends").success());
    let log = fs::read_to_string(sandbox.path("train.log")).expect("the log");
    assert!(
        log.contains('\r') && log.ends_with("saving checkpoint\n"),
        "{log}"
    );
    let frames = log.matches('\r').count();
    assert!(frames > 100, "a hundred frames and more: {frames}");
    assert!(
        log.lines().count() >= 7,
        "the step lines tqdm.write printed: {log}"
    );

    // The last frame, 300/300, is found behind the "saving checkpoint" line printed after it.
    let done = sandbox.job("train");
    assert_eq!(done["state"], "COMPLETE", "{done:#}");
    assert_eq!(
        (done["done"].as_u64(), done["expected_total"].as_u64()),
        (Some(300), Some(300))
    );
    assert!(
        reasons(&done).contains("complete: 300 of 300 done"),
        "{done:#}"
    );
    assert_eq!(done["last_exit"]["code"], 0, "{done:#}");
    assert!(done["last_exit"]["at"].is_string(), "{done:#}");
    // A job that is not running has no pace.
    assert_eq!(done["rate_per_sec"], Value::Null, "{done:#}");
}

#[test]
fn a_tqdm_run_killed_half_way_should_run_again_from_its_printed_step() {
    let sandbox = Sandbox::new(&tqdm_job("train", &tqdm_script(3000, 0.01)));
    let mut run = sandbox.spawn(&["run", "train"]);
    let running = wait_for(&sandbox, "train", "RUNNING past 100", |job| {
        job["state"] == "RUNNING" && job["done"].as_u64().is_some_and(|d| d >= 100)
    });
    assert_eq!(running["expected_total"], 3000, "{running:#}");
    let pid = running["pid"].as_u64().expect("the holder's pid");
    // The job itself, not its supervisor: the supervisor records how it ended.
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let _ = run.wait();
    let after = wait_for(&sandbox, "train", "judged after the kill", |job| {
        job["state"] != "RUNNING"
    });
    assert_eq!(after["state"], "SHOULD_BE_RUNNING", "{after:#}");
    let done = after["done"].as_u64().expect("the last printed step");
    assert!((100..3000).contains(&done), "{after:#}");
    assert!(
        reasons(&after).contains(&format!("not_complete ({done} of 3000 done)")),
        "{after:#}"
    );
    assert!(
        after["last_exit"]["signal"] == "SIGTERM" || after["last_exit"]["code"].is_number(),
        "{after:#}"
    );
}

/// Appends `text` to `path`.
fn append(path: &Path, text: &str) {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the log");
    file.write_all(text.as_bytes()).expect("append");
}

/// A training log of 320 lines: each epoch redraws its step count with '\r' and ends it with
/// '\n', then the last epoch's last step is followed by lines that carry no step.
fn training_log(path: &Path) {
    let mut text = String::new();
    for line in 0..320 {
        text.push_str(&format!("info: batch {line} loaded, lr 0.001\n"));
    }
    for epoch in 1..=3 {
        for step in (0..=5000).step_by(400) {
            text.push_str(&format!(
                "\repoch {epoch}/10 step {step}/5000 loss 0.{step}"
            ));
        }
        text.push('\n');
    }
    for step in (0..=1200).step_by(100) {
        text.push_str(&format!("\repoch 4/10 step {step}/5000 loss 0.{step}"));
    }
    text.push_str("\nsaving checkpoint to ckpt/epoch4.pt\nvalidation: 12 batches\n");
    append(path, &text);
}

#[test]
fn step_lines_are_read_by_the_fraction_preset_and_by_a_pattern() {
    let sandbox = Sandbox::new(
        "  - id: by_fraction\n    log: fraction.log\n    log_progress: { preset: fraction }\n    \
         should_run_when: [not_complete]\n\
         \x20 - id: by_pattern\n    log: pattern.log\n    \
         log_progress:\n      pattern: 'epoch (?P<epoch>\\d+)/10 step (?P<done>\\d+)/(?P<total>\\d+)'\n    \
         should_run_when: [not_complete]\n",
    );
    training_log(&sandbox.path("fraction.log"));
    training_log(&sandbox.path("pattern.log"));
    for id in ["by_fraction", "by_pattern"] {
        let job = sandbox.job(id);
        assert_eq!(job["done"], 1200, "{id}: {job:#}");
        assert_eq!(job["expected_total"], 5000, "{id}: {job:#}");
        assert_eq!(job["percent"], 24.0, "{id}: {job:#}");
        // No lock: fresh output counts as running.
        assert_eq!(job["state"], "RUNNING", "{id}: {job:#}");
        // A one-off check has no earlier sample and the lines print no rate.
        assert_eq!(job["rate_per_sec"], Value::Null, "{id}: {job:#}");
    }
}

#[test]
fn a_download_printing_percents_is_read_by_the_percent_preset_and_complete_at_100() {
    let sandbox = Sandbox::new(
        "  - id: fetch\n    log: fetch.log\n    log_progress: { preset: percent }\n    \
         stall_sec: 1\n    should_run_when: [not_complete]\n",
    );
    let log = sandbox.path("fetch.log");
    let mut text = String::from("connecting to mirror\n");
    for line in 0..300 {
        text.push_str(&format!("mirror {line}: 200 OK\n"));
    }
    for percent in 0..=67 {
        text.push_str(&format!("\rdownloading model.bin {percent}%"));
    }
    text.push_str("\nretrying chunk 812\n");
    append(&log, &text);
    let job = sandbox.job("fetch");
    assert_eq!(job["percent"], 67.0, "{job:#}");
    assert_eq!(
        job["done"],
        Value::Null,
        "a percent counts no items: {job:#}"
    );
    thread::sleep(Duration::from_millis(2100));
    let due = sandbox.job("fetch");
    assert_eq!(due["state"], "SHOULD_BE_RUNNING", "{due:#}");
    assert!(
        reasons(&due).contains("67% done, as its log prints"),
        "{due:#}"
    );

    append(
        &log,
        "\rdownloading model.bin 99%\rdownloading model.bin 100%\ndone, 4.1 GB\n",
    );
    thread::sleep(Duration::from_millis(2100));
    let complete = sandbox.job("fetch");
    assert_eq!(complete["state"], "COMPLETE", "{complete:#}");
    assert_eq!(complete["percent"], 100.0, "{complete:#}");
}

#[test]
fn heartbeats_with_done_and_total_feed_done_and_expected_total() {
    let sandbox = Sandbox::new(
        "  - id: agent\n    log: agent.log\n    should_run_when: [resource_free]\n    lock: agent.lock\n",
    );
    append(&sandbox.path("agent.log"), "started\n");
    let beat = sandbox.mihari(&["heartbeat", "agent", "--done", "40", "--total", "160"]);
    assert!(
        beat.status.success(),
        "{}",
        String::from_utf8_lossy(&beat.stderr)
    );
    let job = sandbox.job("agent");
    assert_eq!(job["done"], 40, "{job:#}");
    assert_eq!(job["expected_total"], 160, "{job:#}");
    assert_eq!(job["percent"], 25.0, "{job:#}");
}

#[test]
fn after_a_rotation_by_its_writer_the_frames_are_read_in_the_predecessor() {
    let sandbox = Sandbox::new(
        "  - id: train\n    log: run.log\n    log_progress: { preset: fraction }\n    \
         should_run_when: [not_complete]\n",
    );
    // Python's RotatingFileHandler, for real: the step lines end up in run.log.1 and the new
    // run.log holds only what came after.
    let script = "import logging, logging.handlers\n\
        h = logging.handlers.RotatingFileHandler('run.log', maxBytes=4000, backupCount=1)\n\
        log = logging.getLogger('t'); log.addHandler(h); log.setLevel(logging.INFO)\n\
        for step in range(0, 2600, 10): log.info('step %d/5000', step)\n\
        h.doRollover()\n\
        log.info('evaluating on the held-out set')\n";
    let ran = Command::new(python())
        .args(["-c", script])
        .current_dir(sandbox.dir.path())
        .status()
        .expect("python runs");
    assert!(ran.success());
    let job = sandbox.job("train");
    assert_eq!(job["done"], 2590, "{job:#}");
    assert_eq!(job["expected_total"], 5000, "{job:#}");
}

#[test]
fn a_log_that_cannot_be_read_is_a_fault_never_no_progress() {
    let sandbox = Sandbox::new(
        "  - id: train\n    log: run.log\n    log_progress: { preset: tqdm }\n    \
         should_run_when: [not_complete]\n",
    );
    fs::create_dir(sandbox.path("run.log")).expect("a folder where the log should be");
    let job = sandbox.job("train");
    assert_eq!(job["state"], "UNKNOWN", "{job:#}");
    assert_eq!(job["done"], Value::Null, "{job:#}");
    assert!(reasons(&job).contains("log_progress: fault"), "{job:#}");
}

#[test]
fn check_json_names_the_manifest_phase_and_a_pause() {
    let sandbox = Sandbox::new(
        "  - id: pipeline\n    manifest: manifest.json\n    should_run_when: [resource_free]\n    \
         lock: pipeline.lock\n",
    );
    fs::write(
        sandbox.path("manifest.json"),
        r#"{"run_id": "r7", "current_phase": "article_generation", "phase_results": {"fetch": true}}"#,
    )
    .expect("manifest");
    let job = sandbox.job("pipeline");
    assert_eq!(job["phase"], "article_generation", "{job:#}");
    assert_eq!(job["paused"], Value::Null, "{job:#}");
    let paused = sandbox.mihari(&["pause", "pipeline", "--reason", "upstream down", "--yes"]);
    assert!(
        paused.status.success(),
        "{}",
        String::from_utf8_lossy(&paused.stderr)
    );
    let job = sandbox.job("pipeline");
    assert_eq!(job["paused"]["reason"], "upstream down", "{job:#}");
    assert!(
        job["paused"]["at"].is_string() && job["paused"]["by"].is_string(),
        "{job:#}"
    );
}

#[test]
fn a_long_running_engine_measures_the_rate_and_eta_of_step_lines_over_its_passes() {
    let sandbox = Sandbox::new(
        "  - id: train\n    log: train.log\n    log_progress: { preset: fraction }\n    \
         should_run_when: [not_complete]\n",
    );
    let log = sandbox.path("train.log");
    append(&log, "\repoch 1/10 step 100/1000");
    let config = mihari::config::load(&sandbox.path("jobs.yaml")).expect("the jobs file loads");
    let mut engine = mihari::engine::Engine::new(config);
    let start = chrono::Utc::now();
    let first = engine.snapshot(start);
    let row = first.assessment_of("train").expect("the job");
    assert_eq!((row.done, row.expected_total), (Some(100), Some(1000)));
    assert_eq!(row.rate_per_sec, None, "one pass measures no rate");
    append(&log, "\repoch 1/10 step 200/1000\nsaving checkpoint\n");
    let later = engine.snapshot(start + chrono::Duration::seconds(10));
    let row = later.assessment_of("train").expect("the job");
    assert_eq!(row.done, Some(200));
    assert_eq!(row.rate_per_sec, Some(10.0), "{row:#?}");
    assert_eq!(row.eta_sec, Some(80.0), "{row:#?}");
}

/// Which last lines are a meter redrawn in place: two frames with text between carriage
/// returns. A line printed once, CRLF lines and a finished bar followed by a plain line are not.
#[test]
fn a_last_line_redrawn_with_carriage_returns_is_a_meter_and_nothing_else_is() {
    use mihari::probe::log_progress::redraws_a_meter;
    let rows: &[(&str, &[u8], bool)] = &[
        (
            "tqdm redrawing",
            b"start\n\r  0%|          | 0/50 [00:00<?, ?it/s]\r 10%|#         | 5/50 [00:01<00:09, 5.00it/s]",
            true,
        ),
        (
            "a finished tqdm bar ends in a newline",
            b"\r 98%|#########8| 49/50\r100%|##########| 50/50 [00:10<00:00]\n",
            true,
        ),
        (
            "curl's meter",
            b"  % Total    % Received\n\r  0     0    0     0\r 12 1000k   12  120k",
            true,
        ),
        ("one line printed", b"step 3 of 10\nstep 4 of 10\n", false),
        ("a Windows log", b"step 3 of 10\r\nstep 4 of 10\r\n", false),
        (
            "a plain line after the bar",
            b"\r 50%|#####| 5/10\r100%|##########| 10/10\nsaving checkpoint\n",
            false,
        ),
        ("nothing", b"", false),
        ("one frame only", b"\r 10%|#         | 5/50", false),
    ];
    for (name, tail, meter) in rows {
        assert_eq!(redraws_a_meter(tail), *meter, "{name}");
    }
}

/// The incident behind it: a tqdm job declared with only its log reads RUNNING "progress 1 s
/// ago" while its bar redraws the same figure, and nothing tells the operator that the log's
/// time moves with every redraw. A real tqdm loop's log now says so, and says what to declare;
/// a job that prints lines is not told.
#[test]
fn a_log_whose_last_line_is_a_redrawn_meter_asks_for_log_progress() {
    let python = python();
    let bar = tqdm_script(100_000, 0.05);
    let lines = "import time\nfor i in range(100000):\n    print(f'step {i}', flush=True)\n    \
                 time.sleep(0.05)\n";
    let job = |id: &str, script: &str| {
        format!(
            "  - id: {id}\n    lock: {id}.lock\n    log: {id}.log\n    \
             should_run_when: [resource_free]\n    restart:\n      \
             command: [{python}, -c, {script:?}]\n"
        )
    };
    let sandbox = Sandbox::new(&format!("{}{}", job("bar", &bar), job("lines", lines)));
    let mut runs = [
        sandbox.spawn(&["run", "bar"]),
        sandbox.spawn(&["run", "lines"]),
    ];
    let told = "its last line is a progress meter redrawn in place";
    let bar = wait_for(&sandbox, "bar", "told of its meter", |job| {
        reasons(job).contains(told)
    });
    assert!(reasons(&bar).contains("declare log_progress"), "{bar:#}");
    let lines = wait_for(&sandbox, "lines", "running", |job| {
        job["state"] == "RUNNING"
    });
    assert!(!reasons(&lines).contains(told), "{lines:#}");
    for run in &mut runs {
        let _ = Command::new("kill")
            .args(["-TERM", &run.id().to_string()])
            .status();
        let _ = run.wait();
    }
}

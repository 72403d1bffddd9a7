//! Jobs that run on a cluster (SPEC §12), on a real one-node Slurm cluster (Debian's
//! slurm-wlm and munge, started by tests/common/slurm.rs with its own conf, ports and munge
//! socket; `.ci/run` installs them): a running batch job with tqdm in its StdOut, one held and
//! one queued behind it, a job that exits 3, one cancelled, one past its time limit, a
//! restart by submit and by requeue, and the controller (then munge) stopped. The real
//! `mihari` binary reads the cluster through `SLURM_CONF`, as Slurm's own tools do; each test
//! names its Slurm jobs after itself, so the tests share one cluster without reading each
//! other's jobs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

#[path = "common/slurm.rs"]
mod cluster;

use cluster::Cluster;

/// A jobs file of the test's own, and mihari pointed at `cluster` through SLURM_CONF.
struct Watch<'a> {
    dir: tempfile::TempDir,
    cluster: &'a Cluster,
}

impl<'a> Watch<'a> {
    fn new(cluster: &'a Cluster, jobs: &str) -> Watch<'a> {
        let dir = tempfile::tempdir().unwrap();
        let watch = Watch { dir, cluster };
        watch.write(jobs);
        watch
    }

    fn write(&self, jobs: &str) {
        let text = format!(
            "settings:\n  state_dir: {}\njobs:\n{jobs}",
            self.dir.path().join("state").display()
        );
        fs::write(self.config(), text).unwrap();
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("jobs.yaml")
    }

    fn mihari(&self, args: &[&str]) -> Output {
        Command::cargo_bin("mihari")
            .unwrap()
            .env("SLURM_CONF", &self.cluster.conf)
            .env("NO_COLOR", "1")
            .arg("--config")
            .arg(self.config())
            .args(args)
            .output()
            .unwrap()
    }

    /// `check --json`'s row of job `id`, and the exit code.
    fn row(&self, id: &str) -> (Value, i32) {
        let out = self.mihari(&["check", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "check --json: {e}: {} {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let row = report["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|job| job["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no row '{id}' in {report}"));
        (row, out.status.code().unwrap_or(-1))
    }

    /// Waits until `check --json` says `want` of job `id`.
    fn row_when(&self, id: &str, within: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (row, _) = self.row(id);
            if want(&row) {
                return row;
            }
            assert!(Instant::now() < deadline, "never as wanted: {row:#}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn reasons(row: &Value) -> String {
    row["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A batch script running /usr/bin/python3 with tqdm (python3-tqdm), as a training loop does.
fn tqdm_script(dir: &Path, steps: u32) -> PathBuf {
    let script = dir.join(format!("tqdm-{steps}.sh"));
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec /usr/bin/python3 -c 'import time, tqdm\n\
             for i in tqdm.tqdm(range({steps}), mininterval=0.2): time.sleep(0.5)'\n"
        ),
    )
    .unwrap();
    script
}

#[test]
fn a_running_batch_job_is_running_with_its_stdout_as_its_log() {
    let cluster = Cluster::shared();
    let script = tqdm_script(&cluster.jobs_dir(), 600);
    let out = format!("{}/%x-%j.out", cluster.jobs_dir().display());
    let id = cluster.sbatch(&["-J", "t-running", "-o", &out, script.to_str().unwrap()]);
    let watch = Watch::new(
        cluster,
        "  - id: train\n    slurm: { job_name: t-running }\n    log_progress: { preset: tqdm }\n    should_run_when: [not_complete]\n",
    );
    let row = watch.row_when("train", Duration::from_secs(60), |row| {
        row["done"].as_u64().unwrap_or(0) > 0
    });
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    assert_eq!(row["liveness"], "alive", "{row:#}");
    assert_eq!(row["bucket"], Value::Null, "{row:#}");
    assert_eq!(row["slurm"]["id"], id.to_string());
    assert_eq!(row["slurm"]["state"], "RUNNING");
    assert_eq!(
        row["expected_total"], 600,
        "tqdm's total, read from StdOut: {row:#}"
    );
    assert_eq!(row["progress_source"], "log", "{row:#}");
    let stdout = format!("{}/t-running-{id}.out", cluster.jobs_dir().display());
    assert_eq!(
        row["slurm"]["stdout"],
        stdout.as_str(),
        "the pattern filled in"
    );
    assert!(
        reasons(&row).contains(&format!("Slurm job {id} (RUNNING on ")),
        "{row:#}"
    );
    // The textfile's metrics name Slurm's state, and pass promtool's lint when it is here.
    let metrics = watch.mihari(&["check", "--prometheus"]);
    let text = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        text.contains("mihari_job_slurm_state{job_id=\"train\",state=\"RUNNING\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(&format!("mihari_job_slurm_job_id{{job_id=\"train\"}} {id}")),
        "{text}"
    );
    if let Ok(mut promtool) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        promtool
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let linted = promtool.wait_with_output().unwrap();
        assert!(
            linted.status.success(),
            "{}{}",
            String::from_utf8_lossy(&linted.stdout),
            String::from_utf8_lossy(&linted.stderr)
        );
    }
    cluster.run("scancel", &[&id.to_string()]);
}

#[test]
fn a_held_job_and_one_queued_behind_it_wait_in_the_queue_with_slurms_reason_never_restarted() {
    let cluster = Cluster::shared();
    let held = cluster.sbatch(&["-J", "t-held", "--hold", "--wrap", "sleep 5"]);
    let behind = cluster.sbatch(&[
        "-J",
        "t-behind",
        &format!("--dependency=afterok:{held}"),
        "--wrap",
        "sleep 5",
    ]);
    let watch = Watch::new(
        cluster,
        "  - id: held\n    slurm: { job_name: t-held, submit: [\"false\"] }\n    should_run_when: [not_succeeded]\n\
         \x20 - id: behind\n    slurm: { job_name: t-behind }\n    should_run_when: [not_succeeded]\n    timeouts: { queue_sec: 1 }\n",
    );
    let (row, _) = watch.row("held");
    assert_eq!(row["state"], "NOT_RUNNING", "{row:#}");
    assert_eq!(
        row["bucket"],
        Value::Null,
        "a queue wait is not a death: {row:#}"
    );
    assert_eq!(row["slurm"]["state"], "PENDING");
    assert_eq!(row["slurm"]["reason"], "JobHeldUser");
    assert!(reasons(&row).contains("queued in Slurm"), "{row:#}");
    assert!(reasons(&row).contains("held by its user"), "{row:#}");
    // A restart of a queued job is refused: it would submit a twin.
    let refused = watch.mihari(&["restart", "held", "--yes"]);
    assert!(!refused.status.success(), "a queued job is never restarted");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        said.contains("refused") && said.contains("NOT_RUNNING"),
        "{said}"
    );
    // The one behind waits on a dependency; past its queue_sec it is STALE, not dead.
    std::thread::sleep(Duration::from_millis(1500));
    let (row, code) = watch.row("behind");
    assert_eq!(row["state"], "NOT_RUNNING", "{row:#}");
    assert_eq!(row["slurm"]["reason"], "Dependency", "{row:#}");
    assert_eq!(row["bucket"], "STALE", "{row:#}");
    assert!(reasons(&row).contains("queue_sec exceeded"), "{row:#}");
    assert_eq!(code, 1, "STALE is a warning");
    cluster.run("scancel", &[&held.to_string(), &behind.to_string()]);
}

#[test]
fn a_job_that_exits_3_is_a_failed_run_recorded_once_and_restarted_by_submit() {
    let cluster = Cluster::shared();
    let first = cluster.sbatch(&["-J", "t-exit3", "--wrap", "echo bye; exit 3"]);
    cluster.wait_for_state(first, &["FAILED"], Duration::from_secs(60));
    let watch = Watch::new(
        cluster,
        "  - id: oneshot\n    slurm: { job_name: t-exit3, submit: [\"sbatch\", \"-J\", \"t-exit3\", \"--wrap\", \"sleep 30\"] }\n    should_run_when: [not_succeeded]\n",
    );
    let (row, code) = watch.row("oneshot");
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    assert_eq!(row["bucket"], "RESTART", "it ran before: {row:#}");
    assert_eq!(
        row["last_exit"]["code"], 3,
        "768 is the raw status of exit 3: {row:#}"
    );
    assert_eq!(row["slurm"]["exit"]["code"], 3);
    assert_eq!(row["slurm"]["exit"]["status"], 768);
    assert_eq!(row["slurm"]["state"], "FAILED");
    assert_eq!(code, 2);

    // The watcher records the end once, however many passes see it.
    for _ in 0..2 {
        let pass = watch.mihari(&["watch", "--once"]);
        assert_eq!(
            pass.status.code(),
            Some(2),
            "a pass over a job to restart: {}",
            String::from_utf8_lossy(&pass.stderr)
        );
    }
    let events = watch.mihari(&["events", "--json", "--kind", "exited"]);
    let exited: Vec<Value> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert_eq!(
        exited[0]["reason"],
        format!("exit 3; Slurm job {first} FAILED (NonZeroExitCode)")
    );

    // restart runs submit, and is verified when Slurm lists the new job.
    let restart = watch.mihari(&["restart", "oneshot", "--yes"]);
    let said = String::from_utf8_lossy(&restart.stdout);
    assert!(
        restart.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&restart.stderr)
    );
    let verified = watch.mihari(&["events", "--json", "--kind", "verified"]);
    let verified: Value = serde_json::from_str(
        String::from_utf8_lossy(&verified.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    let reason = verified["reason"].as_str().unwrap();
    let second: u64 = reason
        .strip_prefix("Slurm job ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("the new id is recorded: {reason}"));
    assert!(second > first, "{reason}");
    assert!(reason.ends_with("is listed"), "{reason}");
    let row = watch.row_when("oneshot", Duration::from_secs(30), |row| {
        row["slurm"]["id"]
            .as_str()
            .and_then(|id| id.parse::<u64>().ok())
            == Some(second)
    });
    assert!(
        ["RUNNING", "NOT_RUNNING"].contains(&row["state"].as_str().unwrap()),
        "the new job runs or waits: {row:#}"
    );
    cluster.run("scancel", &[&second.to_string()]);
}

#[test]
fn a_cancelled_job_ended_as_cancelled_is_never_a_success() {
    let cluster = Cluster::shared();
    let id = cluster.sbatch(&["-J", "t-cancel", "--wrap", "sleep 120"]);
    cluster.wait_for_state(id, &["RUNNING"], Duration::from_secs(60));
    cluster.run("scancel", &[&id.to_string()]);
    cluster.wait_for_state(id, &["CANCELLED"], Duration::from_secs(60));
    let watch = Watch::new(
        cluster,
        "  - id: cancelled\n    slurm: { job_name: t-cancel }\n    should_run_when: [not_succeeded]\n",
    );
    let (row, _) = watch.row("cancelled");
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    assert_eq!(row["slurm"]["exit"]["ended_as"], "CANCELLED", "{row:#}");
    assert_eq!(row["last_exit"]["ended_as"], "CANCELLED", "{row:#}");
    assert!(
        reasons(&row).contains("the last run ended as CANCELLED"),
        "{row:#}"
    );
}

#[test]
fn a_job_past_its_time_limit_ended_as_timeout() {
    let cluster = Cluster::shared();
    // Slurm's limits are whole minutes: this takes a minute or two.
    let id = cluster.sbatch(&["-J", "t-timeout", "--time=1", "--wrap", "sleep 300"]);
    let watch = Watch::new(
        cluster,
        "  - id: limited\n    slurm: { job_name: t-timeout }\n    should_run_when: [not_succeeded]\n",
    );
    cluster.wait_for_state(id, &["RUNNING"], Duration::from_secs(60));
    let (row, _) = watch.row("limited");
    assert_eq!(row["state"], "RUNNING", "{row:#}");
    cluster.wait_for_state(id, &["TIMEOUT"], Duration::from_secs(240));
    let (row, code) = watch.row("limited");
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    assert_eq!(row["slurm"]["exit"]["ended_as"], "TIMEOUT", "{row:#}");
    assert!(reasons(&row).contains("ended as TIMEOUT"), "{row:#}");
    assert_eq!(code, 2);
}

#[test]
fn restart_by_requeue_runs_the_same_slurm_job_again() {
    let cluster = Cluster::shared();
    let id = cluster.sbatch(&["-J", "t-requeue", "--wrap", "exit 3"]);
    cluster.wait_for_state(id, &["FAILED"], Duration::from_secs(60));
    let watch = Watch::new(
        cluster,
        &format!(
            "  - id: again\n    slurm: {{ job_id: {id}, requeue: true }}\n    should_run_when: [not_succeeded]\n"
        ),
    );
    let (row, _) = watch.row("again");
    assert_eq!(row["state"], "SHOULD_BE_RUNNING", "{row:#}");
    let restart = watch.mihari(&["restart", "again", "--yes"]);
    assert!(
        restart.status.success(),
        "{}{}",
        String::from_utf8_lossy(&restart.stdout),
        String::from_utf8_lossy(&restart.stderr)
    );
    let job = cluster.job(id).expect("Slurm still lists it");
    assert_eq!(job["restart_cnt"], 1, "requeued once: {job:#}");
    let spawned = watch.mihari(&["events", "--json", "--kind", "spawned"]);
    assert!(
        String::from_utf8_lossy(&spawned.stdout).contains(&format!("requeued Slurm job {id}")),
        "{}",
        String::from_utf8_lossy(&spawned.stdout)
    );
    let _ = cluster.command("scancel").arg(id.to_string()).output();
}

#[test]
fn a_controller_that_cannot_be_reached_is_unknown_never_not_running() {
    // A cluster of this test's own: stopping its controller must not touch the others.
    let cluster = Cluster::start();
    let id = cluster.sbatch(&["-J", "t-down", "--wrap", "sleep 300"]);
    cluster.wait_for_state(id, &["RUNNING"], Duration::from_secs(60));
    let watch = Watch::new(
        &cluster,
        "  - id: remote\n    slurm: { job_name: t-down, submit: [\"sbatch\", \"--wrap\", \"true\"] }\n    should_run_when: [not_succeeded]\n",
    );
    let (row, _) = watch.row("remote");
    assert_eq!(row["state"], "RUNNING", "{row:#}");

    cluster.stop_controller();
    let (row, code) = watch.row("remote");
    assert_eq!(
        row["state"], "UNKNOWN",
        "never NOT_RUNNING nor SHOULD_BE_RUNNING: {row:#}"
    );
    assert_eq!(row["liveness"], "unknown", "{row:#}");
    assert!(
        reasons(&row).contains("slurm: fault: squeue cannot list the jobs"),
        "{row:#}"
    );
    assert!(reasons(&row).contains("slurm_load_jobs"), "{row:#}");
    assert_eq!(code, 1, "UNKNOWN is STALE: a warning, never a restart");
    let refused = watch.mihari(&["restart", "remote", "--yes"]);
    assert!(!refused.status.success(), "never restarted while unknown");

    // munge down too: the fault names munge.
    cluster.stop_munged();
    let (row, _) = watch.row("remote");
    assert_eq!(row["state"], "UNKNOWN", "{row:#}");
    assert!(reasons(&row).to_lowercase().contains("munge"), "{row:#}");

    // Back up: Slurm's word again.
    cluster.start_munged();
    cluster.start_controller();
    let row = watch.row_when("remote", Duration::from_secs(60), |row| {
        row["state"] == "RUNNING"
    });
    assert_eq!(row["slurm"]["id"], id.to_string());
}

// Slurm 22.05's real output, captured from the test cluster into tests/fixtures/slurm, read
// by the pure parser (and by `read_squeue` through a stand-in `squeue` that prints it).

fn fixture(name: &str) -> Vec<u8> {
    fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/slurm")
            .join(name),
    )
    .unwrap()
}

fn parsed(name: &str) -> Vec<mihari::core::SlurmJob> {
    mihari::probe::slurm::parse_squeue(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn by_id(jobs: &[mihari::core::SlurmJob], id: u64) -> &mihari::core::SlurmJob {
    jobs.iter().find(|job| job.id == id).unwrap()
}

#[test]
fn every_state_of_a_real_squeue_is_read_in_slurms_words() {
    let jobs = parsed("squeue-22.05-states.json");
    let rows = [
        // id, state, reason, the end as a run's end
        (1, "FAILED", Some("NonZeroExitCode"), Some("exit 1")),
        (2, "PENDING", Some("JobHeldUser"), None),
        (3, "FAILED", Some("NonZeroExitCode"), Some("exit 3")),
        (
            4,
            "CANCELLED",
            Some("Resources"),
            Some("ended as CANCELLED"),
        ),
        (5, "TIMEOUT", Some("TimeLimit"), Some("ended as TIMEOUT")),
        (9, "RUNNING", None, None),
        (10, "COMPLETED", None, Some("exit 0")),
        (11, "SUSPENDED", None, None),
        (
            12,
            "FAILED",
            Some("JobLaunchFailure"),
            Some("killed by SIGKILL"),
        ),
    ];
    for (id, state, reason, end) in rows {
        let job = by_id(&jobs, id);
        assert_eq!(job.state, state, "{job:?}");
        assert_eq!(job.reason.as_deref(), reason, "{job:?}");
        assert_eq!(job.end_words().as_deref(), end, "{job:?}");
    }
    let running = by_id(&jobs, 9);
    assert_eq!(
        running.ended, None,
        "a running job's end_time is its limit, not an end"
    );
    assert_eq!(
        running.stdout.as_deref(),
        Some(Path::new("/tmp/slurmtry.4h3z/jobs/m-tqdm-9.out")),
        "sbatch -o '%x-%j.out' filled in"
    );
    assert_eq!(by_id(&jobs, 3).exit_status, Some(768));
    assert!(
        by_id(&jobs, 2).started.is_none(),
        "a queued job has not started"
    );
}

#[test]
fn array_tasks_and_output_patterns_are_read_as_sbatch_wrote_them() {
    let jobs = parsed("squeue-22.05-array-and-patterns.json");
    assert_eq!(
        by_id(&jobs, 13).stdout.as_deref(),
        Some(Path::new(
            "/tmp/slurmtry.4h3z/jobs/p-13-batch-vm-0-0-root-m-pat-00013-%.out"
        ))
    );
    let task = by_id(&jobs, 15);
    assert_eq!(task.array.as_deref(), Some("14_0"));
    assert_eq!(
        task.stdout.as_deref(),
        Some(Path::new("/tmp/slurmtry.4h3z/jobs/a-14-0-15.out"))
    );
    let pending = parsed("squeue-22.05-pending-array.json");
    let array = by_id(&pending, 8);
    assert_eq!(array.array.as_deref(), Some("8_[0-4]"));
    assert_eq!(array.stdout, None, "which task's file is not known yet");
    // sbatch's default file, in the folder it was submitted from.
    assert_eq!(
        by_id(&pending, 7).stdout.as_deref(),
        Some(Path::new("/tmp/slurmtry.4h3z/jobs/slurm-7.out"))
    );
}

#[test]
fn a_controller_down_is_a_fault_though_squeue_exits_0_with_an_empty_list() {
    let fault = mihari::probe::slurm::parse_squeue(&fixture("squeue-22.05-controller-down.json"))
        .expect_err("an empty list with errors is no list");
    assert!(fault.contains("slurm_load_jobs"), "{fault}");
    assert!(
        fault.contains("is slurmctld running and reachable"),
        "{fault}"
    );
}

/// A stand-in `squeue` that prints `stdout`, `stderr` and exits `code`, or sleeps first.
fn stand_in(dir: &Path, stdout: &str, stderr: &str, code: i32, sleep: u32) -> PathBuf {
    let program = dir.join("squeue");
    fs::write(
        &program,
        format!("#!/bin/sh\nsleep {sleep}\ncat '{stdout}'\ncat '{stderr}' >&2\nexit {code}\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    program
}

#[test]
fn a_munge_error_is_a_fault_that_names_munge() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm");
    let program = stand_in(
        dir.path(),
        &fixtures
            .join("squeue-22.05-munge-down.json")
            .display()
            .to_string(),
        &fixtures
            .join("squeue-22.05-munge-down.stderr")
            .display()
            .to_string(),
        0,
        0,
    );
    let fault = mihari::probe::slurm::read_squeue(&program, Duration::from_secs(10))
        .expect_err("a munge error is a fault");
    assert!(fault.contains("Munge encode failed"), "{fault}");
}

#[test]
fn a_hung_squeue_is_killed_and_a_fault_never_a_hung_pass() {
    let dir = tempfile::tempdir().unwrap();
    let program = stand_in(dir.path(), "/dev/null", "/dev/null", 0, 600);
    let fault = mihari::probe::slurm::read_squeue(&program, Duration::from_secs(1))
        .expect_err("no answer is a fault");
    assert!(
        fault.contains("did not answer within 1 s (killed)"),
        "{fault}"
    );
    let left = Command::new("pgrep")
        .args(["-f", &format!("sh {}", program.display())])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "the stand-in is gone");
}

#[test]
fn json_of_a_version_not_known_or_not_json_is_a_fault_never_an_empty_list() {
    let text = String::from_utf8(fixture("squeue-22.05-states.json"))
        .unwrap()
        .replace("openapi\\/v0.0.38", "openapi\\/v0.0.41")
        .replace("\"release\": \"22.05.8\"", "\"release\": \"24.05.1\"");
    let fault = mihari::probe::slurm::parse_squeue(text.as_bytes()).expect_err("not known");
    assert!(
        fault.contains("'openapi/v0.0.41' (Slurm 24.05.1)"),
        "{fault}"
    );
    let fault = mihari::probe::slurm::parse_squeue(b"squeue: error: x").expect_err("not JSON");
    assert!(fault.contains("not JSON"), "{fault}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("squeue");
    let fault = mihari::probe::slurm::read_squeue(&missing, Duration::from_secs(1))
        .expect_err("not installed");
    assert!(fault.contains("slurm-client"), "{fault}");
}

#[test]
fn one_squeue_per_pass_whatever_the_number_of_slurm_jobs() {
    // A stand-in squeue on PATH that counts its calls and prints real output.
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm");
    let calls = dir.path().join("calls");
    let bin = dir.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let program = bin.join("squeue");
    fs::write(
        &program,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\ncat '{}'\n",
            calls.display(),
            fixtures.join("squeue-22.05-states.json").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let jobs: String = ["m-run", "m-held", "m-exit3", "m-time", "m-tqdm", "m-susp"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                "  - id: j{i}\n    slurm: {{ job_name: {name}, user: root }}\n    should_run_when: [not_succeeded]\n"
            )
        })
        .collect();
    let config = dir.path().join("jobs.yaml");
    fs::write(
        &config,
        format!(
            "settings:\n  state_dir: {}\njobs:\n{jobs}",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::cargo_bin("mihari")
        .unwrap()
        .env("PATH", path)
        .args(["check", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<&str> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["slurm"]["state"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(states.len(), 6);
    for state in ["FAILED", "PENDING", "TIMEOUT", "RUNNING", "SUSPENDED"] {
        assert!(states.contains(&state), "{states:?}");
    }
    assert_eq!(
        fs::read_to_string(&calls).unwrap(),
        "--json\n",
        "one squeue --json for six Slurm jobs"
    );
}

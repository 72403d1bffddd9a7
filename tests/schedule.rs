//! Jobs that run on a schedule, on the real tools: Debian's `cron` daemon firing `mihari run`
//! each minute and a `flock -n LOCK ...; mihari heartbeat JOB --exit $?` line, stopped to make
//! a run missed; `flock -n` finding the run before it still going; the watcher telling a
//! missed run (or running it, when `auto_restart` allows); its one timer set for the moment a
//! job turns overdue; and summer time in Berlin under `faketime`.
//!
//! The incident: a cron job under `flock -n` that ran at 12:00 and exited 0 is idle by plan
//! until 12:20, yet every predicate said it should be running (RESTART, `check` exiting 2
//! between runs); and a cron line that stopped firing was never noticed (with `mihari run` in
//! the crontab it read COMPLETE for ever).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mihari");

/// A private folder with a jobs file, its state_dir inside it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// A sandbox whose jobs file has `settings` lines (each starting with two spaces) and
    /// `jobs` (YAML, each starting with `  - id:`).
    fn new(settings: &str, jobs: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).expect("chmod");
        let sandbox = Sandbox { dir };
        let path = sandbox.path("jobs.yaml");
        fs::write(
            &path,
            format!("settings:\n  state_dir: state\n{settings}jobs:\n{jobs}"),
        )
        .expect("write jobs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        sandbox
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn shown(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(self.path("jobs.yaml"))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        command
    }

    fn mihari(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("mihari runs")
    }

    /// A shell line run in the sandbox, as a crontab line would run it; its output.
    fn shell(&self, line: &str) -> Output {
        Command::new("/bin/sh")
            .args(["-c", line])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("sh runs")
    }

    /// `mihari check --json`: its exit code and the report.
    fn check(&self) -> (i32, Value) {
        parse_check(self.mihari(&["check", "--json"]))
    }

    fn job(&self, id: &str) -> Value {
        job_in(&self.check().1, id)
    }

    /// The event log's events of `job`, oldest first, as `mihari events --json` prints them.
    fn events(&self, job: &str) -> Vec<Value> {
        let output = self.mihari(&["events", "--json", "--job", job]);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .collect()
    }

    /// Waits (up to `secs`) until `job` satisfies `what`; the last object seen otherwise.
    fn wait_for(&self, id: &str, secs: u64, what: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let job = self.job(id);
            if what(&job) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "never happened to {id}:\n{job:#}"
            );
            thread::sleep(Duration::from_millis(500));
        }
    }
}

fn parse_check(output: Output) -> (i32, Value) {
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "check --json is JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().expect("an exit code"), report)
}

fn job_in(report: &Value, id: &str) -> Value {
    report["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no job {id} in {report:#}"))
}

fn first_reason(job: &Value) -> &str {
    job["reasons"][0].as_str().unwrap_or_default()
}

fn at(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a time, not {value}"))
        .parse()
        .expect("RFC 3339")
}

fn tool(path: &str) -> &str {
    assert!(
        Path::new(path).exists(),
        "this test needs '{path}' (see docs/architecture.md: what the tests need)"
    );
    path
}

/// `promtool check metrics` on `text`: it passes with nothing to say (no lint).
fn assert_promtool_accepts(text: &str) {
    use std::io::Write as _;
    let mut promtool = Command::new(tool("/usr/bin/promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let output = promtool.wait_with_output().expect("promtool ends");
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics: {output:?}\non:\n{text}"
    );
}

/// Debian's cron daemon, in a mount namespace of its own: its `/etc/cron.d` is a folder of
/// this test's with one file in it, its `/etc/crontab` and spool are empty and its `/run`
/// (where it keeps its pid file) is private, so it runs beside the machine's cron and any
/// other test's. Dropping it stops it: the timer that fires the jobs is gone.
struct CronDaemon {
    daemon: Child,
    _root: tempfile::TempDir,
}

impl CronDaemon {
    /// Starts cron with `lines` (crontab lines with a user field, as /etc/cron.d takes them).
    fn start(lines: &str) -> CronDaemon {
        let cron = tool("/usr/sbin/cron");
        let root = tempfile::tempdir().expect("tempdir");
        let cron_d = root.path().join("cron.d");
        let spool = root.path().join("spool");
        for folder in [&cron_d, &spool] {
            fs::create_dir(folder).expect("mkdir");
        }
        fs::set_permissions(&cron_d, fs::Permissions::from_mode(0o755)).expect("chmod");
        let file = cron_d.join("mihari-schedule-test");
        fs::write(&file, lines).expect("write the cron.d file");
        // cron ignores a file that group or others may write.
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let crontab = root.path().join("crontab");
        fs::write(&crontab, "").expect("write an empty crontab");
        let script = format!(
            "mount --bind '{}' /etc/cron.d && mount --bind '{}' /etc/crontab && \
             mount --bind '{}' /var/spool/cron/crontabs && mount -t tmpfs tmpfs /run && \
             exec {cron} -f",
            cron_d.display(),
            crontab.display(),
            spool.display()
        );
        let said = root.path().join("cron.stderr");
        let mut daemon = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&said).expect("cron's stderr"))
            .spawn()
            .expect("unshare starts cron");
        // A daemon that cannot start (no right to make a mount namespace) says so at once.
        thread::sleep(Duration::from_secs(1));
        if let Ok(Some(status)) = daemon.try_wait() {
            panic!(
                "cron did not start in a mount namespace of its own ({status}; unshare --mount \
                 needs root): {}",
                fs::read_to_string(&said).unwrap_or_default()
            );
        }
        CronDaemon {
            daemon,
            _root: root,
        }
    }
}

impl Drop for CronDaemon {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A long-running `mihari watch` of a sandbox, stopped (SIGTERM) when dropped.
struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Both capabilities at once, as a crontab holds them: `mihari run ticker` each minute, and a
/// `flock -n` line that reports its end with `mihari heartbeat flocked --exit $?`. Between runs
/// both are NOT_RUNNING with their next due time and `check` exits 0; once the daemon stops,
/// both turn overdue (RESTART, `check` exits 2) and the watcher tells it once, as a job the
/// machine cannot restart.
#[test]
fn a_cron_daemon_firing_each_minute_is_idle_between_runs_and_overdue_once_it_stops() {
    let flock = tool("/usr/bin/flock");
    let told_path = tempfile::NamedTempFile::new().expect("temp file");
    let told = told_path.path().display().to_string();
    let sandbox = Sandbox::new(
        &format!(
            "  escalate_command: [\"sh\", \"-c\", \"printf '%s\\\\n' \\\"$1\\\" >> {told}\", \
             \"tell\"]\n"
        ),
        "  - id: ticker\n    lock: ticker.lock\n    log: ticker.log\n    \
         restart: { command: [sh, -c, 'echo tick; sleep 1'] }\n    \
         should_run_when: [overdue]\n    schedule: { cron: \"* * * * *\", grace: 1m }\n\
         \x20 - id: flocked\n    lock: flocked.lock\n    log: flocked.log\n    \
         should_run_when: [overdue]\n    schedule: { every: 1m, grace: 1m }\n",
    );
    let jobs = sandbox.shown("jobs.yaml");
    let dir = sandbox.dir.path().display().to_string();
    let cron = CronDaemon::start(&format!(
        "* * * * * root {BIN} --config {jobs} run ticker >> {dir}/ticker.cron 2>&1\n\
         * * * * * root cd {dir} && {flock} -n {dir}/flocked.lock sh -c 'echo flocked; sleep 1' \
         >> {dir}/flocked.log 2>&1; {BIN} --config {jobs} heartbeat flocked --exit $? \
         >> {dir}/flocked.cron 2>&1\n"
    ));
    let watcher = Watcher(
        sandbox
            .command(&["watch"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mihari watch starts"),
    );

    // Cron fires at the next minute; between two runs each job is idle by plan.
    let idle = |job: &Value| job["state"] == "NOT_RUNNING" && job["last_exit"]["code"] == 0;
    for id in ["ticker", "flocked"] {
        let job = sandbox.wait_for(id, 150, idle);
        assert_eq!(job["bucket"], Value::Null, "{job:#}");
        let reason = first_reason(&job);
        assert!(
            reason.starts_with("ran ") && reason.contains(" ok; next due by "),
            "{job:#}"
        );
        assert!(
            at(&job["next_due"]) > at(&job["last_exit"]["at"]),
            "{job:#}"
        );
    }
    let ticker = sandbox.job("ticker");
    assert!(
        first_reason(&ticker).contains("cron '* * * * *' in local time + 1 min grace"),
        "{ticker:#}"
    );
    let output = sandbox.mihari(&["check"]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "between runs:\n{table}");
    assert!(table.contains("next due by"), "{table}");
    let metrics = sandbox.mihari(&["check", "--prometheus"]);
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    for id in ["ticker", "flocked"] {
        assert!(
            metrics.contains(&format!(
                "mihari_job_next_due_timestamp_seconds{{job_id=\"{id}\"}} "
            )),
            "{metrics}"
        );
    }
    assert_promtool_accepts(&metrics);

    // The timer stops: no run comes, and each job turns overdue one period + grace after its
    // last success.
    drop(cron);
    let overdue = |job: &Value| job["state"] == "SHOULD_BE_RUNNING";
    let ticker = sandbox.wait_for("ticker", 200, overdue);
    assert_eq!(ticker["bucket"], "RESTART", "{ticker:#}");
    assert!(
        first_reason(&ticker).starts_with("overdue: the last success was ")
            && first_reason(&ticker).contains(", due at "),
        "{ticker:#}"
    );
    let flocked = sandbox.wait_for("flocked", 200, overdue);
    assert_eq!(flocked["bucket"], "RESTART", "{flocked:#}");
    assert!(
        first_reason(&flocked).contains("due every 1 min + 1 min grace"),
        "{flocked:#}"
    );
    let (code, _) = sandbox.check();
    assert_eq!(code, 2, "a missed run is CRITICAL");

    // The watcher tells each missed run once, as a job the machine cannot restart.
    let deadline = Instant::now() + Duration::from_secs(60);
    let escalations = loop {
        let text = fs::read_to_string(&told).unwrap_or_default();
        if text.contains("ticker missed a run") && text.contains("flocked missed a run") {
            break text;
        }
        assert!(Instant::now() < deadline, "never told:\n{text}");
        thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        escalations.matches("ticker missed a run").count(),
        1,
        "{escalations}"
    );
    let kinds: Vec<String> = sandbox
        .events("ticker")
        .iter()
        .filter(|e| e["kind"] == "escalated")
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["kind unrestartable"], "{kinds:?}");
    drop(watcher);
}

/// The same `flock -n` line run twice at once, as cron does when a run outlasts its minute:
/// the second finds the lock taken and exits 1 without doing anything. That is recorded as a
/// run that did not start (`duplicate`), not as a failed run, so the job is not overdue at
/// once; the first run's own end decides. A failure reported from inside the lock, or with
/// nobody holding it, is a failed run: overdue at once, naming its exit.
#[test]
fn flock_n_finding_the_run_before_it_still_going_is_not_a_failed_run() {
    let flock = tool("/usr/bin/flock");
    let sandbox = Sandbox::new(
        "",
        "  - id: flocked\n    lock: flocked.lock\n    log: flocked.log\n    \
         should_run_when: [overdue]\n    schedule: { every: 1h, grace: 10m }\n",
    );
    let jobs = sandbox.shown("jobs.yaml");
    let line = |command: &str| {
        format!(
            "{flock} -n flocked.lock {command} >> flocked.log 2>&1; {BIN} --config {jobs} \
             heartbeat flocked --exit $?"
        )
    };
    // The run before: holds the lock for a while, then reports its own end.
    let mut first = Command::new("/bin/sh")
        .args(["-c", &line("sleep 4")])
        .current_dir(sandbox.dir.path())
        .stdin(Stdio::null())
        .spawn()
        .expect("the first run starts");
    let running = sandbox.wait_for("flocked", 20, |job| job["state"] == "RUNNING");
    assert_eq!(running["liveness"], "alive", "{running:#}");

    // The next one finds it going: flock -n exits 1.
    let second = sandbox.shell(&line("true"));
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        said.contains("found the one before it still going (flock -n)"),
        "{said}"
    );
    let kinds: Vec<Value> = sandbox
        .events("flocked")
        .iter()
        .map(|e| e["kind"].clone())
        .collect();
    assert_eq!(kinds, ["duplicate"], "no run's end is recorded for it");
    let job = sandbox.job("flocked");
    assert_eq!(job["state"], "RUNNING", "{job:#}");

    // The first run ends with exit 0: idle by plan until its next due time.
    assert!(first.wait().expect("the first run ends").success());
    let job = sandbox.job("flocked");
    assert_eq!(job["state"], "NOT_RUNNING", "{job:#}");
    assert!(first_reason(&job).starts_with("ran "), "{job:#}");
    assert_eq!(sandbox.check().0, 0);

    // A failure from inside the lock is the run's own end: overdue at once, naming the exit.
    let inside = sandbox.shell(&format!(
        "{flock} -n flocked.lock sh -c '{BIN} --config {jobs} heartbeat flocked --exit 4'"
    ));
    assert!(inside.status.success(), "{inside:?}");
    let job = sandbox.job("flocked");
    assert_eq!(job["state"], "SHOULD_BE_RUNNING", "{job:#}");
    assert_eq!(job["bucket"], "RESTART", "{job:#}");
    assert!(
        first_reason(&job).starts_with("overdue: the last run exited 4 at "),
        "{job:#}"
    );
    assert_eq!(at(&job["next_due"]), at(&job["last_exit"]["at"]), "{job:#}");

    // So is one with nobody holding the lock.
    sandbox.shell(&line("true"));
    let job = sandbox.job("flocked");
    assert_eq!(job["state"], "NOT_RUNNING", "{job:#}");
    sandbox.shell(&line("false"));
    let (code, report) = sandbox.check();
    let job = job_in(&report, "flocked");
    assert_eq!(job["state"], "SHOULD_BE_RUNNING", "{job:#}");
    assert!(
        first_reason(&job).starts_with("overdue: the last run exited 1 at "),
        "{job:#}"
    );
    assert_eq!(code, 2);
}

/// A run reported failed: the watcher's pass tells a job it may not restart once (kind 4,
/// the machine cannot restart it), and runs one `auto_restart` allows — whose own exit 0 then
/// makes it idle by plan again.
#[test]
fn a_missed_run_is_told_once_by_the_watcher_or_run_by_it_when_auto_restart_allows() {
    let told_path = tempfile::NamedTempFile::new().expect("temp file");
    let told = told_path.path().display().to_string();
    let sandbox = Sandbox::new(
        &format!(
            "  escalate_command: [\"sh\", \"-c\", \"printf '%s\\\\n' \\\"$1\\\" >> {told}\", \
             \"tell\"]\n"
        ),
        "  - id: by_hand\n    lock: by_hand.lock\n    log: by_hand.log\n    \
         restart: { command: [sh, -c, 'echo ran'] }\n    \
         should_run_when: [overdue]\n    schedule: { every: 1d, grace: 1h }\n\
         \x20 - id: by_watcher\n    lock: by_watcher.lock\n    log: by_watcher.log\n    \
         restart: { command: [sh, -c, 'echo ran >> by_watcher.runs; sleep 4'] }\n    \
         auto_restart: true\n    \
         auto_restart_reason: 'a missed nightly run is safe to run again'\n    \
         should_run_when: [overdue]\n    schedule: { every: 1d, grace: 1h }\n",
    );
    for id in ["by_hand", "by_watcher"] {
        let beat = sandbox.mihari(&["heartbeat", id, "--exit", "2"]);
        assert!(beat.status.success(), "{beat:?}");
        let job = sandbox.job(id);
        assert_eq!(job["state"], "SHOULD_BE_RUNNING", "{job:#}");
    }
    for _ in 0..2 {
        let pass = sandbox.mihari(&["watch", "--once", "--interval", "300"]);
        assert!(
            pass.status.code().is_some(),
            "the pass ends: {}",
            String::from_utf8_lossy(&pass.stderr)
        );
    }
    let text = fs::read_to_string(&told).unwrap_or_default();
    assert_eq!(text.matches("by_hand missed a run").count(), 1, "{text}");
    assert!(!text.contains("by_watcher"), "{text}");
    let ran = sandbox
        .wait_for("by_watcher", 30, |job| {
            job["state"] == "NOT_RUNNING" && job["last_exit"]["code"] == 0
        })
        .clone();
    assert!(first_reason(&ran).starts_with("ran "), "{ran:#}");
    let runs = fs::read_to_string(sandbox.path("by_watcher.runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "run once: {runs}");
}

/// The watcher's one timer (the next moment anything can change by time alone) is the moment
/// a scheduled job turns overdue: no polling loop finds it later.
#[test]
fn the_watchers_timer_is_set_for_the_moment_a_scheduled_job_turns_overdue() {
    let sandbox = Sandbox::new(
        "",
        "  - id: nightly\n    log: nightly.log\n    should_run_when: [overdue]\n    \
         schedule: { every: 1d, grace: 2h }\n",
    );
    let beat = sandbox.mihari(&["heartbeat", "nightly", "--exit", "0"]);
    assert!(beat.status.success(), "{beat:?}");
    let config = mihari::config::load(&sandbox.path("jobs.yaml")).expect("the jobs file loads");
    let mut engine = mihari::engine::Engine::new(config);
    let snapshot = engine.refresh(None, Utc::now());
    let row = snapshot.assessment_of("nightly").expect("a row");
    assert_eq!(row.state, mihari::core::State::NotRunning, "{row:#?}");
    let due = row.next_due.expect("a due time");
    assert_eq!(
        engine.next_deadline(&snapshot),
        Some(due + chrono::Duration::milliseconds(1)),
        "{row:#?}"
    );
}

/// Summer time as cron runs it, on the real binary: `faketime` moves the clock, TZ puts it in
/// Berlin. 02:30 does not exist on 2026-03-29: the run is due when the clock leaves the gap,
/// 03:00 CEST, and its grace counts from there; `check` shows the times in CEST.
#[test]
fn a_nightly_cron_run_in_berlin_is_due_at_0300_on_the_night_the_clocks_go_forward() {
    let faketime = tool("/usr/bin/faketime");
    let sandbox = Sandbox::new(
        "",
        "  - id: nightly\n    log: nightly.log\n    should_run_when: [overdue]\n    \
         schedule: { cron: \"30 2 * * *\", grace: 5m }\n",
    );
    let at_time = |when: &str, args: &[&str]| -> Output {
        Command::new(faketime)
            .args(["-f", &format!("@{when}")])
            .arg(BIN)
            .arg("--config")
            .arg(sandbox.path("jobs.yaml"))
            .args(args)
            .env("TZ", "Europe/Berlin")
            .stdin(Stdio::null())
            .output()
            .expect("faketime runs mihari")
    };
    let beat = at_time(
        "2026-03-28 02:30:40",
        &["heartbeat", "nightly", "--exit", "0"],
    );
    assert!(beat.status.success(), "{beat:?}");
    let (code, report) = parse_check(at_time("2026-03-29 03:04:00", &["check", "--json"]));
    let job = job_in(&report, "nightly");
    assert_eq!(job["state"], "NOT_RUNNING", "{job:#}");
    assert_eq!(job["next_due"], "2026-03-29T01:05:00.000Z", "{job:#}");
    assert_eq!(code, 0);
    let table = at_time("2026-03-29 03:04:00", &["check"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("next due by 2026-03-29 03:05:00 CEST"),
        "{table}"
    );
    let (code, report) = parse_check(at_time("2026-03-29 03:06:00", &["check", "--json"]));
    let job = job_in(&report, "nightly");
    assert_eq!(job["state"], "SHOULD_BE_RUNNING", "{job:#}");
    assert!(
        first_reason(&job).contains("due at 2026-03-29 01:00:00 UTC"),
        "{job:#}"
    );
    assert_eq!(code, 2);
}

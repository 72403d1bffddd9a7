//! Prometheus and Alertmanager with the real tools (SPEC §11): `promtool check metrics` on
//! `check --prometheus` and on the watcher's textfile — read again and again while the
//! watcher rewrites it — `promtool check rules` and `promtool test rules` on the shipped
//! rules, `amtool check-config` and `amtool config routes test` on the Alertmanager example,
//! and a real node_exporter serving the textfile on 127.0.0.1.
//!
//! The tools come from Debian's `prometheus`, `prometheus-alertmanager` and
//! `prometheus-node-exporter`, which `.ci/run` installs: a missing tool fails the test.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// Runs a real tool, failing loudly (with the package to install) when it is missing.
fn tool(program: &str, package: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("'{program}' cannot run ({error}): apt-get install -y {package}")
        });
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to the tool");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("the tool ends")
}

fn said(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `promtool check metrics` on `text`: it must pass with nothing to say (no lint).
fn assert_promtool_accepts(text: &str) {
    assert!(
        text.contains("\nmihari_watcher_up "),
        "an exposition with mihari's metrics:\n{text}"
    );
    let output = tool("promtool", "prometheus", &["check", "metrics"], Some(text));
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics:\n{}\non:\n{text}",
        said(&output)
    );
}

/// A folder with a jobs file: a dead job, a running one with progress, one waiting for an
/// approval, and a name that needs escaping in a label.
struct Sandbox {
    dir: tempfile::TempDir,
    sleeper: Child,
}

impl Sandbox {
    fn new(textfile: bool) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let sleeper = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep runs");
        let ticks = mihari::probe::proc::start_ticks(sleeper.id()).expect("ticks");
        fs::write(
            root.join("train.lock"),
            format!("{{\"pid\": {}, \"start_time\": {ticks}}}", sleeper.id()),
        )
        .expect("lock");
        fs::write(root.join("train.txt"), "1\n2\n3\n").expect("progress");
        fs::write(root.join("train.log"), "").expect("log");
        fs::write(
            root.join("collect.lock"),
            "{\"pid\": 999999, \"start_time\": 1}",
        )
        .expect("dead lock");
        let textfile = if textfile {
            format!(
                "  prometheus_textfile: {}/metrics/mihari.prom\n",
                root.display()
            )
        } else {
            String::new()
        };
        fs::create_dir(root.join("metrics")).expect("metrics folder");
        fs::write(
            root.join("jobs.yaml"),
            format!(
                "settings:\n  state_dir: {r}/state\n{textfile}\
                 jobs:\n\
                 \x20 - id: collect\n    lock: {r}/collect.lock\n    log: {r}/collect.log\n\
                 \x20   should_run_when: [not_succeeded]\n\
                 \x20 - id: train\n    lock: {r}/train.lock\n    log: {r}/train.log\n\
                 \x20   progress_file: {r}/train.txt\n    expected_total: 10\n\
                 \x20   should_run_when: [not_complete]\n    stall_sec: 3600\n\
                 \x20 - id: deploy\n    log: {r}/deploy.log\n\
                 \x20   should_run_when: [not_succeeded]\n",
                r = root.display()
            ),
        )
        .expect("jobs file");
        let sandbox = Sandbox { dir, sleeper };
        let ask = sandbox
            .mihari()
            .args(["approval", "request", "deploy", "--step", "drop-table"])
            .args(["--key", "k1", "--summary", "drop the \"old\" table"])
            .output()
            .expect("approval request");
        assert_eq!(ask.status.code(), Some(10), "{}", said(&ask));
        sandbox
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn textfile(&self) -> PathBuf {
        self.root().join("metrics/mihari.prom")
    }

    fn mihari(&self) -> Command {
        let mut command = Command::cargo_bin("mihari").expect("binary");
        command
            .arg("--config")
            .arg(self.root().join("jobs.yaml"))
            .env("HOME", self.root())
            .env_remove("MIHARI_CONFIG")
            .env("XDG_CACHE_HOME", self.root().join("cache"));
        command
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
    }
}

/// A child killed when dropped (a watcher, a node_exporter), so no test leaves one behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn check_prometheus_passes_promtool_with_job_id_labels_and_enum_states() {
    let sandbox = Sandbox::new(false);
    let output = sandbox
        .mihari()
        .args(["check", "--prometheus"])
        .output()
        .expect("check");
    assert_eq!(output.status.code(), Some(2), "{}", said(&output));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert_promtool_accepts(&text);
    assert!(
        !text.contains("{job="),
        "no 'job' label, which Prometheus owns:\n{text}"
    );
    assert!(!text.contains("instance="), "no 'instance' label:\n{text}");
    for series in [
        "mihari_job_state{job_id=\"collect\",state=\"DEAD_LOCK_STALE\"} 1",
        "mihari_job_state{job_id=\"collect\",state=\"RUNNING\"} 0",
        "mihari_job_state{job_id=\"train\",state=\"RUNNING\"} 1",
        "mihari_job_attention{job_id=\"collect\",bucket=\"RESTART\"} 1",
        "mihari_job_liveness{job_id=\"collect\",liveness=\"dead\"} 1",
        "mihari_job_liveness{job_id=\"train\",liveness=\"alive\"} 1",
        "mihari_job_liveness{job_id=\"train\",liveness=\"unknown\"} 0",
        "mihari_job_done_items{job_id=\"train\"} 3",
        "mihari_job_expected_items{job_id=\"train\"} 10",
        "mihari_job_restarts_total{job_id=\"train\"} 0",
        "mihari_job_approvals_pending{job_id=\"deploy\"} 1",
        "mihari_job_auto_restart{job_id=\"collect\"} 0",
        "mihari_attention_jobs{bucket=\"RESTART\"} 1",
        "mihari_watcher_up 0",
        "mihari_dispatch_held 0",
        "# TYPE mihari_job_restarts_total counter",
    ] {
        assert!(text.contains(series), "'{series}' in:\n{text}");
    }
    assert!(
        text.contains(&format!(
            "mihari_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(
        !text.contains("liveness=\"") || !text.contains("job_id=\"deploy\",liveness"),
        "no liveness for a job with no holder declared:\n{text}"
    );
    assert!(
        text.contains("mihari_job_last_progress_timestamp_seconds{job_id=\"train\"} 1"),
        "the progress time is a Unix time:\n{text}"
    );
}

#[test]
fn a_restart_counts_in_mihari_job_restarts_total() {
    let sandbox = Sandbox::new(false);
    let restart = sandbox
        .mihari()
        .args(["restart", "deploy", "--yes"])
        .output()
        .expect("restart");
    // deploy has no restart command: the restart is refused and nothing is spawned.
    assert_ne!(restart.status.code(), Some(0), "{}", said(&restart));
    let text = |sandbox: &Sandbox| {
        let output = sandbox
            .mihari()
            .args(["check", "--prometheus"])
            .output()
            .expect("check");
        String::from_utf8(output.stdout).expect("utf-8")
    };
    assert!(text(&sandbox).contains("mihari_job_restarts_total{job_id=\"deploy\"} 0"));
    // A job with a restart command, run by hand as an operator would.
    let dir = sandbox.root();
    fs::write(
        dir.join("jobs.yaml"),
        fs::read_to_string(dir.join("jobs.yaml")).expect("read")
            + &format!(
                "  - id: once\n    lock: {r}/once.lock\n    log: {r}/once.log\n\
                 \x20   should_run_when: [not_succeeded]\n\
                 \x20   restart:\n      command: [\"/bin/false\"]\n",
                r = dir.display()
            ),
    )
    .expect("append a job");
    for _ in 0..2 {
        let restart = sandbox
            .mihari()
            .args(["restart", "once", "--yes"])
            .output()
            .expect("restart");
        // The run ends at once with exit 1 (/bin/false): a restart that did not take, which
        // still spawned and counts. The next restart is offered once it has ended.
        assert_eq!(restart.status.code(), Some(2), "{}", said(&restart));
        assert!(
            said(&restart).contains("exited 1 within"),
            "{}",
            said(&restart)
        );
        wait_for("the run to end", Duration::from_secs(30), || {
            let output = sandbox
                .mihari()
                .args(["check", "--json"])
                .output()
                .expect("check");
            let report: serde_json::Value =
                serde_json::from_slice(&output.stdout).unwrap_or_default();
            report["jobs"].as_array().into_iter().flatten().any(|job| {
                job["id"] == "once" && (job["bucket"] == "RESTART" || job["bucket"] == "RED")
            })
        });
    }
    let after = text(&sandbox);
    assert!(
        after.contains("mihari_job_restarts_total{job_id=\"once\"} 2"),
        "{after}"
    );
}

#[test]
fn the_watchers_textfile_passes_promtool_and_is_never_read_half_written() {
    let sandbox = Sandbox::new(true);
    let watcher = Running(
        sandbox
            .mihari()
            .arg("watch")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("watch"),
    );
    let path = sandbox.textfile();
    wait_for("the textfile", Duration::from_secs(20), || path.exists());

    // A writer that changes the running job's log all the time: every pass has news.
    let log = sandbox.root().join("train.log");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut file = fs::OpenOptions::new().append(true).open(log).expect("log");
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let _ = writeln!(file, "step {n}");
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut versions: Vec<String> = Vec::new();
    let mut reads = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let text = fs::read_to_string(&path).expect("the textfile is always there");
        reads += 1;
        assert!(
            text.starts_with("# HELP mihari_build_info")
                && text.ends_with("mihari_store_writes_failing 0\n"),
            "read {reads} found a partial file:\n{text}"
        );
        if versions.last() != Some(&text) {
            versions.push(text);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(
        versions.len() >= 3,
        "the file was rewritten while the log changed ({} versions in {reads} reads)",
        versions.len()
    );
    assert!(
        versions.len() <= 8,
        "at most about one version a second ({} in 5 s)",
        versions.len()
    );
    for text in versions.iter().take(4) {
        assert_promtool_accepts(text);
        assert!(text.contains("\nmihari_watcher_up 1\n"), "{text}");
        assert!(
            text.contains("\nmihari_last_pass_timestamp_seconds "),
            "{text}"
        );
    }
    let leftovers: Vec<_> = fs::read_dir(sandbox.root().join("metrics"))
        .expect("folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "mihari.prom")
        .collect();
    assert!(leftovers.is_empty(), "no temp file left: {leftovers:?}");

    // Stopped, the watcher says so in its last version.
    kill(Pid::from_raw(watcher.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let mut watcher = watcher;
    let status = watcher.0.wait().expect("the watcher ends");
    assert!(status.success(), "the watcher stops cleanly on SIGTERM");
    let last = fs::read_to_string(&path).expect("read");
    assert!(last.contains("\nmihari_watcher_up 0\n"), "{last}");
    assert_promtool_accepts(&last);
}

#[test]
fn a_once_pass_writes_the_textfile_too() {
    let sandbox = Sandbox::new(true);
    let output = sandbox
        .mihari()
        .args(["watch", "--once"])
        .output()
        .expect("watch --once");
    assert!(output.status.code().is_some(), "{}", said(&output));
    let text = fs::read_to_string(sandbox.textfile()).expect("the textfile");
    assert_promtool_accepts(&text);
    assert!(text.contains("\nmihari_watcher_up 1\n"), "{text}");
}

#[test]
fn a_textfile_not_ending_in_prom_is_refused_at_load() {
    let sandbox = Sandbox::new(false);
    let jobs = sandbox.root().join("jobs.yaml");
    let text = fs::read_to_string(&jobs).expect("read").replacen(
        "settings:\n",
        "settings:\n  prometheus_textfile: metrics/mihari.txt\n",
        1,
    );
    fs::write(&jobs, text).expect("write");
    let output = sandbox.mihari().arg("check").output().expect("check");
    assert_eq!(output.status.code(), Some(3), "{}", said(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("jobs.yaml:2:24") && stderr.contains("reads only *.prom"),
        "{stderr}"
    );
}

#[test]
fn the_shipped_rules_pass_promtool_check_rules_and_their_tests() {
    let rules = assets().join("prometheus/mihari.rules.yml");
    let output = tool(
        "promtool",
        "prometheus",
        &["check", "rules", rules.to_str().expect("utf-8")],
        None,
    );
    assert!(output.status.success(), "{}", said(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("SUCCESS: 10 rules found"),
        "{}",
        said(&output)
    );
    let tests = assets().join("prometheus/mihari.rules.test.yml");
    let output = tool(
        "promtool",
        "prometheus",
        &["test", "rules", tests.to_str().expect("utf-8")],
        None,
    );
    assert!(output.status.success(), "{}", said(&output));
}

/// The rule tests would pass on rules that never fire: each alert of the rules file is
/// named by a firing case in the tests, and by a case where it must not fire.
#[test]
fn every_shipped_alert_has_a_firing_and_a_quiet_case() {
    let rules = fs::read_to_string(assets().join("prometheus/mihari.rules.yml")).expect("rules");
    let tests =
        fs::read_to_string(assets().join("prometheus/mihari.rules.test.yml")).expect("tests");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 10, "{alerts:?}");
    for alert in alerts {
        let cases: Vec<&str> = tests
            .split("alertname: ")
            .skip(1)
            .filter(|case| case.starts_with(alert) && case[alert.len()..].starts_with('\n'))
            .collect();
        assert!(
            cases.iter().any(|case| !case.contains("exp_alerts: []")),
            "{alert} has a case where it fires"
        );
        assert!(
            cases.iter().any(|case| case.contains("exp_alerts: []")),
            "{alert} has a case where it must not fire"
        );
    }
}

#[test]
fn the_alertmanager_example_passes_amtool_and_routes_by_severity() {
    let config = assets().join("alertmanager.example.yml");
    let config = config.to_str().expect("utf-8");
    let output = tool(
        "amtool",
        "prometheus-alertmanager",
        &["check-config", config],
        None,
    );
    assert!(output.status.success(), "{}", said(&output));
    for (labels, receiver) in [
        (
            ["severity=critical", "host=gpu1:9100", "job_id=collect"],
            "pager",
        ),
        (
            ["severity=warning", "host=gpu1:9100", "job_id=deploy"],
            "chat",
        ),
    ] {
        let mut args = vec!["config", "routes", "test", "--config.file", config];
        args.extend(labels);
        let output = tool("amtool", "prometheus-alertmanager", &args, None);
        assert!(output.status.success(), "{}", said(&output));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            receiver,
            "{labels:?}"
        );
    }
    let text = fs::read_to_string(assets().join("alertmanager.example.yml")).expect("read");
    assert!(text.contains("group_by: [host, job_id]"), "{text}");
    assert!(text.contains("equal: [host]"), "{text}");
}

/// A free port on 127.0.0.1 (bound, then let go for node_exporter to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn node_exporter_serves_the_watchers_textfile_and_its_mtime_matches_the_stale_rule() {
    let sandbox = Sandbox::new(true);
    let output = sandbox
        .mihari()
        .args(["watch", "--once"])
        .output()
        .expect("watch --once");
    assert!(output.status.code().is_some(), "{}", said(&output));
    let port = free_port();
    let folder = sandbox.root().join("metrics");
    let exporter = Command::new("prometheus-node-exporter")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--collector.disable-defaults")
        .arg("--collector.textfile")
        .arg(format!(
            "--collector.textfile.directory={}",
            folder.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "prometheus-node-exporter cannot run ({error}): apt-get install -y \
                 prometheus-node-exporter"
            )
        });
    let _exporter = Running(exporter);
    let mut scraped = String::new();
    wait_for(
        "node_exporter",
        Duration::from_secs(20),
        || match http_get(port, "/metrics") {
            Some(body) if body.contains("mihari_watcher_up") => {
                scraped = body;
                true
            }
            _ => false,
        },
    );
    assert!(
        scraped.contains("node_textfile_scrape_error 0"),
        "node_exporter read the file without error:\n{scraped}"
    );
    assert!(scraped.contains("mihari_job_state{job_id=\"collect\",state=\"DEAD_LOCK_STALE\"} 1"));
    let mtime = scraped
        .lines()
        .find(|line| line.starts_with("node_textfile_mtime_seconds{"))
        .expect("node_textfile_mtime_seconds");
    let file = mtime
        .split("file=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("its file label");
    let stale_rule = regex::Regex::new(r"^(?:(.*/)?mihari[^/]*\.prom)$").expect("regex");
    assert!(
        stale_rule.is_match(file),
        "MihariTextfileStale's file matcher matches node_exporter's label '{file}'"
    );
}

#[path = "common/users.rs"]
mod users;

/// Round three, item 11: a 0777 textfile folder was accepted silently (anyone there could
/// replace the metrics node_exporter serves). It is refused, with the folder's mode and what
/// to do, in `check`'s rules, on the watcher's stderr, and nothing is written there.
#[test]
fn a_textfile_folder_anyone_can_write_is_refused_in_checks_rules_and_by_the_watcher() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new(true);
    let folder = sandbox.root().join("metrics");
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o777)).expect("chmod 0777");
    let words = format!(
        "the metrics textfile '{}' is not written: the folder '{}' can be written by group or \
         others (mode '0777') without the sticky bit",
        sandbox.textfile().display(),
        folder.display()
    );
    let check = sandbox.mihari().arg("check").output().expect("check");
    let shown = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(2), "{shown}");
    assert!(shown.contains(&words), "{shown}");
    assert!(
        shown.contains(&format!("chmod g-w,o-w '{}'", folder.display())),
        "{shown}"
    );
    let once = sandbox
        .mihari()
        .args(["watch", "--once"])
        .output()
        .expect("watch --once");
    assert!(said(&once).contains(&words), "{}", said(&once));
    assert!(!sandbox.textfile().exists(), "nothing is written there");
    // Fixed, the next pass writes it.
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).expect("chmod 0755");
    sandbox
        .mihari()
        .args(["watch", "--once"])
        .output()
        .expect("watch --once");
    assert!(sandbox.textfile().exists());
}

/// Round three, item 11: in a sticky folder (`/tmp`-like) another user's file at the
/// textfile's name cannot be replaced, and node_exporter served it (`mihari_watcher_up 1`)
/// while the watcher blamed permissions. The watcher (here as `mihari-other`, the file
/// root's) names the file's owner in `check`'s rules and on stderr, and leaves it alone.
#[test]
fn a_file_another_user_left_in_a_sticky_textfile_folder_is_named_with_its_owner() {
    use std::os::unix::fs::{PermissionsExt, chown};
    use std::os::unix::process::CommandExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running mihari as another user needs root");
        return;
    }
    let Some((uid, gid)) = users::other_user() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = root.join("mihari");
    fs::copy(
        Command::cargo_bin("mihari").expect("binary").get_program(),
        &bin,
    )
    .expect("copy the binary");
    let state = root.join("state");
    fs::create_dir(&state).expect("state");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
    chown(&state, Some(uid), Some(gid)).expect("chown");
    fs::write(root.join("work.log"), "step 1\n").expect("log");
    let shared = root.join("textfiles");
    fs::create_dir(&shared).expect("textfiles");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).expect("chmod 1777");
    let planted = shared.join("mihari.prom");
    fs::write(&planted, "mihari_watcher_up 1\n").expect("planted");
    fs::write(
        root.join("jobs.yaml"),
        format!(
            "settings:\n  state_dir: {}\n  prometheus_textfile: {}\njobs:\n  - id: work\n    \
             log: {}/work.log\n    should_run_when: [not_succeeded]\n",
            state.display(),
            planted.display(),
            root.display()
        ),
    )
    .expect("jobs");
    let as_other = |args: &[&str]| {
        Command::new(&bin)
            .arg("--config")
            .arg(root.join("jobs.yaml"))
            .args(args)
            .env("HOME", "/nonexistent")
            .env_remove("MIHARI_CONFIG")
            .env_remove("XDG_CACHE_HOME")
            .current_dir("/")
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .output()
            .expect("mihari as mihari-other")
    };
    let words = format!(
        "the metrics textfile '{}' belongs to user 'root', not to the watcher's user \
         'mihari-other': the sticky folder '{}' keeps it from being replaced, and node_exporter \
         serves it instead of mihari's metrics",
        planted.display(),
        shared.display()
    );
    let check = as_other(&["check"]);
    let shown = String::from_utf8_lossy(&check.stdout);
    assert!(shown.contains(&words), "{shown}{}", said(&check));
    let once = as_other(&["watch", "--once"]);
    assert!(said(&once).contains(&words), "{}", said(&once));
    assert!(
        !said(&once).contains("permission denied"),
        "{}",
        said(&once)
    );
    assert_eq!(
        fs::read_to_string(&planted).expect("read"),
        "mihari_watcher_up 1\n",
        "the planted file is left as it is"
    );
}

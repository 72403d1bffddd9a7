//! The shipped alerting rules and Alertmanager example, run live: a real watcher writes its
//! textfile, a real `prometheus-node-exporter` serves it, a real `prometheus` scrapes and
//! evaluates `assets/prometheus/mihari.rules.yml` every second, and a real
//! `prometheus-alertmanager` with `assets/alertmanager.example.yml` (its receivers pointed at
//! a webhook of this test) notifies. A job's holder killed under the watcher must reach the
//! pager receiver as `MihariRestartNeedsHuman`; the watcher stopped, as `MihariWatcherDown`,
//! which then inhibits the first.
//!
//! The promtool unit tests of the rules (tests/prometheus.rs) prove each expression on series
//! written by hand; this proves them on the metrics the watcher really writes, as
//! node_exporter really labels them, through Alertmanager's real routing and inhibition.
//!
//! Only for time: the `for:` of the two alerts (1m and 2m as shipped) is 1s here, and the
//! route's `group_wait` (30s) is 1s; everything else is the shipped text. The servers come from
//! Debian's `prometheus`, `prometheus-alertmanager` and `prometheus-node-exporter`, which
//! `.ci/run` installs: a missing one fails the test, naming the package.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[path = "common/alerting.rs"]
mod alerting;
use alerting::{Alerting, Overrides, stop};

/// A child stopped (SIGTERM, then SIGKILL) and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// How long one alert may take to arrive with the test's 1 s `for:` and `group_wait`: scrape,
/// evaluation, `for`, group_wait and Alertmanager's own pace are a few seconds; a loaded
/// machine gets the rest.
const ARRIVES_WITHIN: Duration = Duration::from_secs(90);

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn jobs_file(root: &Path, holder: &Child) -> std::path::PathBuf {
    let ticks = mihari::probe::proc::start_ticks(holder.id()).expect("start ticks");
    fs::write(
        root.join("collect.lock"),
        format!("{{\"pid\": {}, \"start_time\": {ticks}}}", holder.id()),
    )
    .expect("lock");
    fs::write(root.join("collect.log"), "fetching\n").expect("log");
    fs::create_dir(root.join("metrics")).expect("metrics folder");
    let jobs = root.join("jobs.yaml");
    fs::write(
        &jobs,
        format!(
            "settings:\n  state_dir: {r}/state\n  prometheus_textfile: {r}/metrics/mihari.prom\n\
             jobs:\n\
             \x20 - id: collect\n    lock: {r}/collect.lock\n    log: {r}/collect.log\n\
             \x20   stall_sec: 3600\n    should_run_when: [not_succeeded]\n\
             \x20   auto_restart: false\n\
             \x20   restart:\n      command: [\"sleep\", \"600\"]\n",
            r = root.display()
        ),
    )
    .expect("jobs file");
    jobs
}

fn mihari(root: &Path, jobs: &Path) -> Command {
    let mut command = Command::cargo_bin("mihari").expect("binary");
    command
        .arg("--config")
        .arg(jobs)
        .env("HOME", root)
        .env_remove("MIHARI_CONFIG")
        .env("XDG_CACHE_HOME", root.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

#[test]
fn a_killed_holder_and_a_stopped_watcher_reach_the_pager_through_the_shipped_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let holder = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .expect("sleep runs");
    let mut holder = Running(holder);
    let jobs = jobs_file(root, &holder.0);
    let textfile = root.join("metrics/mihari.prom");
    let watcher = Running(mihari(root, &jobs).arg("watch").spawn().expect("watch"));
    wait_for("the watcher's textfile", Duration::from_secs(30), || {
        fs::read_to_string(&textfile).is_ok_and(|text| text.contains("\nmihari_watcher_up 1\n"))
    });

    let overrides = Overrides {
        rule_for: vec![
            ("MihariRestartNeedsHuman".to_string(), "1s".to_string()),
            ("MihariWatcherDown".to_string(), "1s".to_string()),
        ],
        group_wait: Some("1s".to_string()),
    };
    let alerting =
        Alerting::start(&root.join("metrics"), &overrides).unwrap_or_else(|e| panic!("{e}"));
    let instance = alerting.instance();
    // The pipeline sees the live job before anything happens to it.
    alerting
        .wait_until(
            "Prometheus to read collect as RUNNING",
            ARRIVES_WITHIN,
            |a| {
                Ok(
                    a.query("mihari_job_state{job_id=\"collect\",state=\"RUNNING\"} == 1")?
                        .contains("\"job_id\":\"collect\""),
                )
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        alerting.notifications().is_empty(),
        "nothing fires while the job runs: {:?}",
        alerting.notifications()
    );

    // The holder dies: the watcher may not restart it (auto_restart: false).
    let killed = Instant::now();
    kill(Pid::from_raw(holder.0.id() as i32), Signal::SIGKILL).expect("kill the holder");
    let _ = holder.0.wait();
    let restart = alerting
        .wait_for_firing("MihariRestartNeedsHuman", killed, ARRIVES_WITHIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(restart.path, "/pager", "critical goes to the pager");
    let alert = restart.alerts("MihariRestartNeedsHuman", "firing")[0];
    assert_eq!(alert["labels"]["job_id"], "collect", "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");
    assert_eq!(alert["labels"]["host"], instance.as_str(), "{alert}");
    assert_eq!(alert["labels"]["bucket"], "RESTART", "{alert}");
    assert_eq!(
        alert["annotations"]["summary"],
        format!("collect on {instance} needs a restart by a human").as_str(),
        "{alert}"
    );

    // The watcher stops: it says so in its last textfile, and the host's alert follows.
    let mut watcher = watcher;
    let stopped = Instant::now();
    kill(Pid::from_raw(watcher.0.id() as i32), Signal::SIGTERM).expect("SIGTERM the watcher");
    let status = watcher.0.wait().expect("the watcher ends");
    assert!(status.success(), "the watcher stops cleanly: {status}");
    let down = alerting
        .wait_for_firing("MihariWatcherDown", stopped, ARRIVES_WITHIN)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(down.path, "/pager");
    let alert = down.alerts("MihariWatcherDown", "firing")[0];
    assert_eq!(alert["labels"]["host"], instance.as_str(), "{alert}");
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");

    // While no watcher runs, what it last said of the job is out of date: Alertmanager holds
    // the job's alert back (the example's inhibit rule), and says by what.
    alerting
        .wait_until(
            "MihariRestartNeedsHuman to be inhibited by MihariWatcherDown",
            ARRIVES_WITHIN,
            |a| {
                let alerts = a.alertmanager_alerts()?;
                Ok(alerts.as_array().into_iter().flatten().any(|alert| {
                    alert["labels"]["alertname"] == "MihariRestartNeedsHuman"
                        && alert["status"]["state"] == "suppressed"
                        && !alert["status"]["inhibitedBy"]
                            .as_array()
                            .is_none_or(|by| by.is_empty())
                }))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));

    // Nothing else fired: every alert that reached a receiver is one of the two.
    for notification in alerting.notifications() {
        for alert in notification.body["alerts"].as_array().into_iter().flatten() {
            let name = alert["labels"]["alertname"].as_str().unwrap_or_default();
            assert!(
                matches!(name, "MihariRestartNeedsHuman" | "MihariWatcherDown"),
                "only the two alerts fire: {alert}"
            );
        }
    }
}

/// A server that cannot be found fails with the package to install, not a hang.
#[test]
fn a_missing_server_is_named_with_its_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = alerting::start_program_for_test(dir.path(), "prometheus-not-installed-here")
        .expect_err("no such program");
    assert!(
        error.contains("'prometheus-not-installed-here' cannot run")
            && error.contains("apt-get install -y"),
        "{error}"
    );
}

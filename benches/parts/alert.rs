//! The alerting part of the perf bench (`MIHARI_BENCH_ONLY=alert`): how long a death takes to
//! reach a human through the real chain, and how much of that is mihari's.
//!
//! A job's holder (a `sleep` named by a JSON lock, `auto_restart: false`) is killed under a
//! running `mihari watch` whose textfile a real `prometheus-node-exporter` serves to a real
//! `prometheus` (scrape and evaluation every second) with the shipped rules, which notifies a
//! real `prometheus-alertmanager` with the shipped example, whose receivers are pointed at the
//! bench's webhook (`tests/common/alerting.rs` starts them all, as `tests/alerts_live.rs`
//! does). Measured, from the kill:
//! - mihari's share: the moment the watcher's textfile is renamed into place saying
//!   DEAD_LOCK_STALE (the bench follows the folder with inotify), at most 1 s; its floor, the
//!   bench's own reap of the killed holder;
//! - the webhook receiving `MihariRestartNeedsHuman`, against its floor: a scrape interval,
//!   an evaluation interval, the rule's `for:` and the route's `group_wait`, as shipped
//!   (1 s + 1 s + 1 m + 30 s).
//!
//! Then the watcher is stopped (SIGTERM) and the same two are measured for
//! `MihariWatcherDown` (`for: 2m`): its last textfile saying `mihari_watcher_up 0`, and the
//! webhook. About four minutes, nearly all of it the rules' `for:` and Alertmanager's
//! `group_wait`. `MIHARI_BENCH_ALERT_FOR` (e.g. `1s`) sets both alerts' `for:` and the
//! `group_wait` to that, to try the part quickly; the table says so.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::alerting::{
    Alerting, EVALUATION_INTERVAL, Overrides, SCRAPE_INTERVAL, group_wait, rule_for, stop,
};
use super::common::*;
use super::{Inotify, Knobs, Table};

/// mihari's share of an alert: the death to the textfile saying so.
const SHARE_TARGET: Duration = Duration::from_secs(1);
/// The chain's time against its floor (scrape + evaluation + `for:` + `group_wait`).
const CHAIN_TARGET_RATIO: f64 = 1.1;

pub fn measure_alert(knobs: &Knobs, exe: &Path, table: &mut Table) -> Result<(), String> {
    let shortened = std::env::var("MIHARI_BENCH_ALERT_FOR")
        .ok()
        .filter(|v| !v.is_empty());
    let overrides = match &shortened {
        Some(value) => Overrides {
            rule_for: ["MihariRestartNeedsHuman", "MihariWatcherDown"]
                .iter()
                .map(|alert| (alert.to_string(), value.clone()))
                .collect(),
            group_wait: Some(value.clone()),
        },
        None => Overrides::default(),
    };
    let root = knobs.tempdir()?;
    let dir = root.path();
    let mut holders = Holders::default();
    let (pid, ticks) = holders.spawn()?;
    write(&dir.join("collect.lock"), json_lock(pid, ticks).as_bytes())?;
    write(&dir.join("collect.log"), b"fetching\n")?;
    let metrics = dir.join("metrics");
    fs::create_dir(&metrics).map_err(|e| format!("mkdir metrics: {e}"))?;
    let jobs = dir.join("jobs.yaml");
    write(
        &jobs,
        format!(
            "settings:\n  state_dir: {r}/state\n  prometheus_textfile: {r}/metrics/mihari.prom\n\
             jobs:\n  - id: collect\n    lock: {r}/collect.lock\n    log: {r}/collect.log\n    \
             stall_sec: 3600\n    should_run_when: [not_succeeded]\n    auto_restart: false\n    \
             restart:\n      command: [\"sleep\", \"600\"]\n",
            r = dir.display()
        ),
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&jobs, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod: {e}"))?;
    }
    let textfile = metrics.join("mihari.prom");
    let says = |text: &str| fs::read_to_string(&textfile).is_ok_and(|t| t.contains(text));
    let mut watcher = Command::new(exe)
        .args(["watch", "--config"])
        .arg(&jobs)
        .env("HOME", dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env_remove("MIHARI_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start mihari watch: {e}"))?;
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !says("\nmihari_watcher_up 1\n") {
            if Instant::now() > deadline {
                return Err("the watcher wrote no textfile within 60 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let alerting = Alerting::start(&metrics, &overrides)?;
        alerting.wait_until("Prometheus to read collect as RUNNING", GIVE, |a| {
            Ok(
                a.query("mihari_job_state{job_id=\"collect\",state=\"RUNNING\"} == 1")?
                    .contains("\"job_id\":\"collect\""),
            )
        })?;
        let inotify = Inotify::new()?;
        inotify.watch(&metrics)?;

        // The holder dies.
        inotify.drain();
        let killed = Instant::now();
        let reaped = holders.kill(pid)?;
        let stale = "mihari_job_state{job_id=\"collect\",state=\"DEAD_LOCK_STALE\"} 1";
        let share = until_textfile_says(&inotify, killed, || says(stale))?;
        let restart_floor = SCRAPE_INTERVAL
            + EVALUATION_INTERVAL
            + rule_for(&alerting.rules, "MihariRestartNeedsHuman")?
            + group_wait(&alerting.alertmanager_config)?;
        let restart = alerting
            .wait_for_firing("MihariRestartNeedsHuman", killed, restart_floor + GIVE)?
            .at
            .duration_since(killed);

        // The watcher stops.
        inotify.drain();
        let stopped = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(watcher.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .map_err(|e| format!("SIGTERM the watcher: {e}"))?;
        let down_share =
            until_textfile_says(&inotify, stopped, || says("\nmihari_watcher_up 0\n"))?;
        let down_floor = SCRAPE_INTERVAL
            + EVALUATION_INTERVAL
            + rule_for(&alerting.rules, "MihariWatcherDown")?
            + group_wait(&alerting.alertmanager_config)?;
        let down = alerting
            .wait_for_firing("MihariWatcherDown", stopped, down_floor + GIVE)?
            .at
            .duration_since(stopped);
        Ok((
            reaped,
            share,
            restart,
            restart_floor,
            down_share,
            down,
            down_floor,
        ))
    })();
    stop(&mut watcher);
    drop(holders);
    let (reaped, share, restart, restart_floor, down_share, down, down_floor) = result?;
    let how = match &shortened {
        Some(value) => format!("`for:` and `group_wait` set to {value} by MIHARI_BENCH_ALERT_FOR"),
        None => "the shipped rules and example as they are".to_string(),
    };
    println!(
        "\nalert ({how}): kill -> textfile {} (reap {}), -> MihariRestartNeedsHuman at the \
         webhook {} (floor {}); SIGTERM -> textfile {}, -> MihariWatcherDown {} (floor {})",
        ms(share),
        ms(reaped),
        secs(restart),
        secs(restart_floor),
        ms(down_share),
        secs(down),
        secs(down_floor)
    );
    table.add(
        "a holder's death → the watcher's textfile renamed saying DEAD_LOCK_STALE (`alert`)",
        format!("≤ {}", ms(SHARE_TARGET)),
        format!("the bench's reap of the holder: {}", ms(reaped)),
        ms(share),
        "—",
        Some(share <= SHARE_TARGET),
    );
    let restart_ratio = restart.as_secs_f64() / restart_floor.as_secs_f64();
    table.add(
        format!(
            "a holder's death → `MihariRestartNeedsHuman` at the webhook: node_exporter, \
             Prometheus (1 s scrape and evaluation), Alertmanager, {how} (`alert`)"
        ),
        format!("≤ {CHAIN_TARGET_RATIO}× floor"),
        format!(
            "scrape 1 s + evaluation 1 s + `for:` + `group_wait`: {}",
            secs(restart_floor)
        ),
        secs(restart),
        format!("{restart_ratio:.2}×"),
        Some(restart_ratio <= CHAIN_TARGET_RATIO),
    );
    table.add(
        "the watcher stopped (SIGTERM) → its last textfile saying `mihari_watcher_up 0` (`alert`)",
        format!("≤ {}", ms(SHARE_TARGET)),
        "—",
        ms(down_share),
        "—",
        Some(down_share <= SHARE_TARGET),
    );
    let down_ratio = down.as_secs_f64() / down_floor.as_secs_f64();
    table.add(
        format!("the watcher stopped → `MihariWatcherDown` at the webhook, {how} (`alert`)"),
        format!("≤ {CHAIN_TARGET_RATIO}× floor"),
        format!(
            "scrape 1 s + evaluation 1 s + `for:` + `group_wait`: {}",
            secs(down_floor)
        ),
        secs(down),
        format!("{down_ratio:.2}×"),
        Some(down_ratio <= CHAIN_TARGET_RATIO),
    );
    Ok(())
}

/// Slack past a floor before a wait gives up.
const GIVE: Duration = Duration::from_secs(120);

/// From `since` until `done` says yes, woken by the folder's inotify (or every 50 ms).
fn until_textfile_says(
    inotify: &Inotify,
    since: Instant,
    mut done: impl FnMut() -> bool,
) -> Result<Duration, String> {
    loop {
        if done() {
            return Ok(since.elapsed());
        }
        if since.elapsed() > Duration::from_secs(30) {
            return Err("the textfile did not change within 30 s".to_string());
        }
        inotify.wait(Duration::from_millis(50))?;
    }
}

fn secs(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

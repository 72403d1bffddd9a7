//! `mihari check`: one assessment of every job, printed as a table, JSON, Prometheus text or
//! the Monitoring Plugins format (the last two are written by [`crate::render`]).
//!
//! The exit code follows the Nagios convention so cron, systemd and monitoring systems can
//! act on it: 0 OK, 1 WARNING (STALE or DISPATCH), 2 CRITICAL (RESTART or RED), 3 UNKNOWN
//! (bad config, cannot assess). Renderers write to any `Write`, so tests run them in-process.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use chrono::{SecondsFormat, Utc};
use serde::Serialize;

use crate::core::assess::fmt_secs;
use crate::core::text::inert;
use crate::core::{Assessment, Bucket, CheckOutcome};
use crate::engine::{Engine, Snapshot, WatcherStatus};
use crate::probe::zone::Zone;
use crate::render;

pub use crate::render::{EXIT_UNKNOWN, status_code};

/// How `check` prints its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckFormat {
    Table,
    Json,
    Prometheus,
    Nagios,
}

pub(super) fn run(config: Option<&Path>, format: CheckFormat, out: &mut impl Write) -> ExitCode {
    // A plugin's reader (Nagios, Icinga, NRPE) shows stdout only: say UNKNOWN there too,
    // with the refusal's first line (file:line:col and why).
    if format == CheckFormat::Nagios
        && let Err(error) =
            crate::config::find_config_path(config).and_then(|path| crate::config::load(&path))
    {
        let said = error.to_string();
        let first = said.lines().next().unwrap_or("").replace('|', "/");
        let _ = writeln!(out, "MIHARI UNKNOWN - {}", inert(&first));
        let _ = writeln!(io::stderr(), "mihari: {said}");
        return ExitCode::from(EXIT_UNKNOWN);
    }
    let config = match super::load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let (snapshot, written) = assess_and_render(config, format, out);
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::from(status_code(&snapshot)),
        // A closed pipe (`mihari check | head`) is not a reason to report UNKNOWN.
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::from(status_code(&snapshot))
        }
        Err(error) => {
            let _ = writeln!(io::stderr(), "mihari: cannot write the report: {error}");
            ExitCode::from(EXIT_UNKNOWN)
        }
    }
}

/// One assessment of every job (checks run first), written in `format`.
pub fn assess_and_render(
    config: crate::config::Config,
    format: CheckFormat,
    out: &mut impl Write,
) -> (Snapshot, io::Result<()>) {
    let mut engine = Engine::new(config);
    engine.run_checks(None);
    let snapshot = engine.snapshot(Utc::now());
    let written = match format {
        CheckFormat::Table => render_table(&snapshot, out),
        CheckFormat::Json => render_json(&snapshot, out),
        CheckFormat::Prometheus => render::prometheus::render(
            &snapshot,
            &engine.config().jobs,
            render::prometheus::Writer::Check,
            out,
        ),
        CheckFormat::Nagios => render::nagios::render(&snapshot, out),
    };
    (snapshot, written)
}

/// A readable table in action-list order, each row followed by its reasons; times in the
/// machine's zone, named once in the first line.
pub fn render_table(snapshot: &Snapshot, out: &mut impl Write) -> io::Result<()> {
    render_table_in(snapshot, Zone::machine(), out)
}

/// [`render_table`] with times in `zone`.
pub fn render_table_in(snapshot: &Snapshot, zone: Zone, out: &mut impl Write) -> io::Result<()> {
    let list = &snapshot.list;
    let total = list.actions.len() + list.rest.len();
    let counts: Vec<String> = list
        .counts()
        .iter()
        .map(|(bucket, n)| format!("{} {n}", bucket.as_str()))
        .collect();
    writeln!(
        out,
        "mihari check · {} · {} · {total} job{} · {} · {}",
        zone.format(snapshot.generated_at, "%Y-%m-%d %H:%M:%S"),
        zone.header(snapshot.generated_at),
        if total == 1 { "" } else { "s" },
        counts.join(" · "),
        snapshot.watcher.words_in(zone)
    )?;
    if let Some(fault) = &snapshot.store_fault {
        writeln!(
            out,
            "UNKNOWN: the state store cannot be used, so approvals, history and the \
             watcher's record are not known: {}",
            inert(fault)
        )?;
    }
    if let Some(why) = &list.dispatch_held {
        writeln!(out, "dispatch held: {}", inert(why))?;
    }
    let approvals: usize = list.rows().map(|row| row.pending_approvals.len()).sum();
    if approvals > 0 {
        writeln!(out, "approvals pending: {approvals} (mihari approval list)")?;
    }
    for notice in &snapshot.notices {
        writeln!(out, "notice: {}", zone.rewrite_utc_stamps(&inert(notice)))?;
    }
    if total == 0 {
        writeln!(
            out,
            "\nno jobs declared: add some under 'jobs:' (see jobs.example.yaml)"
        )?;
        return Ok(());
    }
    let width = list
        .rows()
        .map(|a| a.id.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(8, 32);
    for (bucket, count) in list.counts() {
        if count == 0 {
            continue;
        }
        writeln!(out, "\n{} ({count})", bucket.as_str())?;
        if bucket == Bucket::Red {
            for rule in &list.rules {
                writeln!(out, "  ✖ {}", zone.rewrite_utc_stamps(&inert(rule)))?;
            }
        }
        for row in list.bucket(bucket) {
            write_row(row, width, zone, out)?;
        }
    }
    let (paused, quiet): (Vec<&Assessment>, Vec<&Assessment>) = list
        .rest
        .iter()
        .partition(|row| row.state == crate::core::State::Paused);
    if !quiet.is_empty() {
        writeln!(out, "\nNOTHING TO DO ({})", quiet.len())?;
        for row in quiet {
            write_row(row, width, zone, out)?;
        }
    }
    if !paused.is_empty() {
        writeln!(out, "\nPAUSED ({})", paused.len())?;
        for row in paused {
            write_row(row, width, zone, out)?;
        }
    }
    Ok(())
}

fn write_row(row: &Assessment, width: usize, zone: Zone, out: &mut impl Write) -> io::Result<()> {
    let liveness = match (row.liveness, row.pid) {
        (Some(l), Some(pid)) => format!("{} pid {pid}", l.as_str()),
        (Some(l), None) => l.as_str().to_string(),
        (None, _) => "no lock".to_string(),
    };
    let progress = match (row.done, row.expected_total) {
        (Some(done), Some(total)) if total > 0 => {
            format!("{done}/{total} {}%", (done * 100 / total).min(100))
        }
        (_, None) if row.percent.is_some() => format!("{:.0}%", row.percent.unwrap_or(0.0)),
        (Some(done), _) => format!("{done} done"),
        (None, Some(total)) => format!("?/{total}"),
        (None, None) => "-".to_string(),
    };
    let age = match (row.progress_age_sec, row.progress_source) {
        (Some(age), Some(source)) => format!("age {} ({})", fmt_secs(age), source.as_str()),
        _ => "age -".to_string(),
    };
    writeln!(
        out,
        "  {:<width$}  {:<17}  {:<16}  {:<14}  {age}",
        inert(&row.id),
        row.state.as_str(),
        liveness,
        progress,
    )?;
    if let Some(held) = &row.held {
        writeln!(out, "      {}", zone.rewrite_utc_stamps(&inert(held)))?;
    }
    for reason in &row.reasons {
        writeln!(out, "      - {}", zone.rewrite_utc_stamps(&inert(reason)))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonReport<'a> {
    generated_at: String,
    jobs: Vec<JsonJob<'a>>,
    dispatch_held: bool,
    /// Broken rules that belong to no job.
    rules: Vec<String>,
    store: JsonStore,
    /// Whether a machine watcher watches these jobs (SPEC §8).
    watcher: JsonWatcher,
}

/// The machine watcher as a script sees it: `state` one of `alive`, `passes` (`mihari watch
/// --once` often enough), `gone` (it ran and nothing watches now: RED), `none_yet` or
/// `unknown` (its lock cannot be judged), with what is known of it.
#[derive(Serialize)]
struct JsonWatcher {
    state: &'static str,
    pid: Option<u32>,
    since: Option<String>,
    last_pass_at: Option<String>,
    reason: Option<String>,
}

fn json_watcher(watcher: &WatcherStatus) -> JsonWatcher {
    let at = |t: &chrono::DateTime<Utc>| Some(t.to_rfc3339_opts(SecondsFormat::Millis, true));
    let mut json = JsonWatcher {
        state: "none_yet",
        pid: None,
        since: None,
        last_pass_at: None,
        reason: None,
    };
    match watcher {
        WatcherStatus::Never => {}
        WatcherStatus::Alive { pid, since } => {
            json.state = "alive";
            json.pid = Some(*pid).filter(|pid| *pid > 0);
            json.since = at(since);
        }
        WatcherStatus::Passes { last, .. } => {
            json.state = "passes";
            json.last_pass_at = at(last);
        }
        WatcherStatus::Gone { why } => {
            json.state = "gone";
            json.reason = Some(inert(why));
        }
        WatcherStatus::Unknown { why } => {
            json.state = "unknown";
            json.reason = Some(inert(why));
        }
    }
    json
}

/// Whether the state store can be used: `ok`; `fault` (check exits 3) or `writes_failing`
/// (the watcher's writes fail: RED), with why.
#[derive(Serialize)]
struct JsonStore {
    state: &'static str,
    reason: Option<String>,
}

#[derive(Serialize)]
struct JsonJob<'a> {
    id: &'a str,
    state: &'static str,
    bucket: Option<&'static str>,
    liveness: Option<&'static str>,
    pid: Option<u32>,
    progress_age_sec: Option<f64>,
    progress_source: Option<&'static str>,
    done: Option<u64>,
    expected_total: Option<u64>,
    /// How far along, 0 to 100 (done of the total, or the percent the log prints).
    percent: Option<f64>,
    /// Items per second while it runs, as the job prints it (tqdm) or over the samples a
    /// long-running engine kept (a one-off check has none); null when not known.
    rate_per_sec: Option<f64>,
    /// Seconds until done at that rate; 0 once done; null when not known.
    eta_sec: Option<f64>,
    /// The manifest's current phase; null without one.
    phase: Option<String>,
    /// How the last run `mihari run` recorded ended; null when none has ended.
    last_exit: Option<JsonExit>,
    /// Who paused the job, when and why; null when it is not paused.
    paused: Option<JsonNote>,
    reasons: Vec<String>,
    checks: Vec<JsonCheck<'a>>,
}

/// A run's end: `code` when it exited, `signal` ("SIGTERM") when a signal ended it.
#[derive(Serialize)]
struct JsonExit {
    at: String,
    code: Option<i32>,
    signal: Option<String>,
}

/// An operator's recorded decision: who, when, why.
#[derive(Serialize)]
struct JsonNote {
    by: String,
    at: String,
    reason: String,
}

#[derive(Serialize)]
struct JsonCheck<'a> {
    name: &'a str,
    result: &'static str,
    detail: String,
    at: String,
}

/// The object of SPEC §8: `generated_at`, `jobs` in action-list order, `dispatch_held`.
pub fn render_json(snapshot: &Snapshot, out: &mut impl Write) -> io::Result<()> {
    let report = JsonReport {
        generated_at: snapshot
            .generated_at
            .to_rfc3339_opts(SecondsFormat::Millis, true),
        jobs: snapshot.list.rows().map(json_job).collect(),
        dispatch_held: snapshot.list.dispatch_held.is_some(),
        rules: snapshot.list.rules.iter().map(|r| inert(r)).collect(),
        store: JsonStore {
            state: match (&snapshot.store_fault, &snapshot.store_writes_failing) {
                (Some(_), _) => "fault",
                (None, Some(_)) => "writes_failing",
                (None, None) => "ok",
            },
            reason: snapshot
                .store_fault
                .as_deref()
                .or(snapshot.store_writes_failing.as_deref())
                .map(inert),
        },
        watcher: json_watcher(&snapshot.watcher),
    };
    serde_json::to_writer(&mut *out, &report)?;
    writeln!(out)
}

fn json_job(row: &Assessment) -> JsonJob<'_> {
    JsonJob {
        id: &row.id,
        state: row.state.as_str(),
        bucket: row.bucket.map(Bucket::as_str),
        liveness: row.liveness.map(|l| l.as_str()),
        pid: row.pid,
        progress_age_sec: row.progress_age_sec,
        progress_source: row.progress_source.map(|s| s.as_str()),
        done: row.done,
        expected_total: row.expected_total,
        percent: row.percent.map(|p| (p * 10.0).round() / 10.0),
        rate_per_sec: row
            .rate_per_sec
            .map(|rate| (rate * 1000.0).round() / 1000.0),
        eta_sec: row.eta_sec.map(f64::round),
        phase: row.phase.as_deref().map(inert),
        last_exit: row.last_exit.as_ref().map(|exit| JsonExit {
            at: exit.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            code: exit.code,
            signal: exit.signal.as_deref().map(inert),
        }),
        paused: row.paused.as_ref().map(|pause| JsonNote {
            by: inert(&pause.by),
            at: pause.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            reason: inert(&pause.reason),
        }),
        reasons: row
            .held
            .iter()
            .chain(row.reasons.iter())
            .map(|r| inert(r))
            .collect(),
        checks: row.checks.iter().map(json_check).collect(),
    }
}

fn json_check(check: &CheckOutcome) -> JsonCheck<'_> {
    JsonCheck {
        name: &check.name,
        result: check.result.as_str(),
        detail: inert(&check.detail),
        at: check.at.to_rfc3339_opts(SecondsFormat::Millis, true),
    }
}

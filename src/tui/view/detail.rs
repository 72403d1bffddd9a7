//! The detail pane of the selected job: who and what it is, its state and reasons, its
//! pending approvals, every source's reading or fault, its markers, restart policy, manifest
//! and checks; and how the pane's rows are shared with the log tail below it.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::list::progress_text;
use super::log::tail_block;
use super::text::{fmt_age, wrap};
use crate::core::text::inert;
use crate::core::{Carried, CheckResult, Liveness, Reading};
use crate::tui::model::{Model, Pane};
use crate::tui::theme::mark;

pub(super) fn detail_pane(model: &Model, frame: &mut Frame, area: Rect) {
    let theme = &model.theme;
    let border = if model.focus == Pane::Detail {
        theme.focused_border()
    } else {
        theme.dim()
    };
    let title = match &model.selected {
        Some(id) => format!(" detail: {} ", inert(id)),
        None => " detail ".to_string(),
    };
    let block = Block::default()
        .borders(Borders::TOP | Borders::BOTTOM)
        .border_style(border)
        .title(Span::styled(title, theme.heading()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let lines = detail_lines(model, inner.width);
    let mut tail = tail_block(model, inner.width);
    let height = usize::from(inner.height);
    let (info_rows, tail_rows) = detail_split(model, height, lines.len(), tail.len());
    let max_scroll = lines.len().saturating_sub(info_rows);
    let scroll = usize::from(model.detail_scroll).min(max_scroll);
    let mut shown: Vec<Line> = lines.into_iter().skip(scroll).take(info_rows).collect();
    if tail_rows > 0 {
        // The heading stays; below it, the newest lines that fit, unless scrolled up.
        let heading = tail.remove(0);
        let body_rows = tail_rows - 1;
        let back = model.tail_scroll.min(tail.len().saturating_sub(body_rows));
        let end = tail.len() - back;
        let start = end.saturating_sub(body_rows);
        shown.push(heading);
        shown.extend(tail.drain(start..end));
    }
    frame.render_widget(Paragraph::new(shown), inner);
}

/// The detail of the selected job as lines already wrapped to `width`.
pub fn detail_lines(model: &Model, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(20));
    let theme = &model.theme;
    let mut out: Vec<Line<'static>> = Vec::new();
    let (Some(row), Some(id)) = (model.selected_row(), model.selected.as_deref()) else {
        out.push(Line::styled(
            " select a job to see its evidence",
            theme.dim(),
        ));
        return out;
    };
    let Some(job) = model.job(id) else {
        return out;
    };
    let evidence = model.snapshot.as_ref().and_then(|s| s.evidence_of(id));
    let text = |line: String, style: Style, out: &mut Vec<Line<'static>>| {
        for piece in wrap(&line, width) {
            out.push(Line::styled(piece, style));
        }
    };

    let mut title = inert(&job.id);
    if let Some(name) = &job.name {
        title.push_str(&format!(" — {}", inert(name)));
    }
    if let Some(owner) = &job.owner {
        title.push_str(&format!(" · owner {}", inert(owner)));
    }
    text(title, theme.heading(), &mut out);
    let mut summary = format!(
        "{} {} · {}",
        mark(row.state, row.bucket),
        row.state.as_str(),
        match (row.bucket, row.pending_approvals.len()) {
            (Some(bucket), _) => bucket.as_str().to_string(),
            // A question waits for a human: never "needs nothing".
            (None, 0) => "needs nothing".to_string(),
            (None, 1) => "⚑ an approval waits for a human".to_string(),
            (None, n) => format!("⚑ {n} approvals wait for a human"),
        }
    );
    match (row.liveness, row.pid) {
        (Some(l), Some(pid)) => summary.push_str(&format!(" · {} pid {pid}", l.as_str())),
        (Some(l), None) => summary.push_str(&format!(" · {}", l.as_str())),
        (None, _) if row.slurm.is_none() => summary.push_str(" · no lock held"),
        (None, _) => {}
    }
    if let Some(held) = &row.slurm {
        summary.push_str(&format!(" · {}", inert(&held.words())));
    }
    summary.push_str(&format!(" · {}", progress_text(row)));
    if let Some(age) = model.age_now(row) {
        let source = row.progress_source.map_or("", |s| s.as_str());
        summary.push_str(&format!(" · progress {} ago ({source})", fmt_age(age)));
    }
    text(summary, theme.state(row.state), &mut out);

    if let Some(pause) = &row.paused {
        text(
            format!(
                "Paused by {} {} ago: {} (p resumes)",
                inert(&pause.by),
                fmt_age((model.now - pause.at).num_milliseconds() as f64 / 1000.0),
                inert(&pause.reason)
            ),
            theme.state(row.state),
            &mut out,
        );
    }

    // How the last run ended, near the top: it is what an operator asks first of a job that
    // is not running. A Slurm job's end is read from Slurm as well as from the event log.
    let slurm_run = evidence.and_then(crate::core::slurm::history_with_slurm);
    let last_run = slurm_run
        .as_ref()
        .and_then(|h| h.last_run.as_ref())
        .or_else(|| evidence.and_then(|e| e.history.last_run.as_ref()));
    if let Some(run) = last_run {
        let ago = |at: chrono::DateTime<chrono::Utc>| {
            fmt_age((model.now - at).num_milliseconds() as f64 / 1000.0)
        };
        let (words, style) = match (&run.exit, run.started) {
            (Some(exit), _) => (
                format!("{} {} ago", exit.words(), ago(exit.at)),
                if exit.succeeded() {
                    theme.good()
                } else {
                    theme.warning()
                },
            ),
            (None, Some(started)) => (
                format!("started {} ago; no exit recorded yet", ago(started)),
                Style::default(),
            ),
            (None, None) => ("no exit recorded".to_string(), theme.dim()),
        };
        text(format!("Last run {words}"), style, &mut out);
    }
    // A scheduled job: when its next run must have ended with exit 0.
    if let Some(due) = row.next_due {
        let when = model.zone.format(due, "%Y-%m-%d %H:%M:%S");
        let secs = (due - model.now).num_milliseconds() as f64 / 1000.0;
        let (words, style) = if secs > 0.0 {
            (
                format!("Next run due by {when} (in {})", fmt_age(secs)),
                Style::default(),
            )
        } else if row.state == crate::core::State::ShouldBeRunning {
            (
                format!("Overdue since {when} ({} ago)", fmt_age(-secs)),
                theme.warning(),
            )
        } else {
            (format!("Was due by {when}"), Style::default())
        };
        text(words, style, &mut out);
    }

    out.push(Line::styled("Reasons", theme.heading()));
    if let Some(held) = &row.held {
        text(
            format!("  · {}", model.zone.rewrite_utc_stamps(&inert(held))),
            theme.alarm(),
            &mut out,
        );
    }
    for reason in &row.reasons {
        text(
            format!("  · {}", model.zone.rewrite_utc_stamps(&inert(reason))),
            Style::default(),
            &mut out,
        );
    }

    if !row.pending_approvals.is_empty() {
        let heading = match row.pending_approvals.len() {
            1 => "Approval pending (a to decide)".to_string(),
            n => format!("Approvals pending: {n} (a, then 1-{} to choose)", n.min(9)),
        };
        out.push(Line::styled(heading, theme.alarm()));
        for (n, approval) in row.pending_approvals.iter().enumerate() {
            text(
                format!("  {} ⚑ {}", n + 1, approval_words(model, approval)),
                theme.alarm(),
                &mut out,
            );
        }
    }

    out.push(Line::styled("Evidence", theme.heading()));
    if let Some(evidence) = evidence {
        let sources = evidence_rows(model, evidence);
        for (name, reading, style) in sources {
            text(format!("  {name:<15}{reading}"), style, &mut out);
        }
    }
    if job.stall_never {
        text(
            format!(
                "  {:<15}never: idle by nature (stall_sec: never), never STALLED",
                "stall"
            ),
            theme.dim(),
            &mut out,
        );
    }

    if let Some(evidence) = evidence
        && !job.markers.is_empty()
    {
        out.push(Line::styled("Markers", theme.heading()));
        for marker in crate::core::marker::judge_markers(job, evidence, model.now) {
            use crate::core::marker::MarkerState;
            let (mark, style) = match marker.state {
                MarkerState::Absent => ("·", theme.dim()),
                MarkerState::Fine => ("✔", theme.good()),
                MarkerState::Stale => ("✖", theme.warning()),
                MarkerState::Unknown | MarkerState::Fault => ("?", theme.warning()),
            };
            let release = if marker.state == MarkerState::Stale {
                " (M releases it)"
            } else {
                ""
            };
            text(
                format!("  {mark} {}{release}", marker.words),
                style,
                &mut out,
            );
            if let Some(reading) = &marker.reading
                && !reading.content.is_empty()
            {
                text(
                    format!("      holds '{}'", reading.content),
                    theme.dim(),
                    &mut out,
                );
            }
        }
    }

    out.push(Line::styled("Restart policy", theme.heading()));
    if job.auto_restart {
        text(
            format!(
                "  the machine may restart it by itself: {}",
                inert(job.auto_restart_reason.as_deref().unwrap_or(""))
            ),
            theme.good(),
            &mut out,
        );
    } else {
        let why = job
            .auto_restart_blocked_reason
            .as_deref()
            .map(inert)
            .unwrap_or_else(|| "auto_restart is false (no reason given)".to_string());
        text(
            format!("  the machine never restarts it by itself: {why}; r restarts it by hand"),
            theme.warning(),
            &mut out,
        );
    }
    // A Slurm job's restart is its submit (or a requeue of the job Slurm lists).
    let slurm_restart = job.slurm_restart_argv(row.slurm.as_ref().map(|held| held.id));
    match slurm_restart
        .as_ref()
        .or_else(|| job.restart.as_ref().and_then(|r| r.command.as_ref()))
    {
        Some(command) => {
            let argv: Vec<String> = command.iter().map(|a| format!("'{}'", inert(a))).collect();
            let cwd = job
                .restart
                .as_ref()
                .and_then(|r| r.cwd.as_ref())
                .map(|c| format!(" · cwd {}", inert(&c.display().to_string())))
                .unwrap_or_default();
            text(
                format!("  command {}{cwd}", argv.join(" ")),
                theme.dim(),
                &mut out,
            );
        }
        None => text(
            if job.slurm.is_some() {
                "  no slurm.submit (nor requeue: true) declared: a human restarts it by hand"
                    .to_string()
            } else {
                "  no restart.command declared: a human restarts it by hand".to_string()
            },
            theme.dim(),
            &mut out,
        ),
    }

    if let Some(Reading::Found(manifest)) = evidence.and_then(|e| e.manifest.as_deref()) {
        out.push(Line::styled("Run manifest", theme.heading()));
        let run = manifest.run_id.as_deref().map(inert).unwrap_or("-".into());
        let current = manifest
            .current_phase
            .as_deref()
            .map(inert)
            .unwrap_or("none".into());
        text(
            format!("  run {run} · current phase {current}"),
            Style::default(),
            &mut out,
        );
        let done: Vec<String> = manifest.completed_phases.iter().map(|p| inert(p)).collect();
        let done = if done.is_empty() {
            "none yet".to_string()
        } else {
            done.join(", ")
        };
        text(format!("  completed: {done}"), theme.good(), &mut out);
        if !manifest.failed_phases.is_empty() {
            let failed: Vec<String> = manifest.failed_phases.iter().map(|p| inert(p)).collect();
            text(
                format!("  failed: {}", failed.join(", ")),
                theme.alarm(),
                &mut out,
            );
        }
    }

    if !job.checks.is_empty() {
        out.push(Line::styled("Checks", theme.heading()));
        for check in &job.checks {
            let found = row.checks.iter().find(|c| c.name == check.name);
            let line = match found {
                Some(outcome) => {
                    let mark = match outcome.result {
                        CheckResult::Pass => "✔",
                        CheckResult::Fail => "✖",
                        CheckResult::Fault | CheckResult::Refusal => "?",
                    };
                    let ago = fmt_age((model.now - outcome.at).num_milliseconds() as f64 / 1000.0);
                    (
                        format!(
                            "  {mark} {} {} {ago} ago: {}",
                            inert(&check.name),
                            outcome.result.as_str(),
                            inert(&outcome.detail)
                        ),
                        match outcome.result {
                            CheckResult::Pass => theme.good(),
                            CheckResult::Fail => theme.alarm(),
                            _ => theme.warning(),
                        },
                    )
                }
                None => (
                    format!(
                        "  … {} not run yet (every {} s)",
                        inert(&check.name),
                        check.every_sec
                    ),
                    theme.dim(),
                ),
            };
            text(line.0, line.1, &mut out);
        }
    }

    out
}

/// One pending approval in words: step, summary, who asked and when (in the header's zone),
/// and the key the operator can type back at `mihari approval approve`.
pub(super) fn approval_words(model: &Model, approval: &crate::core::PendingApproval) -> String {
    crate::tui::chooser::approval_words(model.zone, model.now, approval)
}

/// How the detail pane's `height` rows are shared between the detail (`info` lines) and the
/// log tail (`tail` lines): everything when it fits; otherwise the tail keeps at least half
/// (all of it when the operator looks at the log, `l`), so its newest lines are always in view.
pub fn detail_split(model: &Model, height: usize, info: usize, tail: usize) -> (usize, usize) {
    if tail == 0 {
        return (height, 0);
    }
    if model.tail_focus {
        return (0, height);
    }
    if info + tail <= height {
        return (info, tail);
    }
    let tail_rows = tail.min(height.saturating_sub(info).max(height / 2));
    (height - tail_rows, tail_rows)
}

/// One line per declared source: its name, what it read, and a style.
pub(super) fn evidence_rows(
    model: &Model,
    evidence: &crate::core::Evidence,
) -> Vec<(&'static str, String, Style)> {
    let theme = &model.theme;
    // A time further ahead than clock skew is a fault (see core::times): never "0s ago".
    let ago = |at: chrono::DateTime<chrono::Utc>| match crate::core::times::in_the_future(
        at, model.now,
    ) {
        Some(ahead) => format!("(fault: {ahead})"),
        None => fmt_age((model.now - at).num_milliseconds() as f64 / 1000.0),
    };
    let mut rows = Vec::new();
    let mut add = |name: &'static str, text: String, style: Style| rows.push((name, text, style));
    fn empty_or_fault<T>(reading: &Reading<T>) -> Option<(String, bool)> {
        match reading {
            Reading::Found(_) => None,
            Reading::Empty => Some(("empty: nothing recorded yet".to_string(), false)),
            Reading::Fault(error) => Some((format!("fault: {}", inert(error)), true)),
        }
    }
    let lock_text = |reading: &Reading<crate::core::LockHolder>| match reading {
        Reading::Found(holder) => {
            let pid = holder.pid.map_or("?".to_string(), |p| p.to_string());
            format!(
                "pid {pid} {}: {} (written {} ago)",
                holder.liveness.as_str(),
                inert(&holder.why),
                ago(holder.modified)
            )
        }
        Reading::Empty => "not held: no lock file, or an empty one no process locks".to_string(),
        Reading::Fault(error) => format!("fault: {}", inert(error)),
    };
    let lock_style = |reading: &Reading<crate::core::LockHolder>| match reading {
        Reading::Found(h) if h.liveness == Liveness::Alive => theme.good(),
        Reading::Found(h) if h.liveness == Liveness::Dead => theme.alarm(),
        Reading::Found(_) => theme.warning(),
        Reading::Empty => theme.dim(),
        Reading::Fault(_) => theme.alarm(),
    };
    if let Some(reading) = &evidence.lock {
        add("lock", lock_text(reading), lock_style(reading));
    }
    if let Some(reading) = evidence.resource_lock.as_deref() {
        add("resource_lock", lock_text(reading), lock_style(reading));
    }
    if let Some(reading) = evidence.slurm.as_deref() {
        let (text, style) = match reading {
            Reading::Found(held) => (
                format!(
                    "{}{}",
                    inert(&held.words()),
                    held.stdout
                        .as_ref()
                        .map(|out| format!("; StdOut '{}'", inert(&out.display().to_string())))
                        .unwrap_or_default()
                ),
                match held.phase() {
                    crate::core::slurm::SlurmPhase::Alive => theme.good(),
                    crate::core::slurm::SlurmPhase::Queued => theme.dim(),
                    _ => theme.warning(),
                },
            ),
            Reading::Empty => (
                "Slurm lists no job of that name (and user)".to_string(),
                theme.dim(),
            ),
            Reading::Fault(error) => (format!("fault: {}", inert(error)), theme.alarm()),
        };
        add("slurm", text, style);
    }
    if let Some(reading) = &evidence.process {
        let stopped = |m: &crate::core::MatchedProcess| if m.stopped { ", stopped" } else { "" };
        let (text, style) = match reading {
            Reading::Found(found) if found.len() == 1 => (
                format!(
                    "pid {} '{}'{}",
                    found[0].pid,
                    inert(&found[0].cmdline),
                    stopped(&found[0])
                ),
                if found[0].stopped {
                    theme.warning()
                } else {
                    theme.good()
                },
            ),
            Reading::Found(found) => (
                format!(
                    "{} match: {}",
                    found.len(),
                    found
                        .iter()
                        .map(|m| format!("pid {}{}", m.pid, stopped(m)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                theme.warning(),
            ),
            Reading::Empty => ("no process matches".to_string(), theme.dim()),
            Reading::Fault(error) => (format!("fault: {}", inert(error)), theme.alarm()),
        };
        add("process", text, style);
    }
    if let Some(reading) = &evidence.log {
        match (reading, empty_or_fault(reading)) {
            (Reading::Found(stamp), _) => {
                let mut words = match &stamp.carried {
                    None => format!("written {} ago · {}", ago(stamp.modified), bytes(stamp.len)),
                    Some(Carried::Rotated(path)) => format!(
                        "last write {} ago, in '{}' (rotated) · {} since",
                        ago(stamp.modified),
                        inert(&path.display().to_string()),
                        bytes(stamp.len)
                    ),
                    Some(Carried::Remembered) => format!(
                        "last write {} ago, before it was rotated or replaced (remembered) · {} \
                         since",
                        ago(stamp.modified),
                        bytes(stamp.len)
                    ),
                };
                if let Some(missing) = &evidence.log_missing {
                    words = format!("missing: {} · {words}", inert(missing));
                }
                add("log", words, Style::default())
            }
            (Reading::Empty, _) if evidence.log_missing.is_some() => add(
                "log",
                format!(
                    "missing: {}",
                    inert(evidence.log_missing.as_deref().unwrap_or_default())
                ),
                theme.warning(),
            ),
            (_, Some((text, fault))) => {
                add("log", text, if fault { theme.alarm() } else { theme.dim() })
            }
            _ => {}
        }
    }
    if let Some(reading) = &evidence.progress_file {
        match (reading, empty_or_fault(reading)) {
            (Reading::Found(count), _) => add(
                "progress_file",
                format!("{} lines · written {} ago", count.done, ago(count.modified)),
                Style::default(),
            ),
            (_, Some((text, fault))) => add(
                "progress_file",
                text,
                if fault { theme.alarm() } else { theme.dim() },
            ),
            _ => {}
        }
    }
    if let Some(reading) = &evidence.progress_table {
        match (reading, empty_or_fault(reading)) {
            (Reading::Found(table), _) => add(
                "progress_table",
                match (table.done, table.total) {
                    (None, _) => format!("{} rows · newest {} ago", table.rows, ago(table.newest)),
                    (Some(done), Some(total)) => format!(
                        "done {done} of {total} (newest row) · newest {} ago",
                        ago(table.newest)
                    ),
                    (Some(done), None) => {
                        format!(
                            "done {done} (newest row) · newest {} ago",
                            ago(table.newest)
                        )
                    }
                },
                Style::default(),
            ),
            (_, Some((text, fault))) => add(
                "progress_table",
                text,
                if fault { theme.alarm() } else { theme.dim() },
            ),
            _ => {}
        }
    }
    if let Some(reading) = evidence.log_progress.as_deref() {
        match reading {
            Reading::Found(printed) => {
                let mut words = match (printed.done, printed.total, printed.percent) {
                    (Some(done), Some(total), _) => format!("done {done} of {total}"),
                    (Some(done), None, _) => format!("done {done}"),
                    (None, _, Some(percent)) => format!("{percent:.0}%"),
                    (None, _, None) => "read".to_string(),
                };
                if let Some(rate) = printed.rate_per_sec {
                    words.push_str(&format!(" · {rate:.2}/s as printed"));
                }
                if let Some(from) = &printed.from {
                    words.push_str(&format!(
                        " · in '{}' (rotated)",
                        inert(&from.display().to_string())
                    ));
                }
                words.push_str(&format!(" · '{}'", inert(&printed.frame)));
                add("log_progress", words, Style::default())
            }
            Reading::Empty => add(
                "log_progress",
                "no matching frame in the log's last 64 KiB yet".to_string(),
                theme.dim(),
            ),
            Reading::Fault(error) => add(
                "log_progress",
                format!("fault: {}", inert(error)),
                theme.alarm(),
            ),
        }
    }
    if let Some(reading) = evidence.heartbeat.as_deref() {
        match (reading, empty_or_fault(reading)) {
            (Reading::Found(beat), _) => {
                let mut words = format!("sent {} ago", ago(beat.at));
                if let Some(done) = beat.done {
                    words.push_str(&format!(" · done {done}"));
                }
                if let Some(total) = beat.total {
                    words.push_str(&format!(" of {total}"));
                }
                if let Some(position) = &beat.position {
                    words.push_str(&format!(" · at {}", inert(position)));
                }
                if let Some(note) = &beat.note {
                    words.push_str(&format!(" · {}", inert(note)));
                }
                add("heartbeat", words, Style::default())
            }
            (_, Some((text, fault))) => add(
                "heartbeat",
                text,
                if fault { theme.alarm() } else { theme.dim() },
            ),
            _ => {}
        }
    }
    if let Some(reading) = evidence.manifest.as_deref() {
        match (reading, empty_or_fault(reading)) {
            (Reading::Found(manifest), _) => add(
                "manifest",
                format!(
                    "phase {} · {} done · updated {} ago",
                    manifest
                        .current_phase
                        .as_deref()
                        .map(inert)
                        .unwrap_or("none".into()),
                    manifest.completed_phases.len(),
                    ago(manifest.updated_at)
                ),
                Style::default(),
            ),
            (_, Some((text, fault))) => add(
                "manifest",
                text,
                if fault { theme.alarm() } else { theme.dim() },
            ),
            _ => {}
        }
    }
    rows
}

pub(super) fn bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}
